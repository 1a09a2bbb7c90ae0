//! The raw address of a UDP endpoint.
//!
//! A UDP device listens on one socket address; together with its connid (a random 32-bit
//! value drawn when the device is created) that is its EFA raw address:
//!
//! | `RawAddr` field | UDP meaning |
//! |---|---|
//! | `gid` (16 bytes) | the IP address: IPv6 as is, IPv4 as an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) |
//! | `qpn` (u16) | the UDP port |
//! | `qkey` (u32) | the connid (efa-rdm-protocol-v4 §4.4): a restarted process on the same port is a new peer |
//! | `next` | 0 |
//!
//! Printed and parsed as `udp://IP:PORT/CONNID`, the connid in hex with `0x`:
//! `udp://127.0.0.1:4000/0x1a2b3c4d`, `udp://[::1]:4000/0x00000007`. Parsing also accepts a
//! decimal connid.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use tagmatch_wire::efa::RawAddr;

/// A UDP endpoint's address: socket address and connid. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpAddr {
    /// Where the device's socket listens (a concrete IP, not the unspecified address).
    pub sock: SocketAddr,
    /// The connid (the raw address's `qkey`).
    pub connid: u32,
}

impl UdpAddr {
    /// The EFA raw address.
    pub fn to_raw(&self) -> RawAddr {
        let v6 = match self.sock.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        RawAddr {
            gid: v6.octets(),
            qpn: self.sock.port(),
            qkey: self.connid,
            next: 0,
        }
    }

    /// The UDP address of a raw address (every raw address maps to one).
    pub fn from_raw(raw: &RawAddr) -> UdpAddr {
        let v6 = Ipv6Addr::from(raw.gid);
        let ip = match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        };
        UdpAddr {
            sock: SocketAddr::new(ip, raw.qpn),
            connid: raw.qkey,
        }
    }
}

impl From<UdpAddr> for RawAddr {
    fn from(a: UdpAddr) -> RawAddr {
        a.to_raw()
    }
}

impl From<RawAddr> for UdpAddr {
    fn from(r: RawAddr) -> UdpAddr {
        UdpAddr::from_raw(&r)
    }
}

impl fmt::Display for UdpAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "udp://{}/{:#010x}", self.sock, self.connid)
    }
}

/// Why a string is not a [`UdpAddr`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddrParseError(pub String);

impl fmt::Display for AddrParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad UDP endpoint address: {}", self.0)
    }
}

impl std::error::Error for AddrParseError {}

impl FromStr for UdpAddr {
    type Err = AddrParseError;

    fn from_str(s: &str) -> Result<UdpAddr, AddrParseError> {
        let err = |why: &str| AddrParseError(format!("{s:?}: {why}"));
        let rest = s
            .trim()
            .strip_prefix("udp://")
            .ok_or_else(|| err("expected udp://IP:PORT/CONNID"))?;
        let (sock, connid) = rest
            .rsplit_once('/')
            .ok_or_else(|| err("missing /CONNID"))?;
        let sock: SocketAddr = sock.parse().map_err(|_| err("bad IP:PORT"))?;
        let connid = match connid
            .strip_prefix("0x")
            .or_else(|| connid.strip_prefix("0X"))
        {
            Some(hex) => u32::from_str_radix(hex, 16),
            None => connid.parse::<u32>(),
        }
        .map_err(|_| err("bad connid"))?;
        Ok(UdpAddr { sock, connid })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn print_parse_round_trip() {
        for s in [
            "udp://127.0.0.1:4000/0x1a2b3c4d",
            "udp://[::1]:9/0x00000007",
            "udp://10.1.2.3:65535/0xffffffff",
        ] {
            let a: UdpAddr = s.parse().unwrap();
            assert_eq!(a.to_string(), s);
            assert_eq!(UdpAddr::from_raw(&a.to_raw()), a);
        }
        let a: UdpAddr = "udp://127.0.0.1:4000/77".parse().unwrap();
        assert_eq!(a.connid, 77);
        let raw = a.to_raw();
        assert_eq!(raw.qpn, 4000);
        assert_eq!(&raw.gid[10..], &[0xff, 0xff, 127, 0, 0, 1]);
        for bad in [
            "",
            "udp://",
            "tcp://1.2.3.4:5/1",
            "udp://1.2.3.4/1",
            "udp://1.2.3.4:5",
            "udp://1.2.3.4:5/0xg",
            "udp://1.2.3.4:99999/1",
        ] {
            assert!(bad.parse::<UdpAddr>().is_err(), "{bad}");
        }
    }

    quickcheck::quickcheck! {
        fn raw_round_trip(gid: Vec<u8>, qpn: u16, qkey: u32) -> bool {
            let mut g = [0u8; 16];
            for (d, s) in g.iter_mut().zip(gid) { *d = s; }
            let raw = RawAddr { gid: g, qpn, qkey, next: 0 };
            let a = UdpAddr::from_raw(&raw);
            a.to_raw() == raw && a.to_string().parse::<UdpAddr>() == Ok(a)
        }
        fn parse_never_panics(s: String) -> bool {
            let _ = s.parse::<UdpAddr>();
            let _ = format!("udp://{s}").parse::<UdpAddr>();
            true
        }
    }
}

//! Endpoint addresses: what [`crate::Endpoint::address`] returns and peers pass to
//! [`crate::Endpoint::insert_peer`].

use std::fmt;
use std::str::FromStr;

use tagmatch_transport::UdpAddr;
use tagmatch_wire::efa::RawAddr;

use crate::Error;

/// An endpoint's address, printable and parseable so it can travel out of band (a file, a
/// command line, a bootstrap socket):
///
/// - `udp://IP:PORT/0xCONNID` for the UDP transport;
/// - `mem://[fe80::N]:QPN/0xCONNID` for the in-process transport (meaningful only to
///   endpoints of the [`crate::MemFabric`] that made it: each fabric numbers its
///   endpoints from the same start, the connid tells fabrics apart, and an endpoint of
///   another fabric reaches nobody with it);
/// - `verbs://[GID]:QPN/0xCONNID` for the verbs transport (the port GID and the UD QP).
///
/// ```
/// use tagmatch::Address;
/// let a: Address = "udp://127.0.0.1:4000/0x1a2b3c4d".parse().unwrap();
/// assert_eq!(a.to_string(), "udp://127.0.0.1:4000/0x1a2b3c4d");
/// assert!("tcp://1.2.3.4:5/1".parse::<Address>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Address {
    /// An in-process endpoint's raw EFA address.
    Mem(RawAddr),
    /// A UDP endpoint's socket address and connid.
    Udp(UdpAddr),
    /// A verbs endpoint's raw address: port GID, UD QP number (24 bits: bits 16–23 travel
    /// in the low byte of [`RawAddr::next`]) and connid.
    Verbs(RawAddr),
}

impl Address {
    /// The raw EFA address (GID, QPN, connid) the protocol carries.
    pub fn raw(&self) -> RawAddr {
        match self {
            Address::Mem(r) | Address::Verbs(r) => *r,
            Address::Udp(u) => u.to_raw(),
        }
    }

    /// The transport's name (`"mem"`, `"udp"`).
    pub fn transport(&self) -> &'static str {
        match self {
            Address::Mem(_) => "mem",
            Address::Udp(_) => "udp",
            Address::Verbs(_) => "verbs",
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Udp(u) => write!(f, "{u}"),
            Address::Verbs(r) => {
                let qpn = u32::from(r.qpn) | (((r.next & 0xff) as u32) << 16);
                let gid = std::net::Ipv6Addr::from(r.gid);
                write!(f, "verbs://[{gid}]:{qpn}/{:#x}", r.qkey)
            }
            Address::Mem(r) => {
                let s = UdpAddr::from_raw(r).to_string();
                write!(f, "mem://{}", s.strip_prefix("udp://").unwrap_or(&s))
            }
        }
    }
}

impl FromStr for Address {
    type Err = Error;

    fn from_str(s: &str) -> Result<Address, Error> {
        let t = s.trim();
        let bad = |reason: String| Error::InvalidAddress {
            input: s.to_owned(),
            reason,
        };
        if let Some(rest) = t.strip_prefix("mem://") {
            let u: UdpAddr = format!("udp://{rest}")
                .parse()
                .map_err(|e: tagmatch_transport::addr::AddrParseError| bad(e.0))?;
            Ok(Address::Mem(u.to_raw()))
        } else if let Some(rest) = t.strip_prefix("verbs://") {
            parse_verbs(rest).map(Address::Verbs).map_err(bad)
        } else if t.starts_with("udp://") {
            Ok(Address::Udp(t.parse().map_err(
                |e: tagmatch_transport::addr::AddrParseError| bad(e.0),
            )?))
        } else {
            Err(bad(
                "expected udp://IP:PORT/CONNID, mem://[GID]:QPN/CONNID or \
                 verbs://[GID]:QPN/CONNID"
                    .into(),
            ))
        }
    }
}

/// `[GID]:QPN/CONNID` of a verbs address (QPN decimal up to 24 bits, CONNID `0x` hex or
/// decimal).
fn parse_verbs(rest: &str) -> Result<RawAddr, String> {
    let rest = rest
        .strip_prefix('[')
        .ok_or("verbs address: expected [GID] after verbs://")?;
    let (gid, rest) = rest
        .split_once(']')
        .ok_or("verbs address: missing ] after the GID")?;
    let gid: std::net::Ipv6Addr = gid
        .parse()
        .map_err(|_| format!("verbs address: GID {gid:?} is not an IPv6-form GID"))?;
    let rest = rest
        .strip_prefix(':')
        .ok_or("verbs address: expected :QPN after the GID")?;
    let (qpn, connid) = rest
        .split_once('/')
        .ok_or("verbs address: expected /CONNID after the QPN")?;
    let qpn: u32 = qpn
        .parse()
        .ok()
        .filter(|q| *q <= 0x00ff_ffff)
        .ok_or_else(|| format!("verbs address: QPN {qpn:?} is not a number below 2^24"))?;
    let connid = match connid.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16),
        None => connid.parse(),
    }
    .map_err(|_| format!("verbs address: connid {connid:?} is not a 32-bit number"))?;
    Ok(RawAddr {
        gid: gid.octets(),
        qpn: (qpn & 0xffff) as u16,
        qkey: connid,
        next: u64::from(qpn >> 16),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_addresses_round_trip() {
        let mut gid = [0u8; 16];
        gid[0] = 0xfe;
        gid[1] = 0x80;
        gid[15] = 3;
        let a = Address::Mem(RawAddr {
            gid,
            qpn: 4,
            qkey: 0xdead_beef,
            next: 0,
        });
        let s = a.to_string();
        assert_eq!(s, "mem://[fe80::3]:4/0xdeadbeef");
        assert_eq!(s.parse::<Address>().unwrap(), a);
        let v = Address::Verbs(RawAddr {
            gid,
            qpn: 0x1234,
            qkey: 0x1a2b,
            next: 0x5,
        });
        assert_eq!(v.to_string(), "verbs://[fe80::3]:332340/0x1a2b");
        assert_eq!(v.to_string().parse::<Address>().unwrap(), v);
        assert_eq!(v.transport(), "verbs");
        for bad in [
            "",
            "mem://",
            "mem://x",
            "udp://1.2.3.4",
            "ftp://a",
            "verbs://",
            "verbs://[fe80::3]",
            "verbs://[fe80::3]:16777216/0x1",
            "verbs://[zz]:1/0x1",
            "verbs://[fe80::3]:1/0x1ffffffff",
        ] {
            let e = bad.parse::<Address>().unwrap_err();
            assert!(e.to_string().contains("invalid address"), "{e}");
        }
    }
}

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
/// - `mem://[fe80::N]:QPN/0xCONNID` for the in-process transport (meaningful only inside
///   the process that made the [`crate::MemFabric`]).
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
}

impl Address {
    /// The raw EFA address (GID, QPN, connid) the protocol carries.
    pub fn raw(&self) -> RawAddr {
        match self {
            Address::Mem(r) => *r,
            Address::Udp(u) => u.to_raw(),
        }
    }

    /// The transport's name (`"mem"`, `"udp"`).
    pub fn transport(&self) -> &'static str {
        match self {
            Address::Mem(_) => "mem",
            Address::Udp(_) => "udp",
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Udp(u) => write!(f, "{u}"),
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
        } else if t.starts_with("udp://") {
            Ok(Address::Udp(t.parse().map_err(
                |e: tagmatch_transport::addr::AddrParseError| bad(e.0),
            )?))
        } else {
            Err(bad(
                "expected udp://IP:PORT/CONNID or mem://[GID]:QPN/CONNID".into(),
            ))
        }
    }
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
        for bad in ["", "mem://", "mem://x", "udp://1.2.3.4", "ftp://a"] {
            let e = bad.parse::<Address>().unwrap_err();
            assert!(e.to_string().contains("invalid address"), "{e}");
        }
    }
}

//! The side channel that connects RC QPs: a tiny length-prefixed exchange over TCP.
//!
//! Each side writes one frame and reads the other's:
//!
//! ```text
//! u32 length (big-endian, = 34) | "TMV1" | rank u32 | qpn u32 | psn u32 | lid u16 | gid [16]
//! ```
//!
//! The rank is the sender's envelope source (what receivers match on).

use std::io::{Read, Write};

use super::device::QpEndpoint;
use super::{Error, Result};

const MAGIC: &[u8; 4] = b"TMV1";
const BODY_LEN: usize = 4 + 4 + 4 + 4 + 2 + 16;

/// One side of a connection as exchanged on the side channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    /// The side's rank (envelope source of its messages).
    pub rank: u32,
    /// Its QP.
    pub qp: QpEndpoint,
}

impl ConnInfo {
    /// The frame, length prefix included.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(4 + BODY_LEN);
        b.extend_from_slice(&(BODY_LEN as u32).to_be_bytes());
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&self.rank.to_be_bytes());
        b.extend_from_slice(&self.qp.qpn.to_be_bytes());
        b.extend_from_slice(&self.qp.psn.to_be_bytes());
        b.extend_from_slice(&self.qp.lid.to_be_bytes());
        b.extend_from_slice(&self.qp.gid);
        b
    }

    /// Parses a frame body (after the length prefix).
    pub fn decode(body: &[u8]) -> Result<ConnInfo> {
        if body.len() != BODY_LEN || &body[..4] != MAGIC {
            return Err(Error::Protocol(format!(
                "bad side-channel frame ({} bytes)",
                body.len()
            )));
        }
        let u32_at =
            |i: usize| u32::from_be_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&body[18..34]);
        Ok(ConnInfo {
            rank: u32_at(4),
            qp: QpEndpoint {
                qpn: u32_at(8),
                psn: u32_at(12),
                lid: u16::from_be_bytes([body[16], body[17]]),
                gid,
            },
        })
    }

    /// Writes this side's frame.
    pub fn send<W: Write>(&self, w: &mut W) -> Result<()> {
        w.write_all(&self.encode()).map_err(Error::Io)?;
        w.flush().map_err(Error::Io)
    }

    /// Reads the other side's frame.
    pub fn recv<R: Read>(r: &mut R) -> Result<ConnInfo> {
        let mut len = [0u8; 4];
        r.read_exact(&mut len).map_err(Error::Io)?;
        let len = u32::from_be_bytes(len) as usize;
        if len != BODY_LEN {
            return Err(Error::Protocol(format!(
                "side-channel frame of {len} bytes, want {BODY_LEN}"
            )));
        }
        let mut body = [0u8; BODY_LEN];
        r.read_exact(&mut body).map_err(Error::Io)?;
        ConnInfo::decode(&body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trip_and_rejects() {
        let c = ConnInfo {
            rank: 7,
            qp: QpEndpoint {
                qpn: 0x11,
                lid: 3,
                gid: [9; 16],
                psn: 0x1234,
            },
        };
        let b = c.encode();
        assert_eq!(b.len(), 4 + BODY_LEN);
        assert_eq!(ConnInfo::recv(&mut &b[..]).unwrap(), c);
        let mut bad = b.clone();
        bad[4] = b'X';
        assert!(ConnInfo::recv(&mut &bad[..]).is_err());
        assert!(ConnInfo::recv(&mut &b[..10]).is_err());
        let mut long = b;
        long[3] = 99;
        assert!(ConnInfo::recv(&mut &long[..]).is_err());
    }
}

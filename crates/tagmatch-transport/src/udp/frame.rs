//! The UDP device's framing: one header per datagram, in front of an EFA packet or a
//! software-RDMA message. See the [`crate::udp`] module documentation for the byte table.

/// First two bytes of every frame: `"TM"`.
pub const MAGIC: [u8; 2] = *b"TM";
/// Frame format version.
pub const VERSION: u8 = 1;
/// Header length.
pub const HDR_LEN: usize = 32;

/// Kind: acknowledgement only (unsequenced, no body).
pub const KIND_ACK: u8 = 0;
/// Kind: an EFA packet.
pub const KIND_PKT: u8 = 1;
/// Kind: receiver not ready (unsequenced, like [`KIND_ACK`], with its `ack` and `sack`):
/// the body lists, as little-endian u32, sequence numbers of frames the receiver holds back
/// because it cannot take new messages now. The sender keeps them and sends them again
/// after a backoff; the notice proves the receiver alive, so they do not count towards its
/// peer timeout (the RNR NAK of InfiniBand RC).
pub const KIND_RNR: u8 = 7;
/// Largest kind value (the RDMA kinds of [`crate::soft_rdma`] are 2..=6).
pub const KIND_MAX: u8 = KIND_RNR;

/// A parsed frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Frame kind.
    pub kind: u8,
    /// The sender's connid.
    pub src_connid: u32,
    /// The receiver's connid as the sender knows it.
    pub dst_connid: u32,
    /// Sequence number (0: unsequenced, only for [`KIND_ACK`]).
    pub seq: u32,
    /// Every sequence number up to and including `ack` from the receiver was received.
    pub ack: u32,
    /// Bit `i` set: sequence number `ack + 2 + i` was received too.
    pub sack: u64,
}

/// Why a datagram is not a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Shorter than the header.
    Short,
    /// Not our magic or version.
    Magic,
    /// Unknown kind, or a kind and sequence number that do not go together.
    Kind,
    /// The body length field disagrees with the datagram length (truncated or padded).
    Length,
    /// The reserved bytes are not zero.
    Reserved,
}

fn le32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

impl Header {
    /// Parses and checks a datagram; returns the header and the body.
    pub fn parse(d: &[u8]) -> Result<(Header, &[u8]), FrameError> {
        let h = Header::parse_head(d, d.len())?;
        Ok((h, &d[HDR_LEN..]))
    }

    /// Parses and checks the header at the start of `head`, of a datagram of `total_len`
    /// bytes (of which `head` may hold only the first ones: a peeked datagram).
    pub fn parse_head(head: &[u8], total_len: usize) -> Result<Header, FrameError> {
        let h = head.get(..HDR_LEN).ok_or(FrameError::Short)?;
        if total_len < HDR_LEN {
            return Err(FrameError::Short);
        }
        if h[..2] != MAGIC || h[2] != VERSION {
            return Err(FrameError::Magic);
        }
        let kind = h[3];
        let seq = le32(h, 12);
        let unsequenced = kind == KIND_ACK || kind == KIND_RNR;
        if kind > KIND_MAX || (unsequenced != (seq == 0)) {
            return Err(FrameError::Kind);
        }
        if h[30..32] != [0, 0] {
            return Err(FrameError::Reserved);
        }
        let body_len = u16::from_le_bytes([h[28], h[29]]) as usize;
        if total_len - HDR_LEN != body_len
            || (kind == KIND_ACK && body_len != 0)
            || (kind == KIND_RNR && (body_len == 0 || body_len % 4 != 0))
        {
            return Err(FrameError::Length);
        }
        let mut sack = [0u8; 8];
        sack.copy_from_slice(&h[20..28]);
        Ok(Header {
            kind,
            src_connid: le32(h, 4),
            dst_connid: le32(h, 8),
            seq,
            ack: le32(h, 16),
            sack: u64::from_le_bytes(sack),
        })
    }

    /// Writes the header for a body of `body_len` bytes into `out[..HDR_LEN]`.
    pub fn emit(&self, body_len: usize, out: &mut [u8]) {
        out[..2].copy_from_slice(&MAGIC);
        out[2] = VERSION;
        out[3] = self.kind;
        out[4..8].copy_from_slice(&self.src_connid.to_le_bytes());
        out[8..12].copy_from_slice(&self.dst_connid.to_le_bytes());
        out[12..16].copy_from_slice(&self.seq.to_le_bytes());
        out[16..20].copy_from_slice(&self.ack.to_le_bytes());
        out[20..28].copy_from_slice(&self.sack.to_le_bytes());
        out[28..30].copy_from_slice(&(body_len.min(u16::MAX as usize) as u16).to_le_bytes());
        out[30..32].copy_from_slice(&[0, 0]);
    }

    /// A whole datagram: this header and `body`.
    pub fn datagram(&self, body: &[u8]) -> Vec<u8> {
        let mut d = vec![0u8; HDR_LEN + body.len()];
        self.emit(body.len(), &mut d);
        d[HDR_LEN..].copy_from_slice(body);
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(kind: u8, seq: u32) -> Header {
        Header {
            kind,
            src_connid: 0x1122_3344,
            dst_connid: 0x5566_7788,
            seq,
            ack: 41,
            sack: 0b1011,
        }
    }

    #[test]
    fn layout() {
        let d = hdr(KIND_PKT, 7).datagram(b"abc");
        assert_eq!(
            d,
            [
                b'T', b'M', 1, 1, 0x44, 0x33, 0x22, 0x11, 0x88, 0x77, 0x66, 0x55, 7, 0, 0, 0, 41,
                0, 0, 0, 0b1011, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, b'a', b'b', b'c'
            ]
        );
        assert_eq!(Header::parse(&d), Ok((hdr(KIND_PKT, 7), &b"abc"[..])));
        assert_eq!(Header::parse(&d[..34]), Err(FrameError::Length));
        assert_eq!(Header::parse(&d[..31]), Err(FrameError::Short));
        assert_eq!(
            Header::parse(&hdr(KIND_ACK, 3).datagram(&[])),
            Err(FrameError::Kind)
        );
        assert_eq!(
            Header::parse(&hdr(KIND_PKT, 0).datagram(&[])),
            Err(FrameError::Kind)
        );
        assert_eq!(
            Header::parse(&hdr(KIND_ACK, 0).datagram(&[1])),
            Err(FrameError::Length)
        );
        assert_eq!(
            Header::parse(&hdr(KIND_MAX + 1, 1).datagram(&[])),
            Err(FrameError::Kind)
        );
        // RNR: unsequenced, a non-empty list of u32.
        let rnr = hdr(KIND_RNR, 0).datagram(&[5, 0, 0, 0, 9, 0, 0, 0]);
        assert_eq!(
            Header::parse(&rnr),
            Ok((hdr(KIND_RNR, 0), &[5, 0, 0, 0, 9, 0, 0, 0][..]))
        );
        assert_eq!(
            Header::parse(&hdr(KIND_RNR, 3).datagram(&[5, 0, 0, 0])),
            Err(FrameError::Kind)
        );
        for bad in [&[][..], &[5, 0, 0][..]] {
            assert_eq!(
                Header::parse(&hdr(KIND_RNR, 0).datagram(bad)),
                Err(FrameError::Length)
            );
        }
    }

    quickcheck::quickcheck! {
        fn arbitrary_datagrams_never_panic(d: Vec<u8>) -> bool {
            match Header::parse(&d) {
                Ok((h, body)) => h.datagram(body) == d,
                Err(_) => true,
            }
        }
        fn valid_prefix_then_garbage(kind: u8, seq: u32, body: Vec<u8>, cut: usize) -> bool {
            let h = hdr(kind % (KIND_MAX + 1), seq.max(1));
            let d = h.datagram(&body);
            let cut = cut % (d.len() + 1);
            let _ = Header::parse(&d[..cut]);
            true
        }
    }
}

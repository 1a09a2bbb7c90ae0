//! A direct encoder for the eager and medium RTM headers, the packets of the small-message
//! path: the same bytes as [`Repr::emit`](super::Repr::emit), written from plain values
//! with each type's constant offsets instead of a walk over its [`Layout`](super::Layout)
//! and a [`Fields`](super::Fields) table.

use super::{flags, PacketType, RawAddr, RawAddrHdr, PROTOCOL_VERSION};
use crate::bytes::{put_le16, put_le32, put_le64};
use crate::error::{ContentError, Error, Part, Result};

/// The header of an eager or medium RTM (types 64–67 and 133–136), ready to emit with
/// [`RtmHeader::emit`].
///
/// Fields the type does not carry are ignored: `tag` on untagged types, `send_id` on
/// non-DC types, `msg_length` and `seg_offset` on eager types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtmHeader {
    /// One of the eager or medium RTM types (else [`RtmHeader::emit`] refuses it).
    pub pkt_type: PacketType,
    /// `msg_id`.
    pub msg_id: u32,
    /// `tag` (tagged types).
    pub tag: u64,
    /// `send_id` (DC types).
    pub send_id: u32,
    /// `msg_length`: the total message length (medium types).
    pub msg_length: u64,
    /// `seg_offset` (medium types).
    pub seg_offset: u64,
    /// The raw-address optional header.
    pub raw_addr: Option<RawAddrHdr>,
    /// The CQ-data optional header.
    pub cq_data: Option<u64>,
    /// The connid optional header.
    pub connid: Option<u32>,
}

/// Offsets of an RTM type's fixed fields (0: absent) and its mandatory header size.
#[derive(Clone, Copy)]
struct Shape {
    size: usize,
    send_id: usize,
    msg_length: usize,
    seg_offset: usize,
    tagged: bool,
}

impl RtmHeader {
    /// The longest headers [`RtmHeader::emit`] writes: the largest mandatory header (DC
    /// medium tagged, 40 bytes), a raw-address header of the largest accepted length, CQ
    /// data and a connid. A buffer this long takes any header it emits.
    pub const MAX_LEN: usize = 40 + 4 + RawAddrHdr::MAX_ADDR_LEN as usize + 8 + 4;

    /// An RTM header of type `pkt_type` with every field zero and no optional header.
    pub fn new(pkt_type: PacketType) -> RtmHeader {
        RtmHeader {
            pkt_type,
            msg_id: 0,
            tag: 0,
            send_id: 0,
            msg_length: 0,
            seg_offset: 0,
            raw_addr: None,
            cq_data: None,
            connid: None,
        }
    }

    // wire-layouts §A.6, mandatory REQ headers: "EAGER_MSG/TAG (64/65): 4 msg_id u32;
    // [8 tag u64] (8 / 16); MEDIUM (66/67): 4 msg_id; 8 msg_length u64 (total message
    // length); 16 seg_offset u64; [24 tag] (24 / 32); DC_EAGER (133/134): 4 msg_id;
    // 8 send_id; 12 padding; [16 tag] (16 / 24); DC_MEDIUM (135/136): 4 msg_id; 8 send_id;
    // 12 padding; 16 msg_length; 24 seg_offset; [32 tag] (32 / 40)". "The tag is always
    // the last 8 bytes of the mandatory header."
    fn shape(ty: PacketType) -> Option<Shape> {
        use PacketType as T;
        // (size, send_id, msg_length, seg_offset, tagged): one arm per type, which the
        // compiler turns into table loads.
        let (size, send_id, msg_length, seg_offset, tagged) = match ty {
            T::EagerMsgRtm => (8, 0, 0, 0, false),
            T::EagerTagRtm => (16, 0, 0, 0, true),
            T::MediumMsgRtm => (24, 0, 8, 16, false),
            T::MediumTagRtm => (32, 0, 8, 16, true),
            T::DcEagerMsgRtm => (16, 8, 0, 0, false),
            T::DcEagerTagRtm => (24, 8, 0, 0, true),
            T::DcMediumMsgRtm => (32, 8, 16, 24, false),
            T::DcMediumTagRtm => (40, 8, 16, 24, true),
            _ => return None,
        };
        Some(Shape {
            size,
            send_id,
            msg_length,
            seg_offset,
            tagged,
        })
    }

    /// Length of the headers [`RtmHeader::emit`] writes (0 for a type it does not encode).
    pub fn header_len(&self) -> usize {
        let Some(s) = Self::shape(self.pkt_type) else {
            return 0;
        };
        s.size
            + self.raw_addr.map_or(0, |r| r.wire_len())
            + if self.cq_data.is_some() { 8 } else { 0 }
            + if self.connid.is_some() { 4 } else { 0 }
    }

    /// Writes the headers at the start of `buf` (padding and the unwritten raw-address
    /// bytes as zero) and returns their length ([`RtmHeader::header_len`]); the payload
    /// goes right after. The errors are those of [`Repr::emit`](super::Repr::emit) for the
    /// same packet; nothing is written on error.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let ty = self.pkt_type;
        let Some(s) = Self::shape(ty) else {
            return Err(Error::Content(ContentError::NotApplicable {
                what: "RtmHeader",
                packet: ty.name(),
            }));
        };
        // wire-layouts §A.6: "Raw address and connid are mutually exclusive".
        if self.raw_addr.is_some() && self.connid.is_some() {
            return Err(ContentError::RawAddrAndConnid.into());
        }
        if let Some(r) = self.raw_addr {
            if !(RawAddrHdr::MIN_ADDR_LEN..=RawAddrHdr::MAX_ADDR_LEN).contains(&r.addr_len) {
                return Err(ContentError::AddrLenOutOfRange {
                    addr_len: r.addr_len,
                    min: RawAddrHdr::MIN_ADDR_LEN,
                    max: RawAddrHdr::MAX_ADDR_LEN,
                }
                .into());
            }
        }
        let len = self.header_len();
        let Some(hdr) = buf.get_mut(..len) else {
            return Err(Error::len(Part::OutputBuffer, len, buf.len()));
        };
        hdr.fill(0);
        // wire-layouts §A.3: REQ_MSG on every RTM, plus REQ_TAGGED on tagged ones; the
        // optional-header bits announce what follows.
        let mut f = flags::REQ_MSG;
        if s.tagged {
            f |= flags::REQ_TAGGED;
        }
        if self.raw_addr.is_some() {
            f |= flags::REQ_OPT_RAW_ADDR_HDR;
        }
        if self.cq_data.is_some() {
            f |= flags::REQ_OPT_CQ_DATA_HDR;
        }
        if self.connid.is_some() {
            f |= flags::CONNID_HDR;
        }
        hdr[0] = ty.id();
        hdr[1] = PROTOCOL_VERSION;
        put_le16(hdr, 2, f);
        put_le32(hdr, 4, self.msg_id);
        if s.send_id != 0 {
            put_le32(hdr, s.send_id, self.send_id);
        }
        if s.msg_length != 0 {
            put_le64(hdr, s.msg_length, self.msg_length);
            put_le64(hdr, s.seg_offset, self.seg_offset);
        }
        if s.tagged {
            put_le64(hdr, s.size - 8, self.tag);
        }
        // wire-layouts §A.6: "Optional headers, in this fixed order: 1. Raw address … u32
        // addr_len … then 36 bytes. Only 32 of them are written; 2. CQ data, flag bit 1:
        // u64; 3. connid, flag 0x8000: u32, 4 bytes, no padding."
        let mut pos = s.size;
        if let Some(r) = self.raw_addr {
            put_le32(hdr, pos, r.addr_len);
            if let Some(dst) = hdr.get_mut(pos + 4..pos + 4 + RawAddr::LEN) {
                dst.copy_from_slice(&r.addr.to_bytes());
            }
            pos += r.wire_len();
        }
        if let Some(v) = self.cq_data {
            put_le64(hdr, pos, v);
            pos += 8;
        }
        if let Some(c) = self.connid {
            put_le32(hdr, pos, c);
        }
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::efa::{Field, Packet, Repr};

    /// The types [`RtmHeader::emit`] encodes.
    const ENCODABLE: [PacketType; 8] = [
        PacketType::EagerMsgRtm,
        PacketType::EagerTagRtm,
        PacketType::MediumMsgRtm,
        PacketType::MediumTagRtm,
        PacketType::DcEagerMsgRtm,
        PacketType::DcEagerTagRtm,
        PacketType::DcMediumMsgRtm,
        PacketType::DcMediumTagRtm,
    ];

    /// No header is longer than [`RtmHeader::MAX_LEN`], every optional header present at
    /// its largest.
    #[test]
    fn max_len_bounds_every_header() {
        let mut longest = 0;
        for ty in ENCODABLE {
            let mut h = RtmHeader::new(ty);
            h.raw_addr = Some(RawAddrHdr {
                addr_len: RawAddrHdr::MAX_ADDR_LEN,
                addr: RawAddr {
                    gid: [1; 16],
                    qpn: 2,
                    qkey: 3,
                    next: 4,
                },
            });
            h.cq_data = Some(5);
            h.connid = Some(6);
            longest = longest.max(h.header_len());
            h.connid = None;
            let mut buf = [0u8; RtmHeader::MAX_LEN];
            assert_eq!(h.emit(&mut buf), Ok(h.header_len()), "{ty:?}");
        }
        assert_eq!(longest, RtmHeader::MAX_LEN);
    }

    /// Every encodable type, with and without each optional header, emits the bytes
    /// `Repr::emit` emits for the same packet, which `Packet::new_checked` reads back.
    #[test]
    fn same_bytes_as_repr() {
        let addr = RawAddr {
            gid: [0x5a; 16],
            qpn: 0x1234,
            qkey: 0xdead_beef,
            next: 0x0102_0304_0506_0708,
        };
        let payload = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        let mut n = 0;
        for ty in ENCODABLE {
            let layout = ty.layout();
            for raw in [
                None,
                Some(RawAddrHdr::new(addr)),
                Some(RawAddrHdr { addr_len: 32, addr }),
            ] {
                for cq in [None, Some(0x1122_3344_5566_7788u64)] {
                    for connid in [None, Some(0xcafe_f00du32)] {
                        let h = RtmHeader {
                            pkt_type: ty,
                            msg_id: 0x0a0b_0c0d,
                            tag: 0xf0e0_d0c0_b0a0_9080,
                            send_id: 77,
                            msg_length: 1 << 20,
                            seg_offset: 8192,
                            raw_addr: raw,
                            cq_data: cq,
                            connid,
                        };
                        let mut r = Repr::new(ty);
                        for (f, v) in [
                            (Field::MsgId, h.msg_id as u64),
                            (Field::Tag, h.tag),
                            (Field::SendId, h.send_id as u64),
                            (Field::MsgLength, h.msg_length),
                            (Field::SegOffset, h.seg_offset),
                        ] {
                            if layout.has(f) {
                                r = r.with(f, v);
                            }
                        }
                        r.raw_addr = raw;
                        r.cq_data = cq;
                        r.connid = connid;
                        r.payload = &payload;
                        let mut want = vec![0u8; r.buffer_len()];
                        let mut got = vec![0xffu8; h.header_len() + payload.len()];
                        match (r.emit(&mut want), h.emit(&mut got)) {
                            (Ok(_), Ok(hl)) => {
                                got[hl..].copy_from_slice(&payload);
                                assert_eq!(
                                    got, want,
                                    "{ty} raw {raw:?} cq {cq:?} connid {connid:?}"
                                );
                                let p = Packet::new_checked(&got[..]).unwrap();
                                assert_eq!(p.payload(), &payload);
                                n += 1;
                            }
                            (Err(a), Err(b)) => assert_eq!(a, b, "{ty}"),
                            (a, b) => panic!("{ty}: Repr {a:?}, RtmHeader {b:?}"),
                        }
                    }
                }
            }
        }
        // Raw address and connid together are refused: 8 types x 2 raw x 2 cq.
        assert_eq!(n, 8 * 3 * 2 * 2 - 8 * 2 * 2);
    }

    #[test]
    fn refuses_other_types_and_short_buffers() {
        let mut buf = [0u8; 64];
        let e = RtmHeader::new(PacketType::LongctsTagRtm)
            .emit(&mut buf)
            .unwrap_err();
        assert!(e.to_string().contains("LONGCTS_TAGRTM"), "{e}");
        let h = RtmHeader::new(PacketType::EagerTagRtm);
        assert_eq!(h.header_len(), 16);
        let e = h.emit(&mut buf[..15]).unwrap_err();
        assert_eq!(e, Error::len(Part::OutputBuffer, 16, 15));
        let bad = RtmHeader {
            raw_addr: Some(RawAddrHdr {
                addr_len: 8,
                addr: RawAddr::from_bytes(&[0; 32]).unwrap(),
            }),
            ..h
        };
        assert!(matches!(
            bad.emit(&mut buf),
            Err(Error::Content(ContentError::AddrLenOutOfRange {
                addr_len: 8,
                ..
            }))
        ));
    }
}

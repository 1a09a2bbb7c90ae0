//! The zero-copy checked view over one EFA packet.

use super::layout::{ConnidPlace, Field, Layout, PayloadKind};
use super::{flags, PacketType, RawAddr, RawAddrHdr, RmaIov, PROTOCOL_VERSION, RMA_IOV_LEN};
use super::{ExtraInfo, UserRecvQp};
use crate::bytes::{byte, le16, le32, le64};
use crate::error::{ContentError, Error, Part, Result};

/// Largest `rma_iov_count`/`read_iov_count` accepted: as many 24-byte entries as fit in
/// 64 KiB, far above any EFA MTU (about 9 KiB). A larger count cannot describe a real
/// packet and is a content error; a smaller one that overruns the buffer is a length error.
pub const MAX_IOV_COUNT: u32 = (65536 / RMA_IOV_LEN) as u32;

/// HANDSHAKE optional headers in wire order (wire-layouts §A.5), each 8 bytes.
const HANDSHAKE_OPTS: [u16; 5] = [
    flags::CONNID_HDR,
    flags::HANDSHAKE_HOST_ID_HDR,
    flags::HANDSHAKE_DEVICE_VERSION_HDR,
    flags::HANDSHAKE_USER_RECV_QP_HDR,
    flags::HANDSHAKE_HMEM_P2P_HDR,
];

/// A read-only or read-write view of an EFA RDM v4 packet whose headers have all been
/// checked.
///
/// ```
/// use tagmatch_wire::efa::{Packet, PacketType};
/// let bytes = [0x41, 0x04, 0x0c, 0x00, 0x01, 0, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, b'h', b'i'];
/// let pkt = Packet::new_checked(&bytes[..]).unwrap();
/// assert_eq!(pkt.pkt_type(), PacketType::EagerTagRtm);
/// assert_eq!(pkt.tag(), Some(0x1122334455667788));
/// assert_eq!(pkt.payload(), b"hi");
/// ```
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
    layout: &'static Layout,
    /// End of the mandatory header including `rma_iov[]`: where REQ optional headers start.
    rma_iov_end: u16,
    /// End of all headers. The optional headers' offsets follow from the flags.
    header_len: u16,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks every header of the packet in `buffer`: base header, version, type, mandatory
    /// header, `rma_iov[]`, and each optional header its flags announce.
    ///
    /// Length errors name the part that does not fit and the bytes needed from the start
    /// of the packet; content errors say what is invalid.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let b = buffer.as_ref();
        let layout = classify(b)?;
        // Both ends packed in one u32: a `Result` of a tuple with a reference made rustc
        // shuffle the pointer through bytes on the hot path.
        let ends = check(b, layout)?;
        Ok(Packet {
            buffer,
            layout,
            rma_iov_end: (ends >> 16) as u16,
            header_len: ends as u16,
        })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The packet type.
    #[inline]
    pub fn pkt_type(&self) -> PacketType {
        self.layout.pkt_type
    }

    /// The type's layout row.
    #[inline]
    pub fn layout(&self) -> &'static Layout {
        self.layout
    }

    /// `version` (≥ 4).
    #[inline]
    pub fn version(&self) -> u8 {
        byte(self.b(), 1)
    }

    /// `flags` exactly as on the wire, unknown bits included.
    #[inline]
    pub fn flags(&self) -> u16 {
        le16(self.b(), 2)
    }

    /// The value of a fixed field, or `None` if this packet type has no such field.
    #[inline]
    pub fn get(&self, field: Field) -> Option<u64> {
        let at = self.layout.find(field)?;
        Some(match at.width {
            super::Width::U32 => le32(self.b(), at.offset as usize) as u64,
            super::Width::U64 => le64(self.b(), at.offset as usize),
        })
    }

    /// A field that is 4 bytes wide in every layout that has it.
    #[inline(always)]
    fn get32(&self, field: Field) -> Option<u32> {
        match self.layout.offset(field) {
            0 => None,
            o => Some(le32(self.b(), o)),
        }
    }

    /// `msg_id`, for the types that have one.
    #[inline]
    pub fn msg_id(&self) -> Option<u32> {
        self.get32(Field::MsgId)
    }

    /// `tag`, for the `*_TAGRTM` types.
    #[inline]
    pub fn tag(&self) -> Option<u64> {
        match self.layout.offset(Field::Tag) {
            0 => None,
            o => Some(le64(self.b(), o)),
        }
    }

    /// `send_id`, for the types that have one.
    #[inline]
    pub fn send_id(&self) -> Option<u32> {
        self.get32(Field::SendId)
    }

    /// `recv_id`, for the types that have one.
    #[inline]
    pub fn recv_id(&self) -> Option<u32> {
        self.get32(Field::RecvId)
    }

    /// The connid header value, wherever this type carries it (wire-layouts §A.7), if
    /// `CONNID_HDR` is set.
    #[inline]
    pub fn connid(&self) -> Option<u32> {
        let o = match self.layout.connid {
            _ if self.flags() & flags::CONNID_HDR == 0 => return None,
            ConnidPlace::Fixed(o) => o as usize,
            ConnidPlace::CtsDataTrailer => self.layout.size as usize,
            ConnidPlace::Handshake => self.handshake_opt(flags::CONNID_HDR)?,
            ConnidPlace::ReqOptional => self.header_len() - 4,
        };
        Some(le32(self.b(), o))
    }

    /// The sender's connid: the connid header, or for a REQ with a raw address, its `qkey`
    /// (wire-layouts §A.6).
    pub fn sender_connid(&self) -> Option<u32> {
        self.connid()
            .or_else(|| self.raw_addr().map(|r| r.addr.qkey))
    }

    /// The REQ raw-address optional header.
    pub fn raw_addr(&self) -> Option<RawAddrHdr> {
        let o = (self.layout.connid == ConnidPlace::ReqOptional
            && self.flags() & flags::REQ_OPT_RAW_ADDR_HDR != 0)
            .then_some(self.rma_iov_end as usize)?;
        let b = self.b();
        Some(RawAddrHdr {
            addr_len: le32(b, o),
            addr: RawAddr::from_bytes(b.get(o + 4..)?)?,
        })
    }

    /// The REQ CQ-data optional header.
    #[inline]
    pub fn cq_data(&self) -> Option<u64> {
        let fl = self.flags();
        (self.layout.connid == ConnidPlace::ReqOptional && fl & flags::REQ_OPT_CQ_DATA_HDR != 0)
            .then(|| {
                let connid = if fl & flags::CONNID_HDR != 0 { 4 } else { 0 };
                le64(self.b(), self.header_len() - 8 - connid)
            })
    }

    /// The `rma_iov[]` array ending the mandatory header (empty for types without one).
    pub fn rma_iov(&self) -> &[RmaIov] {
        let start = self.layout.size as usize;
        let end = self.rma_iov_end as usize;
        self.b()
            .get(start..end)
            .and_then(RmaIov::slice_from_bytes)
            .unwrap_or(&[])
    }

    /// Length of all headers: mandatory, `rma_iov[]` and optional headers.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.header_len as usize
    }

    /// Everything after the headers.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        self.b().get(self.header_len()..).unwrap_or(&[])
    }

    /// LONGREAD/RUNTREAD: the `read_iov[read_iov_count]` array at the start of the payload
    /// (wire-layouts §A.6). Empty for other types. Checked lazily, because a header can be
    /// inspected before its payload has arrived.
    pub fn read_iov(&self) -> Result<&[RmaIov]> {
        read_iov(
            self.layout.payload,
            self.get(Field::ReadIovCount),
            self.payload(),
            self.header_len(),
        )
        .map(|(iov, _)| iov)
    }

    /// RUNTREAD: the runt data after `read_iov[]`; for other types, the whole payload.
    pub fn data(&self) -> Result<&[u8]> {
        read_iov(
            self.layout.payload,
            self.get(Field::ReadIovCount),
            self.payload(),
            self.header_len(),
        )
        .map(|(_, rest)| rest)
    }

    /// COMPARE_RTA: the `buf` and `compare` operands, the two equal halves of the payload
    /// (efa-rdm-protocol-v4 §3.3 "the application data part of a COMPARE_RTA packet contains
    /// two segments of data: buf and compare"). `None` for other types or an odd length.
    pub fn compare_operands(&self) -> Option<(&[u8], &[u8])> {
        let p = self.payload();
        (self.layout.payload == PayloadKind::BufCompare && p.len() % 2 == 0)
            .then(|| p.split_at(p.len() / 2))
    }

    /// HANDSHAKE: offset of the optional header flagged by `bit`, if present: after
    /// `extra_info`, past the present headers that precede it.
    fn handshake_opt(&self, bit: u16) -> Option<usize> {
        let fl = self.flags();
        if self.layout.pkt_type != PacketType::Handshake || fl & bit == 0 {
            return None;
        }
        let words = le32(self.b(), 4).saturating_sub(3) as usize;
        let before = HANDSHAKE_OPTS
            .iter()
            .take_while(|&&b| b != bit)
            .filter(|&&b| fl & b != 0)
            .count();
        Some(8 + 8 * words + 8 * before)
    }

    /// HANDSHAKE: the `extra_info` feature/request bits.
    pub fn extra_info(&self) -> Option<ExtraInfo> {
        if self.layout.pkt_type != PacketType::Handshake {
            return None;
        }
        let words = (le32(self.b(), 4).saturating_sub(3)) as usize;
        let mut e = ExtraInfo::with_words(words);
        for i in 0..words {
            e.set_word(i, le64(self.b(), 8 + 8 * i));
        }
        Some(e)
    }

    /// HANDSHAKE: the HOST_ID optional header.
    pub fn host_id(&self) -> Option<u64> {
        self.handshake_opt(flags::HANDSHAKE_HOST_ID_HDR)
            .map(|o| le64(self.b(), o))
    }

    /// HANDSHAKE: the DEVICE_VERSION optional header.
    pub fn device_version(&self) -> Option<u32> {
        self.handshake_opt(flags::HANDSHAKE_DEVICE_VERSION_HDR)
            .map(|o| le32(self.b(), o))
    }

    /// HANDSHAKE: the USER_RECV_QP optional header.
    pub fn user_recv_qp(&self) -> Option<UserRecvQp> {
        self.handshake_opt(flags::HANDSHAKE_USER_RECV_QP_HDR)
            .map(|o| UserRecvQp {
                qpn: le32(self.b(), o),
                qkey: le32(self.b(), o + 4),
            })
    }

    /// HANDSHAKE: the HMEM_P2P optional header (`p2p_supported`).
    pub fn hmem_p2p(&self) -> Option<u8> {
        self.handshake_opt(flags::HANDSHAKE_HMEM_P2P_HDR)
            .map(|o| byte(self.b(), o))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Rewrites a fixed field in place (for example `msg_id` in a pre-built header
    /// template). The packet stays valid: only fields that do not shape the packet can be
    /// set, so `rma_iov_count`, `read_iov_count` and `nextra_p3` are refused.
    pub fn set(&mut self, field: Field, value: u64) -> Result<()> {
        let packet = self.layout.pkt_type.name();
        let at = self.layout.find(field).ok_or(ContentError::NotApplicable {
            what: field.name(),
            packet,
        })?;
        if field.is_derived() || field == Field::ReadIovCount {
            return Err(ContentError::NotApplicable {
                what: field.name(),
                packet,
            }
            .into());
        }
        if value > at.width.max() {
            return Err(ContentError::FieldOverflow {
                field: field.name(),
                value,
            }
            .into());
        }
        let b = self.buffer.as_mut();
        match at.width {
            super::Width::U32 => crate::bytes::put_le32(b, at.offset as usize, value as u32),
            super::Width::U64 => crate::bytes::put_le64(b, at.offset as usize, value),
        }
        Ok(())
    }

    /// Rewrites the connid header in place; the packet must already carry one.
    pub fn set_connid(&mut self, connid: u32) -> Result<()> {
        if self.connid().is_none() {
            return Err(ContentError::NotApplicable {
                what: "connid (CONNID_HDR is not set)",
                packet: self.layout.pkt_type.name(),
            }
            .into());
        }
        let o = match self.layout.connid {
            ConnidPlace::Fixed(o) => o as usize,
            ConnidPlace::CtsDataTrailer => self.layout.size as usize,
            ConnidPlace::Handshake => self.handshake_opt(flags::CONNID_HDR).unwrap_or(0),
            ConnidPlace::ReqOptional => self.header_len() - 4,
        };
        crate::bytes::put_le32(self.buffer.as_mut(), o, connid);
        Ok(())
    }

    /// The payload, writable (for example to fill data after emitting a header).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len();
        self.buffer.as_mut().get_mut(h..).unwrap_or(&mut [])
    }
}

impl<'a> Packet<&'a [u8]> {
    /// The whole packet, with the lifetime of the underlying buffer.
    pub fn buffer(&self) -> &'a [u8] {
        self.buffer
    }

    /// [`Packet::payload`] with the lifetime of the underlying buffer.
    pub fn payload_slice(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer;
        b.get(self.header_len()..).unwrap_or(&[])
    }

    /// [`Packet::rma_iov`] with the lifetime of the underlying buffer.
    pub fn rma_iov_slice(&self) -> &'a [RmaIov] {
        let b: &'a [u8] = self.buffer;
        b.get(self.layout.size as usize..self.rma_iov_end as usize)
            .and_then(RmaIov::slice_from_bytes)
            .unwrap_or(&[])
    }
}

/// Splits a payload into `read_iov[]` and what follows.
pub(super) fn read_iov(
    kind: PayloadKind,
    count: Option<u64>,
    payload: &[u8],
    header_len: usize,
) -> Result<(&[RmaIov], &[u8])> {
    match (kind, count) {
        (PayloadKind::ReadIov | PayloadKind::ReadIovRunt, Some(count)) => {
            if count > MAX_IOV_COUNT as u64 {
                return Err(ContentError::IovCountTooLarge {
                    field: "read_iov_count",
                    count: count as u32,
                    max: MAX_IOV_COUNT,
                }
                .into());
            }
            let n = count as usize * RMA_IOV_LEN;
            match payload.get(..n).and_then(RmaIov::slice_from_bytes) {
                Some(iov) => Ok((iov, payload.get(n..).unwrap_or(&[]))),
                None => Err(Error::len(
                    Part::ReadIov,
                    header_len + n,
                    header_len + payload.len(),
                )),
            }
        }
        _ => Ok((&[], payload)),
    }
}

#[inline(always)]
fn need(part: Part, needed: usize, n: usize) -> Result<()> {
    if n < needed {
        Err(Error::len(part, needed, n))
    } else {
        Ok(())
    }
}

/// Header offsets must fit a u16: the largest header is a 40-byte mandatory part plus
/// `MAX_IOV_COUNT` entries plus 56 bytes of optional headers, well under 64 KiB.
#[inline]
fn o16(v: usize) -> u16 {
    v as u16
}

/// The base header: length, version and type (efa-rdm-protocol-v4 §1.3).
#[inline(always)]
fn classify(b: &[u8]) -> Result<&'static Layout> {
    // efa-rdm-protocol-v4 §1.3: every packet starts with the 4-byte base header
    // (type u8, version u8, flags u16).
    need(Part::BaseHeader, super::BASE_HDR_LEN, b.len())?;
    // wire-layouts §A.1: "A receiver only rejects version < 4".
    let version = byte(b, 1);
    if version < PROTOCOL_VERSION {
        return Err(ContentError::UnsupportedVersion(version).into());
    }
    match super::layout::by_id(byte(b, 0)) {
        Some(l) => Ok(l),
        None => Err(unknown_type(byte(b, 0))),
    }
}

#[cold]
fn unknown_type(id: u8) -> Error {
    match PacketType::from_id(id) {
        Err(e) => e.into(),
        Ok(_) => ContentError::UnknownType(id).into(),
    }
}

/// Every header after the base header; returns `rma_iov_end << 16 | header_len`.
#[inline(always)]
fn check(b: &[u8], layout: &'static Layout) -> Result<u32> {
    let n = b.len();
    let ty = layout.pkt_type;
    let fl = le16(b, 2);
    let mut pos = layout.size as usize;
    if n < pos {
        return Err(Error::len(Part::Mandatory(ty.name()), pos, n));
    }

    // wire-layouts §A.6: "The mandatory size is base_hdr_size + rma_iov_count*24".
    if layout.rma_iov {
        let count = layout
            .find(Field::RmaIovCount)
            .map(|at| le32(b, at.offset as usize))
            .unwrap_or(0);
        if count > MAX_IOV_COUNT {
            return Err(ContentError::IovCountTooLarge {
                field: "rma_iov_count",
                count,
                max: MAX_IOV_COUNT,
            }
            .into());
        }
        pos += count as usize * RMA_IOV_LEN;
        need(Part::RmaIov, pos, n)?;
    }
    let rma_iov_end = o16(pos);

    match layout.connid {
        ConnidPlace::Fixed(_) => {}
        ConnidPlace::CtsDataTrailer => {
            // wire-layouts §A.5: "With CONNID_HDR, an 8-byte efa_rdm_ctsdata_opt_connid_hdr
            // follows at 24: connid u32, then 4 bytes of padding."
            if fl & flags::CONNID_HDR != 0 {
                need(Part::Connid, pos + 8, n)?;
                pos += 8;
            }
        }
        ConnidPlace::Handshake => pos = handshake_headers(b, fl, pos)?,
        ConnidPlace::ReqOptional => {
            // The common case after the handshake: only the 4-byte connid header.
            if fl & (flags::REQ_OPT_RAW_ADDR_HDR | flags::REQ_OPT_CQ_DATA_HDR) == 0 {
                if fl & flags::CONNID_HDR != 0 {
                    pos += 4;
                    need(Part::Connid, pos, n)?;
                }
            } else {
                pos = req_optional_headers(b, fl, pos)?;
            }
        }
    }
    Ok((rma_iov_end as u32) << 16 | o16(pos) as u32)
}

/// The HANDSHAKE `extra_info` array and optional headers; returns the header length.
#[inline(never)]
fn handshake_headers(b: &[u8], fl: u16, mut pos: usize) -> Result<usize> {
    let n = b.len();
    // wire-layouts §A.5: HANDSHAKE: 4 nextra_p3 u32; 8 extra_info[nextra_p3-3] u64;
    // then optional headers in this order, each 8 bytes, present only if flagged:
    // CONNID, HOST_ID, DEVICE_VERSION, USER_RECV_QP, HMEM_P2P.
    let nextra_p3 = le32(b, 4);
    let words = nextra_p3.wrapping_sub(3);
    if nextra_p3 < 3 || words as usize > super::extra::MAX_WORDS {
        return Err(ContentError::BadNextraP3 { nextra_p3 }.into());
    }
    pos += 8 * words as usize;
    need(Part::ExtraInfo, pos, n)?;
    let parts = [
        Part::Connid,
        Part::HostId,
        Part::DeviceVersion,
        Part::UserRecvQp,
        Part::HmemP2p,
    ];
    for (bit, part) in HANDSHAKE_OPTS.into_iter().zip(parts) {
        if fl & bit != 0 {
            need(part, pos + 8, n)?;
            pos += 8;
        }
    }
    Ok(pos)
}

/// The REQ optional headers after `rma_iov[]`; returns the header length.
#[inline(never)]
fn req_optional_headers(b: &[u8], fl: u16, mut pos: usize) -> Result<usize> {
    let n = b.len();
    // wire-layouts §A.6: optional headers after rma_iov, in the fixed order raw
    // address, CQ data, connid; raw address and connid are mutually exclusive.
    if fl & flags::REQ_OPT_RAW_ADDR_HDR != 0 && fl & flags::CONNID_HDR != 0 {
        return Err(ContentError::RawAddrAndConnid.into());
    }
    if fl & flags::REQ_OPT_RAW_ADDR_HDR != 0 {
        need(Part::RawAddr, pos + 4, n)?;
        let addr_len = le32(b, pos);
        if !(RawAddrHdr::MIN_ADDR_LEN..=RawAddrHdr::MAX_ADDR_LEN).contains(&addr_len) {
            return Err(ContentError::AddrLenOutOfRange {
                addr_len,
                min: RawAddrHdr::MIN_ADDR_LEN,
                max: RawAddrHdr::MAX_ADDR_LEN,
            }
            .into());
        }
        // "Receivers skip 4 + addr_len taken from the wire."
        need(Part::RawAddr, pos + 4 + addr_len as usize, n)?;
        pos += 4 + addr_len as usize;
    }
    if fl & flags::REQ_OPT_CQ_DATA_HDR != 0 {
        need(Part::CqData, pos + 8, n)?;
        pos += 8;
    }
    if fl & flags::CONNID_HDR != 0 {
        // "connid, flag 0x8000: u32, 4 bytes, no padding."
        need(Part::Connid, pos + 4, n)?;
        pos += 4;
    }
    Ok(pos)
}

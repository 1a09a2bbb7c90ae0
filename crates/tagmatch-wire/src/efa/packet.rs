//! The zero-copy checked view over one EFA packet.

use super::layout::{ConnidPlace, Field, Layout, PayloadKind, Width};
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
    /// End of all headers.
    header_len: u16,
    /// Where each optional header starts, computed once by the check; 0 when the packet
    /// has none (no header starts at 0: the base header is there).
    connid_at: u16,
    cq_at: u16,
    raw_at: u16,
    /// `msg_id`, `tag` and connid, the fields every REQ receive path reads, loaded by the
    /// check where their offsets are constants and the length is known (no bounds test per
    /// field); kept equal to the bytes by [`Packet::set`] and [`Packet::set_connid`], the
    /// only ways to write the header through a view.
    msg_id: Option<u32>,
    tag: Option<u64>,
    connid: Option<u32>,
}

/// What the check learns about a packet: everything [`Packet`] keeps besides the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    layout: &'static Layout,
    rma_iov_end: u16,
    header_len: u16,
    connid_at: u16,
    cq_at: u16,
    raw_at: u16,
    msg_id: Option<u32>,
    tag: Option<u64>,
    connid: Option<u32>,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks every header of the packet in `buffer`: base header, version, type, mandatory
    /// header, `rma_iov[]`, and each optional header its flags announce.
    ///
    /// Length errors name the part that does not fit and the bytes needed from the start
    /// of the packet; content errors say what is invalid.
    // Always inlined: the per-type match is larger than rustc's inlining threshold, and
    // called out of line it returns the view through memory, which cost more than the
    // check itself (the bench's x256 loop: 109 instructions per header out of line, 66
    // inlined, before the field loads moved into the check).
    #[inline(always)]
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let s = check_fast(buffer.as_ref())?;
        Ok(Packet::with_shape(buffer, s))
    }

    /// [`Packet::new_checked`] for a packet that must be of type `ty`: the form of a
    /// receive path that has already dispatched on the type byte (`match bytes[0]`), or
    /// that expects one type (a CTS in answer to a LONGCTS_RTM). Called with a constant
    /// `ty`, the check is that type's own code path — constant sizes and offsets, no
    /// dispatch on the type byte, no per-field bounds tests once inlined.
    ///
    /// A valid packet of another type is [`ContentError::WrongType`]; every other error
    /// is the one [`Packet::new_checked`] gives.
    ///
    /// ```
    /// use tagmatch_wire::efa::{Packet, PacketType};
    /// let bytes = [0x41, 0x04, 0x00, 0x00, 0x07, 0, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, b'h', b'i'];
    /// let pkt = Packet::new_checked_as(&bytes[..], PacketType::EagerTagRtm).unwrap();
    /// assert_eq!((pkt.msg_id(), pkt.tag()), (Some(7), Some(0x1122334455667788)));
    /// let e = Packet::new_checked_as(&bytes[..], PacketType::MediumTagRtm).unwrap_err();
    /// assert_eq!(e.to_string(), "packet type 65 where MEDIUM_TAGRTM was expected");
    /// ```
    #[inline(always)]
    pub fn new_checked_as(buffer: T, ty: PacketType) -> Result<Packet<T>> {
        let s = match accept_as(buffer.as_ref(), ty) {
            Some(s) => s,
            None => check_as(buffer.as_ref(), ty)?,
        };
        Ok(Packet::with_shape(buffer, s))
    }

    #[inline(always)]
    fn with_shape(buffer: T, s: Shape) -> Packet<T> {
        Packet {
            buffer,
            layout: s.layout,
            rma_iov_end: s.rma_iov_end,
            header_len: s.header_len,
            connid_at: s.connid_at,
            cq_at: s.cq_at,
            raw_at: s.raw_at,
            msg_id: s.msg_id,
            tag: s.tag,
            connid: s.connid,
        }
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
        let o = self.layout.offset(field);
        if o == 0 {
            return None;
        }
        // Every field but `recv_length` has one width in all layouts, known from `field`
        // alone; only `recv_length` asks the layout.
        let wide = match field.fixed_width() {
            Some(w) => w == Width::U64,
            None => self.layout.is_wide(field),
        };
        Some(if wide {
            le64(self.b(), o)
        } else {
            le32(self.b(), o) as u64
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
        self.msg_id
    }

    /// `tag`, for the `*_TAGRTM` types.
    #[inline]
    pub fn tag(&self) -> Option<u64> {
        self.tag
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
        self.connid
    }

    /// The sender's connid: the connid header, or for a REQ with a raw address, its `qkey`
    /// (wire-layouts §A.6).
    #[inline]
    pub fn sender_connid(&self) -> Option<u32> {
        // wire-layouts §A.6: the raw address header is u32 addr_len, then the 32-byte
        // efa_ep_addr whose qkey is at 20; the check made sure all 4 + addr_len ≥ 36
        // bytes are there.
        match (self.connid, self.raw_at) {
            (Some(c), _) => Some(c),
            (None, 0) => None,
            (None, r) => Some(le32(self.b(), r as usize + 4 + 20)),
        }
    }

    /// The REQ raw-address optional header.
    pub fn raw_addr(&self) -> Option<RawAddrHdr> {
        let o = match self.raw_at {
            0 => return None,
            o => o as usize,
        };
        let b = self.b();
        Some(RawAddrHdr {
            addr_len: le32(b, o),
            addr: RawAddr::from_bytes(b.get(o + 4..)?)?,
        })
    }

    /// The REQ CQ-data optional header.
    #[inline]
    pub fn cq_data(&self) -> Option<u64> {
        match self.cq_at {
            0 => None,
            o => Some(le64(self.b(), o as usize)),
        }
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
            Width::U32 => crate::bytes::put_le32(b, at.offset as usize, value as u32),
            Width::U64 => crate::bytes::put_le64(b, at.offset as usize, value),
        }
        match field {
            Field::MsgId => self.msg_id = Some(value as u32),
            Field::Tag => self.tag = Some(value),
            _ => {}
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
        let o = self.connid_at as usize;
        crate::bytes::put_le32(self.buffer.as_mut(), o, connid);
        self.connid = Some(connid);
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

/// A 4-byte field at its layout offset, `None` when the layout has none.
fn field32(b: &[u8], layout: &Layout, field: Field) -> Option<u32> {
    match layout.offset(field) {
        0 => None,
        o => Some(le32(b, o)),
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

/// Header offsets fit a u16: [`check`] refuses a header that ends past 64 KiB (possible
/// with `MAX_IOV_COUNT` entries of `rma_iov[]`), and the fast path's headers are short.
#[inline]
fn o16(v: usize) -> u16 {
    v as u16
}

/// Type IDs as `match` patterns.
mod id {
    use super::PacketType as P;
    pub const CTS: u8 = P::Cts as u8;
    pub const CTSDATA: u8 = P::CtsData as u8;
    pub const READRSP: u8 = P::ReadRsp as u8;
    pub const EOR: u8 = P::Eor as u8;
    pub const ATOMRSP: u8 = P::AtomRsp as u8;
    pub const RECEIPT: u8 = P::Receipt as u8;
    pub const READ_NACK: u8 = P::ReadNack as u8;
    pub const PEER_ERROR: u8 = P::PeerError as u8;
    pub const EAGER_MSGRTM: u8 = P::EagerMsgRtm as u8;
    pub const EAGER_TAGRTM: u8 = P::EagerTagRtm as u8;
    pub const MEDIUM_MSGRTM: u8 = P::MediumMsgRtm as u8;
    pub const MEDIUM_TAGRTM: u8 = P::MediumTagRtm as u8;
    pub const LONGCTS_MSGRTM: u8 = P::LongctsMsgRtm as u8;
    pub const LONGCTS_TAGRTM: u8 = P::LongctsTagRtm as u8;
    pub const LONGREAD_MSGRTM: u8 = P::LongreadMsgRtm as u8;
    pub const LONGREAD_TAGRTM: u8 = P::LongreadTagRtm as u8;
    pub const DC_EAGER_MSGRTM: u8 = P::DcEagerMsgRtm as u8;
    pub const DC_EAGER_TAGRTM: u8 = P::DcEagerTagRtm as u8;
    pub const DC_MEDIUM_MSGRTM: u8 = P::DcMediumMsgRtm as u8;
    pub const DC_MEDIUM_TAGRTM: u8 = P::DcMediumTagRtm as u8;
    pub const DC_LONGCTS_MSGRTM: u8 = P::DcLongctsMsgRtm as u8;
    pub const DC_LONGCTS_TAGRTM: u8 = P::DcLongctsTagRtm as u8;
    pub const RUNTREAD_MSGRTM: u8 = P::RuntreadMsgRtm as u8;
    pub const RUNTREAD_TAGRTM: u8 = P::RuntreadTagRtm as u8;
}

/// The check `new_checked` runs: [`accept`], and whatever it does not accept outright goes
/// to [`check_table`], which decides and names the error. So errors are the table path's by
/// construction, and an accepted packet gets the same [`Shape`] from both (the
/// `fast_path_agrees_*` tests).
#[inline(always)]
fn check_fast(b: &[u8]) -> Result<Shape> {
    match accept(b) {
        Some(s) => Ok(s),
        None => check_table(b),
    }
}

/// One `match` on the type byte selects a code path with the type's sizes and offsets as
/// constants, for every type whose header has no array: the REQ message types and the
/// fixed-size control packets. `None` for anything it does not accept outright: a short
/// buffer, a bad version, a bad raw address, a type with `rma_iov[]` or `extra_info[]`, an
/// unknown type.
#[inline(always)]
fn accept(b: &[u8]) -> Option<Shape> {
    let (ty, fl) = base(b)?;
    accept_type(b, fl, ty)
}

/// [`accept`] for a packet that must be of type `want`: with `want` a constant, the type
/// byte is compared once and [`accept_type`]'s match folds to that type's arm.
#[inline(always)]
fn accept_as(b: &[u8], want: PacketType) -> Option<Shape> {
    let (ty, fl) = base(b)?;
    if ty != want as u8 {
        return None;
    }
    accept_type(b, fl, want as u8)
}

/// What [`Packet::new_checked_as`] does with a packet [`accept_as`] did not accept: the
/// table check decides (and names any error), and a valid packet of another type is
/// [`ContentError::WrongType`].
#[inline(never)]
#[cold]
fn check_as(b: &[u8], want: PacketType) -> Result<Shape> {
    let s = check_table(b)?;
    if s.layout.pkt_type == want {
        Ok(s)
    } else {
        Err(Error::Content(ContentError::WrongType {
            expected: want.name(),
            found: s.layout.pkt_type.id(),
        }))
    }
}

/// The base header: type ID and flags, `None` when shorter than 4 bytes or older than
/// version 4.
#[inline(always)]
fn base(b: &[u8]) -> Option<(u8, u16)> {
    // efa-rdm-protocol-v4 §1.3: the 4-byte base header (type u8, version u8, flags u16);
    // wire-layouts §A.1: "A receiver only rejects version < 4".
    let h = u32::from_le_bytes(*b.first_chunk::<4>()?);
    if ((h >> 8) as u8) < PROTOCOL_VERSION {
        return None;
    }
    Some((h as u8, (h >> 16) as u16))
}

/// The per-type paths of [`accept`], selected by type ID.
#[inline(always)]
fn accept_type(b: &[u8], fl: u16, ty: u8) -> Option<Shape> {
    use super::layout as l;
    // Mandatory header sizes and offsets: wire-layouts §A.5 and §A.6, as in layout.rs
    // (tag: the last 8 bytes of a *_TAGRTM mandatory header; msg_id at 4 in every RTM).
    match ty {
        id::EAGER_MSGRTM => req::<8, 0>(b, fl, &l::EAGER_MSGRTM),
        id::EAGER_TAGRTM => req::<16, 8>(b, fl, &l::EAGER_TAGRTM),
        id::MEDIUM_MSGRTM => req::<24, 0>(b, fl, &l::MEDIUM_MSGRTM),
        id::MEDIUM_TAGRTM => req::<32, 24>(b, fl, &l::MEDIUM_TAGRTM),
        id::LONGCTS_MSGRTM => req::<24, 0>(b, fl, &l::LONGCTS_MSGRTM),
        id::LONGCTS_TAGRTM => req::<32, 24>(b, fl, &l::LONGCTS_TAGRTM),
        id::LONGREAD_MSGRTM => req::<24, 0>(b, fl, &l::LONGREAD_MSGRTM),
        id::LONGREAD_TAGRTM => req::<32, 24>(b, fl, &l::LONGREAD_TAGRTM),
        id::DC_EAGER_MSGRTM => req::<16, 0>(b, fl, &l::DC_EAGER_MSGRTM),
        id::DC_EAGER_TAGRTM => req::<24, 16>(b, fl, &l::DC_EAGER_TAGRTM),
        id::DC_MEDIUM_MSGRTM => req::<32, 0>(b, fl, &l::DC_MEDIUM_MSGRTM),
        id::DC_MEDIUM_TAGRTM => req::<40, 32>(b, fl, &l::DC_MEDIUM_TAGRTM),
        id::DC_LONGCTS_MSGRTM => req::<24, 0>(b, fl, &l::DC_LONGCTS_MSGRTM),
        id::DC_LONGCTS_TAGRTM => req::<32, 24>(b, fl, &l::DC_LONGCTS_TAGRTM),
        id::RUNTREAD_MSGRTM => req::<40, 0>(b, fl, &l::RUNTREAD_MSGRTM),
        id::RUNTREAD_TAGRTM => req::<48, 40>(b, fl, &l::RUNTREAD_TAGRTM),
        // wire-layouts §A.5: size, then the offset of connid (padding without CONNID_HDR).
        id::CTS => ctrl::<24, 4, 0>(b, fl, &l::CTS),
        id::READRSP => ctrl::<24, 4, 0>(b, fl, &l::READRSP),
        id::EOR => ctrl::<16, 12, 0>(b, fl, &l::EOR),
        id::ATOMRSP => ctrl::<24, 4, 0>(b, fl, &l::ATOMRSP),
        id::RECEIPT => ctrl::<16, 12, 8>(b, fl, &l::RECEIPT),
        id::READ_NACK => ctrl::<16, 12, 0>(b, fl, &l::READ_NACK),
        id::PEER_ERROR => ctrl::<20, 16, 0>(b, fl, &l::PEER_ERROR),
        id::CTSDATA => ctsdata(b, fl),
        _ => None,
    }
}

/// A REQ type without `rma_iov[]`: `SIZE`-byte mandatory header, `msg_id` at 4, `tag` at
/// `TAG` (0: untagged).
#[inline(always)]
fn req<const SIZE: usize, const TAG: usize>(
    b: &[u8],
    fl: u16,
    layout: &'static Layout,
) -> Option<Shape> {
    // wire-layouts §A.6: optional headers after the mandatory header, in the fixed order
    // raw address (u32 addr_len, then addr_len bytes), CQ data (u64), connid (u32); raw
    // address and connid are mutually exclusive.
    let con = (fl >> 15) as usize; // CONNID_HDR
    let (mut cq_at, mut raw_at) = (0, 0);
    let mut connid_at = SIZE;
    if fl & (flags::REQ_OPT_RAW_ADDR_HDR | flags::REQ_OPT_CQ_DATA_HDR) != 0 {
        if fl & flags::REQ_OPT_RAW_ADDR_HDR != 0 {
            // 0 when addr_len is past the end, which the range test hands on.
            let addr_len = le32(b, SIZE);
            if con != 0
                || !(RawAddrHdr::MIN_ADDR_LEN..=RawAddrHdr::MAX_ADDR_LEN).contains(&addr_len)
            {
                return None;
            }
            raw_at = SIZE as u16;
            connid_at += 4 + addr_len as usize;
        }
        if fl & flags::REQ_OPT_CQ_DATA_HDR != 0 {
            cq_at = o16(connid_at);
            connid_at += 8;
        }
    }
    let end = connid_at + 4 * con;
    let h = b.get(..end)?;
    // The mandatory header as an array: the field loads below need no bounds test.
    let m = h.first_chunk::<SIZE>()?;
    let connid = (con != 0).then(|| le32(h, connid_at));
    Some(Shape {
        layout,
        rma_iov_end: SIZE as u16,
        header_len: o16(end),
        connid_at: if con != 0 { o16(connid_at) } else { 0 },
        cq_at,
        raw_at,
        msg_id: Some(m_le32(m, 4)),
        tag: (TAG != 0).then(|| m_le64(m, TAG)),
        connid,
    })
}

/// A fixed-size control packet whose connid sits at `CONNID` in the mandatory header
/// (wire-layouts §A.7); `msg_id` at `MSG_ID` (0: none).
#[inline(always)]
fn ctrl<const SIZE: usize, const CONNID: usize, const MSG_ID: usize>(
    b: &[u8],
    fl: u16,
    layout: &'static Layout,
) -> Option<Shape> {
    let m = b.first_chunk::<SIZE>()?;
    let con = fl & flags::CONNID_HDR != 0;
    Some(Shape {
        layout,
        rma_iov_end: SIZE as u16,
        header_len: SIZE as u16,
        connid_at: if con { CONNID as u16 } else { 0 },
        cq_at: 0,
        raw_at: 0,
        msg_id: (MSG_ID != 0).then(|| m_le32(m, MSG_ID)),
        tag: None,
        connid: con.then(|| m_le32(m, CONNID)),
    })
}

/// CTSDATA.
#[inline(always)]
fn ctsdata(b: &[u8], fl: u16) -> Option<Shape> {
    // wire-layouts §A.5: CTSDATA is 24 bytes; "With CONNID_HDR, an 8-byte
    // efa_rdm_ctsdata_opt_connid_hdr follows at 24: connid u32, then 4 bytes of padding."
    let con = fl & flags::CONNID_HDR != 0;
    let end = 24 + 8 * con as usize;
    if b.len() < end {
        return None;
    }
    Some(Shape {
        layout: &super::layout::CTSDATA,
        rma_iov_end: 24,
        header_len: o16(end),
        connid_at: if con { 24 } else { 0 },
        cq_at: 0,
        raw_at: 0,
        msg_id: None,
        tag: None,
        connid: con.then(|| le32(b, 24)),
    })
}

/// A little-endian u32 at a constant offset of a mandatory header.
#[inline(always)]
fn m_le32<const N: usize>(m: &[u8; N], o: usize) -> u32 {
    le32(m, o)
}

/// A little-endian u64 at a constant offset of a mandatory header.
#[inline(always)]
fn m_le64<const N: usize>(m: &[u8; N], o: usize) -> u64 {
    le64(m, o)
}

/// The reference check, driven by the layout table: base header, then [`check`] on the
/// type's layout row, then where each optional header starts. [`check_fast`] hands it
/// every packet [`accept`] does not accept, and the tests hold the two to the same result.
#[inline(never)]
fn check_table(b: &[u8]) -> Result<Shape> {
    let layout = classify(b)?;
    let ends = check(b, layout)?;
    let rma_iov_end = (ends >> 16) as u16;
    let header_len = ends as u16;
    let fl = le16(b, 2);
    let connid = fl & flags::CONNID_HDR != 0;
    let at = |present: bool, o: u16| if present { o } else { 0 };
    let (connid_at, cq_at, raw_at) = match layout.connid {
        ConnidPlace::Fixed(o) => (at(connid, o as u16), 0, 0),
        ConnidPlace::CtsDataTrailer => (at(connid, layout.size as u16), 0, 0),
        // wire-layouts §A.5: connid is the first HANDSHAKE optional header, right after
        // extra_info[nextra_p3 - 3] (nextra_p3 checked by `handshake_headers`).
        ConnidPlace::Handshake => {
            let words = le32(b, 4).saturating_sub(3) as u16;
            (at(connid, 8 + 8 * words), 0, 0)
        }
        // wire-layouts §A.6: raw address right after rma_iov[], then CQ data, then
        // connid, which ends the headers.
        ConnidPlace::ReqOptional => {
            let connid_len = if connid { 4 } else { 0 };
            (
                at(connid, header_len - 4),
                at(
                    fl & flags::REQ_OPT_CQ_DATA_HDR != 0,
                    header_len - 8 - connid_len,
                ),
                at(fl & flags::REQ_OPT_RAW_ADDR_HDR != 0, rma_iov_end),
            )
        }
    };
    Ok(Shape {
        layout,
        rma_iov_end,
        header_len,
        connid_at,
        cq_at,
        raw_at,
        msg_id: field32(b, layout, Field::MsgId),
        tag: match layout.offset(Field::Tag) {
            0 => None,
            o => Some(le64(b, o)),
        },
        connid: match connid_at {
            0 => None,
            o => Some(le32(b, o as usize)),
        },
    })
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
        // wire-layouts §A.6: the optional headers follow rma_iov[]; the shortest they can
        // be is known from the flags alone (raw address at least 4 + 32, CQ data 8,
        // connid 4). A header that must end past 64 KiB is refused now, as the content
        // error it is, rather than first reported as a length error whose needed bytes,
        // once supplied, turn into `TooLong` (crate::error: "a caller can retry a length
        // error with more bytes").
        if pos + req_optional_min_len(fl) > u16::MAX as usize {
            return Err(ContentError::TooLong.into());
        }
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
    // `MAX_IOV_COUNT` entries after a 24-byte mandatory header end at 65544: a header that
    // long cannot be described with the view's 16-bit offsets (nor sent by any peer), so it
    // is refused rather than wrapped.
    if pos > u16::MAX as usize {
        return Err(ContentError::TooLong.into());
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

/// The fewest bytes the REQ optional headers flagged in `fl` take (wire-layouts §A.6): raw
/// address 4 + `addr_len` (at least 32), CQ data 8, connid 4.
#[inline(always)]
fn req_optional_min_len(fl: u16) -> usize {
    let on = |bit: u16| (fl & bit != 0) as usize;
    on(flags::REQ_OPT_RAW_ADDR_HDR) * (4 + RawAddrHdr::MIN_ADDR_LEN as usize)
        + on(flags::REQ_OPT_CQ_DATA_HDR) * 8
        + on(flags::CONNID_HDR) * 4
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
        // "Receivers skip 4 + addr_len taken from the wire." As above, a header that must
        // end past 64 KiB is a content error before it is a length error.
        let rest = req_optional_min_len(fl) - (4 + RawAddrHdr::MIN_ADDR_LEN as usize);
        if pos + 4 + addr_len as usize + rest > u16::MAX as usize {
            return Err(ContentError::TooLong.into());
        }
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

// The §E vectors of the integration tests, for their bytes. The module names types through
// the `tagmatch_wire` dev-dependency (a second build of this crate), so the tests below use
// only the bytes.
#[cfg(test)]
#[path = "../../tests/common/mod.rs"]
mod test_vectors;

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::{QuickCheck, TestResult};

    use super::test_vectors as vectors;

    /// The per-type path and the table path give the same result: the same error, or the
    /// same shape (layout row, header ends, optional-header and field offsets).
    fn agree(b: &[u8]) -> core::result::Result<(), String> {
        let fast = check_fast(b);
        let table = check_table(b);
        if fast != table {
            return Err(format!("{b:02x?}: fast {fast:?} != table {table:?}"));
        }
        agree_as(b, &table)
    }

    /// `new_checked_as` for the packet's own type and two others (a REQ and a control
    /// type): the table's shape when the type is the packet's, `WrongType` for a valid
    /// packet of another type, the table's error otherwise.
    fn agree_as(b: &[u8], table: &Result<Shape>) -> core::result::Result<(), String> {
        let own = b.first().and_then(|&t| PacketType::from_id(t).ok());
        let others = [PacketType::EagerTagRtm, PacketType::Cts];
        for ty in own.into_iter().chain(others) {
            let got = match accept_as(b, ty) {
                Some(s) => Ok(s),
                None => check_as(b, ty),
            };
            let want = match table {
                Ok(s) if s.layout.pkt_type == ty => Ok(*s),
                Ok(s) => Err(Error::Content(ContentError::WrongType {
                    expected: ty.name(),
                    found: s.layout.pkt_type.id(),
                })),
                Err(e) => Err(*e),
            };
            if got != want {
                return Err(format!("{b:02x?} as {}: {got:?} != {want:?}", ty.name()));
            }
        }
        Ok(())
    }

    /// Every prefix of `b`, and `b` itself.
    fn agree_every_cut(b: &[u8]) -> core::result::Result<(), String> {
        (0..=b.len()).try_for_each(|cut| agree(&b[..cut]))
    }

    #[test]
    fn fast_path_agrees_on_every_truncation_of_the_vectors() {
        let vs = vectors::efa_vectors();
        assert!(vs.len() > 20);
        let mut accepted = 0;
        for v in vs {
            agree_every_cut(&v.bytes).unwrap_or_else(|e| panic!("{}: {e}", v.name));
            accepted += check_fast(&v.bytes).is_ok() as usize;
        }
        // Not a vacuous agreement: the vectors are valid packets.
        assert!(accepted > 20);
    }

    /// Every type ID (wire or not), versions 3 and 4, every combination of the flags that
    /// shape a REQ or control header (raw address, CQ data, connid) with and without
    /// unrelated bits, an `addr_len` at every 8-byte offset in and out of its range, every
    /// length up to past the largest header.
    #[test]
    fn fast_path_agrees_on_every_type_flag_and_length() {
        let shaping = [
            flags::REQ_OPT_RAW_ADDR_HDR,
            flags::REQ_OPT_CQ_DATA_HDR,
            flags::CONNID_HDR,
        ];
        let mut accepted = [0usize; 256];
        for ty in 0..=255u8 {
            for version in [3u8, 4] {
                for combo in 0..8 {
                    let base: u16 = (0..3)
                        .filter(|i| combo & (1 << i) != 0)
                        .map(|i| shaping[i])
                        .sum();
                    for extra in [0, flags::REQ_MSG | flags::REQ_READ_NACK | 0x0100] {
                        for addr_len in [0u32, 31, 32, 36, 64, 65, u32::MAX] {
                            let fl = base | extra;
                            let mut b = Vec::from([ty, version]);
                            b.extend_from_slice(&fl.to_le_bytes());
                            // msg_id / counts at 4 stay small so RTW/RTA/HANDSHAKE headers
                            // are reachable; addr_len at 8, 16, ..., 64.
                            b.extend_from_slice(&3u32.to_le_bytes());
                            while b.len() < 120 {
                                let word = if b.len() % 8 == 0 { addr_len } else { 0 };
                                b.extend_from_slice(&word.to_le_bytes());
                            }
                            agree_every_cut(&b).unwrap();
                            accepted[ty as usize] += check_fast(&b).is_ok() as usize;
                        }
                    }
                }
            }
        }
        // Every wire type was accepted at least once, so each fast arm was compared on
        // packets it accepts, not only on rejections.
        for &t in PacketType::ALL {
            assert!(accepted[t as usize] > 0, "{} never accepted", t.name());
        }
    }

    /// The fields the view loads at check time stay equal to the bytes after the view
    /// rewrites them: for every vector with a msg_id, tag or connid, the rewritten view
    /// reads what a fresh check of the rewritten bytes reads.
    #[test]
    fn rewritten_fields_read_back_through_the_view() {
        let mut rewritten = 0;
        for v in vectors::efa_vectors() {
            let mut bytes = v.bytes.clone();
            let Ok(mut p) = Packet::new_checked(&mut bytes[..]) else {
                continue;
            };
            let had = (p.msg_id(), p.tag(), p.connid());
            if p.msg_id().is_some() {
                p.set(Field::MsgId, 0x0BAD_F00D).unwrap();
                assert_eq!(p.msg_id(), Some(0x0BAD_F00D), "{}", v.name);
            }
            if p.tag().is_some() {
                p.set(Field::Tag, 0x0123_4567_89AB_CDEF).unwrap();
                assert_eq!(p.tag(), Some(0x0123_4567_89AB_CDEF), "{}", v.name);
            }
            if p.connid().is_some() {
                p.set_connid(0x7E57).unwrap();
                assert_eq!(p.connid(), Some(0x7E57), "{}", v.name);
            } else {
                assert!(p.set_connid(1).is_err(), "{}", v.name);
                assert_eq!(p.connid(), None, "{}", v.name);
            }
            let seen = (p.msg_id(), p.tag(), p.connid(), p.sender_connid());
            let fresh = Packet::new_checked(p.into_inner()).unwrap();
            let again = (
                fresh.msg_id(),
                fresh.tag(),
                fresh.connid(),
                fresh.sender_connid(),
            );
            assert_eq!(seen, again, "{}", v.name);
            rewritten += (had != (seen.0, seen.1, seen.2)) as usize;
        }
        assert!(rewritten > 20);
    }

    fn arbitrary_agree(ty: u8, version: u8, fl: u16, body: Vec<u8>) -> TestResult {
        let ids: Vec<u8> = PacketType::ALL.iter().map(|t| *t as u8).collect();
        // Mostly wire types and versions ≥ 4, so that the fast paths are reached.
        let ty = if ty % 8 == 0 {
            ty
        } else {
            ids[ty as usize % ids.len()]
        };
        let version = if version % 8 == 0 { version } else { 4 };
        let mut b = Vec::from([ty, version]);
        b.extend_from_slice(&fl.to_le_bytes());
        b.extend_from_slice(&body);
        match agree_every_cut(&b) {
            Ok(()) => TestResult::passed(),
            Err(e) => TestResult::error(e),
        }
    }

    #[test]
    fn fast_path_agrees_on_arbitrary_bytes() {
        QuickCheck::new()
            .tests(2000)
            .quickcheck(arbitrary_agree as fn(u8, u8, u16, Vec<u8>) -> TestResult);
    }
}

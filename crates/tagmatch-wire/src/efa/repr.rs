//! The owned representation of an EFA packet: parse from a checked [`Packet`], emit into a
//! caller buffer.

use bitvec::array::BitArray;
use bitvec::order::Lsb0;

use super::layout::{ConnidPlace, Field, Width};
use super::packet::MAX_IOV_COUNT;
use super::{extra, flags, Packet, PacketType, RawAddrHdr, RmaIov, PROTOCOL_VERSION};
use super::{BASE_HDR_LEN, RMA_IOV_LEN};
use crate::bytes::{put_le16, put_le32, put_le64};
use crate::error::{ContentError, Error, Part, Result};

/// Values of the fixed header fields, indexed by [`Field`]. Only the fields of the packet
/// type's [`Layout`](super::Layout) are meaningful; the others stay 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Fields([u64; Field::COUNT]);

impl Fields {
    /// The value of `field` (0 if never set).
    #[inline]
    pub fn get(&self, field: Field) -> u64 {
        self.0[field as usize]
    }

    /// Sets `field`.
    #[inline]
    pub fn set(&mut self, field: Field, value: u64) {
        self.0[field as usize] = value;
    }

    /// Builder form of [`Fields::set`].
    #[must_use]
    pub fn with(mut self, field: Field, value: u64) -> Self {
        self.set(field, value);
        self
    }
}

/// The HANDSHAKE `extra_info` array as a bit set (wire-layouts §A.4): `words` u64 words on
/// the wire (`nextra_p3 - 3`), at most [`extra::MAX_WORDS`].
#[derive(Debug, Clone, Copy)]
pub struct ExtraInfo {
    words: u8,
    bits: BitArray<[u64; extra::MAX_WORDS], Lsb0>,
}

// Compared and hashed as plain words: bitvec's bit-wise `PartialEq` costs hundreds of
// instructions, and this type sits in every `Repr`.
impl PartialEq for ExtraInfo {
    fn eq(&self, other: &Self) -> bool {
        self.words == other.words && self.bits.data == other.bits.data
    }
}

impl Eq for ExtraInfo {}

impl core::hash::Hash for ExtraInfo {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.words.hash(state);
        self.bits.data.hash(state);
    }
}

impl Default for ExtraInfo {
    /// One word, no bits: what libfabric sends (`nextra_p3` = 4).
    fn default() -> Self {
        ExtraInfo::with_words(1)
    }
}

impl ExtraInfo {
    /// An empty set sent as `words` u64 words (clamped to [`extra::MAX_WORDS`]).
    pub fn with_words(words: usize) -> Self {
        ExtraInfo {
            words: words.min(extra::MAX_WORDS) as u8,
            bits: BitArray::ZERO,
        }
    }

    /// Number of u64 words on the wire.
    pub fn words(&self) -> usize {
        self.words as usize
    }

    /// Word `i` (0 beyond the stored words).
    pub fn word(&self, i: usize) -> u64 {
        self.bits.data.get(i).copied().unwrap_or(0)
    }

    /// Sets word `i`; ignored beyond [`extra::MAX_WORDS`].
    pub fn set_word(&mut self, i: usize, value: u64) {
        if let Some(w) = self.bits.data.get_mut(i) {
            *w = value;
        }
    }

    /// Whether feature/request bit `bit` is set (see [`extra`]). (Inlined: asked several
    /// times per packet sent, see `tagmatch_rdm`'s `req_opts`.)
    #[inline]
    pub fn has(&self, bit: usize) -> bool {
        self.bits.get(bit).map(|b| *b).unwrap_or(false)
    }

    /// Sets or clears feature/request bit `bit`, growing the word count to hold it.
    /// Bits at or beyond `64 * MAX_WORDS` are ignored.
    pub fn set(&mut self, bit: usize, on: bool) {
        if bit < 64 * extra::MAX_WORDS {
            self.bits.set(bit, on);
            if on {
                self.words = self.words.max((bit / 64 + 1) as u8);
            }
        }
    }

    /// Iterates over the set bits.
    pub fn iter_ones(&self) -> impl Iterator<Item = usize> + '_ {
        self.bits.iter_ones()
    }

    fn bits_beyond_words(&self) -> bool {
        (self.words()..extra::MAX_WORDS).any(|i| self.word(i) != 0)
    }
}

/// HANDSHAKE USER_RECV_QP optional header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct UserRecvQp {
    /// QP number.
    pub qpn: u32,
    /// QP key.
    pub qkey: u32,
}

/// The HANDSHAKE-only parts of a packet (efa-rdm-protocol-v4 §2.1, wire-layouts §A.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HandshakeExt {
    /// Extra features and requests.
    pub extra_info: ExtraInfo,
    /// HOST_ID optional header.
    pub host_id: Option<u64>,
    /// DEVICE_VERSION optional header. libfabric reads it without checking the flag
    /// (wire-layouts §A.5 ⚠): always send it.
    pub device_version: Option<u32>,
    /// USER_RECV_QP optional header (legacy).
    pub user_recv_qp: Option<UserRecvQp>,
    /// HMEM_P2P optional header (`p2p_supported`).
    pub hmem_p2p: Option<u8>,
}

/// An EFA RDM v4 packet as plain values.
///
/// `flags` holds every flag bit except those derived from the optional parts, which
/// [`Repr::emit`] sets from them: `CONNID_HDR` from `connid`; for REQ types
/// `REQ_OPT_RAW_ADDR_HDR` and `REQ_OPT_CQ_DATA_HDR` from `raw_addr` and `cq_data`; for
/// HANDSHAKE the optional-header bits from `handshake`. Unknown bits are kept.
/// `rma_iov_count` and `nextra_p3` are likewise derived from `rma_iov` and `handshake`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// Packet type.
    pub pkt_type: PacketType,
    /// Protocol version (4 when sent by us; ≥ 4 when parsed).
    pub version: u8,
    /// Flags other than the derived ones.
    pub flags: u16,
    /// The fixed fields of the type's layout.
    pub fields: Fields,
    /// The connid header (wherever the type carries it).
    pub connid: Option<u32>,
    /// REQ raw-address header.
    pub raw_addr: Option<RawAddrHdr>,
    /// REQ CQ-data header.
    pub cq_data: Option<u64>,
    /// `rma_iov[]` of RTW/RTR/RTA types.
    pub rma_iov: &'a [RmaIov],
    /// HANDSHAKE parts.
    pub handshake: HandshakeExt,
    /// Everything after the headers (for LONGREAD/RUNTREAD this includes `read_iov[]`).
    pub payload: &'a [u8],
}

impl PacketType {
    /// The flag bits libfabric always sets on this type (wire-layouts §A.3): `REQ_MSG` on
    /// every RTM, plus `REQ_TAGGED` on tagged ones, `REQ_ATOMIC` on RTAs.
    pub fn default_flags(self) -> u16 {
        use PacketType::*;
        match self {
            EagerMsgRtm | MediumMsgRtm | LongctsMsgRtm | LongreadMsgRtm | DcEagerMsgRtm
            | DcMediumMsgRtm | DcLongctsMsgRtm | RuntreadMsgRtm => flags::REQ_MSG,
            EagerTagRtm | MediumTagRtm | LongctsTagRtm | LongreadTagRtm | DcEagerTagRtm
            | DcMediumTagRtm | DcLongctsTagRtm | RuntreadTagRtm => {
                flags::REQ_MSG | flags::REQ_TAGGED
            }
            WriteRta | FetchRta | CompareRta | DcWriteRta => flags::REQ_ATOMIC,
            _ => 0,
        }
    }

    /// The flag bits a [`Repr`] derives from its optional parts for this type.
    pub fn derived_flags(self) -> u16 {
        match self.layout().connid {
            ConnidPlace::ReqOptional => {
                flags::CONNID_HDR | flags::REQ_OPT_RAW_ADDR_HDR | flags::REQ_OPT_CQ_DATA_HDR
            }
            ConnidPlace::Handshake => {
                flags::CONNID_HDR
                    | flags::HANDSHAKE_HOST_ID_HDR
                    | flags::HANDSHAKE_DEVICE_VERSION_HDR
                    | flags::HANDSHAKE_USER_RECV_QP_HDR
                    | flags::HANDSHAKE_HMEM_P2P_HDR
            }
            _ => flags::CONNID_HDR,
        }
    }
}

impl HandshakeExt {
    /// Whether nothing is set beyond the default (what every non-HANDSHAKE packet has).
    pub fn is_empty(&self) -> bool {
        self.host_id.is_none()
            && self.device_version.is_none()
            && self.user_recv_qp.is_none()
            && self.hmem_p2p.is_none()
            && self.extra_info == ExtraInfo::default()
    }
}

impl<'a> Repr<'a> {
    /// A packet of type `pkt_type` with version 4, the type's default flags, every field
    /// zero and no optional part.
    pub fn new(pkt_type: PacketType) -> Repr<'static> {
        Repr {
            pkt_type,
            version: PROTOCOL_VERSION,
            flags: pkt_type.default_flags(),
            fields: Fields::default(),
            connid: None,
            raw_addr: None,
            cq_data: None,
            rma_iov: &[],
            handshake: HandshakeExt::default(),
            payload: &[],
        }
    }

    /// Builder: sets a fixed field.
    #[must_use]
    pub fn with(mut self, field: Field, value: u64) -> Self {
        self.fields.set(field, value);
        self
    }

    /// The value of a fixed field, `None` if the type has no such field. Derived counts
    /// (`rma_iov_count`, `nextra_p3`) are computed.
    pub fn get(&self, field: Field) -> Option<u64> {
        if !self.pkt_type.layout().has(field) {
            return None;
        }
        Some(match field {
            Field::RmaIovCount => self.rma_iov.len() as u64,
            Field::NextraP3 => self.handshake.extra_info.words() as u64 + 3,
            f => self.fields.get(f),
        })
    }

    /// Reads a checked packet; the slices borrow from the packet's buffer.
    pub fn parse(packet: &Packet<&'a [u8]>) -> Repr<'a> {
        let layout = packet.layout();
        let ty = layout.pkt_type;
        let mut fields = Fields::default();
        let b: &'a [u8] = packet.buffer();
        for at in layout.fields {
            fields.set(
                at.field,
                match at.width {
                    Width::U32 => crate::bytes::le32(b, at.offset as usize) as u64,
                    Width::U64 => crate::bytes::le64(b, at.offset as usize),
                },
            );
        }
        // Derived counts are not stored.
        fields.set(Field::RmaIovCount, 0);
        fields.set(Field::NextraP3, 0);
        let handshake = if ty == PacketType::Handshake {
            HandshakeExt {
                extra_info: packet.extra_info().unwrap_or_default(),
                host_id: packet.host_id(),
                device_version: packet.device_version(),
                user_recv_qp: packet.user_recv_qp(),
                hmem_p2p: packet.hmem_p2p(),
            }
        } else {
            HandshakeExt::default()
        };
        Repr {
            pkt_type: ty,
            version: packet.version(),
            flags: packet.flags() & !ty.derived_flags(),
            fields,
            connid: packet.connid(),
            raw_addr: packet.raw_addr(),
            cq_data: packet.cq_data(),
            rma_iov: packet.rma_iov_slice(),
            handshake,
            payload: packet.payload_slice(),
        }
    }

    /// Checks `bytes` and reads the packet in one step.
    pub fn parse_bytes(bytes: &'a [u8]) -> Result<Repr<'a>> {
        Ok(Repr::parse(&Packet::new_checked(bytes)?))
    }

    /// The flags as they go on the wire: [`Repr::flags`] plus the derived bits.
    pub fn wire_flags(&self) -> u16 {
        let mut f = self.flags & !self.pkt_type.derived_flags();
        if self.connid.is_some() {
            f |= flags::CONNID_HDR;
        }
        if self.raw_addr.is_some() {
            f |= flags::REQ_OPT_RAW_ADDR_HDR;
        }
        if self.cq_data.is_some() {
            f |= flags::REQ_OPT_CQ_DATA_HDR;
        }
        if self.pkt_type == PacketType::Handshake {
            let h = &self.handshake;
            if h.host_id.is_some() {
                f |= flags::HANDSHAKE_HOST_ID_HDR;
            }
            if h.device_version.is_some() {
                f |= flags::HANDSHAKE_DEVICE_VERSION_HDR;
            }
            if h.user_recv_qp.is_some() {
                f |= flags::HANDSHAKE_USER_RECV_QP_HDR;
            }
            if h.hmem_p2p.is_some() {
                f |= flags::HANDSHAKE_HMEM_P2P_HDR;
            }
        }
        f
    }

    /// Length of all headers when emitted.
    pub fn header_len(&self) -> usize {
        let layout = self.pkt_type.layout();
        let mut n = layout.size as usize + self.rma_iov.len().saturating_mul(RMA_IOV_LEN);
        match layout.connid {
            ConnidPlace::Fixed(_) => {}
            ConnidPlace::CtsDataTrailer => n += 8 * self.connid.is_some() as usize,
            ConnidPlace::Handshake => {
                let h = &self.handshake;
                n += 8 * h.extra_info.words();
                n += 8
                    * (self.connid.is_some() as usize
                        + h.host_id.is_some() as usize
                        + h.device_version.is_some() as usize
                        + h.user_recv_qp.is_some() as usize
                        + h.hmem_p2p.is_some() as usize);
            }
            ConnidPlace::ReqOptional => {
                n += self.raw_addr.map(|r| r.wire_len()).unwrap_or(0);
                n += 8 * self.cq_data.is_some() as usize;
                n += 4 * self.connid.is_some() as usize;
            }
        }
        n
    }

    /// Emits into a new vector of exactly [`Repr::buffer_len`] bytes.
    #[cfg(feature = "alloc")]
    pub fn to_vec(&self) -> Result<alloc::vec::Vec<u8>> {
        let mut v = alloc::vec![0u8; self.buffer_len()];
        self.emit(&mut v)?;
        Ok(v)
    }

    /// Exact length [`Repr::emit`] writes: headers plus payload.
    pub fn buffer_len(&self) -> usize {
        self.header_len().saturating_add(self.payload.len())
    }

    /// Checks that the representation can be put on the wire.
    pub fn check(&self) -> Result<()> {
        self.checked_header_len().map(|_| ())
    }

    /// [`Repr::check`], returning the header length.
    fn checked_header_len(&self) -> Result<usize> {
        let ty = self.pkt_type;
        let layout = ty.layout();
        let name = ty.name();
        let na = |what| {
            Err(Error::Content(ContentError::NotApplicable {
                what,
                packet: name,
            }))
        };
        if self.version < PROTOCOL_VERSION {
            return Err(ContentError::UnsupportedVersion(self.version).into());
        }
        // Fields the type does not have must be zero; derived counts are ignored.
        let mut nonzero = 0u32;
        for (i, v) in self.fields.0.iter().enumerate() {
            nonzero |= ((*v != 0) as u32) << i;
        }
        let derived = (1 << Field::RmaIovCount as u32) | (1 << Field::NextraP3 as u32);
        let stray = nonzero & !layout.present_mask() & !derived;
        if stray != 0 {
            return na(Field::ALL[stray.trailing_zeros() as usize % Field::COUNT].name());
        }
        for at in layout.fields {
            let v = self.fields.get(at.field);
            if v > at.width.max() && !at.field.is_derived() {
                return Err(ContentError::FieldOverflow {
                    field: at.field.name(),
                    value: v,
                }
                .into());
            }
        }
        if !layout.rma_iov && !self.rma_iov.is_empty() {
            return na("rma_iov");
        }
        if self.rma_iov.len() > MAX_IOV_COUNT as usize {
            return Err(ContentError::IovCountTooLarge {
                field: "rma_iov_count",
                count: self.rma_iov.len().min(u32::MAX as usize) as u32,
                max: MAX_IOV_COUNT,
            }
            .into());
        }
        let is_req = layout.connid == ConnidPlace::ReqOptional;
        if !is_req && self.raw_addr.is_some() {
            return na("raw_addr");
        }
        if !is_req && self.cq_data.is_some() {
            return na("cq_data");
        }
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
        if ty == PacketType::Handshake {
            if self.handshake.extra_info.bits_beyond_words() {
                return na("extra_info bits beyond nextra_p3");
            }
        } else if !self.handshake.is_empty() {
            return na("handshake headers");
        }
        let header_len = self.header_len();
        if header_len > u16::MAX as usize {
            return Err(ContentError::TooLong.into());
        }
        Ok(header_len)
    }

    /// Writes the packet at the start of `buf` and returns the number of bytes written
    /// ([`Repr::buffer_len`]). Padding and reserved bytes are written as zero. Nothing is
    /// written if the representation is invalid or `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let hdr_len = self.checked_header_len()?;
        let total = hdr_len.saturating_add(self.payload.len());
        if buf.len() < total {
            return Err(Error::len(Part::OutputBuffer, total, buf.len()));
        }
        let layout = self.pkt_type.layout();
        let (hdr, rest) = buf.split_at_mut(hdr_len);
        hdr.fill(0);
        hdr[0] = self.pkt_type.id();
        hdr[1] = self.version;
        put_le16(hdr, 2, self.wire_flags());
        for at in layout.fields {
            let v = match at.field {
                Field::RmaIovCount => self.rma_iov.len() as u64,
                Field::NextraP3 => self.handshake.extra_info.words() as u64 + 3,
                f => self.fields.get(f),
            };
            match at.width {
                Width::U32 => put_le32(hdr, at.offset as usize, v as u32),
                Width::U64 => put_le64(hdr, at.offset as usize, v),
            }
        }
        let mut pos = layout.size as usize;
        let iov_bytes = RmaIov::slice_as_bytes(self.rma_iov);
        if let Some(dst) = hdr.get_mut(pos..pos + iov_bytes.len()) {
            dst.copy_from_slice(iov_bytes);
        }
        pos += iov_bytes.len();
        debug_assert_eq!(BASE_HDR_LEN, 4);
        match layout.connid {
            ConnidPlace::Fixed(o) => {
                if let Some(c) = self.connid {
                    put_le32(hdr, o as usize, c);
                }
            }
            ConnidPlace::CtsDataTrailer => {
                if let Some(c) = self.connid {
                    put_le32(hdr, pos, c);
                }
            }
            ConnidPlace::Handshake => {
                let h = &self.handshake;
                for i in 0..h.extra_info.words() {
                    put_le64(hdr, 8 + 8 * i, h.extra_info.word(i));
                }
                pos = 8 + 8 * h.extra_info.words();
                if let Some(c) = self.connid {
                    put_le32(hdr, pos, c);
                    pos += 8;
                }
                if let Some(v) = h.host_id {
                    put_le64(hdr, pos, v);
                    pos += 8;
                }
                if let Some(v) = h.device_version {
                    put_le32(hdr, pos, v);
                    pos += 8;
                }
                if let Some(q) = h.user_recv_qp {
                    put_le32(hdr, pos, q.qpn);
                    put_le32(hdr, pos + 4, q.qkey);
                    pos += 8;
                }
                if let Some(p) = h.hmem_p2p {
                    hdr[pos] = p;
                }
            }
            ConnidPlace::ReqOptional => {
                if let Some(r) = self.raw_addr {
                    put_le32(hdr, pos, r.addr_len);
                    if let Some(dst) = hdr.get_mut(pos + 4..pos + 4 + super::RawAddr::LEN) {
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
            }
        }
        rest[..self.payload.len()].copy_from_slice(self.payload);
        Ok(total)
    }
}

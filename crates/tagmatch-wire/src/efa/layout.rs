//! One layout row per packet type, read from the C structs of `efa_rdm_protocol.h`
//! (wire-layouts §A.5 for non-REQ types and §A.6 for REQ types).

use super::PacketType;

/// A fixed header field, named as in the C struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Field {
    /// Per-peer message sequence number (REQ RTM/RTA packets, RECEIPT).
    MsgId,
    /// Application tag (the last 8 bytes of every `*_TAGRTM` mandatory header).
    Tag,
    /// Total message length (MEDIUM, LONGCTS, LONGREAD, RUNTREAD, RTW, RTR).
    MsgLength,
    /// Offset of this segment within the message.
    SegOffset,
    /// Length of the data in this packet (CTSDATA, READRSP, ATOMRSP).
    SegLength,
    /// The sender's operation ID.
    SendId,
    /// The receiver's operation ID.
    RecvId,
    /// RECEIPT: the sender's operation ID (the doc calls it `send_id`).
    TxId,
    /// LONGCTS: how many packets the sender asks to be allowed to send.
    CreditRequest,
    /// LONGREAD/RUNTREAD: number of `read_iov` entries at the start of the payload.
    ReadIovCount,
    /// RTW/RTR/RTA: number of `rma_iov` entries ending the mandatory header.
    RmaIovCount,
    /// CTS: bytes the receiver is ready to take; RTR: the length asked for.
    RecvLength,
    /// RUNTREAD: bytes of data carried in runt packets.
    RuntLength,
    /// RTA: `enum fi_datatype`.
    AtomicDatatype,
    /// RTA: `enum fi_op`.
    AtomicOp,
    /// PEER_ERROR: the operation the error refers to.
    OpId,
    /// PEER_ERROR: what `op_id` refers to (0 ope index, 1 msg_id, 2 msg_id skip).
    RefKind,
    /// PEER_ERROR: provider error number.
    ProvErrno,
    /// HANDSHAKE: number of `extra_info` words plus 3.
    NextraP3,
}

impl Field {
    /// Number of fields.
    pub const COUNT: usize = 19;

    /// Every field, in declaration order.
    pub const ALL: [Field; Field::COUNT] = [
        Field::MsgId,
        Field::Tag,
        Field::MsgLength,
        Field::SegOffset,
        Field::SegLength,
        Field::SendId,
        Field::RecvId,
        Field::TxId,
        Field::CreditRequest,
        Field::ReadIovCount,
        Field::RmaIovCount,
        Field::RecvLength,
        Field::RuntLength,
        Field::AtomicDatatype,
        Field::AtomicOp,
        Field::OpId,
        Field::RefKind,
        Field::ProvErrno,
        Field::NextraP3,
    ];

    /// The C field name, which is also the JSON key of `tagmatch decode`.
    pub const fn name(self) -> &'static str {
        match self {
            Field::MsgId => "msg_id",
            Field::Tag => "tag",
            Field::MsgLength => "msg_length",
            Field::SegOffset => "seg_offset",
            Field::SegLength => "seg_length",
            Field::SendId => "send_id",
            Field::RecvId => "recv_id",
            Field::TxId => "tx_id",
            Field::CreditRequest => "credit_request",
            Field::ReadIovCount => "read_iov_count",
            Field::RmaIovCount => "rma_iov_count",
            Field::RecvLength => "recv_length",
            Field::RuntLength => "runt_length",
            Field::AtomicDatatype => "atomic_datatype",
            Field::AtomicOp => "atomic_op",
            Field::OpId => "op_id",
            Field::RefKind => "ref_kind",
            Field::ProvErrno => "prov_errno",
            Field::NextraP3 => "nextra_p3",
        }
    }

    /// Looks a field up by its C name.
    pub fn from_name(name: &str) -> Option<Field> {
        Field::ALL.iter().copied().find(|f| f.name() == name)
    }

    /// The width `field` has in every layout that has it, or `None` for `recv_length`,
    /// the one field whose width depends on the type (u64 in CTS, u32 in the RTRs).
    pub(crate) const fn fixed_width(self) -> Option<Width> {
        match self {
            Field::Tag
            | Field::MsgLength
            | Field::SegOffset
            | Field::SegLength
            | Field::RuntLength => Some(Width::U64),
            Field::RecvLength => None,
            _ => Some(Width::U32),
        }
    }

    /// Fields whose value is derived from the representation rather than stored in
    /// [`Fields`](super::Fields): `rma_iov_count` from the `rma_iov` slice and `nextra_p3`
    /// from the `extra_info` word count.
    pub const fn is_derived(self) -> bool {
        matches!(self, Field::RmaIovCount | Field::NextraP3)
    }
}

/// Width of a field on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Width {
    /// 4 bytes, little-endian.
    U32,
    /// 8 bytes, little-endian.
    U64,
}

impl Width {
    /// Bytes on the wire.
    pub const fn bytes(self) -> usize {
        match self {
            Width::U32 => 4,
            Width::U64 => 8,
        }
    }

    /// Largest value that fits.
    pub const fn max(self) -> u64 {
        match self {
            Width::U32 => u32::MAX as u64,
            Width::U64 => u64::MAX,
        }
    }
}

/// A field at a byte offset in the mandatory header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FieldAt {
    /// Which field.
    pub field: Field,
    /// Byte offset from the start of the packet.
    pub offset: u8,
    /// Width on the wire.
    pub width: Width,
}

/// Where a packet type carries the sender's connid (wire-layouts §A.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnidPlace {
    /// At a fixed offset of the mandatory header (padding when `CONNID_HDR` is clear).
    Fixed(u8),
    /// CTSDATA: an 8-byte optional header right after the mandatory header.
    CtsDataTrailer,
    /// HANDSHAKE: the first optional header after `extra_info`, 8 bytes.
    Handshake,
    /// REQ: the 4-byte connid optional header after raw address and CQ data.
    ReqOptional,
}

/// What the bytes after the headers hold (wire-layouts §A.6 "Where the payload starts").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadKind {
    /// Application data (or nothing, for header-only packets).
    Data,
    /// LONGREAD_*RTM / LONGREAD_RTW: `read_iov[read_iov_count]`.
    ReadIov,
    /// RUNTREAD_*RTM: `read_iov[read_iov_count]` followed by runt data.
    ReadIovRunt,
    /// COMPARE_RTA: the `buf` data followed by the `compare` data, equal halves.
    BufCompare,
}

/// The layout of one packet type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    /// The packet type.
    pub pkt_type: PacketType,
    /// `sizeof` the mandatory header, without any `rma_iov` entry.
    pub size: u8,
    /// Fixed fields in offset order.
    pub fields: &'static [FieldAt],
    /// Where connid goes.
    pub connid: ConnidPlace,
    /// Whether the mandatory header ends with `rma_iov[rma_iov_count]`.
    pub rma_iov: bool,
    /// What the payload holds.
    pub payload: PayloadKind,
    /// Offset of each field by [`Field`] index, 0 when absent (no field starts at 0: the
    /// base header is there), so a field lookup is one load.
    offsets: [u8; Field::COUNT],
    /// Bit `f` set when field `f` is 8 bytes wide.
    wide: u32,
    /// Bit `f` set when the layout has field `f`.
    present: u32,
}

impl Layout {
    const fn new(
        pkt_type: PacketType,
        size: u8,
        fields: &'static [FieldAt],
        connid: ConnidPlace,
        rma_iov: bool,
        payload: PayloadKind,
    ) -> Layout {
        let mut offsets = [0u8; Field::COUNT];
        let mut wide = 0u32;
        let mut present = 0u32;
        let mut i = 0;
        while i < fields.len() {
            offsets[fields[i].field as usize] = fields[i].offset;
            present |= 1 << fields[i].field as u32;
            if let Width::U64 = fields[i].width {
                wide |= 1 << fields[i].field as u32;
            }
            i += 1;
        }
        Layout {
            pkt_type,
            size,
            fields,
            connid,
            rma_iov,
            payload,
            offsets,
            wide,
            present,
        }
    }

    /// Offset of `field`, or 0 when the layout has no such field.
    #[inline(always)]
    pub(crate) fn offset(&self, field: Field) -> usize {
        self.offsets[field as usize] as usize
    }

    /// Bit `f` set for each field `f` the layout has.
    #[inline]
    pub(crate) fn present_mask(&self) -> u32 {
        self.present
    }

    /// Whether `field` is 8 bytes wide in this layout.
    #[inline]
    pub(crate) fn is_wide(&self, field: Field) -> bool {
        self.wide & (1 << field as u32) != 0
    }

    /// Whether the layout has `field`.
    #[inline]
    pub fn has(&self, field: Field) -> bool {
        self.offsets[field as usize] != 0
    }

    /// The offset and width of `field`, if the layout has it.
    #[inline]
    pub fn find(&self, field: Field) -> Option<FieldAt> {
        let offset = self.offsets[field as usize];
        (offset != 0).then_some(FieldAt {
            field,
            offset,
            width: if self.wide & (1 << field as u32) != 0 {
                Width::U64
            } else {
                Width::U32
            },
        })
    }
}

const fn u32_at(field: Field, offset: u8) -> FieldAt {
    FieldAt {
        field,
        offset,
        width: Width::U32,
    }
}

const fn u64_at(field: Field, offset: u8) -> FieldAt {
    FieldAt {
        field,
        offset,
        width: Width::U64,
    }
}

use Field::*;

const fn ctrl(pkt_type: PacketType, size: u8, fields: &'static [FieldAt], c: u8) -> Layout {
    Layout::new(
        pkt_type,
        size,
        fields,
        ConnidPlace::Fixed(c),
        false,
        PayloadKind::Data,
    )
}

const fn req(
    pkt_type: PacketType,
    size: u8,
    fields: &'static [FieldAt],
    rma_iov: bool,
    payload: PayloadKind,
) -> Layout {
    Layout::new(
        pkt_type,
        size,
        fields,
        ConnidPlace::ReqOptional,
        rma_iov,
        payload,
    )
}

// wire-layouts §A.5: CTS (3), 24 bytes: 0 base; 4 connid/padding; 8 send_id; 12 recv_id;
// 16 recv_length u64.
pub(super) static CTS: Layout = ctrl(
    PacketType::Cts,
    24,
    &[
        u32_at(SendId, 8),
        u32_at(RecvId, 12),
        u64_at(RecvLength, 16),
    ],
    4,
);
// wire-layouts §A.5: CTSDATA (4), 24 bytes: 0 base; 4 recv_id; 8 seg_length u64;
// 16 seg_offset u64; with CONNID_HDR an 8-byte connid header follows at 24.
pub(super) static CTSDATA: Layout = Layout::new(
    PacketType::CtsData,
    24,
    &[
        u32_at(RecvId, 4),
        u64_at(SegLength, 8),
        u64_at(SegOffset, 16),
    ],
    ConnidPlace::CtsDataTrailer,
    false,
    PayloadKind::Data,
);
// wire-layouts §A.5 / §D.6: READRSP (5): 4 connid; 8 recv_id; 12 send_id; 16 seg_length.
pub(super) static READRSP: Layout = ctrl(
    PacketType::ReadRsp,
    24,
    &[u32_at(RecvId, 8), u32_at(SendId, 12), u64_at(SegLength, 16)],
    4,
);
// wire-layouts §A.5: EOR (7), 16 bytes: 4 send_id; 8 recv_id; 12 connid.
pub(super) static EOR: Layout = ctrl(
    PacketType::Eor,
    16,
    &[u32_at(SendId, 4), u32_at(RecvId, 8)],
    12,
);
// wire-layouts §A.5: ATOMRSP (8), 24 bytes: 4 connid; 8 reserved; 12 recv_id; 16 seg_length.
pub(super) static ATOMRSP: Layout = ctrl(
    PacketType::AtomRsp,
    24,
    &[u32_at(RecvId, 12), u64_at(SegLength, 16)],
    4,
);
// wire-layouts §A.5: HANDSHAKE (9): 4 nextra_p3 u32; 8 extra_info[nextra_p3 - 3] u64.
pub(super) static HANDSHAKE: Layout = Layout::new(
    PacketType::Handshake,
    8,
    &[u32_at(NextraP3, 4)],
    ConnidPlace::Handshake,
    false,
    PayloadKind::Data,
);
// wire-layouts §A.5: RECEIPT (10), 16 bytes: 4 tx_id; 8 msg_id; 12 connid.
pub(super) static RECEIPT: Layout = ctrl(
    PacketType::Receipt,
    16,
    &[u32_at(TxId, 4), u32_at(MsgId, 8)],
    12,
);
// wire-layouts §A.5: READ_NACK (11): same layout as EOR.
pub(super) static READ_NACK: Layout = ctrl(
    PacketType::ReadNack,
    16,
    &[u32_at(SendId, 4), u32_at(RecvId, 8)],
    12,
);
// wire-layouts §A.5: PEER_ERROR (12), 20 bytes: 4 op_id; 8 ref_kind; 12 prov_errno;
// 16 connid.
pub(super) static PEER_ERROR: Layout = ctrl(
    PacketType::PeerError,
    20,
    &[u32_at(OpId, 4), u32_at(RefKind, 8), u32_at(ProvErrno, 12)],
    16,
);

// wire-layouts §A.6, mandatory REQ headers. "The tag is always the last 8 bytes of the
// mandatory header."
// EAGER_MSG/TAG (64/65): 4 msg_id; [8 tag].
pub(super) static EAGER_MSGRTM: Layout = req(
    PacketType::EagerMsgRtm,
    8,
    &[u32_at(MsgId, 4)],
    false,
    PayloadKind::Data,
);
pub(super) static EAGER_TAGRTM: Layout = req(
    PacketType::EagerTagRtm,
    16,
    &[u32_at(MsgId, 4), u64_at(Tag, 8)],
    false,
    PayloadKind::Data,
);
// MEDIUM (66/67): 4 msg_id; 8 msg_length (total message length, §D.5); 16 seg_offset; [24 tag].
pub(super) static MEDIUM_MSGRTM: Layout = req(
    PacketType::MediumMsgRtm,
    24,
    &[
        u32_at(MsgId, 4),
        u64_at(MsgLength, 8),
        u64_at(SegOffset, 16),
    ],
    false,
    PayloadKind::Data,
);
pub(super) static MEDIUM_TAGRTM: Layout = req(
    PacketType::MediumTagRtm,
    32,
    &[
        u32_at(MsgId, 4),
        u64_at(MsgLength, 8),
        u64_at(SegOffset, 16),
        u64_at(Tag, 24),
    ],
    false,
    PayloadKind::Data,
);
// LONGCTS, DC_LONGCTS (68/69, 137/138): 4 msg_id; 8 msg_length; 16 send_id;
// 20 credit_request; [24 tag].
const LONGCTS_MSG_FIELDS: &[FieldAt] = &[
    u32_at(MsgId, 4),
    u64_at(MsgLength, 8),
    u32_at(SendId, 16),
    u32_at(CreditRequest, 20),
];
const LONGCTS_TAG_FIELDS: &[FieldAt] = &[
    u32_at(MsgId, 4),
    u64_at(MsgLength, 8),
    u32_at(SendId, 16),
    u32_at(CreditRequest, 20),
    u64_at(Tag, 24),
];
pub(super) static LONGCTS_MSGRTM: Layout = req(
    PacketType::LongctsMsgRtm,
    24,
    LONGCTS_MSG_FIELDS,
    false,
    PayloadKind::Data,
);
pub(super) static LONGCTS_TAGRTM: Layout = req(
    PacketType::LongctsTagRtm,
    32,
    LONGCTS_TAG_FIELDS,
    false,
    PayloadKind::Data,
);
pub(super) static DC_LONGCTS_MSGRTM: Layout = req(
    PacketType::DcLongctsMsgRtm,
    24,
    LONGCTS_MSG_FIELDS,
    false,
    PayloadKind::Data,
);
pub(super) static DC_LONGCTS_TAGRTM: Layout = req(
    PacketType::DcLongctsTagRtm,
    32,
    LONGCTS_TAG_FIELDS,
    false,
    PayloadKind::Data,
);
// EAGER_RTW (70): 4 rma_iov_count; 8 rma_iov[].
pub(super) static EAGER_RTW: Layout = req(
    PacketType::EagerRtw,
    8,
    &[u32_at(RmaIovCount, 4)],
    true,
    PayloadKind::Data,
);
// LONGCTS_RTW, DC_LONGCTS_RTW (71, 140): 4 rma_iov_count; 8 msg_length; 16 send_id;
// 20 credit_request; 24 rma_iov[].
const LONGCTS_RTW_FIELDS: &[FieldAt] = &[
    u32_at(RmaIovCount, 4),
    u64_at(MsgLength, 8),
    u32_at(SendId, 16),
    u32_at(CreditRequest, 20),
];
pub(super) static LONGCTS_RTW: Layout = req(
    PacketType::LongctsRtw,
    24,
    LONGCTS_RTW_FIELDS,
    true,
    PayloadKind::Data,
);
pub(super) static DC_LONGCTS_RTW: Layout = req(
    PacketType::DcLongctsRtw,
    24,
    LONGCTS_RTW_FIELDS,
    true,
    PayloadKind::Data,
);
// SHORT_RTR / LONGCTS_RTR (72/73): 4 rma_iov_count; 8 msg_length; 16 recv_id;
// 20 recv_length u32 (the doc's "padding", §D.7); 24 rma_iov[].
const RTR_FIELDS: &[FieldAt] = &[
    u32_at(RmaIovCount, 4),
    u64_at(MsgLength, 8),
    u32_at(RecvId, 16),
    u32_at(RecvLength, 20),
];
pub(super) static SHORT_RTR: Layout = req(
    PacketType::ShortRtr,
    24,
    RTR_FIELDS,
    true,
    PayloadKind::Data,
);
pub(super) static LONGCTS_RTR: Layout = req(
    PacketType::LongctsRtr,
    24,
    RTR_FIELDS,
    true,
    PayloadKind::Data,
);
// WRITE/FETCH/COMPARE/DC_WRITE RTA (74/75/76/141): 4 msg_id; 8 rma_iov_count;
// 12 atomic_datatype; 16 atomic_op; 20 padding (WRITE) / recv_id (FETCH, COMPARE) /
// send_id (DC_WRITE); 24 rma_iov[].
pub(super) static WRITE_RTA: Layout = req(
    PacketType::WriteRta,
    24,
    &[
        u32_at(MsgId, 4),
        u32_at(RmaIovCount, 8),
        u32_at(AtomicDatatype, 12),
        u32_at(AtomicOp, 16),
    ],
    true,
    PayloadKind::Data,
);
const RTA_RECV_FIELDS: &[FieldAt] = &[
    u32_at(MsgId, 4),
    u32_at(RmaIovCount, 8),
    u32_at(AtomicDatatype, 12),
    u32_at(AtomicOp, 16),
    u32_at(RecvId, 20),
];
pub(super) static FETCH_RTA: Layout = req(
    PacketType::FetchRta,
    24,
    RTA_RECV_FIELDS,
    true,
    PayloadKind::Data,
);
pub(super) static COMPARE_RTA: Layout = req(
    PacketType::CompareRta,
    24,
    RTA_RECV_FIELDS,
    true,
    PayloadKind::BufCompare,
);
pub(super) static DC_WRITE_RTA: Layout = req(
    PacketType::DcWriteRta,
    24,
    &[
        u32_at(MsgId, 4),
        u32_at(RmaIovCount, 8),
        u32_at(AtomicDatatype, 12),
        u32_at(AtomicOp, 16),
        u32_at(SendId, 20),
    ],
    true,
    PayloadKind::Data,
);
// LONGREAD (128/129): 4 msg_id; 8 msg_length; 16 send_id; 20 read_iov_count; [24 tag].
pub(super) static LONGREAD_MSGRTM: Layout = req(
    PacketType::LongreadMsgRtm,
    24,
    &[
        u32_at(MsgId, 4),
        u64_at(MsgLength, 8),
        u32_at(SendId, 16),
        u32_at(ReadIovCount, 20),
    ],
    false,
    PayloadKind::ReadIov,
);
pub(super) static LONGREAD_TAGRTM: Layout = req(
    PacketType::LongreadTagRtm,
    32,
    &[
        u32_at(MsgId, 4),
        u64_at(MsgLength, 8),
        u32_at(SendId, 16),
        u32_at(ReadIovCount, 20),
        u64_at(Tag, 24),
    ],
    false,
    PayloadKind::ReadIov,
);
// LONGREAD_RTW (130): 4 rma_iov_count; 8 msg_length; 16 send_id; 20 read_iov_count;
// 24 rma_iov[].
pub(super) static LONGREAD_RTW: Layout = req(
    PacketType::LongreadRtw,
    24,
    &[
        u32_at(RmaIovCount, 4),
        u64_at(MsgLength, 8),
        u32_at(SendId, 16),
        u32_at(ReadIovCount, 20),
    ],
    true,
    PayloadKind::ReadIov,
);
// DC_EAGER (133/134): 4 msg_id; 8 send_id; 12 padding; [16 tag].
pub(super) static DC_EAGER_MSGRTM: Layout = req(
    PacketType::DcEagerMsgRtm,
    16,
    &[u32_at(MsgId, 4), u32_at(SendId, 8)],
    false,
    PayloadKind::Data,
);
pub(super) static DC_EAGER_TAGRTM: Layout = req(
    PacketType::DcEagerTagRtm,
    24,
    &[u32_at(MsgId, 4), u32_at(SendId, 8), u64_at(Tag, 16)],
    false,
    PayloadKind::Data,
);
// DC_MEDIUM (135/136): 4 msg_id; 8 send_id; 12 padding; 16 msg_length; 24 seg_offset;
// [32 tag].
pub(super) static DC_MEDIUM_MSGRTM: Layout = req(
    PacketType::DcMediumMsgRtm,
    32,
    &[
        u32_at(MsgId, 4),
        u32_at(SendId, 8),
        u64_at(MsgLength, 16),
        u64_at(SegOffset, 24),
    ],
    false,
    PayloadKind::Data,
);
pub(super) static DC_MEDIUM_TAGRTM: Layout = req(
    PacketType::DcMediumTagRtm,
    40,
    &[
        u32_at(MsgId, 4),
        u32_at(SendId, 8),
        u64_at(MsgLength, 16),
        u64_at(SegOffset, 24),
        u64_at(Tag, 32),
    ],
    false,
    PayloadKind::Data,
);
// DC_EAGER_RTW (139): 4 rma_iov_count; 8 send_id; 12 padding; 16 rma_iov[].
pub(super) static DC_EAGER_RTW: Layout = req(
    PacketType::DcEagerRtw,
    16,
    &[u32_at(RmaIovCount, 4), u32_at(SendId, 8)],
    true,
    PayloadKind::Data,
);
// RUNTREAD (145/146): 4 msg_id; 8 msg_length; 16 send_id; 20 read_iov_count;
// 24 seg_offset; 32 runt_length; [40 tag].
pub(super) static RUNTREAD_MSGRTM: Layout = req(
    PacketType::RuntreadMsgRtm,
    40,
    &[
        u32_at(MsgId, 4),
        u64_at(MsgLength, 8),
        u32_at(SendId, 16),
        u32_at(ReadIovCount, 20),
        u64_at(SegOffset, 24),
        u64_at(RuntLength, 32),
    ],
    false,
    PayloadKind::ReadIovRunt,
);
pub(super) static RUNTREAD_TAGRTM: Layout = req(
    PacketType::RuntreadTagRtm,
    48,
    &[
        u32_at(MsgId, 4),
        u64_at(MsgLength, 8),
        u32_at(SendId, 16),
        u32_at(ReadIovCount, 20),
        u64_at(SegOffset, 24),
        u64_at(RuntLength, 32),
        u64_at(Tag, 40),
    ],
    false,
    PayloadKind::ReadIovRunt,
);

/// Layouts by type ID: one load to classify a received type byte.
static BY_ID: [Option<&Layout>; 256] = {
    let mut t: [Option<&Layout>; 256] = [None; 256];
    t[PacketType::Cts as usize] = Some(&CTS);
    t[PacketType::CtsData as usize] = Some(&CTSDATA);
    t[PacketType::ReadRsp as usize] = Some(&READRSP);
    t[PacketType::Eor as usize] = Some(&EOR);
    t[PacketType::AtomRsp as usize] = Some(&ATOMRSP);
    t[PacketType::Handshake as usize] = Some(&HANDSHAKE);
    t[PacketType::Receipt as usize] = Some(&RECEIPT);
    t[PacketType::ReadNack as usize] = Some(&READ_NACK);
    t[PacketType::PeerError as usize] = Some(&PEER_ERROR);
    t[PacketType::EagerMsgRtm as usize] = Some(&EAGER_MSGRTM);
    t[PacketType::EagerTagRtm as usize] = Some(&EAGER_TAGRTM);
    t[PacketType::MediumMsgRtm as usize] = Some(&MEDIUM_MSGRTM);
    t[PacketType::MediumTagRtm as usize] = Some(&MEDIUM_TAGRTM);
    t[PacketType::LongctsMsgRtm as usize] = Some(&LONGCTS_MSGRTM);
    t[PacketType::LongctsTagRtm as usize] = Some(&LONGCTS_TAGRTM);
    t[PacketType::EagerRtw as usize] = Some(&EAGER_RTW);
    t[PacketType::LongctsRtw as usize] = Some(&LONGCTS_RTW);
    t[PacketType::ShortRtr as usize] = Some(&SHORT_RTR);
    t[PacketType::LongctsRtr as usize] = Some(&LONGCTS_RTR);
    t[PacketType::WriteRta as usize] = Some(&WRITE_RTA);
    t[PacketType::FetchRta as usize] = Some(&FETCH_RTA);
    t[PacketType::CompareRta as usize] = Some(&COMPARE_RTA);
    t[PacketType::LongreadMsgRtm as usize] = Some(&LONGREAD_MSGRTM);
    t[PacketType::LongreadTagRtm as usize] = Some(&LONGREAD_TAGRTM);
    t[PacketType::LongreadRtw as usize] = Some(&LONGREAD_RTW);
    t[PacketType::DcEagerMsgRtm as usize] = Some(&DC_EAGER_MSGRTM);
    t[PacketType::DcEagerTagRtm as usize] = Some(&DC_EAGER_TAGRTM);
    t[PacketType::DcMediumMsgRtm as usize] = Some(&DC_MEDIUM_MSGRTM);
    t[PacketType::DcMediumTagRtm as usize] = Some(&DC_MEDIUM_TAGRTM);
    t[PacketType::DcLongctsMsgRtm as usize] = Some(&DC_LONGCTS_MSGRTM);
    t[PacketType::DcLongctsTagRtm as usize] = Some(&DC_LONGCTS_TAGRTM);
    t[PacketType::DcEagerRtw as usize] = Some(&DC_EAGER_RTW);
    t[PacketType::DcLongctsRtw as usize] = Some(&DC_LONGCTS_RTW);
    t[PacketType::DcWriteRta as usize] = Some(&DC_WRITE_RTA);
    t[PacketType::RuntreadMsgRtm as usize] = Some(&RUNTREAD_MSGRTM);
    t[PacketType::RuntreadTagRtm as usize] = Some(&RUNTREAD_TAGRTM);
    t
};

/// The layout of a wire type ID, `None` for IDs that are not wire packet types.
#[inline]
pub(super) fn by_id(id: u8) -> Option<&'static Layout> {
    BY_ID[id as usize]
}

#[inline]
pub(super) fn of(t: PacketType) -> &'static Layout {
    // Every PacketType has a row (the `layouts_cover_every_type` test checks it); CTS is a
    // placeholder the compiler needs, never returned.
    match BY_ID[t as usize] {
        Some(l) => l,
        None => &CTS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_cover_every_type() {
        for &t in PacketType::ALL {
            let l = BY_ID[t as usize].expect("every wire type has a layout");
            assert_eq!(l.pkt_type, t);
        }
        let rows = BY_ID.iter().filter(|l| l.is_some()).count();
        assert_eq!(rows, PacketType::ALL.len());
    }

    #[test]
    fn fixed_widths_agree_with_every_layout() {
        for &t in PacketType::ALL {
            let l = of(t);
            for at in l.fields {
                if let Some(w) = at.field.fixed_width() {
                    assert_eq!(w, at.width, "{} {}", t.name(), at.field.name());
                }
                assert_eq!(l.is_wide(at.field), at.width == Width::U64);
            }
        }
        // recv_length really has two widths, so it must ask the layout.
        assert!(of(PacketType::Cts).is_wide(RecvLength));
        assert!(!of(PacketType::ShortRtr).is_wide(RecvLength));
    }
}

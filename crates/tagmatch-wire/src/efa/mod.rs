//! EFA RDM communication protocol v4 packets (libfabric `prov/efa/src/rdm/efa_rdm_protocol.h`).
//!
//! wire-layouts §A.1: all multi-byte fields are little-endian, no header is packed (natural C
//! alignment with explicit padding), and padding/reserved bytes are not zeroed by senders, so
//! this module ignores them when parsing and writes zero when emitting.
//!
//! - [`Packet`] is a zero-copy checked view over a received buffer: [`Packet::new_checked`]
//!   validates every header once, after which every accessor is infallible.
//! - [`Repr`] is the owned representation: [`Repr::parse`] and [`Repr::emit`] into a caller
//!   buffer of exactly [`Repr::buffer_len`] bytes, with no allocation.
//! - [`RtmHeader`] writes the eager and medium RTM headers of the small-message path
//!   directly (the bytes [`Repr::emit`] writes, without the layout walk).
//!
//! Every packet type is described by one [`Layout`] row (its fixed fields and their offsets,
//! where its connid sits, whether it ends in an `rma_iov[]` array and what its payload
//! holds), taken from the C structs — see [`PacketType::layout`].

mod iov;
mod layout;
mod packet;
mod raw_addr;
mod repr;
mod rtm;

pub use iov::RmaIov;
pub use layout::{ConnidPlace, Field, FieldAt, Layout, PayloadKind, Width};
pub use packet::Packet;
pub use raw_addr::{RawAddr, RawAddrHdr};
pub use repr::{ExtraInfo, Fields, HandshakeExt, Repr, UserRecvQp};
pub use rtm::RtmHeader;

use crate::error::ContentError;

/// `EFA_RDM_PROTOCOL_VERSION`: what senders write (efa-rdm-protocol-v4 §1.3).
pub const PROTOCOL_VERSION: u8 = 4;

/// Size of `struct efa_rdm_base_hdr`.
pub const BASE_HDR_LEN: usize = 4;

/// Size of one `struct efa_rma_iov` (wire-layouts §A.1: `len` is a `size_t`, 8 bytes).
pub const RMA_IOV_LEN: usize = 24;

/// Packet flags (wire-layouts §A.3).
pub mod flags {
    /// Universal: the packet carries the sender's connid (efa-rdm-protocol-v4 §4.4).
    pub const CONNID_HDR: u16 = 0x8000;
    /// REQ: the raw-address optional header is present.
    pub const REQ_OPT_RAW_ADDR_HDR: u16 = 0x0001;
    /// REQ: the CQ-data optional header is present.
    pub const REQ_OPT_CQ_DATA_HDR: u16 = 0x0002;
    /// REQ: the packet belongs to a message (RTM) subprotocol.
    pub const REQ_MSG: u16 = 0x0004;
    /// REQ: the packet belongs to a tagged message.
    pub const REQ_TAGGED: u16 = 0x0008;
    /// REQ: defined, never set by libfabric (wire-layouts §D.4).
    pub const REQ_RMA: u16 = 0x0010;
    /// REQ: the packet belongs to an emulated atomic.
    pub const REQ_ATOMIC: u16 = 0x0020;
    /// REQ: a LONGCTS REQ resent after a READ_NACK; carries no payload (wire-layouts §A.3).
    pub const REQ_READ_NACK: u16 = 0x2000;
    /// CTS: the CTS belongs to an emulated read (`EFA_RDM_CTS_READ_REQ`; the doc calls it
    /// `CTS_EMULATED_READ`).
    pub const CTS_READ_REQ: u16 = 0x0080;
    /// HANDSHAKE: the HOST_ID optional header is present.
    pub const HANDSHAKE_HOST_ID_HDR: u16 = 0x0001;
    /// HANDSHAKE: the DEVICE_VERSION optional header is present.
    pub const HANDSHAKE_DEVICE_VERSION_HDR: u16 = 0x0002;
    /// HANDSHAKE: the USER_RECV_QP optional header is present (legacy).
    pub const HANDSHAKE_USER_RECV_QP_HDR: u16 = 0x0004;
    /// HANDSHAKE: the HMEM_P2P optional header is present (libfabric main only).
    pub const HANDSHAKE_HMEM_P2P_HDR: u16 = 0x0008;
}

/// Extra feature and request bits carried in HANDSHAKE `extra_info` (wire-layouts §A.4).
/// Bit *i* is bit *i* % 64 of `extra_info[i / 64]`.
pub mod extra {
    /// The peer supports RDMA read.
    pub const FEATURE_RDMA_READ: usize = 0;
    /// The peer supports delivery complete.
    pub const FEATURE_DELIVERY_COMPLETE: usize = 1;
    /// The peer asks that REQ header length stays constant (keep the raw address).
    pub const REQUEST_CONSTANT_HEADER_LENGTH: usize = 2;
    /// The peer asks for the connid header.
    pub const REQUEST_CONNID_HEADER: usize = 3;
    /// The peer supports the runting read subprotocol.
    pub const FEATURE_RUNT: usize = 4;
    /// The peer supports RDMA write.
    pub const FEATURE_RDMA_WRITE: usize = 5;
    /// The peer supports READ_NACK.
    pub const FEATURE_READ_NACK: usize = 6;
    /// The peer requests a user receive QP.
    pub const FEATURE_REQUEST_USER_RECV_QP: usize = 7;
    /// The peer supports unsolicited write receive.
    pub const FEATURE_UNSOLICITED_WRITE_RECV: usize = 8;
    /// The peer supports PEER_ERROR (libfabric main only).
    pub const FEATURE_PEER_ERROR: usize = 9;
    /// `EFA_RDM_MAX_NUM_EXINFO`: u64 words a receiver keeps.
    pub const MAX_WORDS: usize = 4;
}

macro_rules! packet_types {
    ($($(#[$m:meta])* $var:ident = $id:literal, $name:literal;)*) => {
        /// Every EFA RDM v4 packet type that appears on the wire (efa-rdm-protocol-v4 §1.3,
        /// table 1.2, completed by wire-layouts §A.2).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum PacketType {
            $($(#[$m])* $var = $id,)*
        }

        impl PacketType {
            /// Every wire packet type, in ID order.
            pub const ALL: &'static [PacketType] = &[$(PacketType::$var,)*];

            /// The C name without the `EFA_RDM_` prefix, e.g. `"EAGER_TAGRTM"`.
            pub const fn name(self) -> &'static str {
                match self { $(PacketType::$var => $name,)* }
            }

            /// Looks a packet type up by its C name (without `EFA_RDM_`), as printed by
            /// [`PacketType::name`].
            pub fn from_name(name: &str) -> Option<PacketType> {
                match name { $($name => Some(PacketType::$var),)* _ => None }
            }

            fn from_known(id: u8) -> Option<PacketType> {
                match id { $($id => Some(PacketType::$var),)* _ => None }
            }
        }
    };
}

packet_types! {
    /// Clear to send (long-CTS subprotocols, emulated read).
    Cts = 3, "CTS";
    /// Data sent in response to a CTS.
    CtsData = 4, "CTSDATA";
    /// Response to an emulated short read.
    ReadRsp = 5, "READRSP";
    /// End of read: the receiver finished its RDMA read.
    Eor = 7, "EOR";
    /// Response to an emulated fetch/compare atomic.
    AtomRsp = 8, "ATOMRSP";
    /// Handshake (efa-rdm-protocol-v4 §2).
    Handshake = 9, "HANDSHAKE";
    /// Delivery-complete receipt.
    Receipt = 10, "RECEIPT";
    /// The receiver could not RDMA-read; fall back to long-CTS.
    ReadNack = 11, "READ_NACK";
    /// Peer error report (libfabric main only; layout unstable, wire-layouts §D.3).
    PeerError = 12, "PEER_ERROR";
    /// Eager untagged message.
    EagerMsgRtm = 64, "EAGER_MSGRTM";
    /// Eager tagged message.
    EagerTagRtm = 65, "EAGER_TAGRTM";
    /// Medium untagged message segment.
    MediumMsgRtm = 66, "MEDIUM_MSGRTM";
    /// Medium tagged message segment.
    MediumTagRtm = 67, "MEDIUM_TAGRTM";
    /// Long-CTS untagged message request.
    LongctsMsgRtm = 68, "LONGCTS_MSGRTM";
    /// Long-CTS tagged message request.
    LongctsTagRtm = 69, "LONGCTS_TAGRTM";
    /// Emulated eager write.
    EagerRtw = 70, "EAGER_RTW";
    /// Emulated long-CTS write.
    LongctsRtw = 71, "LONGCTS_RTW";
    /// Emulated short read.
    ShortRtr = 72, "SHORT_RTR";
    /// Emulated long-CTS read.
    LongctsRtr = 73, "LONGCTS_RTR";
    /// Emulated write atomic.
    WriteRta = 74, "WRITE_RTA";
    /// Emulated fetch atomic.
    FetchRta = 75, "FETCH_RTA";
    /// Emulated compare atomic.
    CompareRta = 76, "COMPARE_RTA";
    /// Long-read untagged message (needs the peer's RDMA_READ feature).
    LongreadMsgRtm = 128, "LONGREAD_MSGRTM";
    /// Long-read tagged message.
    LongreadTagRtm = 129, "LONGREAD_TAGRTM";
    /// Emulated long-read write.
    LongreadRtw = 130, "LONGREAD_RTW";
    /// Delivery-complete eager untagged message.
    DcEagerMsgRtm = 133, "DC_EAGER_MSGRTM";
    /// Delivery-complete eager tagged message.
    DcEagerTagRtm = 134, "DC_EAGER_TAGRTM";
    /// Delivery-complete medium untagged message segment.
    DcMediumMsgRtm = 135, "DC_MEDIUM_MSGRTM";
    /// Delivery-complete medium tagged message segment.
    DcMediumTagRtm = 136, "DC_MEDIUM_TAGRTM";
    /// Delivery-complete long-CTS untagged message.
    DcLongctsMsgRtm = 137, "DC_LONGCTS_MSGRTM";
    /// Delivery-complete long-CTS tagged message.
    DcLongctsTagRtm = 138, "DC_LONGCTS_TAGRTM";
    /// Delivery-complete emulated eager write.
    DcEagerRtw = 139, "DC_EAGER_RTW";
    /// Delivery-complete emulated long-CTS write.
    DcLongctsRtw = 140, "DC_LONGCTS_RTW";
    /// Delivery-complete emulated write atomic.
    DcWriteRta = 141, "DC_WRITE_RTA";
    /// Runting-read untagged message.
    RuntreadMsgRtm = 145, "RUNTREAD_MSGRTM";
    /// Runting-read tagged message.
    RuntreadTagRtm = 146, "RUNTREAD_TAGRTM";
}

impl PacketType {
    /// Classifies a type ID read off the wire.
    ///
    /// wire-layouts §A.2: types 1 and 2 are retired, 6 is local-only, 131, 142–144 and 147
    /// are defined but never sent or handled; each gets its own error so a tool can say so.
    pub fn from_id(id: u8) -> Result<PacketType, ContentError> {
        if let Some(t) = PacketType::from_known(id) {
            return Ok(t);
        }
        Err(match id {
            1 | 2 => ContentError::RetiredType(id),
            6 => ContentError::LocalOnlyType(id),
            131 | 142 | 143 | 144 | 147 => ContentError::UnusedType(id),
            _ => ContentError::UnknownType(id),
        })
    }

    /// The numeric type ID.
    pub const fn id(self) -> u8 {
        self as u8
    }

    /// wire-layouts §A.2: "any type ≥ 64 is treated as a REQ".
    pub const fn is_req(self) -> bool {
        self as u8 >= 64
    }

    /// The type's layout row.
    #[inline]
    pub fn layout(self) -> &'static Layout {
        layout::of(self)
    }

    /// The tagged `*_TAGRTM` types (their tag is the last 8 bytes of the mandatory header).
    pub fn is_tagged(self) -> bool {
        self.layout().has(Field::Tag)
    }

    /// REQ types that start a two-sided message (RTM, including DC, LONGREAD and RUNTREAD),
    /// the ones libfabric flags with `REQ_MSG` (wire-layouts §A.3).
    pub fn is_rtm(self) -> bool {
        self.default_flags() & flags::REQ_MSG != 0
    }

    /// REQ types of the emulated atomics (WRITE/FETCH/COMPARE/DC_WRITE RTA).
    pub fn is_rta(self) -> bool {
        self.default_flags() & flags::REQ_ATOMIC != 0
    }

    /// Types that carry a per-peer `msg_id` (RTM, RTA and RECEIPT).
    pub fn has_msg_id(self) -> bool {
        self.layout().has(Field::MsgId)
    }
}

impl core::fmt::Display for PacketType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

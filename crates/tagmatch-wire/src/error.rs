//! Typed errors. Length errors (the buffer is shorter than a header says it must be) are kept
//! apart from content errors (the bytes are there but say something invalid), as etherparse
//! does: a caller can retry a length error with more bytes, never a content error.

use core::fmt;

/// Which part of a packet a length error or a content error concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Part {
    /// The 4-byte EFA base header (`struct efa_rdm_base_hdr`).
    BaseHeader,
    /// The fixed (mandatory) header of the named EFA packet type.
    Mandatory(&'static str),
    /// The `rma_iov[]` array that ends a REQ mandatory header.
    RmaIov,
    /// The REQ raw-address optional header (`addr_len` and the address).
    RawAddr,
    /// The REQ CQ-data optional header.
    CqData,
    /// The connid header (REQ: 4 bytes; CTSDATA and HANDSHAKE: 8 bytes).
    Connid,
    /// The `read_iov[]` array at the start of a LONGREAD/RUNTREAD payload.
    ReadIov,
    /// The HANDSHAKE `extra_info[]` array.
    ExtraInfo,
    /// The HANDSHAKE HOST_ID optional header.
    HostId,
    /// The HANDSHAKE DEVICE_VERSION optional header.
    DeviceVersion,
    /// The HANDSHAKE USER_RECV_QP optional header.
    UserRecvQp,
    /// The HANDSHAKE HMEM_P2P optional header.
    HmemP2p,
    /// The rdma-core tag-matching header (`struct ibv_tmh`).
    Tmh,
    /// The rdma-core rendezvous header (`struct ibv_rvh`).
    Rvh,
    /// A caller-provided output buffer (emit).
    OutputBuffer,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Part::BaseHeader => f.write_str("base header"),
            Part::Mandatory(name) => write!(f, "{name} header"),
            Part::RmaIov => f.write_str("rma_iov array"),
            Part::RawAddr => f.write_str("raw address header"),
            Part::CqData => f.write_str("CQ data header"),
            Part::Connid => f.write_str("connid header"),
            Part::ReadIov => f.write_str("read_iov array"),
            Part::ExtraInfo => f.write_str("extra_info array"),
            Part::HostId => f.write_str("HOST_ID header"),
            Part::DeviceVersion => f.write_str("DEVICE_VERSION header"),
            Part::UserRecvQp => f.write_str("USER_RECV_QP header"),
            Part::HmemP2p => f.write_str("HMEM_P2P header"),
            Part::Tmh => f.write_str("TMH"),
            Part::Rvh => f.write_str("RVH"),
            Part::OutputBuffer => f.write_str("output buffer"),
        }
    }
}

/// The buffer ends before `part` does.
///
/// `needed` is the total number of bytes, counted from the start of the packet, that the
/// packet must have for `part` to be complete; `available` is how many it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LengthError {
    /// The header or array that does not fit.
    pub part: Part,
    /// Bytes needed from the start of the packet.
    pub needed: usize,
    /// Bytes available.
    pub available: usize,
}

impl fmt::Display for LengthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "truncated {}: needed {} bytes, available {}",
            self.part, self.needed, self.available
        )
    }
}

/// The bytes are all there, but what they say is not a valid packet (or, when emitting, the
/// representation cannot be put on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ContentError {
    /// The packet type ID is not one of efa-rdm-protocol-v4 §1.3 table 1.2.
    UnknownType(u8),
    /// Type 1 (RTS) or 2 (CONNACK): retired packet types, which libfabric rejects with an
    /// EQ error (wire-layouts §A.2).
    RetiredType(u8),
    /// Type 6 (RMA_CONTEXT): a local-only packet type, never on the wire.
    LocalOnlyType(u8),
    /// Types 131 (READ_RTR), 142–144 (RUNTCTS_*) and 147 (RUNTREAD_RTW): defined in
    /// libfabric's header but never sent and rejected by its receive path.
    UnusedType(u8),
    /// `version` below 4 (efa-rdm-protocol-v4 §1.3: receivers reject older versions).
    UnsupportedVersion(u8),
    /// The raw-address header's `addr_len` is outside the accepted range.
    AddrLenOutOfRange {
        /// The value on the wire.
        addr_len: u32,
        /// Smallest accepted value (the 32-byte `struct efa_ep_addr`).
        min: u32,
        /// Largest accepted value.
        max: u32,
    },
    /// An iov count (`rma_iov_count` or `read_iov_count`) larger than any EFA packet can hold.
    IovCountTooLarge {
        /// `"rma_iov_count"` or `"read_iov_count"`.
        field: &'static str,
        /// The count on the wire.
        count: u32,
        /// The largest count accepted.
        max: u32,
    },
    /// Both `REQ_OPT_RAW_ADDR_HDR` and `CONNID_HDR` are set; the sender code makes them
    /// mutually exclusive (wire-layouts §A.6).
    RawAddrAndConnid,
    /// HANDSHAKE `nextra_p3` below 3, or announcing more `extra_info` words than supported.
    BadNextraP3 {
        /// The value on the wire.
        nextra_p3: u32,
    },
    /// An unknown rdma-core TMH opcode (tm_types.h defines 0–3).
    UnknownTmOpcode(u8),
    /// Emit: a field value does not fit its wire width.
    FieldOverflow {
        /// The C field name.
        field: &'static str,
        /// The value given.
        value: u64,
    },
    /// Emit: something was given that the packet type cannot carry (for example CQ data on a
    /// CTS, or `rma_iov` entries on an EAGER_MSGRTM).
    NotApplicable {
        /// What was given.
        what: &'static str,
        /// The packet type's C name.
        packet: &'static str,
    },
    /// Emit: the packet would be longer than a u32/usize can describe.
    TooLong,
    /// [`crate::efa::Packet::new_checked_as`]: a valid packet of another type than the one
    /// asked for.
    WrongType {
        /// The C name of the type asked for (without `EFA_RDM_`).
        expected: &'static str,
        /// The type ID on the wire.
        found: u8,
    },
}

impl fmt::Display for ContentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ContentError::UnknownType(t) => write!(f, "unknown packet type {t}"),
            ContentError::WrongType { expected, found } => {
                write!(f, "packet type {found} where {expected} was expected")
            }
            ContentError::RetiredType(t) => write!(f, "retired packet type {t}"),
            ContentError::LocalOnlyType(t) => {
                write!(f, "packet type {t} is local-only and never on the wire")
            }
            ContentError::UnusedType(t) => {
                write!(f, "packet type {t} is defined but never sent or handled")
            }
            ContentError::UnsupportedVersion(v) => {
                write!(f, "protocol version {v} is below 4")
            }
            ContentError::AddrLenOutOfRange { addr_len, min, max } => {
                write!(f, "raw address addr_len {addr_len} outside {min}..={max}")
            }
            ContentError::IovCountTooLarge { field, count, max } => {
                write!(f, "{field} {count} exceeds the maximum {max}")
            }
            ContentError::RawAddrAndConnid => {
                f.write_str("both the raw address and the connid header are flagged")
            }
            ContentError::BadNextraP3 { nextra_p3 } => {
                write!(f, "handshake nextra_p3 {nextra_p3} outside 3..=7")
            }
            ContentError::UnknownTmOpcode(op) => write!(f, "unknown TMH opcode {op}"),
            ContentError::FieldOverflow { field, value } => {
                write!(f, "{field} value {value} does not fit its wire width")
            }
            ContentError::NotApplicable { what, packet } => {
                write!(f, "{packet} cannot carry {what}")
            }
            ContentError::TooLong => f.write_str("packet too long"),
        }
    }
}

/// Any error from parsing or emitting a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is too short.
    Length(LengthError),
    /// The content is invalid.
    Content(ContentError),
}

impl Error {
    #[cold]
    #[inline(never)]
    pub(crate) fn len(part: Part, needed: usize, available: usize) -> Self {
        Error::Length(LengthError {
            part,
            needed,
            available,
        })
    }
}

impl From<LengthError> for Error {
    fn from(e: LengthError) -> Self {
        Error::Length(e)
    }
}

impl From<ContentError> for Error {
    fn from(e: ContentError) -> Self {
        Error::Content(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Length(e) => e.fmt(f),
            Error::Content(e) => e.fmt(f),
        }
    }
}

impl core::error::Error for LengthError {}
impl core::error::Error for ContentError {}
impl core::error::Error for Error {}

/// Result alias for this crate.
pub type Result<T> = core::result::Result<T, Error>;

//! Public value types: identifiers, what the endpoint asks the device to do, completions,
//! errors and counters.

use tagmatch_wire::efa::RawAddr;

use crate::atomic::{AtomicError, AtomicOp, Datatype};

/// A peer in the endpoint's address vector (what `fi_av_insert` returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u32);

/// An application operation, as returned by every operation call and echoed by its
/// [`Completion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

/// A memory region held by the endpoint (application RMA targets and operation buffers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemHandle(pub u32);

/// Token of one packet handed to the device; answer with [`crate::Endpoint::on_send_done`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SendToken(pub u64);

/// Token of one RDMA operation; answer with [`crate::Endpoint::on_rdma_done`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RdmaToken(pub u64);

/// What the device returned for a memory registration: where peers address the region
/// (`addr` of its first byte) and its remote key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrKey {
    /// Remote virtual address of byte 0 of the region.
    pub addr: u64,
    /// Remote key.
    pub key: u64,
}

/// What a probe found: an unexpected message still queued (or claimed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeInfo {
    /// Sender.
    pub src: PeerId,
    /// Tag (0 for untagged messages).
    pub tag: u64,
    /// Message length.
    pub len: u64,
    /// Remote CQ data.
    pub cq_data: Option<u64>,
    /// Bytes of it buffered at this endpoint (what it counts against the unexpected
    /// budget: all of an eager message, the first segment of a long one).
    pub buffered: u64,
}

/// A message claimed by [`crate::Endpoint::tmprobe`] or [`crate::Endpoint::mprobe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim(pub(crate) tagmatch_engine::MsgHandle);

/// A remote buffer: `efa_rma_iov` without the length (the length is the operation's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteAddr {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub key: u64,
}

/// Something the endpoint asks its owner (the device driver or a test fabric) to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// Send one packet (≤ MTU) to `peer`, whose address is `dest`. Answer with
    /// [`crate::Endpoint::on_send_done`].
    Send {
        /// Token for the completion.
        token: SendToken,
        /// Destination peer.
        peer: PeerId,
        /// Its raw address.
        dest: RawAddr,
        /// The packet.
        bytes: Vec<u8>,
    },
    /// RDMA-read `len` bytes from the peer's `remote` into local region `local` at `offset`.
    /// Answer with [`crate::Endpoint::on_rdma_done`].
    RdmaRead {
        /// Token for the completion.
        token: RdmaToken,
        /// The peer that owns `remote`.
        peer: PeerId,
        /// Its raw address.
        dest: RawAddr,
        /// Local destination region.
        local: MemHandle,
        /// Offset in `local`.
        offset: u64,
        /// Remote source.
        remote: RemoteAddr,
        /// Bytes.
        len: u64,
    },
    /// RDMA-write `len` bytes from local region `local` at `offset` to the peer's `remote`.
    /// Answer with [`crate::Endpoint::on_rdma_done`].
    RdmaWrite {
        /// Token for the completion.
        token: RdmaToken,
        /// The peer that owns `remote`.
        peer: PeerId,
        /// Its raw address.
        dest: RawAddr,
        /// Local source region.
        local: MemHandle,
        /// Offset in `local`.
        offset: u64,
        /// Remote destination.
        remote: RemoteAddr,
        /// Bytes.
        len: u64,
    },
    /// Register region `mem` (`len` bytes) with the device. Answer with
    /// [`crate::Endpoint::on_register_done`].
    Register {
        /// The region.
        mem: MemHandle,
        /// Its length.
        len: u64,
        /// Peers may read or write it (its key goes to them: an application's region, a
        /// long-read sender's source). `false`: only this endpoint's own RDMA operations
        /// use it (the destination of its reads, the source of its writes), as a memory
        /// registration without remote access flags; a device may refuse peers'
        /// requests that name its key.
        remote: bool,
    },
    /// The region with this key is no longer used; release the registration.
    Deregister {
        /// The key [`crate::Endpoint::on_register_done`] gave.
        key: u64,
    },
}

/// What [`crate::Endpoint::handle_packet`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rx {
    /// Processed (or dropped as malformed, stale or unknown, and counted).
    Consumed,
    /// Receiver not ready: a new message that does not fit the unexpected-message budget
    /// or lies beyond the reorder window. The endpoint kept nothing of it; hand the same
    /// bytes in again later, once [`crate::Endpoint::admission_epoch`] moved (a receive
    /// was posted, a message received, earlier messages arrived): before, it would be
    /// refused again.
    Refused,
}

/// Result the device reports for one sent packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOutcome {
    /// Sent (and, the device being reliable, will be delivered).
    Ok,
    /// Not posted: the TX queue was full. The endpoint queues the packet again (the
    /// "partial send" of efa-rdm-protocol-v4 §3.2, medium message).
    Again,
    /// Failed for good (e.g. the peer is gone).
    Error,
}

/// What a completion is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// `tsend`/`send`.
    Send,
    /// `trecv`/`recv`.
    Recv,
    /// `write`.
    Write,
    /// `read`.
    Read,
    /// Write atomic.
    AtomicWrite,
    /// Fetch atomic.
    AtomicFetch,
    /// Compare atomic.
    AtomicCompare,
    /// On the responder: a peer's write with remote CQ data (efa-rdm-protocol-v4 §3.3:
    /// "when the application added the FI_REMOTE_CQ_DATA flag … the provider is required to
    /// write a CQ entry on the responder with the CQ data in it").
    RemoteWrite,
}

/// Why an operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpError {
    /// The message was longer than the receive buffer; `data` holds the first
    /// `buf_len` bytes (libfabric `FI_ETRUNC`).
    Truncated {
        /// Message length.
        msg_len: u64,
        /// Receive buffer length.
        buf_len: u64,
    },
    /// The receive was cancelled.
    Canceled,
    /// Delivery complete was asked of a peer whose handshake does not advertise it
    /// (efa-rdm-protocol-v4 §2.1 "the requester … need to return an error").
    DeliveryCompleteUnsupported,
    /// The device reported a send error.
    SendFailed,
    /// An RDMA operation or registration failed and no fallback was possible.
    RdmaFailed,
    /// The responder could not apply an atomic.
    Atomic(AtomicError),
    /// Ended by [`crate::Endpoint::abort`] or [`crate::Endpoint::remove_peer`] before it
    /// completed (what the peer already received or applied stays there: nothing is
    /// recalled).
    Aborted,
}

/// An application completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The operation (for [`OpKind::RemoteWrite`], a fresh id).
    pub op: OpId,
    /// What it was.
    pub kind: OpKind,
    /// Success or the error.
    pub result: Result<(), OpError>,
    /// Received, read or fetched bytes (empty for sends and writes).
    pub data: Vec<u8>,
    /// Message length (receives: the sender's length, even when truncated).
    pub len: u64,
    /// Tag of a tagged receive.
    pub tag: u64,
    /// The sender of a receive or of a remote write.
    pub src: Option<PeerId>,
    /// Remote CQ data.
    pub cq_data: Option<u64>,
}

/// Errors of operation calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// No such peer.
    UnknownPeer,
    /// No such operation, or it cannot be cancelled any more.
    UnknownOp,
    /// No such memory region.
    UnknownMem,
    /// Too many operations in flight.
    TooManyOps,
    /// The receive limit of the matching engine is reached.
    TooManyReceives,
    /// Atomic arguments are invalid.
    Atomic(AtomicError),
    /// An atomic payload does not fit in one packet (efa-rdm-protocol-v4 §1.1: "atomics up
    /// to MTU size").
    AtomicTooLarge,
    /// The byte range lies outside the memory region (or overflows).
    MemRange,
    /// The memory region still has sends in flight ([`crate::Endpoint::tsend_from`]); it
    /// can be released once they complete.
    MemInUse,
    /// A read longer than a responder serves: `len` bytes asked, at most `max`
    /// ([`crate::MAX_READ_SIZE`]). The responder would drop the request unanswered, and
    /// the read would never complete.
    ReadTooLarge {
        /// Bytes asked for.
        len: u64,
        /// The largest read a responder serves.
        max: u64,
    },
    /// The remote range `addr .. addr + len` runs past the end of the 64-bit address
    /// space: no memory region can hold it, so the responder would refuse it unanswered.
    RemoteRange {
        /// Remote address of the first byte.
        addr: u64,
        /// Length of the range.
        len: u64,
    },
}

/// Options of a send or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendOpts {
    /// Remote CQ data (`fi_senddata`, `fi_writedata`).
    pub cq_data: Option<u64>,
    /// Delivery complete (efa-rdm-protocol-v4 §4.2).
    pub delivery_complete: bool,
}

/// The subprotocol an operation used (for tests and tracing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Eager message.
    Eager,
    /// Medium message.
    Medium,
    /// Long-CTS message.
    LongCts,
    /// Long-read message.
    LongRead,
    /// Runting-read message.
    RuntRead,
    /// Emulated eager write.
    EagerWrite,
    /// Emulated long-CTS write.
    LongCtsWrite,
    /// Emulated long-read write.
    LongReadWrite,
    /// Emulated short read.
    ShortRead,
    /// Emulated long-CTS read.
    LongCtsRead,
    /// Direct RDMA read.
    DirectRead,
    /// Direct RDMA write.
    DirectWrite,
    /// Emulated atomic.
    Atomic,
}

/// Drop-and-count counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets received.
    pub rx_packets: u64,
    /// Packets that failed to parse.
    pub rx_parse_errors: u64,
    /// Packets whose connid does not match the peer (QP collision, efa-rdm-protocol-v4 §4.4).
    pub rx_connid_mismatch: u64,
    /// Packets from a sender that is neither known nor carries a raw address.
    pub rx_unknown_sender: u64,
    /// Packets naming an unknown or stale `send_id`/`recv_id`, or a finished (or aborted,
    /// [`crate::Endpoint::abort`]) operation.
    pub rx_unknown_op: u64,
    /// Packets whose content is inconsistent (bad offsets, lengths, keys, unsupported
    /// types).
    pub rx_invalid: u64,
    /// RTM/RTA packets dropped by the reorder buffer as stale or duplicate (already
    /// processed or already held).
    pub rx_reorder_rejected: u64,
    /// Data packets (MEDIUM and RUNTREAD segments, CTSDATA, a long-CTS RTW's payload)
    /// dropped because their bytes overlap bytes of the message already received (a
    /// segment delivered twice).
    pub rx_duplicate_data: u64,
    /// New messages refused for now ([`Rx::Refused`]: the unexpected budget is full, or the
    /// message is beyond the reorder window) and left to the owner to redeliver.
    pub rx_refused: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Sends the device answered with [`SendOutcome::Again`] (re-queued).
    pub tx_again: u64,
    /// HANDSHAKE packets sent.
    pub handshakes_sent: u64,
    /// HANDSHAKE send failures (ignored, efa-rdm-protocol-v4 §2.3).
    pub handshake_send_errors: u64,
    /// READ_NACK fallbacks (either side).
    pub read_nacks: u64,
    /// Completions for unknown tokens (ignored).
    pub unknown_tokens: u64,
    /// Packets larger than the MTU handed to the device (an ATOMRSP for a peer with a
    /// larger MTU); the device is expected to fail them.
    pub tx_oversize: u64,
    /// One-sided requests (RTW, RTR, RTA) this endpoint refused as their responder: a key
    /// or range it does not serve, a read over [`crate::MAX_READ_SIZE`], an atomic it
    /// cannot apply, no operation slot left. EFA RDM v4 has no error answer to them
    /// (efa-rdm-protocol-v4 §3.3 and §4.1 define none; PEER_ERROR is not part of v4):
    /// the requester's read, fetch/compare atomic, delivery-complete or long write waits
    /// until its owner ends it ([`crate::Endpoint::abort`]). Also counted in
    /// `rx_invalid`.
    pub rx_requests_refused: u64,
    /// Packets dropped because they would have added a peer to a full address book
    /// ([`crate::Config::max_peers`]): a REQ from an unknown raw address, or from a known
    /// GID and QPN with a new connid.
    pub rx_peer_limit: u64,
    /// Application operations ended by [`crate::Endpoint::abort`] or
    /// [`crate::Endpoint::remove_peer`] (each completed with [`OpError::Aborted`]).
    pub aborted: u64,
    /// Peers removed with [`crate::Endpoint::remove_peer`].
    pub peers_removed: u64,
}

impl From<AtomicError> for CallError {
    fn from(e: AtomicError) -> Self {
        CallError::Atomic(e)
    }
}

/// An atomic request's arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct AtomicArgs {
    /// Element type.
    pub datatype: Datatype,
    /// Operation.
    pub op: AtomicOp,
    /// The operand (`buf`); ignored by [`AtomicOp::Read`] except for its length.
    pub operand: Vec<u8>,
    /// The compare operand for the compare family.
    pub compare: Option<Vec<u8>>,
}

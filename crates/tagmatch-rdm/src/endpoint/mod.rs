//! The endpoint state machine.

mod abort;
mod coverage;
mod memory;
mod one_sided;
mod output;
mod receive;
mod responder;
mod two_sided;

use foldhash::HashMap;
use std::collections::VecDeque;

use slab::Slab;
use tagmatch_engine::{
    Arrived, Engine, Envelope, Posted, RecvHandle, RecvSpec, RejectReason, Source, TagSel,
};
use tagmatch_wire::efa::{
    extra, flags, ExtraInfo, Field, HandshakeExt, Packet, PacketType, RawAddr, RawAddrHdr, Repr,
    RmaIov, RtmHeader, RMA_IOV_LEN,
};

use crate::atomic::{self, AtomicOp, Datatype};
use crate::config::Config;
use crate::genslab::GenSlab;
use crate::types::*;
use coverage::{Added, Coverage};

/// Communicator ids used with the matching engine: untagged and tagged messages match
/// separately (`fi_recv` never takes an `fi_tsend`), and RTAs only use the reorder buffer.
/// Tagged messages take communicator 0, the one whose exact matches have array list
/// heads (the engine's `dense` module: `exact_owner`).
const COMM_TAG: u32 = 0;
const COMM_MSG: u32 = 1;
const COMM_RTA: u32 = 2;

/// READRSP / CTSDATA / ATOMRSP header sizes (wire-layouts §A.5).
const READRSP_HDR: usize = 24;
const CTSDATA_HDR: usize = 24;
const CTSDATA_CONNID: usize = 8;
const ATOMRSP_HDR: usize = 24;

/// What a peer told us in its HANDSHAKE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerHandshake {
    /// All `extra_info` bits, including those this endpoint does not know.
    pub extra_info: ExtraInfo,
    /// HOST_ID header.
    pub host_id: Option<u64>,
    /// DEVICE_VERSION header.
    pub device_version: Option<u32>,
}

#[derive(Debug)]
struct Peer {
    addr: RawAddr,
    handshake_sent: bool,
    handshake: Option<PeerHandshake>,
    handshake_triggered: bool,
    /// A REQ went to the peer: its answer will include a handshake.
    req_sent: bool,
    next_msg_id: u32,
    msgs: HashMap<u32, Slot>,
    /// Operations waiting for the peer's handshake, in the application's call order (see
    /// `tx_begin`); they start, and take their `msg_id`s, in this order.
    waiting: Vec<Waiting>,
    /// Removed ([`Endpoint::remove_peer`]): the slot stays (a `PeerId` is never given to
    /// another peer) with its address only; nothing refers to it any more.
    removed: bool,
}

/// An operation waiting for a peer's handshake.
#[derive(Debug)]
enum Waiting {
    /// A TX op.
    Tx(u32),
    /// A fetch/compare atomic: the RX op that awaits its ATOMRSP, and its request, sent
    /// (with the next `msg_id`) when it starts.
    Rta(u32, RtaReq),
}

/// A FETCH_RTA / COMPARE_RTA not sent yet.
#[derive(Debug)]
struct RtaReq {
    ty: PacketType,
    datatype: Datatype,
    op: AtomicOp,
    /// `buf`, followed for COMPARE_RTA by `compare`.
    payload: Vec<u8>,
    remote: RmaIov,
}

impl Peer {
    fn new(addr: RawAddr, initial_msg_id: u32) -> Peer {
        Peer {
            addr,
            handshake_sent: false,
            handshake: None,
            handshake_triggered: false,
            req_sent: false,
            next_msg_id: initial_msg_id,
            msgs: HashMap::default(),
            waiting: Vec::new(),
            removed: false,
        }
    }

    fn has(&self, bit: usize) -> bool {
        self.handshake.is_some_and(|h| h.extra_info.has(bit))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Pending(usize),
    Matched(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RegState {
    None,
    Pending,
    Ok(MrKey),
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    App,
    Tx(u32),
    Rx(u32),
    /// The buffer of an aborted operation that the device still uses (a registration not
    /// answered, RDMA operations in flight, counted in `users`): freed, and deregistered,
    /// once the device is done with it (see `Endpoint::reap`).
    Orphan,
}

#[derive(Debug)]
struct Region {
    bytes: Vec<u8>,
    reg: RegState,
    owner: Owner,
    /// Sends from and receives into this (application) region not finished yet.
    users: u32,
    /// Sends from this region waiting for its registration (TX op ids).
    reg_waiters: Vec<u32>,
    /// Receives into this region whose reads wait for its registration (RX op ids).
    rx_waiters: Vec<u32>,
    /// Registered for peers' access ([`Transmit::Register::remote`]); an application
    /// region registered local-only is a receive destination and a send source whose
    /// bytes peers never read directly.
    remote: bool,
}

/// The receive-side subprotocol of an inbound message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RxProto {
    Eager,
    Medium,
    LongCts,
    LongRead,
    RuntRead,
}

/// Atomic request details of an RTA.
#[derive(Debug, Clone)]
struct Rta {
    ty: PacketType,
    datatype: u32,
    op: u32,
    iov: Vec<RmaIov>,
    /// FETCH/COMPARE: requester's recv_id; DC_WRITE: sender's send_id.
    id: u32,
    buf: Vec<u8>,
    compare: Option<Vec<u8>>,
}

/// A message (or RTA) received but not yet matched.
#[derive(Debug)]
struct Inbound {
    peer: PeerId,
    msg_id: u32,
    proto: RxProto,
    tag: u64,
    msg_len: u64,
    cq_data: Option<u64>,
    send_id: u32,
    credit_request: u32,
    dc: bool,
    data: Vec<u8>,
    /// The message's bytes received so far (into `data`).
    got: Coverage,
    read_iov: Vec<RmaIov>,
    runt_len: u64,
    rta: Option<Rta>,
    /// Claimed ([`Endpoint::mprobe`]) from a peer since removed: its receive completes
    /// with [`OpError::Aborted`] (its data is gone, the rest of it will never come).
    aborted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RxKind {
    /// A posted receive.
    Recv,
    /// The responder of an emulated long-CTS or long-read write.
    WriteTarget,
    /// The requester of an emulated read.
    ReadReq,
    /// The requester of a fetch/compare atomic.
    AtomicResp(OpKind),
    /// The requester of a direct read.
    DirectRead,
}

#[derive(Debug)]
struct RxOp {
    op: OpId,
    kind: RxKind,
    peer: Option<PeerId>,
    posted: Option<RecvHandle>,
    mem: Option<usize>,
    buf_len: u64,
    iov: Vec<RmaIov>,
    proto: RxProto,
    matched: bool,
    tag: u64,
    msg_len: u64,
    /// The message's bytes received so far (placed in the buffer or write target).
    got: Coverage,
    requested: u64,
    window_left: u64,
    send_id: u32,
    msg_id: u32,
    /// The sender's `credit_request` (packets it would like per CTS).
    credits: u32,
    dc: bool,
    cq_data: Option<u64>,
    read_iov: Vec<RmaIov>,
    runt_len: u64,
    read_started: bool,
    reads_issued: bool,
    rdma_left: u32,
    rdma_failed: bool,
    error: Option<OpError>,
    /// Emulated-read fallback of a direct read.
    remote: Option<RemoteAddr>,
    /// `mem` is the caller's application region ([`Endpoint::trecv_region`]), not this
    /// receive's own buffer: the message lands at `base` in it, and the region stays
    /// registered and the caller's when the receive completes.
    borrowed: bool,
    /// Offset of the receive's bytes in `mem` (non-zero only when `borrowed`).
    base: u64,
}

impl RxOp {
    fn new(op: OpId, kind: RxKind) -> RxOp {
        RxOp {
            op,
            kind,
            peer: None,
            posted: None,
            mem: None,
            buf_len: 0,
            iov: Vec::new(),
            proto: RxProto::Eager,
            matched: false,
            tag: 0,
            msg_len: 0,
            got: Coverage::default(),
            requested: 0,
            window_left: 0,
            send_id: 0,
            msg_id: 0,
            credits: 0,
            dc: false,
            cq_data: None,
            read_iov: Vec::new(),
            runt_len: 0,
            read_started: false,
            reads_issued: false,
            rdma_left: 0,
            rdma_failed: false,
            error: None,
            remote: None,
            borrowed: false,
            base: 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxKind {
    Send {
        tagged: bool,
    },
    Write,
    /// The responder side of an emulated read: no application completion.
    ReadResponder,
    AtomicWrite,
}

#[derive(Debug)]
struct TxOp {
    op: OpId,
    kind: TxKind,
    peer: PeerId,
    proto: Protocol,
    mem: usize,
    /// Offset of the message in `mem` (non-zero only for sends from a caller's region).
    mem_off: u64,
    /// `mem` is the caller's registered region ([`Endpoint::tsend_from`]): it is not freed
    /// (nor deregistered) when the operation ends.
    borrowed: bool,
    len: u64,
    tag: u64,
    cq_data: Option<u64>,
    dc: bool,
    msg_id: u32,
    remote: Vec<RmaIov>,
    next_offset: u64,
    window_end: u64,
    peer_recv_id: u32,
    inflight: u32,
    started: bool,
    all_queued: bool,
    await_receipt: bool,
    await_eor: bool,
    rdma_left: u32,
    error: Option<OpError>,
    /// Runt bytes sent before the RDMA read (runting read).
    runt_len: u64,
    /// Atomic request (write atomic).
    atomic: Option<(Datatype, AtomicOp)>,
}

impl TxOp {
    /// A TX op with every progress field at its start value.
    fn new(op: OpId, kind: TxKind, peer: PeerId, proto: Protocol, mem: usize, len: u64) -> TxOp {
        TxOp {
            op,
            kind,
            peer,
            proto,
            mem,
            mem_off: 0,
            borrowed: false,
            len,
            tag: 0,
            cq_data: None,
            dc: false,
            msg_id: 0,
            remote: Vec::new(),
            next_offset: 0,
            window_end: 0,
            peer_recv_id: 0,
            inflight: 0,
            started: false,
            all_queued: false,
            await_receipt: false,
            await_eor: false,
            rdma_left: 0,
            error: None,
            runt_len: 0,
            atomic: None,
        }
    }
}

#[derive(Debug)]
struct PendingSend {
    /// Its [`SendToken`]: the slot in `Endpoint::sends` in the low 32 bits, a sequence
    /// number above (a stale token does not hit the slot's next send).
    token: u64,
    peer: PeerId,
    bytes: Vec<u8>,
    owner: PktOwner,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PktOwner {
    None,
    Handshake,
    /// The packet that provokes the peer's handshake (`trigger_handshake`).
    Trigger,
    Tx(u32),
    Rx(u32),
    /// Its operation was aborted, or its peer removed: the answer is ignored, and a
    /// packet the device could not post (`SendOutcome::Again`) is not sent again.
    Aborted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RdmaOwner {
    Tx(u32),
    Rx(u32),
    /// An RDMA operation of an aborted operation, into or from region `.0` (`None`: an
    /// application region the operation did not hold): its completion releases one use
    /// of the region (`Endpoint::release_use`).
    Detached(Option<usize>),
}

/// A sans-IO EFA RDM protocol v4 endpoint. See the crate documentation.
#[derive(Debug)]
pub struct Endpoint {
    cfg: Config,
    addr: RawAddr,
    peers: Vec<Peer>,
    /// Peers by full address (GID, QPN, qkey): `add_peer` is O(1).
    by_addr: HashMap<([u8; 16], u16, u32), PeerId>,
    /// The first peer added for each (GID, QPN): the device's address-handle lookup, done
    /// for every received packet, is O(1).
    by_ah: HashMap<([u8; 16], u16), PeerId>,
    engine: Engine<u32, u32>,
    /// Scratch for the arrivals of one [`Engine::deliver`] (its capacity reused).
    arrived: Vec<Arrived<u32, u32>>,
    tx: GenSlab<TxOp>,
    rx: GenSlab<RxOp>,
    inbound: Slab<Inbound>,
    mem: Slab<Region>,
    mr_by_key: HashMap<u64, usize>,
    out: VecDeque<Transmit>,
    sends: Slab<PendingSend>,
    /// Buffers of answered [`PendingSend`]s, reused for the next packets' copies.
    spare_copies: Vec<Vec<u8>>,
    rdmas: HashMap<u64, RdmaOwner>,
    next_token: u64,
    completions: VecDeque<Completion>,
    /// Completions [`Endpoint::poll_completion`] handed out so far.
    completions_taken: u64,
    stats: Stats,
    next_op: u64,
    /// The protocols of the last [`PROTOCOL_MEMORY`] operations, slot `op % PROTOCOL_MEMORY`
    /// holding `(op, protocol)` (op 0 is never issued: an empty slot).
    protocols: Vec<(u64, Protocol)>,
    /// See [`Endpoint::admission_epoch`].
    admission: u64,
    /// Peers not removed (what [`Config::max_peers`] bounds).
    live_peers: usize,
}

/// How many operations [`Endpoint::protocol_of`] remembers: those among the last
/// `PROTOCOL_MEMORY` operations started (sends, receives, RMA, atomics alike).
pub const PROTOCOL_MEMORY: usize = 4096;

/// The largest read ([`Endpoint::read`]) a responder of this crate serves: 4 GiB. An
/// emulated read (SHORT_RTR / LONGCTS_RTR) asking for more is refused by the responder
/// (counted in `Stats::rx_requests_refused`) and, EFA RDM v4 having no error answer to
/// an RTR, never answered; so [`Endpoint::read`] refuses such a read when it is called
/// ([`CallError::ReadTooLarge`]), even one that would go by direct RDMA read, since a
/// direct read whose registration or RDMA read fails falls back to the emulated read.
pub const MAX_READ_SIZE: u64 = 1 << 32;

/// Whether a read of `len` bytes is one a responder serves ([`MAX_READ_SIZE`]): the one
/// rule the requester ([`Endpoint::read`]) and the responder (`on_rtr`) both apply.
fn check_read_len(len: u64) -> Result<(), CallError> {
    if len > MAX_READ_SIZE {
        return Err(CallError::ReadTooLarge {
            len,
            max: MAX_READ_SIZE,
        });
    }
    Ok(())
}

/// Refuses a remote range `addr .. addr + len` that runs past the end of the address
/// space: no region holds it, and a responder refuses it without an answer.
fn check_remote_range(remote: RemoteAddr, len: u64) -> Result<(), CallError> {
    match remote.addr.checked_add(len) {
        Some(_) => Ok(()),
        None => Err(CallError::RemoteRange {
            addr: remote.addr,
            len,
        }),
    }
}

impl Endpoint {
    /// Creates an endpoint whose own raw address is `addr` (its `qkey` is the connid).
    pub fn new(cfg: Config, addr: RawAddr) -> Endpoint {
        let ecfg = tagmatch_engine::Config::default()
            .reorder_window(
                cfg.reorder_window
                    .clamp(1, tagmatch_engine::MAX_REORDER_WINDOW),
            )
            .initial_seq(cfg.initial_msg_id)
            .max_bytes(cfg.max_unexpected_bytes)
            .max_messages(cfg.max_unexpected_msgs)
            .claims_count(cfg.claims_count);
        Endpoint {
            cfg,
            addr,
            peers: Vec::new(),
            by_addr: HashMap::default(),
            by_ah: HashMap::default(),
            engine: Engine::new(ecfg),
            arrived: Vec::new(),
            tx: GenSlab::default(),
            rx: GenSlab::default(),
            inbound: Slab::new(),
            mem: Slab::new(),
            mr_by_key: HashMap::default(),
            out: VecDeque::new(),
            sends: Slab::new(),
            spare_copies: Vec::new(),
            rdmas: HashMap::default(),
            next_token: 1,
            completions: VecDeque::new(),
            completions_taken: 0,
            stats: Stats::default(),
            next_op: 1,
            protocols: Vec::new(),
            admission: 0,
            live_peers: 0,
        }
    }

    /// A counter that moves whenever a packet this endpoint refused
    /// ([`crate::Rx::Refused`]: receiver not ready) may have become admissible: a receive
    /// was posted (the message may match it instead of needing the budget), an
    /// unexpected message was received (`mrecv`, or matched by a receive: budget freed)
    /// or, with `Config::claims_count` off, claimed, or messages were processed in order (a peer's reorder window moved, and matched
    /// messages took receives). While it stays put, refused packets would be refused
    /// again: the owner need not hand them in (and need not spin doing so) —
    /// `tagmatch_transport::Node` asks the device to redeliver them only when it moved.
    pub fn admission_epoch(&self) -> u64 {
        self.admission
    }

    /// This endpoint's raw address.
    pub fn addr(&self) -> RawAddr {
        self.addr
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Drop-and-count counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The matching engine's counters: posted and unexpected queue depths, claimed and
    /// reorder-buffer depths, bytes held, match attempts (candidates inspected), hits,
    /// misses, cancels and rejections. Tagged, untagged and RTA traffic share one engine
    /// (separate communicators), so these cover all three.
    pub fn matching_stats(&self) -> crate::MatchCounters {
        self.engine.counters()
    }

    /// Inserts a peer address (`fi_av_insert`); inserting the same address again returns
    /// the same id. An address inserted after its peer was removed
    /// ([`Endpoint::remove_peer`]) gets a new id: ids are never reused.
    pub fn add_peer(&mut self, addr: RawAddr) -> PeerId {
        if let Some(&id) = self.by_addr.get(&(addr.gid, addr.qpn, addr.qkey)) {
            return id;
        }
        let id = PeerId(self.peers.len() as u32);
        self.peers.push(Peer::new(addr, self.cfg.initial_msg_id));
        self.live_peers += 1;
        self.by_addr.insert((addr.gid, addr.qpn, addr.qkey), id);
        self.by_ah.entry((addr.gid, addr.qpn)).or_insert(id);
        id
    }

    /// [`Endpoint::add_peer`] for an address a packet brought (efa-rdm-protocol-v4 §2.2
    /// and §4.4): `None`, counted, when it is new and the address book holds
    /// [`Config::max_peers`] peers already.
    fn admit_peer(&mut self, addr: RawAddr) -> Option<PeerId> {
        if let Some(&id) = self.by_addr.get(&(addr.gid, addr.qpn, addr.qkey)) {
            return Some(id);
        }
        if self.live_peers >= self.cfg.max_peers {
            tracing::debug!(max = self.cfg.max_peers, "address book full, dropping");
            self.stats.rx_peer_limit += 1;
            return None;
        }
        Some(self.add_peer(addr))
    }

    /// Peers in the address book (removed ones not counted): what
    /// [`Config::max_peers`] bounds.
    pub fn peer_count(&self) -> usize {
        self.live_peers
    }

    /// The live (not removed) peer `peer`.
    fn live_peer(&self, peer: PeerId) -> Option<&Peer> {
        self.peers.get(peer.0 as usize).filter(|p| !p.removed)
    }

    /// The peer the device would report for a packet from GID `gid` and QP `qpn` (the
    /// address handle lookup: the device knows nothing of connids). With several peers on
    /// one (GID, QPN) — a QP reused by a restarted process, efa-rdm-protocol-v4 §4.4 — this
    /// is the first one added; [`Endpoint::lookup_peer_exact`] tells them apart.
    pub fn lookup_peer(&self, gid: &[u8; 16], qpn: u16) -> Option<PeerId> {
        self.by_ah.get(&(*gid, qpn)).copied()
    }

    /// The peer added with exactly this GID, QPN and qkey (connid).
    pub fn lookup_peer_exact(&self, gid: &[u8; 16], qpn: u16, qkey: u32) -> Option<PeerId> {
        self.by_addr.get(&(*gid, qpn, qkey)).copied()
    }

    /// The address `peer` was added with (`None` once removed).
    pub fn peer_addr(&self, peer: PeerId) -> Option<RawAddr> {
        Some(self.live_peer(peer)?.addr)
    }

    /// The peer's HANDSHAKE, once received.
    pub fn peer_handshake(&self, peer: PeerId) -> Option<PeerHandshake> {
        self.live_peer(peer)?.handshake
    }

    /// The next `msg_id` this endpoint will use towards `peer`.
    pub fn next_msg_id(&self, peer: PeerId) -> Option<u32> {
        Some(self.live_peer(peer)?.next_msg_id)
    }

    /// Next thing for the device to do.
    #[inline]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// Whether something waits for [`Endpoint::poll_transmit`] or
    /// [`Endpoint::poll_completion`] (an owner that would sleep must take it first).
    #[inline]
    pub fn has_output(&self) -> bool {
        !self.out.is_empty() || !self.completions.is_empty()
    }

    /// Whether something waits for [`Endpoint::poll_transmit`] (completions aside, unlike
    /// [`Endpoint::has_output`]).
    #[inline]
    pub fn has_transmits(&self) -> bool {
        !self.out.is_empty()
    }

    /// Next application completion.
    #[inline]
    pub fn poll_completion(&mut self) -> Option<Completion> {
        let c = self.completions.pop_front();
        self.completions_taken += u64::from(c.is_some());
        c
    }

    /// How many completions [`Endpoint::poll_completion`] handed out so far (an owner
    /// that leaves its ready completions in the queue learns from it that someone else
    /// took some).
    #[inline]
    pub fn completions_taken(&self) -> u64 {
        self.completions_taken
    }

    /// How many completions wait for [`Endpoint::poll_completion`].
    #[inline]
    pub fn completion_count(&self) -> usize {
        self.completions.len()
    }

    /// The subprotocol an operation used (for the last [`PROTOCOL_MEMORY`] operations):
    /// the one it chose, or the fallback it switched to (long-CTS after a READ_NACK or a
    /// failed registration of the send buffer, the emulated paths after a failed direct
    /// RDMA read or write).
    pub fn protocol_of(&self, op: OpId) -> Option<Protocol> {
        match self.protocols.get(op.0 as usize % PROTOCOL_MEMORY) {
            Some(&(o, p)) if o == op.0 => Some(p),
            _ => None,
        }
    }

    /// Memory regions held (application regions plus operation buffers) and device
    /// operations not yet answered (sends, RDMA operations): for leak checks.
    pub fn resources(&self) -> (usize, usize, usize) {
        (self.mem.len(), self.sends.len(), self.rdmas.len())
    }

    /// Operations in flight (sender side, receiver side, unexpected messages).
    pub fn in_flight(&self) -> (usize, usize, usize) {
        (self.tx.len(), self.rx.len(), self.inbound.len())
    }

    /// Remembers the protocol of the last [`PROTOCOL_MEMORY`] operations.
    #[inline]
    fn note_protocol(&mut self, op: OpId, proto: Protocol) {
        // A slot per operation id, overwritten by the operation PROTOCOL_MEMORY ids later:
        // no hashing and no eviction queue on the send path.
        if self.protocols.len() != PROTOCOL_MEMORY {
            self.alloc_protocols();
        }
        if let Some(slot) = self.protocols.get_mut(op.0 as usize % PROTOCOL_MEMORY) {
            *slot = (op.0, proto);
        }
    }

    /// The table of [`Endpoint::note_protocol`], made at the first operation.
    #[cold]
    #[inline(never)]
    fn alloc_protocols(&mut self) {
        self.protocols = vec![(0, Protocol::Eager); PROTOCOL_MEMORY];
    }

    fn new_op(&mut self) -> OpId {
        let op = OpId(self.next_op);
        self.next_op += 1;
        op
    }

    fn token(&mut self) -> u64 {
        let t = self.next_token;
        self.next_token += 1;
        t
    }
}

const EAGER: [PacketType; 4] = [
    PacketType::EagerMsgRtm,
    PacketType::EagerTagRtm,
    PacketType::DcEagerMsgRtm,
    PacketType::DcEagerTagRtm,
];
const MEDIUM: [PacketType; 4] = [
    PacketType::MediumMsgRtm,
    PacketType::MediumTagRtm,
    PacketType::DcMediumMsgRtm,
    PacketType::DcMediumTagRtm,
];
const LONGCTS: [PacketType; 4] = [
    PacketType::LongctsMsgRtm,
    PacketType::LongctsTagRtm,
    PacketType::DcLongctsMsgRtm,
    PacketType::DcLongctsTagRtm,
];

fn pick(tagged: bool, dc: bool, family: [PacketType; 4]) -> PacketType {
    family[tagged as usize + 2 * dc as usize]
}

fn check_atomic(args: &AtomicArgs, compare: bool) -> Result<(), CallError> {
    use atomic::AtomicError as E;
    if !args.op.valid_for(args.datatype) {
        return Err(E::OpNotValidForType.into());
    }
    let n = args.operand.len();
    if n == 0 || n % args.datatype.size() != 0 {
        return Err(E::Length.into());
    }
    if compare != args.op.is_compare() {
        return Err(E::Op(args.op as u32).into());
    }
    match &args.compare {
        Some(c) if c.len() != n => Err(E::Length.into()),
        None if compare => Err(E::Length.into()),
        _ => Ok(()),
    }
}

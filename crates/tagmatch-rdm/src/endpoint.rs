//! The endpoint state machine.

use std::collections::{HashMap, VecDeque};

use slab::Slab;
use tagmatch_engine::{Arrived, Engine, Envelope, Posted, RecvHandle, RecvSpec, Source, TagSel};
use tagmatch_wire::efa::{
    extra, flags, ExtraInfo, Field, HandshakeExt, Packet, PacketType, RawAddr, RawAddrHdr, Repr,
    RmaIov, RMA_IOV_LEN,
};

use crate::atomic::{self, AtomicOp, Datatype};
use crate::config::Config;
use crate::genslab::GenSlab;
use crate::types::*;

/// Communicator ids used with the matching engine: untagged and tagged messages match
/// separately (`fi_recv` never takes an `fi_tsend`), and RTAs only use the reorder buffer.
const COMM_MSG: u32 = 0;
const COMM_TAG: u32 = 1;
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
    waiting: Vec<u32>,
}

impl Peer {
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
}

#[derive(Debug)]
struct Region {
    bytes: Vec<u8>,
    reg: RegState,
    owner: Owner,
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
    received: u64,
    read_iov: Vec<RmaIov>,
    runt_len: u64,
    rta: Option<Rta>,
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
    received: u64,
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
            received: 0,
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

#[derive(Debug)]
struct PendingSend {
    peer: PeerId,
    bytes: Vec<u8>,
    owner: PktOwner,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PktOwner {
    None,
    Handshake,
    Tx(u32),
    Rx(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RdmaOwner {
    Tx(u32),
    Rx(u32),
}

/// A sans-IO EFA RDM protocol v4 endpoint. See the crate documentation.
#[derive(Debug)]
pub struct Endpoint {
    cfg: Config,
    addr: RawAddr,
    peers: Vec<Peer>,
    engine: Engine<u32, u32>,
    tx: GenSlab<TxOp>,
    rx: GenSlab<RxOp>,
    inbound: Slab<Inbound>,
    mem: Slab<Region>,
    mr_by_key: HashMap<u64, usize>,
    out: VecDeque<Transmit>,
    sends: HashMap<u64, PendingSend>,
    rdmas: HashMap<u64, RdmaOwner>,
    next_token: u64,
    completions: VecDeque<Completion>,
    posted_ops: HashMap<OpId, u32>,
    stats: Stats,
    next_op: u64,
    protocols: HashMap<OpId, Protocol>,
    protocol_order: VecDeque<OpId>,
}

/// How many operations [`Endpoint::protocol_of`] remembers.
pub const PROTOCOL_MEMORY: usize = 4096;

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
            .max_messages(cfg.max_unexpected_msgs);
        Endpoint {
            cfg,
            addr,
            peers: Vec::new(),
            engine: Engine::new(ecfg),
            tx: GenSlab::default(),
            rx: GenSlab::default(),
            inbound: Slab::new(),
            mem: Slab::new(),
            mr_by_key: HashMap::new(),
            out: VecDeque::new(),
            sends: HashMap::new(),
            rdmas: HashMap::new(),
            next_token: 1,
            completions: VecDeque::new(),
            posted_ops: HashMap::new(),
            stats: Stats::default(),
            next_op: 1,
            protocols: HashMap::new(),
            protocol_order: VecDeque::new(),
        }
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

    /// Inserts a peer address (`fi_av_insert`); inserting the same address again returns
    /// the same id.
    pub fn add_peer(&mut self, addr: RawAddr) -> PeerId {
        if let Some(i) = self.peers.iter().position(|p| same_addr(&p.addr, &addr)) {
            return PeerId(i as u32);
        }
        self.peers.push(Peer {
            addr,
            handshake_sent: false,
            handshake: None,
            handshake_triggered: false,
            req_sent: false,
            next_msg_id: self.cfg.initial_msg_id,
            msgs: HashMap::new(),
            waiting: Vec::new(),
        });
        PeerId(self.peers.len() as u32 - 1)
    }

    /// The peer the device would report for a packet from GID `gid` and QP `qpn` (the
    /// address handle lookup: the device knows nothing of connids).
    pub fn lookup_peer(&self, gid: &[u8; 16], qpn: u16) -> Option<PeerId> {
        self.peers
            .iter()
            .position(|p| &p.addr.gid == gid && p.addr.qpn == qpn)
            .map(|i| PeerId(i as u32))
    }

    /// The peer's HANDSHAKE, once received.
    pub fn peer_handshake(&self, peer: PeerId) -> Option<PeerHandshake> {
        self.peers.get(peer.0 as usize)?.handshake
    }

    /// The next `msg_id` this endpoint will use towards `peer`.
    pub fn next_msg_id(&self, peer: PeerId) -> Option<u32> {
        Some(self.peers.get(peer.0 as usize)?.next_msg_id)
    }

    /// Next thing for the device to do.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// Next application completion.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// The subprotocol an operation chose (for the last [`PROTOCOL_MEMORY`] operations).
    pub fn protocol_of(&self, op: OpId) -> Option<Protocol> {
        self.protocols.get(&op).copied()
    }

    /// Operations in flight (sender side, receiver side, unexpected messages).
    pub fn in_flight(&self) -> (usize, usize, usize) {
        (self.tx.len(), self.rx.len(), self.inbound.len())
    }

    /// Remembers the protocol of the last [`PROTOCOL_MEMORY`] operations.
    fn note_protocol(&mut self, op: OpId, proto: Protocol) {
        if self.protocols.insert(op, proto).is_none() {
            self.protocol_order.push_back(op);
            if self.protocol_order.len() > PROTOCOL_MEMORY {
                if let Some(old) = self.protocol_order.pop_front() {
                    self.protocols.remove(&old);
                }
            }
        }
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

    // ------------------------------------------------------------------------------------
    // Memory
    // ------------------------------------------------------------------------------------

    /// Hands `bytes` to the endpoint as an RMA target or source and asks the device to
    /// register it ([`Transmit::Register`]). Its key is known after
    /// [`Endpoint::on_register_done`].
    pub fn register_memory(&mut self, bytes: Vec<u8>) -> MemHandle {
        let len = bytes.len() as u64;
        let idx = self.mem.insert(Region {
            bytes,
            reg: RegState::Pending,
            owner: Owner::App,
        });
        self.out.push_back(Transmit::Register {
            mem: MemHandle(idx as u32),
            len,
        });
        MemHandle(idx as u32)
    }

    /// The registration of a region: `None` while pending, `Some(Err(()))` if it failed.
    pub fn mem_key(&self, mem: MemHandle) -> Option<Result<MrKey, ()>> {
        match self.mem.get(mem.0 as usize)?.reg {
            RegState::Ok(k) => Some(Ok(k)),
            RegState::Failed => Some(Err(())),
            _ => None,
        }
    }

    /// The bytes of a region (the device reads RDMA sources from here).
    pub fn memory(&self, mem: MemHandle) -> Option<&[u8]> {
        self.mem.get(mem.0 as usize).map(|r| &r.bytes[..])
    }

    /// The bytes of a region, mutably (the device writes RDMA destinations here).
    pub fn memory_mut(&mut self, mem: MemHandle) -> Option<&mut [u8]> {
        self.mem.get_mut(mem.0 as usize).map(|r| &mut r.bytes[..])
    }

    /// Takes an application region back (deregistering it).
    pub fn release_memory(&mut self, mem: MemHandle) -> Option<Vec<u8>> {
        match self.mem.get(mem.0 as usize) {
            Some(r) if r.owner == Owner::App => {}
            _ => return None,
        }
        Some(self.free_region(mem.0 as usize))
    }

    /// The region registered under `key` and the address of its first byte.
    pub fn mem_by_key(&self, key: u64) -> Option<(MemHandle, u64)> {
        let idx = *self.mr_by_key.get(&key)?;
        match self.mem.get(idx)?.reg {
            RegState::Ok(k) => Some((MemHandle(idx as u32), k.addr)),
            _ => None,
        }
    }

    fn new_region(&mut self, bytes: Vec<u8>, owner: Owner) -> usize {
        self.mem.insert(Region {
            bytes,
            reg: RegState::None,
            owner,
        })
    }

    fn free_region(&mut self, idx: usize) -> Vec<u8> {
        let Some(r) = self.mem.try_remove(idx) else {
            return Vec::new();
        };
        if let RegState::Ok(k) = r.reg {
            self.mr_by_key.remove(&k.key);
            self.out.push_back(Transmit::Deregister { key: k.key });
        }
        r.bytes
    }

    fn register_region(&mut self, idx: usize) {
        if let Some(r) = self.mem.get_mut(idx) {
            r.reg = RegState::Pending;
            let len = r.bytes.len() as u64;
            self.out.push_back(Transmit::Register {
                mem: MemHandle(idx as u32),
                len,
            });
        }
    }

    /// The device finished a registration.
    pub fn on_register_done(&mut self, mem: MemHandle, result: Result<MrKey, ()>) {
        let idx = mem.0 as usize;
        let Some(r) = self.mem.get_mut(idx) else {
            // The region is gone: release the key at once.
            self.stats.unknown_tokens += 1;
            if let Ok(k) = result {
                self.out.push_back(Transmit::Deregister { key: k.key });
            }
            return;
        };
        if r.reg != RegState::Pending {
            self.stats.unknown_tokens += 1;
            return;
        }
        let owner = r.owner;
        match result {
            Ok(k) => {
                r.reg = RegState::Ok(k);
                self.mr_by_key.insert(k.key, idx);
            }
            Err(()) => r.reg = RegState::Failed,
        }
        match owner {
            Owner::App => {}
            Owner::Tx(id) => self.tx_registered(id, result),
            Owner::Rx(id) => self.rx_registered(id, result),
        }
    }

    /// Resolves a remote-access iov entry against the registered regions: region index and
    /// offset, if the whole range lies in one region.
    fn resolve(&self, addr: u64, len: u64, key: u64) -> Option<(usize, usize)> {
        let idx = *self.mr_by_key.get(&key)?;
        let r = self.mem.get(idx)?;
        let RegState::Ok(k) = r.reg else { return None };
        let off = addr.checked_sub(k.addr)?;
        let end = off.checked_add(len)?;
        (end <= r.bytes.len() as u64).then_some((idx, off as usize))
    }

    /// Writes `data` at message offset `off` of the buffer list `iov`.
    fn scatter(&mut self, iov: &[RmaIov], mut off: u64, mut data: &[u8]) -> bool {
        for e in iov {
            if data.is_empty() {
                break;
            }
            if off >= e.len() {
                off -= e.len();
                continue;
            }
            let n = (e.len() - off).min(data.len() as u64);
            let Some(addr) = e.addr().checked_add(off) else {
                return false;
            };
            let Some((idx, o)) = self.resolve(addr, n, e.key()) else {
                return false;
            };
            self.mem[idx].bytes[o..o + n as usize].copy_from_slice(&data[..n as usize]);
            data = &data[n as usize..];
            off = 0;
        }
        data.is_empty()
    }

    /// Reads `len` bytes at message offset `off` of the buffer list `iov`.
    fn gather(&self, iov: &[RmaIov], mut off: u64, len: u64) -> Option<Vec<u8>> {
        let mut v = Vec::with_capacity(len.min(1 << 24) as usize);
        let mut left = len;
        for e in iov {
            if left == 0 {
                break;
            }
            if off >= e.len() {
                off -= e.len();
                continue;
            }
            let n = (e.len() - off).min(left);
            let (idx, o) = self.resolve(e.addr().checked_add(off)?, n, e.key())?;
            v.extend_from_slice(&self.mem[idx].bytes[o..o + n as usize]);
            left -= n;
            off = 0;
        }
        (left == 0).then_some(v)
    }

    // ------------------------------------------------------------------------------------
    // Packet output
    // ------------------------------------------------------------------------------------

    /// efa-rdm-protocol-v4 §2.2: "After the endpoint received the HANDSHAKE packet from the
    /// peer, it will stop including its raw address in the header (see section 4.3 for an
    /// exception)"; §4.3: "The easiest way to do so is to keep including the raw address
    /// header"; wire-layouts §A.6: "Raw address and connid are mutually exclusive … The
    /// connid header is sent only once the peer's handshake has arrived".
    fn req_opts(&self, peer: PeerId) -> (Option<RawAddrHdr>, Option<u32>) {
        let p = &self.peers[peer.0 as usize];
        let raw = p.handshake.is_none() || p.has(extra::REQUEST_CONSTANT_HEADER_LENGTH);
        if raw {
            (Some(RawAddrHdr::new(self.addr)), None)
        } else if p.has(extra::REQUEST_CONNID_HEADER) {
            (None, Some(self.addr.qkey))
        } else {
            (None, None)
        }
    }

    fn req_hdr_len(&self, peer: PeerId, ty: PacketType, cq: bool, n_iov: usize) -> usize {
        let (raw, connid) = self.req_opts(peer);
        ty.layout().size as usize
            + n_iov * RMA_IOV_LEN
            + raw.map_or(0, |r| r.wire_len())
            + if cq { 8 } else { 0 }
            + if connid.is_some() { 4 } else { 0 }
    }

    fn req(&self, peer: PeerId, ty: PacketType) -> Repr<'static> {
        let (raw, connid) = self.req_opts(peer);
        let mut r = Repr::new(ty);
        r.raw_addr = raw;
        r.connid = connid;
        r
    }

    /// A non-REQ packet. wire-layouts §A.5: CTS, READRSP, EOR, ATOMRSP, RECEIPT and
    /// READ_NACK are "always sent with CONNID_HDR"; CTSDATA "only after the peer's
    /// handshake has been received".
    fn ctrl(&self, peer: PeerId, ty: PacketType) -> Repr<'static> {
        let mut r = Repr::new(ty);
        r.connid = match ty {
            PacketType::CtsData => self.peers[peer.0 as usize]
                .handshake
                .is_some()
                .then_some(self.addr.qkey),
            _ => Some(self.addr.qkey),
        };
        r
    }

    fn ctsdata_payload(&self, peer: PeerId) -> usize {
        let connid = self.peers[peer.0 as usize].handshake.is_some();
        self.cfg
            .mtu
            .saturating_sub(CTSDATA_HDR + if connid { CTSDATA_CONNID } else { 0 })
            .max(1)
    }

    fn emit(&mut self, peer: PeerId, repr: &Repr<'_>, owner: PktOwner) {
        let mut bytes = vec![0u8; repr.buffer_len()];
        match repr.emit(&mut bytes) {
            Ok(_) => {}
            Err(e) => {
                tracing::error!(?e, ty = %repr.pkt_type, "cannot emit packet");
                return;
            }
        }
        if bytes.len() > self.cfg.mtu {
            // Only an ATOMRSP echoing a peer's larger operand can get here; the device will
            // refuse it and the requester's operation fails.
            tracing::warn!(ty = %repr.pkt_type, len = bytes.len(), "packet exceeds the MTU");
            self.stats.tx_oversize += 1;
        }
        if let PktOwner::Tx(id) = owner {
            if let Some(t) = self.tx.get_mut(id) {
                t.inflight += 1;
            }
        }
        self.push_send(peer, bytes, owner);
    }

    fn push_send(&mut self, peer: PeerId, bytes: Vec<u8>, owner: PktOwner) {
        if bytes.first().is_some_and(|&t| t >= 64) {
            self.peers[peer.0 as usize].req_sent = true;
        }
        let token = self.token();
        let dest = self.peers[peer.0 as usize].addr;
        self.stats.tx_packets += 1;
        self.sends.insert(
            token,
            PendingSend {
                peer,
                bytes: bytes.clone(),
                owner,
            },
        );
        self.out.push_back(Transmit::Send {
            token: SendToken(token),
            peer,
            dest,
            bytes,
        });
    }

    /// The device finished (or refused) a packet.
    pub fn on_send_done(&mut self, token: SendToken, outcome: SendOutcome) {
        let Some(p) = self.sends.remove(&token.0) else {
            self.stats.unknown_tokens += 1;
            return;
        };
        match outcome {
            SendOutcome::Again => {
                // efa-rdm-protocol-v4 §3.2 (medium): "it is possible … for some packets to be
                // sent successfully and others to not be sent due to temporarily being out
                // of resources. Implementation needs to be able to handle this case."
                self.stats.tx_again += 1;
                self.stats.tx_packets -= 1;
                self.push_send(p.peer, p.bytes, p.owner);
            }
            SendOutcome::Ok => {
                if let PktOwner::Tx(id) = p.owner {
                    if let Some(t) = self.tx.get_mut(id) {
                        t.inflight = t.inflight.saturating_sub(1);
                    }
                    self.tx_check(id);
                }
            }
            SendOutcome::Error => match p.owner {
                // efa-rdm-protocol-v4 §2.3: "it is normal that a HANDSHAKE packet encounters
                // a send error" — the application never waits for it.
                PktOwner::Handshake => {
                    self.stats.handshake_send_errors += 1;
                    // Send it again with the next packet from the peer.
                    if let Some(peer) = self.peers.get_mut(p.peer.0 as usize) {
                        peer.handshake_sent = false;
                    }
                }
                PktOwner::None => {}
                PktOwner::Tx(id) => {
                    if let Some(t) = self.tx.get_mut(id) {
                        t.inflight = t.inflight.saturating_sub(1);
                        t.error.get_or_insert(OpError::SendFailed);
                        t.await_eor = false;
                        t.await_receipt = false;
                        t.all_queued = true;
                        t.rdma_left = 0;
                    }
                    self.tx_check(id);
                }
                PktOwner::Rx(id) => {
                    if let Some(r) = self.rx.get_mut(id) {
                        r.error.get_or_insert(OpError::SendFailed);
                    }
                    self.rx_fail(id);
                }
            },
        }
    }

    fn send_handshake(&mut self, peer: PeerId) {
        // efa-rdm-protocol-v4 §2.1: "Upon receiving the 1st packet from a peer, an endpoint
        // must send back a handshake packet"; wire-layouts §A.5: "HEAD always sends CONNID,
        // DEVICE_VERSION and HMEM_P2P, plus HOST_ID when it is nonzero" and "Always send
        // [DEVICE_VERSION]".
        let mut r = Repr::new(PacketType::Handshake);
        let mut ei = ExtraInfo::with_words(1);
        ei.set_word(0, self.cfg.features.word());
        r.handshake = HandshakeExt {
            extra_info: ei,
            host_id: (self.cfg.host_id != 0).then_some(self.cfg.host_id),
            device_version: Some(self.cfg.device_version),
            user_recv_qp: None,
            hmem_p2p: self.cfg.send_hmem_p2p.then_some(0),
        };
        r.connid = Some(self.addr.qkey);
        self.stats.handshakes_sent += 1;
        self.peers[peer.0 as usize].handshake_sent = true;
        self.emit(peer, &r, PktOwner::Handshake);
    }

    /// Makes the peer send its HANDSHAKE: like libfabric's `efa_rdm_ep_trigger_handshake`,
    /// a zero-length EAGER_RTW, which every v4 peer handles and answers with a handshake.
    fn trigger_handshake(&mut self, peer: PeerId) {
        let p = &mut self.peers[peer.0 as usize];
        // libfabric `efa_rdm_ep_trigger_handshake`: nothing to do once a REQ has been sent
        // (the peer answers it with a handshake).
        if p.handshake.is_some() || p.handshake_triggered || p.req_sent {
            return;
        }
        p.handshake_triggered = true;
        let r = self.req(peer, PacketType::EagerRtw);
        self.emit(peer, &r, PktOwner::None);
    }

    // ------------------------------------------------------------------------------------
    // Application operations: two-sided
    // ------------------------------------------------------------------------------------

    fn check_peer(&self, peer: PeerId) -> Result<(), CallError> {
        if (peer.0 as usize) < self.peers.len() {
            Ok(())
        } else {
            Err(CallError::UnknownPeer)
        }
    }

    /// Tagged send (`fi_tsend`).
    pub fn tsend(
        &mut self,
        peer: PeerId,
        tag: u64,
        data: Vec<u8>,
        opts: SendOpts,
    ) -> Result<OpId, CallError> {
        self.send_inner(peer, Some(tag), data, opts)
    }

    /// Untagged send (`fi_send`).
    pub fn send(&mut self, peer: PeerId, data: Vec<u8>, opts: SendOpts) -> Result<OpId, CallError> {
        self.send_inner(peer, None, data, opts)
    }

    fn send_inner(
        &mut self,
        peer: PeerId,
        tag: Option<u64>,
        data: Vec<u8>,
        opts: SendOpts,
    ) -> Result<OpId, CallError> {
        self.check_peer(peer)?;
        let op = self.new_op();
        let len = data.len() as u64;
        let mem = self.new_region(data, Owner::App);
        let t = TxOp {
            op,
            kind: TxKind::Send {
                tagged: tag.is_some(),
            },
            peer,
            proto: Protocol::Eager,
            mem,
            len,
            tag: tag.unwrap_or(0),
            cq_data: opts.cq_data,
            dc: opts.delivery_complete,
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
        };
        let Some(id) = self.tx.insert(t) else {
            self.free_region(mem);
            return Err(CallError::TooManyOps);
        };
        self.mem[mem].owner = Owner::Tx(id);
        self.tx_begin(id);
        Ok(op)
    }

    /// Starts a TX op now, or after the peer's handshake when it needs the peer's features.
    fn tx_begin(&mut self, id: u32) {
        let Some(t) = self.tx.get(id) else { return };
        let peer = t.peer;
        let p = &self.peers[peer.0 as usize];
        // Operations queued behind a handshake keep later ones behind them, so that
        // `msg_id`s follow the application's send order.
        let needs_handshake = t.kind != TxKind::ReadResponder
            && ((t.dc && p.handshake.is_none()) || !p.waiting.is_empty());
        if needs_handshake {
            // efa-rdm-protocol-v4 §2.1: the DC decision needs the peer's features, so wait
            // for its handshake (and provoke one).
            self.peers[peer.0 as usize].waiting.push(id);
            self.trigger_handshake(peer);
            return;
        }
        self.tx_start(id);
    }

    fn tx_start(&mut self, id: u32) {
        let Some(t) = self.tx.get(id) else { return };
        if t.started {
            return;
        }
        let peer = t.peer;
        if t.dc && !self.peers[peer.0 as usize].has(extra::FEATURE_DELIVERY_COMPLETE) {
            // efa-rdm-protocol-v4 §2.1 (b): "if application requires delivery complete, but
            // the peer does not support it … the requester need to return an error to the
            // application (section 4.2)".
            if let Some(t) = self.tx.get_mut(id) {
                t.started = true;
                t.error = Some(OpError::DeliveryCompleteUnsupported);
                t.all_queued = true;
            }
            self.tx_check(id);
            return;
        }
        match t.kind {
            TxKind::Send { .. } => self.start_msg(id),
            TxKind::Write => self.start_write(id),
            TxKind::AtomicWrite => self.start_atomic_write(id),
            TxKind::ReadResponder => {}
        }
    }

    fn can_read(&self, peer: PeerId) -> bool {
        self.cfg.features.rdma_read && self.peers[peer.0 as usize].has(extra::FEATURE_RDMA_READ)
    }

    fn start_msg(&mut self, id: u32) {
        let t = &self.tx[id];
        let (peer, len, dc, cq) = (t.peer, t.len, t.dc, t.cq_data.is_some());
        let tagged = matches!(t.kind, TxKind::Send { tagged: true });
        let eager_ty = pick(tagged, dc, EAGER);
        let eager_max = self
            .cfg
            .mtu
            .saturating_sub(self.req_hdr_len(peer, eager_ty, cq, 0)) as u64;
        let p = &mut self.peers[peer.0 as usize];
        let msg_id = p.next_msg_id;
        p.next_msg_id = p.next_msg_id.wrapping_add(1);
        let read_ok = self.can_read(peer) && len >= self.cfg.min_read_msg_size;
        let proto = if len <= eager_max {
            Protocol::Eager
        } else if len <= self.cfg.max_medium_size {
            Protocol::Medium
        } else if read_ok
            && self.cfg.runt_size > 0
            && self.cfg.features.runt
            && self.peers[peer.0 as usize].has(extra::FEATURE_RUNT)
            && len > self.cfg.runt_size
        {
            Protocol::RuntRead
        } else if read_ok {
            Protocol::LongRead
        } else {
            Protocol::LongCts
        };
        let t = &mut self.tx[id];
        t.started = true;
        t.msg_id = msg_id;
        t.proto = proto;
        let op = t.op;
        self.note_protocol(op, proto);
        tracing::debug!(?op, ?proto, len, "send");
        match proto {
            Protocol::Eager => {
                let data = self.mem[self.tx[id].mem].bytes.clone();
                let r = self.msg_req(id, eager_ty).with(Field::MsgId, msg_id as u64);
                let r = Repr {
                    payload: &data,
                    ..r
                };
                self.emit(peer, &r, PktOwner::Tx(id));
                self.tx_queued_all(id);
            }
            Protocol::Medium => {
                let ty = pick(tagged, dc, MEDIUM);
                let per = self
                    .cfg
                    .mtu
                    .saturating_sub(self.req_hdr_len(peer, ty, cq, 0))
                    .max(1);
                let data = std::mem::take(&mut self.mem[self.tx[id].mem].bytes);
                for (i, chunk) in data.chunks(per).enumerate() {
                    let r = self
                        .msg_req(id, ty)
                        .with(Field::MsgId, msg_id as u64)
                        .with(Field::MsgLength, len)
                        .with(Field::SegOffset, (i * per) as u64);
                    let r = Repr {
                        payload: chunk,
                        ..r
                    };
                    self.emit(peer, &r, PktOwner::Tx(id));
                }
                let m = self.tx[id].mem;
                self.mem[m].bytes = data;
                self.tx_queued_all(id);
            }
            Protocol::LongCts => self.send_longcts_rtm(id, false),
            Protocol::LongRead | Protocol::RuntRead => {
                let m = self.tx[id].mem;
                self.register_region(m);
            }
            _ => {}
        }
    }

    /// A REQ of `ty` for TX op `id` with the fields every RTM of that op carries.
    fn msg_req(&self, id: u32, ty: PacketType) -> Repr<'static> {
        let t = &self.tx[id];
        let mut r = self.req(t.peer, ty);
        r.cq_data = t.cq_data;
        if ty.layout().has(Field::Tag) {
            r = r.with(Field::Tag, t.tag);
        }
        if ty.layout().has(Field::SendId) {
            r = r.with(Field::SendId, id as u64);
        }
        r
    }

    fn tx_queued_all(&mut self, id: u32) {
        if let Some(t) = self.tx.get_mut(id) {
            t.all_queued = true;
            t.await_receipt = t.dc;
        }
    }

    /// LONGCTS_RTM (or, after a READ_NACK, the header-only fallback REQ).
    fn send_longcts_rtm(&mut self, id: u32, nack: bool) {
        let t = &self.tx[id];
        let (peer, len, dc, cq) = (t.peer, t.len, t.dc, t.cq_data.is_some());
        let tagged = matches!(t.kind, TxKind::Send { tagged: true });
        let ty = match t.kind {
            TxKind::Write => {
                if dc {
                    PacketType::DcLongctsRtw
                } else {
                    PacketType::LongctsRtw
                }
            }
            _ => pick(tagged, dc, LONGCTS),
        };
        let n_iov = t.remote.len();
        let hdr = self.req_hdr_len(peer, ty, cq, n_iov);
        let room = self.cfg.mtu.saturating_sub(hdr) as u64;
        let mut r = self
            .msg_req(id, ty)
            .with(Field::MsgLength, len)
            .with(Field::CreditRequest, self.cfg.tx_min_credits as u64);
        if ty.layout().has(Field::MsgId) {
            r = r.with(Field::MsgId, t.msg_id as u64);
        }
        let remote = t.remote.clone();
        r.rma_iov = &remote;
        // efa-rdm-protocol-v4 §4.7: "The LONGCTS_RTM packet sent in the nack protocol does
        // not contain any application data"; wire-layouts §A.3 REQ_READ_NACK.
        let (start, n) = if nack {
            r.flags |= flags::REQ_READ_NACK;
            (t.next_offset, 0)
        } else {
            (0, room.min(len))
        };
        let data = self.mem[t.mem].bytes[start as usize..(start + n) as usize].to_vec();
        let r = Repr {
            payload: &data,
            ..r
        };
        self.emit(peer, &r, PktOwner::Tx(id));
        if let Some(t) = self.tx.get_mut(id) {
            t.next_offset = start + n;
            t.window_end = t.next_offset;
            t.proto = match t.kind {
                TxKind::Write => Protocol::LongCtsWrite,
                _ => Protocol::LongCts,
            };
        }
        self.tx_check(id);
    }

    fn tx_registered(&mut self, id: u32, result: Result<MrKey, ()>) {
        let Some(t) = self.tx.get(id) else { return };
        let (peer, proto) = (t.peer, t.proto);
        let key = match result {
            Ok(k) => k,
            Err(()) => {
                // The send buffer could not be registered: libfabric falls back to long-CTS
                // (and to emulated protocols for direct RMA).
                match proto {
                    Protocol::DirectWrite => {
                        self.tx[id].started = false;
                        self.start_write_emulated(id);
                    }
                    _ => self.send_longcts_rtm(id, false),
                }
                return;
            }
        };
        match proto {
            Protocol::LongRead | Protocol::RuntRead => {
                let t = &self.tx[id];
                let (len, dc, cq) = (t.len, t.dc, t.cq_data.is_some());
                let tagged = matches!(t.kind, TxKind::Send { tagged: true });
                let read_iov = [RmaIov::new(key.addr, len, key.key)];
                let iov_bytes = RmaIov::slice_as_bytes(&read_iov).to_vec();
                let _ = dc;
                if proto == Protocol::LongRead {
                    // efa-rdm-protocol-v4 §4.1: "The `read_iov` is used as the application
                    // data in the LONGREAD_RTM packet."
                    let ty = if tagged {
                        PacketType::LongreadTagRtm
                    } else {
                        PacketType::LongreadMsgRtm
                    };
                    let r = self
                        .msg_req(id, ty)
                        .with(Field::MsgId, t.msg_id as u64)
                        .with(Field::MsgLength, len)
                        .with(Field::ReadIovCount, 1);
                    let r = Repr {
                        payload: &iov_bytes,
                        ..r
                    };
                    self.emit(peer, &r, PktOwner::Tx(id));
                } else {
                    // efa-rdm-protocol-v4 §4.5: "the LONGREAD_RTM packet was replaced by
                    // multiple RUNTREAD_RTM packets, with each RUNTREAD_RTM carry some
                    // application data"; the payload is read_iov[] then the runt data.
                    let ty = if tagged {
                        PacketType::RuntreadTagRtm
                    } else {
                        PacketType::RuntreadMsgRtm
                    };
                    let runt = self.cfg.runt_size.min(len);
                    let per = self
                        .cfg
                        .mtu
                        .saturating_sub(self.req_hdr_len(peer, ty, cq, 0) + RMA_IOV_LEN)
                        .max(1) as u64;
                    let msg_id = t.msg_id;
                    let mut off = 0u64;
                    while off < runt {
                        let n = per.min(runt - off);
                        let mut payload = iov_bytes.clone();
                        payload.extend_from_slice(
                            &self.mem[self.tx[id].mem].bytes[off as usize..(off + n) as usize],
                        );
                        let r = self
                            .msg_req(id, ty)
                            .with(Field::MsgId, msg_id as u64)
                            .with(Field::MsgLength, len)
                            .with(Field::ReadIovCount, 1)
                            .with(Field::SegOffset, off)
                            .with(Field::RuntLength, runt);
                        let r = Repr {
                            payload: &payload,
                            ..r
                        };
                        self.emit(peer, &r, PktOwner::Tx(id));
                        off += n;
                    }
                    self.tx[id].runt_len = runt;
                    self.tx[id].next_offset = runt;
                }
                let t = &mut self.tx[id];
                t.await_eor = true;
                t.all_queued = true;
            }
            Protocol::LongReadWrite => {
                let t = &self.tx[id];
                let read_iov = [RmaIov::new(key.addr, t.len, key.key)];
                let iov_bytes = RmaIov::slice_as_bytes(&read_iov).to_vec();
                let remote = t.remote.clone();
                let mut r = self
                    .msg_req(id, PacketType::LongreadRtw)
                    .with(Field::MsgLength, t.len)
                    .with(Field::ReadIovCount, 1);
                r.rma_iov = &remote;
                let r = Repr {
                    payload: &iov_bytes,
                    ..r
                };
                self.emit(peer, &r, PktOwner::Tx(id));
                let t = &mut self.tx[id];
                t.await_eor = true;
                t.all_queued = true;
            }
            Protocol::DirectWrite => {
                let t = &self.tx[id];
                let dest = self.peers[peer.0 as usize].addr;
                let (mem, len) = (t.mem, t.len);
                let remote = t.remote.first().copied().unwrap_or_default();
                let token = self.token();
                self.rdmas.insert(token, RdmaOwner::Tx(id));
                // efa-rdm-protocol-v4 §4.6: "The workflow is just for the writer to keep
                // using RDMA write on the responder."
                self.out.push_back(Transmit::RdmaWrite {
                    token: RdmaToken(token),
                    peer,
                    dest,
                    local: MemHandle(mem as u32),
                    offset: 0,
                    remote: RemoteAddr {
                        addr: remote.addr(),
                        key: remote.key(),
                    },
                    len,
                });
                let t = &mut self.tx[id];
                t.rdma_left = 1;
                t.all_queued = true;
            }
            _ => {}
        }
        self.tx_check(id);
    }

    /// Queues CTSDATA packets up to the window the receiver granted.
    fn tx_pump(&mut self, id: u32) {
        let Some(t) = self.tx.get(id) else { return };
        let peer = t.peer;
        let per = self.ctsdata_payload(peer) as u64;
        loop {
            let t = &self.tx[id];
            let end = t.window_end.min(t.len);
            if t.next_offset >= end {
                break;
            }
            let off = t.next_offset;
            let n = per.min(end - off);
            let data = self.mem[t.mem].bytes[off as usize..(off + n) as usize].to_vec();
            let r = self
                .ctrl(peer, PacketType::CtsData)
                .with(Field::RecvId, t.peer_recv_id as u64)
                .with(Field::SegLength, n)
                .with(Field::SegOffset, off);
            let r = Repr {
                payload: &data,
                ..r
            };
            self.emit(peer, &r, PktOwner::Tx(id));
            self.tx[id].next_offset = off + n;
        }
        let t = &mut self.tx[id];
        if t.next_offset >= t.len {
            t.all_queued = true;
            t.await_receipt = t.dc;
        }
        self.tx_check(id);
    }

    /// Completes a TX op when nothing is outstanding.
    fn tx_check(&mut self, id: u32) {
        let Some(t) = self.tx.get(id) else { return };
        if !t.all_queued || t.inflight > 0 || t.await_receipt || t.await_eor || t.rdma_left > 0 {
            return;
        }
        let Some(t) = self.tx.remove(id) else { return };
        self.free_region(t.mem);
        let kind = match t.kind {
            TxKind::Send { .. } => OpKind::Send,
            TxKind::Write => OpKind::Write,
            TxKind::AtomicWrite => OpKind::AtomicWrite,
            TxKind::ReadResponder => return,
        };
        self.completions.push_back(Completion {
            op: t.op,
            kind,
            result: t.error.map_or(Ok(()), Err),
            data: Vec::new(),
            len: t.len,
            tag: t.tag,
            src: None,
            cq_data: None,
        });
    }

    /// Tagged receive (`fi_trecv`): matches tags `t` with `t & !ignore == tag & !ignore`,
    /// from `src` or any peer, into a buffer of `len` bytes.
    pub fn trecv(
        &mut self,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
        len: usize,
    ) -> Result<OpId, CallError> {
        self.recv_inner(COMM_TAG, src, Self::tag_sel(tag, ignore), len)
    }

    /// Untagged receive (`fi_recv`) into a buffer of `len` bytes.
    pub fn recv(&mut self, src: Option<PeerId>, len: usize) -> Result<OpId, CallError> {
        self.recv_inner(COMM_MSG, src, TagSel::Any, len)
    }

    fn recv_inner(
        &mut self,
        comm: u32,
        src: Option<PeerId>,
        tag: TagSel,
        len: usize,
    ) -> Result<OpId, CallError> {
        if let Some(p) = src {
            self.check_peer(p)?;
        }
        let op = self.new_op();
        let mem = self.new_region(vec![0; len], Owner::App);
        let mut r = RxOp::new(op, RxKind::Recv);
        r.mem = Some(mem);
        r.buf_len = len as u64;
        let Some(id) = self.rx.insert(r) else {
            self.free_region(mem);
            return Err(CallError::TooManyOps);
        };
        self.mem[mem].owner = Owner::Rx(id);
        match self.engine.post(Self::spec(comm, src, tag), id) {
            Ok(Posted::Matched(m)) => self.on_match(id, m.msg as usize),
            Ok(Posted::Pending(h)) => {
                self.rx[id].posted = Some(h);
                self.posted_ops.insert(op, id);
            }
            Err(_) => {
                self.rx.remove(id);
                self.free_region(mem);
                return Err(CallError::TooManyReceives);
            }
        }
        Ok(op)
    }

    fn spec(comm: u32, src: Option<PeerId>, tag: TagSel) -> RecvSpec {
        RecvSpec {
            comm,
            src: src.map_or(Source::Any, |p| Source::Rank(p.0)),
            tag,
        }
    }

    fn tag_sel(tag: u64, ignore: u64) -> TagSel {
        match !ignore {
            u64::MAX => TagSel::Exact(tag),
            0 => TagSel::Any,
            mask => TagSel::Masked { want: tag, mask },
        }
    }

    fn probe_info(&self, env: &Envelope, ib: u32) -> Option<ProbeInfo> {
        let ib = self.inbound.get(ib as usize)?;
        Some(ProbeInfo {
            src: PeerId(env.src),
            tag: ib.tag,
            len: ib.msg_len,
            cq_data: ib.cq_data,
        })
    }

    /// Peeks at the earliest unexpected tagged message matching (`fi_trecv` with
    /// `FI_PEEK`); it stays queued.
    pub fn tprobe(&mut self, src: Option<PeerId>, tag: u64, ignore: u64) -> Option<ProbeInfo> {
        let spec = Self::spec(COMM_TAG, src, Self::tag_sel(tag, ignore));
        let (env, ib) = self.engine.probe(&spec).map(|p| (p.env, *p.msg))?;
        self.probe_info(&env, ib)
    }

    /// Peeks at the earliest unexpected untagged message (`fi_recv` with `FI_PEEK`).
    pub fn probe(&mut self, src: Option<PeerId>) -> Option<ProbeInfo> {
        let spec = Self::spec(COMM_MSG, src, TagSel::Any);
        let (env, ib) = self.engine.probe(&spec).map(|p| (p.env, *p.msg))?;
        self.probe_info(&env, ib)
    }

    /// Claims the earliest unexpected tagged message matching (`FI_PEEK | FI_CLAIM`): no
    /// receive can take it any more; [`Endpoint::mrecv`] receives it.
    pub fn tmprobe(
        &mut self,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
    ) -> Option<(Claim, ProbeInfo)> {
        let spec = Self::spec(COMM_TAG, src, Self::tag_sel(tag, ignore));
        self.claim(&spec)
    }

    /// Claims the earliest unexpected untagged message.
    pub fn mprobe(&mut self, src: Option<PeerId>) -> Option<(Claim, ProbeInfo)> {
        let spec = Self::spec(COMM_MSG, src, TagSel::Any);
        self.claim(&spec)
    }

    fn claim(&mut self, spec: &RecvSpec) -> Option<(Claim, ProbeInfo)> {
        let c = self.engine.mprobe(spec)?;
        let ib = *self.engine.claimed(c.handle).ok()?;
        let info = self.probe_info(&c.env, ib)?;
        Some((Claim(c.handle), info))
    }

    /// Receives a claimed message into a buffer of `len` bytes (`FI_CLAIM`).
    pub fn mrecv(&mut self, claim: Claim, len: usize) -> Result<OpId, CallError> {
        let m = self
            .engine
            .mrecv(claim.0)
            .map_err(|_| CallError::UnknownOp)?;
        let op = self.new_op();
        let mem = self.new_region(vec![0; len], Owner::App);
        let mut r = RxOp::new(op, RxKind::Recv);
        r.mem = Some(mem);
        r.buf_len = len as u64;
        let Some(id) = self.rx.insert(r) else {
            // The claimed message can go nowhere else: drop it with its data.
            self.free_region(mem);
            self.inbound.try_remove(m.msg as usize);
            return Err(CallError::TooManyOps);
        };
        self.mem[mem].owner = Owner::Rx(id);
        self.on_match(id, m.msg as usize);
        Ok(op)
    }

    /// Cancels a posted receive that has not matched yet; it completes with
    /// [`OpError::Canceled`].
    pub fn cancel(&mut self, op: OpId) -> Result<(), CallError> {
        let id = self.posted_ops.remove(&op).ok_or(CallError::UnknownOp)?;
        let h = self
            .rx
            .get(id)
            .and_then(|r| r.posted)
            .ok_or(CallError::UnknownOp)?;
        self.engine.cancel(h).map_err(|_| CallError::UnknownOp)?;
        if let Some(r) = self.rx.get_mut(id) {
            r.error = Some(OpError::Canceled);
        }
        self.rx_finish(id);
        Ok(())
    }

    // ------------------------------------------------------------------------------------
    // Application operations: one-sided
    // ------------------------------------------------------------------------------------

    /// `fi_write` of `data` to the peer's `remote`.
    pub fn write(
        &mut self,
        peer: PeerId,
        data: Vec<u8>,
        remote: RemoteAddr,
        opts: SendOpts,
    ) -> Result<OpId, CallError> {
        self.check_peer(peer)?;
        let op = self.new_op();
        let len = data.len() as u64;
        let mem = self.new_region(data, Owner::App);
        let t = TxOp {
            op,
            kind: TxKind::Write,
            peer,
            proto: Protocol::EagerWrite,
            mem,
            len,
            tag: 0,
            cq_data: opts.cq_data,
            dc: opts.delivery_complete,
            msg_id: 0,
            remote: vec![RmaIov::new(remote.addr, len, remote.key)],
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
        };
        let Some(id) = self.tx.insert(t) else {
            self.free_region(mem);
            return Err(CallError::TooManyOps);
        };
        self.mem[mem].owner = Owner::Tx(id);
        self.tx_begin(id);
        Ok(op)
    }

    fn start_write(&mut self, id: u32) {
        let t = &self.tx[id];
        let peer = t.peer;
        let p = &self.peers[peer.0 as usize];
        if self.cfg.direct_write
            && self.cfg.features.rdma_write
            && p.has(extra::FEATURE_RDMA_WRITE)
            && t.cq_data.is_none()
            && t.len > 0
        {
            let t = &mut self.tx[id];
            t.started = true;
            t.proto = Protocol::DirectWrite;
            let (op, m) = (t.op, t.mem);
            self.note_protocol(op, Protocol::DirectWrite);
            self.register_region(m);
            return;
        }
        self.start_write_emulated(id);
    }

    fn start_write_emulated(&mut self, id: u32) {
        let t = &self.tx[id];
        let (peer, len, dc, cq) = (t.peer, t.len, t.dc, t.cq_data.is_some());
        let eager_ty = if dc {
            PacketType::DcEagerRtw
        } else {
            PacketType::EagerRtw
        };
        let eager_max = self
            .cfg
            .mtu
            .saturating_sub(self.req_hdr_len(peer, eager_ty, cq, 1)) as u64;
        let proto = if len <= eager_max {
            Protocol::EagerWrite
        } else if self.can_read(peer) && len >= self.cfg.min_read_write_size {
            Protocol::LongReadWrite
        } else {
            Protocol::LongCtsWrite
        };
        let t = &mut self.tx[id];
        t.started = true;
        t.proto = proto;
        let op = t.op;
        self.note_protocol(op, proto);
        match proto {
            Protocol::EagerWrite => {
                let t = &self.tx[id];
                let data = self.mem[t.mem].bytes.clone();
                let remote = t.remote.clone();
                let mut r = self.msg_req(id, eager_ty);
                r.rma_iov = &remote;
                let r = Repr {
                    payload: &data,
                    ..r
                };
                self.emit(peer, &r, PktOwner::Tx(id));
                self.tx_queued_all(id);
                self.tx_check(id);
            }
            Protocol::LongReadWrite => {
                let m = self.tx[id].mem;
                self.register_region(m);
            }
            _ => self.send_longcts_rtm(id, false),
        }
    }

    /// `fi_read` of `len` bytes from the peer's `remote`; the completion carries the data.
    pub fn read(
        &mut self,
        peer: PeerId,
        len: usize,
        remote: RemoteAddr,
    ) -> Result<OpId, CallError> {
        self.check_peer(peer)?;
        let op = self.new_op();
        let mem = self.new_region(vec![0; len], Owner::App);
        let direct = self.cfg.direct_read && self.can_read(peer) && len > 0;
        let mut r = RxOp::new(
            op,
            if direct {
                RxKind::DirectRead
            } else {
                RxKind::ReadReq
            },
        );
        r.mem = Some(mem);
        r.buf_len = len as u64;
        r.msg_len = len as u64;
        r.peer = Some(peer);
        r.matched = true;
        r.remote = Some(remote);
        r.proto = RxProto::LongCts;
        let Some(id) = self.rx.insert(r) else {
            self.free_region(mem);
            return Err(CallError::TooManyOps);
        };
        self.mem[mem].owner = Owner::Rx(id);
        if direct {
            // efa-rdm-protocol-v4 §4.1: "The direct read subprotocol … does not involve a
            // REQ packet. The workflow is just for the read requester keep using RDMA read
            // on the responder."
            self.note_protocol(op, Protocol::DirectRead);
            self.register_region(mem);
        } else {
            self.start_emulated_read(id);
        }
        Ok(op)
    }

    fn start_emulated_read(&mut self, id: u32) {
        let r = &mut self.rx[id];
        r.kind = RxKind::ReadReq;
        let (peer, len, op) = (r.peer.unwrap_or(PeerId(0)), r.msg_len, r.op);
        let remote = r.remote.unwrap_or(RemoteAddr { addr: 0, key: 0 });
        let short = len as usize <= self.cfg.mtu.saturating_sub(READRSP_HDR);
        let (ty, window, proto) = if short {
            (PacketType::ShortRtr, len, Protocol::ShortRead)
        } else {
            (
                PacketType::LongctsRtr,
                self.cts_window(peer, len, self.cfg.rx_window_packets),
                Protocol::LongCtsRead,
            )
        };
        self.note_protocol(op, proto);
        let r = &mut self.rx[id];
        r.requested = window;
        r.window_left = window;
        let iov = [RmaIov::new(remote.addr, len, remote.key)];
        // wire-layouts §A.6: "For SHORT_RTR, libfabric writes recv_length = total_len; for
        // LONGCTS_RTR it writes recv_length = the window".
        let mut req = self
            .req(peer, ty)
            .with(Field::MsgLength, len)
            .with(Field::RecvId, id as u64)
            .with(Field::RecvLength, window.min(u32::MAX as u64));
        req.rma_iov = &iov;
        self.emit(peer, &req, PktOwner::Rx(id));
    }

    /// Write atomic (`fi_atomic`).
    pub fn atomic_write(
        &mut self,
        peer: PeerId,
        args: AtomicArgs,
        remote: RemoteAddr,
        opts: SendOpts,
    ) -> Result<OpId, CallError> {
        self.check_peer(peer)?;
        check_atomic(&args, false)?;
        self.check_atomic_size(peer, args.operand.len(), PacketType::WriteRta)?;
        let op = self.new_op();
        let len = args.operand.len() as u64;
        let mem = self.new_region(args.operand, Owner::App);
        let t = TxOp {
            op,
            kind: TxKind::AtomicWrite,
            peer,
            proto: Protocol::Atomic,
            mem,
            len,
            tag: 0,
            cq_data: None,
            dc: opts.delivery_complete,
            msg_id: 0,
            remote: vec![RmaIov::new(remote.addr, len, remote.key)],
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
            atomic: Some((args.datatype, args.op)),
        };
        let Some(id) = self.tx.insert(t) else {
            self.free_region(mem);
            return Err(CallError::TooManyOps);
        };
        self.mem[mem].owner = Owner::Tx(id);
        self.note_protocol(op, Protocol::Atomic);
        self.tx_begin(id);
        Ok(op)
    }

    fn check_atomic_size(&self, peer: PeerId, n: usize, ty: PacketType) -> Result<(), CallError> {
        if self.req_hdr_len(peer, ty, false, 1) + n > self.cfg.mtu || n + ATOMRSP_HDR > self.cfg.mtu
        {
            return Err(CallError::AtomicTooLarge);
        }
        Ok(())
    }

    fn start_atomic_write(&mut self, id: u32) {
        let t = &mut self.tx[id];
        t.started = true;
        let peer = t.peer;
        let p = &mut self.peers[peer.0 as usize];
        let msg_id = p.next_msg_id;
        p.next_msg_id = p.next_msg_id.wrapping_add(1);
        let t = &mut self.tx[id];
        t.msg_id = msg_id;
        let (dt, op) = t.atomic.unwrap_or((Datatype::U8, AtomicOp::Write));
        let ty = if t.dc {
            PacketType::DcWriteRta
        } else {
            PacketType::WriteRta
        };
        let remote = t.remote.clone();
        let data = self.mem[t.mem].bytes.clone();
        let mut r = self
            .req(peer, ty)
            .with(Field::MsgId, msg_id as u64)
            .with(Field::AtomicDatatype, dt as u64)
            .with(Field::AtomicOp, op as u64);
        if ty == PacketType::DcWriteRta {
            // wire-layouts §D.8: "For DC_WRITE_RTA (141) that slot holds send_id".
            r = r.with(Field::SendId, id as u64);
        }
        r.rma_iov = &remote;
        let r = Repr {
            payload: &data,
            ..r
        };
        self.emit(peer, &r, PktOwner::Tx(id));
        self.tx_queued_all(id);
        self.tx_check(id);
    }

    /// Fetch atomic (`fi_fetch_atomic`): the completion carries the target's old value.
    pub fn atomic_fetch(
        &mut self,
        peer: PeerId,
        args: AtomicArgs,
        remote: RemoteAddr,
    ) -> Result<OpId, CallError> {
        self.check_peer(peer)?;
        check_atomic(&args, false)?;
        self.atomic_req(
            peer,
            args,
            remote,
            PacketType::FetchRta,
            OpKind::AtomicFetch,
        )
    }

    /// Compare atomic (`fi_compare_atomic`): the completion carries the target's old value.
    pub fn atomic_compare(
        &mut self,
        peer: PeerId,
        args: AtomicArgs,
        remote: RemoteAddr,
    ) -> Result<OpId, CallError> {
        self.check_peer(peer)?;
        check_atomic(&args, true)?;
        self.atomic_req(
            peer,
            args,
            remote,
            PacketType::CompareRta,
            OpKind::AtomicCompare,
        )
    }

    fn atomic_req(
        &mut self,
        peer: PeerId,
        args: AtomicArgs,
        remote: RemoteAddr,
        ty: PacketType,
        kind: OpKind,
    ) -> Result<OpId, CallError> {
        let n = args.operand.len();
        let payload_len = n * if ty == PacketType::CompareRta { 2 } else { 1 };
        self.check_atomic_size(peer, payload_len, ty)?;
        let op = self.new_op();
        let mem = self.new_region(vec![0; n], Owner::App);
        let mut r = RxOp::new(op, RxKind::AtomicResp(kind));
        r.mem = Some(mem);
        r.buf_len = n as u64;
        r.msg_len = n as u64;
        r.peer = Some(peer);
        r.matched = true;
        let Some(id) = self.rx.insert(r) else {
            self.free_region(mem);
            return Err(CallError::TooManyOps);
        };
        self.mem[mem].owner = Owner::Rx(id);
        self.note_protocol(op, Protocol::Atomic);
        let p = &mut self.peers[peer.0 as usize];
        let msg_id = p.next_msg_id;
        p.next_msg_id = p.next_msg_id.wrapping_add(1);
        let mut payload = args.operand;
        if let Some(c) = &args.compare {
            // efa-rdm-protocol-v4 §3.3: "the application data part of a COMPARE_RTA packet
            // contains two segments of data: buf and compare".
            payload.extend_from_slice(c);
        }
        let iov = [RmaIov::new(remote.addr, n as u64, remote.key)];
        let mut req = self
            .req(peer, ty)
            .with(Field::MsgId, msg_id as u64)
            .with(Field::AtomicDatatype, args.datatype as u64)
            .with(Field::AtomicOp, args.op as u64)
            .with(Field::RecvId, id as u64);
        req.rma_iov = &iov;
        let req = Repr {
            payload: &payload,
            ..req
        };
        self.emit(peer, &req, PktOwner::Rx(id));
        Ok(op)
    }

    // ------------------------------------------------------------------------------------
    // Receive path
    // ------------------------------------------------------------------------------------

    /// Processes one received packet. `src` is the peer the device reported (its address
    /// handle), `None` when the sender is not in the device's address book; then only a
    /// REQ carrying the raw-address header can be processed. Every malformed or
    /// unexpected packet is dropped and counted in [`Stats`]; nothing here panics.
    pub fn handle_packet(&mut self, src: Option<PeerId>, bytes: &[u8]) {
        self.stats.rx_packets += 1;
        let pkt = match Packet::new_checked(bytes) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(%e, "dropping unparsable packet");
                self.stats.rx_parse_errors += 1;
                return;
            }
        };
        let peer = match src.filter(|p| (p.0 as usize) < self.peers.len()) {
            Some(p) => p,
            None => match pkt.raw_addr() {
                // efa-rdm-protocol-v4 §2.2: "the peer can get the endpoint's raw address
                // from REQ packet header, then insert the raw address to its address book."
                Some(r) => self.add_peer(r.addr),
                None => {
                    self.stats.rx_unknown_sender += 1;
                    return;
                }
            },
        };
        // efa-rdm-protocol-v4 §4.4: "it is possible for an endpoint to receive packets from a
        // destroyed QP, which was used by a previous process that used the same QPN" — a
        // connid that is not the peer's means another endpoint: drop it.
        if let Some(c) = pkt.sender_connid() {
            if c != self.peers[peer.0 as usize].addr.qkey {
                tracing::debug!(peer = peer.0, connid = c, "connid mismatch, dropping");
                self.stats.rx_connid_mismatch += 1;
                return;
            }
        }
        // efa-rdm-protocol-v4 §2.1: "Upon receiving the 1st packet from a peer, an endpoint
        // must send back a handshake packet". libfabric does this for any packet type
        // (`efa_rdm_ep_post_handshake_or_queue` on every receive), so a HANDSHAKE is answered
        // by one too and both sides learn each other's features after one exchange.
        if !self.peers[peer.0 as usize].handshake_sent {
            self.send_handshake(peer);
        }
        use PacketType as T;
        match pkt.pkt_type() {
            T::Handshake => self.on_handshake(peer, &pkt),
            T::Cts => self.on_cts(peer, &pkt),
            T::CtsData => self.on_ctsdata(peer, &pkt),
            T::ReadRsp => self.on_readrsp(peer, &pkt),
            T::Eor => self.on_eor(peer, &pkt),
            T::AtomRsp => self.on_atomrsp(peer, &pkt),
            T::Receipt => self.on_receipt(peer, &pkt),
            T::ReadNack => self.on_read_nack(peer, &pkt),
            T::PeerError => self.stats.rx_invalid += 1,
            T::EagerRtw | T::DcEagerRtw => self.on_eager_rtw(peer, &pkt),
            T::LongctsRtw | T::DcLongctsRtw | T::LongreadRtw => self.on_long_rtw(peer, &pkt),
            T::ShortRtr | T::LongctsRtr => self.on_rtr(peer, &pkt),
            _ => self.on_sequenced(peer, &pkt),
        }
    }

    fn on_handshake(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let hs = PeerHandshake {
            extra_info: pkt.extra_info().unwrap_or_default(),
            host_id: pkt.host_id(),
            device_version: pkt.device_version(),
        };
        let p = &mut self.peers[peer.0 as usize];
        p.handshake = Some(hs);
        let waiting = std::mem::take(&mut p.waiting);
        for id in waiting {
            self.tx_start(id);
        }
    }

    fn find_tx(&mut self, peer: PeerId, send_id: Option<u32>) -> Option<u32> {
        let id = send_id?;
        match self.tx.get(id) {
            Some(t) if t.peer == peer => Some(id),
            _ => {
                self.stats.rx_unknown_op += 1;
                None
            }
        }
    }

    fn find_rx(&mut self, peer: PeerId, recv_id: Option<u32>) -> Option<u32> {
        let id = recv_id?;
        match self.rx.get(id) {
            Some(r) if r.peer == Some(peer) && r.matched => Some(id),
            _ => {
                self.stats.rx_unknown_op += 1;
                None
            }
        }
    }

    fn on_cts(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let Some(id) = self.find_tx(peer, pkt.send_id()) else {
            return;
        };
        let len = pkt.get(Field::RecvLength).unwrap_or(0);
        // efa-rdm-protocol-v4 §3.2: "the receiver must allow the sender to send at least 1
        // CTSDATA packet" — a zero window would loop forever.
        if len == 0 {
            self.stats.rx_invalid += 1;
            return;
        }
        let t = &mut self.tx[id];
        if !matches!(
            t.proto,
            Protocol::LongCts | Protocol::LongCtsWrite | Protocol::LongCtsRead
        ) {
            self.stats.rx_invalid += 1;
            return;
        }
        t.peer_recv_id = pkt.recv_id().unwrap_or(0);
        t.window_end = t.next_offset.saturating_add(len);
        self.tx_pump(id);
    }

    fn on_ctsdata(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let Some(id) = self.find_rx(peer, pkt.recv_id()) else {
            return;
        };
        let off = pkt.get(Field::SegOffset).unwrap_or(0);
        let seg = pkt.get(Field::SegLength).unwrap_or(0);
        let data = pkt.payload();
        if seg != data.len() as u64 {
            self.stats.rx_invalid += 1;
            return;
        }
        if !self.rx_place(id, off, data) {
            return;
        }
        let r = &mut self.rx[id];
        r.window_left = r.window_left.saturating_sub(seg);
        self.rx_progress(id);
    }

    fn on_readrsp(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let Some(id) = self.find_rx(peer, pkt.recv_id()) else {
            return;
        };
        if self.rx[id].kind != RxKind::ReadReq {
            self.stats.rx_invalid += 1;
            return;
        }
        let seg = pkt.get(Field::SegLength).unwrap_or(0);
        let data = pkt.payload();
        if seg != data.len() as u64 {
            self.stats.rx_invalid += 1;
            return;
        }
        if !self.rx_place(id, 0, data) {
            return;
        }
        let r = &mut self.rx[id];
        r.send_id = pkt.send_id().unwrap_or(0);
        r.window_left = r.window_left.saturating_sub(seg);
        self.rx_progress(id);
    }

    fn on_atomrsp(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let Some(id) = self.find_rx(peer, pkt.recv_id()) else {
            return;
        };
        if !matches!(self.rx[id].kind, RxKind::AtomicResp(_)) {
            self.stats.rx_invalid += 1;
            return;
        }
        let data = pkt.payload();
        if pkt.get(Field::SegLength) != Some(data.len() as u64) {
            self.stats.rx_invalid += 1;
            return;
        }
        if !self.rx_place(id, 0, data) {
            return;
        }
        self.rx_progress(id);
    }

    fn on_eor(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let Some(id) = self.find_tx(peer, pkt.send_id()) else {
            return;
        };
        let t = &mut self.tx[id];
        if !t.await_eor {
            self.stats.rx_invalid += 1;
            return;
        }
        t.await_eor = false;
        self.tx_check(id);
    }

    fn on_receipt(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let Some(id) = self.find_tx(peer, pkt.get(Field::TxId).map(|v| v as u32)) else {
            return;
        };
        let t = &mut self.tx[id];
        if !t.dc {
            self.stats.rx_invalid += 1;
            return;
        }
        // efa-rdm-protocol-v4 §4.2: "the sender/responder will not write a completion until
        // it receives the RECEIPT packet."
        t.await_receipt = false;
        self.tx_check(id);
    }

    fn on_read_nack(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let Some(id) = self.find_tx(peer, pkt.send_id()) else {
            return;
        };
        let t = &mut self.tx[id];
        if !t.await_eor {
            self.stats.rx_invalid += 1;
            return;
        }
        // efa-rdm-protocol-v4 §4.7: "The sender then switches to the long CTS protocol and
        // sends a LONGCTS_RTM packet".
        self.stats.read_nacks += 1;
        t.await_eor = false;
        t.all_queued = false;
        t.peer_recv_id = pkt.recv_id().unwrap_or(0);
        t.next_offset = t.runt_len;
        self.send_longcts_rtm(id, true);
    }

    /// RTM and RTA packets: in `msg_id` order through the engine's reorder buffer.
    fn on_sequenced(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        use PacketType as T;
        let ty = pkt.pkt_type();
        let Some(msg_id) = pkt.msg_id() else {
            self.stats.rx_invalid += 1;
            return;
        };
        let proto = match ty {
            T::EagerMsgRtm | T::EagerTagRtm | T::DcEagerMsgRtm | T::DcEagerTagRtm => RxProto::Eager,
            T::MediumMsgRtm | T::MediumTagRtm | T::DcMediumMsgRtm | T::DcMediumTagRtm => {
                RxProto::Medium
            }
            T::LongctsMsgRtm | T::LongctsTagRtm | T::DcLongctsMsgRtm | T::DcLongctsTagRtm => {
                RxProto::LongCts
            }
            T::LongreadMsgRtm | T::LongreadTagRtm => RxProto::LongRead,
            T::RuntreadMsgRtm | T::RuntreadTagRtm => RxProto::RuntRead,
            T::WriteRta | T::FetchRta | T::CompareRta | T::DcWriteRta => RxProto::Eager,
            _ => {
                self.stats.rx_invalid += 1;
                return;
            }
        };
        let is_rta = matches!(
            ty,
            T::WriteRta | T::FetchRta | T::CompareRta | T::DcWriteRta
        );
        let nack = pkt.flags() & flags::REQ_READ_NACK != 0 && proto == RxProto::LongCts;
        let slot = self.peers[peer.0 as usize].msgs.get(&msg_id).copied();
        if nack {
            // wire-layouts §A.3: for the READ_NACK resend "the receiver skips reorder".
            match slot {
                Some(Slot::Matched(id)) if self.rx.get(id).is_some_and(|r| r.rdma_failed) => {
                    let r = &mut self.rx[id];
                    r.dc = matches!(ty, T::DcLongctsMsgRtm | T::DcLongctsTagRtm);
                    r.credits = pkt.get(Field::CreditRequest).unwrap_or(0) as u32;
                    r.proto = RxProto::LongCts;
                    r.requested = r.received;
                    r.window_left = 0;
                    self.rx_progress(id);
                }
                _ => self.stats.rx_unknown_op += 1,
            }
            return;
        }
        match slot {
            Some(Slot::Pending(ib)) => {
                self.inbound_segment(ib, proto, pkt);
                return;
            }
            Some(Slot::Matched(id)) => {
                self.rx_segment(id, proto, pkt);
                return;
            }
            None => {}
        }
        let Some(ib) = self.new_inbound(peer, msg_id, proto, pkt) else {
            self.stats.rx_invalid += 1;
            return;
        };
        self.peers[peer.0 as usize]
            .msgs
            .insert(msg_id, Slot::Pending(ib));
        let tagged = ty.is_tagged();
        let ibm = &self.inbound[ib];
        let env = Envelope {
            comm: if is_rta {
                COMM_RTA
            } else if tagged {
                COMM_TAG
            } else {
                COMM_MSG
            },
            src: peer.0,
            tag: if is_rta { ib as u64 } else { ibm.tag },
        };
        // The engine's budget counts what is buffered here, not the message length (long
        // protocols leave the data at the sender until matched).
        let len = ibm.data.len();
        let mut arrived = Vec::new();
        match self
            .engine
            .deliver(env, msg_id, len, ib as u32, |a| arrived.push(a))
        {
            Ok(_) => {}
            Err(rej) => {
                tracing::debug!(reason = %rej.reason, msg_id, "reorder buffer refused");
                self.stats.rx_reorder_rejected += 1;
                self.peers[peer.0 as usize].msgs.remove(&msg_id);
                self.inbound.try_remove(ib);
                return;
            }
        }
        for a in arrived {
            match a {
                Arrived::Matched(m) => self.on_match(m.recv, m.msg as usize),
                Arrived::Unexpected(env) if env.comm == COMM_RTA => {
                    let spec = RecvSpec::exact(COMM_RTA, env.src, env.tag);
                    if let Some(c) = self.engine.mprobe(&spec) {
                        if let Ok(m) = self.engine.mrecv(c.handle) {
                            self.process_rta(m.msg as usize);
                        }
                    }
                }
                Arrived::Unexpected(_) => {}
            }
        }
    }

    fn new_inbound(
        &mut self,
        peer: PeerId,
        msg_id: u32,
        proto: RxProto,
        pkt: &Packet<&[u8]>,
    ) -> Option<usize> {
        use PacketType as T;
        let ty = pkt.pkt_type();
        let mut ib = Inbound {
            peer,
            msg_id,
            proto,
            tag: pkt.tag().unwrap_or(0),
            msg_len: pkt.get(Field::MsgLength).unwrap_or(0),
            cq_data: pkt.cq_data(),
            send_id: pkt.send_id().unwrap_or(0),
            credit_request: pkt.get(Field::CreditRequest).unwrap_or(0) as u32,
            dc: matches!(
                ty,
                T::DcEagerMsgRtm
                    | T::DcEagerTagRtm
                    | T::DcMediumMsgRtm
                    | T::DcMediumTagRtm
                    | T::DcLongctsMsgRtm
                    | T::DcLongctsTagRtm
                    | T::DcWriteRta
            ),
            data: Vec::new(),
            received: 0,
            read_iov: Vec::new(),
            runt_len: 0,
            rta: None,
        };
        match ty {
            T::WriteRta | T::FetchRta | T::CompareRta | T::DcWriteRta => {
                let (buf, compare) = if ty == T::CompareRta {
                    let (a, b) = pkt.compare_operands()?;
                    (a.to_vec(), Some(b.to_vec()))
                } else {
                    (pkt.payload().to_vec(), None)
                };
                let id = match ty {
                    T::DcWriteRta => pkt.send_id(),
                    T::FetchRta | T::CompareRta => pkt.recv_id(),
                    _ => Some(0),
                }
                .unwrap_or(0);
                ib.send_id = id;
                ib.rta = Some(Rta {
                    ty,
                    datatype: pkt.get(Field::AtomicDatatype).unwrap_or(0) as u32,
                    op: pkt.get(Field::AtomicOp).unwrap_or(0) as u32,
                    iov: pkt.rma_iov().to_vec(),
                    id,
                    buf,
                    compare,
                });
                return Some(self.inbound.insert(ib));
            }
            _ => {}
        }
        match proto {
            RxProto::Eager => {
                ib.data = pkt.payload().to_vec();
                ib.msg_len = ib.data.len() as u64;
                ib.received = ib.msg_len;
            }
            RxProto::Medium => {
                // The medium buffer is at most max_medium_size on our senders; bound what a
                // peer can make us allocate.
                if ib.msg_len > (self.cfg.max_medium_size.max(1 << 20)) {
                    return None;
                }
                ib.data = vec![0; ib.msg_len as usize];
            }
            RxProto::LongCts => {
                ib.data = pkt.payload().to_vec();
                if ib.data.len() as u64 > ib.msg_len {
                    return None;
                }
                ib.received = ib.data.len() as u64;
            }
            RxProto::LongRead | RxProto::RuntRead => {
                ib.read_iov = pkt.read_iov().ok()?.to_vec();
                let total: u64 = ib
                    .read_iov
                    .iter()
                    .map(|e| e.len())
                    .fold(0, u64::saturating_add);
                if total < ib.msg_len {
                    return None;
                }
                if proto == RxProto::RuntRead {
                    ib.runt_len = pkt.get(Field::RuntLength).unwrap_or(0);
                    if ib.runt_len > ib.msg_len || ib.runt_len > (1 << 24) {
                        return None;
                    }
                    ib.data = vec![0; ib.runt_len as usize];
                }
            }
        }
        let idx = self.inbound.insert(ib);
        if matches!(proto, RxProto::Medium | RxProto::RuntRead) {
            self.inbound_segment(idx, proto, pkt);
        }
        Some(idx)
    }

    /// `(offset, data)` of a medium or runt segment, validated against the message.
    fn segment_of<'p>(
        proto: RxProto,
        msg_len: u64,
        runt_len: u64,
        pkt: &'p Packet<&[u8]>,
    ) -> Option<(u64, &'p [u8])> {
        let off = pkt.get(Field::SegOffset)?;
        let data = match proto {
            RxProto::Medium if pkt.get(Field::MsgLength) == Some(msg_len) => pkt.payload(),
            RxProto::RuntRead if pkt.get(Field::RuntLength) == Some(runt_len) => pkt.data().ok()?,
            _ => return None,
        };
        let limit = if proto == RxProto::RuntRead {
            runt_len
        } else {
            msg_len
        };
        (off.checked_add(data.len() as u64)? <= limit).then_some((off, data))
    }

    fn inbound_segment(&mut self, idx: usize, proto: RxProto, pkt: &Packet<&[u8]>) {
        let Some(ib) = self.inbound.get_mut(idx) else {
            return;
        };
        if ib.proto != proto {
            self.stats.rx_invalid += 1;
            return;
        }
        let Some((off, data)) = Self::segment_of(proto, ib.msg_len, ib.runt_len, pkt) else {
            self.stats.rx_invalid += 1;
            return;
        };
        ib.data[off as usize..off as usize + data.len()].copy_from_slice(data);
        ib.received += data.len() as u64;
    }

    fn rx_segment(&mut self, id: u32, proto: RxProto, pkt: &Packet<&[u8]>) {
        let Some(r) = self.rx.get(id) else {
            self.stats.rx_unknown_op += 1;
            return;
        };
        if r.proto != proto {
            self.stats.rx_invalid += 1;
            return;
        }
        let Some((off, data)) = Self::segment_of(proto, r.msg_len, r.runt_len, pkt) else {
            self.stats.rx_invalid += 1;
            return;
        };
        if self.rx_place(id, off, data) {
            self.rx_progress(id);
        }
    }

    /// Copies message bytes at `off` into the receive buffer (truncating) or the write
    /// target. Returns false (and counts) when the range is invalid.
    fn rx_place(&mut self, id: u32, off: u64, data: &[u8]) -> bool {
        let Some(r) = self.rx.get(id) else {
            return false;
        };
        let Some(end) = off.checked_add(data.len() as u64) else {
            self.stats.rx_invalid += 1;
            return false;
        };
        if end > r.msg_len || r.received.saturating_add(data.len() as u64) > r.msg_len {
            self.stats.rx_invalid += 1;
            return false;
        }
        if r.kind == RxKind::WriteTarget {
            let iov = r.iov.clone();
            if !self.scatter(&iov, off, data) {
                self.stats.rx_invalid += 1;
                if let Some(r) = self.rx.get_mut(id) {
                    r.error.get_or_insert(OpError::RdmaFailed);
                }
            }
        } else if let Some(m) = r.mem {
            let buf = &mut self.mem[m].bytes;
            if (off as usize) < buf.len() {
                let n = (buf.len() - off as usize).min(data.len());
                buf[off as usize..off as usize + n].copy_from_slice(&data[..n]);
            }
        }
        self.rx[id].received += data.len() as u64;
        true
    }

    /// A posted receive `rx` and an inbound message `ib` met.
    fn on_match(&mut self, id: u32, ib_idx: usize) {
        let Some(ib) = self.inbound.try_remove(ib_idx) else {
            return;
        };
        let Some(r) = self.rx.get_mut(id) else { return };
        self.posted_ops.remove(&r.op);
        r.posted = None;
        r.matched = true;
        r.peer = Some(ib.peer);
        r.proto = ib.proto;
        r.tag = ib.tag;
        r.msg_len = ib.msg_len;
        r.cq_data = ib.cq_data;
        r.send_id = ib.send_id;
        r.msg_id = ib.msg_id;
        r.credits = ib.credit_request;
        r.dc = ib.dc;
        r.read_iov = ib.read_iov;
        r.runt_len = ib.runt_len;
        self.peers[ib.peer.0 as usize]
            .msgs
            .insert(ib.msg_id, Slot::Matched(id));
        // Buffered bytes: the eager payload, the medium/runt segments so far (at their
        // offsets, zeros elsewhere), or the LONGCTS_RTM payload at offset 0.
        if let Some(m) = self.rx[id].mem {
            let buf = &mut self.mem[m].bytes;
            let n = buf.len().min(ib.data.len());
            buf[..n].copy_from_slice(&ib.data[..n]);
        }
        let r = &mut self.rx[id];
        r.received = ib.received;
        r.requested = ib.received;
        self.rx_progress(id);
    }

    /// CTS window for `left` bytes still to come.
    fn cts_window(&self, peer: PeerId, left: u64, credits: u32) -> u64 {
        let credits = credits.clamp(1, self.cfg.rx_window_packets.max(1)) as u64;
        left.min(credits.saturating_mul(self.ctsdata_payload(peer) as u64))
            .max(1)
    }

    /// Moves a receive-side op forward: CTS, RDMA read, completion.
    fn rx_progress(&mut self, id: u32) {
        let Some(r) = self.rx.get(id) else { return };
        let peer = r.peer.unwrap_or(PeerId(0));
        match r.proto {
            RxProto::Eager | RxProto::Medium => {
                if r.received >= r.msg_len {
                    self.rx_finish(id);
                }
            }
            RxProto::LongCts => {
                if r.received >= r.msg_len {
                    self.rx_finish(id);
                } else if r.window_left == 0 && r.requested < r.msg_len {
                    // efa-rdm-protocol-v4 §3.2: "After receiving all the CTSDATA packets it
                    // was expecting, the receiver will recalculate how many bytes it can
                    // handle and send another CTS packet to the sender."
                    let left = r.msg_len - r.requested;
                    // efa-rdm-protocol-v4 §3.2: "The receiver will try to honor the request,
                    // but it is not obligated to. However, the receiver must allow the sender
                    // to send at least 1 CTSDATA packet".
                    let credits = if r.kind == RxKind::ReadReq {
                        self.cfg.rx_window_packets
                    } else {
                        r.credits
                    };
                    let window = self.cts_window(peer, left, credits);
                    let (send_id, read) = (r.send_id, r.kind == RxKind::ReadReq);
                    let r = &mut self.rx[id];
                    r.requested += window;
                    r.window_left = window;
                    let mut cts = self
                        .ctrl(peer, PacketType::Cts)
                        .with(Field::SendId, send_id as u64)
                        .with(Field::RecvId, id as u64)
                        .with(Field::RecvLength, window);
                    if read {
                        // efa-rdm-protocol-v4 §3.2: "This flag indicates the CTS packet is
                        // used by the long-CTS emulated read protocol."
                        cts.flags |= flags::CTS_READ_REQ;
                    }
                    self.emit(peer, &cts, PktOwner::Rx(id));
                }
            }
            RxProto::LongRead | RxProto::RuntRead => {
                if r.rdma_failed {
                    return;
                }
                if !r.read_started && r.received >= r.runt_len {
                    let r = &mut self.rx[id];
                    r.read_started = true;
                    if r.kind == RxKind::WriteTarget {
                        self.rx_start_reads(id);
                    } else if let Some(m) = r.mem {
                        if r.buf_len == 0 || r.msg_len == r.runt_len {
                            self.rx_start_reads(id);
                        } else {
                            self.register_region(m);
                        }
                    }
                } else if r.reads_issued && r.rdma_left == 0 {
                    // efa-rdm-protocol-v4 §4.1: "After all reads are finished, the receiver
                    // will send an EOR packet to the requester".
                    let eor = self
                        .ctrl(peer, PacketType::Eor)
                        .with(Field::SendId, r.send_id as u64)
                        .with(Field::RecvId, id as u64);
                    self.emit(peer, &eor, PktOwner::None);
                    self.rx_finish(id);
                }
            }
        }
    }

    fn rx_registered(&mut self, id: u32, result: Result<MrKey, ()>) {
        let Some(r) = self.rx.get(id) else { return };
        match (r.kind, result) {
            (RxKind::DirectRead, Ok(_)) => {
                let peer = r.peer.unwrap_or(PeerId(0));
                let remote = r.remote.unwrap_or(RemoteAddr { addr: 0, key: 0 });
                let (len, m) = (r.msg_len, r.mem.unwrap_or(0));
                let dest = self.peers[peer.0 as usize].addr;
                let mut off = 0;
                let mut n_ops = 0;
                while off < len {
                    let n = self.cfg.max_rdma_size.max(1).min(len - off);
                    let token = self.token();
                    self.rdmas.insert(token, RdmaOwner::Rx(id));
                    self.out.push_back(Transmit::RdmaRead {
                        token: RdmaToken(token),
                        peer,
                        dest,
                        local: MemHandle(m as u32),
                        offset: off,
                        remote: RemoteAddr {
                            addr: remote.addr.wrapping_add(off),
                            key: remote.key,
                        },
                        len: n,
                    });
                    off += n;
                    n_ops += 1;
                }
                self.rx[id].rdma_left = n_ops;
            }
            (RxKind::DirectRead, Err(())) => {
                // Fall back to the emulated read.
                self.start_emulated_read(id);
            }
            (_, Ok(_)) => self.rx_start_reads(id),
            (_, Err(())) => self.rx_read_failed(id),
        }
    }

    /// Issues the RDMA reads of a long-read or runting-read message.
    fn rx_start_reads(&mut self, id: u32) {
        let Some(r) = self.rx.get(id) else { return };
        let peer = r.peer.unwrap_or(PeerId(0));
        let dest = self.peers[peer.0 as usize].addr;
        // Destination pieces: (region, offset, len) covering message bytes
        // [runt_len, min(msg_len, buf_len)) (or the whole message for write targets).
        let mut dst: Vec<(usize, u64, u64)> = Vec::new();
        let start = r.runt_len;
        if r.kind == RxKind::WriteTarget {
            let mut moff = 0u64;
            for e in &r.iov {
                let (lo, hi) = (moff, moff.saturating_add(e.len()));
                moff = hi;
                let (a, b) = (lo.max(start), hi.min(r.msg_len));
                if a >= b {
                    continue;
                }
                match self.resolve(e.addr().wrapping_add(a - lo), b - a, e.key()) {
                    Some((idx, o)) => dst.push((idx, o as u64, b - a)),
                    None => {
                        self.stats.rx_invalid += 1;
                        self.rx_read_failed(id);
                        return;
                    }
                }
            }
        } else if let Some(m) = r.mem {
            let end = r.msg_len.min(r.buf_len);
            if end > start {
                dst.push((m, start, end - start));
            }
        }
        // Source: read_iov from message offset `start`.
        let mut reads = Vec::new();
        let mut src_off = start;
        for (idx, mut o, mut n) in dst {
            while n > 0 {
                // Locate src_off in read_iov.
                let mut acc = 0u64;
                let mut found = None;
                for e in &r.read_iov {
                    if src_off < acc + e.len() {
                        found = Some((*e, src_off - acc));
                        break;
                    }
                    acc += e.len();
                }
                let Some((e, eo)) = found else {
                    self.stats.rx_invalid += 1;
                    self.rx_read_failed(id);
                    return;
                };
                let k = n.min(e.len() - eo).min(self.cfg.max_rdma_size.max(1));
                reads.push((
                    idx,
                    o,
                    RemoteAddr {
                        addr: e.addr().wrapping_add(eo),
                        key: e.key(),
                    },
                    k,
                ));
                o += k;
                n -= k;
                src_off += k;
            }
        }
        let n_reads = reads.len() as u32;
        for (idx, o, remote, k) in reads {
            let token = self.token();
            self.rdmas.insert(token, RdmaOwner::Rx(id));
            self.out.push_back(Transmit::RdmaRead {
                token: RdmaToken(token),
                peer,
                dest,
                local: MemHandle(idx as u32),
                offset: o,
                remote,
                len: k,
            });
        }
        let r = &mut self.rx[id];
        r.rdma_left = n_reads;
        r.reads_issued = true;
        self.rx_progress(id);
    }

    /// Registration or RDMA read failed on the receiver of a long-read/runting-read.
    fn rx_read_failed(&mut self, id: u32) {
        let Some(r) = self.rx.get_mut(id) else { return };
        if r.rdma_failed {
            return;
        }
        r.rdma_failed = true;
        let peer = r.peer.unwrap_or(PeerId(0));
        let (kind, send_id) = (r.kind, r.send_id);
        if kind == RxKind::DirectRead {
            r.rdma_failed = false;
            r.rdma_left = 0;
            self.start_emulated_read(id);
            return;
        }
        if self.cfg.features.read_nack && self.peers[peer.0 as usize].has(extra::FEATURE_READ_NACK)
        {
            // efa-rdm-protocol-v4 §4.7: "After all RTM packets have been processed, the
            // receiver sends a READ_NACK packet to the sender".
            self.stats.read_nacks += 1;
            let nack = self
                .ctrl(peer, PacketType::ReadNack)
                .with(Field::SendId, send_id as u64)
                .with(Field::RecvId, id as u64);
            self.emit(peer, &nack, PktOwner::Rx(id));
            if kind == RxKind::WriteTarget {
                // The sender resends a LONGCTS_RTW (REQ_READ_NACK), which has no msg_id to
                // find this op by: it starts a fresh write target.
                self.rx.remove(id);
            }
        } else {
            if let Some(r) = self.rx.get_mut(id) {
                r.error.get_or_insert(OpError::RdmaFailed);
            }
            self.rx_fail(id);
        }
    }

    /// The device finished an RDMA read or write.
    pub fn on_rdma_done(&mut self, token: RdmaToken, ok: bool) {
        let Some(owner) = self.rdmas.remove(&token.0) else {
            self.stats.unknown_tokens += 1;
            return;
        };
        match owner {
            RdmaOwner::Tx(id) => {
                if let Some(t) = self.tx.get_mut(id) {
                    t.rdma_left = t.rdma_left.saturating_sub(1);
                    if !ok {
                        if t.proto == Protocol::DirectWrite {
                            // Retry as an emulated write.
                            t.started = false;
                            t.all_queued = false;
                            self.start_write_emulated(id);
                            return;
                        }
                        t.error.get_or_insert(OpError::RdmaFailed);
                    }
                }
                self.tx_check(id);
            }
            RdmaOwner::Rx(id) => {
                let Some(r) = self.rx.get_mut(id) else { return };
                r.rdma_left = r.rdma_left.saturating_sub(1);
                if !ok {
                    if r.rdma_left == 0 {
                        self.rx_read_failed(id);
                    } else {
                        r.rdma_failed = true;
                    }
                    return;
                }
                if r.rdma_failed {
                    if r.rdma_left == 0 {
                        r.rdma_failed = false;
                        self.rx_read_failed(id);
                    }
                    return;
                }
                if r.kind == RxKind::DirectRead {
                    if r.rdma_left == 0 {
                        self.rx_finish(id);
                    }
                } else {
                    self.rx_progress(id);
                }
            }
        }
    }

    fn rx_fail(&mut self, id: u32) {
        self.rx_finish(id);
    }

    /// Completes a receive-side op: application completion, RECEIPT for DC.
    fn rx_finish(&mut self, id: u32) {
        let Some(r) = self.rx.remove(id) else { return };
        if let Some(peer) = r.peer {
            let p = &mut self.peers[peer.0 as usize];
            if r.kind == RxKind::Recv && p.msgs.get(&r.msg_id) == Some(&Slot::Matched(id)) {
                p.msgs.remove(&r.msg_id);
            }
            if r.dc && r.error.is_none() {
                // efa-rdm-protocol-v4 §4.2: "after data is delivered to the application
                // buffer, the receiver/responder will send a RECEIPT packet back".
                let receipt = self
                    .ctrl(peer, PacketType::Receipt)
                    .with(Field::TxId, r.send_id as u64)
                    .with(Field::MsgId, r.msg_id as u64);
                self.emit(peer, &receipt, PktOwner::None);
            }
        }
        let data = r.mem.map(|m| self.free_region(m)).unwrap_or_default();
        let mut result = r.error.map_or(Ok(()), Err);
        let kind = match r.kind {
            RxKind::Recv => OpKind::Recv,
            RxKind::ReadReq | RxKind::DirectRead => OpKind::Read,
            RxKind::AtomicResp(k) => k,
            RxKind::WriteTarget => {
                if let (Some(cq), None) = (r.cq_data, r.error) {
                    let op = self.new_op();
                    self.completions.push_back(Completion {
                        op,
                        kind: OpKind::RemoteWrite,
                        result: Ok(()),
                        data: Vec::new(),
                        len: r.msg_len,
                        tag: 0,
                        src: r.peer,
                        cq_data: Some(cq),
                    });
                }
                return;
            }
        };
        if result.is_ok() && r.kind == RxKind::Recv && r.msg_len > r.buf_len {
            result = Err(OpError::Truncated {
                msg_len: r.msg_len,
                buf_len: r.buf_len,
            });
        }
        self.completions.push_back(Completion {
            op: r.op,
            kind,
            result,
            data,
            len: r.msg_len,
            tag: r.tag,
            src: r.peer,
            cq_data: r.cq_data,
        });
    }

    // ------------------------------------------------------------------------------------
    // Responder side of one-sided operations
    // ------------------------------------------------------------------------------------

    fn on_eager_rtw(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let iov = pkt.rma_iov().to_vec();
        let data = pkt.payload();
        let want: u64 = iov.iter().map(|e| e.len()).fold(0, u64::saturating_add);
        if want != data.len() as u64 || !self.scatter(&iov, 0, data) {
            self.stats.rx_invalid += 1;
            return;
        }
        if let Some(cq) = pkt.cq_data() {
            let op = self.new_op();
            self.completions.push_back(Completion {
                op,
                kind: OpKind::RemoteWrite,
                result: Ok(()),
                data: Vec::new(),
                len: data.len() as u64,
                tag: 0,
                src: Some(peer),
                cq_data: Some(cq),
            });
        }
        if pkt.pkt_type() == PacketType::DcEagerRtw {
            let receipt = self
                .ctrl(peer, PacketType::Receipt)
                .with(Field::TxId, pkt.send_id().unwrap_or(0) as u64);
            self.emit(peer, &receipt, PktOwner::None);
        }
    }

    fn on_long_rtw(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let ty = pkt.pkt_type();
        let iov = pkt.rma_iov().to_vec();
        let msg_len = pkt.get(Field::MsgLength).unwrap_or(0);
        let want: u64 = iov.iter().map(|e| e.len()).fold(0, u64::saturating_add);
        if want < msg_len {
            self.stats.rx_invalid += 1;
            return;
        }
        let op = self.new_op();
        let mut r = RxOp::new(op, RxKind::WriteTarget);
        r.peer = Some(peer);
        r.matched = true;
        r.iov = iov;
        r.msg_len = msg_len;
        r.send_id = pkt.send_id().unwrap_or(0);
        r.credits = pkt.get(Field::CreditRequest).unwrap_or(0) as u32;
        r.cq_data = pkt.cq_data();
        r.dc = ty == PacketType::DcLongctsRtw;
        if ty == PacketType::LongreadRtw {
            r.proto = RxProto::LongRead;
            match pkt.read_iov() {
                Ok(v) => r.read_iov = v.to_vec(),
                Err(_) => {
                    self.stats.rx_invalid += 1;
                    return;
                }
            }
            let total: u64 = r
                .read_iov
                .iter()
                .map(|e| e.len())
                .fold(0, u64::saturating_add);
            if total < msg_len {
                self.stats.rx_invalid += 1;
                return;
            }
        } else {
            r.proto = RxProto::LongCts;
        }
        let Some(id) = self.rx.insert(r) else {
            self.stats.rx_invalid += 1;
            return;
        };
        if ty != PacketType::LongreadRtw {
            let data = pkt.payload();
            if !self.rx_place(id, 0, data) {
                self.rx.remove(id);
                return;
            }
            let r = &mut self.rx[id];
            r.requested = r.received;
        }
        self.rx_progress(id);
    }

    fn on_rtr(&mut self, peer: PeerId, pkt: &Packet<&[u8]>) {
        let iov = pkt.rma_iov().to_vec();
        let len = pkt.get(Field::MsgLength).unwrap_or(0);
        let recv_id = pkt.recv_id().unwrap_or(0);
        let window = pkt.get(Field::RecvLength).unwrap_or(0);
        if len > (1 << 32) || (window == 0 && len > 0) {
            self.stats.rx_invalid += 1;
            return;
        }
        let Some(data) = self.gather(&iov, 0, len) else {
            self.stats.rx_invalid += 1;
            return;
        };
        let op = self.new_op();
        let mem = self.new_region(data, Owner::App);
        let t = TxOp {
            op,
            kind: TxKind::ReadResponder,
            peer,
            proto: Protocol::LongCtsRead,
            mem,
            len,
            tag: 0,
            cq_data: None,
            dc: false,
            msg_id: 0,
            remote: Vec::new(),
            next_offset: 0,
            window_end: window,
            peer_recv_id: recv_id,
            inflight: 0,
            started: true,
            all_queued: false,
            await_receipt: false,
            await_eor: false,
            rdma_left: 0,
            error: None,
            runt_len: 0,
            atomic: None,
        };
        let Some(id) = self.tx.insert(t) else {
            self.free_region(mem);
            self.stats.rx_invalid += 1;
            return;
        };
        self.mem[mem].owner = Owner::Tx(id);
        // The READRSP carries the first segment and tells the requester our id, which its
        // later CTS packets name.
        let n = (self.cfg.mtu.saturating_sub(READRSP_HDR) as u64)
            .min(len)
            .min(window);
        let first = self.mem[mem].bytes[..n as usize].to_vec();
        let r = self
            .ctrl(peer, PacketType::ReadRsp)
            .with(Field::RecvId, recv_id as u64)
            .with(Field::SendId, id as u64)
            .with(Field::SegLength, n);
        let r = Repr {
            payload: &first,
            ..r
        };
        self.emit(peer, &r, PktOwner::Tx(id));
        self.tx[id].next_offset = n;
        self.tx_pump(id);
    }

    fn process_rta(&mut self, ib_idx: usize) {
        let Some(ib) = self.inbound.try_remove(ib_idx) else {
            return;
        };
        let peer = ib.peer;
        self.peers[peer.0 as usize].msgs.remove(&ib.msg_id);
        let Some(rta) = ib.rta else { return };
        let result = (|| {
            let dt = Datatype::from_wire(rta.datatype)
                .ok_or(atomic::AtomicError::Datatype(rta.datatype))?;
            let op = AtomicOp::from_wire(rta.op).ok_or(atomic::AtomicError::Op(rta.op))?;
            let n = rta.buf.len() as u64;
            let mut target = self
                .gather(&rta.iov, 0, n)
                .ok_or(atomic::AtomicError::Length)?;
            let old = atomic::apply(dt, op, &mut target, &rta.buf, rta.compare.as_deref())?;
            if !self.scatter(&rta.iov, 0, &target) {
                return Err(atomic::AtomicError::Length);
            }
            Ok(old)
        })();
        let old = match result {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!(?e, "atomic refused");
                self.stats.rx_invalid += 1;
                return;
            }
        };
        match rta.ty {
            PacketType::FetchRta | PacketType::CompareRta => {
                let r = self
                    .ctrl(peer, PacketType::AtomRsp)
                    .with(Field::RecvId, rta.id as u64)
                    .with(Field::SegLength, old.len() as u64);
                let r = Repr { payload: &old, ..r };
                self.emit(peer, &r, PktOwner::None);
            }
            PacketType::DcWriteRta => {
                let r = self
                    .ctrl(peer, PacketType::Receipt)
                    .with(Field::TxId, rta.id as u64)
                    .with(Field::MsgId, ib.msg_id as u64);
                self.emit(peer, &r, PktOwner::None);
            }
            _ => {}
        }
    }
}

fn same_addr(a: &RawAddr, b: &RawAddr) -> bool {
    a.gid == b.gid && a.qpn == b.qpn && a.qkey == b.qkey
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

//! [`VerbsRdmDevice`]: the EFA RDM endpoint's device ([`RdmDevice`]) over a verbs device
//! without SRD (ConnectX, Soft-RoCE), the way libfabric's `ofi_rxm` layers an RDM endpoint
//! over `verbs;ofi_rxm`.
//!
//! efa-rdm-protocol-v4 §1.1 asks the device for "packets up to the MTU delivered reliably in
//! any order" and an address per endpoint. Here:
//!
//! - **Address.** A UD QP is the endpoint's address: the [`RawAddr`] is its GID, its QP
//!   number (bits 0–15 in `qpn`, bits 16–23 in the low byte of `next`, since verbs QP
//!   numbers are 24 bits while EFA's are 16) and its qkey, which is also the endpoint's
//!   connid (efa-rdm-protocol-v4 §4.4), random with the top bit clear (a qkey with bit 31
//!   set is a "controlled" qkey that a UD send may not use).
//! - **Connections.** The first packet to a peer creates an RC QP and sends a connection
//!   request over UD (`REQ` → `REP` → `RTU`, retransmitted every
//!   [`RdmConfig::cm_retry`] until answered or [`RdmConfig::connect_timeout`] passes); two
//!   peers connecting to each other at once keep the request of the lower address.
//!   Packets wait in the peer's queue until the connection is up.
//! - **Packets.** EFA packets travel as RC SENDs (reliable, in order — a stronger promise
//!   than SRD's) into a shared receive queue of [`RdmConfig::recv_slots`] buffers of
//!   [`RdmConfig::mtu`] bytes; the receiving QP identifies the sender. A send completes
//!   ([`SendOutcome::Ok`]) when the peer's device acknowledged it.
//! - **Receiver not ready.** A packet the endpoint refuses (its unexpected budget is full,
//!   [`RdmDevice::refuse`]) is held and handed in again at the `progress` after
//!   [`RdmDevice::retry_refused`] (when the endpoint may take it); each held
//!   packet keeps one receive buffer out of the shared receive queue, up to half of them,
//!   so a sender that keeps sending meets the RC hardware's RNR retries — the EFA device's
//!   RNR behaviour — while control packets still find buffers.
//! - **RDMA.** None: this device reports every RDMA read or write as failed, and endpoints
//!   on it must advertise neither `rdma_read` nor `rdma_write` (efa-rdm-protocol-v4 §2.1,
//!   table 2.1, bits 0 and 5), so the protocol uses its emulated paths — long-CTS for
//!   large messages, emulated write/read/atomics (§4.3–§4.5), as with an EFA device
//!   without RDMA read. Registrations succeed with device-local keys (the emulated
//!   protocols only use keys to find regions at the target endpoint).
//!
//! Blocking: `progress` polls the CQ, spinning for at most [`RdmConfig::spin`], then arms
//! the CQ and sleeps in `poll(2)` on its completion channel until a completion, the next
//! connection-message retransmission or the timeout.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::time::{Duration, Instant};

use tagmatch_rdm::{MrKey, SendOutcome, SendToken, Transmit};
use tagmatch_wire::efa::RawAddr;

use super::device::{
    Access, Ah, CompChannel, Context, Cq, OwnedMr, Pd, Qp, QpCaps, QpEndpoint, Srq, Wc, UD_GRH_LEN,
};
use super::{Error, Result};
use crate::device::{DeviceEvent, MemoryAccess, RdmDevice};

/// Settings of a [`VerbsRdmDevice`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmConfig {
    /// Device name (`rxe0`, `mlx5_0`); `None`: the first device.
    pub device: Option<String>,
    /// Largest EFA packet (the endpoint's MTU); an RC SEND is not limited by the path MTU.
    pub mtu: usize,
    /// Receive buffers in the shared receive queue.
    pub recv_slots: u32,
    /// Send buffers (packets in flight, all peers together).
    pub send_slots: u32,
    /// Packets queued per peer (waiting for the connection or a send buffer) before
    /// `submit` answers [`SendOutcome::Again`].
    pub max_queued: usize,
    /// Connection-message retransmission interval.
    pub cm_retry: Duration,
    /// Give up connecting (and fail the queued packets) after this long.
    pub connect_timeout: Duration,
    /// How long `progress` polls the CQ before it sleeps on the completion channel.
    pub spin: Duration,
    /// The connid (UD qkey); `None`: random. Bit 31 must be clear.
    pub connid: Option<u32>,
}

impl Default for RdmConfig {
    fn default() -> Self {
        RdmConfig {
            device: None,
            mtu: 8192,
            recv_slots: 256,
            send_slots: 256,
            max_queued: 4096,
            cm_retry: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(10),
            spin: Duration::from_micros(50),
            connid: None,
        }
    }
}

/// Counters of a [`VerbsRdmDevice`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RdmStats {
    /// EFA packets sent (RC SENDs completed successfully).
    pub tx_packets: u64,
    /// EFA packets received.
    pub rx_packets: u64,
    /// Sends that failed (connection failure, error completion).
    pub tx_errors: u64,
    /// Connections established (both directions).
    pub connects: u64,
    /// Connection messages sent again after [`RdmConfig::cm_retry`].
    pub cm_retransmits: u64,
    /// Connection messages dropped (bad magic, unknown peer or stale connid).
    pub cm_dropped: u64,
    /// `submit` calls answered with [`SendOutcome::Again`].
    pub send_again: u64,
    /// RDMA operations refused (this device has no RDMA; see the module docs).
    pub rdma_refused: u64,
    /// Packets the endpoint refused for now (receiver not ready) and this device held for
    /// redelivery, counted each time.
    pub rnr_held: u64,
}

/// Connection-message kinds (carried over UD, never seen by the endpoint).
const CM_REQ: u8 = 1;
const CM_REP: u8 = 2;
const CM_RTU: u8 = 3;
/// `"TMRC"`.
const CM_MAGIC: u32 = 0x544d_5243;
const CM_LEN: usize = 64;
const UD_SLOTS: u32 = 64;

/// Work-request kinds in the top byte of `wr_id`.
const WR_SEND: u64 = 1 << 56;
const WR_RECV: u64 = 2 << 56;
const WR_UD_SEND: u64 = 3 << 56;
const WR_UD_RECV: u64 = 4 << 56;
const WR_KIND: u64 = 0xff << 56;

/// A connection message: kind, the sender's address, the connid it is meant for, and the
/// sender's RC QP endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CmMsg {
    kind: u8,
    from: RawAddr,
    to_connid: u32,
    rc: QpEndpoint,
}

impl CmMsg {
    fn to_bytes(self) -> [u8; CM_LEN] {
        let mut b = [0u8; CM_LEN];
        b[0..4].copy_from_slice(&CM_MAGIC.to_le_bytes());
        b[4] = 1; // version
        b[5] = self.kind;
        b[8..40].copy_from_slice(&self.from.to_bytes());
        b[40..44].copy_from_slice(&self.to_connid.to_le_bytes());
        b[44..48].copy_from_slice(&self.rc.qpn.to_le_bytes());
        b[48..52].copy_from_slice(&self.rc.psn.to_le_bytes());
        b[52..54].copy_from_slice(&self.rc.lid.to_le_bytes());
        b
    }

    fn parse(b: &[u8]) -> Option<CmMsg> {
        let b = b.get(..CM_LEN)?;
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        if u32_at(0) != CM_MAGIC || b[4] != 1 || !(CM_REQ..=CM_RTU).contains(&b[5]) {
            return None;
        }
        let from = RawAddr::from_bytes(&b[8..40])?;
        Some(CmMsg {
            kind: b[5],
            from,
            to_connid: u32_at(40),
            rc: QpEndpoint {
                qpn: u32_at(44),
                psn: u32_at(48),
                lid: u16::from_le_bytes([b[52], b[53]]),
                gid: from.gid,
            },
        })
    }
}

/// The UD QP number an address names (see the module docs).
fn ud_qpn(a: &RawAddr) -> u32 {
    u32::from(a.qpn) | (((a.next & 0xff) as u32) << 16)
}

fn addr_key(a: &RawAddr) -> ([u8; 16], u16, u32, u64) {
    (a.gid, a.qpn, a.qkey, a.next)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnState {
    /// No connection attempt yet.
    Idle,
    /// REQ sent; waiting for REP.
    ReqSent { since: Instant, last: Instant },
    /// REQ accepted and REP sent; waiting for RTU (or the first packet).
    AwaitRtu { since: Instant, last: Instant },
    /// Packets flow.
    Connected,
    /// Gave up or the QP broke; every packet to this peer fails.
    Failed,
}

/// When the next connection message is due for retransmission (what a sleep must not
/// pass): the earliest of the connecting peers' `last + cm_retry` (`drive_timers` sends
/// again once `cm_retry` passed since the last send). `None` when no peer is connecting.
fn next_cm_retry(
    states: impl IntoIterator<Item = ConnState>,
    cm_retry: Duration,
) -> Option<Instant> {
    states
        .into_iter()
        .filter_map(|s| match s {
            // An interval too large to add never comes (no panic on a huge setting).
            ConnState::ReqSent { last, .. } | ConnState::AwaitRtu { last, .. } => {
                last.checked_add(cm_retry)
            }
            _ => None,
        })
        .min()
}

#[derive(Debug)]
struct PeerConn {
    addr: RawAddr,
    ah: Option<Ah>,
    qp: Option<Qp>,
    local: Option<QpEndpoint>,
    remote: Option<QpEndpoint>,
    state: ConnState,
    queued: VecDeque<(SendToken, Vec<u8>)>,
}

/// The RDM device over verbs. See the module documentation.
pub struct VerbsRdmDevice {
    cfg: RdmConfig,
    addr: RawAddr,
    // Declaration order is drop order: QPs (in `peers` and `ud`) before the SRQ, CQ,
    // buffers and PD (each also holds its parents alive).
    peers: Vec<PeerConn>,
    ud: Qp,
    srq: Srq,
    cq: Cq,
    chan: CompChannel,
    rx: OwnedMr,
    tx: OwnedMr,
    ud_rx: OwnedMr,
    ud_tx: OwnedMr,
    pd: Pd,
    ctx: Context,
    by_addr: HashMap<([u8; 16], u16, u32, u64), usize>,
    by_qpn: HashMap<u32, usize>,
    free_tx: Vec<u32>,
    /// Per send buffer: the send's token, its peer and the QP it was posted on.
    tx_owner: Vec<Option<(SendToken, usize, u32)>>,
    free_ud_tx: Vec<u32>,
    /// Connection messages waiting for a UD send buffer.
    cm_queue: VecDeque<(usize, CmMsg)>,
    events: VecDeque<DeviceEvent>,
    again: Vec<SendToken>,
    /// Packets the endpoint refused (receiver not ready), redelivered at the `progress`
    /// after `retry_refused` (`rnr_retry`).
    held: VecDeque<(RawAddr, Vec<u8>)>,
    rnr_retry: bool,
    /// Receive buffers kept out of the SRQ, one per held packet (see `refuse`).
    parked_slots: Vec<u32>,
    /// Held packets that have no parked buffer yet: the next completed receives park.
    rnr_debt: usize,
    wcs: Vec<Wc>,
    next_key: u64,
    next_addr: u64,
    psn_seed: u32,
    stats: RdmStats,
    /// The readiness thread of an asynchronous owner (see
    /// [`VerbsRdmDevice::wake_when_ready`]).
    watch: Option<crate::watch::Watcher>,
}

// SAFETY: every verbs object of the device (context, PD, CQ, SRQ, QPs, MRs, AHs, and the
// reference-counted handles between them) is owned by this struct and no handle is ever
// given out, so moving the device moves every reference to those objects together; the
// objects themselves are not bound to the thread that created them (libibverbs calls may be
// made from any thread).
unsafe impl Send for VerbsRdmDevice {}

impl std::fmt::Debug for VerbsRdmDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsRdmDevice")
            .field("device", &self.ctx.name())
            .field("addr", &self.addr)
            .field("peers", &self.peers.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish() as u32
}

impl VerbsRdmDevice {
    /// For an asynchronous owner that found nothing to do: wakes `waker` once, when a
    /// completion arrives (the CQ is armed and the completion channel watched by a thread
    /// blocked in `poll(2)`, see [`crate::watch`]) or a connection message is due for
    /// retransmission. Returns `false` without arming when the device has work already
    /// (events, queued retries, held packets to hand in again, a completion that came
    /// before the arming): the owner then progresses again at once.
    pub fn wake_when_ready(&mut self, waker: &std::task::Waker) -> io::Result<bool> {
        if !self.events.is_empty() || !self.again.is_empty() || self.rnr_retry {
            return Ok(false);
        }
        // Take the events already raised (the watcher would see them at once), arm, and
        // look once more: a completion that came before the arming raises no event.
        while self.chan.wait(Some(Duration::ZERO)).map_err(to_io)? {}
        self.cq.req_notify().map_err(to_io)?;
        if self.poll_once()? > 0 || !self.events.is_empty() {
            return Ok(false);
        }
        let deadline = next_cm_retry(self.peers.iter().map(|p| p.state), self.cfg.cm_retry);
        if self.watch.is_none() {
            let fd = self.chan.duplicate_fd()?;
            self.watch = Some(crate::watch::Watcher::start(vec![fd])?);
        }
        if let Some(w) = &self.watch {
            w.arm(waker, deadline);
        }
        Ok(true)
    }

    /// Opens the device, creates the UD address QP, the CQ, the shared receive queue and
    /// the buffer pools, and posts every receive.
    pub fn open(cfg: RdmConfig) -> Result<VerbsRdmDevice> {
        if cfg.mtu < 64 || cfg.mtu > (1 << 30) {
            return Err(Error::Invalid(format!(
                "mtu {} is outside 64..=1073741824",
                cfg.mtu
            )));
        }
        if cfg.recv_slots == 0 || cfg.send_slots == 0 {
            return Err(Error::Invalid(
                "recv_slots and send_slots must be > 0".into(),
            ));
        }
        let connid = match cfg.connid {
            Some(c) if c & 0x8000_0000 != 0 => {
                return Err(Error::Invalid(format!(
                    "connid {c:#x} has bit 31 set (a controlled qkey)"
                )))
            }
            Some(c) => c,
            None => random_u32() & 0x7fff_ffff,
        };
        let ctx = Context::open(cfg.device.as_deref())?;
        let caps = ctx.caps().clone();
        let pd = ctx.alloc_pd()?;
        let cqe = cfg.recv_slots + cfg.send_slots + 2 * UD_SLOTS;
        let chan = CompChannel::new(&ctx)?;
        let cq = Cq::with_channel(&ctx, cqe, &chan)?;
        let srq = Srq::basic(&pd, cfg.recv_slots)?;
        let ud = Qp::ud(
            &pd,
            &cq,
            &cq,
            QpCaps {
                max_send_wr: UD_SLOTS,
                max_recv_wr: UD_SLOTS,
                max_rd_atomic: 0,
            },
        )?;
        ud.activate_ud(connid)?;
        let qpn = ud.qpn();
        if qpn > 0x00ff_ffff {
            return Err(Error::Invalid(format!(
                "UD QP number {qpn:#x} exceeds 24 bits"
            )));
        }
        let rx = OwnedMr::new(
            &pd,
            vec![0; cfg.mtu * cfg.recv_slots as usize],
            Access::LOCAL_WRITE,
        )?;
        let tx = OwnedMr::new(
            &pd,
            vec![0; cfg.mtu * cfg.send_slots as usize],
            Access::LOCAL,
        )?;
        let ud_rx = OwnedMr::new(
            &pd,
            vec![0; (UD_GRH_LEN + CM_LEN) * UD_SLOTS as usize],
            Access::LOCAL_WRITE,
        )?;
        let ud_tx = OwnedMr::new(&pd, vec![0; CM_LEN * UD_SLOTS as usize], Access::LOCAL)?;
        for i in 0..cfg.recv_slots {
            srq.post_recv(
                WR_RECV | u64::from(i),
                rx.sge(i as usize * cfg.mtu, cfg.mtu)?,
            )?;
        }
        for i in 0..UD_SLOTS {
            let slot = UD_GRH_LEN + CM_LEN;
            ud.post_recv(
                WR_UD_RECV | u64::from(i),
                ud_rx.sge(i as usize * slot, slot)?,
            )?;
        }
        let addr = RawAddr {
            gid: caps.gid,
            qpn: (qpn & 0xffff) as u16,
            qkey: connid,
            next: u64::from(qpn >> 16),
        };
        tracing::debug!(device = ctx.name(), qpn, connid, "verbs RDM device open");
        Ok(VerbsRdmDevice {
            free_tx: (0..cfg.send_slots).rev().collect(),
            tx_owner: vec![None; cfg.send_slots as usize],
            free_ud_tx: (0..UD_SLOTS).rev().collect(),
            cfg,
            addr,
            peers: Vec::new(),
            ud,
            srq,
            cq,
            chan,
            rx,
            tx,
            ud_rx,
            ud_tx,
            pd,
            ctx,
            by_addr: HashMap::new(),
            by_qpn: HashMap::new(),
            cm_queue: VecDeque::new(),
            events: VecDeque::new(),
            again: Vec::new(),
            held: VecDeque::new(),
            rnr_retry: false,
            parked_slots: Vec::new(),
            rnr_debt: 0,
            wcs: Vec::with_capacity(16),
            next_key: 1,
            next_addr: 1 << 32,
            psn_seed: random_u32(),
            stats: RdmStats::default(),
            watch: None,
        })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        self.ctx.name()
    }

    /// Counters.
    pub fn stats(&self) -> RdmStats {
        self.stats
    }

    /// Peers with an established connection.
    pub fn connected_peers(&self) -> usize {
        self.peers
            .iter()
            .filter(|p| p.state == ConnState::Connected)
            .count()
    }

    fn peer_index(&mut self, a: &RawAddr) -> usize {
        if let Some(&i) = self.by_addr.get(&addr_key(a)) {
            return i;
        }
        let i = self.peers.len();
        self.peers.push(PeerConn {
            addr: *a,
            ah: None,
            qp: None,
            local: None,
            remote: None,
            state: ConnState::Idle,
            queued: VecDeque::new(),
        });
        self.by_addr.insert(addr_key(a), i);
        i
    }

    fn next_psn(&mut self) -> u32 {
        self.psn_seed = self
            .psn_seed
            .wrapping_mul(1_664_525)
            .wrapping_add(1_013_904_223);
        self.psn_seed & 0x00ff_ffff
    }

    /// A fresh RC QP for peer `i`, replacing any earlier one (whose sends in flight fail).
    fn new_rc(&mut self, i: usize) -> Result<()> {
        self.reset_peer(i);
        let qp = Qp::rc(
            &self.pd,
            &self.cq,
            &self.cq,
            Some(&self.srq),
            QpCaps {
                max_send_wr: self.cfg.send_slots,
                max_recv_wr: 0,
                max_rd_atomic: 1,
            },
        )?;
        let psn = self.next_psn();
        let local = qp.endpoint(psn);
        self.by_qpn.insert(qp.qpn(), i);
        let p = &mut self.peers[i];
        p.local = Some(local);
        p.qp = Some(qp);
        Ok(())
    }

    fn ensure_ah(&mut self, i: usize) -> Result<()> {
        if self.peers[i].ah.is_none() {
            let ah = self.pd.create_ah(&self.peers[i].addr.gid, 0)?;
            self.peers[i].ah = Some(ah);
        }
        Ok(())
    }

    fn send_cm(&mut self, i: usize, kind: u8) {
        let Some(rc) = self.peers[i].local else {
            return;
        };
        let msg = CmMsg {
            kind,
            from: self.addr,
            to_connid: self.peers[i].addr.qkey,
            rc,
        };
        self.cm_queue.push_back((i, msg));
        self.flush_cm();
    }

    fn flush_cm(&mut self) {
        while let Some(&(i, msg)) = self.cm_queue.front() {
            let Some(slot) = self.free_ud_tx.pop() else {
                return;
            };
            self.cm_queue.pop_front();
            if let Err(e) = self.post_cm(i, slot, msg) {
                tracing::warn!(error = %e, "verbs RDM: connection message not sent");
                self.free_ud_tx.push(slot);
            }
        }
    }

    fn post_cm(&mut self, i: usize, slot: u32, msg: CmMsg) -> Result<()> {
        self.ensure_ah(i)?;
        let off = slot as usize * CM_LEN;
        self.ud_tx.copy_in(off, &msg.to_bytes());
        let p = &self.peers[i];
        let ah =
            p.ah.as_ref()
                .ok_or(Error::Invalid("no address handle".into()))?;
        self.ud.post_send_ud(
            WR_UD_SEND | u64::from(slot),
            self.ud_tx.sge(off, CM_LEN)?,
            ah,
            ud_qpn(&p.addr),
            p.addr.qkey,
        )
    }

    fn start_connect(&mut self, i: usize) {
        if let Err(e) = self.new_rc(i) {
            tracing::warn!(error = %e, "verbs RDM: cannot create an RC QP");
            self.fail_peer(i);
            return;
        }
        let now = Instant::now();
        self.peers[i].state = ConnState::ReqSent {
            since: now,
            last: now,
        };
        self.send_cm(i, CM_REQ);
    }

    /// Accepts `req` from peer `i`: a new RC QP connected to the requester's.
    fn accept(&mut self, i: usize, remote: QpEndpoint) {
        let r = self.new_rc(i).and_then(|()| {
            let p = &self.peers[i];
            match (&p.qp, &p.local) {
                (Some(qp), Some(local)) => qp.connect(local, &remote, 1),
                _ => Err(Error::Invalid("no QP".into())),
            }
        });
        if let Err(e) = r {
            tracing::warn!(error = %e, "verbs RDM: cannot accept a connection");
            self.fail_peer(i);
            return;
        }
        let now = Instant::now();
        let p = &mut self.peers[i];
        p.remote = Some(remote);
        p.state = ConnState::AwaitRtu {
            since: now,
            last: now,
        };
        self.send_cm(i, CM_REP);
    }

    fn connected(&mut self, i: usize) {
        if self.peers[i].state != ConnState::Connected {
            self.peers[i].state = ConnState::Connected;
            self.stats.connects += 1;
            tracing::debug!(peer = ?self.peers[i].addr, "verbs RDM: connected");
        }
    }

    /// Drops peer `i`'s QP (the device stops using its buffers) and fails the sends that
    /// were in flight on it: a destroyed QP completes nothing more.
    fn reset_peer(&mut self, i: usize) {
        if let Some(old) = self.peers[i].qp.take() {
            self.by_qpn.remove(&old.qpn());
        }
        for slot in 0..self.tx_owner.len() {
            if matches!(self.tx_owner[slot], Some((_, p, _)) if p == i) {
                if let Some((token, _, _)) = self.tx_owner[slot].take() {
                    self.free_tx.push(slot as u32);
                    self.stats.tx_errors += 1;
                    self.events.push_back(DeviceEvent::SendDone {
                        token,
                        outcome: SendOutcome::Error,
                    });
                }
            }
        }
    }

    fn fail_peer(&mut self, i: usize) {
        self.peers[i].state = ConnState::Failed;
        while let Some((token, _)) = self.peers[i].queued.pop_front() {
            self.stats.tx_errors += 1;
            self.events.push_back(DeviceEvent::SendDone {
                token,
                outcome: SendOutcome::Error,
            });
        }
    }

    fn on_cm(&mut self, msg: CmMsg) {
        if msg.to_connid != self.addr.qkey {
            self.stats.cm_dropped += 1;
            return;
        }
        let i = self.peer_index(&msg.from);
        let state = self.peers[i].state;
        match (msg.kind, state) {
            (CM_REQ, ConnState::Idle | ConnState::Failed) => self.accept(i, msg.rc),
            (CM_REQ, ConnState::ReqSent { .. }) => {
                // Both sides connect at once: the lower address's request wins.
                if addr_key(&self.addr) > addr_key(&msg.from) {
                    self.accept(i, msg.rc);
                }
            }
            (CM_REQ, ConnState::AwaitRtu { .. } | ConnState::Connected) => {
                if self.peers[i].remote.map(|r| r.qpn) == Some(msg.rc.qpn) {
                    // A retransmitted request: our REP was lost.
                    self.send_cm(i, CM_REP);
                } else {
                    // The peer set up a new QP (its side of the connection failed, e.g. a
                    // send error): ours is useless to it. Accept the new one (`new_rc` fails
                    // what was in flight on the old QP).
                    self.accept(i, msg.rc);
                }
            }
            (CM_REP, ConnState::ReqSent { .. }) => {
                let r = {
                    let p = &self.peers[i];
                    match (&p.qp, &p.local) {
                        (Some(qp), Some(local)) => qp.connect(local, &msg.rc, 1),
                        _ => Err(Error::Invalid("no QP".into())),
                    }
                };
                match r {
                    Ok(()) => {
                        self.peers[i].remote = Some(msg.rc);
                        self.connected(i);
                        self.send_cm(i, CM_RTU);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "verbs RDM: cannot complete a connection");
                        self.fail_peer(i);
                    }
                }
            }
            (CM_REP, ConnState::Connected) => {
                if self.peers[i].remote.map(|r| r.qpn) == Some(msg.rc.qpn) {
                    // Our RTU was lost.
                    self.send_cm(i, CM_RTU);
                } else {
                    self.stats.cm_dropped += 1;
                }
            }
            (CM_RTU, ConnState::AwaitRtu { .. }) => {
                if self.peers[i].remote.map(|r| r.qpn) == Some(msg.rc.qpn) {
                    self.connected(i);
                } else {
                    self.stats.cm_dropped += 1;
                }
            }
            _ => self.stats.cm_dropped += 1,
        }
    }

    /// Retransmits connection messages and gives up on connections that take too long.
    fn drive_timers(&mut self, now: Instant) {
        for i in 0..self.peers.len() {
            match self.peers[i].state {
                ConnState::ReqSent { since, last } | ConnState::AwaitRtu { since, last } => {
                    if now.duration_since(since) > self.cfg.connect_timeout {
                        tracing::warn!(peer = ?self.peers[i].addr, "verbs RDM: connection timed out");
                        self.fail_peer(i);
                    } else if now.duration_since(last) >= self.cfg.cm_retry {
                        let req = matches!(self.peers[i].state, ConnState::ReqSent { .. });
                        self.peers[i].state = if req {
                            ConnState::ReqSent { since, last: now }
                        } else {
                            ConnState::AwaitRtu { since, last: now }
                        };
                        self.stats.cm_retransmits += 1;
                        self.send_cm(i, if req { CM_REQ } else { CM_REP });
                    }
                }
                _ => {}
            }
        }
    }

    /// Posts queued packets of connected peers while send buffers last.
    fn flush_queued(&mut self) {
        for i in 0..self.peers.len() {
            while self.peers[i].state == ConnState::Connected && !self.peers[i].queued.is_empty() {
                let Some(slot) = self.free_tx.pop() else {
                    return;
                };
                let Some((token, bytes)) = self.peers[i].queued.pop_front() else {
                    self.free_tx.push(slot);
                    break;
                };
                let off = slot as usize * self.cfg.mtu;
                self.tx.copy_in(off, &bytes);
                let r = match (&self.peers[i].qp, self.tx.sge(off, bytes.len())) {
                    (Some(qp), Ok(sge)) => qp
                        .post_send(WR_SEND | u64::from(slot), sge)
                        .map(|()| qp.qpn()),
                    (None, _) => Err(Error::Invalid("no QP".into())),
                    (_, Err(e)) => Err(e),
                };
                match r {
                    Ok(qpn) => self.tx_owner[slot as usize] = Some((token, i, qpn)),
                    Err(e) => {
                        tracing::warn!(error = %e, "verbs RDM: post_send failed");
                        self.free_tx.push(slot);
                        self.stats.tx_errors += 1;
                        self.events.push_back(DeviceEvent::SendDone {
                            token,
                            outcome: SendOutcome::Error,
                        });
                    }
                }
            }
        }
    }

    fn on_wc(&mut self, wc: Wc) -> Result<()> {
        let ok = wc.status == tagmatch_verbs_sys::IBV_WC_SUCCESS;
        let slot = (wc.wr_id & !WR_KIND) as u32;
        match wc.wr_id & WR_KIND {
            WR_SEND => {
                // A completion of a QP since reset (`reset_peer` already failed its sends
                // and freed their buffers) is stale: nothing to do.
                let owner = self.tx_owner[slot as usize];
                if let Some((token, i, _)) = owner.filter(|o| o.2 == wc.qp_num) {
                    self.tx_owner[slot as usize] = None;
                    self.free_tx.push(slot);
                    let outcome = if ok {
                        self.stats.tx_packets += 1;
                        SendOutcome::Ok
                    } else {
                        tracing::warn!(status = %wc.status_str(), "verbs RDM: send failed");
                        self.stats.tx_errors += 1;
                        // The QP is in the error state: nothing more gets through it.
                        self.fail_peer(i);
                        SendOutcome::Error
                    };
                    self.events
                        .push_back(DeviceEvent::SendDone { token, outcome });
                }
            }
            WR_RECV => {
                let off = slot as usize * self.cfg.mtu;
                if ok {
                    if let Some(&i) = self.by_qpn.get(&wc.qp_num) {
                        if matches!(self.peers[i].state, ConnState::AwaitRtu { .. }) {
                            // The requester sent before its RTU arrived: it is connected.
                            self.connected(i);
                        }
                        let len = (wc.byte_len as usize).min(self.cfg.mtu);
                        self.stats.rx_packets += 1;
                        self.events.push_back(DeviceEvent::Recv {
                            src: self.peers[i].addr,
                            bytes: self.rx.copy_out(off, len),
                        });
                    }
                }
                if self.rnr_debt > 0 && self.parked_slots.len() < self.cfg.recv_slots as usize / 2 {
                    // A refused packet is held: keep this receive buffer out of the SRQ
                    // for it, so a sender that keeps going meets the hardware's RNR
                    // retries. At most half the buffers: control packets (CTS, READRSP,
                    // EOR, ...) must still find one, or an operation the not-ready
                    // receiver waits for could never finish.
                    self.rnr_debt -= 1;
                    self.parked_slots.push(slot);
                } else {
                    self.srq
                        .post_recv(wc.wr_id, self.rx.sge(off, self.cfg.mtu)?)?;
                }
            }
            WR_UD_SEND => self.free_ud_tx.push(slot),
            WR_UD_RECV => {
                let len = UD_GRH_LEN + CM_LEN;
                let off = slot as usize * len;
                if ok && wc.byte_len as usize >= len {
                    let b = self.ud_rx.copy_out(off + UD_GRH_LEN, CM_LEN);
                    match CmMsg::parse(&b) {
                        Some(m) => self.on_cm(m),
                        None => self.stats.cm_dropped += 1,
                    }
                }
                self.ud.post_recv(wc.wr_id, self.ud_rx.sge(off, len)?)?;
            }
            _ => tracing::warn!(
                wr_id = wc.wr_id,
                "verbs RDM: completion of an unknown request"
            ),
        }
        Ok(())
    }

    /// Hands the held packets in again and gives their parked receive buffers back to the
    /// SRQ (a packet refused again is held again and parks the next buffer).
    fn redeliver_held(&mut self) -> Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        for (src, bytes) in self.held.drain(..) {
            self.events.push_back(DeviceEvent::Recv { src, bytes });
        }
        // Every held packet had a parked buffer or a debt for one: none is held now.
        self.rnr_debt = 0;
        while let Some(slot) = self.parked_slots.pop() {
            let off = slot as usize * self.cfg.mtu;
            self.srq
                .post_recv(WR_RECV | u64::from(slot), self.rx.sge(off, self.cfg.mtu)?)?;
        }
        Ok(())
    }

    /// Polls the CQ once; returns the completions handled.
    fn poll_once(&mut self) -> io::Result<usize> {
        let mut wcs = std::mem::take(&mut self.wcs);
        wcs.clear();
        let r = self.cq.poll(&mut wcs, 16);
        let n = wcs.len();
        let mut res = Ok(());
        for wc in wcs.drain(..) {
            if let Err(e) = self.on_wc(wc) {
                res = Err(e);
            }
        }
        self.wcs = wcs;
        r.and(res).map_err(to_io)?;
        Ok(n)
    }
}

fn to_io(e: Error) -> io::Error {
    match e {
        Error::Verbs { err, .. } | Error::Io(err) => err,
        other => io::Error::other(other.to_string()),
    }
}

impl RdmDevice for VerbsRdmDevice {
    fn addr(&self) -> RawAddr {
        self.addr
    }

    fn mtu(&self) -> usize {
        self.cfg.mtu
    }

    fn submit(&mut self, t: Transmit, _mem: &mut dyn MemoryAccess) {
        match t {
            Transmit::Send {
                token, dest, bytes, ..
            } => {
                if bytes.len() > self.cfg.mtu {
                    self.stats.tx_errors += 1;
                    self.events.push_back(DeviceEvent::SendDone {
                        token,
                        outcome: SendOutcome::Error,
                    });
                    return;
                }
                if addr_key(&dest) == addr_key(&self.addr) {
                    // To this endpoint itself: looped back here, as a NIC loops back a send
                    // to its own address (no connection to set up).
                    self.stats.tx_packets += 1;
                    self.stats.rx_packets += 1;
                    self.events.push_back(DeviceEvent::Recv {
                        src: self.addr,
                        bytes,
                    });
                    self.events.push_back(DeviceEvent::SendDone {
                        token,
                        outcome: SendOutcome::Ok,
                    });
                    return;
                }
                let i = self.peer_index(&dest);
                match self.peers[i].state {
                    ConnState::Failed => {
                        self.stats.tx_errors += 1;
                        self.events.push_back(DeviceEvent::SendDone {
                            token,
                            outcome: SendOutcome::Error,
                        });
                        return;
                    }
                    _ if self.peers[i].queued.len() >= self.cfg.max_queued => {
                        self.stats.send_again += 1;
                        self.again.push(token);
                        return;
                    }
                    ConnState::Idle => {
                        self.peers[i].queued.push_back((token, bytes));
                        self.start_connect(i);
                    }
                    _ => self.peers[i].queued.push_back((token, bytes)),
                }
                self.flush_queued();
            }
            Transmit::RdmaRead { token, .. } | Transmit::RdmaWrite { token, .. } => {
                // efa-rdm-protocol-v4 §2.1: without the RDMA feature bits a peer never asks
                // for RDMA; an endpoint configured wrongly gets a failure, not a hang.
                self.stats.rdma_refused += 1;
                self.events
                    .push_back(DeviceEvent::RdmaDone { token, ok: false });
            }
            // (Registered with remote access whatever `remote` says.)
            Transmit::Register { mem, len, .. } => {
                // Device-local keys and addresses (one page of gap between regions, so an
                // off-by-one range never lands in the next one).
                let key = MrKey {
                    addr: self.next_addr,
                    key: self.next_key,
                };
                self.next_key += 1;
                self.next_addr = self
                    .next_addr
                    .saturating_add(len.saturating_add(8191) & !4095);
                self.events.push_back(DeviceEvent::RegisterDone {
                    mem,
                    result: Ok(key),
                });
            }
            Transmit::Deregister { .. } => {}
        }
    }

    fn progress(
        &mut self,
        _mem: &mut dyn MemoryAccess,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        let start = Instant::now();
        // Only when the endpoint may take them now: otherwise they are no work, and a
        // not-ready receiver's `progress` sleeps on the completion channel.
        if std::mem::take(&mut self.rnr_retry) {
            self.redeliver_held().map_err(to_io)?;
        }
        for token in self.again.drain(..) {
            self.events.push_back(DeviceEvent::SendDone {
                token,
                outcome: SendOutcome::Again,
            });
        }
        loop {
            let n = self.poll_once()?;
            let now = Instant::now();
            self.drive_timers(now);
            self.flush_cm();
            self.flush_queued();
            if n > 0 || !self.events.is_empty() {
                return Ok(());
            }
            let waited = now.duration_since(start);
            let left = match timeout {
                Some(t) if waited >= t => return Ok(()),
                Some(t) => t - waited,
                None => Duration::MAX,
            };
            if waited < self.cfg.spin {
                std::hint::spin_loop();
                continue;
            }
            // Sleep until a completion: arm, look once more (a completion that came before
            // the arming raises no event), then wait on the channel — at most until the
            // next connection-message retransmission is due.
            self.cq.req_notify().map_err(to_io)?;
            if self.poll_once()? > 0 || !self.events.is_empty() {
                continue;
            }
            let nap = match next_cm_retry(self.peers.iter().map(|p| p.state), self.cfg.cm_retry) {
                Some(due) => left.min(due.saturating_duration_since(Instant::now())),
                None => left,
            };
            let nap = (nap != Duration::MAX).then_some(nap);
            self.chan.wait(nap).map_err(to_io)?;
        }
    }

    fn flush_tx(&mut self, _mem: &mut dyn MemoryAccess) -> io::Result<()> {
        self.flush_cm();
        self.flush_queued();
        Ok(())
    }

    fn poll_event(&mut self) -> Option<DeviceEvent> {
        self.events.pop_front()
    }

    /// Receiver not ready: the packet is held and handed in again at the `progress` after
    /// [`RdmDevice::retry_refused`]; one receive buffer stays out of the shared receive
    /// queue per held packet (up to half of them).
    fn refuse(&mut self, src: RawAddr, bytes: Vec<u8>) {
        self.stats.rnr_held += 1;
        self.held.push_back((src, bytes));
        self.rnr_debt += 1;
    }

    fn retry_refused(&mut self) {
        self.rnr_retry = true;
    }

    fn is_idle(&self) -> bool {
        self.held.is_empty() && self.is_idle_apart_from_refused()
    }

    /// Idle but for held refused packets that wait for [`RdmDevice::retry_refused`].
    fn is_idle_apart_from_refused(&self) -> bool {
        (!self.rnr_retry || self.held.is_empty())
            && self.events.is_empty()
            && self.again.is_empty()
            && self.free_tx.len() == self.cfg.send_slots as usize
            && self.peers.iter().all(|p| {
                p.queued.is_empty()
                    && !matches!(
                        p.state,
                        ConnState::ReqSent { .. } | ConnState::AwaitRtu { .. }
                    )
            })
    }

    fn rx_count(&self) -> u64 {
        self.stats.rx_packets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cm_message_round_trips_and_rejects_garbage() {
        let m = CmMsg {
            kind: CM_REP,
            from: RawAddr {
                gid: [7; 16],
                qpn: 0x1234,
                qkey: 0x0102_0304,
                next: 0x5,
            },
            to_connid: 0x7777,
            rc: QpEndpoint {
                qpn: 0x00ab_cdef,
                lid: 9,
                gid: [7; 16],
                psn: 0x0012_3456,
            },
        };
        let b = m.to_bytes();
        assert_eq!(CmMsg::parse(&b), Some(m));
        assert_eq!(ud_qpn(&m.from), 0x0005_1234);
        for n in 0..CM_LEN {
            assert_eq!(CmMsg::parse(&b[..n]), None, "truncated to {n}");
        }
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(CmMsg::parse(&bad), None);
        let mut bad = b;
        bad[5] = 9;
        assert_eq!(CmMsg::parse(&bad), None);
    }

    /// The retransmission deadline is the connection message's own (its last send plus
    /// `cm_retry`), the earliest over the connecting peers, not `cm_retry` from whenever
    /// it is computed (which let a retransmission be late by up to `cm_retry` per sleep).
    #[test]
    fn the_next_cm_retry_is_the_earliest_last_send_plus_the_interval() {
        let retry = Duration::from_millis(50);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(next_cm_retry([], retry), None);
        assert_eq!(
            next_cm_retry(
                [ConnState::Idle, ConnState::Connected, ConnState::Failed],
                retry
            ),
            None,
            "nobody connecting"
        );
        // Sent at t0: due at t0 + 50 ms, however late it is computed.
        let req = ConnState::ReqSent {
            since: t0,
            last: t0,
        };
        assert_eq!(next_cm_retry([req], retry), Some(at(50)));
        // The earliest of several, REQs and REPs alike; others ignored.
        let rep = ConnState::AwaitRtu {
            since: t0,
            last: at(10),
        };
        let later = ConnState::ReqSent {
            since: t0,
            last: at(30),
        };
        assert_eq!(
            next_cm_retry([later, ConnState::Connected, rep], retry),
            Some(at(60))
        );
        assert_eq!(next_cm_retry([later, req, rep], retry), Some(at(50)));
        assert_eq!(next_cm_retry([req], Duration::MAX), None, "never due");
    }
}

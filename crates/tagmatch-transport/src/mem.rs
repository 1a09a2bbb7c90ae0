//! The in-memory device: many endpoints in one process, deterministic under a seed.
//!
//! A [`MemNetwork`] is the shared medium; [`MemNetwork::device`] makes a [`MemDevice`]
//! attached to it. Packets and software-RDMA messages travel through per-device inboxes.
//! Each call of [`RdmDevice::progress`] on any device advances the network's step counter;
//! a message becomes deliverable after a seeded random delay of up to
//! [`MemFaults::max_delay`] steps, and the deliverable messages are taken in a seeded random
//! order ([`MemFaults::reorder`]). Faults: sends refused with `SendOutcome::Again` (partial
//! sends, [`MemFaults::send_again`]) and failed registrations
//! ([`MemFaults::register_fail`]). Delivery is reliable (the device model of
//! efa-rdm-protocol-v4 §1.1). Driving the same nodes in the same order with the same seed
//! gives the same run.
//!
//! Receiver not ready: a packet the receiving endpoint refused is held by its device and
//! delivered again after [`RdmDevice::retry_refused`]. Once a receiver holds
//! [`RNR_QUEUED_MAX`] packets of one sender, that sender's new REQ packets wait in the
//! network (their sends stay incomplete, as an EFA send that met RNR is retried by the
//! device) until the receiver holds fewer — except a packet of a message no later than
//! every held one, which may be the very one the receiver waits for.
//!
//! RDMA is the software RDMA of [`crate::soft_rdma`] (key and bounds checks on the serving
//! side), so the in-memory device exercises the same checks as the UDP device.
//!
//! Everything is in this process, so there is no descriptor to block on: `progress` with a
//! timeout sleeps on the device's [`crate::bell::Doorbell`], which the network rings when
//! it queues a packet for the device, and returns at once when anything is due.

use std::collections::VecDeque;

use foldhash::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tagmatch_rdm::{SendOutcome, SendToken, Transmit};
use tagmatch_wire::efa::{Packet, RawAddr};

use crate::bell::Doorbell;
use crate::device::{DeviceEvent, MemoryAccess, RdmDevice};
use crate::rng::XorShift;
use crate::soft_rdma::{same_peer, RdmaMsg, RdmaStats, SoftRdma, MAX_RDMA_HDR};

/// Fault and schedule settings of a [`MemNetwork`] (rates in permille).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemFaults {
    /// Take deliverable messages in random order (otherwise in arrival order).
    pub reorder: bool,
    /// Largest delivery delay, in network steps.
    pub max_delay: u32,
    /// A send is refused with [`SendOutcome::Again`].
    pub send_again: u32,
    /// A registration fails.
    pub register_fail: u32,
}

impl Default for MemFaults {
    /// Reordering with delays of up to 3 steps, no faults.
    fn default() -> Self {
        MemFaults {
            reorder: true,
            max_delay: 3,
            send_again: 0,
            register_fail: 0,
        }
    }
}

#[derive(Debug)]
enum Msg {
    Pkt(Vec<u8>),
    /// A packet the receiving endpoint refused, queued again (counted in `Hub::held`).
    Refused(Vec<u8>),
    Rdma(RdmaMsg<'static>),
}

#[derive(Debug)]
struct Inflight {
    due: u64,
    from: RawAddr,
    msg: Msg,
}

/// Refused packets (receiver not ready) of one sender a device may hold for redelivery
/// before that sender's new message packets (REQ packets with a `msg_id`, the only ones an
/// endpoint refuses) to it wait in the network: what keeps a receiver
/// that does not receive from holding an unbounded number of packets. A waiting send is
/// not answered (no [`SendOutcome::Again`] for its endpoint to resubmit in a loop): it
/// completes when the receiver holds fewer packets of the sender, and the sender's
/// doorbell rings then.
///
/// A packet of a message no later (in `msg_id` order) than every packet of the same
/// sender the receiver holds always gets through: it may be the message the receiver
/// needs before it can take the held ones (those beyond its reorder window), and holding
/// it back would leave both sides waiting for each other. Such packets are bounded by the
/// messages between the receiver's next expected one and the earliest held one.
pub const RNR_QUEUED_MAX: usize = 64;

/// The sender of a packet as a receiver sees it (what [`same_peer`] compares).
type PeerKey = ([u8; 16], u16, u32);

fn peer_key(a: &RawAddr) -> PeerKey {
    (a.gid, a.qpn, a.qkey)
}

/// The `msg_id` of a packet that has one (the packets an endpoint may refuse).
fn msg_id(bytes: &[u8]) -> Option<u32> {
    Packet::new_checked(bytes).ok()?.msg_id()
}

/// Whether `msg_id` `a` comes after `b` (serial-number order, ids wrap).
fn later(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// Refused packets of one sender a receiver holds (parked, or queued again).
#[derive(Debug, Default)]
struct Held {
    count: usize,
    /// Their `msg_id`s (one entry per packet that has one).
    ids: Vec<u32>,
}

/// A send waiting for its receiver to hold fewer refused packets (see [`RNR_QUEUED_MAX`]).
#[derive(Debug)]
struct Waiting {
    /// The sending device.
    from: usize,
    src: RawAddr,
    token: SendToken,
    bytes: Vec<u8>,
}

#[derive(Debug)]
struct Hub {
    rng: XorShift,
    /// Mixed into every connid this network hands out: a different value per network of
    /// the process (see [`MemNetwork::with_faults`]), so that an address of one network
    /// names no device of another (their GIDs and QPNs count from the same start).
    connid_salt: u32,
    step: u64,
    faults: MemFaults,
    addrs: Vec<RawAddr>,
    inboxes: Vec<Vec<Inflight>>,
    /// Each device's doorbell, rung when a packet is queued in its inbox.
    bells: Vec<Arc<Doorbell>>,
    /// Each device's mail flag: set (under this lock) whenever something is queued for it
    /// (a packet, a finished waiting send, fewer refused packets held), cleared by the
    /// device before it takes what is queued (see [`MemDevice::has_mail`]).
    mail: Vec<Arc<AtomicBool>>,
    /// Per receiving device, per sender: the refused packets it holds (see
    /// [`RNR_QUEUED_MAX`]).
    held: Vec<HashMap<PeerKey, Held>>,
    /// Per receiving device: sends to it waiting until it holds fewer refused packets.
    waiting: Vec<Vec<Waiting>>,
    /// Per receiving device: it holds fewer refused packets than when its waiting sends
    /// were last looked at.
    recheck: Vec<bool>,
    /// Per sending device: its sends waiting in `waiting`.
    waiting_sends: Vec<usize>,
    /// Per sending device: completions of its sends that waited, to report.
    done: Vec<Vec<(SendToken, SendOutcome)>>,
    /// Per device: it was dropped (its address is nobody's any more).
    gone: Vec<bool>,
    /// Device index by `(gid, qpn, qkey)` (what [`same_peer`] compares).
    by_addr: foldhash::HashMap<([u8; 16], u16, u32), usize>,
    mtu: usize,
}

impl Hub {
    /// The live device with address `a` (one hash lookup, not a scan of every device
    /// the network ever had).
    fn index_of(&self, a: &RawAddr) -> Option<usize> {
        let i = *self.by_addr.get(&(a.gid, a.qpn, a.qkey))?;
        (!self.gone[i] && same_peer(&self.addrs[i], a)).then_some(i)
    }

    fn push(&mut self, to: usize, from: RawAddr, msg: Msg) {
        let due = self.step + self.rng.below(self.faults.max_delay as u64 + 1);
        self.inboxes[to].push(Inflight { due, from, msg });
        self.mail[to].store(true, Ordering::Release);
        self.bells[to].ring();
    }

    /// Whether REQ packet `bytes` from `from` may go to device `to` now, `extra` packets
    /// of that sender being on their way besides what `to` holds (see [`RNR_QUEUED_MAX`]).
    fn admits(&self, to: usize, from: &RawAddr, bytes: &[u8], extra: usize) -> bool {
        // Only REQ packets wait (wire-layouts §A.2: type ≥ 64): control packets always
        // get through to a not-ready receiver.
        // Nothing held (the common case): no hashing on the send path.
        if bytes.first().is_none_or(|&t| t < 64) || self.held[to].is_empty() {
            return true;
        }
        let Some(h) = self.held[to].get(&peer_key(from)) else {
            return true;
        };
        if h.count + extra < RNR_QUEUED_MAX {
            return true;
        }
        // The receiver may be waiting for exactly this message (the held ones lie beyond
        // its reorder window): it must get through.
        // efa-rdm-protocol-v4 §3.2: "The field `msg_id` records the sending order of all
        // RTM packets between two endpoint" (RTA too, §3.3). A REQ without one (RTW:
        // "there is no `msg_id` in the eager RTW header", RTR) is never refused: it adds
        // nothing held, so it need not wait.
        msg_id(bytes).is_none_or(|m| h.ids.iter().all(|&x| !later(m, x)))
    }

    /// Device `to` took a refused packet of `from` back: one fewer held.
    fn unhold(&mut self, to: usize, from: &RawAddr, bytes: &[u8]) {
        let key = peer_key(from);
        let Some(h) = self.held[to].get_mut(&key) else {
            return;
        };
        h.count = h.count.saturating_sub(1);
        if let Some(m) = msg_id(bytes) {
            if let Some(i) = h.ids.iter().position(|&x| x == m) {
                h.ids.swap_remove(i);
            }
        }
        if h.count == 0 {
            self.held[to].remove(&key);
        }
        self.recheck[to] = true;
        self.mail[to].store(true, Ordering::Release);
    }

    /// Sends the waiting sends to `to` that it admits now; each completes for its sender
    /// (whose doorbell rings).
    fn release(&mut self, to: usize) {
        self.recheck[to] = false;
        if self.waiting[to].is_empty() {
            return;
        }
        let mut sent: HashMap<PeerKey, usize> = HashMap::default();
        for w in std::mem::take(&mut self.waiting[to]) {
            let extra = sent.get(&peer_key(&w.src)).copied().unwrap_or(0);
            if self.admits(to, &w.src, &w.bytes, extra) {
                *sent.entry(peer_key(&w.src)).or_insert(0) += 1;
                self.push(to, w.src, Msg::Pkt(w.bytes));
                self.finish_waiting(w.from, w.token, SendOutcome::Ok);
            } else {
                self.waiting[to].push(w);
            }
        }
    }

    /// A waiting send of device `from` finished: its device reports it at its next
    /// `progress`.
    fn finish_waiting(&mut self, from: usize, token: SendToken, outcome: SendOutcome) {
        self.waiting_sends[from] = self.waiting_sends[from].saturating_sub(1);
        if !self.gone[from] {
            self.done[from].push((token, outcome));
            self.mail[from].store(true, Ordering::Release);
            self.bells[from].ring();
        }
    }
}

/// The shared medium of in-memory devices. Cloning gives another handle to the same
/// network. See the module documentation.
#[derive(Debug, Clone)]
pub struct MemNetwork(Arc<Mutex<Hub>>);

impl MemNetwork {
    /// A network with the default schedule ([`MemFaults::default`]) and an MTU of 8928 (an
    /// EFA device's).
    pub fn new(seed: u64) -> MemNetwork {
        MemNetwork::with_faults(seed, MemFaults::default())
    }

    /// A network with the given faults.
    pub fn with_faults(seed: u64, faults: MemFaults) -> MemNetwork {
        // Networks of one process: the first keeps the connids its seed gives, the
        // others differ (an address handed to an endpoint of another network must not
        // reach that network's device with the same GID and QPN).
        static NETWORKS: AtomicU32 = AtomicU32::new(0);
        let n = NETWORKS.fetch_add(1, Ordering::Relaxed);
        MemNetwork(Arc::new(Mutex::new(Hub {
            rng: XorShift::new(seed),
            connid_salt: n.wrapping_mul(0x9e37_79b9),
            step: 0,
            faults,
            addrs: Vec::new(),
            inboxes: Vec::new(),
            bells: Vec::new(),
            mail: Vec::new(),
            held: Vec::new(),
            waiting: Vec::new(),
            recheck: Vec::new(),
            waiting_sends: Vec::new(),
            done: Vec::new(),
            gone: Vec::new(),
            by_addr: Default::default(),
            mtu: 8928,
        })))
    }

    fn hub(&self) -> MutexGuard<'_, Hub> {
        // A panic while holding the lock cannot leave the hub inconsistent in a way that
        // matters to the other devices (every update is a push or a removal).
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the MTU of devices created from now on.
    pub fn set_mtu(&self, mtu: usize) {
        self.hub().mtu = mtu.max(MAX_RDMA_HDR + 64);
    }

    /// Changes the fault settings (e.g. after a warm-up).
    pub fn set_faults(&self, faults: MemFaults) {
        self.hub().faults = faults;
    }

    /// Attaches a new device with a fresh address (`fe80::N`, QP `N + 1`, random connid).
    pub fn device(&self) -> MemDevice {
        let mut hub = self.hub();
        let n = hub.addrs.len();
        let mut gid = [0u8; 16];
        gid[0] = 0xfe;
        gid[1] = 0x80;
        gid[12..].copy_from_slice(&(n as u32).to_be_bytes());
        let addr = RawAddr {
            gid,
            qpn: (n as u16).wrapping_add(1),
            qkey: hub.rng.next_u64() as u32 ^ hub.connid_salt,
            next: 0,
        };
        hub.addrs.push(addr);
        hub.inboxes.push(Vec::new());
        let bell = Arc::new(Doorbell::new());
        hub.bells.push(bell.clone());
        let mail = Arc::new(AtomicBool::new(false));
        hub.mail.push(mail.clone());
        hub.held.push(HashMap::default());
        hub.waiting.push(Vec::new());
        hub.recheck.push(false);
        hub.waiting_sends.push(0);
        hub.done.push(Vec::new());
        hub.gone.push(false);
        hub.by_addr.insert((addr.gid, addr.qpn, addr.qkey), n);
        let salt = hub.rng.next_u64() as u32;
        MemDevice {
            net: self.clone(),
            idx: n,
            addr,
            mtu: hub.mtu,
            rdma: SoftRdma::new(salt),
            events: VecDeque::new(),
            again: Vec::new(),
            rnr_redeliveries: 0,
            rnr_waits: 0,
            parked: Vec::new(),
            spare: Vec::new(),
            bell,
            mail,
        }
    }

    /// Messages not yet delivered, over all devices (sends waiting for a not-ready
    /// receiver included, see [`RNR_QUEUED_MAX`]).
    pub fn in_flight(&self) -> usize {
        let hub = self.hub();
        hub.inboxes.iter().map(Vec::len).sum::<usize>()
            + hub.waiting.iter().map(Vec::len).sum::<usize>()
    }
}

/// One device of a [`MemNetwork`].
#[derive(Debug)]
pub struct MemDevice {
    net: MemNetwork,
    idx: usize,
    addr: RawAddr,
    mtu: usize,
    rdma: SoftRdma,
    events: VecDeque<DeviceEvent>,
    again: Vec<SendToken>,
    rnr_redeliveries: u64,
    rnr_waits: u64,
    /// Refused packets waiting for [`RdmDevice::retry_refused`] (counted in `Hub::held`).
    parked: Vec<(RawAddr, Vec<u8>)>,
    /// The buffer `progress` swaps with the inbox (so neither is reallocated per call).
    spare: Vec<Inflight>,
    /// Rung by the network when a packet is queued for this device (see [`crate::bell`]).
    bell: Arc<Doorbell>,
    /// See [`MemDevice::has_mail`].
    mail: Arc<AtomicBool>,
}

impl MemDevice {
    /// Software-RDMA counters (served and rejected requests).
    pub fn rdma_stats(&self) -> RdmaStats {
        self.rdma.stats
    }

    /// Packets the endpoint refused (receiver not ready) and this device queued again.
    pub fn rnr_redeliveries(&self) -> u64 {
        self.rnr_redeliveries
    }

    /// Sends of this device that waited for a receiver holding [`RNR_QUEUED_MAX`] refused
    /// packets of it.
    pub fn rnr_waits(&self) -> u64 {
        self.rnr_waits
    }

    /// Delivers the packets due to this device (in-order, or shuffled with the reorder
    /// fault) as events, serving software-RDMA requests; returns how many it handled.
    fn deliver(&mut self, mem: &mut dyn MemoryAccess) -> usize {
        // Cleared before the lock: whatever is queued after this is either taken below or
        // sets the flag again.
        self.mail.store(false, Ordering::Relaxed);
        let mut due = std::mem::take(&mut self.spare);
        {
            let mut hub = self.net.hub();
            hub.step += 1;
            let step = hub.step;
            if hub.recheck[self.idx] {
                // Fewer refused packets held since the waiting sends were looked at.
                hub.release(self.idx);
            }
            let done = std::mem::take(&mut hub.done[self.idx]);
            for (token, outcome) in done {
                self.events
                    .push_back(DeviceEvent::SendDone { token, outcome });
            }
            let inbox = &mut hub.inboxes[self.idx];
            if inbox.iter().all(|m| m.due <= step) {
                // Everything is due (always, without delay faults): swap the buffers.
                std::mem::swap(inbox, &mut due);
            } else {
                // Delay faults: split, keeping each side in arrival order.
                for m in std::mem::take(inbox) {
                    if m.due <= step {
                        due.push(m);
                    } else {
                        inbox.push(m);
                    }
                }
            }
            if hub.faults.reorder {
                for i in (1..due.len()).rev() {
                    let j = hub.rng.below(i as u64 + 1) as usize;
                    due.swap(i, j);
                }
            }
        }
        let n = due.len() + self.again.len();
        for token in self.again.drain(..) {
            self.events.push_back(DeviceEvent::SendDone {
                token,
                outcome: SendOutcome::Again,
            });
        }
        let chunk = self.chunk();
        for m in due.drain(..) {
            match m.msg {
                Msg::Pkt(bytes) => self
                    .events
                    .push_back(DeviceEvent::Recv { src: m.from, bytes }),
                Msg::Refused(bytes) => {
                    self.net.hub().unhold(self.idx, &m.from, &bytes);
                    self.events
                        .push_back(DeviceEvent::Recv { src: m.from, bytes });
                }
                Msg::Rdma(r) if r.is_request() => {
                    let resp = self.rdma.serve(r, mem, chunk);
                    self.send_rdma(&m.from, resp);
                }
                Msg::Rdma(r) => {
                    if let Some((token, ok)) = self.rdma.on_response(&m.from, r, mem) {
                        self.events.push_back(DeviceEvent::RdmaDone { token, ok });
                    }
                }
            }
        }
        self.spare = due;
        n
    }

    /// Nothing is queued for or at this device and no event waits: only a peer (or a
    /// parked packet's retry) can give it work. Its sends that wait for a not-ready
    /// receiver ([`RNR_QUEUED_MAX`]) are no work: the receiver rings this device's doorbell
    /// when they complete.
    pub fn quiet(&self) -> bool {
        if !self.events.is_empty() || !self.again.is_empty() {
            return false;
        }
        let hub = self.net.hub();
        hub.inboxes[self.idx].is_empty() && hub.done[self.idx].is_empty() && !hub.recheck[self.idx]
    }

    /// Whether the network queued something for this device (a packet, a finished send
    /// that waited, fewer refused packets held) since its last `progress` took what was
    /// queued: one load, no lock. `false` means a `progress` would find nothing new from
    /// the network (its own events and parked packets aside): an owner polling many times
    /// per message can skip the device's `progress` and its lock.
    #[inline]
    pub fn has_mail(&self) -> bool {
        self.mail.load(Ordering::Acquire)
    }

    /// The device's doorbell: rung whenever a packet is queued for it. An owner that drives
    /// other in-process work too (the facade's fast path) rings and waits on the same bell.
    pub fn doorbell(&self) -> &Arc<Doorbell> {
        &self.bell
    }

    fn chunk(&self) -> usize {
        self.mtu - MAX_RDMA_HDR
    }

    fn send_rdma(&mut self, to: &RawAddr, msgs: Vec<RdmaMsg<'static>>) -> bool {
        let mut hub = self.net.hub();
        let Some(t) = hub.index_of(to) else {
            return false;
        };
        for m in msgs {
            hub.push(t, self.addr, Msg::Rdma(m));
        }
        true
    }
}

/// The device leaves the network: sends and RDMA to its address fail from now on
/// ([`SendOutcome::Error`], as to an address nobody has), and what was queued for it is
/// dropped (it would otherwise stay in the network for ever, counted by
/// [`MemNetwork::in_flight`]). Addresses are not reused: every device gets a new one.
impl Drop for MemDevice {
    fn drop(&mut self) {
        let mut hub = self.net.hub();
        hub.gone[self.idx] = true;
        hub.by_addr
            .remove(&(self.addr.gid, self.addr.qpn, self.addr.qkey));
        hub.inboxes[self.idx] = Vec::new();
        hub.held[self.idx].clear();
        hub.done[self.idx].clear();
        // Sends waiting for this device fail, as sends to an address nobody has; this
        // device's own waiting sends are dropped (nobody will take their completions).
        for w in std::mem::take(&mut hub.waiting[self.idx]) {
            hub.finish_waiting(w.from, w.token, SendOutcome::Error);
        }
        let me = self.idx;
        for q in hub.waiting.iter_mut() {
            q.retain(|w| w.from != me);
        }
        hub.waiting_sends[self.idx] = 0;
    }
}

impl RdmDevice for MemDevice {
    fn addr(&self) -> RawAddr {
        self.addr
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn submit(&mut self, t: Transmit, mem: &mut dyn MemoryAccess) {
        match t {
            Transmit::Send {
                token, dest, bytes, ..
            } => {
                let mut hub = self.net.hub();
                let again = hub.faults.send_again;
                let outcome = match hub.index_of(&dest) {
                    None => SendOutcome::Error,
                    Some(_) if bytes.len() > self.mtu => SendOutcome::Error,
                    Some(_) if hub.rng.chance(again) => SendOutcome::Again,
                    // Receiver not ready: the send waits, unanswered, until the receiver
                    // holds fewer refused packets of ours (see `RNR_QUEUED_MAX`).
                    Some(to) if !hub.admits(to, &self.addr, &bytes, 0) => {
                        hub.waiting[to].push(Waiting {
                            from: self.idx,
                            src: self.addr,
                            token,
                            bytes,
                        });
                        hub.waiting_sends[self.idx] += 1;
                        self.rnr_waits += 1;
                        return;
                    }
                    Some(to) => {
                        hub.push(to, self.addr, Msg::Pkt(bytes));
                        SendOutcome::Ok
                    }
                };
                if outcome == SendOutcome::Again {
                    // Answered at the next `progress` (see `UdpDevice`): an immediate
                    // `Again` would have the owner resubmit in a loop.
                    self.again.push(token);
                } else {
                    self.events
                        .push_back(DeviceEvent::SendDone { token, outcome });
                }
            }
            Transmit::RdmaRead {
                token,
                dest,
                local,
                offset,
                remote,
                len,
                ..
            } => {
                let req = self
                    .rdma
                    .start_read(token, dest, local, offset, remote, len);
                if !self.send_rdma(&dest, vec![req]) {
                    for token in self.rdma.fail_peer(&dest) {
                        self.events
                            .push_back(DeviceEvent::RdmaDone { token, ok: false });
                    }
                }
            }
            Transmit::RdmaWrite {
                token,
                dest,
                local,
                offset,
                remote,
                len,
                ..
            } => {
                let chunk = self.chunk();
                match self
                    .rdma
                    .start_write(token, dest, local, offset, remote, len, mem, chunk)
                {
                    Some(msgs) => {
                        if !self.send_rdma(&dest, msgs) {
                            for token in self.rdma.fail_peer(&dest) {
                                self.events
                                    .push_back(DeviceEvent::RdmaDone { token, ok: false });
                            }
                        }
                    }
                    None => self
                        .events
                        .push_back(DeviceEvent::RdmaDone { token, ok: false }),
                }
            }
            Transmit::Register {
                mem: h,
                len,
                remote,
            } => {
                let fail = {
                    let mut hub = self.net.hub();
                    let rate = hub.faults.register_fail;
                    hub.rng.chance(rate)
                };
                let result = if fail {
                    Err(())
                } else {
                    Ok(self.rdma.register(h, len, remote))
                };
                self.events
                    .push_back(DeviceEvent::RegisterDone { mem: h, result });
            }
            Transmit::Deregister { key } => {
                self.rdma.deregister(key);
            }
        }
    }

    /// Delivers what is due. With a timeout, when nothing was due, nothing is queued here
    /// and no event waits, sleeps on the device's doorbell until a packet is queued for it
    /// (or the timeout passes), then delivers again.
    fn progress(
        &mut self,
        mem: &mut dyn MemoryAccess,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        let seen = self.bell.epoch();
        let delivered = self.deliver(mem);
        let limit = timeout.unwrap_or(Duration::MAX);
        if delivered == 0 && !limit.is_zero() && self.quiet() && self.bell.wait(seen, limit) {
            self.deliver(mem);
        }
        Ok(())
    }

    fn poll_event(&mut self) -> Option<DeviceEvent> {
        self.events.pop_front()
    }

    #[inline]
    fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Receiver not ready: the packet is parked until [`RdmDevice::retry_refused`], then
    /// goes back into this device's inbox and is delivered again after the network's
    /// usual delay, until the endpoint takes it.
    fn refuse(&mut self, src: RawAddr, bytes: Vec<u8>) {
        self.rnr_redeliveries += 1;
        {
            let mut hub = self.net.hub();
            let h = hub.held[self.idx].entry(peer_key(&src)).or_default();
            h.count += 1;
            if let Some(m) = msg_id(&bytes) {
                h.ids.push(m);
            }
        }
        self.parked.push((src, bytes));
    }

    fn retry_refused(&mut self) {
        if self.parked.is_empty() {
            return;
        }
        let mut hub = self.net.hub();
        for (src, bytes) in self.parked.drain(..) {
            hub.push(self.idx, src, Msg::Refused(bytes));
        }
    }

    fn is_idle(&self) -> bool {
        self.is_idle_apart_from_refused() && self.parked.is_empty()
    }

    /// Idle but for the parked refused packets (which wait for
    /// [`RdmDevice::retry_refused`]).
    fn is_idle_apart_from_refused(&self) -> bool {
        if !self.events.is_empty() || !self.again.is_empty() || self.rdma.pending() != 0 {
            return false;
        }
        let hub = self.net.hub();
        hub.inboxes[self.idx].is_empty()
            && hub.done[self.idx].is_empty()
            && hub.waiting_sends[self.idx] == 0
            && !hub.recheck[self.idx]
    }
}

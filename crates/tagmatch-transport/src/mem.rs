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
//! RDMA is the software RDMA of [`crate::soft_rdma`] (key and bounds checks on the serving
//! side), so the in-memory device exercises the same checks as the UDP device.
//!
//! Everything is in this process, so there is no descriptor to block on: `progress` with a
//! timeout sleeps on the device's [`crate::bell::Doorbell`], which the network rings when
//! it queues a packet for the device, and returns at once when anything is due.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tagmatch_rdm::{SendOutcome, Transmit};
use tagmatch_wire::efa::RawAddr;

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
    /// A packet the receiving endpoint refused, queued again (counted in `Hub::rnr`).
    Refused(Vec<u8>),
    Rdma(RdmaMsg<'static>),
}

#[derive(Debug)]
struct Inflight {
    due: u64,
    from: RawAddr,
    msg: Msg,
}

/// Refused packets (receiver not ready) a device may have queued for redelivery before
/// sends to it are answered [`SendOutcome::Again`]: what keeps a receiver that does not
/// receive from making the fabric grow without bound (the senders' endpoints queue and
/// resubmit, as with a full send queue).
pub const RNR_QUEUED_MAX: usize = 64;

#[derive(Debug)]
struct Hub {
    rng: XorShift,
    step: u64,
    faults: MemFaults,
    addrs: Vec<RawAddr>,
    inboxes: Vec<Vec<Inflight>>,
    /// Each device's doorbell, rung when a packet is queued in its inbox.
    bells: Vec<Arc<Doorbell>>,
    /// Refused packets queued again per device (see [`RNR_QUEUED_MAX`]).
    rnr: Vec<usize>,
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
        self.bells[to].ring();
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
        MemNetwork(Arc::new(Mutex::new(Hub {
            rng: XorShift::new(seed),
            step: 0,
            faults,
            addrs: Vec::new(),
            inboxes: Vec::new(),
            bells: Vec::new(),
            rnr: Vec::new(),
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
            qkey: hub.rng.next_u64() as u32,
            next: 0,
        };
        hub.addrs.push(addr);
        hub.inboxes.push(Vec::new());
        let bell = Arc::new(Doorbell::new());
        hub.bells.push(bell.clone());
        hub.rnr.push(0);
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
            parked: Vec::new(),
            spare: Vec::new(),
            bell,
        }
    }

    /// Messages not yet delivered, over all devices.
    pub fn in_flight(&self) -> usize {
        self.hub().inboxes.iter().map(Vec::len).sum()
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
    again: Vec<tagmatch_rdm::SendToken>,
    rnr_redeliveries: u64,
    /// Refused packets waiting for [`RdmDevice::retry_refused`] (counted in `Hub::rnr`).
    parked: Vec<(RawAddr, Vec<u8>)>,
    /// The buffer `progress` swaps with the inbox (so neither is reallocated per call).
    spare: Vec<Inflight>,
    /// Rung by the network when a packet is queued for this device (see [`crate::bell`]).
    bell: Arc<Doorbell>,
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

    /// Delivers the packets due to this device (in-order, or shuffled with the reorder
    /// fault) as events, serving software-RDMA requests; returns how many it handled.
    fn deliver(&mut self, mem: &mut dyn MemoryAccess) -> usize {
        let mut due = std::mem::take(&mut self.spare);
        {
            let mut hub = self.net.hub();
            hub.step += 1;
            let step = hub.step;
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
                    let mut hub = self.net.hub();
                    hub.rnr[self.idx] = hub.rnr[self.idx].saturating_sub(1);
                    drop(hub);
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
    /// parked packet's retry) can give it work.
    pub fn quiet(&self) -> bool {
        self.events.is_empty()
            && self.again.is_empty()
            && self.net.hub().inboxes[self.idx].is_empty()
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
        hub.rnr[self.idx] = 0;
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
                    // Only REQ packets wait (wire-layouts §A.2: type ≥ 64): control
                    // packets always get through to a not-ready receiver.
                    Some(to)
                        if hub.rnr[to] >= RNR_QUEUED_MAX
                            && bytes.first().is_some_and(|&t| t >= 64) =>
                    {
                        SendOutcome::Again
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
            Transmit::Register { mem: h, len } => {
                let fail = {
                    let mut hub = self.net.hub();
                    let rate = hub.faults.register_fail;
                    hub.rng.chance(rate)
                };
                let result = if fail {
                    Err(())
                } else {
                    Ok(self.rdma.register(h, len))
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

    /// Receiver not ready: the packet is parked until [`RdmDevice::retry_refused`], then
    /// goes back into this device's inbox and is delivered again after the network's
    /// usual delay, until the endpoint takes it.
    fn refuse(&mut self, src: RawAddr, bytes: Vec<u8>) {
        self.rnr_redeliveries += 1;
        self.net.hub().rnr[self.idx] += 1;
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
        self.events.is_empty()
            && self.again.is_empty()
            && self.parked.is_empty()
            && self.rdma.pending() == 0
            && self.net.hub().inboxes[self.idx].is_empty()
    }
}

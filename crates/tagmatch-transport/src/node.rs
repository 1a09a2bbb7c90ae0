//! [`Node`]: one `tagmatch_rdm::Endpoint` coupled with one device.
//!
//! The node moves the endpoint's [`Transmit`](tagmatch_rdm::Transmit)s to the device and
//! the device's [`DeviceEvent`]s to the endpoint, and collects the endpoint's completions.
//! Operations are submitted through [`Node::endpoint_mut`]; [`Node::progress`] does the IO
//! and returns how many completions are ready; [`Node::poll_completion`] takes them.
//!
//! ```
//! use std::time::Duration;
//! use tagmatch_rdm::{Config, SendOpts};
//! use tagmatch_transport::{mem::MemNetwork, Node};
//!
//! let net = MemNetwork::new(1);
//! let mut a = Node::new(Config::default(), net.device());
//! let mut b = Node::new(Config::default(), net.device());
//! let b_from_a = a.endpoint_mut().add_peer(b.addr());
//! b.endpoint_mut().recv(None, 16).unwrap();
//! a.endpoint_mut().send(b_from_a, b"hi".to_vec(), SendOpts::default()).unwrap();
//! let mut got = None;
//! for _ in 0..100 {
//!     a.progress(Some(Duration::ZERO)).unwrap();
//!     b.progress(Some(Duration::ZERO)).unwrap();
//!     if let Some(c) = b.poll_completion() {
//!         got = Some(c);
//!         break;
//!     }
//! }
//! assert_eq!(&got.unwrap().data[..2], b"hi");
//! ```

use foldhash::HashMap;
use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant};

use tagmatch_rdm::{Completion, Config, Endpoint, MemHandle, MrKey, OpId, PeerId, Rx};
use tagmatch_wire::efa::RawAddr;

use crate::device::{DeviceEvent, RdmDevice};

/// An endpoint and its device. See the module documentation.
#[derive(Debug)]
pub struct Node<D: RdmDevice> {
    ep: Endpoint,
    dev: D,
    /// Completions [`Node::wait`] took out of the endpoint's queue (older than those left
    /// there); [`Node::poll_completion`] hands them out first.
    completions: VecDeque<Completion>,
    /// How many of the endpoint's queued completions (at its front) a pump found: those
    /// are the node's ready completions, taken from the endpoint's queue by
    /// [`Node::poll_completion`] without a copy into a queue of the node. Completions the
    /// endpoint queued since the last pump are not ready yet (as when the pump moved
    /// them).
    counted: usize,
    /// Peers inserted through [`Node::add_peer`], by their whole address (connid included).
    exact: HashMap<([u8; 16], u16, u32), PeerId>,
    /// The endpoint's admission epoch when it refused the first packet the device holds
    /// since the device was last asked to retry (see [`Node::progress`]).
    refused_at: Option<u64>,
    /// [`Node::send_now`] moved completions into `completions`: the next
    /// [`Node::progress`] must not block (as it would not have had it moved them itself).
    pumped: bool,
}

impl<D: RdmDevice> Node<D> {
    /// An endpoint with configuration `cfg` on `dev`; the endpoint's MTU is the device's and
    /// its raw address is the device's.
    pub fn new(mut cfg: Config, dev: D) -> Node<D> {
        cfg.mtu = dev.mtu();
        Node {
            ep: Endpoint::new(cfg, dev.addr()),
            dev,
            completions: VecDeque::new(),
            counted: 0,
            exact: HashMap::default(),
            refused_at: None,
            pumped: false,
        }
    }

    /// Inserts a peer address (`fi_av_insert`). Prefer this to
    /// `endpoint_mut().add_peer`: packets are then attributed by the whole address, connid
    /// included, so a peer restarted on the same IP and port (a new connid) inserted again
    /// gets its own id, while the endpoint's own lookup (GID and QP only, as an EFA device's)
    /// would keep answering with the first entry.
    pub fn add_peer(&mut self, addr: RawAddr) -> PeerId {
        let p = self.ep.add_peer(addr);
        self.exact.insert((addr.gid, addr.qpn, addr.qkey), p);
        p
    }

    /// The raw address (the device's).
    pub fn addr(&self) -> RawAddr {
        self.dev.addr()
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// The endpoint, to submit operations. Take its completions through
    /// [`Node::poll_completion`], not the endpoint's own: the node counts which of those
    /// queued in the endpoint are ready (found by a pump).
    pub fn endpoint_mut(&mut self) -> &mut Endpoint {
        &mut self.ep
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.dev
    }

    /// The device, mutably.
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.dev
    }

    /// Moves work between endpoint and device until neither has any; returns how much was
    /// moved.
    /// (Inlined: with nothing queued on either side, as in most calls of a busy-polling
    /// owner, there is nothing to move and no pass is made.)
    #[inline]
    fn pump(&mut self) -> usize {
        if !self.ep.has_output() && !self.dev.has_events() {
            return 0;
        }
        self.pump_passes()
    }

    /// [`Node::pump`] when something is queued.
    #[inline(never)]
    fn pump_passes(&mut self) -> usize {
        let mut total = 0;
        loop {
            let mut n = 0;
            while let Some(t) = self.ep.poll_transmit() {
                self.dev.submit(t, &mut self.ep);
                n += 1;
            }
            while let Some(ev) = self.dev.poll_event() {
                n += 1;
                match ev {
                    DeviceEvent::Recv { src, bytes } => {
                        let peer = match self.exact.get(&(src.gid, src.qpn, src.qkey)) {
                            Some(p) => Some(*p),
                            None => self.ep.lookup_peer(&src.gid, src.qpn),
                        };
                        if self.ep.handle_packet(peer, &bytes) == Rx::Refused {
                            // Refusing changed nothing: the epoch is the one it was
                            // refused at (the earliest of the held packets' is kept).
                            let epoch = self.ep.admission_epoch();
                            self.refused_at.get_or_insert(epoch);
                            self.dev.refuse(src, bytes);
                        } else {
                            // The endpoint took what it needs: the buffer carries one of
                            // its next packets (no allocation per message in a ping-pong).
                            self.ep.recycle(bytes);
                        }
                    }
                    DeviceEvent::SendDone { token, outcome } => {
                        self.ep.on_send_done(token, outcome)
                    }
                    DeviceEvent::RdmaDone { token, ok } => self.ep.on_rdma_done(token, ok),
                    DeviceEvent::RegisterDone { mem, result } => {
                        self.ep.on_register_done(mem, result)
                    }
                }
            }
            // The completions stay in the endpoint's queue: the new ones are counted
            // (the owner takes them from there, see `counted`).
            let queued = self.ep.completion_count();
            if queued > self.counted {
                n += queued - self.counted;
                self.counted = queued;
            }
            if n == 0 {
                return total;
            }
            total += n;
        }
    }

    /// After a send was posted outside `progress`: hands what the endpoint queued to the
    /// device and lets the device send now what would not gain from waiting for the
    /// owner's next `progress` ([`RdmDevice::send_soon`]: for UDP, a packet to a peer
    /// with nothing in flight; the answer of a ping-pong leaves ~0.4–1 µs sooner).
    /// Nothing is received. Events the device had queued are handed to the endpoint too
    /// (completions then wait in the node, as after a `progress`).
    pub fn send_now(&mut self) -> io::Result<()> {
        let before = self.counted;
        self.pump();
        // Completions found now would have made the next `progress` a pass without a
        // wait (it would have found them): it still is.
        self.pumped |= self.counted > before;
        self.dev.send_soon(&mut self.ep)
    }

    /// Does the IO once: hands queued work to the device, lets it send and receive (blocking
    /// at most `timeout`, `None` for no limit, only when there is nothing to do at once),
    /// and feeds what it reports to the endpoint. Returns the completions ready for
    /// [`Node::poll_completion`].
    ///
    /// Packets the endpoint refused (receiver not ready) and the device holds are handed
    /// in again only when the endpoint's [`Endpoint::admission_epoch`] moved since the
    /// earliest of them was refused ([`RdmDevice::retry_refused`]); until then they are
    /// no work: a receiver that is not ready blocks in the device like an idle one, and
    /// wakes for new packets, completions and timers.
    pub fn progress(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        let moved = self.pump() + usize::from(std::mem::take(&mut self.pumped));
        if self
            .refused_at
            .is_some_and(|e| e != self.ep.admission_epoch())
        {
            self.refused_at = None;
            self.dev.retry_refused();
        }
        let t = if moved > 0 {
            Some(Duration::ZERO)
        } else {
            timeout
        };
        self.dev.progress(&mut self.ep, t)?;
        self.pump();
        // What the endpoint answered (and the ACKs piggybacked on it) leaves now, not at
        // the owner's next progress, which may be far away.
        self.dev.flush_tx(&mut self.ep)?;
        Ok(self.completions.len() + self.counted)
    }

    /// Whether the node has work of its own that the next [`Node::progress`] does
    /// without any new input from the device: completions not taken yet, transmits or
    /// completions the endpoint queued since the last pump (e.g. a receive of a claimed
    /// message), or refused packets that became admissible (the admission epoch moved
    /// since they were refused). An owner that sleeps on something other than the
    /// device (the in-process doorbell) must not sleep while this holds: nobody would
    /// wake it.
    pub fn has_own_work(&self) -> bool {
        self.has_completions()
            || self.ep.has_output()
            || self
                .refused_at
                .is_some_and(|e| e != self.ep.admission_epoch())
    }

    /// Whether completions wait to be taken ([`Node::poll_completion`]).
    #[inline]
    pub fn has_completions(&self) -> bool {
        self.counted > 0 || !self.completions.is_empty()
    }

    /// The next completion.
    #[inline]
    pub fn poll_completion(&mut self) -> Option<Completion> {
        if let Some(c) = self.completions.pop_front() {
            return Some(c);
        }
        if self.counted == 0 {
            return None;
        }
        self.counted -= 1;
        self.ep.poll_completion()
    }

    /// Progresses until `op` completes (other completions stay queued) or `limit` passes.
    pub fn wait(&mut self, op: OpId, limit: Duration) -> io::Result<Completion> {
        let deadline = Instant::now() + limit;
        loop {
            // The ready completions, in order, where they can be searched.
            while self.counted > 0 {
                self.counted -= 1;
                match self.ep.poll_completion() {
                    Some(c) => self.completions.push_back(c),
                    None => self.counted = 0,
                }
            }
            if let Some(i) = self.completions.iter().position(|c| c.op == op) {
                if let Some(c) = self.completions.remove(i) {
                    return Ok(c);
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("operation {op:?} did not complete"),
                ));
            }
            self.progress(Some((deadline - now).min(Duration::from_millis(50))))?;
        }
    }

    /// Registers `bytes` as an RMA target and progresses until its key is known.
    pub fn register(&mut self, bytes: Vec<u8>, limit: Duration) -> io::Result<(MemHandle, MrKey)> {
        self.register_with(bytes, true, limit)
    }

    /// [`Node::register`]; `remote: false` registers for local use only (see
    /// [`tagmatch_rdm::Endpoint::register_memory_with`]).
    pub fn register_with(
        &mut self,
        bytes: Vec<u8>,
        remote: bool,
        limit: Duration,
    ) -> io::Result<(MemHandle, MrKey)> {
        let h = self.ep.register_memory_with(bytes, remote);
        let deadline = Instant::now() + limit;
        loop {
            match self.ep.mem_key(h) {
                Some(Ok(k)) => return Ok((h, k)),
                Some(Err(())) => {
                    return Err(io::Error::other("memory registration failed"));
                }
                None => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "registration"));
            }
            self.progress(Some((deadline - now).min(Duration::from_millis(50))))?;
        }
    }

    /// Whether nothing is queued or in flight (the device is idle and the endpoint has
    /// nothing to transmit).
    pub fn is_idle(&self) -> bool {
        self.dev.is_idle()
    }

    /// Whether [`Node::flush`] is done: the device is idle, or idle but for refused packets
    /// that wait for the application (the endpoint's admission epoch did not move since
    /// they were refused, so handing them in again would only have them refused again).
    fn flushed(&self) -> bool {
        self.dev.is_idle()
            || (!self.ep.has_output()
                && self
                    .refused_at
                    .is_none_or(|e| e == self.ep.admission_epoch())
                && self.dev.is_idle_apart_from_refused())
    }

    /// Flushes (see [`Node::flush`]), then keeps progressing until nothing was received for
    /// `quiet` (or `limit` passes), so that a peer whose last acknowledgement from us was lost
    /// gets it again when it retransmits (TCP's TIME-WAIT). Call before a node stops being
    /// progressed for a while or exits.
    pub fn linger(&mut self, quiet: Duration, limit: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + limit;
        let idle = self.flush(limit)?;
        let mut seen = self.dev.rx_count();
        let mut since = Instant::now();
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            if now.duration_since(since) >= quiet {
                return Ok(idle && self.flushed());
            }
            self.progress(Some(
                (quiet - now.duration_since(since)).min(deadline - now),
            ))?;
            let n = self.dev.rx_count();
            if n != seen {
                seen = n;
                since = Instant::now();
            }
        }
    }

    /// Progresses until the device is idle (every datagram acknowledged) or `limit` passes;
    /// returns whether it became idle. Call before exiting so that peers get everything.
    ///
    /// Packets the endpoint refused (receiver not ready) and the device holds do not keep
    /// it from returning `true` while they wait for the application: like the unexpected
    /// messages the endpoint buffered, they arrived (their senders were told so) and only
    /// a receive of the application can make them admissible, which no amount of
    /// progress does. Those that became admissible (the endpoint's
    /// [`Endpoint::admission_epoch`] moved) are handed in first.
    pub fn flush(&mut self, limit: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + limit;
        loop {
            self.pump();
            if self.flushed() {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            self.progress(Some((deadline - now).min(Duration::from_millis(20))))?;
        }
    }
}

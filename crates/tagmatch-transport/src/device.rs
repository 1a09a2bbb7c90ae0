//! The device abstraction: what the RDM endpoint needs from an EFA-like device
//! ([`RdmDevice`]), and what the RC / tag-matching SRQ path needs from a verbs device
//! ([`RcTmDevice`]).
//!
//! Both are *driven*: the owner ([`crate::Node`] for the RDM path) hands work to the device,
//! calls `progress` (which does the IO, blocking at most for the given timeout), and drains
//! the device's events. The endpoint itself stays sans-IO.

use std::io;
use std::time::Duration;

use tagmatch_engine::tm_srq::{Cqe, OpsWr, PostOpError, TmCaps, WireMsg};
use tagmatch_rdm::{Endpoint, MemHandle, MrKey, RdmaToken, SendOutcome, SendToken, Transmit};
use tagmatch_wire::efa::RawAddr;

/// Access to the regions the local endpoint owns (application RMA targets and operation
/// buffers). The device reads RDMA-write sources and served RDMA-read sources from here and
/// writes RDMA-read destinations and served RDMA-write destinations here.
pub trait MemoryAccess {
    /// The bytes of region `mem`, if it exists.
    fn region(&self, mem: MemHandle) -> Option<&[u8]>;
    /// The bytes of region `mem`, mutably, if it exists.
    fn region_mut(&mut self, mem: MemHandle) -> Option<&mut [u8]>;
}

impl MemoryAccess for Endpoint {
    fn region(&self, mem: MemHandle) -> Option<&[u8]> {
        self.memory(mem)
    }

    fn region_mut(&mut self, mem: MemHandle) -> Option<&mut [u8]> {
        self.memory_mut(mem)
    }
}

/// Something a device reports to its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceEvent {
    /// A packet arrived from `src` (the sender's raw address, connid in `qkey`).
    Recv {
        /// The sender.
        src: RawAddr,
        /// The EFA packet.
        bytes: Vec<u8>,
    },
    /// A [`Transmit::Send`] finished ([`SendOutcome::Ok`] once the peer's device has it).
    SendDone {
        /// The send's token.
        token: SendToken,
        /// The outcome.
        outcome: SendOutcome,
    },
    /// A [`Transmit::RdmaRead`] or [`Transmit::RdmaWrite`] finished.
    RdmaDone {
        /// The operation's token.
        token: RdmaToken,
        /// Whether it succeeded (a rejected key or range, a dead peer: `false`).
        ok: bool,
    },
    /// A [`Transmit::Register`] finished.
    RegisterDone {
        /// The region.
        mem: MemHandle,
        /// Its key, or the failure.
        result: Result<MrKey, ()>,
    },
}

/// An EFA-like device for the RDM endpoint (efa-rdm-protocol-v4 §1.1): packets up to
/// [`RdmDevice::mtu`] bytes delivered reliably in any order, RDMA read and write against
/// registered memory, registrations with keys, and completions.
pub trait RdmDevice {
    /// This device's address; the endpoint's raw address (its `qkey` is the connid).
    fn addr(&self) -> RawAddr;

    /// Largest EFA packet this device carries; the endpoint's `Config::mtu`.
    fn mtu(&self) -> usize;

    /// Takes one thing the endpoint asked for. Every `Send`, `RdmaRead`, `RdmaWrite` and
    /// `Register` is answered exactly once by an event; `Deregister` has no answer. A
    /// `SendOutcome::Again` (queue full) is reported at the next [`RdmDevice::progress`], not
    /// at once: the endpoint resubmits on `Again`, and an owner draining events between
    /// submissions would otherwise loop.
    /// `mem` is the local endpoint's memory (RDMA-write sources are read at submission).
    fn submit(&mut self, t: Transmit, mem: &mut dyn MemoryAccess);

    /// Does the IO: sends what is queued, receives, serves peers' RDMA requests against
    /// `mem`, retransmits. Blocks at most `timeout` (`None`: until something happens) when
    /// there is nothing to do right away; never spins.
    fn progress(&mut self, mem: &mut dyn MemoryAccess, timeout: Option<Duration>)
        -> io::Result<()>;

    /// Puts on the wire what [`RdmDevice::submit`] queued since the last
    /// [`RdmDevice::progress`], without waiting or receiving. [`crate::Node::progress`]
    /// calls it after handing the device's events to the endpoint, so that the frames
    /// (and the acknowledgements they carry) the endpoint produced in answer do not sit in
    /// the device until the owner progresses again. The default does nothing.
    fn flush_tx(&mut self, mem: &mut dyn MemoryAccess) -> io::Result<()> {
        let _ = mem;
        Ok(())
    }

    /// Called by the owner right after it submitted a send outside `progress` (see
    /// [`crate::node::Node::send_now`]): a device that queues sends until its next
    /// `progress` may send now what does not gain from waiting (the UDP device: a packet
    /// to a peer with nothing in flight, which no later frame would join in a batch
    /// before the owner's next call). The default does nothing.
    fn send_soon(&mut self, mem: &mut dyn MemoryAccess) -> io::Result<()> {
        let _ = mem;
        Ok(())
    }

    /// The next event for the owner.
    fn poll_event(&mut self) -> Option<DeviceEvent>;

    /// Whether [`RdmDevice::poll_event`] may return an event: `false` only when none is
    /// queued (an owner that finds nothing else to do skips polling then). The default,
    /// `true`, is always correct.
    fn has_events(&self) -> bool {
        true
    }

    /// Nothing of this device is in flight (no unacknowledged datagram, no RDMA operation,
    /// no undelivered event): the process may exit without its peers missing anything.
    fn is_idle(&self) -> bool;

    /// [`RdmDevice::is_idle`], except that packets the endpoint refused and this device
    /// holds (see [`RdmDevice::refuse`]) do not count while they wait for
    /// [`RdmDevice::retry_refused`]: they wait for the receiving application, not for the
    /// network (as messages the endpoint buffered unexpected do). [`crate::Node::flush`]
    /// stops there. The default is [`RdmDevice::is_idle`].
    fn is_idle_apart_from_refused(&self) -> bool {
        self.is_idle()
    }

    /// Datagrams (or messages) received so far, acknowledgements and duplicates included;
    /// [`crate::Node::linger`] waits until it stops moving.
    fn rx_count(&self) -> u64 {
        0
    }

    /// The endpoint could not take packet `bytes` from `src` now
    /// ([`tagmatch_rdm::Rx::Refused`]: its unexpected-message budget is full, or the message
    /// is beyond its reorder window) and kept nothing of it. A device that can, redelivers
    /// it later, as an EFA device retries a send that met "receiver not ready" (RNR) — the
    /// sender's send already completed, so the packet must not be lost. The default drops
    /// it (the endpoint counted it in `Stats::rx_refused`).
    ///
    /// The device should hand refused packets in again only after
    /// [`RdmDevice::retry_refused`], and not count them as work that keeps `progress`
    /// from blocking until then: the endpoint would refuse them again, and an owner
    /// waiting in `progress` for its own operations would spin at full CPU while the
    /// receiver is not ready. New packets, completions and timers are handled as usual.
    fn refuse(&mut self, src: RawAddr, bytes: Vec<u8>) {
        let _ = (src, bytes);
    }

    /// Packets refused earlier may be admissible now (something that can make them so
    /// happened: a receive was posted, a message received, a peer's reorder window moved;
    /// see `tagmatch_rdm::Endpoint::admission_epoch`): hand every held one in again at the
    /// next [`RdmDevice::progress`]. [`crate::Node`] calls it only then. The default does
    /// nothing: a device that redelivers at every `progress` stays correct, only busier.
    fn retry_refused(&mut self) {}
}

/// The RC / tag-matching SRQ path (the verbs device, and its software models): a
/// reliable-connected queue pair per peer and one tag-matching SRQ, in the vocabulary of
/// `tagmatch_engine::tm_srq` (the executable model of that contract).
///
/// The verbs issue implements it over `ibv_post_srq_ops`, `ibv_post_send` and the extended
/// CQ; the offload driver of `tagmatch-engine` sits on top.
pub trait RcTmDevice {
    /// Device errors (posting to a full queue, a broken connection).
    type Error: std::fmt::Debug;

    /// The SRQ's tag-matching capabilities.
    fn caps(&self) -> TmCaps;

    /// Posts one receive-queue buffer (for unexpected and untagged messages).
    fn post_srq_recv(&mut self, wr_id: u64) -> Result<(), Self::Error>;

    /// `ibv_post_srq_ops` of one work request (ADD returns the entry handle).
    fn post_op(&mut self, wr: OpsWr) -> Result<Option<u32>, PostOpError>;

    /// Sends a TM message (eager, RNDV, FIN or no-tag) on the RC QP to `peer`.
    fn send(&mut self, peer: u32, msg: WireMsg<Vec<u8>>, wr_id: u64) -> Result<(), Self::Error>;

    /// Does the IO, blocking at most `timeout` when idle.
    fn progress(&mut self, timeout: Option<Duration>) -> io::Result<()>;

    /// The next completion of the SRQ's CQ (operations, receives, sends).
    fn poll_cq(&mut self) -> Option<Cqe<Vec<u8>>>;
}

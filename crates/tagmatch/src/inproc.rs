//! The endpoint's side of the in-process fast path (see [`crate::fast`]) and the
//! allocation-free operations: [`Endpoint::tinject`] / [`Endpoint::inject`] (send from a
//! borrowed slice, no completion) and [`Endpoint::trecv_into`] / [`Endpoint::recv_into`]
//! (receive into the caller's buffer, handed back in the completion).
//!
//! A fast-path endpoint matches every receive in its own `tagmatch_engine::Engine`:
//! messages from fast-path peers arrive through lanes; messages from peers without the
//! fast path arrive over the EFA protocol and are claimed from the protocol endpoint
//! (`mprobe`) as they become unexpected there, in its order, then matched here like the
//! others (and `mrecv`ed from the protocol endpoint when matched). So one engine sees
//! every arrival and earliest-posted / earliest-arrived matching holds across both paths.
//! In front of the engine, receives that cannot match anything yet and are the earliest
//! posted (a ping-pong's receive, a streaming server's window of identical receives) are
//! held aside, and arrivals look at them first, without the engine's insert, search and
//! removal (see [`Matcher`]); the matching rules are the engine's.

use foldhash::{HashMap, HashSet};
use std::collections::VecDeque;
use std::sync::Arc;

use tagmatch_engine::{
    Arrived, Envelope, Match, MsgHandle, Posted, RecvSpec, Rejected, Source, TagSel,
};
use tagmatch_rdm::{CallError, Config, OpError, OpId, OpKind, PeerId, SendOpts};
use tagmatch_wire::efa::RawAddr;

use crate::endpoint::{Device, MsgClaim};
use crate::fast::{self, Bytes, Hub, Inbox, Payload, RxLane, TxLane, F_CQ, F_DC, F_TAGGED};
use crate::proto::ProtoNode;
use crate::slot::Slot;
use crate::stats::Counters;
use crate::{Completion, Endpoint, Error, Message, Peer, ProbeInfo, Request, Result, TagMatch};

/// Operation ids of the fast path have this bit set (the protocol endpoint's count up
/// from 1 and never reach it).
const FAST_BIT: u64 = 1 << 62;
/// Messages a lane queues at the sender, behind a full ring, before sends on it fail with
/// [`Error::TooManyOps`] (the ring holds 512 more).
pub(crate) const MAX_LANE_WAITING: usize = 1 << 16;

/// Communicators of the engine: untagged and tagged messages match separately, as on
/// the protocol path (`fi_recv` never takes an `fi_tsend`). Tagged messages take
/// communicator 0, the one whose exact matches have array list heads (the engine's
/// `dense` module: `exact_owner`).
const COMM_TAG: u32 = 0;
const COMM_MSG: u32 = 1;

/// See [`Endpoint::device_due`]: a safety net (what the network queues for the device is
/// seen at once through its mail flag).
const DEVICE_POLL_EVERY: u32 = 256;

pub(crate) fn is_fast_op(op: OpId) -> bool {
    op.0 & FAST_BIT != 0
}

/// Where a receive puts the bytes.
#[derive(Debug)]
pub(crate) enum RecvBuf {
    /// A buffer of this length, allocated when the message matches.
    Alloc(usize),
    /// The caller's buffer (its length is the receive's length).
    Into(Vec<u8>),
    /// A receive slot's buffer, kept by the endpoint (`len`: its length).
    Slot { idx: u32, len: usize },
    /// `len` bytes at `off` of a registered region (`Endpoint::trecv_region`), held in
    /// the protocol endpoint (`hold_memory`) until the receive is done.
    Region {
        mem: tagmatch_rdm::MemHandle,
        off: usize,
        len: usize,
    },
}

impl RecvBuf {
    fn len(&self) -> usize {
        match self {
            RecvBuf::Alloc(n) => *n,
            RecvBuf::Into(v) => v.len(),
            RecvBuf::Slot { len, .. } => *len,
            RecvBuf::Region { len, .. } => *len,
        }
    }
}

/// A posted receive, as the engine holds it.
#[derive(Debug)]
pub(crate) struct RecvCtx {
    op: u64,
    buf: RecvBuf,
}

/// A message, as the engine holds it.
#[derive(Debug)]
pub(crate) struct FastMsg {
    payload: Payload,
    cq_data: Option<u64>,
}

/// A message taken from a lane but refused for backpressure: it goes first once there is
/// room (its lane is not read meanwhile, so the source's order holds).
#[derive(Debug)]
struct Stalled {
    env: Envelope,
    len: usize,
    /// Bytes it counts against the budget while stored: its length for a fast-path
    /// message, what the protocol endpoint buffered for a claimed one.
    held: usize,
    msg: FastMsg,
    dc: Option<u64>,
}

/// A lane into this endpoint and the message it holds back for the budget.
#[derive(Debug)]
struct InLane {
    rx: RxLane,
    stalled: Option<Stalled>,
}

#[derive(Debug)]
enum Route {
    Unknown,
    Proto,
    Fast(TxLane),
    /// Was `Fast`, and the receiver has been dropped: its lane is released, sends fail.
    Gone,
    /// The peer is this endpoint itself: a send is delivered inside the call (matched
    /// against this endpoint's receives at once, as UCX's `self` transport does), no
    /// lane. (A unit variant: the enum keeps its layout, `Fast` is matched as before;
    /// the source a self-send carries is `Fast::loop_src`.)
    Loop,
}

/// Searches made against [`Matcher::held`], counted as the engine counts its own.
#[derive(Debug, Default)]
struct HeldCounts {
    /// Searches of the held receives that found them not accepting (their attempts are
    /// these and `hits`: one count per arrival fewer on the hit path).
    passed: u64,
    hits: u64,
    /// Searches that found nothing and held the receive aside: one per held receive,
    /// which is also one submitted operation (the facade's `submitted` is derived from
    /// it, see [`Fast::add_facade`]).
    misses: u64,
    cancelled: u64,
    /// Self-injects a held slot receive took ([`Endpoint::loop_inject`]): each one a hit
    /// here, and a submitted, fast-path, injected send and a fast-path receive completed
    /// in the facade's counters (derived when read, see [`Fast::add_facade`]: one count
    /// on the path instead of seven).
    loop_slot: u64,
}

/// The fast path's matching: the engine, and in front of it receives held aside
/// (`held`, in posting order, all with one spec, `held_spec`). A receive is held aside,
/// instead of going to the engine, when the engine has no posted receive and either
/// nothing is held and the engine has no unexpected message (a ping-pong's every receive)
/// or what is held has the same spec (a window of identical receives); an arrival looks at
/// the held receives first (a message they accept goes to the earliest of them, straight
/// to its buffer: no engine insert, search and removal), then at the engine. The engine's
/// rules hold unchanged:
/// - the earliest-posted matching receive takes an arrival: every held receive was
///   posted before every receive in the engine (one is held only while the engine has
///   none), and the held ones, sharing one spec, accept the same messages, so the first
///   of them is the earliest that matches;
/// - a receive takes the earliest-arrived matching unexpected message: a receive is held
///   only when no unexpected message matches it (there was none when the first was held;
///   while some are held, every arrival their spec accepts is taken by them, never left
///   unexpected).
#[derive(Debug)]
pub(crate) struct Matcher {
    engine: tagmatch_engine::Engine<RecvCtx, FastMsg>,
    /// The earliest held receive (kept out of `rest`: a ping-pong holds one at a time).
    held: Option<RecvCtx>,
    /// The later held receives, in posting order.
    held_rest: Fifo<RecvCtx>,
    held_spec: RecvSpec,
    /// `held_spec` as masks: what an arrival's search of the held receives compares.
    held_key: HeldKey,
    held_c: HeldCounts,
}

/// A [`RecvSpec`] as two masked compares, one of the communicator and source (packed in a
/// word) and one of the tag: `matches` is [`RecvSpec::matches`] without its branches per
/// selector kind (a held receive's every arrival is searched with it).
#[derive(Debug, Clone, Copy)]
struct HeldKey {
    cs_want: u64,
    cs_mask: u64,
    tag_want: u64,
    tag_mask: u64,
}

impl HeldKey {
    fn of(spec: &RecvSpec) -> HeldKey {
        let (src_want, src_mask) = match spec.src {
            Source::Any => (0, 0),
            Source::Rank(s) => (u64::from(s), 0xffff_ffff),
        };
        let (tag_want, tag_mask) = match spec.tag {
            TagSel::Any => (0, 0),
            TagSel::Exact(t) => (t, u64::MAX),
            TagSel::Masked { want, mask } => (want & mask, mask),
        };
        HeldKey {
            cs_want: u64::from(spec.comm) << 32 | src_want,
            cs_mask: 0xffff_ffff_0000_0000 | src_mask,
            tag_want,
            tag_mask,
        }
    }

    /// Whether the spec accepts `env` (the spec's rule: communicator equal, source equal
    /// unless any, `env.tag & mask == want & mask`).
    #[inline(always)]
    fn matches(&self, env: &Envelope) -> bool {
        let cs = u64::from(env.comm) << 32 | u64::from(env.src);
        ((cs ^ self.cs_want) & self.cs_mask) | ((env.tag ^ self.tag_want) & self.tag_mask) == 0
    }
}

impl Matcher {
    fn new(cfg: tagmatch_engine::Config) -> Matcher {
        Matcher {
            engine: tagmatch_engine::Engine::new(cfg),
            held: None,
            held_rest: Fifo::new(),
            held_spec: RecvSpec::new(COMM_MSG, None, None),
            held_key: HeldKey::of(&RecvSpec::new(COMM_MSG, None, None)),
            held_c: HeldCounts::default(),
        }
    }

    /// Holds a receive aside if it may be (see [`Matcher`]): `Ok(None)` if held,
    /// `Ok(Some(_))` (the receive back) if it goes to the engine ([`Matcher::post`]),
    /// `Err(())` if the posted-receive limit is reached. Inlined at the receive call: a
    /// ping-pong's or a streaming window's every receive ends here.
    #[inline(always)]
    fn hold(&mut self, spec: RecvSpec, ctx: RecvCtx) -> Result<Option<(RecvSpec, RecvCtx)>, ()> {
        let c = self.engine.counters();
        let max = self.engine.config().max_posted;
        if c.posted_depth == 0 {
            // A search that finds no unexpected message: a miss, as the engine counts it.
            if self.held.is_none() {
                if c.unexpected_depth == 0 && max > 0 {
                    self.held_c.misses += 1;
                    if spec != self.held_spec {
                        self.held_key = HeldKey::of(&spec);
                        self.held_spec = spec;
                    }
                    // The old value is `None` (checked above): nothing to drop, and
                    // `forget` skips the drop glue's out-of-line call an assignment
                    // makes (~5 instructions per held receive).
                    std::mem::forget(self.held.replace(ctx));
                    return Ok(None);
                }
            } else if spec == self.held_spec {
                if 1 + self.held_rest.len() >= max {
                    // The engine's limit, for held and engine receives together.
                    return Err(());
                }
                self.held_c.misses += 1;
                self.held_rest.push_back(ctx);
                return Ok(None);
            }
        }
        Ok(Some((spec, ctx)))
    }

    /// Posts a receive [`Matcher::hold`] did not hold: `Ok(Some(_))` if it matched an
    /// unexpected message, `Ok(None)` if it waits, `Err(())` if the engine refuses more
    /// receives.
    #[inline(always)]
    fn post(
        &mut self,
        spec: RecvSpec,
        ctx: RecvCtx,
    ) -> Result<Option<Match<RecvCtx, FastMsg>>, ()> {
        let c = self.engine.counters();
        let max = self.engine.config().max_posted;
        if self.held.is_some() && 1 + self.held_rest.len() + c.posted_depth >= max {
            return Err(());
        }
        match self.engine.post(spec, ctx) {
            Ok(Posted::Matched(m)) => Ok(Some(m)),
            Ok(Posted::Pending(_)) => Ok(None),
            Err(_) => Err(()),
        }
    }

    /// The earliest held receive, if there is one and the held ones accept `env` (then an
    /// arrival with `env` goes to it; otherwise to [`Matcher::arrive_engine`]).
    #[inline(always)]
    fn take_held(&mut self, env: &Envelope) -> Option<RecvCtx> {
        self.held.as_ref()?;
        if !self.held_key.matches(env) {
            self.held_c.passed += 1;
            return None;
        }
        self.held_c.hits += 1;
        let next = if self.held_rest.is_empty() {
            None
        } else {
            self.held_rest.pop_front()
        };
        std::mem::replace(&mut self.held, next)
    }

    /// [`Matcher::take_held`] for a self-inject when the earliest held receive is a
    /// slot's: its operation, slot and length if the held receives accept `env` (counted
    /// in `loop_slot` by the caller); `None` (nothing counted, nothing taken) otherwise,
    /// and the general path searches again.
    #[inline(always)]
    fn take_held_slot(&mut self, env: &Envelope) -> Option<(u64, u32, usize)> {
        let Some(RecvCtx {
            op,
            buf: RecvBuf::Slot { idx, len },
        }) = self.held
        else {
            return None;
        };
        if !self.held_key.matches(env) {
            return None;
        }
        // Emptied, then refilled only from a window (not one `if` of both: it wrote the
        // whole record, a `None`'s stale bytes too). The old value is a slot's receive,
        // which owns nothing (matched above): `forget` skips the drop glue's call.
        std::mem::forget(self.held.take());
        if !self.held_rest.is_empty() {
            self.refill_held();
        }
        Some((op, idx, len))
    }

    /// The next receive of a window held aside becomes the earliest (out of line: the
    /// self-inject into a held slot stays free of the window's record move).
    #[inline(never)]
    fn refill_held(&mut self) {
        self.held = self.held_rest.pop_front();
    }

    /// An arrival the held receive did not take: the engine's
    /// [`arrive_held`](tagmatch_engine::Engine::arrive_held).
    #[inline(always)]
    fn arrive_engine(
        &mut self,
        env: Envelope,
        len: usize,
        held: usize,
        msg: FastMsg,
    ) -> Result<Arrived<RecvCtx, FastMsg>, Rejected<FastMsg>> {
        self.engine.arrive_held(env, len, held, msg)
    }

    /// An arrival: the held receive if it accepts it, else the engine.
    #[inline(always)]
    fn arrive_held(
        &mut self,
        env: Envelope,
        len: usize,
        held: usize,
        msg: FastMsg,
    ) -> Result<Arrived<RecvCtx, FastMsg>, Rejected<FastMsg>> {
        if let Some(recv) = self.take_held(&env) {
            return Ok(Arrived::Matched(Match {
                recv,
                msg,
                env,
                len,
            }));
        }
        self.arrive_engine(env, len, held, msg)
    }

    /// Cancels the posted receive of operation `op`; returns it.
    fn cancel(&mut self, op: u64) -> Option<RecvCtx> {
        if self.held.as_ref().is_some_and(|r| r.op == op) {
            self.held_c.cancelled += 1;
            let next = self.held_rest.pop_front();
            return std::mem::replace(&mut self.held, next);
        }
        if let Some(i) = self.held_rest.position(|r| r.op == op) {
            self.held_c.cancelled += 1;
            return self.held_rest.remove(i);
        }
        let mut found = None;
        self.engine
            .cancel_where(|_, r| r.op == op, |_, r| found = Some(r));
        found
    }

    /// Takes out the receives posted for source `src` alone (held aside or in the
    /// engine, in posting order) and its unexpected messages (`Engine::purge_peer`).
    fn purge_peer(&mut self, src: u32) -> (Vec<RecvCtx>, Vec<FastMsg>) {
        let mut recvs = Vec::new();
        // The held receives share one spec: all of them name `src`, or none.
        if self.held.is_some() && self.held_spec.src == Source::Rank(src) {
            recvs.extend(self.held.take());
            while let Some(r) = self.held_rest.pop_front() {
                recvs.push(r);
            }
            self.held_c.cancelled += recvs.len() as u64;
        }
        let mut msgs = Vec::new();
        self.engine.purge_peer(src, |p| match p {
            tagmatch_engine::Purged::Recv(_, r) => recvs.push(r),
            tagmatch_engine::Purged::Unexpected(m) | tagmatch_engine::Purged::Held(m) => {
                msgs.push(m.msg)
            }
        });
        (recvs, msgs)
    }

    /// The engine's counters with the held receives and their searches added.
    fn counters(&self) -> tagmatch_engine::Counters {
        let mut c = self.engine.counters();
        c.posted_depth += usize::from(self.held.is_some()) + self.held_rest.len();
        let hits = self.held_c.hits + self.held_c.loop_slot;
        c.match_attempts += hits + self.held_c.passed;
        c.hits += hits;
        c.misses += self.held_c.misses;
        c.cancelled += self.held_c.cancelled;
        c
    }
}

/// A first-in first-out queue (the window of held receives). `VecDeque::push_back` is a
/// call (its growth path keeps it out of line): this one's push and pop are inlined, only
/// growth is out of line. The slots are a power of two, indexed with a mask.
#[derive(Debug)]
struct Fifo<T> {
    slots: Vec<Option<T>>,
    head: usize,
    len: usize,
}

impl<T> Fifo<T> {
    fn new() -> Fifo<T> {
        Fifo {
            slots: Vec::new(),
            head: 0,
            len: 0,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot of the `k`th element (`slots` is not empty).
    #[inline(always)]
    fn at(&self, k: usize) -> usize {
        (self.head + k) & (self.slots.len() - 1)
    }

    #[inline(always)]
    fn push_back(&mut self, v: T) {
        if self.len == self.slots.len() {
            self.grow();
        }
        let i = self.at(self.len);
        if let Some(s) = self.slots.get_mut(i) {
            *s = Some(v);
            self.len += 1;
        }
    }

    /// Doubles the slots (at least 4), the elements moved to the front in order.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let cap = (self.slots.len() * 2).max(4);
        let mut v: Vec<Option<T>> = Vec::with_capacity(cap);
        for k in 0..self.len {
            let i = self.at(k);
            v.push(self.slots.get_mut(i).and_then(Option::take));
        }
        v.resize_with(cap, || None);
        self.slots = v;
        self.head = 0;
    }

    #[inline(always)]
    fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = self.slots.get_mut(self.head)?.take();
        self.head = self.at(1);
        self.len -= 1;
        v
    }

    /// The position (from the front) of the first element `f` accepts.
    fn position(&self, mut f: impl FnMut(&T) -> bool) -> Option<usize> {
        (0..self.len).find(|&k| {
            self.slots
                .get(self.at(k))
                .and_then(Option::as_ref)
                .is_some_and(&mut f)
        })
    }

    /// Removes the element at position `k` (the later ones move up one place).
    fn remove(&mut self, k: usize) -> Option<T> {
        if k >= self.len {
            return None;
        }
        let i = self.at(k);
        let v = self.slots.get_mut(i)?.take();
        for j in k..self.len - 1 {
            let (to, from) = (self.at(j), self.at(j + 1));
            let next = self.slots.get_mut(from).and_then(Option::take);
            if let Some(s) = self.slots.get_mut(to) {
                *s = next;
            }
        }
        self.len -= 1;
        v
    }
}

/// Protocol-path bookkeeping of the allocation-free operations (any transport).
#[derive(Debug, Default)]
pub(crate) struct ProtoExtras {
    /// Injected sends: no completion unless they fail. (Receives into a caller's buffer
    /// need no bookkeeping: the protocol endpoint receives into the buffer itself.)
    injected: HashSet<OpId>,
    /// Receive slots' receives that complete through the protocol endpoint (or a
    /// cancel): our operation -> the slot, which takes the completion instead of the
    /// queue (see [`Endpoint::recv_slot`]).
    pub(crate) slot_ops: HashMap<u64, u32>,
}

/// The fast-path state of an endpoint.
#[derive(Debug)]
pub(crate) struct Fast {
    hub: Arc<Hub>,
    inbox: Arc<Inbox>,
    addr: RawAddr,
    engine: Matcher,
    /// Per peer (by index): how messages to it travel, decided at the first send.
    routes: Vec<Route>,
    any_waiting: bool,
    /// The lanes into this endpoint, each with the message it holds back for the budget.
    rx: Vec<InLane>,
    /// Lanes just taken from the inbox (kept to reuse its allocation).
    new_lanes: Vec<Arc<fast::Lane>>,
    /// Some lane's sender is gone and the lane is not released yet (see `fast_progress`).
    reap: bool,
    next_op: u64,
    /// Protocol-path messages matched here and `mrecv`ed: protocol op -> (our op, the
    /// caller's buffer).
    proto_recvs: HashMap<u64, (u64, RecvBuf)>,
    proto_stalled: VecDeque<Stalled>,
    /// Sends to this endpoint itself refused by the budget, in send order: while any
    /// waits here, later ones queue behind it (non-overtaking); progress retries them.
    loop_q: VecDeque<Stalled>,
    /// The peer this endpoint knows itself as (the source of its self-sends), once a
    /// route is [`Route::Loop`].
    loop_src: u32,
    /// Injected sends `fast_inject` put straight into a lane's ring: each a submitted,
    /// fast-path, injected send in the facade's counters (derived when read, see
    /// [`Fast::add_facade`]).
    lane_injects: u64,
    /// Delivery-complete sends waiting for the receiver's ack: length, tag, and the route
    /// (peer index) they went on, to fail them if that receiver is dropped.
    dc_pending: HashMap<u64, (u64, u64, usize)>,
    acks: Vec<u64>,
    /// Device polls to skip while the protocol side is idle (see `device_due`).
    dev_skip: u32,
    /// Protocol packets received as of the last device poll.
    dev_rx: u64,
    /// Whether idle device polls may be skipped (not on a fabric with faults, whose delays
    /// are counted in device polls).
    throttle: bool,
}

impl Fast {
    pub(crate) fn new(
        hub: Arc<Hub>,
        addr: RawAddr,
        bell: Arc<tagmatch_transport::bell::Doorbell>,
        cfg: &Config,
        throttle: bool,
    ) -> Fast {
        let inbox = hub.register(addr, bell);
        let ecfg = tagmatch_engine::Config::default()
            .max_bytes(cfg.max_unexpected_bytes)
            .max_messages(cfg.max_unexpected_msgs);
        Fast {
            hub,
            inbox,
            addr,
            engine: Matcher::new(ecfg),
            routes: Vec::new(),
            any_waiting: false,
            rx: Vec::new(),
            new_lanes: Vec::new(),
            reap: false,
            next_op: FAST_BIT | 1,
            proto_recvs: HashMap::default(),
            proto_stalled: VecDeque::new(),
            loop_q: VecDeque::new(),
            loop_src: 0,
            lane_injects: 0,
            dc_pending: HashMap::default(),
            acks: Vec::new(),
            dev_skip: 0,
            dev_rx: 0,
            throttle,
        }
    }

    fn op(&mut self) -> u64 {
        let op = self.next_op;
        self.next_op += 1;
        op
    }

    /// Adds this engine's counters to the protocol endpoint's; returns its unexpected
    /// depth.
    pub(crate) fn add_matching(&self, m: &mut tagmatch_rdm::MatchCounters) -> usize {
        let c = self.engine.counters();
        m.posted_depth += c.posted_depth;
        m.unexpected_depth += c.unexpected_depth;
        m.claimed_depth += c.claimed_depth;
        m.reorder_depth += c.reorder_depth;
        m.bytes_held += c.bytes_held;
        m.match_attempts += c.match_attempts;
        m.hits += c.hits;
        m.misses += c.misses;
        m.cancelled += c.cancelled;
        m.rejected_backpressure += c.rejected_backpressure;
        m.rejected_sequence += c.rejected_sequence;
        c.unexpected_depth
    }

    /// Adds the facade counts the fast path keeps derived (see [`HeldCounts`]): a held
    /// receive is a submitted one; a self-inject a held slot took is a submitted,
    /// fast-path, injected send and a fast-path receive completed; an inject straight
    /// into a lane's ring is a submitted, fast-path, injected send.
    pub(crate) fn add_facade(&self, c: &mut Counters) {
        let h = &self.engine.held_c;
        c.submitted += h.misses + h.loop_slot + self.lane_injects;
        c.fast_sends += h.loop_slot + self.lane_injects;
        c.injected += h.loop_slot + self.lane_injects;
        c.fast_recvs += h.loop_slot;
        c.completed += h.loop_slot;
    }

    /// Lanes into this endpoint (read by it) and lanes out of it (to live receivers).
    pub(crate) fn lanes(&self) -> (usize, usize) {
        let out = self
            .routes
            .iter()
            .filter(|r| matches!(r, Route::Fast(_)))
            .count();
        (self.rx.len(), out)
    }
}

impl Drop for Fast {
    fn drop(&mut self) {
        // The lanes out of this endpoint go with `routes` (see `TxLane`'s `Drop`).
        self.hub
            .unregister(&self.addr, self.rx.iter().map(|l| &l.rx));
    }
}

/// Where completions go.
struct Out<'a> {
    ready: &'a mut VecDeque<Completion>,
    slots: &'a mut Vec<Slot>,
    counters: &'a mut Counters,
    ep: u32,
}

impl Out<'_> {
    fn push(&mut self, c: Completion) {
        self.counters.completed += 1;
        if !c.is_ok() {
            self.counters.failed += 1;
        }
        self.counters.bytes += c.len;
        self.ready.push_back(c);
    }

    fn send_done(&mut self, op: u64, len: u64, tag: u64) {
        self.send_result(op, len, tag, Ok(()));
    }

    fn send_result(&mut self, op: u64, len: u64, tag: u64, status: Result<(), OpError>) {
        let request = Request {
            op: OpId(op),
            ep: self.ep,
        };
        self.push(Completion::new(
            request,
            OpKind::Send,
            status,
            Vec::new(),
            len,
            tag,
            None,
            None,
            None,
        ));
    }
}

#[inline(always)]
fn spec(tag: Option<TagMatch>, src: Option<PeerId>) -> RecvSpec {
    let src = src.map_or(Source::Any, |p| Source::Rank(p.0));
    match tag {
        Some(t) => RecvSpec::masked(COMM_TAG, src, t.tag, t.mask).normalized(),
        None => RecvSpec {
            comm: COMM_MSG,
            src,
            tag: TagSel::Any,
        },
    }
}

/// Hands one lane message to the engine: matched (then completed), or queued as
/// unexpected; either way a delivery-complete send is acknowledged to its sender. Refused
/// by the budget: the message comes back, to wait at the head of its lane. (Inlined, and
/// the message in parts: no record is moved on the way to the engine.)
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn arrive(
    engine: &mut Matcher,
    node: &mut ProtoNode,
    proto_recvs: &mut HashMap<u64, (u64, RecvBuf)>,
    out: &mut Out<'_>,
    lane: &crate::fast::Lane,
    env: Envelope,
    len: usize,
    held: usize,
    msg: FastMsg,
    dc: Option<u64>,
    held_checked: bool,
) -> Result<(), Stalled> {
    let r = if held_checked {
        engine.arrive_engine(env, len, held, msg)
    } else {
        engine.arrive_held(env, len, held, msg)
    };
    match r {
        Ok(a) => {
            if let Some(op) = dc {
                // Delivered: matched, or held as unexpected by the receiver.
                lane.ack(op);
            }
            if let Arrived::Matched(m) = a {
                finish(node, proto_recvs, out, m.recv, m.env, m.len, m.msg);
            }
            Ok(())
        }
        Err(r) => Err(Stalled {
            env: r.env,
            len: r.len,
            held,
            msg: r.msg,
            dc,
        }),
    }
}

/// [`finish`] for a protocol-path message: receives it from the protocol endpoint (out
/// of line: the fast path's own messages do not come here).
#[cold]
fn finish_proto(
    node: &mut ProtoNode,
    proto_recvs: &mut HashMap<u64, (u64, RecvBuf)>,
    out: &mut Out<'_>,
    op: u64,
    buf: RecvBuf,
    claim: tagmatch_rdm::Claim,
) {
    let ep = node.get_mut().endpoint_mut();
    let r = match buf {
        RecvBuf::Region { mem, off, len } => {
            // The protocol endpoint's receive counts its own use of the region.
            let r = ep.mrecv_region(claim, mem, off as u64, len as u64);
            ep.unhold_memory(mem);
            r
        }
        _ => ep.mrecv(claim, buf.len()),
    };
    match r {
        Ok(rop) => {
            proto_recvs.insert(rop.0, (op, buf));
        }
        Err(e) => {
            // The claim was taken by this endpoint and never handed out: it cannot be
            // stale. Report rather than lose the receive.
            tracing::debug!(?e, "mrecv of a claimed protocol message failed");
            let request = Request {
                op: OpId(op),
                ep: out.ep,
            };
            out.push(Completion::recv_failed(request, OpError::Canceled));
        }
    }
}

/// [`finish`] for a receive into a registered region: copies the bytes there, releases
/// the region's hold, completes with no data.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn finish_region(
    node: &mut ProtoNode,
    out: &mut Out<'_>,
    op: u64,
    (mem, off, buf_len): (tagmatch_rdm::MemHandle, usize, usize),
    env: Envelope,
    len: usize,
    cq_data: Option<u64>,
    payload: Payload,
) {
    let n = len.min(buf_len);
    let ep = node.get_mut().endpoint_mut();
    // Held since the post: the region and the range are there.
    if let Some(to) = ep.memory_mut(mem).and_then(|m| m.get_mut(off..off + n)) {
        match payload {
            Payload::Inline { words, .. } => fast::copy_inline(&words, n, to),
            Payload::Heap(v) => to.copy_from_slice(&v[..n]),
            Payload::Proto(_) => {}
        }
    }
    ep.unhold_memory(mem);
    out.counters.fast_recvs += 1;
    let ep = out.ep;
    out.push(Completion::received(
        Request { op: OpId(op), ep },
        Vec::new(),
        len as u64,
        buf_len as u64,
        env.tag,
        env.src,
        cq_data,
    ));
}

/// A receive met its message: copies the bytes into the receive's buffer and completes it
/// (or, for a protocol-path message, receives it from the protocol endpoint).
#[inline(always)]
fn finish(
    node: &mut ProtoNode,
    proto_recvs: &mut HashMap<u64, (u64, RecvBuf)>,
    out: &mut Out<'_>,
    ctx: RecvCtx,
    env: Envelope,
    len: usize,
    msg: FastMsg,
) {
    let buf_len = ctx.buf.len();
    let n = len.min(buf_len);
    let data = match (msg.payload, ctx.buf) {
        (Payload::Proto(claim), buf) => {
            finish_proto(node, proto_recvs, out, ctx.op, buf, claim);
            return;
        }
        (payload, RecvBuf::Region { mem, off, .. }) => {
            finish_region(
                node,
                out,
                ctx.op,
                (mem, off, buf_len),
                env,
                len,
                msg.cq_data,
                payload,
            );
            return;
        }
        (payload, RecvBuf::Slot { idx, .. }) => {
            // Into the slot's buffer, completed in place: no completion record.
            if let Some(s) = out.slots.get_mut(idx as usize) {
                match payload {
                    Payload::Inline { words, .. } => fast::copy_inline(&words, n, &mut s.buf),
                    Payload::Heap(v) => s.buf[..n].copy_from_slice(&v[..n]),
                    Payload::Proto(_) => {}
                }
                s.complete(ctx.op, len as u64, n, env.tag, env.src, msg.cq_data);
            }
            out.counters.fast_recvs += 1;
            out.counters.completed += 1;
            out.counters.bytes += len as u64;
            if len > buf_len {
                out.counters.failed += 1;
            }
            return;
        }
        (Payload::Heap(mut v), RecvBuf::Alloc(_)) => {
            v.truncate(n);
            v
        }
        (Payload::Heap(v), RecvBuf::Into(mut b)) => {
            b[..n].copy_from_slice(&v[..n]);
            b.truncate(n);
            b
        }
        (Payload::Inline { words, .. }, RecvBuf::Alloc(_)) => {
            let mut b = vec![0u8; n];
            fast::copy_inline(&words, n, &mut b);
            b
        }
        (Payload::Inline { words, .. }, RecvBuf::Into(mut b)) => {
            fast::copy_inline(&words, n, &mut b);
            b.truncate(n);
            b
        }
    };
    out.counters.fast_recvs += 1;
    let ep = out.ep;
    out.push(Completion::received(
        Request {
            op: OpId(ctx.op),
            ep,
        },
        data,
        len as u64,
        buf_len as u64,
        env.tag,
        env.src,
        msg.cq_data,
    ));
}

/// [`arrive`] out of line, for the drain loop: a lane message no held receive took (the
/// engine's insert or match), or one held back for the budget. The loop, whose messages
/// held receives take, stays small: inlined, the engine's paths made every pass pay
/// their setup.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn arrive_engine(
    engine: &mut Matcher,
    node: &mut ProtoNode,
    proto_recvs: &mut HashMap<u64, (u64, RecvBuf)>,
    out: &mut Out<'_>,
    lane: &crate::fast::Lane,
    env: Envelope,
    len: usize,
    held: usize,
    msg: FastMsg,
    dc: Option<u64>,
    held_checked: bool,
) -> Result<(), Stalled> {
    arrive(
        engine,
        node,
        proto_recvs,
        out,
        lane,
        env,
        len,
        held,
        msg,
        dc,
        held_checked,
    )
}

/// Takes every lane's messages into the matcher (a message held back for the budget
/// first); `reap`: also what waited at a sender that went.
#[inline(always)]
fn drain_lanes(f: &mut Fast, node: &mut ProtoNode, out: &mut Out<'_>, reap: bool) {
    for InLane { rx, stalled } in f.rx.iter_mut() {
        if stalled.is_some() {
            let Some(s) = stalled.take() else { continue };
            if let Err(again) = arrive_engine(
                &mut f.engine,
                node,
                &mut f.proto_recvs,
                out,
                &rx.lane,
                s.env,
                s.len,
                s.held,
                s.msg,
                s.dc,
                false,
            ) {
                *stalled = Some(again);
                continue;
            }
        }
        let mut taken = false;
        // One look at the sender's `tail` per drain: what it had published by then.
        if !reap {
            rx.look();
        }
        // While a sender is gone, also what waited at it when it went.
        while let Some(raw) = if reap { rx.pop_any() } else { rx.pop_seen() } {
            taken = true;
            let comm = if raw.flags & F_TAGGED != 0 {
                COMM_TAG
            } else {
                COMM_MSG
            };
            let cq_data = (raw.flags & F_CQ != 0).then_some(raw.cq_data);
            let dc = (raw.flags & F_DC != 0).then_some(raw.op);
            let env = Envelope::new(comm, rx.peer, raw.tag);
            let len = raw.len;
            let msg = FastMsg {
                payload: raw.payload,
                cq_data,
            };
            if let Some(recv) = f.engine.take_held(&env) {
                // Straight from the slot into the held receive's buffer (no match
                // record).
                if let Some(op) = dc {
                    rx.lane.ack(op);
                }
                finish(node, &mut f.proto_recvs, out, recv, env, len, msg);
                continue;
            }
            if let Err(again) = arrive_engine(
                &mut f.engine,
                node,
                &mut f.proto_recvs,
                out,
                &rx.lane,
                env,
                len,
                len,
                msg,
                dc,
                true,
            ) {
                out.counters.fast_backpressure += 1;
                *stalled = Some(again);
                break;
            }
        }
        if taken {
            rx.publish();
        }
    }
}

/// Messages the protocol endpoint received and the fast path has not claimed yet (its
/// claims stay in the protocol endpoint until their `mrecv`: they are not to be looked
/// for again, which would be two engine searches, counted as misses, per progress call
/// for as long as a claimed message waits for its receive).
#[inline]
fn unclaimed(node: &ProtoNode) -> usize {
    let ep = node.endpoint();
    ep.in_flight()
        .2
        .saturating_sub(ep.matching_stats().claimed_depth)
}

impl Endpoint {
    /// Whether messages to `pid` take the fast path (decided at the first message, then
    /// fixed: every message of the pair takes the same path, so order holds).
    #[inline]
    pub(crate) fn is_fast(&mut self, pid: PeerId) -> bool {
        let Some(f) = self.fast.as_deref() else {
            return false;
        };
        match f.routes.get(pid.0 as usize) {
            Some(Route::Fast(_) | Route::Gone | Route::Loop) => true,
            Some(Route::Proto) => false,
            Some(Route::Unknown) | None => self.decide_route(pid),
        }
    }

    /// [`Endpoint::is_fast`] for a peer not messaged yet: opens the lane to it if it is
    /// a fast-path endpoint of the same fabric.
    #[cold]
    fn decide_route(&mut self, pid: PeerId) -> bool {
        let Some(f) = self.fast.as_deref_mut() else {
            return false;
        };
        let i = pid.0 as usize;
        if i >= f.routes.len() {
            f.routes.resize_with(i + 1, || Route::Unknown);
        }
        if let Route::Unknown = f.routes[i] {
            f.routes[i] = match self.node.endpoint().peer_addr(pid) {
                Some(a) if a == f.addr => {
                    f.loop_src = self.node.get_mut().endpoint_mut().add_peer(a).0;
                    Route::Loop
                }
                Some(a) => f
                    .hub
                    .connect(f.addr, &f.inbox, &a)
                    .map_or(Route::Proto, Route::Fast),
                None => Route::Proto,
            };
        }
        matches!(f.routes[i], Route::Fast(_) | Route::Gone | Route::Loop)
    }

    /// A send on the fast path (`is_fast(pid)` holds). Inlined: at an injected send's
    /// call the options are constants and their branches go.
    #[inline(always)]
    pub(crate) fn fast_send(
        &mut self,
        pid: PeerId,
        tag: Option<u64>,
        data: Bytes<'_>,
        opts: SendOpts,
        inject: bool,
    ) -> Result<Request> {
        let ep = self.id;
        let Some(f) = self.fast.as_deref_mut() else {
            return Err(Error::call(CallError::UnknownPeer, None, None));
        };
        let op = f.op();
        let tx = match f.routes.get_mut(pid.0 as usize) {
            Some(Route::Fast(tx)) => Some(tx),
            Some(Route::Gone) => None,
            Some(Route::Loop) => {
                let src = f.loop_src;
                return self.loop_send_outlined(src, op, tag, data, opts, inject);
            }
            _ => return Err(Error::call(CallError::UnknownPeer, None, None)),
        };
        if tx
            .as_ref()
            .is_some_and(|tx| tx.waiting() >= MAX_LANE_WAITING)
        {
            // The receiver takes nothing (its budget is full and it posts no receives):
            // the sender is told, as with too many operations in flight on the protocol
            // path, instead of queueing without bound.
            self.counters.call_errors += 1;
            return Err(Error::TooManyOps);
        }
        let mut flags = 0;
        if tag.is_some() {
            flags |= F_TAGGED;
        }
        if opts.cq_data.is_some() {
            flags |= F_CQ;
        }
        let dc = opts.delivery_complete && !inject;
        if dc {
            flags |= F_DC;
        }
        let len = data.len() as u64;
        let tag = tag.unwrap_or(0);
        self.counters.submitted += 1;
        let tx = match tx {
            Some(tx) if !tx.closed() => Some(tx),
            Some(tx) => {
                tx.discard();
                None
            }
            None => None,
        };
        let Some(tx) = tx else {
            // The receiving endpoint was dropped: the send fails (also an injected one),
            // as a send to a vanished peer fails on the protocol path.
            Out {
                ready: &mut self.ready,
                slots: &mut self.slots,
                counters: &mut self.counters,
                ep,
            }
            .push(Completion::new(
                Request { op: OpId(op), ep },
                OpKind::Send,
                Err(OpError::SendFailed),
                Vec::new(),
                len,
                tag,
                None,
                None,
                None,
            ));
            return Ok(Request { op: OpId(op), ep });
        };
        tx.send(tag, flags, opts.cq_data.unwrap_or(0), op, data);
        if tx.waiting() > 0 {
            f.any_waiting = true;
        }
        self.counters.fast_sends += 1;
        if dc {
            f.dc_pending.insert(op, (len, tag, pid.0 as usize));
        } else if inject {
            self.counters.injected += 1;
        } else {
            Out {
                ready: &mut self.ready,
                slots: &mut self.slots,
                counters: &mut self.counters,
                ep,
            }
            .send_done(op, len, tag);
        }
        Ok(Request { op: OpId(op), ep })
    }

    /// [`Endpoint::loop_send`] out of line: the general send path (every send that is
    /// not a self-inject with nothing queued) stays as small as before.
    #[inline(never)]
    fn loop_send_outlined(
        &mut self,
        src: u32,
        op: u64,
        tag: Option<u64>,
        data: Bytes<'_>,
        opts: SendOpts,
        inject: bool,
    ) -> Result<Request> {
        self.loop_send(src, op, tag, data, opts, inject)
    }

    /// A send from this endpoint to itself ([`Route::Loop`]): delivered inside the call,
    /// as a lane message is when progress takes it (a held receive first, else the
    /// engine: the earliest posted receive that matches, or the unexpected queue), unless
    /// an earlier self-send still waits for the budget: then it queues behind that one.
    /// A delivery-complete send completes once delivered (matched or held unexpected).
    #[inline(always)]
    fn loop_send(
        &mut self,
        src: u32,
        op: u64,
        tag: Option<u64>,
        data: Bytes<'_>,
        opts: SendOpts,
        inject: bool,
    ) -> Result<Request> {
        let ep = self.id;
        let Endpoint {
            node,
            ready,
            slots,
            counters,
            fast,
            ..
        } = self;
        let Some(f) = fast.as_deref_mut() else {
            return Err(Error::call(CallError::UnknownPeer, None, None));
        };
        if f.loop_q.len() >= MAX_LANE_WAITING {
            // Nothing takes these (budget full, no receives posted): as on a lane.
            counters.call_errors += 1;
            return Err(Error::TooManyOps);
        }
        let len = data.len();
        let (comm, tagv) = match tag {
            Some(t) => (COMM_TAG, t),
            None => (COMM_MSG, 0),
        };
        let dc = opts.delivery_complete && !inject;
        let msg = FastMsg {
            payload: if len <= fast::INLINE {
                Payload::Inline {
                    words: fast::pack_inline(match &data {
                        Bytes::Borrowed(b) => b,
                        Bytes::Owned(v) => v,
                    }),
                }
            } else {
                Payload::Heap(match data {
                    Bytes::Borrowed(b) => b.to_vec(),
                    Bytes::Owned(v) => v,
                })
            },
            cq_data: opts.cq_data,
        };
        counters.submitted += 1;
        counters.fast_sends += 1;
        let env = Envelope::new(comm, src, tagv);
        let mut out = Out {
            ready,
            slots,
            counters,
            ep,
        };
        let delivered = if !f.loop_q.is_empty() {
            f.loop_q.push_back(Stalled {
                env,
                len,
                held: len,
                msg,
                dc: dc.then_some(op),
            });
            false
        } else if let Some(recv) = f.engine.take_held(&env) {
            finish(node, &mut f.proto_recvs, &mut out, recv, env, len, msg);
            true
        } else {
            match f.engine.arrive_engine(env, len, len, msg) {
                Ok(Arrived::Matched(m)) => {
                    finish(
                        node,
                        &mut f.proto_recvs,
                        &mut out,
                        m.recv,
                        m.env,
                        m.len,
                        m.msg,
                    );
                    true
                }
                Ok(Arrived::Unexpected(_)) => true,
                Err(r) => {
                    out.counters.fast_backpressure += 1;
                    f.loop_q.push_back(Stalled {
                        env: r.env,
                        len: r.len,
                        held: len,
                        msg: r.msg,
                        dc: dc.then_some(op),
                    });
                    // The lean progress pass gives way to the general one, which retries.
                    f.inbox.raise_loop();
                    false
                }
            }
        };
        let len = len as u64;
        if inject {
            out.counters.injected += 1;
        } else if dc && !delivered {
            f.dc_pending.insert(op, (len, tagv, usize::MAX));
        } else {
            out.send_done(op, len, tagv);
        }
        Ok(Request { op: OpId(op), ep })
    }

    /// Posts a receive in the fast path's matcher: held aside (inlined at the receive
    /// call), else in the engine ([`Endpoint::fast_post_engine`], out of line).
    #[inline(always)]
    pub(crate) fn fast_post(
        &mut self,
        tag: Option<TagMatch>,
        src: Option<PeerId>,
        buf: RecvBuf,
    ) -> Result<Request> {
        let id = self.id;
        let Some(f) = self.fast.as_deref_mut() else {
            return Err(Error::call(CallError::UnknownOp, None, None));
        };
        let op = f.op();
        match f.engine.hold(spec(tag, src), RecvCtx { op, buf }) {
            // Held aside: counted submitted through the held receives' misses (see
            // `Fast::add_facade`).
            Ok(None) => {}
            Ok(Some((spec, ctx))) => return self.fast_post_engine(spec, ctx),
            Err(()) => return Err(self.too_many_receives()),
        }
        Ok(Request {
            op: OpId(op),
            ep: id,
        })
    }

    /// The receive limit is reached.
    #[cold]
    #[inline(never)]
    fn too_many_receives(&mut self) -> Error {
        self.counters.call_errors += 1;
        Error::call(CallError::TooManyReceives, None, None)
    }

    /// [`Endpoint::fast_post`] of a receive that is not held aside: the engine's post.
    #[inline(never)]
    fn fast_post_engine(&mut self, spec: RecvSpec, ctx: RecvCtx) -> Result<Request> {
        let Endpoint {
            id,
            node,
            ready,
            slots,
            counters,
            fast,
            ..
        } = self;
        let Some(f) = fast.as_deref_mut() else {
            return Err(Error::call(CallError::UnknownOp, None, None));
        };
        let op = ctx.op;
        match f.engine.post(spec, ctx) {
            Ok(Some(m)) => {
                let mut out = Out {
                    ready,
                    slots,
                    counters,
                    ep: *id,
                };
                finish(
                    node,
                    &mut f.proto_recvs,
                    &mut out,
                    m.recv,
                    m.env,
                    m.len,
                    m.msg,
                );
            }
            Ok(None) => {}
            Err(()) => return Err(self.too_many_receives()),
        }
        counters.submitted += 1;
        Ok(Request {
            op: OpId(op),
            ep: *id,
        })
    }

    pub(crate) fn fast_probe(
        &mut self,
        tag: Option<TagMatch>,
        src: Option<PeerId>,
    ) -> Option<ProbeInfo> {
        let ep = self.id;
        let f = self.fast.as_deref_mut()?;
        let p = f.engine.engine.probe(&spec(tag, src))?;
        Some(ProbeInfo {
            source: Peer {
                id: PeerId(p.env.src),
                ep,
            },
            tag: p.env.tag,
            len: p.len as u64,
            cq_data: p.msg.cq_data,
        })
    }

    pub(crate) fn fast_mprobe(
        &mut self,
        tag: Option<TagMatch>,
        src: Option<PeerId>,
    ) -> Option<Message> {
        let ep = self.id;
        let f = self.fast.as_deref_mut()?;
        let c = f.engine.engine.mprobe(&spec(tag, src))?;
        let cq_data = f.engine.engine.claimed(c.handle).ok()?.cq_data;
        Some(Message {
            claim: MsgClaim::Fast(c.handle),
            ep,
            info: ProbeInfo {
                source: Peer {
                    id: PeerId(c.env.src),
                    ep,
                },
                tag: c.env.tag,
                len: c.len as u64,
                cq_data,
            },
        })
    }

    pub(crate) fn fast_mrecv(&mut self, h: MsgHandle, buf: RecvBuf) -> Result<Request> {
        let Endpoint {
            id,
            node,
            ready,
            slots,
            counters,
            fast,
            ..
        } = self;
        let Some(f) = fast.as_deref_mut() else {
            return Err(Error::StaleMessage);
        };
        let m = f.engine.engine.mrecv(h).map_err(|_| Error::StaleMessage)?;
        let op = f.op();
        let mut out = Out {
            ready,
            slots,
            counters,
            ep: *id,
        };
        finish(
            node,
            &mut f.proto_recvs,
            &mut out,
            RecvCtx { op, buf },
            m.env,
            m.len,
            m.msg,
        );
        counters.submitted += 1;
        Ok(Request {
            op: OpId(op),
            ep: *id,
        })
    }

    /// Cancels a fast-path receive still posted (O(posted receives)).
    pub(crate) fn fast_cancel(&mut self, req: Request) -> Result<()> {
        let Some(f) = self.fast.as_deref_mut() else {
            return Err(Error::UnknownRequest(req));
        };
        let Some(ctx) = f.engine.cancel(req.op.0) else {
            return Err(Error::UnknownRequest(req));
        };
        self.counters.cancels += 1;
        self.fast_end_recv(req, ctx, OpError::Canceled);
        Ok(())
    }

    /// Completes a fast-path receive taken out of the matcher, with `error`: its region
    /// hold released, its slot or caller's buffer handed back.
    fn fast_end_recv(&mut self, req: Request, ctx: RecvCtx, error: OpError) {
        let ep = self.id;
        if let RecvBuf::Region { mem, .. } = ctx.buf {
            self.node.get_mut().endpoint_mut().unhold_memory(mem);
        }
        if let RecvBuf::Slot { idx, .. } = ctx.buf {
            // A completion with an error, as `Out::push` counts one (and as the protocol
            // path counts a slot's cancel, in `convert`); the slot takes it.
            self.counters.completed += 1;
            self.counters.failed += 1;
            self.slot_deliver(idx as usize, Completion::recv_failed(req, error));
            return;
        }
        let mut c = Completion::recv_failed(req, error);
        if let RecvBuf::Into(mut b) = ctx.buf {
            // The caller's buffer goes back, empty, as the protocol path hands it back
            // (`trecv_into`: a loop reuses it without allocating).
            b.clear();
            c.data = b;
        }
        Out {
            ready: &mut self.ready,
            slots: &mut self.slots,
            counters: &mut self.counters,
            ep,
        }
        .push(c);
    }

    /// [`Endpoint::abort`] of a fast-path request: a receive still posted, a receive
    /// matched to a protocol-path message still receiving (the protocol endpoint ends it,
    /// its completion comes back as this request's), or a delivery-complete send waiting
    /// for its acknowledgement. Anything else (a completed request: fast-path sends
    /// complete when handed to the lane) is [`Error::UnknownRequest`].
    pub(crate) fn fast_abort(&mut self, req: Request) -> Result<()> {
        let ep = self.id;
        let Some(f) = self.fast.as_deref_mut() else {
            return Err(Error::UnknownRequest(req));
        };
        let op = req.op.0;
        if let Some(ctx) = f.engine.cancel(op) {
            self.counters.aborts += 1;
            self.fast_end_recv(req, ctx, OpError::Aborted);
            return Ok(());
        }
        if let Some(pop) = f
            .proto_recvs
            .iter()
            .find_map(|(k, (o, _))| (*o == op).then_some(*k))
        {
            self.node
                .get_mut()
                .endpoint_mut()
                .abort(OpId(pop))
                .map_err(|_| Error::UnknownRequest(req))?;
            self.counters.aborts += 1;
            return Ok(());
        }
        if let Some((len, tag, _)) = f.dc_pending.remove(&op) {
            self.counters.aborts += 1;
            Out {
                ready: &mut self.ready,
                slots: &mut self.slots,
                counters: &mut self.counters,
                ep,
            }
            .send_result(op, len, tag, Err(OpError::Aborted));
            return Ok(());
        }
        Err(Error::UnknownRequest(req))
    }

    /// The fast path's share of [`Endpoint::remove_peer`]: the route to the peer is
    /// decided again at the next send (the peer is unknown by then: refused) and its lane
    /// released; delivery-complete sends to it not acknowledged yet, and receives posted
    /// for it alone, end with [`OpError::Aborted`]; its unexpected messages are dropped
    /// (protocol-path ones discarded from the protocol endpoint); its lanes into this
    /// endpoint are closed. Returns how many requests ended.
    pub(crate) fn fast_remove_peer(&mut self, pid: PeerId) -> usize {
        let ep = self.id;
        let Some(f) = self.fast.as_deref_mut() else {
            return 0;
        };
        let i = pid.0 as usize;
        let mut dc: Vec<(u64, u64, u64)> = f
            .dc_pending
            .iter()
            .filter(|(_, (_, _, r))| *r == i)
            .map(|(op, (len, tag, _))| (*op, *len, *tag))
            .collect();
        if let Some(r) = f.routes.get_mut(i) {
            *r = Route::Unknown;
        }
        let (recvs, msgs) = f.engine.purge_peer(pid.0);
        let mut claims: Vec<tagmatch_rdm::Claim> = msgs
            .into_iter()
            .filter_map(|m| match m.payload {
                Payload::Proto(c) => Some(c),
                _ => None,
            })
            .collect();
        for q in [&mut f.proto_stalled, &mut f.loop_q] {
            let mut keep = VecDeque::with_capacity(q.len());
            for s in q.drain(..) {
                if s.env.src != pid.0 {
                    keep.push_back(s);
                    continue;
                }
                if let Payload::Proto(c) = s.msg.payload {
                    claims.push(c);
                }
                // A delivery-complete self-send (the peer was this endpoint itself).
                if let Some((len, tag, _)) = s.dc.and_then(|op| f.dc_pending.get(&op).copied()) {
                    dc.push((s.dc.unwrap_or(0), len, tag));
                }
            }
            *q = keep;
        }
        f.rx.retain(|l| {
            if l.rx.peer == pid.0 {
                l.rx.close();
                return false;
            }
            true
        });
        // In send order (operation numbers grow).
        dc.sort_unstable();
        dc.dedup_by_key(|d| d.0);
        for (op, ..) in &dc {
            f.dc_pending.remove(op);
        }
        let pe = self.node.get_mut().endpoint_mut();
        for c in claims {
            let _ = pe.discard(c);
        }
        let n = recvs.len() + dc.len();
        for ctx in recvs {
            let req = Request {
                op: OpId(ctx.op),
                ep,
            };
            self.fast_end_recv(req, ctx, OpError::Aborted);
        }
        for (op, len, tag) in dc {
            Out {
                ready: &mut self.ready,
                slots: &mut self.slots,
                counters: &mut self.counters,
                ep,
            }
            .send_result(op, len, tag, Err(OpError::Aborted));
        }
        n
    }

    /// Protocol-path completion fix-ups: receives matched by the fast path's engine get
    /// their request back, receives into a caller's buffer get it back, successful
    /// injected sends vanish. Returns whether the completion is delivered.
    pub(crate) fn adjust(&mut self, c: &mut tagmatch_rdm::Completion) -> bool {
        let mut into = None;
        if let Some(f) = self.fast.as_deref_mut() {
            if let Some((op, buf)) = f.proto_recvs.remove(&c.op.0) {
                c.op = OpId(op);
                match buf {
                    RecvBuf::Into(b) => into = Some(b),
                    // Into a slot: the slot takes the completion (`take_node_slow`).
                    RecvBuf::Slot { idx, .. } => {
                        self.extra.slot_ops.insert(op, idx);
                    }
                    // Received into the region by the protocol endpoint.
                    RecvBuf::Alloc(_) | RecvBuf::Region { .. } => {}
                }
            }
        }
        if let Some(mut b) = into {
            b.clear();
            b.extend_from_slice(&c.data);
            c.data = b;
        }
        if !self.extra.injected.is_empty() && self.extra.injected.remove(&c.op) && c.result.is_ok()
        {
            return false;
        }
        true
    }

    /// Whether this progress call polls the device. Always without the fast path, and
    /// while the protocol endpoint has operations or packets in flight, or received
    /// packets at the last poll, or the network queued something for the device since its
    /// last poll (its mail flag: unsolicited protocol traffic, RMA into this endpoint,
    /// messages from peers without the fast path, are thus picked up at the next call),
    /// or the protocol node has work of its own. Otherwise (messages all take the fast
    /// path, the protocol side idle) one call in [`DEVICE_POLL_EVERY`]: polling the
    /// in-memory device takes the fabric-wide lock, which would otherwise cost more than
    /// a fast-path message. On a fabric with faults every call polls (its delays are
    /// counted in device polls: skipping them would change what the faults do). The
    /// protocol side is looked at in full only while it is marked busy (see
    /// [`crate::proto`]).
    #[inline]
    pub(crate) fn device_due(&mut self) -> bool {
        let Some(f) = self.fast.as_deref_mut() else {
            return true;
        };
        if f.dev_skip == 0 {
            return true;
        }
        let mail = match self.node.device() {
            Device::Mem(d) => d.has_mail(),
            _ => true,
        };
        if mail {
            f.dev_skip = 0;
            return true;
        }
        // The full look only while the node may have changed since it was last found
        // quiet (every mutable access marks it: `ProtoNode::get_mut`).
        if self.node.busy() {
            let ep = self.node.endpoint();
            let (tx, rx, _) = ep.in_flight();
            let (_, sends, rdmas) = ep.resources();
            if self.node.has_own_work() || tx + rx + sends + rdmas > 0 {
                f.dev_skip = 0;
                return true;
            }
            // Unexpected protocol messages are the fast path's to claim (its general
            // pass, which `fast_progress` enters while the node is busy and some wait);
            // those it claimed already wait in its engine.
            if unclaimed(&self.node) == 0 {
                self.node.set_quiet();
            }
        }
        f.dev_skip -= 1;
        false
    }

    /// The next progress polls the device (a peer rang while this endpoint slept).
    pub(crate) fn device_poll_now(&mut self) {
        if let Some(f) = self.fast.as_deref_mut() {
            f.dev_skip = 0;
        }
    }

    /// After a device poll: back off if it brought nothing.
    pub(crate) fn device_polled(&mut self) {
        let Some(f) = self.fast.as_deref_mut().filter(|f| f.throttle) else {
            return;
        };
        let rx = self.node.endpoint().stats().rx_packets;
        f.dev_skip = if rx != f.dev_rx {
            0
        } else {
            DEVICE_POLL_EVERY - 1
        };
        f.dev_rx = rx;
    }

    /// Whether no fast-path message waits at this sender for ring space.
    pub(crate) fn fast_idle(&self) -> bool {
        self.fast.as_ref().is_none_or(|f| !f.any_waiting)
    }

    /// The fast path's share of progress: delivery-complete acknowledgements, messages
    /// waiting for ring space, new lanes, protocol-path arrivals, then every lane. When
    /// there is none of the rest (no inbox event, nothing waiting for ring space, no
    /// protocol-path message, no lane to release: nearly every call), only the lanes are
    /// drained, without the general pass's setup.
    #[inline(never)]
    pub(crate) fn fast_progress(&mut self) {
        let Endpoint {
            id,
            node,
            ready,
            slots,
            counters,
            fast,
            ..
        } = self;
        let Some(f) = fast.as_deref_mut() else {
            return;
        };
        if f.inbox.any_event()
            || f.any_waiting
            || f.reap
            || !f.proto_stalled.is_empty()
            || (node.busy() && unclaimed(node) > 0)
        {
            return self.fast_progress_all();
        }
        let mut out = Out {
            ready,
            slots,
            counters,
            ep: *id,
        };
        drain_lanes(f, node, &mut out, false);
    }

    /// [`Endpoint::fast_progress`]: the general pass.
    #[inline(never)]
    fn fast_progress_all(&mut self) {
        let Endpoint {
            id,
            node,
            ready,
            slots,
            counters,
            fast,
            ..
        } = self;
        let Some(f) = fast.as_deref_mut() else {
            return;
        };
        let mut out = Out {
            ready,
            slots,
            counters,
            ep: *id,
        };
        // One load tells whether any of the inbox's events (acknowledgements, lanes
        // closed, opened or whose sender went) happened: usually none did.
        let events = f.inbox.any_event();
        if events && f.inbox.take_acks(&mut f.acks) {
            for op in f.acks.drain(..) {
                if let Some((len, tag, _)) = f.dc_pending.remove(&op) {
                    out.send_done(op, len, tag);
                }
            }
        }
        if events && f.inbox.take_peers_closed() {
            // A receiver went: its lanes are released (sends to it fail from now on), and
            // a delivery-complete send it never acknowledged fails (what waited for ring
            // space is dropped with the lane).
            let mut gone = Vec::new();
            for (i, r) in f.routes.iter_mut().enumerate() {
                if matches!(r, Route::Fast(tx) if tx.closed()) {
                    *r = Route::Gone;
                    gone.push(i);
                }
            }
            if !gone.is_empty() && !f.dc_pending.is_empty() {
                // Acks the receiver made before it went count (see `TxLane::closed`).
                if f.inbox.take_acks(&mut f.acks) {
                    for op in f.acks.drain(..) {
                        if let Some((len, tag, _)) = f.dc_pending.remove(&op) {
                            out.send_done(op, len, tag);
                        }
                    }
                }
                let mut failed: Vec<u64> = f
                    .dc_pending
                    .iter()
                    .filter(|(_, (_, _, r))| gone.contains(r))
                    .map(|(op, _)| *op)
                    .collect();
                // In send order (operation numbers grow), not the map's (random) order.
                failed.sort_unstable();
                for op in failed {
                    if let Some((len, tag, _)) = f.dc_pending.remove(&op) {
                        out.send_result(op, len, tag, Err(OpError::SendFailed));
                    }
                }
            }
        }
        if f.any_waiting {
            let mut any = false;
            for r in &mut f.routes {
                if let Route::Fast(tx) = r {
                    tx.flush();
                    any |= tx.waiting() > 0;
                }
            }
            f.any_waiting = any;
        }
        if events && f.inbox.take_new_lanes(&mut f.new_lanes) {
            for lane in f.new_lanes.drain(..) {
                let peer = node.get_mut().endpoint_mut().add_peer(lane.src);
                let rx = fast::rx_lane(lane, peer.0);
                // Its sender may have gone already, its notice taken by an earlier call
                // (before the lane was taken here).
                f.reap |= rx.sender_gone();
                f.rx.push(InLane { rx, stalled: None });
            }
        }
        if events && f.inbox.take_senders_gone() {
            f.reap = true;
        }
        let reap = f.reap;
        // Protocol-path messages (from peers without the fast path), in the protocol
        // endpoint's order: claim each and let this engine match it.
        if !f.proto_stalled.is_empty() || unclaimed(node) > 0 {
            'claims: loop {
                let s = match f.proto_stalled.pop_front() {
                    Some(s) => s,
                    None => {
                        let ep = node.get_mut().endpoint_mut();
                        let (claim, info, comm) = if let Some((c, i)) = ep.tmprobe(None, 0, !0) {
                            (c, i, COMM_TAG)
                        } else if let Some((c, i)) = ep.mprobe(None) {
                            (c, i, COMM_MSG)
                        } else {
                            break 'claims;
                        };
                        Stalled {
                            env: Envelope::new(comm, info.src.0, info.tag),
                            len: info.len as usize,
                            held: info.buffered as usize,
                            msg: FastMsg {
                                payload: Payload::Proto(claim),
                                cq_data: info.cq_data,
                            },
                            dc: None,
                        }
                    }
                };
                // Its buffered bytes count here (the protocol endpoint's budget counts
                // only what is not claimed yet: `Config::claims_count`).
                let held = s.held;
                match f.engine.arrive_held(s.env, s.len, held, s.msg) {
                    Ok(Arrived::Matched(m)) => finish(
                        node,
                        &mut f.proto_recvs,
                        &mut out,
                        m.recv,
                        m.env,
                        m.len,
                        m.msg,
                    ),
                    Ok(Arrived::Unexpected(_)) => {}
                    Err(r) => {
                        out.counters.fast_backpressure += 1;
                        f.proto_stalled.push_front(Stalled {
                            env: r.env,
                            len: r.len,
                            held,
                            msg: r.msg,
                            dc: None,
                        });
                        break 'claims;
                    }
                }
            }
        }
        // Self-sends refused by the budget, in order, before any later one is delivered
        // (their note taken first, raised again below if any still waits).
        if events {
            f.inbox.take_loop();
        }
        while let Some(s) = f.loop_q.pop_front() {
            match f.engine.arrive_held(s.env, s.len, s.held, s.msg) {
                Ok(a) => {
                    if let Some(op) = s.dc {
                        if let Some((len, tag, _)) = f.dc_pending.remove(&op) {
                            out.send_done(op, len, tag);
                        }
                    }
                    if let Arrived::Matched(m) = a {
                        finish(
                            node,
                            &mut f.proto_recvs,
                            &mut out,
                            m.recv,
                            m.env,
                            m.len,
                            m.msg,
                        );
                    }
                }
                Err(r) => {
                    f.loop_q.push_front(Stalled {
                        env: r.env,
                        len: r.len,
                        held: s.held,
                        msg: r.msg,
                        dc: s.dc,
                    });
                    f.inbox.raise_loop();
                    break;
                }
            }
        }
        drain_lanes(f, node, &mut out, reap);
        if reap {
            // Lanes whose sender is gone and whose every message reached the engine are
            // released; one still holding messages back (budget) is kept and looked at
            // again at the next call.
            let mut left = false;
            let mut i = 0;
            while i < f.rx.len() {
                let l = &mut f.rx[i];
                if l.stalled.is_none() && l.rx.drained() {
                    f.rx.swap_remove(i);
                    out.counters.fast_lanes_released += 1;
                } else {
                    left |= l.rx.sender_gone();
                    i += 1;
                }
            }
            f.reap = left;
        }
    }

    /// Tagged send that copies `data` (`fi_tinject`; `ucp_tag_send_nbx` with an inline
    /// copy): `data` is free for reuse when this returns, and no completion is generated
    /// (a failure still completes with its error). Between in-process endpoints with the
    /// fast path, up to 32 bytes travel inside the lane's slot: no allocation.
    ///
    /// ```
    /// use tagmatch::{Endpoint, MemFabric, ANY_SOURCE, ANY_TAG};
    /// # fn main() -> Result<(), tagmatch::Error> {
    /// let fabric = MemFabric::new();
    /// let mut a = Endpoint::builder().mem(&fabric).build()?;
    /// let mut b = Endpoint::builder().mem(&fabric).build()?;
    /// let to_b = a.insert_peer(&b.address())?;
    /// let buf = [1u8, 2, 3, 4, 5, 6, 7, 8];
    /// a.tinject(to_b, 7, &buf)?; // buf is ours again
    /// let r = b.trecv(ANY_SOURCE, ANY_TAG, 8)?;
    /// let c = b.wait_with(r, &mut [&mut a])?;
    /// assert_eq!((c.tag, &c.data[..]), (7, &buf[..]));
    /// assert!(a.poll_completion().is_none(), "an injected send has no completion");
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn tinject(&mut self, peer: Peer, tag: u64, data: &[u8]) -> Result<()> {
        self.inject_inner(peer, Some(tag), data)
    }

    /// Untagged [`Endpoint::tinject`] (`fi_inject`).
    pub fn inject(&mut self, peer: Peer, data: &[u8]) -> Result<()> {
        self.inject_inner(peer, None, data)
    }

    #[inline(always)]
    fn inject_inner(&mut self, peer: Peer, tag: Option<u64>, data: &[u8]) -> Result<()> {
        tracing::trace!(peer = peer.index(), ?tag, len = data.len(), "inject");
        let pid = self.pid(peer)?;
        if self.fast_inject(pid, tag, data) {
            return Ok(());
        }
        if self.is_fast(pid) {
            return self
                .fast_send(pid, tag, Bytes::Borrowed(data), SendOpts::default(), true)
                .map(|_| ());
        }
        self.inject_proto(peer, pid, tag, data)
    }

    /// An injected send on an open lane: [`Endpoint::fast_send`]'s work for that case
    /// with one look at the route (`is_fast` then `fast_send` looked twice). `false`:
    /// nothing was done (no fast-path route yet, its receiver gone, more than a slot's
    /// inline bytes, or messages waiting for ring space or a full ring), the general path
    /// decides.
    #[inline(always)]
    fn fast_inject(&mut self, pid: PeerId, tag: Option<u64>, data: &[u8]) -> bool {
        let Some(f) = self.fast.as_deref_mut() else {
            return false;
        };
        let Some(Route::Fast(tx)) = f.routes.get_mut(pid.0 as usize) else {
            return self.loop_inject_slot(pid, tag, data) || self.loop_inject(pid, tag, data);
        };
        if tx.closed() {
            return false;
        }
        let op = f.next_op;
        let flags = if tag.is_some() { F_TAGGED } else { 0 };
        // Straight into the ring only: a message that would wait for ring space (or is
        // larger than a slot's inline room) takes `fast_send`, which queues it.
        if !tx.send_inline_now(tag.unwrap_or(0), flags, op, data) {
            return false;
        }
        f.next_op += 1;
        // One count for the facade's three (see `Fast::add_facade`).
        f.lane_injects += 1;
        true
    }

    /// [`Endpoint::fast_inject`] for a route other than an open lane when
    /// [`Endpoint::loop_inject_slot`] did not deliver: an injected send to this endpoint
    /// itself with no self-send queued before it (so it cannot be refused) is delivered
    /// by `loop_send` (a held receive, else the engine); `false` otherwise (the general
    /// path decides). Out of line, with everything it calls.
    #[inline(never)]
    fn loop_inject(&mut self, pid: PeerId, tag: Option<u64>, data: &[u8]) -> bool {
        let Some(f) = self.fast.as_deref_mut() else {
            return false;
        };
        if !matches!(f.routes.get(pid.0 as usize), Some(Route::Loop)) || !f.loop_q.is_empty() {
            return false;
        }
        self.loop_inject_rest(tag, data)
    }

    /// [`Endpoint::fast_inject`]'s self-send case, inlined at the inject: when the
    /// route is [`Route::Loop`], no self-send is queued and a receive slot's receive held
    /// aside takes the message (as `loop_send` would first try), the bytes go from `data`
    /// straight into the slot's buffer, the slot completes in place, and one count stands
    /// for the send's and the receive's (see [`Fast::add_facade`]): `true`. Anything
    /// else (another held receive, none, more than a slot's inline bytes): `false`,
    /// nothing done, [`Endpoint::loop_inject`] decides. Inlined, it saves the call and the
    /// register saves of an out-of-line body (~20 instructions per self-inject); the lane
    /// inject beside it measured the same (`--transport mem` 565.4 Ir per message).
    #[inline(always)]
    fn loop_inject_slot(&mut self, pid: PeerId, tag: Option<u64>, data: &[u8]) -> bool {
        let Some(f) = self.fast.as_deref_mut() else {
            return false;
        };
        if !matches!(f.routes.get(pid.0 as usize), Some(Route::Loop)) || !f.loop_q.is_empty() {
            return false;
        }
        let src = f.loop_src;
        let len = data.len();
        if len > fast::INLINE {
            return false;
        }
        let (comm, tagv) = match tag {
            Some(t) => (COMM_TAG, t),
            None => (COMM_MSG, 0),
        };
        let env = Envelope::new(comm, src, tagv);
        let Some((op, idx, cap)) = f.engine.take_held_slot(&env) else {
            return false;
        };
        f.engine.held_c.loop_slot += 1;
        self.counters.bytes += len as u64;
        if len > cap {
            self.counters.failed += 1;
        }
        let n = len.min(cap);
        if let Some(s) = self.slots.get_mut(idx as usize) {
            s.complete(op, len as u64, n, tagv, src, None);
            if let (Some(to), Some(from)) = (s.buf.get_mut(..n), data.get(..n)) {
                fast::copy_small(to, from);
            }
        }
        true
    }

    /// [`Endpoint::loop_inject`] when no held receive takes the message (or it is larger
    /// than a slot's inline bytes): the general self-send.
    #[inline(never)]
    fn loop_inject_rest(&mut self, tag: Option<u64>, data: &[u8]) -> bool {
        // Few arguments: `loop_inject` ends in a jump here.
        let Some(f) = self.fast.as_deref_mut() else {
            return false;
        };
        let (src, op) = (f.loop_src, f.op());
        self.loop_send(
            src,
            op,
            tag,
            Bytes::Borrowed(data),
            SendOpts::default(),
            true,
        )
        .is_ok()
    }

    /// [`Endpoint::inject_inner`] over the protocol path (out of line: the fast path's
    /// injected send is inlined at the caller).
    #[inline(never)]
    fn inject_proto(
        &mut self,
        peer: Peer,
        pid: PeerId,
        tag: Option<u64>,
        data: &[u8],
    ) -> Result<()> {
        let ep = self.node.get_mut().endpoint_mut();
        let r = match tag {
            Some(t) => ep.tsend(pid, t, data.to_vec(), SendOpts::default()),
            None => ep.send(pid, data.to_vec(), SendOpts::default()),
        };
        let req = self.req(r, Some(peer))?;
        self.extra.injected.insert(req.op);
        self.counters.injected += 1;
        self.sent();
        Ok(())
    }

    /// Tagged receive into `buf` (its length is the receive's length): the completion's
    /// `data` is `buf` itself, cut to the message's length, so a loop can hand it back
    /// (`buf.resize(n, 0)` keeps its capacity) and receive without allocating.
    ///
    /// ```
    /// use tagmatch::{Endpoint, MemFabric, ANY_SOURCE};
    /// # fn main() -> Result<(), tagmatch::Error> {
    /// let fabric = MemFabric::new();
    /// let mut a = Endpoint::builder().mem(&fabric).build()?;
    /// let mut b = Endpoint::builder().mem(&fabric).build()?;
    /// let to_b = a.insert_peer(&b.address())?;
    /// let mut buf = vec![0u8; 64];
    /// for i in 0..3u64 {
    ///     let r = b.trecv_into(ANY_SOURCE, i, buf)?;
    ///     a.tinject(to_b, i, &i.to_le_bytes())?;
    ///     let c = b.wait_with(r, &mut [&mut a])?;
    ///     assert_eq!(c.data, i.to_le_bytes());
    ///     buf = c.data;
    ///     buf.resize(64, 0); // same allocation, back to 64 bytes
    /// }
    /// # Ok(()) }
    /// ```
    #[inline(always)]
    pub fn trecv_into(
        &mut self,
        source: impl Into<crate::Source>,
        tag: impl Into<TagMatch>,
        buf: Vec<u8>,
    ) -> Result<Request> {
        let (source, tag) = (source.into(), tag.into());
        let src = self.src(source)?;
        if self.fast.is_some() {
            return self.fast_post(Some(tag), src, RecvBuf::Into(buf));
        }
        // The protocol endpoint receives into `buf` itself (no copy at completion).
        let r = self
            .node
            .get_mut()
            .endpoint_mut()
            .trecv_into(src, tag.tag, !tag.mask, buf);
        self.req(r, None)
    }

    /// Untagged [`Endpoint::trecv_into`].
    #[inline]
    pub fn recv_into(&mut self, source: impl Into<crate::Source>, buf: Vec<u8>) -> Result<Request> {
        let src = self.src(source.into())?;
        if self.fast.is_some() {
            return self.fast_post(None, src, RecvBuf::Into(buf));
        }
        let r = self.node.get_mut().endpoint_mut().recv_into(src, buf);
        self.req(r, None)
    }

    /// Receives a claimed message into `buf` ([`Endpoint::mrecv`] without allocating).
    pub fn mrecv_into(&mut self, msg: Message, buf: Vec<u8>) -> Result<Request> {
        if msg.ep != self.id {
            return Err(Error::StaleMessage);
        }
        match msg.claim {
            MsgClaim::Fast(h) => self.fast_mrecv(h, RecvBuf::Into(buf)),
            MsgClaim::Rdm(c) => {
                let r = match self.node.get_mut().endpoint_mut().mrecv_into(c, buf) {
                    Ok(op) => op,
                    Err(CallError::UnknownOp) => return Err(Error::StaleMessage),
                    Err(e) => return Err(Error::call(e, None, None)),
                };
                self.counters.submitted += 1;
                Ok(self.request(r))
            }
        }
    }

    /// Whether this endpoint uses the in-process fast path ([`crate::Builder::fast_path`]).
    pub fn fast_path(&self) -> bool {
        self.fast.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::{Fifo, HeldKey};
    use std::collections::VecDeque;
    use tagmatch_engine::{Envelope, RecvSpec, Source, TagSel};

    /// The held receives' masked compare accepts exactly what the spec's own rule
    /// accepts: every selector kind (any, one source; any, exact, masked tag, the masks
    /// normalised as the fast path posts them) against envelopes that differ in the
    /// communicator, the source, and tag bits inside and outside the mask, at the
    /// extreme values.
    #[test]
    fn held_key_matches_as_the_spec() {
        let comms = [0u32, 1, 2, u32::MAX];
        let srcs = [0u32, 1, 7, u32::MAX];
        let tags = [0u64, 1, 7, 0xff, 0x100, 0xdead_beef, 1 << 63, u64::MAX];
        let masks = [0u64, 1, 0xff, 0xffff_0000, 1 << 63, u64::MAX - 1, u64::MAX];
        let mut specs = Vec::new();
        for &comm in &comms {
            for src in [
                Source::Any,
                Source::Rank(0),
                Source::Rank(7),
                Source::Rank(u32::MAX),
            ] {
                specs.push(RecvSpec {
                    comm,
                    src,
                    tag: TagSel::Any,
                });
                for &t in &tags {
                    specs.push(RecvSpec {
                        comm,
                        src,
                        tag: TagSel::Exact(t),
                    });
                    for &m in &masks {
                        specs.push(RecvSpec::masked(comm, src, t, m).normalized());
                    }
                }
            }
        }
        let (mut yes, mut no) = (0u64, 0u64);
        for spec in &specs {
            let key = HeldKey::of(spec);
            for &comm in &comms {
                for &src in &srcs {
                    for &tag in &tags {
                        let env = Envelope::new(comm, src, tag);
                        let want = spec.matches(&env);
                        assert_eq!(key.matches(&env), want, "{spec:?} {env:?}");
                        if want {
                            yes += 1;
                        } else {
                            no += 1;
                        }
                    }
                }
            }
        }
        // Both answers occur often (the cases are not all one way).
        assert!(yes > 5_000 && no > 5_000, "{yes} {no}");
    }

    /// The held-receive queue behaves as a `VecDeque` through pushes, pops, growth across
    /// the wrap-around and removals from the middle.
    #[test]
    fn fifo_matches_a_vecdeque() {
        let mut f = Fifo::new();
        let mut d = VecDeque::new();
        let mut x = 0u64;
        for step in 0..5000u64 {
            // A varying mix (a small linear congruential sequence): mostly pushes early,
            // pops and removals later.
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (x >> 33) % 10;
            if r < 5 || d.is_empty() {
                f.push_back(step);
                d.push_back(step);
            } else if r < 8 {
                assert_eq!(f.pop_front(), d.pop_front());
            } else {
                let k = (x >> 20) as usize % (d.len() + 1);
                let want = d.get(k).copied();
                assert_eq!(f.position(|v| Some(*v) == want), want.and(Some(k)));
                assert_eq!(f.remove(k), d.remove(k));
            }
            assert_eq!((f.len(), f.is_empty()), (d.len(), d.is_empty()));
        }
        while let Some(v) = d.pop_front() {
            assert_eq!(f.pop_front(), Some(v));
        }
        assert_eq!(f.pop_front(), None);
    }
}

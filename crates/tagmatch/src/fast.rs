//! The in-process fast path: tagged and untagged messages between two endpoints built on
//! the same [`crate::MemFabric`] with [`crate::Builder::fast_path`] on skip the EFA wire
//! protocol.
//!
//! Each ordered pair (sender, receiver) has one [`Lane`]: a single-producer,
//! single-consumer ring of cache-line slots made of atomics (no `unsafe`), written only by
//! the sender's endpoint and read only by the receiver's. A slot carries the envelope
//! (tag, flags, length, CQ data, the sender's operation for delivery complete) and up to
//! [`INLINE`] payload bytes; a larger payload travels as the sender's `Vec` through the
//! lane's `big` queue, in slot order. The receiver drains its lanes in
//! [`crate::Endpoint::progress`] and hands each message to its own matching engine
//! (`tagmatch_engine::Engine`): earliest-posted / earliest-arrived matching, wildcards,
//! probes and the memory budget are the engine's, exactly as on the protocol path (receives
//! held aside in front of it follow the same rules: `crate::inproc::Matcher`); the
//! lane is FIFO, so messages from one source are matched in send order
//! (non-overtaking). When the budget is exhausted the receiver stops taking from that
//! lane (the message waits, later ones queue behind it): backpressure, not loss.
//!
//! Lanes live only as long as both ends need them. When the sender's endpoint is dropped,
//! the messages still waiting at it for ring space move into the lane (`orphans`), and
//! the lane is marked as closed by the sender; the receiver keeps taking from it (nothing
//! sent is lost) and, once the lane is drained (every message handed to its engine),
//! releases it. When the receiver is dropped, its lanes are closed and the senders
//! release them at their next `progress` (sends to it then fail). So endpoints that come
//! and go (clients of a server) leave no lane behind and cost the survivors nothing per
//! `progress`. The [`Inbox`] of each endpoint is told by a flag when one of its lanes was
//! closed by the other end, so neither side scans its lanes while none closed.

use foldhash::HashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tagmatch_transport::bell::Doorbell;
use tagmatch_wire::efa::RawAddr;

/// Payload bytes carried in the ring slot itself (larger payloads move as a `Vec`).
pub(crate) const INLINE: usize = 32;
pub(crate) const INLINE_WORDS: usize = INLINE / 8;
/// Slots per lane (a power of two): 32 KiB per pair.
const SLOTS: usize = 512;

/// Slot flags (second word, bits 32..).
pub(crate) const F_TAGGED: u64 = 1;
pub(crate) const F_CQ: u64 = 2;
pub(crate) const F_DC: u64 = 4;
pub(crate) const F_BIG: u64 = 8;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves consistent data (pushes and pops
    // only): keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One cache line: tag, meta (flags << 32 | length), CQ data, sender op, inline bytes.
#[repr(align(64))]
struct Slot {
    w: [AtomicU64; 8],
}

#[repr(align(64))]
struct Index(AtomicUsize);

/// A message queued by the sender while the ring is full (and handed to the lane as an
/// orphan when the sender goes).
#[derive(Debug)]
pub(crate) struct Raw {
    pub tag: u64,
    pub flags: u64,
    pub len: usize,
    pub cq_data: u64,
    pub op: u64,
    pub inline: [u64; INLINE_WORDS],
    pub big: Option<Vec<u8>>,
}

impl Raw {
    /// The message as the receiver takes it.
    fn into_popped(self) -> Popped {
        Popped {
            tag: self.tag,
            flags: self.flags,
            len: self.len,
            cq_data: self.cq_data,
            op: self.op,
            payload: match self.big {
                Some(v) => Payload::Heap(v),
                None => Payload::Inline { words: self.inline },
            },
        }
    }
}

/// A message taken from a lane, its payload already as the receiver stores it (read from
/// the slot straight into that form: no intermediate record).
#[derive(Debug)]
pub(crate) struct Popped {
    pub tag: u64,
    pub flags: u64,
    pub len: usize,
    pub cq_data: u64,
    pub op: u64,
    pub payload: Payload,
}

/// A message's bytes inside the receiver's matching engine.
#[derive(Debug)]
pub(crate) enum Payload {
    /// Up to [`INLINE`] bytes (the message's length), little-endian in words.
    Inline { words: [u64; INLINE_WORDS] },
    /// The sender's buffer.
    Heap(Vec<u8>),
    /// A message that came over the protocol path (from a peer without the fast path),
    /// claimed from the RDM endpoint: `mrecv` it when matched.
    Proto(tagmatch_rdm::Claim),
}

/// Copies inline words' first `n` bytes into `out`: whole words as 8-byte stores, only a
/// last partial word byte by byte (a copy of variable length per chunk was a `memcpy`
/// call per message).
#[inline(always)]
pub(crate) fn copy_inline(words: &[u64; INLINE_WORDS], n: usize, out: &mut [u8]) {
    let mut whole = out[..n].chunks_exact_mut(8);
    for (c, w) in (&mut whole).zip(words) {
        c.copy_from_slice(&w.to_le_bytes());
    }
    let rest = whole.into_remainder();
    if let (false, Some(w)) = (rest.is_empty(), words.get(n / 8)) {
        let b = w.to_le_bytes();
        for (d, s) in rest.iter_mut().zip(b) {
            *d = s;
        }
    }
}

/// Copies `from` into `to` (equal lengths, at most [`INLINE`] bytes; longer ones take
/// `copy_from_slice`) with at most two loads and two stores: a first and a last piece of
/// the widest size that fits, overlapping in the middle (a copy of variable length was a
/// `memcpy` call).
#[inline(always)]
pub(crate) fn copy_small(to: &mut [u8], from: &[u8]) {
    let n = from.len();
    if n != to.len() {
        return;
    }
    fn piece<const W: usize>(to: &mut [u8], from: &[u8]) {
        let n = from.len();
        if let (Some(h), Some(t)) = (from.first_chunk::<W>(), from.last_chunk::<W>()) {
            let (h, t) = (*h, *t);
            if let Some(d) = to.first_chunk_mut::<W>() {
                *d = h;
            }
            if let Some(d) = to.get_mut(n - W..).and_then(|d| d.first_chunk_mut::<W>()) {
                *d = t;
            }
        }
    }
    // A word or two first (a tag's or an 8-byte message's case: one compare).
    if (8..=16).contains(&n) {
        piece::<8>(to, from);
    } else if n > 32 {
        to.copy_from_slice(from);
    } else if n > 16 {
        piece::<16>(to, from);
    } else if n >= 4 {
        piece::<4>(to, from);
    } else {
        for (d, s) in to.iter_mut().zip(from) {
            *d = *s;
        }
    }
}

/// `data` (at most [`INLINE`] bytes) as little-endian words: whole words are loaded as
/// such, only a last partial one goes through a byte copy. Word by word with the four
/// iterations unrolled (a loop over the whole chunks became a `memcpy` call).
#[inline(always)]
pub(crate) fn pack_inline(data: &[u8]) -> [u64; INLINE_WORDS] {
    let word = |i: usize| -> u64 {
        let lo = i * 8;
        if let Some(Ok(b)) = data.get(lo..lo + 8).map(<[u8; 8]>::try_from) {
            return u64::from_le_bytes(b);
        }
        match data.get(lo..) {
            Some(rest) if !rest.is_empty() => {
                let mut b = [0u8; 8];
                for (d, s) in b.iter_mut().zip(rest) {
                    *d = *s;
                }
                u64::from_le_bytes(b)
            }
            _ => 0,
        }
    };
    // Four words: `INLINE_WORDS` (checked below).
    [word(0), word(1), word(2), word(3)]
}

const _: () = assert!(INLINE_WORDS == 4, "pack_inline builds four words");

/// The bytes of a send: borrowed (copied on the way) or owned (moved when large).
pub(crate) enum Bytes<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

impl Bytes<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Bytes::Borrowed(b) => b.len(),
            Bytes::Owned(v) => v.len(),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Borrowed(b) => b,
            Bytes::Owned(v) => v,
        }
    }

    fn into_vec(self) -> Vec<u8> {
        match self {
            Bytes::Borrowed(b) => b.to_vec(),
            Bytes::Owned(v) => v,
        }
    }
}

/// The SPSC lane from one endpoint to another.
pub(crate) struct Lane {
    /// A fixed-size array: an index masked with `SLOTS - 1` needs no bounds check.
    slots: Box<[Slot; SLOTS]>,
    /// Slots consumed (written by the receiver).
    head: Index,
    /// Slots published (written by the sender).
    tail: Index,
    /// Payloads larger than [`INLINE`], in the order of their `F_BIG` slots.
    big: Mutex<VecDeque<Vec<u8>>>,
    /// The sender's address (the receiver inserts it as a peer).
    pub(crate) src: RawAddr,
    /// Where delivery-complete acknowledgements go (the sender's inbox).
    ack_to: Weak<Inbox>,
    /// The sender's doorbell: rung when the receiver frees ring space or closes the lane.
    sender_bell: Arc<Doorbell>,
    /// The receiver is gone (dropped): sends fail.
    closed: AtomicBool,
    /// The sender is gone (dropped): once drained, the receiver releases the lane.
    sender_gone: AtomicBool,
    /// The sender has messages waiting for ring space: the receiver rings the sender's
    /// doorbell when it frees slots only while this is set (see [`RxLane::publish`]).
    room_wanted: AtomicBool,
    /// What waited at the sender for ring space when it was dropped, in order after the
    /// ring's messages (written once, before `sender_gone` is set).
    orphans: Mutex<VecDeque<Raw>>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("head", &self.head.0.load(Ordering::Relaxed))
            .field("tail", &self.tail.0.load(Ordering::Relaxed))
            .finish()
    }
}

impl Lane {
    fn new(src: RawAddr, ack_to: Weak<Inbox>, sender_bell: Arc<Doorbell>) -> Lane {
        let slots: Box<[Slot]> = (0..SLOTS)
            .map(|_| Slot {
                w: Default::default(),
            })
            .collect();
        let Ok(slots) = slots.try_into() else {
            unreachable!("SLOTS slots were made")
        };
        Lane {
            slots,
            head: Index(AtomicUsize::new(0)),
            tail: Index(AtomicUsize::new(0)),
            big: Mutex::new(VecDeque::new()),
            src,
            ack_to,
            sender_bell,
            closed: AtomicBool::new(false),
            sender_gone: AtomicBool::new(false),
            room_wanted: AtomicBool::new(false),
            orphans: Mutex::new(VecDeque::new()),
        }
    }

    /// Marks the lane closed by its receiver and tells the sender's inbox.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Some(inbox) = self.ack_to.upgrade() {
            inbox.raise(EV_PEERS_CLOSED);
        }
        self.sender_bell.ring();
    }

    /// Acknowledges delivery of the sender's `op` (delivery complete).
    pub(crate) fn ack(&self, op: u64) {
        if let Some(inbox) = self.ack_to.upgrade() {
            lock(&inbox.acks).push(op);
            inbox.raise(EV_ACKS);
            inbox.bell.ring();
        }
    }
}

/// The sender's side of a lane: its cursor and the messages waiting for ring space.
/// Dropping it (the sending endpoint goes) hands those messages to the lane and marks
/// the lane closed by the sender, for the receiver to drain and release.
#[derive(Debug)]
pub(crate) struct TxLane {
    lane: Arc<Lane>,
    /// The receiver's inbox, told when this side goes.
    dest: Weak<Inbox>,
    /// The receiver's doorbell, rung when a message is published.
    dest_bell: Arc<Doorbell>,
    tail: usize,
    head_seen: usize,
    waiting: VecDeque<Raw>,
}

impl Drop for TxLane {
    fn drop(&mut self) {
        if self.closed() {
            // The receiver is gone too: nobody reads the lane any more.
            return;
        }
        if !self.waiting.is_empty() {
            lock(&self.lane.orphans).extend(self.waiting.drain(..));
        }
        // Release: the receiver that reads `true` sees the last published slots and the
        // orphans.
        self.lane.sender_gone.store(true, Ordering::Release);
        if let Some(inbox) = self.dest.upgrade() {
            inbox.raise(EV_SENDERS_GONE);
        }
        self.dest_bell.ring();
    }
}

impl TxLane {
    /// Whether the receiving endpoint has been dropped.
    #[inline]
    pub(crate) fn closed(&self) -> bool {
        // Acquire: pairs with the Release in `unregister`, so the receiver's acks made
        // before it was dropped are visible once this reads `true`.
        self.lane.closed.load(Ordering::Acquire)
    }

    /// Drops what waits for ring space (the receiver is gone).
    pub(crate) fn discard(&mut self) {
        self.waiting.clear();
    }

    /// Whether the ring has a free slot: the cursor of the last look at the receiver's
    /// `head` usually says so (inlined); only a ring that looked full loads `head` again.
    #[inline(always)]
    fn has_room(&mut self) -> bool {
        self.tail - self.head_seen < SLOTS || self.has_room_now()
    }

    /// [`TxLane::has_room`] with the receiver's `head` loaded again.
    #[inline(never)]
    fn has_room_now(&mut self) -> bool {
        // SeqCst: with the SeqCst store of `room_wanted` before it (made when the message
        // was queued) and the receiver's SeqCst store of `head` then load of
        // `room_wanted` in `RxLane::publish`, either this load sees the freed slots or the
        // receiver sees `room_wanted` and rings: no lost wake-up for a sender that sleeps
        // on its doorbell with messages waiting.
        self.head_seen = self.lane.head.0.load(Ordering::SeqCst);
        self.tail - self.head_seen < SLOTS
    }

    #[inline(always)]
    fn write(
        &mut self,
        tag: u64,
        flags: u64,
        len: usize,
        cq: u64,
        op: u64,
        words: &[u64; INLINE_WORDS],
    ) {
        let s = &self.lane.slots[self.tail & (SLOTS - 1)];
        s.w[0].store(tag, Ordering::Relaxed);
        // A big payload's length is its `Vec`'s: only inline lengths (≤ 32) matter here.
        s.w[1].store(flags << 32 | (len as u64 & 0xffff_ffff), Ordering::Relaxed);
        s.w[2].store(cq, Ordering::Relaxed);
        s.w[3].store(op, Ordering::Relaxed);
        // Every inline word, those past the payload zero (as `pack_inline` leaves them):
        // four plain stores into the line being written anyway, no loop bound to compute,
        // and the receiver loads the four words the same way.
        for (d, w) in s.w[4..].iter().zip(words) {
            d.store(*w, Ordering::Relaxed);
        }
        self.tail += 1;
        // Publishes the slot (and any `big` payload pushed before it).
        self.lane.tail.0.store(self.tail, Ordering::Release);
    }

    fn write_raw(&mut self, r: Raw) {
        let flags = if let Some(v) = r.big {
            lock(&self.lane.big).push_back(v);
            r.flags | F_BIG
        } else {
            r.flags
        };
        self.write(r.tag, flags, r.len, r.cq_data, r.op, &r.inline);
    }

    /// Writes one message of at most [`INLINE`] bytes into the ring if nothing waits for
    /// ring space and the ring has room (an injected send's case); `false`: nothing was
    /// done ([`TxLane::send`] queues it).
    #[inline(always)]
    pub(crate) fn send_inline_now(&mut self, tag: u64, flags: u64, op: u64, data: &[u8]) -> bool {
        if data.len() > INLINE || !self.waiting.is_empty() || !self.has_room() {
            return false;
        }
        let words = pack_inline(data);
        self.write(tag, flags, data.len(), 0, op, &words);
        self.dest_bell.ring();
        true
    }

    /// Queues one message, in order behind any that wait for ring space.
    #[inline(always)]
    pub(crate) fn send(&mut self, tag: u64, flags: u64, cq: u64, op: u64, data: Bytes<'_>) {
        let len = data.len();
        if self.waiting.is_empty() && self.has_room() {
            if len <= INLINE {
                let words = pack_inline(data.as_slice());
                self.write(tag, flags, len, cq, op, &words);
            } else {
                lock(&self.lane.big).push_back(data.into_vec());
                self.write(tag, flags | F_BIG, len, cq, op, &[0; INLINE_WORDS]);
            }
            self.dest_bell.ring();
            return;
        }
        let (inline, big) = if len <= INLINE {
            (pack_inline(data.as_slice()), None)
        } else {
            ([0; INLINE_WORDS], Some(data.into_vec()))
        };
        if self.waiting.is_empty() {
            // Before the next look at `head` (see `has_room`).
            self.lane.room_wanted.store(true, Ordering::SeqCst);
        }
        self.waiting.push_back(Raw {
            tag,
            flags,
            len,
            cq_data: cq,
            op,
            inline,
            big,
        });
    }

    /// Moves waiting messages into the ring while it has room.
    pub(crate) fn flush(&mut self) {
        let mut wrote = false;
        while !self.waiting.is_empty() && self.has_room() {
            if let Some(r) = self.waiting.pop_front() {
                self.write_raw(r);
                wrote = true;
            }
        }
        if wrote {
            if self.waiting.is_empty() {
                // Only this side writes it: a stale `true` would cost a ring, no more.
                self.lane.room_wanted.store(false, Ordering::Relaxed);
            }
            self.dest_bell.ring();
        }
    }

    /// Messages waiting for ring space.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

/// The receiver's side of a lane.
#[derive(Debug)]
pub(crate) struct RxLane {
    pub(crate) lane: Arc<Lane>,
    /// The sender, as a peer of the receiving endpoint.
    pub(crate) peer: u32,
    head: usize,
    tail_seen: usize,
}

impl RxLane {
    /// The next message, if one is published; call [`RxLane::publish`] after a batch.
    /// Always inlined: it is the drain loop's body (out of line it cost a call and
    /// moves of the popped message).
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> Option<Popped> {
        if self.head == self.tail_seen {
            self.look();
        }
        self.pop_seen()
    }

    /// Loads the sender's `tail`: the messages published so far are what
    /// [`RxLane::pop_seen`] takes.
    #[inline(always)]
    pub(crate) fn look(&mut self) {
        self.tail_seen = self.lane.tail.0.load(Ordering::Acquire);
    }

    /// The next message published as of the last [`RxLane::look`] (a drain looks once
    /// and takes that batch: the last message of a batch costs no second load of the
    /// sender's `tail`; later ones wait for the next drain).
    #[inline(always)]
    pub(crate) fn pop_seen(&mut self) -> Option<Popped> {
        if self.head == self.tail_seen {
            return None;
        }
        let s = &self.lane.slots[self.head & (SLOTS - 1)];
        let tag = s.w[0].load(Ordering::Relaxed);
        let meta = s.w[1].load(Ordering::Relaxed);
        let cq_data = s.w[2].load(Ordering::Relaxed);
        let op = s.w[3].load(Ordering::Relaxed);
        let flags = meta >> 32;
        let mut len = (meta & 0xffff_ffff) as usize;
        // The sender wrote every inline word (zero past the payload; all zero for a big
        // one): four plain loads.
        let inline = || Payload::Inline {
            words: std::array::from_fn(|i| s.w[4 + i].load(Ordering::Relaxed)),
        };
        let payload = if flags & F_BIG != 0 {
            match lock(&self.lane.big).pop_front() {
                Some(v) => {
                    len = v.len();
                    Payload::Heap(v)
                }
                None => inline(),
            }
        } else {
            inline()
        };
        self.head += 1;
        Some(Popped {
            tag,
            flags: flags & !F_BIG,
            len,
            cq_data,
            op,
            payload,
        })
    }

    /// [`RxLane::pop`], then, once the sender is gone and the ring is empty, what waited
    /// at the sender when it went.
    pub(crate) fn pop_any(&mut self) -> Option<Popped> {
        if let Some(r) = self.pop() {
            return Some(r);
        }
        // Acquire: pairs with the sender's Release in `TxLane::drop`; the ring is read
        // again after it, so slots published just before the sender went are not missed.
        if !self.lane.sender_gone.load(Ordering::Acquire) {
            return None;
        }
        if let Some(r) = self.pop() {
            return Some(r);
        }
        lock(&self.lane.orphans).pop_front().map(Raw::into_popped)
    }

    /// Closes the lane from the receiver's side (the receiver forgot the sender,
    /// `Endpoint::remove_peer`): the sender's sends on it fail from now on, as to a
    /// dropped endpoint; what it holds is dropped with it.
    pub(crate) fn close(&self) {
        self.lane.close();
    }

    /// Whether the sender is gone.
    pub(crate) fn sender_gone(&self) -> bool {
        self.lane.sender_gone.load(Ordering::Acquire)
    }

    /// Whether the sender is gone and every message it sent has been taken.
    pub(crate) fn drained(&mut self) -> bool {
        self.lane.sender_gone.load(Ordering::Acquire)
            && self.head == self.lane.tail.0.load(Ordering::Acquire)
            && lock(&self.lane.orphans).is_empty()
    }

    /// Hands the consumed slots back to the sender, and wakes it if it has messages
    /// waiting for this space.
    #[inline]
    pub(crate) fn publish(&self) {
        // SeqCst store then SeqCst load: see `TxLane::has_room` (a sender without
        // waiting messages needs no ring, and most publishes find none).
        self.lane.head.0.store(self.head, Ordering::SeqCst);
        if self.lane.room_wanted.load(Ordering::SeqCst) {
            self.lane.sender_bell.ring();
        }
    }
}

/// A fast-path endpoint's mailbox on the fabric: lanes opened to it and not yet taken by
/// its endpoint, its delivery-complete acknowledgements, and flags set when the other end
/// of one of its lanes went.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    /// New lanes, and whether the endpoint is gone (then no lane is added).
    fresh: Mutex<Fresh>,
    acks: Mutex<Vec<u64>>,
    /// What happened since the endpoint last looked, one bit each ([`EV_FRESH`],
    /// [`EV_ACKS`], [`EV_SENDERS_GONE`], [`EV_PEERS_CLOSED`]): a progress with nothing
    /// new pays one load for all of them.
    events: AtomicU32,
    /// The endpoint's doorbell (shared with its in-memory device).
    pub(crate) bell: Arc<Doorbell>,
}

/// [`Inbox::events`]: lanes were opened to the endpoint.
const EV_FRESH: u32 = 1;
/// [`Inbox::events`]: delivery-complete acknowledgements arrived.
const EV_ACKS: u32 = 2;
/// [`Inbox::events`]: a sender of one of the lanes into this endpoint was dropped.
const EV_SENDERS_GONE: u32 = 4;
/// [`Inbox::events`]: a receiver of one of this endpoint's lanes was dropped.
const EV_PEERS_CLOSED: u32 = 8;
/// [`Inbox::events`]: a send of the endpoint to itself waits for the budget (raised and
/// taken by the endpoint itself: the lean progress pass then gives way to the general
/// one, which retries it, at no cost to a pass with nothing waiting).
const EV_LOOP: u32 = 16;

#[derive(Debug, Default)]
struct Fresh {
    lanes: Vec<Arc<Lane>>,
    gone: bool,
}

impl Inbox {
    /// Sets event `bit` (after the data it announces is in place).
    fn raise(&self, bit: u32) {
        // Release: the endpoint that sees the bit sees what it announces.
        self.events.fetch_or(bit, Ordering::Release);
    }

    /// Clears event `bit`; whether it was set. Cleared before the data it announces is
    /// taken: what is added after that sets it again.
    #[inline]
    fn take(&self, bit: u32) -> bool {
        self.events.load(Ordering::Relaxed) & bit != 0
            && self.events.fetch_and(!bit, Ordering::AcqRel) & bit != 0
    }

    /// Whether anything happened since the events were last taken (one load; when it is
    /// `false`, every `take_*` below would return `false`).
    #[inline]
    pub(crate) fn any_event(&self) -> bool {
        self.events.load(Ordering::Acquire) != 0
    }

    /// Takes the lanes opened since the last call into `out`; whether there were any.
    #[inline]
    pub(crate) fn take_new_lanes(&self, out: &mut Vec<Arc<Lane>>) -> bool {
        if !self.take(EV_FRESH) {
            return false;
        }
        out.append(&mut lock(&self.fresh).lanes);
        true
    }

    /// Takes the delivery-complete acknowledgements into `out`; whether there were any.
    #[inline]
    pub(crate) fn take_acks(&self, out: &mut Vec<u64>) -> bool {
        if !self.take(EV_ACKS) {
            return false;
        }
        out.append(&mut lock(&self.acks));
        true
    }

    /// Whether a sender of a lane into this endpoint went since the last call.
    #[inline]
    pub(crate) fn take_senders_gone(&self) -> bool {
        self.take(EV_SENDERS_GONE)
    }

    /// Notes that a send of the endpoint to itself waits for the budget.
    #[inline]
    pub(crate) fn raise_loop(&self) {
        self.raise(EV_LOOP);
    }

    /// Clears [`Inbox::raise_loop`]'s note (the caller retries what waits, and raises it
    /// again if anything still does).
    #[inline]
    pub(crate) fn take_loop(&self) -> bool {
        self.take(EV_LOOP)
    }

    /// Whether a receiver of one of this endpoint's lanes went since the last call.
    #[inline]
    pub(crate) fn take_peers_closed(&self) -> bool {
        self.take(EV_PEERS_CLOSED)
    }
}

/// The fabric's registry of fast-path endpoints, by address.
#[derive(Debug, Default)]
pub(crate) struct Hub {
    inboxes: Mutex<HashMap<RawAddr, Arc<Inbox>>>,
}

impl Hub {
    pub(crate) fn register(&self, addr: RawAddr, bell: Arc<Doorbell>) -> Arc<Inbox> {
        let inbox = Arc::new(Inbox {
            bell,
            ..Inbox::default()
        });
        lock(&self.inboxes).insert(addr, inbox.clone());
        inbox
    }

    /// Removes `addr` (its endpoint is dropped) and closes the lanes into it: those its
    /// endpoint took (`taken`) and those opened since.
    pub(crate) fn unregister<'a>(
        &self,
        addr: &RawAddr,
        taken: impl IntoIterator<Item = &'a RxLane>,
    ) {
        let inbox = lock(&self.inboxes).remove(addr);
        for rx in taken {
            rx.lane.close();
        }
        if let Some(inbox) = inbox {
            let mut f = lock(&inbox.fresh);
            // No lane is added after this (see `connect`).
            f.gone = true;
            for lane in f.lanes.drain(..) {
                lane.close();
            }
        }
    }

    /// Opens the lane `src` → `dest` if `dest` is a fast-path endpoint of this fabric.
    pub(crate) fn connect(
        &self,
        src: RawAddr,
        src_inbox: &Arc<Inbox>,
        dest: &RawAddr,
    ) -> Option<TxLane> {
        let dest = lock(&self.inboxes).get(dest).cloned()?;
        let lane = Arc::new(Lane::new(
            src,
            Arc::downgrade(src_inbox),
            src_inbox.bell.clone(),
        ));
        let mut f = lock(&dest.fresh);
        if f.gone {
            // Unregistered since the lookup: as if it had not been found.
            return None;
        }
        f.lanes.push(lane.clone());
        dest.raise(EV_FRESH);
        dest.bell.ring();
        Some(TxLane {
            lane,
            dest_bell: dest.bell.clone(),
            dest: Arc::downgrade(&dest),
            tail: 0,
            head_seen: 0,
            waiting: VecDeque::new(),
        })
    }
}

/// The receiver's cursor on a newly discovered lane from peer `peer`.
pub(crate) fn rx_lane(lane: Arc<Lane>, peer: u32) -> RxLane {
    RxLane {
        lane,
        peer,
        head: 0,
        tail_seen: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two distinct endpoint addresses.
    fn two_addrs() -> (RawAddr, RawAddr) {
        let at = |qpn| RawAddr {
            qpn,
            ..RawAddr::default()
        };
        (at(1), at(2))
    }

    /// Every inline length packs into words and back to the same bytes, distinct bytes in
    /// their places, zero past the payload.
    #[test]
    fn inline_payloads_pack_and_copy_back_byte_for_byte() {
        for n in 0..=INLINE {
            let data: Vec<u8> = (0..n as u8)
                .map(|i| i.wrapping_mul(37).wrapping_add(1))
                .collect();
            let words = pack_inline(&data);
            let mut flat = Vec::new();
            for w in words {
                flat.extend_from_slice(&w.to_le_bytes());
            }
            assert_eq!(&flat[..n], &data[..], "length {n}");
            assert!(
                flat[n..].iter().all(|&b| b == 0),
                "length {n}: zero past the payload"
            );
            let mut out = vec![0xffu8; n];
            copy_inline(&words, n, &mut out);
            assert_eq!(out, data, "length {n}");
        }
    }

    /// `copy_small` copies every length up to past the inline bytes exactly, touching
    /// nothing beyond the destination (a larger buffer around it keeps its bytes), and
    /// leaves a destination of another length alone.
    #[test]
    fn small_copies_are_exact_at_every_length() {
        for n in 0..=INLINE + 8 {
            let data: Vec<u8> = (0..n as u8)
                .map(|i| i.wrapping_mul(53).wrapping_add(7))
                .collect();
            let mut around = vec![0xeeu8; n + 16];
            copy_small(&mut around[8..8 + n], &data);
            assert_eq!(&around[8..8 + n], &data[..], "length {n}");
            assert!(
                around[..8]
                    .iter()
                    .chain(&around[8 + n..])
                    .all(|&b| b == 0xee),
                "length {n}: nothing written outside"
            );
            let mut other = vec![0xeeu8; n + 1];
            copy_small(&mut other, &data);
            assert!(
                other.iter().all(|&b| b == 0xee),
                "length {n}: lengths differ"
            );
        }
    }

    /// A drain's batch is what the sender had published at its look: `pop_seen` takes
    /// exactly those, in order; what is published later waits for the next look (and
    /// `pop` looks by itself); freeing the batch's slots lets waiting messages in.
    #[test]
    fn a_look_bounds_the_batch_and_the_next_look_sees_the_rest() {
        let hub = Hub::default();
        let (a, b) = two_addrs();
        let ia = hub.register(a, Arc::default());
        let ib = hub.register(b, Arc::default());
        let mut tx = hub.connect(a, &ia, &b).unwrap();
        let mut lanes = Vec::new();
        assert!(ib.take_new_lanes(&mut lanes));
        let mut rx = rx_lane(lanes[0].clone(), 0);
        assert!(rx.pop_seen().is_none(), "nothing looked at yet");
        for i in 0..3u64 {
            tx.send(i, F_TAGGED, 0, 0, Bytes::Borrowed(&[i as u8; 8]));
        }
        assert!(
            rx.pop_seen().is_none(),
            "published after the (initial) look"
        );
        rx.look();
        tx.send(3, F_TAGGED, 0, 0, Bytes::Borrowed(&[3; 8]));
        let batch: Vec<u64> = std::iter::from_fn(|| rx.pop_seen())
            .map(|r| r.tag)
            .collect();
        assert_eq!(batch, [0, 1, 2], "the batch ends at the look");
        rx.look();
        assert_eq!(rx.pop_seen().map(|r| r.tag), Some(3));
        assert!(rx.pop_seen().is_none());
        tx.send(4, F_TAGGED, 0, 0, Bytes::Borrowed(&[4; 8]));
        assert_eq!(
            rx.pop().map(|r| r.tag),
            Some(4),
            "pop looks when its batch is empty"
        );
        rx.publish();
        tx.flush();
        // A full ring: the rest waits at the sender until a drained batch is published.
        for i in 5..(5 + SLOTS as u64 + 2) {
            tx.send(i, F_TAGGED, 0, 0, Bytes::Borrowed(&[0; 8]));
        }
        assert_eq!(tx.waiting(), 2);
        rx.look();
        let n = std::iter::from_fn(|| rx.pop_seen()).count();
        assert_eq!(n, SLOTS);
        rx.publish();
        tx.flush();
        assert_eq!(tx.waiting(), 0);
        rx.look();
        let rest: Vec<u64> = std::iter::from_fn(|| rx.pop_seen())
            .map(|r| r.tag)
            .collect();
        assert_eq!(rest, [5 + SLOTS as u64, 6 + SLOTS as u64]);
    }

    #[test]
    fn lane_keeps_order_across_inline_big_and_waiting() {
        let hub = Hub::default();
        let a = RawAddr {
            qpn: 1,
            ..RawAddr::default()
        };
        let b = RawAddr {
            qpn: 2,
            ..RawAddr::default()
        };
        let ia = hub.register(a, Arc::default());
        let ib = hub.register(b, Arc::default());
        let mut tx = hub.connect(a, &ia, &b).unwrap();
        let mut lanes = Vec::new();
        assert!(ib.take_new_lanes(&mut lanes));
        assert!(!ib.take_new_lanes(&mut lanes), "taken once");
        let mut rx = rx_lane(lanes[0].clone(), 0);
        // More than the ring holds: the rest waits at the sender, in order.
        let n = SLOTS * 2 + 7;
        for i in 0..n {
            let data: Vec<u8> = vec![i as u8; if i % 3 == 0 { 100 } else { i % 33 }];
            tx.send(i as u64, F_TAGGED, 0, 0, Bytes::Owned(data));
        }
        assert_eq!(tx.waiting(), n - SLOTS);
        let mut got = 0;
        while got < n {
            while let Some(r) = rx.pop() {
                let want = if got % 3 == 0 { 100 } else { got % 33 };
                assert_eq!((r.tag, r.len), (got as u64, want));
                match r.payload {
                    Payload::Heap(v) => assert_eq!(v, vec![got as u8; want]),
                    Payload::Inline { words } => {
                        let mut out = vec![0u8; want];
                        copy_inline(&words, want, &mut out);
                        assert_eq!(out, vec![got as u8; want]);
                    }
                    Payload::Proto(_) => unreachable!(),
                }
                got += 1;
            }
            rx.publish();
            tx.flush();
        }
        assert_eq!(tx.waiting(), 0);
        assert!(hub.connect(a, &ia, &RawAddr::default()).is_none());
        assert!(!tx.closed());
        hub.unregister(&b, [&rx]);
        assert!(tx.closed(), "the receiver's lanes are closed");
        assert!(ia.take_peers_closed(), "and the sender is told");
        assert!(!ia.take_peers_closed());
        assert!(hub.connect(a, &ia, &b).is_none());
    }

    /// The receiver rings the sender's doorbell when it frees ring space only while the
    /// sender has messages waiting for it, and then never misses the sender (which looked
    /// at the ring after taking the bell's epoch, found it full, and waits for a ring),
    /// the receiver running on another thread.
    #[test]
    fn freed_ring_space_wakes_a_sender_only_when_messages_wait() {
        use std::time::Duration;
        let hub = Hub::default();
        let (a, b) = two_addrs();
        let bell_a = Arc::new(Doorbell::new());
        let ia = hub.register(a, bell_a.clone());
        let ib = hub.register(b, Arc::default());
        let mut tx = hub.connect(a, &ia, &b).unwrap();
        let mut lanes = Vec::new();
        assert!(ib.take_new_lanes(&mut lanes));
        let mut rx = rx_lane(lanes.pop().unwrap(), 0);
        tx.send(0, F_TAGGED, 0, 0, Bytes::Borrowed(&[1]));
        let before = bell_a.epoch();
        assert_eq!(rx.pop().map(|r| r.tag), Some(0));
        rx.publish();
        assert_eq!(
            bell_a.epoch(),
            before,
            "nothing waits at the sender: no ring"
        );
        for round in 0..50u64 {
            // A full ring and one message waiting for space.
            let base = 1 + round * (SLOTS as u64 + 1);
            for i in 0..=SLOTS as u64 {
                tx.send(base + i, F_TAGGED, 0, 0, Bytes::Borrowed(&[2; 8]));
            }
            assert_eq!(tx.waiting(), 1);
            let seen = bell_a.epoch();
            tx.flush();
            assert_eq!(tx.waiting(), 1, "no room yet");
            let t = std::thread::spawn(move || {
                let mut tags = Vec::new();
                while let Some(r) = rx.pop() {
                    tags.push(r.tag);
                }
                rx.publish();
                (rx, tags)
            });
            assert!(
                bell_a.wait(seen, Duration::from_secs(60)),
                "the receiver rang the waiting sender"
            );
            let (back, tags) = t.join().unwrap();
            rx = back;
            let want: Vec<u64> = (base..base + SLOTS as u64).collect();
            assert_eq!(tags, want);
            tx.flush();
            assert_eq!(tx.waiting(), 0);
            assert_eq!(rx.pop().map(|r| r.tag), Some(base + SLOTS as u64));
            rx.publish();
        }
    }

    /// A sender dropped with messages in the ring and waiting for ring space hands the
    /// waiting ones to the lane: the receiver gets all of them, in order, then sees the
    /// lane drained.
    #[test]
    fn a_dropped_sender_leaves_nothing_behind_in_its_queue() {
        let hub = Hub::default();
        let (a, b) = two_addrs();
        let ia = hub.register(a, Arc::default());
        let ib = hub.register(b, Arc::default());
        let mut tx = hub.connect(a, &ia, &b).unwrap();
        let n = SLOTS + 100;
        for i in 0..n {
            let len = if i % 2 == 0 { 40 } else { 8 };
            tx.send(i as u64, F_TAGGED, 0, 0, Bytes::Owned(vec![i as u8; len]));
        }
        assert_eq!(tx.waiting(), 100);
        let mut lanes = Vec::new();
        assert!(ib.take_new_lanes(&mut lanes));
        let mut rx = rx_lane(lanes.pop().unwrap(), 0);
        // Some taken before the sender goes.
        for i in 0..10 {
            assert_eq!(rx.pop_any().unwrap().tag, i);
        }
        assert!(!rx.sender_gone() && !rx.drained());
        assert!(!ib.take_senders_gone());
        drop(tx);
        assert!(ib.take_senders_gone(), "the receiver is told");
        assert!(!ib.take_senders_gone());
        assert!(!rx.drained(), "messages are left");
        let mut got = 10;
        while let Some(r) = rx.pop_any() {
            let len = if got % 2 == 0 { 40 } else { 8 };
            assert_eq!((r.tag, r.len), (got as u64, len));
            got += 1;
        }
        assert_eq!(got, n);
        assert!(rx.drained());
    }
}

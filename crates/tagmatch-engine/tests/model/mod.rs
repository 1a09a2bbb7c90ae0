//! Reference model: plain vectors implementing the matching rules literally.
//!
//! - A message matches the earliest-posted matching receive (first in `posted`).
//! - A receive matches the earliest-arrived matching unexpected message (first in `unexp`).
//! - Messages from one source are processed in sequence-number order; early ones wait in
//!   a per-source map within the window; others are refused with a reason.
//! - Stored messages (unexpected, claimed, held) count against the byte/entry budgets.

#![allow(dead_code)]

use std::collections::BTreeMap;
use tagmatch_engine::{Config, Envelope, Pressure, RecvSpec, RejectReason, Source};

pub mod walk;

/// The configuration of the review walks (`review_defer.rs`, `review_tomb.rs`,
/// `review_wild2.rs`): a small reorder window, sequences from 0, limits far above what
/// the walks reach.
pub fn review_config() -> Config {
    Config::default()
        .reorder_window(4)
        .initial_seq(0)
        .max_messages(1 << 16)
        .max_posted(1 << 16)
        .max_bytes(1 << 30)
}

/// xorshift64*: a fixed, dependency-free stream per state, so that the seeded random
/// walks of the test files are reproducible.
pub struct Rng(pub u64);

impl Rng {
    /// A stream from `seed` (mixed; the state is never zero).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn below_usize(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// What one operation produced, in a form both the model and the engine can give.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Out {
    /// (rid, mid)
    Match(u32, u32),
    Unexpected(u32),
    Pending(u32),
    PostRejected(u32),
    Rejected(RejectReason, u32),
    Held(u32),
    Probe(Option<u32>),
    Cancel(Option<u32>),
    Mrecv(Option<u32>),
    PurgedRecv(u32),
    PurgedMsg(u32),
    PurgedHeld(u32),
    First(Option<u32>),
    SetSeq(bool),
}

#[derive(Clone, Debug)]
pub struct Msg {
    pub env: Envelope,
    pub len: usize,
    pub mid: u32,
}

pub struct Peer {
    pub expected: u32,
    /// seq -> Some(msg) held, None = consumed by a communicator purge.
    pub held: BTreeMap<u32, Option<Msg>>,
}

pub struct Model {
    pub window: u32,
    pub max_bytes: usize,
    pub max_messages: usize,
    pub max_posted: usize,
    pub high_water: u8,
    pub initial_seq: u32,
    pub posted: Vec<(RecvSpec, u32)>,
    pub unexp: Vec<Msg>,
    pub claimed: Vec<Msg>,
    pub peers: BTreeMap<u32, Peer>,
}

impl Model {
    pub fn new(
        window: u32,
        max_bytes: usize,
        max_messages: usize,
        max_posted: usize,
        initial_seq: u32,
    ) -> Self {
        Model {
            window: window.max(1),
            max_bytes,
            max_messages,
            max_posted,
            high_water: 75,
            initial_seq,
            posted: Vec::new(),
            unexp: Vec::new(),
            claimed: Vec::new(),
            peers: BTreeMap::new(),
        }
    }

    pub fn held_count(&self) -> usize {
        self.peers
            .values()
            .map(|p| p.held.values().filter(|m| m.is_some()).count())
            .sum()
    }

    pub fn stored(&self) -> usize {
        self.unexp.len() + self.claimed.len() + self.held_count()
    }

    /// The messages missing below held ones, per source (the gaps of its reorder window
    /// below the last held sequence number): the message budget keeps room for them.
    pub fn reserved(&self) -> usize {
        self.peers.values().map(Self::gaps).sum()
    }

    fn span(p: &Peer) -> usize {
        p.held
            .keys()
            .map(|&q| q.wrapping_sub(p.expected) as usize + 1)
            .max()
            .unwrap_or(0)
    }

    fn gaps(p: &Peer) -> usize {
        Self::span(p) - p.held.len()
    }

    pub fn bytes(&self) -> usize {
        let held: usize = self
            .peers
            .values()
            .flat_map(|p| p.held.values())
            .flatten()
            .map(|m| m.len)
            .sum();
        self.unexp
            .iter()
            .chain(&self.claimed)
            .map(|m| m.len)
            .sum::<usize>()
            + held
    }

    fn fits(&self, len: usize) -> bool {
        len <= u32::MAX as usize
            && self.stored() + self.reserved() < self.max_messages
            && self.bytes() + len <= self.max_bytes
    }

    pub fn pressure(&self) -> Pressure {
        let (m, b) = (self.stored() + self.reserved(), self.bytes());
        if m >= self.max_messages || b >= self.max_bytes {
            Pressure::Full
        } else if m as u128 * 100 >= self.max_messages as u128 * self.high_water as u128
            || b as u128 * 100 >= self.max_bytes as u128 * self.high_water as u128
        {
            Pressure::High
        } else {
            Pressure::Normal
        }
    }

    pub fn post(&mut self, spec: RecvSpec, rid: u32) -> Out {
        if let Some(i) = self.unexp.iter().position(|m| spec.matches(&m.env)) {
            let m = self.unexp.remove(i);
            return Out::Match(rid, m.mid);
        }
        if self.posted.len() >= self.max_posted {
            return Out::PostRejected(rid);
        }
        self.posted.push((spec, rid));
        Out::Pending(rid)
    }

    pub fn arrive(&mut self, m: Msg, check: bool) -> Out {
        if let Some(i) = self.posted.iter().position(|(s, _)| s.matches(&m.env)) {
            let (_, rid) = self.posted.remove(i);
            return Out::Match(rid, m.mid);
        }
        if check && !self.fits(m.len) {
            return Out::Rejected(RejectReason::Backpressure, m.mid);
        }
        let mid = m.mid;
        self.unexp.push(m);
        Out::Unexpected(mid)
    }

    pub fn deliver(&mut self, m: Msg, seq: u32, out: &mut Vec<Out>) {
        let src = m.env.src;
        let initial = self.initial_seq;
        let expected = self
            .peers
            .entry(src)
            .or_insert_with(|| Peer {
                expected: initial,
                held: BTreeMap::new(),
            })
            .expected;
        let d = seq.wrapping_sub(expected);
        if d == 0 {
            // The next in order is admitted over the budget when successors of it are held:
            // they wait for it, and refusing it would leave them waiting for ever.
            let successors = !self.peers[&src].held.is_empty();
            // Only held messages (their bytes wait for it) let it pass the byte budget: with
            // only skips held (purge_comm), nothing of the source holds bytes (review19).
            let held_msgs = self.peers[&src].held.values().any(Option::is_some);
            if successors
                && !held_msgs
                && !self.posted.iter().any(|(s, _)| s.matches(&m.env))
                && (m.len > u32::MAX as usize || self.bytes() + m.len > self.max_bytes)
            {
                out.push(Out::Rejected(RejectReason::Backpressure, m.mid));
                return;
            }
            let r = self.arrive(m, !successors);
            let rejected = matches!(r, Out::Rejected(..));
            out.push(r);
            if rejected {
                return;
            }
            loop {
                let p = self.peers.get_mut(&src).unwrap();
                p.expected = p.expected.wrapping_add(1);
                let e = p.expected;
                match p.held.remove(&e) {
                    None => break,
                    Some(None) => {}
                    Some(Some(h)) => {
                        let r = self.arrive(h, false);
                        out.push(r);
                    }
                }
            }
            return;
        }
        let reason = if d >= 1 << 31 {
            Some(RejectReason::Stale)
        } else if d >= self.window {
            Some(RejectReason::WindowOverflow)
        } else if self.peers[&src].held.contains_key(&seq) {
            Some(RejectReason::Duplicate)
        } else if !self.fits_held(src, d, m.len) {
            Some(RejectReason::Backpressure)
        } else {
            None
        };
        match reason {
            Some(r) => out.push(Out::Rejected(r, m.mid)),
            None => {
                out.push(Out::Held(m.mid));
                self.peers.get_mut(&src).unwrap().held.insert(seq, Some(m));
            }
        }
    }

    /// Whether a message `d` ahead of `src`'s next expected one may be held: it and the
    /// gaps it opens below it fit in the message budget (a message filling a gap has
    /// its room kept already), and its bytes fit.
    fn fits_held(&self, src: u32, d: u32, len: usize) -> bool {
        let span = Self::span(&self.peers[&src]);
        let more = (d as usize + 1).saturating_sub(span);
        len <= u32::MAX as usize
            && self.bytes() + len <= self.max_bytes
            && (more == 0 || self.stored() + self.reserved() + more <= self.max_messages)
    }

    pub fn probe(&self, spec: &RecvSpec) -> Option<u32> {
        self.unexp
            .iter()
            .find(|m| spec.matches(&m.env))
            .map(|m| m.mid)
    }

    pub fn mprobe(&mut self, spec: &RecvSpec) -> Option<u32> {
        let i = self.unexp.iter().position(|m| spec.matches(&m.env))?;
        let m = self.unexp.remove(i);
        let mid = m.mid;
        self.claimed.push(m);
        Some(mid)
    }

    pub fn mrecv(&mut self, mid: u32) -> Option<u32> {
        let i = self.claimed.iter().position(|m| m.mid == mid)?;
        Some(self.claimed.remove(i).mid)
    }

    pub fn cancel(&mut self, rid: u32) -> Option<u32> {
        let i = self.posted.iter().position(|(_, r)| *r == rid)?;
        Some(self.posted.remove(i).1)
    }

    pub fn cancel_where(&mut self, mut pred: impl FnMut(&RecvSpec) -> bool, out: &mut Vec<Out>) {
        self.posted.retain(|(s, r)| {
            if pred(&s.normalized()) {
                out.push(Out::PurgedRecv(*r));
                false
            } else {
                true
            }
        });
    }

    pub fn purge_peer(&mut self, src: u32, out: &mut Vec<Out>) {
        self.cancel_where(|s| s.src == Source::Rank(src), out);
        self.unexp.retain(|m| {
            if m.env.src == src {
                out.push(Out::PurgedMsg(m.mid));
                false
            } else {
                true
            }
        });
        if let Some(p) = self.peers.remove(&src) {
            for m in p.held.into_values().flatten() {
                out.push(Out::PurgedHeld(m.mid));
            }
        }
    }

    pub fn purge_comm(&mut self, comm: u32, out: &mut Vec<Out>) {
        self.cancel_where(|s| s.comm == comm, out);
        self.unexp.retain(|m| {
            if m.env.comm == comm {
                out.push(Out::PurgedMsg(m.mid));
                false
            } else {
                true
            }
        });
        for p in self.peers.values_mut() {
            for slot in p.held.values_mut() {
                if slot.as_ref().is_some_and(|m| m.env.comm == comm) {
                    out.push(Out::PurgedHeld(slot.take().unwrap().mid));
                }
            }
        }
    }

    pub fn first_posted(&self, env: &Envelope) -> Option<u32> {
        self.posted
            .iter()
            .find(|(s, _)| s.matches(env))
            .map(|(_, r)| *r)
    }

    pub fn set_expected(&mut self, src: u32, seq: u32) -> bool {
        let initial = self.initial_seq;
        let p = self.peers.entry(src).or_insert_with(|| Peer {
            expected: initial,
            held: BTreeMap::new(),
        });
        if !p.held.is_empty() {
            return false;
        }
        p.expected = seq;
        true
    }

    pub fn expected(&self, src: u32) -> u32 {
        self.peers
            .get(&src)
            .map_or(self.initial_seq, |p| p.expected)
    }
}

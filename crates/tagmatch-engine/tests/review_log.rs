//! Review of the arrival log (branch `exact2`): while no (comm) list of unexpected
//! messages is kept, their arrival order is an array of slab indices whose entries of
//! messages since taken are left dead (a queued message stashes its position in its
//! (comm) link pair), compacted when full and at most half live, cleared when the queue
//! empties and when the (comm) lists are built; and the exact post's inlined path, used
//! while no wildcard list is kept and no message has held bytes other than its length.
//!
//! Seeded random walks against the reference model in `model/`, biased to what the
//! other walks rarely produce:
//!
//! - deep queues (hundreds of messages) whose messages are taken by exact receives and
//!   exact mprobes *anywhere* in the arrival order (not only at its ends), so that the
//!   log fills, is compacted many times with dead entries at every position, and freed
//!   slots are reused (LIFO) by the next arrivals, which then have later positions than
//!   the dead entries of their slot — including the arrival that triggers a compaction,
//!   which is in the slab (with no position stashed yet) while the log is compacted;
//! - claims (`mprobe`) made while the log is in use, kept across builds of the (comm)
//!   lists, drains that forget them and restarts of the log, then received;
//! - messages with held bytes other than their length (`arrive_held`,
//!   `deliver_held`, also released by the reorder buffer, sequence numbers wrapping past
//!   `u32::MAX`), which switch exact receives between the inlined path and the general
//!   one: `Counters::bytes_held` is checked against the walk's own sum after every step,
//!   with claims counted and not ([`Config::claims_count`]);
//! - (comm) lists built while the (comm) index is wide (ANY_SOURCE+ANY_TAG receives
//!   posted on many other communicators), which builds the other kinds from the log
//!   first;
//! - eager wildcard lists on and off, tight message and byte budgets (depths, bytes and
//!   pressure against the model after every step), small and large keys (dense arrays
//!   and hash indexes).
//!
//! And long runs at a constant depth (10^6 steps at 1000 queued messages, taking the
//! oldest, the newest or a random one) in which the engine's heap must stop growing.

mod model;

use std::collections::{HashMap, VecDeque};

use model::{Model, Msg, Out, Rng};
use tagmatch_engine::*;

/// This file's stream for `seed` (its own mixing of the seed into [`Rng`]'s state).
fn rng(seed: u64) -> Rng {
    Rng(seed.wrapping_mul(0xD134_2543_DE82_EF95) ^ 0x5851_F42D_4C95_7F2D | 1)
}

/// Sources `0..ARRIVE_SRCS` (and [`BIG_SRC`]) use `arrive`; `SEQ_BASE..SEQ_BASE +
/// SEQ_SRCS` use `deliver_held`.
const ARRIVE_SRCS: u32 = 4;
const SEQ_BASE: u32 = 10;
const SEQ_SRCS: u32 = 2;
/// A source rank past the dense arrays (its (comm, src) lists are in the hash index).
const BIG_SRC: u32 = 1 << 20;
/// A tag past the dense arrays.
const BIG_TAG: u64 = 1 << 40;
const COMMS: u32 = 3;

struct Walk {
    e: Engine<u32, u32>,
    m: Model,
    /// Whether messages may have held bytes other than their length (then the budgets
    /// are unlimited: the model counts lengths) and bytes are checked against `held`.
    odd_held: bool,
    claims_count: bool,
    /// Held bytes of every message the engine counts (queued, claimed when claims
    /// count, in a reorder buffer), by message id.
    held: HashMap<u32, usize>,
    next: u32,
    handles: Vec<(u32, RecvHandle)>,
    claims: Vec<(u32, MsgHandle)>,
    send_seq: Vec<u32>,
    /// Sent, not yet delivered: (seq, message, held bytes), per sequenced source.
    in_flight: Vec<Vec<(u32, Msg, usize)>>,
    log: Vec<String>,
}

impl Walk {
    fn new(cfg: Config, odd_held: bool) -> Self {
        Walk {
            e: Engine::new(cfg),
            m: Model::new(
                cfg.reorder_window,
                cfg.max_bytes,
                cfg.max_messages,
                cfg.max_posted,
                cfg.initial_seq,
            ),
            odd_held,
            claims_count: cfg.claims_count,
            held: HashMap::new(),
            next: 0,
            handles: Vec::new(),
            claims: Vec::new(),
            send_seq: vec![cfg.initial_seq; SEQ_SRCS as usize],
            in_flight: vec![Vec::new(); SEQ_SRCS as usize],
            log: Vec::new(),
        }
    }

    fn id(&mut self) -> u32 {
        self.next += 1;
        self.next
    }

    fn fail(&self, what: String) -> ! {
        let tail = self.log.len().saturating_sub(40);
        panic!("{what}\nlast operations:\n{}", self.log[tail..].join("\n"));
    }

    fn check(&self, what: &str) {
        let c = self.e.counters();
        let bytes = if self.odd_held {
            self.held.values().sum()
        } else {
            self.m.bytes()
        };
        let got = (
            c.posted_depth,
            c.unexpected_depth,
            c.claimed_depth,
            c.reorder_depth,
            c.bytes_held,
        );
        let want = (
            self.m.posted.len(),
            self.m.unexp.len(),
            self.m.claimed.len(),
            self.m.held_count(),
            bytes,
        );
        if got != want {
            self.fail(format!(
                "after {what}: engine posted/unexpected/claimed/reorder/bytes {got:?}, \
                 model {want:?}"
            ));
        }
        if !self.odd_held && self.e.pressure() != self.m.pressure() {
            self.fail(format!(
                "after {what}: pressure {:?}, model {:?}",
                self.e.pressure(),
                self.m.pressure()
            ));
        }
    }

    fn retire_recv(&mut self, rid: u32) {
        self.handles.retain(|&(r, _)| r != rid);
    }

    fn held_of(&self, r: &mut Rng, len: usize) -> usize {
        if self.odd_held && r.chance(15) {
            r.below(2 * len as u64 + 2) as usize
        } else {
            len
        }
    }

    fn arrive(&mut self, env: Envelope, len: usize, held: usize) {
        let mid = self.id();
        self.log
            .push(format!("arrive {env:?} len {len} held {held} mid {mid}"));
        let got = match self.e.arrive_held(env, len, held, mid) {
            Ok(Arrived::Matched(x)) => {
                if x.env != env || x.len != len {
                    self.fail(format!("arrive {env:?}: match says {:?}/{}", x.env, x.len));
                }
                Out::Match(x.recv, x.msg)
            }
            Ok(Arrived::Unexpected(_)) => Out::Unexpected(mid),
            Err(r) => Out::Rejected(r.reason, r.msg),
        };
        let want = self.m.arrive(Msg { env, len, mid }, true);
        if got != want {
            self.fail(format!("arrive {env:?}: engine {got:?}, model {want:?}"));
        }
        match got {
            Out::Match(rid, _) => self.retire_recv(rid),
            Out::Unexpected(_) => {
                self.held.insert(mid, held);
            }
            _ => {}
        }
        self.check("arrive");
    }

    fn send(&mut self, r: &mut Rng, comm: u32, tag: u64) {
        let s = r.below(u64::from(SEQ_SRCS)) as usize;
        let len = 1 + r.below(16) as usize;
        let held = self.held_of(r, len);
        let mid = self.id();
        let env = Envelope::new(comm, SEQ_BASE + s as u32, tag);
        self.in_flight[s].push((self.send_seq[s], Msg { env, len, mid }, held));
        self.send_seq[s] = self.send_seq[s].wrapping_add(1);
    }

    fn deliver(&mut self, s: usize, pick: usize) {
        if self.in_flight[s].is_empty() {
            return;
        }
        let i = pick % self.in_flight[s].len();
        let (seq, msg, held) = self.in_flight[s][i].clone();
        self.log
            .push(format!("deliver seq {seq} {msg:?} held {held}"));
        let mut got = Vec::new();
        let mut matched = Vec::new();
        let res = self
            .e
            .deliver_held(msg.env, seq, msg.len, held, msg.mid, |o| match o {
                Ordered::Arrived(Arrived::Matched(x)) => {
                    matched.push((x.recv, x.msg));
                    got.push(Out::Match(x.recv, x.msg));
                }
                Ordered::Arrived(Arrived::Unexpected(_)) => got.push(Out::Unexpected(0)),
                Ordered::Control { .. } => got.push(Out::SetSeq(false)),
            });
        match res {
            Ok(0) => got.push(Out::Held(msg.mid)),
            Ok(_) => {}
            Err(x) => got.push(Out::Rejected(x.reason, x.msg)),
        }
        let mut want = Vec::new();
        self.m.deliver(msg.clone(), seq, &mut want);
        for w in want.iter_mut() {
            if let Out::Unexpected(_) = w {
                *w = Out::Unexpected(0);
            }
        }
        if got != want {
            self.fail(format!(
                "deliver seq {seq} of {msg:?}: engine {got:?}, model {want:?}"
            ));
        }
        if !matches!(got.last(), Some(Out::Rejected(..))) {
            self.in_flight[s].remove(i);
            self.held.insert(msg.mid, held);
        }
        for (rid, mid) in matched {
            self.retire_recv(rid);
            self.held.remove(&mid);
        }
        self.check("deliver");
    }

    fn post(&mut self, spec: RecvSpec) {
        let rid = self.id();
        self.log.push(format!("post {spec:?} rid {rid}"));
        let got = match self.e.post(spec, rid) {
            Ok(Posted::Matched(x)) => {
                if !spec.matches(&x.env) {
                    self.fail(format!("post {spec:?}: matched {:?}", x.env));
                }
                Out::Match(x.recv, x.msg)
            }
            Ok(Posted::Pending(h)) => {
                self.handles.push((rid, h));
                Out::Pending(rid)
            }
            Err(r) => Out::PostRejected(r.recv),
        };
        let want = self.m.post(spec, rid);
        if got != want {
            self.fail(format!("post {spec:?}: engine {got:?}, model {want:?}"));
        }
        if let Out::Match(_, mid) = got {
            self.held.remove(&mid);
        }
        self.check("post");
    }

    fn probe(&mut self, spec: RecvSpec) {
        self.log.push(format!("probe {spec:?}"));
        let got = self.e.probe(&spec).map(|p| *p.msg);
        let want = self.m.probe(&spec);
        if got != want {
            self.fail(format!("probe {spec:?}: engine {got:?}, model {want:?}"));
        }
        self.check("probe");
    }

    fn mprobe(&mut self, spec: RecvSpec) {
        self.log.push(format!("mprobe {spec:?}"));
        let c = self.e.mprobe(&spec);
        let got = c.map(|c| *self.e.claimed(c.handle).expect("a fresh claim"));
        if let (Some(c), Some(mid)) = (c, got) {
            self.claims.push((mid, c.handle));
            if !self.claims_count {
                self.held.remove(&mid);
            }
        }
        let want = self.m.mprobe(&spec);
        if got != want {
            self.fail(format!("mprobe {spec:?}: engine {got:?}, model {want:?}"));
        }
        self.check("mprobe");
    }

    fn mrecv(&mut self, i: usize) {
        if self.claims.is_empty() {
            return;
        }
        let (mid, h) = self.claims.remove(i % self.claims.len());
        self.log.push(format!("mrecv {mid}"));
        let got = self.e.mrecv(h).ok().map(|x| x.msg);
        if got != Some(mid) || self.m.mrecv(mid) != Some(mid) {
            self.fail(format!("mrecv of {mid}: engine {got:?}"));
        }
        self.held.remove(&mid);
        self.check("mrecv");
    }

    fn cancel(&mut self, i: usize) {
        if self.handles.is_empty() {
            return;
        }
        let (rid, h) = self.handles.remove(i % self.handles.len());
        self.log.push(format!("cancel {rid}"));
        let got = self.e.cancel(h).ok();
        if got != Some(rid) || self.m.cancel(rid) != Some(rid) {
            self.fail(format!("cancel of {rid}: engine {got:?}"));
        }
        self.check("cancel");
    }

    /// Checks a purge's output: the same receives and held messages, and the same
    /// queued messages in arrival order (per communicator, given `comm_of` their
    /// communicators, or all of them when `comm_of` is empty).
    fn purged(&mut self, what: &str, got: Vec<Out>, want: Vec<Out>, comm_of: &HashMap<u32, u32>) {
        let msgs = |v: &Vec<Out>, c: Option<u32>| -> Vec<Out> {
            v.iter()
                .filter(|o| match o {
                    Out::PurgedMsg(m) => c.is_none_or(|c| comm_of.get(m) == Some(&c)),
                    _ => false,
                })
                .cloned()
                .collect()
        };
        let mut in_order = msgs(&got, None) == msgs(&want, None);
        if !comm_of.is_empty() {
            in_order = (0..COMMS).all(|c| msgs(&got, Some(c)) == msgs(&want, Some(c)));
        }
        let (mut g, mut w) = (got.clone(), want.clone());
        g.sort();
        w.sort();
        if !in_order || g != w {
            self.fail(format!("{what}: engine {got:?}, model {want:?}"));
        }
        for o in got {
            match o {
                Out::PurgedRecv(r) => self.retire_recv(r),
                Out::PurgedMsg(m) | Out::PurgedHeld(m) => {
                    self.held.remove(&m);
                }
                _ => {}
            }
        }
        self.check(what);
    }

    fn purge_peer(&mut self, src: u32) {
        self.log.push(format!("purge_peer {src}"));
        // Per communicator in arrival order (the engine visits one communicator after
        // another).
        let comm_of: HashMap<u32, u32> = self.m.unexp.iter().map(|m| (m.mid, m.env.comm)).collect();
        let mut got = Vec::new();
        self.e.purge_peer(src, |p| got.push(out_of(p)));
        let mut want = Vec::new();
        self.m.purge_peer(src, &mut want);
        if (SEQ_BASE..SEQ_BASE + SEQ_SRCS).contains(&src) {
            let s = (src - SEQ_BASE) as usize;
            self.send_seq[s] = self.m.initial_seq;
            self.in_flight[s].clear();
        }
        self.purged(&format!("purge_peer {src}"), got, want, &comm_of);
    }

    fn purge_comm(&mut self, comm: u32) {
        self.log.push(format!("purge_comm {comm}"));
        let mut got = Vec::new();
        self.e.purge_comm(comm, |p| got.push(out_of(p)));
        let mut want = Vec::new();
        self.m.purge_comm(comm, &mut want);
        self.purged(&format!("purge_comm {comm}"), got, want, &HashMap::new());
    }

    fn cancel_where_comm(&mut self, comm: u32) {
        self.log.push(format!("cancel_where comm {comm}"));
        let mut got = Vec::new();
        self.e
            .cancel_where(|s, _| s.comm == comm, |_, r| got.push(Out::PurgedRecv(r)));
        let mut want = Vec::new();
        self.m.cancel_where(|s| s.comm == comm, &mut want);
        if got != want {
            self.fail(format!(
                "cancel_where comm {comm}: engine {got:?}, model {want:?}"
            ));
        }
        for o in got {
            if let Out::PurgedRecv(r) = o {
                self.retire_recv(r);
            }
        }
        self.check("cancel_where");
    }

    /// An exact receive of the key of the queued message at `i` of the arrival order
    /// (taking the earliest of that key).
    fn take_at(&mut self, i: usize) {
        if let Some(m) = self.m.unexp.get(i).cloned() {
            self.post(RecvSpec::exact(m.env.comm, m.env.src, m.env.tag));
        }
    }

    /// Every queued message is found, in arrival order, by probes of every kind.
    fn witness(&mut self, r: &mut Rng) {
        if self.m.unexp.is_empty() {
            return;
        }
        let m = self.m.unexp[r.below(self.m.unexp.len() as u64) as usize].clone();
        let (c, s, t) = (m.env.comm, m.env.src, m.env.tag);
        self.probe(RecvSpec::new(c, None, None));
        self.probe(RecvSpec::new(c, Some(s), None));
        self.probe(RecvSpec::new(c, None, Some(t)));
        self.probe(RecvSpec::exact(c, s, t));
        self.probe(RecvSpec::masked(c, Source::Any, t, 1));
    }
}

fn out_of(p: Purged<u32, u32>) -> Out {
    match p {
        Purged::Recv(_, r) => Out::PurgedRecv(r),
        Purged::Unexpected(m) => Out::PurgedMsg(m.msg),
        Purged::Held(m) => Out::PurgedHeld(m.msg),
    }
}

fn key(r: &mut Rng) -> (u32, u32, u64) {
    let c = r.below(u64::from(COMMS)) as u32;
    let s = if r.chance(10) {
        BIG_SRC
    } else {
        r.below(u64::from(ARRIVE_SRCS)) as u32
    };
    let t = if r.chance(10) {
        BIG_TAG + r.below(2)
    } else {
        r.below(6)
    };
    (c, s, t)
}

fn wild_spec(r: &mut Rng) -> RecvSpec {
    let (c, s, t) = key(r);
    match r.below(5) {
        0 => RecvSpec::new(c, Some(s), None),
        1 => RecvSpec::new(c, None, Some(t)),
        2 => RecvSpec::new(c, None, None),
        3 => RecvSpec::masked(c, Source::Rank(s), t, 1),
        _ => RecvSpec::masked(c, Source::Any, t, 3),
    }
}

/// An exact-phase step: what the arrival log alone serves (nothing builds a wildcard
/// list).
fn exact_step(w: &mut Walk, r: &mut Rng) {
    match r.below(20) {
        0..=6 => {
            let (c, s, t) = key(r);
            let len = 1 + r.below(16) as usize;
            let held = w.held_of(r, len);
            w.arrive(Envelope::new(c, s, t), len, held);
        }
        7 => {
            let (c, _, t) = key(r);
            w.send(r, c, t);
        }
        8 | 9 => {
            let s = r.below(u64::from(SEQ_SRCS)) as usize;
            let pick = r.below(4) as usize;
            w.deliver(s, pick);
        }
        10..=13 => {
            // Anywhere in the arrival order.
            let n = w.m.unexp.len().max(1) as u64;
            w.take_at(r.below(n) as usize);
        }
        14 => {
            let (c, s, t) = key(r);
            w.post(RecvSpec::exact(c, s, t));
        }
        15 => {
            // An exact claim: its log entry dies through the claim mark.
            let n = w.m.unexp.len().max(1) as u64;
            if let Some(m) = w.m.unexp.get(r.below(n) as usize).cloned() {
                w.mprobe(RecvSpec::exact(m.env.comm, m.env.src, m.env.tag));
            }
        }
        16 => {
            let i = r.below(64) as usize;
            w.mrecv(i);
        }
        17 => {
            let i = r.below(64) as usize;
            w.cancel(i);
        }
        18 => {
            // A burst: the log grows, then most of it is taken anywhere, so the next
            // arrivals reuse the freed slots and compact the log.
            let n = 20 + r.below(200);
            for _ in 0..n {
                let (c, s, t) = key(r);
                let len = 1 + r.below(4) as usize;
                let held = w.held_of(r, len);
                w.arrive(Envelope::new(c, s, t), len, held);
            }
            let takes = n * (5 + r.below(5)) / 10;
            for _ in 0..takes {
                let n = w.m.unexp.len().max(1) as u64;
                w.take_at(r.below(n) as usize);
                if r.chance(30) {
                    let (c, s, t) = key(r);
                    w.arrive(Envelope::new(c, s, t), 1, 1);
                }
            }
        }
        _ => {
            // The latest arrivals first (their slots are reused at once).
            for _ in 0..1 + r.below(8) {
                if let Some(i) = w.m.unexp.len().checked_sub(1) {
                    w.take_at(i);
                }
                let (c, s, t) = key(r);
                w.arrive(Envelope::new(c, s, t), 2, 2);
            }
        }
    }
}

/// A wildcard-phase step: builds, uses or forgets the wildcard lists.
fn wild_step(w: &mut Walk, r: &mut Rng) {
    match r.below(12) {
        0..=2 => {
            let s = wild_spec(r);
            w.post(s);
        }
        3 => {
            let s = wild_spec(r);
            w.probe(s);
        }
        4 => {
            let s = wild_spec(r);
            w.mprobe(s);
        }
        5 => {
            let src = match r.below(3) {
                0 => BIG_SRC,
                1 => SEQ_BASE + r.below(u64::from(SEQ_SRCS)) as u32,
                _ => r.below(u64::from(ARRIVE_SRCS)) as u32,
            };
            w.purge_peer(src);
        }
        6 => {
            let c = r.below(u64::from(COMMS)) as u32;
            w.purge_comm(c);
        }
        7 => {
            let c = r.below(u64::from(COMMS)) as u32;
            w.cancel_where_comm(c);
        }
        8 => {
            // Drain by exact receives in a random order: the lists are forgotten and
            // the log restarts with the next arrival.
            while !w.m.unexp.is_empty() && w.m.posted.len() < w.m.max_posted {
                let i = r.below(w.m.unexp.len() as u64) as usize;
                w.take_at(i);
            }
        }
        9 => w.witness(r),
        _ => exact_step(w, r),
    }
}

fn run(seed: u64, cfg: Config, odd_held: bool, steps: usize) {
    let mut r = rng(seed);
    let mut w = Walk::new(cfg, odd_held);
    if seed % 2 == 1 {
        // A wide (comm) index (ANY_SOURCE+ANY_TAG receives on many communicators no
        // message is sent on): a build of the (comm) lists first builds the other two
        // kinds from the log too.
        for c in 100..180 {
            w.post(RecvSpec::new(c, None, None));
        }
    }
    let mut step = 0;
    while step < steps {
        let exact = 10 + r.below(150) as usize;
        for _ in 0..exact {
            exact_step(&mut w, &mut r);
        }
        let wild = 1 + r.below(8) as usize;
        for _ in 0..wild {
            wild_step(&mut w, &mut r);
        }
        step += exact + wild;
    }
    // Claims made long ago are still theirs; then everything left is found in arrival
    // order by each kind, and taken by ANY_SOURCE+ANY_TAG receives.
    while !w.claims.is_empty() {
        w.mrecv(0);
    }
    w.witness(&mut r);
    for c in 0..COMMS {
        while w.m.unexp.iter().any(|m| m.env.comm == c) && w.m.posted.len() < w.m.max_posted {
            w.post(RecvSpec::new(c, None, None));
        }
    }
    w.check("end");
}

fn configs() -> Vec<(&'static str, Config, bool)> {
    let base = Config::default()
        .reorder_window(8)
        .initial_seq(u32::MAX - 6);
    vec![
        ("lazy, held bytes", base, true),
        (
            "lazy, held bytes, claims not counted",
            base.claims_count(false),
            true,
        ),
        ("eager, held bytes", base.eager_wildcard_lists(true), true),
        (
            "lazy, 60 messages",
            base.max_messages(60).max_posted(50),
            false,
        ),
        (
            "eager, 60 messages",
            base.eager_wildcard_lists(true)
                .max_messages(60)
                .max_posted(50),
            false,
        ),
        ("lazy, 400 bytes", base.max_bytes(400), false),
    ]
}

fn each_seed(
    name: &str,
    seeds: core::ops::Range<u64>,
    f: impl Fn(u64) + std::panic::RefUnwindSafe,
) {
    for seed in seeds {
        if let Err(e) = std::panic::catch_unwind(|| f(seed)) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            panic!("{name}, seed {seed}: {msg}");
        }
    }
}

#[test]
fn deep_queues_taken_anywhere_match_the_model_in_every_config() {
    for (name, cfg, odd_held) in configs() {
        each_seed(name, 0..12, |seed| run(seed, cfg, odd_held, 2500));
    }
}

/// The arrival that triggers a compaction is in the slab before it has a position:
/// its slot is the one of a dead entry at position 0 (freed last, so reused first),
/// and the compaction must neither drop nor duplicate it, nor resurrect anything. For
/// every log size up to 64 and every choice of which earlier messages stay: the
/// wildcard kinds then see the queue in arrival order.
#[test]
fn the_arrival_that_compacts_reuses_the_slot_of_the_first_entry() {
    for cap in [4usize, 8, 16, 32, 64, 128] {
        for keep in [1, 2, cap / 4, cap / 2 - 1] {
            for spec in [
                RecvSpec::new(0, None, None),
                RecvSpec::new(0, Some(1), None),
                RecvSpec::new(0, None, Some(7)),
                RecvSpec::masked(0, Source::Any, 7, 1),
            ] {
                let mut w = Walk::new(Config::default(), false);
                // `cap` messages (positions and slots 0..cap): the log is full (its
                // capacity doubles from 4).
                for i in 0..cap {
                    w.arrive(Envelope::new(0, 1, 7 + 100 * (i as u64)), 1, 1);
                }
                // Keep the last `keep`, take the others from the end down to position
                // 0, whose slot is then the first reused.
                for i in (0..cap - keep).rev() {
                    w.post(RecvSpec::exact(0, 1, 7 + 100 * (i as u64)));
                }
                // The first arrival compacts the log and reuses slot 0.
                for j in 0..3 {
                    w.arrive(Envelope::new(0, 1, 7), 1, 1);
                    w.arrive(Envelope::new(0, 2, 7 + j), 1, 1);
                }
                while !w.m.unexp.is_empty() {
                    w.post(spec);
                    if !w.m.posted.is_empty() {
                        // A kind that matches no message left: take the rest in order.
                        w.cancel(0);
                        w.post(RecvSpec::new(0, None, None));
                    }
                }
                w.check("end");
            }
        }
    }
}

/// Claims made while the log is in use keep their log entries dead (the claim mark)
/// through compactions, builds of the (comm) lists, drains that forget them and
/// restarts of the log; received at the end, after their slots' neighbours were reused
/// many times.
#[test]
fn claims_survive_builds_forgets_and_log_restarts() {
    for eager in [false, true] {
        let mut w = Walk::new(Config::default().eager_wildcard_lists(eager), false);
        let mut r = rng(7 + u64::from(eager));
        for round in 0..200u64 {
            for i in 0..20 {
                w.arrive(Envelope::new(0, (i % 3) as u32, i % 5), 1, 1);
            }
            // Claim two, anywhere.
            for _ in 0..2 {
                let i = r.below(w.m.unexp.len() as u64) as usize;
                let m = w.m.unexp[i].clone();
                if round % 2 == 0 {
                    w.mprobe(RecvSpec::exact(m.env.comm, m.env.src, m.env.tag));
                } else {
                    w.mprobe(RecvSpec::new(0, Some(m.env.src), None));
                }
            }
            // Take half anywhere (dead entries), then builds of every order.
            for _ in 0..10 {
                let i = r.below(w.m.unexp.len() as u64) as usize;
                w.take_at(i);
            }
            match round % 4 {
                0 => w.probe(RecvSpec::new(0, None, None)),
                1 => w.probe(RecvSpec::new(0, Some(1), None)),
                2 => w.probe(RecvSpec::new(0, None, Some(3))),
                _ => {}
            }
            for i in 0..5 {
                w.arrive(Envelope::new(0, 1, 3 + i), 1, 1);
            }
            w.witness(&mut r);
            // Drain (forget), sometimes.
            if round % 3 == 0 {
                while !w.m.unexp.is_empty() {
                    let i = r.below(w.m.unexp.len() as u64) as usize;
                    w.take_at(i);
                }
            }
            if round % 10 == 9 {
                let i = r.below(8) as usize;
                w.mrecv(i);
            }
        }
        while !w.m.unexp.is_empty() {
            w.post(RecvSpec::new(0, None, None));
        }
        while !w.claims.is_empty() {
            w.mrecv(0);
        }
        w.check("end");
        assert_eq!(w.e.counters().bytes_held, 0);
    }
}

/// Which queued message a steady run's exact receives take.
#[derive(Clone, Copy, Debug)]
enum Take {
    Oldest,
    Newest,
    Random,
    /// A random one, by an exact mprobe then its mrecv.
    Claim,
}

/// Which unexpected lists a steady run keeps besides the (comm, src, tag) ones.
#[derive(Clone, Copy, Debug)]
enum Lists {
    /// None: the arrival log only.
    Log,
    /// The (comm, src) lists and the log.
    SrcAndLog,
    /// The (comm) lists (no log).
    Comm,
    /// Eager: all, always.
    Eager,
}

/// A queue of constant depth `depth` for `steps` steps, each an arrival and an exact
/// receive taking one queued message (every message has its own tag, so the receive
/// takes exactly the message it names): the matches are checked against a plain
/// queue, and the engine's heap must not grow after the warm-up.
fn steady(depth: usize, steps: u64, take: Take, lists: Lists) {
    let cfg = Config::default().eager_wildcard_lists(matches!(lists, Lists::Eager));
    let mut e: Engine<u32, u32> = Engine::new(cfg);
    let mut r = rng(depth as u64 ^ steps);
    // (tag, mid) of the queued messages, in arrival order.
    let mut q: VecDeque<(u64, u32)> = VecDeque::new();
    let tag_of = |i: u64| (1 << 33) + i;
    let mut next: u64 = 0;
    let mut arrive = |e: &mut Engine<u32, u32>, q: &mut VecDeque<(u64, u32)>| {
        let t = tag_of(next);
        let mid = next as u32;
        next += 1;
        match e.arrive(Envelope::new(3, 5, t), 8, mid) {
            Ok(Arrived::Unexpected(_)) => q.push_back((t, mid)),
            other => panic!(
                "arrival {mid}: {:?}",
                other.map(|_| ()).map_err(|x| x.reason)
            ),
        }
    };
    for _ in 0..depth {
        arrive(&mut e, &mut q);
    }
    match lists {
        Lists::SrcAndLog => assert!(e.probe(&RecvSpec::new(3, Some(5), None)).is_some()),
        Lists::Comm => assert!(e.probe(&RecvSpec::new(3, None, None)).is_some()),
        _ => {}
    }
    let warm_at = (steps / 20).max(4 * depth as u64);
    let mut warm = 0;
    for step in 0..steps {
        arrive(&mut e, &mut q);
        let i = match take {
            Take::Oldest => 0,
            Take::Newest => q.len() - 1,
            Take::Random | Take::Claim => r.below(q.len() as u64) as usize,
        };
        let (t, mid) = q.remove(i).unwrap();
        if let Take::Claim = take {
            let c = e.mprobe(&RecvSpec::exact(3, 5, t));
            let got = c.map(|c| e.mrecv(c.handle).map(|m| m.msg));
            assert_eq!(got, Some(Ok(mid)), "{lists:?} step {step}: claim");
        } else {
            match e.post(RecvSpec::exact(3, 5, t), 0) {
                Ok(Posted::Matched(x)) if x.msg == mid => {}
                other => panic!(
                    "{take:?}/{lists:?} step {step}: receive of {mid} got {:?}",
                    other.map(|p| match p {
                        Posted::Matched(x) => Some(x.msg),
                        Posted::Pending(_) => None,
                    })
                ),
            }
        }
        if step == warm_at {
            warm = e.heap_bytes();
        }
        if step > warm_at && step % 1024 == 0 {
            let h = e.heap_bytes();
            assert!(
                h <= warm,
                "{take:?}/{lists:?} step {step}: heap {h} bytes, {warm} after warm-up"
            );
        }
    }
    let c = e.counters();
    assert_eq!((c.unexpected_depth, c.bytes_held), (depth, 8 * depth));
    // The queue is still in arrival order for every kind.
    for &(_, mid) in q.iter() {
        match e.post(RecvSpec::new(3, None, None), 0) {
            Ok(Posted::Matched(x)) => assert_eq!(x.msg, mid, "{take:?}/{lists:?}"),
            _ => panic!("{take:?}/{lists:?}: message {mid} lost"),
        }
    }
    assert_eq!(e.counters().unexpected_depth, 0);
}

#[test]
fn a_million_steps_at_depth_1000_keep_the_heap_bounded() {
    for take in [Take::Oldest, Take::Newest, Take::Random] {
        steady(1000, 1_000_000, take, Lists::Log);
    }
    steady(1000, 300_000, Take::Claim, Lists::Log);
}

#[test]
fn steady_depth_with_wildcard_lists_kept_keeps_the_heap_bounded() {
    for take in [Take::Oldest, Take::Newest, Take::Random, Take::Claim] {
        for lists in [Lists::SrcAndLog, Lists::Comm, Lists::Eager] {
            steady(300, 200_000, take, lists);
        }
    }
}

/// The log after a burst: its capacity stays (like the slabs'), but a steady stream
/// at a small depth afterwards must not grow the heap, and the first wildcard receive
/// after it (walking a log full of dead entries) still sees the queue in order.
#[test]
fn after_a_burst_a_small_steady_queue_neither_grows_nor_loses_order() {
    let mut w = Walk::new(Config::default(), false);
    let mut r = rng(99);
    for i in 0..5000u64 {
        w.arrive(Envelope::new(1, (i % 7) as u32, i), 1, 1);
    }
    // Down to 3 queued, taken anywhere.
    while w.m.unexp.len() > 3 {
        let i = r.below(w.m.unexp.len() as u64) as usize;
        w.take_at(i);
    }
    let warm = w.e.heap_bytes();
    for i in 0..20_000u64 {
        w.arrive(Envelope::new(1, 2, 10_000 + i), 1, 1);
        let n = w.m.unexp.len() as u64;
        w.take_at(r.below(n) as usize);
    }
    assert!(w.e.heap_bytes() <= warm, "{} > {warm}", w.e.heap_bytes());
    w.witness(&mut r);
    while !w.m.unexp.is_empty() {
        w.post(RecvSpec::new(1, None, None));
    }
    w.check("end");
}

/// `Engine::reserve(posted, unexpected)`: "exact matching up to that depth allocates
/// nothing". The arrival log is an array that grows with the queue, so it is part of
/// what is reserved: after the reservation, queues of up to `unexpected` messages with
/// distinct keys, taken by exact receives anywhere (dead entries, compactions) and
/// refilled, leave the heap as it was.
#[test]
fn reserve_covers_the_arrival_log() {
    for depth in [1usize, 3, 4, 5, 100, 1000, 1025] {
        for posted in [0, depth] {
            let mut e: Engine<u32, u32> = Engine::new(Config::default());
            e.reserve(posted, depth);
            let before = e.heap_bytes();
            let mut r = rng(depth as u64);
            let mut q: Vec<u64> = Vec::new();
            let mut next = 0u64;
            for round in 0..4 {
                while q.len() < depth {
                    e.arrive(Envelope::new(0, 1, next), 1, 0).unwrap();
                    q.push(next);
                    next += 1;
                }
                // Take all but a few (the last round: all), anywhere.
                let keep = if round == 3 { 0 } else { r.below(3) as usize };
                while q.len() > keep.min(depth - 1) {
                    let t = q.swap_remove(r.below(q.len() as u64) as usize);
                    assert!(matches!(
                        e.post(RecvSpec::exact(0, 1, t), 0),
                        Ok(Posted::Matched(_))
                    ));
                }
                assert_eq!(
                    e.heap_bytes(),
                    before,
                    "depth {depth}, {posted} posted reserved, round {round}: the heap grew"
                );
            }
            // And as many exact receives posted before their messages come.
            for i in 0..posted as u64 {
                let _ = e.post(RecvSpec::exact(1, 2, i), 0);
            }
            for i in 0..posted as u64 {
                e.arrive(Envelope::new(1, 2, i), 1, 0).unwrap();
            }
            assert_eq!(e.heap_bytes(), before, "depth {depth}: posted receives");
        }
    }
}

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
//! - once a wildcard kind is built and the log freed (`Engine::drop_log`), arrival
//!   stamps renumbered at small bounds (`Engine::wrap_stamps_at`) and the log put back
//!   from them for each later build.
//!
//! And long runs at a constant depth (10^6 steps at 1000 queued messages, taking the
//! oldest, the newest or a random one) in which the engine's heap must stop growing.

mod model;

use std::collections::VecDeque;

use model::walk::{each_seed, Bytes, Opts, Walk};
use model::Rng;
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

fn walk(cfg: Config, odd_held: bool) -> Walk {
    let opts = Opts {
        // Messages with held bytes other than their length: the budgets are unlimited
        // (the model counts lengths) and bytes are checked against the walk's own sum.
        bytes: if odd_held { Bytes::Walk } else { Bytes::Model },
        pressure: !odd_held,
        held_api: true,
        ..Opts::FULL
    };
    Walk::new(cfg, opts)
}

fn held_of(w: &Walk, r: &mut Rng, len: usize) -> usize {
    if w.opts.bytes == Bytes::Walk && r.chance(15) {
        r.below(2 * len as u64 + 2) as usize
    } else {
        len
    }
}

/// A sequenced source `SEQ_BASE..SEQ_BASE + SEQ_SRCS` sends a message.
fn send(w: &mut Walk, r: &mut Rng, comm: u32, tag: u64) {
    let s = r.below(u64::from(SEQ_SRCS)) as u32;
    let len = 1 + r.below(16) as usize;
    let held = held_of(w, r, len);
    w.send(Envelope::new(comm, SEQ_BASE + s, tag), len, held);
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
            let held = held_of(w, r, len);
            w.arrive_held(Envelope::new(c, s, t), len, held);
        }
        7 => {
            let (c, _, t) = key(r);
            send(w, r, c, t);
        }
        8 | 9 => {
            let s = r.below(u64::from(SEQ_SRCS)) as u32;
            let pick = r.below(4) as usize;
            w.deliver(SEQ_BASE + s, pick);
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
                let held = held_of(w, r, len);
                w.arrive_held(Envelope::new(c, s, t), len, held);
            }
            let takes = n * (5 + r.below(5)) / 10;
            for _ in 0..takes {
                let n = w.m.unexp.len().max(1) as u64;
                w.take_at(r.below(n) as usize);
                if r.chance(30) {
                    let (c, s, t) = key(r);
                    w.arrive_held(Envelope::new(c, s, t), 1, 1);
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
                w.arrive_held(Envelope::new(c, s, t), 2, 2);
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
            w.cancel_where(&format!("comm {c}"), |s| s.comm == c);
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
    let mut w = walk(cfg, odd_held);
    if seed % 3 != 2 {
        // Once a wildcard kind is built the log is freed and queued messages carry
        // arrival stamps (`Engine::drop_log`): renumbered at a small bound here, so
        // that renumberings fall between any two steps.
        w.e.wrap_stamps_at(2 + (seed % 40) as u32);
    }
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
                let mut w = walk(Config::default(), false);
                // `cap` messages (positions and slots 0..cap): the log is full (its
                // capacity doubles from 4).
                for i in 0..cap {
                    w.arrive_held(Envelope::new(0, 1, 7 + 100 * (i as u64)), 1, 1);
                }
                // Keep the last `keep`, take the others from the end down to position
                // 0, whose slot is then the first reused.
                for i in (0..cap - keep).rev() {
                    w.post(RecvSpec::exact(0, 1, 7 + 100 * (i as u64)));
                }
                // The first arrival compacts the log and reuses slot 0.
                for j in 0..3 {
                    w.arrive_held(Envelope::new(0, 1, 7), 1, 1);
                    w.arrive_held(Envelope::new(0, 2, 7 + j), 1, 1);
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
        let mut w = walk(Config::default().eager_wildcard_lists(eager), false);
        let mut r = rng(7 + u64::from(eager));
        for round in 0..200u64 {
            for i in 0..20 {
                w.arrive_held(Envelope::new(0, (i % 3) as u32, i % 5), 1, 1);
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
                _ => None,
            };
            for i in 0..5 {
                w.arrive_held(Envelope::new(0, 1, 3 + i), 1, 1);
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
    let mut w = walk(Config::default(), false);
    let mut r = rng(99);
    for i in 0..5000u64 {
        w.arrive_held(Envelope::new(1, (i % 7) as u32, i), 1, 1);
    }
    // Down to 3 queued, taken anywhere.
    while w.m.unexp.len() > 3 {
        let i = r.below(w.m.unexp.len() as u64) as usize;
        w.take_at(i);
    }
    let warm = w.e.heap_bytes();
    for i in 0..20_000u64 {
        w.arrive_held(Envelope::new(1, 2, 10_000 + i), 1, 1);
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

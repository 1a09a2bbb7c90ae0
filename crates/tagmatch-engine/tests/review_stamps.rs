//! Review of 729c7f3 ("memory after the first single-wildcard receive at most 64 B per
//! entry"): the arrival log freed after a wildcard kind's build (`Engine::drop_log`),
//! queued messages then carrying arrival stamps (`stamp_arrival`), the log put back by
//! a radix sort of the stamps for a later build (`restore_log`, `sort_by_stamp`), the
//! stamps renumbered at their end (`Engine::wrap_stamps_at` for tests) and the log kept
//! while the message slab is outsized; the dense arrays trimmed after a build
//! (`Dense::begin_bulk` / `end_bulk`, since de83736 `Dense::trim_grown`); small hash
//! tables held to 7/8 (`index::fits`).
//!
//! Every walk runs engine and reference model side by side (`model::walk::Walk`, every
//! outcome compared, depths, bytes and pressure checked after each operation):
//! claims (mprobe) held across an emptied queue and renumberings, purges, cancels,
//! sequenced deliveries, reservations in the middle of a walk, eager wildcard lists,
//! bursts that leave the slab outsized and queues that grow back into proportion, stamps
//! whose live range spans a byte boundary of the radix sort, keys past an array trimmed
//! after a build, and queues of a few hashed keys (tables of 2..16 buckets at 7/8, with
//! the tombstones of deferred removals). Heap checks: periodic rebuilds (with kept and
//! freed logs) reach a steady heap; `Engine::reserve`'s promise after a wildcard receive.
//!
//! Two tests failed on 729c7f3 and de83736 and pass since the fix that followed this
//! review (see their documentation):
//! `Engine::wrap_stamps_at` called while the log is kept and the (comm) lists are built
//! corrupts the (comm) lists, and exact traffic within a reservation allocates the
//! arrival log again after a wildcard receive whose build kept the log.

mod model;

use model::walk::{Bytes, Opts, Walk};
use model::Rng;
use tagmatch_engine::*;

/// A source rank past the dense arrays (its lists are in the hash indexes).
const BIG_SRC: u32 = 1 << 20;
/// A tag past the dense arrays.
const BIG_TAG: u64 = 1 << 40;
/// Sequenced sources (`Walk::send` / `Walk::deliver`) are `SEQ_BASE..SEQ_BASE + 2`.
const SEQ_BASE: u32 = 40;
const COMMS: u32 = 3;

/// This file's stream for `seed`.
fn rng(seed: u64) -> Rng {
    Rng(seed.wrapping_mul(0xA076_1D64_78BD_642F) ^ 0xE703_7ED1_A0B4_28DB | 1)
}

/// A key: small and large sources and tags, and now and then a tag in the hundreds (an
/// array grown by a doubling during a build, then trimmed).
fn key(r: &mut Rng) -> Envelope {
    let comm = r.below(u64::from(COMMS)) as u32;
    let src = if r.chance(8) {
        BIG_SRC + r.below(2) as u32
    } else {
        r.below(6) as u32
    };
    let tag = match r.below(20) {
        0 | 1 => BIG_TAG + r.below(2),
        2 => 100 + r.below(900),
        _ => r.below(8),
    };
    Envelope::new(comm, src, tag)
}

/// A wildcard spec of one of the kinds in `kinds` (bit 0: ANY_TAG, bit 1: ANY_SOURCE,
/// bit 2: both, bit 3: a general mask) for `m`'s key.
fn wild_for(r: &mut Rng, kinds: u64, m: &Envelope) -> RecvSpec {
    let mut pick = r.below(4);
    while kinds & (1 << pick) == 0 {
        pick = (pick + 1) % 4;
    }
    match pick {
        0 => RecvSpec::new(m.comm, Some(m.src), None),
        1 => RecvSpec::new(m.comm, None, Some(m.tag)),
        2 => RecvSpec::new(m.comm, None, None),
        _ => RecvSpec::masked(m.comm, Source::Any, m.tag, 1),
    }
}

/// A queued message's envelope (or a fresh key when none is queued).
fn some_queued(w: &Walk, r: &mut Rng) -> Envelope {
    if w.m.unexp.is_empty() {
        key(r)
    } else {
        w.m.unexp[r.below(w.m.unexp.len() as u64) as usize].env
    }
}

/// One step of a period whose wildcard receives use `kinds` (0: none).
fn step(w: &mut Walk, r: &mut Rng, kinds: u64) {
    match r.below(24) {
        0..=4 => {
            let e = key(r);
            w.arrive(e, 1 + r.below(8) as usize);
        }
        5 => {
            let e = key(r);
            w.send(
                Envelope::new(e.comm, SEQ_BASE + r.below(2) as u32, e.tag),
                2,
                2,
            );
        }
        6 => {
            let s = SEQ_BASE + r.below(2) as u32;
            w.deliver(s, r.below(4) as usize);
        }
        7..=10 => {
            let n = w.m.unexp.len().max(1) as u64;
            w.take_at(r.below(n) as usize);
        }
        11..=13 if kinds != 0 => {
            let m = some_queued(w, r);
            let s = wild_for(r, kinds, &m);
            w.post(s);
        }
        14 if kinds != 0 => {
            let m = some_queued(w, r);
            let s = wild_for(r, kinds, &m);
            w.probe(s);
        }
        15 => {
            let m = some_queued(w, r);
            let s = if kinds != 0 && r.chance(60) {
                wild_for(r, kinds, &m)
            } else {
                RecvSpec::exact(m.comm, m.src, m.tag)
            };
            w.mprobe(s);
        }
        16 => w.mrecv(r.below(64) as usize),
        17 => w.cancel(r.below(64) as usize),
        18 => {
            // A receive that waits (a key no message has yet).
            let e = key(r);
            let s = if kinds != 0 && r.chance(50) {
                wild_for(r, kinds, &e)
            } else {
                RecvSpec::exact(e.comm, e.src, e.tag)
            };
            w.post(s);
        }
        19 if r.chance(25) => {
            let c = r.below(u64::from(COMMS)) as u32;
            w.cancel_where(&format!("comm {c}"), |s| s.comm == c);
        }
        20 if r.chance(15) => {
            let src = match r.below(3) {
                0 => BIG_SRC,
                1 => SEQ_BASE + r.below(2) as u32,
                _ => r.below(6) as u32,
            };
            w.purge_peer(src);
        }
        21 if r.chance(10) => {
            let c = r.below(u64::from(COMMS)) as u32;
            w.purge_comm(c);
        }
        22 if r.chance(20) => {
            // A reservation in the middle of the walk (log kept or freed).
            let n = r.below(400) as usize;
            w.e.reserve(r.below(50) as usize, n);
            w.check("reserve");
        }
        23 if kinds != 0 => w.witness(r),
        _ => {
            let e = key(r);
            w.arrive(e, 1);
        }
    }
}

/// Periods of a queue filled, taken from anywhere and by wildcard receives of kinds that
/// change from period to period (kinds built, kept, forgotten and built again from
/// stamps), with claims kept across periods, bursts that leave the slab outsized, and
/// queues drained to empty (stamps restart) or left with a residue.
fn stamp_walk(seed: u64, cfg: Config, wrap: u32, periods: usize) {
    let mut r = rng(seed);
    let opts = if cfg.claims_count {
        Opts::FULL
    } else {
        // Claims leave the byte count: compared with the walk's own sums.
        Opts {
            bytes: Bytes::Walk,
            pressure: false,
            ..Opts::FULL
        }
    };
    let mut w = Walk::new(cfg, opts);
    w.e.wrap_stamps_at(wrap);
    for period in 0..periods {
        let kinds = match r.below(8) {
            0 | 1 => 0,
            2 => 1,
            3 => 2,
            4 => 4,
            5 => 3,
            6 => 8 | r.below(8),
            _ => 15,
        };
        let fill = if r.chance(8) {
            300 + r.below(500)
        } else {
            r.below(60)
        };
        for _ in 0..fill {
            let e = key(&mut r);
            w.arrive(e, 1);
        }
        let steps = 20 + r.below(120);
        for _ in 0..steps {
            step(&mut w, &mut r, kinds);
        }
        match r.below(4) {
            0 => w.drain_exact(),
            1 => {
                // Down to a few (the slab stays at its high-water mark).
                while w.m.unexp.len() > 3 {
                    let i = r.below(w.m.unexp.len() as u64) as usize;
                    w.take_at(i);
                }
            }
            _ => {}
        }
        if period % 7 == 6 {
            // Pending receives do not pile up.
            w.cancel_where("all", |_| true);
        }
    }
    w.witness(&mut r);
    w.cancel_where("all", |_| true);
    w.drain_any(COMMS);
    w.finish(&[0, 1, 2]);
}

fn walk_cfg() -> Config {
    Config::default().reorder_window(8).initial_seq(0)
}

/// Lazy lists, stamps renumbered every few arrivals up to never; claims counted or not.
#[test]
fn stamped_walks_with_claims_purges_deliveries_and_reservations() {
    for seed in 0..60u64 {
        let wrap = [2, 3, 7, 33, 200, u32::MAX][(seed % 6) as usize];
        stamp_walk(seed, walk_cfg().claims_count(seed % 4 != 3), wrap, 40);
    }
}

/// The same walks with `Config::eager_wildcard_lists` (every kind kept from the start:
/// no build, no log, no stamps) and with small budgets (refused arrivals and posts).
#[test]
fn stamped_walks_eager_and_at_small_budgets() {
    for seed in 100..112u64 {
        stamp_walk(seed, walk_cfg().eager_wildcard_lists(true), 5, 20);
    }
    for seed in 200..212u64 {
        let cfg = walk_cfg().max_messages(120).max_posted(60);
        stamp_walk(seed, cfg, [2, 9, u32::MAX][(seed % 3) as usize], 20);
    }
}

/// Claims (mprobe) made before the queue empties stay claimed while the next arrivals
/// restart their stamps from 0, while renumberings (every 5 arrivals) and builds put
/// the log back without them, and are received afterwards; the queue's arrival order
/// holds through each kind.
#[test]
fn claims_across_an_emptied_queue_restarted_and_renumbered_stamps() {
    let mut w = Walk::new(walk_cfg(), Opts::FULL);
    w.e.wrap_stamps_at(5);
    let mut r = rng(7);
    for i in 0..12u64 {
        w.arrive(Envelope::new(0, (i % 3) as u32, i % 4), 1);
    }
    // Built (ANY_TAG), log freed.
    assert!(w.mprobe(RecvSpec::new(0, Some(1), None)).is_some());
    assert!(w.mprobe(RecvSpec::new(0, None, Some(2))).is_some());
    assert!(w.mprobe(RecvSpec::exact(0, 0, 0)).is_some());
    // Empty: three claims left.
    w.drain_exact();
    assert_eq!(w.e.counters().claimed_depth, 3);
    for round in 0..6u64 {
        for i in 0..9u64 {
            w.arrive(
                Envelope::new(round as u32 % 2, (i % 4) as u32, (i + round) % 5),
                1,
            );
        }
        w.witness(&mut r);
        let m = some_queued(&w, &mut r);
        let kinds = 1 << (round % 3);
        let s = wild_for(&mut r, kinds, &m);
        w.mprobe(s);
        if round % 2 == 1 {
            w.mrecv(0);
        }
        w.take_at(4);
        if round % 3 == 2 {
            w.drain_exact();
        }
    }
    w.witness(&mut r);
    w.drain_any(2);
    w.finish(&[0, 1]);
}

/// A burst leaves the slab much larger than the queue: a build then keeps the log
/// (log mode again, compactions included) until the queue grows back into proportion,
/// when a build frees it again; arrival order holds through every kind.
#[test]
fn log_kept_while_outsized_then_freed_when_the_queue_grows_back() {
    let mut r = rng(11);
    let mut w = Walk::new(walk_cfg(), Opts::FULL);
    for _ in 0..2000 {
        let e = key(&mut r);
        w.arrive(e, 1);
    }
    // In proportion: built, log freed.
    w.probe(RecvSpec::new(1, None, Some(3)));
    while w.m.unexp.len() > 6 {
        let i = r.below(w.m.unexp.len() as u64) as usize;
        w.take_at(i);
    }
    // Outsized: the ANY_TAG build puts the log back and keeps it.
    w.probe(RecvSpec::new(2, Some(1), None));
    for _ in 0..3000 {
        let e = key(&mut r);
        w.arrive(e, 1);
        if r.chance(40) {
            let i = r.below(w.m.unexp.len() as u64) as usize;
            w.take_at(i);
        }
    }
    // Over 1000 queued again: the (comm) build frees the log.
    assert!(w.m.unexp.len() > 1000, "{}", w.m.unexp.len());
    w.witness(&mut r);
    for _ in 0..500 {
        let e = key(&mut r);
        w.arrive(e, 1);
        let i = r.below(w.m.unexp.len() as u64) as usize;
        w.take_at(i);
    }
    w.witness(&mut r);
    w.drain_any(COMMS);
    w.check("end");
}

/// The radix sort of `restore_log` over many keys (more than its 64-key cut-over) whose
/// live stamps span 2^16 (three of its byte passes run, the top one skipped): a queue
/// of about 300 messages taken at random (the slab's slot order scrambled against the
/// arrival order) while 66,000 messages pass through; then each kind built from the
/// stamps in turn, every one checked against the model's arrival order.
#[test]
fn radix_restore_over_stamps_spanning_a_byte_boundary() {
    let mut r = rng(3);
    let opts = Opts {
        check_each: false,
        ..Opts::FULL
    };
    let mut w = Walk::new(walk_cfg(), opts);
    let key2 = |r: &mut Rng| Envelope::new(r.below(2) as u32, r.below(7) as u32, r.below(11));
    for _ in 0..300 {
        let e = key2(&mut r);
        w.arrive(e, 1);
    }
    // ANY_SOURCE: the (comm, tag) kind built, the log freed.
    w.probe(RecvSpec::new(0, None, Some(4)));
    for _ in 0..66_000 {
        let e = key2(&mut r);
        w.arrive(e, 1);
        let i = r.below(w.m.unexp.len() as u64) as usize;
        w.take_at(i);
    }
    w.check("churn");
    // ANY_TAG: the log put back from stamps around 2^16.
    for s in 0..7 {
        w.probe(RecvSpec::new(1, Some(s), None));
        w.probe(RecvSpec::new(0, Some(s), None));
    }
    for _ in 0..2000 {
        let e = key2(&mut r);
        w.arrive(e, 1);
        let i = r.below(w.m.unexp.len() as u64) as usize;
        w.take_at(i);
    }
    // ANY_SOURCE+ANY_TAG: put back again; then the queue taken in arrival order.
    w.drain_any(2);
    w.check("end");
}

/// After a build trims an array to its last list, keys past the new end (inside the
/// doubling the build had grown) are uncovered again: receives posted there wait and
/// are matched by later arrivals in posting order; arrivals there are linked into the
/// kept kind and found by the next receives; a later build grows the array again.
#[test]
fn keys_past_an_array_trimmed_after_a_build() {
    let mut w = Walk::new(walk_cfg(), Opts::FULL);
    let mut r = rng(5);
    for t in [0u64, 3, 200, 700, 5] {
        for s in 0..3 {
            w.arrive(Envelope::new(0, s, t), 1);
        }
    }
    // ANY_SOURCE: the (comm, tag) array of comm 0 grown to 1024 slots, trimmed to 701.
    w.post(RecvSpec::new(0, None, Some(3)));
    // Pending ANY_SOURCE receives past the trimmed end, and exact ones.
    for t in [701u64, 702, 900, 1023, 1024, 1500, 701] {
        w.post(RecvSpec::new(0, None, Some(t)));
        w.post(RecvSpec::exact(0, 1, t));
    }
    for t in [1023u64, 701, 1500, 701, 900, 2000, 702, 1024, 4000] {
        for s in 0..2 {
            w.arrive(Envelope::new(0, s, t), 1);
        }
    }
    w.witness(&mut r);
    // An ANY_TAG build (the (comm, src) arrays), then more keys around both ends.
    w.probe(RecvSpec::new(0, Some(1), None));
    for i in 0..200u64 {
        w.arrive(Envelope::new(0, (i % 5) as u32, 650 + 7 * i), 1);
        if i % 3 == 0 {
            let n = w.m.unexp.len() as u64;
            w.take_at(r.below(n) as usize);
        }
        if i % 5 == 0 {
            w.post(RecvSpec::new(0, None, Some(700 + 11 * i)));
        }
    }
    w.witness(&mut r);
    w.cancel_where("all", |_| true);
    w.drain_any(1);
    w.check("end");
}

/// Queues of a few keys that all live in the hash indexes (large sources and tags):
/// tables of 2..16 buckets held to 7/8, the (comm, src, tag) table with the tombstones
/// of the removals wildcard receives defer (`Walk` defers them at every depth), posted
/// receives of every kind in small tables too.
#[test]
fn small_hashed_queues_at_seven_eighths_with_tombstones() {
    for seed in 0..80u64 {
        let mut r = rng(1000 + seed);
        let mut w = Walk::new(walk_cfg(), Opts::FULL);
        if seed % 2 == 0 {
            w.e.wrap_stamps_at(3);
        }
        let nkeys = 2 + seed % 14;
        let hkey = |r: &mut Rng| {
            let k = r.below(nkeys);
            Envelope::new(
                (k % 2) as u32,
                BIG_SRC + (k % 5) as u32,
                BIG_TAG + (k / 2) % 4 + 16 * (k % 3),
            )
        };
        for _ in 0..600 {
            match r.below(12) {
                0..=3 => {
                    let e = hkey(&mut r);
                    w.arrive(e, 1);
                }
                4 | 5 => {
                    let m = hkey(&mut r);
                    let m = if w.m.unexp.is_empty() {
                        m
                    } else {
                        w.m.unexp[r.below(w.m.unexp.len() as u64) as usize].env
                    };
                    let s = wild_for(&mut r, 7, &m);
                    w.post(s);
                }
                6 => {
                    let n = w.m.unexp.len().max(1) as u64;
                    w.take_at(r.below(n) as usize);
                }
                7 => {
                    let e = hkey(&mut r);
                    let s = if r.chance(50) {
                        wild_for(&mut r, 7, &e)
                    } else {
                        RecvSpec::exact(e.comm, e.src, e.tag)
                    };
                    w.post(s);
                }
                8 => w.cancel(r.below(8) as usize),
                9 => {
                    let m = hkey(&mut r);
                    let s = wild_for(&mut r, 7, &m);
                    w.mprobe(s);
                }
                10 => w.mrecv(r.below(8) as usize),
                _ => w.witness(&mut r),
            }
        }
        w.cancel_where("all", |_| true);
        w.drain_any(2);
        w.finish(&[0, 1]);
    }
}

/// Periodic programs whose wildcard kind alternates (each period's kind was forgotten:
/// built again from the stamps, the log put back and freed), at depths that leave the
/// slab in proportion (log freed) or outsized (log kept), with tags past the arrays'
/// ends: after a few cycles the heap is the same at the same point of every cycle (it
/// creeps for the first five, as it did before 729c7f3, then stays).
#[test]
fn periodic_rebuilds_reach_a_steady_heap() {
    let mut e: Engine<u32, u32> = Engine::new(Config::default());
    let depths = [900u32, 300, 1200, 40, 700];
    let env_of = |i: u32, top: u32| Envelope::new(i % 2, i % 13, u64::from((i * 7) % top));
    let mut cycles = Vec::new();
    for cycle in 0..9 {
        let mut row = Vec::new();
        for (p, &depth) in depths.iter().enumerate() {
            let top = 50 + 400 * (p as u32 % 3);
            for i in 0..depth {
                e.arrive(env_of(i, top), 1, i).unwrap();
            }
            // One wildcard kind a period, alternating: ANY_TAG, ANY_SOURCE.
            let spec = if p % 2 == 0 {
                RecvSpec::new(1, Some(3), None)
            } else {
                RecvSpec::new(0, None, Some(14))
            };
            let wild = match e.post(spec, 0) {
                Ok(Posted::Matched(m)) => m.msg,
                _ => panic!("cycle {cycle} period {p}: {spec:?}"),
            };
            row.push(e.heap_bytes());
            // Drained by exact receives in arrival order: the queue empties.
            for i in (0..depth).filter(|&i| i != wild) {
                let env = env_of(i, top);
                let s = RecvSpec::exact(env.comm, env.src, env.tag);
                match e.post(s, 0) {
                    Ok(Posted::Matched(m)) => assert_eq!(m.msg, i, "cycle {cycle}"),
                    _ => panic!("cycle {cycle} period {p}: message {i} lost"),
                }
            }
            assert_eq!(e.counters().unexpected_depth, 0);
            row.push(e.heap_bytes());
        }
        cycles.push(row);
    }
    assert!(
        cycles[5..].iter().all(|c| *c == cycles[5]),
        "heap in each cycle: {cycles:?}"
    );
}

/// The first single-wildcard receive gives the log's 4 bytes a message back (the
/// receive's kind needs one list head here: one tag), and so does each later build of
/// another kind (the log put back for the build, then freed again); the arrival order
/// holds through each.
#[test]
fn wildcard_builds_give_the_log_back() {
    let n = 5000u32;
    let mut e: Engine<u32, u32> = Engine::new(Config::default());
    for i in 0..n {
        e.arrive(Envelope::new(0, i % 8, 7), 1, i).unwrap();
    }
    let before = e.heap_bytes();
    let specs = [
        (RecvSpec::new(0, None, Some(7)), 0),
        (RecvSpec::new(0, Some(3), None), 3),
        (RecvSpec::new(0, None, None), 0),
    ];
    for (spec, first) in specs {
        assert_eq!(e.probe(&spec).map(|p| *p.msg), Some(first), "{spec:?}");
        let after = e.heap_bytes();
        assert!(
            after + 3 * n as usize <= before,
            "{spec:?}: {before} bytes before the first wildcard receive, {after} after"
        );
    }
    for i in 0..n {
        match e.post(RecvSpec::new(0, None, None), 0) {
            Ok(Posted::Matched(m)) => assert_eq!(m.msg, i),
            _ => panic!("message {i} lost"),
        }
    }
}

/// `Engine::wrap_stamps_at` while the log is kept (a past burst left the slab
/// outsized) and the (comm) lists are built, with the next stamp (stale, from before
/// the log was put back) past the new end: the hook calls `restore_log` regardless of
/// the mode, which reads the (comm) lists' `prev` words as stamps and overwrites them
/// with log positions, and `drop_log` then marks the engine stamp-less while the
/// (comm) lists are kept. The next arrival linked into the (comm) list follows the
/// overwritten tail pointer: "engine invariant: slot 1 is occupied" (a panic), or
/// wrong matches. Failed on 729c7f3 and de83736 (a test-hook defect: production stamps
/// end at 2^32 - 1, and the hook was the only caller of `restore_log` not guarded by
/// the mode); the hook now acts only while stamps are in use.
#[test]
fn wrap_hook_while_the_log_is_kept_and_comm_lists_are_built() {
    let mut w = Walk::new(Config::default(), Opts::FULL);
    for i in 0..20u64 {
        w.arrive(Envelope::new(0, (i % 3) as u32, i % 5), 1);
    }
    // First single-wildcard receive: built, log freed, stamps from 20.
    w.probe(RecvSpec::new(0, None, Some(1)));
    for i in 0..600u64 {
        w.arrive(Envelope::new(0, (i % 3) as u32, i % 5), 1);
    }
    // Down to 8 queued (never empty: stamps keep counting), slab 620 slots.
    while w.m.unexp.len() > 8 {
        w.take_at(0);
    }
    // (comm) build: the log is put back; the slab is outsized, so it is not freed
    // again, and the (comm) lists take over the messages' (comm) pairs.
    w.probe(RecvSpec::new(0, None, None));
    w.e.wrap_stamps_at(16);
    let mut r = rng(1);
    for i in 0..40u64 {
        w.arrive(Envelope::new(0, (i % 3) as u32, i % 5), 1);
        let n = w.m.unexp.len() as u64;
        w.take_at(r.below(n) as usize);
        w.witness(&mut r);
    }
    w.drain_any(1);
    w.check("end");
}

/// `Engine::reserve(posted, unexpected)`: "exact matching up to that depth allocates
/// nothing" (`review_log::reserve_covers_the_arrival_log`; before 729c7f3 the log's
/// capacity never shrank). Here a wildcard receive frees the reserved log; a later
/// build, while a burst's slab is outsized, puts it back sized to the queue of the
/// moment and keeps it; the exact traffic of the following periods, within the
/// reservation, then grows it again (heap +4 bytes a message). Failed on 729c7f3 and
/// de83736 (passes on 7ecbf2b, before the log was freed); a kept log now gets the
/// reserved room (`Engine::log_reserved`).
#[test]
fn reserve_holds_after_a_wildcard_receive_and_a_kept_log() {
    let n = 1000u64;
    let mut e: Engine<u32, u32> = Engine::new(Config::default());
    e.reserve(0, n as usize);
    for i in 0..200u64 {
        e.arrive(Envelope::new(0, (i % 4) as u32, i), 1, 0).unwrap();
    }
    // The first build (ANY_SOURCE): in proportion, the log is freed.
    assert!(e.probe(&RecvSpec::new(0, None, Some(5))).is_some());
    for i in 0..190u64 {
        let got = e.post(RecvSpec::exact(0, (i % 4) as u32, i), 0);
        assert!(matches!(got, Ok(Posted::Matched(_))));
    }
    // The second (ANY_TAG), 10 queued in a slab of 200: the log is put back and kept.
    assert!(e.probe(&RecvSpec::new(0, Some(2), None)).is_some());
    for i in 190..200u64 {
        let got = e.post(RecvSpec::exact(0, (i % 4) as u32, i), 0);
        assert!(matches!(got, Ok(Posted::Matched(_))));
    }
    // Two periods without wildcards: the kinds are forgotten.
    for round in 0..2u64 {
        e.arrive(Envelope::new(0, 1, 5000 + round), 1, 0).unwrap();
        let got = e.post(RecvSpec::exact(0, 1, 5000 + round), 0);
        assert!(matches!(got, Ok(Posted::Matched(_))));
    }
    let before = e.heap_bytes();
    for round in 0..3u64 {
        for i in 0..n - 1 {
            e.arrive(Envelope::new(0, 1, 10_000 + i), 1, 0).unwrap();
        }
        for i in 0..n - 1 {
            let got = e.post(RecvSpec::exact(0, 1, 10_000 + i), 0);
            assert!(matches!(got, Ok(Posted::Matched(_))));
        }
        assert_eq!(
            e.heap_bytes(),
            before,
            "round {round}: exact traffic within the reservation grew the heap"
        );
    }
}

/// The walks' accounting with held bytes other than the length (`arrive_held`) over
/// builds from stamps: bytes compared with the walk's own sums.
#[test]
fn stamped_walk_with_held_bytes() {
    let mut r = rng(77);
    let opts = Opts {
        bytes: Bytes::Walk,
        pressure: false,
        held_api: true,
        ..Opts::FULL
    };
    let mut w = Walk::new(walk_cfg(), opts);
    w.e.wrap_stamps_at(4);
    for period in 0..30u64 {
        for _ in 0..r.below(40) {
            let e = key(&mut r);
            let held = r.below(5) as usize;
            w.arrive_held(e, 3, held);
        }
        let kinds = 1 << (period % 3);
        for _ in 0..30 {
            let m = some_queued(&w, &mut r);
            match r.below(4) {
                0 => {
                    let s = wild_for(&mut r, kinds, &m);
                    w.post(s);
                }
                1 => {
                    let n = w.m.unexp.len().max(1) as u64;
                    w.take_at(r.below(n) as usize);
                }
                2 => {
                    let s = wild_for(&mut r, kinds, &m);
                    w.mprobe(s);
                }
                _ => w.mrecv(0),
            }
        }
        if period % 3 == 0 {
            w.drain_exact();
        }
    }
    w.cancel_where("all", |_| true);
    w.drain_any(COMMS);
    w.finish(&[]);
}

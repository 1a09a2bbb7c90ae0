//! Review of the lazy (comm, src, tag) lists of the queued messages (dropped after runs
//! of wildcard receives, `Engine::drop_exact_unexp`; built again by an exact receive,
//! probe or mprobe, `Engine::build_exact`, or answered by a short walk of a kept
//! wildcard list, `Engine::gone_find`), aimed at the transitions: drops while claims
//! exist, purges while dropped then a rebuild, sequenced deliveries out of order while
//! dropped, the eager configuration, cancels of receives whose heads were kept through
//! a drop (the index's `retain`), masked receives while dropped, queues emptied by
//! purges or claims while dropped, `reserve` while dropped, and held bytes. Every
//! operation is compared with the reference model (`Walk`); the scenarios are also run
//! with `Config::eager_wildcard_lists` (never dropped) and their hit / miss counters
//! compared with the lazy run's.
//!
//! A drop needs a run of wildcard receives, each taking a message alone on a hashed
//! (comm, src, tag) list, as long as a quarter of the queue (at least 32): the
//! scenarios fill queues of distinct hashed keys (tags from 70,000, or communicators
//! other than 0) and run ANY_SOURCE / ANY_TAG / ANY_SOURCE+ANY_TAG receives on them.

mod model;

use model::walk::{each_seed, Bytes, Opts, Walk};
use model::{Out, Rng};
use tagmatch_engine::*;

const BIG: u64 = 70_000;

fn cfg() -> Config {
    Config::default().max_messages(1 << 20).max_posted(1 << 20)
}

/// `n` messages of distinct hashed keys on `comm`, sources `0..srcs`, tags from `base`.
fn fill(w: &mut Walk, comm: u32, n: u64, srcs: u32, base: u64) {
    for i in 0..n {
        w.arrive(
            Envelope::new(comm, (i % u64::from(srcs)) as u32, base + i),
            1,
        );
    }
}

/// `n` wildcard receives of `kind` (0: ANY_SOURCE with the tag, 1: ANY_TAG with the
/// source, 2: both) of the earliest queued message of `comm` (each takes it: a run that
/// drops the lists of a queue of distinct keys).
fn wild_run(w: &mut Walk, comm: u32, n: usize, kind: u32) {
    for _ in 0..n {
        let Some(m) = w.m.unexp.iter().find(|m| m.env.comm == comm).cloned() else {
            return;
        };
        let spec = match kind {
            0 => RecvSpec::new(comm, None, Some(m.env.tag)),
            1 => RecvSpec::new(comm, Some(m.env.src), None),
            _ => RecvSpec::new(comm, None, None),
        };
        w.post(spec);
    }
}

/// Runs `f` on a walk of the lazy configuration and of the eager one: both against
/// the model, then their hits and misses compared.
fn both(opts: Opts, f: impl Fn(&mut Walk)) {
    let mut lazy = Walk::new(cfg(), opts);
    f(&mut lazy);
    let mut eager = Walk::new(cfg().eager_wildcard_lists(true), opts);
    f(&mut eager);
    let (a, b) = (lazy.e.counters(), eager.e.counters());
    assert_eq!(
        (a.hits, a.misses, a.cancelled, a.rejected_backpressure),
        (b.hits, b.misses, b.cancelled, b.rejected_backpressure),
        "hits/misses/cancelled/rejected, lazy vs eager"
    );
}

/// Claims taken before the run and during it survive the drop; received after it,
/// and their keys queued again, they are neither found nor duplicated; the queue
/// emptied down to the claims while dropped gives the lists back at the next arrival.
#[test]
fn claims_across_a_drop() {
    both(Opts::FULL, |w| {
        fill(w, 1, 300, 5, BIG);
        // Claims before the run (exact and wildcard), of keys with a second message.
        for i in [3u64, 50, 120] {
            w.arrive(Envelope::new(1, (i % 5) as u32, BIG + i), 2);
        }
        w.mprobe(RecvSpec::exact(1, 3, BIG + 3));
        w.mprobe(RecvSpec::new(1, Some(0), None));
        wild_run(w, 1, 100, 0);
        // Claims while dropped: wildcard, then exact (walk or rebuild).
        w.mprobe(RecvSpec::new(1, None, Some(BIG + 200)));
        w.mprobe(RecvSpec::new(1, None, None));
        w.mprobe(RecvSpec::exact(1, 0, BIG + 120));
        w.mprobe(RecvSpec::exact(1, 0, BIG + 120));
        w.mprobe(RecvSpec::exact(1, 0, BIG + 120));
        w.mrecv(0);
        wild_run(w, 1, 150, 1);
        w.mrecv(1);
        // The claimed keys again.
        w.arrive(Envelope::new(1, 3, BIG + 3), 1);
        w.arrive(Envelope::new(1, 0, BIG + 120), 1);
        w.post(RecvSpec::exact(1, 3, BIG + 3));
        w.post(RecvSpec::exact(1, 0, BIG + 120));
        w.post(RecvSpec::exact(1, 0, BIG + 120));
        // Emptied down to the claims by wildcard mprobes (dropped or not), then refilled.
        fill(w, 1, 200, 3, 2 * BIG);
        wild_run(w, 1, 80, 2);
        while w.mprobe(RecvSpec::new(1, None, None)).is_some() {}
        w.arrive(Envelope::new(1, 2, 5), 1);
        w.arrive(Envelope::new(1, 2, 5), 1);
        w.post(RecvSpec::exact(1, 2, 5));
        w.probe(RecvSpec::exact(1, 2, 5));
        while !w.claims.is_empty() {
            w.mrecv(0);
        }
        w.finish(&[1]);
    });
}

/// Purges while dropped (of a peer: builds the (comm, src) and (comm) kinds; of a
/// communicator), then exact receives that rebuild from the (comm) lists or walk.
#[test]
fn purges_while_dropped_then_rebuild() {
    for variant in 0..4 {
        both(Opts::FULL, |w| {
            fill(w, 2, 400, 6, BIG);
            fill(w, 3, 50, 6, BIG);
            wild_run(w, 2, 150, variant % 3);
            match variant {
                0 => {
                    w.purge_peer(4);
                }
                1 => {
                    w.purge_comm(3);
                }
                2 => {
                    w.purge_peer(0);
                    w.purge_comm(2);
                }
                _ => {
                    w.purge_comm(2);
                    w.purge_comm(3);
                }
            }
            // Arrivals, some of purged keys, then exact receives of queued keys (deep:
            // rebuild) and probes.
            for i in 0..40u64 {
                w.arrive(Envelope::new(2, (i % 6) as u32, BIG + 390 - i), 1);
            }
            let keys: Vec<Envelope> = w.m.unexp.iter().rev().take(30).map(|m| m.env).collect();
            for e in keys {
                w.probe(RecvSpec::exact(e.comm, e.src, e.tag));
                w.post(RecvSpec::exact(e.comm, e.src, e.tag));
            }
            wild_run(w, 2, 200, 2);
            w.purge_peer(1);
            w.drain_exact();
            w.finish(&[2, 3]);
        });
    }
}

/// Sequenced deliveries out of order while dropped: held messages released by the gap's
/// filler into the dropped lists, matched by exact receives posted before and after.
#[test]
fn out_of_order_deliveries_while_dropped() {
    each_seed("deliver", 0..20, |seed| {
        let mut r = Rng::new(seed);
        let mut w = Walk::new(cfg().reorder_window(16).initial_seq(0), Opts::FULL);
        for i in 0..300u64 {
            w.send(Envelope::new(1, (i % 4) as u32, BIG + i), 1, 1);
        }
        for s in 0..4 {
            while w.deliver(s, 0).is_some() {}
        }
        // Pending exact receives, kept through the drop.
        for i in 0..10u64 {
            w.post(RecvSpec::exact(1, (i % 4) as u32, 3 * BIG + i));
        }
        wild_run(&mut w, 1, 120, r.below(3) as u32);
        for i in 0..60u64 {
            let tag = if r.chance(30) {
                3 * BIG + r.below(10)
            } else {
                BIG + r.below(300)
            };
            w.send(Envelope::new(1, (i % 4) as u32, tag), 1, 1);
        }
        for _ in 0..200 {
            let s = r.below(4) as u32;
            match r.below(6) {
                0..=2 => {
                    w.deliver(s, r.below_usize(8));
                }
                3 => {
                    if let Some(m) = w.m.unexp.get(r.below_usize(w.m.unexp.len().max(1))) {
                        let e = m.env;
                        w.post(RecvSpec::exact(e.comm, e.src, e.tag));
                    }
                }
                4 => wild_run(&mut w, 1, 5, r.below(3) as u32),
                _ => {
                    w.post(RecvSpec::exact(1, s, 3 * BIG + r.below(10)));
                }
            }
        }
        w.finish(&[1]);
    });
}

/// Exact receives posted before the drop (several per key, on many keys, so that the
/// drop's `retain` keeps and moves their heads), then cancelled in every order while
/// dropped, matched by arrivals, and rebuilt around.
#[test]
fn cancels_of_receives_kept_through_a_drop() {
    each_seed("cancels", 0..24, |seed| {
        let mut r = Rng::new(seed);
        let opts = Opts {
            swap_remove: seed % 2 == 0,
            ..Opts::FULL
        };
        let mut w = Walk::new(cfg(), opts);
        // Posted exact receives on keys that collide with the messages' buckets
        // (same communicator, nearby tags), 1-3 per key.
        for i in 0..150u64 {
            for _ in 0..1 + r.below(3) {
                w.post(RecvSpec::exact(1, (i % 3) as u32, BIG + 10_000 + i));
            }
        }
        fill(&mut w, 1, 400, 3, BIG);
        wild_run(&mut w, 1, 200, r.below(3) as u32);
        for _ in 0..300 {
            match r.below(7) {
                0 | 1 => w.cancel(r.below_usize(1 << 20)),
                2 => {
                    let i = r.below(150);
                    w.arrive(Envelope::new(1, (i % 3) as u32, BIG + 10_000 + i), 1);
                }
                3 => {
                    let i = r.below(150);
                    w.post(RecvSpec::exact(1, (i % 3) as u32, BIG + 10_000 + i));
                }
                4 => wild_run(&mut w, 1, 1 + r.below_usize(40), r.below(3) as u32),
                5 => {
                    let i = r.below(600);
                    w.arrive(Envelope::new(1, (i % 3) as u32, BIG + i), 1);
                }
                _ => {
                    if !w.m.unexp.is_empty() {
                        let e = w.m.unexp[r.below_usize(w.m.unexp.len())].env;
                        w.post(RecvSpec::exact(e.comm, e.src, e.tag));
                    }
                }
            }
        }
        while !w.handles.is_empty() {
            w.cancel(0);
        }
        w.finish(&[1]);
    });
}

/// Masked receives (and probes) while dropped, of every source selection, between
/// wildcard runs and exact receives; and the queue emptied by them.
#[test]
fn masked_receives_while_dropped() {
    both(Opts::FULL, |w| {
        fill(w, 1, 300, 4, BIG);
        wild_run(w, 1, 100, 0);
        for i in 0..60u64 {
            let m = &w.m.unexp[(i as usize * 7) % w.m.unexp.len()];
            let (src, tag) = (m.env.src, m.env.tag);
            let spec = match i % 3 {
                0 => RecvSpec::masked(1, Source::Any, tag & 7, 7),
                1 => RecvSpec::masked(1, Source::Rank(src), tag, u64::MAX),
                _ => RecvSpec::masked(1, Source::Rank(src), tag & 1, 1),
            };
            if i % 5 == 0 {
                w.probe(spec);
            }
            w.post(spec);
            if i % 9 == 0 {
                w.post(RecvSpec::exact(1, src, tag));
            }
        }
        // Masked receives pending while dropped, met by arrivals (stored or matched).
        w.post(RecvSpec::masked(1, Source::Rank(2), 3 * BIG, !0xF));
        w.arrive(Envelope::new(1, 2, 3 * BIG + 5), 1);
        w.arrive(Envelope::new(1, 2, 3 * BIG + 5), 1);
        w.post(RecvSpec::exact(1, 2, 3 * BIG + 5));
        while w.post(RecvSpec::masked(1, Source::Any, 0, 0)) != Out::Pending(w.next) {}
        w.arrive(Envelope::new(1, 1, BIG), 1);
        w.post(RecvSpec::exact(1, 1, BIG));
        w.finish(&[1]);
    });
}

/// Queues emptied while dropped by purges (of the only communicator) and by claims,
/// then refilled: the lists are back, a second drop, a rebuild.
#[test]
fn queues_emptied_while_dropped() {
    for how in 0..3 {
        both(Opts::FULL, |w| {
            for round in 0..3u64 {
                fill(w, 1, 250, 4, BIG + 1000 * round);
                w.post(RecvSpec::exact(1, 9, 5 * BIG + round));
                wild_run(w, 1, 100, (round % 3) as u32);
                match how {
                    0 => {
                        w.purge_comm(1);
                    }
                    1 => {
                        for s in 0..4 {
                            w.purge_peer(s);
                        }
                    }
                    _ => while w.mprobe(RecvSpec::new(1, None, None)).is_some() {},
                }
                // The first arrivals after the empty queue: one of a key claimed or
                // purged, one for the pending receive (purged or not).
                w.arrive(Envelope::new(1, 0, BIG + 1000 * round), 1);
                w.arrive(Envelope::new(1, 9, 5 * BIG + round), 1);
                w.post(RecvSpec::exact(1, 0, BIG + 1000 * round));
                w.probe(RecvSpec::exact(1, 9, 5 * BIG + round));
                w.mrecv(0);
            }
            w.finish(&[1]);
        });
    }
}

/// `reserve` while dropped (the index grows with only posted heads in it; the arrays
/// refuse growth below the reserved count), then rebuilds, arrivals and drops again.
#[test]
fn reserve_while_dropped() {
    for at in [64usize, 1 << 12, 1 << 16] {
        both(Opts::FULL, |w| {
            for i in 0..20u64 {
                w.post(RecvSpec::exact(0, 7, BIG * 4 + i));
                w.post(RecvSpec::exact(0, 7, i));
            }
            fill(w, 0, 300, 5, BIG);
            fill(w, 0, 40, 5, 0);
            wild_run(w, 0, 150, 0);
            w.e.reserve(at, at);
            for i in 0..20u64 {
                w.arrive(Envelope::new(0, 7, BIG * 4 + i), 1);
                w.arrive(Envelope::new(0, (i % 5) as u32, i), 1);
                w.arrive(Envelope::new(0, 8, i), 1);
            }
            w.e.reserve(2 * at, 0);
            for i in 0..20u64 {
                w.post(RecvSpec::exact(0, 8, i));
                w.post(RecvSpec::exact(0, (i % 5) as u32, BIG + 200 + i));
            }
            wild_run(w, 0, 200, 1);
            w.e.reserve(at, 4 * at);
            w.drain_exact();
            w.finish(&[0]);
        });
    }
}

/// Held bytes other than the length through a drop and a rebuild (`arrive_held`; the
/// exact receives then go the general path).
#[test]
fn held_bytes_across_drops() {
    let opts = Opts {
        bytes: Bytes::Walk,
        held_api: true,
        ..Opts::FULL
    };
    each_seed("held", 0..16, |seed| {
        let mut r = Rng::new(seed);
        let mut w = Walk::new(cfg(), opts);
        for i in 0..300u64 {
            let len = 1 + r.below_usize(64);
            w.arrive_held(
                Envelope::new(1, (i % 4) as u32, BIG + i),
                len,
                r.below_usize(3 * len),
            );
        }
        for _ in 0..200 {
            match r.below(5) {
                0 | 1 => wild_run(&mut w, 1, r.below_usize(120), r.below(3) as u32),
                2 => {
                    let len = 1 + r.below_usize(64);
                    let e = Envelope::new(1, r.below(4) as u32, BIG + r.below(400));
                    w.arrive_held(e, len, r.below_usize(3 * len));
                }
                3 => {
                    if !w.m.unexp.is_empty() {
                        let e = w.m.unexp[r.below_usize(w.m.unexp.len())].env;
                        if r.chance(50) {
                            w.post(RecvSpec::exact(e.comm, e.src, e.tag));
                        } else if w.mprobe(RecvSpec::exact(e.comm, e.src, e.tag)).is_some() {
                            w.mrecv(0);
                        }
                    }
                }
                _ => {
                    w.post(RecvSpec::exact(1, r.below(4) as u32, BIG + r.below(400)));
                }
            }
        }
        w.finish(&[1]);
    });
}

/// The hint and the arrays while dropped: keys of communicator 0 with small tags (the
/// dense arrays, both orientations) mixed with hashed ones, through drops, rebuilds,
/// and array growths while dropped.
#[test]
fn dense_and_hashed_keys_through_drops() {
    each_seed("dense", 0..30, |seed| {
        let mut r = Rng::new(seed);
        let mut w = Walk::new(cfg(), Opts::FULL);
        let key = |r: &mut Rng| {
            let src = r.below(40) as u32;
            let tag = if r.chance(50) {
                r.below(3000)
            } else {
                BIG + r.below(1 << 16)
            };
            Envelope::new(0, src, tag)
        };
        for _ in 0..400 {
            let e = key(&mut r);
            w.arrive(e, 1);
        }
        for _ in 0..150 {
            match r.below(10) {
                0..=3 => {
                    let n = r.below_usize(150);
                    let kind = r.below(3) as u32;
                    for _ in 0..n {
                        if w.m.unexp.is_empty() {
                            break;
                        }
                        let m = w.m.unexp[r.below_usize(w.m.unexp.len())].env;
                        let spec = match kind {
                            0 => RecvSpec::new(0, None, Some(m.tag)),
                            1 => RecvSpec::new(0, Some(m.src), None),
                            _ => RecvSpec::new(0, None, None),
                        };
                        w.post(spec);
                    }
                }
                4 | 5 => {
                    for _ in 0..r.below(60) {
                        let e = key(&mut r);
                        w.arrive(e, 1);
                    }
                }
                6 => {
                    let e = key(&mut r);
                    w.post(RecvSpec::exact(e.comm, e.src, e.tag));
                }
                7 => {
                    if !w.m.unexp.is_empty() {
                        let e = w.m.unexp[r.below_usize(w.m.unexp.len())].env;
                        w.post(RecvSpec::exact(e.comm, e.src, e.tag));
                    }
                }
                8 => w.cancel(r.below_usize(16)),
                _ => {
                    let mut pending = w.pending_exact();
                    pending.truncate(6);
                    for e in pending {
                        w.arrive(e, 1);
                    }
                }
            }
        }
        w.finish(&[0]);
    });
}

/// A random mix of everything above, lazy and eager.
#[test]
fn mixed_walk_around_drops() {
    each_seed("mixed", 0..40, |seed| {
        for eager in [false, true] {
            let mut r = Rng::new(seed);
            let opts = Opts {
                bytes: Bytes::Walk,
                held_api: true,
                swap_remove: seed % 3 == 0,
                ..Opts::FULL
            };
            let c = cfg()
                .reorder_window(8)
                .initial_seq(0)
                .eager_wildcard_lists(eager);
            let mut w = Walk::new(c, opts);
            let key = |r: &mut Rng| {
                let comm = [0, 1, 5][r.below_usize(3)];
                let src = r.below(5) as u32;
                let tag = if r.chance(85) {
                    BIG + r.below(1 << 18)
                } else {
                    r.below(32)
                };
                Envelope::new(comm, src, tag)
            };
            for _ in 0..150 {
                match r.below(18) {
                    0..=2 => {
                        for _ in 0..r.below(150) {
                            let e = if r.chance(80) || w.m.unexp.is_empty() {
                                key(&mut r)
                            } else {
                                w.m.unexp[r.below_usize(w.m.unexp.len())].env
                            };
                            let len = 1 + r.below_usize(16);
                            w.arrive_held(e, len, r.below_usize(2 * len));
                        }
                    }
                    3..=6 => {
                        let comm = [0, 1, 5][r.below_usize(3)];
                        wild_run(&mut w, comm, r.below_usize(150), r.below(3) as u32);
                    }
                    7 => {
                        if !w.m.unexp.is_empty() {
                            let e = w.m.unexp[r.below_usize(w.m.unexp.len())].env;
                            exact_op(&mut w, e, r.below(3));
                        }
                    }
                    8 => {
                        let e = key(&mut r);
                        w.post(RecvSpec::exact(e.comm, e.src, e.tag));
                    }
                    9 => w.mrecv(r.below_usize(8)),
                    10 => w.cancel(r.below_usize(8)),
                    11 => {
                        if r.chance(50) {
                            w.purge_peer(r.below(5) as u32);
                        } else {
                            w.purge_comm([0, 1, 5][r.below_usize(3)]);
                        }
                    }
                    12 => {
                        let e = key(&mut r);
                        w.post(RecvSpec::masked(e.comm, Source::Any, e.tag & 3, 3));
                    }
                    13 => {
                        for _ in 0..r.below(20) {
                            let e = key(&mut r);
                            w.send(e, 1, 1);
                        }
                    }
                    14 => {
                        for _ in 0..r.below(20) {
                            let s = r.below(5) as u32;
                            w.deliver(s, r.below_usize(8));
                        }
                    }
                    15 => {
                        let n = r.below_usize(1 << 14);
                        w.e.reserve(n, n);
                    }
                    16 => {
                        let e = key(&mut r);
                        w.mprobe(RecvSpec::new(e.comm, None, None));
                    }
                    _ => {
                        let mut pending = w.pending_exact();
                        pending.truncate(8);
                        for e in pending {
                            w.arrive_held(e, 2, 2);
                        }
                    }
                }
            }
            w.finish(&[0, 1, 5]);
        }
    });
}

/// Rebuilds forced (the kept wildcard lists of the key longer than the walk an exact
/// receive may make: two sources, ANY_TAG runs), from the (comm) lists or from the
/// arrival log / stamps, after every kind of change made while dropped: claims,
/// purges, arrivals of queued keys (several messages per key, taken in arrival
/// order), sequenced deliveries, pending receives, cancels.
#[test]
fn rebuilds_after_changes_while_dropped() {
    each_seed("rebuild", 0..48, |seed| {
        let mut r = Rng::new(seed);
        let mut w = Walk::new(cfg().reorder_window(8).initial_seq(0), Opts::FULL);
        let kinds = [1u32, 1, 2, 0];
        for round in 0..4u64 {
            let base = BIG + 10_000 * round;
            fill(&mut w, 1, 500 + r.below(300), 2, base);
            fill(&mut w, 4, 50, 2, base);
            for _ in 0..r.below(4) {
                w.post(RecvSpec::exact(
                    1,
                    r.below(2) as u32,
                    base + 5000 + r.below(4),
                ));
            }
            let kind = kinds[r.below_usize(4)];
            wild_run(&mut w, 1, 200 + r.below_usize(100), kind);
            // Changes while (probably) dropped.
            for _ in 0..r.below(12) {
                match r.below(8) {
                    0 => {
                        w.mprobe(RecvSpec::new(1, Some(r.below(2) as u32), None));
                    }
                    1 => {
                        w.purge_peer(2 + r.below(2) as u32);
                    }
                    2 => {
                        w.purge_comm(4);
                    }
                    3 => {
                        // A queued key again (deep in its lists).
                        let n = w.m.unexp.len();
                        if n > 0 {
                            let e = w.m.unexp[n - 1 - r.below_usize(n.min(20))].env;
                            w.arrive(e, 1);
                        }
                    }
                    4 => {
                        let e = Envelope::new(1, 2 + r.below(2) as u32, base + r.below(50));
                        w.send(e, 1, 1);
                        w.send(e, 1, 1);
                        w.deliver(e.src, 1);
                    }
                    5 => {
                        w.arrive(
                            Envelope::new(1, r.below(2) as u32, base + 5000 + r.below(4)),
                            1,
                        );
                    }
                    6 => w.cancel(r.below_usize(4)),
                    _ => w.mrecv(r.below_usize(4)),
                }
            }
            // The rebuild: an exact receive, probe or mprobe of a message deep in the
            // kept lists, then the rest of the queue in arrival order.
            let n = w.m.unexp.len();
            if n > 0 {
                let e = w.m.unexp[n - 1 - r.below_usize(n.min(40))].env;
                exact_op(&mut w, e, r.below(3));
            }
            if r.chance(50) {
                w.drain_exact();
            } else {
                wild_run(&mut w, 1, 300, kinds[r.below_usize(4)]);
            }
        }
        w.finish(&[1, 4]);
    });
}

/// An exact operation on key `e`: a receive (`which` 0), a probe (1) or an mprobe (else).
fn exact_op(w: &mut Walk, e: Envelope, which: u64) {
    let spec = RecvSpec::exact(e.comm, e.src, e.tag);
    match which {
        0 => {
            w.post(spec);
        }
        1 => {
            w.probe(spec);
        }
        _ => {
            w.mprobe(spec);
        }
    }
}

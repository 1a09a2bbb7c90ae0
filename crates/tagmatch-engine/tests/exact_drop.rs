//! The (comm, src, tag) lists of the queued messages dropped after runs of wildcard
//! receives (`Engine::drop_exact_unexp`) and built again by the first operation that
//! needs them (`Engine::build_exact`), against the reference model.
//!
//! A drop needs a run of wildcard receives, each taking a message alone on a hashed
//! (comm, src, tag) list, as long as a quarter of the queue (at least 32) with no exact
//! receive, probe or mprobe in between. So these walks fill deep queues of mostly
//! distinct keys, then run wildcard receives of every kind, and meanwhile (dropped or
//! not) do everything else: arrivals (new keys, and again keys already queued, so
//! that a rebuilt list holds several messages in arrival order), exact receives,
//! probes and mprobes (each rebuilds), receives that stay pending through a drop and
//! are matched while the lists are dropped, masked receives, claims, cancels, purges,
//! and queues emptied while dropped. Every outcome and the queues after each step
//! are compared with the model's.

mod model;

use model::walk::{each_seed, Opts, Walk};
use model::Rng;
use tagmatch_engine::*;

/// A key: communicators 0, 1 and 7; sources 0..6; tags mostly past the dense arrays
/// (hashed lists, which are the ones a wildcard receive's removal defers and counts),
/// some small.
fn key(r: &mut Rng) -> Envelope {
    let comm = [0, 1, 7][r.below(3) as usize];
    let src = r.below(6) as u32;
    let tag = if r.chance(80) {
        70_000 + r.below(1 << 20)
    } else {
        r.below(40)
    };
    Envelope::new(comm, src, tag)
}

/// A key already queued (the model's queue), or a fresh one.
fn queued_key(w: &Walk, r: &mut Rng) -> Envelope {
    match w.m.unexp.len() {
        0 => key(r),
        n => w.m.unexp[r.below(n as u64) as usize].env,
    }
}

fn run(seed: u64, steps: usize) {
    let mut r = Rng::new(seed);
    let mut w = Walk::new(
        Config::default().max_messages(1 << 20).max_posted(1 << 20),
        Opts::FULL,
    );
    for _ in 0..steps {
        match r.below(16) {
            // A burst of arrivals, mostly distinct keys.
            0..=2 => {
                for _ in 0..r.below(160) {
                    let e = if r.chance(85) {
                        key(&mut r)
                    } else {
                        queued_key(&w, &mut r)
                    };
                    w.arrive(e, 1 + r.below(8) as usize);
                }
            }
            // A run of wildcard receives of one kind (long enough to drop the lists
            // of a queue of up to a few hundred), on queued keys.
            3..=6 => {
                let kind = r.below(3);
                for _ in 0..r.below(200) {
                    let e = queued_key(&w, &mut r);
                    let spec = match kind {
                        0 => RecvSpec::new(e.comm, None, Some(e.tag)),
                        1 => RecvSpec::new(e.comm, Some(e.src), None),
                        _ => RecvSpec::new(e.comm, None, None),
                    };
                    w.post(spec);
                }
            }
            // Exact receives: of a queued key (a rebuild when dropped), or pending.
            7 => {
                let e = queued_key(&w, &mut r);
                w.post(RecvSpec::exact(e.comm, e.src, e.tag));
            }
            8 => {
                let e = key(&mut r);
                w.post(RecvSpec::exact(e.comm, e.src, e.tag));
            }
            // Probes and claims, exact (rebuild) or wildcard (no rebuild).
            9 => {
                let e = queued_key(&w, &mut r);
                if r.chance(50) {
                    w.probe(RecvSpec::exact(e.comm, e.src, e.tag));
                } else {
                    w.probe(RecvSpec::new(e.comm, None, Some(e.tag)));
                }
            }
            10 => {
                let e = queued_key(&w, &mut r);
                let spec = if r.chance(50) {
                    RecvSpec::exact(e.comm, e.src, e.tag)
                } else {
                    RecvSpec::new(e.comm, Some(e.src), None)
                };
                w.mprobe(spec);
                if r.chance(50) {
                    w.mrecv(r.below_usize(8));
                }
            }
            // Masked receives (scanned), cancels, purges.
            11 => {
                let e = queued_key(&w, &mut r);
                w.post(RecvSpec::masked(e.comm, Source::Any, e.tag & 3, 3));
            }
            12 => w.cancel(r.below_usize(8)),
            13 => {
                if r.chance(50) {
                    w.purge_peer(r.below(6) as u32);
                } else {
                    w.purge_comm([0, 1, 7][r.below(3) as usize]);
                }
            }
            // The queue emptied by wildcard receives (dropped lists stay dropped until
            // the next arrival finds the queue empty).
            14 => {
                for c in [0, 1, 7] {
                    while w.m.unexp.iter().any(|m| m.env.comm == c) {
                        w.post(RecvSpec::new(c, None, None));
                    }
                }
            }
            // Messages for the pending receives (exact ones matched through the heads
            // kept through a drop).
            _ => {
                let mut pending = w.pending_exact();
                pending.truncate(8);
                for e in pending {
                    w.arrive(e, 2);
                }
            }
        }
    }
    w.finish(&[0, 1, 7]);
}

#[test]
fn dropped_and_rebuilt_exact_lists_follow_the_model() {
    each_seed("exact drop", 0..60, |seed| run(seed, 120));
}

/// The shape of `unexpected-any-source`, scaled down, with an exact receive in the
/// middle of the run: the drop, the rebuild it forces (of a queue whose messages are
/// all alone on their lists), a second drop after twice the run, and the queue drained
/// by exact receives in arrival order.
#[test]
fn a_run_of_any_source_receives_with_an_exact_one_in_the_middle() {
    let mut w = Walk::new(Config::default(), Opts::FULL);
    let n = 2_000u64;
    for i in 0..n {
        w.arrive(Envelope::new(0, i as u32, 100_000 + i), 1);
    }
    for i in (n / 2..n).rev() {
        w.post(RecvSpec::new(0, None, Some(100_000 + i)));
        if i == 3 * n / 4 {
            w.post(RecvSpec::exact(0, 7, 100_007));
        }
    }
    // Arrivals while (again) dropped, some on queued keys.
    for i in 0..200u64 {
        w.arrive(Envelope::new(0, (i % 10) as u32, 100_000 + i % 20), 1);
    }
    w.drain_exact();
    w.check("end");
}

//! The exact post's inlined path (`Engine::post_exact`, branch `exact2`) against the
//! reference model in `model/`: it takes the message itself only while no wildcard list
//! of unexpected messages is kept and no message is stored with held bytes other than
//! its length; otherwise it hands over to the general keyed path, and a receive that
//! finds no message is queued out of line from the same probe (growing the exact index
//! there when it is full). Seeded random walks mix:
//!
//! - exact receives for keys with queued messages (the inlined take), without (queued:
//!   a new list, or behind earlier receives of the same key) and for many distinct keys
//!   in a row (the index grows on the queueing path);
//! - messages stored by `arrive_held` with held bytes other than their length, so the
//!   exact receives alternate between the inlined path and the general one: the held
//!   bytes the engine counts are checked against the walk's own sum after every step;
//! - wildcard receives that build the wildcard lists (exact receives then take the
//!   general path) and drains that empty the queue (the lists are forgotten and the
//!   inlined path is used again).

mod model;

use model::walk::{each_seed, Bytes, Opts, Walk};
use model::{Model, Rng};
use tagmatch_engine::*;

/// An engine of the default configuration beside a model without budgets: the held
/// bytes the engine counts are checked against the walk's own sum after every step.
fn walk() -> Walk {
    let opts = Opts {
        bytes: Bytes::Walk,
        pressure: false,
        held_api: true,
        ..Opts::FULL
    };
    Walk::with_model(
        Config::default(),
        Model::new(1, usize::MAX, usize::MAX, usize::MAX, 0),
        opts,
    )
}

fn run(seed: u64, steps: usize) {
    let mut r = Rng::new(seed);
    let mut w = walk();
    for _ in 0..steps {
        let (c, s, t) = (r.below(2) as u32, r.below(3) as u32, r.below(4));
        match r.below(16) {
            0..=4 => {
                let len = 1 + r.below(64) as usize;
                w.arrive_held(Envelope::new(c, s, t), len, len);
            }
            5 => {
                // Held bytes other than the length: the exact receives of any key take
                // the general path until this message is gone.
                let len = 1 + r.below(64) as usize;
                let held = r.below(8) as usize;
                w.arrive_held(Envelope::new(c, s, t), len, held);
            }
            6..=9 => {
                // A key with queued messages, when there is one (its earliest).
                let pick = w.m.unexp.get(r.below(8) as usize).map(|m| m.env);
                let env = pick.unwrap_or(Envelope::new(c, s, t));
                w.post(RecvSpec::exact(env.comm, env.src, env.tag));
            }
            10 | 11 => {
                w.post(RecvSpec::exact(c, s, t));
            }
            12 => {
                // Many distinct keys in a row, none queued: the exact index grows on
                // the queueing path; then some of them are sent.
                let base = 1000 + r.below(1 << 20);
                let n = 1 + r.below(40);
                for i in 0..n {
                    w.post(RecvSpec::exact(c, s, base + i));
                }
                for i in 0..n {
                    if r.below(2) == 0 {
                        w.arrive_held(Envelope::new(c, s, base + i), 1, 1);
                    }
                }
            }
            13 => {
                let spec = match r.below(3) {
                    0 => RecvSpec::new(c, Some(s), None),
                    1 => RecvSpec::new(c, None, Some(t)),
                    _ => RecvSpec::new(c, None, None),
                };
                w.post(spec);
            }
            14 => {
                // Drain the queue by exact receives, latest first: the wildcard lists
                // are forgotten when it empties.
                while let Some(m) = w.m.unexp.last().map(|m| m.env) {
                    w.post(RecvSpec::exact(m.comm, m.src, m.tag));
                }
            }
            _ => {
                // Satisfy pending receives, so that their lists do not only grow.
                if let Some((spec, _)) = w.m.posted.first().cloned() {
                    if let (Source::Rank(s), TagSel::Exact(t)) = (spec.src, spec.tag) {
                        w.arrive_held(Envelope::new(spec.comm, s, t), 2, 2);
                    }
                }
            }
        }
    }
    // Everything still queued is taken, in arrival order per key, by exact receives.
    while let Some(m) = w.m.unexp.first().map(|m| m.env) {
        w.post(RecvSpec::exact(m.comm, m.src, m.tag));
    }
    w.check("end");
}

#[test]
fn exact_receives_on_and_off_the_inlined_path_match_the_model() {
    each_seed("inlined path", 0..200, |seed| run(seed, 600));
}

/// The inlined take, then a receive that queues behind earlier ones of its key (the
/// probe's `Ok(posted head)` answer), then held bytes other than the length switching
/// exact receives to the general path and back.
#[test]
fn exact_receive_queues_behind_its_key_and_held_bytes_switch_paths() {
    let mut w = walk();
    let e = Envelope::new(0, 1, 5);
    w.arrive_held(e, 8, 8);
    w.post(RecvSpec::exact(0, 1, 5)); // inlined take
    w.post(RecvSpec::exact(0, 1, 5)); // new list of receives
    w.post(RecvSpec::exact(0, 1, 5)); // behind the first
    w.arrive_held(e, 3, 3);
    w.arrive_held(e, 4, 4);
    w.arrive_held(e, 5, 5); // stored
    w.arrive_held(Envelope::new(0, 1, 6), 100, 7); // held != len: general path from here
    w.arrive_held(e, 6, 6);
    w.post(RecvSpec::exact(0, 1, 5));
    w.post(RecvSpec::exact(0, 1, 6)); // the held message leaves; its 7 bytes with it
    w.post(RecvSpec::exact(0, 1, 5)); // inlined again
    w.check("end");
    assert_eq!(w.e.counters().bytes_held, 0);
    assert_eq!(w.e.counters().unexpected_depth, 0);
}

/// The arrival log (the queued messages in arrival order, kept while no (comm) list
/// is): exact receives leave dead entries behind, which are dropped when the log is
/// full and at most half live. Old messages stay queued across many such compactions
/// (at the log's start and in its middle), then a wildcard receive of every kind takes
/// the queue in arrival order, as the model does; and once the queue stops growing,
/// the engine's heap bytes do too (without the compactions the log would double).
#[test]
fn arrival_log_compactions_keep_the_arrival_order_and_bounded_memory() {
    for (kind, spec) in [
        ("ANY_TAG", RecvSpec::new(0, Some(1), None)),
        ("ANY_SOURCE", RecvSpec::new(0, None, Some(7))),
        ("ANY_SOURCE+ANY_TAG", RecvSpec::new(0, None, None)),
    ] {
        let mut w = walk();
        // Old messages that every wildcard kind matches, at the log's start.
        for _ in 0..3 {
            w.arrive_held(Envelope::new(0, 1, 7), 1, 1);
        }
        let mut warm = 0;
        for round in 0..3000u64 {
            // Two arrive, and are taken by exact receives (latest first); in the first
            // 200 rounds one in 8 rounds keeps one more message queued, which every
            // wildcard kind matches, in the middle of the log.
            let t = 100 + (round % 50);
            w.arrive_held(Envelope::new(0, 1, t), 1, 1);
            if round < 200 && round % 8 == 0 {
                w.arrive_held(Envelope::new(0, 1, 7), 1, 1);
            } else {
                w.arrive_held(Envelope::new(0, 2, 9), 1, 1);
                w.post(RecvSpec::exact(0, 2, 9));
            }
            w.post(RecvSpec::exact(0, 1, t));
            if round == 1000 {
                warm = w.e.heap_bytes();
            }
        }
        assert_eq!(w.m.unexp.len(), 28, "{kind}");
        assert_eq!(w.e.heap_bytes(), warm, "{kind}: heap bytes grew");
        // Every queued message, in arrival order, by the wildcard kind.
        while !w.m.unexp.is_empty() {
            w.post(spec);
        }
        w.check(kind);
    }
}

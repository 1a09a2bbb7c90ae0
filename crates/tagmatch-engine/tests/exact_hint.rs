//! The exact paths' hint (`Engine::exact_hint`: the bucket where the (comm, src, tag)
//! index last started a list, looked at first while the index holds one list) against
//! the reference model. The hint is only a guess, checked at every use; these walks
//! keep the queues shallow, so that the index often holds one list, and make the
//! hinted bucket hold every kind of thing it can hold by then:
//!
//! - the hinted list's head itself, of either side (receive or message);
//! - nothing (the list was taken), or a tombstone, or an entry whose removal is
//!   deferred (wildcard receives taking messages; the walks defer at every depth);
//! - another key's list, moved there by a removal's backward shift, or put there by
//!   a growth of the index (bursts of many keys), or started there later by a path
//!   that does not set the hint;
//! - the other side's list of the same key.
//!
//! Every operation's outcome is compared with the model's (earliest-posted receive,
//! earliest-arrived message), as are the queues after each step.

mod model;

use model::walk::{each_seed, Opts, Walk};
use model::Rng;
use tagmatch_engine::*;

/// One walk of `steps` operations over a small key space (2 communicators, 2 sources,
/// 3 tags) from `seed`.
fn run(seed: u64, steps: usize) {
    let mut r = Rng::new(seed);
    let mut w = Walk::new(Config::default(), Opts::FULL);
    for _ in 0..steps {
        let (c, s, t) = (r.below(2) as u32, r.below(2) as u32, r.below(3));
        match r.below(20) {
            // Exact receives and messages of the small key space: queues of one key
            // (the hinted case), of two, or a receive meeting its message.
            0..=5 => {
                w.arrive(Envelope::new(c, s, t), 1 + r.below(16) as usize);
            }
            6..=11 => {
                w.post(RecvSpec::exact(c, s, t));
            }
            // Cancels: a receive leaves its bucket (empty, or shifted into).
            12 => w.cancel(r.below(8) as usize),
            // Wildcard receives: taking messages, they defer the removals of their
            // exact list heads (and keep wildcard lists, which switch the exact post
            // to its general path until the queue empties).
            13 => {
                let spec = match r.below(3) {
                    0 => RecvSpec::new(c, Some(s), None),
                    1 => RecvSpec::new(c, None, Some(t)),
                    _ => RecvSpec::new(c, None, None),
                };
                w.post(spec);
            }
            // Probes, claims and their receives.
            14 => {
                w.probe(RecvSpec::new(c, None, Some(t)));
            }
            15 => {
                if w.mprobe(RecvSpec::exact(c, s, t)).is_some() {
                    w.mrecv(0);
                }
            }
            // A burst of distinct keys (the index grows, moving every bucket), then most
            // of them taken, in either order, down to a queue of one or none.
            16 => {
                let base = 100 + r.below(1 << 16);
                let n = 2 + r.below(24);
                let posted = r.below(2) == 0;
                for i in 0..n {
                    let e = Envelope::new(c, s, base + i);
                    if posted {
                        w.post(RecvSpec::exact(e.comm, e.src, e.tag));
                    } else {
                        w.arrive(e, 1);
                    }
                }
                let keep = r.below(2);
                let order: Vec<u64> = if r.below(2) == 0 {
                    (keep..n).collect()
                } else {
                    (keep..n).rev().collect()
                };
                for i in order {
                    let e = Envelope::new(c, s, base + i);
                    if posted {
                        w.arrive(e, 1);
                    } else {
                        w.post(RecvSpec::exact(e.comm, e.src, e.tag));
                    }
                }
            }
            // Purges: lists leave the index by another path.
            17 => {
                w.purge_peer(s);
            }
            // Drains: every queued message taken by exact receives (latest first), or
            // every pending exact receive satisfied (earliest first).
            18 => {
                while let Some(m) = w.m.unexp.last().map(|m| m.env) {
                    w.post(RecvSpec::exact(m.comm, m.src, m.tag));
                }
            }
            _ => {
                let pending = w.pending_exact();
                for e in pending {
                    w.arrive(e, 2);
                }
            }
        }
    }
    w.drain_any(2);
    w.check("end");
}

#[test]
fn hinted_exact_matches_follow_the_model() {
    each_seed("exact hint", 0..300, |seed| run(seed, 400));
}

/// A ping-pong on one key, both ways round (receive first, then message first), with
/// a second key's receive or message coming and going: the hinted bucket holds the
/// key's head, then nothing, then the other key's list or the other side's.
#[test]
fn ping_pong_on_one_key_with_a_second_key_coming_and_going() {
    let mut w = Walk::new(Config::default(), Opts::FULL);
    let a = Envelope::new(0, 1, 7);
    let b = Envelope::new(0, 1, 8);
    for round in 0..64u64 {
        // Receive first: queued (the hint), then taken by its message.
        w.post(RecvSpec::exact(a.comm, a.src, a.tag));
        w.arrive(a, 8);
        // Message first: stored (the hint), then taken by its receive.
        w.arrive(a, 8);
        w.post(RecvSpec::exact(a.comm, a.src, a.tag));
        // The other key in the hinted bucket (or beside it), alone, of either side;
        // then `a` of the other side beside it.
        if round % 2 == 0 {
            w.post(RecvSpec::exact(b.comm, b.src, b.tag));
            w.arrive(a, 8); // stored: `b`'s receive does not take it
            w.arrive(b, 8); // takes `b`'s receive
            w.post(RecvSpec::exact(a.comm, a.src, a.tag)); // takes the stored `a`
        } else {
            w.arrive(b, 8);
            w.post(RecvSpec::exact(a.comm, a.src, a.tag)); // queued: `b` is a message
            w.post(RecvSpec::exact(b.comm, b.src, b.tag)); // takes `b`
            w.arrive(a, 8); // takes the queued receive
        }
    }
    w.check("end");
    let c = w.e.counters();
    assert_eq!((c.posted_depth, c.unexpected_depth), (0, 0));
}

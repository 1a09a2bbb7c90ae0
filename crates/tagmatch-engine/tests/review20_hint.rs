//! Review 20: the exact paths' hint (`Engine::exact_hint`, read by `exact_hinted` at
//! the start of `post_exact` and `arrive_exact_only` while the (comm, src, tag) index
//! holds one list) against the reference model, in the states the hint's soundness
//! argument depends on:
//!
//! - keys kept in the hash index (source ranks and tags of 2^16 and more: no dense
//!   array covers them), beside small keys whose lists dense arrays take over from the
//!   index (moving every bucket);
//! - claimed messages (mprobe) of the hinted key left in the message slab, with the
//!   key's later messages queued in the index;
//! - deferred removals (wildcard receives; the walks defer at every depth) naming
//!   vacant message slots, then reused;
//! - held bytes other than the length (`arrive_held` / `deliver_held`), reordering,
//!   general-mask receives, cancels, purges, `reserve`, and index growth and
//!   tombstones;
//! - eager wildcard lists (`post_exact` always general) and claims that count.
//!
//! Every outcome is compared with the model's (earliest-posted receive, earliest-arrived
//! message) after every operation.

mod model;

use model::walk::{each_seed, Bytes, Opts, Walk};
use model::{review_config, Out, Rng};
use tagmatch_engine::*;

/// Large source ranks and tags: their keys always stay in the hash index.
const BIG: u64 = 1 << 20;

fn walk(cfg: Config, held_api: bool) -> Walk {
    let opts = Opts {
        bytes: if held_api { Bytes::Walk } else { Bytes::Model },
        pressure: !held_api,
        held_api,
        ..Opts::FULL
    };
    Walk::new(cfg, opts)
}

/// A key of the small key space: mostly hashed (large source and tag), sometimes small
/// (a dense array may take it, and its neighbours, over from the index).
fn key(r: &mut Rng) -> (u32, u32, u64) {
    let c = r.below(2) as u32;
    if r.chance(20) {
        (c, r.below(2) as u32, r.below(2))
    } else {
        (c, (BIG + r.below(2)) as u32, BIG + r.below(2))
    }
}

fn run(seed: u64, steps: usize, cfg: Config, held_api: bool) {
    let mut r = Rng::new(seed);
    let mut w = walk(cfg, held_api);
    for _ in 0..steps {
        let (c, s, t) = key(&mut r);
        let env = Envelope::new(c, s, t);
        match r.below(24) {
            0..=5 => {
                let len = 1 + r.below(16) as usize;
                if held_api && r.chance(30) {
                    w.arrive_held(env, len, r.below(40) as usize);
                } else {
                    w.arrive(env, len);
                }
            }
            6..=11 => {
                w.post(RecvSpec::exact(c, s, t));
            }
            12 => w.cancel(r.below(8) as usize),
            13 => {
                let spec = match r.below(4) {
                    0 => RecvSpec::new(c, Some(s), None),
                    1 => RecvSpec::new(c, None, Some(t)),
                    2 => RecvSpec::new(c, None, None),
                    // General masks, one of them a full mask (an exact receive through
                    // the general path).
                    _ => match r.below(3) {
                        0 => RecvSpec::masked(c, Source::Rank(s), t, u64::MAX),
                        1 => RecvSpec::masked(c, Source::Rank(s), t, !1),
                        _ => RecvSpec::masked(c, Source::Any, t, 1),
                    },
                };
                w.post(spec);
            }
            14 => {
                w.probe(RecvSpec::exact(c, s, t));
            }
            // Claims left claimed for a while: their slots hold a message of the key,
            // out of every list.
            15 | 16 => {
                w.mprobe(RecvSpec::exact(c, s, t));
            }
            17 => {
                if w.claims.len() > 2 || r.chance(30) {
                    let i = r.below(4) as usize;
                    w.mrecv(i);
                }
            }
            // Reordered delivery of the sequenced sources.
            18 => {
                let len = 1 + r.below(8) as usize;
                w.send(env, len, if held_api { r.below(20) as usize } else { len });
                let src = env.src;
                if r.chance(60) {
                    let pick = r.below(4) as usize;
                    w.deliver(src, pick);
                }
            }
            // A burst of distinct hashed keys (growth), then most of them taken.
            19 => {
                let base = BIG + 100 + r.below(1 << 20);
                let n = 2 + r.below(30);
                let posted = r.chance(50);
                for i in 0..n {
                    if posted {
                        w.post(RecvSpec::exact(c, s, base + i));
                    } else {
                        w.arrive(Envelope::new(c, s, base + i), 1);
                    }
                }
                let keep = r.below(2);
                for i in keep..n {
                    let j = if r.chance(50) { i } else { n - 1 - i + keep };
                    if posted {
                        w.arrive(Envelope::new(c, s, base + j), 1);
                    } else {
                        w.post(RecvSpec::exact(c, s, base + j));
                    }
                }
            }
            20 => {
                if r.chance(50) {
                    w.purge_peer(s);
                } else {
                    w.purge_comm(c);
                }
            }
            21 => {
                // Pre-sizing (a growth or a rebuild without tombstones).
                let n = r.below(200) as usize;
                w.e.reserve(n, n);
                w.check("reserve");
            }
            22 => {
                let tag = t;
                w.cancel_where(
                    "tag",
                    move |sp| matches!(sp.tag, TagSel::Exact(x) if x == tag),
                );
            }
            _ => {
                // Drains down to a queue of one (the hinted case) or none.
                let keep = r.below(2) as usize;
                while w.m.unexp.len() > keep {
                    let m = w.m.unexp[w.m.unexp.len() - 1].env;
                    w.post(RecvSpec::exact(m.comm, m.src, m.tag));
                }
            }
        }
    }
    w.finish(&[0, 1]);
}

#[test]
fn hashed_keys_with_claims_deferrals_and_held_bytes_follow_the_model() {
    each_seed("hint walk", 0..200, |seed| {
        run(seed, 500, review_config(), false)
    });
}

#[test]
fn hashed_keys_with_held_bytes_through_the_held_api_follow_the_model() {
    each_seed("hint walk, held api", 0..150, |seed| {
        run(seed, 500, review_config(), true)
    });
}

#[test]
fn hashed_keys_with_eager_lists_and_counted_claims_follow_the_model() {
    each_seed("hint walk, eager lists", 0..120, |seed| {
        run(
            seed,
            500,
            review_config()
                .eager_wildcard_lists(true)
                .claims_count(true),
            false,
        )
    });
}

/// A claimed message of the hinted key stays in the slab with the key's envelope but
/// is on no list: the hinted bucket then holds the key's next message (or nothing), and
/// an exact receive must take that next message, never the claimed one.
#[test]
fn claimed_head_of_the_hinted_list_is_never_matched_again() {
    let mut w = walk(review_config(), false);
    let k = Envelope::new(0, BIG as u32, BIG);
    for round in 0..50u32 {
        let a = w.arrive(k, 1); // starts the list: the hint
        let b = w.arrive(k, 2);
        let claimed = w.mprobe(RecvSpec::exact(k.comm, k.src, k.tag));
        assert_eq!(Some(Out::Unexpected(claimed.unwrap())), Some(a.clone()));
        // The receive takes the second message, the claimed one stays claimed.
        match w.post(RecvSpec::exact(k.comm, k.src, k.tag)) {
            Out::Match(_, mid) => assert_eq!(Out::Unexpected(mid), b, "round {round}"),
            other => panic!("round {round}: {other:?}"),
        }
        // Nothing of the key is queued: a receive waits, a message takes it.
        assert!(matches!(
            w.post(RecvSpec::exact(k.comm, k.src, k.tag)),
            Out::Pending(_)
        ));
        assert!(matches!(w.arrive(k, 3), Out::Match(..)));
        if round % 2 == 0 {
            w.mrecv(0);
        }
    }
    w.finish(&[0]);
}

/// A wildcard receive takes the only queued message of a hashed key, deferring the
/// removal of its index entry (the bucket names a vacant slot); the next message of
/// the same key may take that very slot. Exact receives and arrivals after it, in
/// either order, must find only what the model finds.
#[test]
fn deferred_entry_whose_slot_is_reused_by_the_same_key() {
    let mut w = walk(review_config(), false);
    let k = Envelope::new(1, BIG as u32 + 1, BIG + 1);
    let other = Envelope::new(1, BIG as u32, BIG);
    for round in 0..40u32 {
        w.arrive(k, 1);
        // Taken by ANY_SOURCE / ANY_TAG / ANY+ANY in turn: the removal is deferred.
        let spec = match round % 3 {
            0 => RecvSpec::new(k.comm, None, Some(k.tag)),
            1 => RecvSpec::new(k.comm, Some(k.src), None),
            _ => RecvSpec::new(k.comm, None, None),
        };
        assert!(matches!(w.post(spec), Out::Match(..)));
        if round % 2 == 0 {
            // The slot is reused by the same key's next message.
            assert!(matches!(w.arrive(k, 2), Out::Unexpected(_)));
            assert!(matches!(
                w.post(RecvSpec::exact(k.comm, k.src, k.tag)),
                Out::Match(..)
            ));
        } else {
            // A receive first (the exact post meets the deferred entry), then another
            // key's message in the reused slot, then the key's message.
            assert!(matches!(
                w.post(RecvSpec::exact(k.comm, k.src, k.tag)),
                Out::Pending(_)
            ));
            assert!(matches!(w.arrive(other, 1), Out::Unexpected(_)));
            assert!(matches!(w.arrive(k, 2), Out::Match(..)));
            assert!(matches!(
                w.post(RecvSpec::exact(other.comm, other.src, other.tag)),
                Out::Match(..)
            ));
        }
    }
    w.finish(&[1]);
    let c = w.e.counters();
    assert_eq!((c.posted_depth, c.unexpected_depth), (0, 0));
}

/// A hashed key's queue of one receive while a dense array takes over the lists of
/// small keys of the same (comm, src) (the index's buckets move), a cancel and a
/// repost: every arrival takes the earliest posted receive of its key.
#[test]
fn hinted_receive_survives_takeover_and_growth_moving_buckets() {
    let mut w = walk(review_config(), false);
    for round in 0..30u64 {
        let k = Envelope::new(0, 5, BIG + round % 3);
        w.post(RecvSpec::exact(k.comm, k.src, k.tag)); // hint
        w.post(RecvSpec::exact(k.comm, k.src, k.tag)); // behind it
                                                       // Small tags of the same (comm, src): lists in the index until an array covers
                                                       // them, then taken over.
        for t in 0..(8 + round) {
            w.arrive(Envelope::new(0, 5, t), 1);
        }
        // Growth: many hashed keys, then gone.
        for t in 0..40 {
            w.post(RecvSpec::exact(1, 7, BIG * 2 + t));
        }
        w.cancel_where("comm 1", |sp| sp.comm == 1);
        // The first receive is the one matched; cancel the other half the time.
        assert!(matches!(w.arrive(k, 4), Out::Match(..)));
        if round % 2 == 0 {
            assert_eq!(w.handles.len(), 1, "the second receive");
            w.cancel(0);
        } else {
            assert!(matches!(w.arrive(k, 4), Out::Match(..)));
        }
        w.drain_exact();
    }
    w.finish(&[0, 1]);
}

//! Adversarial tests of the wildcard lists of unexpected messages built on first use
//! (engine.rs: `built`, `arrivals`, `build_unexp`, `link_unexp_rest`,
//! `unlink_rest_detached`): every state the lazy scheme can be in when a receive, probe,
//! mprobe, purge or arrival meets it, checked against the reference model in `model/`.
//!
//! The states: no wildcard kind built (messages on their (comm, src, tag) list and the
//! arrival-order list only); some of (comm, src), (comm, tag), (comm) built, in every
//! order (the (comm) pair is the arrival list until (comm) is built, and (comm, src) /
//! (comm, tag) built after (comm) are built from the (comm) lists); the kinds forgotten
//! when the queue drains (the reset, at the next stored message), with claimed messages
//! (on no list) held across it; posted wildcard receives of a kind sitting in the same
//! index while that kind's unexpected lists are not built; messages released by the
//! reorder buffer into each state; budget refusals in each state.

mod model;

use model::walk::{Opts, Walk};
use model::{Model, Out};
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use tagmatch_engine::*;

// ------------------------------------------------------------------ helpers

fn env(comm: u32, src: u32, tag: u64) -> Envelope {
    Envelope::new(comm, src, tag)
}

/// The four O(1) kinds of a spec for a message envelope: 0 exact, 1 ANY_TAG,
/// 2 ANY_SOURCE, 3 both.
fn spec_kind(kind: u8, m: &Envelope) -> RecvSpec {
    match kind {
        0 => RecvSpec::exact(m.comm, m.src, m.tag),
        1 => RecvSpec::new(m.comm, Some(m.src), None),
        2 => RecvSpec::new(m.comm, None, Some(m.tag)),
        _ => RecvSpec::new(m.comm, None, None),
    }
}

/// Engine and model side by side; every operation is run on both and compared, and
/// depths, bytes and pressure after each. Receives matched stay in `handles` (a cancel
/// through one must be refused by both).
fn pair() -> Walk {
    with(4, usize::MAX, 1 << 20, 1 << 20)
}

fn with(window: u32, max_bytes: usize, max_messages: usize, max_posted: usize) -> Walk {
    let cfg = Config::default()
        .reorder_window(window)
        .max_bytes(max_bytes)
        .max_messages(max_messages)
        .max_posted(max_posted)
        .initial_seq(0);
    let m = Model::new(window, max_bytes, max_messages, max_posted, 0);
    Walk::with_model(
        cfg,
        m,
        Opts {
            retire: false,
            ..Opts::FULL
        },
    )
}

/// A spread of envelopes over three communicators, four sources and three tags, in an
/// order that interleaves communicators (so each (comm) list is a subsequence of the
/// arrival order, not a prefix).
fn spread(i: u32) -> Envelope {
    env(i % 3, (i * 7 + i / 3) % 4, u64::from((i * 5 + i / 4) % 3))
}

// ------------------------------------------------------------------ targeted tests

/// After a long exact-only phase (no wildcard list built), each wildcard kind asked for
/// first — and then the others, in all six orders — finds the earliest-arrived match
/// for every key: the first build reads the arrival-order list (for (comm) it rewrites
/// the very link pair it walks), later ones read the arrival list or the (comm) lists.
#[test]
fn every_build_order_after_an_exact_only_phase_keeps_arrival_order() {
    let orders = [
        [1, 2, 3],
        [1, 3, 2],
        [2, 1, 3],
        [2, 3, 1],
        [3, 1, 2],
        [3, 2, 1],
    ];
    for order in orders {
        let mut p = pair();
        for i in 0..60 {
            p.arrive(spread(i), 1);
        }
        // Exact receives take a few from the middle first (inner unlinks of the
        // arrival-order list, and its head).
        p.post(spec_kind(0, &spread(17)));
        p.post(spec_kind(0, &spread(0)));
        for (round, &k) in order.iter().enumerate() {
            // Probe every key of kind k (this builds it), then receive a few with it.
            for i in 0..60 {
                p.probe(spec_kind(k, &spread(i)));
            }
            for i in (round as u32 * 5)..(round as u32 * 5 + 5) {
                p.post(spec_kind(k, &spread(i * 3 + 1)));
            }
            // New arrivals are linked into the kinds built so far (and the rest of the
            // arrival-order list while (comm) is not built).
            for i in 60..66 {
                p.arrive(spread(i + round as u32 * 6), 1);
            }
        }
        for k in 0..4 {
            for i in 0..80 {
                p.probe(spec_kind(k, &spread(i)));
            }
        }
        p.drain_exact();
        p.check("drain");
    }
}

/// The arrival-order list is open (its ends are engine fields): exact receives that take
/// its tail (the last arrival, as `unexpected-exact` does), its head and inner messages,
/// with arrivals appended after each removal at the tail, and a queue emptied from the
/// tail down, leave it in arrival order for every wildcard build that walks it.
#[test]
fn exact_receives_at_either_end_of_the_arrival_order_keep_it_for_the_builds() {
    // A distinct (comm, src, tag) per message, so that an exact receive takes exactly
    // the message named; the wildcard kinds still group them by comm and source.
    let uniq = |i: u32| env(i % 3, i % 4, 100 + u64::from(i));
    for k in 1..4 {
        let mut p = pair();
        for i in 0..40 {
            p.arrive(uniq(i), 1);
        }
        let mut next = 40;
        for round in 0..6 {
            // The tail (the last arrival).
            let last = p.m.unexp.last().cloned().map(|m| m.env);
            if let Some(e) = last {
                p.post(spec_kind(0, &e));
            }
            // Two arrivals: the first reuses the freed slot, the second is linked
            // behind it, so both must hang from the new tail.
            p.arrive(uniq(next), 1);
            p.arrive(uniq(next + 1), 1);
            next += 2;
            // The head, then an inner message.
            let first = p.m.unexp.first().cloned().map(|m| m.env);
            if let Some(e) = first {
                p.post(spec_kind(0, &e));
            }
            let inner = p.m.unexp.get(5 + round).cloned().map(|m| m.env);
            if let Some(e) = inner {
                p.post(spec_kind(0, &e));
            }
        }
        // Build kind k from the arrival order (probing every key), then receive every
        // message with kind k: each must come in arrival order within its list.
        for i in 0..next {
            p.probe(spec_kind(k, &uniq(i)));
        }
        for i in 0..next {
            p.post(spec_kind(k, &uniq(i)));
        }
        p.check("wildcard drain");
        assert!(p.m.unexp.is_empty(), "one receive per message ever queued");
        while !p.handles.is_empty() {
            p.cancel(0);
        }
        // Emptied from the tail down: every exact receive takes the last arrival.
        for i in 0..20 {
            p.arrive(uniq(next + i), 1);
        }
        next += 20;
        while let Some(m) = p.m.unexp.last().cloned() {
            p.post(spec_kind(0, &m.env));
        }
        p.check("tail drain");
        // And used again after being emptied.
        for i in 0..10 {
            p.arrive(uniq(next + i), 1);
        }
        p.drain_any(3);
    }
}

/// Claimed messages are on no list: held across several drains (each followed by the
/// reset of the built kinds at the next stored message) and across builds of every kind,
/// no probe, receive or purge sees them, the queue depth excludes them, and the reset
/// fires when the only *queued* message is stored (the claimed ones still in the slab).
#[test]
fn claims_held_across_resets_stay_invisible() {
    let mut p = pair();
    for round in 0..4u32 {
        for i in 0..20 {
            p.arrive(spread(i + round), 8);
        }
        // Claim two by wildcard, one by exact (claims made in different build states).
        p.mprobe(spec_kind(1 + (round % 3) as u8, &spread(round + 3)));
        p.mprobe(spec_kind(0, &spread(round + 5)));
        p.mprobe(spec_kind(3, &spread(round)));
        for k in 0..4 {
            for i in 0..24 {
                p.probe(spec_kind(k, &spread(i)));
            }
        }
        if round % 2 == 0 {
            p.drain_any(3);
        } else {
            p.drain_exact();
        }
        // The queue is empty, claims remain: the next stored message resets the kinds;
        // one arrival on its own, then wildcard probes of every kind.
        assert!(p.e.counters().claimed_depth >= 3);
        p.arrive(env(2, 3, 1), 8);
        for k in 1..4 {
            assert!(p.probe(spec_kind(k, &env(2, 3, 1))).is_some());
        }
        p.purge_peer(3);
        if round == 3 {
            while !p.claims.is_empty() {
                p.mrecv(0);
            }
        }
    }
    p.check("end");
}

/// A reset while a kind's index still holds *posted* receives: the ANY_TAG receive of
/// (0, 1) and the ANY_SOURCE receive of (0, tag 2) stay in the (comm, src) and (comm,
/// tag) indexes across drains and resets; messages of other keys are queued while those
/// kinds are not built, then the kinds are built around the posted entries, and
/// arrivals for the posted keys still find the receives (the invariant that no queued
/// message matches a queued receive).
#[test]
fn posted_wildcards_coexist_with_unbuilt_lists_of_their_kind() {
    let mut p = pair();
    for round in 0..3u32 {
        let a = p.post(RecvSpec::new(0, Some(1), None));
        let b = p.post(RecvSpec::new(0, None, Some(2)));
        let c = p.post(RecvSpec::new(1, None, None));
        assert!(matches!(
            (a, b, c),
            (Out::Pending(_), Out::Pending(_), Out::Pending(_))
        ));
        // Exact-only phase: none of these match the posted wildcards.
        for i in 0..30u32 {
            let e = env(i % 2 * 2, 2 + i % 3, u64::from(i % 2));
            p.arrive(e, 1);
        }
        // Build each kind around the posted entries.
        for k in 1..4 {
            for i in 0..30u32 {
                p.probe(spec_kind(k, &env(i % 2 * 2, 2 + i % 3, u64::from(i % 2))));
            }
        }
        // Arrivals for the posted keys take the posted receives (posting order).
        p.arrive(env(0, 1, 3), 1); // ANY_TAG of (0, 1)
        p.arrive(env(0, 5, 2), 1); // ANY_SOURCE of (0, tag 2)
        p.arrive(env(1, 4, 9), 1); // ANY/ANY of comm 1
        assert_eq!(p.e.counters().posted_depth, 0);
        if round == 1 {
            p.drain_any(3);
        } else {
            p.drain_exact();
        }
    }
}

/// Masked receives and probes read the (comm, src) or (comm) lists: as the first user of
/// those kinds after an exact-only phase, they build them, in both source forms, then a
/// posted masked receive stays pending beside unbuilt lists until a matching arrival.
#[test]
fn masked_receives_build_the_kind_they_scan() {
    for first_any in [false, true] {
        let mut p = pair();
        for i in 0..40 {
            p.arrive(env(i % 2, i % 3, u64::from(i % 8)), 1);
        }
        let (s0, s1) = if first_any {
            (Source::Any, Source::Rank(2))
        } else {
            (Source::Rank(2), Source::Any)
        };
        assert!(p.probe(RecvSpec::masked(0, s0, 4, 4)).is_some());
        p.post(RecvSpec::masked(0, s0, 5, 5));
        p.post(RecvSpec::masked(1, s1, 6, 6));
        p.mprobe(RecvSpec::masked(1, s0, 1, 1));
        p.drain_exact();
        // Pending masked receives, then an exact-only phase that does not match them,
        // then an arrival that does.
        assert_eq!(p.post(RecvSpec::masked(0, s0, 8, 8)), Out::Pending(p.next));
        for i in 0..10u64 {
            p.arrive(env(0, 2, i % 8), 1);
        }
        p.arrive(env(0, 2, 8), 1);
        for k in 0..4 {
            p.probe(spec_kind(k, &env(0, 2, 3)));
        }
        p.drain_any(2);
        while !p.claims.is_empty() {
            p.mrecv(0);
        }
    }
}

/// `purge_peer` and `purge_comm` in every build state (nothing built; each single kind
/// built; all built; just after a drain, before and after the reset), with the
/// messages of the purged peer or communicator spread through the arrival order.
#[test]
fn purges_in_every_build_state() {
    // The wildcard kinds to build before the purge (1 ANY_TAG, 2 ANY_SOURCE, 3 both).
    let states: [&[u8]; 8] = [&[], &[1], &[2], &[3], &[1, 3], &[3, 2], &[2, 1], &[1, 2, 3]];
    for (si, built) in states.iter().enumerate() {
        for purge_comm in [false, true] {
            let mut p = pair();
            for i in 0..45 {
                p.arrive(spread(i), 2);
            }
            p.mprobe(spec_kind(0, &spread(4)));
            for &k in *built {
                p.probe(spec_kind(k, &spread(7)));
            }
            if purge_comm {
                p.purge_comm(si as u32 % 3);
            } else {
                p.purge_peer(si as u32 % 4);
            }
            // Arrivals after the purge, then every kind still finds arrival order.
            for i in 45..55 {
                p.arrive(spread(i), 2);
            }
            for k in 0..4 {
                for i in 0..55 {
                    p.probe(spec_kind(k, &spread(i)));
                }
            }
            // Drain, then purge in the "drained, not reset" state and after the reset.
            p.drain_exact();
            p.purge_peer(1);
            p.purge_comm(2);
            p.arrive(spread(3), 2);
            p.arrive(spread(4), 2);
            p.purge_peer(spread(3).src);
            p.purge_comm(spread(4).comm);
            p.post(spec_kind(3, &spread(5)));
            assert!(!p.claims.is_empty(), "the claim made before the purge");
            p.mrecv(0);
            p.check("end");
        }
    }
}

/// Messages released by the reorder buffer are stored through the same paths: a
/// release of several held messages into an empty queue whose kinds are built (the
/// first released message resets them, the rest join the arrival-order list), and a
/// release into a queue with some kinds built.
#[test]
fn reorder_releases_into_every_build_state() {
    for build_before in [false, true] {
        let mut p = with(8, usize::MAX, 1 << 20, 1 << 20);
        // Build every kind, then drain (built, empty: the next store resets).
        p.arrive(env(0, 9, 0), 1);
        for k in 1..4 {
            p.probe(spec_kind(k, &env(0, 9, 0)));
        }
        p.drain_exact();
        // Source 1 sends seq 0..6, delivered 6, 5, …, 1 (held), then 0 releases all.
        for s in 0..7u32 {
            p.send(env(s % 2, 1, u64::from(s % 3)), 1, 1);
        }
        for _ in 1..7 {
            let last = p.in_flight[&1].len() - 1;
            assert_eq!(p.deliver(1, last), Some(Ok(0)));
        }
        if build_before {
            p.arrive(env(1, 2, 2), 1);
            p.probe(RecvSpec::new(1, Some(2), None));
        }
        assert_eq!(p.deliver(1, 0), Some(Ok(7)));
        p.check("release");
        for k in [3, 2, 1, 0] {
            for s in 0..7 {
                p.probe(spec_kind(k, &env(s % 2, 1, u64::from(s % 3))));
            }
        }
        p.drain_any(2);
    }
}

/// Budget refusals in every build state leave the lists intact: a refused arrival
/// into an empty queue with kinds built does not reset them, a refused arrival into a
/// full queue does not link anything, and the queue then drains in arrival order.
#[test]
fn backpressure_refusals_in_every_build_state() {
    for k in 0..4u8 {
        let mut p = with(4, 40, 6, 1 << 20);
        // Fill to the message budget (6) with an exact-only phase; the 7th is refused.
        for i in 0..6 {
            p.arrive(spread(i), 4);
        }
        assert!(matches!(
            p.arrive(spread(6), 4),
            Out::Rejected(RejectReason::Backpressure, _)
        ));
        p.probe(spec_kind(k, &spread(2)));
        assert!(matches!(
            p.arrive(spread(7), 17),
            Out::Rejected(RejectReason::Backpressure, _)
        ));
        // Byte budget: after one receive 20 of 40 bytes are used; 16 more fit, then 17
        // more do not.
        p.post(spec_kind(k, &spread(3)));
        assert!(matches!(p.arrive(spread(8), 16), Out::Unexpected(_)));
        assert!(matches!(
            p.arrive(spread(9), 17),
            Out::Rejected(RejectReason::Backpressure, _)
        ));
        for j in 0..4 {
            for i in 0..10 {
                p.probe(spec_kind(j, &spread(i)));
            }
        }
        p.drain_any(3);
        // Built and empty; a refused oversized message must not reset or link anything.
        assert!(matches!(
            p.arrive(spread(1), 41),
            Out::Rejected(RejectReason::Backpressure, _)
        ));
        p.arrive(spread(1), 1);
        p.arrive(spread(2), 1);
        for j in 0..4 {
            p.probe(spec_kind(j, &spread(2)));
        }
        p.drain_exact();
    }
}

/// Index growth during a build: thousands of distinct keys queued exact-only (the
/// (comm) index is not pre-sized and grows while the arrival-order list it is built
/// from is being rewritten; the (comm, src) and (comm, tag) indexes are sized from the
/// queue), over many communicators, with every kind checked key by key.
#[test]
fn builds_over_thousands_of_keys_and_communicators() {
    for first in 1..4u8 {
        let mut p = pair();
        let key = |i: u32| env(i % 97, (i / 97) % 31, u64::from(i % 13));
        for i in 0..3000 {
            p.arrive(key(i), 0);
        }
        // Every key of the first kind, then of the others.
        for k in [first, first % 3 + 1, (first + 1) % 3 + 1] {
            for i in (0..3000).step_by(7) {
                p.probe(spec_kind(k, &key(i)));
            }
        }
        // Receive a third by wildcard kinds, then check all kinds again.
        for i in (0..3000).step_by(3) {
            p.post(spec_kind((i % 4) as u8, &key(i)));
        }
        for k in 0..4 {
            for i in (0..3000).step_by(11) {
                p.probe(spec_kind(k, &key(i)));
            }
        }
        p.purge_peer(5);
        p.purge_comm(7);
        p.drain_exact();
    }
}

/// After a burst over many communicators (a (comm) index much larger than the queue),
/// the (comm) build also builds the (comm, src) and (comm, tag) kinds from the arrival
/// order: every kind, purge and later arrival still agrees with the model.
#[test]
fn comm_build_after_a_burst_over_many_communicators() {
    let mut p = pair();
    for c in 0..400 {
        p.arrive(env(c, c % 5, 0), 1);
    }
    p.drain_any(400);
    for round in 0..3u32 {
        for i in 0..12 {
            p.arrive(spread(i + round), 1);
        }
        p.mprobe(spec_kind(0, &spread(round + 1)));
        assert!(p.probe(RecvSpec::new(round % 3, None, None)).is_some());
        for i in 12..18 {
            p.arrive(spread(i + round), 1);
        }
        for k in [1, 2, 3, 0] {
            for i in 0..18 {
                p.probe(spec_kind(k, &spread(i + round)));
            }
        }
        p.post(spec_kind(1, &spread(round + 4)));
        p.post(spec_kind(2, &spread(round + 5)));
        p.purge_peer(spread(round + 6).src);
        p.drain_exact();
    }
    while !p.claims.is_empty() {
        p.mrecv(0);
    }
}

/// A cycle of exact-only filling, first use of every wildcard kind, a claim across the
/// drain and the reset: repeated at the same depth it allocates nothing (heap bytes,
/// computed from capacities, unchanged), so the builds reuse the indexes they grew.
#[test]
fn build_and_reset_cycles_do_not_grow_the_heap() {
    let mut e: Engine<u32, u32> = Engine::default();
    let mut held: Option<MsgHandle> = None;
    let mut cycle = |e: &mut Engine<u32, u32>, round: u64| {
        for i in 0..200u32 {
            let t = round * 1000 + u64::from(i % 50);
            e.arrive(env(i % 4, i % 7, t), 0, i).unwrap();
        }
        let c = e.mprobe(&RecvSpec::new(1, None, None)).unwrap();
        if let Some(h) = held.replace(c.handle) {
            e.mrecv(h).unwrap();
        }
        for (k, i) in [(2u8, 3u32), (1, 5), (3, 0), (2, 9)] {
            let m = env(i % 4, i % 7, round * 1000 + u64::from(i % 50));
            assert!(e.probe(&spec_kind(k, &m)).is_some());
        }
        e.purge_peer(6, |_| {});
        for c in 0..4 {
            while let Ok(Posted::Matched(_)) = e.post(RecvSpec::new(c, None, None), 0) {}
        }
        e.cancel_where(|_, _| true, |_, _| {});
        assert_eq!(e.counters().unexpected_depth, 0);
    };
    cycle(&mut e, 0);
    cycle(&mut e, 1);
    let before = e.heap_bytes();
    for round in 2..30 {
        cycle(&mut e, round);
    }
    assert_eq!(e.heap_bytes(), before);
    assert_eq!(e.counters().claimed_depth, 1);
}

/// Cancelling (by handle, `take_posted_recv`) receives of every kind, including general
/// masks and heads and inner nodes of shared keyed lists, leaves the indexes consistent:
/// later arrivals match exactly as in the model.
#[test]
fn cancel_by_handle_of_every_kind_keeps_the_indexes_consistent() {
    let mut p = pair();
    let specs = |i: u32| match i % 6 {
        0 => RecvSpec::exact(0, i % 3, u64::from(i % 4)),
        1 => RecvSpec::new(0, Some(i % 3), None),
        2 => RecvSpec::new(0, None, Some(u64::from(i % 4))),
        3 => RecvSpec::new(0, None, None),
        4 => RecvSpec::masked(0, Source::Rank(i % 3), 1, 1),
        _ => RecvSpec::masked(0, Source::Any, 2, 2),
    };
    for i in 0..120 {
        p.post(specs(i));
    }
    // Cancel about half, spread over the fronts, middles and backs of the lists.
    let mut i = 0;
    while i < p.handles.len() {
        p.cancel(i);
        i += 2;
    }
    for i in 0..200 {
        p.arrive(env(0, i % 3, u64::from(i % 4)), 0);
    }
    while !p.handles.is_empty() {
        p.cancel(p.handles.len() / 2);
    }
    p.drain_any(1);
}

// ------------------------------------------------------------------ dense heads

/// Sources and tags of the dense-heads tests: small keys (array slots from the start),
/// keys that arrays grow to cover only once enough lists are held (their lists start in
/// the hash index and move when the array grows), and keys past the arrays' limit of
/// 2^16 (always in the hash index).
const DENSE_SRCS: [u32; 12] = [
    0,
    1,
    2,
    3,
    63,
    64,
    100,
    200,
    300,
    5000,
    70_000,
    u32::MAX - 1,
];
const DENSE_TAGS: [u64; 11] = [
    0,
    1,
    2,
    63,
    64,
    150,
    300,
    9000,
    65_535,
    65_536,
    u64::MAX >> 1,
];
/// A communicator found through the directory of arrays and two found by a hash map.
const DENSE_COMMS: [u32; 3] = [0, 5000, u32::MAX];

/// Random operations over keys on both sides of the dense arrays' coverage (see
/// `DENSE_SRCS`), lazy and eager, against the model: receives, probes and claims of
/// every kind, cancels by handle, peer and communicator purges, drains. A small-key
/// burst (many lists at once) lets arrays grow over keys already in the hash index.
#[test]
fn dense_and_hashed_list_heads_agree_with_the_model() {
    for eager in [false, true] {
        let mut p = pair();
        if eager {
            p.e = Engine::new(
                Config::default()
                    .reorder_window(4)
                    .max_messages(1 << 20)
                    .max_posted(1 << 20)
                    .initial_seq(0)
                    .eager_wildcard_lists(true),
            );
        }
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut rnd = move |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        for step in 0..12_000u32 {
            let m = env(
                DENSE_COMMS[rnd(3)],
                DENSE_SRCS[rnd(DENSE_SRCS.len())],
                DENSE_TAGS[rnd(DENSE_TAGS.len())],
            );
            match rnd(100) {
                0..=39 => {
                    p.arrive(m, 0);
                }
                40..=69 => {
                    let spec = match rnd(5) {
                        4 => RecvSpec::masked(m.comm, Source::Rank(m.src), 1, m.tag & 1),
                        k => spec_kind(k as u8, &m),
                    };
                    p.post(spec);
                }
                70..=76 => {
                    p.probe(spec_kind(rnd(4) as u8, &m));
                }
                77..=80 => {
                    p.mprobe(spec_kind(rnd(4) as u8, &m));
                }
                81..=82 if !p.claims.is_empty() => p.mrecv(rnd(64)),
                83..=91 if !p.handles.is_empty() => p.cancel(rnd(64)),
                92 => {
                    p.purge_peer(m.src);
                }
                93 => {
                    p.purge_comm(m.comm);
                }
                94 => {
                    // A burst of small keys: the arrays may now cover larger ones.
                    for i in 0..rnd(120) as u32 {
                        p.arrive(env(m.comm, i, u64::from(i)), 0);
                    }
                }
                95 if step % 7 == 0 => p.drain_exact(),
                _ => {}
            }
        }
        p.drain_exact();
        while !p.claims.is_empty() {
            p.mrecv(p.claims.len() - 1);
        }
    }
}

/// A list kept in the hash index (its key past the array's end while the array holds
/// few lists) moves into the array when the array grows over it, posted or unexpected,
/// with its order intact, and cancels and purges find it there.
#[test]
fn lists_move_from_the_hash_index_into_a_growing_array_in_order() {
    let mut p = pair();
    // Unexpected (comm 0, src 200) and (comm 0, tag 300) lists while the arrays hold
    // nothing: the ANY_TAG / ANY_SOURCE probes build both kinds, in the hash index.
    for i in 0..6u32 {
        p.arrive(env(0, 200, 300 + u64::from(i % 2) * 1000), 0);
    }
    assert!(p.probe(RecvSpec::new(0, Some(200), None)).is_some());
    assert!(p.probe(RecvSpec::new(0, None, Some(300))).is_some());
    // Posted ANY_TAG receives of source 250 and ANY_SOURCE receives of tag 280.
    for _ in 0..3 {
        p.post(RecvSpec::new(0, Some(250), None));
        p.post(RecvSpec::new(0, None, Some(280)));
    }
    let bytes_before = p.e.heap_bytes();
    // 60 lists of small keys: 4 · 60 + 64 slots allow an array of 256.
    for i in 0..60u32 {
        p.arrive(env(0, i, u64::from(i)), 0);
    }
    // Keys 200..256 now come into the arrays (a new list at 255 grows them).
    p.arrive(env(0, 255, 255), 0);
    assert!(p.e.heap_bytes() > bytes_before);
    // The moved lists keep their order: receives take them one by one.
    for _ in 0..2 {
        assert!(matches!(p.arrive(env(0, 250, 7), 0), Out::Match(..)));
        assert!(matches!(p.arrive(env(0, 9, 280), 0), Out::Match(..)));
    }
    // The last receive of each moved list, cancelled by handle (the matched ones are
    // stale handles, refused by both).
    while !p.handles.is_empty() {
        p.cancel(0);
    }
    assert!(p.m.posted.is_empty());
    for _ in 0..3 {
        assert!(matches!(
            p.post(RecvSpec::new(0, None, Some(300))),
            Out::Match(..)
        ));
        p.post(RecvSpec::new(0, Some(200), None));
    }
    assert!(p.purge_peer(200).is_empty());
    p.purge_comm(0);
    assert!(p.m.unexp.is_empty());
}

// ------------------------------------------------------------------ phased differential

const COMMS: u32 = 3;
/// Sources 0..SEQ_SRCS deliver with sequence numbers; SEQ_SRCS..SRCS are unsequenced.
const SEQ_SRCS: u32 = 2;
const SRCS: u32 = 5;
const TAGS: u32 = 4;

#[derive(Clone, Debug)]
enum Op {
    Arrive(Envelope, usize),
    /// The sender of sequenced source `src` puts a message in flight.
    Send(Envelope, usize),
    /// The transport delivers in-flight message `pick` of `src`.
    Deliver {
        src: u32,
        pick: usize,
    },
    Post(RecvSpec),
    Probe(RecvSpec),
    Mprobe(RecvSpec),
    Mrecv(usize),
    Cancel(usize),
    PurgePeer(u32),
    PurgeComm(u32),
    /// Receive every queued message with exact receives (no wildcard kind needed).
    DrainExact,
    /// Receive every queued message with ANY/ANY receives, cancelling the leftovers.
    DrainAny,
}

fn small(g: &mut Gen, n: u32) -> u32 {
    u32::arbitrary(g) % n
}

fn any_env(g: &mut Gen, seq: bool) -> Envelope {
    let src = if seq {
        small(g, SEQ_SRCS)
    } else {
        SEQ_SRCS + small(g, SRCS - SEQ_SRCS)
    };
    env(small(g, COMMS), src, u64::from(small(g, TAGS)))
}

fn exact_spec(g: &mut Gen) -> RecvSpec {
    let seq = bool::arbitrary(g);
    let e = any_env(g, seq);
    RecvSpec::exact(e.comm, e.src, e.tag)
}

fn wild_spec(g: &mut Gen) -> RecvSpec {
    let seq = bool::arbitrary(g);
    let e = any_env(g, seq);
    match small(g, 5) {
        0 => RecvSpec::new(e.comm, Some(e.src), None),
        1 => RecvSpec::new(e.comm, None, Some(e.tag)),
        2 => RecvSpec::new(e.comm, None, None),
        3 => RecvSpec::masked(e.comm, Source::Rank(e.src), 1, 1),
        _ => RecvSpec::masked(e.comm, Source::Any, 2, 3),
    }
}

/// An exact-only operation: arrivals (most), sends and deliveries, exact receives,
/// probes and claims, cancels (claims are received in the wildcard phases, so that
/// some are held across drains).
fn exact_op(g: &mut Gen) -> Op {
    let len = [0usize, 1, 8][small(g, 3) as usize];
    match small(g, 16) {
        0..=5 => Op::Arrive(any_env(g, false), len),
        6 | 7 => Op::Send(any_env(g, true), len),
        8 | 9 => Op::Deliver {
            src: small(g, SEQ_SRCS),
            pick: small(g, 3) as usize,
        },
        10 | 11 => Op::Post(exact_spec(g)),
        12 => Op::Probe(exact_spec(g)),
        13 | 14 => Op::Mprobe(exact_spec(g)),
        _ => Op::Cancel(small(g, 64) as usize),
    }
}

/// A wildcard-phase operation: wildcard receives, probes and claims, purges, receives
/// of claims, plus the exact ones.
fn wild_op(g: &mut Gen) -> Op {
    match small(g, 12) {
        0..=2 => Op::Post(wild_spec(g)),
        3 | 4 => Op::Probe(wild_spec(g)),
        5 => Op::Mprobe(wild_spec(g)),
        6 => Op::PurgePeer(small(g, SRCS)),
        7 => Op::PurgeComm(small(g, COMMS)),
        8 => Op::Mrecv(small(g, 64) as usize),
        _ => exact_op(g),
    }
}

/// Needed by the shrinking of `Vec<Op>` (elements are not shrunk).
impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        wild_op(g)
    }
}

#[derive(Clone, Debug)]
struct Case {
    tight: bool,
    window: u32,
    ops: Vec<Op>,
}

impl Arbitrary for Case {
    /// Phases: long exact-only phases (deep queues, no wildcard kind built), short
    /// wildcard bursts (the builds, in any order, purges in any state), drains (the
    /// queue empties, with claims possibly held, so the next store resets the kinds).
    ///
    /// `differential.rs` mixes operations uniformly, about one in four wildcard, so a
    /// kind is almost never first built over more than a few queued messages: a build
    /// that skipped the 13th message of the arrival order passed all of
    /// `differential.rs` and failed here (mutation check during the review).
    fn arbitrary(g: &mut Gen) -> Self {
        let mut ops = Vec::new();
        for _ in 0..(2 + small(g, 6)) {
            match small(g, 5) {
                0 | 1 => {
                    for _ in 0..(10 + small(g, 60)) {
                        ops.push(exact_op(g));
                    }
                }
                2 | 3 => {
                    for _ in 0..(1 + small(g, 8)) {
                        ops.push(wild_op(g));
                    }
                }
                _ => ops.push(if bool::arbitrary(g) {
                    Op::DrainExact
                } else {
                    Op::DrainAny
                }),
            }
        }
        Case {
            tight: small(g, 4) == 0,
            window: [1, 2, 4][small(g, 3) as usize],
            ops,
        }
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        let me = self.clone();
        Box::new(self.ops.shrink().map(move |ops| Case { ops, ..me.clone() }))
    }
}

/// States the phased generator must reach for the property to mean anything, counted
/// from the model's side (the engine's `built` is private).
#[derive(Default, Debug)]
struct Reached {
    /// A wildcard operation met ≥ 8 queued messages with no wildcard operation since the
    /// queue was last empty (a build over a deep arrival-order list).
    deep_first_build: usize,
    /// A message was stored into an empty queue while claims were held (a reset with
    /// claimed messages in the slab) after a wildcard operation (something was built).
    reset_with_claims: usize,
    /// A purge met queued messages with no wildcard operation since the queue was empty.
    purge_unbuilt: usize,
    /// A message was stored while a wildcard receive was posted and no wildcard
    /// operation had happened since the queue was last empty.
    stored_beside_posted_wildcard_unbuilt: usize,
    /// A delivery released ≥ 2 messages.
    multi_release: usize,
    /// A budget refusal.
    backpressure: usize,
}

fn is_wild(spec: &RecvSpec) -> bool {
    !matches!(
        spec.normalized(),
        RecvSpec {
            src: Source::Rank(_),
            tag: TagSel::Exact(_),
            ..
        }
    )
}

/// Runs a case on the engine and the model; the first divergence, or what it reached.
fn run(case: &Case) -> Result<Reached, String> {
    let (max_bytes, max_messages, max_posted) = if case.tight {
        (120, 10, 8)
    } else {
        (usize::MAX, 1 << 20, 1 << 20)
    };
    let mut p = with(case.window, max_bytes, max_messages, max_posted);
    let mut r = Reached::default();
    // Wildcard operations since the queue was last empty (with a message stored since).
    let mut wild_epoch = false;
    for (step, op) in case.ops.iter().enumerate() {
        let queued_before = p.m.unexp.len();
        let wild_before = wild_epoch;
        let claims_before = !p.m.claimed.is_empty();
        let posted_wild = p.m.posted.iter().any(|(s, _)| is_wild(s));
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| apply(&mut p, op, &mut r)));
        if let Err(e) = result {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            return Err(format!("step {step} {op:?}: {msg}"));
        }
        let op_wild = match op {
            Op::Post(s) | Op::Probe(s) | Op::Mprobe(s) => is_wild(s),
            Op::PurgePeer(_) | Op::PurgeComm(_) | Op::DrainAny => true,
            _ => false,
        };
        if op_wild && queued_before >= 8 && !wild_before {
            r.deep_first_build += 1;
        }
        if matches!(op, Op::PurgePeer(_) | Op::PurgeComm(_)) && queued_before > 0 && !wild_before {
            r.purge_unbuilt += 1;
        }
        if queued_before == 0 && !p.m.unexp.is_empty() {
            if claims_before && wild_before {
                r.reset_with_claims += 1;
            }
            wild_epoch = false;
        }
        if p.m.unexp.len() > queued_before && posted_wild && !wild_epoch {
            r.stored_beside_posted_wildcard_unbuilt += 1;
        }
        if op_wild {
            wild_epoch = true;
        }
    }
    // Everything left pairs up in arrival order.
    while !p.handles.is_empty() {
        p.cancel(0);
    }
    p.drain_any(COMMS);
    while !p.claims.is_empty() {
        p.mrecv(0);
    }
    Ok(r)
}

fn apply(p: &mut Walk, op: &Op, r: &mut Reached) {
    match op {
        Op::Arrive(e, len) => {
            if let Out::Rejected(RejectReason::Backpressure, _) = p.arrive(*e, *len) {
                r.backpressure += 1;
            }
        }
        Op::Send(e, len) => p.send(*e, *len, *len),
        Op::Deliver { src, pick } => match p.deliver(*src, *pick) {
            Some(Ok(n)) if n >= 2 => r.multi_release += 1,
            Some(Err(RejectReason::Backpressure)) => r.backpressure += 1,
            _ => {}
        },
        Op::Post(spec) => {
            p.post(*spec);
        }
        Op::Probe(spec) => {
            p.probe(*spec);
        }
        Op::Mprobe(spec) => {
            p.mprobe(*spec);
        }
        Op::Mrecv(i) => {
            if !p.claims.is_empty() {
                p.mrecv(*i);
            }
        }
        Op::Cancel(i) => {
            if !p.handles.is_empty() {
                p.cancel(*i);
            }
        }
        Op::PurgePeer(src) => {
            // The peer reconnects: its sender restarts at the initial sequence.
            p.purge_peer(*src);
        }
        Op::PurgeComm(c) => {
            p.purge_comm(*c);
        }
        Op::DrainExact => {
            // Exact receives may be refused at the posted limit: only drain when room.
            if p.e.counters().posted_depth < p.m.max_posted {
                p.drain_exact();
            }
        }
        Op::DrainAny => {
            if p.e.counters().posted_depth < p.m.max_posted {
                p.drain_any(COMMS);
            }
        }
    }
}

fn prop(case: Case) -> TestResult {
    match run(&case) {
        Ok(_) => TestResult::passed(),
        Err(e) => TestResult::error(e),
    }
}

/// The phased generator against the reference model.
#[test]
fn phased_sequences_match_the_model() {
    QuickCheck::new()
        .tests(300)
        .rng(Gen::new(40))
        .quickcheck(prop as fn(Case) -> TestResult);
}

/// The phased generator reaches the states the lazy lists can go wrong in.
#[test]
fn phased_generator_reaches_the_lazy_states() {
    // A fixed seed: this checks the generator's coverage, which a random draw can miss
    // by a hair (one draw of 200 cases reached `reset_with_claims` 9 times); the
    // differential properties above draw fresh cases on every run.
    let mut g = Gen::from_size_and_seed(40, 0x7a6d_6174_6368);
    let mut total = Reached::default();
    // 400 cases: with 200 the (randomly seeded) generator fell short of 10 resets with
    // claims about one run in four (9 seen), independently of the engine.
    for _ in 0..400 {
        let r = run(&Case::arbitrary(&mut g)).expect("agrees with the model");
        total.deep_first_build += r.deep_first_build;
        total.reset_with_claims += r.reset_with_claims;
        total.purge_unbuilt += r.purge_unbuilt;
        total.stored_beside_posted_wildcard_unbuilt += r.stored_beside_posted_wildcard_unbuilt;
        total.multi_release += r.multi_release;
        total.backpressure += r.backpressure;
    }
    let t = &total;
    assert!(
        t.deep_first_build >= 50
            && t.reset_with_claims >= 10
            && t.purge_unbuilt >= 10
            && t.stored_beside_posted_wildcard_unbuilt >= 10
            && t.multi_release >= 10
            && t.backpressure >= 10,
        "{t:?}"
    );
}

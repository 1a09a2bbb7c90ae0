//! Review of the deferred (comm, src, tag) index removals of wildcard receives (commit
//! 4f3c909: `Stale`, `unlink_exact_for_wild`, `defer_exact_removal`, `flush_stale`,
//! `STALE_BIAS`, the stale-aware `rehasher`). Release constants apply here (the index
//! saturates distances at 15, up to 32 removals are deferred); `defer_removals_from(0)`
//! makes every depth defer. Keys are crafted to share one home bucket of the (comm,
//! src, tag) index, so that removals shift entries stored at saturated distances, whose
//! homes the engine must then compute from their keys or kept hashes.

mod model;

use model::walk::{each_seed, Opts, Walk};
use model::{Out, Rng};
use tagmatch_engine::*;

/// Buckets of the (comm, src, tag) index after `reserve(0, RESERVED)` (the smallest
/// power of two holding `RESERVED` entries at load 3/4); the tests stay well below it,
/// so the table never grows and the homes computed here stay the engine's.
const RESERVED: usize = 1000;
const BUCKETS: usize = 2048;

/// The engine's hash of a (comm, src, tag) key (an independent copy of `hash_key` for
/// the exact kind, used only to choose keys that collide; if it drifted from the
/// engine's the keys would merely stop colliding, and `cluster_is_contiguous` below
/// would catch that).
fn exact_hash(comm: u32, src: u32, tag: u64) -> u64 {
    const S0: u64 = 0x243F_6A88_85A3_08D3;
    const S1: u64 = 0x1319_8A2E_0370_7344;
    const K0: u64 = 0x9E37_79B9_7F4A_7C15;
    let a = (u64::from(comm) << 32) | u64::from(src);
    let x = a ^ S0;
    let x = if x == 0 { K0 } else { x };
    let y = ((tag >> 2) ^ S1) | (1 << 63);
    let p = u128::from(x) * u128::from(y);
    ((p as u64) ^ ((p >> 64) as u64)).wrapping_add(tag & 3)
}

fn home(comm: u32, src: u32, tag: u64) -> usize {
    exact_hash(comm, src, tag) as u32 as usize & (BUCKETS - 1)
}

/// `n` tags of (`comm`, `src`) whose keys have home bucket `h`, from tag `from` on.
fn same_home_tags(comm: u32, src: u32, h: usize, n: usize, from: u64) -> Vec<u64> {
    (from..)
        .filter(|&t| home(comm, src, t) == h)
        .take(n)
        .collect()
}

/// `n` tags of source `src` whose homes are far (cyclically) from bucket `h`.
fn far_tags(src: u32, h: usize, n: usize, from: u64) -> Vec<u64> {
    (from..)
        .filter(|&t| {
            let d = (home(0, src, t) + BUCKETS - h) % BUCKETS;
            (256..BUCKETS - 256).contains(&d)
        })
        .take(n)
        .collect()
}

fn cfg() -> Config {
    model::review_config()
}

/// A walk (engine deferring at every depth, beside the model) whose (comm, src, tag)
/// index has [`BUCKETS`] buckets.
fn walk() -> Walk {
    let mut w = Walk::new(cfg(), Opts::FULL);
    w.e.reserve(0, RESERVED);
    w
}

/// The home bucket of the crafted clusters.
const H: usize = 700;

/// A full set of deferred removals (32) is done when the next wildcard receive defers
/// one more: that receive's own message is already out of the slab, its index entry
/// still in place. When the entry sits at a saturated distance (15 or more buckets from
/// its home) in the cluster a flushed removal shifts back, the shift needs its home:
/// neither its node (vacant) nor the kept hashes (not yet added) gave it (the engine
/// panicked on its invariant). For each wildcard kind taking that message: ANY_SOURCE
/// (dense and hashed tags), ANY_TAG, ANY_SOURCE+ANY_TAG.
#[test]
fn a_full_flush_shifts_the_receives_own_entry_at_a_saturated_distance() {
    for kind in 0..4 {
        let mut w = walk();
        // 15 keys of home H (distances 0..14), the victim (distance 15), 4 more.
        let cl = same_home_tags(0, 0, H, 19, 0);
        let victim = match kind {
            0 => Envelope::new(0, 2, same_home_tags(0, 2, H, 1, 0)[0]),
            1 => Envelope::new(0, 2, same_home_tags(0, 2, H, 1, 1 << 20)[0]),
            2 => Envelope::new(0, 3, same_home_tags(0, 3, H, 1, 0)[0]),
            _ => Envelope::new(5, 0, same_home_tags(5, 0, H, 1, 0)[0]),
        };
        let take = match kind {
            0 | 1 => RecvSpec::new(victim.comm, None, Some(victim.tag)),
            2 => RecvSpec::new(victim.comm, Some(victim.src), None),
            _ => RecvSpec::new(victim.comm, None, None),
        };
        let fill = far_tags(1, H, 31, 0);
        for &t in &cl[..15] {
            w.arrive(Envelope::new(0, 0, t), 8);
        }
        w.arrive(victim, 8);
        for &t in &cl[15..] {
            w.arrive(Envelope::new(0, 0, t), 8);
        }
        for &t in &fill {
            w.arrive(Envelope::new(0, 1, t), 8);
        }
        // The cluster's first entry (home H, distance 0) is deferred first, then 31
        // far ones: the set is full.
        w.post(RecvSpec::new(0, None, Some(cl[0])));
        for &t in &fill {
            w.post(RecvSpec::new(0, None, Some(t)));
        }
        // The 33rd deferral: the victim, 15 buckets from its home.
        let got = w.post(take);
        assert!(matches!(got, Out::Match(..)), "kind {kind}: {got:?}");
        // The rest of the cluster is still found, in order, by exact receives.
        for &t in &cl[1..] {
            let got = w.post(RecvSpec::exact(0, 0, t));
            assert!(matches!(got, Out::Match(..)), "kind {kind}: {got:?}");
        }
        w.check("end");
        assert_eq!(w.e.counters().unexpected_depth, 0);
    }
}

/// Keys crowded into a few neighbouring homes of the (comm, src, tag) index: per
/// communicator (0, 1) and source (small, and one past the dense arrays), tags of
/// homes `H..H + 3`, small ones (dense (comm, tag) arrays) and large ones (hashed).
fn crowded_keys() -> Vec<Envelope> {
    let mut keys = Vec::new();
    for comm in 0..2 {
        for src in [0, 1, 2, 70_000] {
            for dh in 0..3 {
                for t in same_home_tags(comm, src, H + dh, 2, 0) {
                    keys.push(Envelope::new(comm, src, t));
                }
                for t in same_home_tags(comm, src, H + dh, 2, 1 << 40) {
                    keys.push(Envelope::new(comm, src, t));
                }
            }
        }
    }
    keys
}

/// Posts an ANY_TAG, ANY_SOURCE or ANY_SOURCE+ANY_TAG receive for a queued message of
/// the model picked at random (it takes the earliest of its list); `false` when the
/// queue is empty.
fn post_wild_for_queued(w: &mut Walk, r: &mut Rng) -> bool {
    let Some(q) =
        w.m.unexp
            .get(r.below_usize(w.m.unexp.len().max(1)))
            .map(|q| q.env)
    else {
        return false;
    };
    let s = match r.below(3) {
        0 => RecvSpec::new(q.comm, Some(q.src), None),
        1 => RecvSpec::new(q.comm, None, Some(q.tag)),
        _ => RecvSpec::new(q.comm, None, None),
    };
    w.post(s);
    true
}

fn any_spec(r: &mut Rng, m: &Envelope) -> RecvSpec {
    match r.below(10) {
        0 => RecvSpec::exact(m.comm, m.src, m.tag),
        1..=3 => RecvSpec::new(m.comm, Some(m.src), None),
        4..=6 => RecvSpec::new(m.comm, None, Some(m.tag)),
        7 | 8 => RecvSpec::new(m.comm, None, None),
        _ => RecvSpec::masked(m.comm, Source::Any, m.tag & 1, 1),
    }
}

/// Seeded walks over the crowded keys: bursts of arrivals, then long runs of wildcard
/// receives (each deferring a removal) with, between them, the operations that run
/// while removals are deferred without doing them (wildcard receives queued, lookups
/// through `first_posted_match`, `posted_info`, `claimed`, `counters`, `pressure`,
/// `heap_bytes`, claims received) and the ones that do them first (exact and masked
/// receives, probes, claims, cancels, purges, reservations, sequenced deliveries).
/// Every outcome is checked against the model. Half the walks keep the index at 2,048
/// buckets (distances past 15 everywhere), half let it grow from empty.
fn crowded_walk(seed: u64, steps: usize) {
    let mut r = Rng::new(seed);
    let keys = crowded_keys();
    let eager = seed % 4 == 1;
    let mut w = Walk::new(cfg().eager_wildcard_lists(eager), Opts::FULL);
    if seed % 2 == 0 {
        w.e.reserve(0, RESERVED);
    }
    let pick = |r: &mut Rng| keys[r.below_usize(keys.len())];
    for _ in 0..steps {
        let m = pick(&mut r);
        match r.below(100) {
            0..=11 => {
                for _ in 0..r.below(40) {
                    let m = pick(&mut r);
                    w.arrive(m, 1 + r.below_usize(3));
                }
            }
            12..=14 => {
                let e = Envelope::new(m.comm, 100 + (m.src & 1), m.tag);
                w.send(e, 1, 1);
                let p = r.below_usize(3);
                w.deliver(e.src, p);
            }
            15..=49 => {
                // A run of wildcard receives of queued messages (each takes the
                // earliest of its list).
                for _ in 0..r.below(40) {
                    if !post_wild_for_queued(&mut w, &mut r) {
                        break;
                    }
                    if r.chance(20) {
                        let e = pick(&mut r);
                        w.first_posted(e);
                    }
                    if r.chance(10) {
                        let h = w.e.heap_bytes();
                        assert!(h > 0);
                        let _ = w.e.pressure();
                        w.check("wildcard run");
                    }
                    if r.chance(5) {
                        w.stale_handles();
                    }
                }
            }
            50..=64 => {
                let s = any_spec(&mut r, &m);
                w.post(s);
            }
            65..=69 => {
                let s = any_spec(&mut r, &m);
                w.probe(s);
            }
            70..=74 => {
                let s = any_spec(&mut r, &m);
                w.mprobe(s);
            }
            75..=78 => w.mrecv(r.below_usize(1 << 20)),
            79..=84 => w.cancel(r.below_usize(1 << 20)),
            85..=88 => w.first_posted(m),
            89 => {
                let c = m.comm;
                w.cancel_where("comm", move |s| s.comm == c);
            }
            90 => {
                w.purge_peer(m.src);
            }
            91 => {
                w.purge_comm(m.comm);
            }
            92 => {
                let n = r.below_usize(300);
                w.e.reserve(n, n);
                w.check("reserve");
            }
            93..=95 => w.take_at(r.below_usize(8)),
            _ => w.witness(&mut r),
        }
    }
    w.stale_handles();
    for c in 0..2 {
        w.purge_comm(c);
    }
    while !w.claims.is_empty() {
        w.mrecv(0);
    }
    w.check("end");
}

#[test]
fn crowded_keys_walks_agree_with_the_model() {
    each_seed("review_defer crowded walk", 0..seeds(60), |s| {
        crowded_walk(s, 2500)
    });
}

/// The number of seeds of a walk: `n`, or `REVIEW_DEFER_SEEDS` times it when set (for
/// longer runs by hand).
fn seeds(n: u64) -> u64 {
    let k = std::env::var("REVIEW_DEFER_SEEDS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(1);
    n * k.max(1)
}

/// Without the test hook: a queue deep enough for the built-in deferral (an index of
/// 2^14 buckets, 3/4 full of random keys, where linear probing leaves many entries 15
/// or more buckets from their homes), taken in random order by ANY_SOURCE, ANY_TAG and
/// ANY_SOURCE+ANY_TAG receives in runs, with arrivals, exact receives and lookups
/// between the runs: every outcome as the model's.
#[test]
fn deep_random_queues_defer_with_the_built_in_threshold() {
    for seed in 0..3 {
        let mut r = Rng::new(seed);
        let mut w = Walk::new(
            cfg(),
            Opts {
                check_each: false,
                ..Opts::FULL
            },
        );
        // `Walk` defers at every depth; back to the built-in threshold.
        w.e.defer_removals_from(1 << 13);
        w.e.reserve(0, 12_000);
        let mut envs = Vec::new();
        for _ in 0..12_000 {
            let e = Envelope::new(r.below(3) as u32, r.below(1 << 20) as u32, r.below(1 << 30));
            envs.push(e);
            w.arrive(e, 1);
        }
        w.check("filled");
        for round in 0..400 {
            for _ in 0..r.below(60) {
                if !post_wild_for_queued(&mut w, &mut r) {
                    break;
                }
            }
            let e = envs[r.below_usize(envs.len())];
            w.first_posted(e);
            match round % 4 {
                0 => {
                    w.arrive(e, 1);
                }
                1 => w.take_at(r.below_usize(100)),
                2 => {
                    w.probe(RecvSpec::exact(e.comm, e.src, e.tag));
                }
                _ => {
                    w.post(RecvSpec::exact(e.comm, e.src, e.tag));
                }
            }
            w.check("round");
        }
        w.drain_any(3);
        w.check("end");
    }
}

/// [`a_full_flush_shifts_the_receives_own_entry_at_a_saturated_distance`] with the
/// engine as built (no test hook): a queue of 12,000 messages gives the (comm, src, tag)
/// index 2^14 buckets, where wildcard receives defer; the crafted cluster is among them.
#[test]
fn the_saturated_full_flush_is_reached_with_the_built_in_threshold() {
    const B: usize = 1 << 14;
    let h = 9_000;
    let same = |comm: u32, src: u32, n: usize| -> Vec<u64> {
        (0..)
            .filter(|&t| exact_hash(comm, src, t) as u32 as usize & (B - 1) == h)
            .take(n)
            .collect()
    };
    let mut e: Engine<u32, u32> = Engine::new(cfg());
    e.reserve(0, 12_000);
    let mut id = 0;
    let mut arrive = |e: &mut Engine<u32, u32>, env: Envelope| {
        id += 1;
        assert!(matches!(e.arrive(env, 1, id), Ok(Arrived::Unexpected(_))));
    };
    let cl = same(0, 0, 15);
    let victim = Envelope::new(0, 2, same(0, 2, 1)[0]);
    for &t in &cl {
        arrive(&mut e, Envelope::new(0, 0, t));
    }
    arrive(&mut e, victim);
    // Far keys, for the other 31 deferrals, and a deep queue.
    let mut far = Vec::new();
    let mut t = 0u64;
    while far.len() < 12_000 {
        let d = (exact_hash(0, 1, t) as u32 as usize & (B - 1)) + B - h;
        if (256..B - 256).contains(&(d % B)) {
            far.push(t);
        }
        t += 1;
    }
    for &t in &far {
        arrive(&mut e, Envelope::new(0, 1, t));
    }
    let take = |e: &mut Engine<u32, u32>, s: RecvSpec| match e.post(s, 0) {
        Ok(Posted::Matched(m)) => m.env,
        other => panic!("{s:?}: {other:?}"),
    };
    assert_eq!(take(&mut e, RecvSpec::new(0, None, Some(cl[0]))).tag, cl[0]);
    for &t in &far[..31] {
        assert_eq!(take(&mut e, RecvSpec::new(0, None, Some(t))).tag, t);
    }
    assert_eq!(
        take(&mut e, RecvSpec::new(0, None, Some(victim.tag))),
        victim
    );
    for &t in &cl[1..] {
        assert_eq!(take(&mut e, RecvSpec::exact(0, 0, t)).tag, t);
    }
    assert_eq!(e.counters().unexpected_depth, far.len() - 31);
}

/// Two engines given the same operations over the crowded keys, one deferring at every
/// depth and one never: every answer, every counter (match attempts and hits
/// included), the pressure, `heap_bytes` and `first_posted_match` agree after each
/// operation (a deferral is invisible; the bias that closes the exact-only arrival path
/// shows nowhere).
#[test]
fn deferring_and_not_deferring_engines_are_indistinguishable() {
    let keys = crowded_keys();
    for seed in 0..40u64 {
        let mut r = Rng::new(seed);
        let c = cfg().eager_wildcard_lists(seed % 3 == 0);
        let mut a: Engine<u32, u32> = Engine::new(c);
        let mut b: Engine<u32, u32> = Engine::new(c);
        a.defer_removals_from(0);
        b.defer_removals_from(usize::MAX);
        if seed % 2 == 0 {
            a.reserve(0, RESERVED);
            b.reserve(0, RESERVED);
        }
        let mut handles: Vec<RecvHandle> = Vec::new();
        let mut claims: Vec<MsgHandle> = Vec::new();
        let mut id = 0u32;
        // The deferring engine's buffer of deferred removals, allocated at its first
        // deferral and kept, is the only memory difference (a few hundred bytes).
        let mut buffer: Option<usize> = None;
        for step in 0..3000 {
            let m = keys[r.below_usize(keys.len())];
            id += 1;
            let what = match r.below(100) {
                0..=29 => {
                    let x = format!("{:?}", a.arrive(m, 1, id));
                    assert_eq!(x, format!("{:?}", b.arrive(m, 1, id)));
                    x
                }
                30..=79 => {
                    let s = any_spec(&mut r, &m);
                    let (x, y) = (a.post(s, id), b.post(s, id));
                    if let Ok(Posted::Pending(h)) = x {
                        handles.push(h);
                    }
                    let x = format!("{x:?}");
                    assert_eq!(x, format!("{y:?}"));
                    x
                }
                80..=84 if !handles.is_empty() => {
                    let h = handles.swap_remove(r.below_usize(handles.len()));
                    let x = format!("{:?}", a.cancel(h));
                    assert_eq!(x, format!("{:?}", b.cancel(h)));
                    x
                }
                85..=89 => {
                    let s = any_spec(&mut r, &m);
                    let x = a.mprobe(&s);
                    assert_eq!(x, b.mprobe(&s));
                    if let Some(c) = x {
                        claims.push(c.handle);
                    }
                    format!("{x:?}")
                }
                90..=93 if !claims.is_empty() => {
                    let h = claims.swap_remove(r.below_usize(claims.len()));
                    let x = format!("{:?}", a.mrecv(h));
                    assert_eq!(x, format!("{:?}", b.mrecv(h)));
                    x
                }
                _ => {
                    let s = any_spec(&mut r, &m);
                    let x = format!("{:?}", a.probe(&s).map(|p| *p.msg));
                    assert_eq!(x, format!("{:?}", b.probe(&s).map(|p| *p.msg)));
                    x
                }
            };
            let ctx = format!("seed {seed} step {step}: {what}");
            assert_eq!(a.counters(), b.counters(), "{ctx}");
            assert_eq!(a.pressure(), b.pressure(), "{ctx}");
            // The deferring engine holds more only by its buffer and, where tombstones
            // (the flushed removals) made its (comm, src, tag) index double before the
            // other's, by that doubling: 4 bytes per bucket, a power of two of them.
            let extra = a.heap_bytes().checked_sub(b.heap_bytes());
            match (buffer, extra) {
                (None, Some(0)) => {}
                (None, Some(x)) if x <= 512 => buffer = Some(x),
                (Some(b0), Some(x)) if x >= b0 => {
                    let d = x - b0;
                    assert!(
                        d == 0 || (d % 4 == 0 && (d / 4).is_power_of_two()),
                        "{ctx}: heap bytes beyond the buffer: {d}"
                    );
                }
                (b0, x) => assert_eq!(x, b0, "{ctx}: heap bytes beyond the buffer"),
            }
            let e = keys[r.below_usize(keys.len())];
            let fa = a.first_posted_match(&e).map(|i| (i.seq, i.spec));
            assert_eq!(
                fa,
                b.first_posted_match(&e).map(|i| (i.seq, i.spec)),
                "{ctx}"
            );
            for &h in &handles {
                assert_eq!(a.posted_info(h), b.posted_info(h), "{ctx}");
            }
            for &h in &claims {
                assert_eq!(a.claimed(h), b.claimed(h), "{ctx}");
            }
        }
    }
}

/// A deferred entry's key is never matched and its slot is reused only after the
/// removal: after an ANY_TAG receive takes the only message of key `k` (its removal
/// deferred), lookups of `k` find nothing (`first_posted_match`, an exact probe, an
/// exact receive, which stays pending), the next message of `k` (stored in the slot
/// just freed) matches that receive, and a claim taken while removals are deferred is
/// received after its slot's neighbours came and went.
#[test]
fn a_deferred_key_is_never_matched_and_its_slot_is_reused_after_the_removal() {
    for eager in [false, true] {
        let mut w = Walk::new(cfg().eager_wildcard_lists(eager), Opts::FULL);
        let k = Envelope::new(0, 3, 9);
        let other = Envelope::new(0, 4, 9);
        w.arrive(k, 1);
        w.arrive(other, 2);
        assert!(matches!(
            w.post(RecvSpec::new(0, Some(3), None)),
            Out::Match(..)
        ));
        w.first_posted(k);
        assert_eq!(w.e.first_posted_match(&k), None);
        // The claim of the other message (flushes), then an ANY_SOURCE receive of tag 9
        // finds nothing queued and stays pending.
        assert!(w.mprobe(RecvSpec::exact(0, 4, 9)).is_some());
        assert!(matches!(
            w.post(RecvSpec::new(0, None, Some(9))),
            Out::Pending(_)
        ));
        assert!(matches!(w.post(RecvSpec::exact(0, 3, 9)), Out::Pending(_)));
        w.first_posted(k);
        // The ANY_SOURCE receive, posted first, takes the next message of `k`; the
        // exact one the one after.
        w.arrive(k, 3);
        w.arrive(k, 4);
        assert_eq!(w.m.posted.len(), 0);
        // Again with removals deferred: three messages of three keys taken by
        // wildcard receives, then arrivals reusing their slots, then the claim.
        for t in 20..23 {
            w.arrive(Envelope::new(1, t as u32, t), 1);
        }
        for t in 20..23 {
            assert!(matches!(
                w.post(RecvSpec::new(1, None, Some(t))),
                Out::Match(..)
            ));
        }
        for t in 20..23 {
            w.probe(RecvSpec::exact(1, t as u32, t));
            w.arrive(Envelope::new(1, t as u32, t), 1);
        }
        w.mrecv(0);
        w.drain_any(2);
        w.stale_handles();
        w.check("end");
    }
}

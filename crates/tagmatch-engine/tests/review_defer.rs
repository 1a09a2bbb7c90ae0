//! Review of the deferred (comm, src, tag) index removals of wildcard receives (commit
//! 4f3c909: `Stale`, `unlink_exact_for_wild`, `defer_exact_removal`, `flush_stale`,
//! `STALE_BIAS`, the stale-aware `rehasher`). Release constants apply here (the index
//! saturates distances at 15, up to 32 removals are deferred); `defer_removals_from(0)`
//! makes every depth defer. Keys are crafted to share one home bucket of the (comm,
//! src, tag) index, so that removals shift entries stored at saturated distances, whose
//! homes the engine must then compute from their keys or kept hashes.

mod model;

use model::walk::{Opts, Walk};
use model::Out;
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
    Config::default()
        .reorder_window(4)
        .initial_seq(0)
        .max_messages(1 << 16)
        .max_posted(1 << 16)
        .max_bytes(1 << 30)
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

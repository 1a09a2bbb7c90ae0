//! Review of the dense (comm, src, tag) list heads (`dense.rs`, last section): seeded
//! random walks on communicator 0 (whose sources below the directory's length may own
//! an array of tags) and on communicators whose keys stay hashed, with bursts of many
//! distinct tags of one source, posted exact receives or unexpected messages, so that
//! arrays are refused (few entries), allocated, grown up to 2^16 slots and take over
//! lists from the hash index, among wildcard receives (whose removals from the hash
//! index are deferred), probes, claims, cancels and purges. Every step is checked
//! against the reference model in `model/`.

mod model;

use model::walk::{Bytes, Opts, Walk};
use model::{Model, Rng};
use tagmatch_engine::*;

/// Communicator 0 (arrays) most of the time; 1 and `u32::MAX` (always hashed).
const COMMS: [u32; 4] = [0, 0, 1, u32::MAX];

/// Sources: small (arrays), the directory's edge (4095 / 4096), large.
const SRCS: [u32; 8] = [0, 1, 2, 3, 63, 4095, 4096, u32::MAX];

/// Tags around the arrays' lengths and past `DENSE_KEYS` (2^16).
const TAGS: [u64; 10] = [0, 1, 15, 16, 63, 64, 65_535, 65_536, 1 << 40, u64::MAX];

fn pair() -> Walk {
    let cfg = Config::default()
        .reorder_window(4)
        .max_messages(1 << 22)
        .max_posted(1 << 22)
        .initial_seq(0);
    let opts = Opts {
        bytes: Bytes::Unchecked,
        pressure: false,
        check_each: false,
        held_api: false,
        retire: false,
        swap_remove: true,
    };
    let mut w = Walk::with_model(cfg, Model::new(4, usize::MAX, 1 << 22, 1 << 22, 0), opts);
    // Wildcard receives defer their (comm, src, tag) index removals at every size.
    w.e.defer_removals_from(0);
    w
}

fn draw_env(r: &mut Rng) -> Envelope {
    let tag = match r.below_usize(3) {
        0 => TAGS[r.below_usize(TAGS.len())],
        1 => r.below_usize(200) as u64,
        _ => r.below_usize(1 << 16) as u64,
    };
    Envelope::new(
        COMMS[r.below_usize(COMMS.len())],
        SRCS[r.below_usize(SRCS.len())],
        tag,
    )
}

fn draw_spec(r: &mut Rng, m: &Envelope) -> RecvSpec {
    match r.below_usize(8) {
        0..=3 => RecvSpec::exact(m.comm, m.src, m.tag),
        4 => RecvSpec::new(m.comm, Some(m.src), None),
        5 => RecvSpec::new(m.comm, None, Some(m.tag)),
        6 => RecvSpec::new(m.comm, None, None),
        _ => RecvSpec::masked(m.comm, Source::Rank(m.src), m.tag & 1, 1),
    }
}

/// A burst of `n` exact lists of one (comm, src) with distinct tags from `start` on
/// (or spread below 2^16): messages, or posted exact receives.
fn burst(p: &mut Walk, r: &mut Rng, comm: u32, src: u32, n: usize) {
    let start = [0, 16, 1000, 65_000][r.below_usize(4)];
    let spread = r.below_usize(4) == 0;
    let msgs = r.below_usize(2) == 0;
    for i in 0..n as u64 {
        let t = if spread {
            r.below_usize(1 << 16) as u64
        } else {
            start + i
        };
        if msgs {
            p.arrive(Envelope::new(comm, src, t), 1);
        } else {
            p.post(RecvSpec::exact(comm, src, t));
        }
    }
}

fn walk(seed: u64, steps: usize) {
    let mut p = pair();
    let mut r = Rng(seed | 1);
    for _ in 0..steps {
        let m = draw_env(&mut r);
        match r.below_usize(100) {
            0..=29 => {
                p.arrive(m, 1);
            }
            30..=59 => {
                let s = draw_spec(&mut r, &m);
                p.post(s);
            }
            60..=64 => {
                let s = draw_spec(&mut r, &m);
                p.probe(s);
            }
            65..=67 => {
                let s = draw_spec(&mut r, &m);
                p.mprobe(s);
            }
            68..=69 if !p.claims.is_empty() => p.mrecv(r.below_usize(1 << 20)),
            70..=79 if !p.handles.is_empty() => p.cancel(r.below_usize(1 << 20)),
            80..=81 => p.first_posted(m),
            82 => {
                let t = m.tag;
                p.cancel_where("tag", move |s| s.tag == TagSel::Exact(t));
            }
            83 => {
                p.purge_peer(m.src);
            }
            84 => {
                p.purge_comm(m.comm);
            }
            85..=89 => {
                let n = [20, 300, 3000][r.below_usize(3)];
                burst(&mut p, &mut r, m.comm, m.src, n);
            }
            90 => p.drain_any_comm(m.comm),
            _ => {}
        }
        p.check("step");
    }
    for c in [0, 1, u32::MAX] {
        p.purge_comm(c);
    }
    while !p.claims.is_empty() {
        p.mrecv(p.claims.len() - 1);
    }
    p.check("end");
    assert_eq!(
        p.e.counters().posted_depth + p.e.counters().unexpected_depth,
        0
    );
}

/// Random walks around the exact arrays' limits agree with the model.
#[test]
fn random_walks_over_the_exact_arrays_agree_with_the_model() {
    for seed in 1..=6u64 {
        walk(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15), 1500);
    }
}

/// One source's array grown to the whole tag range (2^16 slots) by exact receives,
/// then tags 2^16 − 1 (in the array) and 2^16 (hashed) on both sides, and the purge of
/// the source.
#[test]
fn an_exact_array_of_the_full_tag_range_keeps_the_last_tag_and_hashes_the_next() {
    let mut p = pair();
    for t in 0..(1u64 << 16) {
        p.post(RecvSpec::exact(0, 2, t));
    }
    p.check("filled");
    for t in [65_535u64, 65_536, 65_536, 0] {
        p.arrive(Envelope::new(0, 2, t), 1);
        p.post(RecvSpec::exact(0, 2, t));
    }
    p.check("edges");
    p.purge_peer(2);
    p.check("purged");
    assert_eq!(p.e.counters().posted_depth, 0);
}

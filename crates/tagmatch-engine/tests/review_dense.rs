//! Review of the dense (comm, src) / (comm, tag) list heads (`dense.rs`): seeded random
//! walks whose source ranks, tags and communicator ids sit around the arrays' limits
//! (keys 2^16 − 1 / 2^16, array lengths 64 · 2^i, `u32::MAX`, `u64::MAX`; communicator
//! ids 4095 / 4096 / `u32::MAX`, the edge of the directory of arrays), with bursts of
//! many distinct keys so that arrays grow up to 2^16 slots and take over lists from the
//! hash index, posted and unexpected. Every step is checked against the reference model
//! in `model/`: the outcome of each receive, arrival, probe, claim, cancel and purge,
//! and the depths.

mod model;

use model::walk::{Bytes, Opts, Walk};
use model::{Model, Out, Rng};
use tagmatch_engine::*;

/// Communicators: directory ids (0, 1, the last one) and hashed ids (the first past the
/// directory, the largest).
const COMMS: [u32; 6] = [0, 1, 4095, 4096, 4097, u32::MAX];

/// Source ranks at the arrays' boundaries.
const SRCS: [u32; 18] = [
    0,
    1,
    63,
    64,
    127,
    128,
    255,
    256,
    1023,
    4096,
    16_383,
    32_768,
    65_534,
    65_535,
    65_536,
    65_537,
    u32::MAX - 1,
    u32::MAX,
];

/// Tags at the arrays' boundaries.
const TAGS: [u64; 19] = [
    0,
    1,
    63,
    64,
    127,
    128,
    255,
    256,
    1023,
    4096,
    16_383,
    32_768,
    65_534,
    65_535,
    65_536,
    1 << 32,
    u32::MAX as u64,
    u64::MAX - 1,
    u64::MAX,
];

/// Engine and model side by side; the depths are checked after every step of a walk
/// (by the caller), receives matched stay in `handles` (a cancel through one must be
/// refused by both).
fn pair(eager: bool) -> Walk {
    let cfg = Config::default()
        .reorder_window(4)
        .max_messages(1 << 22)
        .max_posted(1 << 22)
        .initial_seq(0)
        .eager_wildcard_lists(eager);
    let opts = Opts {
        bytes: Bytes::Unchecked,
        pressure: false,
        check_each: false,
        held_api: false,
        retire: false,
        swap_remove: true,
    };
    Walk::with_model(cfg, Model::new(4, usize::MAX, 1 << 22, 1 << 22, 0), opts)
}

fn draw_src(r: &mut Rng) -> u32 {
    match r.below_usize(10) {
        0..=4 => SRCS[r.below_usize(SRCS.len())],
        5..=7 => r.below_usize(300) as u32,
        _ => r.below_usize(1 << 16) as u32,
    }
}

fn draw_tag(r: &mut Rng) -> u64 {
    match r.below_usize(10) {
        0..=4 => TAGS[r.below_usize(TAGS.len())],
        5..=7 => r.below_usize(300) as u64,
        _ => r.below_usize(1 << 16) as u64,
    }
}

fn draw_env(r: &mut Rng) -> Envelope {
    Envelope::new(COMMS[r.below_usize(COMMS.len())], draw_src(r), draw_tag(r))
}

fn draw_spec(r: &mut Rng, m: &Envelope) -> RecvSpec {
    match r.below_usize(9) {
        0 | 1 => RecvSpec::exact(m.comm, m.src, m.tag),
        2 | 3 => RecvSpec::new(m.comm, Some(m.src), None),
        4 | 5 => RecvSpec::new(m.comm, None, Some(m.tag)),
        6 => RecvSpec::new(m.comm, None, None),
        7 => RecvSpec::masked(m.comm, Source::Rank(m.src), m.tag & 1, 1),
        _ => RecvSpec::masked(m.comm, Source::Any, m.tag & 3, 3),
    }
}

/// A burst of `n` lists with distinct small keys on `comm`: unexpected messages, or
/// posted ANY_TAG / ANY_SOURCE receives, from key `start` on (or spread at random).
fn burst(p: &mut Walk, r: &mut Rng, comm: u32, n: usize) {
    let start = r.below_usize(1 << 15) as u32 * (r.below_usize(2) as u32);
    let spread = r.below_usize(3) == 0;
    let what = r.below_usize(4);
    for i in 0..n as u32 {
        let x = if spread {
            r.below_usize(1 << 16) as u32
        } else {
            (start + i) & 0xffff
        };
        match what {
            0 | 1 => {
                p.arrive(Envelope::new(comm, x, u64::from(x)), 1);
            }
            2 => {
                p.post(RecvSpec::new(comm, Some(x), None));
            }
            _ => {
                p.post(RecvSpec::new(comm, None, Some(u64::from(x))));
            }
        }
    }
}

fn walk(seed: u64, eager: bool, steps: usize, big: usize) {
    let mut p = pair(eager);
    let mut r = Rng(seed | 1);
    for step in 0..steps {
        let m = draw_env(&mut r);
        match r.below_usize(100) {
            0..=29 => {
                p.arrive(m, 1);
            }
            30..=54 => {
                let s = draw_spec(&mut r, &m);
                p.post(s);
            }
            55..=61 => {
                let s = draw_spec(&mut r, &m);
                p.probe(s);
            }
            62..=65 => {
                let s = draw_spec(&mut r, &m);
                p.mprobe(s);
            }
            66..=68 if !p.claims.is_empty() => p.mrecv(r.below_usize(1 << 20)),
            69..=78 if !p.handles.is_empty() => p.cancel(r.below_usize(1 << 20)),
            79..=81 => p.first_posted(m),
            82 => {
                let comm = m.comm;
                let src = m.src;
                p.cancel_where("comm or source", move |s| {
                    s.comm == comm || s.src == Source::Rank(src)
                });
            }
            83 => {
                p.purge_peer(m.src);
            }
            84..=85 => {
                p.purge_comm(m.comm);
            }
            86..=88 => {
                let n = r.below_usize(600);
                burst(&mut p, &mut r, m.comm, n);
            }
            89 => p.drain_any_comm(m.comm),
            90 if step % 16 == 0 => {
                // Probes that build the wildcard kinds (lazy) before a big burst.
                p.probe(RecvSpec::new(m.comm, Some(m.src), None));
                p.probe(RecvSpec::new(m.comm, None, Some(m.tag)));
                burst(&mut p, &mut r, m.comm, big);
            }
            _ => {}
        }
        p.check("step");
    }
    // Everything left pairs up with the model.
    for c in COMMS {
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

/// Random walks over boundary keys, lazy and eager, with bursts of up to 600 lists.
#[test]
fn random_walks_over_the_dense_limits_agree_with_the_model() {
    for seed in 1..=6u64 {
        for eager in [false, true] {
            walk(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15), eager, 4000, 2000);
        }
    }
}

/// One communicator's arrays grown to the whole key range (2^16 slots: 16,368 lists at
/// least), then keys 2^16 − 1 (in the array) and 2^16 (hashed) on both sides, posted
/// and unexpected, and a purge of that communicator followed by its reuse.
#[test]
fn arrays_grown_to_the_full_key_range_keep_the_last_key_and_hash_the_next() {
    for (comm, eager) in [(4095u32, false), (4096, true), (u32::MAX, false)] {
        let mut p = pair(eager);
        // Lists past the arrays' end while they are small: hashed.
        for x in [65_535u32, 65_534, 40_000, 70_000] {
            p.arrive(Envelope::new(comm, x, u64::from(x)), 1);
        }
        p.probe(RecvSpec::new(comm, Some(65_535), None));
        p.probe(RecvSpec::new(comm, None, Some(65_535)));
        p.post(RecvSpec::new(comm, Some(65_533), None));
        p.post(RecvSpec::new(comm, None, Some(65_533)));
        // 16,400 small keys (posted ANY_TAG receives on sources and messages on
        // tags): both arrays grow to 2^16 slots and take over the hashed lists.
        for x in 0..16_400u32 {
            p.post(RecvSpec::new(comm, Some(x), None));
            p.arrive(Envelope::new(comm, 1 << 20, u64::from(x)), 1);
        }
        for x in [65_535u32, 65_534, 65_533, 40_000, 70_000, 65_536] {
            p.arrive(Envelope::new(comm, x, u64::from(x)), 1);
            p.post(RecvSpec::new(comm, Some(x), None));
            p.post(RecvSpec::new(comm, None, Some(u64::from(x))));
            p.first_posted(Envelope::new(comm, x, 1));
            p.check("boundary keys");
        }
        p.purge_peer(65_535);
        p.purge_comm(comm);
        p.check("purge");
        // The communicator id reused.
        for x in [0u32, 65_535, 65_536] {
            p.post(RecvSpec::new(comm, None, Some(u64::from(x))));
            p.arrive(Envelope::new(comm, x, 7), 1);
            p.arrive(Envelope::new(comm, 3, u64::from(x)), 1);
            p.post(RecvSpec::new(comm, Some(x), None));
            p.probe(RecvSpec::new(comm, Some(3), None));
        }
        p.purge_comm(comm);
        p.check("reuse");
    }
}

/// Communicators come and go (fresh ids past the directory, as when communicators are
/// created and freed): one ANY_TAG receive each, matched at once. Nothing stays queued,
/// so the engine's memory must not grow with the number of communicators seen (the
/// hash indexes it replaced held only live lists).
#[test]
fn memory_does_not_grow_with_communicators_that_held_lists_once() {
    for eager in [false, true] {
        let mut e: Engine<u32, u32> = Engine::new(Config::default().eager_wildcard_lists(eager));
        let mut after_warmup = 0;
        for i in 0..40_000u32 {
            let comm = 5000 + i;
            let r = e.post(RecvSpec::new(comm, Some(3), None), i).unwrap();
            assert!(matches!(r, Posted::Pending(_)));
            let a = e.arrive(Envelope::new(comm, 3, 9), 0, i).unwrap();
            assert!(matches!(a, Arrived::Matched(m) if m.recv == i));
            if i == 2000 {
                after_warmup = e.heap_bytes();
            }
        }
        let end = e.heap_bytes();
        assert!(
            end <= 2 * after_warmup,
            "eager {eager}: {after_warmup} B after 2,000 communicators, {end} B after 40,000"
        );
    }
}

/// Communicators of the directory (small ids) used one after another, each with 16,400
/// ANY_SOURCE receives at once (its array grows to 2^16 slots), all cancelled before the
/// next: at most one communicator holds lists at a time, so the memory must stay within
/// a few such arrays, not one per communicator.
#[test]
fn memory_follows_the_lists_held_not_every_communicators_past_peak() {
    let mut e: Engine<u32, u32> = Engine::default();
    let mut first = 0;
    for comm in 0..24u32 {
        for t in 0..16_400u64 {
            let r = e.post(RecvSpec::new(comm, None, Some(t)), 0).unwrap();
            assert!(matches!(r, Posted::Pending(_)));
        }
        assert_eq!(e.cancel_where(|_, _| true, |_, _| {}), 16_400);
        if comm == 1 {
            first = e.heap_bytes();
        }
    }
    let end = e.heap_bytes();
    assert!(
        end <= first + first / 2,
        "{first} B after 2 communicators' peaks, {end} B after 24"
    );
}

/// A communicator whose arrays hold no list while some of its lists are hashed (keys
/// past the arrays' ends): other communicators' arrays then pass the sweep threshold,
/// its arrays are freed, allocated again and grown over the hashed keys, whose lists
/// must then move into them; posted and unexpected, lazy and eager, against the model.
#[test]
fn a_freed_array_grown_again_takes_over_the_hashed_lists_of_its_communicator() {
    for eager in [false, true] {
        for comm in [7u32, 4096] {
            let mut p = pair(eager);
            p.post(RecvSpec::new(comm, Some(0), None)); // rid 1
            p.post(RecvSpec::new(comm, Some(5000), None)); // rid 2, hashed
            p.post(RecvSpec::new(comm, Some(5000), None)); // rid 3, hashed
            p.post(RecvSpec::new(comm, None, Some(0))); // rid 4
            p.arrive(Envelope::new(comm, 70_000, 5000), 1);
            p.arrive(Envelope::new(comm, 70_000, 5000), 1);
            p.probe(RecvSpec::new(comm, None, Some(5000)));
            for rid in [1, 4] {
                let i = p.handles.iter().position(|&(r, _)| r == rid).unwrap();
                p.cancel(i);
            }
            // 600 communicators with a list each (64 slots): 38,400 slots, past the
            // sweep threshold, all matched again.
            for c in 10_000..10_600u32 {
                p.post(RecvSpec::new(c, Some(1), None));
                p.post(RecvSpec::new(c, None, Some(1)));
                p.arrive(Envelope::new(c, 1, 1), 1);
                p.arrive(Envelope::new(c, 1, 1), 1);
                if c > 10_100 {
                    p.first_posted(Envelope::new(4097 + c % 2, 3, 3));
                }
                if c == 10_100 {
                    // Arrays that keep a list through the sweeps, numbered after freed
                    // ones (renumbered by the sweeps).
                    for d in [4097, 4098, u32::MAX] {
                        p.post(RecvSpec::new(d, Some(3), None));
                        p.post(RecvSpec::new(d, None, Some(3)));
                    }
                }
            }
            for d in [4097, 4098, u32::MAX] {
                p.first_posted(Envelope::new(d, 3, 3));
                assert!(matches!(
                    p.arrive(Envelope::new(d, 3, 3), 1),
                    Out::Match(..)
                ));
                assert!(matches!(
                    p.arrive(Envelope::new(d, 3, 3), 1),
                    Out::Match(..)
                ));
            }
            // The communicator's arrays again, 2,100 lists each (up to 8,192 slots),
            // then keys in 4096..8192 grow them over 5000.
            for x in 0..2100u32 {
                p.post(RecvSpec::new(comm, Some(x), None));
                p.arrive(Envelope::new(comm, 70_001, 100 + u64::from(x)), 1);
            }
            p.post(RecvSpec::new(comm, Some(6000), None));
            p.arrive(Envelope::new(comm, 70_001, 6000), 1);
            assert!(matches!(
                p.arrive(Envelope::new(comm, 5000, 1), 1),
                Out::Match(2, _)
            ));
            p.first_posted(Envelope::new(comm, 5000, 1));
            p.probe(RecvSpec::new(comm, None, Some(5000)));
            assert!(matches!(
                p.post(RecvSpec::new(comm, None, Some(5000))),
                Out::Match(_, 5)
            ));
            p.check("regrown");
            p.purge_comm(comm);
            p.check("purged");
        }
    }
}

/// Random walks at small depths, around the queued entries at which the arrays are
/// allocated and grown (they must pay for them: 8 bytes per entry and kind): the
/// communicators of the directory's first entries, one it covers only once the arrays
/// are large (100) and one past it (4096); source ranks and tags below 200 (most below
/// 20, so that lists hold several entries); exact receives on another communicator as
/// ballast, posted in batches and cancelled all at once, moving the depth across the
/// thresholds. So (comm, src) and (comm, tag) lists — posted ANY_TAG / ANY_SOURCE
/// receives and unexpected messages — are hashed while the entries do not pay for an
/// array and are taken over, non-empty, by the array that the entries first pay for (or
/// by a directory that widens: once, a burst of 512 ANY_SOURCE receives on
/// communicator 0 grows its array to 1024 slots); lazy and eager, every step against the
/// model.
#[test]
fn lists_move_into_the_arrays_that_the_entries_first_pay_for() {
    const SMALL_COMMS: [u32; 4] = [0, 3, 100, 4096];
    const BALLAST: u32 = 9;
    for seed in 1..=8u64 {
        for eager in [false, true] {
            let mut p = pair(eager);
            let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut ballast_tag = 0u64;
            for step in 0..2500 {
                if step == 1250 {
                    // ANY_SOURCE receives on communicator 0 at every other tag below
                    // 1024, with ballast: its (comm, tag) array grows to 1024 slots; then
                    // communicator 100's far array grows, and the directory widens to
                    // 128 entries, taking it over with its lists.
                    for _ in 0..800 {
                        ballast_tag += 1;
                        p.post(RecvSpec::exact(BALLAST, 0, ballast_tag));
                    }
                    for t in 0..4 {
                        p.post(RecvSpec::new(100, None, Some(t)));
                        p.post(RecvSpec::new(100, None, Some(t)));
                    }
                    for t in (0..1024).step_by(2) {
                        p.post(RecvSpec::new(0, None, Some(t)));
                    }
                    for t in (4..=20).chain([100]) {
                        p.post(RecvSpec::new(100, None, Some(t)));
                    }
                }
                let comm = SMALL_COMMS[r.below_usize(SMALL_COMMS.len())];
                let key = |r: &mut Rng| {
                    let n = if r.chance(70) { 20 } else { 200 };
                    r.below_usize(n)
                };
                let env = Envelope::new(comm, key(&mut r) as u32, key(&mut r) as u64);
                match r.below_usize(100) {
                    0..=24 => {
                        p.arrive(env, 1);
                    }
                    25..=34 => {
                        p.post(RecvSpec::new(comm, Some(env.src), None));
                    }
                    35..=44 => {
                        p.post(RecvSpec::new(comm, None, Some(env.tag)));
                    }
                    45..=49 => {
                        p.post(RecvSpec::exact(comm, env.src, env.tag));
                    }
                    50..=52 => {
                        p.probe(RecvSpec::new(comm, Some(env.src), None));
                    }
                    53..=55 => {
                        p.probe(RecvSpec::new(comm, None, Some(env.tag)));
                    }
                    56..=58 => p.first_posted(env),
                    59..=61 => {
                        let s = draw_spec(&mut r, &env);
                        p.mprobe(s);
                    }
                    62..=63 if !p.claims.is_empty() => p.mrecv(r.below_usize(1 << 20)),
                    64..=73 if !p.handles.is_empty() => p.cancel(r.below_usize(1 << 20)),
                    74..=88 => {
                        for _ in 0..1 + r.below_usize(12) {
                            ballast_tag += 1;
                            p.post(RecvSpec::exact(BALLAST, 0, ballast_tag));
                        }
                    }
                    89..=92 => p.cancel_where("ballast", |s| s.comm == BALLAST),
                    93 => {
                        p.purge_comm(comm);
                    }
                    94 => p.drain_any_comm(comm),
                    _ => {}
                }
                p.check("step");
            }
            for c in SMALL_COMMS.into_iter().chain([BALLAST]) {
                p.purge_comm(c);
            }
            while let Some((mid, h)) = p.claims.pop() {
                assert_eq!(p.e.mrecv(h).ok().map(|x| x.msg), p.m.mrecv(mid));
            }
            p.check("end");
        }
    }
}

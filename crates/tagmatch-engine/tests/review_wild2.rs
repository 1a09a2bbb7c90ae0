//! Review of the wildcard kinds kept across an empty queue (merge 10cc56f, `wild2`:
//! `wild_used` in `build_unexp` / `link_unexp_kept`, the claimed messages' dead log
//! entries, `link_log_into_k` keeping the communicator's array) together with the dense
//! arrays created only when the entries pay for them (`wildmem`). Seeded walks that
//! empty the queue very often, by every operation that can empty it (receives of every
//! kind, mprobe, purges, reorder-buffer releases), with claims held across empty
//! queues, keys around the arrays' ends and every operation checked against the model.

mod model;

use model::walk::{each_seed, Bytes, Opts, Walk};
use model::Rng;
use tagmatch_engine::*;

/// The number of seeds of a walk: `n`, or `REVIEW_WILD2_SEEDS` times it when set (for
/// longer runs by hand).
fn seeds(n: u64) -> u64 {
    let k = std::env::var("REVIEW_WILD2_SEEDS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(1);
    n * k.max(1)
}

const SRCS: [u32; 8] = [0, 1, 2, 63, 64, 65_535, 65_536, 7];
const TAGS: [u64; 8] = [0, 1, 2, 63, 64, 65_535, 65_536, 1 << 40];

fn cfg(eager: bool, claims_count: bool) -> Config {
    model::review_config()
        .claims_count(claims_count)
        .eager_wildcard_lists(eager)
}

fn env(r: &mut Rng, comms: u64) -> Envelope {
    let comm = r.below(comms) as u32;
    let ns = if r.chance(70) { 3 } else { SRCS.len() };
    let src = SRCS[r.below_usize(ns)];
    let nt = if r.chance(70) { 3 } else { TAGS.len() };
    Envelope::new(comm, src, TAGS[r.below_usize(nt)])
}

fn spec(r: &mut Rng, m: &Envelope) -> RecvSpec {
    match r.below(9) {
        0 | 1 => RecvSpec::exact(m.comm, m.src, m.tag),
        2 | 3 => RecvSpec::new(m.comm, Some(m.src), None),
        4 | 5 => RecvSpec::new(m.comm, None, Some(m.tag)),
        6 => RecvSpec::new(m.comm, None, None),
        7 => RecvSpec::masked(m.comm, Source::Rank(m.src), m.tag & 1, 1),
        _ => RecvSpec::masked(m.comm, Source::Any, m.tag & 1, 1),
    }
}

/// One walk: arrivals (ordered and sequenced through the reorder buffer), receives,
/// probes, claims, cancels and purges, the queue emptied every few operations.
fn walk(seed: u64, steps: usize) -> usize {
    let mut empties = 0;
    let mut r = Rng::new(seed);
    let eager = seed % 5 == 0;
    let claims_count = seed % 3 == 0;
    // Bytes against the walk's books (claims count as the config says); the model's
    // pressure counts claims.
    let opts = Opts {
        bytes: Bytes::Walk,
        pressure: claims_count,
        ..Opts::FULL
    };
    let mut p = Walk::new(cfg(eager, claims_count), opts);
    let comms = 1 + r.below(3);
    for _ in 0..steps {
        let m = env(&mut r, comms);
        if p.e.counters().unexpected_depth == 0 {
            empties += 1;
        }
        match r.below(100) {
            0..=24 => {
                p.arrive(m, 1 + r.below_usize(3));
            }
            25..=34 => {
                // Sequenced sources 100.. (their own key range), delivered out of order.
                let e = Envelope::new(m.comm, 100 + (m.src & 3), m.tag);
                let len = 1 + r.below_usize(3);
                p.send(e, len, len);
                let pick = r.below_usize(4);
                p.deliver(e.src, pick);
            }
            35..=39 => {
                let pick = r.below_usize(4);
                p.deliver(100 + r.below(4) as u32, pick);
            }
            40..=57 => {
                let s = spec(&mut r, &m);
                p.post(s);
            }
            58..=63 => {
                let s = spec(&mut r, &m);
                p.probe(s);
            }
            64..=69 => {
                let s = spec(&mut r, &m);
                p.mprobe(s);
            }
            70..=73 => p.mrecv(r.below_usize(1 << 20)),
            74..=77 => p.cancel(r.below_usize(1 << 20)),
            78 => {
                let c = m.comm;
                p.cancel_where("comm", move |s| s.comm == c);
            }
            79 => {
                p.purge_peer(if r.chance(50) {
                    m.src
                } else {
                    100 + (m.src & 3)
                });
            }
            80 => {
                p.purge_comm(m.comm);
            }
            81..=86 => {
                // Empty the queue (receives pending would take messages: exact
                // drain in arrival order takes each message by its own key only
                // when nothing is posted).
                if p.m.posted.is_empty() {
                    if r.chance(50) {
                        p.drain_exact();
                    } else {
                        for c in 0..comms as u32 {
                            p.drain_any_comm(c);
                        }
                    }
                }
            }
            87..=89 => p.witness(&mut r),
            90..=92 => p.first_posted(m),
            _ => {
                // Take the queued messages in arrival order with single-wildcard receives
                // (each must be a match of the earliest).
                let kind = r.below(3);
                while let Some(q) = p.m.unexp.first().map(|q| q.env) {
                    if !p.m.posted.is_empty() {
                        break;
                    }
                    let s = match kind {
                        0 => RecvSpec::new(q.comm, Some(q.src), None),
                        1 => RecvSpec::new(q.comm, None, Some(q.tag)),
                        _ => RecvSpec::exact(q.comm, q.src, q.tag),
                    };
                    p.post(s);
                }
            }
        }
    }
    for c in 0..comms as u32 {
        p.purge_comm(c);
    }
    while !p.claims.is_empty() {
        p.mrecv(0);
    }
    p.stale_handles();
    p.check("end");
    empties
}

#[test]
fn walks_through_empty_queues_agree_with_the_model() {
    let empties = std::sync::atomic::AtomicUsize::new(0);
    each_seed("review_wild2 walk", 1..seeds(200), |s| {
        empties.fetch_add(walk(s, 3000), std::sync::atomic::Ordering::Relaxed);
    });
    // Operations meeting an empty queue (the kinds' kept / forgotten transitions).
    let n = empties.into_inner();
    assert!(n > 30_000, "{n} operations on an empty queue");
}

/// Periods of a fixed program (the queue filled over a few communicators, taken by
/// receives of the kinds of the period, emptied), the wildcard kinds kept, forgotten
/// and rebuilt in turn: after a warm-up, the engine's heap stays the same size (the
/// kept kinds' lists, the arrival log and the arrays reach their working size once).
#[test]
fn periods_of_kept_and_forgotten_kinds_reach_a_steady_heap() {
    for eager in [false, true] {
        let mut p = Walk::new(cfg(eager, true), Opts::FULL);
        p.e.reserve(512, 512);
        let mut r = Rng::new(7);
        let mut sizes = Vec::new();
        for period in 0..120u32 {
            for i in 0..200u32 {
                let e = Envelope::new(i % 4, r.below(40) as u32, r.below(20));
                p.arrive(e, 1);
            }
            // Kinds used: a pattern of period 3 (ANY_SOURCE, ANY_TAG + ANY/ANY, none).
            for _ in 0..30 {
                let Some(q) = p.m.unexp.get(r.below_usize(p.m.unexp.len())).map(|q| q.env) else {
                    break;
                };
                let s = match period % 3 {
                    0 => RecvSpec::new(q.comm, None, Some(q.tag)),
                    1 if r.chance(50) => RecvSpec::new(q.comm, Some(q.src), None),
                    1 => RecvSpec::new(q.comm, None, None),
                    _ => RecvSpec::exact(q.comm, q.src, q.tag),
                };
                p.post(s);
            }
            if period % 3 != 2 {
                p.mprobe(RecvSpec::new(1, None, None));
            }
            p.drain_exact();
            while !p.claims.is_empty() {
                p.mrecv(0);
            }
            sizes.push(p.e.heap_bytes());
        }
        let warm = sizes[30];
        assert!(
            sizes[30..].iter().all(|&s| s == warm),
            "eager {eager}: heap after warm-up {:?}",
            &sizes[25..]
        );
    }
}

/// Communicators of the directory and past it (far arrays).
const WIDE_COMMS: [u32; 6] = [0, 1, 4095, 4096, 70_000, u32::MAX];

/// Walks over many keys: bursts of distinct small keys grow the arrays (taking over
/// hashed lists), drains to an empty queue make the kinds kept or forgotten, and the
/// arrays holding no list are freed by later growths while kinds are kept.
fn wide_walk(seed: u64, steps: usize) -> usize {
    let mut empties = 0;
    let mut r = Rng::new(seed);
    let eager = seed % 4 == 0;
    let mut p = Walk::new(cfg(eager, true), Opts::FULL);
    for _ in 0..steps {
        let comm = WIDE_COMMS[r.below_usize(WIDE_COMMS.len())];
        let x = if r.chance(50) {
            r.below(8) as u32
        } else {
            r.below(1 << 17) as u32
        };
        let m = Envelope::new(comm, x, u64::from(x ^ 1));
        if p.e.counters().unexpected_depth == 0 {
            empties += 1;
        }
        match r.below(40) {
            0..=9 => {
                p.arrive(m, 1);
            }
            10..=17 => {
                let s = spec(&mut r, &m);
                p.post(s);
            }
            18..=20 => {
                let s = spec(&mut r, &m);
                p.probe(s);
            }
            21..=22 => {
                let s = spec(&mut r, &m);
                p.mprobe(s);
            }
            23 => p.mrecv(r.below_usize(1 << 20)),
            24..=26 => p.cancel(r.below_usize(1 << 20)),
            27 => {
                // A burst of distinct small keys on one communicator, messages or
                // single-wildcard receives.
                let n = r.below_usize(400);
                let start = r.below(1 << 15) as u32;
                let what = r.below(3);
                for i in 0..n as u32 {
                    let k = (start + i) & 0xffff;
                    match what {
                        0 => {
                            p.arrive(Envelope::new(comm, k, u64::from(k)), 1);
                        }
                        1 => {
                            p.post(RecvSpec::new(comm, Some(k), None));
                        }
                        _ => {
                            p.post(RecvSpec::new(comm, None, Some(u64::from(k))));
                        }
                    }
                }
            }
            28 => {
                p.purge_comm(comm);
            }
            29 => {
                p.purge_peer(x);
            }
            30..=33 => {
                // Cancel what is posted (receives pending would take the drain's
                // messages), then empty the queue.
                if r.chance(70) {
                    p.cancel_where("all", |_| true);
                } else {
                    let c = comm;
                    p.cancel_where("comm", move |s| s.comm == c);
                }
                if p.m.posted.is_empty() {
                    p.drain_exact();
                }
            }
            34..=35 => {
                // Empty the queue with single-wildcard receives (nothing posted).
                p.cancel_where("all", |_| true);
                let kind = r.below(2);
                while let Some(q) = p.m.unexp.first().map(|q| q.env) {
                    if !p.m.posted.is_empty() {
                        break;
                    }
                    p.post(match kind {
                        0 => RecvSpec::new(q.comm, Some(q.src), None),
                        _ => RecvSpec::new(q.comm, None, Some(q.tag)),
                    });
                }
            }
            36..=37 => p.witness(&mut r),
            _ => p.first_posted(m),
        }
    }
    for c in WIDE_COMMS {
        p.purge_comm(c);
    }
    while !p.claims.is_empty() {
        p.mrecv(0);
    }
    p.stale_handles();
    empties
}

#[test]
fn wide_walks_through_empty_queues_agree_with_the_model() {
    let empties = std::sync::atomic::AtomicUsize::new(0);
    each_seed("review_wild2 wide walk", 1..seeds(40), |s| {
        empties.fetch_add(wide_walk(s, 4000), std::sync::atomic::Ordering::Relaxed);
    });
    let n = empties.into_inner();
    assert!(n > 5_000, "{n} operations on an empty queue");
}

//! Seeded walks against the model with keys that collide or cluster under some index
//! hash: sources differing by multiples of 2^29 and 2^30, tags strided by 4 × a Fibonacci
//! number (which packed a linear, Fibonacci-placed hash into one cluster: long probes,
//! saturated distances, the node-read resumptions of backward shifts and tombstone
//! purges), tags near `u64::MAX` and strided by 2^20, 2^28 and 2^62. Written by the
//! review of branch `fib` (not merged, see docs/benchmarks.md, "Fibonacci placement of the
//! index hash"); every answer must agree with the model whatever the hash.
mod model;

use model::walk::{each_seed, Opts, Walk};
use model::Rng;
use tagmatch_engine::*;

/// Sources whose exact-index hashes coincide in pairs or more (multiples of 2^29).
const SRCS: [u32; 6] = [0, 1 << 29, 1 << 30, 3 << 29, 1 << 31, u32::MAX];
const COMMS: [u32; 3] = [0, 1, 1 << 31];

/// Tag `i` of shape `shape`.
fn tag(shape: u64, i: u64) -> u64 {
    match shape {
        // 4 × F(25): consecutive blocks' homes ~0.8 bucket apart at 2^17 buckets, and
        // packed into few clusters at every smaller size.
        0 => i.wrapping_mul(300_100),
        1 => u64::MAX - i,
        2 => i << 20,
        3 => i << 28,
        4 => (i & 3) << 62 | (i >> 2),
        _ => i.wrapping_mul(4 * 1_346_269),
    }
}

fn env(r: &mut Rng, shape: u64, span: u64) -> Envelope {
    Envelope::new(
        COMMS[r.below_usize(COMMS.len())],
        SRCS[r.below_usize(SRCS.len())],
        tag(shape, r.below(span)),
    )
}

fn spec(r: &mut Rng, m: &Envelope) -> RecvSpec {
    match r.below(8) {
        0..=3 => RecvSpec::exact(m.comm, m.src, m.tag),
        4 => RecvSpec::new(m.comm, Some(m.src), None),
        5 => RecvSpec::new(m.comm, None, Some(m.tag)),
        6 => RecvSpec::new(m.comm, None, None),
        _ => RecvSpec::masked(m.comm, Source::Any, m.tag & 1, 1),
    }
}

/// Fills the queue (arrivals or receives) to a few hundred entries of colliding keys,
/// then drains it by every kind of receive, cancels, probes and purges, every operation
/// checked against the model.
fn walk(seed: u64, steps: usize) -> usize {
    let mut deepest = 0;
    let mut r = Rng::new(seed);
    let shape = seed % 6;
    let span = [64, 400, 2000][(seed / 6 % 3) as usize];
    let mut p = Walk::new(model::review_config(), Opts::FULL);
    if seed % 4 == 0 {
        p.e.reserve(300, 300);
    }
    for step in 0..steps {
        // Phases of filling and draining, so that the indexes grow, shift and purge.
        let filling = (step / 1000) % 2 == 0;
        let c = p.e.counters();
        deepest = deepest.max(c.unexpected_depth + c.posted_depth);
        let m = env(&mut r, shape, span);
        match r.below(100) {
            0..=39 if filling => {
                p.arrive(m, 1);
            }
            0..=39 => {
                if let Some(q) = p.m.unexp.get(r.below_usize(p.m.unexp.len().max(1))) {
                    let q = q.env;
                    let s = spec(&mut r, &q);
                    p.post(s);
                }
            }
            40..=69 if filling => {
                let s = spec(&mut r, &m);
                p.post(s);
            }
            40..=69 => {
                let q = p.m.posted.get(r.below_usize(p.m.posted.len().max(1)));
                if let Some(&(s, _)) = q {
                    // A message the receive matches (its wildcards filled from m).
                    let src = match s.src {
                        Source::Rank(x) => x,
                        Source::Any => m.src,
                    };
                    let t = match s.tag {
                        TagSel::Exact(t) => t,
                        TagSel::Masked { want, .. } => want,
                        _ => m.tag,
                    };
                    p.arrive(Envelope::new(s.comm, src, t), 1);
                }
            }
            70..=79 => {
                let s = spec(&mut r, &m);
                p.probe(s);
            }
            80..=89 if !filling => p.cancel(r.below_usize(1 << 20)),
            90..=92 => {
                let s = spec(&mut r, &m);
                p.mprobe(s);
            }
            93..=94 => p.mrecv(r.below_usize(1 << 20)),
            95 if !filling => {
                p.purge_peer(m.src);
            }
            96 if !filling => {
                p.purge_comm(m.comm);
            }
            97..=99 => p.first_posted(m),
            _ => {}
        }
    }
    for c in COMMS {
        p.purge_comm(c);
    }
    while !p.claims.is_empty() {
        p.mrecv(0);
    }
    p.stale_handles();
    p.check("end");
    deepest
}

#[test]
fn walks_with_colliding_keys_agree_with_the_model() {
    let deepest = std::sync::atomic::AtomicUsize::new(0);
    each_seed("review_fib walk", 0..36, |s| {
        deepest.fetch_max(walk(s, 3000), std::sync::atomic::Ordering::Relaxed);
    });
    // Deep enough for the indexes to grow several times.
    let d = deepest.into_inner();
    assert!(d >= 300, "deepest queue {d}");
}

/// A deep queue of one (comm, src) whose tags are strided by 4 × F(25): every
/// arrival's key hashes into one long cluster of the (comm, src, tag) index. Receives
/// posted in order, messages arriving in a shuffled order, then the reverse: each
/// message takes its own receive, and the queues end empty.
#[test]
fn fibonacci_strided_tags_match_their_own_receives() {
    for (src, n) in [(0u32, 3000u64), (1 << 30, 1500)] {
        let mut e: Engine<u32, u32> = Engine::new(model::review_config());
        e.defer_removals_from(0);
        for i in 0..n {
            let t = tag(0, i);
            assert!(matches!(
                e.post(RecvSpec::exact(5, src, t), i as u32),
                Ok(Posted::Pending(_))
            ));
        }
        let mut order: Vec<u64> = (0..n).collect();
        let mut r = Rng::new(n);
        for i in (1..order.len()).rev() {
            order.swap(i, r.below_usize(i + 1));
        }
        for &i in &order {
            match e.arrive(Envelope::new(5, src, tag(0, i)), 1, i as u32) {
                Ok(Arrived::Matched(x)) => assert_eq!(x.recv, i as u32, "tag {}", tag(0, i)),
                other => panic!("tag {}: {other:?}", tag(0, i)),
            }
        }
        assert_eq!(e.counters().posted_depth, 0);
        // Unexpected side, the sources sharing hashes interleaved.
        for i in 0..n {
            let s = if i % 2 == 0 { src } else { src ^ (1 << 30) };
            assert!(matches!(
                e.arrive(Envelope::new(5, s, tag(0, i)), 1, i as u32),
                Ok(Arrived::Unexpected(_))
            ));
        }
        for i in (0..n).rev() {
            let s = if i % 2 == 0 { src } else { src ^ (1 << 30) };
            match e.post(RecvSpec::exact(5, s, tag(0, i)), i as u32) {
                Ok(Posted::Matched(x)) => assert_eq!(x.msg, i as u32),
                other => panic!("tag {}: {other:?}", tag(0, i)),
            }
        }
        assert_eq!(e.counters().unexpected_depth, 0);
    }
}

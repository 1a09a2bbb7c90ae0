//! The arrival log freed after a wildcard kind's build (issue #3's 64 bytes per entry
//! after the first single-wildcard receive): queued messages then carry arrival
//! stamps, later arrivals take the next ones, and a later build of another kind puts
//! the log back from the stamps (a radix sort), renumbering them; stamps are also
//! renumbered when they reach the end of their range (`Engine::wrap_stamps_at` moves
//! that end down to a few arrivals here). The log is kept when a past burst left the
//! message slab much larger than the queue.
//!
//! Every outcome is checked against the reference model in `model/` (`Walk`, checks
//! after every operation).

mod model;

use model::walk::{Opts, Walk};
use model::Rng;
use tagmatch_engine::*;

/// Kinds a period's wildcard receives use: one of the three, or two at once.
fn wild(r: &mut Rng, kinds: u64, m: &Envelope) -> RecvSpec {
    let pick = match kinds {
        0..=2 => kinds,
        _ => r.below(3),
    };
    match pick {
        0 => RecvSpec::new(m.comm, None, Some(m.tag)),
        1 => RecvSpec::new(m.comm, Some(m.src), None),
        _ => RecvSpec::new(m.comm, None, None),
    }
}

/// Periods of a queue that fills (small and large keys, two communicators), is taken
/// from anywhere by exact receives, and by wildcard receives of kinds that change from
/// period to period (so kinds are built, kept, forgotten and built again from stamps),
/// with stamps renumbered every `wrap` arrivals.
fn periods(seed: u64, wrap: u32, burst: bool) {
    let mut r = Rng::new(seed);
    let mut w = Walk::new(Config::default().reorder_window(8), Opts::FULL);
    w.e.wrap_stamps_at(wrap);
    if burst {
        // A past burst: the slab stays at its high-water mark, far above the queues
        // below, so builds keep the log (a restore would visit every slot).
        for i in 0..3000u64 {
            w.arrive(Envelope::new(0, (i % 5) as u32, i), 1);
        }
        w.post(RecvSpec::new(0, None, Some(7)));
        w.drain_exact();
    }
    let key = |r: &mut Rng| {
        let src = if r.chance(20) {
            1 << 20
        } else {
            r.below(6) as u32
        };
        let tag = if r.chance(20) { 1 << 40 } else { r.below(9) };
        Envelope::new(r.below(2) as u32, src, tag)
    };
    for period in 0..40u64 {
        let kinds = r.below(5);
        let n = 1 + r.below(120);
        for _ in 0..n {
            let e = key(&mut r);
            w.arrive(e, 1 + r.below(8) as usize);
        }
        for _ in 0..n {
            if w.m.unexp.is_empty() {
                break;
            }
            let i = r.below(w.m.unexp.len() as u64) as usize;
            match r.below(10) {
                0..=3 => w.take_at(i),
                4..=6 if period % 4 != 3 => {
                    let m = w.m.unexp[i].env;
                    let s = wild(&mut r, kinds, &m);
                    w.post(s);
                }
                7 => {
                    let e = key(&mut r);
                    w.arrive(e, 1);
                }
                8 => w.witness(&mut r),
                _ => {
                    let m = w.m.unexp[i].env;
                    let s = wild(&mut r, kinds, &m);
                    w.probe(s);
                }
            }
        }
        if r.chance(60) {
            w.drain_exact();
        }
    }
    w.witness(&mut r);
    w.drain_any(2);
    w.check("end");
}

#[test]
fn stamped_queues_keep_arrival_order_across_builds_and_renumberings() {
    for seed in 0..24u64 {
        let wrap = [2, 3, 5, 17, 64, u32::MAX][(seed % 6) as usize];
        periods(seed, wrap, false);
    }
}

#[test]
fn after_a_burst_builds_keep_the_log_and_the_order() {
    for seed in 0..8u64 {
        let wrap = [2, 9, u32::MAX][(seed % 3) as usize];
        periods(seed, wrap, true);
    }
}

/// The memory the first single-wildcard receive adds at depth 33,000 (tags 0..33,000,
/// one source each): the (comm, tag) array trimmed to its last tag (4 bytes a key, not
/// the 65,536 slots of its last doubling) and the log freed, so that the heap after the
/// receive is at most what it was before it plus 4 bytes a message; and the arrays of a
/// kind built again later never shrink below that (a steady heap for periodic builds).
#[test]
fn the_first_wildcard_receive_trims_its_arrays_and_frees_the_log() {
    let n = 33_000u32;
    let mut e: Engine<u32, u32> = Engine::default();
    for i in 0..n {
        e.arrive(Envelope::new(0, i, u64::from(i)), 0, i).unwrap();
    }
    let before = e.heap_bytes();
    match e.post(RecvSpec::new(0, None, Some(u64::from(n - 1))), 0) {
        Ok(Posted::Matched(m)) => assert_eq!(m.msg, n - 1),
        _ => panic!("ANY_SOURCE receive of tag {}", n - 1),
    }
    let after = e.heap_bytes();
    assert!(
        after <= before + 4 * n as usize,
        "{before} bytes before the first ANY_SOURCE receive, {after} after"
    );
    // Periods of the queue: filled to `top` and an ANY_SOURCE receive (the kind built
    // again, having been forgotten), drained by exact receives; then a period with no
    // wildcard receive (the kind is forgotten at the next period's first arrival).
    // `top` alternates, so a build that trimmed arrays it did not grow (the trim of
    // 11f8fa7) would shrink them in one period and grow them back in the next.
    let mut sizes = Vec::new();
    let fill = |e: &mut Engine<u32, u32>, top: u32| {
        for i in 0..=top {
            e.arrive(Envelope::new(0, i, u64::from(i)), 0, i).unwrap();
        }
    };
    let drain = |e: &mut Engine<u32, u32>, top: u32| {
        for i in 0..=top {
            if let Ok(Posted::Pending(_)) = e.post(RecvSpec::exact(0, i, u64::from(i)), 0) {
                panic!("message {i} lost");
            }
        }
        assert_eq!(e.counters().unexpected_depth, 0);
    };
    drain(&mut e, n - 2);
    for round in 0..6u32 {
        let top = n - 1 - 5000 * (round % 2);
        fill(&mut e, top);
        match e.post(RecvSpec::new(0, None, Some(u64::from(top))), 0) {
            Ok(Posted::Matched(m)) => assert_eq!(m.msg, top),
            _ => panic!("round {round}: ANY_SOURCE receive of tag {top}"),
        }
        sizes.push(e.heap_bytes());
        drain(&mut e, top - 1);
        fill(&mut e, top);
        drain(&mut e, top);
    }
    assert!(
        sizes[1..].iter().all(|&s| s == sizes[1]),
        "heap after each period's first receive: {sizes:?}"
    );
}

//! A steady queue of `DEPTH` unexpected messages (distinct (comm, src, tag) keys, large
//! tags and sources: hashed lists) alternating runs of `RUN` arrivals of fresh keys and
//! `RUN` ANY_SOURCE receives of the oldest queued messages, `OPS` operations in all
//! (an operation is one arrival or one receive). `DEFER` 1: every wildcard receive may
//! defer its (comm, src, tag) index removal (flushed as tombstones); 0: none does.
//!
//! `cargo run --release -p tagmatch-engine --example tomb_churn -- DEPTH DEFER OPS RUN`;
//! per-operation costs are the difference of two runs (OPS and 2 × OPS) over OPS, so
//! that the filling is subtracted. Used to measure the tombstones' rebuilds of a queue
//! kept near 5/8 of its index's buckets (see docs/benchmarks.md).

use std::collections::VecDeque;
use tagmatch_engine::{Config, Engine, Envelope, Posted, RecvSpec};

fn arg(a: &[String], i: usize, default: usize) -> usize {
    a.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let depth = arg(&a, 1, 65_536);
    let defer = arg(&a, 2, 1) == 1;
    let ops = arg(&a, 3, 1_000_000);
    let run = arg(&a, 4, 32).max(1);
    let c = Config::default()
        .max_messages(1 << 22)
        .max_posted(1 << 22)
        .max_bytes(1 << 40);
    let mut e: Engine<u32, u32> = Engine::new(c);
    e.defer_removals_from(if defer { 0 } else { usize::MAX });
    let mut q = VecDeque::new();
    let mut tag: u64 = 1 << 40;
    let mut x: u64 = 88_172_645_463_325_252;
    let mut key = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        tag += 1;
        Envelope::new(0, (x % 50_000) as u32 + 100_000, tag)
    };
    for _ in 0..depth {
        let k = key();
        e.arrive(k, 1, 0).expect("within the budgets");
        q.push_back(k);
    }
    let mut done = 0;
    while done < ops {
        for _ in 0..run {
            let k = key();
            e.arrive(k, 1, 0).expect("within the budgets");
            q.push_back(k);
        }
        for _ in 0..run {
            let k = q.pop_front().expect("queued");
            match e.post(RecvSpec::new(0, None, Some(k.tag)), 0) {
                Ok(Posted::Matched(_)) => {}
                other => panic!("{k:?}: {other:?}"),
            }
        }
        done += 2 * run;
    }
    eprintln!(
        "depth {} heap bytes {}",
        e.counters().unexpected_depth,
        e.heap_bytes()
    );
}

//! Engine heap bytes per queued entry *during* a workload's timed phase, not only at the
//! end of its set-up (where `tagmatch bench match` and `tests/memory_per_entry.rs` measure
//! it, as `bench-workloads.md` "Memory" defines it).
//!
//! The engine's containers never shrink (a steady state allocates nothing), so the
//! figure is the heap after each operation divided by the entries the set-up queued (the
//! peak the memory is there for), not by the entries left. It shows what the set-up
//! figure leaves out: a single-wildcard receive builds its wildcard list kind on first
//! use (see the engine's lazy lists), after the set-up.
//!
//! ```text
//! cargo run --release -p tagmatch-engine --example mem_during [WORKLOAD [DEPTH]]
//! ```
//!
//! Without arguments: every workload at the depths of `tests/memory_per_entry.rs`'s
//! awkward list. Prints one line per (workload, depth): the set-up figure, the largest
//! figure seen during the timed phase, and after how many operations. Measured after
//! every operation up to depth 4,096, after the first four and every 61st beyond.

use tagmatch_engine::workload::{Params, Prepared, Workload};

const DEPTHS: [usize; 14] = [
    1, 2, 3, 5, 100, 513, 1000, 3000, 5000, 12_289, 16_385, 33_000, 50_000, 65_536,
];

/// Entries the set-up of `w` at `depth` queues (`many-peers`: 4 receives per peer).
fn queued(w: Workload, depth: usize) -> usize {
    if w == Workload::ManyPeers {
        4 * depth
    } else {
        depth
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let workloads: Vec<Workload> = match a.get(1) {
        Some(name) => match name.parse() {
            Ok(w) => vec![w],
            Err(e) => {
                eprintln!("mem_during: {e}");
                std::process::exit(2);
            }
        },
        None => Workload::ALL.to_vec(),
    };
    let depths: Vec<usize> = match a.get(2).map(|s| s.parse::<usize>()) {
        Some(Ok(d)) if d > 0 => vec![d],
        Some(_) => {
            eprintln!(
                "mem_during: DEPTH must be a positive integer, not {:?}",
                a[2]
            );
            std::process::exit(2);
        }
        None => DEPTHS.to_vec(),
    };
    for &w in &workloads {
        for &depth in &depths {
            let mut p = Prepared::new(w, &Params::new(depth));
            let entries = queued(w, depth) as f64;
            let setup = p.engine().heap_bytes() as f64 / entries;
            let (mut worst, mut at) = (setup, 0);
            let ops = p.ops();
            let step = if depth <= 4096 { 1 } else { 61 };
            for i in 0..ops {
                p.run_range(i, i + 1);
                if i < 4 || i % step == 0 || i + 1 == ops {
                    let b = p.engine().heap_bytes() as f64 / entries;
                    if b > worst {
                        (worst, at) = (b, i + 1);
                    }
                }
            }
            println!(
                "{:<22} depth {depth:>6}: set-up {setup:6.2} B per entry, during the timed phase at most {worst:6.2} (after {at} of {ops} operations)",
                w.name()
            );
        }
    }
}

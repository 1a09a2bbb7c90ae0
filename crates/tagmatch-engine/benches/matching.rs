//! criterion benches of the seven matching workloads (`shared/spec/bench-workloads.md`)
//! at depths 1, 64, 4096 and 65,536. Set-up is excluded (`iter_custom`: each group of
//! copies is timed right after its set-up); throughput is in timed operations, so
//! criterion's "elem/s" inverts to ns per operation.
//!
//! `cargo bench -p tagmatch-engine --bench matching`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::time::{Duration, Instant};
use tagmatch_engine::workload::{Params, Prepared, Workload};

const DEPTHS: [usize; 4] = [1, 64, 4096, 65_536];

fn matching(c: &mut Criterion) {
    for w in Workload::ALL {
        let mut g = c.benchmark_group(w.name());
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_millis(700));
        for n in DEPTHS {
            let p = Params::new(n);
            let ops = Prepared::new(w, &p).ops().max(1);
            // One iteration = a group of copies with >= 64 timed operations, each timed
            // right after its own set-up (so the engine is warm, as in `tagmatch bench`).
            let group = 64usize.div_ceil(ops);
            g.throughput(Throughput::Elements((ops * group) as u64));
            g.bench_function(format!("depth={n}"), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let mut preps: Vec<Prepared> =
                            (0..group).map(|_| Prepared::new(w, &p)).collect();
                        let t = Instant::now();
                        for prep in preps.iter_mut() {
                            std::hint::black_box(prep.run());
                        }
                        total += t.elapsed();
                    }
                    total
                })
            });
        }
        g.finish();
    }
}

/// Baseline: the linear unexpected queue every anchor uses for wildcard receives (MPICH
/// ch4 AM `utlist`, UCX `unexpected.all`): a doubly linked list in arrival order, scanned
/// from the head, O(1) unlink. Same `unexpected-any-source` workload as above.
mod linear {
    pub struct Queue {
        // (comm, src, tag, prev, next)
        nodes: Vec<(u32, u32, u64, u32, u32)>,
        head: u32,
    }
    const NIL: u32 = u32::MAX;

    impl Queue {
        /// N messages (src i, tag i) arrive.
        pub fn setup(n: usize) -> Queue {
            let nodes = (0..n as u32)
                .map(|i| {
                    let prev = if i == 0 { NIL } else { i - 1 };
                    let next = if i + 1 == n as u32 { NIL } else { i + 1 };
                    (0, i, u64::from(i), prev, next)
                })
                .collect();
            Queue {
                nodes,
                head: if n == 0 { NIL } else { 0 },
            }
        }

        /// Receive (comm, ANY_SOURCE, tag): first match from the head, unlinked.
        pub fn post_any_source(&mut self, comm: u32, tag: u64) -> Option<u32> {
            let mut cur = self.head;
            while cur != NIL {
                let (c, _, t, prev, next) = self.nodes[cur as usize];
                if c == comm && t == tag {
                    if prev == NIL {
                        self.head = next;
                    } else {
                        self.nodes[prev as usize].4 = next;
                    }
                    if next != NIL {
                        self.nodes[next as usize].3 = prev;
                    }
                    return Some(cur);
                }
                cur = next;
            }
            None
        }
    }
}

fn baseline(c: &mut Criterion) {
    let mut g = c.benchmark_group("baseline-linear-unexpected-any-source");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(700));
    for n in [64usize, 4096] {
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(format!("depth={n}"), |b| {
            b.iter_batched(
                || linear::Queue::setup(n),
                |mut q| {
                    let mut found = 0u32;
                    for i in (0..n as u64).rev() {
                        found = found.wrapping_add(q.post_any_source(0, i).unwrap_or(0));
                    }
                    std::hint::black_box(found);
                    q
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, matching, baseline);
criterion_main!(benches);

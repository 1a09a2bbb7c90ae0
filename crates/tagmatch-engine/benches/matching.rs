//! criterion benches of the seven matching workloads (`shared/spec/bench-workloads.md`)
//! at depths 1, 64, 4096 and 65,536. Set-up is excluded (`iter_batched`); throughput is
//! in timed operations, so criterion's "elem/s" inverts to ns per operation.
//!
//! `cargo bench -p tagmatch-engine --bench matching`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::time::Duration;
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
            let ops = Prepared::new(w, &p).ops() as u64;
            g.throughput(Throughput::Elements(ops));
            let size = if n >= 4096 {
                BatchSize::PerIteration
            } else {
                BatchSize::SmallInput
            };
            g.bench_function(format!("depth={n}"), |b| {
                b.iter_batched(
                    || Prepared::new(w, &p),
                    |mut prep| {
                        prep.run();
                        prep
                    },
                    size,
                )
            });
        }
        g.finish();
    }
}

criterion_group!(benches, matching);
criterion_main!(benches);

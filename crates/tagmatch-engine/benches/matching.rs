//! criterion benches of the seven matching workloads (`shared/spec/bench-workloads.md`)
//! at depths 1, 64, 4096 and 65,536, of the baselines (UCX-like, ob1-like, linear)
//! at 64 and 4096, and of the hash floor (`hash-floor/`: one hash-map insert or remove
//! per operation) on the exact workloads at the engine's depths. Set-up is excluded (`iter_custom`: each group of
//! copies is timed right after its set-up); throughput is in timed operations, so
//! criterion's "elem/s" inverts to ns per operation.
//!
//! `cargo bench -p tagmatch-engine --bench matching`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::time::{Duration, Instant};
use tagmatch_engine::baseline::{
    BaselinePrepared, HashFloor, Kind, Linear, Matcher, Ob1Like, UcxLike,
};
use tagmatch_engine::workload::{Params, Prepared, Workload};

const DEPTHS: [usize; 4] = [1, 64, 4096, 65_536];

fn matching(c: &mut Criterion) {
    bench_all(
        c,
        "",
        &DEPTHS,
        |_| true,
        Prepared::new,
        Prepared::ops,
        Prepared::run,
    );
}

/// The baselines of `tagmatch_engine::baseline` (UCX's, ob1's and MPICH's schemes) on
/// the same workloads at depths 64 and 4096, timed the same way (their wildcard and
/// per-peer searches are linear, so deeper runs take minutes).
fn baselines(c: &mut Criterion) {
    bench_baseline::<UcxLike>(c, Kind::Ucx);
    bench_baseline::<Ob1Like>(c, Kind::Ob1);
    bench_baseline::<Linear>(c, Kind::Linear);
    bench_all(
        c,
        &format!("{}/", Kind::HashFloor),
        &DEPTHS,
        HashFloor::supports,
        BaselinePrepared::<HashFloor>::new,
        BaselinePrepared::ops,
        |p| {
            let n = p.ops();
            p.run_range(0, n)
        },
    );
}

fn bench_baseline<B: Matcher + Default>(c: &mut Criterion, kind: Kind) {
    bench_all(
        c,
        &format!("{kind}/"),
        &[64, 4096],
        |_| true,
        BaselinePrepared::<B>::new,
        BaselinePrepared::ops,
        |p| {
            let n = p.ops();
            p.run_range(0, n)
        },
    );
}

/// Every workload that `which` selects at every depth on what `make` prepares: one
/// iteration is a group of
/// copies with >= 64 timed operations, each timed right after its own set-up (so the
/// structures are warm, as in `tagmatch bench`).
fn bench_all<P>(
    c: &mut Criterion,
    prefix: &str,
    depths: &[usize],
    which: impl Fn(Workload) -> bool,
    make: impl Fn(Workload, &Params) -> P,
    ops: impl Fn(&P) -> usize,
    run: impl Fn(&mut P) -> usize,
) {
    for w in Workload::ALL.into_iter().filter(|&w| which(w)) {
        let mut g = c.benchmark_group(format!("{prefix}{}", w.name()));
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_millis(700));
        for &n in depths {
            let p = Params::new(n);
            let count = ops(&make(w, &p)).max(1);
            let group = 64usize.div_ceil(count);
            g.throughput(Throughput::Elements((count * group) as u64));
            g.bench_function(format!("depth={n}"), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let mut preps: Vec<P> = (0..group).map(|_| make(w, &p)).collect();
                        let t = Instant::now();
                        for prep in preps.iter_mut() {
                            std::hint::black_box(run(prep));
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

criterion_group!(benches, matching, baselines);
criterion_main!(benches);

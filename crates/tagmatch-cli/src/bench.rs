//! `tagmatch bench match --workload <w> --depth <N> [--wildcard-fraction F] [--peers P]
//! [--json]`: times one workload of `shared/spec/bench-workloads.md` with the exact code of
//! `tagmatch_engine::workload` (the same the criterion benches run).
//!
//! Method: set-up is untimed. Copies of the workload are prepared in groups of at least 64
//! timed operations (one copy once the depth gives 64 operations), and each group's timed
//! phases are timed with one clock pair right after its set-up (clock overhead below 1 ns
//! per operation). A repetition is enough groups for at least 4096 operations; repetitions
//! continue until the timed phases add up to at least 100 ms (and at least 5 ran);
//! `ns_per_op` is the median repetition.
//! `p50_ns`/`p99_ns` come from separate instrumented repetitions that time batches of 16
//! operations and divide by 16 (one clock read per batch: the clock costs too much to
//! time single operations; the figures include about 1–2 ns of clock overhead).
//! `bytes_per_posted` / `bytes_per_unexpected`: engine heap bytes at the end of set-up
//! divided by the entries it holds, payload excluded; `null` when the workload's set-up
//! does not fill that queue.

use std::time::{Duration, Instant};

use tagmatch_engine::workload::{Params, Prepared, Workload};

use crate::{input, Error};

mod hw;

/// Arguments of `tagmatch bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to benchmark.
    #[command(subcommand)]
    pub what: What,
}

/// Benchmarks.
#[derive(Debug, clap::Subcommand)]
pub enum What {
    /// The matching engine on one workload.
    #[command(name = "match")]
    Match(MatchArgs),
}

/// Arguments of `tagmatch bench match`.
#[derive(Debug, clap::Args)]
pub struct MatchArgs {
    /// Workload: posted-exact, unexpected-exact, unexpected-any-source,
    /// unexpected-any-tag, wildcard-mix, many-peers, cancel-mix.
    #[arg(long, value_name = "W")]
    pub workload: String,
    /// Queue depth N.
    #[arg(long, value_name = "N")]
    pub depth: usize,
    /// Fraction of wildcard receives in wildcard-mix (0..=1).
    #[arg(long, value_name = "F", default_value_t = 0.1)]
    pub wildcard_fraction: f64,
    /// Number of peers (wildcard-mix: default 1; many-peers: default N).
    #[arg(long, value_name = "P")]
    pub peers: Option<usize>,
    /// Print one JSON object instead of a text line.
    #[arg(long)]
    pub json: bool,
    /// Run through the offload driver and a TM-SRQ model with H hardware tags and add
    /// the offload counters.
    #[arg(long, value_name = "H")]
    pub hw_tags: Option<u32>,
}

/// Measured figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    /// Timed operations per workload instance.
    pub ops: usize,
    /// Median repetition, ns per operation.
    pub ns_per_op: f64,
    /// Median of 16-operation batches, ns per operation.
    pub p50_ns: f64,
    /// 99th percentile of 16-operation batches, ns per operation.
    pub p99_ns: f64,
    /// Engine heap bytes per posted receive after set-up.
    pub bytes_per_posted: Option<f64>,
    /// Engine heap bytes per unexpected message after set-up.
    pub bytes_per_unexpected: Option<f64>,
}

const MIN_OPS_PER_REP: usize = 4096;
const GROUP_OPS: usize = 64;
const BATCH: usize = 16;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs the measurement (`min_time` of timed phases, at least `min_reps` repetitions).
pub fn measure(w: Workload, p: &Params, min_time: Duration, min_reps: usize) -> Figures {
    let probe = Prepared::new(w, p);
    let ops = probe.ops().max(1);
    // A group is timed with one clock pair: enough copies for >= GROUP_OPS operations
    // (one copy when the workload has that many), prepared just before, so the engine
    // under test is as warm as set-up leaves it; a repetition is enough groups for
    // >= MIN_OPS_PER_REP operations.
    let group = GROUP_OPS.div_ceil(ops).max(1);
    let groups = MIN_OPS_PER_REP.div_ceil(ops * group).max(1);
    let mut per_rep = Vec::new();
    let mut batches = Vec::new();
    let mut total = Duration::ZERO;
    let mut rep = 0usize;
    while total < min_time || rep < min_reps {
        let mut rep_time = Duration::ZERO;
        for _ in 0..groups {
            let mut preps: Vec<Prepared> = (0..group).map(|_| Prepared::new(w, p)).collect();
            if rep % 2 == 0 {
                let t = Instant::now();
                for prep in preps.iter_mut() {
                    std::hint::black_box(prep.run());
                }
                rep_time += t.elapsed();
            } else {
                let t0 = Instant::now();
                for prep in preps.iter_mut() {
                    let mut i = 0;
                    while i < ops {
                        let end = (i + BATCH).min(ops);
                        let t = Instant::now();
                        std::hint::black_box(prep.run_range(i, end));
                        batches.push(t.elapsed().as_nanos() as f64 / (end - i) as f64);
                        i = end;
                    }
                }
                rep_time += t0.elapsed();
            }
        }
        if rep % 2 == 0 {
            per_rep.push(rep_time.as_nanos() as f64 / (groups * group * ops) as f64);
        }
        total += rep_time;
        rep += 1;
    }
    per_rep.sort_by(f64::total_cmp);
    batches.sort_by(f64::total_cmp);
    Figures {
        ops,
        ns_per_op: percentile(&per_rep, 0.5),
        p50_ns: percentile(&batches, 0.5),
        p99_ns: percentile(&batches, 0.99),
        bytes_per_posted: probe.bytes_per_posted(),
        bytes_per_unexpected: probe.bytes_per_unexpected(),
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Runs `tagmatch bench`.
pub fn run(args: Args) -> Result<(), Error> {
    let What::Match(a) = args.what;
    let fail = |e: String| Error::new("bench match", e);
    let w: Workload = a.workload.parse().map_err(|e| fail(format!("{e}")))?;
    if a.depth == 0 {
        return Err(fail("--depth must be at least 1".into()));
    }
    if !(0.0..=1.0).contains(&a.wildcard_fraction) {
        return Err(fail("--wildcard-fraction must be within 0..=1".into()));
    }
    if a.peers == Some(0) {
        return Err(fail("--peers must be at least 1".into()));
    }
    let mut p = Params::new(a.depth);
    p.wildcard_fraction = a.wildcard_fraction;
    p.peers = a.peers;
    let (f, hw) = match a.hw_tags {
        None => (measure(w, &p, Duration::from_millis(100), 5), None),
        Some(h) => {
            let (f, run) = hw::measure(w, &p, h, Duration::from_millis(100), 5);
            (f, Some((h, run.driver().counters())))
        }
    };
    let text = if a.json {
        let mut j = serde_json::json!({
            "workload": w.name(),
            "depth": a.depth,
            "ops": f.ops,
            "ns_per_op": round2(f.ns_per_op),
            "p50_ns": round2(f.p50_ns),
            "p99_ns": round2(f.p99_ns),
            "bytes_per_posted": f.bytes_per_posted.map(round2),
            "bytes_per_unexpected": f.bytes_per_unexpected.map(round2),
        });
        if let Some((h, c)) = &hw {
            j["hw_tags"] = (*h).into();
            j["offload"] = crate::replay::offload_json(c);
        }
        j.to_string()
    } else {
        let bytes = |b: Option<f64>| b.map_or("-".to_string(), |b| format!("{b:.1}"));
        format!(
            "{} depth={} ops={} ns/op={:.2} p50={:.2} p99={:.2} bytes/posted={} bytes/unexpected={}",
            w.name(),
            a.depth,
            f.ops,
            f.ns_per_op,
            f.p50_ns,
            f.p99_ns,
            bytes(f.bytes_per_posted),
            bytes(f.bytes_per_unexpected)
        ) + &hw.map_or(String::new(), |(h, c)| {
            format!(
                " hw_tags={h} offloaded={} matched_hw={} matched_sw={} blocked_sw_pending={} blocked_tags_full={} syncs={}",
                c.offloaded, c.matched_hw, c.matched_sw, c.blocked_sw_pending, c.blocked_tags_full, c.syncs
            )
        })
    };
    input::print_line(&text).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measure_reports_ops_and_memory() {
        let f = measure(
            Workload::UnexpectedExact,
            &Params::new(8),
            Duration::ZERO,
            2,
        );
        assert_eq!(f.ops, 8);
        assert!(f.bytes_per_unexpected.is_some_and(|b| b > 0.0));
        assert_eq!(f.bytes_per_posted, None);
    }

    #[test]
    fn percentile_picks_rank() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert_eq!(percentile(&v, 0.99), 5.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}

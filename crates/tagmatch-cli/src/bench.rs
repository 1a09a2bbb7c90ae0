//! `tagmatch bench match --workload <w> --depth <N> [--wildcard-fraction F] [--peers P]
//! [--json]`: times one workload of `shared/spec/bench-workloads.md` with the exact code of
//! `tagmatch_engine::workload` (the same the criterion benches run).
//!
//! Method: the command first pins itself to one CPU (`--cpu`, default the CPU it starts
//! on; `--cpu any` does not pin), so that the scheduler does not move the measurement to a
//! core whose caches hold none of it. Set-up is untimed. Copies of the workload are prepared in groups of at least 64
//! timed operations (one copy once the depth gives 64 operations), and each group's timed
//! phases are timed with one clock pair right after its set-up (the TSC through `quanta`:
//! a pair of readings costs about 20 ns in this VM, an `Instant` pair about 50; clock
//! overhead about 0.3 ns per operation), in one loop over the
//! copies (`Runnable::run_group`: the engine's version folds every matched id into one
//! checksum per group, passed to `black_box`). Workloads of fewer than
//! 64 operations keep one group of copies (at least 32 operations and at most 16 copies:
//! at depth 1, 16 operations and a clock overhead of about 1.25 ns per operation, since
//! each copy adds cache lines a single engine does not have) that run their set-up again
//! on the same engine before each timing
//! (every timed phase leaves the engine empty), so each engine is as warm as its set-up
//! leaves it, as a single engine in an application is (new copies each time were left in
//! L2 by the set-up of the copies after them: 4.8–7.6 L1 misses per operation at depth 1,
//! 0.2–1.1 when reused). A repetition is enough groups for at least 4096 operations;
//! repetitions continue until the timed phases add up to at least 100 ms (and at least 5
//! ran);
//! `ns_per_op` is the median repetition.
//! `p50_ns`/`p99_ns` come from separate instrumented repetitions that time batches of 16
//! operations and divide by 16 (one clock read per batch: the clock costs too much to
//! time single operations; the figures include about 1 ns of clock overhead).
//! `bytes_per_posted` / `bytes_per_unexpected`: engine heap bytes at the end of set-up
//! divided by the entries it holds, payload excluded; `null` when the workload's set-up
//! does not fill that queue.
//!
//! `--engine ucx-like|ob1-like|linear` runs the same workloads, measured the same way, on
//! a baseline of `tagmatch_engine::baseline` (the schemes of UCX, Open MPI ob1 and MPICH)
//! instead of the engine; the JSON then adds `"engine"`. `--engine hash-floor` runs the
//! exact workloads on `tagmatch_engine::baseline::HashFloor`: one hash-map insert or
//! remove per operation and nothing else, what any matcher that hashes (comm, src, tag)
//! pays at least on the machine at hand.

use std::sync::OnceLock;
use std::time::Duration;

/// The timing clock: the TSC through `quanta` where it is usable (invariant, calibrated
/// once per process), about 20 ns per pair of readings here against about 50 for an
/// `Instant` pair (`clock_gettime`), half the clock cost per group of operations;
/// `quanta` falls back to the monotonic clock elsewhere.
fn clock() -> &'static quanta::Clock {
    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
    CLOCK.get_or_init(quanta::Clock::new)
}

use tagmatch_engine::baseline::{
    self, BaselinePrepared, HashFloor, Linear, Matcher, Ob1Like, UcxLike,
};
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
    /// Fraction of wildcard receives in wildcard-mix (0..=1; default 0.1). Only
    /// wildcard-mix takes it.
    #[arg(long, value_name = "F")]
    pub wildcard_fraction: Option<f64>,
    /// Number of peers (wildcard-mix: default 1; many-peers: default N). Only those two
    /// workloads take it.
    #[arg(long, value_name = "P")]
    pub peers: Option<usize>,
    /// Print one JSON object instead of a text line.
    #[arg(long)]
    pub json: bool,
    /// Run through the offload driver and a TM-SRQ model with H hardware tags and add
    /// the offload counters.
    #[arg(long, value_name = "H")]
    pub hw_tags: Option<u32>,
    /// What matches: tagmatch (the engine), or a baseline re-implementing another
    /// library's scheme on the same workloads: ucx-like (1021 hash buckets + one wildcard
    /// queue; wildcard receives scan every unexpected message), ob1-like (per-peer
    /// lists; ANY_SOURCE receives walk every peer), linear (MPICH: one list per queue);
    /// or hash-floor, not a matcher: one hash-map insert or remove per operation, the
    /// floor of any hash-indexed matcher on this machine (exact workloads only).
    #[arg(long, value_name = "E", default_value = "tagmatch")]
    pub engine: String,
    /// Link every unexpected message into the engine's wildcard lists at arrival instead
    /// of when a wildcard receive first needs them (`Config::eager_wildcard_lists`).
    #[arg(long)]
    pub eager_wildcard_lists: bool,
    /// The CPU the measurement runs on: a CPU number, or `any` (no pinning). Default: the
    /// CPU the command starts on (Linux; elsewhere `any`). A single-threaded measurement
    /// that the scheduler moves to another core mid-run finds its caches empty there:
    /// on a 2-vCPU VM, 4 of 10 unpinned runs of unexpected-any-source at 65,536 read
    /// 28–33 ns against 20–21 pinned (as `ucx_perftest -c` pins its threads).
    #[arg(long, value_name = "N|any")]
    pub cpu: Option<String>,
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
/// Operations per group of reused copies (workloads of fewer than [`GROUP_OPS`]), with at
/// most [`MAX_REUSE_COPIES`] copies.
const REUSE_OPS: usize = 32;
/// Most copies in a group of reused copies. Copies are there only to spread the clock's
/// cost; each adds cache lines (and cache-set conflicts: equal-sized allocations at equal
/// offsets) that a single engine in an application does not have. At depth 1, 32 copies
/// read 10.2–11.0 ns per operation and 16 copies 9.4–9.9 (clock 0.6 and 1.25 ns of it),
/// and at depths 4–32 2–16 copies beat 16 by 0.3–0.8 ns: the fewest copies that keep the
/// clock near 1 ns per operation.
const MAX_REUSE_COPIES: usize = 16;
const BATCH: usize = 16;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// A workload after its set-up, on whatever runs it (the engine, a baseline, the
/// offload driver): what the measurement needs.
pub trait Runnable {
    /// Timed operations.
    fn ops(&self) -> usize;
    /// Runs timed operations `start..end`, in order; the matches made so far.
    fn run_range(&mut self, start: usize, end: usize) -> usize;
    /// Heap bytes per posted receive and per unexpected message at the end of set-up.
    fn bytes(&self) -> (Option<f64>, Option<f64>);
    /// Runs the set-up again on the same state after a complete timed phase that left it
    /// empty; `false` if it cannot (then every repetition prepares new copies).
    fn again(&mut self) -> bool {
        false
    }
    /// Runs the whole timed phase of each of `group`, in order (none started); the
    /// matches made, or anything else derived from every result, for `black_box`.
    #[inline]
    fn run_group(group: &mut [Self]) -> usize
    where
        Self: Sized,
    {
        let mut s = 0;
        for p in group {
            let ops = p.ops();
            s += std::hint::black_box(p.run_range(0, ops));
        }
        s
    }
}

impl Runnable for Prepared {
    fn ops(&self) -> usize {
        Prepared::ops(self)
    }
    #[inline]
    fn run_range(&mut self, start: usize, end: usize) -> usize {
        Prepared::run_range(self, start, end)
    }
    fn bytes(&self) -> (Option<f64>, Option<f64>) {
        (self.bytes_per_posted(), self.bytes_per_unexpected())
    }
    fn again(&mut self) -> bool {
        Prepared::again(self)
    }
    #[inline]
    fn run_group(group: &mut [Self]) -> usize {
        Prepared::run_group(group)
    }
}

impl<B: Matcher> Runnable for BaselinePrepared<B> {
    fn ops(&self) -> usize {
        BaselinePrepared::ops(self)
    }
    #[inline]
    fn run_range(&mut self, start: usize, end: usize) -> usize {
        BaselinePrepared::run_range(self, start, end)
    }
    fn bytes(&self) -> (Option<f64>, Option<f64>) {
        (self.bytes_per_posted(), self.bytes_per_unexpected())
    }
    fn again(&mut self) -> bool {
        BaselinePrepared::again(self)
    }
}

/// Runs the measurement on the engine (`min_time` of timed phases, at least `min_reps`
/// repetitions).
pub fn measure(w: Workload, p: &Params, min_time: Duration, min_reps: usize) -> Figures {
    measure_with(|| Prepared::new(w, p), min_time, min_reps).0
}

/// Runs the measurement on what `make` prepares (the method of the module
/// documentation); returns the figures and the last prepared run (for its counters).
pub fn measure_with<P: Runnable>(
    mut make: impl FnMut() -> P,
    min_time: Duration,
    min_reps: usize,
) -> (Figures, P) {
    let mut last = make();
    let ops = last.ops().max(1);
    let (bytes_per_posted, bytes_per_unexpected) = last.bytes();
    // Workloads with fewer than GROUP_OPS operations: a fixed set of copies (>= REUSE_OPS
    // operations) that run their set-up again on the same state before each group
    // (`Runnable::again`), so each engine is as warm as its set-up leaves it, as one
    // engine in an application is; preparing new copies each time (the fallback, and the
    // method for larger workloads) left the engines of a group in L2 (callgrind: 4.8–7.6
    // L1 misses per operation at depth 1 against 0.2–1.1). A whole untimed run first
    // tells whether the state can run its set-up again.
    let mut kept: Vec<P> = Vec::new();
    if ops < GROUP_OPS {
        let n = REUSE_OPS.div_ceil(ops).min(MAX_REUSE_COPIES);
        for _ in 0..n {
            let mut p = make();
            std::hint::black_box(p.run_range(0, ops));
            if !p.again() {
                kept.clear();
                break;
            }
            kept.push(p);
        }
    }
    let reuse = !kept.is_empty();
    // A group is timed with one clock pair: enough copies for >= GROUP_OPS operations
    // (one copy when the workload has that many), prepared just before, so the engine
    // under test is as warm as set-up leaves it; a repetition is enough groups for
    // >= MIN_OPS_PER_REP operations.
    let group = if reuse {
        kept.len()
    } else {
        GROUP_OPS.div_ceil(ops).max(1)
    };
    let groups = MIN_OPS_PER_REP.div_ceil(ops * group).max(1);
    let mut per_rep = Vec::new();
    let mut batches = Vec::new();
    let mut total = Duration::ZERO;
    let mut rep = 0usize;
    let clock = clock();
    while total < min_time || rep < min_reps {
        let mut rep_time = Duration::ZERO;
        for _ in 0..groups {
            let mut fresh: Vec<P>;
            let preps: &mut Vec<P> = if reuse {
                for p in kept.iter_mut() {
                    if !p.again() {
                        *p = make();
                    }
                }
                &mut kept
            } else {
                fresh = (0..group).map(|_| make()).collect();
                &mut fresh
            };
            if rep % 2 == 0 {
                let t = clock.raw();
                std::hint::black_box(P::run_group(preps));
                let t1 = clock.raw();
                rep_time += Duration::from_nanos(clock.delta_as_nanos(t, t1));
            } else {
                let t0 = clock.raw();
                for prep in preps.iter_mut() {
                    let mut i = 0;
                    while i < ops {
                        let end = (i + BATCH).min(ops);
                        let t = clock.raw();
                        std::hint::black_box(prep.run_range(i, end));
                        let t1 = clock.raw();
                        batches.push(clock.delta_as_nanos(t, t1) as f64 / (end - i) as f64);
                        i = end;
                    }
                }
                let t1 = clock.raw();
                rep_time += Duration::from_nanos(clock.delta_as_nanos(t0, t1));
            }
            if !reuse {
                if let Some(p) = preps.pop() {
                    last = p;
                }
            }
        }
        if rep % 2 == 0 {
            per_rep.push(rep_time.as_nanos() as f64 / (groups * group * ops) as f64);
        }
        total += rep_time;
        rep += 1;
    }
    if let Some(p) = kept.pop() {
        last = p;
    }
    per_rep.sort_by(f64::total_cmp);
    batches.sort_by(f64::total_cmp);
    (
        Figures {
            ops,
            ns_per_op: percentile(&per_rep, 0.5),
            p50_ns: percentile(&batches, 0.5),
            p99_ns: percentile(&batches, 0.99),
            bytes_per_posted,
            bytes_per_unexpected,
        },
        last,
    )
}

/// [`measure_with`] on baseline `B`.
fn baseline_figures<B: Matcher + Default>(w: Workload, p: &Params, t: Duration) -> Figures {
    measure_with(|| BaselinePrepared::<B>::new(w, p), t, 5).0
}

/// `--engine hash-floor`: only the exact workloads, and a run that did every operation.
fn hash_floor_figures(w: Workload, p: &Params, t: Duration) -> Result<Figures, Error> {
    let fail = |e: String| Error::new("bench match", e);
    if !HashFloor::supports(w) {
        let names: Vec<&str> = Workload::ALL
            .into_iter()
            .filter(|&w| HashFloor::supports(w))
            .map(Workload::name)
            .collect();
        return Err(fail(format!(
            "--engine hash-floor measures the exact workloads only ({}), not {w}",
            names.join(", ")
        )));
    }
    let (f, run) = measure_with(|| BaselinePrepared::<HashFloor>::new(w, p), t, 5);
    match run.baseline().unsupported() {
        0 => Ok(f),
        n => Err(fail(format!(
            "--engine hash-floor: {n} operations of {w} were outside its domain"
        ))),
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
    // An option the workload does not use is an error, not silently ignored.
    if a.wildcard_fraction.is_some() && w != Workload::WildcardMix {
        return Err(fail(format!(
            "--wildcard-fraction applies to wildcard-mix only, not {w}"
        )));
    }
    if a.peers.is_some() && !matches!(w, Workload::WildcardMix | Workload::ManyPeers) {
        return Err(fail(format!(
            "--peers applies to wildcard-mix and many-peers only, not {w}"
        )));
    }
    let wildcard_fraction = a.wildcard_fraction.unwrap_or(0.1);
    if !(0.0..=1.0).contains(&wildcard_fraction) {
        return Err(fail("--wildcard-fraction must be within 0..=1".into()));
    }
    if a.peers == Some(0) {
        return Err(fail("--peers must be at least 1".into()));
    }
    let cpu = crate::cpu::parse(a.cpu.as_deref(), crate::cpu::Cpu::Current).map_err(fail)?;
    crate::cpu::pin(cpu).map_err(fail)?;
    let mut p = Params::new(a.depth);
    p.wildcard_fraction = wildcard_fraction;
    p.peers = a.peers;
    p.eager_wildcard_lists = a.eager_wildcard_lists;
    let kind: baseline::Kind = a
        .engine
        .parse()
        .map_err(|e| fail(format!("--engine: {e}")))?;
    let t = Duration::from_millis(100);
    let (f, hw) = match (a.hw_tags, kind) {
        (None, baseline::Kind::Tagmatch) => (measure(w, &p, t, 5), None),
        (None, baseline::Kind::Ucx) => (baseline_figures::<UcxLike>(w, &p, t), None),
        (None, baseline::Kind::Ob1) => (baseline_figures::<Ob1Like>(w, &p, t), None),
        (None, baseline::Kind::Linear) => (baseline_figures::<Linear>(w, &p, t), None),
        (None, baseline::Kind::HashFloor) => (hash_floor_figures(w, &p, t)?, None),
        (Some(h), baseline::Kind::Tagmatch) => {
            let (f, run) = measure_with(|| hw::HwPrepared::new(w, &p, h), t, 5);
            (f, Some((h, run.driver().counters())))
        }
        (Some(_), k) => {
            return Err(fail(format!(
                "--hw-tags runs the engine's offload driver; it does not apply to --engine {k}"
            )))
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
        if kind != baseline::Kind::Tagmatch {
            j["engine"] = kind.name().into();
        }
        if a.eager_wildcard_lists {
            j["eager_wildcard_lists"] = true.into();
        }
        if let Some((h, c)) = &hw {
            j["hw_tags"] = (*h).into();
            j["offload"] = crate::replay::offload_json(c);
        }
        j.to_string()
    } else {
        let bytes = |b: Option<f64>| b.map_or("-".to_string(), |b| format!("{b:.1}"));
        format!(
            "{}{} depth={} ops={} ns/op={:.2} p50={:.2} p99={:.2} bytes/posted={} bytes/unexpected={}",
            w.name(),
            match (kind, a.eager_wildcard_lists) {
                (baseline::Kind::Tagmatch, false) => String::new(),
                (baseline::Kind::Tagmatch, true) => " eager-wildcard-lists".to_string(),
                (k, _) => format!(" engine={k}"),
            },
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

//! `tagmatch bench match --hw-tags H`: the workloads of `shared/spec/bench-workloads.md`
//! through the offload driver and the TM-SRQ model with `max_num_tags = H` ("with operation
//! completions delivered as soon as possible": after every operation the model executes
//! every queued list operation and the driver polls every completion).
//!
//! The operations are those of `tagmatch_engine::workload::Plan` (the very definitions the
//! software run and the criterion benches use). The figures are measured
//! like the software run (median repetition for `ns_per_op`, batches of 16 for p50/p99) and
//! include the model's cost; `bytes_per_*` are the software engine's heap bytes after
//! set-up. The JSON adds `hw_tags` and the offload counters of one run (`offload`).

use std::time::{Duration, Instant};

use tagmatch_engine::offload::{Driver, DriverConfig, Event, OffHandle, PostOutcome};
use tagmatch_engine::tm_srq::TmCaps;
use tagmatch_engine::workload::{Op, Params, Plan, Workload};
use tagmatch_engine::Config;

use super::{percentile, Figures};

/// A workload after its set-up, on the driver.
pub struct HwPrepared {
    d: Driver<u32, u32>,
    /// Pending receives by receive id.
    handles: Vec<Option<OffHandle>>,
    ops: Vec<Op>,
    ev: Vec<Event<u32, u32>>,
    matches: usize,
    setup_heap: usize,
    setup_posted: usize,
    setup_unexpected: usize,
}

impl HwPrepared {
    /// Runs the set-up of `w` with `hw_tags` tags (0: no TM-SRQ).
    pub fn new(w: Workload, p: &Params, hw_tags: u32) -> Self {
        let Plan { setup, timed: ops } = Plan::new(w, p);
        let engine = Config::default()
            .max_bytes(usize::MAX)
            .max_messages(usize::MAX)
            .max_posted(usize::MAX);
        let d = Driver::new(DriverConfig {
            engine,
            caps: (hw_tags > 0).then(|| TmCaps::with_tags(hw_tags)),
            srq_depth: (2 * p.depth.max(1) + 16).min(1 << 24) as u32,
            ..DriverConfig::default()
        });
        let mut h = HwPrepared {
            d,
            handles: Vec::new(),
            ops: Vec::new(),
            ev: Vec::new(),
            matches: 0,
            setup_heap: 0,
            setup_posted: 0,
            setup_unexpected: 0,
        };
        for op in setup {
            h.apply(op);
        }
        h.matches = 0;
        let c = h.d.engine_counters();
        h.setup_heap = h.d.engine_heap_bytes();
        h.setup_posted = c.posted_depth;
        h.setup_unexpected = c.unexpected_depth;
        h.ops = ops;
        h
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Post(spec, rid) => match self.d.post(spec, u32::MAX, rid) {
                Ok(PostOutcome::Matched(_)) => self.matches += 1,
                Ok(PostOutcome::Pending(h)) => {
                    let i = rid as usize;
                    if self.handles.len() <= i {
                        self.handles.resize(i + 1, None);
                    }
                    self.handles[i] = Some(h);
                }
                Err(_) => {}
            },
            Op::Arrive(env, mid) => {
                let w = self.d.eager(env, 0, mid);
                let _ = self.d.wire(w);
            }
            Op::Cancel(rid) => {
                if let Some(h) = self.handles.get_mut(rid as usize).and_then(Option::take) {
                    let _ = self.d.cancel(h);
                }
            }
        }
        // Completions as soon as possible.
        self.d.settle(&mut self.ev);
        for e in self.ev.drain(..) {
            if let Event::Matched(m) = e {
                if let Some(h) = self.handles.get_mut(m.recv as usize) {
                    *h = None;
                }
                self.matches += 1;
            }
        }
    }

    /// Timed operations.
    pub fn ops(&self) -> usize {
        self.ops.len()
    }

    /// Runs timed operations `start..end`; returns the matches so far.
    pub fn run_range(&mut self, start: usize, end: usize) -> usize {
        let end = end.min(self.ops.len());
        for i in start.min(end)..end {
            let op = self.ops[i];
            self.apply(op);
        }
        self.matches
    }

    /// The driver (counters).
    pub fn driver(&self) -> &Driver<u32, u32> {
        &self.d
    }
}

/// Measures like the software run; returns the figures and one prepared run (for its
/// counters).
pub fn measure(
    w: Workload,
    p: &Params,
    hw_tags: u32,
    min_time: Duration,
    min_reps: usize,
) -> (Figures, HwPrepared) {
    let mut last = HwPrepared::new(w, p, hw_tags);
    let ops = last.ops().max(1);
    let (bpp, bpu) = (
        (last.setup_posted > 0 && last.setup_unexpected == 0)
            .then(|| last.setup_heap as f64 / last.setup_posted as f64),
        (last.setup_unexpected > 0 && last.setup_posted == 0)
            .then(|| last.setup_heap as f64 / last.setup_unexpected as f64),
    );
    let mut per_rep = Vec::new();
    let mut batches = Vec::new();
    let mut total = Duration::ZERO;
    let mut rep = 0usize;
    while total < min_time || rep < min_reps {
        let mut prep = HwPrepared::new(w, p, hw_tags);
        let t0 = Instant::now();
        if rep % 2 == 0 {
            std::hint::black_box(prep.run_range(0, ops));
            let t = t0.elapsed();
            per_rep.push(t.as_nanos() as f64 / ops as f64);
        } else {
            let mut i = 0;
            while i < ops {
                let end = (i + 16).min(ops);
                let t = Instant::now();
                std::hint::black_box(prep.run_range(i, end));
                batches.push(t.elapsed().as_nanos() as f64 / (end - i) as f64);
                i = end;
            }
        }
        total += t0.elapsed();
        rep += 1;
        last = prep;
    }
    per_rep.sort_by(f64::total_cmp);
    batches.sort_by(f64::total_cmp);
    (
        Figures {
            ops,
            ns_per_op: percentile(&per_rep, 0.5),
            p50_ns: percentile(&batches, 0.5),
            p99_ns: percentile(&batches, 0.99),
            bytes_per_posted: bpp,
            bytes_per_unexpected: bpu,
        },
        last,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_matches_everything_through_the_driver() {
        for w in Workload::ALL {
            for tags in [0, 1, 8, 1024] {
                let p = Params::new(50);
                let mut sw = tagmatch_engine::workload::Prepared::new(w, &p);
                let mut hw = HwPrepared::new(w, &p, tags);
                let want = sw.run();
                assert_eq!(hw.run_range(0, hw.ops()), want, "{w} tags={tags}");
                let c = hw.driver().counters();
                assert_eq!(c.order_violations, 0);
                if tags == 0 {
                    assert_eq!(c.offloaded, 0);
                } else if w == Workload::PostedExact {
                    assert!(c.matched_hw > 0, "{w} tags={tags}");
                }
                let e = hw.driver().engine_counters();
                assert_eq!((e.posted_depth, e.unexpected_depth), (0, 0), "{w}");
            }
        }
    }
}

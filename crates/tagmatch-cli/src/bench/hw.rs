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

use tagmatch_engine::offload::{Driver, DriverConfig, Event, OffHandle, PostOutcome};
use tagmatch_engine::tm_srq::TmCaps;
use tagmatch_engine::workload::{Op, Params, Plan, Workload};
use tagmatch_engine::Config;

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
            .max_posted(usize::MAX)
            .eager_wildcard_lists(p.eager_wildcard_lists);
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

impl super::Runnable for HwPrepared {
    fn ops(&self) -> usize {
        HwPrepared::ops(self)
    }
    fn run_range(&mut self, start: usize, end: usize) -> usize {
        HwPrepared::run_range(self, start, end)
    }
    /// The software engine's heap bytes after set-up.
    fn bytes(&self) -> (Option<f64>, Option<f64>) {
        (
            (self.setup_posted > 0 && self.setup_unexpected == 0)
                .then(|| self.setup_heap as f64 / self.setup_posted as f64),
            (self.setup_unexpected > 0 && self.setup_posted == 0)
                .then(|| self.setup_heap as f64 / self.setup_unexpected as f64),
        )
    }
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

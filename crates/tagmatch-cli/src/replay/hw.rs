//! `tagmatch replay --hw-tags <N> [--seed <S>]`: the same trace through the offload driver
//! (`tagmatch_engine::offload`) and the TM-SRQ model, printing exactly what the software
//! replay prints.
//!
//! The model's list operations (ADD, DEL, SYNC) execute, and their completions are
//! polled, at random moments chosen by a generator seeded with `--seed`: after every trace
//! line, a random number of the queued operations execute and a random number of the
//! waiting completions is polled. A message's fate is settled at its
//! `arrive` line (its completion is polled there, as the TM-SRQ reports arrivals
//! immediately), and a `cancel` of an offloaded receive waits for its DEL. So operations
//! in flight race with arrivals (new tags disabled by the unexpected count, stale entries,
//! syncs) while every printed line must stay the software engine's. `--hw-tags 0` runs
//! everything in software through the driver.

use std::io::{Read, Write};

use tagmatch_engine::offload::{
    CancelOutcome, Driver, DriverConfig, Event, OffHandle, OffloadCounters, PostOutcome,
};
use tagmatch_engine::tm_srq::TmCaps;
use tagmatch_engine::{Counters, Envelope, MsgHandle, RecvSpec};

use super::{run_trace, unlimited, Outcome, Runner};

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The offload driver and the TM-SRQ model as a [`Runner`], with random hardware timing.
struct HwRunner {
    d: Driver<String, String>,
    rng: Rng,
    ev: Vec<Event<String, String>>,
}

impl HwRunner {
    fn new(hw_tags: u32, seed: u64) -> Self {
        HwRunner {
            d: Driver::new(DriverConfig {
                engine: unlimited(),
                caps: (hw_tags > 0).then(|| TmCaps::with_tags(hw_tags)),
                ..DriverConfig::default()
            }),
            rng: Rng(seed),
            ev: Vec::new(),
        }
    }

    /// Polls every completion available.
    fn poll(&mut self, fx: &mut Vec<Outcome>) -> Result<(), String> {
        self.d.poll(&mut self.ev);
        self.drain_events(fx)
    }

    /// Turns the driver's events into outcomes.
    fn drain_events(&mut self, fx: &mut Vec<Outcome>) -> Result<(), String> {
        for e in self.ev.drain(..) {
            match e {
                Event::Matched(m) => fx.push(Outcome::Match(m.recv, m.msg)),
                Event::Unexpected { .. } | Event::DataValid { .. } | Event::NoTag(_) => {}
                Event::Cancelled { recv, .. } => fx.push(Outcome::Cancelled(recv)),
                // Printed by the `cancel` line that waits for it.
                Event::CancelFailed { .. } => {}
                Event::Rejected(r) => return Err(format!("arrive: {}", r.reason)),
                // The model fails no match unless a fault is injected; the replay injects none.
                Event::RecvFailed { status, .. } => {
                    return Err(format!("hardware receive failed: {status:?}"))
                }
            }
        }
        Ok(())
    }

    /// Runs the hardware until nothing is queued and everything is polled.
    fn settle(&mut self, fx: &mut Vec<Outcome>) -> Result<(), String> {
        loop {
            self.poll(fx)?;
            let more = self.d.hw_mut().is_some_and(|h| h.execute_op());
            if !more && self.d.deferred_ops() == 0 {
                return self.poll(fx);
            }
        }
    }
}

impl Runner for HwRunner {
    type Handle = OffHandle;

    fn post(
        &mut self,
        spec: RecvSpec,
        rid: &str,
        fx: &mut Vec<Outcome>,
    ) -> Result<Option<OffHandle>, ()> {
        match self.d.post(spec, u32::MAX, rid.to_string()) {
            Ok(PostOutcome::Matched(m)) => {
                fx.push(Outcome::Match(m.recv, m.msg));
                Ok(None)
            }
            Ok(PostOutcome::Pending(h)) => Ok(Some(h)),
            Err(_) => Err(()),
        }
    }

    fn arrive(&mut self, env: Envelope, mid: &str, fx: &mut Vec<Outcome>) -> Result<(), String> {
        let w = self.d.eager(env, 0, mid.to_string());
        self.d
            .wire(w)
            .map_err(|_| "arrive: receive queue exhausted".to_string())?;
        // The TM-SRQ reports the arrival at once: its completion is polled here.
        self.poll(fx)
    }

    fn probe(&mut self, spec: &RecvSpec) -> Option<String> {
        self.d.probe(spec).map(|p| p.2.clone())
    }

    fn mprobe(&mut self, spec: &RecvSpec) -> Option<(MsgHandle, Option<String>)> {
        let cl = self.d.mprobe(spec)?;
        Some((cl.handle, self.d.claimed(cl.handle).ok().cloned()))
    }

    fn mrecv(&mut self, h: MsgHandle) -> Result<String, String> {
        self.d.mrecv(h).map(|m| m.msg).map_err(|e| e.to_string())
    }

    fn cancel(&mut self, h: OffHandle, fx: &mut Vec<Outcome>) -> Result<Option<bool>, String> {
        match self.d.cancel(h) {
            Ok(CancelOutcome::Cancelled(_)) => Ok(Some(true)),
            // The DEL decides: wait for it (its outcome comes as an event).
            Ok(CancelOutcome::InProgress) => self.settle(fx).map(|()| None),
            Err(_) => Ok(Some(false)),
        }
    }

    /// Random hardware timing between trace lines.
    fn after_line(&mut self, fx: &mut Vec<Outcome>) -> Result<(), String> {
        let n = self.d.hw().map_or(0, |h| h.pending_ops());
        if n > 0 {
            let k = (self.rng.next() % (n as u64 + 1)) as usize;
            for _ in 0..k {
                if let Some(hw) = self.d.hw_mut() {
                    hw.execute_op();
                }
            }
        }
        // ... and a random number of completions is polled (only list-operation
        // completions can be waiting: arrivals are polled at their line).
        let c = self.d.hw().map_or(0, |h| h.cq_len());
        let j = (self.rng.next() % (c as u64 + 1)) as usize;
        for _ in 0..j {
            self.d.poll_one(&mut self.ev);
        }
        self.drain_events(fx)
    }

    fn finish(&mut self, fx: &mut Vec<Outcome>) -> Result<(), String> {
        self.settle(fx)
    }

    fn counters(&self) -> Counters {
        self.d.engine_counters()
    }
}

/// Offload counters as a JSON object.
pub fn offload_json(c: &OffloadCounters) -> serde_json::Value {
    serde_json::json!({
        "offloaded": c.offloaded,
        "matched_hw": c.matched_hw,
        "matched_sw": c.matched_sw,
        "matched_post": c.matched_post,
        "unexpected": c.unexpected,
        "hw_unexpected": c.hw_unexpected,
        "blocked_no_hw": c.blocked_no_hw,
        "blocked_encoding": c.blocked_encoding,
        "blocked_sw_pending": c.blocked_sw_pending,
        "blocked_tags_full": c.blocked_tags_full,
        "blocked_ops_busy": c.blocked_ops_busy,
        "stale_dels": c.stale_dels,
        "hw_cancels": c.hw_cancels,
        "syncs": c.syncs,
        "sync_reqs": c.sync_reqs,
        "tm_err_races": c.tm_err_races,
        "rndv_incomplete": c.rndv_incomplete,
        "sw_rndv": c.sw_rndv,
        "order_violations": c.order_violations,
        "blocked_stopped": c.blocked_stopped,
        "op_errors": c.op_errors,
        "offload_stops": c.offload_stops,
        "returned_to_sw": c.returned_to_sw,
        "del_errors": c.del_errors,
        "recv_errors": c.recv_errors,
        "rq_errors": c.rq_errors,
    })
}

/// Runs a whole trace through the driver; same output and errors as
/// [`super::replay`]. Returns the stats JSON (engine depths and offload counters).
pub fn replay(
    input: impl Read,
    out: &mut impl Write,
    hw_tags: u32,
    seed: u64,
) -> Result<serde_json::Value, String> {
    let r = run_trace(HwRunner::new(hw_tags, seed), input, out)?;
    let c = r.d.engine_counters();
    Ok(serde_json::json!({
        "posted_depth": c.posted_depth,
        "unexpected_depth": c.unexpected_depth,
        "claimed_depth": c.claimed_depth,
        "hw_tags": hw_tags,
        "seed": seed,
        "offload": offload_json(&r.d.counters()),
    }))
}

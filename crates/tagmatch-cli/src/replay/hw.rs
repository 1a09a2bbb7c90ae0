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

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};

use tagmatch_engine::offload::{
    CancelOutcome, Driver, DriverConfig, Event, OffHandle, OffloadCounters, PostOutcome,
};
use tagmatch_engine::tm_srq::TmCaps;
use tagmatch_engine::{Config, Envelope, MsgHandle};

use super::{fields, spec_of};

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

enum RecvState {
    Pending(OffHandle),
    Done,
}

enum ProbeState {
    Claimed(MsgHandle),
    Done,
}

struct HwReplay {
    d: Driver<String, String>,
    rng: Rng,
    recvs: HashMap<String, RecvState>,
    msgs: HashMap<String, ()>,
    probes: HashMap<String, ProbeState>,
    ev: Vec<Event<String, String>>,
}

impl HwReplay {
    fn new(hw_tags: u32, seed: u64) -> Self {
        let engine = Config::default()
            .max_bytes(usize::MAX)
            .max_messages(usize::MAX)
            .max_posted(usize::MAX);
        HwReplay {
            d: Driver::new(DriverConfig {
                engine,
                caps: (hw_tags > 0).then(|| TmCaps::with_tags(hw_tags)),
                ..DriverConfig::default()
            }),
            rng: Rng(seed),
            recvs: HashMap::new(),
            msgs: HashMap::new(),
            probes: HashMap::new(),
            ev: Vec::new(),
        }
    }

    /// Polls every completion available; match events become output lines.
    fn poll(&mut self, out: &mut Vec<String>) -> Result<(), String> {
        self.d.poll(&mut self.ev);
        self.drain_events(out)
    }

    /// Turns the driver's events into output lines.
    fn drain_events(&mut self, out: &mut Vec<String>) -> Result<(), String> {
        for e in self.ev.drain(..) {
            match e {
                Event::Matched(m) => {
                    self.recvs.insert(m.recv.clone(), RecvState::Done);
                    out.push(format!("match {} {}", m.recv, m.msg));
                }
                Event::Unexpected { .. } | Event::DataValid { .. } | Event::NoTag(_) => {}
                Event::Cancelled { recv, .. } => {
                    self.recvs.insert(recv.clone(), RecvState::Done);
                    out.push(format!("cancel {recv} ok"));
                }
                // Printed by the `cancel` line that waits for it.
                Event::CancelFailed { .. } => {}
                Event::Rejected(r) => return Err(format!("arrive: {}", r.reason)),
            }
        }
        Ok(())
    }

    /// Random hardware timing between trace lines.
    fn jitter(&mut self, out: &mut Vec<String>) -> Result<(), String> {
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
        self.drain_events(out)
    }

    /// Runs the hardware until nothing is queued and everything is polled.
    fn settle(&mut self, out: &mut Vec<String>) -> Result<(), String> {
        loop {
            self.poll(out)?;
            let more = self.d.hw_mut().is_some_and(|h| h.execute_op());
            if !more && self.d.deferred_ops() == 0 {
                return self.poll(out);
            }
        }
    }

    fn line(&mut self, toks: &[&str], out: &mut Vec<String>) -> Result<(), String> {
        let (op, args) = toks.split_first().ok_or("empty line")?;
        let id = |n: usize| -> Result<&str, String> {
            args.get(n)
                .copied()
                .ok_or_else(|| format!("{op}: missing identifier"))
        };
        match *op {
            "post" => {
                let rid = id(0)?;
                if self.recvs.contains_key(rid) {
                    return Err(format!("receive id {rid} already used"));
                }
                let (c, s, t) = fields(&args[1..], true).map_err(|e| format!("post: {e}"))?;
                match self.d.post(spec_of(c, s, t), u32::MAX, rid.to_string()) {
                    Ok(PostOutcome::Matched(m)) => {
                        self.recvs.insert(rid.to_string(), RecvState::Done);
                        out.push(format!("match {} {}", m.recv, m.msg));
                    }
                    Ok(PostOutcome::Pending(h)) => {
                        self.recvs.insert(rid.to_string(), RecvState::Pending(h));
                    }
                    Err(_) => return Err("post: posted-receive limit reached".into()),
                }
            }
            "arrive" => {
                let mid = id(0)?;
                if self.msgs.contains_key(mid) {
                    return Err(format!("message id {mid} already used"));
                }
                let (c, s, t) = fields(&args[1..], false).map_err(|e| format!("arrive: {e}"))?;
                let env = Envelope::new(c, s.unwrap_or(0), t.unwrap_or(0));
                self.msgs.insert(mid.to_string(), ());
                let w = self.d.eager(env, 0, mid.to_string());
                self.d
                    .wire(w)
                    .map_err(|_| "arrive: receive queue exhausted".to_string())?;
                // The TM-SRQ reports the arrival at once: its completion is polled here.
                self.poll(out)?;
            }
            "probe" | "mprobe" => {
                let pid = id(0)?;
                if self.probes.contains_key(pid) {
                    return Err(format!("probe id {pid} already used"));
                }
                let (c, s, t) = fields(&args[1..], true).map_err(|e| format!("{op}: {e}"))?;
                let spec = spec_of(c, s, t);
                let (found, state) = if *op == "probe" {
                    (self.d.probe(&spec).map(|p| p.2.clone()), ProbeState::Done)
                } else {
                    match self.d.mprobe(&spec) {
                        Some(cl) => (
                            self.d.claimed(cl.handle).ok().cloned(),
                            ProbeState::Claimed(cl.handle),
                        ),
                        None => (None, ProbeState::Done),
                    }
                };
                self.probes.insert(pid.to_string(), state);
                out.push(format!("{op} {pid} {}", found.as_deref().unwrap_or("none")));
            }
            "mrecv" => {
                let rid = id(0)?;
                let pid = id(1)?;
                if args.len() > 2 {
                    return Err(format!("mrecv: unexpected field {:?}", args[2]));
                }
                if self.recvs.contains_key(rid) {
                    return Err(format!("receive id {rid} already used"));
                }
                let h = match self.probes.get(pid) {
                    None => return Err(format!("mrecv: probe id {pid} was never mprobed")),
                    Some(ProbeState::Done) => {
                        return Err(format!("mrecv: probe id {pid} holds no claimed message"))
                    }
                    Some(ProbeState::Claimed(h)) => *h,
                };
                let m = self.d.mrecv(h).map_err(|e| format!("mrecv: {pid}: {e}"))?;
                self.probes.insert(pid.to_string(), ProbeState::Done);
                self.recvs.insert(rid.to_string(), RecvState::Done);
                out.push(format!("match {rid} {}", m.msg));
            }
            "cancel" => {
                let rid = id(0)?;
                if args.len() > 1 {
                    return Err(format!("cancel: unexpected field {:?}", args[1]));
                }
                match self.recvs.get(rid) {
                    None => return Err(format!("cancel: receive id {rid} was never posted")),
                    Some(RecvState::Done) => out.push(format!("cancel {rid} failed")),
                    Some(RecvState::Pending(h)) => match self.d.cancel(*h) {
                        Ok(CancelOutcome::Cancelled(_)) => {
                            self.recvs.insert(rid.to_string(), RecvState::Done);
                            out.push(format!("cancel {rid} ok"));
                        }
                        // The DEL decides: wait for it (its outcome is printed by poll).
                        Ok(CancelOutcome::InProgress) => {
                            let before = out.len();
                            self.settle(out)?;
                            let done = format!("cancel {rid} ");
                            if !out[before..].iter().any(|l| l.starts_with(&done)) {
                                out.push(format!("cancel {rid} failed"));
                            }
                        }
                        Err(_) => {
                            self.recvs.insert(rid.to_string(), RecvState::Done);
                            out.push(format!("cancel {rid} failed"));
                        }
                    },
                }
                self.recvs.insert(rid.to_string(), RecvState::Done);
            }
            other => {
                return Err(format!(
                "unknown operation {other:?} (expected post, arrive, probe, mprobe, mrecv, cancel)"
            ))
            }
        }
        Ok(())
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
    let mut r = HwReplay::new(hw_tags, seed);
    let mut lines = Vec::new();
    for (n, line) in BufReader::new(input).lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: reading: {e}", n + 1))?;
        let text = line.split('#').next().unwrap_or("");
        let toks: Vec<&str> = text.split_whitespace().collect();
        if toks.is_empty() {
            continue;
        }
        lines.clear();
        let res = r
            .line(&toks, &mut lines)
            .and_then(|()| r.jitter(&mut lines));
        for l in &lines {
            writeln!(out, "{l}").map_err(|e| format!("writing stdout: {e}"))?;
        }
        res.map_err(|e| format!("line {}: {e}", n + 1))?;
    }
    lines.clear();
    r.settle(&mut lines).map_err(|e| format!("end: {e}"))?;
    for l in &lines {
        writeln!(out, "{l}").map_err(|e| format!("writing stdout: {e}"))?;
    }
    let c = r.d.engine_counters();
    writeln!(
        out,
        "end posted={} unexpected={}",
        c.posted_depth, c.unexpected_depth
    )
    .map_err(|e| format!("writing stdout: {e}"))?;
    Ok(serde_json::json!({
        "posted_depth": c.posted_depth,
        "unexpected_depth": c.unexpected_depth,
        "claimed_depth": c.claimed_depth,
        "hw_tags": hw_tags,
        "seed": seed,
        "offload": offload_json(&r.d.counters()),
    }))
}

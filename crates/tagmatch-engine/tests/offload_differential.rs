//! Proof, not hope: the offload driver + TM-SRQ model against the pure software engine.
//!
//! The harness checks *linearizability* step by step: a post takes effect when called, an
//! arrival when the driver reports it (which must be in wire order), the cancel of an
//! offloaded receive when the driver reports its outcome. Each of those is replayed on a
//! plain [`Engine`] at that point and the results must be identical (same receive, same
//! message, same unexpected, same cancel outcome); at the end both hold the same pending
//! receives and unexpected messages, and the hardware list holds exactly the offloaded
//! pending receives.
//!
//! - `differential_random_timing`: quickcheck over random operation sequences and random
//!   hardware timing (operation execution, transfers and polls interleaved arbitrarily),
//!   capacities 1–4, `max_ops` 1–4, a small tag layout with saturated fields, wildcards
//!   and masks, cancels, rendezvous and multi-packet messages.
//! - `exhaustive_*`: every interleaving of posts, arrivals, operation executions and
//!   polls for 3 receives × 3 messages (and cancels), capacities 1 and 2, with states
//!   deduplicated by a 128-bit digest.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// Sums of driver counters over the random runs (coverage of the interesting paths).
static COVERAGE: [AtomicU64; 9] = [const { AtomicU64::new(0) }; 9];

use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use tagmatch_engine::offload::*;
use tagmatch_engine::tm_srq::{TmCaps, WcStatus};
use tagmatch_engine::{
    Arrived, Config, Engine, Envelope, Posted, RecvHandle, RecvSpec, Source, TagSel,
};
use tagmatch_wire::tm::Rvh;

/// The driver under test and the reference engine, in lockstep.
struct Harness {
    d: Driver<u32, u32>,
    r: Engine<u32, u32>,
    /// Receive id → driver handle, while the driver may still report on it.
    dh: HashMap<u32, OffHandle>,
    /// Receive id → reference handle, while pending in the reference.
    rh: HashMap<u32, RecvHandle>,
    /// Messages on the wire not yet reported, in wire order.
    inflight: VecDeque<u32>,
    /// Unexpected messages (reference view), in arrival order.
    unexp: Vec<u32>,
    /// Cancels in progress.
    cancelling: HashSet<u32>,
    next_rid: u32,
    next_mid: u32,
    ev: Vec<Event<u32, u32>>,
}

type Res = Result<(), String>;

fn cfg_small() -> Config {
    Config::default()
        .max_bytes(usize::MAX)
        .max_messages(usize::MAX)
        .max_posted(usize::MAX)
}

impl Harness {
    fn new(tags: u32, max_ops: u32, layout: TagLayout) -> Self {
        let caps = (tags > 0).then_some(TmCaps {
            max_num_tags: tags,
            max_ops,
            max_rndv_hdr_size: 64,
        });
        Harness {
            d: Driver::new(DriverConfig {
                layout,
                engine: cfg_small(),
                caps,
                mtu: 64,
                srq_depth: 64,
            }),
            r: Engine::new(cfg_small()),
            dh: HashMap::new(),
            rh: HashMap::new(),
            inflight: VecDeque::new(),
            unexp: Vec::new(),
            cancelling: HashSet::new(),
            next_rid: 0,
            next_mid: 0,
            ev: Vec::new(),
        }
    }

    fn post(&mut self, spec: RecvSpec) -> Res {
        let rid = self.next_rid;
        self.next_rid += 1;
        let d = self
            .d
            .post(spec, 256, rid)
            .map_err(|_| "driver post refused")?;
        let r = self
            .r
            .post(spec, rid)
            .map_err(|_| "reference post refused")?;
        match (d, r) {
            (PostOutcome::Matched(a), Posted::Matched(b)) if a.msg == b.msg && a.recv == rid => {
                self.unexp.retain(|&m| m != a.msg);
                Ok(())
            }
            (PostOutcome::Pending(h), Posted::Pending(rh)) => {
                self.dh.insert(rid, h);
                self.rh.insert(rid, rh);
                Ok(())
            }
            (a, b) => Err(format!("post r{rid}: driver {a:?}, engine {b:?}")),
        }
    }

    fn send(&mut self, env: Envelope, kind: u8) -> Res {
        let mid = self.next_mid;
        self.next_mid += 1;
        let w = match kind {
            0 => self.d.eager(env, 8, mid),
            1 => self.d.eager(env, 200, mid), // multi-packet (mtu 64)
            _ => self.d.rndv(
                env,
                Rvh {
                    va: u64::from(mid),
                    rkey: 1,
                    len: if kind == 2 { 100 } else { 1000 }, // fits / too small (256)
                },
                mid,
            ),
        };
        self.d.wire(w).map_err(|e| format!("wire m{mid}: {e:?}"))?;
        self.inflight.push_back(mid);
        Ok(())
    }

    fn cancel(&mut self, rid: u32) -> Res {
        let Some(&h) = self.dh.get(&rid) else {
            return Ok(());
        };
        if self.cancelling.contains(&rid) {
            return Ok(());
        }
        match self.d.cancel(h) {
            Ok(CancelOutcome::Cancelled(x)) => {
                let rh = self.rh.remove(&rid).ok_or("reference lost a receive")?;
                self.dh.remove(&rid);
                if x != rid || self.r.cancel(rh).is_err() {
                    return Err(format!("cancel r{rid}: reference disagrees"));
                }
                Ok(())
            }
            Ok(CancelOutcome::InProgress) => {
                self.cancelling.insert(rid);
                Ok(())
            }
            Err(e) => Err(format!("cancel r{rid} of a pending receive: {e:?}")),
        }
    }

    fn probe(&mut self, spec: RecvSpec) -> Res {
        let a = self.d.probe(&spec).map(|p| *p.2);
        let b = self.r.probe(&spec).map(|p| *p.msg);
        if a != b {
            return Err(format!("probe {spec:?}: driver {a:?}, engine {b:?}"));
        }
        Ok(())
    }

    fn mprobe(&mut self, spec: RecvSpec) -> Res {
        match (self.d.mprobe(&spec), self.r.mprobe(&spec)) {
            (None, None) => Ok(()),
            (Some(x), Some(y)) => {
                let a = self.d.mrecv(x.handle).map_err(|e| format!("{e}"))?.msg;
                let b = self.r.mrecv(y.handle).map_err(|e| format!("{e}"))?.msg;
                if a != b {
                    return Err(format!("mprobe {spec:?}: driver m{a}, engine m{b}"));
                }
                self.unexp.retain(|&m| m != a);
                Ok(())
            }
            (a, b) => Err(format!("mprobe {spec:?}: driver {a:?}, engine {b:?}")),
        }
    }

    /// Applies the events the driver reported, checking each against the reference.
    fn check_events(&mut self) -> Res {
        let evs = std::mem::take(&mut self.ev);
        for e in evs {
            match e {
                Event::Matched(m) => {
                    let mid = self.inflight.pop_front().ok_or("match of no arrival")?;
                    if m.msg != mid {
                        return Err(format!(
                            "arrival out of wire order: m{} before m{mid}",
                            m.msg
                        ));
                    }
                    match self.r.arrive(m.env, m.len, mid) {
                        Ok(Arrived::Matched(x)) if x.recv == m.recv => {
                            self.rh.remove(&m.recv);
                            self.dh.remove(&m.recv);
                        }
                        other => {
                            return Err(format!(
                                "m{mid} matched r{} ({:?}); engine says {other:?}",
                                m.recv, m.path
                            ))
                        }
                    }
                }
                Event::Unexpected { env, len } => {
                    let mid = self
                        .inflight
                        .pop_front()
                        .ok_or("unexpected of no arrival")?;
                    match self.r.arrive(env, len, mid) {
                        Ok(Arrived::Unexpected(_)) => self.unexp.push(mid),
                        other => return Err(format!("m{mid} unexpected; engine says {other:?}")),
                    }
                }
                Event::Cancelled { handle, recv } => {
                    if !self.cancelling.remove(&recv) || self.dh.get(&recv) != Some(&handle) {
                        return Err(format!("cancel of r{recv} reported unasked"));
                    }
                    self.dh.remove(&recv);
                    let rh = self
                        .rh
                        .remove(&recv)
                        .ok_or("false cancel: engine matched it")?;
                    self.r
                        .cancel(rh)
                        .map_err(|_| format!("false cancel of r{recv}"))?;
                }
                Event::CancelFailed { handle } => {
                    let rid = u32::try_from(handle.0).map_err(|_| "bad handle")?;
                    // Ids equal handles here: receive ids and driver ids both count posts.
                    // A cancel fails with its receive still pending only when the TM-SRQ
                    // refused the DEL (offload stopped): it stays in hardware, matched later.
                    // (Later events of the same poll may already have matched it.)
                    let pending_ok = self.d.offload_stopped().is_some();
                    if !self.cancelling.remove(&rid) || (self.rh.contains_key(&rid) && !pending_ok)
                    {
                        return Err(format!("cancel of r{rid} failed but it is pending"));
                    }
                }
                Event::DataValid { .. } => {}
                other => return Err(format!("unexpected event {other:?}")),
            }
        }
        self.invariants()
    }

    fn invariants(&self) -> Res {
        if self.d.counters().order_violations != 0 {
            return Err("driver saw an order violation".into());
        }
        if self
            .d
            .hw()
            .is_some_and(|h| !h.disabled_entries_form_a_suffix())
        {
            return Err(format!(
                "disabled entries are not a suffix: {:?}",
                self.d.hw().map(|h| h.list())
            ));
        }
        Ok(())
    }

    fn poll_one(&mut self) -> Res {
        self.d.poll_one(&mut self.ev);
        self.check_events()
    }

    /// Lets everything finish and checks the final state.
    fn finish(&mut self) -> Res {
        loop {
            self.d.poll(&mut self.ev);
            self.check_events()?;
            let hw = self.d.hw_mut();
            let more = hw.is_some_and(|h| h.execute_op() || h.complete_transfer());
            if !more && self.d.deferred_ops() == 0 {
                self.d.poll(&mut self.ev);
                self.check_events()?;
                break;
            }
        }
        if !self.inflight.is_empty() || !self.cancelling.is_empty() {
            return Err(format!(
                "unresolved: inflight {:?}, cancelling {:?}",
                self.inflight, self.cancelling
            ));
        }
        let (dc, rc) = (self.d.engine_counters(), self.r.counters());
        if (dc.posted_depth, dc.unexpected_depth) != (rc.posted_depth, rc.unexpected_depth) {
            return Err(format!("final depths differ: {dc:?} vs {rc:?}"));
        }
        if let Some(hw) = self.d.hw() {
            let offloaded = self
                .dh
                .values()
                .filter(|h| self.d.is_offloaded(**h) == Some(true))
                .count();
            // After a failed list operation, entries whose stale DEL failed stay listed
            // (disabled for good); every offloaded pending receive still has its entry.
            let stopped = self.d.offload_stopped().is_some();
            if hw.list().len() != offloaded && !(stopped && hw.list().len() > offloaded) {
                return Err(format!(
                    "hardware list {:?} but {offloaded} offloaded pending",
                    hw.list()
                ));
            }
        }
        let c = self.d.counters();
        for (i, v) in [
            c.matched_hw,
            c.matched_sw,
            c.stale_dels,
            c.tm_err_races,
            c.syncs,
            c.blocked_sw_pending,
            c.blocked_encoding,
            c.rndv_incomplete,
            c.hw_cancels,
        ]
        .into_iter()
        .enumerate()
        {
            COVERAGE[i].fetch_add(v, Ordering::Relaxed);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- random timing ------

#[derive(Clone, Debug)]
enum Op {
    Post(RecvSpec),
    Send(Envelope, u8),
    Cancel(u32),
    Probe(RecvSpec),
    /// mprobe, then mrecv of the claimed message.
    Mprobe(RecvSpec),
    Exec,
    Transfer,
    Poll,
    PollAll,
}

/// Communicators; 3 saturates in the 2-bit field of the test layout.
const COMMS: [u32; 4] = [0, 0, 1, 3];

fn gen_spec(g: &mut Gen, heavy: bool) -> RecvSpec {
    if heavy {
        // Encodable, few classes: most receives can go to hardware.
        let src = match u8::arbitrary(g) % 4 {
            0 => Source::Any,
            n => Source::Rank(u32::from(n - 1)),
        };
        let tag = match u8::arbitrary(g) % 4 {
            0 => TagSel::Any,
            n => TagSel::Exact(u64::from(n - 1)),
        };
        return RecvSpec {
            comm: u32::arbitrary(g) % 2,
            src,
            tag,
        };
    }
    let comm = COMMS[usize::arbitrary(g) % COMMS.len()];
    let src = match u8::arbitrary(g) % 5 {
        0 => Source::Any,
        n => Source::Rank(u32::from(n - 1)), // src 3 saturates in 2 bits
    };
    let tag = match u8::arbitrary(g) % 7 {
        0 => TagSel::Any,
        1 => TagSel::Masked {
            want: u64::from(u8::arbitrary(g) % 4),
            mask: [1, 2, !0u64 << 2 | 1, !0u64 << 1][usize::arbitrary(g) % 4],
        },
        2 => TagSel::Exact(7), // saturated value in 3 bits
        n => TagSel::Exact(u64::from(n - 3)),
    };
    RecvSpec { comm, src, tag }
}

fn gen_env(g: &mut Gen, heavy: bool) -> Envelope {
    if heavy {
        return Envelope::new(
            u32::arbitrary(g) % 2,
            u32::arbitrary(g) % 3,
            u64::arbitrary(g) % 3,
        );
    }
    Envelope::new(
        COMMS[usize::arbitrary(g) % COMMS.len()],
        u32::arbitrary(g) % 4,
        [0, 1, 2, 3, 7, 9][usize::arbitrary(g) % 6],
    )
}

#[derive(Clone, Debug)]
struct Scenario {
    tags: u32,
    max_ops: u32,
    ops: Vec<Op>,
}

impl Arbitrary for Scenario {
    fn arbitrary(g: &mut Gen) -> Self {
        let n = usize::arbitrary(g) % 60;
        // Half the scenarios favour hardware: encodable receives, more executions.
        let heavy = bool::arbitrary(g);
        let ops = (0..n)
            .map(|_| match u8::arbitrary(g) % 21 {
                0..=3 => Op::Post(gen_spec(g, heavy)),
                4..=6 => Op::Send(
                    gen_env(g, heavy),
                    [0, 0, 0, 0, 1, 2, 3][usize::arbitrary(g) % 7],
                ),
                7 | 8 => Op::Cancel(u32::arbitrary(g) % 12),
                9 => Op::Probe(gen_spec(g, heavy)),
                10 => Op::Mprobe(gen_spec(g, heavy)),
                11..=13 => Op::Exec,
                14 if heavy => Op::Exec,
                14 | 15 => Op::Transfer,
                16..=19 => Op::Poll,
                _ => Op::PollAll,
            })
            .collect();
        Scenario {
            tags: u32::arbitrary(g) % 5,
            max_ops: 1 + u32::arbitrary(g) % 4,
            ops,
        }
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        // Drop the second half, then one operation at a time.
        let s = self.clone();
        let n = s.ops.len();
        let mut cands = Vec::new();
        if n > 1 {
            cands.push(s.ops[..n / 2].to_vec());
        }
        for i in (0..n).rev() {
            let mut o = s.ops.clone();
            o.remove(i);
            cands.push(o);
        }
        Box::new(
            cands
                .into_iter()
                .map(move |ops| Scenario { ops, ..s.clone() }),
        )
    }
}

fn run(s: &Scenario) -> Res {
    run_with(s, None)
}

/// A list-operation failure injected into the model before operation `at`, with this
/// status, error completions scrambled or not.
#[derive(Clone, Copy, Debug)]
struct OpFault {
    at: usize,
    status: WcStatus,
    scramble: bool,
}

fn run_with(s: &Scenario, fault: Option<OpFault>) -> Res {
    // comm 2 bits, src 2 bits, tag 3 bits: comm 3, src 3 and tag 7 saturate.
    let mut h = Harness::new(s.tags, s.max_ops, TagLayout::new(2, 2, 3).unwrap());
    for (i, op) in s.ops.iter().enumerate() {
        if let (Some(f), Some(hw)) = (fault, h.d.hw_mut()) {
            if f.at == i {
                hw.set_scramble_errors(f.scramble);
                hw.inject_op_failure(f.status);
            }
        }
        match op {
            Op::Post(spec) => h.post(*spec)?,
            Op::Send(env, k) => h.send(*env, *k)?,
            Op::Cancel(r) => h.cancel(*r)?,
            Op::Probe(spec) => h.probe(*spec)?,
            Op::Mprobe(spec) => h.mprobe(*spec)?,
            Op::Exec => {
                if let Some(hw) = h.d.hw_mut() {
                    hw.execute_op();
                }
            }
            Op::Transfer => {
                if let Some(hw) = h.d.hw_mut() {
                    hw.complete_transfer();
                }
            }
            Op::Poll => h.poll_one()?,
            Op::PollAll => {
                h.d.poll(&mut h.ev);
                h.check_events()?;
            }
        }
        h.invariants()?;
    }
    h.finish()
}

#[test]
fn differential_random_timing() {
    fn prop(s: Scenario) -> TestResult {
        match run(&s) {
            Ok(()) => TestResult::passed(),
            Err(e) => TestResult::error(e),
        }
    }
    QuickCheck::new()
        .tests(20_000)
        .quickcheck(prop as fn(Scenario) -> TestResult);
    let cov: Vec<u64> = COVERAGE.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    eprintln!("coverage (hw, sw, stale DEL, TM_ERR, SYNC, blocked sw/enc, RNDV incomplete, cancels): {cov:?}");
    assert!(
        cov.iter().all(|&v| v > 0),
        "a path was never exercised: {cov:?}"
    );
}

/// rdma-core-tag-matching documents one failure of a list operation (a DEL's `TM_ERR`);
/// verbs moves a queue whose work request fails to the error state and flushes the rest
/// (`ibv_poll_cq(3)`: on error "only ... wr_id, status, qp_num, and vendor_err" are valid).
/// With such a failure injected at a random point (and error completions scrambled in half
/// the runs), the driver still matches exactly like the software engine: nothing lost,
/// nothing reordered, every cancel resolved.
#[test]
fn differential_random_timing_with_failing_list_operations() {
    static STOPS: AtomicU64 = AtomicU64::new(0);
    fn prop(s: Scenario) -> TestResult {
        let n = s.ops.len();
        let statuses = [
            WcStatus::GeneralErr,
            WcStatus::WrFlushErr,
            WcStatus::LocQpOpErr,
            WcStatus::FatalErr,
        ];
        let f = OpFault {
            at: n / 3,
            status: statuses[n % statuses.len()],
            scramble: n % 2 == 0,
        };
        match run_with(&s, Some(f)) {
            Ok(()) => TestResult::passed(),
            Err(e) => TestResult::error(format!("{f:?}: {e}")),
        }
    }
    // Coverage: some runs must actually stop offload with receives in flight.
    fn stopped(s: Scenario) -> bool {
        let mut h = Harness::new(s.tags.max(1), s.max_ops, TagLayout::new(2, 2, 3).unwrap());
        h.d.hw_mut()
            .unwrap()
            .inject_op_failure(WcStatus::GeneralErr);
        for op in &s.ops {
            if let Op::Post(spec) = op {
                let _ = h.post(*spec);
            }
        }
        h.d.settle(&mut h.ev);
        if h.d.counters().returned_to_sw > 0 {
            STOPS.fetch_add(1, Ordering::Relaxed);
        }
        true
    }
    QuickCheck::new()
        .tests(10_000)
        .quickcheck(prop as fn(Scenario) -> TestResult);
    QuickCheck::new()
        .tests(200)
        .quickcheck(stopped as fn(Scenario) -> bool);
    assert!(
        STOPS.load(Ordering::Relaxed) > 0,
        "no run returned a receive to software"
    );
}

#[test]
fn differential_detects_hardware_without_phase_counts() {
    // Negative control: the same harness finds the m1/m2/b1/b2 reordering when the model
    // ignores the counts.
    let mut h = Harness::new(2, 4, TagLayout::default());
    h.d.hw_mut().unwrap().set_honor_phase(false);
    let e = Envelope::new(0, 0, 1);
    h.send(e, 0).unwrap();
    h.post(RecvSpec::exact(0, 0, 1)).unwrap();
    h.d.hw_mut().unwrap().execute_op();
    h.send(e, 0).unwrap();
    let r = h.finish();
    assert!(r.is_err(), "{r:?}");
}

// ---------------------------------------------------------------- exhaustive ---------

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Step {
    App,
    Wire,
    Exec,
    Poll,
    /// The list-operation queue fails at its next operation (`Bounds::fail`).
    Fail,
}

#[derive(Clone, Copy, Debug)]
enum AppOp {
    Post(RecvSpec),
    Cancel(u32),
}

struct Bounds<'a> {
    tags: u32,
    max_ops: u32,
    /// Fault injected into each fresh driver (negative controls).
    fault: fn(&mut Driver<u32, u32>),
    /// Explore a list-operation failure (this status) injected at every point.
    fail: Option<WcStatus>,
    app: &'a [AppOp],
    wire: &'a [Envelope],
}

/// Rebuilds the state reached by `path` (the model is not `Clone`: the engine is not).
fn replay(b: &Bounds<'_>, path: &[Step]) -> Result<(Harness, usize, usize), String> {
    let mut h = Harness::new(b.tags, b.max_ops, TagLayout::default());
    (b.fault)(&mut h.d);
    let (mut a, mut w) = (0, 0);
    for s in path {
        match s {
            Step::App => {
                match b.app[a] {
                    AppOp::Post(spec) => h.post(spec)?,
                    AppOp::Cancel(r) => h.cancel(r)?,
                }
                a += 1;
            }
            Step::Wire => {
                h.send(b.wire[w], 0)?;
                w += 1;
            }
            Step::Exec => {
                h.d.hw_mut().map(|x| x.execute_op());
            }
            Step::Poll => h.poll_one()?,
            Step::Fail => {
                if let (Some(st), Some(hw)) = (b.fail, h.d.hw_mut()) {
                    hw.inject_op_failure(st);
                }
            }
        }
        h.invariants()?;
    }
    Ok((h, a, w))
}

/// A 128-bit digest of everything that decides the future.
fn digest(h: &Harness, a: usize, w: usize) -> u128 {
    let one = |salt: u8| {
        let mut s = std::hash::DefaultHasher::new();
        salt.hash(&mut s);
        a.hash(&mut s);
        w.hash(&mut s);
        h.d.fingerprint(&mut s);
        h.unexp.hash(&mut s);
        h.inflight.hash(&mut s);
        let mut c: Vec<_> = h.cancelling.iter().collect();
        c.sort();
        c.hash(&mut s);
        let mut p: Vec<_> = h.dh.keys().collect();
        p.sort();
        p.hash(&mut s);
        s.finish()
    };
    (u128::from(one(1)) << 64) | u128::from(one(2))
}

/// The digest of a path's state, with whether its failure was injected.
fn digest_path(h: &Harness, a: usize, w: usize, path: &[Step]) -> u128 {
    digest(h, a, w) ^ u128::from(path.contains(&Step::Fail))
}

/// Explores every interleaving; returns (states, complete schedules checked).
fn explore(b: &Bounds<'_>) -> Result<(usize, usize), String> {
    let mut seen = HashSet::new();
    let mut stack = vec![Vec::new()];
    let mut leaves = 0;
    while let Some(path) = stack.pop() {
        let (h, a, w) = replay(b, &path).map_err(|e| format!("schedule {path:?}: {e}"))?;
        if !seen.insert(digest_path(&h, a, w, &path)) {
            continue;
        }
        let hw = h.d.hw();
        let mut next = Vec::new();
        if a < b.app.len() {
            next.push(Step::App);
        }
        if w < b.wire.len() {
            next.push(Step::Wire);
        }
        if hw.is_some_and(|x| x.pending_ops() > 0) {
            next.push(Step::Exec);
        }
        if hw.is_some_and(|x| x.cq_len() > 0) {
            next.push(Step::Poll);
        }
        // The failure can strike before any operation that is still to execute.
        if b.fail.is_some()
            && !path.contains(&Step::Fail)
            && hw.is_some_and(|x| x.pending_ops() > 0)
        {
            next.push(Step::Fail);
        }
        if next.is_empty() {
            leaves += 1;
            let mut h = h;
            h.finish().map_err(|e| format!("schedule {path:?}: {e}"))?;
            continue;
        }
        for s in next {
            let mut p = path.clone();
            p.push(s);
            stack.push(p);
        }
    }
    Ok((seen.len(), leaves))
}

fn no_fault(_: &mut Driver<u32, u32>) {}

const fn ex(src: u32, tag: u64) -> RecvSpec {
    RecvSpec::exact(0, src, tag)
}

/// Receive sets × message sets covering one class, wildcards of both kinds, masks and
/// disjoint classes.
fn scenarios() -> Vec<(Vec<AppOp>, Vec<Envelope>)> {
    use AppOp::*;
    let any_src = |t| RecvSpec::new(0, None, Some(t));
    let any_tag = |s| RecvSpec::new(0, Some(s), None);
    let e = |s, t| Envelope::new(0, s, t);
    vec![
        // One class: order within it.
        (
            vec![Post(ex(0, 1)), Post(ex(0, 1)), Post(ex(0, 1))],
            vec![e(0, 1), e(0, 1), e(0, 1)],
        ),
        // Wildcards overlapping exact receives, two sources.
        (
            vec![Post(any_tag(0)), Post(ex(0, 1)), Post(any_src(1))],
            vec![e(0, 1), e(1, 1), e(0, 2)],
        ),
        (
            vec![
                Post(ex(0, 1)),
                Post(RecvSpec::new(0, None, None)),
                Post(ex(0, 1)),
            ],
            vec![e(0, 2), e(0, 1), e(0, 1)],
        ),
        // A mask (tag parity) and a disjoint exact class.
        (
            vec![
                Post(RecvSpec::masked(0, Source::Rank(0), 1, 1)),
                Post(ex(0, 3)),
                Post(ex(1, 2)),
            ],
            vec![e(0, 3), e(1, 2), e(0, 3)],
        ),
        // Cancels racing messages.
        (
            vec![Post(ex(0, 1)), Cancel(0), Post(any_tag(0)), Post(ex(0, 1))],
            vec![e(0, 1), e(0, 1), e(0, 2)],
        ),
        (
            vec![Post(any_src(1)), Post(ex(1, 1)), Cancel(1), Post(ex(1, 1))],
            vec![e(1, 1), e(0, 1), e(1, 1)],
        ),
    ]
}

fn exhaustive(tags: u32, max_ops: u32) {
    let mut total = 0;
    for (app, wire) in scenarios() {
        let b = Bounds {
            tags,
            max_ops,
            fault: no_fault,
            fail: None,
            app: &app,
            wire: &wire,
        };
        let (states, leaves) = explore(&b).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("capacity {tags}, max_ops {max_ops}: {states} states, {leaves} end states: {app:?} x {wire:?}");
        assert!(leaves > 0 && states > 10, "{app:?}: {states} states");
        total += states;
    }
    assert!(total > 1000, "only {total} states");
}

#[test]
fn exhaustive_interleavings_capacity_1() {
    exhaustive(1, 4);
}

#[test]
fn exhaustive_interleavings_capacity_2() {
    exhaustive(2, 6);
}

#[test]
fn exhaustive_interleavings_one_operation_slot() {
    // max_ops = 1: DELs and SYNCs wait in the driver for a free slot (stamped counts,
    // dropped DELs of receives hardware consumed meanwhile).
    exhaustive(2, 1);
}

/// The explorer finds a counterexample when a fault is injected, for every scenario
/// family where that fault matters.
fn finds_counterexample(fault: fn(&mut Driver<u32, u32>), tags: u32) {
    let found = scenarios().iter().any(|(app, wire)| {
        let b = Bounds {
            tags,
            max_ops: 2 * tags + 2,
            fault,
            fail: None,
            app,
            wire,
        };
        explore(&b).is_err()
    });
    assert!(found, "the fault went unnoticed");
}

#[test]
fn exhaustive_finds_the_race_without_phase_counts() {
    finds_counterexample(|d| d.hw_mut().unwrap().set_honor_phase(false), 2);
}

#[test]
fn exhaustive_finds_offloads_that_break_the_prefix_rule() {
    finds_counterexample(|d| d.set_ignore_prefix_rule(true), 1);
}

/// Every interleaving of posts, arrivals, executions and polls, with a list-operation
/// failure (ADD, DEL or SYNC; verbs then flushes every later one) injected at every
/// possible point: matches equal the engine's, every cancel is resolved, no receive or
/// message is lost. With `scramble`, error completions carry an arbitrary opcode and flags
/// (`ibv_poll_cq(3)`: only `wr_id` and `status` are valid), so they are attributed by
/// `wr_id` alone.
fn exhaustive_with_failures(tags: u32, max_ops: u32, status: WcStatus, scramble: bool) {
    fn scrambled(d: &mut Driver<u32, u32>) {
        d.hw_mut().unwrap().set_scramble_errors(true);
    }
    let mut total = 0;
    for (app, wire) in scenarios() {
        let b = Bounds {
            tags,
            max_ops,
            fault: if scramble { scrambled } else { no_fault },
            fail: Some(status),
            app: &app,
            wire: &wire,
        };
        let (states, leaves) = explore(&b).unwrap_or_else(|e| panic!("{status:?}: {e}"));
        eprintln!("failing {status:?}, capacity {tags}: {states} states, {leaves} end states");
        total += states;
    }
    assert!(total > 1000, "only {total} states");
}

#[test]
fn exhaustive_interleavings_with_a_failing_list_operation() {
    exhaustive_with_failures(2, 6, WcStatus::GeneralErr, false);
}

#[test]
fn exhaustive_interleavings_with_a_failing_list_operation_scrambled() {
    exhaustive_with_failures(1, 4, WcStatus::LocQpOpErr, true);
    exhaustive_with_failures(2, 1, WcStatus::WrFlushErr, true);
}

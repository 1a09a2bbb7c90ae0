//! The benchmark workloads of `shared/spec/bench-workloads.md`, shared by the criterion
//! benches and `tagmatch bench match` so both measure exactly the same operations.
//!
//! A workload's operations are listed by [`Plan::new`] (set-up and timed phase, for any
//! front end: the offload bench runs them through the driver). On the engine, a workload
//! is prepared (set-up phase, untimed) into a [`Prepared`] holding the engine
//! and the precomputed operations of the timed phase; the caller times
//! [`Prepared::run`] (or [`Prepared::run_range`] for per-batch percentiles). This module
//! has no clock: timing is the caller's.

use crate::{Engine, Envelope, Posted, RecvHandle, RecvSpec};
use core::fmt;
use core::str::FromStr;

/// One of the seven workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Workload {
    /// N receives (src 0, tag i) posted; N messages arrive with tags N−1 … 0.
    PostedExact,
    /// N messages (src 0, tag i) unexpected; N exact receives posted for tags N−1 … 0.
    UnexpectedExact,
    /// N messages (src i, tag i) unexpected; N receives (ANY_SOURCE, tag i), i = N−1 … 0.
    UnexpectedAnySource,
    /// N messages (src i, tag i) unexpected; N receives (src i, ANY_TAG), i = N−1 … 0.
    UnexpectedAnyTag,
    /// N receives posted, a fraction F wildcards (half ANY_SOURCE, half ANY_TAG) in random
    /// positions, the rest exact (src i mod P, tag i); N messages arrive in reverse
    /// posting order, each matching a distinct receive.
    WildcardMix,
    /// P peers (P = N unless `peers` is given), 4 exact receives per peer; 4·P messages
    /// arrive round-robin over the peers.
    ManyPeers,
    /// N exact receives posted; N/2 cancelled in random order, then N/2 messages match
    /// the rest.
    CancelMix,
}

impl Workload {
    /// All workloads, in the order of the spec.
    pub const ALL: [Workload; 7] = [
        Workload::PostedExact,
        Workload::UnexpectedExact,
        Workload::UnexpectedAnySource,
        Workload::UnexpectedAnyTag,
        Workload::WildcardMix,
        Workload::ManyPeers,
        Workload::CancelMix,
    ];

    /// The workload's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::PostedExact => "posted-exact",
            Workload::UnexpectedExact => "unexpected-exact",
            Workload::UnexpectedAnySource => "unexpected-any-source",
            Workload::UnexpectedAnyTag => "unexpected-any-tag",
            Workload::WildcardMix => "wildcard-mix",
            Workload::ManyPeers => "many-peers",
            Workload::CancelMix => "cancel-mix",
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown workload name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownWorkload(pub String);

impl fmt::Display for UnknownWorkload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        unknown_name(f, "workload", &self.0, Workload::ALL.map(Workload::name))
    }
}

/// Writes "unknown `what` "`got`" (expected one of: `names`)".
pub(crate) fn unknown_name(
    f: &mut fmt::Formatter<'_>,
    what: &str,
    got: &str,
    names: impl IntoIterator<Item = &'static str>,
) -> fmt::Result {
    write!(f, "unknown {what} {got:?} (expected one of:")?;
    for n in names {
        write!(f, " {n}")?;
    }
    f.write_str(")")
}

impl std::error::Error for UnknownWorkload {}

impl FromStr for Workload {
    type Err = UnknownWorkload;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| UnknownWorkload(s.to_string()))
    }
}

/// Workload parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// N.
    pub depth: usize,
    /// Wildcard fraction F for `wildcard-mix` (default 0.1).
    pub wildcard_fraction: f64,
    /// Peers P (`wildcard-mix`: default 1; `many-peers`: default N).
    pub peers: Option<usize>,
    /// Seed of the deterministic generator (random positions, cancel order).
    pub seed: u64,
    /// The engine's [`crate::Config::eager_wildcard_lists`] (default `false`).
    pub eager_wildcard_lists: bool,
}

impl Params {
    /// Defaults for depth `n`.
    pub fn new(depth: usize) -> Self {
        Params {
            depth,
            wildcard_fraction: 0.1,
            peers: None,
            seed: 0x5eed,
            eager_wildcard_lists: false,
        }
    }
}

/// One operation of a workload's set-up or timed phase, in a form any matching front end
/// can run (the engine here, the offload driver in `tagmatch bench match --hw-tags`).
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// Post a receive `RecvSpec` with receive id `u32`.
    Post(RecvSpec, u32),
    /// A message with this envelope, no payload and message id `u32` arrives.
    Arrive(Envelope, u32),
    /// Cancel the pending receive posted with receive id `u32`.
    Cancel(u32),
}

/// The operations of a workload: the set-up phase (untimed) and the timed phase.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Set-up operations, run before timing starts.
    pub setup: Vec<Op>,
    /// Timed operations, run in order.
    pub timed: Vec<Op>,
}

/// A timed operation with its receive handle resolved.
#[derive(Clone, Copy, Debug)]
enum Timed {
    Post(RecvSpec, u32),
    Arrive(Envelope, u32),
    Cancel(RecvHandle),
}

/// The timed operations, kept in one homogeneous array when they are all arrivals or all
/// posts (the timed loop then runs them without dispatching on each operation's kind,
/// and reads 24 bytes per arrival instead of a whole [`Timed`]).
#[derive(Clone, Debug)]
enum TimedOps {
    /// Only arrivals: envelope and message id.
    Arrivals(Vec<(Envelope, u32)>),
    /// Only posts: receive and receive id.
    Posts(Vec<(RecvSpec, u32)>),
    /// A run of cancels, then a run of arrivals (`cancel-mix`): the cancelled receives'
    /// handles (8 bytes each), then envelope and message id.
    CancelsThenArrivals(Vec<RecvHandle>, Vec<(Envelope, u32)>),
    /// Any other mix (with cancels).
    Mixed(Vec<Timed>),
}

impl TimedOps {
    /// Fills in, before the set-up runs, every timed operation that needs no receive
    /// handle, reusing the arrays of the same kind (so that [`Prepared::again`] neither
    /// allocates nor frees, nor moves them): all of them when they are all arrivals or
    /// all posts, the arrivals of a run of cancels followed by arrivals. The cancels'
    /// handles exist only after the set-up: [`TimedOps::resolve`] adds them.
    ///
    /// Why before: arrays written after the set-up (24–48 bytes per operation, 1.5–3 MB
    /// at depth 65,536) evicted the engine's own lines, which the set-up had just
    /// written, from the caches: `cancel-mix` at depth 65,536, whose cancels read
    /// random receives, read 27 ns an operation with its 48-byte `Timed` array written
    /// after the set-up against 9 ns for the same engine operations with nothing written
    /// in between (see docs/benchmarks.md, session 18).
    fn prepare(&mut self, timed: &[Op]) {
        let arrivals = |v: &mut Vec<(Envelope, u32)>, ops: &[Op]| {
            v.clear();
            v.extend(ops.iter().filter_map(|o| match *o {
                Op::Arrive(env, mid) => Some((env, mid)),
                _ => None,
            }));
        };
        if timed.iter().all(|o| matches!(o, Op::Arrive(..))) {
            if !matches!(self, TimedOps::Arrivals(_)) {
                *self = TimedOps::Arrivals(Vec::new());
            }
            if let TimedOps::Arrivals(v) = self {
                arrivals(v, timed);
            }
        } else if timed.iter().all(|o| matches!(o, Op::Post(..))) {
            if !matches!(self, TimedOps::Posts(_)) {
                *self = TimedOps::Posts(Vec::new());
            }
            if let TimedOps::Posts(v) = self {
                v.clear();
                v.extend(timed.iter().filter_map(|o| match *o {
                    Op::Post(spec, rid) => Some((spec, rid)),
                    _ => None,
                }));
            }
        } else if let Some(split) = cancels_then_arrivals(timed) {
            if !matches!(self, TimedOps::CancelsThenArrivals(..)) {
                *self = TimedOps::CancelsThenArrivals(Vec::new(), Vec::new());
            }
            if let TimedOps::CancelsThenArrivals(c, a) = self {
                c.clear();
                arrivals(a, &timed[split..]);
            }
        } else if !matches!(self, TimedOps::Mixed(_)) {
            *self = TimedOps::Mixed(Vec::new());
        }
    }

    /// After the set-up: the operations that [`TimedOps::prepare`] left out, which need
    /// the receive handles; `cancel` resolves a cancel's receive id to its handle
    /// (cancels whose receive is not pending are left out).
    fn resolve(&mut self, timed: &[Op], mut cancel: impl FnMut(u32) -> Option<RecvHandle>) {
        match self {
            TimedOps::Arrivals(_) | TimedOps::Posts(_) => {}
            TimedOps::CancelsThenArrivals(c, _) => {
                c.extend(timed.iter().filter_map(|o| match *o {
                    Op::Cancel(rid) => cancel(rid),
                    _ => None,
                }));
            }
            TimedOps::Mixed(v) => {
                v.clear();
                v.extend(timed.iter().filter_map(|op| match *op {
                    Op::Post(spec, rid) => Some(Timed::Post(spec, rid)),
                    Op::Arrive(env, mid) => Some(Timed::Arrive(env, mid)),
                    Op::Cancel(rid) => cancel(rid).map(Timed::Cancel),
                }));
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            TimedOps::Arrivals(v) => v.len(),
            TimedOps::Posts(v) => v.len(),
            TimedOps::CancelsThenArrivals(c, a) => c.len() + a.len(),
            TimedOps::Mixed(v) => v.len(),
        }
    }

    /// Operations that match when run (all but the cancels).
    fn matching(&self) -> usize {
        match self {
            TimedOps::Mixed(v) => v.iter().filter(|o| !matches!(o, Timed::Cancel(_))).count(),
            TimedOps::CancelsThenArrivals(_, a) => a.len(),
            _ => self.len(),
        }
    }
}

/// A workload after its set-up phase.
#[derive(Debug)]
pub struct Prepared {
    engine: Engine<u32, u32>,
    ops: TimedOps,
    /// The workload's operations (for [`Prepared::again`]).
    plan: Plan,
    /// The set-up's pending receives by receive id (kept for [`Prepared::again`], which
    /// then allocates nothing).
    handles: Vec<Option<RecvHandle>>,
    /// Engine heap bytes at the end of set-up.
    pub setup_heap_bytes: usize,
    /// Posted receives at the end of set-up.
    pub setup_posted: usize,
    /// Unexpected messages at the end of set-up.
    pub setup_unexpected: usize,
    matches: usize,
}

/// splitmix64: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

const COMM: u32 = 0;

impl Plan {
    /// The set-up and timed operations of `w` with parameters `p`.
    pub fn new(w: Workload, p: &Params) -> Plan {
        let n = p.depth.max(1);
        let mut rng = Rng(p.seed);
        let (mut setup, mut timed) = (Vec::new(), Vec::new());
        match w {
            // bench-workloads: "post N receives, receive i = (src 0, tag i) | N messages
            // arrive, tags N-1 … 0 (reverse posting order), each matching one receive".
            Workload::PostedExact => {
                setup
                    .extend((0..n).map(|i| Op::Post(RecvSpec::exact(COMM, 0, i as u64), i as u32)));
                timed.extend(
                    (0..n)
                        .rev()
                        .map(|i| Op::Arrive(Envelope::new(COMM, 0, i as u64), i as u32)),
                );
            }
            // bench-workloads: "N messages arrive, message i = (src 0, tag i) | post N exact
            // receives for tags N-1 … 0".
            Workload::UnexpectedExact => {
                setup
                    .extend((0..n).map(|i| Op::Arrive(Envelope::new(COMM, 0, i as u64), i as u32)));
                timed.extend(
                    (0..n)
                        .rev()
                        .map(|i| Op::Post(RecvSpec::exact(COMM, 0, i as u64), i as u32)),
                );
            }
            // bench-workloads: "N messages arrive, message i = (src i, tag i) | post N receives
            // (ANY_SOURCE, tag i) [or (src i, ANY_TAG)] for i = N-1 … 0".
            Workload::UnexpectedAnySource | Workload::UnexpectedAnyTag => {
                setup.extend(
                    (0..n).map(|i| Op::Arrive(Envelope::new(COMM, i as u32, i as u64), i as u32)),
                );
                let any_src = w == Workload::UnexpectedAnySource;
                timed.extend((0..n).rev().map(|i| {
                    let spec = if any_src {
                        RecvSpec::new(COMM, None, Some(i as u64))
                    } else {
                        RecvSpec::new(COMM, Some(i as u32), None)
                    };
                    Op::Post(spec, i as u32)
                }));
            }
            // bench-workloads: "a fraction F are wildcards, half ANY_SOURCE, half ANY_TAG, in
            // random positions; the rest exact (src i mod P, tag i) | N messages arrive, each
            // matching a distinct receive, in reverse posting order". Wildcards get a unique
            // tag (ANY_SOURCE) or a source no other receive names (ANY_TAG), so that each
            // message has exactly one matching receive.
            Workload::WildcardMix => {
                let peers = p.peers.unwrap_or(1).max(1);
                let f = p.wildcard_fraction.clamp(0.0, 1.0);
                let mut msgs = Vec::with_capacity(n);
                for i in 0..n {
                    let exact_src = (i % peers) as u32;
                    let (spec, env) = if rng.unit() < f {
                        if rng.next() & 1 == 0 {
                            // ANY_SOURCE, unique tag
                            (
                                RecvSpec::new(COMM, None, Some(i as u64)),
                                Envelope::new(COMM, exact_src, i as u64),
                            )
                        } else {
                            // ANY_TAG on a source no other receive names
                            let s = (peers + i) as u32;
                            (
                                RecvSpec::new(COMM, Some(s), None),
                                Envelope::new(COMM, s, i as u64),
                            )
                        }
                    } else {
                        (
                            RecvSpec::exact(COMM, exact_src, i as u64),
                            Envelope::new(COMM, exact_src, i as u64),
                        )
                    };
                    setup.push(Op::Post(spec, i as u32));
                    msgs.push(env);
                }
                timed.extend(
                    msgs.iter()
                        .enumerate()
                        .rev()
                        .map(|(i, env)| Op::Arrive(*env, i as u32)),
                );
            }
            // bench-workloads: "P = N peers, 4 receives posted per peer, exact | 4·P messages
            // arrive round-robin over peers".
            Workload::ManyPeers => {
                let peers = p.peers.unwrap_or(n).max(1);
                for s in 0..peers {
                    for k in 0..4u64 {
                        setup.push(Op::Post(
                            RecvSpec::exact(COMM, s as u32, k),
                            (s * 4) as u32 + k as u32,
                        ));
                    }
                }
                for k in 0..4u64 {
                    timed.extend(
                        (0..peers).map(|s| Op::Arrive(Envelope::new(COMM, s as u32, k), s as u32)),
                    );
                }
            }
            // bench-workloads: "post N exact receives | cancel N/2 of them in random order,
            // then N/2 messages match the rest".
            Workload::CancelMix => {
                setup
                    .extend((0..n).map(|i| Op::Post(RecvSpec::exact(COMM, 0, i as u64), i as u32)));
                let mut ids: Vec<usize> = (0..n).collect();
                rng.shuffle(&mut ids);
                let (cancel, keep) = ids.split_at_mut(n / 2);
                timed.extend(cancel.iter().map(|&i| Op::Cancel(i as u32)));
                keep.sort_unstable_by_key(|&i| core::cmp::Reverse(i));
                timed.extend(
                    keep.iter()
                        .map(|&i| Op::Arrive(Envelope::new(COMM, 0, i as u64), i as u32)),
                );
            }
        }
        Plan { setup, timed }
    }
}

impl Prepared {
    /// Runs the set-up phase of `w` on an engine and precomputes the timed operations.
    pub fn new(w: Workload, p: &Params) -> Prepared {
        let plan = Plan::new(w, p);
        let mut e: Engine<u32, u32> = Engine::new(
            crate::Config::default()
                .max_messages(usize::MAX)
                .max_posted(usize::MAX)
                .max_bytes(usize::MAX)
                .eager_wildcard_lists(p.eager_wildcard_lists),
        );
        let mut ops = TimedOps::Mixed(Vec::new());
        let mut handles = Vec::new();
        Self::set_up(&mut e, &plan, &mut ops, &mut handles);
        let c = e.counters();
        Prepared {
            setup_heap_bytes: e.heap_bytes(),
            setup_posted: c.posted_depth,
            setup_unexpected: c.unexpected_depth,
            engine: e,
            ops,
            plan,
            handles,
            matches: 0,
        }
    }

    /// Runs `plan`'s set-up on `e`; the timed operations with their receive handles.
    fn set_up(
        e: &mut Engine<u32, u32>,
        plan: &Plan,
        ops: &mut TimedOps,
        handles: &mut Vec<Option<RecvHandle>>,
    ) {
        // What needs no handle is written before the set-up (see `TimedOps::prepare`).
        ops.prepare(&plan.timed);
        // Pending receives by receive id, for the cancels.
        handles.clear();
        for op in &plan.setup {
            match *op {
                Op::Post(spec, rid) => {
                    if let Ok(Posted::Pending(h)) = e.post(spec, rid) {
                        let i = rid as usize;
                        if handles.len() <= i {
                            handles.resize(i + 1, None);
                        }
                        handles[i] = Some(h);
                    }
                }
                Op::Arrive(env, mid) => {
                    let _ = e.arrive(env, 0, mid);
                }
                Op::Cancel(rid) => {
                    if let Some(h) = handles.get_mut(rid as usize).and_then(Option::take) {
                        let _ = e.cancel(h);
                    }
                }
            }
        }
        ops.resolve(&plan.timed, |rid| {
            handles.get_mut(rid as usize).and_then(Option::take)
        });
    }

    /// Runs the set-up phase again on the same engine, once the whole timed phase has run
    /// and left the engine with no posted receive and no unexpected message (every
    /// workload's timed phase does): the engine then starts the next timed phase as warm
    /// as its own set-up leaves it, as a single engine in an application is. Returns
    /// `false` (and does nothing) if the timed phase has not run completely or left
    /// entries behind. The match count restarts at 0.
    pub fn again(&mut self) -> bool {
        let c = self.engine.counters();
        if self.matches != self.expected_matches() || c.posted_depth != 0 || c.unexpected_depth != 0
        {
            return false;
        }
        Self::set_up(
            &mut self.engine,
            &self.plan,
            &mut self.ops,
            &mut self.handles,
        );
        self.matches = 0;
        true
    }

    /// Number of timed operations (matches, plus cancels for `cancel-mix`).
    pub fn ops(&self) -> usize {
        self.ops.len()
    }

    /// Runs the whole timed phase; returns the number of matches made so far.
    pub fn run(&mut self) -> usize {
        self.run_range(0, self.ops.len())
    }

    /// Runs timed operations `start..end` (clamped); returns the number of matches made
    /// so far. Ranges must be run in order, each once.
    #[inline]
    pub fn run_range(&mut self, start: usize, end: usize) -> usize {
        // Fold the matched ids into a checksum the optimiser cannot drop (reading the
        // fields, as a user would, rather than black-boxing whole results).
        let mut sum = 0u32;
        self.run_in(start, end, &mut sum);
        core::hint::black_box(sum);
        self.matches
    }

    /// Runs the whole timed phase of each workload in `group`, in order, with one
    /// checksum for the group (the timed loop of the benchmark's groups of copies);
    /// returns the matches made. Each timed phase must not have started.
    #[inline]
    pub fn run_group(group: &mut [Prepared]) -> usize {
        let mut sum = 0u32;
        let mut m = 0;
        for p in group {
            m += p.run_in(0, usize::MAX, &mut sum);
        }
        core::hint::black_box(sum);
        m
    }

    /// Runs timed operations `start..end` (clamped), adding the matched ids to `sum`;
    /// returns the matches made.
    #[inline(always)]
    fn run_in(&mut self, start: usize, end: usize, sum: &mut u32) -> usize {
        let e = &mut self.engine;
        let m = match &self.ops {
            TimedOps::Arrivals(v) => {
                let mut m = 0;
                for &(env, mid) in clamp(v, start, end) {
                    if let Ok(crate::Arrived::Matched(x)) = e.arrive(env, 0, mid) {
                        m += 1;
                        *sum = sum.wrapping_add(x.recv);
                    }
                }
                m
            }
            TimedOps::Posts(v) => {
                let mut m = 0;
                for &(spec, rid) in clamp(v, start, end) {
                    if let Ok(Posted::Matched(x)) = e.post(spec, rid) {
                        m += 1;
                        *sum = sum.wrapping_add(x.msg);
                    }
                }
                m
            }
            TimedOps::CancelsThenArrivals(c, a) => {
                for &h in clamp(c, start, end) {
                    if let Ok(r) = e.cancel(h) {
                        *sum = sum.wrapping_add(r);
                    }
                }
                // The arrivals are operations `c.len()..` of the timed phase.
                let n = c.len();
                let mut m = 0;
                for &(env, mid) in clamp(a, start.saturating_sub(n), end.saturating_sub(n)) {
                    if let Ok(crate::Arrived::Matched(x)) = e.arrive(env, 0, mid) {
                        m += 1;
                        *sum = sum.wrapping_add(x.recv);
                    }
                }
                m
            }
            TimedOps::Mixed(v) => Self::run_mixed(e, clamp(v, start, end), sum),
        };
        self.matches += m;
        m
    }

    /// The timed loop over a mix of operations; the matches made.
    #[inline]
    fn run_mixed(e: &mut Engine<u32, u32>, ops: &[Timed], sum: &mut u32) -> usize {
        let mut m = 0;
        for op in ops {
            match *op {
                Timed::Post(spec, rid) => {
                    if let Ok(Posted::Matched(x)) = e.post(spec, rid) {
                        m += 1;
                        *sum = sum.wrapping_add(x.msg);
                    }
                }
                Timed::Arrive(env, mid) => {
                    if let Ok(crate::Arrived::Matched(x)) = e.arrive(env, 0, mid) {
                        m += 1;
                        *sum = sum.wrapping_add(x.recv);
                    }
                }
                Timed::Cancel(h) => {
                    if let Ok(r) = e.cancel(h) {
                        *sum = sum.wrapping_add(r);
                    }
                }
            }
        }
        m
    }

    /// The engine (to read counters after a run).
    pub fn engine(&self) -> &Engine<u32, u32> {
        &self.engine
    }

    /// Engine heap bytes per posted receive at the end of set-up (`None` if the set-up
    /// posts none, or also leaves unexpected messages).
    pub fn bytes_per_posted(&self) -> Option<f64> {
        (self.setup_posted > 0 && self.setup_unexpected == 0)
            .then(|| self.setup_heap_bytes as f64 / self.setup_posted as f64)
    }

    /// Engine heap bytes per unexpected message at the end of set-up (`None` if the
    /// set-up stores none, or also posts receives).
    pub fn bytes_per_unexpected(&self) -> Option<f64> {
        (self.setup_unexpected > 0 && self.setup_posted == 0)
            .then(|| self.setup_heap_bytes as f64 / self.setup_unexpected as f64)
    }

    /// Matches the timed phase must produce when run completely.
    pub fn expected_matches(&self) -> usize {
        self.ops.matching()
    }
}

/// Where the arrivals start if `timed` is a run of cancels (at least one) followed by a
/// run of arrivals (the shape of `cancel-mix`).
fn cancels_then_arrivals(timed: &[Op]) -> Option<usize> {
    let split = timed
        .iter()
        .position(|o| !matches!(o, Op::Cancel(_)))
        .unwrap_or(timed.len());
    (split > 0 && timed[split..].iter().all(|o| matches!(o, Op::Arrive(..)))).then_some(split)
}

/// `v[start..end]` with both ends clamped to `v.len()` (and `start` to `end`).
#[inline(always)]
fn clamp<T>(v: &[T], start: usize, end: usize) -> &[T] {
    let end = end.min(v.len());
    &v[start.min(end)..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_matches_every_message_at_several_depths() {
        for w in Workload::ALL {
            for n in [1, 2, 7, 64, 1000] {
                for (f, eager) in [(0.0, false), (0.1, true), (0.5, false), (1.0, true)] {
                    let mut p = Params::new(n);
                    p.wildcard_fraction = f;
                    p.eager_wildcard_lists = eager;
                    let mut prep = Prepared::new(w, &p);
                    let want = prep.expected_matches();
                    assert!(want > 0, "{w} n={n}");
                    assert_eq!(prep.run(), want, "{w} n={n} f={f}");
                    let c = prep.engine().counters();
                    assert_eq!(
                        c.unexpected_depth, 0,
                        "{w} n={n} f={f}: nothing left unexpected"
                    );
                    assert_eq!(c.posted_depth, 0, "{w} n={n} f={f}: nothing left posted");
                }
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for w in Workload::ALL {
            assert_eq!(w.name().parse::<Workload>(), Ok(w));
        }
        assert!("nope".parse::<Workload>().is_err());
    }

    #[test]
    fn run_range_in_batches_equals_run() {
        // Batches of 7 and 16: ranges that cross `cancel-mix`'s boundary between its
        // cancels and its arrivals, and ranges past the end.
        for w in Workload::ALL {
            for batch in [7, 16] {
                let mut a = Prepared::new(w, &Params::new(500));
                let mut b = Prepared::new(w, &Params::new(500));
                let total = a.run();
                let mut i = 0;
                while i < b.ops() {
                    b.run_range(i, i + batch);
                    i += batch;
                }
                assert_eq!(b.run_range(0, 0), total, "{w} batch {batch}");
                assert_eq!(a.engine().counters(), b.engine().counters(), "{w}");
            }
        }
    }

    #[test]
    fn cancels_then_arrivals_are_kept_apart() {
        let c = Op::Cancel(0);
        let a = Op::Arrive(Envelope::new(0, 0, 0), 0);
        let p = Op::Post(RecvSpec::exact(0, 0, 0), 0);
        assert_eq!(cancels_then_arrivals(&[c, c, a, a]), Some(2));
        assert_eq!(cancels_then_arrivals(&[c]), Some(1));
        assert_eq!(cancels_then_arrivals(&[]), None);
        assert_eq!(cancels_then_arrivals(&[a, a]), None);
        assert_eq!(cancels_then_arrivals(&[c, a, c]), None);
        assert_eq!(cancels_then_arrivals(&[c, p]), None);
        // cancel-mix: N/2 cancels (8 bytes each), then N/2 arrivals; the same after a
        // rerun of the set-up, in the same arrays.
        let mut prep = Prepared::new(Workload::CancelMix, &Params::new(100));
        let shape = |p: &Prepared| match &p.ops {
            TimedOps::CancelsThenArrivals(c, a) => Some((c.len(), a.len(), c.as_ptr(), a.as_ptr())),
            _ => None,
        };
        let first = shape(&prep).expect("cancel-mix keeps cancels and arrivals apart");
        assert_eq!((first.0, first.1), (50, 50));
        // In order: operations 0..50 are the cancels, 50..100 the arrivals.
        assert_eq!(prep.run_range(0, 49), 0);
        let c = prep.engine().counters();
        assert_eq!((c.cancelled, c.posted_depth), (49, 51));
        assert_eq!(prep.run_range(49, 51), 1);
        let c = prep.engine().counters();
        assert_eq!((c.cancelled, c.posted_depth), (50, 49));
        assert_eq!(prep.run_range(51, 100), 50);
        assert_eq!(prep.engine().counters().posted_depth, 0);
        assert!(prep.again());
        assert_eq!(shape(&prep), Some(first), "refilled in place");
    }

    #[test]
    fn run_group_runs_each_copy_like_run() {
        for w in Workload::ALL {
            for n in [1, 5, 300] {
                let p = Params::new(n);
                let mut alone = Prepared::new(w, &p);
                let want = alone.expected_matches();
                assert_eq!(alone.run(), want, "{w} n={n}");
                let mut group: Vec<Prepared> = (0..3).map(|_| Prepared::new(w, &p)).collect();
                assert_eq!(Prepared::run_group(&mut group), 3 * want, "{w} n={n}");
                for g in &mut group {
                    assert_eq!(
                        g.engine().counters(),
                        alone.engine().counters(),
                        "{w} n={n}"
                    );
                    assert!(g.again(), "{w} n={n}: the whole timed phase ran");
                }
            }
        }
    }

    #[test]
    fn again_reruns_the_set_up_on_the_same_engine() {
        for w in Workload::ALL {
            for n in [1, 3, 63] {
                let p = Params::new(n);
                let mut prep = Prepared::new(w, &p);
                let want = prep.expected_matches();
                assert!(!prep.again(), "{w} n={n}: refused before the timed phase");
                prep.run_range(0, prep.ops() / 2);
                if prep.ops() > 1 {
                    assert!(!prep.again(), "{w} n={n}: refused after part of it");
                }
                assert_eq!(
                    prep.run_range(prep.ops() / 2, prep.ops()),
                    want,
                    "{w} n={n}"
                );
                for round in 0..3 {
                    assert!(prep.again(), "{w} n={n} round {round}");
                    let c = prep.engine().counters();
                    assert_eq!(
                        (c.posted_depth, c.unexpected_depth),
                        (prep.setup_posted, prep.setup_unexpected),
                        "{w} n={n}: the set-up's state again"
                    );
                    assert_eq!(prep.run(), want, "{w} n={n} round {round}");
                }
            }
        }
    }
}

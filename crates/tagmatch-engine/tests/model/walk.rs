//! One driver for the engine-against-model walks of the test files (`review_exact`,
//! `review_log`, `review_dense`, `exact_fast_path`, `lazy_lists`): every operation is
//! run on the engine and on the [`Model`], the outcomes compared, and a divergence
//! reported with the operations that led to it. What the files differ in is in
//! [`Opts`].

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::{Model, Msg, Out, Rng};
use tagmatch_engine::*;

/// How many operations a failure report lists.
const LOG_TAIL: usize = 40;

/// Which bytes the engine's `Counters::bytes_held` is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bytes {
    /// The model's (every stored message counts its length).
    Model,
    /// The walk's own sum of the held bytes given with each message (messages with held
    /// bytes other than their length), claims counted as `Config::claims_count` says.
    Walk,
    /// Not compared (nor the pressure).
    Unchecked,
}

/// The variations between the walks.
#[derive(Clone, Copy, Debug)]
pub struct Opts {
    /// What `bytes_held` is compared with.
    pub bytes: Bytes,
    /// Whether the pressure is compared with the model's.
    pub pressure: bool,
    /// Whether every operation is followed by [`Walk::check`] (else the caller checks).
    pub check_each: bool,
    /// Messages through `arrive_held` / `deliver_held` (else `arrive` / `deliver`,
    /// whose held bytes are their length).
    pub held_api: bool,
    /// Receives matched or purged leave `handles` (kept in `dead_recv`, as are received
    /// claims in `dead_msg`) and every cancel / mrecv must succeed; else their handles
    /// stay, and a cancel through one must be refused by engine and model alike.
    pub retire: bool,
    /// `handles` / `claims` lose the picked entry by `swap_remove` (else `remove`).
    pub swap_remove: bool,
}

impl Opts {
    /// Every check after every operation, bytes against the model, `arrive`/`deliver`,
    /// handles retired.
    pub const FULL: Opts = Opts {
        bytes: Bytes::Model,
        pressure: true,
        check_each: true,
        held_api: false,
        retire: true,
        swap_remove: false,
    };
}

/// Engine and model side by side, with the walk's own books.
pub struct Walk {
    pub e: Engine<u32, u32>,
    pub m: Model,
    pub opts: Opts,
    claims_count: bool,
    /// The last id given to a receive or message.
    pub next: u32,
    /// Pending receives (rid, handle) (and, without `retire`, matched ones).
    pub handles: Vec<(u32, RecvHandle)>,
    /// Claimed messages (mid, handle).
    pub claims: Vec<(u32, MsgHandle)>,
    /// Handles whose receive was matched, cancelled or purged (with `retire`).
    pub dead_recv: Vec<RecvHandle>,
    /// Handles whose claimed message was received (with `retire`).
    pub dead_msg: Vec<MsgHandle>,
    /// Held bytes of every message the engine counts (queued, claimed when claims
    /// count, in a reorder buffer), by message id.
    pub held: HashMap<u32, usize>,
    /// Per sequenced source: the next sequence number its sender gives.
    send_seq: BTreeMap<u32, u32>,
    /// Per sequenced source: sent, not yet delivered (seq, message, held bytes).
    pub in_flight: BTreeMap<u32, Vec<(u32, Msg, usize)>>,
    log: VecDeque<String>,
}

fn out_of(p: Purged<u32, u32>) -> Out {
    match p {
        Purged::Recv(_, r) => Out::PurgedRecv(r),
        Purged::Unexpected(m) => Out::PurgedMsg(m.msg),
        Purged::Held(m) => Out::PurgedHeld(m.msg),
    }
}

impl Walk {
    /// An engine of `cfg` and a model of the same budgets.
    pub fn new(cfg: Config, opts: Opts) -> Self {
        let m = Model::new(
            cfg.reorder_window,
            cfg.max_bytes,
            cfg.max_messages,
            cfg.max_posted,
            cfg.initial_seq,
        );
        Self::with_model(cfg, m, opts)
    }

    /// An engine of `cfg` beside model `m`. The engine defers the (comm, src, tag)
    /// index removals of wildcard receives at every depth (by default only in large
    /// indexes), so that the walks run them between every pair of operations; the
    /// differential test runs both ways.
    pub fn with_model(cfg: Config, m: Model, opts: Opts) -> Self {
        let mut e = Engine::new(cfg);
        e.defer_removals_from(0);
        Walk {
            e,
            m,
            opts,
            claims_count: cfg.claims_count,
            next: 0,
            handles: Vec::new(),
            claims: Vec::new(),
            dead_recv: Vec::new(),
            dead_msg: Vec::new(),
            held: HashMap::new(),
            send_seq: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            log: VecDeque::new(),
        }
    }

    pub fn id(&mut self) -> u32 {
        self.next += 1;
        self.next
    }

    fn note(&mut self, op: String) {
        if self.log.len() == LOG_TAIL {
            self.log.pop_front();
        }
        self.log.push_back(op);
    }

    pub fn fail(&self, what: String) -> ! {
        let tail: Vec<&str> = self.log.iter().map(String::as_str).collect();
        panic!("{what}\nlast operations:\n{}", tail.join("\n"));
    }

    /// Depths (posted, unexpected, claimed, reorder), bytes and pressure against the
    /// model (bytes and pressure as [`Opts`] say).
    pub fn check(&self, what: &str) {
        let c = self.e.counters();
        let bytes = match self.opts.bytes {
            Bytes::Model => self.m.bytes(),
            Bytes::Walk => self.held.values().sum(),
            Bytes::Unchecked => c.bytes_held,
        };
        let got = (
            c.posted_depth,
            c.unexpected_depth,
            c.claimed_depth,
            c.reorder_depth,
            c.bytes_held,
        );
        let want = (
            self.m.posted.len(),
            self.m.unexp.len(),
            self.m.claimed.len(),
            self.m.held_count(),
            bytes,
        );
        if got != want {
            self.fail(format!(
                "after {what}: engine posted/unexpected/claimed/reorder/bytes {got:?}, \
                 model {want:?}"
            ));
        }
        if self.opts.pressure && self.e.pressure() != self.m.pressure() {
            self.fail(format!(
                "after {what}: pressure {:?}, model {:?}",
                self.e.pressure(),
                self.m.pressure()
            ));
        }
    }

    fn checked(&self, what: &str) {
        if self.opts.check_each {
            self.check(what);
        }
    }

    /// Receive `rid` left the engine (matched, purged): with `retire`, its handle too.
    fn retire_recv(&mut self, rid: u32) {
        if !self.opts.retire {
            return;
        }
        if let Some(i) = self.handles.iter().position(|&(r, _)| r == rid) {
            let (_, h) = self.handles.remove(i);
            self.dead_recv.push(h);
        }
    }

    /// A message whose held bytes are its length.
    pub fn arrive(&mut self, env: Envelope, len: usize) -> Out {
        self.arrive_held(env, len, len)
    }

    /// A message of `len` bytes of which `held` count while it is stored.
    pub fn arrive_held(&mut self, env: Envelope, len: usize, held: usize) -> Out {
        let mid = self.id();
        self.note(format!("arrive {env:?} len {len} held {held} mid {mid}"));
        let res = if self.opts.held_api {
            self.e.arrive_held(env, len, held, mid)
        } else {
            assert_eq!(held, len, "held bytes other than the length need held_api");
            self.e.arrive(env, len, mid)
        };
        let got = match res {
            Ok(Arrived::Matched(x)) => {
                if x.env != env || x.len != len {
                    self.fail(format!("arrive {env:?}: match says {:?}/{}", x.env, x.len));
                }
                Out::Match(x.recv, x.msg)
            }
            Ok(Arrived::Unexpected(_)) => Out::Unexpected(mid),
            Err(r) => Out::Rejected(r.reason, r.msg),
        };
        let want = self.m.arrive(Msg { env, len, mid }, true);
        if got != want {
            self.fail(format!("arrive {env:?}: engine {got:?}, model {want:?}"));
        }
        match got {
            Out::Match(rid, _) => self.retire_recv(rid),
            Out::Unexpected(_) => {
                self.held.insert(mid, held);
            }
            _ => {}
        }
        self.checked("arrive");
        got
    }

    /// The sender of sequenced source `env.src` puts a message in flight.
    pub fn send(&mut self, env: Envelope, len: usize, held: usize) {
        let mid = self.id();
        let initial = self.m.initial_seq;
        let seq = self.send_seq.entry(env.src).or_insert(initial);
        let s = *seq;
        *seq = s.wrapping_add(1);
        let q = self.in_flight.entry(env.src).or_default();
        q.push((s, Msg { env, len, mid }, held));
    }

    /// The transport delivers in-flight message `pick` (modulo their number) of `src`:
    /// `None` when none is in flight, else what the engine answered.
    pub fn deliver(&mut self, src: u32, pick: usize) -> Option<Result<usize, RejectReason>> {
        let q = self.in_flight.get(&src).filter(|q| !q.is_empty())?;
        let i = pick % q.len();
        let (seq, msg, held) = q[i].clone();
        self.note(format!("deliver seq {seq} {msg:?} held {held}"));
        let mut got = Vec::new();
        let mut matched = Vec::new();
        let res = if self.opts.held_api {
            self.e
                .deliver_held(msg.env, seq, msg.len, held, msg.mid, |o| match o {
                    Ordered::Arrived(Arrived::Matched(x)) => {
                        matched.push((x.recv, x.msg));
                        got.push(Out::Match(x.recv, x.msg));
                    }
                    Ordered::Arrived(Arrived::Unexpected(_)) => got.push(Out::Unexpected(0)),
                    Ordered::Control { .. } => got.push(Out::SetSeq(false)),
                })
        } else {
            assert_eq!(
                held, msg.len,
                "held bytes other than the length need held_api"
            );
            self.e.deliver(msg.env, seq, msg.len, msg.mid, |a| match a {
                Arrived::Matched(x) => {
                    matched.push((x.recv, x.msg));
                    got.push(Out::Match(x.recv, x.msg));
                }
                Arrived::Unexpected(_) => got.push(Out::Unexpected(0)),
            })
        };
        match &res {
            Ok(0) => got.push(Out::Held(msg.mid)),
            Ok(_) => {}
            Err(x) => got.push(Out::Rejected(x.reason, x.msg)),
        }
        let mut want = Vec::new();
        self.m.deliver(msg.clone(), seq, &mut want);
        for w in want.iter_mut() {
            if let Out::Unexpected(_) = w {
                *w = Out::Unexpected(0);
            }
        }
        if got != want {
            self.fail(format!(
                "deliver seq {seq} of {msg:?}: engine {got:?}, model {want:?}"
            ));
        }
        if !matches!(got.last(), Some(Out::Rejected(..))) {
            self.in_flight.get_mut(&src).unwrap().remove(i);
            self.held.insert(msg.mid, held);
        }
        for (rid, mid) in matched {
            self.retire_recv(rid);
            self.held.remove(&mid);
        }
        self.checked("deliver");
        Some(res.map_err(|x| x.reason))
    }

    /// The transport delivers a new message of `env.src` (not put in flight by
    /// [`Walk::send`]) whose sequence number is `ahead` past the one the receiver expects
    /// next: the messages between are lost or late, so with `ahead > 0` it is held in the
    /// reorder buffer until a later `deliver_ahead(.., 0)` fills the gap, or refused (a
    /// duplicate of one held there). Reorders every source at once without its
    /// predecessors in flight (`review_wildmem`). A refused message is dropped.
    pub fn deliver_ahead(
        &mut self,
        env: Envelope,
        len: usize,
        ahead: u32,
    ) -> Result<usize, RejectReason> {
        let mid = self.id();
        let seq = self.m.expected(env.src).wrapping_add(ahead);
        let q = self.in_flight.entry(env.src).or_default();
        q.push((seq, Msg { env, len, mid }, len));
        let i = q.len() - 1;
        let res = self.deliver(env.src, i).expect("a message in flight");
        if res.is_err() {
            self.in_flight.get_mut(&env.src).unwrap().remove(i);
        }
        res
    }

    pub fn post(&mut self, spec: RecvSpec) -> Out {
        let rid = self.id();
        self.note(format!("post {spec:?} rid {rid}"));
        let got = match self.e.post(spec, rid) {
            Ok(Posted::Matched(x)) => {
                if !spec.matches(&x.env) {
                    self.fail(format!("post {spec:?}: matched {:?}", x.env));
                }
                Out::Match(x.recv, x.msg)
            }
            Ok(Posted::Pending(h)) => {
                self.handles.push((rid, h));
                Out::Pending(rid)
            }
            Err(r) => Out::PostRejected(r.recv),
        };
        let want = self.m.post(spec, rid);
        if got != want {
            self.fail(format!("post {spec:?}: engine {got:?}, model {want:?}"));
        }
        if let Out::Match(_, mid) = got {
            self.held.remove(&mid);
        }
        self.checked("post");
        got
    }

    pub fn probe(&mut self, spec: RecvSpec) -> Option<u32> {
        self.note(format!("probe {spec:?}"));
        let got = self.e.probe(&spec).map(|p| *p.msg);
        let want = self.m.probe(&spec);
        if got != want {
            self.fail(format!("probe {spec:?}: engine {got:?}, model {want:?}"));
        }
        self.checked("probe");
        got
    }

    pub fn mprobe(&mut self, spec: RecvSpec) -> Option<u32> {
        self.note(format!("mprobe {spec:?}"));
        let c = self.e.mprobe(&spec);
        let got = c.map(|c| *self.e.claimed(c.handle).expect("a fresh claim"));
        if let (Some(c), Some(mid)) = (c, got) {
            self.claims.push((mid, c.handle));
            if !self.claims_count {
                self.held.remove(&mid);
            }
        }
        let want = self.m.mprobe(&spec);
        if got != want {
            self.fail(format!("mprobe {spec:?}: engine {got:?}, model {want:?}"));
        }
        self.checked("mprobe");
        got
    }

    fn pick<T>(v: &mut Vec<T>, i: usize, swap: bool) -> T {
        let i = i % v.len();
        if swap {
            v.swap_remove(i)
        } else {
            v.remove(i)
        }
    }

    /// Receives claim `i` (modulo their number); nothing when there is none.
    pub fn mrecv(&mut self, i: usize) {
        if self.claims.is_empty() {
            return;
        }
        let (mid, h) = Self::pick(&mut self.claims, i, self.opts.swap_remove);
        self.note(format!("mrecv {mid}"));
        let got = self.e.mrecv(h).ok().map(|x| x.msg);
        let want = self.m.mrecv(mid);
        if got != want || got != Some(mid) {
            self.fail(format!("mrecv of {mid}: engine {got:?}, model {want:?}"));
        }
        self.held.remove(&mid);
        if self.opts.retire {
            self.dead_msg.push(h);
        }
        self.checked("mrecv");
    }

    /// Cancels receive `i` (modulo their number) by its handle; nothing when there is
    /// none.
    pub fn cancel(&mut self, i: usize) {
        if self.handles.is_empty() {
            return;
        }
        let (rid, h) = Self::pick(&mut self.handles, i, self.opts.swap_remove);
        self.note(format!("cancel {rid}"));
        let got = self.e.cancel(h).ok();
        let want = self.m.cancel(rid);
        if got != want || (self.opts.retire && got != Some(rid)) {
            self.fail(format!("cancel of {rid}: engine {got:?}, model {want:?}"));
        }
        if self.opts.retire {
            self.dead_recv.push(h);
        }
        self.checked("cancel");
    }

    /// Cancels the receives whose spec satisfies `pred`, in posting order in both.
    pub fn cancel_where(&mut self, what: &str, pred: impl Fn(&RecvSpec) -> bool) {
        self.note(format!("cancel_where {what}"));
        let mut got = Vec::new();
        self.e
            .cancel_where(|s, _| pred(s), |_, r| got.push(Out::PurgedRecv(r)));
        let mut want = Vec::new();
        self.m.cancel_where(&pred, &mut want);
        if got != want {
            self.fail(format!(
                "cancel_where {what}: engine {got:?}, model {want:?}"
            ));
        }
        for o in got {
            if let Out::PurgedRecv(r) = o {
                self.retire_recv(r);
            }
        }
        self.checked("cancel_where");
    }

    /// Checks a purge's output: the same receives and held messages, and the same
    /// queued messages in arrival order (per communicator, given `comm_of` their
    /// communicators, or all of them when `comm_of` is empty). Returns it sorted.
    fn purged(
        &mut self,
        what: &str,
        got: Vec<Out>,
        want: Vec<Out>,
        comm_of: &HashMap<u32, u32>,
    ) -> Vec<Out> {
        let msgs = |v: &Vec<Out>, c: Option<u32>| -> Vec<Out> {
            v.iter()
                .filter(|o| match o {
                    Out::PurgedMsg(m) => c.is_none_or(|c| comm_of.get(m) == Some(&c)),
                    _ => false,
                })
                .cloned()
                .collect()
        };
        let in_order = if comm_of.is_empty() {
            msgs(&got, None) == msgs(&want, None)
        } else {
            let mut comms: Vec<u32> = comm_of.values().copied().collect();
            comms.sort_unstable();
            comms.dedup();
            comms
                .into_iter()
                .all(|c| msgs(&got, Some(c)) == msgs(&want, Some(c)))
        };
        let (mut g, mut w) = (got.clone(), want.clone());
        g.sort();
        w.sort();
        if !in_order || g != w {
            self.fail(format!("{what}: engine {got:?}, model {want:?}"));
        }
        for o in got {
            match o {
                Out::PurgedRecv(r) => self.retire_recv(r),
                Out::PurgedMsg(m) | Out::PurgedHeld(m) => {
                    self.held.remove(&m);
                }
                _ => {}
            }
        }
        self.checked(what);
        g
    }

    /// Purges peer `src` (its sender restarts at the initial sequence number); returns
    /// what was purged, sorted.
    pub fn purge_peer(&mut self, src: u32) -> Vec<Out> {
        self.note(format!("purge_peer {src}"));
        // Per communicator in arrival order (the engine visits one communicator after
        // another).
        let comm_of: HashMap<u32, u32> = self
            .m
            .unexp
            .iter()
            .filter(|m| m.env.src == src)
            .map(|m| (m.mid, m.env.comm))
            .collect();
        let mut got = Vec::new();
        self.e.purge_peer(src, |p| got.push(out_of(p)));
        let mut want = Vec::new();
        self.m.purge_peer(src, &mut want);
        self.send_seq.remove(&src);
        self.in_flight.remove(&src);
        self.purged(&format!("purge_peer {src}"), got, want, &comm_of)
    }

    /// Purges communicator `comm`; returns what was purged, sorted.
    pub fn purge_comm(&mut self, comm: u32) -> Vec<Out> {
        self.note(format!("purge_comm {comm}"));
        let mut got = Vec::new();
        self.e.purge_comm(comm, |p| got.push(out_of(p)));
        let mut want = Vec::new();
        self.m.purge_comm(comm, &mut want);
        self.purged(&format!("purge_comm {comm}"), got, want, &HashMap::new())
    }

    pub fn first_posted(&mut self, env: Envelope) {
        self.note(format!("first_posted_match {env:?}"));
        let got = self.e.first_posted_match(&env).map(|i| {
            assert!(
                i.spec.matches(&env),
                "first_posted_match {env:?}: {:?}",
                i.spec
            );
            *self.e.recv_context(i.handle).expect("a posted receive")
        });
        let want = self.m.first_posted(&env);
        if got != want {
            self.fail(format!(
                "first_posted_match {env:?}: engine {got:?}, model {want:?}"
            ));
        }
    }

    /// An exact receive of the key of the queued message at `i` of the arrival order
    /// (taking the earliest of that key).
    pub fn take_at(&mut self, i: usize) {
        if let Some(m) = self.m.unexp.get(i).cloned() {
            self.post(RecvSpec::exact(m.env.comm, m.env.src, m.env.tag));
        }
    }

    /// A random queued message is found, in arrival order, by probes of every kind.
    pub fn witness(&mut self, r: &mut Rng) {
        if self.m.unexp.is_empty() {
            return;
        }
        let m = self.m.unexp[r.below(self.m.unexp.len() as u64) as usize].clone();
        let (c, s, t) = (m.env.comm, m.env.src, m.env.tag);
        self.probe(RecvSpec::new(c, None, None));
        self.probe(RecvSpec::new(c, Some(s), None));
        self.probe(RecvSpec::new(c, None, Some(t)));
        self.probe(RecvSpec::exact(c, s, t));
        self.probe(RecvSpec::masked(c, Source::Any, t, 1));
    }

    /// Receives every queued message with exact receives in arrival order (no wildcard
    /// kind is needed, so none is built by the drain).
    /// The envelopes that the pending exact receives wait for, in posting order.
    pub fn pending_exact(&self) -> Vec<Envelope> {
        self.m
            .posted
            .iter()
            .filter_map(|(spec, _)| match (spec.src, spec.tag) {
                (Source::Rank(s), TagSel::Exact(t)) => Some(Envelope::new(spec.comm, s, t)),
                _ => None,
            })
            .collect()
    }

    pub fn drain_exact(&mut self) {
        while let Some(m) = self.m.unexp.first().cloned() {
            let got = self.post(RecvSpec::exact(m.env.comm, m.env.src, m.env.tag));
            if got != Out::Match(self.next, m.mid) {
                self.fail(format!("exact drain of {}: {got:?}", m.mid));
            }
        }
    }

    /// Receives every queued message of `comm` with ANY_SOURCE+ANY_TAG receives; the
    /// receive left pending at the end is cancelled.
    pub fn drain_any_comm(&mut self, comm: u32) {
        loop {
            match self.post(RecvSpec::new(comm, None, None)) {
                Out::Match(..) => {}
                Out::Pending(_) => break,
                other => self.fail(format!("drain of comm {comm}: {other:?}")),
            }
        }
        let i = self.handles.len() - 1;
        self.cancel(i);
    }

    /// [`Walk::drain_any_comm`] of communicators `0..comms`: nothing stays queued.
    pub fn drain_any(&mut self, comms: u32) {
        for c in 0..comms {
            self.drain_any_comm(c);
        }
        assert!(self.m.unexp.is_empty());
    }

    /// A walk for the reviews of the dense (comm, src, tag) arrays (`review_dexact*`):
    /// reorder window 8, budgets of 2^22 entries, sequence numbers from 0, the model's
    /// byte accounting, no pressure; with `defer` false, every wildcard removal done in
    /// place.
    pub fn for_exact_arrays(defer: bool) -> Walk {
        let cfg = Config::default()
            .reorder_window(8)
            .max_messages(1 << 22)
            .max_posted(1 << 22)
            .initial_seq(0);
        let opts = Opts {
            bytes: Bytes::Model,
            pressure: false,
            check_each: false,
            held_api: false,
            retire: true,
            swap_remove: true,
        };
        let mut w = Walk::with_model(cfg, Model::new(8, usize::MAX, 1 << 22, 1 << 22, 0), opts);
        if !defer {
            w.e.defer_removals_from(usize::MAX);
        }
        w
    }

    /// Delivers everything in flight (each source's messages in order), purges
    /// `comms`, receives every claimed message, and checks the end state and the dead
    /// handles.
    pub fn finish(&mut self, comms: &[u32]) {
        let srcs: Vec<u32> = self.in_flight.keys().copied().collect();
        for s in srcs {
            while self.deliver(s, 0).is_some() {}
        }
        for &c in comms {
            self.purge_comm(c);
        }
        while !self.claims.is_empty() {
            self.mrecv(self.claims.len() - 1);
        }
        self.check("end");
        self.stale_handles();
    }

    /// Every dead handle is refused by every handle-taking call (the slots they named
    /// may hold new receives / messages by now); live ones still name their own.
    pub fn stale_handles(&mut self) {
        for &h in &self.dead_recv {
            if self.e.recv_context(h).is_ok() || self.e.posted_info(h).is_ok() {
                self.fail(format!("dead receive handle {h:?} accepted"));
            }
        }
        for &h in &self.dead_msg {
            if self.e.claimed(h).is_ok() {
                self.fail(format!("dead message handle {h:?} accepted"));
            }
        }
        // And a mutating call on one of each, which must change nothing.
        if let Some(&h) = self.dead_recv.last() {
            if self.e.cancel(h).is_ok() {
                self.fail(format!("cancel through dead receive handle {h:?}"));
            }
        }
        if let Some(&h) = self.dead_msg.last() {
            if self.e.mrecv(h).is_ok() {
                self.fail(format!("mrecv through dead message handle {h:?}"));
            }
        }
        for &(rid, h) in &self.handles {
            if self.e.recv_context(h).ok() != Some(&rid) {
                self.fail(format!("live handle of {rid} lost"));
            }
        }
        for &(mid, h) in &self.claims {
            if self.e.claimed(h).ok() != Some(&mid) {
                self.fail(format!("live claim of {mid} lost"));
            }
        }
        self.check("stale handles");
    }
}

/// Runs `f(seed)` for every seed, naming the seed (and `name`) in a failure.
pub fn each_seed(
    name: &str,
    seeds: core::ops::Range<u64>,
    f: impl Fn(u64) + std::panic::RefUnwindSafe,
) {
    for seed in seeds {
        if let Err(e) = std::panic::catch_unwind(|| f(seed)) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            panic!("{name}, seed {seed}: {msg}");
        }
    }
}

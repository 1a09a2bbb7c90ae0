//! Review of the exact-path changes (open arrival-order list with its ends in engine
//! fields, messages moved out of the slab by `GenSlab::take`, `post_keyed` on scalars):
//! seeded random walks against the reference model in `model/`, biased to what the
//! quickcheck generators of `differential.rs` / `lazy_lists.rs` rarely produce:
//!
//! - long runs of exact receives that take the *tail* of the arrival-order list (the
//!   last arrival), its head, or its only element, each followed by arrivals that reuse
//!   the freed slot, then a first wildcard receive / probe / mprobe / purge that builds
//!   the wildcard lists by walking the arrival-order list;
//! - `Config::eager_wildcard_lists` on (no other test runs the engine with it on) and off;
//! - messages released by the reorder buffer, with sequence numbers that wrap past
//!   `u32::MAX` (`Config::initial_seq` just below it);
//! - stale `RecvHandle`s / `MsgHandle`s kept after their receive or message left the
//!   slab, tried again after the slot was reused: each must be refused, never alias the
//!   new occupant;
//! - tight message budgets, so that the held-byte accounting of taken messages is
//!   checked on every step (depths, bytes and pressure are compared with the model).

mod model;

use model::{Model, Msg, Out, Rng};
use tagmatch_engine::*;

const COMMS: u32 = 2;
/// Sources 0..ARRIVE_SRCS use `arrive`; the next SEQ_SRCS sources use `deliver`.
const ARRIVE_SRCS: u32 = 3;
const SEQ_SRCS: u32 = 2;

struct Walk {
    e: Engine<u32, u32>,
    m: Model,
    next: u32,
    handles: Vec<(u32, RecvHandle)>,
    claims: Vec<(u32, MsgHandle)>,
    /// Handles whose receive was matched, cancelled or purged.
    dead_recv: Vec<RecvHandle>,
    /// Handles whose claimed message was received.
    dead_msg: Vec<MsgHandle>,
    send_seq: Vec<u32>,
    in_flight: Vec<Vec<(u32, Msg)>>,
    initial: u32,
    log: Vec<String>,
}

impl Walk {
    fn new(cfg: Config) -> Self {
        Walk {
            e: Engine::new(cfg),
            m: Model::new(
                cfg.reorder_window,
                cfg.max_bytes,
                cfg.max_messages,
                cfg.max_posted,
                cfg.initial_seq,
            ),
            next: 0,
            handles: Vec::new(),
            claims: Vec::new(),
            dead_recv: Vec::new(),
            dead_msg: Vec::new(),
            send_seq: vec![cfg.initial_seq; SEQ_SRCS as usize],
            in_flight: vec![Vec::new(); SEQ_SRCS as usize],
            initial: cfg.initial_seq,
            log: Vec::new(),
        }
    }

    fn id(&mut self) -> u32 {
        self.next += 1;
        self.next
    }

    fn fail(&self, what: String) -> ! {
        let tail: Vec<&String> = self.log.iter().rev().take(40).rev().collect();
        panic!("{what}\nlast operations:\n{tail:#?}");
    }

    fn check(&self, what: &str) {
        let c = self.e.counters();
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
            self.m.bytes(),
        );
        if got != want {
            self.fail(format!(
                "depths after {what}: engine {got:?}, model {want:?}"
            ));
        }
        if self.e.pressure() != self.m.pressure() {
            self.fail(format!("pressure after {what}"));
        }
    }

    /// Removes the handle of receive `rid` from the pending ones (it was matched).
    fn retire_recv(&mut self, rid: u32) {
        if let Some(i) = self.handles.iter().position(|&(r, _)| r == rid) {
            let (_, h) = self.handles.remove(i);
            self.dead_recv.push(h);
        }
    }

    fn arrive(&mut self, env: Envelope, len: usize) {
        let mid = self.id();
        self.log.push(format!("arrive {env:?} len {len} mid {mid}"));
        let got = match self.e.arrive(env, len, mid) {
            Ok(Arrived::Matched(x)) => Out::Match(x.recv, x.msg),
            Ok(Arrived::Unexpected(_)) => Out::Unexpected(mid),
            Err(r) => Out::Rejected(r.reason, r.msg),
        };
        let want = self.m.arrive(Msg { env, len, mid }, true);
        if got != want {
            self.fail(format!("arrive {env:?}: engine {got:?}, model {want:?}"));
        }
        if let Out::Match(rid, _) = got {
            self.retire_recv(rid);
        }
        self.check("arrive");
    }

    fn send(&mut self, env: Envelope, len: usize) {
        let s = (env.src - ARRIVE_SRCS) as usize;
        let mid = self.id();
        self.in_flight[s].push((self.send_seq[s], Msg { env, len, mid }));
        self.send_seq[s] = self.send_seq[s].wrapping_add(1);
    }

    fn deliver(&mut self, s: usize, pick: usize) {
        if self.in_flight[s].is_empty() {
            return;
        }
        let i = pick % self.in_flight[s].len();
        let (seq, msg) = self.in_flight[s][i].clone();
        self.log.push(format!("deliver seq {seq} {msg:?}"));
        let mut got = Vec::new();
        let mut matched = Vec::new();
        let res = self.e.deliver(msg.env, seq, msg.len, msg.mid, |a| {
            got.push(match a {
                Arrived::Matched(x) => {
                    matched.push(x.recv);
                    Out::Match(x.recv, x.msg)
                }
                Arrived::Unexpected(_) => Out::Unexpected(u32::MAX),
            })
        });
        match res {
            Ok(0) => got.push(Out::Held(msg.mid)),
            Ok(_) => {}
            Err(x) => got.push(Out::Rejected(x.reason, x.msg)),
        }
        let mut want = Vec::new();
        self.m.deliver(msg.clone(), seq, &mut want);
        for w in want.iter_mut() {
            if let Out::Unexpected(_) = w {
                *w = Out::Unexpected(u32::MAX);
            }
        }
        if got != want {
            self.fail(format!(
                "deliver seq {seq} of {msg:?}: engine {got:?}, model {want:?}"
            ));
        }
        for rid in matched {
            self.retire_recv(rid);
        }
        if !matches!(got.last(), Some(Out::Rejected(..))) {
            self.in_flight[s].remove(i);
        }
        self.check("deliver");
    }

    fn post(&mut self, spec: RecvSpec) {
        let rid = self.id();
        self.log.push(format!("post {spec:?} rid {rid}"));
        let got = match self.e.post(spec, rid) {
            Ok(Posted::Matched(x)) => Out::Match(x.recv, x.msg),
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
        self.check("post");
    }

    fn probe(&mut self, spec: RecvSpec) {
        self.log.push(format!("probe {spec:?}"));
        let got = self.e.probe(&spec).map(|p| *p.msg);
        let want = self.m.probe(&spec);
        if got != want {
            self.fail(format!("probe {spec:?}: engine {got:?}, model {want:?}"));
        }
    }

    fn mprobe(&mut self, spec: RecvSpec) {
        self.log.push(format!("mprobe {spec:?}"));
        let c = self.e.mprobe(&spec);
        let got = c.map(|c| *self.e.claimed(c.handle).expect("fresh claim"));
        if let (Some(c), Some(mid)) = (c, got) {
            self.claims.push((mid, c.handle));
        }
        let want = self.m.mprobe(&spec);
        if got != want {
            self.fail(format!("mprobe {spec:?}: engine {got:?}, model {want:?}"));
        }
        self.check("mprobe");
    }

    fn mrecv(&mut self, i: usize) {
        if self.claims.is_empty() {
            return;
        }
        let (mid, h) = self.claims.remove(i % self.claims.len());
        self.log.push(format!("mrecv {mid}"));
        let got = self.e.mrecv(h).ok().map(|x| x.msg);
        if got != Some(mid) || self.m.mrecv(mid) != Some(mid) {
            self.fail(format!("mrecv of {mid}: engine {got:?}"));
        }
        self.dead_msg.push(h);
        self.check("mrecv");
    }

    fn cancel(&mut self, i: usize) {
        if self.handles.is_empty() {
            return;
        }
        let (rid, h) = self.handles.remove(i % self.handles.len());
        self.log.push(format!("cancel {rid}"));
        let got = self.e.cancel(h).ok();
        if got != Some(rid) || self.m.cancel(rid) != Some(rid) {
            self.fail(format!("cancel of {rid}: engine {got:?}"));
        }
        self.dead_recv.push(h);
        self.check("cancel");
    }

    /// Every dead handle is refused by every handle-taking call (the slots they named
    /// may hold new receives / messages by now).
    fn stale_handles(&mut self) {
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
        // Live handles still name their own receive.
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

    fn purge_peer(&mut self, src: u32) {
        self.log.push(format!("purge_peer {src}"));
        let mut got = Vec::new();
        let mut rids = Vec::new();
        self.e.purge_peer(src, |p| {
            got.push(match p {
                Purged::Recv(_, r) => {
                    rids.push(r);
                    Out::PurgedRecv(r)
                }
                Purged::Unexpected(m) => Out::PurgedMsg(m.msg),
                Purged::Held(m) => Out::PurgedHeld(m.msg),
            })
        });
        let mut want = Vec::new();
        self.m.purge_peer(src, &mut want);
        got.sort();
        want.sort();
        if got != want {
            self.fail(format!("purge_peer {src}: engine {got:?}, model {want:?}"));
        }
        for r in rids {
            self.retire_recv(r);
        }
        if src >= ARRIVE_SRCS {
            let s = (src - ARRIVE_SRCS) as usize;
            self.send_seq[s] = self.initial;
            self.in_flight[s].clear();
        }
        self.check("purge_peer");
    }

    fn purge_comm(&mut self, comm: u32) {
        self.log.push(format!("purge_comm {comm}"));
        let mut got = Vec::new();
        let mut rids = Vec::new();
        self.e.purge_comm(comm, |p| {
            got.push(match p {
                Purged::Recv(_, r) => {
                    rids.push(r);
                    Out::PurgedRecv(r)
                }
                Purged::Unexpected(m) => Out::PurgedMsg(m.msg),
                Purged::Held(m) => Out::PurgedHeld(m.msg),
            })
        });
        let mut want = Vec::new();
        self.m.purge_comm(comm, &mut want);
        let msgs = |v: &Vec<Out>| -> Vec<Out> {
            v.iter()
                .filter(|o| matches!(o, Out::PurgedMsg(_)))
                .cloned()
                .collect()
        };
        if msgs(&got) != msgs(&want) {
            self.fail(format!(
                "purge_comm {comm}: messages engine {got:?}, model {want:?}"
            ));
        }
        got.sort();
        want.sort();
        if got != want {
            self.fail(format!("purge_comm {comm}: engine {got:?}, model {want:?}"));
        }
        for r in rids {
            self.retire_recv(r);
        }
        self.check("purge_comm");
    }

    fn cancel_where_tag(&mut self, tag: u64) {
        self.log.push(format!("cancel_where tag {tag}"));
        let pred = |s: &RecvSpec| matches!(s.tag, TagSel::Exact(t) if t == tag);
        let mut got = Vec::new();
        self.e
            .cancel_where(|s, _| pred(s), |_, r| got.push(Out::PurgedRecv(r)));
        let mut want = Vec::new();
        self.m.cancel_where(pred, &mut want);
        if got != want {
            self.fail(format!(
                "cancel_where tag {tag}: engine {got:?}, model {want:?}"
            ));
        }
        for o in got {
            if let Out::PurgedRecv(r) = o {
                self.retire_recv(r);
            }
        }
        self.check("cancel_where");
    }
}

fn key(r: &mut Rng) -> (u32, u32, u64) {
    (
        r.below(u64::from(COMMS)) as u32,
        r.below(u64::from(ARRIVE_SRCS)) as u32,
        r.below(3),
    )
}

fn wild_spec(r: &mut Rng) -> RecvSpec {
    let (c, s, t) = key(r);
    let src = if r.chance(50) { Some(s) } else { None };
    match r.below(5) {
        0 => RecvSpec::new(c, src, None),
        1 => RecvSpec::new(c, None, Some(t)),
        2 => RecvSpec::new(c, None, None),
        3 => RecvSpec::masked(c, src.map_or(Source::Any, Source::Rank), t, 1),
        _ => RecvSpec::new(c, Some(s), None),
    }
}

/// One exact-phase step: arrivals and exact receives aimed at the ends of the
/// arrival-order list.
fn exact_step(w: &mut Walk, r: &mut Rng) {
    match r.below(10) {
        0..=2 => {
            let (c, s, t) = key(r);
            w.arrive(Envelope::new(c, s, t), 1 + r.below(8) as usize);
        }
        3 => {
            let (c, _, t) = key(r);
            let s = ARRIVE_SRCS + r.below(u64::from(SEQ_SRCS)) as u32;
            w.send(Envelope::new(c, s, t), 1 + r.below(8) as usize);
        }
        4 => {
            let s = r.below(u64::from(SEQ_SRCS)) as usize;
            let pick = r.below(4) as usize;
            w.deliver(s, pick);
        }
        5 | 6 => {
            // The tail of the arrival order (the last arrival).
            if let Some(m) = w.m.unexp.last().cloned() {
                w.post(RecvSpec::exact(m.env.comm, m.env.src, m.env.tag));
            }
        }
        7 => {
            if let Some(m) = w.m.unexp.first().cloned() {
                w.post(RecvSpec::exact(m.env.comm, m.env.src, m.env.tag));
            }
        }
        8 => {
            let (c, s, t) = key(r);
            w.post(RecvSpec::exact(c, s, t));
        }
        _ => {
            let i = r.below(8) as usize;
            if r.chance(50) {
                w.cancel(i);
            } else {
                w.mrecv(i);
            }
        }
    }
}

/// One wildcard-phase step: whatever builds, uses or resets the wildcard lists.
fn wild_step(w: &mut Walk, r: &mut Rng) {
    match r.below(12) {
        0 | 1 => {
            let s = wild_spec(r);
            w.post(s);
        }
        2 => {
            let s = wild_spec(r);
            w.probe(s);
        }
        3 => {
            let s = wild_spec(r);
            w.mprobe(s);
        }
        4 => {
            let (c, s, t) = key(r);
            w.mprobe(RecvSpec::exact(c, s, t));
        }
        5 => {
            let src = r.below(u64::from(ARRIVE_SRCS + SEQ_SRCS)) as u32;
            w.purge_peer(src);
        }
        6 => {
            let c = r.below(u64::from(COMMS)) as u32;
            w.purge_comm(c);
        }
        7 => {
            let t = r.below(3);
            w.cancel_where_tag(t);
        }
        8 => {
            // Drain: every queued message by an exact receive, tail first.
            while let Some(m) = w.m.unexp.last().cloned() {
                if w.m.posted.len() >= w.m.max_posted {
                    break;
                }
                w.post(RecvSpec::exact(m.env.comm, m.env.src, m.env.tag));
            }
        }
        _ => exact_step(w, r),
    }
}

fn run(seed: u64, cfg: Config, steps: usize) {
    let mut r = Rng::new(seed);
    let mut w = Walk::new(cfg);
    let mut step = 0;
    while step < steps {
        // A long exact phase (the arrival-order list only, while nothing is built),
        // then a short wildcard phase.
        let exact = 5 + r.below(60) as usize;
        for _ in 0..exact {
            exact_step(&mut w, &mut r);
        }
        let wild = 1 + r.below(6) as usize;
        for _ in 0..wild {
            wild_step(&mut w, &mut r);
        }
        w.stale_handles();
        step += exact + wild;
    }
    // Everything left is still reachable in arrival order, by every kind.
    for m in w.m.unexp.clone() {
        w.probe(RecvSpec::new(m.env.comm, None, None));
        w.probe(RecvSpec::new(m.env.comm, Some(m.env.src), None));
        w.probe(RecvSpec::new(m.env.comm, None, Some(m.env.tag)));
        w.probe(RecvSpec::exact(m.env.comm, m.env.src, m.env.tag));
    }
    w.stale_handles();
}

fn configs() -> Vec<(&'static str, Config)> {
    let base = Config::default()
        .reorder_window(4)
        .initial_seq(u32::MAX - 5);
    vec![
        ("lazy", base),
        ("eager", base.eager_wildcard_lists(true)),
        ("lazy, 12 messages", base.max_messages(12).max_posted(10)),
        (
            "eager, 12 messages",
            base.eager_wildcard_lists(true)
                .max_messages(12)
                .max_posted(10),
        ),
        ("lazy, 40 bytes", base.max_bytes(40)),
    ]
}

#[test]
fn exact_runs_then_wildcards_match_the_model_in_every_config() {
    for (name, cfg) in configs() {
        for seed in 0..150 {
            let res = std::panic::catch_unwind(|| run(seed, cfg, 1000));
            if let Err(e) = res {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| "panic".into());
                panic!("config {name}, seed {seed}: {msg}");
            }
        }
    }
}

/// The exact post's single-access path (no wildcard list kept) on the only element of
/// the arrival-order list, its head and its tail, each followed by a first wildcard
/// receive that walks the list: with eager lists on and off.
#[test]
fn only_head_and_tail_of_the_arrival_order_then_a_first_wildcard() {
    for eager in [false, true] {
        let cfg = Config::default().eager_wildcard_lists(eager);
        let mut w = Walk::new(cfg);
        let e = |c, s, t| Envelope::new(c, s, t);
        // Only element.
        w.arrive(e(0, 1, 1), 1);
        w.post(RecvSpec::exact(0, 1, 1));
        w.arrive(e(0, 1, 2), 1);
        w.post(RecvSpec::new(0, None, None));
        // Tail, repeatedly, with the slot reused behind it.
        for i in 0..5 {
            w.arrive(e(0, 1, 10 + i), 1);
        }
        for i in (0..5).rev() {
            w.post(RecvSpec::exact(0, 1, 10 + i));
            w.arrive(e(1, 2, 20 + i), 1);
        }
        w.probe(RecvSpec::new(1, None, None));
        w.post(RecvSpec::new(1, None, None));
        // Head.
        w.post(RecvSpec::exact(1, 2, 23));
        w.post(RecvSpec::new(1, Some(2), None));
        w.post(RecvSpec::new(1, None, Some(21)));
        w.post(RecvSpec::new(1, None, None));
        w.post(RecvSpec::new(1, None, None));
        w.stale_handles();
        w.check("end");
    }
}

//! The HW/SW split over a *real* tag-matching SRQ: [`HwOffload`].
//!
//! `tagmatch_engine::offload::Driver` owns the executable model `tm_srq::TmSrq` as its
//! hardware and cannot be pointed at a device, so this module carries the same algorithm
//! (see the `offload` module documentation: prefix rule, unexpected counts stamped when an
//! operation is decided, deferred DEL/SYNC in a FIFO, `TM_SYNC_REQ` answered once the count
//! moved, cancel outcomes) over a [`TmBackend`]: [`ModelBackend`] (the model, for the unit
//! tests that compare this driver with the engine's) or the verbs TM-SRQ of
//! [`super::TaggedTransport`]. Events and outcomes are the engine's own types
//! (`offload::Event`, `OffMatch`, ...), so the transport handles both paths alike.
//!
//! Difference to the engine's driver: software-resident receives are checked for the prefix
//! rule by a scan (`specs_intersect` over the software-resident receives of the
//! communicator) instead of the driver's per-class counters; the decision is the same.

use std::collections::{HashMap, VecDeque};

use tagmatch_engine::offload::{
    specs_intersect, CancelOutcome, Carried, Event, MatchPath, OffHandle, OffMatch,
    OffloadCounters, PostOutcome, TagLayout,
};
use tagmatch_engine::tm_srq::{
    ops_flags, wc_flags, OpsWr, PostOpError, TmOp, TmSrq, WcOpcode, WcStatus, WireMsg,
};
use tagmatch_engine::{
    Arrived, Config, Engine, EngineError, PostRejected, Posted, RecvHandle, RecvSpec, Rejected,
};
use tagmatch_wire::tm::Rvh;

use super::device::Sge;

/// One completion of the TM-SRQ's CQ, as the driver needs it (`tm_srq::Cqe` without the
/// model's private bookkeeping).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HwCqe<M> {
    /// Operation `wr_id`, tagged buffer `recv_wr_id`, or receive-queue buffer `wr_id`.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Opcode.
    pub opcode: WcOpcode,
    /// `IBV_WC_TM_*` flags.
    pub wc_flags: u32,
    /// The message (unexpected / NO_TAG: whole; TM match: envelope and message value).
    pub msg: Option<WireMsg<Carried<M>>>,
}

/// The hardware under [`HwOffload`]: a TM-SRQ and its CQ.
pub trait TmBackend<M> {
    /// Gives the receive queue one untagged buffer back after an unexpected or NO_TAG
    /// completion (a backend that reposts its buffers itself does nothing).
    fn replenish(&mut self);
    /// `ibv_post_srq_ops` of one work request; an ADD gets the tagged buffer `sge` (the
    /// model only needs its length) and returns the entry handle.
    fn post_op(&mut self, wr: OpsWr, sge: Option<Sge>) -> Result<Option<u32>, PostOpError>;
    /// The next completion.
    fn poll(&mut self) -> Option<HwCqe<M>>;
}

/// The executable model as a backend (tests drive its steps through
/// [`ModelBackend::srq`]).
#[derive(Debug)]
pub struct ModelBackend<M> {
    /// The model.
    pub srq: TmSrq<Carried<M>>,
}

impl<M> TmBackend<M> for ModelBackend<M> {
    fn replenish(&mut self) {
        self.srq.post_srq_recv(u64::MAX);
    }

    fn post_op(&mut self, wr: OpsWr, _sge: Option<Sge>) -> Result<Option<u32>, PostOpError> {
        self.srq.post_op(wr)
    }

    fn poll(&mut self) -> Option<HwCqe<M>> {
        self.srq.poll_cq().map(|c| HwCqe {
            wr_id: c.wr_id,
            status: c.status,
            opcode: c.opcode,
            wc_flags: c.wc_flags,
            msg: c.msg,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HwState {
    tag_handle: u32,
    cancel: bool,
}

#[derive(Debug)]
struct Rec<R> {
    ctx: R,
    eh: RecvHandle,
    spec: RecvSpec,
    hw: Option<HwState>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpKind {
    Add,
    Del { id: u64, cancel: bool },
    Sync,
}

#[derive(Debug)]
struct Unexp<M> {
    msg: M,
    rvh: Option<Rvh>,
}

const SIGNALED_SYNC: u32 = ops_flags::SIGNALED | ops_flags::TM_SYNC;

/// The HW/SW split driver over a [`TmBackend`].
#[derive(Debug)]
pub struct HwOffload<B, R, M> {
    layout: TagLayout,
    engine: Engine<u64, Unexp<M>>,
    recvs: HashMap<u64, Rec<R>>,
    next_id: u64,
    hw: B,
    /// Software-resident pending receives by communicator (for the prefix rule).
    sw: HashMap<u32, HashMap<u64, RecvSpec>>,
    fifo: VecDeque<(TmOp, u32, OpKind)>,
    ops: HashMap<u64, OpKind>,
    next_wr: u64,
    sw_unexp: u32,
    last_reported: u32,
    sync_wanted: bool,
    c: OffloadCounters,
}

impl<B: TmBackend<M>, R, M> HwOffload<B, R, M> {
    /// A driver over `hw` (whose receive queue the caller has already filled).
    pub fn new(hw: B, layout: TagLayout, engine: Config) -> Self {
        HwOffload {
            layout,
            engine: Engine::new(engine),
            recvs: HashMap::new(),
            next_id: 0,
            hw,
            sw: HashMap::new(),
            fifo: VecDeque::new(),
            ops: HashMap::new(),
            next_wr: 0,
            sw_unexp: 0,
            last_reported: 0,
            sync_wanted: false,
            c: OffloadCounters::default(),
        }
    }

    /// The backend.
    pub fn hw(&self) -> &B {
        &self.hw
    }

    /// The backend, mutably (drive model steps; do not post operations behind the driver).
    pub fn hw_mut(&mut self) -> &mut B {
        &mut self.hw
    }

    /// Offload counters.
    pub fn counters(&self) -> OffloadCounters {
        self.c
    }

    /// `Some(true)` if the pending receive lives in hardware, `Some(false)` in software.
    pub fn is_offloaded(&self, h: OffHandle) -> Option<bool> {
        self.recvs.get(&h.0).map(|r| r.hw.is_some())
    }

    /// Operations decided but waiting for a free operation slot.
    pub fn deferred_ops(&self) -> usize {
        self.fifo.len()
    }

    /// Posts a receive whose tagged buffer is `sge` (of `sge.len` bytes).
    pub fn post(
        &mut self,
        spec: RecvSpec,
        sge: Sge,
        ctx: R,
    ) -> Result<PostOutcome<R, M>, PostRejected<R>> {
        let spec = spec.normalized();
        let id = self.next_id;
        match self.engine.post(spec, id) {
            Err(_) => Err(PostRejected { recv: ctx }),
            Ok(Posted::Matched(m)) => {
                self.next_id += 1;
                self.c.matched_post += 1;
                if m.msg.rvh.is_some() {
                    self.c.sw_rndv += 1;
                }
                Ok(PostOutcome::Matched(OffMatch {
                    handle: OffHandle(id),
                    recv: ctx,
                    msg: m.msg.msg,
                    env: m.env,
                    len: m.len,
                    path: MatchPath::SwPost,
                    sw_rndv: m.msg.rvh,
                    data_pending: false,
                }))
            }
            Ok(Posted::Pending(eh)) => {
                self.next_id += 1;
                let hw = match self.try_offload(id, &spec, sge) {
                    Some(tag_handle) => Some(HwState {
                        tag_handle,
                        cancel: false,
                    }),
                    None => {
                        self.sw.entry(spec.comm).or_default().insert(id, spec);
                        None
                    }
                };
                self.recvs.insert(id, Rec { ctx, eh, spec, hw });
                Ok(PostOutcome::Pending(OffHandle(id)))
            }
        }
    }

    fn try_offload(&mut self, id: u64, spec: &RecvSpec, sge: Sge) -> Option<u32> {
        let Some((tag, mask)) = self.layout.entry(spec) else {
            self.c.blocked_encoding += 1;
            return None;
        };
        // rdma-core-tag-matching: "HW will hold a bounded prefix of Receive tags".
        if self
            .sw
            .get(&spec.comm)
            .is_some_and(|m| m.values().any(|s| specs_intersect(s, spec)))
        {
            self.c.blocked_sw_pending += 1;
            return None;
        }
        if !self.fifo.is_empty() {
            self.c.blocked_ops_busy += 1;
            return None;
        }
        let wr_id = self.next_wr;
        let r = self.hw.post_op(
            OpsWr {
                wr_id,
                flags: SIGNALED_SYNC,
                unexpected_cnt: self.sw_unexp,
                op: TmOp::Add {
                    recv_wr_id: id,
                    tag,
                    mask,
                    buf_len: sge.len,
                },
            },
            Some(sge),
        );
        match r {
            Ok(Some(h)) => {
                self.next_wr += 1;
                self.ops.insert(wr_id, OpKind::Add);
                self.last_reported = self.sw_unexp;
                self.c.offloaded += 1;
                Some(h)
            }
            Err(PostOpError::TagsFull) => {
                self.c.blocked_tags_full += 1;
                None
            }
            _ => {
                self.c.blocked_ops_busy += 1;
                None
            }
        }
    }

    fn enqueue(&mut self, op: TmOp, kind: OpKind) {
        self.fifo.push_back((op, self.sw_unexp, kind));
        self.last_reported = self.sw_unexp;
        self.flush();
    }

    fn flush(&mut self) {
        while let Some(&(op, cnt, kind)) = self.fifo.front() {
            let wr_id = self.next_wr;
            match self.hw.post_op(
                OpsWr {
                    wr_id,
                    flags: SIGNALED_SYNC,
                    unexpected_cnt: cnt,
                    op,
                },
                None,
            ) {
                Ok(_) => {
                    self.next_wr += 1;
                    self.ops.insert(wr_id, kind);
                    self.fifo.pop_front();
                }
                Err(PostOpError::OpsFull) => break,
                Err(_) => {
                    self.c.order_violations += 1;
                    self.fifo.pop_front();
                }
            }
        }
    }

    /// Cancels a pending receive (software-resident: now; offloaded: a DEL, outcome later).
    pub fn cancel(&mut self, h: OffHandle) -> Result<CancelOutcome<R>, EngineError> {
        let rec = self.recvs.get_mut(&h.0).ok_or(EngineError::StaleHandle)?;
        match rec.hw {
            None => {
                let rec = self.recvs.remove(&h.0).ok_or(EngineError::StaleHandle)?;
                self.engine.cancel(rec.eh)?;
                if let Some(m) = self.sw.get_mut(&rec.spec.comm) {
                    m.remove(&h.0);
                }
                Ok(CancelOutcome::Cancelled(rec.ctx))
            }
            Some(ref mut hs) if hs.cancel => Ok(CancelOutcome::InProgress),
            Some(ref mut hs) => {
                hs.cancel = true;
                let handle = hs.tag_handle;
                self.c.hw_cancels += 1;
                self.enqueue(
                    TmOp::Del { handle },
                    OpKind::Del {
                        id: h.0,
                        cancel: true,
                    },
                );
                Ok(CancelOutcome::InProgress)
            }
        }
    }

    /// Processes every completion available now; returns how many.
    pub fn poll(&mut self, out: &mut Vec<Event<R, M>>) -> usize {
        let mut n = 0;
        while let Some(c) = self.hw.poll() {
            n += 1;
            self.process(c, out);
            if self.sync_wanted && self.sw_unexp != self.last_reported {
                self.sync_wanted = false;
                self.c.syncs += 1;
                self.enqueue(TmOp::Sync, OpKind::Sync);
            }
            self.flush();
        }
        n
    }

    fn process(&mut self, c: HwCqe<M>, out: &mut Vec<Event<R, M>>) {
        match c.opcode {
            WcOpcode::TmAdd | WcOpcode::TmDel | WcOpcode::TmSync => {
                if c.wc_flags & wc_flags::TM_SYNC_REQ != 0 {
                    self.c.sync_reqs += 1;
                    self.sync_wanted = true;
                }
                if let Some(OpKind::Del { id, cancel }) = self.ops.remove(&c.wr_id) {
                    self.del_done(id, cancel, c.status, out);
                }
            }
            WcOpcode::TmRecv if c.wc_flags & wc_flags::TM_MATCH != 0 => self.hw_match(c, out),
            WcOpcode::TmRecv => out.push(Event::DataValid {
                handle: OffHandle(c.wr_id),
            }),
            WcOpcode::Recv => {
                self.c.hw_unexpected += 1;
                self.sw_unexp = self.sw_unexp.wrapping_add(1);
                self.hw.replenish();
                if let Some(m) = c.msg {
                    self.sw_arrival(m, out);
                }
            }
            WcOpcode::TmNoTag => {
                self.hw.replenish();
                if let Some(m) = c.msg {
                    out.push(Event::NoTag(m));
                }
            }
        }
    }

    fn del_done(&mut self, id: u64, cancel: bool, status: WcStatus, out: &mut Vec<Event<R, M>>) {
        if !cancel {
            return;
        }
        if status == WcStatus::TmErr {
            self.c.tm_err_races += 1;
        }
        match self.recvs.get(&id) {
            Some(_) if status == WcStatus::Success => {
                let Some(rec) = self.recvs.remove(&id) else {
                    return;
                };
                if self.engine.cancel(rec.eh).is_err() {
                    self.c.order_violations += 1;
                }
                out.push(Event::Cancelled {
                    handle: OffHandle(id),
                    recv: rec.ctx,
                });
            }
            Some(_) => self.c.order_violations += 1,
            None => out.push(Event::CancelFailed {
                handle: OffHandle(id),
            }),
        }
    }

    fn hw_match(&mut self, c: HwCqe<M>, out: &mut Vec<Event<R, M>>) {
        let Some(wire) = c.msg else {
            self.c.order_violations += 1;
            return;
        };
        let id = c.wr_id;
        if self.recvs.get(&id).is_none_or(|r| r.hw.is_none()) {
            self.c.order_violations += 1;
            self.sw_arrival(wire, out);
            return;
        }
        let Some(rec) = self.recvs.remove(&id) else {
            return;
        };
        let Carried { env, msg } = wire.payload;
        if self
            .engine
            .first_posted_match(&env)
            .is_none_or(|p| p.handle != rec.eh)
        {
            self.c.order_violations += 1;
        }
        if self.engine.cancel(rec.eh).is_err() {
            self.c.order_violations += 1;
        }
        self.c.matched_hw += 1;
        let lost_cancel = rec.hw.is_some_and(|hs| hs.cancel) && {
            let before = self.fifo.len();
            self.fifo
                .retain(|&(_, _, k)| k != OpKind::Del { id, cancel: true });
            before != self.fifo.len()
        };
        let incomplete = c.status == WcStatus::TmRndvIncomplete;
        if incomplete {
            self.c.rndv_incomplete += 1;
        }
        out.push(Event::Matched(OffMatch {
            handle: OffHandle(id),
            recv: rec.ctx,
            msg,
            env,
            len: wire.len as usize,
            path: MatchPath::Hw,
            sw_rndv: if incomplete { wire.rvh } else { None },
            data_pending: !incomplete && c.wc_flags & wc_flags::TM_DATA_VALID == 0,
        }));
        if lost_cancel {
            self.c.tm_err_races += 1;
            out.push(Event::CancelFailed {
                handle: OffHandle(id),
            });
        }
    }

    fn sw_arrival(&mut self, wire: WireMsg<Carried<M>>, out: &mut Vec<Event<R, M>>) {
        let Carried { env, msg } = wire.payload;
        let rvh = wire.rvh;
        match self
            .engine
            .arrive(env, wire.len as usize, Unexp { msg, rvh })
        {
            Ok(Arrived::Matched(m)) => {
                let id = m.recv;
                let Some(rec) = self.recvs.remove(&id) else {
                    self.c.order_violations += 1;
                    return;
                };
                match rec.hw {
                    None => {
                        if let Some(s) = self.sw.get_mut(&rec.spec.comm) {
                            s.remove(&id);
                        }
                    }
                    Some(hs) if !hs.cancel => {
                        // The entry is disabled: remove it before any count that includes
                        // this message reaches the hardware.
                        self.c.stale_dels += 1;
                        self.enqueue(
                            TmOp::Del {
                                handle: hs.tag_handle,
                            },
                            OpKind::Del { id, cancel: false },
                        );
                    }
                    Some(_) => {}
                }
                self.c.matched_sw += 1;
                if rvh.is_some() {
                    self.c.sw_rndv += 1;
                }
                out.push(Event::Matched(OffMatch {
                    handle: OffHandle(id),
                    recv: rec.ctx,
                    msg: m.msg.msg,
                    env: m.env,
                    len: m.len,
                    path: MatchPath::SwArrival,
                    sw_rndv: rvh,
                    data_pending: false,
                }));
            }
            Ok(Arrived::Unexpected(env)) => {
                self.c.unexpected += 1;
                out.push(Event::Unexpected {
                    env,
                    len: wire.len as usize,
                });
            }
            Err(r) => out.push(Event::Rejected(Rejected {
                reason: r.reason,
                env: r.env,
                len: r.len,
                msg: r.msg.msg,
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The verbs driver against the engine's driver, both over the model, for random
    //! interleavings: the same matches (receive ↔ message), the same cancel outcomes.

    use super::*;
    use tagmatch_engine::offload::{Driver, DriverConfig};
    use tagmatch_engine::tm_srq::TmCaps;
    use tagmatch_engine::{Envelope, Source, TagSel};

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn sge(len: u32) -> Sge {
        Sge {
            addr: 0,
            len,
            lkey: 0,
        }
    }

    type Log = Vec<String>;

    fn log_events<R: std::fmt::Debug, M: std::fmt::Debug>(ev: Vec<Event<R, M>>, log: &mut Log) {
        for e in ev {
            match e {
                Event::Matched(m) => log.push(format!("match {:?} {:?}", m.recv, m.msg)),
                Event::Cancelled { recv, .. } => log.push(format!("cancelled {recv:?}")),
                Event::CancelFailed { handle } => log.push(format!("cancel-failed {handle:?}")),
                Event::Unexpected { .. } | Event::DataValid { .. } | Event::NoTag(_) => {}
                Event::Rejected(r) => log.push(format!("rejected {:?}", r.msg)),
            }
        }
    }

    fn run(seed: u64, tags: u32) {
        let caps = TmCaps::with_tags(tags);
        let cfg = DriverConfig {
            caps: Some(caps),
            srq_depth: 64,
            ..DriverConfig::default()
        };
        let mut reference: Driver<u32, u32> = Driver::new(cfg);
        let mut model = ModelBackend {
            srq: TmSrq::new(caps, cfg.mtu).expect("model"),
        };
        for _ in 0..64 {
            model.srq.post_srq_recv(u64::MAX);
        }
        let mut ours: HwOffload<ModelBackend<u32>, u32, u32> =
            HwOffload::new(model, cfg.layout, cfg.engine);
        let (mut log_ref, mut log_ours) = (Log::new(), Log::new());
        let mut rng = Rng(seed | 1);
        let mut handles = Vec::new();
        for step in 0..400u32 {
            match rng.below(6) {
                0 | 1 => {
                    let src = if rng.below(4) == 0 {
                        Source::Any
                    } else {
                        Source::Rank(rng.below(2) as u32)
                    };
                    let tag = if rng.below(5) == 0 {
                        TagSel::Any
                    } else {
                        TagSel::Exact(rng.below(3))
                    };
                    let spec = RecvSpec { comm: 0, src, tag };
                    let a = reference.post(spec, 64, step).expect("post ref");
                    let b = ours.post(spec, sge(64), step).expect("post ours");
                    match (a, b) {
                        (PostOutcome::Pending(x), PostOutcome::Pending(y)) => {
                            assert_eq!(x, y);
                            handles.push(x);
                        }
                        (PostOutcome::Matched(x), PostOutcome::Matched(y)) => {
                            assert_eq!((x.recv, x.msg), (y.recv, y.msg), "seed {seed}");
                        }
                        (x, y) => panic!("seed {seed}: post outcomes differ: {x:?} vs {y:?}"),
                    }
                }
                2 => {
                    let env = Envelope::new(0, rng.below(2) as u32, rng.below(3));
                    let m = reference.eager(env, 8, step);
                    reference.wire(m.clone()).expect("wire ref");
                    ours.hw_mut().srq.arrive(m).expect("wire ours");
                }
                3 => {
                    reference.hw_mut().expect("hw").execute_op();
                    ours.hw_mut().srq.execute_op();
                }
                4 if !handles.is_empty() => {
                    let h = handles.swap_remove(rng.below(handles.len() as u64) as usize);
                    let a = reference.cancel(h);
                    let b = ours.cancel(h);
                    match (a, b) {
                        (Ok(CancelOutcome::Cancelled(x)), Ok(CancelOutcome::Cancelled(y))) => {
                            log_ref.push(format!("cancelled {x:?}"));
                            log_ours.push(format!("cancelled {y:?}"));
                        }
                        (Ok(CancelOutcome::InProgress), Ok(CancelOutcome::InProgress)) => {}
                        (Err(_), Err(_)) => {}
                        (x, y) => panic!("seed {seed}: cancel outcomes differ: {x:?} vs {y:?}"),
                    }
                }
                _ => {
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    reference.poll(&mut a);
                    ours.poll(&mut b);
                    log_events(a, &mut log_ref);
                    log_events(b, &mut log_ours);
                }
            }
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        reference.settle(&mut a);
        loop {
            ours.poll(&mut b);
            let srq = &mut ours.hw_mut().srq;
            if !srq.execute_op() && srq.cq_len() == 0 && ours.deferred_ops() == 0 {
                break;
            }
        }
        log_events(a, &mut log_ref);
        log_events(b, &mut log_ours);
        assert_eq!(log_ref, log_ours, "seed {seed}");
        assert_eq!(ours.counters().order_violations, 0, "seed {seed}");
        assert_eq!(
            reference.counters().matched_hw,
            ours.counters().matched_hw,
            "seed {seed}"
        );
    }

    #[test]
    fn same_matches_as_the_engine_driver_over_the_model() {
        let mut hw_matches = 0;
        for seed in 1..200u64 {
            run(
                seed.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                1 + (seed % 4) as u32,
            );
        }
        // The comparison is only meaningful if hardware matched something.
        for seed in 1..20u64 {
            let caps = TmCaps::with_tags(8);
            let mut model = ModelBackend::<u32> {
                srq: TmSrq::new(caps, 4096).expect("model"),
            };
            model.srq.post_srq_recv(u64::MAX);
            let mut d: HwOffload<_, u32, u32> =
                HwOffload::new(model, TagLayout::default(), Config::default());
            let h = d
                .post(RecvSpec::exact(0, 1, seed), sge(64), 1)
                .expect("post");
            assert!(matches!(h, PostOutcome::Pending(_)));
            d.hw_mut().srq.execute_op();
            let mut ev = Vec::new();
            d.poll(&mut ev);
            let env = Envelope::new(0, 1, seed);
            let msg = WireMsg::eager(
                TagLayout::default().encode(&env),
                0,
                8,
                Carried { env, msg: 9 },
            );
            d.hw_mut().srq.arrive(msg).expect("arrive");
            d.poll(&mut ev);
            assert!(ev.iter().any(|e| matches!(
                e,
                Event::Matched(m) if m.path == MatchPath::Hw && m.recv == 1 && m.msg == 9
            )));
            hw_matches += d.counters().matched_hw;
        }
        assert_eq!(hw_matches, 19);
    }

    #[test]
    fn cancel_of_an_offloaded_receive_goes_through_del() {
        let caps = TmCaps::with_tags(4);
        let model = ModelBackend::<u32> {
            srq: TmSrq::new(caps, 4096).expect("model"),
        };
        let mut d: HwOffload<_, u32, u32> =
            HwOffload::new(model, TagLayout::default(), Config::default());
        let PostOutcome::Pending(h) = d.post(RecvSpec::exact(0, 0, 5), sge(64), 7).unwrap() else {
            panic!("expected pending");
        };
        assert_eq!(d.is_offloaded(h), Some(true));
        assert!(matches!(d.cancel(h), Ok(CancelOutcome::InProgress)));
        let mut ev = Vec::new();
        while d.hw_mut().srq.execute_op() {}
        d.poll(&mut ev);
        assert!(matches!(ev.as_slice(), [Event::Cancelled { recv: 7, .. }]));
        assert_eq!(d.is_offloaded(h), None);
        assert!(d.cancel(h).is_err());
    }
}

//! Named scenarios of the offload driver: the m1/m2/b1/b2 race of rdma-core
//! `Documentation/tag_matching.md`, the cancel/TM_ERR race (UCX's false cancel), fallback
//! to software, the prefix rule with wildcards, rendezvous paths and the tag layout.

mod offload_common;

use offload_common::{driver, matches, pending, D};
use tagmatch_engine::offload::*;
use tagmatch_engine::tm_srq::{Cqe, OpsWr, PostOpError, TmCaps, TmSrq, WcStatus};
use tagmatch_engine::{Envelope, RecvSpec, Source};
use tagmatch_wire::tm::{Rvh, TmOpcode};

const E: Envelope = Envelope::new(0, 1, 7);

/// rdma-core-tag-matching: "consider 2 incoming messages m1 and m2 and matching buffers b1
/// and b2 that are posted asynchronously. If b1 is posted after m1 arrives but before m2,
/// m1 would be delivered as an unexpected message while m2 would match b1, violating the
/// ordering rules."
fn m1_m2_b1_b2(honor_phase: bool) -> (Vec<(&'static str, &'static str, MatchPath)>, D) {
    let mut d = driver(4);
    d.hw_mut().unwrap().set_honor_phase(honor_phase);
    let spec = RecvSpec::exact(0, 1, 7);
    let mut ev = Vec::new();
    // m1 arrives: no tag in hardware, it goes to the SRQ as unexpected (not yet polled).
    let m1 = d.eager(E, 8, "m1");
    d.wire(m1).unwrap();
    // b1 is posted before software has seen m1: it is offloaded with count 0.
    pending(d.post(spec, 64, "b1").unwrap());
    d.hw_mut().unwrap().execute_op();
    // m2 arrives after b1's ADD executed.
    let m2 = d.eager(E, 8, "m2");
    d.wire(m2).unwrap();
    pending(d.post(spec, 64, "b2").unwrap());
    d.settle(&mut ev);
    (matches(&ev), d)
}

#[test]
fn m1_m2_b1_b2_race_keeps_order() {
    let (got, d) = m1_m2_b1_b2(true);
    // The software engine, with m1 and m2 taking effect when polled: b1-m1, b2-m2.
    assert_eq!(
        got,
        vec![
            ("b1", "m1", MatchPath::SwArrival),
            ("b2", "m2", MatchPath::SwArrival)
        ]
    );
    let c = d.counters();
    assert_eq!(c.offloaded, 2);
    assert_eq!(c.hw_unexpected, 2);
    assert_eq!(c.stale_dels, 2);
    assert!(c.sync_reqs >= 1);
    assert_eq!(c.order_violations, 0);
    assert!(d.hw().unwrap().list().is_empty());
}

#[test]
fn m1_m2_b1_b2_race_without_phase_counts_reorders() {
    // Negative control: the same schedule on hardware that ignores the counts.
    // Hardware hands m2 to b1's buffer although software already gave m1 to b1: a double
    // match, which the driver detects (and recovers from by matching m2 in software).
    let (got, d) = m1_m2_b1_b2(false);
    assert_eq!(got[0], ("b1", "m1", MatchPath::SwArrival));
    assert_eq!(d.counters().order_violations, 1);
    assert_eq!(d.counters().matched_hw, 0);
}

#[test]
fn sync_after_sync_req_reenables_matching_in_hardware() {
    let mut d = driver(4);
    let mut ev = Vec::new();
    // An unexpected message, then a post before it is polled: the new tag is disabled.
    let u = d.eager(Envelope::new(0, 1, 1), 8, "u");
    d.wire(u).unwrap();
    pending(d.post(RecvSpec::exact(0, 1, 2), 64, "r").unwrap());
    d.hw_mut().unwrap().execute_op();
    assert!(!d.hw().unwrap().list()[0].enabled);
    d.settle(&mut ev);
    // The ADD completion asked for a sync, software reported its count: enabled again.
    assert!(d.counters().syncs >= 1);
    assert!(d.hw().unwrap().list()[0].enabled);
    let m = d.eager(Envelope::new(0, 1, 2), 8, "m");
    d.wire(m).unwrap();
    d.settle(&mut ev);
    assert_eq!(matches(&ev), vec![("r", "m", MatchPath::Hw)]);
    assert!(matches!(ev[0], Event::Unexpected { .. }));
}

#[test]
fn cancel_race_lost_to_message_is_not_a_false_cancel() {
    let mut d = driver(2);
    let mut ev = Vec::new();
    let h = pending(d.post(RecvSpec::exact(0, 1, 7), 64, "r").unwrap());
    d.settle(&mut ev);
    assert_eq!(d.is_offloaded(h), Some(true));
    // Cancel posts a DEL; the message wins the race before it executes.
    assert_eq!(d.cancel(h), Ok(CancelOutcome::InProgress));
    assert_eq!(d.cancel(h), Ok(CancelOutcome::InProgress));
    let m = d.eager(E, 8, "m");
    d.wire(m).unwrap();
    d.settle(&mut ev);
    assert_eq!(
        ev,
        vec![
            Event::Matched(OffMatch {
                handle: h,
                recv: "r",
                msg: "m",
                env: E,
                len: 8,
                path: MatchPath::Hw,
                sw_rndv: None,
                data_pending: false,
            }),
            Event::CancelFailed { handle: h }
        ]
    );
    assert_eq!(d.counters().tm_err_races, 1);
    assert_eq!(d.engine_counters().posted_depth, 0);
}

#[test]
fn cancel_that_wins_the_race_cancels() {
    let mut d = driver(2);
    let mut ev = Vec::new();
    let h = pending(d.post(RecvSpec::exact(0, 1, 7), 64, "r").unwrap());
    assert_eq!(d.cancel(h), Ok(CancelOutcome::InProgress));
    d.settle(&mut ev);
    assert_eq!(
        ev,
        vec![Event::Cancelled {
            handle: h,
            recv: "r"
        }]
    );
    let m = d.eager(E, 8, "m");
    d.wire(m).unwrap();
    d.settle(&mut ev);
    assert!(matches!(ev[1], Event::Unexpected { .. }));
    assert_eq!(d.cancel(h), Err(tagmatch_engine::EngineError::StaleHandle));
    assert_eq!(d.counters().tm_err_races, 0);
}

#[test]
fn cancel_of_receive_software_took_while_entry_disabled_fails() {
    let mut d = driver(2);
    let mut ev = Vec::new();
    let u = d.eager(E, 8, "u");
    d.wire(u).unwrap();
    let h = pending(d.post(RecvSpec::exact(0, 1, 7), 64, "r").unwrap());
    assert_eq!(d.cancel(h), Ok(CancelOutcome::InProgress));
    d.settle(&mut ev);
    // u was polled before the DEL completed: software matched it, the DEL succeeded on
    // the stale entry, and the cancel is reported as failed.
    assert_eq!(matches(&ev), vec![("r", "u", MatchPath::SwArrival)]);
    assert_eq!(ev.last(), Some(&Event::CancelFailed { handle: h }));
}

#[test]
fn capacity_zero_or_unsupported_runs_in_software() {
    for caps in [None, Some(TmCaps::with_tags(0))] {
        let mut d: D = Driver::new(DriverConfig {
            caps,
            ..DriverConfig::default()
        });
        assert!(d.hw().is_none());
        let mut ev = Vec::new();
        let h = pending(d.post(RecvSpec::exact(0, 1, 7), 64, "r1").unwrap());
        assert_eq!(d.is_offloaded(h), Some(false));
        pending(d.post(RecvSpec::new(0, None, None), 64, "r2").unwrap());
        for m in ["m1", "m2", "m3"] {
            let w = d.eager(E, 8, m);
            d.wire(w).unwrap();
        }
        d.poll(&mut ev);
        assert_eq!(
            matches(&ev),
            vec![
                ("r1", "m1", MatchPath::SwArrival),
                ("r2", "m2", MatchPath::SwArrival)
            ]
        );
        match d.post(RecvSpec::exact(0, 1, 7), 64, "r3").unwrap() {
            PostOutcome::Matched(m) => assert_eq!((m.msg, m.path), ("m3", MatchPath::SwPost)),
            other => panic!("{other:?}"),
        }
        let c = d.counters();
        assert_eq!((c.offloaded, c.blocked_no_hw), (0, 2));
    }
}

#[test]
fn prefix_rule_blocks_only_intersecting_classes_and_offloads_wildcards() {
    let mut d = driver(1);
    let mut ev = Vec::new();
    // ANY_SOURCE receive offloaded (UCX never does that).
    let a = pending(
        d.post(RecvSpec::new(0, None, Some(5)), 64, "any_src")
            .unwrap(),
    );
    assert_eq!(d.is_offloaded(a), Some(true));
    // The list is full: this one stays in software...
    let b = pending(d.post(RecvSpec::exact(0, 2, 6), 64, "b").unwrap());
    assert_eq!(d.is_offloaded(b), Some(false));
    d.settle(&mut ev);
    // ... and blocks a later receive of an intersecting class even with room (after a
    // consume frees the slot), but not a disjoint one.
    let m = d.eager(Envelope::new(0, 3, 5), 8, "m");
    d.wire(m).unwrap();
    d.settle(&mut ev);
    assert_eq!(matches(&ev), vec![("any_src", "m", MatchPath::Hw)]);
    let c = pending(d.post(RecvSpec::new(0, Some(2), None), 64, "c").unwrap());
    assert_eq!(d.is_offloaded(c), Some(false));
    let e = pending(d.post(RecvSpec::exact(0, 2, 9), 64, "e").unwrap());
    assert_eq!(d.is_offloaded(e), Some(false));
    let f = pending(d.post(RecvSpec::exact(1, 2, 6), 64, "f").unwrap());
    assert_eq!(d.is_offloaded(f), Some(true));
    let k = d.counters();
    assert_eq!((k.blocked_tags_full, k.blocked_sw_pending), (1, 2));
    // Messages still go to the earliest-posted receive.
    let m = d.eager(Envelope::new(0, 2, 6), 8, "m2");
    d.wire(m).unwrap();
    d.settle(&mut ev);
    assert_eq!(matches(&ev)[1], ("b", "m2", MatchPath::SwArrival));
}

#[test]
fn rendezvous_in_hardware_in_software_and_incomplete() {
    let mut d = driver(4);
    let mut ev = Vec::new();
    let rvh = Rvh {
        va: 0x1000,
        rkey: 5,
        len: 4096,
    };
    pending(d.post(RecvSpec::exact(0, 1, 1), 8192, "big").unwrap());
    pending(d.post(RecvSpec::exact(0, 1, 2), 100, "small").unwrap());
    d.settle(&mut ev);
    let m = d.rndv(Envelope::new(0, 1, 1), rvh, "r1");
    d.wire(m).unwrap();
    let m = d.rndv(Envelope::new(0, 1, 2), rvh, "r2");
    d.wire(m).unwrap();
    d.poll(&mut ev);
    match &ev[..] {
        [Event::Matched(a), Event::Matched(b)] => {
            assert_eq!((a.recv, a.data_pending, a.sw_rndv), ("big", true, None));
            assert_eq!(
                (b.recv, b.data_pending, b.sw_rndv),
                ("small", false, Some(rvh))
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(d.hw_mut().unwrap().complete_transfer());
    d.poll(&mut ev);
    assert!(matches!(ev[2], Event::DataValid { .. }));
    let fins = d.hw().unwrap().fins();
    assert_eq!(
        (fins.len(), fins[0].0.opcode, fins[0].1),
        (1, TmOpcode::Fin, rvh)
    );
    // Unexpected rendezvous: software reads.
    let m = d.rndv(Envelope::new(0, 1, 3), rvh, "r3");
    d.wire(m).unwrap();
    d.settle(&mut ev);
    match d.post(RecvSpec::exact(0, 1, 3), 8192, "late").unwrap() {
        PostOutcome::Matched(m) => assert_eq!(m.sw_rndv, Some(rvh)),
        other => panic!("{other:?}"),
    }
    let c = d.counters();
    assert_eq!((c.rndv_incomplete, c.sw_rndv, c.matched_hw), (1, 1, 2));
    let _ = WcStatus::TmRndvIncomplete;
}

#[test]
fn layout_saturates_and_refuses_inexact_entries() {
    let l = TagLayout::new(2, 2, 3).unwrap();
    assert!(TagLayout::new(32, 32, 1).is_none());
    assert!(TagLayout::new(33, 0, 0).is_none());
    assert_eq!(l.encode(&Envelope::new(1, 2, 5)), (1 << 5) | (2 << 3) | 5);
    // Saturated fields.
    assert_eq!(l.encode(&Envelope::new(9, 9, 99)), (3 << 5) | (3 << 3) | 7);
    assert!(l.entry(&RecvSpec::exact(0, 0, 7)).is_none());
    assert!(l.entry(&RecvSpec::exact(3, 0, 0)).is_none());
    assert!(l.entry(&RecvSpec::new(0, Some(3), None)).is_none());
    assert_eq!(
        l.entry(&RecvSpec::new(1, None, None)),
        Some((1 << 5, 3 << 5))
    );
    // A mask leaving high tag bits free cannot be represented.
    assert!(l.entry(&RecvSpec::masked(0, Source::Any, 1, 1)).is_none());
    assert!(l
        .entry(&RecvSpec::masked(0, Source::Any, 1, !0u64 << 2 | 1))
        .is_some());
    // ... nor one whose match set contains the saturated value 7.
    assert!(l
        .entry(&RecvSpec::masked(0, Source::Any, 4, !0u64 << 2))
        .is_none());
}

#[test]
fn no_tag_messages_bypass_matching_and_the_count() {
    let mut d = driver(2);
    let mut ev = Vec::new();
    pending(d.post(RecvSpec::new(0, None, None), 64, "any").unwrap());
    d.settle(&mut ev);
    let w = tagmatch_engine::tm_srq::WireMsg::no_tag(
        4,
        Carried {
            env: E,
            msg: "control",
        },
    );
    d.wire(w).unwrap();
    d.poll(&mut ev);
    assert!(matches!(&ev[..], [Event::NoTag(m)] if m.payload.msg == "control"));
    assert_eq!(d.sw_unexpected(), 0);
    assert_eq!(d.hw().unwrap().hw_unexpected(), 0);
    // The wildcard receive is still there for a tagged message.
    let m = d.eager(E, 8, "m");
    d.wire(m).unwrap();
    d.poll(&mut ev);
    assert_eq!(matches(&ev), vec![("any", "m", MatchPath::Hw)]);
}

#[test]
fn engine_budget_hands_an_unexpected_message_back() {
    let mut d: D = Driver::new(DriverConfig {
        caps: Some(TmCaps::with_tags(2)),
        engine: tagmatch_engine::Config::default().max_messages(1),
        ..DriverConfig::default()
    });
    let mut ev = Vec::new();
    for m in ["m1", "m2"] {
        let w = d.eager(E, 8, m);
        d.wire(w).unwrap();
    }
    d.poll(&mut ev);
    assert!(matches!(ev[0], Event::Unexpected { .. }));
    assert!(matches!(&ev[1], Event::Rejected(r) if r.msg == "m2"));
    // The count still includes it: hardware and software agree again.
    assert_eq!(d.sw_unexpected(), d.hw().unwrap().hw_unexpected());
}

/// A backend implemented outside the engine, as a device would: it owns the hardware (here
/// the model, standing in for a NIC), builds every completion with [`Cqe::new`] and takes
/// tagged buffers as `(address, length)` pairs.
struct Device {
    srq: TmSrq<Carried<&'static str>>,
    adds: Vec<(u64, u32)>,
}

impl TmBackend<&'static str> for Device {
    type Buf = (u64, u32);

    fn buf_len(buf: &(u64, u32)) -> u32 {
        buf.1
    }

    fn caps(&self) -> TmCaps {
        self.srq.caps()
    }

    fn post_op(&mut self, wr: OpsWr, buf: Option<(u64, u32)>) -> Result<Option<u32>, PostOpError> {
        let r = self.srq.post_op(wr);
        if let (Ok(_), Some(b)) = (&r, buf) {
            self.adds.push(b);
        }
        r
    }

    fn poll(&mut self) -> Option<Cqe<Carried<&'static str>>> {
        let c = self.srq.poll_cq()?;
        let mut out = Cqe::new(c.wr_id, c.status, c.opcode, c.wc_flags, c.msg);
        out.byte_len = c.byte_len;
        out.tm_info = c.tm_info;
        Some(out)
    }

    fn replenish(&mut self) {
        self.srq.post_srq_recv(wr_id::rq(0));
    }
}

#[test]
fn a_backend_outside_the_engine_drives_the_same_algorithm() {
    let caps = TmCaps::with_tags(4);
    let mut srq = TmSrq::new(caps, 4096).unwrap();
    for _ in 0..16 {
        srq.post_srq_recv(wr_id::rq(0));
    }
    let mut dev: Driver<&'static str, &'static str, Device> = Driver::with_backend(
        DriverConfig::default(),
        Some(Device {
            srq,
            adds: Vec::new(),
        }),
    );
    assert_eq!(dev.config().caps, Some(caps));
    let mut model = driver(4);
    let spec = RecvSpec::exact(0, 1, 7);
    let (mut ev_dev, mut ev_model) = (Vec::new(), Vec::new());
    // m1/m2/b1/b2, then an offloaded receive that is cancelled.
    let m1 = model.eager(E, 8, "m1");
    model.wire(m1.clone()).unwrap();
    dev.hw_mut().unwrap().srq.arrive(m1).unwrap();
    pending(model.post(spec, 64, "b1").unwrap());
    pending(dev.post(spec, (0x1000, 64), "b1").unwrap());
    model.hw_mut().unwrap().execute_op();
    dev.hw_mut().unwrap().srq.execute_op();
    let m2 = model.eager(E, 8, "m2");
    model.wire(m2.clone()).unwrap();
    dev.hw_mut().unwrap().srq.arrive(m2).unwrap();
    pending(model.post(spec, 64, "b2").unwrap());
    pending(dev.post(spec, (0x2000, 64), "b2").unwrap());
    let other = RecvSpec::exact(0, 2, 9);
    let h = pending(model.post(other, 64, "c").unwrap());
    assert_eq!(pending(dev.post(other, (0x3000, 32), "c").unwrap()), h);
    assert_eq!(model.is_offloaded(h), dev.is_offloaded(h));
    assert!(matches!(model.cancel(h), Ok(CancelOutcome::InProgress)));
    assert!(matches!(dev.cancel(h), Ok(CancelOutcome::InProgress)));
    model.settle(&mut ev_model);
    loop {
        dev.poll(&mut ev_dev);
        let srq = &mut dev.hw_mut().unwrap().srq;
        if !srq.execute_op() && srq.cq_len() == 0 && dev.deferred_ops() == 0 {
            break;
        }
    }
    assert_eq!(ev_dev, ev_model);
    assert_eq!(
        matches(&ev_dev),
        [
            ("b1", "m1", MatchPath::SwArrival),
            ("b2", "m2", MatchPath::SwArrival)
        ]
    );
    assert!(ev_dev
        .iter()
        .any(|e| matches!(e, Event::Cancelled { recv: "c", .. })));
    assert_eq!(dev.counters(), model.counters());
    assert_eq!(dev.counters().order_violations, 0);
    // Each ADD got its buffer.
    let adds = &dev.hw().unwrap().adds;
    assert!(adds.contains(&(0x3000, 32)), "{adds:?}");
}

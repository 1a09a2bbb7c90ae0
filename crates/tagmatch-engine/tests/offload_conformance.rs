//! Conformance review of the HW/SW tag-matching split: each test checks one rule the specs
//! state (rdma-core `Documentation/tag_matching.md` = "rdma-core-tag-matching",
//! wire-layouts §B–C) against the TM-SRQ model ([`tagmatch_engine::tm_srq`]) or the
//! offload driver ([`tagmatch_engine::offload`]), and quotes it.

mod offload_common;

use offload_common::*;
use tagmatch_engine::offload::*;
use tagmatch_engine::tm_srq::*;
use tagmatch_engine::{Envelope, RecvSpec};
use tagmatch_wire::tm::{Rvh, TmOpcode, Tmh, RVH_LEN, TMH_LEN};

const EXACT: u64 = u64::MAX;

fn add(s: &mut TmSrq<u32>, recv_wr_id: u64, tag: u64, mask: u64, buf_len: u32, cnt: u32) -> u32 {
    s.post_op(OpsWr {
        wr_id: 1 << 32 | recv_wr_id,
        flags: SIG,
        unexpected_cnt: cnt,
        op: TmOp::Add {
            recv_wr_id,
            tag,
            mask,
            buf_len,
        },
    })
    .unwrap()
    .unwrap()
}

fn rvh(len: u32) -> Rvh {
    Rvh {
        va: 0x7f00_0000_1000,
        rkey: 0x1234,
        len,
    }
}

// ---------------------------------------------------------------------------------------
// The TM-SRQ model
// ---------------------------------------------------------------------------------------

/// rdma-core-tag-matching "Introduction": "Receive tags are not necessarily consumed in the
/// order they are created, e.g., a later generated tag may be consumed if earlier tags do
/// not satisfy the matching rules." wire-layouts §C.1: "The returned handle is the list
/// index"; §B: "a message matches an entry when TMH.tag & entry.mask == entry.tag".
/// A freed handle (list index) is reused, but the new entry goes to the *end* of the
/// matching order: handle order is not list order once handles wrap around.
#[test]
fn list_order_is_append_order_not_handle_order_after_wraparound() {
    let mut s = srq(3, 16, 16);
    let a = add(&mut s, 10, 1, EXACT, 64, 0); // tag 1
    let b = add(&mut s, 11, 1, 1, 64, 0); // any odd tag
    let c = add(&mut s, 12, 2, EXACT, 64, 0); // tag 2
    drain(&mut s);
    assert_eq!((a, b, c), (0, 1, 2));
    // A later generated tag (c) is consumed while earlier ones stay.
    s.arrive(WireMsg::eager(2, 0, 8, 0)).unwrap();
    assert_eq!(s.poll_cq().unwrap().wr_id, 12);
    s.arrive(WireMsg::eager(1, 0, 8, 0)).unwrap();
    assert_eq!(s.poll_cq().unwrap().wr_id, 10);
    // Handle 0 is free again: the next ADD gets it but is last in matching order.
    let d = add(&mut s, 13, 1, EXACT, 64, 0);
    drain(&mut s);
    assert_eq!(d, 0);
    let order: Vec<_> = s.list().iter().map(|e| (e.handle, e.recv_wr_id)).collect();
    assert_eq!(order, vec![(1, 11), (0, 13)]);
    // Tag 1 now goes to the masked entry (earlier in the list, higher handle), not to d.
    s.arrive(WireMsg::eager(1, 0, 8, 0)).unwrap();
    assert_eq!(s.poll_cq().unwrap().wr_id, 11);
    s.arrive(WireMsg::eager(1, 0, 8, 0)).unwrap();
    assert_eq!(s.poll_cq().unwrap().wr_id, 13);
    // Many wrap-arounds of a full list: handles stay below max_num_tags and identical
    // entries are always consumed oldest first.
    let mut next = 100u64;
    for _ in 0..3 {
        add(&mut s, next, 7, EXACT, 64, 0);
        next += 1;
    }
    drain(&mut s);
    let mut consumed = Vec::new();
    for _ in 0..20 {
        s.arrive(WireMsg::eager(7, 0, 8, 0)).unwrap();
        consumed.push(s.poll_cq().unwrap().wr_id);
        let h = add(&mut s, next, 7, EXACT, 64, 0);
        assert!(h < 3);
        next += 1;
        drain(&mut s);
        assert_eq!(s.list().len(), 3);
    }
    assert_eq!(consumed, (100..120).collect::<Vec<_>>());
    assert_eq!(s.hw_unexpected(), 0);
}

/// rdma-core-tag-matching: "When a message is matched by HW, the payload is transferred
/// directly to the application buffer (both in the eager and the rendezvous case), while
/// skipping any TM headers. Otherwise, the entire message, including any TM headers, is
/// scattered to the SRQ buffer." and "IBV_WC_RECV - standard SRQ completion; used for
/// unexpected messages"; "In single-packet eager messages, both flags are set."
#[test]
fn matched_data_skips_headers_unexpected_data_keeps_them() {
    let mut s = srq(2, 8, 4);
    add(&mut s, 1, 5, EXACT, 64, 0);
    drain(&mut s);
    s.arrive(WireMsg::eager(5, 0xaa, 40, 0)).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!(
        (c.opcode, c.status, c.wc_flags, c.byte_len),
        (
            WcOpcode::TmRecv,
            WcStatus::Success,
            wc_flags::TM_MATCH | wc_flags::TM_DATA_VALID,
            40
        )
    );
    assert_eq!(
        c.tm_info,
        Some(TmInfo {
            tag: 5,
            priv_: 0xaa
        })
    );
    // Unexpected eager: TMH + payload, in a receive-queue buffer, opcode RECV, no TM flags.
    s.arrive(WireMsg::eager(6, 0, 40, 0)).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!(
        (c.opcode, c.wr_id, c.wc_flags, c.byte_len),
        (WcOpcode::Recv, 1000, 0, (TMH_LEN + 40) as u32)
    );
    // Unexpected rendezvous request: TMH + RVH + its optional data, all scattered.
    s.arrive(WireMsg::rndv(6, 3, rvh(1 << 20), 8, 0)).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!(c.opcode, WcOpcode::Recv);
    assert_eq!(c.byte_len, (TMH_LEN + RVH_LEN + 8) as u32);
    let m = c.msg.unwrap();
    assert_eq!((m.tmh.opcode, m.rvh), (TmOpcode::Rndv, Some(rvh(1 << 20))));
    // No read, no FIN for a rendezvous handled in software.
    assert!(s.reads().is_empty() && s.fins().is_empty());
    assert_eq!(s.hw_unexpected(), 2);
}

/// rdma-core-tag-matching: "In single-packet eager messages, both flags are set. When larger
/// messages or rendezvous transfers are involved, matching and data transfer completion are
/// distinct events". "Single-packet" is the message on the wire: "The message consists of a
/// TMH followed by payload", so the TMH shares the first packet with the payload.
#[test]
fn single_packet_means_tmh_and_payload_fit_one_mtu() {
    let mtu = 4096u32;
    let mut s = srq(2, 8, 4);
    add(&mut s, 1, 5, EXACT, 1 << 20, 0);
    add(&mut s, 2, 5, EXACT, 1 << 20, 0);
    drain(&mut s);
    let fits = mtu - TMH_LEN as u32;
    s.arrive(WireMsg::eager(5, 0, fits, 0)).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!(
        (c.wr_id, c.wc_flags, c.byte_len),
        (1, wc_flags::TM_MATCH | wc_flags::TM_DATA_VALID, fits)
    );
    // One byte more needs a second packet: MATCH now, DATA_VALID when the data is in.
    s.arrive(WireMsg::eager(5, 0, fits + 1, 0)).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!((c.wr_id, c.wc_flags), (2, wc_flags::TM_MATCH));
    assert!(s.complete_transfer());
    let c = s.poll_cq().unwrap();
    assert_eq!(
        (c.wr_id, c.wc_flags, c.byte_len),
        (2, wc_flags::TM_DATA_VALID, fits + 1)
    );
}

/// rdma-core-tag-matching "TM-SRQ creation" / "Managing TM receive buffers": "2 kinds of
/// buffers may be posted to the TM-SRQ: Buffers associated with tags (tagged-buffers),
/// which are used when a match is made by HW; Standard SRQ buffers, which are used for
/// unexpected messages"; "While wr_id identifies the tag manipulation operation itself,
/// the recv_wr_id field is used to identify the tagged buffer in receive completions."
#[test]
fn tagged_and_untagged_buffers_are_used_for_their_own_messages() {
    let mut s = srq(2, 8, 0); // no untagged buffer at all
    add(&mut s, 7, 5, EXACT, 64, 0);
    let c = drain(&mut s);
    assert_eq!((c[0].opcode, c[0].wr_id), (WcOpcode::TmAdd, 1 << 32 | 7));
    // An expected message needs no receive-queue buffer; it completes on recv_wr_id.
    s.arrive(WireMsg::eager(5, 0, 8, 0)).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!((c.opcode, c.wr_id), (WcOpcode::TmRecv, 7));
    // Unexpected and NO_TAG messages do: without one they are refused (RNR) and the
    // TM-SRQ is unchanged (the hardware count included).
    let u = WireMsg::eager(6, 0, 8, 1);
    assert_eq!(s.arrive(u.clone()), Err(ArriveError::Rnr(u)));
    let n = WireMsg::no_tag(8, 2);
    assert_eq!(s.arrive(n.clone()), Err(ArriveError::Rnr(n)));
    assert_eq!((s.hw_unexpected(), s.cq_len()), (0, 0));
    s.post_srq_recv(99);
    s.arrive(WireMsg::eager(6, 0, 8, 1)).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!((c.opcode, c.wr_id), (WcOpcode::Recv, 99));
    assert_eq!(s.hw_unexpected(), 1);
}

/// rdma-core-tag-matching "Sending TM messages": "The total rendezvous message size must not
/// exceed the max_rndv_hdr_size capability."
#[test]
fn rendezvous_request_is_limited_to_max_rndv_hdr_size() {
    let mut s = srq(2, 8, 4);
    add(&mut s, 1, 5, EXACT, 1 << 20, 0);
    drain(&mut s);
    // TMH 16 + RVH 16 + 33 bytes of data = 65 > 64: refused, nothing changes.
    let big = WireMsg::rndv(5, 0, rvh(4096), 33, 7);
    assert_eq!(
        s.arrive(big.clone()),
        Err(ArriveError::RndvHdrTooLarge(big))
    );
    assert_eq!((s.cq_len(), s.list().len(), s.hw_unexpected()), (0, 1, 0));
    // Exactly 64 bytes is allowed.
    s.arrive(WireMsg::rndv(5, 0, rvh(4096), 32, 7)).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!((c.wr_id, c.wc_flags), (1, wc_flags::TM_MATCH));
}

/// rdma-core-tag-matching: "when a posted tagged buffer is insufficient to hold the data of
/// a rendezvous request, the HW completes the buffer with an IBV_WC_TM_RNDV_INCOMPLETE
/// status. In this case, the TMH and RVH headers are scattered into the tagged buffer
/// (tag-matching has still been completed!)", and for DEL: "the operation may fail if the
/// associated tag was consumed by an incoming message. In this case IBV_WC_TM_ERR status
/// will be returned in WC."
#[test]
fn rndv_incomplete_consumes_the_tag_and_a_later_del_fails() {
    let mut s = srq(2, 8, 4);
    let h = add(&mut s, 1, 5, EXACT, 100, 0);
    drain(&mut s);
    s.arrive(WireMsg::rndv(5, 9, rvh(4096), 0, 0)).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!(
        (c.opcode, c.status, c.wr_id),
        (WcOpcode::TmRecv, WcStatus::TmRndvIncomplete, 1)
    );
    assert_ne!(c.wc_flags & wc_flags::TM_MATCH, 0);
    assert_eq!(c.byte_len, (TMH_LEN + RVH_LEN) as u32);
    assert_eq!(c.msg.unwrap().rvh, Some(rvh(4096)));
    // Software continues: the hardware neither reads nor sends a FIN.
    assert_eq!(s.pending_transfers(), 0);
    assert!(s.reads().is_empty() && s.fins().is_empty());
    assert!(s.list().is_empty());
    assert_eq!(s.hw_unexpected(), 0);
    op(&mut s, 50, 0, TmOp::Del { handle: h }).unwrap_err();
    // The handle was freed once the consume completion was polled: it is stale now.
    let h2 = add(&mut s, 2, 5, EXACT, 100, 0);
    assert_eq!(h2, h);
    // A DEL racing a consume of the *same* entry fails with TM_ERR.
    drain(&mut s);
    op(&mut s, 51, 0, TmOp::Del { handle: h2 }).unwrap();
    s.arrive(WireMsg::rndv(5, 9, rvh(4096), 0, 0)).unwrap();
    let c = drain(&mut s);
    assert_eq!(c[0].status, WcStatus::TmRndvIncomplete);
    assert_eq!(
        (c[1].opcode, c[1].status, c[1].wr_id),
        (WcOpcode::TmDel, WcStatus::TmErr, 51)
    );
}

/// rdma-core-tag-matching "TM completion processing": "When larger messages or rendezvous
/// transfers are involved, matching and data transfer completion are distinct events that
/// generate 2 completion events for the same recv_wr_id. While data transfer completions
/// may be arbitrarily delayed depending on message size, matching completion is reported
/// immediately and is always serialized with respect to other matches and the completion
/// of unexpected messages." and "IBV_TM_OP_FIN ... a copy of the original TMH and RVH of
/// the rendezvous request, apart the opcode ... sent either by HW or SW, depending on
/// whether the rendezvous request was handled as expected or unexpected".
#[test]
fn match_completions_are_serialized_and_data_valid_follows() {
    let mut s = srq(4, 8, 4);
    add(&mut s, 1, 5, EXACT, 1 << 20, 0);
    add(&mut s, 2, 6, EXACT, 1 << 20, 0);
    drain(&mut s);
    s.arrive(WireMsg::rndv(5, 0x77, rvh(65536), 0, 0)).unwrap();
    s.arrive(WireMsg::eager(9, 0, 8, 0)).unwrap(); // unexpected
    s.arrive(WireMsg::eager(6, 0, 10_000, 0)).unwrap(); // two packets
    let seq: Vec<_> = std::iter::from_fn(|| s.poll_cq())
        .map(|c| (c.opcode, c.wr_id, c.wc_flags))
        .collect();
    assert_eq!(
        seq,
        vec![
            (WcOpcode::TmRecv, 1, wc_flags::TM_MATCH),
            (WcOpcode::Recv, 1000, 0),
            (WcOpcode::TmRecv, 2, wc_flags::TM_MATCH),
        ]
    );
    assert_eq!(s.pending_transfers(), 2);
    assert!(s.complete_transfer());
    assert!(s.complete_transfer());
    let data: Vec<_> = std::iter::from_fn(|| s.poll_cq())
        .map(|c| (c.opcode, c.wr_id, c.wc_flags, c.byte_len))
        .collect();
    assert_eq!(
        data,
        vec![
            (WcOpcode::TmRecv, 1, wc_flags::TM_DATA_VALID, 65536),
            (WcOpcode::TmRecv, 2, wc_flags::TM_DATA_VALID, 10_000),
        ]
    );
    // One RDMA-Read of the RVH, one FIN: the request's TMH and RVH with opcode FIN.
    assert_eq!(s.reads(), &[rvh(65536)]);
    let (fin_tmh, fin_rvh) = s.fins()[0];
    assert_eq!(s.fins().len(), 1);
    assert_eq!(
        (fin_tmh.opcode, fin_tmh.app_ctx, fin_tmh.tag, fin_rvh),
        (TmOpcode::Fin, 0x77, 5, rvh(65536))
    );
}

/// rdma-core-tag-matching: "IBV_TM_NO_TAG - Send a message without a tag. Such a message
/// will always be treated as unexpected by the receiver TM-SRQ. Any data following the
/// opcode is ignored by the tag matching logic, and the message is delivered in its
/// entirety (including the opcode) to the standard SRQ buffer." A NO_TAG message whose tag
/// field equals a listed tag must not consume it.
#[test]
fn no_tag_ignores_the_tag_field() {
    let mut s = srq(2, 8, 4);
    add(&mut s, 1, 5, EXACT, 64, 0);
    drain(&mut s);
    let mut m = WireMsg::no_tag(12, 0);
    m.tmh = Tmh {
        opcode: TmOpcode::NoTag,
        reserved: [0; 3],
        app_ctx: 1,
        tag: 5,
    };
    s.arrive(m).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!(
        (c.opcode, c.wr_id, c.byte_len),
        (WcOpcode::TmNoTag, 1000, (TMH_LEN + 12) as u32)
    );
    assert_eq!(c.msg.unwrap().tmh.opcode, TmOpcode::NoTag);
    assert_eq!(s.list().len(), 1);
    assert_eq!(s.hw_unexpected(), 0);
}

/// rdma-core-tag-matching: "To reduce explicit synchronization to a minimum, all
/// completions indicate when synchronization is necessary by setting the
/// IBV_WC_TM_SYNC_REQ flag." wire-layouts §C.1: "TM_SYNC_REQ is raised when unexp_in -
/// unexp_out > 0x3fff (MLX5_TM_MAX_SYNC_DIFF)", on the UNEXPECTED completion, so that
/// software reports its count before the 16-bit counts become ambiguous.
#[test]
fn unexpected_completion_asks_for_sync_when_reports_lag_0x4000() {
    let n = 0x4000u32;
    let mut s = srq(2, 8, u64::from(n) + 2);
    let mut flags = Vec::new();
    for _ in 0..n {
        s.arrive(WireMsg::eager(7, 0, 0, 0)).unwrap();
        flags.push(s.poll_cq().unwrap().wc_flags);
    }
    assert!(flags[..n as usize - 1].iter().all(|&f| f == 0));
    assert_eq!(flags[n as usize - 1], wc_flags::TM_SYNC_REQ);
    // It keeps asking until software reports ...
    s.arrive(WireMsg::eager(7, 0, 0, 0)).unwrap();
    assert_eq!(s.poll_cq().unwrap().wc_flags, wc_flags::TM_SYNC_REQ);
    // ... and stops once a report is *posted* ("srq->unexp_out = unexpected_cnt"), before
    // it executes, so a driver does not post one SYNC per message meanwhile.
    op(&mut s, 1, n + 1, TmOp::Sync).unwrap();
    s.arrive(WireMsg::eager(7, 0, 0, 0)).unwrap();
    assert_eq!(s.poll_cq().unwrap().wc_flags, 0);
    let c = drain(&mut s);
    // The SYNC itself executes one message behind: it asks for another report.
    assert_eq!(
        (c[0].opcode, c[0].wc_flags),
        (WcOpcode::TmSync, wc_flags::TM_SYNC_REQ)
    );
}

// ---------------------------------------------------------------------------------------
// The driver
// ---------------------------------------------------------------------------------------

/// A device backend over the model that records every work request and can report
/// unexpected messages the way mlx5 does (wire-layouts §C.1: "UNEXPECTED →
/// IBV_WC_TM_RECV with no MATCH flag") instead of the documented `IBV_WC_RECV`.
struct Dev {
    srq: TmSrq<Carried<&'static str>>,
    posted: Vec<OpsWr>,
    /// Most operations ever outstanding at once.
    peak_ops: u32,
    mlx5_unexpected: bool,
    /// Completes the next data transfer (`TM_DATA_VALID` completion) with this status.
    fail_next_data: Option<WcStatus>,
}

impl TmBackend<&'static str> for Dev {
    type Buf = u32;

    fn buf_len(buf: &u32) -> u32 {
        *buf
    }

    fn caps(&self) -> TmCaps {
        self.srq.caps()
    }

    fn post_op(&mut self, wr: OpsWr, _buf: Option<u32>) -> Result<Option<u32>, PostOpError> {
        let r = self.srq.post_op(wr);
        if r.is_ok() {
            self.posted.push(wr);
            self.peak_ops = self.peak_ops.max(self.srq.ops_outstanding());
        }
        r
    }

    fn poll(&mut self) -> Option<Cqe<Carried<&'static str>>> {
        let c = self.srq.poll_cq()?;
        let opcode = if self.mlx5_unexpected && c.opcode == WcOpcode::Recv {
            WcOpcode::TmRecv
        } else {
            c.opcode
        };
        let data_only = c.opcode == WcOpcode::TmRecv && c.wc_flags & wc_flags::TM_MATCH == 0;
        let (status, flags) = match self.fail_next_data.take() {
            // An error completion: verbs leaves the flags undefined; here they are clear.
            Some(st) if data_only => (st, 0),
            other => {
                self.fail_next_data = other;
                (c.status, c.wc_flags)
            }
        };
        let mut out = Cqe::new(c.wr_id, status, opcode, flags, c.msg);
        out.byte_len = c.byte_len;
        out.tm_info = c.tm_info;
        Some(out)
    }

    fn replenish(&mut self) {
        self.srq.post_srq_recv(u64::MAX);
    }
}

type DD = Driver<&'static str, &'static str, Dev>;

fn dev_driver(caps: TmCaps, mlx5_unexpected: bool) -> DD {
    let mut srq = TmSrq::new(caps, 4096).unwrap();
    for _ in 0..64 {
        srq.post_srq_recv(u64::MAX);
    }
    Driver::with_backend(
        DriverConfig::default(),
        Some(Dev {
            srq,
            posted: Vec::new(),
            peak_ops: 0,
            mlx5_unexpected,
            fail_next_data: None,
        }),
    )
}

fn dev(d: &mut DD) -> &mut TmSrq<Carried<&'static str>> {
    &mut d.hw_mut().unwrap().srq
}

fn settle_dev(d: &mut DD, ev: &mut Vec<Event<&'static str, &'static str>>) {
    loop {
        d.poll(ev);
        let s = dev(d);
        let progressed = s.execute_op();
        if !progressed && s.cq_len() == 0 && d.deferred_ops() == 0 {
            return;
        }
    }
}

/// rdma-core-tag-matching "Managing TM receive buffers": ADD's "input consists of an SGE
/// list, a tag, a mask (matching parameters), and the latest unexpected message count";
/// DEL's "input is an entry handle ... and the latest unexpected message count"; SYNC:
/// "report the number of unexpected messages handled by the SW"; "To reduce explicit
/// synchronization to a minimum, all completions indicate when synchronization is
/// necessary by setting the IBV_WC_TM_SYNC_REQ flag."
#[test]
fn every_operation_carries_the_latest_unexpected_count() {
    let mut d = dev_driver(TmCaps::with_tags(4), false);
    let mut ev = Vec::new();
    let u1 = d.eager(Envelope::new(0, 1, 1), 8, "u1");
    dev(&mut d).arrive(u1).unwrap();
    d.poll(&mut ev);
    assert_eq!(d.sw_unexpected(), 1);
    // ADD stamped 1; executes in sync: enabled.
    let r1 = pending(d.post(RecvSpec::exact(0, 1, 7), 64, "r1").unwrap());
    settle_dev(&mut d, &mut ev);
    assert!(dev(&mut d).list()[0].enabled);
    // u2 reaches hardware, software has not polled it: the cancel's DEL carries 1.
    let u2 = d.eager(Envelope::new(0, 1, 2), 8, "u2");
    dev(&mut d).arrive(u2).unwrap();
    d.cancel(r1).unwrap();
    settle_dev(&mut d, &mut ev);
    assert_eq!(d.sw_unexpected(), 2);
    // u3 reaches hardware before r3's ADD (stamped 2) executes: disabled, SYNC_REQ, SYNC 3.
    let u3 = d.eager(Envelope::new(0, 1, 3), 8, "u3");
    dev(&mut d).arrive(u3).unwrap();
    let _r3 = pending(d.post(RecvSpec::exact(0, 1, 9), 64, "r3").unwrap());
    dev(&mut d).execute_op();
    assert!(!dev(&mut d).list()[0].enabled);
    settle_dev(&mut d, &mut ev);
    assert!(dev(&mut d).list()[0].enabled);
    let posted: Vec<_> = d
        .hw()
        .unwrap()
        .posted
        .iter()
        .map(|w| {
            let kind = match w.op {
                TmOp::Add { .. } => "add",
                TmOp::Del { .. } => "del",
                TmOp::Sync => "sync",
            };
            (kind, w.flags, w.unexpected_cnt)
        })
        .collect();
    assert_eq!(
        posted,
        vec![
            ("add", SIG, 1),
            ("del", SIG, 1),
            // The DEL executed with 1 while hardware had counted u2: SYNC_REQ, SYNC.
            ("sync", SIG, 2),
            ("add", SIG, 2),
            ("sync", SIG, 3)
        ]
    );
    assert!(ev
        .iter()
        .any(|e| matches!(e, Event::Cancelled { recv: "r1", .. })));
    assert_eq!(d.counters().syncs, 2);
    assert_eq!(dev(&mut d).sw_reported(), 3);
}

/// rdma-core-tag-matching: "whenever HW deems a message unexpected, tag matching must be
/// disabled for new tags until SW and HW synchronize. This synchronization is achieved by
/// reporting to HW the number of unexpected messages handled by SW". The stale entry of a
/// receive software took for such a message must leave the list *before* a count that
/// includes the message reaches hardware (otherwise the entry would be enabled and match a
/// second message).
#[test]
fn stale_del_is_posted_before_any_count_including_the_message() {
    let mut d = dev_driver(TmCaps::with_tags(4), false);
    let mut ev = Vec::new();
    let e = Envelope::new(0, 1, 7);
    let m1 = d.eager(e, 8, "m1");
    dev(&mut d).arrive(m1).unwrap();
    pending(d.post(RecvSpec::exact(0, 1, 7), 64, "b1").unwrap());
    dev(&mut d).execute_op(); // disabled (stamped 0, hardware count 1)
    let m2 = d.eager(e, 8, "m2");
    dev(&mut d).arrive(m2).unwrap();
    settle_dev(&mut d, &mut ev);
    let posted = &d.hw().unwrap().posted;
    let first_with_1 = posted.iter().position(|w| w.unexpected_cnt >= 1).unwrap();
    assert!(
        matches!(posted[first_with_1].op, TmOp::Del { handle: 0 }),
        "{posted:?}"
    );
    assert_eq!(
        matches(&ev),
        vec![("b1", "m1", MatchPath::SwArrival)],
        "m2 must not be matched to b1 a second time"
    );
    assert!(dev(&mut d).list().is_empty());
    assert_eq!(d.counters().order_violations, 0);
}

/// The same schedules on a backend that reports unexpected messages as mlx5 does.
/// wire-layouts §C.1: "UNEXPECTED → IBV_WC_TM_RECV with no MATCH flag, and
/// srq->unexp_in++"; rdma-core-tag-matching: "IBV_WC_TM_MATCH - a match was performed",
/// "IBV_WC_TM_DATA_VALID - all data of the matched message has been delivered to memory".
/// A `TM_RECV` with neither flag is an unexpected message for software, not the data
/// completion of an earlier match.
#[test]
fn mlx5_style_unexpected_tm_recv_without_match_is_handled_in_software() {
    let run_model = || {
        let mut d = driver(4);
        let mut ev = Vec::new();
        let e = Envelope::new(0, 1, 7);
        // m1/m2/b1/b2.
        let m1 = d.eager(e, 8, "m1");
        d.wire(m1).unwrap();
        pending(d.post(RecvSpec::exact(0, 1, 7), 64, "b1").unwrap());
        d.hw_mut().unwrap().execute_op();
        let m2 = d.eager(e, 8, "m2");
        d.wire(m2).unwrap();
        pending(d.post(RecvSpec::exact(0, 1, 7), 64, "b2").unwrap());
        d.settle(&mut ev);
        // A multi-packet match in hardware (MATCH, then DATA_VALID) and an unexpected
        // rendezvous taken by a later post.
        pending(d.post(RecvSpec::exact(0, 2, 1), 1 << 20, "big").unwrap());
        d.settle(&mut ev);
        let m3 = d.eager(Envelope::new(0, 2, 1), 10_000, "m3");
        d.wire(m3).unwrap();
        let r = d.rndv(Envelope::new(0, 3, 3), rvh(4096), "rv");
        d.wire(r).unwrap();
        d.settle(&mut ev);
        assert!(d.hw_mut().unwrap().complete_transfer());
        d.settle(&mut ev);
        let late = d.post(RecvSpec::exact(0, 3, 3), 64, "late").unwrap();
        (ev, late, d.counters())
    };
    let run_dev = || {
        let mut d = dev_driver(TmCaps::with_tags(4), true);
        let mut ev = Vec::new();
        let e = Envelope::new(0, 1, 7);
        let m1 = d.eager(e, 8, "m1");
        dev(&mut d).arrive(m1).unwrap();
        pending(d.post(RecvSpec::exact(0, 1, 7), 64, "b1").unwrap());
        dev(&mut d).execute_op();
        let m2 = d.eager(e, 8, "m2");
        dev(&mut d).arrive(m2).unwrap();
        pending(d.post(RecvSpec::exact(0, 1, 7), 64, "b2").unwrap());
        settle_dev(&mut d, &mut ev);
        pending(d.post(RecvSpec::exact(0, 2, 1), 1 << 20, "big").unwrap());
        settle_dev(&mut d, &mut ev);
        let m3 = d.eager(Envelope::new(0, 2, 1), 10_000, "m3");
        dev(&mut d).arrive(m3).unwrap();
        let r = d.rndv(Envelope::new(0, 3, 3), rvh(4096), "rv");
        dev(&mut d).arrive(r).unwrap();
        settle_dev(&mut d, &mut ev);
        assert!(dev(&mut d).complete_transfer());
        settle_dev(&mut d, &mut ev);
        let late = d.post(RecvSpec::exact(0, 3, 3), 64, "late").unwrap();
        (ev, late, d.counters())
    };
    let (ev_model, late_model, c_model) = run_model();
    let (ev_dev, late_dev, c_dev) = run_dev();
    assert_eq!(
        matches(&ev_model),
        vec![
            ("b1", "m1", MatchPath::SwArrival),
            ("b2", "m2", MatchPath::SwArrival),
            ("big", "m3", MatchPath::Hw)
        ]
    );
    assert_eq!(ev_dev, ev_model);
    assert_eq!(late_dev, late_model);
    assert!(matches!(late_dev, PostOutcome::Matched(ref m) if m.sw_rndv == Some(rvh(4096))));
    assert_eq!(c_dev, c_model);
    assert_eq!(c_dev.hw_unexpected, 3);
    assert_eq!(c_dev.order_violations, 0);
}

/// rdma-core-tag-matching: "all completions indicate when synchronization is necessary by
/// setting the IBV_WC_TM_SYNC_REQ flag" — receive completions included (mlx5 sets it on
/// the UNEXPECTED completion, wire-layouts §C.1). A driver that posts no list operation
/// for 0x4000 unexpected messages must report its count when asked.
#[test]
fn driver_reports_its_count_when_a_receive_completion_asks() {
    let mut d = driver(4);
    let mut ev = Vec::new();
    let e = Envelope::new(0, 1, 7);
    // 100 more messages arrive while the SYNC is still queued: it was posted, so no
    // completion asks again and no second SYNC is posted.
    for _ in 0..0x4000 + 100 {
        let m = d.eager(e, 0, "u");
        d.wire(m).unwrap();
        d.poll(&mut ev);
        // Taken by a post at once: no receive is ever offloaded, no ADD carries a count.
        match d.post(RecvSpec::exact(0, 1, 7), 64, "r").unwrap() {
            PostOutcome::Matched(m) => assert_eq!(m.path, MatchPath::SwPost),
            other => panic!("{other:?}"),
        }
        ev.clear();
    }
    let c = d.counters();
    assert_eq!((c.hw_unexpected, c.offloaded), (0x4000 + 100, 0));
    assert_eq!((c.sync_reqs, c.syncs), (1, 1));
    assert_eq!(d.hw().unwrap().pending_ops(), 1);
    // The SYNC (0x4000) executes 100 messages behind; its completion asks again and the
    // driver reports the rest: hardware and software agree.
    d.settle(&mut ev);
    let c = d.counters();
    assert_eq!((c.sync_reqs, c.syncs), (2, 2));
    assert_eq!(d.hw().unwrap().sw_reported(), 0x4000 + 100);
    assert_eq!(d.hw().unwrap().hw_unexpected(), d.sw_unexpected());
}

/// rdma-core-tag-matching: "HW will hold a bounded prefix of Receive tags"; max_num_tags is
/// the "Max number of tagged buffers in a TM-SRQ matching list". Once the list was full, a
/// freed slot must not take a receive posted after a software-resident one of the same
/// class: the matches stay in posting order.
#[test]
fn full_list_then_freed_slot_keeps_posting_order() {
    let mut d = driver(1);
    let mut ev = Vec::new();
    let spec = RecvSpec::exact(0, 1, 7);
    let e = Envelope::new(0, 1, 7);
    let r1 = pending(d.post(spec, 64, "r1").unwrap());
    let r2 = pending(d.post(spec, 64, "r2").unwrap());
    assert_eq!(
        (d.is_offloaded(r1), d.is_offloaded(r2)),
        (Some(true), Some(false))
    );
    d.settle(&mut ev);
    let m = d.eager(e, 8, "m1");
    d.wire(m).unwrap();
    d.settle(&mut ev);
    assert_eq!(d.hw().unwrap().tags_in_use(), 0);
    // The slot is free, but r2 (software) is earlier and of the same class.
    let r3 = pending(d.post(spec, 64, "r3").unwrap());
    assert_eq!(d.is_offloaded(r3), Some(false));
    for m in ["m2", "m3"] {
        let w = d.eager(e, 8, m);
        d.wire(w).unwrap();
    }
    d.settle(&mut ev);
    assert_eq!(
        matches(&ev),
        vec![
            ("r1", "m1", MatchPath::Hw),
            ("r2", "m2", MatchPath::SwArrival),
            ("r3", "m3", MatchPath::SwArrival)
        ]
    );
    // With no software-resident receive left, the next one is offloaded again.
    let r4 = pending(d.post(spec, 64, "r4").unwrap());
    assert_eq!(d.is_offloaded(r4), Some(true));
    let k = d.counters();
    assert_eq!(
        (k.blocked_tags_full, k.blocked_sw_pending, k.offloaded),
        (1, 1, 2)
    );
}

/// rdma-core-tag-matching: "The number of outstanding tag-manipulation operations must not
/// exceed the max_ops capability"; "HW will hold a bounded prefix of Receive tags". A
/// receive that finds every operation slot busy stays in software, and then bounds the
/// prefix for later receives of its class exactly like one that found the list full.
#[test]
fn busy_operation_slots_keep_receives_in_software_in_order() {
    let caps = TmCaps {
        max_num_tags: 8,
        max_ops: 1,
        max_rndv_hdr_size: 64,
    };
    let mut d = dev_driver(caps, false);
    let mut ev = Vec::new();
    let spec = RecvSpec::exact(0, 1, 7);
    let r1 = pending(d.post(spec, 64, "r1").unwrap());
    let r2 = pending(d.post(spec, 64, "r2").unwrap()); // the ADD of r1 is outstanding
    assert_eq!(
        (d.is_offloaded(r1), d.is_offloaded(r2)),
        (Some(true), Some(false))
    );
    settle_dev(&mut d, &mut ev);
    let r3 = pending(d.post(spec, 64, "r3").unwrap()); // slot free, but r2 is earlier
    assert_eq!(d.is_offloaded(r3), Some(false));
    let k = d.counters();
    assert_eq!((k.blocked_ops_busy, k.blocked_sw_pending), (1, 1));
    for m in ["m1", "m2", "m3"] {
        let w = d.eager(Envelope::new(0, 1, 7), 8, m);
        dev(&mut d).arrive(w).unwrap();
    }
    settle_dev(&mut d, &mut ev);
    assert_eq!(
        matches(&ev),
        vec![
            ("r1", "m1", MatchPath::Hw),
            ("r2", "m2", MatchPath::SwArrival),
            ("r3", "m3", MatchPath::SwArrival)
        ]
    );
    // Never more than max_ops operations were outstanding.
    assert_eq!(d.hw().unwrap().peak_ops, 1);
}

/// rdma-core-tag-matching: "The number of outstanding tag-manipulation operations must not
/// exceed the max_ops capability" and DEL "may fail if the associated tag was consumed by
/// an incoming message". A cancel whose DEL still waits for an operation slot when the
/// hardware match is reported must fail at once, and the DEL must never be posted (the
/// handle may name a new entry by then).
#[test]
fn deferred_del_of_a_consumed_tag_is_dropped() {
    let caps = TmCaps {
        max_num_tags: 2,
        max_ops: 1,
        max_rndv_hdr_size: 64,
    };
    let mut d = dev_driver(caps, false);
    let mut ev = Vec::new();
    let r1 = pending(d.post(RecvSpec::exact(0, 1, 7), 64, "r1").unwrap());
    settle_dev(&mut d, &mut ev);
    // r2's ADD takes the only operation slot; r1's DEL waits.
    let r2 = pending(d.post(RecvSpec::exact(0, 2, 8), 64, "r2").unwrap());
    assert_eq!(d.is_offloaded(r2), Some(true));
    assert_eq!(d.cancel(r1), Ok(CancelOutcome::InProgress));
    assert_eq!(d.deferred_ops(), 1);
    let m = d.eager(Envelope::new(0, 1, 7), 8, "m");
    dev(&mut d).arrive(m).unwrap();
    d.poll(&mut ev);
    assert_eq!(matches(&ev), vec![("r1", "m", MatchPath::Hw)]);
    assert_eq!(ev[1], Event::CancelFailed { handle: r1 });
    assert_eq!(d.deferred_ops(), 0);
    settle_dev(&mut d, &mut ev);
    let dels = d
        .hw()
        .unwrap()
        .posted
        .iter()
        .filter(|w| matches!(w.op, TmOp::Del { .. }))
        .count();
    assert_eq!(dels, 0);
    let k = d.counters();
    assert_eq!((k.tm_err_races, k.order_violations), (1, 0));
    // The freed handle is reused by the next ADD without harm.
    let r3 = pending(d.post(RecvSpec::exact(0, 3, 9), 64, "r3").unwrap());
    settle_dev(&mut d, &mut ev);
    assert_eq!(d.is_offloaded(r3), Some(true));
    assert_eq!(dev(&mut d).list().len(), 2);
}

/// The eager path of an offloaded receive whose buffer is too short: the model completes
/// it `IBV_WC_LOC_LEN_ERR` (tag consumed, data cut at the buffer). The driver must still
/// report the match with the message's full length, so that the caller sees the
/// truncation exactly as for a software match (rdma-core-tag-matching: "HW will process
/// and transfer any expected message that matches a tag held in HW").
#[test]
fn truncated_hardware_match_reports_the_full_length() {
    let mut d = driver(2);
    let mut ev = Vec::new();
    pending(d.post(RecvSpec::exact(0, 1, 7), 64, "r").unwrap());
    d.settle(&mut ev);
    let m = d.eager(Envelope::new(0, 1, 7), 100, "m");
    d.wire(m).unwrap();
    d.settle(&mut ev);
    match &ev[..] {
        [Event::Matched(m)] => {
            assert_eq!(
                (m.recv, m.len, m.path, m.data_pending),
                ("r", 100, MatchPath::Hw, false)
            );
        }
        other => panic!("{other:?}"),
    }
}

/// rdma-core-tag-matching: "IBV_WC_TM_DATA_VALID - all data of the matched message has been
/// delivered to memory"; "When larger messages or rendezvous transfers are involved,
/// matching and data transfer completion are distinct events that generate 2 completion
/// events for the same recv_wr_id." A data transfer that fails after the match (the
/// rendezvous RDMA-Read, or a later packet that overflows the tagged buffer) completes
/// with an error status: it must not be reported as valid data.
#[test]
fn failed_data_transfer_after_a_match_is_reported_with_its_status() {
    let mut d = dev_driver(TmCaps::with_tags(4), false);
    let mut ev = Vec::new();
    let a = pending(d.post(RecvSpec::exact(0, 1, 1), 1 << 20, "a").unwrap());
    let b = pending(d.post(RecvSpec::exact(0, 1, 2), 1 << 20, "b").unwrap());
    settle_dev(&mut d, &mut ev);
    let ma = d.rndv(Envelope::new(0, 1, 1), rvh(65536), "ma");
    dev(&mut d).arrive(ma).unwrap();
    let mb = d.rndv(Envelope::new(0, 1, 2), rvh(65536), "mb");
    dev(&mut d).arrive(mb).unwrap();
    settle_dev(&mut d, &mut ev);
    assert!(matches!(&ev[..], [Event::Matched(x), Event::Matched(y)]
        if x.data_pending && y.data_pending && x.handle == a && y.handle == b));
    ev.clear();
    d.hw_mut().unwrap().fail_next_data = Some(WcStatus::LocLenErr);
    assert!(dev(&mut d).complete_transfer());
    assert!(dev(&mut d).complete_transfer());
    settle_dev(&mut d, &mut ev);
    assert_eq!(
        ev,
        vec![
            Event::DataValid {
                handle: a,
                status: WcStatus::LocLenErr
            },
            Event::DataValid {
                handle: b,
                status: WcStatus::Success
            },
        ]
    );
    // Neither completion was taken for an unexpected message.
    assert_eq!(d.counters().hw_unexpected, 0);
}

// ---------------------------------------------------------------------------------------
// List operations and receives that fail
// ---------------------------------------------------------------------------------------
//
// rdma-core-tag-matching documents one failure of a list operation, the DEL's TM_ERR.
// Anything else is a verbs error: `ibv_poll_cq(3)`: "If the status is other than
// IBV_WC_SUCCESS, only the following attributes are valid: wr_id, status, qp_num, and
// vendor_err", and the queue of a failed work request is in the error state, which
// flushes every later one (`TmSrq::inject_op_failure` models both).

/// rdma-core-tag-matching "IBV_WR_TAG_ADD": "A handle that uniquely identifies the entry
/// is returned upon success": a failed ADD created no entry, so the receive is not in
/// hardware — "SW will handle any message that is either unexpected or whose tag is not
/// held in HW". It goes back to software matching in its posting order, offload stops
/// (every later operation is flushed), and nothing is lost or reordered.
#[test]
fn failed_add_returns_the_receive_to_software_in_posting_order() {
    let mut d = driver(4);
    let mut ev = Vec::new();
    let spec = RecvSpec::exact(0, 1, 7);
    let b0 = pending(d.post(spec, 64, "b0").unwrap());
    d.settle(&mut ev);
    d.hw_mut().unwrap().inject_op_failure(WcStatus::GeneralErr);
    let b1 = pending(d.post(spec, 64, "b1").unwrap());
    let b2 = pending(d.post(spec, 64, "b2").unwrap());
    assert_eq!(
        (d.is_offloaded(b1), d.is_offloaded(b2)),
        (Some(true), Some(true))
    );
    d.settle(&mut ev);
    assert!(ev.is_empty(), "{ev:?}");
    // b1's ADD failed, b2's was flushed: neither is in hardware; b0's entry is.
    assert_eq!(
        [b0, b1, b2].map(|h| d.is_offloaded(h)),
        [Some(true), Some(false), Some(false)]
    );
    assert_eq!(d.hw().unwrap().list().len(), 1);
    assert_eq!(d.offload_stopped(), Some(WcStatus::GeneralErr));
    let c = d.counters();
    assert_eq!((c.op_errors, c.offload_stops, c.returned_to_sw), (2, 1, 2));
    // New receives stay in software.
    let b3 = pending(d.post(spec, 64, "b3").unwrap());
    assert_eq!(d.is_offloaded(b3), Some(false));
    assert_eq!(d.counters().blocked_stopped, 1);
    for m in ["m1", "m2", "m3", "m4"] {
        let w = d.eager(Envelope::new(0, 1, 7), 8, m);
        d.wire(w).unwrap();
    }
    d.settle(&mut ev);
    assert_eq!(
        matches(&ev),
        [
            ("b0", "m1", MatchPath::Hw),
            ("b1", "m2", MatchPath::SwArrival),
            ("b2", "m3", MatchPath::SwArrival),
            ("b3", "m4", MatchPath::SwArrival)
        ]
    );
    assert_eq!(d.counters().order_violations, 0);
}

/// rdma-core-tag-matching "IBV_WR_TAG_DEL": "the operation may fail if the associated tag
/// was consumed by an incoming message. In this case IBV_WC_TM_ERR status will be returned
/// in WC." A DEL failing for another reason leaves the entry where it was: the cancel
/// fails (resolved, not left hanging) and the receive stays pending in hardware, where a
/// later message still matches it. Once offload stopped, a cancel posts nothing and fails
/// at the next poll.
#[test]
fn failed_del_resolves_the_cancel_and_keeps_the_receive() {
    let mut d = driver(4);
    let mut ev = Vec::new();
    let a = pending(d.post(RecvSpec::exact(0, 1, 1), 64, "a").unwrap());
    let b = pending(d.post(RecvSpec::exact(0, 1, 2), 64, "b").unwrap());
    d.settle(&mut ev);
    d.hw_mut().unwrap().inject_op_failure(WcStatus::LocQpOpErr);
    assert!(matches!(d.cancel(a), Ok(CancelOutcome::InProgress)));
    d.settle(&mut ev);
    assert_eq!(ev, vec![Event::CancelFailed { handle: a }]);
    assert_eq!(d.is_offloaded(a), Some(true));
    assert_eq!(d.offload_stopped(), Some(WcStatus::LocQpOpErr));
    ev.clear();
    assert!(matches!(d.cancel(b), Ok(CancelOutcome::InProgress)));
    assert_eq!(d.hw().unwrap().pending_ops(), 0);
    d.poll(&mut ev);
    assert_eq!(ev, vec![Event::CancelFailed { handle: b }]);
    ev.clear();
    // Both receives still complete: nothing lost.
    for (e, m) in [
        (Envelope::new(0, 1, 2), "mb"),
        (Envelope::new(0, 1, 1), "ma"),
    ] {
        let w = d.eager(e, 8, m);
        d.wire(w).unwrap();
    }
    d.settle(&mut ev);
    assert_eq!(
        matches(&ev),
        [("b", "mb", MatchPath::Hw), ("a", "ma", MatchPath::Hw)]
    );
    let c = d.counters();
    assert_eq!((c.hw_cancels, c.del_errors, c.order_violations), (2, 2, 0));
}

/// A cancel whose receive's ADD fails: the receive never was in hardware, so the cancel
/// succeeds (its DEL, flushed, resolves nothing).
#[test]
fn cancel_of_a_receive_whose_add_fails_succeeds() {
    let mut d = driver(4);
    let mut ev = Vec::new();
    d.hw_mut().unwrap().inject_op_failure(WcStatus::GeneralErr);
    let a = pending(d.post(RecvSpec::exact(0, 1, 1), 64, "a").unwrap());
    assert_eq!(d.is_offloaded(a), Some(true));
    assert!(matches!(d.cancel(a), Ok(CancelOutcome::InProgress)));
    d.settle(&mut ev);
    assert_eq!(
        ev,
        vec![Event::Cancelled {
            handle: a,
            recv: "a"
        }]
    );
    assert_eq!(d.is_offloaded(a), None);
    assert_eq!(d.hw().unwrap().tags_in_use(), 0);
    assert_eq!(d.counters().returned_to_sw, 1);
    assert_eq!(d.engine_counters().posted_depth, 0);
}

/// `ibv_poll_cq(3)`: on error "only ... wr_id, status, qp_num, and vendor_err" are valid.
/// With the model's error completions scrambled (opcode `IBV_WC_RECV`, every flag, no
/// message), a failed match and a failed ADD are still told apart from unexpected
/// messages by their `wr_id` (tagged buffer, list operation): the receive whose match
/// failed completes in error, the unexpected count is not touched.
#[test]
fn error_completions_are_attributed_by_wr_id_alone() {
    let mut d = driver(4);
    let mut ev = Vec::new();
    d.hw_mut().unwrap().set_scramble_errors(true);
    let r = pending(d.post(RecvSpec::exact(0, 1, 1), 16, "r").unwrap());
    pending(d.post(RecvSpec::exact(0, 1, 2), 64, "s").unwrap());
    d.settle(&mut ev);
    // An eager message longer than r's buffer: LOC_LEN_ERR on r's tagged buffer.
    let m = d.eager(Envelope::new(0, 1, 1), 100, "m");
    d.wire(m).unwrap();
    d.settle(&mut ev);
    assert_eq!(d.counters().hw_unexpected, 0);
    assert_eq!(d.sw_unexpected(), 0);
    assert!(
        matches!(&ev[..], [Event::RecvFailed { handle, recv: "r", status: WcStatus::LocLenErr }] if *handle == r),
        "{ev:?}"
    );
    assert_eq!(d.is_offloaded(r), None);
    ev.clear();
    // A failed ADD, scrambled: still the ADD's.
    d.hw_mut().unwrap().inject_op_failure(WcStatus::GeneralErr);
    let t = pending(d.post(RecvSpec::exact(0, 1, 3), 64, "t").unwrap());
    d.settle(&mut ev);
    assert_eq!(d.is_offloaded(t), Some(false));
    assert_eq!(d.counters().hw_unexpected, 0);
    for (e, m) in [
        (Envelope::new(0, 1, 2), "ms"),
        (Envelope::new(0, 1, 3), "mt"),
    ] {
        let w = d.eager(e, 8, m);
        d.wire(w).unwrap();
    }
    d.settle(&mut ev);
    assert_eq!(
        matches(&ev),
        [
            ("s", "ms", MatchPath::Hw),
            ("t", "mt", MatchPath::SwArrival)
        ]
    );
    let c = d.counters();
    assert_eq!(
        (c.recv_errors, c.returned_to_sw, c.order_violations),
        (1, 1, 0)
    );
}

/// rdma-core-tag-matching: "While wr_id identifies the tag manipulation operation itself,
/// the recv_wr_id field is used to identify the tagged buffer in receive completions." The
/// driver's list operations, tagged buffers and the model's receive-queue buffers use
/// disjoint `wr_id` spaces, so a completion names its work request without its opcode.
#[test]
fn wr_id_spaces_of_operations_tagged_and_queue_buffers_are_disjoint() {
    use tagmatch_engine::offload::wr_id::{self, WrKind};
    assert_eq!(wr_id::kind(u64::MAX), WrKind::Rq(wr_id::ID_MASK));
    assert_eq!(wr_id::kind(wr_id::rq(3)), WrKind::Rq(3));
    assert_eq!(wr_id::kind(wr_id::op(3)), WrKind::Op(3));
    assert_eq!(wr_id::kind(3), WrKind::Tagged(3));
    assert_eq!(wr_id::kind(1 << 62), WrKind::Reserved(0));
    assert_eq!(wr_id::tagged(1 << 62), None);
    let mut d = dev_driver(TmCaps::with_tags(4), false);
    let mut ev = Vec::new();
    let hs: Vec<_> = (0..3)
        .map(|t| pending(d.post(RecvSpec::exact(0, 1, t), 64, "r").unwrap()))
        .collect();
    assert!(matches!(d.cancel(hs[1]), Ok(CancelOutcome::InProgress)));
    settle_dev(&mut d, &mut ev);
    let posted = &d.hw().unwrap().posted;
    let mut seen = std::collections::HashSet::new();
    let mut adds = Vec::new();
    for wr in posted {
        assert!(matches!(wr_id::kind(wr.wr_id), WrKind::Op(_)), "{wr:?}");
        assert!(seen.insert(wr.wr_id));
        if let TmOp::Add { recv_wr_id, .. } = wr.op {
            adds.push(wr_id::kind(recv_wr_id));
        }
    }
    assert_eq!(
        adds,
        hs.iter().map(|h| WrKind::Tagged(h.0)).collect::<Vec<_>>()
    );
    assert_eq!(posted.len(), 4);
}

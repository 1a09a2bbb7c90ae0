//! Unit tests of the TM-SRQ model against the verbs contract (rdma-core
//! `Documentation/tag_matching.md`, wire-layouts §B–C).

mod offload_common;

use offload_common::{drain, op, srq, SIG};
use tagmatch_engine::tm_srq::*;
use tagmatch_wire::tm::{Rvh, TmOpcode};

fn add(s: &mut TmSrq<u32>, wr_id: u64, tag: u64, mask: u64, cnt: u32) -> u32 {
    s.post_op(OpsWr {
        wr_id,
        flags: SIG,
        unexpected_cnt: cnt,
        op: TmOp::Add {
            recv_wr_id: wr_id,
            tag,
            mask,
            buf_len: 1 << 20,
        },
    })
    .unwrap()
    .unwrap()
}

#[test]
fn creation_needs_tags_and_ops() {
    assert!(TmSrq::<u32>::new(TmCaps::with_tags(0), 4096).is_none());
    assert!(TmSrq::<u32>::new(
        TmCaps {
            max_num_tags: 1,
            max_ops: 0,
            max_rndv_hdr_size: 64
        },
        4096
    )
    .is_none());
    let s = TmSrq::<u32>::new(TmCaps::with_tags(3), 4096).unwrap();
    assert_eq!(s.caps().max_ops, 8);
}

#[test]
fn add_returns_handles_and_respects_max_num_tags() {
    let mut s = srq(2, 8, 16);
    let a = add(&mut s, 1, 5, u64::MAX, 0);
    let b = add(&mut s, 2, 6, u64::MAX, 0);
    assert_ne!(a, b);
    assert_eq!(
        op(
            &mut s,
            3,
            0,
            TmOp::Add {
                recv_wr_id: 3,
                tag: 7,
                mask: u64::MAX,
                buf_len: 0
            }
        ),
        Err(PostOpError::TagsFull)
    );
    let cqes = drain(&mut s);
    assert_eq!(cqes.len(), 2);
    assert!(cqes
        .iter()
        .all(|c| c.opcode == WcOpcode::TmAdd && c.status == WcStatus::Success && c.wc_flags == 0));
    let l = s.list();
    assert_eq!(
        l.iter().map(|e| e.recv_wr_id).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert!(l.iter().all(|e| e.enabled));
}

#[test]
fn max_ops_counts_until_completion_is_polled() {
    let mut s = srq(4, 2, 16);
    op(&mut s, 1, 0, TmOp::Sync).unwrap();
    op(&mut s, 2, 0, TmOp::Sync).unwrap();
    assert_eq!(op(&mut s, 3, 0, TmOp::Sync), Err(PostOpError::OpsFull));
    assert!(s.execute_op());
    // Executed but not polled: still outstanding.
    assert_eq!(op(&mut s, 3, 0, TmOp::Sync), Err(PostOpError::OpsFull));
    let c = s.poll_cq().unwrap();
    assert_eq!((c.wr_id, c.opcode), (1, WcOpcode::TmSync));
    op(&mut s, 3, 0, TmOp::Sync).unwrap();
    // Unsignaled operations free their slot when executed and produce no completion.
    let mut s = srq(4, 1, 16);
    s.post_op(OpsWr {
        wr_id: 9,
        flags: 0,
        unexpected_cnt: 0,
        op: TmOp::Sync,
    })
    .unwrap();
    assert!(s.execute_op());
    assert_eq!(s.cq_len(), 0);
    op(&mut s, 10, 0, TmOp::Sync).unwrap();
}

#[test]
fn first_entry_in_list_order_wins_with_masks() {
    let mut s = srq(4, 8, 16);
    add(&mut s, 1, 0x10, 0xf0, 0); // any tag 0x1?
    add(&mut s, 2, 0x12, u64::MAX, 0); // exactly 0x12
    drain(&mut s);
    s.arrive(WireMsg::eager(0x12, 77, 8, 500)).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!(c.opcode, WcOpcode::TmRecv);
    assert_eq!(c.wr_id, 1);
    assert_eq!(c.wc_flags, wc_flags::TM_MATCH | wc_flags::TM_DATA_VALID);
    assert_eq!(
        c.tm_info,
        Some(TmInfo {
            tag: 0x12,
            priv_: 77
        })
    );
    assert_eq!(c.msg.unwrap().payload, 500);
    s.arrive(WireMsg::eager(0x12, 0, 8, 501)).unwrap();
    assert_eq!(s.poll_cq().unwrap().wr_id, 2);
    assert!(s.list().is_empty());
}

#[test]
fn multi_packet_eager_gives_match_then_data_valid() {
    let mut s = srq(2, 4, 16);
    add(&mut s, 1, 3, u64::MAX, 0);
    drain(&mut s);
    s.arrive(WireMsg::eager(3, 0, 10_000, 1)).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!((c.wr_id, c.wc_flags), (1, wc_flags::TM_MATCH));
    assert!(s.poll_cq().is_none());
    assert!(s.complete_transfer());
    let c = s.poll_cq().unwrap();
    assert_eq!(
        (c.wr_id, c.wc_flags, c.byte_len),
        (1, wc_flags::TM_DATA_VALID, 10_000)
    );
    assert!(s.fins().is_empty());
}

#[test]
fn rndv_within_buffer_reads_and_sends_fin() {
    let mut s = srq(2, 4, 16);
    add(&mut s, 1, 3, u64::MAX, 0);
    drain(&mut s);
    let rvh = Rvh {
        va: 0xdead_0000,
        rkey: 42,
        len: 65536,
    };
    s.arrive(WireMsg::rndv(3, 9, rvh, 0, 1)).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!(
        (c.status, c.wc_flags),
        (WcStatus::Success, wc_flags::TM_MATCH)
    );
    assert!(s.fins().is_empty());
    assert!(s.complete_transfer());
    let c = s.poll_cq().unwrap();
    assert_eq!(c.wc_flags, wc_flags::TM_DATA_VALID);
    assert_eq!(s.reads(), &[rvh]);
    let (tmh, frvh) = s.fins()[0];
    assert_eq!(
        (tmh.opcode, tmh.tag, tmh.app_ctx, frvh),
        (TmOpcode::Fin, 3, 9, rvh)
    );
}

#[test]
fn rndv_into_small_buffer_is_incomplete_with_headers() {
    let mut s = srq(2, 4, 16);
    s.post_op(OpsWr {
        wr_id: 1,
        flags: SIG,
        unexpected_cnt: 0,
        op: TmOp::Add {
            recv_wr_id: 1,
            tag: 3,
            mask: u64::MAX,
            buf_len: 100,
        },
    })
    .unwrap();
    drain(&mut s);
    let rvh = Rvh {
        va: 1,
        rkey: 2,
        len: 101,
    };
    s.arrive(WireMsg::rndv(3, 0, rvh, 0, 1)).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!(c.status, WcStatus::TmRndvIncomplete);
    assert_eq!(c.wc_flags, wc_flags::TM_MATCH);
    assert_eq!(c.byte_len, 32);
    assert_eq!(c.msg.unwrap().rvh, Some(rvh));
    assert_eq!(s.pending_transfers(), 0);
    assert!(s.fins().is_empty());
    // Too large a request header is the sender's error.
    let big = WireMsg::rndv(3, 0, rvh, 33, 2);
    assert!(matches!(
        s.arrive(big),
        Err(ArriveError::RndvHdrTooLarge(_))
    ));
}

#[test]
fn unmatched_goes_to_srq_and_counts_no_tag_does_not() {
    let mut s = srq(2, 4, 16);
    s.arrive(WireMsg::eager(3, 0, 8, 1)).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!((c.opcode, c.wr_id), (WcOpcode::Recv, 1000));
    assert_eq!(c.byte_len, 24);
    assert_eq!(s.hw_unexpected(), 1);
    s.arrive(WireMsg::no_tag(4, 2)).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!(c.opcode, WcOpcode::TmNoTag);
    assert_eq!(s.hw_unexpected(), 1);
    // No receive-queue buffer: RNR, nothing changes.
    let mut s = TmSrq::<u32>::new(TmCaps::with_tags(1), 4096).unwrap();
    assert!(matches!(
        s.arrive(WireMsg::eager(3, 0, 8, 1)),
        Err(ArriveError::Rnr(_))
    ));
    assert_eq!(s.hw_unexpected(), 0);
}

#[test]
fn new_tags_are_disabled_until_counts_agree() {
    let mut s = srq(4, 8, 16);
    // m1 goes unexpected; software has not seen it when it appends b1 (count 0).
    s.arrive(WireMsg::eager(7, 0, 8, 1)).unwrap();
    add(&mut s, 11, 7, u64::MAX, 0);
    assert!(s.execute_op());
    assert!(!s.list()[0].enabled);
    // m2 must not match b1: it goes unexpected too.
    s.arrive(WireMsg::eager(7, 0, 8, 2)).unwrap();
    assert_eq!(s.hw_unexpected(), 2);
    let cqes: Vec<_> = std::iter::from_fn(|| s.poll_cq()).collect();
    let ops: Vec<_> = cqes.iter().map(|c| (c.opcode, c.wc_flags)).collect();
    assert_eq!(
        ops,
        vec![
            (WcOpcode::Recv, 0),
            (WcOpcode::TmAdd, wc_flags::TM_SYNC_REQ),
            (WcOpcode::Recv, 0)
        ]
    );
    // A SYNC with a count still behind keeps it disabled and asks again.
    op(&mut s, 20, 1, TmOp::Sync).unwrap();
    let c = drain(&mut s);
    assert_eq!(c[0].wc_flags, wc_flags::TM_SYNC_REQ);
    assert!(!s.list()[0].enabled);
    op(&mut s, 21, 2, TmOp::Sync).unwrap();
    let c = drain(&mut s);
    assert_eq!((c[0].opcode, c[0].wc_flags), (WcOpcode::TmSync, 0));
    assert_eq!(s.sw_reported(), 2);
    assert!(s.list()[0].enabled);
    s.arrive(WireMsg::eager(7, 0, 8, 3)).unwrap();
    assert_eq!(s.poll_cq().unwrap().wr_id, 11);
    // Entries appended while in sync stay enabled across later unexpected messages.
    add(&mut s, 12, 8, u64::MAX, 2);
    drain(&mut s);
    s.arrive(WireMsg::eager(9, 0, 8, 4)).unwrap();
    s.poll_cq().unwrap();
    assert!(s.list()[0].enabled);
    // Without the phase rule (fault injection) the new tag would match.
    let mut s = srq(4, 8, 16);
    s.set_honor_phase(false);
    s.arrive(WireMsg::eager(7, 0, 8, 1)).unwrap();
    add(&mut s, 11, 7, u64::MAX, 0);
    assert!(s.execute_op());
    assert!(s.list()[0].enabled);
}

#[test]
fn del_after_consume_is_tm_err_and_handles_are_not_reused_early() {
    let mut s = srq(1, 8, 16);
    let h = add(&mut s, 1, 5, u64::MAX, 0);
    drain(&mut s);
    // DEL posted, then the message wins the race before the DEL executes.
    op(&mut s, 2, 0, TmOp::Del { handle: h }).unwrap();
    s.arrive(WireMsg::eager(5, 0, 8, 1)).unwrap();
    // The consumed entry's handle is still referenced: no new ADD fits.
    assert_eq!(
        op(
            &mut s,
            3,
            0,
            TmOp::Add {
                recv_wr_id: 3,
                tag: 6,
                mask: u64::MAX,
                buf_len: 0
            }
        ),
        Err(PostOpError::TagsFull)
    );
    assert!(s.execute_op());
    let c: Vec<_> = std::iter::from_fn(|| s.poll_cq()).collect();
    assert_eq!(c[0].opcode, WcOpcode::TmRecv);
    assert_eq!(
        (c[1].opcode, c[1].status, c[1].wr_id),
        (WcOpcode::TmDel, WcStatus::TmErr, 2)
    );
    assert_eq!(s.tags_in_use(), 0);
    // A DEL that wins removes the entry.
    let h = add(&mut s, 4, 6, u64::MAX, 0);
    op(&mut s, 5, 0, TmOp::Del { handle: h }).unwrap();
    let c = drain(&mut s);
    assert_eq!(
        (c[1].opcode, c[1].status),
        (WcOpcode::TmDel, WcStatus::Success)
    );
    assert!(s.list().is_empty());
    assert_eq!(
        op(&mut s, 6, 0, TmOp::Del { handle: 0 }),
        Err(PostOpError::BadHandle)
    );
}

#[test]
fn counts_are_compared_on_16_bits_like_the_mlx5_wqe() {
    let mut s = srq(2, 8, 16);
    s.arrive(WireMsg::eager(7, 0, 8, 1)).unwrap();
    s.poll_cq().unwrap();
    // hw count 1; a report of 1 + 2^16 is the same 16-bit value: in sync.
    add(&mut s, 1, 7, u64::MAX, 1 + (1 << 16));
    let c = drain(&mut s);
    assert_eq!(c[0].wc_flags, 0);
    assert!(s.list()[0].enabled);
    // A report of 2 is not.
    add(&mut s, 2, 8, u64::MAX, 2);
    let c = drain(&mut s);
    assert_eq!(c[0].wc_flags, wc_flags::TM_SYNC_REQ);
    assert!(!s.list()[1].enabled);
    assert!(s.disabled_entries_form_a_suffix());
}

#[test]
fn arrivals_from_wire_bytes() {
    use tagmatch_wire::tm::{TmRepr, Tmh};
    // A RNDV request as bytes on the wire (big-endian TMH + RVH + 8 bytes of data).
    let rvh = Rvh {
        va: 0x1122_3344_5566_7788,
        rkey: 0x99,
        len: 4096,
    };
    let repr = TmRepr {
        tmh: Tmh {
            opcode: TmOpcode::Rndv,
            reserved: [0; 3],
            app_ctx: 0xabcd,
            tag: 0x0102_0304_0506_0708,
        },
        rvh: Some(rvh),
        payload: &[7; 8],
    };
    let mut bytes = vec![0; repr.buffer_len()];
    repr.emit(&mut bytes).unwrap();
    let parsed = TmRepr::parse_bytes(&bytes).unwrap();
    let msg = WireMsg::from_repr(&parsed, 5u32);
    assert_eq!(msg.wire_len(), 40);
    let mut s = srq(2, 4, 16);
    add(&mut s, 1, 0x0102_0304_0000_0000, !0xffff_ffffu64, 0);
    drain(&mut s);
    s.arrive(msg).unwrap();
    let c = s.poll_cq().unwrap();
    assert_eq!(c.wr_id, 1);
    assert_eq!(
        c.tm_info,
        Some(TmInfo {
            tag: 0x0102_0304_0506_0708,
            priv_: 0xabcd
        })
    );
    assert!(s.complete_transfer());
    assert_eq!(s.fins()[0].1, rvh);
}

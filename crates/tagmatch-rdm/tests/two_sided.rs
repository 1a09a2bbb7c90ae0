//! Two-sided subprotocols: exact packet sequences, data, completions; tagged and untagged.
mod common;
use common::*;
use tagmatch_rdm::testing::Faults;
use tagmatch_rdm::{OpError, OpKind, Protocol, SendOpts};
use tagmatch_wire::efa::{flags, PacketType as T};

fn ty(tagged: bool, msg: T, tag: T) -> T {
    if tagged {
        tag
    } else {
        msg
    }
}

fn run(
    tagged: bool,
    len: usize,
    ca: tagmatch_rdm::Config,
    cb: tagmatch_rdm::Config,
    opts: SendOpts,
) -> (tagmatch_rdm::testing::Fabric, usize, usize, Msg) {
    let (mut fab, a, b, ab, ba) = warm_pair(3, ca, cb, false);
    let _ = ba;
    let data = payload(len, len as u8);
    let m = message(&mut fab, (a, b, ab), tagged, data.clone(), opts, len, false);
    check_ok(&m, &data, tagged);
    assert!(fab.wire_errors.is_empty(), "{:?}", fab.wire_errors);
    (fab, a, b, m)
}

#[test]
fn eager_both_kinds() {
    for tagged in [true, false] {
        let (fab, a, _, m) = run(tagged, 150, small_cfg(), small_cfg(), SendOpts::default());
        let t = ty(tagged, T::EagerMsgRtm, T::EagerTagRtm);
        assert_eq!(fab.sequence(), vec![(a, t)]);
        // After the handshake: connid header, no raw address.
        assert_eq!(
            fab.log[0].flags & (flags::CONNID_HDR | flags::REQ_OPT_RAW_ADDR_HDR),
            flags::CONNID_HDR
        );
        let _ = m;
    }
}

#[test]
fn medium_both_kinds() {
    for tagged in [true, false] {
        let (fab, a, _, m) = run(tagged, 600, small_cfg(), small_cfg(), SendOpts::default());
        let t = ty(tagged, T::MediumMsgRtm, T::MediumTagRtm);
        assert_eq!(fab.sequence(), vec![(a, t); 3]);
        assert_eq!(fab.nodes[a].ep.protocol_of(m.send), Some(Protocol::Medium));
    }
}

/// RTM (220 bytes), then 4 windows of 4, 4, 4 and 1 CTSDATA (896 bytes per window).
fn longcts_seq(a: usize, b: usize, rtm: T) -> Vec<(usize, T)> {
    let mut v = vec![(a, rtm)];
    for n in [4, 4, 4, 1] {
        v.push((b, T::Cts));
        v.extend(std::iter::repeat_n((a, T::CtsData), n));
    }
    v
}

#[test]
fn longcts_both_kinds_with_flow_control() {
    for tagged in [true, false] {
        let (fab, a, b, m) = run(tagged, 3000, small_cfg(), small_cfg(), SendOpts::default());
        let t = ty(tagged, T::LongctsMsgRtm, T::LongctsTagRtm);
        assert_eq!(fab.sequence(), longcts_seq(a, b, t));
        assert_eq!(fab.nodes[a].ep.protocol_of(m.send), Some(Protocol::LongCts));
    }
}

#[test]
fn longcts_when_peer_has_no_rdma_read() {
    let cb = feats(|f| f.rdma_read = false);
    let (fab, a, b, m) = run(true, 5000, small_cfg(), cb, SendOpts::default());
    assert_eq!(fab.nodes[a].ep.protocol_of(m.send), Some(Protocol::LongCts));
    assert_eq!(fab.sequence()[0], (a, T::LongctsTagRtm));
    assert!(fab.types(b, a).iter().all(|t| *t == T::Cts));
}

#[test]
fn longread_both_kinds() {
    for tagged in [true, false] {
        let (fab, a, b, m) = run(tagged, 5000, small_cfg(), small_cfg(), SendOpts::default());
        let t = ty(tagged, T::LongreadMsgRtm, T::LongreadTagRtm);
        assert_eq!(fab.sequence(), vec![(a, t), (b, T::Eor)]);
        assert_eq!(
            fab.nodes[a].ep.protocol_of(m.send),
            Some(Protocol::LongRead)
        );
    }
}

fn runt_cfg() -> tagmatch_rdm::Config {
    tagmatch_rdm::Config {
        runt_size: 500,
        ..small_cfg()
    }
}

#[test]
fn runtread_both_kinds() {
    for tagged in [true, false] {
        let (fab, a, b, m) = run(tagged, 5000, runt_cfg(), small_cfg(), SendOpts::default());
        let t = ty(tagged, T::RuntreadMsgRtm, T::RuntreadTagRtm);
        assert_eq!(fab.sequence(), vec![(a, t), (a, t), (a, t), (b, T::Eor)]);
        assert_eq!(
            fab.nodes[a].ep.protocol_of(m.send),
            Some(Protocol::RuntRead)
        );
    }
}

#[test]
fn runtread_needs_the_peer_feature() {
    let cb = feats(|f| f.runt = false);
    let (fab, a, _, m) = run(true, 5000, runt_cfg(), cb, SendOpts::default());
    assert_eq!(
        fab.nodes[a].ep.protocol_of(m.send),
        Some(Protocol::LongRead)
    );
}

fn nack_run(tagged: bool, ca: tagmatch_rdm::Config, faults: Faults) {
    let (mut fab, a, b, ab, _) = warm_pair(5, ca, small_cfg(), false);
    fab.faults = faults;
    let data = payload(5000, 9);
    let m = message(
        &mut fab,
        (a, b, ab),
        tagged,
        data.clone(),
        SendOpts::default(),
        5000,
        false,
    );
    check_ok(&m, &data, tagged);
    let seq = fab.sequence();
    let lc = ty(tagged, T::LongctsMsgRtm, T::LongctsTagRtm);
    let first_nack = seq.iter().position(|x| *x == (b, T::ReadNack)).unwrap();
    assert_eq!(seq[first_nack + 1], (a, lc));
    assert_eq!(seq[first_nack + 2], (b, T::Cts));
    let rec = &fab.log[first_nack + 1];
    assert_ne!(rec.flags & flags::REQ_READ_NACK, 0);
    // No payload: the mandatory header plus the 4-byte connid header.
    assert_eq!(rec.len, if tagged { 32 } else { 24 } + 4);
    assert_eq!(fab.nodes[b].ep.stats().read_nacks, 1);
    // The sender's completion reports the subprotocol that moved the data.
    assert_eq!(fab.nodes[a].ep.protocol_of(m.send), Some(Protocol::LongCts));
    assert!(fab.wire_errors.is_empty(), "{:?}", fab.wire_errors);
}

#[test]
fn longread_registration_failure_falls_back_with_read_nack() {
    for tagged in [true, false] {
        nack_run(
            tagged,
            small_cfg(),
            Faults {
                register_fail_nodes: &[1],
                ..Faults::default()
            },
        );
    }
}

#[test]
fn longread_rdma_read_failure_falls_back_with_read_nack() {
    nack_run(
        true,
        small_cfg(),
        Faults {
            rdma_read_fail_nodes: &[1],
            ..Faults::default()
        },
    );
}

#[test]
fn runtread_nack_resumes_after_the_runt_bytes() {
    for tagged in [true, false] {
        nack_run(
            tagged,
            runt_cfg(),
            Faults {
                register_fail_nodes: &[1],
                ..Faults::default()
            },
        );
    }
}

#[test]
fn sender_registration_failure_uses_longcts() {
    let (mut fab, a, b, ab, _) = warm_pair(6, small_cfg(), small_cfg(), false);
    fab.faults.register_fail_nodes = &[0];
    let data = payload(5000, 2);
    let m = message(
        &mut fab,
        (a, b, ab),
        true,
        data.clone(),
        SendOpts::default(),
        5000,
        false,
    );
    check_ok(&m, &data, true);
    assert_eq!(fab.sequence()[0], (a, T::LongctsTagRtm));
    assert_eq!(fab.nodes[a].ep.protocol_of(m.send), Some(Protocol::LongCts));
}

#[test]
fn read_failure_without_read_nack_is_an_error_on_the_receiver() {
    let cb = feats(|f| f.read_nack = false);
    let (mut fab, a, b, ab, _) = warm_pair(6, small_cfg(), cb, false);
    fab.faults.register_fail_nodes = &[1];
    let m = message(
        &mut fab,
        (a, b, ab),
        true,
        payload(5000, 1),
        SendOpts::default(),
        5000,
        false,
    );
    assert_eq!(done(&m.cb, m.recv).result, Err(OpError::RdmaFailed));
    assert!(m.ca.is_empty(), "the sender never gets its EOR");
    assert!(!fab.types(b, a).contains(&T::ReadNack));
}

#[test]
fn delivery_complete_variants() {
    let cases = [
        (150, T::DcEagerMsgRtm, T::DcEagerTagRtm, 1),
        (600, T::DcMediumMsgRtm, T::DcMediumTagRtm, 3),
    ];
    for tagged in [true, false] {
        for (len, m_ty, t_ty, n) in cases {
            let dc = SendOpts {
                delivery_complete: true,
                ..SendOpts::default()
            };
            let (fab, a, b, _) = run(tagged, len, small_cfg(), small_cfg(), dc);
            let mut want = vec![(a, ty(tagged, m_ty, t_ty)); n];
            want.push((b, T::Receipt));
            assert_eq!(fab.sequence(), want);
        }
        let dc = SendOpts {
            delivery_complete: true,
            ..SendOpts::default()
        };
        let (fab, a, b, _) = run(tagged, 3000, small_cfg(), small_cfg(), dc);
        let mut want = longcts_seq(a, b, ty(tagged, T::DcLongctsMsgRtm, T::DcLongctsTagRtm));
        want.push((b, T::Receipt));
        assert_eq!(fab.sequence(), want);
    }
}

#[test]
fn dc_send_completes_only_after_the_receipt() {
    let (mut fab, a, b, ab, _) = warm_pair(8, small_cfg(), small_cfg(), false);
    let dc = SendOpts {
        delivery_complete: true,
        ..SendOpts::default()
    };
    // Non-DC eager completes without a receive posted (transmit complete) …
    let s0 = fab
        .ep(a)
        .tsend(ab, 1, vec![1; 10], SendOpts::default())
        .unwrap();
    // … DC eager does not.
    let s1 = fab.ep(a).tsend(ab, 2, vec![2; 10], dc).unwrap();
    fab.drive();
    let ca = fab.completions(a);
    assert_eq!(done(&ca, s0).result, Ok(()));
    assert!(ca.iter().all(|c| c.op != s1));
    assert!(!fab.types(b, a).contains(&T::Receipt));
    let r = fab.ep(b).trecv(None, 2, 0, 10).unwrap();
    fab.drive();
    assert_eq!(fab.types(b, a), vec![T::Receipt]);
    assert_eq!(done(&fab.completions(a), s1).result, Ok(()));
    assert_eq!(done(&fab.completions(b), r).data, vec![2; 10]);
}

#[test]
fn dc_to_a_peer_without_the_feature_is_an_error() {
    let cb = feats(|f| f.delivery_complete = false);
    let (mut fab, a, b, ab, _) = pair(9, small_cfg(), cb, false);
    let dc = SendOpts {
        delivery_complete: true,
        ..SendOpts::default()
    };
    let s = fab.ep(a).tsend(ab, 1, vec![1; 10], dc).unwrap();
    fab.drive();
    // The handshake is provoked with a zero-length EAGER_RTW (libfabric's trigger).
    assert_eq!(
        fab.sequence(),
        vec![(a, T::EagerRtw), (b, T::Handshake), (a, T::Handshake)]
    );
    let c = fab.completions(a);
    assert_eq!(
        done(&c, s).result,
        Err(OpError::DeliveryCompleteUnsupported)
    );
}

#[test]
fn truncation_is_an_error_completion_with_the_prefix() {
    for (len, proto) in [
        (150, Protocol::Eager),
        (600, Protocol::Medium),
        (3000, Protocol::LongCts),
        (5000, Protocol::LongRead),
    ] {
        for tagged in [true, false] {
            let (mut fab, a, b, ab, _) = warm_pair(10, small_cfg(), small_cfg(), true);
            let data = payload(len, 3);
            let m = message(
                &mut fab,
                (a, b, ab),
                tagged,
                data.clone(),
                SendOpts::default(),
                100,
                false,
            );
            assert_eq!(fab.nodes[a].ep.protocol_of(m.send), Some(proto));
            assert_eq!(done(&m.ca, m.send).result, Ok(()));
            let r = done(&m.cb, m.recv);
            assert_eq!(
                r.result,
                Err(OpError::Truncated {
                    msg_len: len as u64,
                    buf_len: 100
                })
            );
            assert_eq!(r.data, data[..100]);
        }
    }
}

#[test]
fn unexpected_messages_of_every_protocol() {
    for (len, cfg) in [
        (150, small_cfg()),
        (600, small_cfg()),
        (3000, small_cfg()),
        (5000, small_cfg()),
        (5000, runt_cfg()),
    ] {
        for tagged in [true, false] {
            let (mut fab, a, b, ab, _) = warm_pair(11, cfg, small_cfg(), true);
            let data = payload(len, 5);
            let m = message(
                &mut fab,
                (a, b, ab),
                tagged,
                data.clone(),
                SendOpts::default(),
                len,
                true,
            );
            check_ok(&m, &data, tagged);
        }
    }
}

#[test]
fn cq_data_reaches_the_receiver() {
    for len in [150, 600, 3000, 5000] {
        let opts = SendOpts {
            cq_data: Some(0xCAFE_BABE_1234_5678),
            ..SendOpts::default()
        };
        let (_, _, _, m) = run(true, len, small_cfg(), small_cfg(), opts);
        assert_eq!(done(&m.cb, m.recv).cq_data, Some(0xCAFE_BABE_1234_5678));
    }
}

#[test]
fn msg_id_wraparound_keeps_send_order() {
    let cfg = tagmatch_rdm::Config {
        initial_msg_id: u32::MAX - 4,
        ..small_cfg()
    };
    for seed in 0..8 {
        let (mut fab, a, b, ab, _) = pair(seed, cfg, cfg, true);
        let sizes = [10, 600, 40, 3000, 5, 700, 1, 150, 5000, 20];
        let mut sends = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            sends.push(
                fab.ep(a)
                    .tsend(ab, 5, payload(n, i as u8), SendOpts::default())
                    .unwrap(),
            );
        }
        fab.drive();
        let recvs: Vec<_> = (0..sizes.len())
            .map(|_| fab.ep(b).trecv(None, 5, 0, 8000).unwrap())
            .collect();
        fab.drive();
        assert_eq!(
            fab.nodes[a].ep.next_msg_id(ab),
            Some((u32::MAX - 4).wrapping_add(10))
        );
        let cb = fab.completions(b);
        for (i, r) in recvs.iter().enumerate() {
            let c = done(&cb, *r);
            assert_eq!(c.len, sizes[i] as u64, "seed {seed} message {i}");
            assert!(c.data[..sizes[i]] == payload(sizes[i], i as u8)[..]);
        }
        assert_eq!(fab.completions(a).len(), sizes.len());
    }
}

#[test]
fn directed_and_masked_receives() {
    let mut fab = tagmatch_rdm::testing::Fabric::new(12);
    let a = fab.add(small_cfg());
    let c = fab.add(small_cfg());
    let b = fab.add(small_cfg());
    let ab = fab.connect(a, b);
    let cb = fab.connect(c, b);
    let ba = fab.connect(b, a);
    let bc = fab.connect(b, c);
    let from_c = fab.ep(b).trecv(Some(bc), 0x1200, 0xff, 64).unwrap();
    let from_a = fab.ep(b).trecv(Some(ba), 0x1200, 0xff, 64).unwrap();
    fab.ep(a)
        .tsend(ab, 0x1234, vec![0xa; 8], SendOpts::default())
        .unwrap();
    fab.ep(c)
        .tsend(cb, 0x12ff, vec![0xc; 8], SendOpts::default())
        .unwrap();
    fab.drive();
    let done_b = fab.completions(b);
    assert_eq!(done(&done_b, from_a).tag, 0x1234);
    assert_eq!(done(&done_b, from_a).data[..8], [0xa; 8]);
    assert_eq!(done(&done_b, from_c).tag, 0x12ff);
    assert_eq!(done(&done_b, from_c).src, Some(bc));
}

#[test]
fn cancel_a_posted_receive() {
    let (mut fab, _, b, _, _) = pair(13, small_cfg(), small_cfg(), false);
    let r = fab.ep(b).trecv(None, 1, 0, 8).unwrap();
    fab.ep(b).cancel(r).unwrap();
    fab.drive();
    let c = fab.completions(b);
    assert_eq!(done(&c, r).result, Err(OpError::Canceled));
    assert_eq!(done(&c, r).kind, OpKind::Recv);
    assert!(fab.ep(b).cancel(r).is_err());
}

#[test]
fn partial_sends_are_resumed() {
    for seed in 0..4 {
        let (mut fab, a, b, ab, _) = warm_pair(seed, small_cfg(), small_cfg(), true);
        fab.faults.send_again = 400;
        for (len, tagged) in [(600, true), (1000, false), (3000, true), (5000, false)] {
            let data = payload(len, 1);
            let m = message(
                &mut fab,
                (a, b, ab),
                tagged,
                data.clone(),
                SendOpts::default(),
                len,
                false,
            );
            check_ok(&m, &data, tagged);
        }
        assert!(fab.nodes[a].ep.stats().tx_again > 0);
    }
}

#[test]
fn sends_queued_behind_a_handshake_keep_their_order() {
    for seed in 0..8 {
        let (mut fab, a, b, ab, _) = pair(seed, small_cfg(), small_cfg(), true);
        let dc = SendOpts {
            delivery_complete: true,
            ..SendOpts::default()
        };
        // The DC send waits for b's handshake; the later plain sends must not overtake it.
        let first = fab.ep(a).send(ab, payload(10, 1), dc).unwrap();
        fab.ep(a)
            .send(ab, payload(20, 2), SendOpts::default())
            .unwrap();
        fab.ep(a)
            .send(ab, payload(3000, 3), SendOpts::default())
            .unwrap();
        let r: Vec<_> = (0..3)
            .map(|_| fab.ep(b).recv(None, 4000).unwrap())
            .collect();
        fab.drive();
        let cb = fab.completions(b);
        assert_eq!(done(&cb, r[0]).len, 10, "seed {seed}");
        assert_eq!(done(&cb, r[1]).len, 20);
        assert_eq!(done(&cb, r[2]).len, 3000);
        assert_eq!(done(&fab.completions(a), first).result, Ok(()));
    }
}

#[test]
fn cts_window_honors_credit_request_and_receiver_window() {
    // Sender asks for 2 packets per CTS; the receiver allows up to 4: windows of 2.
    let ca = tagmatch_rdm::Config {
        tx_min_credits: 2,
        ..small_cfg()
    };
    let (fab, a, b, _) = run(true, 1500, ca, small_cfg(), SendOpts::default());
    // 1500 = 220 in the RTM + 1280 in windows of 448 (2 × 224): 3 CTS, 2 + 2 + 2 CTSDATA.
    let mut want = vec![(a, T::LongctsTagRtm)];
    for n in [2, 2, 2] {
        want.push((b, T::Cts));
        want.extend(std::iter::repeat_n((a, T::CtsData), n));
    }
    assert_eq!(fab.sequence(), want);
    // Sender asks for 32; the receiver allows 1: one packet per CTS.
    let cb = tagmatch_rdm::Config {
        rx_window_packets: 1,
        ..small_cfg()
    };
    let (fab, a, b, _) = run(false, 1500, small_cfg(), cb, SendOpts::default());
    // 228 bytes in the untagged RTM, then 1272 = 5 × 224 + 152: six 1-packet windows.
    let mut want = vec![(a, T::LongctsMsgRtm)];
    for _ in 0..6 {
        want.push((b, T::Cts));
        want.push((a, T::CtsData));
    }
    assert_eq!(fab.sequence(), want);
}

#[test]
fn probe_mprobe_mrecv() {
    for len in [150, 600, 3000, 5000] {
        let (mut fab, a, b, ab, ba) = warm_pair(14, small_cfg(), small_cfg(), true);
        assert_eq!(fab.ep(b).tprobe(None, 9, 0), None);
        let opts = SendOpts {
            cq_data: Some(5),
            ..SendOpts::default()
        };
        let s = fab.ep(a).tsend(ab, 9, payload(len, 7), opts).unwrap();
        fab.ep(a)
            .send(ab, payload(10, 8), SendOpts::default())
            .unwrap();
        fab.drive();
        let info = fab.ep(b).tprobe(Some(ba), 8, 1).unwrap();
        assert_eq!(
            (info.src, info.tag, info.len, info.cq_data),
            (ba, 9, len as u64, Some(5))
        );
        assert_eq!(fab.ep(b).probe(None).unwrap().len, 10);
        let (claim, info2) = fab.ep(b).tmprobe(None, 9, 0).unwrap();
        assert_eq!(info2, info);
        // Claimed: neither a probe nor a receive sees it any more.
        assert_eq!(fab.ep(b).tprobe(None, 9, 0), None);
        let other = fab.ep(b).trecv(None, 9, 0, len).unwrap();
        let r = fab.ep(b).mrecv(claim, len).unwrap();
        assert!(fab.ep(b).mrecv(claim, len).is_err());
        fab.drive();
        let cb = fab.completions(b);
        assert!(done(&cb, r).data == payload(len, 7));
        assert!(cb.iter().all(|c| c.op != other));
        assert_eq!(done(&fab.completions(a), s).result, Ok(()));
        let (c2, _) = fab.ep(b).mprobe(Some(ba)).unwrap();
        let r2 = fab.ep(b).mrecv(c2, 10).unwrap();
        fab.drive();
        assert_eq!(done(&fab.completions(b), r2).data, payload(10, 8));
    }
}

/// The unexpected-message budget bounds what the receiver buffers; a message it refuses is
/// not lost: the endpoint answers `Rx::Refused` (receiver not ready), the device hands it in
/// again later, and every message arrives, in send order, once receives are posted.
#[test]
fn budget_refuses_and_redelivery_loses_nothing() {
    for (seed, reorder) in [(11, false), (12, true), (13, true)] {
        let cb = tagmatch_rdm::Config {
            max_unexpected_msgs: 3,
            max_unexpected_bytes: 2000,
            ..small_cfg()
        };
        let (mut fab, a, b, ab, _) = warm_pair(seed, small_cfg(), cb, reorder);
        // Eager (100 B) and medium (600 B, 3 packets) messages, 4 times the budget.
        let sizes: Vec<usize> = (0..12)
            .map(|i| if i % 3 == 2 { 600 } else { 100 })
            .collect();
        let sends: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let data = payload(len, i as u8);
                fab.ep(a)
                    .tsend(ab, i as u64, data, SendOpts::default())
                    .unwrap()
            })
            .collect();
        for _ in 0..5 {
            fab.drive();
            let st = fab.nodes[b].ep.matching_stats();
            // Out-of-order arrivals enter only within the budget of 3; the engine goes
            // over it only for predecessors of those (so that they are not stuck).
            assert!(st.reorder_depth <= 3, "budget exceeded: {st:?}");
        }
        assert!(fab.refused > 0, "seed {seed}: the budget refused nothing");
        assert!(fab.nodes[b].ep.stats().rx_refused > 0);
        // Every send completed at the sender (the device delivered it) before the receiver
        // took it: the case that must not lose data.
        let ca = fab.completions(a);
        for s in &sends {
            assert_eq!(done(&ca, *s).result, Ok(()));
        }
        // ANY_TAG receives get the messages in send order.
        let mut got = Vec::new();
        for _ in 0..sizes.len() {
            let r = fab.ep(b).trecv(None, 0, u64::MAX, 1000).unwrap();
            for _ in 0..20 {
                fab.drive();
                let cs = fab.completions(b);
                if let Some(c) = cs.iter().find(|c| c.op == r) {
                    got.push((c.tag, c.data[..c.len as usize].to_vec()));
                    break;
                }
            }
        }
        let want: Vec<(u64, Vec<u8>)> = sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| (i as u64, payload(len, i as u8)))
            .collect();
        assert_eq!(got, want, "seed {seed}");
        assert_eq!(fab.nodes[b].ep.stats().rx_reorder_rejected, 0);
    }
}

/// Successors that arrive first fill the budget and wait for their predecessor, which
/// matches no posted receive: the predecessor must still get in (refusing it for ever would
/// leave the peer stuck). Reordered fabric, many seeds.
#[test]
fn held_successors_never_lock_out_their_predecessor() {
    for seed in 0..60 {
        let cb = tagmatch_rdm::Config {
            max_unexpected_msgs: 2,
            ..small_cfg()
        };
        let (mut fab, a, b, ab, _) = warm_pair(seed, small_cfg(), cb, true);
        let r1 = fab.ep(b).trecv(None, 1, 0, 64).unwrap();
        let r2 = fab.ep(b).trecv(None, 2, 0, 64).unwrap();
        for tag in 0..3u64 {
            fab.ep(a)
                .tsend(ab, tag, payload(64, tag as u8), SendOpts::default())
                .unwrap();
        }
        let mut done_ops = Vec::new();
        for _ in 0..30 {
            fab.drive();
            done_ops.extend(fab.completions(b).into_iter().map(|c| c.op));
            if done_ops.contains(&r1) && done_ops.contains(&r2) {
                break;
            }
        }
        assert!(
            done_ops.contains(&r1) && done_ops.contains(&r2),
            "seed {seed}: receives for tags 1 and 2 stuck ({} refusals)",
            fab.refused
        );
        let r0 = fab.ep(b).trecv(None, 0, 0, 64).unwrap();
        fab.drive();
        let cs = fab.completions(b);
        let c0 = done(&cs, r0);
        assert_eq!(
            &c0.data[..c0.len as usize],
            &payload(64, 0)[..],
            "seed {seed}"
        );
    }
}

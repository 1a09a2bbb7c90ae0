//! Review 20: protocol conformance of the endpoint against efa-rdm-protocol-v4 (duplicated
//! and non-conforming packets, feature negotiation, connid, limits).
mod common;
#[path = "common/pump.rs"]
mod pump;
use common::*;
use pump::*;
use tagmatch_rdm::testing::Fabric;
use tagmatch_rdm::{Config, OpKind, SendOpts, Transmit};
use tagmatch_wire::efa::{extra, flags, Field, PacketType as T, RawAddr, RawAddrHdr, Repr, RmaIov};

/// [`pump`] between `a` and `b`, delivering the first packet of type `ty` from `a`
/// twice (a duplicated segment).
fn pump_doubling_first(fab: &mut Fabric, a: usize, b: usize, ty: T) -> Seen {
    let mut first = true;
    pump(fab, [a, b], &mut |from, bytes| {
        if from == a && ty_of(bytes) == ty && first {
            first = false;
            return vec![bytes.to_vec(), bytes.to_vec()];
        }
        vec![bytes.to_vec()]
    })
}

/// efa-rdm-protocol-v4 §3.2 (medium): "because the EFA device does not guarantee ordered
/// delivery, the MEDIUM_RTM packets of same message can arrive in a different order.
/// Therefore, the recipent of MEDIUM_RTM packets needs `seg_offset` to put the data in the
/// correct location in the receive buffer"; §3.2 (eager, step 4): the receiver makes "sure
/// the received data is in the application's receive buffer" before it completes. A
/// segment delivered twice must not stand in for a segment not yet received: the receive
/// completes only once every byte of the message is there.
#[test]
fn duplicated_medium_segment_does_not_complete_the_receive_early() {
    let (mut fab, a, b, ab, _) = warm_pair(2001, small_cfg(), small_cfg(), false);
    let data = payload(900, 3);
    let recv = fab.ep(b).recv(None, 1024).unwrap();
    let send = fab
        .ep(a)
        .send(ab, data.clone(), SendOpts::default())
        .unwrap();
    let seen = pump_doubling_first(&mut fab, a, b, T::MediumMsgRtm);
    assert!(
        seen.delivered
            .iter()
            .filter(|d| d.1 == T::MediumMsgRtm)
            .count()
            >= 4
    );
    let cb = fab.completions(b);
    let r = done(&cb, recv);
    assert_eq!(r.result, Ok(()));
    assert!(
        r.data[..900] == data[..],
        "the receive completed with a hole"
    );
    assert_eq!(done(&fab.completions(a), send).result, Ok(()));
    assert_eq!(fab.ep(b).in_flight(), (0, 0, 0));
    assert_eq!(
        fab.ep(b).stats().rx_duplicate_data,
        1,
        "the copy is counted"
    );
}

/// efa-rdm-protocol-v4 §3.2 (long-CTS): "After receiving all the CTSDATA packets it was
/// expecting, the receiver will recalculate how many bytes it can handle and send another
/// CTS packet"; table 3.7: `seg_offset` places each CTSDATA's data. A CTSDATA delivered
/// twice must not count as one not yet received.
#[test]
fn duplicated_ctsdata_does_not_complete_the_receive_early() {
    // No RDMA read on the receiver: the sender uses long-CTS.
    let cb = Config {
        features: tagmatch_rdm::Features {
            rdma_read: false,
            ..small_cfg().features
        },
        ..small_cfg()
    };
    let (mut fab, a, b, ab, _) = warm_pair(2002, small_cfg(), cb, false);
    let data = payload(3000, 5);
    let recv = fab.ep(b).recv(None, 3000).unwrap();
    let send = fab
        .ep(a)
        .send(ab, data.clone(), SendOpts::default())
        .unwrap();
    let seen = pump_doubling_first(&mut fab, a, b, T::CtsData);
    assert!(seen.delivered.contains(&(a, T::LongctsMsgRtm)));
    let cb = fab.completions(b);
    let r = done(&cb, recv);
    assert_eq!(r.result, Ok(()));
    assert!(r.data == data, "the receive completed with a hole");
    assert_eq!(done(&fab.completions(a), send).result, Ok(()));
    assert_eq!(fab.ep(b).in_flight(), (0, 0, 0));
    assert_eq!(
        fab.ep(b).stats().rx_duplicate_data,
        1,
        "the copy is counted"
    );
}

/// A LONGREAD_MSGRTM from `from` (node `a`, peer `ab` at `b` is `ba`), hand-built: a peer
/// that uses long-read although the receiver never advertised RDMA read.
fn longread_rtm(fab: &mut Fabric, a: usize, b: usize, len: u64) -> Vec<u8> {
    let ab = fab.connect(a, b);
    let msg_id = fab.ep(a).next_msg_id(ab).unwrap();
    let iov = [RmaIov::new(0x7f00_0000_0000, len, 0xabc)];
    let iov_bytes = RmaIov::slice_as_bytes(&iov).to_vec();
    let mut r = Repr::new(T::LongreadMsgRtm)
        .with(Field::MsgId, msg_id as u64)
        .with(Field::MsgLength, len)
        .with(Field::SendId, 0)
        .with(Field::ReadIovCount, 1);
    r.connid = Some(fab.nodes[a].ep.addr().qkey);
    let r = Repr {
        payload: &iov_bytes,
        ..r
    };
    let mut buf = vec![0; r.buffer_len()];
    r.emit(&mut buf).unwrap();
    buf
}

/// efa-rdm-protocol-v4 §4.1: RDMA read "is defined as an extra feature because there is a
/// set of requirements (firmware, EFA kernel module and rdma-core) to be met before an
/// endpoint can use the RDMA read capability"; wire-layouts §A.2: LONGREAD types are only
/// used "after the peer's handshake advertises RDMA_READ". An endpoint that did not
/// advertise bit 0 cannot read: given a LONGREAD_RTM anyway, it must not ask its device
/// for an RDMA read, and falls back as §4.7 describes for a receiver "unable to register
/// a memory region for the RDMA read operation": a READ_NACK (the sender advertises
/// READ_NACK), then long-CTS.
#[test]
fn a_receiver_without_rdma_read_never_issues_one() {
    let cb = Config {
        features: tagmatch_rdm::Features {
            rdma_read: false,
            ..small_cfg().features
        },
        ..small_cfg()
    };
    let (mut fab, a, b, _ab, ba) = warm_pair(2003, small_cfg(), cb, false);
    // `a` advertises READ_NACK (§4.7, extra feature 6).
    assert!(fab
        .ep(b)
        .peer_handshake(ba)
        .unwrap()
        .extra_info
        .has(extra::FEATURE_READ_NACK));
    let recv = fab.ep(b).recv(None, 8192).unwrap();
    let pkt = longread_rtm(&mut fab, a, b, 8192);
    fab.ep(b).handle_packet(Some(ba), &pkt);
    let mut nacks = 0;
    let seen = pump(&mut fab, [b, a], &mut |from, bytes| {
        if from == b && ty_of(bytes) == T::ReadNack {
            nacks += 1;
            // Not delivered: `a` has no such send.
            return vec![];
        }
        vec![bytes.to_vec()]
    });
    assert_eq!(
        seen.rdma_reads, 0,
        "an endpoint without RDMA read issued one"
    );
    assert_eq!(nacks, 1, "no READ_NACK for the long-read it cannot do");
    // The receive still waits for the LONGCTS_RTM of the fallback (§4.7).
    assert!(fab.completions(b).iter().all(|c| c.op != recv));
    assert_eq!(fab.ep(b).in_flight().1, 1);
}

/// efa-rdm-protocol-v4 §4.4: "the receiver needs to know the full address of the sender
/// … EFA's full address consists of: GID, QPN and CONNID. Currently, the EFA device will
/// report the Address Handle Number (AHN) and QPN of a received packet. Because the GID can
/// be obtained from AHN, the only unknown part is CONNID." When the device reported the
/// sender, a REQ whose raw-address header names another GID/QPN does not come from that
/// address: the endpoint must not insert it (§2.2 inserts the raw address only for a
/// sender the device cannot report) nor answer it there.
#[test]
fn a_raw_address_naming_another_qp_than_the_device_reported_is_not_inserted() {
    let (mut fab, a, b, _ab, ba) = warm_pair(2004, small_cfg(), small_cfg(), false);
    let before = fab.ep(b).stats();
    let spoof = RawAddr {
        gid: [9; 16],
        qpn: 77,
        qkey: 0x5555_5555,
        next: 0,
    };
    let mut r = Repr::new(T::EagerMsgRtm).with(Field::MsgId, 0);
    r.raw_addr = Some(RawAddrHdr::new(spoof));
    let r = Repr {
        payload: b"spoof",
        ..r
    };
    let mut buf = vec![0; r.buffer_len()];
    r.emit(&mut buf).unwrap();
    // The device reports `a` (its address handle) as the sender.
    fab.ep(b).handle_packet(Some(ba), &buf);
    assert!(
        fab.ep(b).lookup_peer(&[9; 16], 77).is_none(),
        "an address the device did not report was inserted"
    );
    while let Some(t) = fab.ep(b).poll_transmit() {
        if let Transmit::Send { dest, .. } = t {
            assert_ne!(
                (dest.gid, dest.qpn),
                ([9; 16], 77),
                "answered a third party"
            );
        }
    }
    let after = fab.ep(b).stats();
    assert_eq!(after.rx_connid_mismatch, before.rx_connid_mismatch + 1);
    let _ = a;
}

/// efa-rdm-protocol-v4 §3.2 (medium): "In principal, the medium message subprotocol can be
/// used on messages of any size … The exact size threshold for the medium message protocol
/// to be used is up to the implementation to decide" — the sender's, not the receiver's. A
/// receiver with a posted receive takes a medium message above its own threshold (here
/// 2 MiB, libfabric's `FI_EFA_INTER_MAX_MEDIUM_MESSAGE_SIZE` raised by the sender) rather
/// than dropping it while the sender completes.
#[test]
fn a_medium_message_above_the_receivers_threshold_is_received() {
    let ca = Config {
        max_medium_size: 4 << 20,
        ..Config::default()
    };
    let (mut fab, a, b, ab, _) = warm_pair(2005, ca, Config::default(), false);
    let data = payload(2 << 20, 9);
    let recv = fab.ep(b).recv(None, 2 << 20).unwrap();
    let send = fab
        .ep(a)
        .send(ab, data.clone(), SendOpts::default())
        .unwrap();
    fab.drive();
    assert_eq!(
        fab.ep(a).protocol_of(send),
        Some(tagmatch_rdm::Protocol::Medium)
    );
    assert_eq!(done(&fab.completions(a), send).result, Ok(()));
    let cb = fab.completions(b);
    let r = done(&cb, recv);
    assert_eq!((r.kind, r.result), (OpKind::Recv, Ok(())));
    assert!(r.data == data);
    assert_eq!(fab.ep(b).stats().rx_invalid, 0);
}

/// wire-layouts §A.2: "Types 1 and 2 are logged as retired and raise an EQ error … Any
/// other type (including 6, 131, 142–144 and 147) hits `default`, which raises EQ error
/// `FI_EFA_ERR_INVALID_PKT_TYPE`"; §A.1: "A receiver only rejects version < 4". Such a
/// packet, from a known peer in the middle of a transfer, is dropped and counted: no
/// operation is created, completed or disturbed.
#[test]
fn retired_unknown_and_unsupported_types_are_dropped_and_counted() {
    let (mut fab, a, b, ab, ba) = warm_pair(2006, small_cfg(), small_cfg(), false);
    let data = payload(3000, 7);
    let recv = fab.ep(b).recv(None, 3000).unwrap();
    let send = fab
        .ep(a)
        .send(ab, data.clone(), SendOpts::default())
        .unwrap();
    let qkey = fab.nodes[a].ep.addr().qkey;
    let mut junk: Vec<Vec<u8>> = [1u8, 2, 6, 12, 13, 77, 131, 142, 143, 144, 147, 148, 255]
        .iter()
        .map(|&t| {
            let mut v = vec![t, 4, 0x00, 0x80];
            v.extend_from_slice(&qkey.to_le_bytes());
            v.resize(64, 0);
            v
        })
        .collect();
    // A real EAGER_MSGRTM of protocol version 3.
    let mut r = Repr::new(T::EagerMsgRtm).with(Field::MsgId, 1000);
    r.connid = Some(qkey);
    let mut v3 = vec![0; r.buffer_len()];
    r.emit(&mut v3).unwrap();
    v3[1] = 3;
    junk.push(v3);
    let before = fab.ep(b).stats();
    for p in &junk {
        assert_eq!(
            fab.ep(b).handle_packet(Some(ba), p),
            tagmatch_rdm::Rx::Consumed
        );
    }
    let after = fab.ep(b).stats();
    let drops = |s: tagmatch_rdm::Stats| {
        s.rx_parse_errors + s.rx_invalid + s.rx_unknown_op + s.rx_connid_mismatch
    };
    let dropped = drops(after) - drops(before);
    assert_eq!(dropped, junk.len() as u64);
    assert_eq!(fab.ep(b).in_flight(), (0, 1, 0));
    assert!(!fab.ep(b).has_transmits());
    fab.drive();
    assert_eq!(done(&fab.completions(a), send).result, Ok(()));
    let cb = fab.completions(b);
    assert_eq!(cb.len(), 1);
    assert!(done(&cb, recv).data == data);
    let _ = flags::CONNID_HDR;
}

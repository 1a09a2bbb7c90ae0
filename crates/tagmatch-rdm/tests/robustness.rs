//! Handshake details, connid (QP collision), stale ids, and hostile input.
mod common;
use common::*;
use quickcheck::{quickcheck, TestResult};
use tagmatch_rdm::testing::{Fabric, XorShift};
use tagmatch_rdm::{Config, OpError, SendOpts};
use tagmatch_wire::efa::{
    extra, flags, ExtraInfo, Field, Packet, PacketType as T, RawAddr, RawAddrHdr, Repr, RmaIov,
};

#[test]
fn handshake_headers_and_features() {
    let cb = Config {
        host_id: 0x0123_4567_89ab_cdef,
        device_version: 0xEFA0,
        ..small_cfg()
    };
    let (mut fab, a, b, ab, _) = pair(30, small_cfg(), cb, false);
    fab.record_bytes = true;
    fab.ep(b).recv(None, 8).unwrap();
    fab.ep(a).send(ab, vec![1], SendOpts::default()).unwrap();
    fab.drive();
    let hs = fab.log.iter().find(|r| r.pkt_type == T::Handshake).unwrap();
    let pkt = Packet::new_checked(&hs.bytes[..]).unwrap();
    // CONNID, HOST_ID and DEVICE_VERSION (wire-layouts §A.5: always send DEVICE_VERSION).
    assert_eq!(
        pkt.flags(),
        flags::CONNID_HDR | flags::HANDSHAKE_HOST_ID_HDR | flags::HANDSHAKE_DEVICE_VERSION_HDR
    );
    assert_eq!(pkt.get(Field::NextraP3), Some(4));
    assert_eq!(pkt.device_version(), Some(0xEFA0));
    assert_eq!(pkt.host_id(), Some(0x0123_4567_89ab_cdef));
    assert_eq!(pkt.connid(), Some(fab.nodes[b].ep.addr().qkey));
    assert_eq!(pkt.extra_info().unwrap().word(0), cb.features.word());
    let seen = fab.ep(a).peer_handshake(ab).unwrap();
    assert_eq!(seen.device_version, Some(0xEFA0));
    for bit in [0, 1, 3, 4, 5, 6] {
        assert!(seen.extra_info.has(bit), "bit {bit}");
    }
    assert!(!seen.extra_info.has(extra::REQUEST_CONSTANT_HEADER_LENGTH));
    // One handshake per direction, however many messages follow.
    for _ in 0..5 {
        fab.ep(b).recv(None, 8).unwrap();
        fab.ep(a).send(ab, vec![1], SendOpts::default()).unwrap();
    }
    fab.drive();
    assert_eq!(fab.types(b, a), vec![T::Handshake]);
}

#[test]
fn unknown_extra_bits_are_kept() {
    let (mut fab, a, _, ab, _) = pair(31, small_cfg(), small_cfg(), false);
    let mut r = Repr::new(T::Handshake);
    let mut ei = ExtraInfo::with_words(2);
    ei.set(extra::FEATURE_PEER_ERROR, true);
    ei.set(70, true);
    ei.set(extra::FEATURE_RDMA_READ, true);
    r.handshake.extra_info = ei;
    r.handshake.device_version = Some(0xEFA1);
    r.connid = Some(fab.nodes[1].ep.addr().qkey);
    let mut buf = vec![0; r.buffer_len()];
    r.emit(&mut buf).unwrap();
    fab.ep(a).handle_packet(Some(ab), &buf);
    let hs = fab.ep(a).peer_handshake(ab).unwrap();
    assert!(hs.extra_info.has(70) && hs.extra_info.has(9) && hs.extra_info.has(0));
    assert_eq!(hs.extra_info.words(), 2);
}

fn req_flags_after_handshake(cb: Config) -> u16 {
    let (mut fab, a, b, ab, ba) = warm_pair(32, small_cfg(), cb, false);
    let _ = (b, ba);
    fab.ep(b).recv(None, 8).unwrap();
    fab.ep(a).send(ab, vec![1; 8], SendOpts::default()).unwrap();
    fab.drive();
    fab.log[0].flags
}

#[test]
fn raw_address_connid_and_constant_header_requests() {
    let both = flags::CONNID_HDR | flags::REQ_OPT_RAW_ADDR_HDR;
    // Default peer: asks for connid.
    assert_eq!(
        req_flags_after_handshake(small_cfg()) & both,
        flags::CONNID_HDR
    );
    // Peer without the connid request: neither.
    let no_connid = feats(|f| f.request_connid_header = false);
    assert_eq!(req_flags_after_handshake(no_connid) & both, 0);
    // Peer asking for constant header length: the raw address stays.
    let constant = feats(|f| f.request_constant_header_length = true);
    assert_eq!(
        req_flags_after_handshake(constant) & both,
        flags::REQ_OPT_RAW_ADDR_HDR
    );
}

#[test]
fn handshake_send_failures_do_not_fail_the_application() {
    let (mut fab, a, b, ab, ba) = pair(33, small_cfg(), small_cfg(), true);
    fab.faults.handshake_error = 1000;
    for i in 0..10 {
        let data = payload(100 + 300 * i, i as u8);
        let m = message(
            &mut fab,
            (a, b, ab),
            i % 2 == 0,
            data.clone(),
            SendOpts::default(),
            5000,
            false,
        );
        check_ok(&m, &data, i % 2 == 0);
    }
    let _ = ba;
    assert!(fab.nodes[b].ep.stats().handshake_send_errors > 0);
    assert!(fab.ep(a).peer_handshake(ab).is_none());
}

/// A new process that reuses b's GID and QPN (efa-rdm-protocol-v4 §4.4, "QP collision") is
/// told apart by its connid: the device reports b's address handle, but the raw address in
/// its REQ names an endpoint not in the address book, which §2.2 says to insert ("the peer
/// can get the endpoint's raw address from REQ packet header, then insert the raw address
/// to its address book"), as libfabric does when its reverse lookup by (AHN, QPN, connid)
/// fails. Later packets carry its connid header and find it by (GID, QPN, connid). Only a
/// connid that names no peer, on a packet without a raw address, is dropped.
#[test]
fn qp_collision_packets_are_told_apart_by_connid() {
    let (mut fab, a, b, ab, ba) = warm_pair(34, small_cfg(), small_cfg(), false);
    fab.record_bytes = true;
    let old = fab.nodes[b].ep.addr();
    let c = fab.add_with_addr(
        small_cfg(),
        RawAddr {
            qkey: old.qkey ^ 0xdead_beef,
            ..old
        },
    );
    let ca = fab.connect(c, a);
    let r = fab.ep(a).recv(None, 64).unwrap();
    fab.ep(c)
        .send(ca, vec![7; 10], SendOpts::default())
        .unwrap();
    fab.drive();
    let pc = fab
        .ep(a)
        .lookup_peer_exact(&old.gid, old.qpn, old.qkey ^ 0xdead_beef)
        .expect("the new process was inserted from its raw address");
    assert_ne!(pc, ab);
    let got = fab.completions(a);
    assert_eq!(done(&got, r).data[..10], [7; 10]);
    assert_eq!(done(&got, r).src, Some(pc));
    assert_eq!(fab.types(a, c), vec![T::Handshake]);
    assert_eq!(fab.nodes[a].ep.stats().rx_connid_mismatch, 0);
    // After a's handshake, c sends the connid header instead of its raw address; the device
    // still reports b's address handle.
    let r = fab.ep(a).recv(None, 64).unwrap();
    fab.ep(c).send(ca, vec![8; 5], SendOpts::default()).unwrap();
    fab.drive();
    let last = fab.log.iter().rev().find(|l| l.from == c).unwrap();
    assert_eq!(
        last.flags & (flags::CONNID_HDR | flags::REQ_OPT_RAW_ADDR_HDR),
        flags::CONNID_HDR
    );
    let got = fab.completions(a);
    assert_eq!(done(&got, r).data[..5], [8; 5]);
    assert_eq!(done(&got, r).src, Some(pc));
    // A connid header that names no peer is dropped and counted.
    let mut rep = Repr::new(T::EagerMsgRtm).with(Field::MsgId, 1);
    rep.connid = Some(old.qkey ^ 1);
    rep.payload = b"evil";
    let mut buf = vec![0; rep.buffer_len()];
    rep.emit(&mut buf).unwrap();
    let src = fab.ep(a).lookup_peer(&old.gid, old.qpn);
    fab.ep(a).handle_packet(src, &buf);
    assert_eq!(fab.nodes[a].ep.stats().rx_connid_mismatch, 1);
    // The real b still gets through, as b.
    let r = fab.ep(a).recv(None, 64).unwrap();
    fab.ep(b).send(ba, vec![9; 3], SendOpts::default()).unwrap();
    fab.drive();
    let got = fab.completions(a);
    assert_eq!(done(&got, r).data[..3], [9; 3]);
    assert_eq!(done(&got, r).src, Some(ab));
}

#[test]
fn unknown_sender_without_raw_address_is_dropped() {
    let mut fab = Fabric::new(35);
    let a = fab.add(small_cfg());
    let mut rep = Repr::new(T::EagerMsgRtm);
    rep.payload = b"x";
    let mut buf = vec![0; rep.buffer_len()];
    rep.emit(&mut buf).unwrap();
    fab.ep(a).handle_packet(None, &buf);
    assert_eq!(fab.nodes[a].ep.stats().rx_unknown_sender, 1);
    // With a raw address the sender is inserted and answered with a handshake.
    rep.raw_addr = Some(RawAddrHdr::new(RawAddr {
        gid: [9; 16],
        qpn: 3,
        qkey: 5,
        next: 0,
    }));
    let mut buf = vec![0; rep.buffer_len()];
    rep.emit(&mut buf).unwrap();
    fab.ep(a).handle_packet(None, &buf);
    assert!(fab.ep(a).lookup_peer(&[9; 16], 3).is_some());
    assert!(matches!(
        fab.ep(a).poll_transmit(),
        Some(tagmatch_rdm::Transmit::Send { .. })
    ));
}

#[test]
fn stale_ids_never_hit_a_new_operation() {
    let cb = feats(|f| f.rdma_read = false);
    let (mut fab, a, b, ab, ba) = warm_pair(36, small_cfg(), cb, false);
    fab.record_bytes = true;
    let data = payload(3000, 1);
    let m = message(
        &mut fab,
        (a, b, ab),
        true,
        data.clone(),
        SendOpts::default(),
        3000,
        false,
    );
    check_ok(&m, &data, true);
    let old: Vec<_> = fab.log.clone();
    fab.log.clear();
    // A new long-CTS send reuses the same slots with new generations.
    let s2 = fab
        .ep(a)
        .tsend(ab, 0x77, payload(3000, 2), SendOpts::default())
        .unwrap();
    // Replay every old CTS into a and every old CTSDATA into b before anything else.
    let mut replayed = (0, 0);
    for rec in &old {
        if rec.pkt_type == T::Cts {
            fab.ep(a).handle_packet(Some(ab), &rec.bytes);
            replayed.0 += 1;
        } else if rec.pkt_type == T::CtsData {
            fab.ep(b).handle_packet(Some(ba), &rec.bytes);
            replayed.1 += 1;
        }
    }
    assert_eq!(fab.nodes[a].ep.stats().rx_unknown_op, replayed.0);
    assert_eq!(fab.nodes[b].ep.stats().rx_unknown_op, replayed.1);
    let r2 = fab.ep(b).trecv(None, 0x77, 0, 3000).unwrap();
    fab.drive();
    assert_eq!(done(&fab.completions(a), s2).result, Ok(()));
    let cb = fab.completions(b);
    assert!(done(&cb, r2).data == payload(3000, 2));
    assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
    assert_eq!(fab.ep(b).in_flight(), (0, 0, 0));
}

#[test]
fn late_packets_for_finished_operations_are_counted() {
    let (mut fab, a, b, ab, ba) = warm_pair(37, small_cfg(), small_cfg(), false);
    fab.record_bytes = true;
    let dc = SendOpts {
        delivery_complete: true,
        ..SendOpts::default()
    };
    let data = payload(5000, 4);
    let m = message(&mut fab, (a, b, ab), true, data.clone(), dc, 5000, false);
    check_ok(&m, &data, true);
    let m2 = message(&mut fab, (a, b, ab), true, vec![3; 10], dc, 10, false);
    assert_eq!(done(&m2.ca, m2.send).result, Ok(()));
    let before = fab.nodes[a].ep.stats().rx_unknown_op;
    let late: Vec<_> = fab
        .log
        .iter()
        .filter(|r| matches!(r.pkt_type, T::Eor | T::Receipt))
        .map(|r| r.bytes.clone())
        .collect();
    assert!(late.len() >= 2);
    for p in &late {
        fab.ep(a).handle_packet(Some(ab), p);
    }
    assert_eq!(
        fab.nodes[a].ep.stats().rx_unknown_op,
        before + late.len() as u64
    );
    assert!(fab.completions(a).is_empty());
    let _ = ba;
}

#[test]
fn zero_credit_cts_is_refused() {
    let (mut fab, a, _, ab, _) = pair(38, small_cfg(), small_cfg(), false);
    let mut cts = Repr::new(T::Cts)
        .with(Field::SendId, 0)
        .with(Field::RecvId, 0);
    cts.connid = Some(fab.nodes[1].ep.addr().qkey);
    let mut buf = vec![0; cts.buffer_len()];
    cts.emit(&mut buf).unwrap();
    fab.ep(a).handle_packet(Some(ab), &buf);
    let s = fab.ep(a).stats();
    assert_eq!(s.rx_invalid + s.rx_unknown_op, 1);
}

/// Random packets of every type with random fields, payloads and iovs, fed to an endpoint
/// in the middle of transfers: nothing panics, and every drop is counted.
#[test]
fn hostile_packets_never_panic() {
    let mut rng = XorShift::new(99);
    let (mut fab, a, b, _, ba) = warm_pair(39, small_cfg(), small_cfg(), true);
    let (mem, key) = fab.register(b, vec![0; 4096]);
    let _ = mem;
    let qkey = fab.nodes[a].ep.addr().qkey;
    for round in 0..20_000u64 {
        if round % 100 == 0 {
            fab.ep(a).trecv(None, 0x77, 0, 4000).unwrap();
            fab.ep(b)
                .tsend(
                    ba,
                    0x77,
                    payload(3000 + round as usize % 2000, 1),
                    SendOpts::default(),
                )
                .unwrap();
        }
        let ty = T::ALL[rng.below(T::ALL.len() as u64) as usize];
        let mut r = Repr::new(ty);
        for at in ty.layout().fields {
            if at.field.is_derived() {
                continue;
            }
            let v = match rng.below(5) {
                0 => rng.below(4),
                // Ids of live operations: slab index | generation << 20.
                4 => rng.below(4) | rng.below(64) << 20,
                1 => rng.below(1 << 20),
                2 => rng.next_u64(),
                _ => u32::MAX as u64,
            };
            let v = match at.width {
                tagmatch_wire::efa::Width::U32 => v & 0xffff_ffff,
                tagmatch_wire::efa::Width::U64 => v,
            };
            r = r.with(at.field, v);
        }
        let iov = [RmaIov::new(
            key.addr + rng.below(5000),
            rng.below(5000),
            if rng.below(2) == 0 {
                key.key
            } else {
                rng.next_u64()
            },
        )];
        if ty.layout().rma_iov {
            r.rma_iov = &iov;
        }
        let payload_len = rng.below(200) as usize;
        let mut pl: Vec<u8> = (0..payload_len).map(|_| rng.next_u64() as u8).collect();
        if rng.below(2) == 0 {
            let riov = RmaIov::new(key.addr, rng.below(8192), key.key);
            pl.splice(0..0, RmaIov::slice_as_bytes(&[riov]).iter().copied());
        }
        r.payload = &pl;
        r.connid = if rng.below(8) == 0 {
            Some(rng.next_u64() as u32)
        } else {
            Some(qkey)
        };
        if ty == T::Handshake {
            r.connid = Some(qkey);
        }
        let mut buf = vec![0; r.buffer_len()];
        if r.emit(&mut buf).is_err() {
            continue;
        }
        let _ = Packet::new_checked(&buf[..]);
        fab.ep(b).handle_packet(Some(ba), &buf);
        if rng.below(3) == 0 {
            fab.drive();
        }
    }
    fab.drive();
    let s = fab.nodes[b].ep.stats();
    eprintln!("{s:?}");
    assert!(s.rx_invalid + s.rx_unknown_op + s.rx_connid_mismatch + s.rx_reorder_rejected > 0);
    let _ = OpError::Canceled;
}

quickcheck! {
    fn arbitrary_bytes_never_panic(bytes: Vec<u8>, known: bool) -> TestResult {
        let (mut fab, a, _, ab, _) = pair(40, small_cfg(), small_cfg(), true);
        fab.ep(a).handle_packet(if known { Some(ab) } else { None }, &bytes);
        let s = fab.nodes[a].ep.stats();
        // Counted once: processed, or dropped under exactly one reason.
        let dropped = s.rx_parse_errors + s.rx_unknown_sender + s.rx_connid_mismatch
            + s.rx_unknown_op + s.rx_invalid + s.rx_reorder_rejected + s.rx_duplicate_data;
        fab.drive();
        TestResult::from_bool(s.rx_packets == 1 && dropped <= 1)
    }

    fn truncated_or_flipped_real_packets_never_panic(cut: usize, flip: usize, bit: u8) -> bool {
        let (mut fab, a, b, ab, ba) = warm_pair(41, small_cfg(), small_cfg(), false);
        fab.record_bytes = true;
        let _ = message(&mut fab, (a, b, ab), true, payload(3000, 1), SendOpts::default(), 3000, false);
        let before = fab.nodes[a].ep.stats().rx_packets + fab.nodes[b].ep.stats().rx_packets;
        let replay = fab.log.clone();
        for rec in &replay {
            let mut p = rec.bytes.clone();
            if !p.is_empty() {
                let i = flip % p.len();
                p[i] ^= 1 << (bit % 8);
                p.truncate(p.len() - cut % p.len());
            }
            let (to, src) = if rec.to == b { (b, ba) } else { (a, ab) };
            fab.ep(to).handle_packet(Some(src), &p);
        }
        let after = fab.nodes[a].ep.stats().rx_packets + fab.nodes[b].ep.stats().rx_packets;
        fab.drive();
        // Every mutated packet was taken in (and processed or dropped), none lost track of.
        after - before == replay.len() as u64 && !replay.is_empty()
    }
}

/// efa-rdm-protocol-v4 §3.3 table 3.10: offset 20 of a SHORT_RTR is `padding`; wire-layouts
/// §D.7: libfabric writes `recv_length = total_len` there, and §A.1: "Receivers must ignore
/// every padding and reserved byte". libfabric's responder answers every SHORT_RTR with one
/// READRSP carrying the whole buffer (the short read has no CTS), so the responder must not
/// depend on that field: with 0 it dropped the RTR, with less than the length it sent a short
/// READRSP and waited for a CTS the requester never sends.
#[test]
fn short_rtr_is_answered_whole_whatever_its_padding_holds() {
    let (mut fab, _, b, _, ba) = warm_pair(41, small_cfg(), small_cfg(), false);
    let data = payload(200, 9);
    let (_, key) = fab.register(b, data.clone());
    let iov = [RmaIov::new(key.addr, 200, key.key)];
    for pad in [0u64, 1, 100, 200] {
        let mut rtr = Repr::new(T::ShortRtr)
            .with(Field::MsgLength, 200)
            .with(Field::RecvId, 3)
            .with(Field::RecvLength, pad);
        rtr.rma_iov = &iov;
        let mut buf = vec![0; rtr.buffer_len()];
        rtr.emit(&mut buf).unwrap();
        fab.ep(b).handle_packet(Some(ba), &buf);
        let mut readrsp = Vec::new();
        while let Some(t) = fab.ep(b).poll_transmit() {
            if let tagmatch_rdm::Transmit::Send { bytes, .. } = t {
                let p = Packet::new_checked(&bytes[..]).unwrap();
                if p.pkt_type() == T::ReadRsp {
                    assert_eq!(p.recv_id(), Some(3));
                    assert_eq!(p.get(Field::SegLength), Some(200), "padding {pad}");
                    readrsp.push(p.payload().to_vec());
                }
            }
        }
        assert_eq!(readrsp, vec![data.clone()], "padding {pad}");
    }
}

/// efa-rdm-protocol-v4 §4.4: the connid header is an extra *request* ("When an endpoint
/// toggles on this extra request, its peer will try to satisfy it"); §3.2 table 3.7: the
/// CTSDATA `connid`/`padding` fields "was introduced with the extra request 'connid
/// header'". libfabric adds the 8-byte CTSDATA connid header only when
/// `efa_rdm_peer_need_connid` (handshake received *and* the peer's extra bit 3). A peer that
/// does not request it — libfabric 1.10–1.13, which predate bit 3 — reads the 8 bytes after
/// the 24-byte header as data, so the header must not be sent to it. (Unlike CTS, READRSP,
/// EOR, ATOMRSP, RECEIPT and READ_NACK, whose connid goes in a padding field.)
#[test]
fn ctsdata_connid_header_only_to_peers_that_request_it() {
    for request in [true, false] {
        let cb = feats(|f| f.request_connid_header = request);
        let (mut fab, a, b, ab, _) = warm_pair(42, small_cfg(), cb, false);
        let data = payload(3000, 5);
        let m = message(
            &mut fab,
            (a, b, ab),
            true,
            data.clone(),
            SendOpts::default(),
            3000,
            false,
        );
        check_ok(&m, &data, true);
        let ctsdata: Vec<u16> = fab
            .log
            .iter()
            .filter(|r| r.from == a && r.pkt_type == T::CtsData)
            .map(|r| r.flags & flags::CONNID_HDR)
            .collect();
        assert!(ctsdata.len() > 1, "long-CTS was used");
        let want = if request { flags::CONNID_HDR } else { 0 };
        assert!(
            ctsdata.iter().all(|&f| f == want),
            "request {request}: {ctsdata:?}"
        );
    }
}

/// An emulated long write (LONGCTS_RTW, DC_LONGCTS_RTW, LONGREAD_RTW) whose `rma_iov` names
/// memory this endpoint did not register is refused when it arrives, as libfabric's
/// responder does (`efa_rdm_rma_verified_copy_iov` fails: "RMA address verify failed",
/// the packet is released): no write target is created and no CTS asks the requester for
/// data that would be thrown away (efa-rdm-protocol-v4 §3.3: `rma_iov` is "remote buffer
/// information", its `key` "the memory registration key for the remote buffer, which is
/// provided by the responder"). A valid one still starts the transfer.
#[test]
fn long_write_to_unregistered_memory_is_refused_on_arrival() {
    let (mut fab, _, b, _, ba) = warm_pair(43, small_cfg(), small_cfg(), false);
    let (_, key) = fab.register(b, vec![0; 4096]);
    let bad = [
        RmaIov::new(key.addr, 3000, key.key ^ 0x55),
        RmaIov::new(key.addr + 2048, 3000, key.key),
        RmaIov::new(key.addr.wrapping_sub(8), 3000, key.key),
    ];
    for (i, iov) in bad
        .iter()
        .chain([&RmaIov::new(key.addr, 3000, key.key)])
        .enumerate()
    {
        for ty in [T::LongctsRtw, T::DcLongctsRtw, T::LongreadRtw] {
            let iovs = [*iov];
            let mut rtw = Repr::new(ty)
                .with(Field::MsgLength, 3000)
                .with(Field::SendId, 1);
            rtw.rma_iov = &iovs;
            let read_iov = [RmaIov::new(0x1000, 3000, 77)];
            if ty == T::LongreadRtw {
                rtw = rtw.with(Field::ReadIovCount, 1);
                rtw.payload = RmaIov::slice_as_bytes(&read_iov);
            }
            let mut buf = vec![0; rtw.buffer_len()];
            rtw.emit(&mut buf).unwrap();
            let invalid = fab.nodes[b].ep.stats().rx_invalid;
            let targets = fab.ep(b).in_flight().1;
            fab.ep(b).handle_packet(Some(ba), &buf);
            let mut sent = Vec::new();
            while let Some(t) = fab.ep(b).poll_transmit() {
                if let tagmatch_rdm::Transmit::Send { bytes, .. } = t {
                    sent.push(Packet::new_checked(&bytes[..]).unwrap().pkt_type());
                }
            }
            if i < bad.len() {
                assert_eq!(fab.ep(b).in_flight().1, targets, "{ty} {iov:?}: no target");
                assert!(sent.is_empty(), "{ty} {iov:?}: sent {sent:?}");
                assert_eq!(fab.nodes[b].ep.stats().rx_invalid, invalid + 1);
            } else {
                // The valid one starts a write target (and asks for data with a CTS, or
                // RDMA-reads it for the long-read write).
                assert_eq!(fab.ep(b).in_flight().1, targets + 1, "{ty}");
                assert_eq!(
                    sent.contains(&T::Cts),
                    ty != T::LongreadRtw,
                    "{ty}: {sent:?}"
                );
            }
        }
    }
}

//! Sends from a caller's registered region (`tsend_from` / `send_from`): one registration
//! for any number of sends, data byte for byte in every subprotocol, releasing a region in
//! use is refused; and the matching engine's counters.
mod common;
use common::*;
use tagmatch_rdm::testing::{Faults, MrRecord};
use tagmatch_rdm::{CallError, MemHandle, OpKind, Protocol, SendOpts};
use tagmatch_wire::efa::PacketType as T;

fn registrations(fab: &tagmatch_rdm::testing::Fabric, node: usize) -> (usize, usize) {
    let regs = fab
        .mr_log
        .iter()
        .filter(|r| matches!(r, MrRecord::Register { node: n, .. } if *n == node))
        .count();
    let deregs = fab
        .mr_log
        .iter()
        .filter(|r| matches!(r, MrRecord::Deregister { node: n, .. } if *n == node))
        .count();
    (regs, deregs)
}

/// Sends `len` bytes at `off` of `mem` from a to b (receive posted first), drives, checks
/// the data byte for byte; returns the protocol used.
fn send_one(
    fab: &mut tagmatch_rdm::testing::Fabric,
    (a, b, ab): (usize, usize, tagmatch_rdm::PeerId),
    tagged: bool,
    mem: MemHandle,
    off: u64,
    len: u64,
) -> Protocol {
    let want = fab.nodes[a].ep.memory(mem).unwrap()[off as usize..(off + len) as usize].to_vec();
    let recv = if tagged {
        fab.ep(b).trecv(None, 0x77, 0, len as usize).unwrap()
    } else {
        fab.ep(b).recv(None, len as usize).unwrap()
    };
    let send = if tagged {
        fab.ep(a)
            .tsend_from(ab, 0x77, mem, off, len, SendOpts::default())
            .unwrap()
    } else {
        fab.ep(a)
            .send_from(ab, mem, off, len, SendOpts::default())
            .unwrap()
    };
    fab.drive();
    let m = Msg {
        send,
        recv,
        ca: fab.completions(a),
        cb: fab.completions(b),
    };
    check_ok(&m, &want, tagged);
    assert!(fab.wire_errors.is_empty(), "{:?}", fab.wire_errors);
    fab.nodes[a].ep.protocol_of(send).unwrap()
}

#[test]
fn n_long_read_sends_from_one_region_register_once() {
    const N: u64 = 4;
    const LEN: u64 = 5000;
    for tagged in [true, false] {
        let (mut fab, a, b, ab, _) = warm_pair(11, small_cfg(), small_cfg(), false);
        fab.mr_log.clear();
        let (mem, key) = fab.register(a, payload((N * LEN + 7) as usize, 3));
        assert_eq!(
            fab.mr_log,
            vec![MrRecord::Register {
                node: a,
                mem,
                len: N * LEN + 7,
                after_packets: 0
            }]
        );
        fab.log.clear();
        for i in 0..N {
            // Odd offsets: the read_iov names the region's key at `addr + offset`.
            let p = send_one(&mut fab, (a, b, ab), tagged, mem, i * LEN + 7, LEN);
            assert_eq!(p, Protocol::LongRead);
        }
        // Exactly the long-read exchange per send: RTM, the receiver's RDMA read, EOR; the
        // sender never registers or deregisters again.
        let rtm = if tagged {
            T::LongreadTagRtm
        } else {
            T::LongreadMsgRtm
        };
        let one = [(a, rtm), (b, T::Eor)];
        let want: Vec<_> = (0..N).flat_map(|_| one).collect();
        assert_eq!(fab.sequence(), want);
        assert_eq!(registrations(&fab, a), (1, 0));
        assert_eq!(fab.nodes[a].ep.mem_key(mem), Some(Ok(key)));
        assert_eq!(fab.nodes[a].ep.mem_users(mem), Some(0));
        // Released: one deregistration of that key, the bytes come back unchanged.
        let bytes = fab.ep(a).try_release_memory(mem).unwrap();
        assert_eq!(bytes, payload((N * LEN + 7) as usize, 3));
        fab.drive();
        let deregs: Vec<_> = fab
            .mr_log
            .iter()
            .filter(|r| matches!(r, MrRecord::Deregister { node, .. } if *node == a))
            .copied()
            .collect();
        assert!(
            matches!(deregs[..], [MrRecord::Deregister { key: k, .. }] if k == key.key),
            "{deregs:?}"
        );
        // Nothing leaked on either side.
        assert_eq!(fab.nodes[a].ep.resources(), (0, 0, 0));
        assert_eq!(fab.nodes[a].ep.in_flight(), (0, 0, 0));
    }
}

#[test]
fn tsend_registers_per_send_for_comparison() {
    let (mut fab, a, b, ab, _) = warm_pair(12, small_cfg(), small_cfg(), false);
    fab.mr_log.clear();
    for _ in 0..3 {
        let data = payload(5000, 9);
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
    }
    assert_eq!(registrations(&fab, a), (3, 3));
}

#[test]
fn every_subprotocol_from_a_region_byte_for_byte() {
    let runt = tagmatch_rdm::Config {
        runt_size: 500,
        ..small_cfg()
    };
    let no_read = feats(|f| f.rdma_read = false);
    let cases = [
        (100, small_cfg(), small_cfg(), Protocol::Eager),
        (600, small_cfg(), small_cfg(), Protocol::Medium),
        (3000, small_cfg(), small_cfg(), Protocol::LongCts),
        (6000, small_cfg(), no_read, Protocol::LongCts),
        (5000, small_cfg(), small_cfg(), Protocol::LongRead),
        (5000, runt, small_cfg(), Protocol::RuntRead),
    ];
    for (len, ca, cb, want) in cases {
        for tagged in [true, false] {
            for reorder in [false, true] {
                let (mut fab, a, b, ab, _) = warm_pair(len, ca, cb, reorder);
                let (mem, _) = fab.register(a, payload(3 * len as usize + 5, len as u8));
                fab.mr_log.clear();
                for i in 0..3 {
                    let p = send_one(&mut fab, (a, b, ab), tagged, mem, i * len + 5, len);
                    assert_eq!(p, want, "len {len} tagged {tagged}");
                }
                assert_eq!(registrations(&fab, a), (0, 0), "len {len}");
                // The region is still the caller's, unchanged.
                assert_eq!(
                    fab.ep(a).release_memory(mem).unwrap(),
                    payload(3 * len as usize + 5, len as u8)
                );
                assert_eq!(fab.nodes[a].ep.resources(), (0, 0, 0));
            }
        }
    }
}

#[test]
fn releasing_a_region_with_sends_in_flight_is_refused() {
    let (mut fab, a, b, ab, _) = warm_pair(13, small_cfg(), small_cfg(), false);
    let data = payload(10_000, 1);
    let (mem, _) = fab.register(a, data.clone());
    let recv = fab.ep(b).trecv(None, 0x77, 0, 10_000).unwrap();
    let s1 = fab
        .ep(a)
        .tsend_from(ab, 0x77, mem, 0, 5000, SendOpts::default())
        .unwrap();
    let s2 = fab
        .ep(a)
        .tsend_from(ab, 0x78, mem, 5000, 5000, SendOpts::default())
        .unwrap();
    assert_eq!(fab.nodes[a].ep.mem_users(mem), Some(2));
    // Refused, and nothing changes: the sends still complete from the region.
    assert_eq!(fab.ep(a).try_release_memory(mem), Err(CallError::MemInUse));
    assert_eq!(fab.ep(a).release_memory(mem), None);
    fab.drive();
    let ca = fab.completions(a);
    assert_eq!(done(&ca, s1).result, Ok(()));
    assert_eq!(fab.nodes[a].ep.mem_users(mem), Some(1));
    assert_eq!(fab.ep(a).try_release_memory(mem), Err(CallError::MemInUse));
    let r2 = fab.ep(b).trecv(None, 0x78, 0, 5000).unwrap();
    fab.drive();
    let ca = fab.completions(a);
    assert_eq!(done(&ca, s2).result, Ok(()));
    let cb = fab.completions(b);
    assert_eq!(done(&cb, recv).data[..5000], data[..5000]);
    assert_eq!(done(&cb, r2).data[..], data[5000..]);
    // Now it goes.
    assert_eq!(fab.ep(a).try_release_memory(mem), Ok(data));
    assert_eq!(
        fab.ep(a).try_release_memory(mem),
        Err(CallError::UnknownMem)
    );
}

#[test]
fn bad_ranges_and_handles_are_errors() {
    let (mut fab, a, _, ab, _) = warm_pair(14, small_cfg(), small_cfg(), false);
    let (mem, _) = fab.register(a, vec![0; 100]);
    let o = SendOpts::default();
    let ep = fab.ep(a);
    assert_eq!(
        ep.tsend_from(ab, 1, mem, 0, 101, o),
        Err(CallError::MemRange)
    );
    assert_eq!(
        ep.tsend_from(ab, 1, mem, 101, 0, o),
        Err(CallError::MemRange)
    );
    assert_eq!(
        ep.send_from(ab, mem, u64::MAX, 2, o),
        Err(CallError::MemRange)
    );
    assert_eq!(
        ep.send_from(ab, MemHandle(999), 0, 1, o),
        Err(CallError::UnknownMem)
    );
    assert_eq!(
        ep.send_from(tagmatch_rdm::PeerId(77), mem, 0, 1, o),
        Err(CallError::UnknownPeer)
    );
    assert_eq!(ep.mem_users(mem), Some(0));
    assert_eq!(ep.in_flight(), (0, 0, 0));
    // A zero-length send at the end is fine.
    ep.send_from(ab, mem, 100, 0, o).unwrap();
}

#[test]
fn pending_registration_is_waited_for_and_a_failed_one_falls_back_to_long_cts() {
    for fail in [false, true] {
        let (mut fab, a, b, ab, _) = warm_pair(15, small_cfg(), small_cfg(), false);
        if fail {
            fab.faults = Faults {
                register_fail_nodes: &[0],
                ..Faults::default()
            };
            assert_eq!(a, 0);
        }
        fab.mr_log.clear();
        fab.log.clear();
        let data = payload(5000, 4);
        let mem = fab.ep(a).register_memory(data.clone());
        let recv = fab.ep(b).trecv(None, 0x77, 0, 5000).unwrap();
        let s = fab
            .ep(a)
            .tsend_from(ab, 0x77, mem, 0, 5000, SendOpts::default())
            .unwrap();
        fab.drive();
        let ca = fab.completions(a);
        assert_eq!(done(&ca, s).kind, OpKind::Send);
        assert_eq!(done(&ca, s).result, Ok(()));
        assert_eq!(done(&fab.completions(b), recv).data, data);
        // The choice was long-read; a failed registration turns it into long-CTS on the
        // wire (as for `tsend`), and the operation reports the long-CTS it used.
        let (first, used) = if fail {
            (T::LongctsTagRtm, Protocol::LongCts)
        } else {
            (T::LongreadTagRtm, Protocol::LongRead)
        };
        assert_eq!(fab.nodes[a].ep.protocol_of(s), Some(used));
        assert_eq!(fab.sequence()[0], (a, first));
        assert_eq!(registrations(&fab, a), (1, 0));
    }
}

#[test]
fn matching_stats_show_the_engine_counters() {
    let (mut fab, a, b, ab, _) = warm_pair(16, small_cfg(), small_cfg(), false);
    let before = fab.nodes[b].ep.matching_stats();
    // A posted receive waits.
    let r = fab.ep(b).trecv(None, 5, 0, 8).unwrap();
    let s = fab.nodes[b].ep.matching_stats();
    assert_eq!(s.posted_depth, 1);
    assert_eq!(s.misses, before.misses + 1);
    // An unexpected message waits.
    fab.ep(a)
        .tsend(ab, 6, vec![1; 8], SendOpts::default())
        .unwrap();
    fab.drive();
    let s = fab.nodes[b].ep.matching_stats();
    assert_eq!((s.posted_depth, s.unexpected_depth), (1, 1));
    assert_eq!(s.bytes_held, 8);
    // The matching message finds the posted receive.
    fab.ep(a)
        .tsend(ab, 5, vec![2; 8], SendOpts::default())
        .unwrap();
    fab.drive();
    let s2 = fab.nodes[b].ep.matching_stats();
    assert_eq!(s2.posted_depth, 0);
    assert_eq!(s2.hits, s.hits + 1);
    assert!(s2.match_attempts > before.match_attempts);
    assert_eq!(done(&fab.completions(b), r).data, vec![2; 8]);
    // Cancels are counted.
    let r = fab.ep(b).trecv(None, 9, 0, 8).unwrap();
    fab.ep(b).cancel(r).unwrap();
    assert_eq!(fab.nodes[b].ep.matching_stats().cancelled, s2.cancelled + 1);
}

//! Receives into a caller's registered region (`trecv_region`, `recv_region`,
//! `mrecv_region`): data byte for byte at the range's offset in every subprotocol, bytes
//! outside the range untouched, truncation, one region for a window of receives, a region
//! in use cannot be released, bad ranges refused, and local-only regions.
mod common;
use common::*;
use tagmatch_rdm::testing::Fabric;
use tagmatch_rdm::{CallError, MemHandle, OpError, OpKind, PeerId, Protocol, SendOpts};

const OFF: u64 = 13;

/// Registers `len` bytes of `FILL` on node `n` (`remote`: for peers, or local only).
fn region(fab: &mut Fabric, n: usize, len: usize, remote: bool) -> MemHandle {
    let h = fill_region(fab, n, len, remote);
    assert!(matches!(fab.ep(n).mem_key(h), Some(Ok(_))), "registered");
    h
}

/// Checks that `mem` on node `b` holds `want` at `off` and `FILL` everywhere else.
fn check_region(fab: &Fabric, b: usize, mem: MemHandle, off: u64, want: &[u8]) {
    let bytes = fab.nodes[b].ep.memory(mem).unwrap();
    let (lo, hi) = (off as usize, off as usize + want.len());
    assert!(
        bytes[lo..hi] == want[..],
        "the message's bytes at the offset"
    );
    assert!(
        bytes[..lo].iter().all(|&x| x == FILL),
        "bytes before untouched"
    );
    assert!(
        bytes[hi..].iter().all(|&x| x == FILL),
        "bytes after untouched"
    );
}

#[test]
fn every_subprotocol_lands_at_the_offset_and_nowhere_else() {
    // small_cfg: eager ≤ ~200, medium ≤ 1024, long-CTS below 4096, long-read from 4096.
    for (len, proto) in [
        (100u64, Protocol::Eager),
        (900, Protocol::Medium),
        (3000, Protocol::LongCts),
        (9000, Protocol::LongRead),
    ] {
        for tagged in [true, false] {
            for remote in [true, false] {
                for unexpected in [false, true] {
                    let (mut fab, a, b, ab, _) = warm_pair(21, small_cfg(), small_cfg(), true);
                    let mem = region(&mut fab, b, (len + OFF + 40) as usize, remote);
                    let data = payload(len as usize, 5);
                    let mut recv = None;
                    if !unexpected {
                        recv = Some(post_region(&mut fab, b, tagged, mem, OFF, len).unwrap());
                    }
                    let s = send_77(&mut fab, a, ab, tagged, data.clone());
                    fab.drive();
                    if unexpected {
                        recv = Some(post_region(&mut fab, b, tagged, mem, OFF, len).unwrap());
                        fab.drive();
                    }
                    let what = format!(
                        "len {len} tagged {tagged} remote {remote} unexpected {unexpected}"
                    );
                    let ca = fab.completions(a);
                    let cb = fab.completions(b);
                    assert_eq!(done(&ca, s).result, Ok(()), "{what}");
                    assert_eq!(fab.nodes[a].ep.protocol_of(s), Some(proto), "{what}");
                    let r = done(&cb, recv.unwrap());
                    assert_eq!((r.kind, r.result), (OpKind::Recv, Ok(())), "{what}");
                    assert_eq!(r.len, len, "{what}");
                    assert!(r.data.is_empty(), "the bytes are in the region: {what}");
                    check_region(&fab, b, mem, OFF, &data);
                    // The region is the caller's again: released with the message in it.
                    assert_eq!(fab.nodes[b].ep.mem_users(mem), Some(0), "{what}");
                    let bytes = fab.ep(b).try_release_memory(mem).unwrap();
                    assert_eq!(
                        bytes[OFF as usize..(OFF + len) as usize],
                        data[..],
                        "{what}"
                    );
                    fab.drive();
                    assert_eq!(fab.nodes[b].ep.resources(), (0, 0, 0), "{what}");
                    assert!(fab.wire_errors.is_empty(), "{:?}", fab.wire_errors);
                }
            }
        }
    }
}

#[test]
fn a_short_range_truncates_without_writing_past_it() {
    for len in [100u64, 900, 3000, 9000] {
        let (mut fab, a, b, ab, _) = warm_pair(22, small_cfg(), small_cfg(), false);
        let mem = region(&mut fab, b, (len + 64) as usize, false);
        let keep = len / 2;
        let r = post_region(&mut fab, b, true, mem, OFF, keep).unwrap();
        let data = payload(len as usize, 9);
        let s = send_77(&mut fab, a, ab, true, data.clone());
        fab.drive();
        let (ca, cb) = (fab.completions(a), fab.completions(b));
        assert!(done(&ca, s).result.is_ok(), "len {len}");
        let c = done(&cb, r);
        assert_eq!(
            c.result,
            Err(OpError::Truncated {
                msg_len: len,
                buf_len: keep
            }),
            "len {len}"
        );
        check_region(&fab, b, mem, OFF, &data[..keep as usize]);
    }
}

#[test]
fn a_window_of_receives_shares_one_range() {
    // As ucx_perftest and the fabtests receive: every message of the window into the same
    // bytes. All complete; the range holds one of the messages whole.
    const W: usize = 6;
    const LEN: u64 = 5000;
    let (mut fab, a, b, ab, _) = warm_pair(23, small_cfg(), small_cfg(), true);
    let mem = region(&mut fab, b, LEN as usize, false);
    let recvs: Vec<_> = (0..W)
        .map(|_| post_region(&mut fab, b, true, mem, 0, LEN).unwrap())
        .collect();
    assert_eq!(fab.nodes[b].ep.mem_users(mem), Some(W as u32));
    let msgs: Vec<Vec<u8>> = (0..W).map(|i| vec![i as u8 + 1; LEN as usize]).collect();
    let sends: Vec<_> = msgs
        .iter()
        .map(|m| send_77(&mut fab, a, ab, true, m.clone()))
        .collect();
    fab.drive();
    let (ca, cb) = (fab.completions(a), fab.completions(b));
    for s in sends {
        assert!(done(&ca, s).result.is_ok());
    }
    for r in recvs {
        assert_eq!(done(&cb, r).result, Ok(()));
    }
    let bytes = fab.nodes[b].ep.memory(mem).unwrap();
    assert!(
        msgs.iter().any(|m| m[..] == bytes[..]),
        "the range holds one message whole"
    );
    assert_eq!(fab.nodes[b].ep.mem_users(mem), Some(0));
}

#[test]
fn a_region_with_a_pending_receive_is_not_released() {
    let (mut fab, a, b, ab, _) = warm_pair(24, small_cfg(), small_cfg(), false);
    let mem = region(&mut fab, b, 5000, true);
    let r = post_region(&mut fab, b, true, mem, 0, 5000).unwrap();
    assert_eq!(fab.ep(b).try_release_memory(mem), Err(CallError::MemInUse));
    // Cancelled: the region is free again and unchanged.
    fab.ep(b).cancel(r).unwrap();
    fab.drive();
    let c = fab.completions(b);
    assert_eq!(done(&c, r).result, Err(OpError::Canceled));
    assert!(done(&c, r).data.is_empty());
    assert_eq!(fab.nodes[b].ep.mem_users(mem), Some(0));
    // Receives into it again, and a message fills it.
    let r = post_region(&mut fab, b, true, mem, 0, 5000).unwrap();
    assert_eq!(fab.ep(b).try_release_memory(mem), Err(CallError::MemInUse));
    let data = payload(5000, 1);
    send_77(&mut fab, a, ab, true, data.clone());
    fab.drive();
    assert_eq!(done(&fab.completions(b), r).result, Ok(()));
    assert_eq!(fab.ep(b).try_release_memory(mem).unwrap(), data);
}

#[test]
fn bad_ranges_and_regions_are_refused() {
    let (mut fab, _, b, _, _) = warm_pair(25, small_cfg(), small_cfg(), false);
    let mem = region(&mut fab, b, 100, false);
    for (off, len) in [(0u64, 101u64), (100, 1), (u64::MAX, 2), (50, u64::MAX)] {
        assert_eq!(
            post_region(&mut fab, b, true, mem, off, len),
            Err(CallError::MemRange),
            "{off} {len}"
        );
    }
    // The range may end at the region's end, and be empty.
    assert!(post_region(&mut fab, b, true, mem, 100, 0).is_ok());
    // A handle never issued.
    assert_eq!(
        post_region(&mut fab, b, true, MemHandle(9999), 0, 1),
        Err(CallError::UnknownMem)
    );
    // An unknown peer is named as such, before the range is looked at.
    assert_eq!(
        fab.ep(b)
            .trecv_region(Some(PeerId(77)), 0, 0, mem, 0, 1000)
            .unwrap_err(),
        CallError::UnknownPeer
    );
    // Nothing was posted by the refused calls: the region is free.
    assert_eq!(fab.nodes[b].ep.mem_users(mem), Some(1));
}

#[test]
fn mrecv_region_receives_a_claimed_message_and_a_bad_range_keeps_the_claim() {
    for len in [100u64, 900, 3000, 9000] {
        let (mut fab, a, b, ab, _) = warm_pair(26, small_cfg(), small_cfg(), false);
        let mem = region(&mut fab, b, (len + OFF) as usize, false);
        let data = payload(len as usize, 7);
        send_77(&mut fab, a, ab, true, data.clone());
        fab.drive();
        let (claim, info) = fab.ep(b).tmprobe(None, 0x77, 0).expect("claimed");
        assert_eq!(info.len, len);
        assert_eq!(
            fab.ep(b).mrecv_region(claim, mem, OFF + 1, len),
            Err(CallError::MemRange)
        );
        let r = fab.ep(b).mrecv_region(claim, mem, OFF, len).unwrap();
        fab.drive();
        let c = fab.completions(b);
        assert_eq!(done(&c, r).result, Ok(()), "len {len}");
        check_region(&fab, b, mem, OFF, &data);
    }
}

#[test]
fn large_sends_from_a_local_region_push_their_data() {
    // Peers cannot read a local-only region: its long sends go long-CTS, not long-read,
    // and arrive whole.
    let (mut fab, a, b, ab, _) = warm_pair(27, small_cfg(), small_cfg(), false);
    let data = payload(9000, 3);
    for remote in [true, false] {
        let h = fab.ep(a).register_memory_with(data.clone(), remote);
        fab.drive();
        let r = fab.ep(b).trecv(None, 0x77, 0, 9000).unwrap();
        let s = fab
            .ep(a)
            .tsend_from(ab, 0x77, h, 0, 9000, SendOpts::default())
            .unwrap();
        fab.drive();
        let (ca, cb) = (fab.completions(a), fab.completions(b));
        assert!(done(&ca, s).result.is_ok());
        assert_eq!(done(&cb, r).data, data);
        let want = if remote {
            Protocol::LongRead
        } else {
            Protocol::LongCts
        };
        assert_eq!(
            fab.nodes[a].ep.protocol_of(s),
            Some(want),
            "remote {remote}"
        );
    }
}

//! Review (rev12) of receives into a caller's registered region (`trecv_region`,
//! `recv_region`, `mrecv_region`, `hold_memory`) and of local-only registrations
//! (`register_memory_with(_, false)`): the fallback paths (read-NACK after a failed read
//! or a failed registration, runting read, a registration still pending when the data is
//! due), truncation in every subprotocol, disjoint ranges of one region, claims, handles
//! that name no application region, and what peers can reach through a local-only
//! region's key.
mod common;
use common::*;
use tagmatch_rdm::testing::{Fabric, Faults};
use tagmatch_rdm::{
    CallError, Config, MemHandle, OpError, OpId, OpKind, Protocol, RemoteAddr, SendOpts,
};

/// small_cfg with runting read (runts of 500 bytes before the read).
fn runt_cfg() -> Config {
    Config {
        runt_size: 500,
        ..small_cfg()
    }
}

/// `mem` on node `b` holds `want` at `off` and `FILL` everywhere else.
fn check_region(fab: &Fabric, b: usize, mem: MemHandle, off: u64, want: &[u8], what: &str) {
    let bytes = fab.nodes[b].ep.memory(mem).unwrap();
    let (lo, hi) = (off as usize, off as usize + want.len());
    if let Some(i) = (lo..hi).find(|&i| bytes[i] != want[i - lo]) {
        panic!("{what}: byte {} of the message differs", i - lo);
    }
    if let Some(i) = (0..lo).chain(hi..bytes.len()).find(|&i| bytes[i] != FILL) {
        panic!("{what}: byte {i} of the region, outside the range {lo}..{hi}, was written");
    }
}

/// One message `len` bytes a → b into `range_len` bytes at `off` of a fresh region of b
/// (`remote`: registered for peers); returns the fabric, the send's and the receive's
/// completions, and the region.
#[allow(clippy::too_many_arguments)]
fn one(
    seed: u64,
    (ca, cb): (Config, Config),
    faults: Faults,
    tagged: bool,
    unexpected: bool,
    remote: bool,
    len: usize,
    (off, range_len): (u64, u64),
) -> (Fabric, usize, MemHandle, tagmatch_rdm::Completion, Vec<u8>) {
    let (mut fab, a, b, ab, _) = warm_pair(seed, ca, cb, seed % 2 == 1);
    let mem = fill_region(&mut fab, b, off as usize + range_len as usize + 29, remote);
    fab.faults = faults;
    let data = payload(len, seed as u8);
    let mut r = None;
    if !unexpected {
        r = Some(post_region(&mut fab, b, tagged, mem, off, range_len).unwrap());
    }
    let s = send_77(&mut fab, a, ab, tagged, data.clone());
    fab.drive();
    if unexpected {
        r = Some(post_region(&mut fab, b, tagged, mem, off, range_len).unwrap());
        fab.drive();
    }
    let what = format!("seed {seed} len {len} tagged {tagged} unexpected {unexpected}");
    let ca = fab.completions(a);
    assert_eq!(done(&ca, s).result, Ok(()), "{what}: the send");
    let cb = fab.completions(b);
    let c = done(&cb, r.unwrap()).clone();
    assert_eq!(c.kind, OpKind::Recv, "{what}");
    assert!(c.data.is_empty(), "{what}: the bytes are in the region");
    assert_eq!(c.len, len as u64, "{what}");
    assert_eq!(
        fab.nodes[b].ep.mem_users(mem),
        Some(0),
        "{what}: the receive no longer counts as a user"
    );
    assert!(fab.wire_errors.is_empty(), "{what}: {:?}", fab.wire_errors);
    (fab, b, mem, c, data)
}

/// Passes. A read that fails (the device's read, then the READ_NACK fallback to
/// long-CTS) still lands the message at the offset and nowhere else, for long-read and
/// runting read, tagged and untagged, remote and local-only regions.
#[test]
fn read_nack_after_a_failed_read_lands_at_the_offset() {
    for (cfg, proto) in [
        (small_cfg(), Protocol::LongRead),
        (runt_cfg(), Protocol::RuntRead),
    ] {
        for tagged in [true, false] {
            for remote in [true, false] {
                for unexpected in [false, true] {
                    let faults = Faults {
                        rdma_read_fail_nodes: &[1],
                        ..Faults::default()
                    };
                    let (fab, b, mem, c, data) = one(
                        40,
                        (cfg, small_cfg()),
                        faults,
                        tagged,
                        unexpected,
                        remote,
                        9000,
                        (17, 9000),
                    );
                    let what = format!("{proto:?} tagged {tagged} remote {remote}");
                    assert_eq!(c.result, Ok(()), "{what}");
                    assert_eq!(fab.nodes[b].ep.stats().read_nacks, 1, "{what}");
                    check_region(&fab, b, mem, 17, &data, &what);
                }
            }
        }
    }
}

/// Passes. The same with a truncating range: the READ_NACK's long-CTS data past the
/// range is dropped (not written after it), including a range shorter than the runts.
#[test]
fn read_nack_into_a_short_range_truncates() {
    for cfg in [small_cfg(), runt_cfg()] {
        for keep in [0u64, 300, 1200, 8999] {
            let faults = Faults {
                rdma_read_fail_nodes: &[1],
                ..Faults::default()
            };
            let (fab, b, mem, c, data) = one(
                41,
                (cfg, small_cfg()),
                faults,
                true,
                false,
                false,
                9000,
                (5, keep),
            );
            let what = format!("runt {} keep {keep}", cfg.runt_size);
            assert_eq!(
                c.result,
                Err(OpError::Truncated {
                    msg_len: 9000,
                    buf_len: keep
                }),
                "{what}"
            );
            check_region(&fab, b, mem, 5, &data[..keep as usize], &what);
        }
    }
}

/// Passes. The receiver's registration fails (so the region has no key): eager, medium
/// and long-CTS messages need none; long-read and runting read fall back to long-CTS
/// with READ_NACK. Every byte lands at the offset.
#[test]
fn a_region_whose_registration_failed_still_receives() {
    for (cfg, len) in [
        (small_cfg(), 100usize),
        (small_cfg(), 900),
        (small_cfg(), 3000),
        (small_cfg(), 9000),
        (runt_cfg(), 9000),
    ] {
        for tagged in [true, false] {
            let (mut fab, a, b, ab, _) = warm_pair(42, cfg, small_cfg(), false);
            fab.faults.register_fail_nodes = &[1];
            let mem = fill_region(&mut fab, b, len + 40, false);
            assert_eq!(fab.nodes[b].ep.mem_key(mem), Some(Err(())));
            let r = post_region(&mut fab, b, tagged, mem, 11, len as u64).unwrap();
            let data = payload(len, 3);
            let s = send_77(&mut fab, a, ab, tagged, data.clone());
            fab.drive();
            let what = format!("len {len} runt {} tagged {tagged}", cfg.runt_size);
            assert_eq!(done(&fab.completions(a), s).result, Ok(()), "{what}");
            assert_eq!(done(&fab.completions(b), r).result, Ok(()), "{what}");
            check_region(&fab, b, mem, 11, &data, &what);
            assert_eq!(fab.nodes[b].ep.mem_users(mem), Some(0), "{what}");
            assert!(fab.ep(b).try_release_memory(mem).is_ok(), "{what}");
        }
    }
}

/// Passes. Without READ_NACK a failed read is an error on the receiver: the region's
/// use count goes back to zero (it can be released) and nothing outside the range was
/// written.
#[test]
fn a_failed_read_without_read_nack_releases_the_region() {
    for cfg in [small_cfg(), runt_cfg()] {
        let cb = Config {
            features: tagmatch_rdm::Features {
                read_nack: false,
                ..small_cfg().features
            },
            ..small_cfg()
        };
        let (mut fab, a, b, ab, _) = warm_pair(43, cfg, cb, false);
        let mem = fill_region(&mut fab, b, 9100, true);
        fab.faults.rdma_read_fail_nodes = &[1];
        let r = post_region(&mut fab, b, true, mem, 50, 9000).unwrap();
        send_77(&mut fab, a, ab, true, payload(9000, 4));
        fab.drive();
        let cb = fab.completions(b);
        assert_eq!(done(&cb, r).result, Err(OpError::RdmaFailed));
        assert_eq!(fab.nodes[b].ep.mem_users(mem), Some(0));
        let bytes = fab.ep(b).try_release_memory(mem).unwrap();
        assert!(bytes[..50].iter().all(|&x| x == FILL));
        assert!(bytes[9050..].iter().all(|&x| x == FILL));
    }
}

/// Passes. The region's registration is still pending when the long-read / runting-read
/// data is due (`rx_waiters`): the read waits for the key and lands at the offset. The
/// fabric reorders events over many seeds, so some registrations finish after the
/// message arrived and some before.
#[test]
fn a_read_waits_for_the_regions_pending_registration() {
    let mut waited = 0;
    for seed in 0..24u64 {
        for cfg in [small_cfg(), runt_cfg()] {
            let (mut fab, a, b, ab, _) = warm_pair(seed, cfg, small_cfg(), true);
            let mem = fab
                .ep(b)
                .register_memory_with(vec![FILL; 9100], seed % 3 != 0);
            // Posted and sent before the registration's completion is handed back.
            let r = post_region(&mut fab, b, seed % 2 == 0, mem, 33, 9000).unwrap();
            let data = payload(9000, seed as u8);
            let s = send_77(&mut fab, a, ab, seed % 2 == 0, data.clone());
            fab.drive();
            let what = format!("seed {seed} runt {}", cfg.runt_size);
            assert_eq!(done(&fab.completions(a), s).result, Ok(()), "{what}");
            assert_eq!(done(&fab.completions(b), r).result, Ok(()), "{what}");
            check_region(&fab, b, mem, 33, &data, &what);
            assert_eq!(fab.nodes[b].ep.mem_users(mem), Some(0), "{what}");
            if fab.nodes[b].ep.stats().read_nacks == 0 {
                waited += 1;
            }
        }
    }
    assert!(waited > 0);
}

/// Passes. Two receives into disjoint ranges of one region, large messages of both
/// protocols arriving interleaved: each lands in its own range only.
#[test]
fn disjoint_ranges_of_one_region_keep_apart() {
    for cfg in [small_cfg(), runt_cfg()] {
        let (mut fab, a, b, ab, _) = warm_pair(44, cfg, small_cfg(), true);
        let mem = fill_region(&mut fab, b, 3 * 9000 + 10, true);
        let lens = [9000usize, 3000, 100];
        let offs = [9005u64, 2, 18005];
        let recvs: Vec<OpId> = (0..3)
            .map(|i| {
                fab.ep(b)
                    .trecv_region(None, i as u64, 0, mem, offs[i], lens[i] as u64)
                    .unwrap()
            })
            .collect();
        let datas: Vec<Vec<u8>> = (0..3).map(|i| payload(lens[i], 60 + i as u8)).collect();
        for i in [2usize, 0, 1] {
            fab.ep(a)
                .tsend(ab, i as u64, datas[i].clone(), SendOpts::default())
                .unwrap();
        }
        fab.drive();
        let cb = fab.completions(b);
        let bytes = fab.nodes[b].ep.memory(mem).unwrap();
        for i in 0..3 {
            assert_eq!(done(&cb, recvs[i]).result, Ok(()));
            let o = offs[i] as usize;
            assert!(bytes[o..o + lens[i]] == datas[i][..], "message {i}");
        }
        assert_eq!(bytes[0..2], [FILL; 2]);
        assert_eq!(bytes[3002..9005], vec![FILL; 9005 - 3002][..]);
        assert_eq!(bytes[18005 + 100..], vec![FILL; bytes.len() - 18105][..]);
    }
}

/// Passes. A zero-length range and a range of one byte take a large message: truncated,
/// nothing (or one byte) written, no read of the rest issued.
#[test]
fn tiny_ranges_take_a_large_message_truncated() {
    for cfg in [small_cfg(), runt_cfg()] {
        for keep in [0u64, 1] {
            let (fab, b, mem, c, data) = one(
                45,
                (cfg, small_cfg()),
                Faults::default(),
                false,
                false,
                false,
                9000,
                (7, keep),
            );
            assert_eq!(
                c.result,
                Err(OpError::Truncated {
                    msg_len: 9000,
                    buf_len: keep
                })
            );
            check_region(&fab, b, mem, 7, &data[..keep as usize], "tiny");
        }
    }
}

/// Passes. Long-CTS into a region at an offset, from a local-only region on the sender
/// (its large sends push their data), with small CTS windows so many CTSDATA land.
#[test]
fn long_cts_from_a_local_region_into_a_region() {
    for keep in [9000u64, 4000] {
        let (mut fab, a, b, ab, _) = warm_pair(46, small_cfg(), small_cfg(), true);
        let data = payload(9000, 8);
        let src = fab.ep(a).register_memory_with(data.clone(), false);
        let dst = fill_region(&mut fab, b, 9100, false);
        let r = fab.ep(b).trecv_region(None, 5, 0, dst, 99, keep).unwrap();
        let s = fab
            .ep(a)
            .tsend_from(ab, 5, src, 0, 9000, SendOpts::default())
            .unwrap();
        fab.drive();
        assert_eq!(fab.nodes[a].ep.protocol_of(s), Some(Protocol::LongCts));
        assert_eq!(done(&fab.completions(a), s).result, Ok(()));
        let c = done(&fab.completions(b), r).clone();
        assert_eq!(c.result.is_ok(), keep == 9000);
        check_region(&fab, b, dst, 99, &data[..keep as usize], "long-CTS");
        assert_eq!(fab.nodes[a].ep.mem_users(src), Some(0));
        assert_eq!(fab.nodes[b].ep.mem_users(dst), Some(0));
    }
}

/// Passes. Claims: a bad region keeps the claim; a claim used once cannot be used again
/// (and the failed call counts no user); a handle that is not an application region is
/// refused.
#[test]
fn mrecv_region_bad_claims_and_regions() {
    let (mut fab, a, b, ab, _) = warm_pair(47, small_cfg(), small_cfg(), false);
    let mem = fill_region(&mut fab, b, 9000, false);
    let data = payload(9000, 5);
    send_77(&mut fab, a, ab, true, data.clone());
    fab.drive();
    let (claim, _) = fab.ep(b).tmprobe(None, 0x77, 0).unwrap();
    assert_eq!(
        fab.ep(b).mrecv_region(claim, MemHandle(4242), 0, 10),
        Err(CallError::UnknownMem)
    );
    let r = fab.ep(b).mrecv_region(claim, mem, 0, 9000).unwrap();
    assert_eq!(fab.nodes[b].ep.mem_users(mem), Some(1));
    assert_eq!(
        fab.ep(b).mrecv_region(claim, mem, 0, 9000),
        Err(CallError::UnknownOp),
        "a claim already received"
    );
    assert_eq!(fab.nodes[b].ep.mem_users(mem), Some(1));
    fab.drive();
    assert_eq!(done(&fab.completions(b), r).result, Ok(()));
    check_region(&fab, b, mem, 0, &data, "claimed");
    assert_eq!(fab.nodes[b].ep.mem_users(mem), Some(0));
}

/// Passes. A released region's handle names nothing any more, also once its slot holds
/// another receive's own buffer: a receive into it, a hold and an `mrecv_region` are
/// refused (they would otherwise write into that receive's buffer, or free it).
#[test]
fn a_released_handle_whose_slot_is_reused_is_refused() {
    let (mut fab, a, b, ab, _) = warm_pair(48, small_cfg(), small_cfg(), false);
    let mem = fill_region(&mut fab, b, 100, true);
    fab.ep(b).try_release_memory(mem).unwrap();
    fab.drive();
    // An ordinary receive's buffer: the freed slot is taken again.
    let own = fab.ep(b).trecv(None, 1, 0, 100).unwrap();
    assert_eq!(
        post_region(&mut fab, b, true, mem, 0, 10),
        Err(CallError::UnknownMem)
    );
    assert_eq!(
        fab.ep(b).hold_memory(mem, 0, 10),
        Err(CallError::UnknownMem)
    );
    assert_eq!(
        fab.ep(b).try_release_memory(mem),
        Err(CallError::UnknownMem)
    );
    // unhold of a handle that is not an application region changes nothing.
    fab.ep(b).unhold_memory(mem);
    let data = payload(100, 1);
    fab.ep(a)
        .tsend(ab, 1, data.clone(), SendOpts::default())
        .unwrap();
    fab.drive();
    assert_eq!(done(&fab.completions(b), own).data, data);
}

/// Passes. `hold_memory` counts a user the way a receive does, refuses ranges outside
/// the region, and `unhold_memory` gives the region back.
#[test]
fn holds_block_release_until_unheld() {
    let (mut fab, _, b, _, _) = warm_pair(49, small_cfg(), small_cfg(), false);
    let mem = fill_region(&mut fab, b, 100, false);
    assert_eq!(fab.ep(b).hold_memory(mem, 90, 11), Err(CallError::MemRange));
    assert_eq!(
        fab.ep(b).hold_memory(mem, u64::MAX, 2),
        Err(CallError::MemRange)
    );
    assert_eq!(fab.nodes[b].ep.mem_users(mem), Some(0));
    fab.ep(b).hold_memory(mem, 0, 100).unwrap();
    fab.ep(b).hold_memory(mem, 100, 0).unwrap();
    assert_eq!(fab.ep(b).try_release_memory(mem), Err(CallError::MemInUse));
    fab.ep(b).unhold_memory(mem);
    assert_eq!(fab.ep(b).try_release_memory(mem), Err(CallError::MemInUse));
    fab.ep(b).unhold_memory(mem);
    assert!(fab.ep(b).try_release_memory(mem).is_ok());
}

/// FAILS before the fix. A local-only region (`register_memory_with(_, false)`: "peers
/// cannot read or write" it) is written by a peer's emulated RMA write that names its
/// key: the endpoint resolves every registered key for EAGER_RTW / LONGCTS_RTW /
/// LONGREAD_RTW targets, local-only or not. Here an eager write (EAGER_RTW) and a
/// long-read write (LONGREAD_RTW) overwrite the region; a direct write the device
/// refuses falls back to them. (The testing fabric's device now refuses direct RDMA to a
/// local-only key too: `mem_by_key` no longer finds one.)
#[test]
fn a_peer_cannot_write_a_local_only_region() {
    for (len, direct_write) in [(100usize, false), (3000, false), (3000, true)] {
        let cfg = Config {
            direct_write,
            ..small_cfg()
        };
        let (mut fab, a, b, ab, _) = warm_pair(50, cfg, small_cfg(), false);
        let mem = fill_region(&mut fab, b, 4000, false);
        let Some(Ok(k)) = fab.nodes[b].ep.mem_key(mem) else {
            panic!("registered");
        };
        fab.ep(a)
            .write(
                ab,
                vec![0x11; len],
                RemoteAddr {
                    addr: k.addr,
                    key: k.key,
                },
                SendOpts::default(),
            )
            .unwrap();
        fab.drive();
        let bytes = fab.nodes[b].ep.memory(mem).unwrap();
        assert!(
            bytes.iter().all(|&x| x == FILL),
            "len {len} direct {direct_write}: a peer's write changed a local-only region"
        );
    }
}

/// FAILS before the fix. A peer's emulated read (SHORT_RTR / LONGCTS_RTR) of a
/// local-only region's key is served with the region's bytes.
#[test]
fn a_peer_cannot_read_a_local_only_region() {
    for (len, direct_read) in [(100usize, false), (3000, false), (3000, true)] {
        let cfg = Config {
            direct_read,
            ..small_cfg()
        };
        let (mut fab, a, b, ab, _) = warm_pair(51, cfg, small_cfg(), false);
        let secret = payload(4000, 77);
        let mem = fab.ep(b).register_memory_with(secret.clone(), false);
        fab.drive();
        let Some(Ok(k)) = fab.nodes[b].ep.mem_key(mem) else {
            panic!("registered");
        };
        let r = fab
            .ep(a)
            .read(
                ab,
                len,
                RemoteAddr {
                    addr: k.addr,
                    key: k.key,
                },
            )
            .unwrap();
        fab.drive();
        let ca = fab.completions(a);
        if let Some(c) = ca.iter().find(|c| c.op == r) {
            assert!(
                c.result.is_err() || c.data[..] != secret[..len],
                "len {len} direct {direct_read}: a peer read a local-only region's bytes"
            );
        }
    }
}

/// Passes. The region's registration is pending when the read is due and then fails:
/// the waiting receive falls back with READ_NACK (or fails without it), and the
/// region's use count returns to zero either way.
#[test]
fn a_pending_registration_that_fails_falls_back() {
    for read_nack in [true, false] {
        for seed in 0..8u64 {
            let cb = Config {
                features: tagmatch_rdm::Features {
                    read_nack,
                    ..small_cfg().features
                },
                ..small_cfg()
            };
            let (mut fab, a, b, ab, _) = warm_pair(seed, runt_cfg(), cb, true);
            fab.faults.register_fail_nodes = &[1];
            let mem = fab.ep(b).register_memory_with(vec![FILL; 9100], false);
            let r = post_region(&mut fab, b, true, mem, 21, 9000).unwrap();
            let data = payload(9000, 9);
            send_77(&mut fab, a, ab, true, data.clone());
            fab.drive();
            let what = format!("seed {seed} read_nack {read_nack}");
            let c = done(&fab.completions(b), r).clone();
            if read_nack {
                assert_eq!(c.result, Ok(()), "{what}");
                check_region(&fab, b, mem, 21, &data, &what);
            } else {
                assert_eq!(c.result, Err(OpError::RdmaFailed), "{what}");
            }
            assert_eq!(fab.nodes[b].ep.mem_users(mem), Some(0), "{what}");
            assert!(fab.ep(b).try_release_memory(mem).is_ok(), "{what}");
        }
    }
}

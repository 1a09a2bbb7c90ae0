//! Review 15: truncation on every kind of receive (allocated, into a caller's buffer,
//! claimed, a slot, a region range) and size class, on every path; and the facade's
//! counters of one mixed sequence, which must read the same whichever path carried it.

mod common;

use common::{done, pair, PATHS};
use tagmatch::{Completion, Endpoint, Error, OpError, SendOptions, ANY_SOURCE};

fn body(len: usize, salt: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + salt * 29 + 3) as u8).collect()
}

/// Progresses both until `b` holds `n` unexpected messages.
fn until_unexpected(a: &mut Endpoint, b: &mut Endpoint, n: usize) {
    for _ in 0..200_000 {
        a.progress().unwrap();
        b.progress().unwrap();
        if b.stats().unexpected >= n {
            return;
        }
    }
    panic!("{} unexpected, wanted {n}", b.stats().unexpected);
}

/// What a receive's completion shows, comparable across paths.
fn shown(c: &Completion) -> (Result<(), OpError>, u64, u64, Vec<u8>) {
    (c.status(), c.len, c.tag, c.data.clone())
}

/// A message longer than the receive's buffer, for each size class (eager, medium,
/// long) and each kind of receive: the completion is `Truncated { msg_len, buf_len }`,
/// its `len` the sender's length, its data the message's first `buf_len` bytes (a
/// region's range holds them and nothing past the range changes; a slot holds them); a
/// buffer longer than the message comes back cut to the message. Guards: a truncated
/// receive that reports the buffer length as the message's, returns no bytes or bytes
/// past the buffer, or (long messages read by RDMA) writes past the range.
#[test]
fn truncation_reports_both_lengths_and_keeps_the_first_bytes() {
    for kind in PATHS {
        let (mut a, mut b, ab, ba, _f) = pair(kind);
        let mr = b.register_local(vec![0xcc; 300_000]).unwrap();
        let slot = b.recv_slot(16);
        for (si, (msg_len, buf_len)) in [(40usize, 16usize), (20_000, 1000), (1 << 20, 100_000)]
            .into_iter()
            .enumerate()
        {
            let label = |what: &str| format!("{kind} {msg_len} into {buf_len}: {what}");
            let want = |salt: usize| body(msg_len, salt)[..buf_len].to_vec();
            let trunc = Err(OpError::Truncated {
                msg_len: msg_len as u64,
                buf_len: buf_len as u64,
            });
            let tag = |k: u64| si as u64 * 100 + k;
            // Allocated, posted before.
            let r = b.trecv(ba, tag(1), buf_len).unwrap();
            let s1 = a.tsend(ab, tag(1), body(msg_len, 1)).unwrap();
            let c = done(&mut b, r, &mut [&mut a]);
            assert_eq!(
                shown(&c),
                (trunc, msg_len as u64, tag(1), want(1)),
                "{}",
                label("trecv")
            );
            // Into a caller's buffer, posted before.
            let r = b.trecv_into(ba, tag(2), vec![0xee; buf_len]).unwrap();
            let s2 = a.tsend(ab, tag(2), body(msg_len, 2)).unwrap();
            let c = done(&mut b, r, &mut [&mut a]);
            assert_eq!(
                shown(&c),
                (trunc, msg_len as u64, tag(2), want(2)),
                "{}",
                label("trecv_into")
            );
            // Untagged, the message first (unexpected).
            let s3 = a.send(ab, body(msg_len, 3)).unwrap();
            until_unexpected(&mut a, &mut b, 1);
            let r = b.recv(ba, buf_len).unwrap();
            let c = done(&mut b, r, &mut [&mut a]);
            assert_eq!(
                shown(&c),
                (trunc, msg_len as u64, 0, want(3)),
                "{}",
                label("recv")
            );
            // Claimed, then received short: allocated and into a buffer.
            let s4 = a.tsend(ab, tag(4), body(msg_len, 4)).unwrap();
            let s5 = a.tsend(ab, tag(5), body(msg_len, 5)).unwrap();
            until_unexpected(&mut a, &mut b, 2);
            let m4 = b.tmprobe(ba, tag(4)).expect("claimed");
            let m5 = b.tmprobe(ba, tag(5)).expect("claimed");
            assert_eq!(m4.info.len, msg_len as u64);
            let r = b.mrecv(m4, buf_len).unwrap();
            let c = done(&mut b, r, &mut [&mut a]);
            assert_eq!(
                shown(&c),
                (trunc, msg_len as u64, tag(4), want(4)),
                "{}",
                label("mrecv")
            );
            let r = b.mrecv_into(m5, vec![0; buf_len]).unwrap();
            let c = done(&mut b, r, &mut [&mut a]);
            assert_eq!(
                shown(&c),
                (trunc, msg_len as u64, tag(5), want(5)),
                "{}",
                label("mrecv_into")
            );
            // Into a region's range: the range holds the first bytes, nothing else moves.
            let off = 8;
            let r = b.trecv_region(ba, tag(6), &mr, off..off + buf_len).unwrap();
            let s6 = a.tsend(ab, tag(6), body(msg_len, 6)).unwrap();
            let c = done(&mut b, r, &mut [&mut a]);
            assert_eq!(
                shown(&c),
                (trunc, msg_len as u64, tag(6), Vec::new()),
                "{}",
                label("trecv_region")
            );
            let bytes = b.region(&mr).unwrap();
            assert!(
                bytes[..off].iter().all(|&x| x == 0xcc),
                "{}",
                label("before")
            );
            assert!(
                bytes[off..off + buf_len] == want(6)[..],
                "{}",
                label("range")
            );
            assert!(
                bytes[off + buf_len..].iter().all(|&x| x == 0xcc),
                "{}",
                label("past the range")
            );
            b.region_mut(&mr).unwrap().fill(0xcc);
            // A slot of 16 bytes.
            let _ = b.tpost_slot(&slot, ba, tag(7)).unwrap();
            let s7 = a.tsend(ab, tag(7), body(msg_len, 7)).unwrap();
            let got = loop {
                if let Some(x) = b.slot_done(&slot) {
                    break x;
                }
                b.progress().unwrap();
                a.progress().unwrap();
            };
            match got {
                Err(Error::Failed {
                    error:
                        OpError::Truncated {
                            msg_len: m,
                            buf_len: 16,
                        },
                    ..
                }) => assert_eq!(m, msg_len as u64, "{}", label("slot")),
                other => panic!("{}: {other:?}", label("slot")),
            }
            assert!(
                b.slot_data(&slot).unwrap() == &body(msg_len, 7)[..16],
                "{}",
                label("slot bytes")
            );
            // A buffer longer than the message: cut to it, Ok.
            let r = b.trecv_into(ba, tag(8), vec![0xee; msg_len + 10]).unwrap();
            let s8 = a.tsend(ab, tag(8), body(msg_len, 8)).unwrap();
            let c = done(&mut b, r, &mut [&mut a]);
            assert!(
                shown(&c) == (Ok(()), msg_len as u64, tag(8), body(msg_len, 8)),
                "{}",
                label("longer buffer")
            );
            for s in [s1, s2, s3, s4, s5, s6, s7, s8] {
                done(&mut a, s, &mut [&mut b]).into_result().unwrap();
            }
        }
        assert!(b.poll_completion().is_none(), "{kind}");
    }
}

/// The facade's counters of `a` (sender) and `b` (receiver) after one sequence of every
/// kind of operation: sends (plain, delivery complete, injected), receives (posted
/// before and after, truncated, cancelled, claimed, a slot), probes. `fast_sends`,
/// `fast_recvs`, `protocols`, `progress_calls` and `idle_sleeps` depend on the path by
/// design and are left out.
fn counted(kind: &str) -> Vec<(&'static str, u64)> {
    let (mut a, mut b, ab, ba, _f) = pair(kind);
    let dc = SendOptions {
        cq_data: Some(1),
        delivery_complete: true,
    };
    // Posted before: plain, delivery complete, injected.
    let r1 = b.trecv(ba, 1u64, 64).unwrap();
    let r2 = b.trecv(ANY_SOURCE, 2u64, 64).unwrap();
    let r3 = b.recv(ba, 64).unwrap();
    let s1 = a.tsend(ab, 1, vec![1; 10]).unwrap();
    let s2 = a.tsend_with(ab, 2, vec![2; 20], dc).unwrap();
    a.inject(ab, &[3; 30]).unwrap();
    for r in [r1, r2, r3] {
        done(&mut b, r, &mut [&mut a]).into_result().unwrap();
    }
    // Unexpected: truncated, probed, claimed.
    let s4 = a.tsend(ab, 4, vec![4; 40]).unwrap();
    a.tinject(ab, 5, &[5; 8]).unwrap();
    until_unexpected(&mut a, &mut b, 2);
    assert!(b.tprobe(ba, 5u64).is_some());
    let m = b.tmprobe(ANY_SOURCE, 5u64).unwrap();
    let r4 = b.trecv(ba, 4u64, 16).unwrap();
    assert!(done(&mut b, r4, &mut [&mut a]).error().is_some());
    let r5 = b.mrecv(m, 64).unwrap();
    done(&mut b, r5, &mut [&mut a]).into_result().unwrap();
    // Cancelled; a slot; a probe that finds nothing.
    let r6 = b.trecv(ba, 6u64, 64).unwrap();
    b.cancel(r6).unwrap();
    assert!(done(&mut b, r6, &mut [&mut a]).error().is_some());
    let slot = b.recv_slot(8);
    let _ = b.tpost_slot(&slot, ba, 7u64).unwrap();
    a.tinject(ab, 7, &[7; 12]).unwrap();
    loop {
        if let Some(x) = b.slot_done(&slot) {
            assert!(x.is_err(), "truncated");
            break;
        }
        b.progress().unwrap();
        a.progress().unwrap();
    }
    assert!(b.tprobe(ANY_SOURCE, 99u64).is_none());
    for s in [s1, s2, s4] {
        done(&mut a, s, &mut [&mut b]).into_result().unwrap();
    }
    let (fa, fb) = (a.stats().facade, b.stats().facade);
    vec![
        ("a.submitted", fa.submitted),
        ("a.completed", fa.completed),
        ("a.failed", fa.failed),
        ("a.bytes", fa.bytes),
        ("a.injected", fa.injected),
        ("a.call_errors", fa.call_errors),
        ("b.submitted", fb.submitted),
        ("b.completed", fb.completed),
        ("b.failed", fb.failed),
        ("b.bytes", fb.bytes),
        ("b.cancels", fb.cancels),
        ("b.probes", fb.probes),
        ("b.call_errors", fb.call_errors),
    ]
}

/// The counters read the same on every path (guards: a path that forgets to count a
/// kind of operation, or counts one twice: a held receive, an mrecv, a slot, an
/// injected send, a delivery-complete send).
#[test]
fn the_facade_counts_one_sequence_the_same_on_every_path() {
    let want = counted("proto");
    for kind in ["fast", "mixed", "udp"] {
        assert_eq!(counted(kind), want, "{kind} vs proto");
    }
    let get = |k: &str| want.iter().find(|(n, _)| *n == k).unwrap().1;
    // 3 sends and 3 injects; 7 receives (one cancelled, two truncated: the trecv and
    // the slot); 3 probes.
    assert_eq!(get("a.submitted"), 6);
    assert_eq!(get("a.completed"), 3);
    assert_eq!(get("a.injected"), 3);
    assert_eq!(get("b.submitted"), 7);
    assert_eq!(get("b.completed"), 7);
    assert_eq!(get("b.failed"), 3);
    assert_eq!(get("b.cancels"), 1);
    assert_eq!(get("b.probes"), 3);
}

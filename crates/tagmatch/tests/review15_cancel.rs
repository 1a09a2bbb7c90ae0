//! Review 15: cancel at every stage of a receive's life (held aside, posted in the
//! engine, matched with its data still moving, completed), on every path (fast path,
//! protocol over `mem`, a protocol sender into a fast-path receiver, UDP), and what the
//! counters say about it.

mod common;

use std::time::Duration;

use common::{done, pair, udp_pair, PATHS};
use tagmatch::{Endpoint, Error, MemFabric, OpError, Request, TagMatch, ANY_SOURCE};

fn body(len: usize, k: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + k * 7 + 1) as u8).collect()
}

/// A receive is cancelled after `k` rounds of progress of its message (eager, medium,
/// long): the cancel either wins (the receive completes `Canceled`, once, and the message
/// goes to the next receive, whole) or loses with `UnknownRequest` (the receive completes
/// with the whole message) — never both, never a message lost or cut, never a second
/// completion. Guards: a cancel that succeeds on a receive already matched (its data
/// still being read, or its completion queued), which loses the message or completes the
/// request twice.
#[test]
fn a_cancel_at_any_point_of_a_receive_loses_and_doubles_nothing() {
    for kind in PATHS {
        let (mut a, mut b, ab, ba, _f) = pair(kind);
        let mut wins = 0u64;
        let mut losses = 0u64;
        for (si, len) in [8usize, 20_000, 1 << 20].into_iter().enumerate() {
            for k in 0..10usize {
                let tag = (si * 100 + k) as u64;
                let data = body(len, k + si);
                let r = b.trecv(ba, tag, len).unwrap();
                let s = a.tsend(ab, tag, data.clone()).unwrap();
                for _ in 0..k {
                    a.progress().unwrap();
                    b.progress().unwrap();
                }
                let label = format!("{kind} len {len} after {k} rounds");
                match b.cancel(r) {
                    Ok(()) => {
                        wins += 1;
                        let c = done(&mut b, r, &mut [&mut a]);
                        assert_eq!(c.status(), Err(OpError::Canceled), "{label}");
                        assert!(c.data.is_empty(), "{label}");
                        let r2 = b.trecv(ba, tag, len).unwrap();
                        let c = done(&mut b, r2, &mut [&mut a]);
                        assert_eq!(c.status(), Ok(()), "{label}");
                        assert!(c.data == data, "{label}: the next receive gets it whole");
                    }
                    Err(Error::UnknownRequest(x)) => {
                        losses += 1;
                        assert_eq!(x, r, "{label}: the error names the request");
                        let c = done(&mut b, r, &mut [&mut a]);
                        assert_eq!(c.status(), Ok(()), "{label}");
                        assert!(c.data == data, "{label}: the receive gets it whole");
                    }
                    Err(e) => panic!("{label}: {e}"),
                }
                done(&mut a, s, &mut [&mut b]).into_result().unwrap();
                // Cancelling again: the request is finished.
                assert!(
                    matches!(b.cancel(r), Err(Error::UnknownRequest(x)) if x == r),
                    "{label}"
                );
            }
        }
        // No completion left over (a cancelled request completing a second time, a
        // receive completing after its cancel).
        for _ in 0..200 {
            a.progress().unwrap();
            b.progress().unwrap();
        }
        if let Some(c) = b.poll_completion() {
            panic!("{kind}: a completion left over: {c:?}");
        }
        assert!(wins > 0 && losses > 0, "{kind}: {wins} {losses}");
        assert_eq!(b.stats().facade.cancels, wins, "{kind}");
    }
}

/// Cancels of a receive held aside (the fast path's first receive), of one posted in the
/// engine behind it, and of a slot's receive, then a completed receive: the counters
/// read the same on every path (a cancel is a completion with an error: `completed` and
/// `failed` count it, `cancels` and the matching engine's `cancelled` too), and the
/// slot is free again once `slot_done` answered. Guards: a path that counts a cancel in
/// one place and not the other (a slot's cancel completed without a count).
#[test]
fn cancels_count_the_same_on_every_path() {
    let mut seen = Vec::new();
    for kind in PATHS {
        let (mut a, mut b, ab, ba, _f) = pair(kind);
        let base = b.stats();
        // Held aside (nothing posted, nothing unexpected), then one in the engine (a
        // different spec), then a window of two identical ones.
        let r1 = b.trecv(ba, 1u64, 8).unwrap();
        let r2 = b
            .trecv(ANY_SOURCE, TagMatch::masked(0x20, 0xf0), 8)
            .unwrap();
        let r3 = b.trecv(ba, 1u64, 8).unwrap();
        b.cancel(r2).unwrap();
        b.cancel(r1).unwrap();
        let slot = b.recv_slot(8);
        let rs = b.tpost_slot(&slot, ba, 5u64).unwrap();
        b.cancel(rs).unwrap();
        assert!(matches!(b.cancel(rs), Err(Error::UnknownRequest(_))));
        // The slot's receive completes cancelled, through the slot only.
        let st = loop {
            if let Some(x) = b.slot_done(&slot) {
                break x;
            }
            b.progress().unwrap();
        };
        assert!(
            matches!(
                st,
                Err(Error::Failed {
                    error: OpError::Canceled,
                    request,
                    ..
                }) if request == rs
            ),
            "{kind}: {st:?}"
        );
        assert!(b.slot_done(&slot).is_none(), "{kind}: answered once");
        // Reused: a message lands in it.
        let _ = b.tpost_slot(&slot, ba, 5u64).unwrap();
        a.tinject(ab, 5, &[9; 6]).unwrap();
        let info = loop {
            if let Some(x) = b.slot_done(&slot) {
                break x.unwrap();
            }
            b.progress().unwrap();
            a.progress().unwrap();
        };
        assert_eq!((info.len, info.tag), (6, 5), "{kind}");
        assert_eq!(b.slot_data(&slot).unwrap(), &[9; 6], "{kind}");
        // r3 (held behind r1, now the earliest) takes a message.
        let s = a.tsend(ab, 1, vec![3; 8]).unwrap();
        assert_eq!(done(&mut b, r3, &mut [&mut a]).data, vec![3; 8], "{kind}");
        done(&mut a, s, &mut [&mut b]).into_result().unwrap();
        for r in [r1, r2] {
            assert_eq!(
                done(&mut b, r, &mut [&mut a]).status(),
                Err(OpError::Canceled),
                "{kind}"
            );
        }
        let st = b.stats();
        let d = |f: fn(&tagmatch::Stats) -> u64| f(&st) - f(&base);
        let counts = [
            ("cancels", d(|s| s.facade.cancels)),
            ("completed", d(|s| s.facade.completed)),
            ("failed", d(|s| s.facade.failed)),
            ("bytes", d(|s| s.facade.bytes)),
            ("matching.cancelled", d(|s| s.matching.cancelled)),
            ("posted_depth", st.matching.posted_depth as u64),
        ];
        seen.push((kind, counts));
    }
    let want = [
        ("cancels", 3),
        // 3 cancelled, the slot's message, r3.
        ("completed", 5),
        ("failed", 3),
        ("bytes", 14),
        ("matching.cancelled", 3),
        ("posted_depth", 0),
    ];
    for (kind, counts) in seen {
        assert_eq!(counts, want, "{kind}");
    }
}

/// `wait`, `wait_for`, `wait_with` and the future on a request of another endpoint: a
/// typed error naming it ([`Error::UnknownRequest`], as `cancel` answers), at once —
/// not a wait for the whole wait limit ending in `Timeout`, which says the request is
/// merely late. Guards: the wait loop never checking whose request it is.
#[test]
fn waiting_on_another_endpoints_request_is_unknown_request_at_once() {
    let f = MemFabric::new();
    let limit = Duration::from_secs(3);
    let mk = |fast: bool| {
        Endpoint::builder()
            .mem(&f)
            .fast_path(fast)
            .wait_limit(limit)
            .build()
            .unwrap()
    };
    let (mut u1, mut u2) = udp_pair();
    for (a, c) in [
        (&mut mk(true), &mut mk(true)),
        (&mut mk(false), &mut mk(false)),
        (&mut u1, &mut u2),
    ] {
        // Same request number on both endpoints: still another endpoint's request.
        let ra = a.trecv(ANY_SOURCE, 5u64, 8).unwrap();
        let rc = c.trecv(ANY_SOURCE, 5u64, 8).unwrap();
        assert_eq!(ra.id(), rc.id());
        let t = c.transport();
        let check = |r: tagmatch::Result<tagmatch::Completion>, what: &str| match r {
            Err(Error::UnknownRequest(x)) => assert_eq!(x, rc, "{t} {what}"),
            other => panic!("{t} {what}: {other:?}"),
        };
        check(a.wait(rc), "wait");
        check(a.wait_for(rc, limit), "wait_for");
        check(a.wait_with(rc, &mut []), "wait_with");
        check(poll_once(a, rc), "completion");
        // Its own endpoint still has it.
        c.cancel(rc).unwrap();
        assert!(matches!(
            c.wait(rc),
            Err(Error::Failed {
                error: OpError::Canceled,
                ..
            })
        ));
        a.cancel(ra).unwrap();
    }
}

/// Polls `ep.completion(r)` until it is ready (at most a bounded number of polls: a
/// future that stays pending is reported as `Timeout`).
fn poll_once(ep: &mut Endpoint, r: Request) -> tagmatch::Result<tagmatch::Completion> {
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let mut fut = Box::pin(ep.completion(r));
    for _ in 0..10_000 {
        if let Poll::Ready(c) = fut.as_mut().poll(&mut cx) {
            return c;
        }
    }
    Err(Error::Timeout {
        request: r,
        limit_ms: 0,
    })
}

//! Review of the compact `Completion` (status, source and CQ data behind a one-byte code,
//! an aux word and flags) and of the held-receive window (`Matcher::hold`, its FIFO):
//! every outcome reachable through the public API round-trips on the fast path and the
//! protocol path, `==` agrees with the observable fields, and windows of held receives
//! that grow, wrap and lose receives in the middle match as the protocol path does.

use tagmatch::{
    Completion, Error, MemFabric, OpError, OpKind, Request, SendOptions, ANY_SOURCE, ANY_TAG,
};

mod common;
use common::{done, ep};

/// Everything a caller can observe of a completion, through the accessors.
#[allow(clippy::type_complexity)]
fn observed(
    c: &Completion,
) -> (
    Request,
    OpKind,
    Result<(), OpError>,
    Vec<u8>,
    u64,
    u64,
    Option<u32>,
    Option<u64>,
    bool,
) {
    (
        c.request,
        c.kind,
        c.status(),
        c.data.clone(),
        c.len,
        c.tag,
        c.source().map(|p| p.index()),
        c.cq_data(),
        c.protocol.is_some(),
    )
}

/// Two receives of the same message content into buffers of different sizes (neither
/// truncated): once their public `request` is made the same, every observable field is
/// equal, so the completions must compare equal — as they do on the protocol path. The
/// buffer length is not observable for a receive that was not truncated.
#[test]
fn completions_with_equal_observable_fields_compare_equal_on_both_paths() {
    for fast in [false, true] {
        let f = MemFabric::new();
        let (mut a, mut b) = (ep(&f, fast), ep(&f, fast));
        let ab = a.insert_peer(&b.address()).unwrap();
        let ba = b.insert_peer(&a.address()).unwrap();
        let r1 = b.trecv(ba, 5u64, 64).unwrap();
        let r2 = b.trecv(ba, 5u64, 128).unwrap();
        let s1 = a.tsend(ab, 5, vec![7u8; 8]).unwrap();
        let s2 = a.tsend(ab, 5, vec![7u8; 8]).unwrap();
        let c1 = done(&mut b, r1, &mut [&mut a]);
        let mut c2 = done(&mut b, r2, &mut [&mut a]);
        for s in [s1, s2] {
            assert!(done(&mut a, s, &mut [&mut b]).is_ok(), "fast {fast}");
        }
        c2.request = c1.request;
        assert_eq!(observed(&c1), observed(&c2), "fast {fast}");
        assert_eq!(format!("{c1:?}"), format!("{c2:?}"), "fast {fast}");
        assert_eq!(
            c1, c2,
            "fast {fast}: equal observable fields, unequal completions"
        );
    }
}

/// Completions that differ in an observable field compare unequal (the compact form
/// must not lose what `==` should see): CQ data 0 against none, and the buffer length
/// of a truncated receive.
#[test]
fn completions_that_differ_observably_compare_unequal() {
    for fast in [false, true] {
        let f = MemFabric::new();
        let (mut a, mut b) = (ep(&f, fast), ep(&f, fast));
        let ab = a.insert_peer(&b.address()).unwrap();
        let ba = b.insert_peer(&a.address()).unwrap();
        let zero = SendOptions {
            cq_data: Some(0),
            delivery_complete: false,
        };
        let r1 = b.trecv(ba, 5u64, 8).unwrap();
        let r2 = b.trecv(ba, 5u64, 8).unwrap();
        let s1 = a.tsend_with(ab, 5, vec![1u8; 4], zero).unwrap();
        let s2 = a.tsend(ab, 5, vec![1u8; 4]).unwrap();
        let c1 = done(&mut b, r1, &mut [&mut a]);
        let mut c2 = done(&mut b, r2, &mut [&mut a]);
        for s in [s1, s2] {
            assert!(done(&mut a, s, &mut [&mut b]).is_ok(), "fast {fast}");
        }
        assert_eq!(c1.cq_data(), Some(0), "fast {fast}");
        assert_eq!(c2.cq_data(), None, "fast {fast}");
        c2.request = c1.request;
        assert_ne!(c1, c2, "fast {fast}: CQ data 0 against none");
    }
}

/// Every outcome the public API can produce, on both paths: success with and without
/// CQ data (0 and `u64::MAX` included), truncation (into an allocated buffer, a caller's
/// buffer, and a zero-length one) with its message and buffer lengths, cancellation of
/// a held receive, of one in the middle of a held window and of one in the engine, a
/// failed send, and an atomic the responder refuses. Each completion's accessors and
/// `into_result` agree, and the two paths report the same outcomes.
#[test]
fn every_reachable_outcome_round_trips_on_both_paths() {
    let run = |fast: bool| {
        let f = MemFabric::new();
        let (mut a, mut b) = (ep(&f, fast), ep(&f, fast));
        let ab = a.insert_peer(&b.address()).unwrap();
        let ba = b.insert_peer(&a.address()).unwrap();
        let mut got = Vec::new();
        let mut sends = Vec::new();
        let mut check = |c: Completion, want: Result<(), OpError>| {
            assert_eq!(c.status(), want, "fast {fast}: {c:?}");
            assert_eq!(c.is_ok(), want.is_ok(), "fast {fast}");
            assert_eq!(c.error(), want.err(), "fast {fast}");
            if let Err(OpError::Truncated { msg_len, .. }) = want {
                assert_eq!(c.len, msg_len, "fast {fast}: a truncated receive's length");
            }
            let o = observed(&c);
            match c.clone().into_result() {
                Ok(back) => {
                    assert!(want.is_ok());
                    assert_eq!(back, c);
                }
                Err(Error::Failed { request, error, .. }) => {
                    assert_eq!(Err(error), want, "fast {fast}");
                    assert_eq!(request, c.request);
                }
                Err(e) => panic!("fast {fast}: {e:?}"),
            }
            // Request numbers differ between the paths; the rest must not.
            got.push((o.1, o.2, o.3, o.4, o.5, o.6, o.7));
        };
        let cq = |v| SendOptions {
            cq_data: Some(v),
            delivery_complete: false,
        };
        // A held receive cancelled (nothing posted, nothing queued: held on the fast
        // path), then one of a held window cancelled in the middle, then the head.
        let r = b.trecv(ba, 1u64, 8).unwrap();
        b.cancel(r).unwrap();
        check(done(&mut b, r, &mut []), Err(OpError::Canceled));
        let w: Vec<Request> = (0..6).map(|_| b.trecv(ba, 2u64, 8).unwrap()).collect();
        b.cancel(w[3]).unwrap();
        check(done(&mut b, w[3], &mut []), Err(OpError::Canceled));
        b.cancel(w[0]).unwrap();
        check(done(&mut b, w[0], &mut []), Err(OpError::Canceled));
        // A receive that goes to the engine (another spec while some are held).
        let e = b.trecv(ANY_SOURCE, 3u64, 8).unwrap();
        b.cancel(e).unwrap();
        check(done(&mut b, e, &mut []), Err(OpError::Canceled));
        // The window takes four messages: CQ data none, 0, MAX, 7.
        sends.push(a.tsend(ab, 2, vec![1u8; 3]).unwrap());
        sends.push(a.tsend_with(ab, 2, vec![2u8; 8], cq(0)).unwrap());
        sends.push(a.tsend_with(ab, 2, vec![3u8; 8], cq(u64::MAX)).unwrap());
        // Truncated into a held receive: 20 bytes into 8.
        sends.push(a.tsend_with(ab, 2, vec![4u8; 20], cq(7)).unwrap());
        for &r in [w[1], w[2], w[4]].iter() {
            check(done(&mut b, r, &mut [&mut a]), Ok(()));
        }
        check(
            done(&mut b, w[5], &mut [&mut a]),
            Err(OpError::Truncated {
                msg_len: 20,
                buf_len: 8,
            }),
        );
        // Unexpected, then truncated into a caller's buffer and into an empty one; an
        // empty message into an empty buffer is not truncated.
        sends.push(a.tsend(ab, 9, vec![5u8; 100]).unwrap());
        sends.push(a.tsend(ab, 9, vec![6u8; 1]).unwrap());
        sends.push(a.tsend(ab, 9, Vec::new()).unwrap());
        for _ in 0..1000 {
            a.progress().unwrap();
            b.progress().unwrap();
        }
        let r = b.trecv_into(ba, 9u64, vec![0xee; 3]).unwrap();
        check(
            done(&mut b, r, &mut [&mut a]),
            Err(OpError::Truncated {
                msg_len: 100,
                buf_len: 3,
            }),
        );
        let r = b.trecv(ba, 9u64, 0).unwrap();
        check(
            done(&mut b, r, &mut [&mut a]),
            Err(OpError::Truncated {
                msg_len: 1,
                buf_len: 0,
            }),
        );
        let r = b.trecv(ANY_SOURCE, ANY_TAG, 0).unwrap();
        check(done(&mut b, r, &mut [&mut a]), Ok(()));
        // Every send so far completed without error.
        for s in sends {
            assert!(done(&mut a, s, &mut [&mut b]).is_ok(), "fast {fast}");
        }
        // A send to a dropped endpoint.
        drop(b);
        let s = a.tsend(ab, 1, vec![1; 8]).unwrap();
        let c = done(&mut a, s, &mut []);
        if fast {
            check(c, Err(OpError::SendFailed));
        } else {
            // The protocol path over the in-memory device cannot tell a dropped peer
            // from a slow one (no failure is reported): nothing to compare.
            drop(c);
        }
        got
    };
    let fast = run(true);
    let proto = run(false);
    assert_eq!(fast.len(), proto.len() + 1);
    for (i, (x, y)) in fast.iter().zip(&proto).enumerate() {
        assert_eq!(x, y, "outcome {i}");
    }
}

/// Windows of identical held receives that grow past the FIFO's first capacity while
/// its head has moved (the wrap), with receives cancelled at the head, in the middle and
/// at the tail, and new ones posted after each cancel: which receive takes which message
/// is the same on the fast path as on the protocol path, and the posted depth agrees.
#[test]
fn held_windows_that_wrap_grow_and_lose_receives_match_the_protocol_path() {
    // Steps: P = post one receive of the window's spec, S = send one message it accepts,
    // C(k) = cancel the k-th oldest receive still pending, X = post a receive of another
    // spec (goes to the engine on the fast path), Y = send a message only X accepts.
    #[derive(Clone, Copy, Debug)]
    enum Step {
        P,
        S,
        C(usize),
        X,
        Y,
    }
    use Step::*;
    let scripts: Vec<Vec<Step>> = vec![
        // Grow 4 -> 8 with the head moved by two pops, then cancel in the middle.
        vec![
            P,
            P,
            P,
            P,
            S,
            S,
            P,
            P,
            P,
            P,
            P,
            C(3),
            P,
            S,
            S,
            S,
            S,
            S,
            S,
            S,
        ],
        // Cancel head, middle and tail while wrapped; new posts after each.
        vec![
            P,
            P,
            P,
            S,
            S,
            P,
            P,
            P,
            C(0),
            P,
            C(2),
            P,
            C(4),
            P,
            S,
            S,
            S,
            S,
            S,
            S,
        ],
        // A receive of another spec between windows, cancelled, then the window again.
        vec![P, P, X, P, C(2), P, P, S, S, Y, S, S, S],
        // Everything cancelled, then new posts (the FIFO drained by cancels).
        vec![P, P, P, P, P, C(0), C(0), C(0), C(0), C(0), P, P, S, S],
        // Long streaming: posts and sends interleaved past many wraps.
        (0..60)
            .map(|i| match i % 5 {
                0..=2 => P,
                3 => S,
                _ => C(1),
            })
            .chain((0..40).map(|_| S))
            .collect(),
    ];
    for (n, script) in scripts.iter().enumerate() {
        let run = |fast: bool| {
            let f = MemFabric::new();
            let (mut a, mut b) = (ep(&f, fast), ep(&f, fast));
            let ab = a.insert_peer(&b.address()).unwrap();
            let ba = b.insert_peer(&a.address()).unwrap();
            let mut pending: Vec<(usize, Request)> = Vec::new();
            let mut results = Vec::new();
            let mut sent = 0u8;
            for (i, &s) in script.iter().enumerate() {
                match s {
                    P => pending.push((i, b.trecv(ba, 4u64, 16).unwrap())),
                    X => pending.push((i, b.trecv(ANY_SOURCE, 8u64, 16).unwrap())),
                    S | Y => {
                        let tag = if matches!(s, S) { 4 } else { 8 };
                        a.tinject(ab, tag, &[sent; 3]).unwrap();
                        sent += 1;
                        for _ in 0..50 {
                            a.progress().unwrap();
                            b.progress().unwrap();
                        }
                    }
                    C(k) => {
                        if !pending.is_empty() {
                            let (at, r) = pending.remove(k % pending.len());
                            b.cancel(r).unwrap();
                            let c = done(&mut b, r, &mut [&mut a]);
                            results.push((at, c.status(), c.data));
                        }
                    }
                }
                // Pending receives that completed (matched) are collected in order.
                let mut still = Vec::new();
                for (at, r) in pending.drain(..) {
                    match b.take_completion(r) {
                        Some(c) => results.push((at, c.status(), c.data)),
                        None => still.push((at, r)),
                    }
                }
                pending = still;
                results.push((
                    usize::MAX,
                    Ok(()),
                    vec![b.stats().matching.posted_depth as u8],
                ));
            }
            // Whatever is still pending: cancelled, in posting order.
            for (at, r) in pending {
                b.cancel(r).unwrap();
                let c = done(&mut b, r, &mut [&mut a]);
                results.push((at, c.status(), c.data));
            }
            results
        };
        let fast = run(true);
        let proto = run(false);
        assert_eq!(fast, proto, "script {n}: {script:?}");
    }
}

/// `take_completion` of a request behind the first ready one, in the middle and at the
/// end of the ready queue: each takes exactly its own completion and the others stay
/// queued in order.
#[test]
fn take_completion_behind_the_first_takes_its_own_in_the_middle_and_at_the_end() {
    let f = MemFabric::new();
    let (mut a, mut b) = (ep(&f, false), ep(&f, false));
    let ab = a.insert_peer(&b.address()).unwrap();
    let ba = b.insert_peer(&a.address()).unwrap();
    let r: Vec<Request> = (0..4u64).map(|t| b.trecv(ba, t, 16).unwrap()).collect();
    for t in 0..4u64 {
        let _ = a.tsend(ab, t, vec![t as u8; 4]).unwrap();
    }
    let mut ready = 0;
    for _ in 0..10_000 {
        a.progress().unwrap();
        ready = b.progress().unwrap();
        if ready == 4 {
            break;
        }
    }
    assert_eq!(ready, 4);
    let got = |c: Option<Completion>| c.map(|c| (c.request, c.data));
    // In the middle, then at the end, then the end again, then the front.
    assert_eq!(got(b.take_completion(r[1])), Some((r[1], vec![1u8; 4])));
    assert_eq!(got(b.take_completion(r[3])), Some((r[3], vec![3u8; 4])));
    assert_eq!(got(b.take_completion(r[3])), None);
    assert_eq!(got(b.take_completion(r[2])), Some((r[2], vec![2u8; 4])));
    assert_eq!(got(b.poll_completion()), Some((r[0], vec![0u8; 4])));
    assert_eq!(got(b.poll_completion()), None);
}

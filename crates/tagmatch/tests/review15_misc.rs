//! Review 15: tag masks against the documented rule on every path, zero-length
//! messages and buffers, cancel of what is not a posted receive, and the `async` API on
//! finished, cancelled and truncated requests.

mod common;

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use common::{done, pair, PATHS};
use tagmatch::{Endpoint, Error, OpError, SendOptions, TagMatch, ANY_SOURCE, ANY_TAG};

/// A small deterministic generator (no dependency).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 ^ (self.0 >> 29)
    }
}

/// Receives with masks (`masked`, `ignoring`, bits set in the wanted tag outside the
/// mask) take exactly the messages [`TagMatch::matches`] accepts, whether posted before
/// the messages (held aside / posted in the engine) or after them (unexpected), and
/// probes agree. Each round sends two tags the selector refuses, then one it accepts:
/// the receive gets the accepted one, exact receives get the others. Guards: a path
/// that compares the wanted tag's bits outside the mask, or reads the mask as
/// libfabric's `ignore` (or the other way round).
#[test]
fn masks_take_exactly_what_the_rule_accepts() {
    for kind in PATHS {
        let (mut a, mut b, ab, ba, _f) = pair(kind);
        let mut g = Lcg(kind.len() as u64 * 7919 + 1);
        for round in 0..40 {
            let want = g.next();
            let mask = match round % 4 {
                0 => g.next() & g.next(),
                1 => !0xffu64,
                2 => 0xff00_0000_0000_00ff,
                _ => 1 << (g.next() % 64),
            };
            let sel = if round % 2 == 0 {
                TagMatch::masked(want, mask)
            } else {
                TagMatch::ignoring(want, !mask)
            };
            assert_eq!(sel.mask, mask);
            // Two refused tags (one bit flipped inside the mask), one accepted (bits
            // flipped outside it).
            let inside = |x: u64| {
                let bits = mask & x;
                if bits == 0 {
                    mask & mask.wrapping_neg()
                } else {
                    bits
                }
            };
            let no1 = want ^ inside(g.next());
            let no2 = want ^ inside(!g.next());
            let yes = want ^ (g.next() & !mask);
            assert!(!sel.matches(no1) && !sel.matches(no2) && sel.matches(yes));
            let label = format!("{kind} round {round}: {sel:?}");
            let first = round % 3 != 0;
            let r = first.then(|| b.trecv(ba, sel, 8).unwrap());
            let mut sends = Vec::new();
            for t in [no1, no2, yes] {
                sends.push(a.tsend(ab, t, t.to_le_bytes().to_vec()).unwrap());
            }
            let r = match r {
                Some(r) => r,
                None => {
                    // Messages first: the probe sees the accepted one.
                    let mut p = None;
                    for _ in 0..100_000 {
                        a.progress().unwrap();
                        b.progress().unwrap();
                        p = b.tprobe(ba, sel);
                        if p.is_some() {
                            break;
                        }
                    }
                    assert_eq!(p.map(|p| p.tag), Some(yes), "{label}");
                    b.trecv(ANY_SOURCE, sel, 8).unwrap()
                }
            };
            let c = done(&mut b, r, &mut [&mut a]);
            assert_eq!(
                (c.tag, c.data.clone()),
                (yes, yes.to_le_bytes().to_vec()),
                "{label}"
            );
            for t in [no1, no2] {
                let r = b.trecv(ba, t, 8).unwrap();
                assert_eq!(done(&mut b, r, &mut [&mut a]).tag, t, "{label}");
            }
            for s in sends {
                done(&mut a, s, &mut [&mut b]).into_result().unwrap();
            }
        }
    }
}

/// Zero-length messages and zero-length buffers: an empty message fills any receive
/// (Ok, `len` 0), a one-byte message into an empty buffer is truncated (msg 1, buf 0)
/// with no bytes, an empty inject into an empty slot completes it, and none of them is
/// mistaken for "nothing arrived". Guards: a length-0 receive treated as already
/// complete or never matchable, an empty payload dropped on some path.
#[test]
fn zero_length_messages_and_buffers() {
    for kind in PATHS {
        let (mut a, mut b, ab, ba, _f) = pair(kind);
        let r = b.trecv(ba, 1u64, 0).unwrap();
        let s = a.tsend(ab, 1, Vec::new()).unwrap();
        let c = done(&mut b, r, &mut [&mut a]);
        assert_eq!((c.status(), c.len, c.data.len()), (Ok(()), 0, 0), "{kind}");
        done(&mut a, s, &mut [&mut b]).into_result().unwrap();
        let r = b.trecv_into(ba, 2u64, Vec::new()).unwrap();
        let s = a.tsend(ab, 2, vec![9]).unwrap();
        let c = done(&mut b, r, &mut [&mut a]);
        assert_eq!(
            (c.status(), c.len, c.data.len()),
            (
                Err(OpError::Truncated {
                    msg_len: 1,
                    buf_len: 0
                }),
                1,
                0
            ),
            "{kind}"
        );
        done(&mut a, s, &mut [&mut b]).into_result().unwrap();
        // Empty untagged, unexpected first, into a 64-byte receive.
        a.inject(ab, &[]).unwrap();
        let mut p = None;
        for _ in 0..100_000 {
            a.progress().unwrap();
            b.progress().unwrap();
            p = b.probe(ba);
            if p.is_some() {
                break;
            }
        }
        assert_eq!(p.map(|p| p.len), Some(0), "{kind}");
        let r = b.recv(ANY_SOURCE, 64).unwrap();
        let c = done(&mut b, r, &mut [&mut a]);
        assert_eq!((c.status(), c.len, c.data.len()), (Ok(()), 0, 0), "{kind}");
        // An empty slot and an empty inject.
        let slot = b.recv_slot(0);
        let _ = b.tpost_slot(&slot, ba, 3u64).unwrap();
        a.tinject(ab, 3, &[]).unwrap();
        let info = loop {
            if let Some(x) = b.slot_done(&slot) {
                break x.unwrap();
            }
            b.progress().unwrap();
            a.progress().unwrap();
        };
        assert_eq!((info.len, info.tag), (0, 3), "{kind}");
        assert_eq!(b.slot_data(&slot).unwrap(), &[] as &[u8], "{kind}");
        assert!(b.poll_completion().is_none(), "{kind}");
    }
}

/// Cancel of what is not a posted receive — a send still in flight (a large one, a
/// delivery-complete one), an RMA read in flight, a receive already matched to a claimed
/// message (`mrecv`) — is `UnknownRequest` naming it, and the operation completes
/// normally afterwards. Guards: a cancel that looks the operation number up in a table of
/// every operation (cancelling a send, which then never completes or completes twice).
#[test]
fn cancel_of_anything_but_a_posted_receive_is_refused() {
    for kind in PATHS {
        let (mut a, mut b, ab, ba, _f) = pair(kind);
        let big: Vec<u8> = (0..1usize << 20).map(|i| (i % 253) as u8).collect();
        let dc = SendOptions {
            cq_data: None,
            delivery_complete: true,
        };
        let s1 = a.tsend(ab, 1, big.clone()).unwrap();
        let s2 = a.tsend_with(ab, 2, vec![2; 8], dc).unwrap();
        let mr = b.register(vec![5; 4096]).unwrap();
        let rd = a.read(ab, 4096, mr.remote_key().at(0)).unwrap();
        for r in [s1, s2, rd] {
            match a.cancel(r) {
                Err(Error::UnknownRequest(x)) => assert_eq!(x, r, "{kind}"),
                other => panic!("{kind}: cancel of {r:?}: {other:?}"),
            }
        }
        // The message of tag 2 claimed; its mrecv is not cancellable either.
        let mut m = None;
        for _ in 0..100_000 {
            a.progress().unwrap();
            b.progress().unwrap();
            m = b.tmprobe(ba, 2u64);
            if m.is_some() {
                break;
            }
        }
        let r2 = b.mrecv(m.expect("claimed"), 8).unwrap();
        match b.cancel(r2) {
            Err(Error::UnknownRequest(x)) => assert_eq!(x, r2, "{kind}"),
            // (The fast path completes an mrecv of its own message inside the call.)
            other => panic!("{kind}: cancel of an mrecv: {other:?}"),
        }
        assert_eq!(done(&mut b, r2, &mut [&mut a]).data, vec![2; 8], "{kind}");
        let r1 = b.trecv(ba, 1u64, 1 << 20).unwrap();
        let c = done(&mut b, r1, &mut [&mut a]);
        assert!(c.is_ok() && c.data == big, "{kind}");
        for r in [s1, s2, rd] {
            let c = done(&mut a, r, &mut [&mut b]);
            assert_eq!(c.status(), Ok(()), "{kind}: {r:?}");
            if r == rd {
                assert_eq!(c.data, vec![5; 4096], "{kind}");
            }
        }
        assert_eq!(a.stats().facade.cancels + b.stats().facade.cancels, 0);
    }
}

struct Noop;
impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

/// Polls `e.completion(r)` until ready, progressing `other` between polls.
fn await_with(
    e: &mut Endpoint,
    r: tagmatch::Request,
    other: &mut Endpoint,
) -> tagmatch::Result<tagmatch::Completion> {
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    for _ in 0..1_000_000 {
        {
            let mut fut = std::pin::pin!(e.completion(r));
            if let Poll::Ready(c) = fut.as_mut().poll(&mut cx) {
                return c;
            }
        }
        other.progress().unwrap();
    }
    panic!("future of {r:?} never ready");
}

/// The `async` API agrees with `wait` on the same cases: a cancelled receive resolves to
/// `Failed { Canceled }`, a truncated one to `Failed { Truncated }` with both lengths, a
/// request already complete before the first poll resolves at the first poll, and the
/// other completions stay queued in order for `poll_completion`. Guards: a future that
/// takes the first queued completion rather than its own, or stays pending on a
/// completion that was ready before it was created.
#[test]
fn futures_resolve_like_wait() {
    for kind in PATHS {
        let (mut a, mut b, ab, ba, _f) = pair(kind);
        let x = b.trecv(ba, 9u64, 8).unwrap();
        b.cancel(x).unwrap();
        let r = b.trecv(ba, 1u64, 4).unwrap();
        let q = b.trecv(ba, ANY_TAG, 64).unwrap();
        let s = a.tsend(ab, 1, vec![1; 10]).unwrap();
        let s2 = a.tsend(ab, 2, vec![2; 10]).unwrap();
        match await_with(&mut b, r, &mut a) {
            Err(Error::Failed {
                request,
                error:
                    OpError::Truncated {
                        msg_len: 10,
                        buf_len: 4,
                    },
                ..
            }) => assert_eq!(request, r, "{kind}"),
            other => panic!("{kind}: {other:?}"),
        }
        // q's completion is ready now or soon; then the cancelled one (queued first).
        let c = await_with(&mut b, q, &mut a).unwrap();
        assert_eq!((c.tag, c.data.clone()), (2, vec![2; 10]), "{kind}");
        match await_with(&mut b, x, &mut a) {
            Err(Error::Failed {
                request,
                error: OpError::Canceled,
                ..
            }) => assert_eq!(request, x, "{kind}"),
            other => panic!("{kind}: {other:?}"),
        }
        for s in [s, s2] {
            await_with(&mut a, s, &mut b).unwrap();
        }
        assert!(b.poll_completion().is_none(), "{kind}");
    }
}

/// A receive into the caller's buffer hands the buffer back in its completion "so a loop
/// can hand it back and receive without allocating" (`Endpoint::trecv_into`): also
/// when the receive is cancelled (an allocation-free loop that cancels a receive on a
/// timeout gets its buffer back, empty, with its capacity), and when it is truncated.
/// Guards: a cancel that drops the caller's buffer and completes with a new empty one.
#[test]
fn a_cancelled_receive_into_a_buffer_gives_the_buffer_back() {
    for kind in PATHS {
        let (mut a, mut b, ab, ba, _f) = pair(kind);
        // Held aside (the first receive), then one in the engine behind another spec.
        let r1 = b.trecv_into(ba, 1u64, vec![7; 4096]).unwrap();
        let r2 = b.recv_into(ANY_SOURCE, vec![7; 4096]).unwrap();
        b.cancel(r2).unwrap();
        b.cancel(r1).unwrap();
        for r in [r1, r2] {
            let c = done(&mut b, r, &mut [&mut a]);
            assert_eq!(c.status(), Err(OpError::Canceled), "{kind}");
            assert!(c.data.is_empty(), "{kind}");
            assert!(
                c.data.capacity() >= 4096,
                "{kind}: the buffer is not handed back (capacity {})",
                c.data.capacity()
            );
        }
        // Truncated: the same buffer, cut to its own length.
        let r = b.trecv_into(ba, 3u64, vec![0; 4096]).unwrap();
        let s = a.tsend(ab, 3, vec![3; 5000]).unwrap();
        let c = done(&mut b, r, &mut [&mut a]);
        assert!(c.error().is_some(), "{kind}");
        assert_eq!(c.data, vec![3; 4096], "{kind}");
        assert!(c.data.capacity() >= 4096, "{kind}");
        done(&mut a, s, &mut [&mut b]).into_result().unwrap();
    }
}

/// Waiting again on a request whose completion was already taken (by `wait`,
/// `poll_completion`, or a cancel's `wait`) finds nothing: `wait_for` ends in `Timeout`
/// naming that request, takes no other request's completion (one queued behind stays
/// there), and nothing panics. Guards: a wait that returns the first queued completion
/// rather than its own, or that panics on an unknown request.
#[test]
fn waiting_again_on_a_finished_request_takes_nothing_else() {
    let limit = std::time::Duration::from_millis(20);
    for kind in PATHS {
        let (mut a, mut b, ab, ba, _f) = pair(kind);
        let r = b.trecv(ba, 1u64, 8).unwrap();
        let s = a.tsend(ab, 1, vec![1; 8]).unwrap();
        done(&mut b, r, &mut [&mut a]).into_result().unwrap();
        let x = b.trecv(ba, 2u64, 8).unwrap();
        b.cancel(x).unwrap();
        assert!(b.wait(x).is_err(), "{kind}");
        // Queued behind: a completed receive nobody took yet.
        let q = b.trecv(ba, 3u64, 8).unwrap();
        let s3 = a.tsend(ab, 3, vec![3; 8]).unwrap();
        for _ in 0..20_000 {
            a.progress().unwrap();
            b.progress().unwrap();
            if b.stats().ready_completions > 0 {
                break;
            }
        }
        for old in [r, x] {
            match b.wait_for(old, limit) {
                Err(Error::Timeout { request, .. }) => assert_eq!(request, old, "{kind}"),
                other => panic!("{kind}: waiting again on {old:?}: {other:?}"),
            }
        }
        assert_eq!(done(&mut b, q, &mut [&mut a]).data, vec![3; 8], "{kind}");
        for s in [s, s3] {
            done(&mut a, s, &mut [&mut b]).into_result().unwrap();
        }
    }
}

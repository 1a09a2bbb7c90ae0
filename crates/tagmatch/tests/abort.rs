//! `Endpoint::abort` and `Endpoint::remove_peer`: a request a peer leaves waiting ends
//! with `OpError::Aborted` on the application's word (the protocol has no clock and no
//! error answer), `wait` then returns the error instead of hanging, and what the request
//! held is released; requests a peer would drop unanswered are refused at call time.

mod common;

use std::time::Duration;

use common::{done, ep, pair, PATHS};
use tagmatch::{
    AtomicArgs, AtomicOp, Datatype, Endpoint, Error, MemFabric, OpError, OpKind, RemoteAddr,
    TagMatch, ANY_SOURCE, MAX_READ_SIZE,
};

/// A short wait: long enough to show a request is not completing.
const SHORT: Duration = Duration::from_millis(30);

fn fetch_add() -> AtomicArgs {
    AtomicArgs {
        datatype: Datatype::U64,
        op: AtomicOp::Sum,
        operand: 1u64.to_le_bytes().to_vec(),
        compare: None,
    }
}

/// A key the peer never issued: the peer refuses the request without an answer.
const BOGUS: RemoteAddr = RemoteAddr {
    addr: 0x1000,
    key: 0xdead_beef,
};

/// Progresses `b` (the peer) a little, so it receives and refuses what `a` sent.
fn let_peer_see(a: &mut Endpoint, b: &mut Endpoint) {
    for _ in 0..200 {
        a.progress().unwrap();
        b.progress().unwrap();
    }
}

/// A read and a fetch atomic the peer refuses (a key it never issued) get no answer:
/// `wait` times out; `abort` ends them, `wait` then fails with `Aborted` at once, and
/// nothing stays in flight. A second abort, and one of another endpoint's request, are
/// `UnknownRequest`.
#[test]
fn requests_a_peer_refuses_end_with_abort() {
    for kind in ["proto", "fast", "udp"] {
        let (mut a, mut b, ab, _, _f) = pair(kind);
        let read = a.read(ab, 64, BOGUS).unwrap();
        let fetch = a.fetch_atomic(ab, fetch_add(), BOGUS).unwrap();
        let_peer_see(&mut a, &mut b);
        assert!(b.stats().rdm.rx_requests_refused >= 2, "{kind}");
        for r in [read, fetch] {
            assert!(
                matches!(a.wait_for(r, SHORT), Err(Error::Timeout { .. })),
                "{kind}"
            );
        }
        a.abort(read).unwrap();
        a.abort(fetch).unwrap();
        for (r, kind_) in [(read, OpKind::Read), (fetch, OpKind::AtomicFetch)] {
            match a.wait(r) {
                Err(Error::Failed {
                    request,
                    kind: k,
                    error: OpError::Aborted,
                }) => assert_eq!((request, k), (r, kind_), "{kind}"),
                other => panic!("{kind}: {other:?}"),
            }
            assert!(matches!(a.abort(r), Err(Error::UnknownRequest(x)) if x == r));
        }
        let s = a.stats();
        assert_eq!(
            (s.tx_in_flight, s.rx_in_flight, s.regions),
            (0, 0, 0),
            "{kind}"
        );
        assert_eq!(s.facade.aborts, 2);
        assert_eq!(s.rdm.aborted, 2);
        // Another endpoint's request.
        let other = b.recv(ANY_SOURCE, 8).unwrap();
        assert!(matches!(a.abort(other), Err(Error::UnknownRequest(_))));
        b.abort(other).unwrap();
        assert_eq!(done(&mut b, other, &mut []).status(), Err(OpError::Aborted));
    }
}

/// What the requester can check is refused before anything is sent, with an error that
/// names it.
#[test]
fn requests_a_peer_would_drop_are_refused_at_call_time() {
    let f = MemFabric::new();
    let mut a = ep(&f, false);
    let b = ep(&f, false);
    let ab = a.insert_peer(&b.address()).unwrap();
    let wrap = RemoteAddr {
        addr: u64::MAX - 3,
        key: 1,
    };
    match a.read(ab, MAX_READ_SIZE as usize + 1, BOGUS) {
        Err(e @ Error::ReadTooLarge { len, max }) => {
            assert_eq!((len, max), (MAX_READ_SIZE + 1, MAX_READ_SIZE));
            assert!(e.to_string().contains("longer than a peer serves"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    match a.fetch_atomic(ab, fetch_add(), wrap) {
        Err(e @ Error::RemoteRange { addr, len }) => {
            assert_eq!((addr, len), (u64::MAX - 3, 8));
            assert!(
                e.to_string().contains("past the end of the address space"),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        a.write(ab, vec![0; 8], wrap),
        Err(Error::RemoteRange { .. })
    ));
    let s = a.stats();
    assert_eq!(
        (s.tx_in_flight, s.rx_in_flight, s.facade.call_errors),
        (0, 0, 3)
    );
}

/// Receives at every stage: posted (held aside or in the engine on the fast path), and
/// matched to a protocol-path message whose sender stopped (a long-read into a fast-path
/// receiver, "mixed"). Each ends with `Aborted`, once.
#[test]
fn receives_end_with_abort_on_every_path() {
    for kind in PATHS {
        let (mut a, mut b, ab, ba, _f) = pair(kind);
        let held = b.trecv(ba, TagMatch::exact(1), 8).unwrap();
        let other = b.trecv(ba, TagMatch::exact(2), 8).unwrap();
        b.abort(other).unwrap();
        b.abort(held).unwrap();
        for r in [held, other] {
            let c = done(&mut b, r, &mut [&mut a]);
            assert_eq!(
                (c.kind, c.status()),
                (OpKind::Recv, Err(OpError::Aborted)),
                "{kind}"
            );
        }
        // Matched, its data still to come: the sender does not progress after its REQ.
        let len = 2 << 20;
        let r = b.trecv(ba, TagMatch::exact(3), len).unwrap();
        let s = a.tsend(ab, 3, vec![5; len]).unwrap();
        let receiving = |b: &Endpoint| {
            let s = b.stats();
            s.rx_in_flight > 0 && s.matching.posted_depth == 0
        };
        for _ in 0..50 {
            a.progress().unwrap();
            b.progress().unwrap();
            if receiving(&b) {
                break;
            }
        }
        // (On the fast path both ends move the message whole in one call.)
        assert!(
            kind == "fast" || receiving(&b),
            "{kind}: matched, data to come"
        );
        let aborted = b.abort(r);
        assert!(kind == "fast" || aborted.is_ok(), "{kind}: {aborted:?}");
        match aborted {
            Ok(()) => {
                let c = done(&mut b, r, &mut []);
                assert_eq!(c.status(), Err(OpError::Aborted), "{kind}");
                // The sender's owner gives up too (or it completed, if the peer took
                // everything before the abort).
                match a.abort(s) {
                    Ok(()) => assert_eq!(
                        done(&mut a, s, &mut []).status(),
                        Err(OpError::Aborted),
                        "{kind}"
                    ),
                    Err(Error::UnknownRequest(_)) => {}
                    Err(e) => panic!("{kind}: {e}"),
                }
            }
            // The fast path moved it whole already.
            Err(Error::UnknownRequest(_)) => {
                assert_eq!(done(&mut b, r, &mut [&mut a]).status(), Ok(()), "{kind}");
            }
            Err(e) => panic!("{kind}: {e}"),
        }
        let_peer_see(&mut a, &mut b);
        for x in [&a, &b] {
            let s = x.stats();
            assert_eq!((s.tx_in_flight, s.rx_in_flight), (0, 0), "{kind}: {s}");
        }
    }
}

/// `remove_peer` ends every request with the peer (here: one the peer refused, a receive
/// naming it, a delivery-complete send it never acknowledges because it does not
/// progress), leaves the others, forgets the peer (requests naming it are refused), and
/// drops its unexpected messages. Removed on both sides and inserted again, the two
/// talk again as new peers.
#[test]
fn remove_peer_ends_its_requests_and_forgets_it() {
    for kind in PATHS {
        let (mut a, mut b, ab, ba, _f) = pair(kind);
        // An unexpected message from b at a.
        let s = b.tsend(ba, 9, b"unexpected".to_vec()).unwrap();
        done(&mut b, s, &mut [&mut a]);
        let_peer_see(&mut a, &mut b);
        assert_eq!(a.stats().unexpected, 1, "{kind}");
        let fetch = a.fetch_atomic(ab, fetch_add(), BOGUS).unwrap();
        let named = a.trecv(ab, TagMatch::exact(1), 8).unwrap();
        let any = a.trecv(ANY_SOURCE, TagMatch::exact(2), 8).unwrap();
        let_peer_see(&mut a, &mut b);
        let opts = tagmatch::SendOptions {
            delivery_complete: true,
            ..Default::default()
        };
        // b does not progress from here: the DC send is never acknowledged.
        let dc = a.tsend_with(ab, 7, b"dc".to_vec(), opts).unwrap();
        for _ in 0..20 {
            a.progress().unwrap();
        }
        let n = a.remove_peer(ab).unwrap();
        assert_eq!(n, 3, "{kind}: the fetch, the named receive, the DC send");
        for (r, k) in [
            (fetch, OpKind::AtomicFetch),
            (named, OpKind::Recv),
            (dc, OpKind::Send),
        ] {
            let c = done(&mut a, r, &mut []);
            assert_eq!((c.kind, c.status()), (k, Err(OpError::Aborted)), "{kind}");
        }
        assert!(
            a.take_completion(any).is_none(),
            "{kind}: the any-source receive stays"
        );
        let st = a.stats();
        assert_eq!(st.unexpected, 0, "{kind}: its message dropped");
        assert_eq!(
            st.matching.posted_depth, 1,
            "{kind}: the any-source receive"
        );
        assert!(matches!(a.tsend(ab, 1, vec![1]), Err(Error::UnknownPeer(p)) if p == ab));
        assert!(matches!(a.remove_peer(ab), Err(Error::UnknownPeer(_))));
        a.cancel(any).unwrap();
        done(&mut a, any, &mut []);
        // Both sides forget, then meet again.
        b.remove_peer(ba).unwrap();
        let ab2 = a.insert_peer(&b.address()).unwrap();
        assert_ne!(ab2, ab);
        let r = b.trecv(ANY_SOURCE, TagMatch::exact(11), 8).unwrap();
        let s = a.tsend(ab2, 11, b"again".to_vec()).unwrap();
        let c = b.wait_with(r, &mut [&mut a]).unwrap();
        assert_eq!(&c.data[..], b"again", "{kind}");
        a.wait_with(s, &mut [&mut b]).unwrap();
    }
}

/// On the in-process fast path, the lane from a removed peer is closed: its later sends
/// fail as to a dropped endpoint, instead of being matched as from a peer this endpoint
/// forgot.
#[test]
fn a_removed_fast_path_peer_can_no_longer_send_here() {
    let f = MemFabric::new();
    let mut a = ep(&f, true);
    let mut b = ep(&f, true);
    let ab = a.insert_peer(&b.address()).unwrap();
    let ba = b.insert_peer(&a.address()).unwrap();
    let r = a.trecv(ANY_SOURCE, TagMatch::exact(1), 8).unwrap();
    let s = b.tsend(ba, 1, b"first".to_vec()).unwrap();
    a.wait_with(r, &mut [&mut b]).unwrap();
    b.wait(s).unwrap();
    assert_eq!(a.remove_peer(ab).unwrap(), 0);
    let r = a.trecv(ANY_SOURCE, TagMatch::exact(2), 8).unwrap();
    for _ in 0..10 {
        a.progress().unwrap();
        b.progress().unwrap();
    }
    let s = b.tsend(ba, 2, b"late".to_vec()).unwrap();
    assert_eq!(
        done(&mut b, s, &mut [&mut a]).status(),
        Err(OpError::SendFailed)
    );
    assert!(matches!(a.wait_for(r, SHORT), Err(Error::Timeout { .. })));
    a.abort(r).unwrap();
    assert_eq!(done(&mut a, r, &mut []).status(), Err(OpError::Aborted));
}

/// A delivery-complete send waits for its receiver's acknowledgement (on every path: the
/// fast path's lane ack, the protocol's RECEIPT); a receiver that does not progress
/// leaves it waiting. `abort` ends it; the acknowledgement coming later completes
/// nothing a second time.
#[test]
fn a_delivery_complete_send_ends_with_abort() {
    for kind in PATHS {
        let (mut a, mut b, ab, ba, _f) = pair(kind);
        // A first message: the handshake is done, the DC send goes at once.
        let r = b.trecv(ba, TagMatch::exact(3), 8).unwrap();
        let s = a.tsend(ab, 3, b"first".to_vec()).unwrap();
        done(&mut b, r, &mut [&mut a]);
        done(&mut a, s, &mut [&mut b]);
        let_peer_see(&mut a, &mut b);
        let opts = tagmatch::SendOptions {
            delivery_complete: true,
            ..Default::default()
        };
        let s = a.tsend_with(ab, 4, b"dc".to_vec(), opts).unwrap();
        assert!(
            matches!(a.wait_for(s, SHORT), Err(Error::Timeout { .. })),
            "{kind}"
        );
        a.abort(s).unwrap();
        assert!(matches!(
            a.wait(s),
            Err(Error::Failed {
                error: OpError::Aborted,
                ..
            })
        ));
        // The receiver takes it now and acknowledges it.
        let r = b.trecv(ba, TagMatch::exact(4), 8).unwrap();
        assert_eq!(&done(&mut b, r, &mut [&mut a]).data[..], b"dc", "{kind}");
        let_peer_see(&mut a, &mut b);
        assert!(a.take_completion(s).is_none(), "{kind}: completed twice");
        assert_eq!(a.stats().facade.completed, 2, "{kind}");
    }
}

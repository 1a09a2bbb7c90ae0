//! Review of session 14's fast-path commits through the facade: completions the protocol
//! node leaves in its endpoint's queue (`Node::counted`) and `take_completion` of the
//! newest ready completion (`take_completion_behind`'s `pop_back`).

use std::time::Duration;

use tagmatch::{Endpoint, MemFabric, OpError, Request, TagMatch};

mod common;
use common::{done, ep};

fn udp(budget_msgs: Option<usize>) -> Endpoint {
    let b = Endpoint::builder().udp("127.0.0.1:0".parse().unwrap());
    with_budget(b, budget_msgs)
}

fn mem(f: &MemFabric, budget_msgs: Option<usize>) -> Endpoint {
    with_budget(Endpoint::builder().mem(f).fast_path(false), budget_msgs)
}

fn with_budget(b: tagmatch::Builder, budget_msgs: Option<usize>) -> Endpoint {
    match budget_msgs {
        Some(m) => b.memory_budget(1 << 20, m),
        None => b,
    }
    .build()
    .unwrap()
}

/// A UDP endpoint whose budget is full (it holds refused messages) cancels a receive
/// and flushes: `flush` returns `true` (the held messages wait for the application), the
/// cancel's completion comes out once, and every held message arrives in order once
/// received.
///
/// Catches: 662fb38 without its flush fix (the cancel's completion, counted by the
/// flush's pump and left in the endpoint's queue, made `Node::flushed` take it for
/// output still to hand over: `flush` ran to its limit and returned `false`).
#[test]
fn flush_with_a_cancelled_receive_and_refused_messages_returns_true() {
    for over_udp in [false, true] {
        let f = MemFabric::new();
        let (a, b) = if over_udp {
            (udp(None), udp(Some(2)))
        } else {
            (mem(&f, None), mem(&f, Some(2)))
        };
        flush_case(a, b);
    }
}

fn flush_case(mut a: Endpoint, mut b: Endpoint) {
    let ab = a.insert_peer(&b.address()).unwrap();
    let ba = b.insert_peer(&a.address()).unwrap();
    const N: u64 = 10;
    let sends: Vec<Request> = (0..N)
        .map(|t| a.tsend(ab, t, vec![t as u8; 16]).unwrap())
        .collect();
    for s in &sends {
        assert!(done(&mut a, *s, &mut [&mut b]).is_ok());
    }
    let never = b.trecv(ba, TagMatch::exact(999), 16).unwrap();
    b.cancel(never).unwrap();
    // a keeps acknowledging meanwhile, as a live peer does.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let flushed = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                a.progress_timeout(Duration::from_millis(1)).unwrap();
            }
        });
        let r = b.flush(Duration::from_secs(3)).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    });
    assert!(flushed, "flush ran to its limit");
    let c = b.take_completion(never).expect("the cancel's completion");
    assert_eq!(c.status(), Err(OpError::Canceled));
    assert!(b.take_completion(never).is_none());
    for t in 0..N {
        let r = b.trecv(ba, TagMatch::exact(t), 16).unwrap();
        let c = done(&mut b, r, &mut [&mut a]);
        assert_eq!((c.tag, c.data), (t, vec![t as u8; 16]));
    }
    assert!(b.poll_completion().is_none());
}

/// `take_completion` of the newest ready completion, with one and with several older
/// ones before it, and of a request that is not ready (`None`, the queue untouched),
/// then everything else in completion order; the same on the fast path and the protocol
/// path.
///
/// Catches: `take_completion_behind` popping the back without checking it is the
/// request's (a request not ready, or ready in the middle, would take the newest), or
/// popping the front.
#[test]
fn take_completion_of_the_newest_leaves_the_others_in_order() {
    for fast in [false, true] {
        let f = MemFabric::new();
        let (mut a, mut b) = (ep(&f, fast), ep(&f, fast));
        let ab = a.insert_peer(&b.address()).unwrap();
        let ba = b.insert_peer(&a.address()).unwrap();
        let r: Vec<Request> = (0..5u64)
            .map(|t| b.trecv(ba, TagMatch::exact(t), 16).unwrap())
            .collect();
        let pending = b.trecv(ba, TagMatch::exact(77), 16).unwrap();
        for t in 0..5u64 {
            let _ = a.tsend(ab, t, vec![t as u8; 4]).unwrap();
        }
        let mut ready = 0;
        for _ in 0..100_000 {
            a.progress().unwrap();
            ready = b.progress().unwrap();
            if ready == 5 {
                break;
            }
        }
        assert_eq!(ready, 5, "fast {fast}");
        let got = |c: Option<tagmatch::Completion>| c.map(|c| (c.request, c.data));
        // Not ready: nothing taken, nothing moved.
        assert_eq!(got(b.take_completion(pending)), None, "fast {fast}");
        // The newest, behind four.
        assert_eq!(got(b.take_completion(r[4])), Some((r[4], vec![4u8; 4])));
        assert_eq!(got(b.take_completion(pending)), None, "fast {fast}");
        // The newest again (r[3]), then one in the middle.
        assert_eq!(got(b.take_completion(r[3])), Some((r[3], vec![3u8; 4])));
        assert_eq!(got(b.take_completion(r[1])), Some((r[1], vec![1u8; 4])));
        // The newest, behind exactly one.
        assert_eq!(got(b.take_completion(r[2])), Some((r[2], vec![2u8; 4])));
        assert_eq!(got(b.poll_completion()), Some((r[0], vec![0u8; 4])));
        assert_eq!(got(b.poll_completion()), None, "fast {fast}");
        b.cancel(pending).unwrap();
        let c = done(&mut b, pending, &mut [&mut a]);
        assert_eq!(c.status(), Err(OpError::Canceled));
    }
}

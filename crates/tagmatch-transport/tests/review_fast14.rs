//! Review of session 14's fast-path commits: the node's completions that stay in the
//! endpoint's queue (`Node::counted`), and the UDP device's `fill_due` on an ACK.
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{config, payload};
use tagmatch_rdm::{OpId, SendOpts};
use tagmatch_transport::mem::{MemFaults, MemNetwork};
use tagmatch_transport::{Node, RdmDevice};

fn small_budget() -> tagmatch_rdm::Config {
    tagmatch_rdm::Config {
        max_unexpected_msgs: 2,
        ..config()
    }
}

/// `b` holds packets it refused (its budget is full) and has a completion it has not
/// taken yet (its receive of message 0): `flush` returns `true` at once, as it does
/// without the completion. A completion waiting for the owner is no output for the
/// device: the node must not take the endpoint's queue of completions (where the ready
/// ones now stay) for transmits still to hand over, or `flush` runs to its limit.
fn flush_with_a_completion_not_taken<D: RdmDevice + Send>(mut a: Node<D>, mut b: Node<D>) {
    let ab = a.add_peer(b.addr());
    const N: u64 = 10;
    let first = b.endpoint_mut().trecv(None, 0, !0, 16).expect("trecv");
    let sends: Vec<OpId> = (0..N)
        .map(|i| {
            a.endpoint_mut()
                .tsend(ab, i, payload(16, i), SendOpts::default())
                .expect("tsend")
        })
        .collect();
    let mut done = 0;
    for _ in 0..10_000 {
        a.progress(Some(Duration::from_millis(1)))
            .expect("progress");
        b.progress(Some(Duration::ZERO)).expect("progress");
        while let Some(c) = a.poll_completion() {
            assert!(sends.contains(&c.op) && c.result.is_ok());
            done += 1;
        }
        if done == N {
            break;
        }
    }
    assert_eq!(done, N, "a's sends completed");
    assert!(b.endpoint().stats().rx_refused > 0, "b was never full");
    assert!(!b.is_idle(), "b holds refused packets");
    assert!(b.has_completions(), "b's receive of message 0 is ready");
    let stop = AtomicBool::new(false);
    let flushed = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                a.progress(Some(Duration::from_millis(1)))
                    .expect("progress");
            }
        });
        let r = b.flush(Duration::from_secs(3)).expect("flush");
        stop.store(true, Ordering::Relaxed);
        r
    });
    assert!(flushed, "flush ran to its limit");
    // The completion is still there, once, and the others follow in order.
    let c = b.poll_completion().expect("the receive of message 0");
    assert_eq!((c.op, c.tag, c.data), (first, 0, payload(16, 0)));
    assert!(b.poll_completion().is_none());
    for i in 1..N {
        let r = b.endpoint_mut().trecv(None, 0, !0, 16).expect("trecv");
        let mut got = None;
        for _ in 0..10_000 {
            a.progress(Some(Duration::ZERO)).expect("progress");
            b.progress(Some(Duration::from_millis(1)))
                .expect("progress");
            if let Some(c) = b.poll_completion() {
                got = Some(c);
                break;
            }
        }
        let c = got.unwrap_or_else(|| panic!("message {i} never arrived"));
        assert_eq!((c.op, c.tag, c.data), (r, i, payload(16, i)));
    }
}

/// Catches: 662fb38 as committed (`Node::flushed` reads `Endpoint::has_output`, which
/// counts the ready completions left in the endpoint's queue).
#[test]
fn flush_returns_with_a_completion_not_taken_in_memory() {
    let net = MemNetwork::with_faults(
        11,
        MemFaults {
            reorder: false,
            ..MemFaults::default()
        },
    );
    let a = Node::new(config(), net.device());
    let b = Node::new(small_budget(), net.device());
    flush_with_a_completion_not_taken(a, b);
}

/// The same over UDP (loopback).
#[test]
fn flush_returns_with_a_completion_not_taken_over_udp() {
    let a = common::udp_node("127.0.0.1:0", 1500, config());
    let b = common::udp_node("127.0.0.1:0", 1500, small_budget());
    flush_with_a_completion_not_taken(a, b);
}

/// Drives `a` and `b` until `b` has `n` ready completions (without taking them).
fn until_ready<D: RdmDevice>(a: &mut Node<D>, b: &mut Node<D>, n: usize) {
    let mut ready = 0;
    for _ in 0..10_000 {
        a.progress(Some(Duration::ZERO)).expect("progress");
        ready = b.progress(Some(Duration::ZERO)).expect("progress");
        if ready >= n {
            break;
        }
    }
    assert_eq!(ready, n, "completions ready");
}

/// Completions come out exactly once, in completion order, whatever mix of `wait`,
/// `poll_completion`, `send_now` and `progress` takes them, and `progress` returns how
/// many are ready: completions found by a pump (`progress`, `send_now`) are ready, one the
/// endpoint queued outside a pump (a cancel) only after the next pump; `wait` for one in
/// the middle leaves the older ones first. `has_completions` and `has_own_work` agree
/// with what `poll_completion` hands out.
///
/// Catches: a `wait` that moves the ready completions behind the endpoint's (order), a
/// `poll_completion` that takes the endpoint's queue before the node's, a pump that counts
/// the completions the endpoint queued outside a pump as already ready (cancel then
/// `poll_completion` without a pump), `progress` returning only `counted` or only the
/// node's queue.
#[test]
fn completions_come_once_and_in_order_through_every_taker() {
    let net = MemNetwork::new(5);
    let mut a = Node::new(config(), net.device());
    let mut b = Node::new(config(), net.device());
    let ab = a.add_peer(b.addr());
    let r: Vec<OpId> = (0..6u64)
        .map(|t| b.endpoint_mut().trecv(None, t, !0, 16).expect("trecv"))
        .collect();
    let late = b.endpoint_mut().trecv(None, 99, !0, 16).expect("trecv");
    for t in 0..3u64 {
        a.endpoint_mut()
            .tsend(ab, t, payload(16, t), SendOpts::default())
            .expect("tsend");
    }
    until_ready(&mut a, &mut b, 3);
    // wait for the middle one: r[0] and r[2] stay ready (in the node's queue now).
    let c = b.wait(r[1], Duration::from_secs(1)).expect("wait");
    assert_eq!(c.op, r[1]);
    assert_eq!(b.progress(Some(Duration::ZERO)).expect("progress"), 2);
    // Three more arrive (counted in the endpoint's queue, behind the node's two).
    for t in 3..6u64 {
        a.endpoint_mut()
            .tsend(ab, t, payload(16, t), SendOpts::default())
            .expect("tsend");
    }
    until_ready(&mut a, &mut b, 5);
    // A cancel now, outside a pump: not ready yet.
    b.endpoint_mut().cancel(late).expect("cancel");
    assert_eq!(b.poll_completion().map(|c| c.op), Some(r[0]));
    assert_eq!(b.poll_completion().map(|c| c.op), Some(r[2]));
    assert_eq!(b.poll_completion().map(|c| c.op), Some(r[3]));
    // wait for the last counted one: r[4] moves into the node's queue first.
    assert_eq!(b.wait(r[5], Duration::from_secs(1)).expect("wait").op, r[5]);
    // It found r[5] without a pass: the cancel is found by the next one, behind r[4].
    assert!(b.has_completions() && b.has_own_work());
    assert_eq!(b.progress(Some(Duration::ZERO)).expect("progress"), 2);
    assert_eq!(b.poll_completion().map(|c| c.op), Some(r[4]));
    let c = b.poll_completion().expect("the cancel");
    assert!(c.op == late && c.result.is_err());
    assert!(b.poll_completion().is_none());
    assert!(!b.has_completions());
    // A cancel, then send_now (a pump): ready at once, counted by the next progress.
    let late2 = b.endpoint_mut().trecv(None, 98, !0, 16).expect("trecv");
    b.endpoint_mut().cancel(late2).expect("cancel");
    assert!(!b.has_completions(), "queued outside a pump");
    assert!(b.has_own_work(), "but the next progress finds it");
    b.send_now().expect("send_now");
    assert!(b.has_completions(), "send_now's pump found it");
    assert_eq!(b.progress(Some(Duration::ZERO)).expect("progress"), 1);
    assert_eq!(b.poll_completion().map(|c| c.op), Some(late2));
    assert!(b.poll_completion().is_none() && !b.has_completions());
}

/// A completion found by `send_now`'s pump makes the next `progress` a pass without a
/// wait, as when the pump moved it into the node: over UDP, no `poll(2)` (counted in
/// `SockStats::poll_calls`); an idle `progress` afterwards does wait (the counter works).
///
/// Catches: a `send_now` whose `pumped` compares the node's own queue (always empty now)
/// instead of `counted`; a pump that does not count completions it finds.
#[test]
fn a_completion_found_by_send_now_makes_the_next_progress_not_wait() {
    let mut a = common::udp_node("127.0.0.1:0", 1500, config());
    let mut b = common::udp_node("127.0.0.1:0", 1500, config());
    let _ab = a.add_peer(b.addr());
    let r = b.endpoint_mut().trecv(None, 1, !0, 16).expect("trecv");
    b.endpoint_mut().cancel(r).expect("cancel");
    b.send_now().expect("send_now");
    let polls = b.device().stats().sock.poll_calls;
    let ready = b
        .progress(Some(Duration::from_millis(200)))
        .expect("progress");
    assert_eq!(ready, 1);
    assert_eq!(
        b.device().stats().sock.poll_calls,
        polls,
        "progress waited with a completion ready"
    );
    assert_eq!(b.poll_completion().map(|c| c.op), Some(r));
    b.progress(Some(Duration::from_millis(1)))
        .expect("progress");
    assert!(
        b.device().stats().sock.poll_calls > polls,
        "an idle progress waits"
    );
}

/// An owner that takes completions from the endpoint directly
/// (`node.endpoint_mut().poll_completion()`, e.g. to take a cancel's at once) takes them
/// from the queue the node's ready ones wait in: the node must not count them again.
/// `progress` returns what `poll_completion` then hands out, `has_completions` does not
/// claim one that is gone, and a completion queued later (a cancel) makes the next
/// `progress` a pass without a wait (no `poll(2)`), as a pump that finds a completion
/// always did.
///
/// Catches: 662fb38 as committed (`counted` kept the taken completion: `progress`
/// returned 1 with none to take, `has_completions` held, and the cancel's completion,
/// one in a queue of one where one was counted, was not seen as new: `progress` slept).
#[test]
fn completions_taken_from_the_endpoint_directly_are_not_counted_again() {
    let mut a = common::udp_node("127.0.0.1:0", 1500, config());
    let mut b = common::udp_node("127.0.0.1:0", 1500, config());
    let ab = a.add_peer(b.addr());
    let r = b.endpoint_mut().trecv(None, 1, !0, 16).expect("trecv");
    a.endpoint_mut()
        .tsend(ab, 1, payload(16, 1), SendOpts::default())
        .expect("tsend");
    let mut ready = 0;
    for _ in 0..10_000 {
        a.progress(Some(Duration::from_millis(1)))
            .expect("progress");
        ready = b.progress(Some(Duration::ZERO)).expect("progress");
        if ready > 0 {
            break;
        }
    }
    assert_eq!(ready, 1, "the receive completed");
    // Every completion comes out once, through either queue.
    let mut taken = Vec::new();
    taken.extend(b.endpoint_mut().poll_completion().map(|c| c.op));
    let n = b.progress(Some(Duration::ZERO)).expect("progress");
    let mut via_node = 0;
    while let Some(c) = b.poll_completion() {
        taken.push(c.op);
        via_node += 1;
    }
    assert_eq!(taken, [r], "once");
    assert_eq!(
        n, via_node,
        "progress counted what poll_completion handed out"
    );
    assert!(!b.has_completions());
    // A cancel's completion, queued outside a pump, is found by the next progress
    // without a wait.
    let late = b.endpoint_mut().trecv(None, 2, !0, 16).expect("trecv");
    b.endpoint_mut().cancel(late).expect("cancel");
    let polls = b.device().stats().sock.poll_calls;
    assert_eq!(
        b.progress(Some(Duration::from_millis(200)))
            .expect("progress"),
        1
    );
    assert_eq!(
        b.device().stats().sock.poll_calls,
        polls,
        "progress waited with a completion ready"
    );
    assert_eq!(b.poll_completion().map(|c| c.op), Some(late));
    assert!(b.poll_completion().is_none() && !b.has_completions());
}

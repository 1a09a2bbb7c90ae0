//! Review of the UDP "send at once" (`Endpoint::sent`, `Node::send_now`,
//! `RdmDevice::send_soon`): the facade's send calls now pump the protocol node, which
//! moves the endpoint's queued completions into the node, inside the application's call.

mod common;

use std::time::Duration;

use tagmatch::{Endpoint, Peer, TagMatch};

/// A connected UDP pair, one exchange done both ways and every frame acknowledged: no
/// frame of either is in flight. `(a, b, a's peer b, b's peer a)`.
fn idle_pair() -> (Endpoint, Endpoint, Peer, Peer) {
    let (mut a, mut b) = common::udp_pair();
    let ab = a.insert_peer(&b.address()).unwrap();
    let ba = b.insert_peer(&a.address()).unwrap();
    let s = a.tsend(ab, 1, vec![1u8; 8]).unwrap();
    let r = b.trecv(ba, 1, 8).unwrap();
    b.wait_with(r, &mut [&mut a]).unwrap();
    a.wait_with(s, &mut [&mut b]).unwrap();
    let s = b.tsend(ba, 2, vec![2u8; 8]).unwrap();
    let r = a.trecv(ab, 2, 8).unwrap();
    a.wait_with(r, &mut [&mut b]).unwrap();
    b.wait_with(s, &mut [&mut a]).unwrap();
    settle(&mut a, &mut b);
    (a, b, ab, ba)
}

/// Progresses both until each has every frame acknowledged.
fn settle(a: &mut Endpoint, b: &mut Endpoint) {
    for _ in 0..4000 {
        let fa = a.flush(Duration::from_millis(1)).unwrap();
        let fb = b.flush(Duration::from_millis(1)).unwrap();
        if fa && fb {
            return;
        }
    }
    panic!("not settled");
}

/// `b` holds `a`'s message with tag 7 as unexpected (no receive posted yet).
fn unexpected_at_b(a: &mut Endpoint, b: &mut Endpoint, ab: Peer, ba: Peer) {
    let s = a.tsend(ab, 7, vec![7u8; 8]).unwrap();
    let mut seen = false;
    for _ in 0..200_000 {
        a.progress().unwrap();
        b.progress().unwrap();
        if b.tprobe(ba, 7).is_some() {
            seen = true;
            break;
        }
    }
    assert!(seen, "the message reached b");
    a.wait_with(s, &mut [b]).unwrap();
    settle(a, b);
}

/// A receive that meets an unexpected message completes in the protocol endpoint at
/// once; the next `progress_timeout` used to pump it and, having moved something, not
/// block. A send posted in between now pumps it into the node first (`send_now`):
/// `Node::progress` then sees nothing moved and blocks in `poll(2)` for the timeout (or
/// until the next datagram or timer) with the completion ready.
#[test]
fn a_completion_pumped_by_a_send_keeps_the_next_progress_from_blocking() {
    let (mut a, mut b, ab, ba) = idle_pair();
    unexpected_at_b(&mut a, &mut b, ab, ba);
    let r = b.trecv(ba, 7, 8).unwrap();
    let s = b.tsend(ba, 8, vec![8u8; 8]).unwrap();
    let polls = common::udp_poll_calls(&b);
    let t = std::time::Instant::now();
    let n = b.progress_timeout(Duration::from_secs(5)).unwrap();
    // (Informational only: how long the call took.)
    eprintln!("progress_timeout took {:?}", t.elapsed());
    assert!(n >= 1, "the receive's completion is ready");
    assert_eq!(
        common::udp_poll_calls(&b),
        polls,
        "a completion was ready: progress_timeout must not block in poll(2)"
    );
    assert_eq!(b.take_completion(r).unwrap().data, vec![7u8; 8]);
    let r = a.trecv(ab, 8, 8).unwrap();
    a.wait_with(r, &mut [&mut b]).unwrap();
    b.wait_with(s, &mut [&mut a]).unwrap();
}

/// Injected sends to an idle peer (sent at once, their completions pumped in later send
/// calls) never reach the application's completion queue; the application's own
/// completions arrive, each once.
#[test]
fn injected_sends_sent_at_once_leak_no_completion() {
    let (mut a, mut b, ab, ba) = idle_pair();
    let mut mine = Vec::new();
    for round in 0..50u64 {
        let r = b.trecv(ba, 100 + round, 8).unwrap();
        a.tinject(ab, 100 + round, &[round as u8; 8]).unwrap();
        // A tracked send behind it: the injected one's completion (after the peer's
        // ACK) is pumped by this call's `send_now` when it came in meanwhile.
        let s = a.tsend(ab, 1000 + round, vec![round as u8; 8]).unwrap();
        let r2 = b.trecv(ba, 1000 + round, 8).unwrap();
        assert_eq!(
            b.wait_with(r, &mut [&mut a]).unwrap().data,
            vec![round as u8; 8]
        );
        b.wait_with(r2, &mut [&mut a]).unwrap();
        mine.push(s);
        // Every other round, let the injected frames be acknowledged.
        if round % 2 == 0 {
            settle(&mut a, &mut b);
        }
    }
    settle(&mut a, &mut b);
    let mut got = Vec::new();
    for _ in 0..1000 {
        a.progress().unwrap();
        while let Some(c) = a.poll_completion() {
            got.push(c.request);
        }
    }
    assert_eq!(
        got, mine,
        "the tracked sends' completions, once each, in order"
    );
}

/// Replies posted from inside a completion loop (the pattern the send at once speeds
/// up): every message arrives once, in order, and every request completes once.
#[test]
fn ping_pong_from_a_completion_loop_loses_and_duplicates_nothing() {
    let (mut a, mut b, ab, ba) = idle_pair();
    const N: u64 = 300;
    // b echoes every message it gets, posting its next receive first.
    let mut b_recv = Some(b.trecv(ba, TagMatch::masked(0, 0), 16).unwrap());
    let mut a_recv = Some(a.trecv(ab, TagMatch::masked(0, 0), 16).unwrap());
    let mut next = 0u64;
    let _first = a.tsend(ab, next, next.to_le_bytes().to_vec()).unwrap();
    let mut a_got = Vec::new();
    let mut b_got = Vec::new();
    let (mut a_sends, mut b_sends) = (1u64, 0u64);
    let (mut a_send_done, mut b_send_done) = (0u64, 0u64);
    for _ in 0..2_000_000 {
        a.progress().unwrap();
        while let Some(c) = a.poll_completion() {
            match c.kind {
                tagmatch::OpKind::Recv => {
                    assert_eq!(Some(c.request), a_recv);
                    a_got.push(c.tag);
                    next += 1;
                    a_recv = Some(a.trecv(ab, TagMatch::masked(0, 0), 16).unwrap());
                    if next < N {
                        let _ = a.tsend(ab, next, next.to_le_bytes().to_vec()).unwrap();
                        a_sends += 1;
                    }
                }
                _ => a_send_done += 1,
            }
        }
        b.progress().unwrap();
        while let Some(c) = b.poll_completion() {
            match c.kind {
                tagmatch::OpKind::Recv => {
                    assert_eq!(Some(c.request), b_recv);
                    b_got.push(c.tag);
                    b_recv = Some(b.trecv(ba, TagMatch::masked(0, 0), 16).unwrap());
                    let _ = b.tsend(ba, c.tag, c.data.clone()).unwrap();
                    b_sends += 1;
                }
                _ => b_send_done += 1,
            }
        }
        if a_got.len() as u64 == N && a_send_done == a_sends && b_send_done == b_sends {
            break;
        }
    }
    let want: Vec<u64> = (0..N).collect();
    assert_eq!(b_got, want);
    assert_eq!(a_got, want);
    assert_eq!((a_send_done, b_send_done), (N, N));
}

/// A receiver whose unexpected budget is full refuses a message (held by its device);
/// a receive posted then a send posted (whose `send_now` pumps) must not lose the
/// refused message's redelivery: it completes the receive.
#[test]
fn a_refused_message_is_taken_after_a_receive_and_a_send() {
    let mk = |budget: bool| {
        let b = Endpoint::builder().wait_limit(Duration::from_secs(20));
        let b = if budget {
            b.memory_budget(1 << 20, 2)
        } else {
            b
        };
        b.udp("127.0.0.1:0".parse().unwrap()).build().unwrap()
    };
    let (mut a, mut b) = (mk(false), mk(true));
    let ab = a.insert_peer(&b.address()).unwrap();
    let ba = b.insert_peer(&a.address()).unwrap();
    // Four messages: two fit the budget, two are refused.
    let sends: Vec<_> = (0..4u64)
        .map(|t| a.tsend(ab, t, vec![t as u8; 8]).unwrap())
        .collect();
    for _ in 0..20_000 {
        a.progress().unwrap();
        b.progress().unwrap();
    }
    let held = match b.stats().device {
        tagmatch::DeviceStats::Udp(u) => u.rnr_held,
        _ => unreachable!(),
    };
    assert!(held > 0, "some message was refused");
    // Receives for the refused ones first (in order: a peer's messages match in
    // order), then for the two unexpected ones, each followed by a send.
    let mut out = Vec::new();
    for t in [2u64, 3, 0, 1] {
        let r = b.trecv(ba, t, 8).unwrap();
        out.push(b.tsend(ba, 50 + t, vec![9u8; 8]).unwrap());
        let c = b.wait_with(r, &mut [&mut a]).unwrap();
        assert_eq!(c.data, vec![t as u8; 8]);
    }
    for s in sends {
        a.wait_with(s, &mut [&mut b]).unwrap();
    }
    for t in 0..4u64 {
        let r = a.trecv(ab, 50 + t, 8).unwrap();
        a.wait_with(r, &mut [&mut b]).unwrap();
    }
    for s in out {
        b.wait_with(s, &mut [&mut a]).unwrap();
    }
}

/// Sends to an idle peer leave in the call once per `progress`; a `progress` between
/// re-arms it; a send behind a frame in flight waits (no datagram in the call).
#[test]
fn the_send_at_once_is_rearmed_by_progress_only() {
    let (mut a, mut b, ab, ba) = idle_pair();
    let t0 = common::udp_tx_datagrams(&a);
    let s1 = a.tsend(ab, 10, vec![1u8; 8]).unwrap();
    assert_eq!(common::udp_tx_datagrams(&a), t0 + 1, "first: at once");
    // b answers and acknowledges; a reads the ACK only at its progress.
    let r = b.trecv(ba, 10, 8).unwrap();
    b.wait_with(r, &mut [&mut a]).unwrap();
    a.wait_with(s1, &mut [&mut b]).unwrap();
    settle(&mut a, &mut b);
    let t1 = common::udp_tx_datagrams(&a);
    let s2 = a.tsend(ab, 11, vec![2u8; 8]).unwrap();
    assert_eq!(
        common::udp_tx_datagrams(&a),
        t1 + 1,
        "after a progress: at once again"
    );
    let s3 = a.tsend(ab, 12, vec![3u8; 8]).unwrap();
    assert_eq!(
        common::udp_tx_datagrams(&a),
        t1 + 1,
        "behind a frame in flight: waits"
    );
    for (t, s) in [(11u64, s2), (12, s3)] {
        let r = b.trecv(ba, t, 8).unwrap();
        b.wait_with(r, &mut [&mut a]).unwrap();
        a.wait_with(s, &mut [&mut b]).unwrap();
    }
}

/// The once-per-progress guard (`sent_soon`) holds the second and later sends to idle
/// peers for `progress` so that they go in one batch. With the default
/// `UdpConfig::connect_peers` (4) each of the first peers has a socket of its own, and
/// one `sendmmsg` sends through one socket only: held, they still cost one call each at
/// `progress` (this review's finding). Since the review the guard applies to peers on
/// the shared socket only: each of these sends leaves in its own call, and nothing is
/// left for `progress`.
#[test]
fn a_fan_out_to_peers_with_sockets_of_their_own_costs_a_call_per_peer_at_progress() {
    let mut a = common::udp_pair().0;
    let (mut peers, to, from) = common::idle_fan_out(&mut a, 3);
    let peer_sockets = match a.stats().device {
        tagmatch::DeviceStats::Udp(u) => u.peer_sockets,
        _ => unreachable!(),
    };
    assert_eq!(peer_sockets, 3, "each peer has a socket of its own");
    let c0 = common::udp_send_calls(&a);
    let sends: Vec<_> = (0..3)
        .map(|i| a.tsend(to[i], 3, vec![3u8; 8]).unwrap())
        .collect();
    // (Main after the review: peers with sockets of their own are not held by the
    // once-per-progress guard, which saved them no call; each leaves in its send.)
    assert_eq!(
        common::udp_send_calls(&a),
        c0 + 3,
        "each at once, one call per socket"
    );
    a.progress().unwrap();
    assert_eq!(
        common::udp_send_calls(&a),
        c0 + 3,
        "nothing held for progress"
    );
    common::finish_fan_out(&mut a, &mut peers, &from, sends, 3);
}

//! A loss-free loopback path sends every frame exactly once: no retransmission (timer or
//! fast) and no duplicate, counted by the devices. Both nodes are stepped from one thread,
//! so a descheduled test process delays both sides alike; nothing here measures time.
use std::collections::VecDeque;
use std::time::Duration;

use tagmatch_rdm::{Config, OpId, OpKind, SendOpts};
use tagmatch_transport::udp::{UdpConfig, UdpDevice, UdpStats};
use tagmatch_transport::Node;

fn node() -> Node<UdpDevice> {
    let u = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
    Node::new(Config::default(), UdpDevice::bind(u).expect("bind"))
}

/// Steps both nodes until `op` of `n` completes; returns its completion's data.
fn run(
    n: &mut Node<UdpDevice>,
    other: &mut Node<UdpDevice>,
    op: OpId,
    done: &mut Vec<(OpId, Vec<u8>)>,
) -> Vec<u8> {
    for _ in 0..10_000_000u64 {
        if let Some(i) = done.iter().position(|(o, _)| *o == op) {
            return done.swap_remove(i).1;
        }
        n.progress(Some(Duration::ZERO)).expect("progress");
        other.progress(Some(Duration::ZERO)).expect("progress");
        while let Some(c) = n.poll_completion() {
            assert_eq!(c.result, Ok(()), "{:?}", c.kind);
            done.push((c.op, c.data));
        }
    }
    panic!("operation {op:?} did not complete");
}

fn assert_clean(who: &str, s: &UdpStats) {
    assert!(s.frames_sent > 0, "{who}: {s:?}");
    assert_eq!(
        (s.retransmits, s.fast_retransmits, s.duplicates),
        (0, 0, 0),
        "{who}: {s:?}"
    );
    assert_eq!(
        (
            s.bad_frames,
            s.beyond_window,
            s.peers_failed,
            s.sock.tx_errors
        ),
        (0, 0, 0, 0),
        "{who}: {s:?}"
    );
}

#[test]
fn loss_free_loopback_sends_every_frame_once() {
    let mut a = node();
    let mut b = node();
    let ab = a.add_peer(b.addr());
    let ba = b.add_peer(a.addr());
    let (mut da, mut db) = (Vec::new(), Vec::new());
    // Ping-pong of small messages, then windows of eager, medium and long-read sizes.
    for i in 0..2000u32 {
        let r = b.endpoint_mut().trecv(Some(ba), 1, 0, 8).expect("trecv");
        let s = a
            .endpoint_mut()
            .tsend(ab, 1, i.to_le_bytes().repeat(2), SendOpts::default())
            .expect("tsend");
        let got = run(&mut b, &mut a, r, &mut db);
        assert_eq!(got, i.to_le_bytes().repeat(2));
        let r2 = a.endpoint_mut().trecv(Some(ab), 2, 0, 8).expect("trecv");
        let s2 = b
            .endpoint_mut()
            .tsend(ba, 2, got, SendOpts::default())
            .expect("tsend");
        run(&mut a, &mut b, r2, &mut da);
        run(&mut a, &mut b, s, &mut da);
        run(&mut b, &mut a, s2, &mut db);
    }
    for (len, count) in [(1000usize, 500usize), (60_000, 60), (1 << 20, 12)] {
        let mut sends = VecDeque::new();
        let mut recvs = VecDeque::new();
        for j in 0..count {
            recvs.push_back(b.endpoint_mut().trecv(Some(ba), 3, 0, len).expect("trecv"));
            let s = a
                .endpoint_mut()
                .tsend(ab, 3, vec![j as u8; len], SendOpts::default())
                .expect("tsend");
            sends.push_back((s, j));
            if sends.len() >= 8 {
                let (s, j) = sends.pop_front().expect("send");
                run(&mut a, &mut b, s, &mut da);
                let r = recvs.pop_front().expect("recv");
                assert_eq!(run(&mut b, &mut a, r, &mut db), vec![j as u8; len]);
            }
        }
        while let Some((s, j)) = sends.pop_front() {
            run(&mut a, &mut b, s, &mut da);
            let r = recvs.pop_front().expect("recv");
            assert_eq!(run(&mut b, &mut a, r, &mut db), vec![j as u8; len]);
        }
    }
    for _ in 0..1000 {
        if a.is_idle() && b.is_idle() {
            break;
        }
        a.progress(Some(Duration::ZERO)).expect("progress");
        b.progress(Some(Duration::ZERO)).expect("progress");
    }
    assert!(a.is_idle() && b.is_idle());
    let (sa, sb) = (a.device().stats(), b.device().stats());
    assert_clean("a", &sa);
    assert_clean("b", &sb);
    assert!(sa.frames_sent > 3000, "{sa:?}");
}

/// The sender was descheduled (here: sleeps) past its retransmission timeout while the
/// ACK of its frame waited in its socket: reading the socket comes before the timers, so
/// nothing is sent again. (Before, `progress` fired the timers first and resent the frame.)
#[test]
fn an_ack_waiting_in_the_socket_beats_the_timer() {
    let cfg = |rto: u64| {
        let mut u = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
        u.initial_rto = Duration::from_millis(rto);
        u.min_rto = Duration::from_millis(rto);
        // b acknowledges at the end of the progress that received (no delayed ACK), so
        // that the ACK is in a's socket before a sleeps.
        u.ack_delay = Duration::ZERO;
        Node::new(Config::default(), UdpDevice::bind(u).expect("bind"))
    };
    let mut a = cfg(200);
    let mut b = cfg(200);
    let ab = a.add_peer(b.addr());
    let ba = b.add_peer(a.addr());
    let r = b.endpoint_mut().trecv(Some(ba), 1, 0, 8).expect("trecv");
    let s = a
        .endpoint_mut()
        .tsend(ab, 1, vec![1; 8], SendOpts::default())
        .expect("tsend");
    a.progress(Some(Duration::ZERO)).expect("progress");
    // b receives and acknowledges at once (a pure ACK: it has nothing to send).
    let mut got = None;
    for _ in 0..1_000_000 {
        b.progress(Some(Duration::ZERO)).expect("progress");
        if let Some(c) = b.poll_completion() {
            got = Some(c);
            break;
        }
    }
    let c = got.expect("received");
    assert_eq!((c.op, c.kind, c.data), (r, OpKind::Recv, vec![1; 8]));
    assert_eq!(b.device().stats().acks_sent, 1);
    // a does not progress for longer than its RTO.
    std::thread::sleep(Duration::from_millis(300));
    a.progress(Some(Duration::ZERO)).expect("progress");
    let c = a.poll_completion().expect("send completion");
    assert_eq!((c.op, c.result), (s, Ok(())));
    let sa = a.device().stats();
    assert_eq!((sa.retransmits, sa.fast_retransmits), (0, 0), "{sa:?}");
    assert_eq!(b.device().stats().duplicates, 0);
}

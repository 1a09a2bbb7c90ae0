//! Hostile network input never panics the UDP device and is counted; a peer that stops
//! answering fails its operations after the peer timeout; a restarted peer (new connid on the
//! same port) is a new connection.
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use tagmatch_rdm::{Config, OpError, OpKind, SendOpts};
use tagmatch_transport::rng::XorShift;
use tagmatch_transport::udp::frame::{Header, KIND_MAX, KIND_PKT};
use tagmatch_transport::udp::{UdpConfig, UdpDevice};
use tagmatch_transport::{Node, RdmDevice, UdpAddr};

mod common;
use common::{exchange, fail_fast, send_to_a_silent_peer};

fn node() -> Node<UdpDevice> {
    node_with(|_| {})
}

fn node_with(f: impl FnOnce(&mut UdpConfig)) -> Node<UdpDevice> {
    let mut u = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
    f(&mut u);
    Node::new(Config::default(), UdpDevice::bind(u).expect("bind"))
}

#[test]
fn arbitrary_and_mutated_datagrams_are_dropped_and_counted() {
    let mut a = node();
    let mut b = node();
    let raw = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let dest = b.device().udp_addr();
    let mut rng = XorShift::new(4);
    let mut sent = 0u64;
    let valid = Header {
        kind: KIND_PKT,
        src_connid: 77,
        dst_connid: dest.connid,
        seq: 1,
        ack: 0,
        sack: 0,
    }
    .datagram(&[0x04, 0x00, 0x00, 0x00, 1, 2, 3]);
    for i in 0..3000u32 {
        let d: Vec<u8> = match i % 3 {
            // Random bytes.
            0 => (0..rng.below(200)).map(|_| rng.next_u64() as u8).collect(),
            // A valid frame with some bytes flipped (any kind, any seq, any connid).
            1 => {
                let mut d = valid.clone();
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(d.len() as u64) as usize;
                    d[at] ^= 1 << rng.below(8);
                }
                d
            }
            // Structurally valid frames with random kinds, sequence numbers, acks and
            // bodies (garbage EFA packets and RDMA messages).
            _ => {
                let h = Header {
                    kind: rng.below(KIND_MAX as u64 + 1) as u8,
                    src_connid: rng.below(4) as u32,
                    dst_connid: dest.connid,
                    seq: rng.next_u64() as u32 | 1,
                    ack: rng.next_u64() as u32,
                    sack: rng.next_u64(),
                };
                let body: Vec<u8> = (0..rng.below(120)).map(|_| rng.next_u64() as u8).collect();
                h.datagram(&body)
            }
        };
        if raw.send_to(&d, dest.sock).is_ok() {
            sent += 1;
        }
        if i % 64 == 0 {
            b.progress(Some(Duration::ZERO)).expect("progress");
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.device().stats().sock.rx_datagrams < sent && Instant::now() < deadline {
        b.progress(Some(Duration::from_millis(5)))
            .expect("progress");
    }
    let st = b.device().stats();
    println!("{st:?}\n{:?}", b.endpoint().stats());
    assert!(st.bad_frames > 500, "random bytes are not frames");
    assert!(st.wrong_connid > 0, "frames for another connid are dropped");
    let es = b.endpoint().stats();
    assert!(
        es.rx_parse_errors + es.rx_unknown_sender + es.rx_invalid > 0,
        "garbage packets reached the endpoint and were dropped"
    );
    // Still fully working, in both directions.
    exchange(&mut a, &mut b, 50_000);
    exchange(&mut b, &mut a, 3_000);
}

#[test]
fn dead_peer_fails_sends_after_the_peer_timeout() {
    let mut u = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
    u.peer_timeout = Duration::from_millis(300);
    u.initial_rto = Duration::from_millis(20);
    let mut a = Node::new(Config::default(), UdpDevice::bind(u).expect("bind"));
    // A socket that never answers.
    let silent = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let peer = UdpAddr {
        sock: silent.local_addr().expect("addr"),
        connid: 5,
    };
    let p = a.endpoint_mut().add_peer(peer.to_raw());
    let s = a
        .endpoint_mut()
        .send(p, vec![1; 100], SendOpts::default())
        .expect("send");
    let c = a.wait(s, Duration::from_secs(20)).expect("completes");
    assert_eq!((c.kind, c.result), (OpKind::Send, Err(OpError::SendFailed)));
    let st = a.device().stats();
    assert!(st.peers_failed >= 1 && st.retransmits >= 1, "{st:?}");
    assert!(
        a.flush(Duration::from_secs(5)).expect("flush"),
        "nothing left in flight"
    );
}

#[test]
fn restarted_peer_on_the_same_port_is_a_new_connection() {
    let mut a = node();
    let mut b = node();
    exchange(&mut a, &mut b, 2_000);
    let addr = b.device().udp_addr();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(a.is_idle() && b.is_idle()) && Instant::now() < deadline {
        a.progress(Some(Duration::from_millis(1)))
            .expect("progress");
        b.progress(Some(Duration::from_millis(1)))
            .expect("progress");
    }
    assert!(a.is_idle() && b.is_idle());
    drop(b);
    // Same port, new connid: frames for the old connid are dropped, the new one works.
    let mut u = UdpConfig::new(addr.sock);
    u.connid = Some(addr.connid ^ 0x5555);
    let mut b2 = Node::new(Config::default(), UdpDevice::bind(u).expect("rebind"));
    exchange(&mut a, &mut b2, 2_000);
    exchange(&mut b2, &mut a, 2_000);
    assert_ne!(b2.device().udp_addr(), addr);
    let _ = b2.device().mtu();
}

/// Prints why a test is skipped where libtest does not capture it.
fn common_skip(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
}

#[test]
fn ipv6_addresses_work_too() {
    let bind = || UdpDevice::bind(UdpConfig::new("[::1]:0".parse().expect("addr")));
    let (da, db) = match (bind(), bind()) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            common_skip(&format!("no IPv6 loopback here: {e}"));
            return;
        }
    };
    let s = db.udp_addr().to_string();
    assert!(s.starts_with("udp://[::1]:"), "{s}");
    assert_eq!(s.parse::<UdpAddr>().expect("parses"), db.udp_addr());
    let mut a = Node::new(Config::default(), da);
    let mut b = Node::new(Config::default(), db);
    exchange(&mut a, &mut b, 40_000);
    exchange(&mut b, &mut a, 100);
}

/// `progress` sleeps until the next retransmission deadline instead of spinning: with one
/// unacknowledged frame to a silent peer, every call (timeout far beyond the RTO) ends with
/// about one retransmission. A spinning device would return at once, with none. Without a
/// busy-poll budget (the default), each call reads each of the device's sockets at most
/// twice (the listener, and the socket connected to the peer); with one, each call spins
/// that long, then blocks all the same.
#[test]
fn progress_waits_for_the_retransmission_deadline() {
    for spin in [Duration::ZERO, Duration::from_micros(50)] {
        let mut u = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
        u.initial_rto = Duration::from_millis(10);
        u.min_rto = Duration::from_millis(10);
        u.max_rto = Duration::from_millis(40);
        u.spin = spin;
        let mut a = Node::new(Config::default(), UdpDevice::bind(u).expect("bind"));
        let _silent = send_to_a_silent_peer(&mut a);
        a.progress(Some(Duration::ZERO)).expect("progress");
        let calls = 6;
        for _ in 0..calls {
            a.progress(Some(Duration::from_secs(5))).expect("progress");
        }
        let st = a.device().stats();
        assert!(
            st.retransmits >= calls - 2,
            "spin {spin:?}: {} retransmissions in {calls} blocking calls",
            st.retransmits
        );
        assert!(st.sock.poll_calls >= calls - 2, "spin {spin:?}: {st:?}");
        assert_eq!(st.spin_hits, 0, "spin {spin:?}: {st:?}");
        if spin.is_zero() {
            let socks = 1 + st.peer_sockets;
            assert!(st.sock.recv_calls <= 2 * socks * (calls + 1), "{st:?}");
        }
    }
}

/// A send queue far smaller than a message: the device answers `Again` (at its next
/// `progress`, never in a loop with the owner) and the endpoint resends until it fits.
#[test]
fn full_send_queue_answers_again_and_the_message_still_arrives() {
    let small = || {
        let mut u = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
        u.max_inflight = 4;
        u.max_queued = 8;
        Node::new(Config::default(), UdpDevice::bind(u).expect("bind"))
    };
    let mut a = small();
    let mut b = small();
    exchange(&mut a, &mut b, 60_000);
    exchange(&mut a, &mut b, 300_000);
    assert!(a.device().stats().send_again > 0);
}

/// The first `connect_peers` peers get a socket connected to them; the next ones share
/// the device's socket, and every exchange works either way. The device's address stays
/// its own: nothing else can bind it while the connected sockets share it.
#[test]
fn peers_beyond_the_connected_socket_limit_share_the_device_socket() {
    let mut a = node_with(|u| u.connect_peers = 1);
    let mut b = node();
    let mut c = node();
    exchange(&mut a, &mut b, 3000);
    exchange(&mut b, &mut a, 100);
    exchange(&mut c, &mut a, 3000);
    exchange(&mut a, &mut c, 100);
    exchange(&mut b, &mut a, 50_000);
    exchange(&mut c, &mut a, 50_000);
    assert_eq!(a.device().stats().peer_sockets, 1, "b's only");
    assert_eq!(a.device().stats().peer_socket_errors, 0);
    assert_eq!(b.device().stats().peer_sockets, 1);
    assert_eq!(c.device().stats().peer_sockets, 1);
    for n in [&a, &b, &c] {
        let at = n.device().udp_addr().sock;
        let e = UdpSocket::bind(at).expect_err("the device's address is taken");
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{at}: {e}");
    }
    // Without connected sockets: the same exchanges, no socket opened.
    let mut d = node_with(|u| u.connect_peers = 0);
    exchange(&mut d, &mut b, 3000);
    exchange(&mut b, &mut d, 50_000);
    assert_eq!(d.device().stats().peer_sockets, 0);
}

/// A failed peer's connected socket is closed, and its slot goes to the next peer.
#[test]
fn a_failed_peer_frees_its_connected_socket_for_the_next() {
    let mut a = node_with(|u| {
        u.connect_peers = 1;
        fail_fast(u);
    });
    let _silent = send_to_a_silent_peer(&mut a);
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.device().stats().peers_failed == 0 && Instant::now() < deadline {
        a.progress(Some(Duration::from_millis(5)))
            .expect("progress");
    }
    let st = a.device().stats();
    assert_eq!((st.peers_failed, st.peer_sockets), (1, 1), "{st:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let failed = loop {
        a.progress(Some(Duration::from_millis(1)))
            .expect("progress");
        if let Some(c) = a.poll_completion() {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "the send to the gone peer completes"
        );
    };
    assert_eq!(failed.result, Err(OpError::SendFailed));
    let mut c = node();
    exchange(&mut c, &mut a, 2000);
    exchange(&mut a, &mut c, 100);
    assert_eq!(
        a.device().stats().peer_sockets,
        2,
        "the freed slot went to c"
    );
}

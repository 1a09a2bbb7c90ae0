//! Adversarial checks of the UDP device's per-peer connected sockets and spliced reads.
use std::net::UdpSocket;
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use tagmatch_rdm::{Config, SendOpts};
use tagmatch_transport::udp::frame::{Header, KIND_PKT};
use tagmatch_transport::udp::{UdpConfig, UdpDevice};
use tagmatch_transport::{Node, UdpAddr};

fn node_with(f: impl FnOnce(&mut UdpConfig)) -> Node<UdpDevice> {
    let mut u = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
    f(&mut u);
    Node::new(Config::default(), UdpDevice::bind(u).expect("bind"))
}

struct Nop;
impl Wake for Nop {
    fn wake(self: Arc<Self>) {}
}

/// A device whose readiness thread runs (an asynchronous owner armed it) fails a silent
/// peer, whose connected socket it closes. The peer then comes back on the same port
/// (a new connid): its frames must reach the device. The readiness thread must not keep
/// the closed socket (a duplicate of it, still connected to that peer, would take every
/// datagram of the peer from the kernel, and nobody reads it).
#[test]
fn a_failed_peers_socket_is_not_kept_alive_by_the_readiness_thread() {
    a_failed_peer_comes_back(true);
}

/// The same without a readiness thread (the frame sent is one the device receives).
#[test]
fn a_failed_peer_comes_back_to_a_synchronous_owner() {
    a_failed_peer_comes_back(false);
}

fn a_failed_peer_comes_back(armed: bool) {
    let mut a = node_with(|u| {
        u.connect_peers = 2;
        u.initial_rto = Duration::from_millis(10);
        u.min_rto = Duration::from_millis(10);
        u.max_rto = Duration::from_millis(20);
        u.peer_timeout = Duration::from_millis(200);
    });
    let waker = Waker::from(Arc::new(Nop));
    let arm = |a: &mut Node<UdpDevice>| {
        if armed {
            let _ = a.device_mut().wake_when_ready(&waker).expect("arm");
        }
    };
    arm(&mut a);
    let silent = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let peer = UdpAddr {
        sock: silent.local_addr().expect("addr"),
        connid: 5,
    };
    let p = a.add_peer(peer.to_raw());
    a.endpoint_mut()
        .send(p, vec![1; 10], SendOpts::default())
        .expect("send");
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.device().stats().peers_failed == 0 && Instant::now() < deadline {
        a.progress(Some(Duration::from_millis(5)))
            .expect("progress");
        // An asynchronous owner arms the thread whenever it found nothing to do.
        arm(&mut a);
    }
    let st = a.device().stats();
    assert_eq!((st.peers_failed, st.peer_sockets), (1, 1), "{st:?}");
    // Let the thread take the socket's closing into account (it polls every 100 ms at
    // most).
    for _ in 0..30 {
        a.progress(Some(Duration::from_millis(10)))
            .expect("progress");
        arm(&mut a);
    }
    let before = a.device().stats().frames_received;
    let to = a.device().udp_addr();
    let frame = Header {
        kind: KIND_PKT,
        src_connid: 6,
        dst_connid: to.connid,
        seq: 1,
        ack: 0,
        sack: 0,
    }
    // An RDM packet body is not needed: the frame is counted when received.
    .datagram(&[0x04, 0x00, 0x00, 0x00, 1, 2, 3]);
    silent.send_to(&frame, to.sock).expect("send");
    let deadline = Instant::now() + Duration::from_secs(3);
    while a.device().stats().frames_received == before && Instant::now() < deadline {
        a.progress(Some(Duration::from_millis(5)))
            .expect("progress");
    }
    let st = a.device().stats();
    assert_eq!(
        st.frames_received,
        before + 1,
        "the returning peer's frame was received: {st:?}"
    );
}

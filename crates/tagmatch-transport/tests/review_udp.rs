//! Adversarial checks of the UDP device's per-peer connected sockets and spliced reads.
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use tagmatch_rdm::{Config, MemHandle, RdmaToken, RemoteAddr, Transmit};
use tagmatch_transport::udp::frame::{Header, KIND_PKT};
use tagmatch_transport::udp::{UdpConfig, UdpDevice};
use tagmatch_transport::{DeviceEvent, Node, RdmDevice};

mod common;
mod devmem;
use common::{exchange, exchange_n, fail_fast, send_to_a_silent_peer};
use devmem::{progress_both, register, Mem};

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
        fail_fast(u);
    });
    let waker = Waker::from(Arc::new(Nop));
    let arm = |a: &mut Node<UdpDevice>| {
        if armed {
            let _ = a.device_mut().wake_when_ready(&waker).expect("arm");
        }
    };
    arm(&mut a);
    let silent = send_to_a_silent_peer(&mut a);
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

/// a reads 100,000 bytes of b's registered region over loopback; b serves them all (in
/// spliced datagrams, the default) before a looks; then b's owner deregisters the region
/// and reuses its memory (here: overwrites it with 0x77), which it may do once the
/// deregistration is submitted. If a's read then succeeds, its data must be what the
/// region held while registered: bytes written after the deregistration are never
/// served (a NIC stops reading memory when its registration is gone).
fn served_bytes_written_after_deregistration(splice: bool) {
    let mut ucfg = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
    ucfg.splice = splice;
    let mut a = UdpDevice::bind(ucfg).expect("bind");
    let mut b = UdpDevice::bind(ucfg).expect("bind");
    let (mut ma, mut mb) = (Mem::default(), Mem::default());
    let len = 100_000usize;
    let served: Vec<u8> = (0..len as u32).map(|i| (i * 31 + i / 251) as u8).collect();
    let k = register(&mut b, &mut mb, MemHandle(5), served.clone(), true);
    // Two reads of the region at once (a stream of reads: spliced, the default between
    // peers with connected sockets; a lone read would be copied).
    ma.0.insert(MemHandle(1), vec![0u8; 2 * len]);
    for i in 0..2u64 {
        a.submit(
            Transmit::RdmaRead {
                token: RdmaToken(1 + i),
                peer: tagmatch_rdm::PeerId(0),
                dest: b.addr(),
                local: MemHandle(1),
                offset: i * len as u64,
                remote: RemoteAddr {
                    addr: k.addr,
                    key: k.key,
                },
                len: len as u64,
            },
            &mut ma,
        );
    }
    a.progress(&mut ma, Some(Duration::ZERO)).expect("progress");
    // b serves both reads whole; a does not look yet.
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.stats().rdma.served_reads < 2 && Instant::now() < deadline {
        b.progress(&mut mb, Some(Duration::from_millis(1)))
            .expect("progress");
    }
    for _ in 0..5 {
        b.progress(&mut mb, Some(Duration::ZERO)).expect("progress");
    }
    let sb = b.stats();
    assert_eq!(sb.rdma.served_reads, 2, "{sb:?}");
    b.submit(Transmit::Deregister { key: k.key }, &mut mb);
    mb.0.get_mut(&MemHandle(5)).expect("region").fill(0x77);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut oks = [None; 2];
    while oks.iter().any(Option::is_none) {
        progress_both(&mut a, &mut ma, &mut b, &mut mb, Duration::from_millis(1));
        while let Some(e) = a.poll_event() {
            match e {
                DeviceEvent::RdmaDone { token: t, ok } if (1..=2).contains(&t.0) => {
                    oks[t.0 as usize - 1] = Some(ok);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(Instant::now() < deadline, "the reads end");
    }
    if splice && tagmatch_transport::udp::sock::PEEK {
        assert!(b.stats().sock.tx_spliced > 0, "the data was spliced");
    }
    for (i, ok) in oks.into_iter().enumerate() {
        let dest = &ma.0[&MemHandle(1)][i * len..(i + 1) * len];
        let late = dest
            .iter()
            .zip(&served)
            .filter(|(d, s)| **d == 0x77 && **s != 0x77)
            .count();
        assert!(
            ok != Some(true) || late == 0,
            "splice {splice}: read {i} succeeded with {late} bytes written after \
             deregistration (spliced datagrams {})",
            b.stats().sock.tx_spliced
        );
    }
}

#[test]
fn a_read_never_returns_bytes_written_after_deregistration_spliced() {
    served_bytes_written_after_deregistration(true);
}

#[test]
fn a_read_never_returns_bytes_written_after_deregistration_copied() {
    served_bytes_written_after_deregistration(false);
}

/// Connected sockets on IPv6 loopback (a device binds a concrete address, never a
/// wildcard): messages of every protocol size arrive (long ones through spliced reads),
/// each device opens a socket for its peer, and nothing else can bind the devices'
/// addresses afterwards, with or without `SO_REUSEPORT`.
#[test]
fn ipv6_devices_keep_their_address_and_exchange() {
    let node = || {
        let u = UdpConfig::new("[::1]:0".parse().expect("addr"));
        Node::new(Config::default(), UdpDevice::bind(u).expect("bind"))
    };
    let mut a = node();
    let mut b = node();
    for len in [10, 3000, 70_000, 1 << 20] {
        exchange(&mut a, &mut b, len);
        exchange(&mut b, &mut a, len);
    }
    // Streams of large messages: their reads are spliced.
    exchange_n(&mut a, &mut b, 1 << 20, 3);
    exchange_n(&mut b, &mut a, 1 << 20, 3);
    let (sa, sb) = (a.device().stats(), b.device().stats());
    assert_eq!((sa.peer_sockets, sb.peer_sockets), (1, 1));
    if tagmatch_transport::udp::sock::PEEK {
        assert!(sa.sock.tx_spliced > 0 && sb.sock.tx_spliced > 0, "{sa:?}");
    }
    for n in [&a, &b] {
        let at = n.device().udp_addr().sock;
        for reuse in [false, true] {
            let r = bind_with(at, reuse);
            assert!(r.is_err(), "{at} taken (SO_REUSEPORT {reuse})");
        }
    }
}

/// Binds a UDP socket to `at`, with `SO_REUSEPORT` set first if `reuse`.
fn bind_with(at: std::net::SocketAddr, reuse: bool) -> std::io::Result<()> {
    use nix::sys::socket::{bind, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType};
    use std::os::fd::AsRawFd;
    let family = if at.is_ipv6() {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    let err = |e: nix::Error| std::io::Error::from_raw_os_error(e as i32);
    let fd = socket(family, SockType::Datagram, SockFlag::empty(), None).map_err(err)?;
    if reuse {
        setsockopt(&fd, sockopt::ReusePort, &true).map_err(err)?;
    }
    bind(fd.as_raw_fd(), &nix::sys::socket::SockaddrStorage::from(at)).map_err(err)
}

/// Six peers of a device with four connected sockets (two share its socket), messages
/// both ways with each; then the first peer restarts on the same port with a new connid
/// (its old connection, to a gone device, still open on a): exchanges with it work both
/// ways, and a reused slot never sends to the wrong peer.
#[test]
fn many_peers_and_a_restarted_one_on_the_same_port() {
    let mut a = node_with(|u| u.connect_peers = 4);
    let mut peers: Vec<Node<UdpDevice>> = (0..6).map(|_| node_with(|_| {})).collect();
    for p in peers.iter_mut() {
        exchange(&mut a, p, 3000);
        exchange(p, &mut a, 100_000);
    }
    assert_eq!(a.device().stats().peer_sockets, 4);
    let at = peers[0].device().udp_addr();
    drop(peers.remove(0));
    let mut again = node_with(|u| {
        u.bind = at.sock;
        u.connid = Some(at.connid ^ 0x5a5a);
    });
    exchange(&mut again, &mut a, 100_000);
    exchange(&mut a, &mut again, 3000);
    for p in peers.iter_mut() {
        exchange(&mut a, p, 70_000);
    }
    let st = a.device().stats();
    assert_eq!((st.peer_sockets, st.peers_failed), (4, 0), "{st:?}");
}

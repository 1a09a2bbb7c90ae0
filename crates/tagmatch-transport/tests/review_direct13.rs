//! Adversarial checks of the UDP device's direct window entry (a send submitted to an
//! idle connection enters its window at once, in `submit`): through the public
//! `RdmDevice` interface, whose contract lets an owner submit and progress later
//! (`send_soon` is optional), under the fault shim, and with the smallest window.
use std::time::{Duration, Instant};

use tagmatch_rdm::{Config, PeerId, SendOpts, SendOutcome, SendToken, Transmit};
use tagmatch_transport::udp::shim::ShimConfig;
use tagmatch_transport::udp::{UdpConfig, UdpDevice};
use tagmatch_transport::{DeviceEvent, MemoryAccess, Node, RdmDevice};

mod devmem;
use devmem::{progress_both, Mem};

fn dev_with(f: impl FnOnce(&mut UdpConfig)) -> UdpDevice {
    let mut u = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
    f(&mut u);
    UdpDevice::bind(u).expect("bind")
}

fn send(a: &mut UdpDevice, to: &UdpDevice, token: u64, body: &[u8], mem: &mut dyn MemoryAccess) {
    a.submit(
        Transmit::Send {
            token: SendToken(token),
            peer: PeerId(0),
            dest: to.addr(),
            bytes: body.to_vec(),
        },
        mem,
    );
}

/// Progresses `a` and `b` until `a` reports the completion of every token in `want`;
/// returns `(packets b received, a's send outcomes)`.
fn run(
    a: &mut UdpDevice,
    b: &mut UdpDevice,
    want: usize,
) -> (Vec<Vec<u8>>, Vec<(SendToken, SendOutcome)>) {
    let (mut ma, mut mb) = (Mem::default(), Mem::default());
    let (mut got, mut done) = (Vec::new(), Vec::new());
    let start = Instant::now();
    while done.len() < want {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "got {got:?}, done {done:?}"
        );
        a.progress(&mut ma, Some(Duration::ZERO)).expect("progress");
        while let Some(ev) = a.poll_event() {
            if let DeviceEvent::SendDone { token, outcome } = ev {
                done.push((token, outcome));
            }
        }
        b.progress(&mut mb, Some(Duration::from_micros(100)))
            .expect("progress");
        while let Some(ev) = b.poll_event() {
            if let DeviceEvent::Recv { bytes, .. } = ev {
                got.push(bytes);
            }
        }
        b.flush_tx(&mut mb).expect("flush");
    }
    // Anything still on its way (a duplicate) arrives now.
    for _ in 0..20 {
        b.progress(&mut mb, Some(Duration::from_micros(200)))
            .expect("progress");
        while let Some(ev) = b.poll_event() {
            if let DeviceEvent::Recv { bytes, .. } = ev {
                got.push(bytes);
            }
        }
    }
    (got, done)
}

/// `RdmDevice::submit` queues; `progress` sends (`send_soon` is an optional hint). A send
/// submitted to a fresh device whose owner calls `progress` only after the initial RTO
/// has passed is sent once by that `progress`, not sent and resent at once: its
/// retransmission timer runs from its transmission, not from its submission.
#[test]
fn a_send_submitted_well_before_progress_is_not_resent_at_once() {
    let mut a = dev_with(|_| {});
    let mut b = dev_with(|_| {});
    let mut ma = Mem::default();
    send(&mut a, &b, 1, b"once", &mut ma);
    let rto = a.config().initial_rto;
    std::thread::sleep(rto * 2);
    let (got, done) = run(&mut a, &mut b, 1);
    assert_eq!(done, [(SendToken(1), SendOutcome::Ok)]);
    assert_eq!(got, [b"once".to_vec()]);
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(
        (sa.frames_sent, sa.retransmits, sb.duplicates),
        (1, 0, 0),
        "a: {sa:?} b: {sb:?}"
    );
}

/// The peer timeout runs "from its first transmission" ([`UdpConfig::peer_timeout`]): a
/// send submitted, then first progressed after longer than the peer timeout, is sent then
/// and completes; the connection is not failed for a frame that just left.
#[test]
fn a_send_submitted_longer_than_the_peer_timeout_before_progress_completes() {
    submitted_longer_than_the_peer_timeout_before_progress(false);
}

/// The same with devices that were progressed before (their owner was away since).
#[test]
fn a_send_submitted_longer_than_the_peer_timeout_after_an_absence_completes() {
    submitted_longer_than_the_peer_timeout_before_progress(true);
}

fn submitted_longer_than_the_peer_timeout_before_progress(progressed: bool) {
    let cfg = |u: &mut UdpConfig| u.peer_timeout = Duration::from_millis(300);
    let mut a = dev_with(cfg);
    let mut b = dev_with(cfg);
    let mut ma = Mem::default();
    if progressed {
        let mut mb = Mem::default();
        a.progress(&mut ma, Some(Duration::ZERO)).expect("progress");
        b.progress(&mut mb, Some(Duration::ZERO)).expect("progress");
    }
    send(&mut a, &b, 7, b"late", &mut ma);
    std::thread::sleep(Duration::from_millis(400));
    let (got, done) = run(&mut a, &mut b, 1);
    assert_eq!(got, [b"late".to_vec()], "b got it");
    assert_eq!(
        done,
        [(SendToken(7), SendOutcome::Ok)],
        "a: {:?}",
        a.stats()
    );
    assert_eq!(a.stats().peers_failed, 0);
}

/// Sends on one connection, alternately to an idle connection (direct entry) and behind
/// frames in flight (waiting queue), with a one-frame window and the smallest queue,
/// through a shim that drops, duplicates and reorders: every packet is handed up once,
/// in submission order per connection, every send completes once with `Ok` or `Again`,
/// and the frames counted sent are the frames received.
fn small_window_under_faults(connect_peers: usize) {
    let shim = ShimConfig {
        seed: 0x5eed_1313,
        drop: 100,
        duplicate: 100,
        reorder: 150,
    };
    let cfg = |u: &mut UdpConfig| {
        u.max_inflight = 1;
        u.max_queued = 1;
        u.connect_peers = connect_peers;
        u.shim = Some(shim);
        u.initial_rto = Duration::from_millis(10);
        u.min_rto = Duration::from_millis(5);
    };
    let mut a = dev_with(cfg);
    let mut b = dev_with(cfg);
    let mut ma = Mem::default();
    let mut mb = Mem::default();
    let n = 60u64;
    let (mut got, mut done) = (Vec::new(), Vec::new());
    let mut next = 0u64;
    let start = Instant::now();
    while done.len() < n as usize {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "got {} done {done:?}",
            got.len()
        );
        if next < n {
            send(&mut a, &b, next, &next.to_le_bytes(), &mut ma);
            a.send_soon(&mut ma).expect("send_soon");
            next += 1;
        }
        a.progress(&mut ma, Some(Duration::ZERO)).expect("progress");
        while let Some(ev) = a.poll_event() {
            if let DeviceEvent::SendDone { token, outcome } = ev {
                done.push((token, outcome));
            }
        }
        b.progress(&mut mb, Some(Duration::from_micros(200)))
            .expect("progress");
        while let Some(ev) = b.poll_event() {
            if let DeviceEvent::Recv { bytes, .. } = ev {
                got.push(u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")));
            }
        }
        b.flush_tx(&mut mb).expect("flush");
    }
    while !(a.is_idle() && b.is_idle()) {
        assert!(start.elapsed() < Duration::from_secs(30), "not idle");
        progress_both(&mut a, &mut ma, &mut b, &mut mb, Duration::from_micros(200));
        while let Some(ev) = b.poll_event() {
            if let DeviceEvent::Recv { bytes, .. } = ev {
                got.push(u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")));
            }
        }
    }
    done.sort_by_key(|(t, _)| t.0);
    let ok: Vec<u64> = done
        .iter()
        .filter(|(_, o)| *o == SendOutcome::Ok)
        .map(|(t, _)| t.0)
        .collect();
    assert_eq!(
        done.iter().map(|(t, _)| t.0).collect::<Vec<_>>(),
        (0..n).collect::<Vec<_>>(),
        "one completion per send"
    );
    assert!(
        done.iter()
            .all(|(_, o)| matches!(o, SendOutcome::Ok | SendOutcome::Again)),
        "{done:?}"
    );
    assert_eq!(got, ok, "handed up once each, in order");
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.frames_sent, ok.len() as u64, "a: {sa:?}");
    assert_eq!(sb.frames_received, sa.frames_sent, "b: {sb:?}");
    assert!(ok.len() > 1, "some sends went: {done:?}");
}

/// [`small_window_under_faults`] with the peer on a connected socket of its own.
#[test]
fn a_one_frame_window_under_faults_own_socket() {
    small_window_under_faults(4);
}

/// [`small_window_under_faults`] with every peer on the shared socket (the `sent_soon`
/// batching applies).
#[test]
fn a_one_frame_window_under_faults_shared_socket() {
    small_window_under_faults(0);
}

/// A fan-out of one send to each of several idle peers on the shared socket, the owner
/// calling `send_soon` after each (as `Node::send_now` does): the first goes at once,
/// the others at the next `progress`; each is sent once and completes once, and each
/// peer gets its packet once.
#[test]
fn a_fan_out_on_the_shared_socket_sends_each_frame_once() {
    let cfg = |u: &mut UdpConfig| u.connect_peers = 0;
    let mut a = dev_with(cfg);
    let mut peers: Vec<UdpDevice> = (0..5).map(|_| dev_with(cfg)).collect();
    let mut ma = Mem::default();
    for (i, p) in peers.iter().enumerate() {
        send(&mut a, p, i as u64, &[i as u8; 8], &mut ma);
        a.send_soon(&mut ma).expect("send_soon");
    }
    assert_eq!(a.stats().sock.tx_datagrams, 1, "the first went at once");
    let mut done = Vec::new();
    let mut got = vec![Vec::new(); peers.len()];
    let start = Instant::now();
    while done.len() < peers.len() {
        assert!(start.elapsed() < Duration::from_secs(20), "done {done:?}");
        a.progress(&mut ma, Some(Duration::ZERO)).expect("progress");
        while let Some(ev) = a.poll_event() {
            if let DeviceEvent::SendDone { token, outcome } = ev {
                done.push((token.0, outcome));
            }
        }
        for (i, p) in peers.iter_mut().enumerate() {
            let mut m = Mem::default();
            p.progress(&mut m, Some(Duration::ZERO)).expect("progress");
            while let Some(ev) = p.poll_event() {
                if let DeviceEvent::Recv { bytes, .. } = ev {
                    got[i].push(bytes);
                }
            }
        }
    }
    done.sort_by_key(|d| d.0);
    assert_eq!(
        done,
        (0..peers.len() as u64)
            .map(|i| (i, SendOutcome::Ok))
            .collect::<Vec<_>>()
    );
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g, &[vec![i as u8; 8]], "peer {i}");
    }
    let s = a.stats();
    assert_eq!((s.frames_sent, s.retransmits), (5, 0), "{s:?}");
}

/// Through a node (the protocol on top): 2,000 tagged messages with a one-frame window
/// and a four-frame queue, so that sends alternate between the direct entry, the waiting
/// queue and `Again` resubmissions, arrive in order and complete.
#[test]
fn a_node_stream_through_a_one_frame_window_arrives_in_order() {
    let node = || {
        Node::new(
            Config::default(),
            dev_with(|u| {
                u.max_inflight = 1;
                u.max_queued = 4;
            }),
        )
    };
    let mut a = node();
    let mut b = node();
    let to_b = a.add_peer(b.addr());
    let _ = b.add_peer(a.addr());
    let n = 2000u64;
    let mut sends = 0u64;
    let mut recvs_posted = 0u64;
    let mut got = Vec::new();
    let mut sent_ok = 0u64;
    let start = Instant::now();
    while got.len() < n as usize || sent_ok < n {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "got {} sent {sent_ok}",
            got.len()
        );
        while recvs_posted < n && recvs_posted < got.len() as u64 + 32 {
            b.endpoint_mut().recv(None, 8).expect("recv");
            recvs_posted += 1;
        }
        if sends < n && sends < sent_ok + 16 {
            a.endpoint_mut()
                .send(to_b, sends.to_le_bytes().to_vec(), SendOpts::default())
                .expect("send");
            a.send_now().expect("send_now");
            sends += 1;
        }
        a.progress(Some(Duration::ZERO)).expect("progress");
        while let Some(c) = a.poll_completion() {
            assert!(c.result.is_ok(), "{c:?}");
            sent_ok += 1;
        }
        b.progress(Some(Duration::ZERO)).expect("progress");
        while let Some(c) = b.poll_completion() {
            assert!(c.result.is_ok(), "{c:?}");
            got.push(u64::from_le_bytes(c.data[..8].try_into().expect("8")));
        }
    }
    assert_eq!(got, (0..n).collect::<Vec<_>>());
    let s = a.device().stats();
    assert_eq!(s.peers_failed, 0, "{s:?}");
}

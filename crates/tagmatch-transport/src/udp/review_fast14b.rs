//! Adversarial checks of session 14's second set of UDP shortcuts: the lone-frame flush
//! (`flush_queued`'s one-frame path), the one-datagram receive (`Sock::recv_single`) and
//! the sender's raw address taken from its connection (`on_frame`). Each test names the
//! broken variant of the change it catches.
use std::io::IoSlice;
use std::time::{Duration, Instant};

use super::*;

use super::review_direct13::{submit, NoMem};

fn dev_at(bind: &str, f: impl FnOnce(&mut UdpConfig)) -> UdpDevice {
    let mut u = UdpConfig::new(bind.parse().expect("addr"));
    f(&mut u);
    UdpDevice::bind(u).expect("bind")
}

/// Progresses `d` until it handed up a packet (at most 10 s): its source and bytes.
fn recv_one(d: &mut UdpDevice) -> (RawAddr, Vec<u8>) {
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nothing received"
        );
        d.progress(&mut NoMem, Some(Duration::from_millis(1)))
            .expect("progress");
        while let Some(ev) = d.poll_event() {
            if let DeviceEvent::Recv { src, bytes } = ev {
                return (src, bytes);
            }
        }
    }
}

/// A port nothing listens on (bound, then closed).
fn closed_port(bind: &str) -> SocketAddr {
    let s = std::net::UdpSocket::bind(bind).expect("bind");
    s.local_addr().expect("addr")
}

/// A lone queued frame the kernel refuses (`ECONNREFUSED` on the peer's connected socket
/// after an ICMP port-unreachable) leaves the queue, is counted as refused, does not block
/// the device and stays unacknowledged (the reliability layer sends it again), as the
/// batch loop does with it.
/// Catches: the lone path's error arm keeping the frame queued (no `pop_front`), not
/// counting it (`count_refused`), taking it for `WouldBlock` (`tx_blocked` set), or
/// returning the error from `flush`.
#[test]
fn a_refused_lone_frame_is_dropped_counted_and_kept_for_retransmission() {
    let mut a = dev_at("127.0.0.1:0", |u| u.connect_peers = 2);
    let gone = closed_port("127.0.0.1:0");
    let dest = UdpAddr {
        sock: gone,
        connid: 7,
    }
    .to_raw();
    submit(&mut a, dest, 1, b"hello");
    let k: ConnKey = (gone, 7);
    assert_ne!(a.conns[&k].via, 0, "the peer has a connected socket");
    assert_eq!(a.txq.len(), 1);
    a.send_soon(&mut NoMem).expect("first send");
    assert!(a.txq.is_empty());
    let sent0 = a.socks.stats().tx_datagrams;
    assert!(sent0 >= 1, "the first copy went out");
    // Copies of frame 1 queued one at a time (as a retransmission queues it), until the
    // kernel reports the port-unreachable of an earlier one.
    let errors0 = a.socks.stats().tx_errors;
    let mut tries = 0;
    while a.socks.stats().tx_errors == errors0 {
        tries += 1;
        assert!(tries < 500, "no ECONNREFUSED from the connected socket");
        a.txq.push_back(Out::Frame(k, 1, false));
        a.flush(&NoMem)
            .expect("a refused send is no error of flush");
        assert!(a.txq.is_empty(), "sent or refused, it left the queue");
        assert_eq!(a.tx_blocked, None, "a refusal does not block the device");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(a.socks.stats().tx_errors, errors0 + 1, "counted once");
    assert!(
        a.conns[&k].unacked.get(&1).is_some(),
        "still unacknowledged: sent again by its timer"
    );
    // No completion was reported for it.
    while let Some(ev) = a.poll_event() {
        assert!(
            !matches!(ev, DeviceEvent::SendDone { .. }),
            "unexpected {ev:?}"
        );
    }
}

/// A frame the fault shim held back (reordered) goes out at the next flush behind the
/// one frame queued since: the shim's release comes before the lone-frame test, so two
/// are sent, the queued one first.
/// Catches: the lone-frame path taken before `Shim::release` (the held frame stays held
/// until some later flush).
#[test]
fn the_shims_held_frame_is_released_before_a_lone_frame_goes() {
    let mut a = dev_at("127.0.0.1:0", |u| {
        u.connect_peers = 0;
        u.shim = Some(ShimConfig {
            seed: 3,
            reorder: 1000,
            ..ShimConfig::default()
        });
    });
    let mut b = dev_at("127.0.0.1:0", |_| {});
    let to = b.addr.to_raw();
    submit(&mut a, to, 1, b"first");
    assert_eq!(a.shim.as_ref().map(Shim::held), Some(1), "frame 1 held");
    assert!(a.txq.is_empty());
    // Frame 2 enters the queue past the shim (queued as if the shim had let it through).
    let shim = a.shim.take();
    submit(&mut a, to, 2, b"second");
    a.fill_windows(&NoMem, None);
    a.shim = shim;
    assert_eq!(a.txq.len(), 1, "one frame queued, one held");
    let before = a.socks.stats().tx_datagrams;
    a.flush(&NoMem).expect("flush");
    assert_eq!(a.shim.as_ref().map(Shim::held), Some(0), "released");
    assert!(a.txq.is_empty());
    assert_eq!(
        a.socks.stats().tx_datagrams,
        before + 2,
        "both sent at once"
    );
    let mut got = vec![recv_one(&mut b).1];
    got.push(recv_one(&mut b).1);
    assert_eq!(got, [b"second".to_vec(), b"first".to_vec()]);
}

/// The source of a received packet is the sender's raw address as `UdpAddr::to_raw`
/// makes it (GID, port, connid; `next` 0), also when the receiver's connection with it
/// was made of a raw address with other `next` bytes, on both address families; a peer
/// restarted on the same port is told apart by its connid.
/// Catches: `on_frame` taking the connection's raw address as it is (its `next` bytes),
/// or building it of anything but the sender's socket address and connid.
#[test]
fn received_packets_carry_the_senders_canonical_raw_address() {
    for bind in ["127.0.0.1:0", "[::1]:0"] {
        let mut a = dev_at(bind, |_| {});
        let mut b = dev_at(bind, |_| {});
        let to_b = RawAddr {
            next: 0x1122_3344_5566_7788,
            ..b.addr.to_raw()
        };
        // a's connection with b is made of `to_b` (its `next` bytes kept in it).
        submit(&mut a, to_b, 1, b"ping");
        a.send_soon(&mut NoMem).expect("send");
        let (src, bytes) = recv_one(&mut b);
        assert_eq!((src, &bytes[..]), (a.addr.to_raw(), &b"ping"[..]), "{bind}");
        submit(&mut b, src, 2, b"pong");
        b.send_soon(&mut NoMem).expect("send");
        let (src, bytes) = recv_one(&mut a);
        assert_eq!((src, &bytes[..]), (b.addr.to_raw(), &b"pong"[..]), "{bind}");
        assert_eq!(src.next, 0);
        // b restarts on its port: a new connid, a new peer for a.
        let port = b.addr.sock;
        drop(b);
        let mut b2 = dev_at(&port.to_string(), |_| {});
        assert_ne!(b2.addr.connid, to_b.qkey);
        submit(&mut b2, a.addr.to_raw(), 3, b"again");
        b2.send_soon(&mut NoMem).expect("send");
        let (src, bytes) = recv_one(&mut a);
        assert_eq!(
            (src, &bytes[..]),
            (b2.addr.to_raw(), &b"again"[..]),
            "{bind}"
        );
    }
}

/// `recv_single` returns what a one-buffer `recv_batch` lists, with the same counts, on
/// both families: a zero-length datagram (kept, length 0) and its sender's exact
/// address, then a short one.
/// Catches: `recv_single` dropping or mis-sizing a zero-length datagram, or reporting
/// another sender address (for instance a canonicalised IPv4-mapped one) than
/// `recv_batch`.
#[test]
fn a_single_receive_matches_a_one_buffer_batch_on_both_families() {
    for bind in ["127.0.0.1:0", "[::1]:0"] {
        let mut s = Sock::bind(bind.parse().expect("addr")).expect("bind");
        let to = s.local_addr().expect("addr");
        let tx = std::net::UdpSocket::bind(bind).expect("bind");
        let from = tx.local_addr().expect("addr");
        let mut single = Vec::new();
        let mut batch = Vec::new();
        for round in 0..2 {
            tx.send_to(&[], to).expect("send");
            tx.send_to(&[9; 5], to).expect("send");
            let mut bufs = vec![vec![0u8; 64]];
            if round == 0 {
                let b = &mut bufs[0];
                single.push(s.recv_single(b).expect("recv"));
                single.push(s.recv_single(b).expect("recv"));
                single.push(s.recv_single(b).expect("recv"));
            } else {
                let mut got = Vec::new();
                for _ in 0..3 {
                    let n = s.recv_batch(&mut bufs, &mut got).expect("recv");
                    batch.push((n, got.first().map(|&(_, a, len)| (a, len))));
                }
            }
        }
        assert_eq!(single, batch, "{bind}");
        assert_eq!(
            single,
            [(1, Some((from, 0))), (1, Some((from, 5))), (0, None)],
            "{bind}"
        );
        assert_eq!((s.stats.recv_calls, s.stats.rx_datagrams), (6, 4), "{bind}");
    }
}

/// On a socket connected to a closed port, the `ECONNREFUSED` an earlier send left is
/// reported by `recv_single` as nothing received (as `recv_batch` does), not as an
/// error of the device; the error is consumed by it.
/// Catches: `recv_single` not mapping `ConnectionRefused` to nothing.
#[test]
fn a_single_receive_on_a_refused_connected_socket_finds_nothing() {
    let l = Sock::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let gone = closed_port("127.0.0.1:0");
    let mut s = l.connect_beside(&[], gone).expect("connect");
    let mut b = vec![0u8; 64];
    for _ in 0..3 {
        let msg = [(gone, [IoSlice::new(b"x"), IoSlice::new(&[])])];
        // A send may itself report the refusal of the one before.
        let _ = s.send_gather(&msg);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(s.recv_single(&mut b).expect("no error"), (0, None));
        let mut got = Vec::new();
        let _ = s.send_gather(&msg);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(
            s.recv_batch(&mut [vec![0u8; 64]], &mut got)
                .expect("no error"),
            0
        );
    }
}

/// Busy-poll receives (`receive_from`'s one-datagram path) hand the receive buffer back:
/// a stream of single datagrams, each read by a one-datagram receive, is read whole
/// (none cut for a missing buffer), each counted once.
/// Catches: the one-datagram path leaving an empty buffer (or none) in `rx_bufs`.
#[test]
fn one_datagram_receives_keep_their_buffer() {
    let mut d = dev_at("127.0.0.1:0", |_| {});
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let to = d.addr.sock;
    for i in 0..6u8 {
        // Not frames: counted as bad and dropped, after being received whole.
        tx.send_to(&[i; 40], to).expect("send");
        let before = (d.stats.bad_frames, d.socks.stats().rx_datagrams);
        let n = d.receive_from(0, &mut NoMem, 1, 1, 1).expect("receive");
        assert_eq!(n, 1, "datagram {i}");
        assert_eq!(
            (d.stats.bad_frames, d.socks.stats().rx_datagrams),
            (before.0 + 1, before.1 + 1),
            "datagram {i}"
        );
        assert_eq!(d.socks.stats().rx_truncated, 0, "datagram {i}");
        assert_eq!(d.rx_bufs.len(), d.cfg.batch.max(1));
        assert!(d.rx_bufs.iter().all(|b| b.len() == d.rx_bufs[0].len()));
        assert!(d.rx_bufs[0].len() > 40);
    }
    assert_eq!(d.receive_from(0, &mut NoMem, 1, 1, 1).expect("receive"), 0);
}

//! Adversarial checks of the facade's `insert_peer` through `Node::add_peer` (packets
//! attributed by the whole address, connid included, before the endpoint's own look-up):
//! the same address inserted twice, a peer inserted after its packets arrived, a peer
//! never inserted, `ANY_SOURCE` receives, the in-process transport (with and without
//! its fast path), and a restarted UDP peer sending a message of many packets.

use std::net::SocketAddr;

use tagmatch::{Endpoint, MemFabric, Peer, ANY_SOURCE};

fn udp() -> Endpoint {
    let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    Endpoint::builder().udp(any).build().expect("udp endpoint")
}

fn mem(f: &MemFabric, fast: bool) -> Endpoint {
    Endpoint::builder()
        .mem(f)
        .fast_path(fast)
        .build()
        .expect("mem endpoint")
}

/// `b` sends `a` a first message (`a` inserted `b` as the returned peer and receives it
/// from that peer), then `b` is dropped and a new endpoint bound on its IP and port (a new
/// connid) is returned.
fn restart(a: &mut Endpoint, mut b: Endpoint) -> (Peer, Endpoint) {
    let old = a.insert_peer(&b.address()).expect("insert b");
    let to_a = b.insert_peer(&a.address()).expect("insert a");
    let r = a.trecv(old, 1u64, 8).expect("trecv");
    let s = b.tsend(to_a, 1, b"first".to_vec()).expect("tsend");
    assert_eq!(
        a.wait_with(r, &mut [&mut b]).expect("first").source(),
        Some(old)
    );
    b.wait_with(s, &mut [&mut *a]).expect("send");
    let addr = b.address().to_string();
    let sock: SocketAddr = addr
        .strip_prefix("udp://")
        .and_then(|s| s.split('/').next())
        .expect("udp://IP:PORT/CONNID")
        .parse()
        .expect("socket address");
    drop(b);
    let b2 = Endpoint::builder().udp(sock).build().expect("rebound");
    assert_ne!(b2.address().to_string(), addr, "a new connid");
    (old, b2)
}

/// `b` sends `tag` to `a` before `a` inserted `b`; `a` receives it with `ANY_SOURCE`
/// and then inserts `b`: the peer it gets is the message's source, inserting again gives
/// the same peer, and the next message from `b` (matched by a receive naming that peer)
/// has it as its source too. `a` answers `b` through it.
fn inserted_after_its_packets(mut a: Endpoint, mut b: Endpoint) {
    let to_a = b.insert_peer(&a.address()).expect("insert a");
    let r = a.trecv(ANY_SOURCE, 1u64, 8).expect("trecv");
    let s = b.tsend(to_a, 1, b"early".to_vec()).expect("tsend");
    let c = a.wait_with(r, &mut [&mut b]).expect("early");
    assert_eq!(c.data, b"early");
    let src = c.source().expect("a source");
    b.wait_with(s, &mut [&mut a]).expect("send");
    let p = a.insert_peer(&b.address()).expect("insert b");
    assert_eq!(p, src, "the implicit peer");
    assert_eq!(
        a.insert_peer(&b.address()).expect("again"),
        p,
        "same address"
    );
    let r = a.trecv(p, 2u64, 8).expect("trecv");
    let s = b.tsend(to_a, 2, b"named".to_vec()).expect("tsend");
    let c = a.wait_with(r, &mut [&mut b]).expect("named");
    assert_eq!((c.data.as_slice(), c.source()), (&b"named"[..], Some(p)));
    b.wait_with(s, &mut [&mut a]).expect("send");
    let r = b.trecv(to_a, 3u64, 8).expect("trecv");
    let s = a.tsend(p, 3, b"answer".to_vec()).expect("tsend");
    let c = b.wait_with(r, &mut [&mut a]).expect("answer");
    assert_eq!(
        (c.data.as_slice(), c.source()),
        (&b"answer"[..], Some(to_a))
    );
    a.wait_with(s, &mut [&mut b]).expect("send");
}

#[test]
fn a_udp_peer_inserted_after_its_packets_is_their_source() {
    inserted_after_its_packets(udp(), udp());
}

#[test]
fn an_in_process_peer_inserted_after_its_packets_is_their_source() {
    for fast in [false, true] {
        let f = MemFabric::new();
        inserted_after_its_packets(mem(&f, fast), mem(&f, fast));
    }
}

/// Two peers inserted, a third never: each message's source is its sender (the third
/// gets an id of its own, not one of the inserted peers'), whatever the order of the
/// insertions.
fn three_senders(mut a: Endpoint, mut others: Vec<Endpoint>) {
    let p0 = a.insert_peer(&others[0].address()).expect("insert");
    let p1 = a.insert_peer(&others[1].address()).expect("insert");
    assert_ne!(p0, p1);
    let to_a: Vec<_> = others
        .iter_mut()
        .map(|o| o.insert_peer(&a.address()).expect("insert a"))
        .collect();
    let mut sources = Vec::new();
    for (i, o) in others.iter_mut().enumerate() {
        let r = a.trecv(ANY_SOURCE, 9u64, 8).expect("trecv");
        let s = o.tsend(to_a[i], 9, vec![i as u8]).expect("tsend");
        let c = a.wait_with(r, &mut [&mut *o]).expect("recv");
        assert_eq!(c.data, [i as u8]);
        sources.push(c.source().expect("source"));
        o.wait_with(s, &mut [&mut a]).expect("send");
    }
    assert_eq!(&sources[..2], &[p0, p1]);
    assert!(!sources[..2].contains(&sources[2]), "{sources:?}");
    assert_eq!(
        a.insert_peer(&others[2].address()).expect("insert"),
        sources[2]
    );
}

#[test]
fn three_udp_senders_are_told_apart() {
    three_senders(udp(), vec![udp(), udp(), udp()]);
}

#[test]
fn three_in_process_senders_are_told_apart() {
    for fast in [false, true] {
        let f = MemFabric::new();
        three_senders(
            mem(&f, fast),
            vec![mem(&f, fast), mem(&f, fast), mem(&f, fast)],
        );
    }
}

/// A peer restarted on the same UDP port (a new connid) and inserted again sends a
/// message of many packets (a long-message protocol: CTS/data or RDMA read): receives
/// naming the old peer and the new one are both posted, the new one's matches, its
/// source is the new peer, and the old one's stays posted.
#[test]
fn a_restarted_udp_peers_long_message_matches_the_new_peer_only() {
    let mut a = udp();
    let (old, mut b2) = restart(&mut a, udp());
    let new = a.insert_peer(&b2.address()).expect("insert b2");
    assert_ne!(new, old);
    let to_a = b2.insert_peer(&a.address()).expect("insert a");
    let len = 200_000usize;
    let r_old = a.trecv(old, 5u64, len).expect("trecv old");
    let r_new = a.trecv(new, 5u64, len).expect("trecv new");
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    let s = b2.tsend(to_a, 5, data.clone()).expect("tsend");
    let c = a.wait_with(r_new, &mut [&mut b2]).expect("long message");
    assert_eq!(c.source(), Some(new));
    assert!(c.data == data, "the data");
    b2.wait_with(s, &mut [&mut a]).expect("send");
    assert!(
        a.take_completion(r_old).is_none(),
        "the old peer's receive waits"
    );
}

/// The receiver does not ask for the connid header (`request_connid_header` and
/// `request_constant_header_length` off, as an older peer): after the handshake, a
/// restarted peer's REQ packets carry neither a raw address nor a connid, and its
/// CTSDATA no connid, so only the device's source address (connid included) tells it
/// from the first peer at its IP and port. Its messages, short and long (long-CTS), must
/// match the receives naming it, with it as their source, not the old peer's receives.
#[test]
fn a_restarted_peer_is_told_apart_without_connid_headers() {
    let mut cfg = tagmatch_rdm::Config::default();
    cfg.features.request_connid_header = false;
    cfg.features.request_constant_header_length = false;
    // Long messages by long-CTS (CTSDATA packets), not RDMA read.
    cfg.direct_read = false;
    cfg.features.rdma_read = false;
    let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let mut a = Endpoint::builder()
        .rdm_config(cfg)
        .udp(any)
        .build()
        .expect("a");
    let (old, mut b2) = restart(&mut a, udp());
    let new = a.insert_peer(&b2.address()).expect("insert b2");
    let to_a = b2.insert_peer(&a.address()).expect("insert a");
    // The handshake (the first message carries b2's raw address).
    let r = a.trecv(new, 2u64, 8).expect("trecv");
    let s = b2.tsend(to_a, 2, b"hello".to_vec()).expect("tsend");
    let c = a.wait_with(r, &mut [&mut b2]).expect("hello");
    assert_eq!(c.source(), Some(new));
    b2.wait_with(s, &mut [&mut a]).expect("send");
    for (i, len) in [8usize, 100_000].into_iter().enumerate() {
        let tag = 10 + i as u64;
        let r_old = a.trecv(old, tag, len).expect("trecv old");
        let r_new = a.trecv(new, tag, len).expect("trecv new");
        let data: Vec<u8> = (0..len).map(|j| (j * 13 + i) as u8).collect();
        let s = b2.tsend(to_a, tag, data.clone()).expect("tsend");
        let c = a.wait_with(r_new, &mut [&mut b2]).expect("message of b2");
        assert_eq!(c.source(), Some(new), "{len} bytes");
        assert!(c.data == data, "{len} bytes: the data");
        b2.wait_with(s, &mut [&mut a]).expect("send");
        assert!(
            a.take_completion(r_old).is_none(),
            "{len} bytes: the old peer's receive waits"
        );
    }
}

//! The UDP device's registration limit (`UdpConfig::max_registered_bytes`, a verbs
//! device's locked-memory limit): a registration past it fails, and a long-read message
//! whose receive buffer cannot be registered falls back to long-CTS through READ_NACK
//! (efa-rdm-protocol-v4 §4.7) between two real UDP endpoints, with every byte intact.

use std::time::Duration;

use tagmatch::{DeviceStats, Endpoint, Error, Protocol, UdpConfig};

fn udp(max_registered_bytes: u64) -> Endpoint {
    let bind = "127.0.0.1:0".parse().unwrap();
    Endpoint::builder()
        .udp(bind)
        .udp_config(UdpConfig {
            max_registered_bytes,
            ..UdpConfig::new(bind)
        })
        .wait_limit(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// Registrations a UDP endpoint's device refused.
fn refused(e: &Endpoint) -> u64 {
    match e.stats().device {
        DeviceStats::Udp(u) => u.rdma.refused_registrations,
        other => panic!("not a UDP device: {other:?}"),
    }
}

/// A small message first: the handshake tells the sender the receiver reads by RDMA
/// (efa-rdm-protocol-v4 §2.1; before it, a large send takes long-CTS).
fn handshake(a: &mut Endpoint, b: &mut Endpoint, to_b: tagmatch::Peer) {
    let r = b.trecv(tagmatch::ANY_SOURCE, 1u64, 8).unwrap();
    let s = a.tsend(to_b, 1, vec![1u8; 8]).unwrap();
    b.wait_with(r, &mut [&mut *a]).unwrap();
    a.wait_with(s, &mut [&mut *b]).unwrap();
}

#[test]
fn a_registration_past_the_limit_fails_and_room_comes_back_on_deregister() {
    let mut e = udp(1 << 20);
    let a = e.register(vec![0u8; 600 << 10]).unwrap();
    // 600 KiB + 600 KiB > 1 MiB.
    assert!(matches!(
        e.register(vec![0u8; 600 << 10]),
        Err(Error::RegistrationFailed)
    ));
    assert_eq!(refused(&e), 1);
    // Local-only registrations count too; exactly up to the limit passes.
    let b = e.register_local(vec![0u8; 424 << 10]).unwrap();
    assert!(matches!(
        e.register_local(vec![0u8; 1]),
        Err(Error::RegistrationFailed)
    ));
    assert_eq!(refused(&e), 2);
    e.deregister(a).unwrap();
    let c = e.register(vec![0u8; 600 << 10]).unwrap();
    e.deregister(b).unwrap();
    e.deregister(c).unwrap();
    assert_eq!(refused(&e), 2);
}

#[test]
fn a_long_read_the_receiver_cannot_register_arrives_by_long_cts() {
    const LEN: usize = 2 << 20;
    // The receiver may register 1 MiB: not the 2 MiB receive buffer of a long-read.
    let mut a = udp(u64::MAX);
    let mut b = udp(1 << 20);
    let to_b = a.insert_peer(&b.address()).unwrap();
    handshake(&mut a, &mut b, to_b);
    let data: Vec<u8> = (0..LEN).map(|x| (x * 31 + 7) as u8).collect();
    let mr = a.register(data.clone()).unwrap();
    let nacks = a.stats().rdm.read_nacks;
    let r = b.trecv(tagmatch::ANY_SOURCE, 5u64, LEN).unwrap();
    let s = a.tsend_region(to_b, 5, &mr, 0..LEN).unwrap();
    let c = b.wait_with(r, &mut [&mut a]).unwrap();
    let sc = a.wait_with(s, &mut [&mut b]).unwrap();
    assert_eq!(c.len as usize, LEN);
    assert!(c.data == data, "the bytes differ");
    assert_eq!(sc.protocol, Some(Protocol::LongCts), "{sc:?}");
    assert_eq!(a.stats().rdm.read_nacks, nacks + 1);
    assert_eq!(b.stats().rdm.read_nacks, 1);
    assert!(refused(&b) >= 1);
    a.deregister(mr).unwrap();

    // Within the receiver's limit, the same size of message is read (long-read).
    let mut b = udp(4 << 20);
    let to_b = a.insert_peer(&b.address()).unwrap();
    handshake(&mut a, &mut b, to_b);
    let mr = a.register(data.clone()).unwrap();
    let r = b.trecv(tagmatch::ANY_SOURCE, 6u64, LEN).unwrap();
    let s = a.tsend_region(to_b, 6, &mr, 0..LEN).unwrap();
    let c = b.wait_with(r, &mut [&mut a]).unwrap();
    let sc = a.wait_with(s, &mut [&mut b]).unwrap();
    assert!(c.data == data, "the bytes differ");
    assert_eq!(sc.protocol, Some(Protocol::LongRead), "{sc:?}");
    assert_eq!(refused(&b), 0);
    a.deregister(mr).unwrap();
}

/// The sender's side of the limit: a large send whose buffer cannot be registered is
/// pushed by long-CTS instead of failing (as libfabric falls back when `fi_mr_reg` fails).
#[test]
fn a_large_send_the_sender_cannot_register_goes_by_long_cts() {
    const LEN: usize = 2 << 20;
    let mut a = udp(1 << 20);
    let mut b = udp(u64::MAX);
    let to_b = a.insert_peer(&b.address()).unwrap();
    handshake(&mut a, &mut b, to_b);
    let data: Vec<u8> = (0..LEN).map(|x| (x * 13 + 1) as u8).collect();
    let r = b.trecv(tagmatch::ANY_SOURCE, 9u64, LEN).unwrap();
    let s = a.tsend(to_b, 9, data.clone()).unwrap();
    let c = b.wait_with(r, &mut [&mut a]).unwrap();
    let sc = a.wait_with(s, &mut [&mut b]).unwrap();
    assert!(c.data == data, "the bytes differ");
    assert_eq!(sc.protocol, Some(Protocol::LongCts), "{sc:?}");
    assert!(refused(&a) >= 1);
    assert_eq!(a.stats().rdm.read_nacks + b.stats().rdm.read_nacks, 0);
}

// From the session-19 review (helper): RMA of the RDM endpoint's own registrations, and
// nothing left registered after repeated long-reads.

const LEN2: usize = 2 << 20;

/// A direct read or write whose local buffer cannot be registered completes by the
/// emulated long-CTS read / write, with the bytes intact.
#[test]
fn rma_read_and_write_past_the_limit_fall_back_to_emulation() {
    let mut a = udp(1 << 20);
    let mut b = udp(u64::MAX);
    let to_b = a.insert_peer(&b.address()).unwrap();
    handshake(&mut a, &mut b, to_b);
    let data: Vec<u8> = (0..LEN2).map(|x| (x * 7 + 3) as u8).collect();
    let mr = b.register(data.clone()).unwrap();
    let r = a.read(to_b, LEN2, mr.remote_key().at(0)).unwrap();
    let c = a.wait_with(r, &mut [&mut b]);
    let c = c.unwrap();
    assert_eq!(c.protocol, Some(Protocol::LongCtsRead));
    assert_eq!(refused(&a), 1);
    assert!(c.data == data);
    let w: Vec<u8> = (0..LEN2).map(|x| (x * 5 + 1) as u8).collect();
    let s = a.write(to_b, w.clone(), mr.remote_key().at(0)).unwrap();
    let c = a.wait_with(s, &mut [&mut b]);
    assert_eq!(c.unwrap().protocol, Some(Protocol::LongCtsWrite));
    // The writer's completion may come before the target has applied the last bytes.
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while b.region(&mr).unwrap() != &w[..] && std::time::Instant::now() < until {
        b.progress().unwrap();
        a.progress().unwrap();
    }
    assert!(b.region(&mr).unwrap() == &w[..]);
}

/// Five 2 MiB long-reads at a 3 MiB limit on both sides leave nothing registered.
#[test]
fn repeated_long_reads_leave_nothing_registered() {
    let mut a = udp(3 << 20);
    let mut b = udp(3 << 20);
    let to_b = a.insert_peer(&b.address()).unwrap();
    handshake(&mut a, &mut b, to_b);
    for i in 0..5u64 {
        let data: Vec<u8> = (0..LEN2).map(|x| (x as u64 * 3 + i) as u8).collect();
        let r = b.trecv(tagmatch::ANY_SOURCE, 10 + i, LEN2).unwrap();
        let s = a.tsend(to_b, 10 + i, data.clone()).unwrap();
        let c = b.wait_with(r, &mut [&mut a]).unwrap();
        let sc = a.wait_with(s, &mut [&mut b]).unwrap();
        assert!(c.data == data);
        assert_eq!(sc.protocol, Some(Protocol::LongRead));
    }
    assert_eq!((refused(&a), refused(&b)), (0, 0));
    // Nothing left registered: each may register its whole limit.
    let x = a.register(vec![0; 3 << 20]).unwrap();
    let y = b.register(vec![0; 3 << 20]).unwrap();
    a.deregister(x).unwrap();
    b.deregister(y).unwrap();
}

//! Review of cb8147a / 495e6ae (the UDP device's registration limit): every way the RDM
//! endpoint registers memory, next to the limit.

use std::time::Duration;

use tagmatch::{DeviceStats, Endpoint, UdpConfig};

fn udp(max_registered_bytes: u64) -> Endpoint {
    let bind = "127.0.0.1:0".parse().unwrap();
    Endpoint::builder()
        .udp(bind)
        .udp_config(UdpConfig {
            max_registered_bytes,
            ..UdpConfig::new(bind)
        })
        .wait_limit(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn refused(e: &Endpoint) -> u64 {
    match e.stats().device {
        DeviceStats::Udp(u) => u.rdma.refused_registrations,
        other => panic!("not a UDP device: {other:?}"),
    }
}

fn handshake(a: &mut Endpoint, b: &mut Endpoint, to_b: tagmatch::Peer) {
    let r = b.trecv(tagmatch::ANY_SOURCE, 1u64, 8).unwrap();
    let s = a.tsend(to_b, 1, vec![1u8; 8]).unwrap();
    b.wait_with(r, &mut [&mut *a]).unwrap();
    a.wait_with(s, &mut [&mut *b]).unwrap();
}

const LEN: usize = 2 << 20;

#[test]
fn rma_read_and_write_past_the_limit_fall_back_to_emulation() {
    let mut a = udp(1 << 20);
    let mut b = udp(u64::MAX);
    let to_b = a.insert_peer(&b.address()).unwrap();
    handshake(&mut a, &mut b, to_b);
    let data: Vec<u8> = (0..LEN).map(|x| (x * 7 + 3) as u8).collect();
    let mr = b.register(data.clone()).unwrap();
    let r = a.read(to_b, LEN, mr.remote_key().at(0)).unwrap();
    let c = a.wait_with(r, &mut [&mut b]);
    let c = c.unwrap();
    assert_eq!(c.protocol, Some(tagmatch::Protocol::LongCtsRead));
    assert_eq!(refused(&a), 1);
    assert!(c.data == data);
    let w: Vec<u8> = (0..LEN).map(|x| (x * 5 + 1) as u8).collect();
    let s = a.write(to_b, w.clone(), mr.remote_key().at(0)).unwrap();
    let c = a.wait_with(s, &mut [&mut b]);
    assert_eq!(c.unwrap().protocol, Some(tagmatch::Protocol::LongCtsWrite));
    for _ in 0..50 {
        b.progress().unwrap();
        a.progress().unwrap();
    }
    assert!(b.region(&mr).unwrap() == &w[..]);
}

#[test]
fn repeated_long_reads_leave_nothing_registered() {
    let mut a = udp(3 << 20);
    let mut b = udp(3 << 20);
    let to_b = a.insert_peer(&b.address()).unwrap();
    handshake(&mut a, &mut b, to_b);
    for i in 0..5u64 {
        let data: Vec<u8> = (0..LEN).map(|x| (x as u64 * 3 + i) as u8).collect();
        let r = b.trecv(tagmatch::ANY_SOURCE, 10 + i, LEN).unwrap();
        let s = a.tsend(to_b, 10 + i, data.clone()).unwrap();
        let c = b.wait_with(r, &mut [&mut a]).unwrap();
        let sc = a.wait_with(s, &mut [&mut b]).unwrap();
        assert!(c.data == data);
        assert_eq!(sc.protocol, Some(tagmatch::Protocol::LongRead));
    }
    assert_eq!((refused(&a), refused(&b)), (0, 0));
    // Nothing left registered: each may register its whole limit.
    let x = a.register(vec![0; 3 << 20]).unwrap();
    let y = b.register(vec![0; 3 << 20]).unwrap();
    a.deregister(x).unwrap();
    b.deregister(y).unwrap();
}

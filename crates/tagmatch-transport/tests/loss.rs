//! Loss, reordering and duplication injected at the socket layer (the UDP device's fault
//! shim): every message is delivered exactly once and intact.
mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use tagmatch_rdm::{OpKind, SendOpts};
use tagmatch_transport::udp::shim::ShimConfig;
use tagmatch_transport::udp::{UdpConfig, UdpDevice};
use tagmatch_transport::Node;

fn lossy(seed: u64, cfg: tagmatch_rdm::Config) -> Node<UdpDevice> {
    let mut u = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
    u.shim = Some(ShimConfig {
        seed,
        drop: 50,
        duplicate: 30,
        reorder: 100,
    });
    // Recover quickly from the injected losses.
    u.initial_rto = Duration::from_millis(20);
    u.min_rto = Duration::from_millis(10);
    Node::new(cfg, UdpDevice::bind(u).expect("bind"))
}

#[test]
fn every_subprotocol_under_loss_duplication_and_reordering() {
    let mut resp = lossy(1, config());
    let raddr = resp.addr();
    let t = std::thread::spawn(move || {
        let r = responder(&mut resp, 2);
        (r, resp.device().stats())
    });
    let mut a = lossy(2, config());
    let mut b = lossy(3, config_emulated());
    let res = requester(&mut a, &mut b, raddr, 0);
    let (rres, rstats) = t.join().expect("responder thread");
    let log = res.expect("requester");
    rres.expect("responder");
    let st = a.device().stats();
    println!(
        "requester: {st:?}\nresponder: {rstats:?}\n{}",
        log.join(" ")
    );
    assert!(
        st.shim.dropped > 0 && rstats.shim.dropped > 0,
        "the shim dropped datagrams"
    );
    assert!(st.shim.duplicated > 0 && st.shim.reordered > 0);
    assert!(st.retransmits > 0, "losses were repaired by retransmission");
    assert!(
        st.duplicates + rstats.duplicates > 0,
        "duplicates were suppressed"
    );
    assert_eq!(log.len(), 29);
    // Some RDMA-read data went straight into its destination (the rest, duplicates among
    // them, through a receive buffer), all of it checked by the requester above.
    if tagmatch_transport::udp::sock::PEEK {
        let rb = b.device().stats();
        assert!(st.rx_placed + rb.rx_placed + rstats.rx_placed > 0, "{st:?}");
    }
}

#[test]
fn many_messages_each_delivered_once_and_intact() {
    let mut a = lossy(11, config());
    let mut b = lossy(12, config());
    let ab = a.endpoint_mut().add_peer(b.addr());
    let mut rng = tagmatch_transport::rng::XorShift::new(99);
    let n = 300u64;
    let sizes: Vec<usize> = (0..n)
        .map(|i| match i % 10 {
            0 => 150_000 + rng.below(200_000) as usize, // long-CTS / long-read
            1..=3 => 2_000 + rng.below(60_000) as usize, // medium
            _ => rng.below(1_300) as usize,             // eager
        })
        .collect();
    // Half the receives are posted before the sends (expected), half after (unexpected).
    let mut recvs = HashMap::new();
    for tag in (0..n).filter(|t| t % 2 == 0) {
        let op = b
            .endpoint_mut()
            .trecv(None, tag, 0, 400_000)
            .expect("trecv");
        recvs.insert(op, tag);
    }
    let mut sends = HashMap::new();
    for tag in 0..n {
        let data = payload(sizes[tag as usize], tag);
        let op = a
            .endpoint_mut()
            .tsend(ab, tag, data, SendOpts::default())
            .expect("tsend");
        sends.insert(op, tag);
    }
    for tag in (0..n).filter(|t| t % 2 == 1) {
        let op = b
            .endpoint_mut()
            .trecv(None, tag, 0, 400_000)
            .expect("trecv");
        recvs.insert(op, tag);
    }
    let mut got: HashMap<u64, usize> = HashMap::new();
    let mut sent = 0usize;
    let deadline = Instant::now() + Duration::from_secs(120);
    while (got.len() < n as usize || sent < n as usize) && Instant::now() < deadline {
        a.progress(Some(Duration::from_millis(1)))
            .expect("progress");
        b.progress(Some(Duration::from_millis(1)))
            .expect("progress");
        while let Some(c) = a.poll_completion() {
            assert_eq!((c.kind, c.result), (OpKind::Send, Ok(())));
            assert!(sends.remove(&c.op).is_some(), "one completion per send");
            sent += 1;
        }
        while let Some(c) = b.poll_completion() {
            assert_eq!((c.kind, c.result), (OpKind::Recv, Ok(())));
            let tag = recvs.remove(&c.op).expect("one completion per receive");
            assert_eq!(c.tag, tag);
            let want = payload(sizes[tag as usize], tag);
            assert_eq!(c.len as usize, want.len());
            assert!(c.data[..want.len()] == want[..], "tag {tag} intact");
            *got.entry(tag).or_default() += 1;
        }
    }
    assert_eq!(got.len(), n as usize, "every message delivered");
    assert!(got.values().all(|&k| k == 1), "each exactly once");
    assert_eq!(sent, n as usize);
    // Nothing more arrives: drain until both devices are idle.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(a.is_idle() && b.is_idle()) && Instant::now() < deadline {
        a.progress(Some(Duration::from_millis(1)))
            .expect("progress");
        b.progress(Some(Duration::from_millis(1)))
            .expect("progress");
    }
    assert!(a.poll_completion().is_none() && b.poll_completion().is_none());
    assert_eq!(b.endpoint().in_flight(), (0, 0, 0));
    let (sa, sb) = (a.device().stats(), b.device().stats());
    println!("a: {sa:?}\nb: {sb:?}");
    assert!(sa.shim.dropped > 10 && sa.retransmits > 0);
    assert!(sa.duplicates + sb.duplicates > 0);
    let es = b.endpoint().stats();
    assert_eq!(
        (es.rx_parse_errors, es.rx_reorder_rejected, es.rx_unknown_op),
        (0, 0, 0)
    );
}

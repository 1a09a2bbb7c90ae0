//! Loopback figures of the UDP device: ping-pong latency of small tagged messages and
//! streaming throughput of large ones, two nodes in two threads on 127.0.0.1.
//!
//! `cargo run --release -p tagmatch-transport --example udp_bench [ROUNDS] [PATH_MTU]`
use std::time::{Duration, Instant};

use tagmatch_rdm::{Config, OpKind, SendOpts};
use tagmatch_transport::udp::{UdpConfig, UdpDevice};
use tagmatch_transport::Node;

fn node(mtu: usize) -> Node<UdpDevice> {
    let mut u = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
    u.path_mtu = mtu;
    Node::new(Config::default(), UdpDevice::bind(u).expect("bind"))
}

const T: Duration = Duration::from_secs(30);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let mtu: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1500);
    let sizes = [
        (8usize, rounds),
        (65_536, 400),
        (1 << 20, 100),
        (4 << 20, 25),
    ];

    let mut a = node(mtu);
    let mut b = node(mtu);
    let a_addr = a.addr();
    let ba = b.add_peer(a_addr);
    let ab = a.add_peer(b.addr());
    let echo = std::thread::spawn(move || {
        // b: echo every message back (ping-pong), then sink the streams.
        for &(len, n) in &sizes {
            for _ in 0..n {
                let r = b.endpoint_mut().trecv(Some(ba), 1, 0, len).expect("trecv");
                let c = b.wait(r, T).expect("recv");
                if len == 8 {
                    let s = b
                        .endpoint_mut()
                        .tsend(ba, 2, c.data, SendOpts::default())
                        .expect("tsend");
                    b.wait(s, T).expect("send");
                }
            }
            if len != 8 {
                let s = b
                    .endpoint_mut()
                    .tsend(ba, 3, vec![0], SendOpts::default())
                    .expect("tsend");
                b.wait(s, T).expect("send");
            }
        }
        b.linger(Duration::from_millis(200), T).expect("linger");
        b.device().stats()
    });

    println!(
        "EFA MTU over a {mtu}-byte path: {} bytes",
        tagmatch_transport::RdmDevice::mtu(a.device())
    );
    // Latency: 8-byte ping-pong.
    let mut rtts = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        let r = a.endpoint_mut().trecv(Some(ab), 2, 0, 8).expect("trecv");
        let s = a
            .endpoint_mut()
            .tsend(ab, 1, vec![7; 8], SendOpts::default())
            .expect("tsend");
        a.wait(r, T).expect("pong");
        a.wait(s, T).expect("ping sent");
        rtts.push(t.elapsed());
    }
    rtts.sort();
    let p = |q: f64| rtts[((rtts.len() - 1) as f64 * q) as usize];
    println!(
        "ping-pong 8 B x {rounds}: RTT median {:?}, p99 {:?}, min {:?} (one way ~{:?})",
        p(0.5),
        p(0.99),
        rtts[0],
        p(0.5) / 2
    );
    // Throughput: a window of 8 sends in flight.
    for &(len, n) in &sizes[1..] {
        let t = Instant::now();
        let mut inflight = std::collections::VecDeque::new();
        let mut proto = None;
        for _ in 0..n {
            if inflight.len() >= 8 {
                let op = inflight.pop_front().expect("op");
                let c = a.wait(op, T).expect("send");
                assert_eq!((c.kind, c.result), (OpKind::Send, Ok(())));
            }
            let op = a
                .endpoint_mut()
                .tsend(ab, 1, vec![0x5a; len], SendOpts::default())
                .expect("tsend");
            proto = a.endpoint().protocol_of(op);
            inflight.push_back(op);
        }
        for op in inflight {
            a.wait(op, T).expect("send");
        }
        let r = a.endpoint_mut().trecv(Some(ab), 3, 0, 1).expect("trecv");
        a.wait(r, T).expect("end of stream");
        let secs = t.elapsed().as_secs_f64();
        println!(
            "stream {len} B x {n} ({proto:?}): {:.0} MB/s, {:.0} msg/s",
            (len * n) as f64 / secs / 1e6,
            n as f64 / secs
        );
    }
    a.linger(Duration::from_millis(200), T).expect("linger");
    let sb = echo.join().expect("echo thread");
    let sa = a.device().stats();
    println!(
        "A: {} datagrams in {} sendmmsg calls, {} retransmits ({} fast), {} duplicates; B: {} datagrams received in {} recvmmsg calls, {} retransmits ({} fast), {} duplicates",
        sa.sock.tx_datagrams, sa.sock.send_calls, sa.retransmits, sa.fast_retransmits, sa.duplicates,
        sb.sock.rx_datagrams, sb.sock.recv_calls, sb.retransmits, sb.fast_retransmits, sb.duplicates
    );
}

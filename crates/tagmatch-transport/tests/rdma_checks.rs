//! Software RDMA requests outside a registered region, with a wrong key, or after
//! deregistration: rejected and counted by the serving device, the data untouched. Driven at
//! the device level (both devices), with a plain map as the endpoint memory.
use std::time::{Duration, Instant};

use tagmatch_rdm::{MemHandle, MrKey, RdmaToken, RemoteAddr, Transmit};
use tagmatch_transport::mem::MemNetwork;
use tagmatch_transport::soft_rdma::RdmaStats;
use tagmatch_transport::udp::{UdpConfig, UdpDevice};
use tagmatch_transport::{DeviceEvent, RdmDevice};

mod devmem;
use devmem::{progress_both, register, Mem};

struct Pair<D> {
    a: D,
    b: D,
    ma: Mem,
    mb: Mem,
    next: u64,
}

impl<D: RdmDevice> Pair<D> {
    /// Two devices, no memory yet.
    fn new(a: D, b: D) -> Pair<D> {
        Pair {
            a,
            b,
            ma: Mem::default(),
            mb: Mem::default(),
            next: 0,
        }
    }

    fn step(&mut self) -> Vec<DeviceEvent> {
        progress_both(
            &mut self.a,
            &mut self.ma,
            &mut self.b,
            &mut self.mb,
            Duration::from_millis(1),
        );
        let mut ev = Vec::new();
        while let Some(e) = self.a.poll_event() {
            ev.push(e);
        }
        if let Some(e) = self.b.poll_event() {
            panic!("b reports {e:?}");
        }
        ev
    }

    fn register_b(&mut self, h: MemHandle, bytes: Vec<u8>) -> MrKey {
        register(&mut self.b, &mut self.mb, h, bytes, true)
    }

    /// Runs one RDMA operation from a to b; returns its outcome.
    fn rdma(&mut self, read: bool, remote: RemoteAddr, len: u64) -> bool {
        self.next += 1;
        let token = RdmaToken(self.next);
        let local = MemHandle(1);
        let (peer, dest) = (tagmatch_rdm::PeerId(0), self.b.addr());
        let t = if read {
            Transmit::RdmaRead {
                token,
                peer,
                dest,
                local,
                offset: 8,
                remote,
                len,
            }
        } else {
            Transmit::RdmaWrite {
                token,
                peer,
                dest,
                local,
                offset: 8,
                remote,
                len,
            }
        };
        self.a.submit(t, &mut self.ma);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(e) = self.step().into_iter().next() {
                match e {
                    DeviceEvent::RdmaDone { token: t, ok } if t == token => return ok,
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        panic!("RDMA operation did not complete");
    }

    /// Reads of `len` bytes at each of `remotes` at once (a stream of reads, as a window
    /// of long-read messages makes them) into `MemHandle(1)` at 8, 8 + len, …; whether
    /// each succeeded, in order.
    fn reads(&mut self, remotes: &[RemoteAddr], len: u64) -> Vec<bool> {
        let first = self.next + 1;
        for (i, remote) in remotes.iter().enumerate() {
            self.next += 1;
            let t = Transmit::RdmaRead {
                token: RdmaToken(self.next),
                peer: tagmatch_rdm::PeerId(0),
                dest: self.b.addr(),
                local: MemHandle(1),
                offset: 8 + i as u64 * len,
                remote: *remote,
                len,
            };
            self.a.submit(t, &mut self.ma);
        }
        let mut done = vec![None; remotes.len()];
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline && done.iter().any(Option::is_none) {
            for e in self.step() {
                match e {
                    DeviceEvent::RdmaDone { token, ok } => {
                        done[(token.0 - first) as usize] = Some(ok);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        done.into_iter()
            .map(|d| d.expect("RDMA operation did not complete"))
            .collect()
    }
}

fn run<D: RdmDevice>(a: D, b: D, stats_b: impl Fn(&D) -> RdmaStats) -> (D, D) {
    let mut p = Pair::new(a, b);
    let local: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    p.ma.0.insert(MemHandle(1), local);
    let target: Vec<u8> = (0..1000u32).map(|i| (i * 13 + 1) as u8).collect();
    let k = p.register_b(MemHandle(5), target.clone());
    // A neighbour region right after, to catch writes that spill over.
    let k2 = p.register_b(MemHandle(6), vec![0xaa; 1000]);
    let at = |off: u64| RemoteAddr {
        addr: k.addr.wrapping_add(off),
        key: k.key,
    };
    let before = stats_b(&p.b);

    // Inside: works.
    assert!(p.rdma(true, at(100), 50));
    assert_eq!(p.ma.0[&MemHandle(1)][8..58], target[100..150]);
    assert_eq!(stats_b(&p.b).served_reads, before.served_reads + 1);
    // Whole region, both directions; zero bytes at the very end.
    assert!(p.rdma(true, at(0), 1000));
    assert!(p.rdma(true, at(1000), 0));

    let untouched = |p: &Pair<D>| {
        assert!(p.mb.0[&MemHandle(5)] == target, "target untouched");
        assert!(
            p.mb.0[&MemHandle(6)] == vec![0xaa; 1000],
            "neighbour untouched"
        );
    };
    let s0 = stats_b(&p.b);
    // Outside the region: past the end, straddling the end, before the start, overflow.
    for (read, off, len) in [
        (false, 990, 20),
        (true, 990, 20),
        (false, 1000, 1),
        (true, 1001, 0),
        (false, u64::MAX, 2),
        (true, u64::MAX - 4, 10),
    ] {
        assert!(!p.rdma(read, at(off), len), "{read} {off} {len}");
        untouched(&p);
    }
    // Before the start: the address below the region.
    assert!(!p.rdma(
        false,
        RemoteAddr {
            addr: k.addr - 1,
            key: k.key
        },
        4
    ));
    untouched(&p);
    let s1 = stats_b(&p.b);
    assert_eq!(s1.rejected_bounds, s0.rejected_bounds + 7);
    // A write bigger than one datagram that does not fit: every chunk rejected.
    assert!(!p.rdma(false, at(0), 3000));
    untouched(&p);
    assert!(stats_b(&p.b).rejected_bounds > s1.rejected_bounds);

    // Wrong keys: another key's region range with this key, a key never issued.
    let s2 = stats_b(&p.b);
    assert!(!p.rdma(
        false,
        RemoteAddr {
            addr: k.addr,
            key: k.key ^ 0x10_0000
        },
        10
    ));
    assert!(!p.rdma(
        true,
        RemoteAddr {
            addr: k.addr,
            key: 0
        },
        10
    ));
    assert!(
        !p.rdma(
            false,
            RemoteAddr {
                addr: k2.addr,
                key: k.key
            },
            10
        ),
        "key of one region, address of another"
    );
    untouched(&p);
    let s3 = stats_b(&p.b);
    assert_eq!(s3.rejected_key, s2.rejected_key + 2);
    assert_eq!(s3.rejected_bounds, s2.rejected_bounds + 1);

    // A valid write changes exactly its range.
    let src = p.ma.0[&MemHandle(1)][8..13].to_vec();
    assert!(p.rdma(false, at(10), 5));
    let mut expect = target.clone();
    expect[10..15].copy_from_slice(&src);
    assert!(
        p.mb.0[&MemHandle(5)] == expect,
        "exactly the written range changed"
    );

    // After deregistration: rejected, data untouched.
    p.b.submit(Transmit::Deregister { key: k.key }, &mut p.mb);
    let s4 = stats_b(&p.b);
    assert!(!p.rdma(false, at(0), 10));
    assert!(!p.rdma(true, at(0), 10));
    assert!(
        p.mb.0[&MemHandle(5)] == expect,
        "deregistered region untouched"
    );
    assert_eq!(stats_b(&p.b).rejected_key, s4.rejected_key + 2);
    // A local range outside the local region fails at once, nothing sent.
    assert!(!p.rdma(false, at(0), 5000));
    (p.a, p.b)
}

#[test]
fn udp_device_rejects_and_counts() {
    let bind =
        || UdpDevice::bind(UdpConfig::new("127.0.0.1:0".parse().expect("addr"))).expect("bind");
    let (a, b) = (bind(), bind());
    let (a, _) = run(a, b, |d| d.stats().rdma);
    // The reads' data was received straight into a's region (and checked above).
    if tagmatch_transport::udp::sock::PEEK {
        assert!(a.stats().rx_placed > 0, "{:?}", a.stats());
    }
}

#[test]
fn mem_device_rejects_and_counts() {
    let net = MemNetwork::new(3);
    let _ = run(net.device(), net.device(), |d| d.rdma_stats());
}

/// A 1 MiB read over UDP whose data datagrams are dropped and reordered (the serving
/// side's fault shim, two frames in flight at a time) and interleaved with foreign
/// datagrams sent straight to the reader's socket: while the read's next datagram is
/// expected (received in one call into the read's next range), something else keeps
/// arriving instead. Every such datagram is put back together and handled as usual (a
/// later chunk placed where it belongs, foreign bytes rejected), and the read completes
/// with exactly the served bytes.
#[test]
fn udp_read_survives_datagrams_other_than_the_expected_one() {
    use tagmatch_transport::udp::shim::ShimConfig;
    let (mut p, a_addr) = udp_reader_pair(Some(ShimConfig {
        seed: 7,
        drop: 150,
        duplicate: 50,
        reorder: 150,
    }));
    let len = 1usize << 20;
    p.ma.0.insert(MemHandle(1), vec![0u8; 8 + len]);
    let served: Vec<u8> = (0..len as u32).map(|i| (i * 31 + i / 251) as u8).collect();
    let k = p.register_b(MemHandle(5), served.clone());
    let done =
        read_among_foreign_datagrams(&mut p, a_addr, k, 8, len, |round| round as u8, |_, _| {});
    assert_eq!(done, Some(true), "the read completed");
    assert!(
        p.ma.0[&MemHandle(1)][8..] == served[..],
        "the data is intact"
    );
    assert!(p.ma.0[&MemHandle(1)][..8].iter().all(|&x| x == 0));
    let st = p.a.stats();
    println!("{st:?}");
    if tagmatch_transport::udp::sock::PEEK {
        assert!(st.rx_expected > 0, "{st:?}");
        assert!(st.rx_unexpected > 0, "{st:?}");
        assert!(st.rx_placed >= st.rx_expected);
    }
}

/// A read into a *registered* region (peers may read it: the responder side of an
/// emulated write carries that out as a read into its exposed region) never receives a
/// datagram speculatively into its next range: foreign datagrams arriving while the read
/// is in flight must not leave bytes there that nobody wrote, even transiently. Checked
/// after every `progress`: each byte of the destination is either its old value or the
/// served one. (Before the fix, one run in ~40 of `netns.rs`'s three-host test read
/// such bytes back from a region another requester was writing the same data into.)
#[test]
fn udp_read_into_a_registered_region_never_holds_foreign_bytes() {
    let (mut p, a_addr) = udp_reader_pair(None);
    let len = 1usize << 20;
    // The destination, registered on a (old contents 0xEE).
    register(&mut p.a, &mut p.ma, MemHandle(1), vec![0xEE; len], true);
    let served: Vec<u8> = (0..len as u32).map(|i| (i * 31 + i / 251) as u8).collect();
    let k = p.register_b(MemHandle(5), served.clone());
    // Junk of a value neither old (0xEE) nor, at most places, served.
    let done = read_among_foreign_datagrams(
        &mut p,
        a_addr,
        k,
        0,
        len,
        |_| 0x5A,
        |round, ma| {
            let dest = &ma.0[&MemHandle(1)];
            if let Some(i) = (0..len).find(|&i| dest[i] != 0xEE && dest[i] != served[i]) {
                panic!(
                    "round {round}: byte {i} is {:#x}, neither old nor served ({:#x})",
                    dest[i], served[i]
                );
            }
        },
    );
    assert_eq!(done, Some(true), "the read completed");
    assert!(p.ma.0[&MemHandle(1)] == served, "the data is intact");
    let st = p.a.stats();
    assert_eq!(st.rx_expected, 0, "no speculative receive: {st:?}");
    assert!(st.rx_placed > 0, "received in place after a peek: {st:?}");
}

/// Two reads at once over loopback UDP (a stream of reads, whose data the server splices
/// from its region by default between peers with connected sockets), the served range
/// starting anywhere in a page: every byte arrives, and the reader places every datagram,
/// although the first is shorter than the next ones (they end at page boundaries).
/// Without splicing, the same. (A lone read is copied, see the next test.)
#[test]
fn udp_reads_spliced_from_any_alignment_arrive_intact() {
    for splice in [true, false] {
        for misalign in [0usize, 8, 4095] {
            let mut ucfg = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
            ucfg.splice = splice;
            let mut p = Pair::new(
                UdpDevice::bind(ucfg).expect("bind"),
                UdpDevice::bind(ucfg).expect("bind"),
            );
            let len = (1usize << 20) + 333;
            let served: Vec<u8> = (0..len as u32 + 8192)
                .map(|i| (i * 29 + i / 4093) as u8)
                .collect();
            let k = p.register_b(MemHandle(5), served);
            let at = p.mb.0[&MemHandle(5)].as_ptr() as usize;
            let pad = (misalign + 4096 - at % 4096) % 4096;
            p.ma.0.insert(MemHandle(1), vec![0u8; 8 + 2 * len]);
            let remote = RemoteAddr {
                addr: k.addr + pad as u64,
                key: k.key,
            };
            assert_eq!(
                p.reads(&[remote, remote], len as u64),
                [true, true],
                "splice {splice}, misalign {misalign}"
            );
            let want = &p.mb.0[&MemHandle(5)][pad..pad + len];
            for i in 0..2 {
                assert!(
                    p.ma.0[&MemHandle(1)][8 + i * len..8 + (i + 1) * len] == *want,
                    "splice {splice}, misalign {misalign}: read {i}'s data is intact"
                );
            }
            let (sa, sb) = (p.a.stats(), p.b.stats());
            let linux = tagmatch_transport::udp::sock::PEEK;
            assert_eq!(sb.sock.tx_spliced > 0, splice && linux, "{sb:?}");
            if linux {
                assert_eq!(
                    sa.rx_unexpected, 0,
                    "splice {splice}, misalign {misalign}: {sa:?}"
                );
                assert!(sa.rx_expected > 0, "{sa:?}");
            }
        }
    }
}

/// A lone read over loopback UDP (a ping-pong's) is copied, not spliced, even between
/// peers with connected sockets: its bytes cross two copies on two cores at once.
#[test]
fn udp_a_lone_read_is_copied() {
    let ucfg = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
    let mut p = Pair::new(
        UdpDevice::bind(ucfg).expect("bind"),
        UdpDevice::bind(ucfg).expect("bind"),
    );
    let len = (1usize << 20) + 333;
    let served: Vec<u8> = (0..len as u32).map(|i| (i * 31 + i / 4091) as u8).collect();
    let k = p.register_b(MemHandle(5), served.clone());
    p.ma.0.insert(MemHandle(1), vec![0u8; 8 + len]);
    let remote = RemoteAddr {
        addr: k.addr,
        key: k.key,
    };
    assert!(p.rdma(true, remote, len as u64));
    assert!(
        p.ma.0[&MemHandle(1)][8..] == served[..],
        "the data is intact"
    );
    let sb = p.b.stats();
    assert_eq!(sb.peer_sockets, 1, "{sb:?}");
    assert_eq!(sb.sock.tx_spliced, 0, "{sb:?}");
}

/// A registration for local use only (`remote: false`, what an endpoint makes for the
/// destination of its own reads or the source of its own writes) refuses peers: a read
/// or write naming its key is rejected as a wrong key, on both devices. A read of ours
/// into such a region may receive its next datagram speculatively (no peer can read the
/// region meanwhile), unlike one into a region peers may read.
#[test]
fn local_registrations_refuse_peers_and_take_reads_speculatively() {
    fn local_key<D: RdmDevice>(p: &mut Pair<D>) -> MrKey {
        register(&mut p.b, &mut p.mb, MemHandle(9), vec![7u8; 1000], false)
    }
    let net = MemNetwork::new(5);
    let mut m = Pair::new(net.device(), net.device());
    let (mut u, _) = udp_reader_pair(None);
    for (read, name) in [(true, "read"), (false, "write")] {
        m.ma.0.insert(MemHandle(1), vec![1u8; 200]);
        u.ma.0.insert(MemHandle(1), vec![1u8; 200]);
        let k = local_key(&mut m);
        let remote = RemoteAddr {
            addr: k.addr,
            key: k.key,
        };
        assert!(!m.rdma(read, remote, 100), "mem {name}");
        let k = local_key(&mut u);
        let remote = RemoteAddr {
            addr: k.addr,
            key: k.key,
        };
        assert!(!u.rdma(read, remote, 100), "udp {name}");
        assert!(u.mb.0[&MemHandle(9)].iter().all(|&x| x == 7), "{name}");
    }
    assert_eq!(m.b.rdma_stats().rejected_key, 2);
    assert_eq!(u.b.stats().rdma.rejected_key, 2);
    // A read of 1 MiB into a's local registration: received speculatively.
    let len = 1usize << 20;
    register(&mut u.a, &mut u.ma, MemHandle(1), vec![0u8; 8 + len], false);
    let served: Vec<u8> = (0..len as u32).map(|i| (i * 17 + 3) as u8).collect();
    let k = u.register_b(MemHandle(5), served.clone());
    let remote = RemoteAddr {
        addr: k.addr,
        key: k.key,
    };
    assert!(u.rdma(true, remote, len as u64));
    assert!(u.ma.0[&MemHandle(1)][8..] == served[..]);
    if tagmatch_transport::udp::sock::PEEK {
        assert!(u.a.stats().rx_expected > 0, "{:?}", u.a.stats());
    }
}

/// Reads `len` bytes of b's region `k` into a's `MemHandle(1)` at `offset` over UDP,
/// while a foreign socket sends a datagram to a's socket every round (alternately 100
/// and 60,000 bytes of `junk(round)`, never a valid frame), b having served up to its
/// window first; `check(round, a's memory)` runs after each of a's `progress`. Returns
/// the read's outcome, `None` if it did not finish within a minute.
fn read_among_foreign_datagrams(
    p: &mut Pair<UdpDevice>,
    a_addr: std::net::SocketAddr,
    k: MrKey,
    offset: u64,
    len: usize,
    junk: impl Fn(u32) -> u8,
    mut check: impl FnMut(u32, &Mem),
) -> Option<bool> {
    let foreign = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let token = RdmaToken(1);
    p.a.submit(
        Transmit::RdmaRead {
            token,
            peer: tagmatch_rdm::PeerId(0),
            dest: p.b.addr(),
            local: MemHandle(1),
            offset,
            remote: RemoteAddr {
                addr: k.addr,
                key: k.key,
            },
            len: len as u64,
        },
        &mut p.ma,
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut done = None;
    let mut round = 0u32;
    while done.is_none() && Instant::now() < deadline {
        round += 1;
        p.b.progress(&mut p.mb, Some(Duration::from_millis(1)))
            .expect("progress");
        let bytes = vec![junk(round); if round % 2 == 0 { 100 } else { 60_000 }];
        foreign.send_to(&bytes, a_addr).expect("send");
        p.a.progress(&mut p.ma, Some(Duration::from_millis(1)))
            .expect("progress");
        check(round, &p.ma);
        while let Some(e) = p.a.poll_event() {
            match e {
                DeviceEvent::RdmaDone { token: t, ok } if t == token => done = Some(ok),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    done
}

/// Two UDP devices on loopback with short retransmission timeouts: a (the reader) and b
/// (the server, two frames in flight, its faults from `shim`); and a's socket address.
fn udp_reader_pair(
    shim: Option<tagmatch_transport::udp::shim::ShimConfig>,
) -> (Pair<UdpDevice>, std::net::SocketAddr) {
    let mut ucfg = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
    ucfg.initial_rto = Duration::from_millis(20);
    ucfg.min_rto = Duration::from_millis(10);
    let a = UdpDevice::bind(ucfg).expect("bind");
    ucfg.max_inflight = 2;
    ucfg.shim = shim;
    let b = UdpDevice::bind(ucfg).expect("bind");
    let a_addr = a.udp_addr().sock;
    let p = Pair::new(a, b);
    (p, a_addr)
}

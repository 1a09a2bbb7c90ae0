//! Review of session 12's UDP device change: only streams of served reads are spliced
//! (another read queued behind one, or one before it still finishing); a lone read is
//! copied. Adversarial cases: lone (copied) reads whose region is deregistered and
//! rewritten while their data is in flight or lost; copied and spliced reads of one
//! connection interleaved under loss, duplication and reordering (the reader places
//! datagrams of different lengths); peers without a socket of their own.
use std::time::{Duration, Instant};

use tagmatch_rdm::{MemHandle, MrKey, RdmaToken, RemoteAddr, Transmit};
use tagmatch_transport::udp::shim::ShimConfig;
use tagmatch_transport::udp::{UdpConfig, UdpDevice};
use tagmatch_transport::{DeviceEvent, RdmDevice};

mod devmem;
use devmem::{progress_both, register, Mem};

/// The requester `a` and the responder `b`, with their memories. `b` serves region 5.
struct Rig {
    a: UdpDevice,
    b: UdpDevice,
    ma: Mem,
    mb: Mem,
    key: MrKey,
    served: Vec<u8>,
    /// Outcome of each read submitted (by token - 1).
    done: Vec<Option<bool>>,
}

fn cfg(f: impl Fn(&mut UdpConfig)) -> UdpConfig {
    let mut u = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
    // Recover quickly from injected losses.
    u.initial_rto = Duration::from_millis(20);
    u.min_rto = Duration::from_millis(10);
    f(&mut u);
    u
}

impl Rig {
    /// `b` registers `len` bytes (a pattern) for peers; `a` has a destination of
    /// `dest_len` bytes (region 1).
    fn new(ca: UdpConfig, cb: UdpConfig, len: usize, dest_len: usize) -> Rig {
        let a = UdpDevice::bind(ca).expect("bind");
        let mut b = UdpDevice::bind(cb).expect("bind");
        let (mut ma, mut mb) = (Mem::default(), Mem::default());
        let served: Vec<u8> = (0..len as u32).map(|i| (i * 31 + i / 251) as u8).collect();
        let key = register(&mut b, &mut mb, MemHandle(5), served.clone(), true);
        ma.0.insert(MemHandle(1), vec![0u8; dest_len]);
        Rig {
            a,
            b,
            ma,
            mb,
            key,
            served,
            done: Vec::new(),
        }
    }

    /// `a` reads `len` bytes at `from` of b's region into `to` of its region 1.
    fn read(&mut self, from: u64, to: u64, len: u64) {
        self.done.push(None);
        let t = Transmit::RdmaRead {
            token: RdmaToken(self.done.len() as u64),
            peer: tagmatch_rdm::PeerId(0),
            dest: self.b.addr(),
            local: MemHandle(1),
            offset: to,
            remote: RemoteAddr {
                addr: self.key.addr + from,
                key: self.key.key,
            },
            len,
        };
        self.a.submit(t, &mut self.ma);
    }

    fn poll_a(&mut self) {
        while let Some(e) = self.a.poll_event() {
            match e {
                DeviceEvent::RdmaDone { token, ok } => {
                    let slot = &mut self.done[token.0 as usize - 1];
                    assert!(slot.is_none(), "read {} ends twice", token.0);
                    *slot = Some(ok);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        if let Some(e) = self.b.poll_event() {
            panic!("b reports {e:?}");
        }
    }

    fn step_a(&mut self) {
        self.a
            .progress(&mut self.ma, Some(Duration::ZERO))
            .expect("progress");
        self.poll_a();
    }

    fn step_b(&mut self) {
        self.b
            .progress(&mut self.mb, Some(Duration::ZERO))
            .expect("progress");
    }

    /// Progresses `b` alone until it has served `n` reads in all (`a` does not look).
    fn serve(&mut self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.b.stats().rdma.served_reads < n && Instant::now() < deadline {
            self.b
                .progress(&mut self.mb, Some(Duration::from_millis(1)))
                .expect("progress");
        }
        assert_eq!(self.b.stats().rdma.served_reads, n, "{:?}", self.b.stats());
        for _ in 0..5 {
            self.step_b();
        }
    }

    /// Progresses both until every read ended (at most 20 s).
    fn finish(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.done.iter().any(Option::is_none) {
            progress_both(
                &mut self.a,
                &mut self.ma,
                &mut self.b,
                &mut self.mb,
                Duration::from_millis(1),
            );
            self.poll_a();
            assert!(
                Instant::now() < deadline,
                "reads did not end: {:?}\na {:?}\nb {:?}",
                self.done,
                self.a.stats(),
                self.b.stats()
            );
        }
    }

    /// b's owner deregisters the region and overwrites it with 0x77.
    fn deregister_and_rewrite(&mut self) {
        self.b
            .submit(Transmit::Deregister { key: self.key.key }, &mut self.mb);
        self.mb.0.get_mut(&MemHandle(5)).expect("region").fill(0x77);
    }

    /// Bytes of read `i` (into `to`, `len` bytes from `from`) that were written after
    /// the deregistration (0x77 where the region held something else).
    fn late(&self, from: usize, to: usize, len: usize) -> usize {
        self.ma.0[&MemHandle(1)][to..to + len]
            .iter()
            .zip(&self.served[from..from + len])
            .filter(|(d, s)| **d == 0x77 && **s != 0x77)
            .count()
    }

    fn intact(&self, from: usize, to: usize, len: usize) -> bool {
        self.ma.0[&MemHandle(1)][to..to + len] == self.served[from..from + len]
    }
}

fn lossy(seed: u64, drop: u32, duplicate: u32, reorder: u32) -> impl Fn(&mut UdpConfig) {
    move |u: &mut UdpConfig| {
        u.shim = Some(ShimConfig {
            seed,
            drop,
            duplicate,
            reorder,
        });
    }
}

/// A lone read (copied, although the peers have sockets of their own and splicing is
/// on) served whole before the reader looks; then the region is deregistered and
/// rewritten. The read may succeed only with the bytes the region held while
/// registered (they were copied into the socket when sent).
#[test]
fn a_lone_copied_read_never_succeeds_with_bytes_written_after_deregistration() {
    let len = 300_000usize;
    let mut r = Rig::new(cfg(|_| {}), cfg(|_| {}), len, len);
    r.read(0, 0, len as u64);
    r.step_a();
    r.serve(1);
    assert_eq!(r.b.stats().peer_sockets, 1);
    assert_eq!(r.b.stats().sock.tx_spliced, 0, "a lone read is copied");
    r.deregister_and_rewrite();
    r.finish();
    let late = r.late(0, 0, len);
    assert!(
        r.done[0] != Some(true) || late == 0,
        "the lone read succeeded with {late} bytes written after deregistration"
    );
    assert_eq!(
        r.done[0],
        Some(true),
        "its data was all sent while registered"
    );
    assert!(r.intact(0, 0, len));
}

/// Lone (copied) reads whose datagrams the responder's shim drops, duplicates and
/// reorders: the region is deregistered and rewritten once b has served the read, so
/// retransmissions find the key gone. The read ends (no hang) and never succeeds with
/// bytes written after the deregistration. Also with no socket of its own per peer
/// (`connect_peers` 0: every read copied) and for a stream of three (spliced).
#[test]
fn lossy_reads_deregistered_midway_end_and_never_serve_late_bytes() {
    let len = 200_000usize;
    for seed in 1..=6u64 {
        for (n, connect) in [(1usize, 4usize), (3, 4), (1, 0), (3, 0)] {
            let cb = cfg(|u| {
                lossy(seed, 250, 100, 100)(u);
                u.connect_peers = connect;
            });
            let ca = cfg(|u| u.connect_peers = connect);
            let mut r = Rig::new(ca, cb, len, n * len);
            for i in 0..n {
                r.read(0, (i * len) as u64, len as u64);
            }
            r.step_a();
            r.serve(n as u64);
            r.deregister_and_rewrite();
            r.finish();
            for i in 0..n {
                let late = r.late(0, i * len, len);
                assert!(
                    r.done[i] != Some(true) || late == 0,
                    "seed {seed}, {n} reads, connect_peers {connect}: read {i} succeeded \
                     with {late} bytes written after deregistration ({:?})",
                    r.b.stats()
                );
                if r.done[i] == Some(true) {
                    assert!(r.intact(0, i * len, len), "seed {seed} read {i}");
                }
            }
        }
    }
}

/// One connection carries a large lone read (copied: it started alone) and, queued
/// behind it while it streams, three more (spliced: a stream), from ranges starting at
/// odd offsets into destinations at odd offsets (spliced datagrams end at page
/// boundaries, so the reader gets datagrams of several lengths, copied ones among
/// spliced ones), all under loss, duplication and reordering both ways. Every read
/// succeeds with intact data.
#[test]
fn copied_and_spliced_reads_of_one_connection_interleaved_under_loss_arrive_intact() {
    let big = 3usize << 20;
    let small = 300_000usize;
    for seed in 1..=4u64 {
        let ca = cfg(lossy(seed + 100, 30, 30, 60));
        let cb = cfg(lossy(seed, 30, 30, 60));
        let mut r = Rig::new(ca, cb, big + 8192, big + 3 * small + 4096);
        r.read(5, 3, big as u64);
        r.step_a();
        // b starts the big read alone (copied), then sees the others.
        let deadline = Instant::now() + Duration::from_secs(5);
        while r.b.stats().frames_sent < 4 && Instant::now() < deadline {
            r.b.progress(&mut r.mb, Some(Duration::from_millis(1)))
                .expect("progress");
        }
        for i in 0..3 {
            r.read(
                777 + 1000 * i as u64,
                (big + 3 + i * small) as u64,
                small as u64,
            );
        }
        r.finish();
        assert_eq!(
            r.done,
            vec![Some(true); 4],
            "seed {seed}: {:?} {:?}",
            r.a.stats(),
            r.b.stats()
        );
        assert!(r.intact(5, 3, big), "seed {seed}: the big read's data");
        for i in 0..3 {
            assert!(
                r.intact(777 + 1000 * i, big + 3 + i * small, small),
                "seed {seed}: read {i}'s data"
            );
        }
        if tagmatch_transport::udp::sock::PEEK {
            let sb = r.b.stats();
            assert!(
                sb.sock.tx_spliced > 0,
                "seed {seed}: the stream was spliced"
            );
        }
    }
}

/// A stream of reads (spliced) whose statuses wait for the acknowledgement of their
/// data while the responder's shim drops a quarter of its datagrams: each status goes
/// once its data is acknowledged (retransmitted as often as needed), and the requester
/// then completes every read. Then a lone read on the same connection (copied once the
/// stream's statuses went) succeeds too.
#[test]
fn spliced_statuses_go_after_lost_data_is_retransmitted() {
    let len = 256_000usize;
    for seed in 1..=4u64 {
        let cb = cfg(lossy(seed, 250, 0, 0));
        let mut r = Rig::new(cfg(|_| {}), cb, len, 5 * len);
        for i in 0..4 {
            r.read(0, (i * len) as u64, len as u64);
        }
        r.finish();
        assert_eq!(r.done, vec![Some(true); 4], "seed {seed}");
        r.read(0, (4 * len) as u64, len as u64);
        r.finish();
        assert_eq!(r.done[4], Some(true), "seed {seed}");
        for i in 0..5 {
            assert!(r.intact(0, i * len, len), "seed {seed} read {i}");
        }
        assert!(r.b.stats().shim.dropped > 0);
    }
}

/// A stream whose reads include an empty one and one shorter than a spliced datagram's
/// minimum (copied bytes, but a spliced read's status: it waits in `finishing`), then
/// large ones: every read succeeds, every byte intact, and the connection goes idle.
#[test]
fn a_stream_with_empty_and_small_reads_ends() {
    let len = 200_000usize;
    let mut r = Rig::new(cfg(|_| {}), cfg(|_| {}), len, 4 * len);
    let reads = [
        (0usize, 0usize),
        (10, 1000),
        (4097, len - 4097),
        (1, len - 1),
    ];
    for (i, (from, n)) in reads.iter().enumerate() {
        r.read(*from as u64, (i * len) as u64, *n as u64);
    }
    r.finish();
    assert_eq!(r.done, vec![Some(true); 4]);
    for (i, (from, n)) in reads.iter().enumerate() {
        assert!(r.intact(*from, i * len, *n), "read {i}");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(r.a.is_idle() && r.b.is_idle()) {
        r.step_a();
        r.step_b();
        assert!(Instant::now() < deadline, "the devices go idle");
    }
}

/// A large lone read (copied) whose region is deregistered and rewritten while b is
/// still streaming it (its window holds only part of it): the read fails, or succeeds
/// only with bytes the region held while registered.
#[test]
fn a_lone_read_deregistered_while_it_streams_never_serves_late_bytes() {
    let len = 6usize << 20;
    for spins in [1usize, 3, 6] {
        let mut r = Rig::new(cfg(|_| {}), cfg(|_| {}), len, len);
        r.read(0, 0, len as u64);
        r.step_a();
        let deadline = Instant::now() + Duration::from_secs(5);
        while r.b.stats().frames_sent == 0 && Instant::now() < deadline {
            r.step_b();
        }
        for _ in 0..spins {
            r.step_a();
            r.step_b();
        }
        r.deregister_and_rewrite();
        r.finish();
        let late = r.late(0, 0, len);
        assert!(
            r.done[0] != Some(true) || late == 0,
            "after {spins} steps: the read succeeded with {late} bytes written after \
             deregistration"
        );
        assert_eq!(r.b.stats().sock.tx_spliced, 0, "a lone read is copied");
    }
}

/// One responder serves two requesters at once, the first with a socket of its own
/// (its stream spliced), the second through the shared socket (`connect_peers` 1:
/// copied), each with a lone read and then a stream, under loss: the choice is per
/// connection, and every read of both succeeds intact.
#[test]
fn two_requesters_one_with_a_socket_of_its_own_one_without() {
    let len = 300_000usize;
    let cb = cfg(|u| {
        lossy(7, 30, 30, 60)(u);
        u.connect_peers = 1;
    });
    let mut b = UdpDevice::bind(cb).expect("bind");
    let mut mb = Mem::default();
    let served: Vec<u8> = (0..len as u32).map(|i| (i * 13 + i / 97) as u8).collect();
    let key = register(&mut b, &mut mb, MemHandle(5), served.clone(), true);
    let mut reqs: Vec<(UdpDevice, Mem)> = (0..2)
        .map(|_| {
            let mut m = Mem::default();
            m.0.insert(MemHandle(1), vec![0u8; 4 * len]);
            (UdpDevice::bind(cfg(|_| {})).expect("bind"), m)
        })
        .collect();
    let submit = |d: &mut UdpDevice, m: &mut Mem, token: u64, dest| {
        d.submit(
            Transmit::RdmaRead {
                token: RdmaToken(token),
                peer: tagmatch_rdm::PeerId(0),
                dest,
                local: MemHandle(1),
                offset: (token - 1) * len as u64,
                remote: RemoteAddr {
                    addr: key.addr,
                    key: key.key,
                },
                len: len as u64,
            },
            m,
        );
    };
    let mut done = [[None::<bool>; 4]; 2];
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut round = 0;
    while done.iter().flatten().any(Option::is_none) {
        // A lone read each first, then a stream of three each.
        if round == 0 {
            for (d, m) in reqs.iter_mut() {
                submit(d, m, 1, b.addr());
            }
        }
        if round == 20 {
            for (d, m) in reqs.iter_mut() {
                for t in 2..=4 {
                    submit(d, m, t, b.addr());
                }
            }
        }
        round += 1;
        for (i, (d, m)) in reqs.iter_mut().enumerate() {
            d.progress(m, Some(Duration::ZERO)).expect("progress");
            while let Some(e) = d.poll_event() {
                match e {
                    DeviceEvent::RdmaDone { token, ok } => {
                        done[i][token.0 as usize - 1] = Some(ok);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        b.progress(&mut mb, Some(Duration::from_millis(1)))
            .expect("progress");
        assert!(Instant::now() < deadline, "reads did not end: {done:?}");
    }
    assert_eq!(done, [[Some(true); 4]; 2]);
    for (i, (_, m)) in reqs.iter().enumerate() {
        for t in 0..4 {
            assert!(
                m.0[&MemHandle(1)][t * len..(t + 1) * len] == served[..],
                "requester {i}, read {t}"
            );
        }
    }
    let sb = b.stats();
    assert_eq!(sb.peer_sockets, 1, "{sb:?}");
    if tagmatch_transport::udp::sock::PEEK {
        assert!(
            sb.sock.tx_spliced > 0,
            "the first requester's stream: {sb:?}"
        );
    }
}

//! The cross-process scenario: a responder that echoes every message and serves its
//! registered region, and a requester that runs every subprotocol against it and compares
//! the data byte for byte. Used in one process (threads), across two processes, and across
//! network namespaces.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tagmatch_rdm::{
    AtomicArgs, AtomicOp, Completion, Config, Datatype, OpKind, PeerId, Protocol, RemoteAddr,
    SendOpts,
};
use tagmatch_transport::udp::{UdpConfig, UdpDevice};
use tagmatch_transport::{Node, RdmDevice, UdpAddr};
use tagmatch_wire::efa::RawAddr;

/// Role selection of a re-executed test binary.
pub const ROLE_ENV: &str = "TAGMATCH_TRANSPORT_ROLE";
/// Address to bind in a child.
pub const BIND_ENV: &str = "TAGMATCH_TRANSPORT_BIND";
/// The responder's address, for a requester child.
pub const PEER_ENV: &str = "TAGMATCH_TRANSPORT_PEER";
/// The requester's slot (0, 1, ...): where its atomics and last write land, so that
/// several requesters can share one responder.
pub const SLOT_ENV: &str = "TAGMATCH_TRANSPORT_SLOT";
/// How many requesters a responder child serves (default 1).
pub const REQUESTERS_ENV: &str = "TAGMATCH_TRANSPORT_REQUESTERS";
/// Path MTU of a child's UDP devices (default 1500).
pub const MTU_ENV: &str = "TAGMATCH_TRANSPORT_PATH_MTU";

/// A UDP node bound to `bind` with path MTU `mtu`.
pub fn udp_node(bind: &str, mtu: usize, cfg: Config) -> Node<UdpDevice> {
    let mut u = UdpConfig::new(bind.parse().expect("bind address"));
    u.path_mtu = mtu;
    Node::new(cfg, UdpDevice::bind(u).expect("bind"))
}

/// The body of every test binary's `child_entry` test: nothing unless re-executed with a
/// role in the environment.
pub fn child_main() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    let bind = std::env::var(BIND_ENV).unwrap_or_else(|_| "127.0.0.1:0".into());
    let mtu = std::env::var(MTU_ENV)
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(1500);
    match role.as_str() {
        "responder" => {
            let mut n = udp_node(&bind, mtu, config());
            println!("\nADDR {}", n.device().udp_addr());
            let k: usize = std::env::var(REQUESTERS_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            let summary = responder(&mut n, 2 * k).expect("responder");
            println!("RESPONDER {summary} {:?}", n.device().stats());
        }
        "requester" => {
            let peer: UdpAddr = std::env::var(PEER_ENV)
                .expect("peer")
                .parse()
                .expect("peer address");
            let mut a = udp_node(&bind, mtu, config());
            let mut b = udp_node(&bind, mtu, config_emulated());
            let t = Instant::now();
            let slot: u64 = std::env::var(SLOT_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let log = requester(&mut a, &mut b, peer.to_raw(), slot).expect("requester");
            println!(
                "REQUESTER ok {} operations in {:?} (EFA MTU {}): {}",
                log.len(),
                t.elapsed(),
                a.device().mtu(),
                log.join(" ")
            );
        }
        other => panic!("unknown role {other}"),
    }
}

/// Kills a child on drop (every path out of a test).
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

pub const TAG_HELLO: u64 = 1;
pub const TAG_KEY: u64 = 2;
pub const TAG_DONE: u64 = 99;
pub const REGION: usize = 2 << 20;
pub const LIMIT: Duration = Duration::from_secs(90);

pub fn payload(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u64)
                .wrapping_mul(31)
                .wrapping_add(seed * 7 + (i as u64 >> 9)) as u8
        })
        .collect()
}

/// Both sides: long-read from 256 KiB, runting read above 512 KiB (so that 400 KiB is a
/// plain long-read), everything else default.
pub fn config() -> Config {
    Config {
        min_read_msg_size: 256 << 10,
        runt_size: 512 << 10,
        ..Config::default()
    }
}

/// A requester that cannot use direct RDMA (emulated reads and writes).
pub fn config_emulated() -> Config {
    Config {
        direct_read: false,
        direct_write: false,
        ..config()
    }
}

fn err<T>(what: impl Into<String>) -> Result<T, String> {
    Err(what.into())
}

fn check(c: &Completion, kind: OpKind) -> Result<(), String> {
    if c.kind != kind || c.result.is_err() {
        return err(format!(
            "completion {:?} {:?}, expected {kind:?} Ok",
            c.kind, c.result
        ));
    }
    Ok(())
}

/// Runs the responder until the requester says DONE `expected_done` times.
pub fn responder<D: RdmDevice>(node: &mut Node<D>, expected_done: usize) -> Result<String, String> {
    let deadline = Instant::now() + LIMIT;
    let region = payload(REGION, 5);
    let (_mem, key) = node
        .register(region, Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    let ep = node.endpoint_mut();
    let mut trecv = ep
        .trecv(None, 0, !0, 4 << 20)
        .map_err(|e| format!("{e:?}"))?;
    let mut recv = ep.recv(None, 64 << 10).map_err(|e| format!("{e:?}"))?;
    let (mut echoes, mut remote_writes, mut done) = (0usize, 0usize, 0usize);
    let mut pending_sends = Vec::new();
    loop {
        if Instant::now() > deadline {
            return err(format!("responder timed out: {echoes} echoes, {done} done"));
        }
        node.progress(Some(Duration::from_millis(100)))
            .map_err(|e| e.to_string())?;
        while let Some(c) = node.poll_completion() {
            match c.kind {
                OpKind::RemoteWrite => remote_writes += 1,
                OpKind::Send => {
                    check(&c, OpKind::Send)?;
                    pending_sends.retain(|o| *o != c.op);
                }
                OpKind::Recv if c.op == trecv => {
                    check(&c, OpKind::Recv)?;
                    let src = c.src.ok_or("receive without source")?;
                    let ep = node.endpoint_mut();
                    let reply = match c.tag {
                        TAG_HELLO => {
                            let mut b = key.addr.to_le_bytes().to_vec();
                            b.extend_from_slice(&key.key.to_le_bytes());
                            ep.tsend(src, TAG_KEY, b, SendOpts::default())
                        }
                        TAG_DONE => {
                            done += 1;
                            let n = (c.len as usize).min(c.data.len());
                            ep.tsend(src, TAG_DONE, c.data[..n].to_vec(), SendOpts::default())
                        }
                        t => {
                            echoes += 1;
                            let n = (c.len as usize).min(c.data.len());
                            ep.tsend(src, t, c.data[..n].to_vec(), SendOpts::default())
                        }
                    };
                    pending_sends.push(reply.map_err(|e| format!("{e:?}"))?);
                    trecv = ep
                        .trecv(None, 0, !0, 4 << 20)
                        .map_err(|e| format!("{e:?}"))?;
                }
                OpKind::Recv if c.op == recv => {
                    check(&c, OpKind::Recv)?;
                    let src = c.src.ok_or("receive without source")?;
                    let ep = node.endpoint_mut();
                    echoes += 1;
                    let data = c.data[..(c.len as usize).min(c.data.len())].to_vec();
                    pending_sends.push(
                        ep.send(src, data, SendOpts::default())
                            .map_err(|e| format!("{e:?}"))?,
                    );
                    recv = ep.recv(None, 64 << 10).map_err(|e| format!("{e:?}"))?;
                }
                k => return err(format!("unexpected completion {k:?} {:?}", c.result)),
            }
        }
        if done >= expected_done && pending_sends.is_empty() {
            break;
        }
    }
    if !node
        .flush(Duration::from_secs(10))
        .map_err(|e| e.to_string())?
    {
        return err("responder could not flush");
    }
    Ok(format!("echoes={echoes} remote_writes={remote_writes}"))
}

struct Req<'a, D: RdmDevice> {
    node: &'a mut Node<D>,
    peer: PeerId,
    base: RemoteAddr,
    deadline: Instant,
    log: Vec<String>,
}

impl<D: RdmDevice> Req<'_, D> {
    fn wait(&mut self, op: tagmatch_rdm::OpId) -> Result<Completion, String> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        self.node.wait(op, left).map_err(|e| e.to_string())
    }

    fn at(&self, off: u64) -> RemoteAddr {
        RemoteAddr {
            addr: self.base.addr + off,
            key: self.base.key,
        }
    }

    /// Sends `data` with `tag` (None: untagged), waits for the echo, compares.
    fn echo(
        &mut self,
        tag: Option<u64>,
        data: Vec<u8>,
        opts: SendOpts,
        proto: Protocol,
    ) -> Result<(), String> {
        let ep = self.node.endpoint_mut();
        let r = match tag {
            Some(t) => ep.trecv(Some(self.peer), t, 0, data.len()),
            None => ep.recv(Some(self.peer), data.len()),
        }
        .map_err(|e| format!("{e:?}"))?;
        let s = match tag {
            Some(t) => ep.tsend(self.peer, t, data.clone(), opts),
            None => ep.send(self.peer, data.clone(), opts),
        }
        .map_err(|e| format!("{e:?}"))?;
        let got = self.node.endpoint().protocol_of(s);
        if got != Some(proto) {
            return err(format!(
                "tag {tag:?} len {}: protocol {got:?}, expected {proto:?}",
                data.len()
            ));
        }
        let sc = self.wait(s)?;
        check(&sc, OpKind::Send)?;
        let rc = self.wait(r)?;
        check(&rc, OpKind::Recv)?;
        if rc.data != data {
            return err(format!("tag {tag:?} len {}: echo differs", data.len()));
        }
        self.log.push(format!(
            "{proto:?}{}:{}",
            if opts.delivery_complete { "+DC" } else { "" },
            data.len()
        ));
        Ok(())
    }

    fn write(
        &mut self,
        off: u64,
        data: Vec<u8>,
        opts: SendOpts,
        proto: Protocol,
    ) -> Result<(), String> {
        let at = self.at(off);
        let op = self
            .node
            .endpoint_mut()
            .write(self.peer, data.clone(), at, opts)
            .map_err(|e| format!("{e:?}"))?;
        let c = self.wait(op)?;
        check(&c, OpKind::Write)?;
        let got = self.node.endpoint().protocol_of(op);
        if got != Some(proto) {
            return err(format!(
                "write {}: protocol {got:?}, expected {proto:?}",
                data.len()
            ));
        }
        self.log.push(format!("{proto:?}:{}", data.len()));
        Ok(())
    }

    fn read(&mut self, off: u64, expect: &[u8], proto: Protocol) -> Result<(), String> {
        let at = self.at(off);
        let op = self
            .node
            .endpoint_mut()
            .read(self.peer, expect.len(), at)
            .map_err(|e| format!("{e:?}"))?;
        let c = self.wait(op)?;
        check(&c, OpKind::Read)?;
        if c.data != expect {
            return err(format!("read {} at {off}: data differs", expect.len()));
        }
        let got = self.node.endpoint().protocol_of(op);
        if got != Some(proto) {
            return err(format!(
                "read {}: protocol {got:?}, expected {proto:?}",
                expect.len()
            ));
        }
        self.log.push(format!("{proto:?}:{}", expect.len()));
        Ok(())
    }

    fn atomic(
        &mut self,
        kind: OpKind,
        off: u64,
        args: AtomicArgs,
        expect_old: Option<u64>,
    ) -> Result<(), String> {
        let at = self.at(off);
        let ep = self.node.endpoint_mut();
        let op = match kind {
            OpKind::AtomicWrite => ep.atomic_write(self.peer, args, at, SendOpts::default()),
            OpKind::AtomicFetch => ep.atomic_fetch(self.peer, args, at),
            _ => ep.atomic_compare(self.peer, args, at),
        }
        .map_err(|e| format!("{e:?}"))?;
        let c = self.wait(op)?;
        check(&c, kind)?;
        if let Some(old) = expect_old {
            let got = c
                .data
                .get(..8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
            if got != Some(old) {
                return err(format!("{kind:?}: old value {got:?}, expected {old}"));
            }
        }
        self.log.push(format!("{kind:?}"));
        Ok(())
    }
}

fn hello<D: RdmDevice>(
    node: &mut Node<D>,
    responder: RawAddr,
    deadline: Instant,
) -> Result<(PeerId, RemoteAddr), String> {
    let peer = node.endpoint_mut().add_peer(responder);
    let ep = node.endpoint_mut();
    let r = ep
        .trecv(Some(peer), TAG_KEY, 0, 16)
        .map_err(|e| format!("{e:?}"))?;
    let s = ep
        .tsend(peer, TAG_HELLO, b"hello".to_vec(), SendOpts::default())
        .map_err(|e| format!("{e:?}"))?;
    let left = deadline.saturating_duration_since(Instant::now());
    check(
        &node.wait(s, left).map_err(|e| e.to_string())?,
        OpKind::Send,
    )?;
    let c = node.wait(r, left).map_err(|e| e.to_string())?;
    check(&c, OpKind::Recv)?;
    let b = c.data;
    if b.len() != 16 {
        return err("bad key message");
    }
    let addr = u64::from_le_bytes(b[..8].try_into().map_err(|_| "key")?);
    let key = u64::from_le_bytes(b[8..].try_into().map_err(|_| "key")?);
    Ok((peer, RemoteAddr { addr, key }))
}

fn done<D: RdmDevice>(r: &mut Req<'_, D>) -> Result<(), String> {
    r.echo(
        Some(TAG_DONE),
        b"done".to_vec(),
        SendOpts::default(),
        Protocol::Eager,
    )?;
    // Stay until the responder has our last acknowledgements (it retransmits otherwise).
    let idle = r
        .node
        .linger(Duration::from_millis(300), Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    if !idle {
        return err("requester could not flush");
    }
    Ok(())
}

/// Phase A on a node with [`config`]: every two-sided subprotocol (echoed), emulated and
/// direct writes, direct reads, atomics. Phase B on a node with [`config_emulated`]:
/// emulated short and long-CTS reads. Returns the log of what ran.
pub fn requester<D: RdmDevice>(
    a: &mut Node<D>,
    b: &mut Node<D>,
    responder: RawAddr,
    slot: u64,
) -> Result<Vec<String>, String> {
    let deadline = Instant::now() + LIMIT;
    let (peer, base) = hello(a, responder, deadline)?;
    let mut r = Req {
        node: a,
        peer,
        base,
        deadline,
        log: Vec::new(),
    };
    let dc = SendOpts {
        delivery_complete: true,
        ..SendOpts::default()
    };
    let plain = SendOpts::default();
    r.echo(Some(10), payload(100, 10), plain, Protocol::Eager)?;
    r.echo(None, payload(700, 9), plain, Protocol::Eager)?;
    r.echo(Some(11), payload(20_000, 11), plain, Protocol::Medium)?;
    r.echo(Some(12), payload(150_000, 12), plain, Protocol::LongCts)?;
    r.echo(Some(13), payload(400_000, 13), plain, Protocol::LongRead)?;
    r.echo(Some(14), payload(1_500_000, 14), plain, Protocol::RuntRead)?;
    r.echo(Some(15), payload(500, 15), dc, Protocol::Eager)?;
    r.echo(Some(16), payload(30_000, 16), dc, Protocol::Medium)?;
    r.echo(Some(17), payload(100_000, 17), dc, Protocol::LongCts)?;
    // One-sided: CQ data forces the emulated write protocols.
    let cq = SendOpts {
        cq_data: Some(0xc0ffee),
        ..SendOpts::default()
    };
    let cq_dc = SendOpts {
        cq_data: Some(7),
        delivery_complete: true,
    };
    let w1 = payload(100, 21);
    let w2 = payload(30_000, 22);
    let w3 = payload(200_000, 23);
    let w4 = payload(300_000, 24);
    let w5 = payload(1000, 25);
    r.write(0, w1.clone(), cq, Protocol::EagerWrite)?;
    r.write(4096, w2.clone(), cq, Protocol::LongCtsWrite)?;
    r.write(65536, w3.clone(), cq, Protocol::LongReadWrite)?;
    r.write(600_000, w4.clone(), plain, Protocol::DirectWrite)?;
    r.write(1 << 20, w5.clone(), cq_dc, Protocol::EagerWrite)?;
    r.read(0, &w1, Protocol::DirectRead)?;
    r.read(4096, &w2, Protocol::DirectRead)?;
    r.read(65536, &w3, Protocol::DirectRead)?;
    r.read(600_000, &w4, Protocol::DirectRead)?;
    r.read(1 << 20, &w5, Protocol::DirectRead)?;
    // Atomics on a u64 at 1.5 MiB (pattern bytes before).
    let off = 1_500_000u64 + 64 * slot;
    let region = payload(REGION, 5);
    let init = u64::from_le_bytes(
        region[off as usize..off as usize + 8]
            .try_into()
            .unwrap_or([0; 8]),
    );
    let u64arg = |v: u64| v.to_le_bytes().to_vec();
    let add = AtomicArgs {
        datatype: Datatype::U64,
        op: AtomicOp::Sum,
        operand: u64arg(5),
        compare: None,
    };
    r.atomic(OpKind::AtomicFetch, off, add, Some(init))?;
    let cas = AtomicArgs {
        datatype: Datatype::U64,
        op: AtomicOp::Cswap,
        operand: u64arg(42),
        compare: Some(u64arg(init.wrapping_add(5))),
    };
    r.atomic(OpKind::AtomicCompare, off, cas, Some(init.wrapping_add(5)))?;
    let wr = AtomicArgs {
        datatype: Datatype::U64,
        op: AtomicOp::Sum,
        operand: u64arg(8),
        compare: None,
    };
    r.atomic(OpKind::AtomicWrite, off, wr, None)?;
    r.read(off, &50u64.to_le_bytes(), Protocol::DirectRead)?;
    done(&mut r)?;
    let mut log = r.log;
    // Phase B: emulated reads from a node without direct RDMA.
    let (peer, base) = hello(b, responder, deadline)?;
    let mut r = Req {
        node: b,
        peer,
        base,
        deadline,
        log: Vec::new(),
    };
    r.read(4096, &w2[..1000], Protocol::ShortRead)?;
    r.read(65536, &w3, Protocol::LongCtsRead)?;
    let off = 1_800_000 + 128 * slot;
    r.write(off, payload(50, 26 + slot), plain, Protocol::EagerWrite)?;
    r.read(off, &payload(50, 26 + slot), Protocol::ShortRead)?;
    done(&mut r)?;
    log.extend(r.log);
    Ok(log)
}

/// A child process running this test binary's `test_name` with `role`, in `netns` when
/// given; stdout piped.
pub fn spawn_child(
    netns: Option<&str>,
    test_name: &str,
    envs: &[(&str, String)],
) -> std::io::Result<Child> {
    let exe = std::env::current_exe()?;
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    cmd.args([test_name, "--exact", "--nocapture", "--test-threads=1"]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn()
}

/// Reads the child's stdout until a line starting with `prefix`; returns its rest. The
/// remaining output is forwarded to this process's stdout by a thread.
pub fn read_line_with(child: &mut Child, prefix: &str) -> Option<String> {
    let out = child.stdout.take()?;
    let mut rd = BufReader::new(out);
    let mut line = String::new();
    loop {
        line.clear();
        if rd.read_line(&mut line).ok()? == 0 {
            return None;
        }
        print!("[child] {line}");
        if let Some(i) = line.find(prefix) {
            let rest = line[i + prefix.len()..].trim().to_string();
            std::thread::spawn(move || {
                let mut l = String::new();
                while rd.read_line(&mut l).map(|n| n > 0).unwrap_or(false) {
                    print!("[child] {l}");
                    l.clear();
                }
            });
            return Some(rest);
        }
    }
}

/// Waits for a child with a bound; kills it past the bound.
pub fn wait_child(child: &mut Child, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(st)) if st.success() => return Ok(()),
            Ok(Some(st)) => return err(format!("child exited with {st}")),
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return err("child timed out (killed)");
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return err(e.to_string()),
        }
    }
}

/// `a` sends `b` one message of `len` bytes; both progress until it arrives intact (the
/// sender's completion `Ok`, the receiver's data equal), for at most 20 s.
pub fn exchange(a: &mut Node<UdpDevice>, b: &mut Node<UdpDevice>, len: usize) {
    exchange_n(a, b, len, 1);
}

/// `a` sends `b` `n` messages of `len` bytes at once (a stream: large ones are read by
/// `b` as a stream of reads, which the UDP device splices); both progress until all
/// arrive intact, in order, for at most 20 s.
pub fn exchange_n(a: &mut Node<UdpDevice>, b: &mut Node<UdpDevice>, len: usize, n: usize) {
    let ab = a.add_peer(b.addr());
    let data = |k: usize| -> Vec<u8> { (0..len).map(|i| (i * 7 + k) as u8).collect() };
    let rs: Vec<_> = (0..n)
        .map(|_| b.endpoint_mut().recv(None, len).expect("recv"))
        .collect();
    let ss: Vec<_> = (0..n)
        .map(|k| {
            a.endpoint_mut()
                .send(ab, data(k), SendOpts::default())
                .expect("send")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut got_r, mut got_s) = (0, 0);
    while !(got_r == n && got_s == n) && Instant::now() < deadline {
        a.progress(Some(Duration::from_millis(1)))
            .expect("progress");
        b.progress(Some(Duration::from_millis(1)))
            .expect("progress");
        while let Some(c) = a.poll_completion() {
            assert_eq!((c.op, c.result), (ss[got_s], Ok(())));
            got_s += 1;
        }
        while let Some(c) = b.poll_completion() {
            assert_eq!((c.op, c.result), (rs[got_r], Ok(())));
            assert!(c.data == data(got_r), "message {got_r} intact");
            got_r += 1;
        }
    }
    assert!(got_r == n && got_s == n, "exchange completed");
}

/// `a` sends 10 bytes to a peer that never answers: a socket nobody reads (returned, to
/// be kept while the test runs).
pub fn send_to_a_silent_peer(a: &mut Node<UdpDevice>) -> std::net::UdpSocket {
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let peer = UdpAddr {
        sock: silent.local_addr().expect("addr"),
        connid: 5,
    };
    let p = a.add_peer(peer.to_raw());
    a.endpoint_mut()
        .send(p, vec![1; 10], SendOpts::default())
        .expect("send");
    silent
}

/// Short timeouts: a peer that stops answering fails within ~200 ms.
pub fn fail_fast(u: &mut UdpConfig) {
    u.initial_rto = Duration::from_millis(10);
    u.min_rto = Duration::from_millis(10);
    u.max_rto = Duration::from_millis(20);
    u.peer_timeout = Duration::from_millis(200);
}

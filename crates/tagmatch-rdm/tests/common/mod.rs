//! Shared helpers for the integration tests (included with `mod common;`).
#![allow(dead_code)]

use tagmatch_rdm::testing::Fabric;
use tagmatch_rdm::{Completion, Config, Features, OpId, OpKind, PeerId};

/// Small thresholds so every subprotocol shows up with small messages.
pub fn small_cfg() -> Config {
    Config {
        mtu: 256,
        max_medium_size: 1024,
        min_read_msg_size: 4096,
        min_read_write_size: 2048,
        rx_window_packets: 4,
        tx_min_credits: 4,
        ..Config::default()
    }
}

/// Two endpoints a and b, connected both ways; returns (fabric, a, b, b-as-seen-by-a,
/// a-as-seen-by-b).
pub fn pair(
    seed: u64,
    ca: Config,
    cb: Config,
    reorder: bool,
) -> (Fabric, usize, usize, PeerId, PeerId) {
    let mut fab = Fabric::new(seed);
    fab.reorder = reorder;
    let a = fab.add(ca);
    let b = fab.add(cb);
    let ab = fab.connect(a, b);
    let ba = fab.connect(b, a);
    (fab, a, b, ab, ba)
}

/// Deterministic payload.
pub fn payload(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}

/// The completion of `op`.
pub fn done(cs: &[Completion], op: OpId) -> &Completion {
    match cs.iter().find(|c| c.op == op) {
        Some(c) => c,
        None => panic!("no completion for {op:?} in {cs:?}"),
    }
}

/// Completions of a kind.
pub fn of_kind(cs: &[Completion], kind: OpKind) -> Vec<&Completion> {
    cs.iter().filter(|c| c.kind == kind).collect()
}

/// Baseline features plus the named modifications.
pub fn feats(f: impl FnOnce(&mut Features)) -> Config {
    let mut c = small_cfg();
    f(&mut c.features);
    c
}

use tagmatch_rdm::SendOpts;

/// Exchanges one eager message each way so both sides have the other's handshake, then
/// clears the wire log and the completions.
pub fn warm(fab: &mut Fabric, a: usize, b: usize, ab: PeerId, ba: PeerId) {
    fab.ep(b).recv(None, 8).unwrap();
    fab.ep(a).send(ab, vec![1], SendOpts::default()).unwrap();
    fab.drive();
    fab.ep(a).recv(None, 8).unwrap();
    fab.ep(b).send(ba, vec![2], SendOpts::default()).unwrap();
    fab.drive();
    assert!(fab.ep(a).peer_handshake(ab).is_some());
    assert!(fab.ep(b).peer_handshake(ba).is_some());
    fab.log.clear();
    fab.completions(a);
    fab.completions(b);
}

/// A warmed pair.
pub fn warm_pair(
    seed: u64,
    ca: Config,
    cb: Config,
    reorder: bool,
) -> (Fabric, usize, usize, PeerId, PeerId) {
    let (mut fab, a, b, ab, ba) = pair(seed, ca, cb, reorder);
    warm(&mut fab, a, b, ab, ba);
    (fab, a, b, ab, ba)
}

/// Result of one message a → b.
pub struct Msg {
    pub send: OpId,
    pub recv: OpId,
    pub ca: Vec<Completion>,
    pub cb: Vec<Completion>,
}

/// Posts a receive of `recv_len` on b (first, or after the send when `unexpected`), sends
/// `data` from a, drives.
pub fn message(
    fab: &mut Fabric,
    (a, b, ab): (usize, usize, PeerId),
    tagged: bool,
    data: Vec<u8>,
    opts: SendOpts,
    recv_len: usize,
    unexpected: bool,
) -> Msg {
    let post = |fab: &mut Fabric| {
        if tagged {
            fab.ep(b).trecv(None, 0x77, 0, recv_len).unwrap()
        } else {
            fab.ep(b).recv(None, recv_len).unwrap()
        }
    };
    let mut recv = None;
    if !unexpected {
        recv = Some(post(fab));
    }
    let send = if tagged {
        fab.ep(a).tsend(ab, 0x77, data, opts).unwrap()
    } else {
        fab.ep(a).send(ab, data, opts).unwrap()
    };
    fab.drive();
    if unexpected {
        recv = Some(post(fab));
        fab.drive();
    }
    Msg {
        send,
        recv: recv.unwrap(),
        ca: fab.completions(a),
        cb: fab.completions(b),
    }
}

/// Checks a successful message: both completions, data byte for byte.
pub fn check_ok(m: &Msg, data: &[u8], tagged: bool) {
    let s = done(&m.ca, m.send);
    assert_eq!((s.kind, s.result), (OpKind::Send, Ok(())), "{s:?}");
    let r = done(&m.cb, m.recv);
    assert_eq!((r.kind, r.result), (OpKind::Recv, Ok(())), "{:?}", r.result);
    assert_eq!(r.len, data.len() as u64);
    assert_eq!(r.tag, if tagged { 0x77 } else { 0 });
    assert!(r.data[..data.len()] == data[..], "data differs");
}

/// What the region helpers fill a fresh region with (bytes nobody wrote).
pub const FILL: u8 = 0xEE;

/// Registers `len` bytes of [`FILL`] on node `n` (`remote`: for peers, or local only)
/// and drives the registration (which may fail under faults).
pub fn fill_region(
    fab: &mut Fabric,
    n: usize,
    len: usize,
    remote: bool,
) -> tagmatch_rdm::MemHandle {
    let h = fab.ep(n).register_memory_with(vec![FILL; len], remote);
    fab.drive();
    h
}

/// Posts on `b` a receive (tag 0x77 when `tagged`) into `len` bytes at `off` of `mem`.
pub fn post_region(
    fab: &mut Fabric,
    b: usize,
    tagged: bool,
    mem: tagmatch_rdm::MemHandle,
    off: u64,
    len: u64,
) -> Result<OpId, tagmatch_rdm::CallError> {
    if tagged {
        fab.ep(b).trecv_region(None, 0x77, 0, mem, off, len)
    } else {
        fab.ep(b).recv_region(None, mem, off, len)
    }
}

/// Sends `data` from `a` to its peer `ab` (tag 0x77 when `tagged`).
pub fn send_77(fab: &mut Fabric, a: usize, ab: PeerId, tagged: bool, data: Vec<u8>) -> OpId {
    if tagged {
        fab.ep(a)
            .tsend(ab, 0x77, data, SendOpts::default())
            .unwrap()
    } else {
        fab.ep(a).send(ab, data, SendOpts::default()).unwrap()
    }
}

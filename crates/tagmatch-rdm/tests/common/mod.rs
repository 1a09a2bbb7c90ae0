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

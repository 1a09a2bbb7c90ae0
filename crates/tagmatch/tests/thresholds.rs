//! The builder's protocol thresholds (`max_medium_size`, `min_read_msg_size`,
//! `min_read_write_size`) decide the subprotocol a message or an emulated write takes,
//! over the EFA protocol in process (the in-memory device, fast path off) and over UDP:
//! the same message, sent under different thresholds, completes through the subprotocol
//! the thresholds name (`Counters::protocol`), with its bytes intact.

mod common;

use common::introduce;
use tagmatch::{Builder, Endpoint, MemFabric, Protocol, SendOptions, TagMatch};
use tagmatch_rdm::Config;

const LEN: usize = 100_000;

/// The sender's protocol counts after one tagged send of `LEN` bytes and one emulated
/// RMA write of `LEN` bytes between two endpoints built by `mk` (a small round trip
/// first, so that each side knows the other's features from the handshake).
fn one_send_and_one_write(mk: &dyn Fn() -> Builder) -> Vec<(Protocol, u64)> {
    let mut a = mk().build().unwrap();
    let mut b = mk().build().unwrap();
    let pb = a.insert_peer(&b.address()).unwrap();
    let pa = b.insert_peer(&a.address()).unwrap();
    introduce(&mut a, &mut b, pb, pa);
    let before = a.stats().facade;
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 251) as u8).collect();
    let r = b.trecv(pa, TagMatch::exact(9), LEN).unwrap();
    let s = a.tsend(pb, 9, data.clone()).unwrap();
    let c = b.wait_with(r, &mut [&mut a]).unwrap();
    assert!(c.data == data, "the message's bytes");
    a.wait_with(s, &mut [&mut b]).unwrap();
    let mr = b.register(vec![0u8; LEN + 64]).unwrap();
    // Delivery complete: the write completes once the bytes are in the target's region.
    let dc = SendOptions {
        delivery_complete: true,
        ..SendOptions::default()
    };
    let w = a
        .write_with(pb, data.clone(), mr.remote_key().at(32), dc)
        .unwrap();
    a.wait_with(w, &mut [&mut b]).unwrap();
    let back = b.deregister(mr).unwrap();
    assert!(back[32..32 + LEN] == data[..], "the written bytes");
    let after = a.stats().facade;
    tagmatch::Counters::PROTOCOLS
        .iter()
        .map(|&p| (p, after.protocol(p) - before.protocol(p)))
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// The subprotocols of one send and one write under each setting of the thresholds.
/// `base` builds endpoints without direct RDMA write (both devices have it, and a direct
/// write takes none of the emulated-write subprotocols).
fn thresholds_decide(base: &dyn Fn() -> Builder) {
    // Defaults: 100 kB is above the medium limit (64 KiB) and below long-read's 1 MiB;
    // as a write it is above long-read write's 64 KiB.
    type Set = fn(Builder) -> Builder;
    let cases: [(&str, Set, Protocol, Protocol); 4] = [
        (
            "defaults",
            |b| b,
            Protocol::LongCts,
            Protocol::LongReadWrite,
        ),
        (
            "max_medium_size 256 KiB",
            |b| b.max_medium_size(256 << 10),
            Protocol::Medium,
            Protocol::LongReadWrite,
        ),
        (
            "min_read_msg_size 80 kB",
            |b| b.min_read_msg_size(80_000),
            Protocol::LongRead,
            Protocol::LongReadWrite,
        ),
        (
            "min_read_write_size 1 MiB",
            |b| b.min_read_write_size(1 << 20),
            Protocol::LongCts,
            Protocol::LongCtsWrite,
        ),
    ];
    for (label, set, send, write) in cases {
        let got = one_send_and_one_write(&|| set(base()));
        assert_eq!(got, vec![(send, 1), (write, 1)], "{label}");
    }
}

/// The default settings without direct RDMA write.
fn emulated_writes() -> Config {
    Config {
        direct_write: false,
        ..Config::default()
    }
}

#[test]
fn thresholds_decide_the_subprotocol_in_process() {
    let fabric = MemFabric::new();
    thresholds_decide(&|| {
        Endpoint::builder()
            .rdm_config(emulated_writes())
            .mem(&fabric)
            .fast_path(false)
    });
}

#[test]
fn thresholds_decide_the_subprotocol_over_udp() {
    thresholds_decide(&|| {
        Endpoint::builder()
            .rdm_config(emulated_writes())
            .udp("127.0.0.1:0".parse().unwrap())
    });
}

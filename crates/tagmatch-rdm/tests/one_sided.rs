//! One-sided subprotocols: emulated and direct write/read, atomics.
mod common;
use common::*;
use tagmatch_rdm::testing::{Fabric, Faults};
use tagmatch_rdm::{
    AtomicArgs, AtomicOp, CallError, Config, Datatype, MemHandle, OpKind, Protocol, RemoteAddr,
    SendOpts,
};
use tagmatch_wire::efa::{flags, PacketType as T};

struct Rma {
    fab: Fabric,
    a: usize,
    b: usize,
    ab: tagmatch_rdm::PeerId,
    mem: MemHandle,
    base: RemoteAddr,
}

fn rma(seed: u64, ca: Config, cb: Config, reorder: bool) -> Rma {
    let (mut fab, a, b, ab, _) = warm_pair(seed, ca, cb, reorder);
    let (mem, key) = fab.register(b, payload(8192, 0xee));
    fab.log.clear();
    Rma {
        fab,
        a,
        b,
        ab,
        mem,
        base: RemoteAddr {
            addr: key.addr + 64,
            key: key.key,
        },
    }
}

fn no_direct() -> Config {
    feats(|f| {
        f.rdma_write = false;
        f.rdma_read = false;
    })
}

fn write_case(cb: Config, len: usize, opts: SendOpts) -> (Rma, tagmatch_rdm::OpId) {
    let mut r = rma(21, small_cfg(), cb, false);
    let data = payload(len, 0x42);
    let op = r
        .fab
        .ep(r.a)
        .write(r.ab, data.clone(), r.base, opts)
        .unwrap();
    r.fab.drive();
    let ca = r.fab.completions(r.a);
    let c = done(&ca, op);
    assert_eq!((c.kind, c.result), (OpKind::Write, Ok(())));
    let mem = r.fab.ep(r.b).memory(r.mem).unwrap().to_vec();
    assert!(mem[64..64 + len] == data[..], "written bytes");
    assert!(
        mem[..64] == payload(8192, 0xee)[..64],
        "bytes before untouched"
    );
    assert_eq!(
        mem[64 + len],
        payload(8192, 0xee)[64 + len],
        "byte after untouched"
    );
    assert!(r.fab.wire_errors.is_empty(), "{:?}", r.fab.wire_errors);
    (r, op)
}

#[test]
fn emulated_eager_write() {
    let cb = feats(|f| f.rdma_write = false);
    let (r, op) = write_case(cb, 100, SendOpts::default());
    assert_eq!(r.fab.sequence(), vec![(r.a, T::EagerRtw)]);
    assert_eq!(
        r.fab.nodes[r.a].ep.protocol_of(op),
        Some(Protocol::EagerWrite)
    );
}

#[test]
fn emulated_write_with_cq_data_completes_on_the_responder() {
    for len in [100, 1500, 3000] {
        let opts = SendOpts {
            cq_data: Some(77),
            ..SendOpts::default()
        };
        // Direct write is not used with remote CQ data.
        let (mut r, _) = write_case(small_cfg(), len, opts);
        let cb = r.fab.completions(r.b);
        let rw = of_kind(&cb, OpKind::RemoteWrite);
        assert_eq!(rw.len(), 1, "{cb:?}");
        assert_eq!((rw[0].cq_data, rw[0].len), (Some(77), len as u64));
    }
}

#[test]
fn emulated_longcts_write() {
    let cb = feats(|f| f.rdma_write = false);
    let (r, op) = write_case(cb, 1500, SendOpts::default());
    // 1500 = 204 in the RTW + 4 + 2 CTSDATA of 224 (window 896) + …
    let seq = r.fab.sequence();
    assert_eq!(seq[0], (r.a, T::LongctsRtw));
    assert_eq!(seq[1], (r.b, T::Cts));
    assert!(seq[2..]
        .iter()
        .all(|x| *x == (r.a, T::CtsData) || *x == (r.b, T::Cts)));
    assert_eq!(
        r.fab.nodes[r.a].ep.protocol_of(op),
        Some(Protocol::LongCtsWrite)
    );
}

#[test]
fn emulated_longread_write() {
    let cb = feats(|f| f.rdma_write = false);
    let (r, op) = write_case(cb, 3000, SendOpts::default());
    assert_eq!(r.fab.sequence(), vec![(r.a, T::LongreadRtw), (r.b, T::Eor)]);
    assert_eq!(
        r.fab.nodes[r.a].ep.protocol_of(op),
        Some(Protocol::LongReadWrite)
    );
}

#[test]
fn longread_write_nack_falls_back_to_longcts_write() {
    let cb = feats(|f| f.rdma_write = false);
    let mut r = rma(22, small_cfg(), cb, false);
    r.fab.faults = Faults {
        rdma_read_fail_nodes: &[1],
        ..Faults::default()
    };
    let data = payload(3000, 1);
    let op = r
        .fab
        .ep(r.a)
        .write(r.ab, data.clone(), r.base, SendOpts::default())
        .unwrap();
    r.fab.drive();
    assert_eq!(done(&r.fab.completions(r.a), op).result, Ok(()));
    let seq = r.fab.sequence();
    assert_eq!(
        &seq[..4],
        &[
            (r.a, T::LongreadRtw),
            (r.b, T::ReadNack),
            (r.a, T::LongctsRtw),
            (r.b, T::Cts)
        ]
    );
    assert_ne!(r.fab.log[2].flags & flags::REQ_READ_NACK, 0);
    assert!(r.fab.ep(r.b).memory(r.mem).unwrap()[64..3064] == data[..]);
    assert_eq!(
        r.fab.nodes[r.a].ep.protocol_of(op),
        Some(Protocol::LongCtsWrite)
    );
}

#[test]
fn dc_emulated_writes() {
    let cb = feats(|f| f.rdma_write = false);
    let dc = SendOpts {
        delivery_complete: true,
        ..SendOpts::default()
    };
    let (r, _) = write_case(cb, 100, dc);
    assert_eq!(
        r.fab.sequence(),
        vec![(r.a, T::DcEagerRtw), (r.b, T::Receipt)]
    );
    let cb = feats(|f| {
        f.rdma_write = false;
        f.rdma_read = false;
    });
    let (r, _) = write_case(cb, 1500, dc);
    let seq = r.fab.sequence();
    assert_eq!(seq[0], (r.a, T::DcLongctsRtw));
    assert_eq!(*seq.last().unwrap(), (r.b, T::Receipt));
}

#[test]
fn direct_write_uses_no_packets() {
    let (r, op) = write_case(small_cfg(), 3000, SendOpts::default());
    assert_eq!(r.fab.sequence(), vec![]);
    assert_eq!(
        r.fab.nodes[r.a].ep.protocol_of(op),
        Some(Protocol::DirectWrite)
    );
}

#[test]
fn direct_write_registration_failure_falls_back_to_emulated() {
    let mut r = rma(23, small_cfg(), small_cfg(), false);
    r.fab.faults.register_fail_nodes = &[0];
    let data = payload(100, 3);
    let op = r
        .fab
        .ep(r.a)
        .write(r.ab, data.clone(), r.base, SendOpts::default())
        .unwrap();
    r.fab.drive();
    assert_eq!(done(&r.fab.completions(r.a), op).result, Ok(()));
    assert_eq!(r.fab.sequence(), vec![(r.a, T::EagerRtw)]);
    assert!(r.fab.ep(r.b).memory(r.mem).unwrap()[64..164] == data[..]);
}

fn read_case(ca: Config, cb: Config, len: usize, faults: Faults) -> (Rma, tagmatch_rdm::OpId) {
    let mut r = rma(24, ca, cb, false);
    r.fab.faults = faults;
    let op = r.fab.ep(r.a).read(r.ab, len, r.base).unwrap();
    r.fab.drive();
    let ca = r.fab.completions(r.a);
    let c = done(&ca, op);
    assert_eq!((c.kind, c.result), (OpKind::Read, Ok(())));
    assert!(
        c.data[..] == payload(8192, 0xee)[64..64 + len],
        "read bytes"
    );
    assert!(r.fab.wire_errors.is_empty(), "{:?}", r.fab.wire_errors);
    (r, op)
}

#[test]
fn emulated_short_read() {
    let (r, op) = read_case(small_cfg(), no_direct(), 100, Faults::default());
    assert_eq!(
        r.fab.sequence(),
        vec![(r.a, T::ShortRtr), (r.b, T::ReadRsp)]
    );
    assert_eq!(
        r.fab.nodes[r.a].ep.protocol_of(op),
        Some(Protocol::ShortRead)
    );
}

#[test]
fn emulated_longcts_read() {
    let (r, op) = read_case(small_cfg(), no_direct(), 2000, Faults::default());
    let seq = r.fab.sequence();
    // RTR asks for a 896-byte window: READRSP (232) + 3 CTSDATA; then CTS (READ_REQ) …
    assert_eq!(
        &seq[..5],
        &[
            (r.a, T::LongctsRtr),
            (r.b, T::ReadRsp),
            (r.b, T::CtsData),
            (r.b, T::CtsData),
            (r.b, T::CtsData)
        ]
    );
    assert_eq!(seq[5], (r.a, T::Cts));
    for rec in r.fab.log.iter().filter(|x| x.pkt_type == T::Cts) {
        assert_ne!(rec.flags & flags::CTS_READ_REQ, 0);
    }
    assert_eq!(
        r.fab.nodes[r.a].ep.protocol_of(op),
        Some(Protocol::LongCtsRead)
    );
}

#[test]
fn direct_read_uses_no_packets() {
    let (r, op) = read_case(small_cfg(), small_cfg(), 3000, Faults::default());
    assert_eq!(r.fab.sequence(), vec![]);
    assert_eq!(
        r.fab.nodes[r.a].ep.protocol_of(op),
        Some(Protocol::DirectRead)
    );
}

#[test]
fn direct_read_failure_falls_back_to_emulated_read() {
    let f = Faults {
        rdma_read_fail_nodes: &[0],
        ..Faults::default()
    };
    let (r, _) = read_case(small_cfg(), small_cfg(), 100, f);
    assert_eq!(
        r.fab.sequence(),
        vec![(r.a, T::ShortRtr), (r.b, T::ReadRsp)]
    );
}

fn le<T: Copy>(v: &[T], f: impl Fn(T) -> Vec<u8>) -> Vec<u8> {
    v.iter().flat_map(|x| f(*x)).collect()
}

#[test]
fn atomics_write_fetch_compare() {
    let mut r = rma(25, small_cfg(), small_cfg(), false);
    // Target: two u64 at base.
    let init = le(&[10u64, 20], |x| x.to_le_bytes().to_vec());
    let w = r.fab.ep(r.b).memory_mut(r.mem).unwrap();
    w[64..80].copy_from_slice(&init);
    let args = AtomicArgs {
        datatype: Datatype::U64,
        op: AtomicOp::Sum,
        operand: le(&[1u64, 2], |x| x.to_le_bytes().to_vec()),
        compare: None,
    };
    let op = r
        .fab
        .ep(r.a)
        .atomic_write(r.ab, args, r.base, SendOpts::default())
        .unwrap();
    r.fab.drive();
    assert_eq!(done(&r.fab.completions(r.a), op).kind, OpKind::AtomicWrite);
    assert_eq!(r.fab.sequence(), vec![(r.a, T::WriteRta)]);
    assert_eq!(
        r.fab.ep(r.b).memory(r.mem).unwrap()[64..80],
        le(&[11u64, 22], |x| x.to_le_bytes().to_vec())[..]
    );

    r.fab.log.clear();
    let args = AtomicArgs {
        datatype: Datatype::U64,
        op: AtomicOp::Max,
        operand: le(&[5u64, 50], |x| x.to_le_bytes().to_vec()),
        compare: None,
    };
    let op = r.fab.ep(r.a).atomic_fetch(r.ab, args, r.base).unwrap();
    r.fab.drive();
    let c = r.fab.completions(r.a);
    assert_eq!(
        done(&c, op).data,
        le(&[11u64, 22], |x| x.to_le_bytes().to_vec())
    );
    assert_eq!(
        r.fab.sequence(),
        vec![(r.a, T::FetchRta), (r.b, T::AtomRsp)]
    );
    assert_eq!(
        r.fab.ep(r.b).memory(r.mem).unwrap()[64..80],
        le(&[11u64, 50], |x| x.to_le_bytes().to_vec())[..]
    );

    r.fab.log.clear();
    let args = AtomicArgs {
        datatype: Datatype::U64,
        op: AtomicOp::Cswap,
        operand: le(&[7u64, 8], |x| x.to_le_bytes().to_vec()),
        compare: Some(le(&[11u64, 49], |x| x.to_le_bytes().to_vec())),
    };
    let op = r.fab.ep(r.a).atomic_compare(r.ab, args, r.base).unwrap();
    r.fab.drive();
    let c = r.fab.completions(r.a);
    assert_eq!(done(&c, op).kind, OpKind::AtomicCompare);
    assert_eq!(
        done(&c, op).data,
        le(&[11u64, 50], |x| x.to_le_bytes().to_vec())
    );
    assert_eq!(
        r.fab.sequence(),
        vec![(r.a, T::CompareRta), (r.b, T::AtomRsp)]
    );
    assert_eq!(
        r.fab.ep(r.b).memory(r.mem).unwrap()[64..80],
        le(&[7u64, 50], |x| x.to_le_bytes().to_vec())[..]
    );
}

#[test]
fn float_and_signed_atomics() {
    let mut r = rma(26, small_cfg(), small_cfg(), true);
    r.fab.ep(r.b).memory_mut(r.mem).unwrap()[64..72].copy_from_slice(&1.5f64.to_le_bytes());
    let args = AtomicArgs {
        datatype: Datatype::F64,
        op: AtomicOp::Prod,
        operand: 4.0f64.to_le_bytes().to_vec(),
        compare: None,
    };
    let op = r.fab.ep(r.a).atomic_fetch(r.ab, args, r.base).unwrap();
    r.fab.drive();
    assert_eq!(done(&r.fab.completions(r.a), op).data, 1.5f64.to_le_bytes());
    assert_eq!(
        r.fab.ep(r.b).memory(r.mem).unwrap()[64..72],
        6.0f64.to_le_bytes()
    );
    let args = AtomicArgs {
        datatype: Datatype::F64,
        op: AtomicOp::CswapGt,
        operand: 9.0f64.to_le_bytes().to_vec(),
        compare: Some(7.0f64.to_le_bytes().to_vec()),
    };
    r.fab.ep(r.a).atomic_compare(r.ab, args, r.base).unwrap();
    r.fab.drive();
    assert_eq!(
        r.fab.ep(r.b).memory(r.mem).unwrap()[64..72],
        9.0f64.to_le_bytes()
    );
    // Invalid combinations are refused at the call.
    let bad = AtomicArgs {
        datatype: Datatype::F32,
        op: AtomicOp::Bxor,
        operand: vec![0; 4],
        compare: None,
    };
    assert!(matches!(
        r.fab
            .ep(r.a)
            .atomic_write(r.ab, bad, r.base, SendOpts::default()),
        Err(CallError::Atomic(_))
    ));
    let too_big = AtomicArgs {
        datatype: Datatype::U8,
        op: AtomicOp::Sum,
        operand: vec![0; 300],
        compare: None,
    };
    assert_eq!(
        r.fab
            .ep(r.a)
            .atomic_write(r.ab, too_big, r.base, SendOpts::default()),
        Err(CallError::AtomicTooLarge)
    );
}

#[test]
fn dc_write_atomic_waits_for_the_receipt() {
    let mut r = rma(27, small_cfg(), small_cfg(), false);
    let dc = SendOpts {
        delivery_complete: true,
        ..SendOpts::default()
    };
    let args = AtomicArgs {
        datatype: Datatype::I32,
        op: AtomicOp::Write,
        operand: (-5i32).to_le_bytes().to_vec(),
        compare: None,
    };
    let op = r.fab.ep(r.a).atomic_write(r.ab, args, r.base, dc).unwrap();
    r.fab.drive();
    assert_eq!(done(&r.fab.completions(r.a), op).result, Ok(()));
    assert_eq!(
        r.fab.sequence(),
        vec![(r.a, T::DcWriteRta), (r.b, T::Receipt)]
    );
    assert_eq!(
        r.fab.ep(r.b).memory(r.mem).unwrap()[64..68],
        (-5i32).to_le_bytes()
    );
}

#[test]
fn atomics_apply_in_msg_id_order_under_reordering() {
    for seed in 0..16 {
        let mut r = rma(100 + seed, small_cfg(), small_cfg(), true);
        r.fab.ep(r.b).memory_mut(r.mem).unwrap()[64..72].copy_from_slice(&0u64.to_le_bytes());
        let ops = [
            (AtomicOp::Write, 5u64),
            (AtomicOp::Sum, 3),
            (AtomicOp::Prod, 2),
            (AtomicOp::Write, 1),
            (AtomicOp::Sum, 10),
            (AtomicOp::Prod, 3),
        ];
        for (op, v) in ops {
            let args = AtomicArgs {
                datatype: Datatype::U64,
                op,
                operand: v.to_le_bytes().to_vec(),
                compare: None,
            };
            r.fab
                .ep(r.a)
                .atomic_write(r.ab, args, r.base, SendOpts::default())
                .unwrap();
        }
        r.fab.drive();
        assert_eq!(
            r.fab.ep(r.b).memory(r.mem).unwrap()[64..72],
            33u64.to_le_bytes(),
            "seed {seed}"
        );
    }
}

fn u64_args(op: AtomicOp, v: u64, compare: Option<u64>) -> AtomicArgs {
    AtomicArgs {
        datatype: Datatype::U64,
        op,
        operand: v.to_le_bytes().to_vec(),
        compare: compare.map(|c| c.to_le_bytes().to_vec()),
    }
}

/// The `(type, msg_id)` of every packet with a `msg_id` that `from` sent to `to`.
fn msg_ids(fab: &Fabric, from: usize, to: usize) -> Vec<(T, u32)> {
    fab.log
        .iter()
        .filter(|r| r.from == from && r.to == to)
        .filter_map(|r| {
            let pkt = tagmatch_wire::efa::Packet::new_checked(&r.bytes[..]).ok()?;
            Some((r.pkt_type, pkt.msg_id()?))
        })
        .collect()
}

/// efa-rdm-protocol-v4 §3.2: "The field `msg_id` records the sending order of all RTM
/// packets between two endpoint"; §3.3: the RTA's `msg_id` "is used to implement ordered
/// atomic operations". Fetch and compare atomics issued while a delivery-complete send
/// waits for the peer's handshake queue behind it and take their `msg_id`s in call order,
/// so the target applies them in the application's order.
#[test]
fn fetch_and_compare_atomics_queue_behind_a_send_waiting_for_the_handshake() {
    for seed in 0..8 {
        let (mut fab, a, b, ab, ba) = pair(300 + seed, small_cfg(), small_cfg(), seed > 0);
        fab.record_bytes = true;
        let (mem, key) = fab.register(b, 10u64.to_le_bytes().to_vec());
        let base = RemoteAddr {
            addr: key.addr,
            key: key.key,
        };
        let r1 = fab.ep(b).trecv(Some(ba), 0x77, 0, 16).unwrap();
        let r2 = fab.ep(b).trecv(Some(ba), 0x78, 0, 16).unwrap();
        fab.log.clear();
        let dc = SendOpts {
            delivery_complete: true,
            ..SendOpts::default()
        };
        let first = fab.ep(a).next_msg_id(ab).unwrap();
        let s1 = fab.ep(a).tsend(ab, 0x77, vec![1; 8], dc).unwrap();
        let f = fab
            .ep(a)
            .atomic_fetch(ab, u64_args(AtomicOp::Sum, 5, None), base)
            .unwrap();
        let s2 = fab
            .ep(a)
            .tsend(ab, 0x78, vec![2; 8], SendOpts::default())
            .unwrap();
        let c = fab
            .ep(a)
            .atomic_compare(ab, u64_args(AtomicOp::Cswap, 100, Some(15)), base)
            .unwrap();
        fab.drive();
        assert!(fab.wire_errors.is_empty(), "{:?}", fab.wire_errors);
        // Wire order and msg_ids: the application's call order.
        let ids = |i: u32| first.wrapping_add(i);
        assert_eq!(
            msg_ids(&fab, a, b),
            vec![
                (T::DcEagerTagRtm, ids(0)),
                (T::FetchRta, ids(1)),
                (T::EagerTagRtm, ids(2)),
                (T::CompareRta, ids(3)),
            ],
            "seed {seed}"
        );
        // The target delivered the send (RECEIPT) before applying the atomics (ATOMRSP).
        let answers: Vec<T> = fab
            .types(b, a)
            .into_iter()
            .filter(|t| matches!(t, T::Receipt | T::AtomRsp))
            .collect();
        assert_eq!(
            answers,
            vec![T::Receipt, T::AtomRsp, T::AtomRsp],
            "seed {seed}"
        );
        let ca = fab.completions(a);
        for op in [s1, f, s2, c] {
            assert_eq!(done(&ca, op).result, Ok(()), "seed {seed}");
        }
        // Fetch (10 + 5) before compare (15 == 15: swap to 100).
        assert_eq!(done(&ca, f).data, 10u64.to_le_bytes(), "seed {seed}");
        assert_eq!(done(&ca, c).data, 15u64.to_le_bytes(), "seed {seed}");
        assert_eq!(
            fab.ep(b).memory(mem).unwrap()[..8],
            100u64.to_le_bytes(),
            "seed {seed}"
        );
        let cb = fab.completions(b);
        assert_eq!(done(&cb, r1).data[..8], [1; 8], "seed {seed}");
        assert_eq!(done(&cb, r2).data[..8], [2; 8], "seed {seed}");
        assert_eq!(fab.ep(a).in_flight(), (0, 0, 0), "seed {seed}");
    }
}

/// A fetch/compare atomic waiting behind a send for the handshake of a peer that cannot be
/// reached completes with `SendFailed` when the handshake trigger fails, like the send.
#[test]
fn atomics_waiting_for_an_unreachable_peer_fail_with_send_failed() {
    let mut fab = Fabric::new(31);
    let a = fab.add(small_cfg());
    let ghost = fab.ep(a).add_peer(tagmatch_wire::efa::RawAddr {
        gid: [0x55; 16],
        qpn: 999,
        qkey: 7,
        next: 0,
    });
    let base = RemoteAddr {
        addr: 0x1000,
        key: 3,
    };
    let dc = SendOpts {
        delivery_complete: true,
        ..SendOpts::default()
    };
    let s = fab.ep(a).tsend(ghost, 1, vec![1; 8], dc).unwrap();
    let f = fab
        .ep(a)
        .atomic_fetch(ghost, u64_args(AtomicOp::Sum, 1, None), base)
        .unwrap();
    let c = fab
        .ep(a)
        .atomic_compare(ghost, u64_args(AtomicOp::Cswap, 2, Some(0)), base)
        .unwrap();
    // Only the handshake trigger goes to the device: the atomics wait behind the send.
    assert_eq!(fab.ep(a).stats().tx_packets, 1);
    fab.drive();
    let cs = fab.completions(a);
    let got: Vec<_> = cs.iter().map(|x| (x.op, x.kind, x.result)).collect();
    let failed = Err(tagmatch_rdm::OpError::SendFailed);
    assert_eq!(
        got,
        vec![
            (s, OpKind::Send, failed),
            (f, OpKind::AtomicFetch, failed),
            (c, OpKind::AtomicCompare, failed),
        ]
    );
    assert_eq!(fab.ep(a).stats().tx_packets, 1);
    assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
    assert_eq!(fab.ep(a).resources(), (0, 0, 0));
    // Nothing waits any more: a later atomic goes out at once and fails the same way.
    let f2 = fab
        .ep(a)
        .atomic_fetch(ghost, u64_args(AtomicOp::Sum, 1, None), base)
        .unwrap();
    fab.drive();
    let cs = fab.completions(a);
    assert_eq!(cs.len(), 1);
    assert_eq!((cs[0].op, cs[0].result), (f2, failed));
    assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
    assert_eq!(fab.ep(a).resources(), (0, 0, 0));
}

/// Operations that queued for the handshake of an unreachable peer without a trigger of
/// their own (an earlier REQ to it was expected to bring the handshake) do not wait for
/// ever when that REQ fails: the handshake is triggered then, and they fail with it.
#[test]
fn operations_waiting_on_a_failed_req_fail_with_send_failed() {
    let mut fab = Fabric::new(32);
    let a = fab.add(small_cfg());
    let ghost = fab.ep(a).add_peer(tagmatch_wire::efa::RawAddr {
        gid: [0x56; 16],
        qpn: 998,
        qkey: 8,
        next: 0,
    });
    let dc = SendOpts {
        delivery_complete: true,
        ..SendOpts::default()
    };
    let s0 = fab
        .ep(a)
        .tsend(ghost, 1, vec![1; 8], SendOpts::default())
        .unwrap();
    let s1 = fab.ep(a).tsend(ghost, 2, vec![2; 8], dc).unwrap();
    let f = fab
        .ep(a)
        .atomic_fetch(
            ghost,
            u64_args(AtomicOp::Sum, 1, None),
            RemoteAddr {
                addr: 0x1000,
                key: 3,
            },
        )
        .unwrap();
    // The eager RTM stands for the handshake request: no trigger yet.
    assert_eq!(fab.ep(a).stats().tx_packets, 1);
    fab.drive();
    let got: Vec<_> = fab
        .completions(a)
        .iter()
        .map(|x| (x.op, x.kind, x.result))
        .collect();
    let failed = Err(tagmatch_rdm::OpError::SendFailed);
    assert_eq!(
        got,
        vec![
            (s0, OpKind::Send, failed),
            (s1, OpKind::Send, failed),
            (f, OpKind::AtomicFetch, failed),
        ]
    );
    // The eager RTM, then the trigger sent when it failed.
    assert_eq!(fab.ep(a).stats().tx_packets, 2);
    assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
    assert_eq!(fab.ep(a).resources(), (0, 0, 0));
}

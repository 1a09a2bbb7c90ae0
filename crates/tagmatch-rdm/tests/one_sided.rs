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

//! Decode and emit cost of the hot packets, next to a baseline that does only the unaligned
//! loads of the same fields at hard-coded offsets (what a hand-written C parser does).
//!
//! Run: `cargo bench -p tagmatch-wire --bench wire`. Figures go in docs/benchmarks.md.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use tagmatch_wire::efa::{Field, Packet, PacketType, RawAddr, RawAddrHdr, Repr};
use tagmatch_wire::tm::{Rvh, TmOpcode, TmPacket, TmRepr, Tmh};

fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn le64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}
fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes(b[o..o + 4].try_into().unwrap())
}
fn be64(b: &[u8], o: usize) -> u64 {
    u64::from_be_bytes(b[o..o + 8].try_into().unwrap())
}

fn emit(r: &Repr) -> Vec<u8> {
    let mut v = vec![0u8; r.buffer_len()];
    r.emit(&mut v).unwrap();
    v
}

fn bench(c: &mut Criterion) {
    let payload = [0xABu8; 64];
    let eager = Repr {
        payload: &payload,
        connid: Some(0xA1B2C3D4),
        ..Repr::new(PacketType::EagerTagRtm)
            .with(Field::MsgId, 7)
            .with(Field::Tag, 0x1122334455667788)
    };
    let medium = Repr {
        payload: &payload,
        raw_addr: Some(RawAddrHdr::new(RawAddr {
            gid: [0xfe; 16],
            qpn: 16,
            qkey: 0xA1B2C3D4,
            next: 0,
        })),
        cq_data: Some(0xCAFEBABE12345678),
        ..Repr::new(PacketType::MediumTagRtm)
            .with(Field::MsgId, 3)
            .with(Field::MsgLength, 0x10000)
            .with(Field::SegOffset, 0x2000)
            .with(Field::Tag, 0x1122334455667788)
    };
    let mut hs = Repr::new(PacketType::Handshake);
    hs.connid = Some(0xA1B2C3D4);
    hs.handshake.extra_info.set_word(0, 0x25b);
    hs.handshake.host_id = Some(0x0123456789abcdef);
    hs.handshake.device_version = Some(0xEFA1);
    hs.handshake.hmem_p2p = Some(1);
    let rndv = TmRepr {
        tmh: Tmh {
            opcode: TmOpcode::Rndv,
            reserved: [0; 3],
            app_ctx: 1,
            tag: 0xDEADBEEF00000001,
        },
        rvh: Some(Rvh {
            va: 0x7f0012345678,
            rkey: 0x1234,
            len: 65536,
        }),
        payload: &[],
    };

    let eager_b = emit(&eager);
    let medium_b = emit(&medium);
    let hs_b = emit(&hs);
    let mut rndv_b = vec![0u8; rndv.buffer_len()];
    rndv.emit(&mut rndv_b).unwrap();

    let mut g = c.benchmark_group("decode");
    // Fixed-header decode through the checked view: check every header, read the fields a
    // receive path needs.
    g.bench_function("EAGER_TAGRTM/view", |b| {
        b.iter(|| {
            let p = Packet::new_checked(black_box(&eager_b[..])).unwrap();
            black_box((p.msg_id(), p.tag(), p.connid(), p.payload().len()))
        })
    });
    // The same through `new_checked_as`: the type known in advance, as on a receive path
    // that dispatched on the type byte.
    g.bench_function("EAGER_TAGRTM/view_as", |b| {
        b.iter(|| {
            let p =
                Packet::new_checked_as(black_box(&eager_b[..]), PacketType::EagerTagRtm).unwrap();
            black_box((p.msg_id(), p.tag(), p.connid(), p.payload().len()))
        })
    });
    g.bench_function("EAGER_TAGRTM/baseline", |b| {
        b.iter(|| {
            let d = black_box(&eager_b[..]);
            black_box((d[0], le32(d, 4), le64(d, 8), le32(d, 16), d.len() - 20))
        })
    });
    g.bench_function("EAGER_TAGRTM/repr", |b| {
        b.iter(|| black_box(Repr::parse_bytes(black_box(&eager_b[..])).unwrap()))
    });
    g.bench_function("MEDIUM_TAGRTM+raw+cq/view", |b| {
        b.iter(|| {
            let p = Packet::new_checked(black_box(&medium_b[..])).unwrap();
            black_box((
                p.msg_id(),
                p.get(Field::MsgLength),
                p.get(Field::SegOffset),
                p.tag(),
                p.sender_connid(),
                p.cq_data(),
                p.payload().len(),
            ))
        })
    });
    g.bench_function("MEDIUM_TAGRTM+raw+cq/view_as", |b| {
        b.iter(|| {
            let p =
                Packet::new_checked_as(black_box(&medium_b[..]), PacketType::MediumTagRtm).unwrap();
            black_box((
                p.msg_id(),
                p.get(Field::MsgLength),
                p.get(Field::SegOffset),
                p.tag(),
                p.sender_connid(),
                p.cq_data(),
                p.payload().len(),
            ))
        })
    });
    g.bench_function("MEDIUM_TAGRTM+raw+cq/baseline", |b| {
        b.iter(|| {
            let d = black_box(&medium_b[..]);
            let alen = le32(d, 32) as usize;
            black_box((
                d[0],
                le32(d, 4),
                le64(d, 8),
                le64(d, 16),
                le64(d, 24),
                le32(d, 36 + 20),
                le64(d, 36 + alen),
                d.len() - (44 + alen),
            ))
        })
    });
    g.bench_function("MEDIUM_TAGRTM+raw+cq/repr", |b| {
        b.iter(|| black_box(Repr::parse_bytes(black_box(&medium_b[..])).unwrap()))
    });
    g.bench_function("HANDSHAKE/view", |b| {
        b.iter(|| {
            let p = Packet::new_checked(black_box(&hs_b[..])).unwrap();
            black_box((
                p.extra_info(),
                p.connid(),
                p.host_id(),
                p.device_version(),
                p.hmem_p2p(),
            ))
        })
    });
    g.bench_function("HANDSHAKE/baseline", |b| {
        b.iter(|| {
            let d = black_box(&hs_b[..]);
            black_box((
                le32(d, 4),
                le64(d, 8),
                le32(d, 16),
                le64(d, 24),
                le32(d, 32),
                d[40],
            ))
        })
    });
    g.bench_function("HANDSHAKE/repr", |b| {
        b.iter(|| black_box(Repr::parse_bytes(black_box(&hs_b[..])).unwrap()))
    });
    g.bench_function("TMH+RVH/view", |b| {
        b.iter(|| {
            let p = TmPacket::new_checked(black_box(&rndv_b[..])).unwrap();
            black_box((p.opcode(), p.app_ctx(), p.tag(), p.rvh()))
        })
    });
    g.bench_function("TMH+RVH/baseline", |b| {
        b.iter(|| {
            let d = black_box(&rndv_b[..]);
            black_box((
                d[0],
                be32(d, 4),
                be64(d, 8),
                be64(d, 16),
                be32(d, 24),
                be32(d, 28),
            ))
        })
    });
    g.bench_function("TMH+RVH/repr", |b| {
        b.iter(|| black_box(TmRepr::parse_bytes(black_box(&rndv_b[..])).unwrap()))
    });
    g.finish();

    // 256 headers per iteration, as verbs-notes §5 measured hand-written views: amortises
    // the harness's per-iteration cost, which is of the same order as one decode.
    let batch: Vec<Vec<u8>> = (0..256u32)
        .map(|i| {
            let r = Repr {
                payload: &payload[..(i as usize % 64)],
                connid: Some(0xA1B2C3D4 ^ i),
                ..Repr::new(PacketType::EagerTagRtm)
                    .with(Field::MsgId, i as u64)
                    .with(Field::Tag, 0x1122334455667788 ^ i as u64)
            };
            emit(&r)
        })
        .collect();
    let mut g = c.benchmark_group("decode_x256");
    g.throughput(criterion::Throughput::Elements(batch.len() as u64));
    g.bench_function("EAGER_TAGRTM/view", |b| {
        b.iter(|| {
            let mut acc = 0u64;
            for d in black_box(&batch) {
                let p = Packet::new_checked(&d[..]).unwrap();
                acc = acc
                    .wrapping_add(p.msg_id().unwrap_or(0) as u64)
                    .wrapping_add(p.tag().unwrap_or(0))
                    .wrapping_add(p.connid().unwrap_or(0) as u64)
                    .wrapping_add(p.payload().len() as u64);
            }
            acc
        })
    });
    g.bench_function("EAGER_TAGRTM/view_as", |b| {
        b.iter(|| {
            let mut acc = 0u64;
            for d in black_box(&batch) {
                let p = Packet::new_checked_as(&d[..], PacketType::EagerTagRtm).unwrap();
                acc = acc
                    .wrapping_add(p.msg_id().unwrap_or(0) as u64)
                    .wrapping_add(p.tag().unwrap_or(0))
                    .wrapping_add(p.connid().unwrap_or(0) as u64)
                    .wrapping_add(p.payload().len() as u64);
            }
            acc
        })
    });
    g.bench_function("EAGER_TAGRTM/baseline", |b| {
        b.iter(|| {
            let mut acc = 0u64;
            for d in black_box(&batch) {
                acc = acc
                    .wrapping_add(d[0] as u64)
                    .wrapping_add(le32(d, 4) as u64)
                    .wrapping_add(le64(d, 8))
                    .wrapping_add(le32(d, 16) as u64)
                    .wrapping_add((d.len() - 20) as u64);
            }
            acc
        })
    });
    let tm_batch: Vec<Vec<u8>> = (0..256u64)
        .map(|i| {
            let r = TmRepr {
                tmh: Tmh {
                    tag: 0xDEADBEEF00000001 ^ i,
                    ..rndv.tmh
                },
                ..rndv
            };
            let mut v = vec![0u8; r.buffer_len()];
            r.emit(&mut v).unwrap();
            v
        })
        .collect();
    g.bench_function("TMH+RVH/view", |b| {
        b.iter(|| {
            let mut acc = 0u64;
            for d in black_box(&tm_batch) {
                let p = TmPacket::new_checked(&d[..]).unwrap();
                let rvh = p.rvh().unwrap_or_default();
                acc = acc
                    .wrapping_add(p.opcode() as u64)
                    .wrapping_add(p.app_ctx() as u64)
                    .wrapping_add(p.tag())
                    .wrapping_add(rvh.va)
                    .wrapping_add(rvh.rkey as u64)
                    .wrapping_add(rvh.len as u64);
            }
            acc
        })
    });
    g.bench_function("TMH+RVH/baseline", |b| {
        b.iter(|| {
            let mut acc = 0u64;
            for d in black_box(&tm_batch) {
                acc = acc
                    .wrapping_add(d[0] as u64)
                    .wrapping_add(be32(d, 4) as u64)
                    .wrapping_add(be64(d, 8))
                    .wrapping_add(be64(d, 16))
                    .wrapping_add(be32(d, 24) as u64)
                    .wrapping_add(be32(d, 28) as u64);
            }
            acc
        })
    });
    g.finish();

    let mut g = c.benchmark_group("emit");
    let mut buf = vec![0u8; 256];
    g.bench_function("EAGER_TAGRTM", |b| {
        b.iter(|| black_box(black_box(&eager).emit(&mut buf).unwrap()))
    });
    g.bench_function("MEDIUM_TAGRTM+raw+cq", |b| {
        b.iter(|| black_box(black_box(&medium).emit(&mut buf).unwrap()))
    });
    g.bench_function("HANDSHAKE", |b| {
        b.iter(|| black_box(black_box(&hs).emit(&mut buf).unwrap()))
    });
    g.bench_function("TMH+RVH", |b| {
        b.iter(|| black_box(black_box(&rndv).emit(&mut buf).unwrap()))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);

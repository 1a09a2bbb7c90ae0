//! quickcheck round trips: every packet type with every combination of optional headers
//! emits, parses back to the same representation, and re-emits the same bytes; arbitrary
//! bytes never panic, and whatever parses re-emits to something that parses the same.

use quickcheck::{QuickCheck, TestResult};
use tagmatch_wire::efa::{
    ConnidPlace, Packet, PacketType, RawAddr, RawAddrHdr, Repr, RmaIov, UserRecvQp, Width,
};
use tagmatch_wire::tm::{Rvh, TmOpcode, TmPacket, TmRepr, Tmh};

/// Random material a representation is cut from.
#[derive(Clone, Debug)]
struct Material {
    values: Vec<u64>,
    iovs: Vec<(u64, u64, u64)>,
    payload: Vec<u8>,
    flags: u16,
    gid: [u8; 16],
    addr_len_extra: u8,
}

impl quickcheck::Arbitrary for Material {
    fn arbitrary(g: &mut quickcheck::Gen) -> Self {
        let mut values: Vec<u64> = (0..32).map(|_| u64::arbitrary(g)).collect();
        // Mix in boundary values.
        for v in values.iter_mut().step_by(5) {
            *v = *g.choose(&[0, 1, u32::MAX as u64, u64::MAX]).unwrap_or(&0);
        }
        let n_iov = usize::arbitrary(g) % 4;
        let mut gid = [0u8; 16];
        for b in gid.iter_mut() {
            *b = u8::arbitrary(g);
        }
        Material {
            values,
            iovs: (0..n_iov)
                .map(|_| (u64::arbitrary(g), u64::arbitrary(g), u64::arbitrary(g)))
                .collect(),
            payload: Vec::<u8>::arbitrary(g),
            flags: u16::arbitrary(g),
            gid,
            addr_len_extra: u8::arbitrary(g) % 33,
        }
    }
}

/// The option combinations a type can carry: bit 0 connid, 1 raw address, 2 CQ data,
/// 3..8 the HANDSHAKE optional headers.
fn option_sets(t: PacketType) -> Vec<u32> {
    match t.layout().connid {
        // raw address and connid are mutually exclusive
        ConnidPlace::ReqOptional => (0..8u32).filter(|o| o & 3 != 3).collect(),
        ConnidPlace::Handshake => (0..32u32).map(|o| (o & 1) | ((o >> 1) << 3)).collect(),
        _ => vec![0, 1],
    }
}

fn build<'a>(t: PacketType, opts: u32, m: &'a Material, iovs: &'a [RmaIov]) -> Repr<'a> {
    let layout = t.layout();
    let mut r = Repr::new(t);
    r.flags = m.flags & !t.derived_flags();
    for (i, at) in layout.fields.iter().enumerate() {
        if !at.field.is_derived() {
            let v = m.values[i];
            r.fields.set(
                at.field,
                match at.width {
                    Width::U32 => v & 0xFFFF_FFFF,
                    Width::U64 => v,
                },
            );
        }
    }
    if layout.rma_iov {
        r.rma_iov = iovs;
    }
    if opts & 1 != 0 {
        r.connid = Some(m.values[20] as u32);
    }
    if opts & 2 != 0 {
        r.raw_addr = Some(RawAddrHdr {
            addr_len: 32 + m.addr_len_extra as u32,
            addr: RawAddr {
                gid: m.gid,
                qpn: m.values[21] as u16,
                qkey: m.values[22] as u32,
                next: m.values[23],
            },
        });
    }
    if opts & 4 != 0 {
        r.cq_data = Some(m.values[24]);
    }
    if t == PacketType::Handshake {
        let words = (m.values[25] % 5) as usize;
        let h = &mut r.handshake;
        h.extra_info = tagmatch_wire::efa::ExtraInfo::with_words(words);
        for w in 0..words {
            h.extra_info.set_word(w, m.values[26 + w]);
        }
        if opts & 8 != 0 {
            h.host_id = Some(m.values[30]);
        }
        if opts & 16 != 0 {
            h.device_version = Some(m.values[31] as u32);
        }
        if opts & 32 != 0 {
            h.user_recv_qp = Some(UserRecvQp {
                qpn: m.values[2] as u32,
                qkey: m.values[3] as u32,
            });
        }
        if opts & 64 != 0 {
            h.hmem_p2p = Some(m.values[4] as u8);
        }
    }
    r.payload = &m.payload;
    r
}

fn every_type_every_option(m: Material) -> TestResult {
    let iovs: Vec<RmaIov> = m
        .iovs
        .iter()
        .map(|&(a, l, k)| RmaIov::new(a, l, k))
        .collect();
    for &t in PacketType::ALL {
        for opts in option_sets(t) {
            let r = build(t, opts, &m, &iovs);
            let mut buf = vec![0u8; r.buffer_len()];
            let n = match r.emit(&mut buf) {
                Ok(n) => n,
                Err(e) => return TestResult::error(format!("{t} opts {opts:#x}: emit: {e}")),
            };
            if n != buf.len() {
                return TestResult::error(format!("{t}: emitted {n}, buffer_len {}", buf.len()));
            }
            let pkt = match Packet::new_checked(&buf[..]) {
                Ok(p) => p,
                Err(e) => return TestResult::error(format!("{t} opts {opts:#x}: parse: {e}")),
            };
            if pkt.header_len() != r.header_len() {
                return TestResult::error(format!("{t}: header_len differs"));
            }
            if pkt.flags() != r.wire_flags() {
                return TestResult::error(format!("{t}: wire flags differ"));
            }
            let back = Repr::parse(&pkt);
            if back != r {
                return TestResult::error(format!("{t} opts {opts:#x}:\n{r:?}\n!=\n{back:?}"));
            }
            // Every field reads back through the view as well.
            for at in t.layout().fields {
                if pkt.get(at.field) != r.get(at.field) {
                    return TestResult::error(format!("{t}: {} differs", at.field.name()));
                }
            }
            let mut again = vec![0u8; buf.len()];
            if back.emit(&mut again).is_err() || again != buf {
                return TestResult::error(format!("{t}: re-emit differs"));
            }
        }
    }
    TestResult::passed()
}

#[test]
fn every_type_every_option_round_trips() {
    QuickCheck::new()
        .tests(200)
        .quickcheck(every_type_every_option as fn(Material) -> TestResult);
}

/// Arbitrary bytes, with a chance of a valid base header so that deeper paths are reached.
fn arbitrary_bytes_never_panic(ty: u8, flags: u16, mut body: Vec<u8>) -> TestResult {
    let ids: Vec<u8> = PacketType::ALL.iter().map(|t| t.id()).collect();
    let ty = if ty % 4 == 0 {
        ty
    } else {
        ids[ty as usize % ids.len()]
    };
    let mut bytes = vec![ty, 4];
    bytes.extend_from_slice(&flags.to_le_bytes());
    bytes.append(&mut body);
    for cut in 0..=bytes.len() {
        let b = &bytes[..cut];
        if let Ok(pkt) = Packet::new_checked(b) {
            let _ = (
                pkt.read_iov(),
                pkt.data(),
                pkt.compare_operands(),
                pkt.sender_connid(),
            );
            let r = Repr::parse(&pkt);
            let mut out = vec![0u8; r.buffer_len()];
            if let Err(e) = r.emit(&mut out) {
                return TestResult::error(format!("parsed but cannot emit: {e}"));
            }
            match Repr::parse_bytes(&out) {
                Ok(r2) if r2 == r => {}
                other => return TestResult::error(format!("differential: {other:?} != {r:?}")),
            }
        }
    }
    TestResult::passed()
}

#[test]
fn arbitrary_bytes_parse_or_error_never_panic() {
    QuickCheck::new()
        .tests(500)
        .quickcheck(arbitrary_bytes_never_panic as fn(u8, u16, Vec<u8>) -> TestResult);
}

fn tm_round_trip(
    op: u8,
    reserved: (u8, u8, u8),
    app_ctx: u32,
    tag: u64,
    rvh: (u64, u32, u32),
    payload: Vec<u8>,
) -> TestResult {
    let opcode = [
        TmOpcode::NoTag,
        TmOpcode::Rndv,
        TmOpcode::Fin,
        TmOpcode::Eager,
    ][op as usize % 4];
    let r = TmRepr {
        tmh: Tmh {
            opcode,
            reserved: [reserved.0, reserved.1, reserved.2],
            app_ctx,
            tag,
        },
        rvh: opcode.has_rvh().then_some(Rvh {
            va: rvh.0,
            rkey: rvh.1,
            len: rvh.2,
        }),
        payload: &payload,
    };
    let mut buf = vec![0u8; r.buffer_len()];
    if r.emit(&mut buf) != Ok(buf.len()) {
        return TestResult::failed();
    }
    let p = match TmPacket::new_checked(&buf[..]) {
        Ok(p) => p,
        Err(_) => return TestResult::failed(),
    };
    TestResult::from_bool(TmRepr::parse(&p) == r)
}

#[test]
fn tm_messages_round_trip() {
    QuickCheck::new().tests(500).quickcheck(
        tm_round_trip as fn(u8, (u8, u8, u8), u32, u64, (u64, u32, u32), Vec<u8>) -> TestResult,
    );
}

#[test]
fn option_sets_cover_every_combination() {
    // REQ: the 6 combinations of raw address, CQ data and connid without raw+connid;
    // HANDSHAKE: all 32 subsets of connid, HOST_ID, DEVICE_VERSION, USER_RECV_QP, HMEM_P2P;
    // the others: connid or not.
    let distinct = |t| {
        let mut v = option_sets(t);
        v.sort();
        v.dedup();
        v.len()
    };
    assert_eq!(distinct(PacketType::EagerTagRtm), 6);
    assert_eq!(distinct(PacketType::Handshake), 32);
    assert_eq!(distinct(PacketType::Cts), 2);
}

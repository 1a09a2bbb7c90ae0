//! A fixed loop over one operation, for deterministic instruction counts with callgrind
//! (this machine has no hardware counters, and wall-clock time is shared with other work):
//!
//! ```text
//! cargo build --release -p tagmatch-wire --example wire_loop
//! for n in 100000 200000; do
//!   valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \
//!     target/release/examples/wire_loop view $n 2>&1 | grep Collected
//! done
//! ```
//!
//! (difference of the two totals) / 100000 = instructions per operation; for `view256` and
//! `baseline256` (one batch of 256 headers per iteration) use 1000 and 2000 iterations and
//! divide by 256000. Operations:
//! `view` (checked view + msg_id, tag, connid, payload length of an EAGER_TAGRTM with a
//! connid header and 64 bytes of payload), `baseline` (the same loads at fixed offsets, no
//! checks), `medium` and `medium_baseline` (the same for the bench's MEDIUM_TAGRTM with a raw
//! address and CQ data), `repr` (`Repr::parse_bytes`), `emit` (`Repr::emit`), `view256` and `baseline256`
//! (the loops of the bench's `decode_x256/EAGER_TAGRTM`, 256 different headers, the view
//! inlined into the loop as there), `checked_by_hand256` (for comparison: the same loop
//! with a hand-written decoder that checks what the view checks for EAGER_TAGRTM, at
//! hard-coded offsets).

use std::hint::black_box;
use std::process::ExitCode;

use tagmatch_wire::efa::{Field, Packet, PacketType, RawAddr, RawAddrHdr, Repr};

/// What the receive path reads: msg_id, tag, connid, payload length.
type Fields = (Option<u32>, Option<u64>, Option<u32>, usize);

#[inline(never)]
fn view(d: &[u8]) -> Option<Fields> {
    let p = Packet::new_checked(d).ok()?;
    Some((p.msg_id(), p.tag(), p.connid(), p.payload().len()))
}

/// `view` through `Packet::new_checked_as` (the type known, as after a dispatch).
#[inline(never)]
fn view_as(d: &[u8]) -> Option<Fields> {
    let p = Packet::new_checked_as(d, PacketType::EagerTagRtm).ok()?;
    Some((p.msg_id(), p.tag(), p.connid(), p.payload().len()))
}

#[inline(never)]
fn baseline(d: &[u8]) -> Option<(u8, u32, u64, u32, usize)> {
    let le32 = |o: usize| Some(u32::from_le_bytes(d.get(o..o + 4)?.try_into().ok()?));
    let le64 = |o: usize| Some(u64::from_le_bytes(d.get(o..o + 8)?.try_into().ok()?));
    Some((
        *d.first()?,
        le32(4)?,
        le64(8)?,
        le32(16)?,
        d.len().checked_sub(20)?,
    ))
}

/// What the bench's `decode/MEDIUM_TAGRTM+raw+cq/view` reads.
type MediumFields = (
    Option<u32>,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    Option<u32>,
    Option<u64>,
    usize,
);

/// What `medium_baseline` loads: type, msg_id, msg_length, seg_offset, tag, qkey, CQ data,
/// payload length.
type MediumLoads = (u8, u32, u64, u64, u64, u32, u64, usize);

#[inline(never)]
fn medium(d: &[u8]) -> Option<MediumFields> {
    Packet::new_checked(d).ok().map(|p| medium_fields(&p))
}

/// `medium` through `Packet::new_checked_as`.
#[inline(never)]
fn medium_as(d: &[u8]) -> Option<MediumFields> {
    Packet::new_checked_as(d, PacketType::MediumTagRtm)
        .ok()
        .map(|p| medium_fields(&p))
}

/// The fields a medium-message receive path reads (inlined into both measured paths).
#[inline(always)]
fn medium_fields(p: &Packet<&[u8]>) -> MediumFields {
    (
        p.msg_id(),
        p.get(Field::MsgLength),
        p.get(Field::SegOffset),
        p.tag(),
        p.sender_connid(),
        p.cq_data(),
        p.payload().len(),
    )
}

#[inline(never)]
fn medium_baseline(d: &[u8]) -> Option<MediumLoads> {
    let le32 = |o: usize| Some(u32::from_le_bytes(d.get(o..o + 4)?.try_into().ok()?));
    let le64 = |o: usize| Some(u64::from_le_bytes(d.get(o..o + 8)?.try_into().ok()?));
    let alen = le32(32)? as usize;
    Some((
        *d.first()?,
        le32(4)?,
        le64(8)?,
        le64(16)?,
        le64(24)?,
        le32(36 + 20)?,
        le64(36 + alen)?,
        d.len().checked_sub(44 + alen)?,
    ))
}

/// The loop body of the bench's `decode_x256/EAGER_TAGRTM/view`: 256 different headers,
/// the checked view inlined into the loop as in the bench.
#[inline(never)]
fn view256(batch: &[Vec<u8>]) -> u64 {
    let mut acc = 0u64;
    for d in batch {
        let Ok(p) = Packet::new_checked(&d[..]) else {
            return 0;
        };
        acc = acc
            .wrapping_add(p.msg_id().unwrap_or(0) as u64)
            .wrapping_add(p.tag().unwrap_or(0))
            .wrapping_add(p.connid().unwrap_or(0) as u64)
            .wrapping_add(p.payload().len() as u64);
    }
    acc
}

/// `view256` through `Packet::new_checked_as`.
#[inline(never)]
fn view_as256(batch: &[Vec<u8>]) -> u64 {
    let mut acc = 0u64;
    for d in batch {
        let Ok(p) = Packet::new_checked_as(&d[..], PacketType::EagerTagRtm) else {
            return 0;
        };
        acc = acc
            .wrapping_add(p.msg_id().unwrap_or(0) as u64)
            .wrapping_add(p.tag().unwrap_or(0))
            .wrapping_add(p.connid().unwrap_or(0) as u64)
            .wrapping_add(p.payload().len() as u64);
    }
    acc
}

/// The loop body of the bench's `decode_x256/EAGER_TAGRTM/baseline`.
#[inline(never)]
fn baseline256(batch: &[Vec<u8>]) -> u64 {
    let le32 = |d: &[u8], o: usize| u32::from_le_bytes(d[o..o + 4].try_into().unwrap());
    let le64 = |d: &[u8], o: usize| u64::from_le_bytes(d[o..o + 8].try_into().unwrap());
    let mut acc = 0u64;
    for d in batch {
        acc = acc
            .wrapping_add(d[0] as u64)
            .wrapping_add(le32(d, 4) as u64)
            .wrapping_add(le64(d, 8))
            .wrapping_add(le32(d, 16) as u64)
            .wrapping_add((d.len() - 20) as u64);
    }
    acc
}

/// Runs `f` `n` times; false as soon as it fails.
fn repeat(n: u64, mut f: impl FnMut() -> bool) -> bool {
    (0..n).all(|_| f())
}

/// For comparison only (not in the bench): a hand-written decoder that knows the one type
/// it accepts and checks what the view checks for it — length, version ≥ 4, type, no raw
/// address or CQ data, the connid flag — with the EAGER_TAGRTM offsets hard-coded.
#[inline(never)]
fn checked_by_hand256(batch: &[Vec<u8>]) -> u64 {
    let mut acc = 0u64;
    for d in batch {
        let Some(h) = d.first_chunk::<16>() else {
            return 0;
        };
        let fl = u16::from_le_bytes([h[2], h[3]]);
        if h[1] < 4 || h[0] != 65 || fl & 3 != 0 {
            return 0;
        }
        let (connid, end) = if fl & 0x8000 != 0 {
            match d.get(16..20) {
                Some(c) => (u32::from_le_bytes([c[0], c[1], c[2], c[3]]), 20),
                None => return 0,
            }
        } else {
            (0, 16)
        };
        let msg_id = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        let tag = u64::from_le_bytes([h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]]);
        acc = acc
            .wrapping_add(msg_id as u64)
            .wrapping_add(tag)
            .wrapping_add(connid as u64)
            .wrapping_add((d.len() - end) as u64);
    }
    acc
}

#[inline(never)]
fn repr(d: &[u8]) -> Option<Repr<'_>> {
    Repr::parse_bytes(d).ok()
}

#[inline(never)]
fn emit(r: &Repr<'_>, out: &mut [u8]) -> Option<usize> {
    r.emit(out).ok()
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(op), Some(n)) = (args.next(), args.next().and_then(|n| n.parse::<u64>().ok())) else {
        eprintln!("usage: wire_loop view|baseline|medium|medium_baseline|view256|baseline256|checked_by_hand256|repr|emit <iterations>");
        return ExitCode::from(2);
    };
    let payload = [0xABu8; 64];
    let eager = Repr {
        payload: &payload,
        connid: Some(0xA1B2_C3D4),
        ..Repr::new(PacketType::EagerTagRtm)
            .with(Field::MsgId, 7)
            .with(Field::Tag, 0x1122_3344_5566_7788)
    };
    let medium_repr = Repr {
        payload: &payload,
        raw_addr: Some(RawAddrHdr::new(RawAddr {
            gid: [0xfe; 16],
            qpn: 16,
            qkey: 0xA1B2_C3D4,
            next: 0,
        })),
        cq_data: Some(0xCAFE_BABE_1234_5678),
        ..Repr::new(PacketType::MediumTagRtm)
            .with(Field::MsgId, 3)
            .with(Field::MsgLength, 0x10000)
            .with(Field::SegOffset, 0x2000)
            .with(Field::Tag, 0x1122_3344_5566_7788)
    };
    let mut medium_bytes = vec![0u8; medium_repr.buffer_len()];
    if medium_repr.emit(&mut medium_bytes).is_err() {
        return ExitCode::FAILURE;
    }
    let mut bytes = vec![0u8; eager.buffer_len()];
    if eager.emit(&mut bytes).is_err() {
        return ExitCode::FAILURE;
    }
    let mut out = vec![0u8; 256];
    // The bench's decode_x256 batch.
    let batch: Vec<Vec<u8>> = (0..256u32)
        .map(|i| {
            let r = Repr {
                payload: &payload[..(i as usize % 64)],
                connid: Some(0xA1B2_C3D4 ^ i),
                ..Repr::new(PacketType::EagerTagRtm)
                    .with(Field::MsgId, i as u64)
                    .with(Field::Tag, 0x1122_3344_5566_7788 ^ i as u64)
            };
            let mut v = vec![0u8; r.buffer_len()];
            let _ = r.emit(&mut v);
            v
        })
        .collect();
    // The operation is chosen once, outside the loop, so the loop around each call is the
    // same few instructions for every operation.
    let ok = match op.as_str() {
        "view" => repeat(n, || black_box(view(black_box(&bytes))).is_some()),
        "baseline" => repeat(n, || black_box(baseline(black_box(&bytes))).is_some()),
        "medium" => repeat(n, || black_box(medium(black_box(&medium_bytes))).is_some()),
        "medium_baseline" => repeat(n, || {
            black_box(medium_baseline(black_box(&medium_bytes))).is_some()
        }),
        "view256" => repeat(n, || black_box(view256(black_box(&batch))) != 0),
        "view_as256" => repeat(n, || black_box(view_as256(black_box(&batch))) != 0),
        "view_as" => repeat(n, || black_box(view_as(black_box(&bytes))).is_some()),
        "medium_as" => repeat(n, || {
            black_box(medium_as(black_box(&medium_bytes))).is_some()
        }),
        "baseline256" => repeat(n, || black_box(baseline256(black_box(&batch))) != 0),
        "checked_by_hand256" => repeat(n, || black_box(checked_by_hand256(black_box(&batch))) != 0),
        "repr" => repeat(n, || black_box(repr(black_box(&bytes))).is_some()),
        "emit" => repeat(n, || black_box(emit(black_box(&eager), &mut out)).is_some()),
        other => {
            eprintln!("unknown operation {other}");
            return ExitCode::from(2);
        }
    };
    if !ok {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

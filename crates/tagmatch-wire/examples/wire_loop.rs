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
//! (difference of the two totals) / 100000 = instructions per operation. Operations:
//! `view` (checked view + msg_id, tag, connid, payload length of an EAGER_TAGRTM with a
//! connid header and 64 bytes of payload), `baseline` (the same loads at fixed offsets, no
//! checks), `repr` (`Repr::parse_bytes`), `emit` (`Repr::emit`).

use std::hint::black_box;
use std::process::ExitCode;

use tagmatch_wire::efa::{Field, Packet, PacketType, Repr};

/// What the receive path reads: msg_id, tag, connid, payload length.
type Fields = (Option<u32>, Option<u64>, Option<u32>, usize);

#[inline(never)]
fn view(d: &[u8]) -> Option<Fields> {
    let p = Packet::new_checked(d).ok()?;
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
        eprintln!("usage: wire_loop view|baseline|repr|emit <iterations>");
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
    let mut bytes = vec![0u8; eager.buffer_len()];
    if eager.emit(&mut bytes).is_err() {
        return ExitCode::FAILURE;
    }
    let mut out = vec![0u8; 256];
    for _ in 0..n {
        let ok = match op.as_str() {
            "view" => black_box(view(black_box(&bytes))).is_some(),
            "baseline" => black_box(baseline(black_box(&bytes))).is_some(),
            "repr" => black_box(repr(black_box(&bytes))).is_some(),
            "emit" => black_box(emit(black_box(&eager), &mut out)).is_some(),
            other => {
                eprintln!("unknown operation {other}");
                return ExitCode::from(2);
            }
        };
        if !ok {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

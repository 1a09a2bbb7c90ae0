//! `tagmatch demo`: builds one representative packet of every EFA type
//! (`PacketType::ALL`, every field nonzero, optional headers spread over the set) and of
//! every TM opcode, decodes each to JSON and encodes it back, and prints a table. Exits
//! non-zero if any round trip fails.

use tagmatch_wire::efa::{
    ConnidPlace, Field, Packet, PacketType, PayloadKind, RawAddr, RawAddrHdr, Repr, RmaIov,
    UserRecvQp,
};
use tagmatch_wire::tm::{Rvh, TmOpcode, TmRepr, Tmh};

use crate::format::Format;
use crate::{input, Error};

/// Arguments of `tagmatch demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Also print each packet's hex.
    #[arg(long)]
    pub hex: bool,
}

static IOVS: [RmaIov; 2] = [
    RmaIov::new(0x7F00_0000_1000, 0x1000, 0xAB_CDEF),
    RmaIov::new(0x7F00_0000_8000, 0x20, 0x1234),
];

/// One packet of the conformance set.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Its format.
    pub format: Format,
    /// The type's name (`EAGER_TAGRTM`, `RNDV`, …).
    pub name: &'static str,
    /// The type ID or opcode.
    pub id: u8,
    /// The packet.
    pub bytes: Vec<u8>,
    /// Length of its headers.
    pub header_len: usize,
    /// Whether parsing the bytes gave back the representation they were emitted from.
    pub parsed_back: bool,
}

/// A nonzero value for every field that fits its width.
fn field_value(f: Field) -> u64 {
    match f {
        Field::MsgId => 0x11,
        Field::Tag => 0x1122_3344_5566_7788,
        Field::MsgLength => 0x10_0000,
        Field::SegOffset => 0x2000,
        Field::SegLength => 4,
        Field::SendId => 5,
        Field::RecvId => 7,
        Field::TxId => 9,
        Field::CreditRequest => 16,
        Field::ReadIovCount => IOVS.len() as u64,
        Field::RmaIovCount => IOVS.len() as u64,
        Field::RecvLength => 0x1000,
        Field::RuntLength => 4,
        Field::AtomicDatatype => 7,
        Field::AtomicOp => 2,
        Field::OpId => 3,
        Field::RefKind => 1,
        Field::ProvErrno => 42,
        Field::NextraP3 => 4,
    }
}

fn raw_addr(addr_len: u32) -> RawAddrHdr {
    let mut gid = [0u8; 16];
    gid[0] = 0xfe;
    gid[1] = 0x80;
    gid[15] = 1;
    RawAddrHdr {
        addr_len,
        addr: RawAddr {
            gid,
            qpn: 16,
            qkey: 0xA1B2_C3D4,
            next: 0,
        },
    }
}

fn efa_sample(t: PacketType, index: usize) -> Result<Sample, String> {
    let layout = t.layout();
    let mut repr = Repr::new(t);
    for at in layout.fields {
        if !at.field.is_derived() {
            repr.fields.set(at.field, field_value(at.field));
        }
    }
    if layout.rma_iov {
        repr.rma_iov = &IOVS;
    }
    // Spread the optional headers over the set: REQ types cycle through connid + CQ data,
    // a current raw address, and a libfabric 1.10 raw address (addr_len 32) + CQ data.
    match layout.connid {
        ConnidPlace::ReqOptional => match index % 3 {
            0 => {
                repr.connid = Some(0xA1B2_C3D4);
                repr.cq_data = Some(0xCAFE_BABE_1234_5678);
            }
            1 => repr.raw_addr = Some(raw_addr(RawAddrHdr::DEFAULT_ADDR_LEN)),
            _ => {
                repr.raw_addr = Some(raw_addr(32));
                repr.cq_data = Some(u64::MAX);
            }
        },
        ConnidPlace::Handshake => {
            repr.connid = Some(0xA1B2_C3D4);
            let h = &mut repr.handshake;
            h.extra_info.set_word(0, 0x25b);
            h.host_id = Some(0x0123_4567_89ab_cdef);
            h.device_version = Some(0xEFA1);
            h.user_recv_qp = Some(UserRecvQp { qpn: 3, qkey: 4 });
            h.hmem_p2p = Some(1);
        }
        ConnidPlace::Fixed(_) | ConnidPlace::CtsDataTrailer => repr.connid = Some(0xA1B2_C3D4),
    }
    let mut payload = Vec::new();
    match layout.payload {
        PayloadKind::ReadIov => payload.extend_from_slice(RmaIov::slice_as_bytes(&IOVS)),
        PayloadKind::ReadIovRunt => {
            payload.extend_from_slice(RmaIov::slice_as_bytes(&IOVS));
            payload.extend_from_slice(b"runt");
        }
        PayloadKind::BufCompare => {
            payload.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0])
        }
        PayloadKind::Data if t.is_req() || t == PacketType::CtsData => {
            payload.extend_from_slice(b"demo")
        }
        PayloadKind::Data => {}
    }
    repr.payload = &payload;
    let mut bytes = vec![0u8; repr.buffer_len()];
    repr.emit(&mut bytes)
        .map_err(|e| format!("{}: emit: {e}", t.name()))?;
    let parsed_back = Packet::new_checked(&bytes[..])
        .map(|p| Repr::parse(&p) == repr)
        .unwrap_or(false);
    Ok(Sample {
        format: Format::Efa,
        name: t.name(),
        id: t.id(),
        header_len: repr.header_len(),
        bytes,
        parsed_back,
    })
}

fn tm_sample(op: TmOpcode) -> Result<Sample, String> {
    let payload: &[u8] = match op {
        TmOpcode::Fin => &[],
        _ => b"tm payload",
    };
    let repr = TmRepr {
        tmh: Tmh {
            opcode: op,
            reserved: if op == TmOpcode::Rndv {
                [1, 2, 3]
            } else {
                [0; 3]
            },
            app_ctx: 0xAABB_CCDD,
            tag: u64::MAX - op as u64,
        },
        rvh: op.has_rvh().then_some(Rvh {
            va: 0x7f00_1234_5678,
            rkey: 0x1234,
            len: 65536,
        }),
        payload,
    };
    let mut bytes = vec![0u8; repr.buffer_len()];
    repr.emit(&mut bytes)
        .map_err(|e| format!("{}: emit: {e}", op.name()))?;
    let parsed_back = TmRepr::parse_bytes(&bytes).is_ok_and(|p| p == repr);
    Ok(Sample {
        format: Format::Tm,
        name: op.name(),
        id: op as u8,
        header_len: repr.buffer_len() - payload.len(),
        bytes,
        parsed_back,
    })
}

/// The conformance set: every EFA packet type, then TM EAGER, RNDV, FIN and NO_TAG.
pub fn samples() -> Result<Vec<Sample>, String> {
    let mut out = Vec::new();
    for (i, t) in PacketType::ALL.iter().enumerate() {
        out.push(efa_sample(*t, i)?);
    }
    for op in [
        TmOpcode::Eager,
        TmOpcode::Rndv,
        TmOpcode::Fin,
        TmOpcode::NoTag,
    ] {
        out.push(tm_sample(op)?);
    }
    Ok(out)
}

/// Decodes a sample to JSON and encodes it back; `Ok` when the bytes come back unchanged
/// and the JSON names the right type.
pub fn round_trip(s: &Sample) -> Result<(), String> {
    if !s.parsed_back {
        return Err("parse did not give back the emitted representation".into());
    }
    let json = s.format.decode(&s.bytes)?;
    if json["type"] != s.name || json["type_id"] != s.id {
        return Err(format!("decoded as {} {}", json["type"], json["type_id"]));
    }
    let again = s.format.encode(&json)?;
    if again != s.bytes {
        return Err(format!(
            "re-encoded to {} instead of {}",
            crate::hex::format(&again),
            crate::hex::format(&s.bytes)
        ));
    }
    Ok(())
}

/// Runs `tagmatch demo`.
pub fn run(args: Args) -> Result<(), Error> {
    let fail = |e: String| Error::new("demo", e);
    let samples = samples().map_err(fail)?;
    let mut lines = vec![format!(
        "{:<4} {:<18} {:>7} {:>5} {:>10}  round-trip",
        "wire", "type", "type_id", "bytes", "header_len"
    )];
    let mut failed = 0usize;
    for s in &samples {
        let status = match round_trip(s) {
            Ok(()) => "ok".to_owned(),
            Err(e) => {
                failed += 1;
                format!("FAILED: {e}")
            }
        };
        let mut line = format!(
            "{:<4} {:<18} {:>7} {:>5} {:>10}  {status}",
            s.format.name(),
            s.name,
            s.id,
            s.bytes.len(),
            s.header_len
        );
        if args.hex {
            line.push_str("  ");
            line.push_str(&crate::hex::format(&s.bytes));
        }
        lines.push(line);
    }
    lines.push(format!(
        "{} of {} packet types round-trip",
        samples.len() - failed,
        samples.len()
    ));
    input::print_line(&lines.join("\n")).map_err(fail)?;
    if failed > 0 {
        return Err(fail(format!(
            "{failed} of {} round trips failed",
            samples.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips() {
        let samples = samples().unwrap();
        assert_eq!(samples.len(), PacketType::ALL.len() + 4);
        for s in &samples {
            assert_eq!(round_trip(s), Ok(()), "{}", s.name);
        }
    }
}

//! wire-layouts.md §E: every vector parses to its documented fields and every documented
//! representation emits exactly the vector's bytes; every truncation is a length error.

mod common;

use common::*;
use tagmatch_wire::efa::{Packet, PacketType, Repr};
use tagmatch_wire::tm::{Rvh, TmOpcode, TmPacket, TmRepr, Tmh};
use tagmatch_wire::{ContentError, Error, Part};

#[test]
fn efa_vectors_parse_to_documented_fields() {
    for v in efa_vectors() {
        let pkt = Packet::new_checked(&v.bytes[..]).unwrap_or_else(|e| panic!("{}: {e}", v.name));
        assert_eq!(Repr::parse(&pkt), v.repr, "{}", v.name);
        assert_eq!(
            pkt.header_len() + pkt.payload().len(),
            v.bytes.len(),
            "{}",
            v.name
        );
    }
}

#[test]
fn efa_vectors_emit_documented_bytes() {
    for v in efa_vectors() {
        assert_eq!(v.repr.buffer_len(), v.bytes.len(), "{}", v.name);
        let mut buf = vec![0xEEu8; v.bytes.len()];
        let n = v
            .repr
            .emit(&mut buf)
            .unwrap_or_else(|e| panic!("{}: {e}", v.name));
        assert_eq!(n, v.bytes.len(), "{}", v.name);
        assert_eq!(buf, v.bytes, "{}", v.name);
    }
}

#[test]
fn efa_vectors_every_truncation_is_a_length_error() {
    for v in efa_vectors() {
        for cut in 0..v.bytes.len() {
            match Packet::new_checked(&v.bytes[..cut]) {
                Err(Error::Length(e)) => {
                    assert!(e.needed > cut, "{} cut {cut}: {e:?}", v.name);
                    assert!(e.needed <= v.bytes.len(), "{} cut {cut}: {e:?}", v.name);
                    assert_eq!(e.available, cut, "{} cut {cut}", v.name);
                }
                Ok(p) if v.repr.payload.len() > cut.saturating_sub(p.header_len()) => {
                    // Only the payload was cut: the headers are complete. For LONGREAD the
                    // payload is read_iov[], whose truncation the lazy accessor reports.
                    assert!(cut >= p.header_len(), "{} cut {cut}", v.name);
                    if v.repr.pkt_type == PacketType::LongreadMsgRtm {
                        match p.read_iov() {
                            Err(Error::Length(e)) => {
                                assert_eq!(e.part, Part::ReadIov);
                                assert_eq!(e.needed, v.bytes.len());
                            }
                            other => panic!("{} cut {cut}: {other:?}", v.name),
                        }
                    }
                }
                other => panic!(
                    "{} cut {cut}: expected a length error, got {other:?}",
                    v.name
                ),
            }
        }
    }
}

#[test]
fn efa_vectors_truncation_names_the_needed_length() {
    let v04 = hex("41040e8001000000 8877665544332211 78563412bebafeca d4c3b2a1");
    let e = Packet::new_checked(&v04[..26]).unwrap_err();
    assert_eq!(
        e,
        Error::Length(tagmatch_wire::LengthError {
            part: Part::Connid,
            needed: 28,
            available: 26
        })
    );
    let e = Packet::new_checked(&v04[..20]).unwrap_err();
    assert_eq!(
        e,
        Error::Length(tagmatch_wire::LengthError {
            part: Part::CqData,
            needed: 24,
            available: 20
        })
    );
    let e = Packet::new_checked(&v04[..10]).unwrap_err();
    assert_eq!(
        e,
        Error::Length(tagmatch_wire::LengthError {
            part: Part::Mandatory("EAGER_TAGRTM"),
            needed: 16,
            available: 10
        })
    );
}

#[test]
fn extra_packets_round_trip() {
    for (name, repr) in extra_vectors() {
        let mut buf = vec![0u8; repr.buffer_len()];
        let n = repr
            .emit(&mut buf)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(n, buf.len());
        let pkt = Packet::new_checked(&buf[..]).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(Repr::parse(&pkt), repr, "{name}");
    }
}

#[test]
fn raw_address_layout() {
    // wire-layouts §E.1 RAWADDR 32B.
    let bytes = hex("fe80000000000000 0000000000000001 10000000d4c3b2a1 0000000000000000");
    assert_eq!(
        tagmatch_wire::efa::RawAddr::from_bytes(&bytes),
        Some(raw_addr())
    );
    assert_eq!(raw_addr().to_bytes().to_vec(), bytes);
    // In a REQ, the raw address header is addr_len = 36 then the 32 bytes then 4 of padding,
    // and the sender's connid is its qkey.
    let repr = &extra_vectors()[0].1;
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    assert_eq!(&buf[32..36], &36u32.to_le_bytes());
    assert_eq!(&buf[36..68], &bytes[..]);
    assert_eq!(&buf[68..72], &[0, 0, 0, 0]);
    let pkt = Packet::new_checked(&buf[..]).unwrap();
    assert_eq!(pkt.header_len(), 32 + 40 + 8);
    assert_eq!(pkt.sender_connid(), Some(CONNID));
    assert_eq!(pkt.connid(), None);
}

#[test]
fn header_sizes_match_the_c_structs() {
    // wire-layouts §E.1 "Header sizes to assert".
    let sizes: &[(&[u8], usize)] = &[
        (&[64], 8),
        (&[65], 16),
        (&[66, 68, 128], 24),
        (&[67, 69, 129], 32),
        (&[133], 16),
        (&[134], 24),
        (&[135], 32),
        (&[136], 40),
        (&[137], 24),
        (&[138], 32),
        (&[145], 40),
        (&[146], 48),
        (&[70], 8),
        (&[139], 16),
        (&[71, 72, 73, 74, 75, 76, 130, 140, 141], 24),
        (&[3, 4, 5, 8], 24),
        (&[7, 10, 11], 16),
        (&[12], 20),
        (&[9], 8),
    ];
    for (ids, size) in sizes {
        for &id in *ids {
            let t = PacketType::from_id(id).unwrap();
            assert_eq!(t.layout().size as usize, *size, "{t}");
            assert_eq!(
                Repr::new(t).header_len(),
                *size + if t == PacketType::Handshake { 8 } else { 0 },
                "{t}"
            );
        }
    }
    // Every wire type has exactly one size row.
    let listed: usize = sizes.iter().map(|(ids, _)| ids.len()).sum();
    assert_eq!(listed, PacketType::ALL.len());
    // The optional headers add 40 (raw address), 8 (CQ data) and 4 (connid).
    let base = Repr::new(PacketType::EagerMsgRtm);
    let with = |f: &dyn Fn(&mut Repr)| {
        let mut r = base;
        f(&mut r);
        r.header_len() - base.header_len()
    };
    assert_eq!(
        with(&|r| r.raw_addr = Some(tagmatch_wire::efa::RawAddrHdr::new(raw_addr()))),
        40
    );
    assert_eq!(with(&|r| r.cq_data = Some(1)), 8);
    assert_eq!(with(&|r| r.connid = Some(1)), 4);
}

#[test]
fn recognised_but_not_wire_types() {
    for (id, err) in [
        (1u8, ContentError::RetiredType(1)),
        (2, ContentError::RetiredType(2)),
        (6, ContentError::LocalOnlyType(6)),
        (131, ContentError::UnusedType(131)),
        (142, ContentError::UnusedType(142)),
        (143, ContentError::UnusedType(143)),
        (144, ContentError::UnusedType(144)),
        (147, ContentError::UnusedType(147)),
        (0, ContentError::UnknownType(0)),
        (13, ContentError::UnknownType(13)),
        (77, ContentError::UnknownType(77)),
        (148, ContentError::UnknownType(148)),
        (255, ContentError::UnknownType(255)),
    ] {
        let bytes = [id, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            Packet::new_checked(&bytes[..]).unwrap_err(),
            Error::Content(err)
        );
    }
}

#[test]
fn content_errors() {
    // version < 4
    let e = Packet::new_checked(&hex("4003040001000000")[..]).unwrap_err();
    assert_eq!(e, Error::Content(ContentError::UnsupportedVersion(3)));
    // raw address and connid both flagged
    let e = Packet::new_checked(&hex("4004058001000000")[..]).unwrap_err();
    assert_eq!(e, Error::Content(ContentError::RawAddrAndConnid));
    // addr_len out of range
    let e = Packet::new_checked(&hex("4004050001000000 10000000")[..]).unwrap_err();
    assert!(matches!(
        e,
        Error::Content(ContentError::AddrLenOutOfRange { addr_len: 16, .. })
    ));
    // an iov count no packet can hold
    let e = Packet::new_checked(&hex("46040000ffffffff")[..]).unwrap_err();
    assert!(matches!(
        e,
        Error::Content(ContentError::IovCountTooLarge {
            field: "rma_iov_count",
            count: u32::MAX,
            ..
        })
    ));
    // nextra_p3 below 3 and above 7
    for n in [0u32, 2, 8, u32::MAX] {
        let mut b = hex("0904000000000000");
        b[4..8].copy_from_slice(&n.to_le_bytes());
        let e = Packet::new_checked(&b[..]).unwrap_err();
        assert_eq!(
            e,
            Error::Content(ContentError::BadNextraP3 { nextra_p3: n })
        );
    }
    // a read_iov count that overflows the packet is reported by the payload accessor
    let mut b = hex("8004040006000000 0000100000000000 05000000ffffff7f");
    b.extend_from_slice(&[0; 24]);
    let p = Packet::new_checked(&b[..]).unwrap();
    assert!(matches!(
        p.read_iov(),
        Err(Error::Content(ContentError::IovCountTooLarge {
            field: "read_iov_count",
            ..
        }))
    ));
}

#[test]
fn padding_is_ignored_and_emitted_as_zero() {
    // DC_EAGER_MSGRTM with garbage in its padding (offset 12) and CTS without connid with
    // garbage in the connid/padding slot.
    let v15 = hex("8504040008000000 05000000deadbeef");
    let repr = Repr::parse_bytes(&v15).unwrap();
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut out).unwrap();
    assert_eq!(out, hex("8504040008000000 0500000000000000"));
    let cts = hex("03040000deadbeef 0500000007000000 0000020000000000");
    let repr = Repr::parse_bytes(&cts).unwrap();
    assert_eq!(repr.connid, None);
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut out).unwrap();
    assert_eq!(
        out,
        hex("0304000000000000 0500000007000000 0000020000000000")
    );
}

#[test]
fn payload_accessors() {
    use tagmatch_wire::efa::{Field, RmaIov};
    // RUNTREAD: read_iov[] then runt data
    let iovs = [IOV, RmaIov::new(1, 2, 3)];
    let mut payload = RmaIov::slice_as_bytes(&iovs).to_vec();
    payload.extend_from_slice(b"runt");
    let repr = Repr {
        payload: &payload,
        ..Repr::new(PacketType::RuntreadTagRtm)
            .with(Field::ReadIovCount, 2)
            .with(Field::RuntLength, 4)
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    let p = Packet::new_checked(&buf[..]).unwrap();
    assert_eq!(p.read_iov().unwrap(), &iovs);
    assert_eq!(p.data().unwrap(), b"runt");
    // COMPARE_RTA: buf then compare
    let repr = Repr {
        rma_iov: &IOVS,
        payload: &[1, 0, 0, 0, 2, 0, 0, 0],
        ..Repr::new(PacketType::CompareRta)
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    let p = Packet::new_checked(&buf[..]).unwrap();
    assert_eq!(
        p.compare_operands(),
        Some((&[1u8, 0, 0, 0][..], &[2u8, 0, 0, 0][..]))
    );
}

#[test]
fn emit_rejects_what_the_type_cannot_carry() {
    use tagmatch_wire::efa::Field;
    let mut buf = [0u8; 128];
    let e = Repr::new(PacketType::EagerMsgRtm)
        .with(Field::Tag, 1)
        .emit(&mut buf);
    assert_eq!(
        e,
        Err(Error::Content(ContentError::NotApplicable {
            what: "tag",
            packet: "EAGER_MSGRTM"
        }))
    );
    let e = Repr {
        cq_data: Some(1),
        ..Repr::new(PacketType::Cts)
    }
    .emit(&mut buf);
    assert!(matches!(
        e,
        Err(Error::Content(ContentError::NotApplicable {
            what: "cq_data",
            ..
        }))
    ));
    let e = Repr {
        rma_iov: &IOVS,
        ..Repr::new(PacketType::EagerTagRtm)
    }
    .emit(&mut buf);
    assert!(matches!(
        e,
        Err(Error::Content(ContentError::NotApplicable {
            what: "rma_iov",
            ..
        }))
    ));
    let e = Repr::new(PacketType::EagerMsgRtm)
        .with(Field::MsgId, 1 << 32)
        .emit(&mut buf);
    assert!(matches!(
        e,
        Err(Error::Content(ContentError::FieldOverflow {
            field: "msg_id",
            ..
        }))
    ));
    let e = Repr {
        raw_addr: Some(tagmatch_wire::efa::RawAddrHdr::new(raw_addr())),
        connid: Some(1),
        ..Repr::new(PacketType::EagerMsgRtm)
    }
    .emit(&mut buf);
    assert_eq!(e, Err(Error::Content(ContentError::RawAddrAndConnid)));
    let e = Repr::new(PacketType::MediumMsgRtm).emit(&mut buf[..10]);
    assert_eq!(
        e,
        Err(Error::Length(tagmatch_wire::LengthError {
            part: Part::OutputBuffer,
            needed: 24,
            available: 10
        }))
    );
}

// wire-layouts §E.2 (big-endian).
#[test]
fn tm_vectors() {
    let eager = hex("03000000aabbccdd 1122334455667788");
    let t = Tmh::parse(&eager).unwrap();
    assert_eq!(
        t,
        Tmh {
            opcode: TmOpcode::Eager,
            reserved: [0; 3],
            app_ctx: 0xAABBCCDD,
            tag: 0x1122334455667788
        }
    );
    let mut out = [0u8; 16];
    t.emit(&mut out).unwrap();
    assert_eq!(out.to_vec(), eager);

    let no_tag = hex("0000000000000000 0000000000000000");
    assert_eq!(
        Tmh::parse(&no_tag).unwrap(),
        Tmh {
            opcode: TmOpcode::NoTag,
            reserved: [0; 3],
            app_ctx: 0,
            tag: 0
        }
    );

    let rndv = hex("0100000000000001 deadbeef00000001 00007f0012345678 0000123400010000");
    let m = TmRepr::parse_bytes(&rndv).unwrap();
    assert_eq!(m.tmh.opcode, TmOpcode::Rndv);
    assert_eq!(m.tmh.app_ctx, 1);
    assert_eq!(m.tmh.tag, 0xDEADBEEF00000001);
    assert_eq!(
        m.rvh,
        Some(Rvh {
            va: 0x00007f0012345678,
            rkey: 0x1234,
            len: 65536
        })
    );
    let mut out = vec![0u8; m.buffer_len()];
    m.emit(&mut out).unwrap();
    assert_eq!(out, rndv);

    let fin = TmRepr::fin_for(&m);
    let mut out = vec![0u8; fin.buffer_len()];
    fin.emit(&mut out).unwrap();
    assert_eq!(out[..16].to_vec(), hex("0200000000000001 deadbeef00000001"));
    assert_eq!(out[16..].to_vec(), rndv[16..].to_vec());
}

#[test]
fn tm_errors_and_truncation() {
    let rndv = hex("0100000000000001 deadbeef00000001 00007f0012345678 0000123400010000");
    for cut in 0..rndv.len() {
        match TmPacket::new_checked(&rndv[..cut]) {
            Err(Error::Length(e)) => {
                assert_eq!(e.needed, if cut < 16 { 16 } else { 32 });
                assert_eq!(e.part, if cut < 16 { Part::Tmh } else { Part::Rvh });
            }
            other => panic!("cut {cut}: {other:?}"),
        }
    }
    let bad = hex("0400000000000000 0000000000000000");
    assert_eq!(
        TmPacket::new_checked(&bad[..]).unwrap_err(),
        Error::Content(ContentError::UnknownTmOpcode(4))
    );
    // EAGER: payload after the TMH; reserved bytes kept (UCX stores data there)
    let eager = hex("03010203aabbccdd 1122334455667788 6869");
    let p = TmPacket::new_checked(&eager[..]).unwrap();
    assert_eq!(p.payload(), b"hi");
    assert_eq!(p.reserved(), [1, 2, 3]);
    assert_eq!(p.rvh(), None);
}

#[test]
fn mutable_view_rewrites_in_place() {
    use tagmatch_wire::efa::Field;
    // V04 (EAGER_TAGRTM + CQ data + connid) as a header template with 3 payload bytes.
    let mut b = hex("41040e8001000000 8877665544332211 78563412bebafeca d4c3b2a1 000000");
    let mut p = Packet::new_checked(&mut b[..]).unwrap();
    p.set(Field::MsgId, 0xFFFF_FFFF).unwrap();
    p.set(Field::Tag, 42).unwrap();
    p.set_connid(7).unwrap();
    p.payload_mut().copy_from_slice(b"abc");
    assert_eq!(
        p.set(Field::MsgId, 1 << 32),
        Err(Error::Content(ContentError::FieldOverflow {
            field: "msg_id",
            value: 1 << 32
        }))
    );
    assert!(
        p.set(Field::SendId, 1).is_err(),
        "EAGER_TAGRTM has no send_id"
    );
    let r = Repr::parse_bytes(&b).unwrap();
    assert_eq!(r.get(tagmatch_wire::efa::Field::MsgId), Some(0xFFFF_FFFF));
    assert_eq!(r.get(tagmatch_wire::efa::Field::Tag), Some(42));
    assert_eq!(r.connid, Some(7));
    assert_eq!(r.cq_data, Some(CQ_DATA));
    assert_eq!(r.payload, b"abc");
    // Shape-defining counts cannot be rewritten, and a missing connid cannot be set.
    let mut v21 = hex(&format!("4604000001000000 {IOV_HEX}"));
    let mut p = Packet::new_checked(&mut v21[..]).unwrap();
    assert!(p.set(Field::RmaIovCount, 2).is_err());
    assert!(p.set_connid(1).is_err());
}

#[test]
fn type_classes() {
    use PacketType::*;
    let rtm: Vec<_> = PacketType::ALL
        .iter()
        .filter(|t| t.is_rtm())
        .map(|t| t.id())
        .collect();
    assert_eq!(
        rtm,
        [64, 65, 66, 67, 68, 69, 128, 129, 133, 134, 135, 136, 137, 138, 145, 146]
    );
    let rta: Vec<_> = PacketType::ALL
        .iter()
        .filter(|t| t.is_rta())
        .copied()
        .collect();
    assert_eq!(rta, [WriteRta, FetchRta, CompareRta, DcWriteRta]);
    for t in PacketType::ALL {
        assert_eq!(
            t.has_msg_id(),
            t.is_rtm() || t.is_rta() || *t == Receipt,
            "{t}"
        );
        assert_eq!(
            t.is_tagged(),
            t.is_rtm() && t.name().contains("TAGRTM"),
            "{t}"
        );
    }
}

#[test]
fn to_vec_emits_exactly_buffer_len() {
    for v in efa_vectors() {
        assert_eq!(v.repr.to_vec().unwrap(), v.bytes, "{}", v.name);
    }
}

/// A header whose `rma_iov[]` (2730 entries: as many as 64 KiB holds, which the iov-count
/// check allows) ends past 64 KiB. wire-layouts §A.6: "The mandatory size is
/// base_hdr_size + rma_iov_count*24" — 24 + 2730 * 24 = 65544 bytes here. Such a packet must
/// be refused, not parsed with header offsets wrapped to 16 bits (which reported `rma_iov`
/// empty and the payload starting inside the array).
#[test]
fn header_past_64k_is_refused_not_wrapped() {
    let count = 65536 / 24u32;
    for (ty, flags) in [(0x47u8, 0u16), (0x4a, 0x0020), (0x4a, 0x8022)] {
        // LONGCTS_RTW (rma_iov_count at 4) and WRITE_RTA (at 8), with and without
        // CQ data + connid headers after the array.
        let mut b = vec![ty, 4];
        b.extend_from_slice(&flags.to_le_bytes());
        b.resize(24, 0);
        let at = if ty == 0x47 { 4 } else { 8 };
        b[at..at + 4].copy_from_slice(&count.to_le_bytes());
        b.resize(24 + count as usize * 24 + 64, 0);
        match Packet::new_checked(&b[..]) {
            Err(e) => assert_eq!(e, Error::Content(ContentError::TooLong), "type {ty}"),
            Ok(p) => panic!(
                "type {ty}: accepted with header_len {} and {} rma_iov entries",
                p.header_len(),
                p.rma_iov().len()
            ),
        }
    }
}

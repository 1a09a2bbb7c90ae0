//! Review 20: a field-by-field audit of `tagmatch-wire` against wire-layouts.md (WL),
//! efa-rdm-protocol-v4.md and rdma-core-tag-matching.md. The expected offsets, sizes, flag
//! values and header orders below are written out from the spec text, not taken from the
//! crate's own layout table, so a wrong row in `layout.rs` cannot agree with itself here.

mod common;

use common::{hex, raw_addr, CONNID, TAG};
use tagmatch_wire::efa::{
    extra, flags, ExtraInfo, Field, Packet, PacketType, RawAddrHdr, Repr, RmaIov, UserRecvQp,
};
use tagmatch_wire::tm::{Rvh, TmOpcode, TmPacket, TmRepr, Tmh};
use tagmatch_wire::{ContentError, Error, LengthError, Part};

use Field::*;
use PacketType as T;

/// (field, offset, width in bytes) as the spec gives them.
type Spec = &'static [(Field, usize, usize)];

/// WL §A.5 (non-REQ) and §A.6 (REQ mandatory headers): every wire type, its `sizeof` with
/// n = 0, and its fixed fields. The connid slot of non-REQ types and the derived
/// `nextra_p3` are checked by other tests.
fn spec_rows() -> Vec<(PacketType, usize, Spec)> {
    const LONGCTS: Spec = &[
        (MsgId, 4, 4),
        (MsgLength, 8, 8),
        (SendId, 16, 4),
        (CreditRequest, 20, 4),
    ];
    const LONGCTS_TAG: Spec = &[
        (MsgId, 4, 4),
        (MsgLength, 8, 8),
        (SendId, 16, 4),
        (CreditRequest, 20, 4),
        (Tag, 24, 8),
    ];
    const LONGCTS_RTW: Spec = &[
        (RmaIovCount, 4, 4),
        (MsgLength, 8, 8),
        (SendId, 16, 4),
        (CreditRequest, 20, 4),
    ];
    const RTR: Spec = &[
        (RmaIovCount, 4, 4),
        (MsgLength, 8, 8),
        (RecvId, 16, 4),
        (RecvLength, 20, 4),
    ];
    const RTA_RECV: Spec = &[
        (MsgId, 4, 4),
        (RmaIovCount, 8, 4),
        (AtomicDatatype, 12, 4),
        (AtomicOp, 16, 4),
        (RecvId, 20, 4),
    ];
    vec![
        // WL §A.5: CTS 24: 4 connid; 8 send_id; 12 recv_id; 16 recv_length u64.
        (
            T::Cts,
            24,
            &[(SendId, 8, 4), (RecvId, 12, 4), (RecvLength, 16, 8)],
        ),
        // CTSDATA 24: 4 recv_id; 8 seg_length u64; 16 seg_offset u64.
        (
            T::CtsData,
            24,
            &[(RecvId, 4, 4), (SegLength, 8, 8), (SegOffset, 16, 8)],
        ),
        // READRSP 24 (the C layout, not doc L1060-1068, WL §D.6): 8 recv_id; 12 send_id;
        // 16 seg_length.
        (
            T::ReadRsp,
            24,
            &[(RecvId, 8, 4), (SendId, 12, 4), (SegLength, 16, 8)],
        ),
        // EOR 16: 4 send_id; 8 recv_id; 12 connid.
        (T::Eor, 16, &[(SendId, 4, 4), (RecvId, 8, 4)]),
        // ATOMRSP 24: 4 connid; 8 reserved; 12 recv_id; 16 seg_length.
        (T::AtomRsp, 24, &[(RecvId, 12, 4), (SegLength, 16, 8)]),
        // HANDSHAKE: 4 nextra_p3 (derived), extra_info at 8.
        (T::Handshake, 8, &[]),
        // RECEIPT 16: 4 tx_id; 8 msg_id; 12 connid.
        (T::Receipt, 16, &[(TxId, 4, 4), (MsgId, 8, 4)]),
        // READ_NACK 16: same layout as EOR.
        (T::ReadNack, 16, &[(SendId, 4, 4), (RecvId, 8, 4)]),
        // PEER_ERROR 20: 4 op_id; 8 ref_kind; 12 prov_errno; 16 connid.
        (
            T::PeerError,
            20,
            &[(OpId, 4, 4), (RefKind, 8, 4), (ProvErrno, 12, 4)],
        ),
        // WL §A.6: EAGER 8/16: 4 msg_id; [8 tag].
        (T::EagerMsgRtm, 8, &[(MsgId, 4, 4)]),
        (T::EagerTagRtm, 16, &[(MsgId, 4, 4), (Tag, 8, 8)]),
        // MEDIUM 24/32: 4 msg_id; 8 msg_length (WL §D.5); 16 seg_offset; [24 tag].
        (
            T::MediumMsgRtm,
            24,
            &[(MsgId, 4, 4), (MsgLength, 8, 8), (SegOffset, 16, 8)],
        ),
        (
            T::MediumTagRtm,
            32,
            &[
                (MsgId, 4, 4),
                (MsgLength, 8, 8),
                (SegOffset, 16, 8),
                (Tag, 24, 8),
            ],
        ),
        // LONGCTS and DC_LONGCTS 24/32.
        (T::LongctsMsgRtm, 24, LONGCTS),
        (T::LongctsTagRtm, 32, LONGCTS_TAG),
        (T::DcLongctsMsgRtm, 24, LONGCTS),
        (T::DcLongctsTagRtm, 32, LONGCTS_TAG),
        // EAGER_RTW 8+24n: 4 rma_iov_count; 8 rma_iov[].
        (T::EagerRtw, 8, &[(RmaIovCount, 4, 4)]),
        // LONGCTS_RTW, DC_LONGCTS_RTW 24+24n.
        (T::LongctsRtw, 24, LONGCTS_RTW),
        (T::DcLongctsRtw, 24, LONGCTS_RTW),
        // SHORT_RTR / LONGCTS_RTR 24+24n: 20 recv_length u32 (WL §D.7).
        (T::ShortRtr, 24, RTR),
        (T::LongctsRtr, 24, RTR),
        // RTA 24+24n: 20 padding (WRITE) / recv_id (FETCH, COMPARE) / send_id (DC_WRITE).
        (
            T::WriteRta,
            24,
            &[
                (MsgId, 4, 4),
                (RmaIovCount, 8, 4),
                (AtomicDatatype, 12, 4),
                (AtomicOp, 16, 4),
            ],
        ),
        (T::FetchRta, 24, RTA_RECV),
        (T::CompareRta, 24, RTA_RECV),
        (
            T::DcWriteRta,
            24,
            &[
                (MsgId, 4, 4),
                (RmaIovCount, 8, 4),
                (AtomicDatatype, 12, 4),
                (AtomicOp, 16, 4),
                (SendId, 20, 4),
            ],
        ),
        // LONGREAD 24/32: 20 read_iov_count.
        (
            T::LongreadMsgRtm,
            24,
            &[
                (MsgId, 4, 4),
                (MsgLength, 8, 8),
                (SendId, 16, 4),
                (ReadIovCount, 20, 4),
            ],
        ),
        (
            T::LongreadTagRtm,
            32,
            &[
                (MsgId, 4, 4),
                (MsgLength, 8, 8),
                (SendId, 16, 4),
                (ReadIovCount, 20, 4),
                (Tag, 24, 8),
            ],
        ),
        // LONGREAD_RTW 24+24n.
        (
            T::LongreadRtw,
            24,
            &[
                (RmaIovCount, 4, 4),
                (MsgLength, 8, 8),
                (SendId, 16, 4),
                (ReadIovCount, 20, 4),
            ],
        ),
        // DC_EAGER 16/24: 8 send_id; 12 padding; [16 tag].
        (T::DcEagerMsgRtm, 16, &[(MsgId, 4, 4), (SendId, 8, 4)]),
        (
            T::DcEagerTagRtm,
            24,
            &[(MsgId, 4, 4), (SendId, 8, 4), (Tag, 16, 8)],
        ),
        // DC_MEDIUM 32/40: 8 send_id; 12 padding; 16 msg_length; 24 seg_offset; [32 tag].
        (
            T::DcMediumMsgRtm,
            32,
            &[
                (MsgId, 4, 4),
                (SendId, 8, 4),
                (MsgLength, 16, 8),
                (SegOffset, 24, 8),
            ],
        ),
        (
            T::DcMediumTagRtm,
            40,
            &[
                (MsgId, 4, 4),
                (SendId, 8, 4),
                (MsgLength, 16, 8),
                (SegOffset, 24, 8),
                (Tag, 32, 8),
            ],
        ),
        // DC_EAGER_RTW 16+24n: 8 send_id; 12 padding; 16 rma_iov[].
        (T::DcEagerRtw, 16, &[(RmaIovCount, 4, 4), (SendId, 8, 4)]),
        // RUNTREAD 40/48: 24 seg_offset; 32 runt_length; [40 tag].
        (
            T::RuntreadMsgRtm,
            40,
            &[
                (MsgId, 4, 4),
                (MsgLength, 8, 8),
                (SendId, 16, 4),
                (ReadIovCount, 20, 4),
                (SegOffset, 24, 8),
                (RuntLength, 32, 8),
            ],
        ),
        (
            T::RuntreadTagRtm,
            48,
            &[
                (MsgId, 4, 4),
                (MsgLength, 8, 8),
                (SendId, 16, 4),
                (ReadIovCount, 20, 4),
                (SegOffset, 24, 8),
                (RuntLength, 32, 8),
                (Tag, 40, 8),
            ],
        ),
    ]
}

/// WL §A.6: "Only types 70, 71, 72, 73, 74, 75, 76, 130, 139, 140 and 141 include rma_iov".
const RMA_IOV_TYPES: [u8; 11] = [70, 71, 72, 73, 74, 75, 76, 130, 139, 140, 141];

fn le(b: &[u8], off: usize, width: usize) -> u64 {
    let mut a = [0u8; 8];
    a[..width].copy_from_slice(&b[off..off + width]);
    u64::from_le_bytes(a)
}

fn emit(r: &Repr<'_>) -> Vec<u8> {
    let mut out = vec![0xEEu8; r.buffer_len()];
    let n = r
        .emit(&mut out)
        .unwrap_or_else(|e| panic!("{}: {e}", r.pkt_type));
    assert_eq!(
        n,
        r.buffer_len(),
        "{}: emit wrote != buffer_len",
        r.pkt_type
    );
    out
}

/// A distinct value for field number `i` that uses every byte of its width.
fn pattern(i: usize, width: usize) -> u64 {
    let v = 0x8877_6655_4433_2211u64.wrapping_add((i as u64) * 0x0101_0101_0101_0101);
    if width == 4 {
        v & 0xffff_ffff
    } else {
        v
    }
}

// WL §A.5/§A.6 layouts and §E.1 "Header sizes to assert": every wire type, field by field,
// at the C offset, LE, with the C width; the rest of the mandatory header is padding and is
// emitted as zero (WL §A.1); the type has exactly the spec's fields; with two rma_iov
// entries the header grows by 48 for the eleven rma_iov types only.
#[test]
fn every_type_field_by_field_at_the_c_offsets() {
    let rows = spec_rows();
    // WL §A.2: every wire type, nothing more.
    assert_eq!(rows.len(), PacketType::ALL.len());
    let iovs = [RmaIov::new(1, 2, 3), RmaIov::new(4, 5, 6)];
    for (t, size, spec) in rows {
        assert_eq!(t.layout().size as usize, size, "{t} sizeof");
        let has_iov = RMA_IOV_TYPES.contains(&t.id());
        assert_eq!(t.layout().rma_iov, has_iov, "{t} rma_iov");
        let mut r = Repr::new(t);
        for (i, &(f, _, w)) in spec.iter().enumerate() {
            if f != RmaIovCount {
                r = r.with(f, pattern(i, w));
            }
        }
        if has_iov {
            r.rma_iov = &iovs;
        }
        let b = emit(&r);
        let n = if has_iov { 2 } else { 0 };
        let hs_extra = if t == T::Handshake { 8 } else { 0 };
        assert_eq!(b.len(), size + 24 * n + hs_extra, "{t} length");
        assert_eq!(b[0], t.id(), "{t} type @0");
        assert_eq!(b[1], 4, "{t} version @1");
        let mut covered = vec![false; size];
        covered[..4].iter_mut().for_each(|c| *c = true);
        for (i, &(f, off, w)) in spec.iter().enumerate() {
            let want = if f == RmaIovCount {
                n as u64
            } else {
                pattern(i, w)
            };
            assert_eq!(le(&b, off, w), want, "{t} {} @{off}", f.name());
            covered[off..off + w].iter_mut().for_each(|c| *c = true);
        }
        if t == T::Handshake {
            covered[4..8].iter_mut().for_each(|c| *c = true);
        }
        for (off, c) in covered.iter().enumerate() {
            if !c {
                assert_eq!(b[off], 0, "{t}: padding byte {off} not zero");
            }
        }
        if has_iov {
            assert_eq!(&b[size..size + 48], RmaIov::slice_as_bytes(&iovs), "{t}");
        }
        // The type has exactly the spec's fields.
        for f in Field::ALL {
            let in_spec =
                spec.iter().any(|&(g, _, _)| g == f) || (t == T::Handshake && f == NextraP3);
            assert_eq!(t.layout().has(f), in_spec, "{t} has {}", f.name());
        }
        // Parse reads the same values back through the view.
        let p = Packet::new_checked(&b[..]).unwrap();
        for (i, &(f, _, w)) in spec.iter().enumerate() {
            let want = if f == RmaIovCount {
                n as u64
            } else {
                pattern(i, w)
            };
            assert_eq!(p.get(f), Some(want), "{t} get {}", f.name());
        }
        assert_eq!(Repr::parse(&p), r, "{t} round trip");
    }
}

// WL §A.3 flag table and §A.4 extra bits: the exact values.
#[test]
fn flag_and_extra_bit_values() {
    assert_eq!(flags::CONNID_HDR, 1 << 15);
    assert_eq!(flags::REQ_OPT_RAW_ADDR_HDR, 1 << 0);
    assert_eq!(flags::REQ_OPT_CQ_DATA_HDR, 1 << 1);
    assert_eq!(flags::REQ_MSG, 1 << 2);
    assert_eq!(flags::REQ_TAGGED, 1 << 3);
    assert_eq!(flags::REQ_RMA, 1 << 4);
    assert_eq!(flags::REQ_ATOMIC, 1 << 5);
    assert_eq!(flags::REQ_READ_NACK, 1 << 13);
    assert_eq!(flags::CTS_READ_REQ, 1 << 7);
    assert_eq!(flags::HANDSHAKE_HOST_ID_HDR, 1 << 0);
    assert_eq!(flags::HANDSHAKE_DEVICE_VERSION_HDR, 1 << 1);
    assert_eq!(flags::HANDSHAKE_USER_RECV_QP_HDR, 1 << 2);
    assert_eq!(flags::HANDSHAKE_HMEM_P2P_HDR, 1 << 3);
    let bits = [
        extra::FEATURE_RDMA_READ,
        extra::FEATURE_DELIVERY_COMPLETE,
        extra::REQUEST_CONSTANT_HEADER_LENGTH,
        extra::REQUEST_CONNID_HEADER,
        extra::FEATURE_RUNT,
        extra::FEATURE_RDMA_WRITE,
        extra::FEATURE_READ_NACK,
        extra::FEATURE_REQUEST_USER_RECV_QP,
        extra::FEATURE_UNSOLICITED_WRITE_RECV,
        extra::FEATURE_PEER_ERROR,
    ];
    assert_eq!(bits, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(extra::MAX_WORDS, 4);
    // "Bit i means bit i%64 of extra_info[i/64]".
    let mut e = ExtraInfo::default();
    e.set(extra::FEATURE_READ_NACK, true);
    e.set(130, true);
    assert_eq!(e.words(), 3);
    assert_eq!(e.word(0), 0x40);
    assert_eq!(e.word(1), 0);
    assert_eq!(e.word(2), 1 << 2);
}

// WL §A.3 "Set by sender when": REQ_MSG on every RTM (DC, LONGREAD, RUNTREAD too), TAGGED
// on every *TAGRTM, ATOMIC on every RTA; RTW and RTR carry no MSG/RMA bit; REQ_RMA never.
#[test]
fn default_flags_follow_the_sender_code() {
    for &t in PacketType::ALL {
        let id = t.id();
        let rtm = matches!(id, 64..=69 | 128 | 129 | 133..=138 | 145 | 146);
        let tagged = rtm && t.name().contains("TAGRTM");
        let rta = matches!(id, 74..=76 | 141);
        let mut want = 0;
        if rtm {
            want |= flags::REQ_MSG;
        }
        if tagged {
            want |= flags::REQ_TAGGED;
        }
        if rta {
            want |= flags::REQ_ATOMIC;
        }
        assert_eq!(Repr::new(t).flags, want, "{t}");
        assert_eq!(Repr::new(t).flags & flags::REQ_RMA, 0, "{t}");
        assert_eq!(t.is_req(), id >= 64, "{t}");
    }
}

// WL §A.7 "Where connid sits" for non-REQ types: CTS/READRSP/ATOMRSP @4, EOR/READ_NACK/RECEIPT
// @12, PEER_ERROR @16, CTSDATA @24 in an 8-byte header (4 bytes padding), HANDSHAKE right
// after extra_info. "For non-REQ types connid is used only when CONNID_HDR is set": the slot
// is padding otherwise and is ignored.
#[test]
fn non_req_connid_slots() {
    for (t, at) in [
        (T::Cts, 4),
        (T::ReadRsp, 4),
        (T::AtomRsp, 4),
        (T::Eor, 12),
        (T::ReadNack, 12),
        (T::Receipt, 12),
        (T::PeerError, 16),
    ] {
        let r = Repr {
            connid: Some(CONNID),
            ..Repr::new(t)
        };
        let b = emit(&r);
        assert_eq!(
            b.len(),
            t.layout().size as usize,
            "{t}: connid adds nothing"
        );
        assert_eq!(le(&b, 2, 2) as u16, flags::CONNID_HDR, "{t} flags");
        assert_eq!(le(&b, at, 4), CONNID as u64, "{t} connid @{at}");
        // Without the flag the same bytes are padding.
        let mut nf = b.clone();
        nf[3] = 0;
        let p = Packet::new_checked(&nf[..]).unwrap();
        assert_eq!(p.connid(), None, "{t}");
        assert_eq!(Repr::parse(&p), Repr::new(t), "{t}");
    }
    // CTSDATA: 8-byte trailer at 24, payload at 32.
    let r = Repr {
        connid: Some(CONNID),
        payload: b"xy",
        ..Repr::new(T::CtsData)
    };
    let mut b = emit(&r);
    assert_eq!(b.len(), 34);
    assert_eq!(le(&b, 24, 4), CONNID as u64);
    assert_eq!(&b[28..32], &[0; 4]);
    assert_eq!(&b[32..], b"xy");
    b[28..32].copy_from_slice(&[0xA5; 4]);
    assert_eq!(Repr::parse_bytes(&b).unwrap(), r, "trailer padding ignored");
    // HANDSHAKE with 0..=4 extra words: connid right after extra_info, 8 bytes.
    for words in 0..=4usize {
        let mut r = Repr::new(T::Handshake);
        r.handshake.extra_info = ExtraInfo::with_words(words);
        r.connid = Some(CONNID);
        let b = emit(&r);
        assert_eq!(le(&b, 4, 4), 3 + words as u64, "nextra_p3");
        assert_eq!(b.len(), 8 + 8 * words + 8);
        assert_eq!(le(&b, 8 + 8 * words, 4), CONNID as u64);
        assert_eq!(Repr::parse_bytes(&b).unwrap(), r);
    }
}

// WL §A.6: "[mandatory header, including its trailing rma_iov[]] [optional headers]
// [payload]"; optional headers in the fixed order raw address (40 bytes: u32 addr_len = 36,
// the 32-byte address, 4 unwritten), CQ data (u64), connid (u32, no padding, so a header
// can end ≡ 4 mod 8); raw address and connid mutually exclusive; with a raw address the
// sender's connid is its qkey at +24 from the start of the optional headers.
#[test]
fn req_optional_headers_follow_rma_iov_in_the_fixed_order() {
    let iovs = [RmaIov::new(0x7F00_0000_1000, 0x1000, 0xAB_CDEF)];
    let addr = raw_addr();
    for &t in PacketType::ALL.iter().filter(|t| t.is_req()) {
        let n = if t.layout().rma_iov { 1 } else { 0 };
        let start = t.layout().size as usize + 24 * n;
        for (raw, cq, con) in [
            (false, false, false),
            (true, false, false),
            (false, true, false),
            (false, false, true),
            (true, true, false),
            (false, true, true),
        ] {
            let mut r = Repr::new(t);
            r.rma_iov = &iovs[..n];
            r.raw_addr = raw.then(|| RawAddrHdr::new(addr));
            r.cq_data = cq.then_some(common::CQ_DATA);
            r.connid = con.then_some(CONNID);
            r.payload = b"P";
            let b = emit(&r);
            let fl = le(&b, 2, 2) as u16;
            assert_eq!(fl & flags::REQ_OPT_RAW_ADDR_HDR != 0, raw, "{t}");
            assert_eq!(fl & flags::REQ_OPT_CQ_DATA_HDR != 0, cq, "{t}");
            assert_eq!(fl & flags::CONNID_HDR != 0, con, "{t}");
            let mut pos = start;
            if raw {
                assert_eq!(le(&b, pos, 4), 36, "{t} addr_len");
                assert_eq!(&b[pos + 4..pos + 36], &addr.to_bytes(), "{t} addr");
                assert_eq!(&b[pos + 36..pos + 40], &[0; 4], "{t} unwritten tail");
                assert_eq!(le(&b, pos + 24, 4), CONNID as u64, "{t} qkey @+24");
                pos += 40;
            }
            if cq {
                assert_eq!(le(&b, pos, 8), common::CQ_DATA, "{t} cq_data");
                pos += 8;
            }
            if con {
                assert_eq!(le(&b, pos, 4), CONNID as u64, "{t} connid");
                pos += 4;
            }
            assert_eq!(&b[pos..], b"P", "{t} payload after the headers");
            let p = Packet::new_checked(&b[..]).unwrap();
            assert_eq!(p.header_len(), pos, "{t}");
            assert_eq!(p.rma_iov().len(), n, "{t}");
            assert_eq!(p.connid(), con.then_some(CONNID), "{t}");
            assert_eq!(
                p.sender_connid(),
                (raw || con).then_some(CONNID),
                "{t} sender connid"
            );
            assert_eq!(p.cq_data(), cq.then_some(common::CQ_DATA), "{t}");
            assert_eq!(Repr::parse(&p), r, "{t} round trip");
        }
        // Both raw address and connid: refused on emit and on parse.
        let mut r = Repr::new(t);
        r.rma_iov = &iovs[..n];
        r.raw_addr = Some(RawAddrHdr::new(addr));
        r.connid = Some(1);
        assert_eq!(
            r.emit(&mut [0u8; 256]),
            Err(Error::Content(ContentError::RawAddrAndConnid))
        );
    }
}

// WL §A.6: "Receivers skip 4 + addr_len taken from the wire. libfabric 1.10 sent
// addr_len = 32, i.e. a 36-byte header"; the last bytes beyond the 32-byte address are
// unwritten padding and must be ignored (§A.1).
#[test]
fn raw_address_length_is_taken_from_the_wire() {
    for addr_len in [32u32, 36, 40, 64] {
        let r = Repr {
            raw_addr: Some(RawAddrHdr {
                addr_len,
                addr: raw_addr(),
            }),
            cq_data: Some(5),
            ..Repr::new(T::EagerTagRtm).with(Tag, TAG)
        };
        let mut b = emit(&r);
        assert_eq!(b.len(), 16 + 4 + addr_len as usize + 8);
        // Garbage in the unwritten tail and in `pad` (efa_ep_addr @18) is ignored.
        for x in &mut b[16 + 4 + 32..16 + 4 + addr_len as usize] {
            *x = 0xA5;
        }
        b[16 + 4 + 18] = 0xA5;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.cq_data(), Some(5), "addr_len {addr_len}");
        assert_eq!(Repr::parse(&p), r, "addr_len {addr_len}");
    }
}

// WL §A.5 HANDSHAKE: optional headers "in this order, each 8 bytes, present only if its
// flag is set": CONNID (u32 + 4 pad), HOST_ID (u64), DEVICE_VERSION (u32 + 4 reserved),
// USER_RECV_QP (qpn @0, qkey @4), HMEM_P2P (u8 + 7 reserved); "the receiver walks to each
// header by adding up the sizes of the preceding present ones". Every subset, every word
// count 0..=4, reserved bytes ignored on parse and zero on emit.
#[test]
fn handshake_optional_headers_every_subset() {
    for words in 0..=4usize {
        for set in 0..32u32 {
            let mut r = Repr::new(T::Handshake);
            r.handshake.extra_info = ExtraInfo::with_words(words);
            for i in 0..words {
                r.handshake.extra_info.set_word(i, 0x1111 * (i as u64 + 1));
            }
            let on = |i: u32| set & (1 << i) != 0;
            r.connid = on(0).then_some(CONNID);
            r.handshake.host_id = on(1).then_some(0x0123_4567_89ab_cdef);
            r.handshake.device_version = on(2).then_some(0xEFA1);
            r.handshake.user_recv_qp = on(3).then_some(UserRecvQp { qpn: 17, qkey: 99 });
            r.handshake.hmem_p2p = on(4).then_some(1);
            let mut b = emit(&r);
            let fl = le(&b, 2, 2) as u16;
            assert_eq!(fl & flags::CONNID_HDR != 0, on(0));
            assert_eq!(fl & flags::HANDSHAKE_HOST_ID_HDR != 0, on(1));
            assert_eq!(fl & flags::HANDSHAKE_DEVICE_VERSION_HDR != 0, on(2));
            assert_eq!(fl & flags::HANDSHAKE_USER_RECV_QP_HDR != 0, on(3));
            assert_eq!(fl & flags::HANDSHAKE_HMEM_P2P_HDR != 0, on(4));
            assert_eq!(le(&b, 4, 4), 3 + words as u64);
            for i in 0..words {
                assert_eq!(le(&b, 8 + 8 * i, 8), 0x1111 * (i as u64 + 1));
            }
            let mut pos = 8 + 8 * words;
            let mut reserved = vec![];
            if on(0) {
                assert_eq!(le(&b, pos, 4), CONNID as u64);
                reserved.extend(pos + 4..pos + 8);
                pos += 8;
            }
            if on(1) {
                assert_eq!(le(&b, pos, 8), 0x0123_4567_89ab_cdef);
                pos += 8;
            }
            if on(2) {
                assert_eq!(le(&b, pos, 4), 0xEFA1);
                reserved.extend(pos + 4..pos + 8);
                pos += 8;
            }
            if on(3) {
                assert_eq!(le(&b, pos, 4), 17);
                assert_eq!(le(&b, pos + 4, 4), 99);
                pos += 8;
            }
            if on(4) {
                assert_eq!(b[pos], 1);
                reserved.extend(pos + 1..pos + 8);
                pos += 8;
            }
            assert_eq!(b.len(), pos, "words {words} set {set:05b}");
            for &i in &reserved {
                assert_eq!(b[i], 0, "reserved byte {i} emitted as zero");
                b[i] = 0xA5;
            }
            assert_eq!(
                Repr::parse_bytes(&b).unwrap(),
                r,
                "words {words} set {set:05b}"
            );
        }
    }
}

// WL §A.1: "Padding and reserved bytes are not zeroed ... Receivers must ignore every padding
// and reserved byte": ATOMRSP reserved @8, WRITE_RTA pad @20, DC_EAGER/DC_MEDIUM/DC_EAGER_RTW
// padding @12, and the connid slot of every fixed-connid type without CONNID_HDR.
#[test]
fn padding_and_reserved_bytes_are_ignored() {
    let iov = [RmaIov::new(1, 2, 3)];
    for (t, pad) in [
        (T::AtomRsp, 8..12),
        (T::WriteRta, 20..24),
        (T::DcEagerMsgRtm, 12..16),
        (T::DcEagerTagRtm, 12..16),
        (T::DcMediumMsgRtm, 12..16),
        (T::DcMediumTagRtm, 12..16),
        (T::DcEagerRtw, 12..16),
        (T::Cts, 4..8),
        (T::ReadRsp, 4..8),
        (T::Eor, 12..16),
        (T::Receipt, 12..16),
        (T::ReadNack, 12..16),
        (T::PeerError, 16..20),
    ] {
        let mut r = Repr::new(t).with(Field::ALL[0], 0);
        if t.layout().rma_iov {
            r.rma_iov = &iov;
        }
        for at in t.layout().fields {
            if !at.field.is_derived() {
                r = r.with(at.field, 7);
            }
        }
        let mut b = emit(&r);
        assert!(
            b[pad.clone()].iter().all(|&x| x == 0),
            "{t}: padding emitted as zero"
        );
        b[pad].fill(0xA5);
        assert_eq!(Repr::parse_bytes(&b).unwrap(), r, "{t}");
    }
}

// WL §A.1: "A receiver only rejects version < 4"; §A.2: 1 and 2 retired, 6 local only,
// 131/142-144/147 never sent or handled, the rest unknown; every type >= 64 is a REQ.
#[test]
fn version_and_type_classification() {
    for v in [4u8, 5, 0xFF] {
        let b = [64u8, v, 4, 0, 1, 0, 0, 0];
        assert_eq!(Repr::parse_bytes(&b).unwrap().version, v);
    }
    for v in [0u8, 1, 3] {
        let b = [64u8, v, 4, 0, 1, 0, 0, 0];
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::Content(ContentError::UnsupportedVersion(v))
        );
    }
    let wire: Vec<u8> = PacketType::ALL.iter().map(|t| t.id()).collect();
    let spec: Vec<u8> = (3..=12)
        .filter(|&i| i != 6)
        .chain(64..=76)
        .chain(128..=130)
        .chain(133..=141)
        .chain(145..=146)
        .collect();
    assert_eq!(wire, spec, "WL §A.2 handled types");
    for id in 0..=255u8 {
        let want = match id {
            1 | 2 => Some(ContentError::RetiredType(id)),
            6 => Some(ContentError::LocalOnlyType(id)),
            131 | 142..=144 | 147 => Some(ContentError::UnusedType(id)),
            _ if spec.contains(&id) => None,
            _ => Some(ContentError::UnknownType(id)),
        };
        assert_eq!(PacketType::from_id(id).err(), want, "type {id}");
    }
}

fn len_err(b: &[u8]) -> LengthError {
    match Packet::new_checked(b) {
        Err(Error::Length(e)) => e,
        other => panic!("{b:02x?}: expected a length error, got {other:?}"),
    }
}

// The crate's error contract (error.rs) on top of WL §A.6/§A.5 sizes: a truncated header is
// a length error that names the part that does not fit, the bytes needed from the start of
// the packet and the bytes available.
#[test]
fn length_errors_name_the_part_and_the_exact_lengths() {
    let e = |part, needed, available| LengthError {
        part,
        needed,
        available,
    };
    assert_eq!(len_err(&[64, 4]), e(Part::BaseHeader, 4, 2));
    assert_eq!(
        len_err(&hex("41040c0001000000 88776655")),
        e(Part::Mandatory("EAGER_TAGRTM"), 16, 12)
    );
    // EAGER_RTW with two rma_iov entries, one present.
    let mut b = hex("4604000002000000");
    b.extend_from_slice(&[0; 24]);
    assert_eq!(len_err(&b), e(Part::RmaIov, 56, 32));
    // raw address: its addr_len, then its 4 + addr_len bytes.
    assert_eq!(
        len_err(&hex("4004050001000000 2400")),
        e(Part::RawAddr, 12, 10)
    );
    let mut b = hex("4004050001000000 24000000");
    b.extend_from_slice(&[0; 30]);
    assert_eq!(len_err(&b), e(Part::RawAddr, 48, 42));
    // CQ data, then the 4-byte REQ connid.
    assert_eq!(
        len_err(&hex("4004068001000000 0102030405")),
        e(Part::CqData, 16, 13)
    );
    assert_eq!(
        len_err(&hex("4004068001000000 0102030405060708 0102")),
        e(Part::Connid, 20, 18)
    );
    // CTSDATA's 8-byte connid header.
    let mut b = hex("0404008007000000 0010000000000000 0020000000000000");
    b.extend_from_slice(&[1, 2, 3, 4]);
    assert_eq!(len_err(&b), e(Part::Connid, 32, 28));
    // HANDSHAKE: extra_info, then each optional header in order.
    assert_eq!(
        len_err(&hex("0904008005000000 00000000")),
        e(Part::ExtraInfo, 24, 12)
    );
    for (fl, part, base) in [
        (0x8000u16, Part::Connid, 24),
        (0x8001, Part::HostId, 32),
        (0x8003, Part::DeviceVersion, 40),
        (0x8007, Part::UserRecvQp, 48),
        (0x800f, Part::HmemP2p, 56),
    ] {
        let mut b = vec![9, 4];
        b.extend_from_slice(&fl.to_le_bytes());
        b.extend_from_slice(&4u32.to_le_bytes());
        b.resize(base - 1, 0);
        assert_eq!(len_err(&b), e(part, base, base - 1), "flags {fl:#x}");
    }
    // read_iov[] at the start of a LONGREAD payload, checked by the accessor.
    let mut b = hex("8004040006000000 0000100000000000 0500000002000000");
    b.extend_from_slice(&[0; 30]);
    let p = Packet::new_checked(&b[..]).unwrap();
    assert_eq!(p.read_iov(), Err(Error::Length(e(Part::ReadIov, 72, 54))));
    // Emit into a short buffer names the output buffer and the exact length.
    let r = Repr::new(T::EagerTagRtm);
    assert_eq!(
        r.emit(&mut [0u8; 15]),
        Err(Error::Length(e(Part::OutputBuffer, 16, 15)))
    );
}

// WL §A.6: "The mandatory size is base_hdr_size + rma_iov_count*24"; error.rs: "a caller
// can retry a length error with more bytes, never a content error". A header that no
// number of bytes can make acceptable (one the crate refuses as longer than 64 KiB) must be
// reported as the content error it is, whatever the buffer length; a length error whose
// `needed` bytes, once supplied, turn into `TooLong` misleads a caller that waits for them.
#[test]
fn an_unacceptable_header_is_a_content_error_whatever_the_buffer_length() {
    let count = 2730u32; // <= the accepted maximum rma_iov_count
    for (ty, fl) in [
        (139u8, 0u16),                    // DC_EAGER_RTW: 16 + 2730*24 = 65536
        (71, 0),                          // LONGCTS_RTW: 24 + 2730*24 = 65544
        (70, flags::REQ_OPT_CQ_DATA_HDR), // EAGER_RTW: 65528 + 8
    ] {
        let mut b = vec![ty, 4];
        b.extend_from_slice(&fl.to_le_bytes());
        b.extend_from_slice(&count.to_le_bytes());
        b.resize(24, 0);
        for len in [65000usize, 65535, 65536, 65544, 70000] {
            b.resize(len, 0);
            let got = Packet::new_checked(&b[..]).map(|p| p.header_len());
            match got {
                Err(Error::Content(ContentError::TooLong)) => {}
                Err(Error::Length(e)) => {
                    // A length error is acceptable only if supplying `needed` bytes does
                    // not turn it into a content error.
                    let mut more = b.clone();
                    more.resize(e.needed, 0);
                    let then = Packet::new_checked(&more[..]).map(|p| p.header_len());
                    assert!(
                        !matches!(then, Err(Error::Content(_))),
                        "type {ty} flags {fl:#x} len {len}: {e:?}, then with {} bytes {then:?}",
                        e.needed
                    );
                }
                other => panic!("type {ty} len {len}: {other:?}"),
            }
        }
    }
}

// No panic on lengths and counts near the integer limits (brief; WL §A.6 counts multiply
// by 24): u32::MAX counts, addr_len and nextra_p3, u64::MAX field values.
#[test]
fn extreme_counts_and_lengths_never_panic() {
    let mut body = [0xFFu8; 200];
    for ty in 0..=255u8 {
        for fl in [0u16, 0xFFFF, 0x8003, 0x0001, 0x0002] {
            body[0] = ty;
            body[1] = 4;
            body[2..4].copy_from_slice(&fl.to_le_bytes());
            for cut in [0usize, 3, 4, 8, 12, 24, 48, 64, 100, 200] {
                if let Ok(p) = Packet::new_checked(&body[..cut]) {
                    let _ = (p.read_iov(), p.data(), p.raw_addr(), p.extra_info());
                    let r = Repr::parse(&p);
                    let _ = r.to_vec();
                }
            }
        }
    }
    // Reprs with out-of-range values: typed errors, no panic, buffer_len computable.
    let big = [RmaIov::new(u64::MAX, u64::MAX, u64::MAX); 2731];
    let r = Repr {
        rma_iov: &big,
        ..Repr::new(T::EagerRtw)
    };
    let _ = r.buffer_len();
    assert!(matches!(
        r.emit(&mut [0u8; 8]),
        Err(Error::Content(ContentError::IovCountTooLarge {
            count: 2731,
            ..
        }))
    ));
    let r = Repr {
        raw_addr: Some(RawAddrHdr {
            addr_len: u32::MAX,
            addr: raw_addr(),
        }),
        ..Repr::new(T::EagerMsgRtm)
    };
    let _ = r.buffer_len();
    assert!(matches!(
        r.emit(&mut [0u8; 64]),
        Err(Error::Content(ContentError::AddrLenOutOfRange { .. }))
    ));
    let r = Repr::new(T::ShortRtr).with(RecvLength, u32::MAX as u64 + 1);
    assert_eq!(
        r.emit(&mut [0u8; 64]),
        Err(Error::Content(ContentError::FieldOverflow {
            field: "recv_length",
            value: 1 << 32
        }))
    );
    let r = Repr::new(T::Cts).with(RecvLength, u64::MAX);
    assert_eq!(Repr::parse_bytes(&emit(&r)).unwrap(), r);
}

// WL §A.6 "Where the payload starts": LONGREAD payload = read_iov[] only, RUNTREAD =
// read_iov[] then runt data, COMPARE_RTA = buf then compare.
#[test]
fn payload_kinds() {
    let iovs = [RmaIov::new(1, 2, 3), RmaIov::new(4, 5, 6)];
    let mut payload = RmaIov::slice_as_bytes(&iovs).to_vec();
    payload.extend_from_slice(b"runt");
    let r = Repr {
        payload: &payload,
        ..Repr::new(T::RuntreadTagRtm)
            .with(ReadIovCount, 2)
            .with(RuntLength, 4)
    };
    let b = emit(&r);
    let p = Packet::new_checked(&b[..]).unwrap();
    assert_eq!(p.read_iov().unwrap(), &iovs);
    assert_eq!(p.data().unwrap(), b"runt");
    let r = Repr {
        payload: &payload[..48],
        ..Repr::new(T::LongreadRtw).with(ReadIovCount, 2)
    };
    let b = emit(&r);
    assert_eq!(
        Packet::new_checked(&b[..]).unwrap().read_iov().unwrap(),
        &iovs
    );
    let r = Repr {
        rma_iov: &iovs[..1],
        payload: b"AAAABBBB",
        ..Repr::new(T::CompareRta)
    };
    let b = emit(&r);
    let p = Packet::new_checked(&b[..]).unwrap();
    assert_eq!(p.compare_operands(), Some((&b"AAAA"[..], &b"BBBB"[..])));
}

// WL §E.2 (big-endian): every TM vector byte-exact in both directions (parse, and emit).
// "TMH FIN (copy of the RNDV TMH, opcode 2)" is a TMH.
#[test]
fn tm_vectors_both_directions() {
    let tmhs = [
        (
            "03000000aabbccdd 1122334455667788",
            Tmh {
                opcode: TmOpcode::Eager,
                reserved: [0; 3],
                app_ctx: 0xAABB_CCDD,
                tag: 0x1122_3344_5566_7788,
            },
        ),
        (
            "0000000000000000 0000000000000000",
            Tmh {
                opcode: TmOpcode::NoTag,
                reserved: [0; 3],
                app_ctx: 0,
                tag: 0,
            },
        ),
        (
            "0100000000000001 deadbeef00000001",
            Tmh {
                opcode: TmOpcode::Rndv,
                reserved: [0; 3],
                app_ctx: 1,
                tag: 0xDEAD_BEEF_0000_0001,
            },
        ),
        (
            "0200000000000001 deadbeef00000001",
            Tmh {
                opcode: TmOpcode::Fin,
                reserved: [0; 3],
                app_ctx: 1,
                tag: 0xDEAD_BEEF_0000_0001,
            },
        ),
    ];
    for (h, t) in tmhs {
        let b = hex(h);
        assert_eq!(Tmh::parse(&b).unwrap(), t, "{h}");
        let mut out = [0xEEu8; 16];
        assert_eq!(t.emit(&mut out), Ok(16));
        assert_eq!(out.to_vec(), b, "{h}");
    }
    let rvh = Rvh {
        va: 0x0000_7f00_1234_5678,
        rkey: 0x1234,
        len: 65536,
    };
    let b = hex("00007f0012345678 0000123400010000");
    assert_eq!(Rvh::parse(&b).unwrap(), rvh);
    let mut out = [0u8; 16];
    rvh.emit(&mut out).unwrap();
    assert_eq!(out.to_vec(), b);
    // WL §B: ibv_tmh_op numeric order (EAGER is 3), and unknown opcodes are content errors.
    assert_eq!(
        [
            TmOpcode::NoTag,
            TmOpcode::Rndv,
            TmOpcode::Fin,
            TmOpcode::Eager
        ]
        .map(|o| o as u8),
        [0, 1, 2, 3]
    );
    let mut bad = hex("0400000000000000 0000000000000000");
    assert_eq!(
        Tmh::parse(&bad),
        Err(Error::Content(ContentError::UnknownTmOpcode(4)))
    );
    bad.truncate(15);
    assert_eq!(
        Tmh::parse(&bad),
        Err(Error::Length(LengthError {
            part: Part::Tmh,
            needed: 16,
            available: 15
        }))
    );
    // RNDV = TMH | RVH | optional data; eager = TMH | payload.
    let mut rndv = hex("0100000000000001 deadbeef00000001 00007f0012345678 0000123400010000");
    rndv.extend_from_slice(b"meta");
    let m = TmRepr::parse_bytes(&rndv).unwrap();
    assert_eq!(m.rvh, Some(rvh));
    assert_eq!(m.payload, b"meta");
    let mut out = vec![0u8; m.buffer_len()];
    assert_eq!(m.emit(&mut out), Ok(rndv.len()));
    assert_eq!(out, rndv);
}

// WL §B "Message formats": "FIN = a copy of the original TMH (with opcode FIN), sent after
// the receiver's RDMA-Read"; rdma-core-tag-matching.md L82 "Rendezvous response: TMH";
// WL §C.2: UCX's FIN "arrives as a TM_NO_TAG CQE whose tmh->opcode == IBV_TMH_FIN"; WL §E.2
// gives the FIN as a 16-byte TMH. A 16-byte FIN message must therefore parse as a TM message
// (without an RVH), and emit back to the same 16 bytes. (rdma-core-tag-matching.md L231
// also allows the TMH+RVH form, which must keep working.)
#[test]
fn a_fin_of_only_a_tmh_is_a_valid_tm_message() {
    let fin = hex("0200000000000001 deadbeef00000001");
    let p = TmPacket::new_checked(&fin[..]).expect("16-byte FIN");
    assert_eq!(p.opcode(), TmOpcode::Fin);
    assert_eq!(p.header_len(), 16);
    assert_eq!(p.rvh(), None);
    let r = TmRepr::parse(&p);
    assert_eq!(r.tmh.tag, 0xDEAD_BEEF_0000_0001);
    assert_eq!(r.payload, b"");
    let mut out = vec![0u8; r.buffer_len()];
    assert_eq!(r.emit(&mut out), Ok(16));
    assert_eq!(out, fin);
    // The TMH+RVH form still parses with its RVH.
    let long = hex("0200000000000001 deadbeef00000001 00007f0012345678 0000123400010000");
    let r = TmRepr::parse_bytes(&long).unwrap();
    assert!(r.rvh.is_some());
    assert_eq!(r.buffer_len(), 32);
    // An RVH cut short is still a length error naming the RVH.
    assert_eq!(
        TmPacket::new_checked(&long[..20]).unwrap_err(),
        Error::Length(LengthError {
            part: Part::Rvh,
            needed: 32,
            available: 20
        })
    );
}

// A FIN has no payload (WL §B: a copy of the TMH, or of TMH and RVH): a TMH-only FIN
// with bytes after it would read back as a FIN with an RVH, so emit refuses it, naming
// what; an RNDV without an RVH and an EAGER with one are refused as before.
#[test]
fn a_fin_without_rvh_has_no_payload_and_rndv_needs_its_rvh() {
    let tmh = |opcode| Tmh {
        opcode,
        reserved: [0; 3],
        app_ctx: 1,
        tag: 2,
    };
    let rvh = Rvh {
        va: 3,
        rkey: 4,
        len: 5,
    };
    let mut out = [0u8; 64];
    let fin_payload = TmRepr {
        tmh: tmh(TmOpcode::Fin),
        rvh: None,
        payload: &[7; 16],
    };
    let err = fin_payload.emit(&mut out).unwrap_err();
    assert!(format!("{err}").contains("payload without an RVH"), "{err}");
    for (opcode, rvh) in [(TmOpcode::Rndv, None), (TmOpcode::Eager, Some(rvh))] {
        let r = TmRepr {
            tmh: tmh(opcode),
            rvh,
            payload: &[],
        };
        assert!(r.emit(&mut out).is_err(), "{opcode:?} {rvh:?}");
    }
    // Both FIN forms emit and parse back.
    for rvh in [None, Some(rvh)] {
        let r = TmRepr {
            tmh: tmh(TmOpcode::Fin),
            rvh,
            payload: &[],
        };
        let n = r.emit(&mut out).unwrap();
        assert_eq!(n, r.buffer_len());
        assert_eq!(TmRepr::parse_bytes(&out[..n]).unwrap(), r);
    }
}

// WL §B: all TMH/RVH fields big-endian (tm_types.h __be32/__be64), confirmed by
// rdma-core's tests: tag @8 BE, va @16 BE, rkey @24 BE, len @28 BE in an RNDV message.
#[test]
fn tm_fields_are_big_endian_at_the_c_offsets() {
    let r = TmRepr {
        tmh: Tmh {
            opcode: TmOpcode::Rndv,
            reserved: [0; 3],
            app_ctx: 0x0102_0304,
            tag: 0x1112_1314_1516_1718,
        },
        rvh: Some(Rvh {
            va: 0x2122_2324_2526_2728,
            rkey: 0x3132_3334,
            len: 0x4142_4344,
        }),
        payload: &[],
    };
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b).unwrap();
    assert_eq!(
        b,
        hex("0100000001020304 1112131415161718 2122232425262728 3132333441424344")
    );
}

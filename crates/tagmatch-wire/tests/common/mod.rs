//! The test vectors of wire-layouts.md §E, shared by the integration tests.
#![allow(dead_code)]

use tagmatch_wire::efa::{flags, Field, PacketType, RawAddr, RawAddrHdr, Repr, RmaIov, UserRecvQp};

pub const CONNID: u32 = 0xA1B2_C3D4;
pub const TAG: u64 = 0x1122_3344_5566_7788;
pub const CQ_DATA: u64 = 0xCAFE_BABE_1234_5678;
pub const IOV: RmaIov = RmaIov::new(0x7F00_0000_1000, 0x1000, 0xAB_CDEF);
pub static IOVS: [RmaIov; 1] = [IOV];
pub const IOV_HEX: &str = "00100000007f0000 0010000000000000 efcdab0000000000";

pub fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("test vector hex"))
        .collect()
}

pub fn raw_addr() -> RawAddr {
    let mut gid = [0u8; 16];
    gid[0] = 0xfe;
    gid[1] = 0x80;
    gid[15] = 1;
    RawAddr {
        gid,
        qpn: 16,
        qkey: CONNID,
        next: 0,
    }
}

/// One EFA vector: its name, bytes, and the representation its documented fields give.
pub struct Vector {
    pub name: &'static str,
    pub bytes: Vec<u8>,
    pub repr: Repr<'static>,
}

fn v(name: &'static str, h: &str, repr: Repr<'static>) -> Vector {
    Vector {
        name,
        bytes: hex(h),
        repr,
    }
}

pub fn efa_vectors() -> Vec<Vector> {
    use Field::*;
    use PacketType::*;
    let r = Repr::new;
    let iov = |h: &str| format!("{h} {IOV_HEX}");
    let mut out =
        vec![
        v("V01", "4004040001000000", r(EagerMsgRtm).with(MsgId, 1)),
        v(
            "V02",
            "41040c0001000000 8877665544332211",
            r(EagerTagRtm).with(MsgId, 1).with(Tag, TAG),
        ),
        v(
            "V04",
            "41040e8001000000 8877665544332211 78563412bebafeca d4c3b2a1",
            Repr {
                cq_data: Some(CQ_DATA),
                connid: Some(CONNID),
                ..r(EagerTagRtm).with(MsgId, 1).with(Tag, TAG)
            },
        ),
        v(
            "V05",
            "4004048002000000 d4c3b2a1",
            Repr {
                connid: Some(CONNID),
                ..r(EagerMsgRtm).with(MsgId, 2)
            },
        ),
        v(
            "V06",
            "4204040003000000 0000010000000000 0020000000000000",
            r(MediumMsgRtm)
                .with(MsgId, 3)
                .with(MsgLength, 0x10000)
                .with(SegOffset, 0x2000),
        ),
        v(
            "V07",
            "43040c0003000000 0000010000000000 0020000000000000 8877665544332211",
            r(MediumTagRtm)
                .with(MsgId, 3)
                .with(MsgLength, 0x10000)
                .with(SegOffset, 0x2000)
                .with(Tag, TAG),
        ),
        v(
            "V08",
            "4404040004000000 0000100000000000 0500000010000000",
            r(LongctsMsgRtm)
                .with(MsgId, 4)
                .with(MsgLength, 0x100000)
                .with(SendId, 5)
                .with(CreditRequest, 16),
        ),
        v(
            "V09",
            "45040c0004000000 0000100000000000 0500000010000000 8877665544332211",
            r(LongctsTagRtm)
                .with(MsgId, 4)
                .with(MsgLength, 0x100000)
                .with(SendId, 5)
                .with(CreditRequest, 16)
                .with(Tag, TAG),
        ),
        v(
            "V11",
            &iov("8004040006000000 0000100000000000 0500000001000000"),
            Repr {
                payload: RmaIov::slice_as_bytes(&IOVS),
                ..r(LongreadMsgRtm)
                    .with(MsgId, 6)
                    .with(MsgLength, 0x100000)
                    .with(SendId, 5)
                    .with(ReadIovCount, 1)
            },
        ),
        v(
            "V12",
            "81040c0006000000 0000100000000000 0500000001000000 8877665544332211",
            r(LongreadTagRtm)
                .with(MsgId, 6)
                .with(MsgLength, 0x100000)
                .with(SendId, 5)
                .with(ReadIovCount, 1)
                .with(Tag, TAG),
        ),
        v(
            "V13",
            "9104040007000000 0000100000000000 0500000001000000 0000000000000000 0040000000000000",
            r(RuntreadMsgRtm)
                .with(MsgId, 7)
                .with(MsgLength, 0x100000)
                .with(SendId, 5)
                .with(ReadIovCount, 1)
                .with(SegOffset, 0)
                .with(RuntLength, 0x4000),
        ),
        v(
            "V15",
            "8504040008000000 0500000000000000",
            r(DcEagerMsgRtm).with(MsgId, 8).with(SendId, 5),
        ),
        v(
            "V16",
            "86040c0008000000 0500000000000000 8877665544332211",
            r(DcEagerTagRtm).with(MsgId, 8).with(SendId, 5).with(Tag, TAG),
        ),
        v(
            "V17",
            "8704040009000000 0500000000000000 0000010000000000 0020000000000000",
            r(DcMediumMsgRtm)
                .with(MsgId, 9)
                .with(SendId, 5)
                .with(MsgLength, 0x10000)
                .with(SegOffset, 0x2000),
        ),
        v(
            "V18",
            "88040c0009000000 0500000000000000 0000010000000000 0020000000000000 8877665544332211",
            r(DcMediumTagRtm)
                .with(MsgId, 9)
                .with(SendId, 5)
                .with(MsgLength, 0x10000)
                .with(SegOffset, 0x2000)
                .with(Tag, TAG),
        ),
        v(
            "V19",
            "8904040004000000 0000100000000000 0500000010000000",
            r(DcLongctsMsgRtm)
                .with(MsgId, 4)
                .with(MsgLength, 0x100000)
                .with(SendId, 5)
                .with(CreditRequest, 16),
        ),
        v(
            "V20",
            "8a040c0004000000 0000100000000000 0500000010000000 8877665544332211",
            r(DcLongctsTagRtm)
                .with(MsgId, 4)
                .with(MsgLength, 0x100000)
                .with(SendId, 5)
                .with(CreditRequest, 16)
                .with(Tag, TAG),
        ),
        v(
            "V21",
            &iov("4604000001000000"),
            Repr {
                rma_iov: &IOVS,
                ..r(EagerRtw)
            },
        ),
        v(
            "V23",
            &iov("4704000001000000 0000100000000000 0500000010000000"),
            Repr {
                rma_iov: &IOVS,
                ..r(LongctsRtw)
                    .with(MsgLength, 0x100000)
                    .with(SendId, 5)
                    .with(CreditRequest, 16)
            },
        ),
        v(
            "V24",
            &iov("8204000001000000 0000100000000000 0500000001000000"),
            Repr {
                rma_iov: &IOVS,
                ..r(LongreadRtw)
                    .with(MsgLength, 0x100000)
                    .with(SendId, 5)
                    .with(ReadIovCount, 1)
            },
        ),
        v(
            "V25",
            &iov("8b04000001000000 0500000000000000"),
            Repr {
                rma_iov: &IOVS,
                ..r(DcEagerRtw).with(SendId, 5)
            },
        ),
        v(
            "V26",
            &iov("8c04000001000000 0000100000000000 0500000010000000"),
            Repr {
                rma_iov: &IOVS,
                ..r(DcLongctsRtw)
                    .with(MsgLength, 0x100000)
                    .with(SendId, 5)
                    .with(CreditRequest, 16)
            },
        ),
        v(
            "V27",
            &iov("4804000001000000 0010000000000000 0700000000100000"),
            Repr {
                rma_iov: &IOVS,
                ..r(ShortRtr)
                    .with(MsgLength, 0x1000)
                    .with(RecvId, 7)
                    .with(RecvLength, 0x1000)
            },
        ),
        v(
            "V28",
            &iov("4904000001000000 0000100000000000 0700000000000100"),
            Repr {
                rma_iov: &IOVS,
                ..r(LongctsRtr)
                    .with(MsgLength, 0x100000)
                    .with(RecvId, 7)
                    .with(RecvLength, 0x10000)
            },
        ),
        v(
            "V29",
            &iov("4a0420000a000000 0100000007000000 0200000000000000"),
            Repr {
                rma_iov: &IOVS,
                ..r(WriteRta)
                    .with(MsgId, 10)
                    .with(AtomicDatatype, 7)
                    .with(AtomicOp, 2)
            },
        ),
        v(
            "V30",
            &iov("4b0420000b000000 0100000007000000 0a00000007000000"),
            Repr {
                rma_iov: &IOVS,
                ..r(FetchRta)
                    .with(MsgId, 11)
                    .with(AtomicDatatype, 7)
                    .with(AtomicOp, 10)
                    .with(RecvId, 7)
            },
        ),
        v(
            "V31",
            &iov("4c0420000c000000 0100000007000000 0c00000007000000"),
            Repr {
                rma_iov: &IOVS,
                ..r(CompareRta)
                    .with(MsgId, 12)
                    .with(AtomicDatatype, 7)
                    .with(AtomicOp, 12)
                    .with(RecvId, 7)
            },
        ),
        v(
            "V33",
            "03040080d4c3b2a1 0500000007000000 0000020000000000",
            Repr {
                connid: Some(CONNID),
                ..r(Cts)
                    .with(SendId, 5)
                    .with(RecvId, 7)
                    .with(RecvLength, 0x20000)
            },
        ),
        v(
            "V35",
            "0404000007000000 0010000000000000 0020000000000000",
            r(CtsData)
                .with(RecvId, 7)
                .with(SegLength, 0x1000)
                .with(SegOffset, 0x2000),
        ),
        v(
            "V37",
            "05040080d4c3b2a1 0500000007000000 0010000000000000",
            Repr {
                connid: Some(CONNID),
                ..r(ReadRsp)
                    .with(RecvId, 5)
                    .with(SendId, 7)
                    .with(SegLength, 0x1000)
            },
        ),
        v(
            "V38",
            "0704008005000000 07000000d4c3b2a1",
            Repr {
                connid: Some(CONNID),
                ..r(Eor).with(SendId, 5).with(RecvId, 7)
            },
        ),
        v(
            "V39",
            "08040080d4c3b2a1 0000000007000000 0800000000000000",
            Repr {
                connid: Some(CONNID),
                ..r(AtomRsp).with(RecvId, 7).with(SegLength, 8)
            },
        ),
        v(
            "V40",
            "0a04008005000000 08000000d4c3b2a1",
            Repr {
                connid: Some(CONNID),
                ..r(Receipt).with(TxId, 5).with(MsgId, 8)
            },
        ),
        v(
            "V41",
            "0b04008005000000 07000000d4c3b2a1",
            Repr {
                connid: Some(CONNID),
                ..r(ReadNack).with(SendId, 5).with(RecvId, 7)
            },
        ),
    ];
    let mut hs = r(Handshake);
    hs.connid = Some(CONNID);
    hs.handshake.extra_info.set_word(0, 0x5b);
    hs.handshake.host_id = Some(0x0123_4567_89ab_cdef);
    hs.handshake.device_version = Some(0xEFA1);
    out.push(v(
        "V43",
        "0904038004000000 5b00000000000000 d4c3b2a100000000 efcdab8967452301 a1ef000000000000",
        hs,
    ));
    let mut hs = r(Handshake);
    hs.connid = Some(CONNID);
    out.push(v(
        "V45",
        "0904008004000000 0000000000000000 d4c3b2a100000000",
        hs,
    ));
    out
}

/// A few more packets that exercise what the §E vectors do not: raw address, a CTSDATA
/// connid trailer, every HANDSHAKE optional header, PEER_ERROR, unknown flag bits.
pub fn extra_vectors() -> Vec<(&'static str, Repr<'static>)> {
    use Field::*;
    use PacketType::*;
    let r = Repr::new;
    let mut hs = r(Handshake);
    hs.connid = Some(CONNID);
    hs.handshake.extra_info.set(9, true);
    hs.handshake.extra_info.set(130, true);
    hs.handshake.host_id = Some(7);
    hs.handshake.device_version = Some(0xEFA0);
    hs.handshake.user_recv_qp = Some(UserRecvQp { qpn: 3, qkey: 4 });
    hs.handshake.hmem_p2p = Some(1);
    vec![
        (
            "raw address + cq data",
            Repr {
                raw_addr: Some(RawAddrHdr::new(raw_addr())),
                cq_data: Some(CQ_DATA),
                payload: b"payload",
                ..r(MediumTagRtm)
                    .with(MsgId, 3)
                    .with(MsgLength, 0x10000)
                    .with(SegOffset, 0x2000)
                    .with(Tag, TAG)
            },
        ),
        (
            "raw address len 32 (libfabric 1.10)",
            Repr {
                raw_addr: Some(RawAddrHdr {
                    addr_len: 32,
                    addr: raw_addr(),
                }),
                ..r(EagerMsgRtm).with(MsgId, 9)
            },
        ),
        (
            "ctsdata connid trailer",
            Repr {
                connid: Some(CONNID),
                payload: b"data",
                ..r(CtsData).with(RecvId, 7).with(SegLength, 4)
            },
        ),
        ("handshake all headers", hs),
        (
            "peer error",
            Repr {
                connid: Some(CONNID),
                ..r(PeerError)
                    .with(OpId, 1)
                    .with(RefKind, 2)
                    .with(ProvErrno, 3)
            },
        ),
        (
            "unknown flags kept",
            Repr {
                flags: flags::REQ_MSG | 0x0400 | flags::REQ_READ_NACK,
                ..r(LongctsMsgRtm).with(MsgId, 1)
            },
        ),
        (
            "rta with iovs and cq data",
            Repr {
                rma_iov: &IOVS,
                cq_data: Some(1),
                connid: Some(2),
                payload: &[1, 2, 3, 4, 5, 6, 7, 8],
                ..r(DcWriteRta).with(MsgId, 1).with(SendId, 9)
            },
        ),
    ]
}

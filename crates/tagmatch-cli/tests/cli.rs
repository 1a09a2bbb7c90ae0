//! Black-box tests of the `tagmatch` binary: every wire-layouts §E vector decodes to its
//! documented fields, encode(decode(x)) == x (padding zeroed), and malformed input exits 1
//! with one line on stderr.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};
use tagmatch_wire::efa::PacketType;

const BIN: &str = env!("CARGO_BIN_EXE_tagmatch");

const CONNID: u64 = 0xA1B2_C3D4;
const TAG: u64 = 0x1122_3344_5566_7788;
const CQ_DATA: u64 = 0xCAFE_BABE_1234_5678;
/// wire-layouts §E `<iov>`: addr 0x7F0000001000, len 0x1000, key 0xABCDEF.
const IOV_HEX: &str = "00100000007f0000 0010000000000000 efcdab0000000000";

fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn tagmatch");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        pipe.write_all(input).expect("write stdin");
    }
    child.wait_with_output().expect("wait for tagmatch")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs a command that must succeed and returns its stdout.
fn ok(args: &[&str]) -> String {
    let o = run(args, None);
    assert!(
        o.status.success(),
        "{args:?}: status {:?}, stderr {}",
        o.status,
        stderr(&o)
    );
    assert!(o.stderr.is_empty(), "{args:?}: {}", stderr(&o));
    stdout(&o)
}

/// Runs a command that must fail with status 1 and exactly one stderr line; returns it.
fn fails(args: &[&str], stdin: Option<&[u8]>) -> String {
    let o = run(args, stdin);
    assert_eq!(o.status.code(), Some(1), "{args:?}: stderr {}", stderr(&o));
    assert!(o.stdout.is_empty(), "{args:?}: stdout {}", stdout(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(err.starts_with("tagmatch: "), "{err}");
    err
}

fn decode(format: &str, hex: &str) -> Value {
    let out = ok(&["decode", format, hex]);
    assert_eq!(out.lines().count(), 1, "one JSON object per line: {out}");
    serde_json::from_str(&out).expect("decode prints JSON")
}

fn encode(format: &str, json: &str) -> String {
    ok(&["encode", format, json]).trim().to_owned()
}

fn compact(hex: &str) -> String {
    hex.chars().filter(|c| !c.is_whitespace()).collect()
}

struct Vector {
    name: &'static str,
    hex: String,
    ty: &'static str,
    fields: Vec<(&'static str, Value)>,
}

fn v(
    name: &'static str,
    hex: &str,
    ty: &'static str,
    fields: Vec<(&'static str, Value)>,
) -> Vector {
    Vector {
        name,
        hex: compact(hex),
        ty,
        fields,
    }
}

fn iov() -> Value {
    json!([{"addr": 0x7F00_0000_1000u64, "len": 0x1000, "key": 0xAB_CDEF}])
}

/// wire-layouts §E.1, with the values the document lists for each vector.
fn efa_vectors() -> Vec<Vector> {
    let with_iov = |h: &str| format!("{h} {IOV_HEX}");
    vec![
        v(
            "V01",
            "4004040001000000",
            "EAGER_MSGRTM",
            vec![
                ("type_id", json!(64)),
                ("flags", json!(4)),
                ("msg_id", json!(1)),
                ("header_len", json!(8)),
            ],
        ),
        v(
            "V02",
            "41040c0001000000 8877665544332211",
            "EAGER_TAGRTM",
            vec![
                ("flags", json!(0x0c)),
                ("msg_id", json!(1)),
                ("tag", json!(TAG)),
            ],
        ),
        v(
            "V04",
            "41040e8001000000 8877665544332211 78563412bebafeca d4c3b2a1",
            "EAGER_TAGRTM",
            vec![
                ("flags", json!(0x800e)),
                ("msg_id", json!(1)),
                ("tag", json!(TAG)),
                ("cq_data", json!(CQ_DATA)),
                ("connid", json!(CONNID)),
                ("header_len", json!(28)),
                ("payload_len", json!(0)),
            ],
        ),
        v(
            "V05",
            "4004048002000000 d4c3b2a1",
            "EAGER_MSGRTM",
            vec![
                ("flags", json!(0x8004)),
                ("msg_id", json!(2)),
                ("connid", json!(CONNID)),
                ("header_len", json!(12)),
            ],
        ),
        v(
            "V06",
            "4204040003000000 0000010000000000 0020000000000000",
            "MEDIUM_MSGRTM",
            vec![
                ("msg_id", json!(3)),
                ("msg_length", json!(0x10000)),
                ("seg_offset", json!(0x2000)),
            ],
        ),
        v(
            "V07",
            "43040c0003000000 0000010000000000 0020000000000000 8877665544332211",
            "MEDIUM_TAGRTM",
            vec![
                ("msg_id", json!(3)),
                ("msg_length", json!(0x10000)),
                ("seg_offset", json!(0x2000)),
                ("tag", json!(TAG)),
            ],
        ),
        v(
            "V08",
            "4404040004000000 0000100000000000 0500000010000000",
            "LONGCTS_MSGRTM",
            vec![
                ("msg_id", json!(4)),
                ("msg_length", json!(0x100000)),
                ("send_id", json!(5)),
                ("credit_request", json!(16)),
            ],
        ),
        v(
            "V09",
            "45040c0004000000 0000100000000000 0500000010000000 8877665544332211",
            "LONGCTS_TAGRTM",
            vec![
                ("msg_id", json!(4)),
                ("msg_length", json!(0x100000)),
                ("send_id", json!(5)),
                ("credit_request", json!(16)),
                ("tag", json!(TAG)),
            ],
        ),
        v(
            "V11",
            &with_iov("8004040006000000 0000100000000000 0500000001000000"),
            "LONGREAD_MSGRTM",
            vec![
                ("msg_id", json!(6)),
                ("msg_length", json!(0x100000)),
                ("send_id", json!(5)),
                ("read_iov_count", json!(1)),
                ("read_iov", iov()),
                ("header_len", json!(24)),
                ("payload_len", json!(24)),
            ],
        ),
        v(
            "V12",
            "81040c0006000000 0000100000000000 0500000001000000 8877665544332211",
            "LONGREAD_TAGRTM",
            vec![
                ("msg_id", json!(6)),
                ("read_iov_count", json!(1)),
                ("tag", json!(TAG)),
                ("read_iov", json!([])),
                ("payload_len", json!(0)),
            ],
        ),
        v(
            "V13",
            "9104040007000000 0000100000000000 0500000001000000 0000000000000000 0040000000000000",
            "RUNTREAD_MSGRTM",
            vec![
                ("msg_id", json!(7)),
                ("msg_length", json!(0x100000)),
                ("send_id", json!(5)),
                ("read_iov_count", json!(1)),
                ("seg_offset", json!(0)),
                ("runt_length", json!(0x4000)),
                ("header_len", json!(40)),
            ],
        ),
        v(
            "V15",
            "8504040008000000 0500000000000000",
            "DC_EAGER_MSGRTM",
            vec![("msg_id", json!(8)), ("send_id", json!(5))],
        ),
        v(
            "V16",
            "86040c0008000000 0500000000000000 8877665544332211",
            "DC_EAGER_TAGRTM",
            vec![
                ("msg_id", json!(8)),
                ("send_id", json!(5)),
                ("tag", json!(TAG)),
            ],
        ),
        v(
            "V17",
            "8704040009000000 0500000000000000 0000010000000000 0020000000000000",
            "DC_MEDIUM_MSGRTM",
            vec![
                ("msg_id", json!(9)),
                ("send_id", json!(5)),
                ("msg_length", json!(0x10000)),
                ("seg_offset", json!(0x2000)),
            ],
        ),
        v(
            "V18",
            "88040c0009000000 0500000000000000 0000010000000000 0020000000000000 8877665544332211",
            "DC_MEDIUM_TAGRTM",
            vec![
                ("msg_id", json!(9)),
                ("send_id", json!(5)),
                ("msg_length", json!(0x10000)),
                ("seg_offset", json!(0x2000)),
                ("tag", json!(TAG)),
                ("header_len", json!(40)),
            ],
        ),
        v(
            "V19",
            "8904040004000000 0000100000000000 0500000010000000",
            "DC_LONGCTS_MSGRTM",
            vec![
                ("msg_id", json!(4)),
                ("msg_length", json!(0x100000)),
                ("send_id", json!(5)),
                ("credit_request", json!(16)),
            ],
        ),
        v(
            "V20",
            "8a040c0004000000 0000100000000000 0500000010000000 8877665544332211",
            "DC_LONGCTS_TAGRTM",
            vec![
                ("msg_id", json!(4)),
                ("credit_request", json!(16)),
                ("tag", json!(TAG)),
            ],
        ),
        v(
            "V21",
            &with_iov("4604000001000000"),
            "EAGER_RTW",
            vec![
                ("flags", json!(0)),
                ("rma_iov_count", json!(1)),
                ("rma_iov", iov()),
                ("header_len", json!(32)),
            ],
        ),
        v(
            "V23",
            &with_iov("4704000001000000 0000100000000000 0500000010000000"),
            "LONGCTS_RTW",
            vec![
                ("rma_iov_count", json!(1)),
                ("msg_length", json!(0x100000)),
                ("send_id", json!(5)),
                ("credit_request", json!(16)),
                ("rma_iov", iov()),
            ],
        ),
        v(
            "V24",
            &with_iov("8204000001000000 0000100000000000 0500000001000000"),
            "LONGREAD_RTW",
            vec![
                ("rma_iov_count", json!(1)),
                ("msg_length", json!(0x100000)),
                ("send_id", json!(5)),
                ("read_iov_count", json!(1)),
                ("rma_iov", iov()),
                ("read_iov", json!([])),
            ],
        ),
        v(
            "V25",
            &with_iov("8b04000001000000 0500000000000000"),
            "DC_EAGER_RTW",
            vec![
                ("rma_iov_count", json!(1)),
                ("send_id", json!(5)),
                ("rma_iov", iov()),
                ("header_len", json!(40)),
            ],
        ),
        v(
            "V26",
            &with_iov("8c04000001000000 0000100000000000 0500000010000000"),
            "DC_LONGCTS_RTW",
            vec![
                ("rma_iov_count", json!(1)),
                ("msg_length", json!(0x100000)),
                ("send_id", json!(5)),
                ("credit_request", json!(16)),
            ],
        ),
        v(
            "V27",
            &with_iov("4804000001000000 0010000000000000 0700000000100000"),
            "SHORT_RTR",
            vec![
                ("rma_iov_count", json!(1)),
                ("msg_length", json!(0x1000)),
                ("recv_id", json!(7)),
                ("recv_length", json!(0x1000)),
            ],
        ),
        v(
            "V28",
            &with_iov("4904000001000000 0000100000000000 0700000000000100"),
            "LONGCTS_RTR",
            vec![
                ("msg_length", json!(0x100000)),
                ("recv_id", json!(7)),
                ("recv_length", json!(0x10000)),
            ],
        ),
        v(
            "V29",
            &with_iov("4a0420000a000000 0100000007000000 0200000000000000"),
            "WRITE_RTA",
            vec![
                ("flags", json!(0x20)),
                ("msg_id", json!(10)),
                ("rma_iov_count", json!(1)),
                ("atomic_datatype", json!(7)),
                ("atomic_op", json!(2)),
                ("rma_iov", iov()),
            ],
        ),
        v(
            "V30",
            &with_iov("4b0420000b000000 0100000007000000 0a00000007000000"),
            "FETCH_RTA",
            vec![
                ("msg_id", json!(11)),
                ("atomic_datatype", json!(7)),
                ("atomic_op", json!(10)),
                ("recv_id", json!(7)),
            ],
        ),
        v(
            "V31",
            &with_iov("4c0420000c000000 0100000007000000 0c00000007000000"),
            "COMPARE_RTA",
            vec![
                ("msg_id", json!(12)),
                ("atomic_datatype", json!(7)),
                ("atomic_op", json!(12)),
                ("recv_id", json!(7)),
            ],
        ),
        v(
            "V33",
            "03040080d4c3b2a1 0500000007000000 0000020000000000",
            "CTS",
            vec![
                ("type_id", json!(3)),
                ("flags", json!(0x8000)),
                ("send_id", json!(5)),
                ("recv_id", json!(7)),
                ("recv_length", json!(0x20000)),
                ("connid", json!(CONNID)),
            ],
        ),
        v(
            "V35",
            "0404000007000000 0010000000000000 0020000000000000",
            "CTSDATA",
            vec![
                ("flags", json!(0)),
                ("recv_id", json!(7)),
                ("seg_length", json!(0x1000)),
                ("seg_offset", json!(0x2000)),
            ],
        ),
        v(
            "V37",
            "05040080d4c3b2a1 0500000007000000 0010000000000000",
            "READRSP",
            vec![
                ("recv_id", json!(5)),
                ("send_id", json!(7)),
                ("seg_length", json!(0x1000)),
                ("connid", json!(CONNID)),
            ],
        ),
        v(
            "V38",
            "0704008005000000 07000000d4c3b2a1",
            "EOR",
            vec![
                ("send_id", json!(5)),
                ("recv_id", json!(7)),
                ("connid", json!(CONNID)),
            ],
        ),
        v(
            "V39",
            "08040080d4c3b2a1 0000000007000000 0800000000000000",
            "ATOMRSP",
            vec![
                ("recv_id", json!(7)),
                ("seg_length", json!(8)),
                ("connid", json!(CONNID)),
            ],
        ),
        v(
            "V40",
            "0a04008005000000 08000000d4c3b2a1",
            "RECEIPT",
            vec![
                ("tx_id", json!(5)),
                ("msg_id", json!(8)),
                ("connid", json!(CONNID)),
            ],
        ),
        v(
            "V41",
            "0b04008005000000 07000000d4c3b2a1",
            "READ_NACK",
            vec![
                ("type_id", json!(11)),
                ("send_id", json!(5)),
                ("recv_id", json!(7)),
                ("connid", json!(CONNID)),
            ],
        ),
        v(
            "V43",
            "0904038004000000 5b00000000000000 d4c3b2a100000000 efcdab8967452301 a1ef000000000000",
            "HANDSHAKE",
            vec![
                ("flags", json!(0x8003)),
                ("nextra_p3", json!(4)),
                ("extra_info", json!([0x5b])),
                ("connid", json!(CONNID)),
                ("host_id", json!(0x0123_4567_89ab_cdefu64)),
                ("device_version", json!(0xEFA1)),
                ("header_len", json!(40)),
            ],
        ),
        v(
            "V45",
            "0904008004000000 0000000000000000 d4c3b2a100000000",
            "HANDSHAKE",
            vec![
                ("flags", json!(0x8000)),
                ("nextra_p3", json!(4)),
                ("extra_info", json!([0])),
                ("connid", json!(CONNID)),
                ("header_len", json!(24)),
            ],
        ),
    ]
}

/// wire-layouts §E.2 (big-endian): FIN as the TMH alone (UCX's form, §C.2) and as the
/// RNDV TMH with opcode 2 plus the same RVH (rdma-core's `IBV_TM_OP_FIN`).
fn tm_vectors() -> Vec<Vector> {
    let rvh = "00007f0012345678 0000123400010000";
    vec![
        v(
            "TMH EAGER",
            "03000000aabbccdd 1122334455667788",
            "EAGER",
            vec![
                ("type_id", json!(3)),
                ("reserved", json!([0, 0, 0])),
                ("app_ctx", json!(0xAABB_CCDDu32)),
                ("tag", json!(TAG)),
                ("header_len", json!(16)),
            ],
        ),
        v(
            "TMH NO_TAG",
            "0000000000000000 0000000000000000",
            "NO_TAG",
            vec![
                ("type_id", json!(0)),
                ("app_ctx", json!(0)),
                ("tag", json!(0)),
            ],
        ),
        v(
            "TMH RNDV + RVH",
            &format!("0100000000000001 deadbeef00000001 {rvh}"),
            "RNDV",
            vec![
                ("type_id", json!(1)),
                ("app_ctx", json!(1)),
                ("tag", json!(0xDEAD_BEEF_0000_0001u64)),
                ("va", json!(0x7f00_1234_5678u64)),
                ("rkey", json!(0x1234)),
                ("len", json!(65536)),
                ("header_len", json!(32)),
            ],
        ),
        v(
            "TMH FIN",
            "0200000000000001 deadbeef00000001",
            "FIN",
            vec![
                ("type_id", json!(2)),
                ("app_ctx", json!(1)),
                ("tag", json!(0xDEAD_BEEF_0000_0001u64)),
                ("header_len", json!(16)),
            ],
        ),
        v(
            "TMH FIN + RVH",
            &format!("0200000000000001 deadbeef00000001 {rvh}"),
            "FIN",
            vec![
                ("type_id", json!(2)),
                ("app_ctx", json!(1)),
                ("tag", json!(0xDEAD_BEEF_0000_0001u64)),
                ("va", json!(0x7f00_1234_5678u64)),
                ("rkey", json!(0x1234)),
                ("len", json!(65536)),
            ],
        ),
    ]
}

fn check_vector(format: &str, vec: &Vector) -> Value {
    let d = decode(format, &vec.hex);
    assert_eq!(d["type"], vec.ty, "{}", vec.name);
    for (key, want) in &vec.fields {
        assert_eq!(&d[*key], want, "{}: {key}", vec.name);
    }
    let total = d["header_len"].as_u64().unwrap() + d["payload_len"].as_u64().unwrap();
    assert_eq!(total as usize * 2, vec.hex.len(), "{}", vec.name);
    d
}

#[test]
fn efa_vectors_decode_to_documented_fields() {
    for vec in efa_vectors() {
        let d = check_vector("efa", &vec);
        assert_eq!(d["version"], 4, "{}", vec.name);
        let id = PacketType::from_name(vec.ty).unwrap().id();
        assert_eq!(d["type_id"], id, "{}", vec.name);
    }
}

#[test]
fn tm_vectors_decode_to_documented_fields() {
    for vec in tm_vectors() {
        check_vector("tm", &vec);
    }
}

#[test]
fn every_vector_round_trips_through_encode() {
    for (format, vecs) in [("efa", efa_vectors()), ("tm", tm_vectors())] {
        for vec in vecs {
            let json = ok(&["decode", format, &vec.hex]);
            assert_eq!(
                encode(format, json.trim()),
                vec.hex,
                "{format} {}",
                vec.name
            );
        }
    }
}

#[test]
fn decode_keys_come_in_the_documented_order() {
    let out = ok(&[
        "decode",
        "efa",
        "41040e8001000000 8877665544332211 78563412bebafeca d4c3b2a1 6869",
    ]);
    let d: serde_json::Map<String, Value> = serde_json::from_str(&out).unwrap();
    let keys: Vec<&str> = d.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "type",
            "type_id",
            "version",
            "flags",
            "msg_id",
            "tag",
            "cq_data",
            "connid",
            "payload",
            "header_len",
            "payload_len"
        ]
    );
    assert_eq!(d["payload"], "6869");
    let out = ok(&[
        "decode",
        "efa",
        &compact(&format!(
            "4a0420000a000000 0100000007000000 0200000000000000 {IOV_HEX}"
        )),
    ]);
    let d: serde_json::Map<String, Value> = serde_json::from_str(&out).unwrap();
    let keys: Vec<&str> = d.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "type",
            "type_id",
            "version",
            "flags",
            "msg_id",
            "rma_iov_count",
            "atomic_datatype",
            "atomic_op",
            "rma_iov",
            "payload",
            "header_len",
            "payload_len"
        ]
    );
    let out = ok(&[
        "decode",
        "tm",
        "0100000000000001 deadbeef00000001 00007f0012345678 0000123400010000",
    ]);
    let d: serde_json::Map<String, Value> = serde_json::from_str(&out).unwrap();
    let keys: Vec<&str> = d.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "type",
            "type_id",
            "reserved",
            "app_ctx",
            "tag",
            "va",
            "rkey",
            "len",
            "payload",
            "header_len",
            "payload_len"
        ]
    );
}

#[test]
fn garbage_in_padding_is_zeroed_by_encode() {
    let cases = [
        // DC_EAGER_MSGRTM padding @12
        ("8504040008000000 05000000deadbeef", "8504040008000000 0500000000000000"),
        // CTS without CONNID_HDR: the connid slot @4 is padding
        (
            "03040000deadbeef 0500000007000000 0000020000000000",
            "0304000000000000 0500000007000000 0000020000000000",
        ),
        // EOR without CONNID_HDR: @12 is padding
        ("0704000005000000 07000000deadbeef", "0704000005000000 0700000000000000"),
        // ATOMRSP reserved @8
        (
            "08040080d4c3b2a1 ffffffff07000000 0800000000000000",
            "08040080d4c3b2a1 0000000007000000 0800000000000000",
        ),
        // WRITE_RTA padding @20
        (
            "4a0420000a000000 0100000007000000 02000000ffffffff 00100000007f0000 0010000000000000 efcdab0000000000",
            "4a0420000a000000 0100000007000000 0200000000000000 00100000007f0000 0010000000000000 efcdab0000000000",
        ),
        // DC_EAGER_RTW padding @12
        (
            "8b04000001000000 05000000eeeeeeee 00100000007f0000 0010000000000000 efcdab0000000000",
            "8b04000001000000 0500000000000000 00100000007f0000 0010000000000000 efcdab0000000000",
        ),
        // HANDSHAKE: connid header padding and DEVICE_VERSION reserved bytes
        (
            "0904038004000000 5b00000000000000 d4c3b2a1eeeeeeee efcdab8967452301 a1ef0000eeeeeeee",
            "0904038004000000 5b00000000000000 d4c3b2a100000000 efcdab8967452301 a1ef000000000000",
        ),
        // CTSDATA connid trailer padding, then payload
        (
            "0404008007000000 0200000000000000 0000000000000000 d4c3b2a1eeeeeeee 6869",
            "0404008007000000 0200000000000000 0000000000000000 d4c3b2a100000000 6869",
        ),
        // REQ raw address: qpn's pad u16 and the 4 unwritten bytes of addr_len 36
        (
            "4004050009000000 24000000 fe800000000000000000000000000001 1000eeee d4c3b2a1 0000000000000000 eeeeeeee",
            "4004050009000000 24000000 fe800000000000000000000000000001 10000000 d4c3b2a1 0000000000000000 00000000",
        ),
    ];
    for (dirty, clean) in cases {
        let json = ok(&["decode", "efa", dirty]);
        assert_eq!(encode("efa", json.trim()), compact(clean), "{dirty}");
        // and the clean bytes decode to the same JSON
        assert_eq!(ok(&["decode", "efa", clean]), json, "{dirty}");
    }
    // TM reserved bytes are not padding (UCX keeps data there): kept as sent.
    let rndv = compact("01aabbcc00000001 deadbeef00000001 00007f0012345678 0000123400010000");
    let json = ok(&["decode", "tm", &rndv]);
    assert_eq!(
        serde_json::from_str::<Value>(&json).unwrap()["reserved"],
        json!([0xaa, 0xbb, 0xcc])
    );
    assert_eq!(encode("tm", json.trim()), rndv);
}

#[test]
fn raw_address_decodes_with_addr_len_gid_qpn_connid_next() {
    let d = decode(
        "efa",
        "4004050009000000 20000000 fe800000000000000000000000000001 10000000 d4c3b2a1 0700000000000000",
    );
    assert_eq!(
        d["raw_addr"],
        json!({"addr_len": 32, "gid": "fe800000000000000000000000000001", "qpn": 16,
               "connid": CONNID, "next": 7})
    );
    assert_eq!(d["header_len"], 44);
    assert!(d.get("connid").is_none());
}

#[test]
fn truncated_input_exits_1_naming_the_needed_length() {
    let v04 = "41040e8001000000 8877665544332211 78563412";
    let err = fails(&["decode", "efa", v04], None);
    assert_eq!(
        err.trim_end(),
        "tagmatch: decode efa: truncated CQ data header: needed 24 bytes, available 20"
    );
    let err = fails(
        &["decode", "tm", "0100000000000001 deadbeef00000001 00007f00"],
        None,
    );
    assert_eq!(
        err.trim_end(),
        "tagmatch: decode tm: truncated RVH: needed 32 bytes, available 20"
    );
    // Every cut of every vector inside its headers.
    for (format, vecs) in [("efa", efa_vectors()), ("tm", tm_vectors())] {
        for vec in vecs {
            let d = decode(format, &vec.hex);
            let header_len = d["header_len"].as_u64().unwrap() as usize;
            for cut in 0..header_len {
                if format == "tm" && vec.ty == "FIN" && cut == 16 {
                    // The TMH alone: a FIN of the other form (its own vector).
                    continue;
                }
                let err = fails(&["decode", format, &vec.hex[..2 * cut]], None);
                assert!(
                    err.contains("needed"),
                    "{format} {} cut {cut}: {err}",
                    vec.name
                );
                assert!(err.contains(&format!("available {cut}")), "{err}");
            }
        }
    }
}

#[test]
fn content_errors_exit_1() {
    for (hex, what) in [
        ("4003040001000000", "version 3"),
        ("0104000000000000", "retired packet type 1"),
        ("0604000000000000", "local-only"),
        ("ff04000000000000", "unknown packet type 255"),
        ("4004058001000000", "both the raw address and the connid"),
        ("46040000ffffffff", "rma_iov_count"),
        ("0904000009000000", "nextra_p3 9"),
    ] {
        let err = fails(&["decode", "efa", hex], None);
        assert!(err.contains(what), "{hex}: {err}");
    }
    let err = fails(&["decode", "tm", "0400000000000000 0000000000000000"], None);
    assert!(err.contains("unknown TMH opcode 4"), "{err}");
}

#[test]
fn bad_hex_exits_1() {
    let err = fails(&["decode", "efa", "4104zz00"], None);
    assert!(err.contains("non-hex character 'z' at position 4"), "{err}");
    let err = fails(&["decode", "tm", "410"], None);
    assert!(err.contains("odd number of hex digits"), "{err}");
    let err = fails(&["decode", "efa", "-"], Some(b"41 04 0c 0x"));
    assert!(err.contains("'x'"), "{err}");
    let err = fails(
        &[
            "encode",
            "efa",
            r#"{"type":"EAGER_MSGRTM","payload":"abc"}"#,
        ],
        None,
    );
    assert!(err.contains("\"payload\"") && err.contains("odd"), "{err}");
}

#[test]
fn encode_errors_exit_1_naming_the_key() {
    for (format, json, what) in [
        (
            "efa",
            r#"{"type":"EAGER_TAGRTM","msg_id":1,"bogus":2}"#,
            "\"bogus\"",
        ),
        ("efa", r#"{"type":"EAGER_MSGRTM","tag":2}"#, "\"tag\""),
        (
            "efa",
            r#"{"type":"EAGER_MSGRTM","msg_id":4294967296}"#,
            "msg_id",
        ),
        ("efa", r#"{"type":"CTS","recv_length":-1}"#, "recv_length"),
        ("efa", r#"{"type":"EAGER_TAGRTM","flags":32780}"#, "connid"),
        (
            "efa",
            r#"{"type":"EAGER_TAGRTM","flags":12,"cq_data":1}"#,
            "cq_data",
        ),
        ("efa", r#"{"type":"HANDSHAKE","flags":1}"#, "host_id"),
        (
            "efa",
            r#"{"type":"EAGER_TAGRTM","header_len":28}"#,
            "header_len",
        ),
        (
            "efa",
            r#"{"type":"EAGER_TAGRTM","payload":"00","payload_len":2}"#,
            "payload_len",
        ),
        (
            "efa",
            r#"{"type":"EAGER_RTW","rma_iov_count":2,"rma_iov":[{}]}"#,
            "rma_iov_count",
        ),
        (
            "efa",
            r#"{"type":"HANDSHAKE","nextra_p3":3,"extra_info":[1]}"#,
            "nextra_p3",
        ),
        (
            "efa",
            r#"{"type":"EAGER_MSGRTM","raw_addr":{"addr_len":16}}"#,
            "addr_len 16",
        ),
        (
            "efa",
            r#"{"type":"EAGER_MSGRTM","raw_addr":{"qpn":65536}}"#,
            "qpn",
        ),
        ("efa", r#"{"type":"NOT_A_TYPE"}"#, "NOT_A_TYPE"),
        ("efa", r#"{"msg_id":1}"#, "\"type\""),
        ("efa", r#"[1,2]"#, "object"),
        ("efa", r#"{"type":"#, "invalid JSON"),
        ("tm", r#"{"type":"EAGER","va":1}"#, "\"va\""),
        ("tm", r#"{"type":"EAGER","flags":1}"#, "\"flags\""),
        ("tm", r#"{"type":"RNDV","rkey":4294967296}"#, "rkey"),
        ("tm", r#"{"type":"BOGUS"}"#, "BOGUS"),
    ] {
        let err = fails(&["encode", format, json], None);
        assert!(err.contains(what), "{json}: {err}");
        assert!(
            err.starts_with(&format!("tagmatch: encode {format}: ")),
            "{err}"
        );
    }
}

#[test]
fn usage_errors_keep_clap_status_2() {
    for args in [
        &["decode"][..],
        &["decode", "efa"],
        &["decode", "xyz", "00"],
        &["encode", "efa"],
        &["frobnicate"],
        &["decode", "efa", "00", "--file", "x"],
    ] {
        let o = run(args, None);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
    assert!(ok(&["--help"]).contains("decode"));
}

/// The help describes `demo` as the live demo (two endpoints, every subprotocol), not the
/// packet round-trip of `--packets`, and the about text names every subcommand.
#[test]
fn help_describes_the_live_demo_and_names_every_subcommand() {
    let top = ok(&["--help"]);
    let about = top.lines().next().unwrap_or_default();
    for sub in [
        "`demo`", "`perf`", "`decode`", "`encode`", "`replay`", "`bench`",
    ] {
        assert!(about.contains(sub), "{sub} not in the about text: {about}");
    }
    assert!(about.contains("two live endpoints"), "{about}");
    let demo_line = top
        .lines()
        .find(|l| l.trim_start().starts_with("demo "))
        .unwrap_or_else(|| panic!("no demo line: {top}"));
    assert!(
        demo_line.contains("every EFA RDM v4 subprotocol between two live endpoints"),
        "{demo_line}"
    );
    let demo = ok(&["demo", "--help"]);
    for words in [
        "Run every EFA RDM v4 subprotocol between two live endpoints",
        "`--transport udp`",
        "two processes over loopback UDP",
        "`--packets` is the packet-level demo instead",
    ] {
        assert!(demo.contains(words), "{words:?} not in: {demo}");
    }
    assert!(!demo.contains("[default: \"\"]"), "{demo}");
}

#[test]
fn u64_max_survives_the_round_trip() {
    let max = u64::MAX.to_string();
    for (format, json) in [
        (
            "efa",
            format!(r#"{{"type":"EAGER_TAGRTM","msg_id":1,"tag":{max}}}"#),
        ),
        (
            "efa",
            format!(
                r#"{{"type":"MEDIUM_TAGRTM","msg_length":{max},"seg_offset":{max},"tag":{max},"cq_data":{max},"flags":14}}"#
            ),
        ),
        ("tm", format!(r#"{{"type":"EAGER","tag":{max}}}"#)),
        ("tm", format!(r#"{{"type":"RNDV","tag":{max},"va":{max}}}"#)),
    ] {
        let hex = encode(format, &json);
        let out = ok(&["decode", format, &hex]);
        assert!(out.contains(&format!("\"tag\":{max}")), "{out}");
        let d: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(d["tag"].as_u64(), Some(u64::MAX));
        assert_eq!(encode(format, out.trim()), hex);
    }
    // The tag is the last 8 bytes of EAGER_TAGRTM's header, all ones.
    let hex = encode("efa", &format!(r#"{{"type":"EAGER_TAGRTM","tag":{max}}}"#));
    assert_eq!(hex, "41040c0000000000ffffffffffffffff");
}

#[test]
fn encode_builds_from_minimal_json() {
    assert_eq!(
        encode("efa", r#"{"type":"EAGER_MSGRTM","msg_id":1}"#),
        "4004040001000000"
    );
    // V04 from its fields alone, flags derived from the optional headers
    let json = format!(
        r#"{{"type":"EAGER_TAGRTM","msg_id":1,"tag":{TAG},"cq_data":{CQ_DATA},"connid":{CONNID}}}"#
    );
    assert_eq!(
        encode("efa", &json),
        compact("41040e8001000000 8877665544332211 78563412bebafeca d4c3b2a1")
    );
    // V11 from read_iov alone
    let json = r#"{"type":"LONGREAD_MSGRTM","msg_id":6,"msg_length":1048576,"send_id":5,
        "read_iov":[{"addr":139637976731648,"len":4096,"key":11259375}]}"#;
    assert_eq!(
        encode("efa", json),
        compact(&format!(
            "8004040006000000 0000100000000000 0500000001000000 {IOV_HEX}"
        ))
    );
    // V43 with the type given by ID and numbers as hex strings
    let json = r#"{"type_id":9,"flags":32771,"extra_info":["0x5b"],"connid":"0xa1b2c3d4",
        "host_id":"0x0123456789abcdef","device_version":61345}"#;
    assert_eq!(
        encode("efa", json),
        compact(
            "0904038004000000 5b00000000000000 d4c3b2a100000000 efcdab8967452301 a1ef000000000000"
        )
    );
    // FIN: the RNDV TMH and RVH with opcode 2
    let json = r#"{"type":"FIN","app_ctx":1,"tag":16045690981097406465,"va":"0x7f0012345678","rkey":4660,"len":65536}"#;
    assert_eq!(
        encode("tm", json),
        compact("0200000000000001 deadbeef00000001 00007f0012345678 0000123400010000")
    );
    // FIN without RVH fields: the TMH alone (UCX's form)
    let json = r#"{"type":"FIN","app_ctx":1,"tag":16045690981097406465}"#;
    assert_eq!(
        encode("tm", json),
        compact("0200000000000001 deadbeef00000001")
    );
    // A FIN cut inside its RVH names the RVH
    let err = fails(
        &["decode", "tm", "0200000000000001 deadbeef00000001 00007f00"],
        None,
    );
    assert!(
        err.contains("truncated RVH: needed 32 bytes, available 20"),
        "{err}"
    );
}

#[test]
fn stdin_and_file_inputs() {
    let v02 = "41040c0001000000 8877665544332211";
    let from_arg = ok(&["decode", "efa", v02]);
    // hex on stdin
    let o = run(&["decode", "efa", "-"], Some(format!("{v02}\n").as_bytes()));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), from_arg);
    // hex split across arguments
    assert_eq!(
        ok(&["decode", "efa", "41040c0001000000", "8877665544332211"]),
        from_arg
    );
    // raw bytes from a file and from stdin
    let bytes: Vec<u8> = (0..compact(v02).len() / 2)
        .map(|i| u8::from_str_radix(&compact(v02)[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let path = std::env::temp_dir().join(format!("tagmatch-cli-test-{}.bin", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let from_file = ok(&["decode", "efa", "--file", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(from_file, from_arg);
    let o = run(&["decode", "efa", "--file", "-"], Some(&bytes));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), from_arg);
    let err = fails(
        &["decode", "efa", "--file", "/nonexistent/tagmatch/x"],
        None,
    );
    assert!(err.contains("/nonexistent/tagmatch/x"), "{err}");
    // JSON on stdin
    let o = run(&["encode", "efa", "-"], Some(from_arg.as_bytes()));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), compact(v02));
    // --pretty is the same object
    let pretty = ok(&["decode", "efa", "--pretty", v02]);
    assert!(pretty.lines().count() > 1);
    assert_eq!(
        serde_json::from_str::<Value>(&pretty).unwrap(),
        serde_json::from_str::<Value>(&from_arg).unwrap()
    );
}

#[test]
fn demo_prints_a_line_per_packet_type_and_exits_0() {
    let out = ok(&["demo", "--packets"]);
    for t in PacketType::ALL {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(t.name()))
            .unwrap_or_else(|| panic!("no line for {t}: {out}"));
        assert!(line.starts_with("efa "), "{line}");
        assert!(line.ends_with(" ok"), "{line}");
        assert_eq!(
            line.split_whitespace().nth(2),
            Some(t.id().to_string().as_str())
        );
    }
    for op in ["EAGER", "RNDV", "FIN", "NO_TAG"] {
        let line = out
            .lines()
            .find(|l| l.starts_with("tm ") && l.split_whitespace().nth(1) == Some(op))
            .unwrap_or_else(|| panic!("no line for {op}: {out}"));
        assert!(line.ends_with(" ok"), "{line}");
    }
    // header + one line per type + summary
    assert_eq!(out.lines().count(), PacketType::ALL.len() + 4 + 2);
    // every --hex packet decodes and re-encodes through the binary too
    let out = ok(&["demo", "--packets", "--hex"]);
    for line in out.lines().skip(1).filter(|l| l.contains(" ok ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (format, hex) = (f[0], f[f.len() - 1]);
        let json = ok(&["decode", format, hex]);
        assert_eq!(encode(format, json.trim()), hex, "{line}");
    }
}

#[test]
fn random_bytes_never_crash_decode() {
    // A fixed pseudo-random sequence: a valid-looking base header (type from the wire set
    // or anything), then random bytes. Decode exits 0 or 1, never a panic (101).
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as u32
    };
    for i in 0..60 {
        let len = (next() % 96) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if let Some(first) = b.first_mut() {
            if i % 3 != 0 {
                *first = PacketType::ALL[next() as usize % PacketType::ALL.len()].id();
            }
        }
        if b.len() > 1 {
            b[1] = 4;
        }
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        for format in ["efa", "tm"] {
            let o = run(&["decode", format, &hex], None);
            match o.status.code() {
                Some(0) => {
                    let json = stdout(&o);
                    let again = encode(format, json.trim());
                    assert_eq!(ok(&["decode", format, &again]), json, "{format} {hex}");
                }
                Some(1) => assert_eq!(stderr(&o).lines().count(), 1),
                other => panic!("{format} {hex}: status {other:?} {}", stderr(&o)),
            }
        }
    }
}

//! EFA RDM v4 packets as JSON.
//!
//! Decode prints, in this order: `type`, `type_id`, `version`, `flags` (the wire value),
//! every fixed field of the type's layout in offset order under its C name, then `rma_iov`
//! (types ending in `rma_iov[]`), `raw_addr`, `cq_data`, `connid` (each only when present),
//! the HANDSHAKE parts (`extra_info`, then `host_id`, `device_version`, `user_recv_qp`,
//! `hmem_p2p` when present), `read_iov` (LONGREAD/RUNTREAD: the entries the payload holds),
//! `payload` (hex of everything after the headers, `read_iov[]` included), `header_len`
//! and `payload_len`.
//!
//! Encode reads that same JSON back. Derived values (`rma_iov_count`, `read_iov_count`,
//! `nextra_p3`, `header_len`, `payload_len`, and the flag bits announcing optional headers)
//! may be given and are then checked; anything else missing is 0, and a missing `flags` is
//! the type's default flags.

use serde_json::Value;
use tagmatch_wire::efa::{
    flags, ConnidPlace, ExtraInfo, Field, Packet, PacketType, PayloadKind, RawAddr, RawAddrHdr,
    Repr, RmaIov, UserRecvQp, RMA_IOV_LEN,
};

use crate::json::{self, Obj};

/// The JSON object of one EFA packet.
pub fn decode(bytes: &[u8]) -> Result<Value, String> {
    let pkt = Packet::new_checked(bytes).map_err(|e| e.to_string())?;
    let layout = pkt.layout();
    let ty = pkt.pkt_type();
    let mut m = Obj::new();
    m.insert("type".into(), ty.name().into());
    m.insert("type_id".into(), ty.id().into());
    m.insert("version".into(), pkt.version().into());
    m.insert("flags".into(), pkt.flags().into());
    for at in layout.fields {
        m.insert(
            at.field.name().into(),
            pkt.get(at.field).unwrap_or(0).into(),
        );
    }
    if layout.rma_iov {
        m.insert("rma_iov".into(), json::iovs_json(pkt.rma_iov()));
    }
    if let Some(r) = pkt.raw_addr() {
        let mut a = Obj::new();
        a.insert("addr_len".into(), r.addr_len.into());
        a.insert("gid".into(), crate::hex::format(&r.addr.gid).into());
        a.insert("qpn".into(), r.addr.qpn.into());
        a.insert("connid".into(), r.addr.qkey.into());
        a.insert("next".into(), r.addr.next.into());
        m.insert("raw_addr".into(), Value::Object(a));
    }
    if let Some(v) = pkt.cq_data() {
        m.insert("cq_data".into(), v.into());
    }
    if let Some(v) = pkt.connid() {
        m.insert("connid".into(), v.into());
    }
    if let Some(e) = pkt.extra_info() {
        let words: Vec<Value> = (0..e.words()).map(|i| e.word(i).into()).collect();
        m.insert("extra_info".into(), Value::Array(words));
    }
    if let Some(v) = pkt.host_id() {
        m.insert("host_id".into(), v.into());
    }
    if let Some(v) = pkt.device_version() {
        m.insert("device_version".into(), v.into());
    }
    if let Some(q) = pkt.user_recv_qp() {
        let mut o = Obj::new();
        o.insert("qpn".into(), q.qpn.into());
        o.insert("qkey".into(), q.qkey.into());
        m.insert("user_recv_qp".into(), Value::Object(o));
    }
    if let Some(v) = pkt.hmem_p2p() {
        m.insert("hmem_p2p".into(), v.into());
    }
    let payload = pkt.payload();
    if has_read_iov(layout.payload) {
        let count = pkt.get(Field::ReadIovCount).unwrap_or(0);
        m.insert(
            "read_iov".into(),
            json::iovs_json(read_iov_view(count, payload)),
        );
    }
    m.insert("payload".into(), crate::hex::format(payload).into());
    m.insert("header_len".into(), pkt.header_len().into());
    m.insert("payload_len".into(), payload.len().into());
    Ok(Value::Object(m))
}

fn has_read_iov(kind: PayloadKind) -> bool {
    matches!(kind, PayloadKind::ReadIov | PayloadKind::ReadIovRunt)
}

/// The `read_iov` entries a payload holds: the first `count`, or as many whole entries as
/// there are bytes for when the payload is shorter (decode prints what is there).
fn read_iov_view(count: u64, payload: &[u8]) -> &[RmaIov] {
    let fit = (payload.len() / RMA_IOV_LEN) as u64;
    let n = usize::try_from(count.min(fit)).unwrap_or(0);
    payload
        .get(..n * RMA_IOV_LEN)
        .and_then(RmaIov::slice_from_bytes)
        .unwrap_or(&[])
}

/// Resolves `type` (a name, optionally with the C `EFA_RDM_` prefix and `_PKT` suffix, or a
/// number) and `type_id`, which must agree when both are given.
fn packet_type(obj: &Obj) -> Result<PacketType, String> {
    let by_name = match json::get(obj, "type") {
        None => None,
        Some(Value::String(s)) => {
            let name = s.trim();
            let name = name.strip_prefix("EFA_RDM_").unwrap_or(name);
            let name = name.strip_suffix("_PKT").unwrap_or(name);
            Some(
                PacketType::from_name(name)
                    .ok_or_else(|| format!("\"type\": unknown EFA packet type {s:?}"))?,
            )
        }
        Some(v) => Some(by_id("type", v)?),
    };
    let by_number = json::get(obj, "type_id")
        .map(|v| by_id("type_id", v))
        .transpose()?;
    match (by_name, by_number) {
        (Some(a), Some(b)) if a != b => Err(format!(
            "\"type\" {} (ID {}) and \"type_id\" {} disagree",
            a.name(),
            a.id(),
            b.id()
        )),
        (Some(t), _) | (None, Some(t)) => Ok(t),
        (None, None) => Err("missing \"type\" (or \"type_id\")".into()),
    }
}

fn by_id(key: &str, v: &Value) -> Result<PacketType, String> {
    let n = json::as_uint(key, v)?;
    let id = u8::try_from(n).map_err(|_| format!("\"{key}\": unknown packet type {n}"))?;
    PacketType::from_id(id).map_err(|e| format!("\"{key}\": {e}"))
}

/// The keys HANDSHAKE packets may carry besides the common ones.
const HANDSHAKE_KEYS: &[&str] = &[
    "extra_info",
    "host_id",
    "device_version",
    "user_recv_qp",
    "hmem_p2p",
];

/// Every key any EFA packet may carry, to tell "not for this type" from "unknown".
fn known_anywhere(key: &str) -> bool {
    Field::from_name(key).is_some()
        || HANDSHAKE_KEYS.contains(&key)
        || ["rma_iov", "read_iov", "raw_addr", "cq_data"].contains(&key)
}

fn check_keys(obj: &Obj, ty: PacketType) -> Result<(), String> {
    let layout = ty.layout();
    let is_req = layout.connid == ConnidPlace::ReqOptional;
    for key in obj.keys() {
        let k = key.as_str();
        let ok = matches!(
            k,
            "type"
                | "type_id"
                | "version"
                | "flags"
                | "connid"
                | "payload"
                | "header_len"
                | "payload_len"
        ) || Field::from_name(k).is_some_and(|f| layout.has(f))
            || (k == "rma_iov" && layout.rma_iov)
            || (k == "read_iov" && has_read_iov(layout.payload))
            || ((k == "raw_addr" || k == "cq_data") && is_req)
            || (HANDSHAKE_KEYS.contains(&k) && ty == PacketType::Handshake);
        if !ok {
            return Err(if known_anywhere(k) {
                format!("{} has no \"{k}\"", ty.name())
            } else {
                format!("unknown key \"{k}\"")
            });
        }
    }
    Ok(())
}

fn raw_addr(obj: &Obj) -> Result<Option<RawAddrHdr>, String> {
    let Some(o) = json::obj_of(obj, "raw_addr")? else {
        return Ok(None);
    };
    json::only_keys(
        o,
        &["addr_len", "gid", "qpn", "connid", "next"],
        "\"raw_addr\"",
    )?;
    let ctx = |e: String| format!("raw_addr.{e}");
    let gid = match json::get(o, "gid") {
        None => [0u8; 16],
        Some(v) => gid(v)?,
    };
    Ok(Some(RawAddrHdr {
        addr_len: json::u32_of(o, "addr_len")
            .map_err(ctx)?
            .unwrap_or(RawAddrHdr::DEFAULT_ADDR_LEN),
        addr: RawAddr {
            gid,
            qpn: json::u16_of(o, "qpn").map_err(ctx)?.unwrap_or(0),
            qkey: json::u32_of(o, "connid").map_err(ctx)?.unwrap_or(0),
            next: json::uint(o, "next", u64::MAX).map_err(ctx)?.unwrap_or(0),
        },
    }))
}

/// A GID: 32 hex digits (as decode prints it) or IPv6 notation such as `"fe80::1"`.
fn gid(v: &Value) -> Result<[u8; 16], String> {
    let s = v
        .as_str()
        .ok_or_else(|| format!("raw_addr.\"gid\": expected a hex string, got {v}"))?;
    if s.contains(':') {
        return s
            .trim()
            .parse::<std::net::Ipv6Addr>()
            .map(|a| a.octets())
            .map_err(|e| format!("raw_addr.\"gid\": {e}: {s:?}"));
    }
    let bytes = crate::hex::parse(s).map_err(|e| format!("raw_addr.\"gid\": {e}"))?;
    <[u8; 16]>::try_from(bytes.as_slice())
        .map_err(|_| format!("raw_addr.\"gid\": expected 16 bytes, got {}", bytes.len()))
}

fn handshake(obj: &Obj, repr: &mut Repr<'_>) -> Result<(), String> {
    let h = &mut repr.handshake;
    let nextra_p3 = json::uint(obj, "nextra_p3", u32::MAX.into())?;
    match json::array_of(obj, "extra_info")? {
        Some(words) => {
            if words.len() > tagmatch_wire::efa::extra::MAX_WORDS {
                return Err(format!(
                    "\"extra_info\": {} words, at most {}",
                    words.len(),
                    tagmatch_wire::efa::extra::MAX_WORDS
                ));
            }
            let mut e = ExtraInfo::with_words(words.len());
            for (i, w) in words.iter().enumerate() {
                e.set_word(i, json::as_uint(&format!("extra_info[{i}]"), w)?);
            }
            h.extra_info = e;
            json::check_derived(
                obj,
                "nextra_p3",
                words.len() as u64 + 3,
                "the length of \"extra_info\" + 3",
            )?;
        }
        None => {
            // No words given: nextra_p3 (if any) says how many zero words to send.
            if let Some(n) = nextra_p3 {
                let words = n
                    .checked_sub(3)
                    .filter(|w| *w <= tagmatch_wire::efa::extra::MAX_WORDS as u64)
                    .ok_or_else(|| format!("\"nextra_p3\": {n} outside 3..=7"))?;
                h.extra_info = ExtraInfo::with_words(usize::try_from(words).unwrap_or(0));
            }
        }
    }
    h.host_id = json::uint(obj, "host_id", u64::MAX)?;
    h.device_version = json::u32_of(obj, "device_version")?;
    if let Some(o) = json::obj_of(obj, "user_recv_qp")? {
        json::only_keys(o, &["qpn", "qkey"], "\"user_recv_qp\"")?;
        let ctx = |e: String| format!("user_recv_qp.{e}");
        h.user_recv_qp = Some(UserRecvQp {
            qpn: json::u32_of(o, "qpn").map_err(ctx)?.unwrap_or(0),
            qkey: json::u32_of(o, "qkey").map_err(ctx)?.unwrap_or(0),
        });
    }
    h.hmem_p2p = json::u8_of(obj, "hmem_p2p")?;
    Ok(())
}

/// Checks that the flag bits announcing optional headers match the headers given.
fn check_flags(wire: u16, repr: &Repr<'_>) -> Result<(), String> {
    let h = &repr.handshake;
    let mut bits: Vec<(u16, &str, bool)> =
        vec![(flags::CONNID_HDR, "connid", repr.connid.is_some())];
    match repr.pkt_type.layout().connid {
        ConnidPlace::ReqOptional => {
            bits.push((
                flags::REQ_OPT_RAW_ADDR_HDR,
                "raw_addr",
                repr.raw_addr.is_some(),
            ));
            bits.push((
                flags::REQ_OPT_CQ_DATA_HDR,
                "cq_data",
                repr.cq_data.is_some(),
            ));
        }
        ConnidPlace::Handshake => {
            bits.push((flags::HANDSHAKE_HOST_ID_HDR, "host_id", h.host_id.is_some()));
            bits.push((
                flags::HANDSHAKE_DEVICE_VERSION_HDR,
                "device_version",
                h.device_version.is_some(),
            ));
            bits.push((
                flags::HANDSHAKE_USER_RECV_QP_HDR,
                "user_recv_qp",
                h.user_recv_qp.is_some(),
            ));
            bits.push((
                flags::HANDSHAKE_HMEM_P2P_HDR,
                "hmem_p2p",
                h.hmem_p2p.is_some(),
            ));
        }
        ConnidPlace::Fixed(_) | ConnidPlace::CtsDataTrailer => {}
    }
    for (bit, key, present) in bits {
        let flagged = wire & bit != 0;
        if flagged && !present {
            return Err(format!(
                "\"flags\" {wire:#06x} announce \"{key}\" (bit {bit:#06x}) but it is missing"
            ));
        }
        if present && !flagged {
            return Err(format!(
                "\"{key}\" is given but \"flags\" {wire:#06x} do not announce it (bit {bit:#06x})"
            ));
        }
    }
    Ok(())
}

/// The bytes of the EFA packet a JSON object describes.
pub fn encode(v: &Value) -> Result<Vec<u8>, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| format!("expected a JSON object, got {v}"))?;
    let ty = packet_type(obj)?;
    check_keys(obj, ty)?;
    let layout = ty.layout();
    let mut repr = Repr::new(ty);
    if let Some(v) = json::u8_of(obj, "version")? {
        repr.version = v;
    }
    for at in layout.fields {
        if at.field.is_derived() {
            continue;
        }
        let v = json::uint(obj, at.field.name(), at.width.max())?;
        repr.fields.set(at.field, v.unwrap_or(0));
    }

    let rma_iov = json::iovs_of(obj, "rma_iov")?.unwrap_or_default();
    if layout.rma_iov {
        json::check_derived(
            obj,
            "rma_iov_count",
            rma_iov.len() as u64,
            "the length of \"rma_iov\"",
        )?;
    }
    repr.rma_iov = &rma_iov;
    repr.raw_addr = raw_addr(obj)?;
    repr.cq_data = json::uint(obj, "cq_data", u64::MAX)?;
    repr.connid = json::u32_of(obj, "connid")?;
    if ty == PacketType::Handshake {
        handshake(obj, &mut repr)?;
    }

    let payload = read_iov_payload(obj, &mut repr)?;
    repr.payload = &payload;

    match json::u16_of(obj, "flags")? {
        Some(wire) => {
            check_flags(wire, &repr)?;
            repr.flags = wire;
        }
        None => repr.flags = ty.default_flags(),
    }

    json::check_derived(
        obj,
        "header_len",
        repr.header_len() as u64,
        "the headers given",
    )?;
    json::check_derived(obj, "payload_len", payload.len() as u64, "\"payload\"")?;
    let mut buf = vec![0u8; repr.buffer_len()];
    let n = repr.emit(&mut buf).map_err(|e| e.to_string())?;
    buf.truncate(n);
    Ok(buf)
}

/// The payload, and for LONGREAD/RUNTREAD types `read_iov_count`: `payload` is everything
/// after the headers (as decode prints it, `read_iov[]` included); `read_iov`, when given,
/// must be what that payload starts with, and builds the payload when `payload` is absent.
fn read_iov_payload(obj: &Obj, repr: &mut Repr<'_>) -> Result<Vec<u8>, String> {
    let given = json::hex_of(obj, "payload")?;
    if !has_read_iov(repr.pkt_type.layout().payload) {
        return Ok(given.unwrap_or_default());
    }
    let iovs = json::iovs_of(obj, "read_iov")?;
    let count = json::uint(obj, "read_iov_count", u32::MAX.into())?;
    let (payload, count) = match (given, &iovs) {
        (Some(p), _) => (p, count.unwrap_or(0)),
        (None, Some(iovs)) => {
            let n = iovs.len() as u64;
            if let Some(c) = count.filter(|c| *c != n) {
                return Err(format!(
                    "\"read_iov_count\" is {c} but \"read_iov\" has {n} entries"
                ));
            }
            (RmaIov::slice_as_bytes(iovs).to_vec(), n)
        }
        (None, None) => (Vec::new(), count.unwrap_or(0)),
    };
    if let Some(iovs) = &iovs {
        if read_iov_view(count, &payload) != iovs.as_slice() {
            return Err(format!(
                "\"read_iov\" is not what \"read_iov_count\" {count} and \"payload\" give"
            ));
        }
    }
    repr.fields.set(Field::ReadIovCount, count);
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(bytes: &[u8]) -> Vec<u8> {
        encode(&decode(bytes).unwrap()).unwrap()
    }

    #[test]
    fn every_vector_shape_round_trips() {
        let h = crate::hex::parse;
        for s in [
            "41040e8001000000 8877665544332211 78563412bebafeca d4c3b2a1",
            "0904038004000000 5b00000000000000 d4c3b2a100000000 efcdab8967452301 a1ef000000000000",
            "8004040006000000 0000100000000000 0500000001000000 00100000007f0000 0010000000000000 efcdab0000000000",
            "4604000001000000 00100000007f0000 0010000000000000 efcdab0000000000",
        ] {
            let b = h(s).unwrap();
            assert_eq!(round_trip(&b), b, "{s}");
        }
    }

    #[test]
    fn minimal_json_uses_default_flags() {
        let b = encode(&json!({"type": "EAGER_TAGRTM", "msg_id": 1, "tag": "0x1122334455667788"}))
            .unwrap();
        assert_eq!(crate::hex::format(&b), "41040c00010000008877665544332211");
        let b = encode(&json!({"type": "EFA_RDM_EAGER_MSGRTM_PKT", "type_id": 64})).unwrap();
        assert_eq!(crate::hex::format(&b), "4004040000000000");
    }

    #[test]
    fn encode_errors_name_the_key() {
        let e = |v: Value| encode(&v).unwrap_err();
        assert_eq!(
            e(json!({"type": "EAGER_MSGRTM", "bogus": 1})),
            "unknown key \"bogus\""
        );
        assert_eq!(
            e(json!({"type": "EAGER_MSGRTM", "tag": 1})),
            "EAGER_MSGRTM has no \"tag\""
        );
        assert!(e(json!({"type": "EAGER_MSGRTM", "msg_id": 4294967296u64})).contains("msg_id"));
        assert!(e(json!({"type": "EAGER_MSGRTM", "flags": 0x8004})).contains("\"connid\""));
        assert!(e(json!({"type": "EAGER_MSGRTM", "flags": 4, "cq_data": 1})).contains("cq_data"));
        assert!(e(json!({"type": "EAGER_MSGRTM", "header_len": 9})).contains("header_len"));
        assert!(e(json!({"type": "EAGER_RTW", "rma_iov_count": 1})).contains("rma_iov_count"));
        assert!(e(json!({"type": "NOPE"})).contains("NOPE"));
        assert!(e(json!({"type_id": 1})).contains("retired"));
        assert!(e(json!({"type": "CTS", "type_id": 4})).contains("disagree"));
        assert!(e(json!({})).contains("missing"));
        assert!(e(json!([1])).contains("object"));
        assert!(e(json!({"type": "HANDSHAKE", "nextra_p3": 8})).contains("nextra_p3"));
        assert!(
            e(json!({"type": "HANDSHAKE", "extra_info": [0, 0, 0, 0, 0]})).contains("extra_info")
        );
        assert!(e(json!({"type": "EAGER_MSGRTM", "raw_addr": {"gid": "fe80"}})).contains("gid"));
        assert!(e(json!({"type": "EAGER_MSGRTM", "raw_addr": {"x": 1}})).contains("\"x\""));
        assert!(e(json!({"type": "EAGER_MSGRTM", "version": 3})).contains("version 3"));
        assert!(
            e(json!({"type": "LONGREAD_MSGRTM", "read_iov_count": 2, "read_iov": [{}]}))
                .contains("read_iov_count")
        );
    }

    #[test]
    fn gid_in_ipv6_notation() {
        let b = encode(&json!({"type": "EAGER_MSGRTM", "flags": 5,
            "raw_addr": {"gid": "fe80::1", "qpn": 16, "connid": 0xA1B2C3D4u32}}))
        .unwrap();
        let d = decode(&b).unwrap();
        assert_eq!(d["raw_addr"]["gid"], "fe800000000000000000000000000001");
        assert_eq!(d["raw_addr"]["addr_len"], 36);
        assert_eq!(d["header_len"], 48);
    }

    /// Mutates the demo's packets (every type, every optional header) byte by byte and cuts
    /// them: whatever decodes must re-encode to bytes that decode to the same JSON, and
    /// re-encoding those gives the same bytes again (padding zeroed once, then stable).
    #[test]
    fn mutated_packets_round_trip_or_fail_cleanly() {
        let mut state: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let samples = crate::demo::samples().unwrap();
        let mut decoded = 0;
        for _ in 0..20_000 {
            let s = &samples[(next() % samples.len() as u64) as usize];
            let mut b = s.bytes.clone();
            for _ in 0..(next() % 4) {
                let i = (next() % b.len() as u64) as usize;
                b[i] = next() as u8;
            }
            // keep the type most of the time so the headers get exercised
            if next() % 4 != 0 {
                b[0] = s.bytes[0];
                b[1] = 4;
            }
            let cut = if next() % 3 == 0 {
                (next() % (b.len() as u64 + 1)) as usize
            } else {
                b.len()
            };
            let b = &b[..cut];
            let format = s.format;
            let Ok(json) = format.decode(b) else { continue };
            decoded += 1;
            let again = format
                .encode(&json)
                .unwrap_or_else(|e| panic!("{}: {e}", crate::hex::format(b)));
            assert_eq!(again.len(), b.len());
            assert_eq!(format.decode(&again).as_ref(), Ok(&json));
            assert_eq!(format.encode(&json).as_ref(), Ok(&again));
        }
        assert!(decoded > 5_000, "{decoded}");
    }

    /// Every type prints type, type_id, version, flags, then its layout's fields in offset
    /// order, and ends with payload, header_len, payload_len.
    #[test]
    fn every_type_prints_its_fields_in_layout_order() {
        for s in crate::demo::samples().unwrap() {
            if s.format != crate::format::Format::Efa {
                continue;
            }
            let d = decode(&s.bytes).unwrap();
            let keys: Vec<&str> = d.as_object().unwrap().keys().map(String::as_str).collect();
            let layout = PacketType::from_id(s.id).unwrap().layout();
            let fields: Vec<&str> = layout.fields.iter().map(|f| f.field.name()).collect();
            assert_eq!(
                keys[..4],
                ["type", "type_id", "version", "flags"],
                "{}",
                s.name
            );
            assert_eq!(keys[4..4 + fields.len()], fields[..], "{}", s.name);
            assert_eq!(
                keys[keys.len() - 3..],
                ["payload", "header_len", "payload_len"],
                "{}",
                s.name
            );
            assert_eq!(d["header_len"], s.header_len, "{}", s.name);
        }
    }

    #[test]
    fn short_read_iov_prints_what_is_there() {
        // read_iov_count 2, one entry present plus 4 stray bytes.
        let mut b =
            crate::hex::parse("8004040006000000 0000100000000000 0500000002000000").unwrap();
        b.extend_from_slice(RmaIov::slice_as_bytes(&[RmaIov::new(1, 2, 3)]));
        b.extend_from_slice(&[9, 9, 9, 9]);
        let d = decode(&b).unwrap();
        assert_eq!(d["read_iov_count"], 2);
        assert_eq!(d["read_iov"], json!([{"addr": 1, "len": 2, "key": 3}]));
        assert_eq!(d["payload_len"], 28);
        assert_eq!(encode(&d).unwrap(), b);
    }
}

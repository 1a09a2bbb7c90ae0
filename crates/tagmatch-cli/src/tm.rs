//! rdma-core tag-matching messages (TMH, RVH for RNDV/FIN, payload) as JSON.
//!
//! Decode prints `type` (`"EAGER"`, `"RNDV"`, `"FIN"`, `"NO_TAG"`), `type_id` (the opcode),
//! `reserved` (3 numbers), `app_ctx`, `tag`, then `va`, `rkey`, `len` for RNDV and FIN,
//! `payload` (hex), `header_len` and `payload_len`. Encode reads the same JSON back.

use serde_json::Value;
use tagmatch_wire::tm::{Rvh, TmOpcode, TmPacket, TmRepr, Tmh};

use crate::json::{self, Obj};

/// The JSON object of one TM message.
pub fn decode(bytes: &[u8]) -> Result<Value, String> {
    let pkt = TmPacket::new_checked(bytes).map_err(|e| e.to_string())?;
    let op = pkt.opcode();
    let mut m = Obj::new();
    m.insert("type".into(), op.name().into());
    m.insert("type_id".into(), (op as u8).into());
    m.insert(
        "reserved".into(),
        Value::Array(pkt.reserved().iter().map(|b| (*b).into()).collect()),
    );
    m.insert("app_ctx".into(), pkt.app_ctx().into());
    m.insert("tag".into(), pkt.tag().into());
    if let Some(r) = pkt.rvh() {
        m.insert("va".into(), r.va.into());
        m.insert("rkey".into(), r.rkey.into());
        m.insert("len".into(), r.len.into());
    }
    m.insert("payload".into(), crate::hex::format(pkt.payload()).into());
    m.insert("header_len".into(), pkt.header_len().into());
    m.insert("payload_len".into(), pkt.payload().len().into());
    Ok(Value::Object(m))
}

fn opcode(obj: &Obj) -> Result<TmOpcode, String> {
    let by_id = |key: &str, v: &Value| -> Result<TmOpcode, String> {
        let n = json::as_uint(key, v)?;
        u8::try_from(n)
            .map_err(|_| format!("\"{key}\": unknown TMH opcode {n}"))
            .and_then(|b| TmOpcode::from_u8(b).map_err(|e| format!("\"{key}\": {e}")))
    };
    let by_name = match json::get(obj, "type") {
        None => None,
        Some(Value::String(s)) => {
            let name = s.trim();
            let name = name.strip_prefix("IBV_TMH_").unwrap_or(name);
            Some(
                TmOpcode::from_name(name)
                    .ok_or_else(|| format!("\"type\": unknown TMH opcode {s:?}"))?,
            )
        }
        Some(v) => Some(by_id("type", v)?),
    };
    let by_number = json::get(obj, "type_id")
        .map(|v| by_id("type_id", v))
        .transpose()?;
    match (by_name, by_number) {
        (Some(a), Some(b)) if a != b => Err(format!(
            "\"type\" {} (opcode {}) and \"type_id\" {} disagree",
            a.name(),
            a as u8,
            b as u8
        )),
        (Some(t), _) | (None, Some(t)) => Ok(t),
        (None, None) => Err("missing \"type\" (or \"type_id\")".into()),
    }
}

/// The bytes of the TM message a JSON object describes.
pub fn encode(v: &Value) -> Result<Vec<u8>, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| format!("expected a JSON object, got {v}"))?;
    let op = opcode(obj)?;
    for key in obj.keys() {
        let k = key.as_str();
        let common = matches!(
            k,
            "type"
                | "type_id"
                | "reserved"
                | "app_ctx"
                | "tag"
                | "payload"
                | "header_len"
                | "payload_len"
        );
        let rvh = matches!(k, "va" | "rkey" | "len");
        if rvh && !op.has_rvh() {
            return Err(format!("{} has no \"{k}\" (no RVH)", op.name()));
        }
        if !common && !rvh {
            return Err(format!("unknown key \"{k}\""));
        }
    }
    let mut reserved = [0u8; 3];
    if let Some(items) = json::array_of(obj, "reserved")? {
        if items.len() != 3 {
            return Err(format!(
                "\"reserved\": expected 3 numbers, got {}",
                items.len()
            ));
        }
        for (i, (slot, item)) in reserved.iter_mut().zip(items).enumerate() {
            let key = format!("reserved[{i}]");
            let n = json::as_uint(&key, item)?;
            *slot =
                u8::try_from(n).map_err(|_| format!("\"{key}\": {n} does not fit in 8 bits"))?;
        }
    }
    let tmh = Tmh {
        opcode: op,
        reserved,
        app_ctx: json::u32_of(obj, "app_ctx")?.unwrap_or(0),
        tag: json::uint(obj, "tag", u64::MAX)?.unwrap_or(0),
    };
    // An RVH for RNDV, and for a FIN given any of its fields or a 32-byte `header_len`
    // (rdma-core's TMH+RVH form; otherwise the TMH alone, as UCX sends it).
    let rvh_keys = ["va", "rkey", "len"].iter().any(|k| obj.contains_key(*k))
        || obj.get("header_len").and_then(Value::as_u64) == Some(32);
    let rvh = if op.requires_rvh() || (op.has_rvh() && rvh_keys) {
        Some(Rvh {
            va: json::uint(obj, "va", u64::MAX)?.unwrap_or(0),
            rkey: json::u32_of(obj, "rkey")?.unwrap_or(0),
            len: json::u32_of(obj, "len")?.unwrap_or(0),
        })
    } else {
        None
    };
    let payload = json::hex_of(obj, "payload")?.unwrap_or_default();
    let repr = TmRepr {
        tmh,
        rvh,
        payload: &payload,
    };
    json::check_derived(
        obj,
        "header_len",
        (repr.buffer_len() - payload.len()) as u64,
        "the opcode and the RVH fields",
    )?;
    json::check_derived(obj, "payload_len", payload.len() as u64, "\"payload\"")?;
    let mut buf = vec![0u8; repr.buffer_len()];
    let n = repr.emit(&mut buf).map_err(|e| e.to_string())?;
    buf.truncate(n);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rndv_round_trips() {
        let b = crate::hex::parse(
            "0100000000000001 deadbeef00000001 00007f0012345678 0000123400010000 6869",
        )
        .unwrap();
        let d = decode(&b).unwrap();
        assert_eq!(d["type"], "RNDV");
        assert_eq!(d["va"], 0x7f0012345678u64);
        assert_eq!(d["payload"], "6869");
        assert_eq!(encode(&d).unwrap(), b);
    }

    #[test]
    fn errors() {
        let e = |v: Value| encode(&v).unwrap_err();
        assert!(e(json!({"type": "EAGER", "va": 1})).contains("\"va\""));
        assert!(e(json!({"type": "EAGER", "flags": 1})).contains("\"flags\""));
        assert!(e(json!({"type": "EAGER", "reserved": [1, 2]})).contains("reserved"));
        assert!(e(json!({"type": "EAGER", "reserved": [1, 2, 256]})).contains("reserved[2]"));
        assert!(e(json!({"type_id": 4})).contains("opcode 4"));
        assert!(e(json!({"type": "FIN", "type_id": 1})).contains("disagree"));
        assert!(e(json!({"type": "FIN", "va": 1, "header_len": 16})).contains("header_len"));
        assert!(e(json!({"type": "RNDV", "header_len": 16})).contains("header_len"));
        // A FIN is the TMH alone unless RVH fields (or a 32-byte header) are given.
        assert_eq!(
            crate::hex::format(&encode(&json!({"type": "IBV_TMH_FIN"})).unwrap()),
            "02".to_string() + &"0".repeat(30)
        );
        assert_eq!(
            crate::hex::format(&encode(&json!({"type": "FIN", "header_len": 32})).unwrap()),
            "02".to_string() + &"0".repeat(62)
        );
    }
}

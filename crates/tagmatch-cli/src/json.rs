//! Reading encode's JSON input: unsigned integers (JSON numbers, or strings in decimal or
//! `0x` hex), hex strings, arrays of iovs, and key checking. Every error names the key.

use serde_json::{Map, Value};
use tagmatch_wire::efa::RmaIov;

/// A JSON object.
pub type Obj = Map<String, Value>;

/// The value of `key`, `None` when absent or `null`.
pub fn get<'a>(obj: &'a Obj, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// Reads an unsigned integer: a JSON number, or a string holding a decimal or `0x` hex
/// number (for tools that cannot print a u64 as a number).
pub fn as_uint(key: &str, v: &Value) -> Result<u64, String> {
    let parsed = match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => {
            let s = s.trim();
            match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                Some(h) => u64::from_str_radix(&h.replace('_', ""), 16).ok(),
                None => s.parse::<u64>().ok(),
            }
        }
        _ => None,
    };
    parsed.ok_or_else(|| format!("\"{key}\": expected an unsigned integer, got {v}"))
}

/// Reads an unsigned integer no larger than `max`, `None` when absent or `null`.
pub fn uint(obj: &Obj, key: &str, max: u64) -> Result<Option<u64>, String> {
    let Some(v) = get(obj, key) else {
        return Ok(None);
    };
    let n = as_uint(key, v)?;
    if n > max {
        return Err(format!(
            "\"{key}\": {n} does not fit in {} bits",
            u64::BITS - max.leading_zeros()
        ));
    }
    Ok(Some(n))
}

/// [`uint`] for a u32 field.
pub fn u32_of(obj: &Obj, key: &str) -> Result<Option<u32>, String> {
    Ok(uint(obj, key, u32::MAX.into())?.and_then(|n| u32::try_from(n).ok()))
}

/// [`uint`] for a u16 field.
pub fn u16_of(obj: &Obj, key: &str) -> Result<Option<u16>, String> {
    Ok(uint(obj, key, u16::MAX.into())?.and_then(|n| u16::try_from(n).ok()))
}

/// [`uint`] for a u8 field.
pub fn u8_of(obj: &Obj, key: &str) -> Result<Option<u8>, String> {
    Ok(uint(obj, key, u8::MAX.into())?.and_then(|n| u8::try_from(n).ok()))
}

/// Bytes from a hex string (whitespace allowed), `None` when absent or `null`.
pub fn hex_of(obj: &Obj, key: &str) -> Result<Option<Vec<u8>>, String> {
    let Some(v) = get(obj, key) else {
        return Ok(None);
    };
    let s = v
        .as_str()
        .ok_or_else(|| format!("\"{key}\": expected a hex string, got {v}"))?;
    crate::hex::parse(s)
        .map(Some)
        .map_err(|e| format!("\"{key}\": {e}"))
}

/// The object under `key`, `None` when absent or `null`.
pub fn obj_of<'a>(obj: &'a Obj, key: &str) -> Result<Option<&'a Obj>, String> {
    match get(obj, key) {
        None => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(v) => Err(format!("\"{key}\": expected an object, got {v}")),
    }
}

/// The array under `key`, `None` when absent or `null`.
pub fn array_of<'a>(obj: &'a Obj, key: &str) -> Result<Option<&'a [Value]>, String> {
    match get(obj, key) {
        None => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(v) => Err(format!("\"{key}\": expected an array, got {v}")),
    }
}

/// Fails on the first key of `obj` not in `allowed`, naming it (`what` says where it is).
pub fn only_keys(obj: &Obj, allowed: &[&str], what: &str) -> Result<(), String> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(format!("unknown key \"{k}\" in {what}")),
        None => Ok(()),
    }
}

/// An iov array (`rma_iov` or `read_iov`): `[{"addr", "len", "key"}]`, missing members 0.
pub fn iovs_of(obj: &Obj, key: &str) -> Result<Option<Vec<RmaIov>>, String> {
    let Some(items) = array_of(obj, key)? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let name = format!("{key}[{i}]");
        let Value::Object(o) = item else {
            return Err(format!("\"{name}\": expected an object, got {item}"));
        };
        only_keys(o, &["addr", "len", "key"], &format!("\"{name}\""))?;
        let field = |f: &str| -> Result<u64, String> {
            Ok(uint(o, f, u64::MAX)
                .map_err(|e| format!("{name}.{e}"))?
                .unwrap_or(0))
        };
        out.push(RmaIov::new(field("addr")?, field("len")?, field("key")?));
    }
    Ok(Some(out))
}

/// The JSON form of an iov array.
pub fn iovs_json(iovs: &[RmaIov]) -> Value {
    Value::Array(
        iovs.iter()
            .map(|v| {
                let mut m = Obj::new();
                m.insert("addr".into(), v.addr().into());
                m.insert("len".into(), v.len().into());
                m.insert("key".into(), v.key().into());
                Value::Object(m)
            })
            .collect(),
    )
}

/// Checks a derived value the JSON may repeat (`header_len`, `rma_iov_count`, …) against
/// the value computed from the rest.
pub fn check_derived(obj: &Obj, key: &str, actual: u64, from: &str) -> Result<(), String> {
    match get(obj, key) {
        None => Ok(()),
        Some(v) => {
            let given = as_uint(key, v)?;
            if given == actual {
                Ok(())
            } else {
                Err(format!("\"{key}\" is {given} but {from} gives {actual}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Obj {
        match v {
            Value::Object(o) => o,
            _ => Obj::new(),
        }
    }

    #[test]
    fn unsigned_integers() {
        let o = obj(
            json!({"a": 5, "b": "0xff", "c": "12", "d": -1, "e": 1.5, "f": null,
                           "g": 18446744073709551615u64, "h": "0x1_0000"}),
        );
        assert_eq!(uint(&o, "a", 10), Ok(Some(5)));
        assert_eq!(uint(&o, "b", 255), Ok(Some(255)));
        assert_eq!(uint(&o, "c", 255), Ok(Some(12)));
        assert!(uint(&o, "d", 255).unwrap_err().contains("\"d\""));
        assert!(uint(&o, "e", 255).is_err());
        assert_eq!(uint(&o, "f", 1), Ok(None));
        assert_eq!(uint(&o, "missing", 1), Ok(None));
        assert_eq!(uint(&o, "g", u64::MAX), Ok(Some(u64::MAX)));
        assert_eq!(
            u16_of(&o, "h").unwrap_err(),
            "\"h\": 65536 does not fit in 16 bits"
        );
        assert_eq!(
            u32_of(&o, "g").unwrap_err(),
            "\"g\": 18446744073709551615 does not fit in 32 bits"
        );
    }

    #[test]
    fn iov_arrays() {
        let o = obj(
            json!({"x": [{"addr": 1, "len": 2, "key": 3}, {}], "y": [{"bad": 1}],
                           "z": [1]}),
        );
        let v = iovs_of(&o, "x").unwrap().unwrap();
        assert_eq!(v, [RmaIov::new(1, 2, 3), RmaIov::new(0, 0, 0)]);
        assert_eq!(iovs_json(&v)[0], json!({"addr": 1, "len": 2, "key": 3}));
        assert!(iovs_of(&o, "y").unwrap_err().contains("\"bad\""));
        assert!(iovs_of(&o, "z").is_err());
    }
}

//! Hex text to bytes and back.

use std::fmt::Write;

/// Parses hex digits, ignoring whitespace anywhere (so `"41040c00 01000000"` works).
///
/// Errors name the first non-hex character and its position (0-based, in characters of
/// `s`), or say that the number of digits is odd.
pub fn parse(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len() / 2);
    let mut high: Option<u8> = None;
    let mut digits = 0usize;
    for (pos, c) in s.chars().enumerate() {
        if c.is_whitespace() {
            continue;
        }
        let Some(v) = c.to_digit(16) else {
            return Err(format!(
                "invalid hex: non-hex character {c:?} at position {pos}"
            ));
        };
        digits += 1;
        // to_digit(16) is below 16, so the cast is exact.
        let v = v as u8;
        match high.take() {
            None => high = Some(v),
            Some(h) => out.push(h << 4 | v),
        }
    }
    if high.is_some() {
        return Err(format!("invalid hex: odd number of hex digits ({digits})"));
    }
    Ok(out)
}

/// Lowercase hex, two digits per byte, no separators.
pub fn format(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_with_and_without_spaces() {
        assert_eq!(parse("41040c00").unwrap(), [0x41, 4, 0x0c, 0]);
        assert_eq!(parse(" 41 04\n0C\t00 ").unwrap(), [0x41, 4, 0x0c, 0]);
        assert_eq!(parse("").unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(
            parse("4104 0g").unwrap_err(),
            "invalid hex: non-hex character 'g' at position 6"
        );
        assert_eq!(
            parse("410").unwrap_err(),
            "invalid hex: odd number of hex digits (3)"
        );
        assert!(parse("é1").unwrap_err().contains("position 0"));
    }

    #[test]
    fn formats_lowercase() {
        assert_eq!(format(&[0xAB, 0x01, 0xff]), "ab01ff");
        assert_eq!(parse(&format(&[0, 1, 254, 255])).unwrap(), [0, 1, 254, 255]);
    }
}

//! Differential: parse → emit → parse gives the same representation, the re-emitted bytes
//! are as long as the input, and they differ from it only in padding/reserved bytes (which
//! emit zeroes): emitting the second parse reproduces the first emit exactly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagmatch_wire::efa::Repr;

fuzz_target!(|data: &[u8]| {
    let Ok(r1) = Repr::parse_bytes(data) else {
        return;
    };
    let mut out1 = vec![0u8; r1.buffer_len()];
    let n = r1.emit(&mut out1).expect("a parsed packet must emit");
    assert_eq!(n, data.len());
    let r2 = Repr::parse_bytes(&out1).expect("an emitted packet must parse");
    assert_eq!(r1, r2);
    let mut out2 = vec![0u8; r2.buffer_len()];
    r2.emit(&mut out2).expect("emit");
    assert_eq!(out1, out2);
    // Emitting into a short buffer is a length error, never a panic.
    if n > 0 {
        assert!(r1.emit(&mut out2[..n - 1]).is_err());
    }
});

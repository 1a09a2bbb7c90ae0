//! Any bytes as a TM message (TMH, RVH for RNDV/FIN, payload): typed error or a view whose
//! representation re-emits the same bytes (TM headers have no padding).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagmatch_wire::tm::{Rvh, TmPacket, TmRepr, Tmh};

fuzz_target!(|data: &[u8]| {
    let _ = Tmh::parse(data);
    let _ = Rvh::parse(data);
    match TmPacket::new_checked(data) {
        Ok(p) => {
            let r = TmRepr::parse(&p);
            let mut out = vec![0u8; r.buffer_len()];
            assert_eq!(r.emit(&mut out), Ok(data.len()));
            assert_eq!(out, data);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});

//! Any bytes: the checked view either rejects them with a typed error or every accessor
//! works without panicking, and the header length never exceeds the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagmatch_wire::efa::{Field, Packet, Repr};

fuzz_target!(|data: &[u8]| {
    match Packet::new_checked(data) {
        Ok(p) => {
            assert!(p.header_len() <= data.len());
            assert_eq!(p.header_len() + p.payload().len(), data.len());
            for f in Field::ALL {
                let _ = p.get(f);
            }
            let _ = (p.rma_iov(), p.raw_addr(), p.cq_data(), p.connid(), p.sender_connid());
            let _ = (p.extra_info(), p.host_id(), p.device_version(), p.user_recv_qp());
            let _ = (p.hmem_p2p(), p.read_iov(), p.data(), p.compare_operands());
            let r = Repr::parse(&p);
            assert_eq!(r.header_len(), p.header_len());
        }
        Err(e) => {
            // Display must work for every error.
            let _ = e.to_string();
        }
    }
});

//! Any bytes: the checked view either rejects them with a typed error or every accessor
//! works without panicking, and the header length never exceeds the input. The typed
//! check (`new_checked_as`) agrees with it for the packet's own type and for another.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagmatch_wire::efa::{Field, Packet, PacketType, Repr};

fuzz_target!(|data: &[u8]| {
    let own = data.first().and_then(|&t| PacketType::from_id(t).ok());
    for ty in own.into_iter().chain([PacketType::EagerTagRtm]) {
        let typed = Packet::new_checked_as(data, ty);
        match (Packet::new_checked(data), typed) {
            (Ok(p), Ok(q)) => {
                assert_eq!(p.pkt_type(), ty);
                assert_eq!(q.pkt_type(), ty);
                assert_eq!(p.header_len(), q.header_len());
                assert_eq!(
                    (p.msg_id(), p.tag(), p.connid()),
                    (q.msg_id(), q.tag(), q.connid())
                );
            }
            (Ok(p), Err(e)) => assert_ne!(p.pkt_type(), ty, "{e}"),
            (Err(e), Err(f)) => assert_eq!(e, f),
            (Err(e), Ok(_)) => panic!("typed check accepted what the view refused: {e}"),
        }
    }
    match Packet::new_checked(data) {
        Ok(p) => {
            assert!(p.header_len() <= data.len());
            assert_eq!(p.header_len() + p.payload().len(), data.len());
            for f in Field::ALL {
                let _ = p.get(f);
            }
            let _ = (
                p.rma_iov(),
                p.raw_addr(),
                p.cq_data(),
                p.connid(),
                p.sender_connid(),
            );
            let _ = (
                p.extra_info(),
                p.host_id(),
                p.device_version(),
                p.user_recv_qp(),
            );
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

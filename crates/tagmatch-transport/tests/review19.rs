//! Review of cb8147a (SoftRdma's registration limit): the accounting of the bytes
//! registered under every way a key goes away or never was.

use tagmatch_rdm::MemHandle;
use tagmatch_transport::soft_rdma::SoftRdma;

#[test]
fn registered_bytes_follow_live_registrations_only() {
    let mut r = SoftRdma::new(7);
    r.set_registration_limit(100);
    let a = r.try_register(MemHandle(0), 60, true).unwrap();
    // Zero bytes fit even at the limit, and count nothing.
    let z = r.try_register(MemHandle(1), 0, false).unwrap();
    let b = r.try_register(MemHandle(2), 40, false).unwrap();
    assert_eq!(r.registered_bytes(), 100);
    assert!(r.try_register(MemHandle(3), 1, true).is_none());
    assert!(r.try_register(MemHandle(3), u64::MAX, true).is_none());
    assert_eq!(r.stats.refused_registrations, 2);
    // Twice, and a key never issued: no change.
    assert!(r.deregister(a.key));
    assert!(!r.deregister(a.key));
    assert!(!r.deregister(0xdead_beef));
    assert_eq!(r.registered_bytes(), 40);
    assert!(r.deregister(z.key));
    assert_eq!(r.registered_bytes(), 40);
    // Lowering the limit keeps what is registered and refuses more.
    r.set_registration_limit(10);
    assert!(r.try_register(MemHandle(4), 1, true).is_none());
    assert!(r.deregister(b.key));
    assert_eq!(r.registered_bytes(), 0);
    assert!(r.try_register(MemHandle(4), 10, true).is_some());
    assert!(!r.exposes(MemHandle(0)) && r.exposes(MemHandle(4)));
}

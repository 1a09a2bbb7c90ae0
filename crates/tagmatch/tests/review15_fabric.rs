//! Review 15: an address of one in-process fabric handed to an endpoint of another.

mod common;

use common::{done, ep};
use tagmatch::{MemFabric, OpError, ANY_SOURCE, ANY_TAG};

/// Two fabrics in one process each number their endpoints from the same start: the
/// second fabric's endpoints must still have addresses of their own, and a message sent
/// to an endpoint of the other fabric fails (`SendFailed`: nothing there answers) instead
/// of landing at whichever endpoint of the sender's fabric sits at the same position.
/// Guards: addresses made only of per-fabric counters and a per-fabric seeded connid
/// (the second fabric's first endpoint had the first fabric's first endpoint's address,
/// and a send to it was delivered to the wrong endpoint).
#[test]
fn an_address_of_another_fabric_reaches_nobody_there() {
    for fast in [true, false] {
        let (f1, f2) = (MemFabric::new(), MemFabric::new());
        let (mut a1, mut b1) = (ep(&f1, fast), ep(&f1, fast));
        let (a2, b2) = (ep(&f2, fast), ep(&f2, fast));
        assert_ne!(a1.address(), a2.address(), "fast {fast}");
        assert_ne!(b1.address(), b2.address(), "fast {fast}");
        let to_b2 = a1.insert_peer(&b2.address()).unwrap();
        let r = b1.trecv(ANY_SOURCE, ANY_TAG, 8).unwrap();
        let s = a1.tsend(to_b2, 5, vec![5; 8]).unwrap();
        let c = done(&mut a1, s, &mut [&mut b1]);
        assert_eq!(c.status(), Err(OpError::SendFailed), "fast {fast}");
        for _ in 0..200 {
            a1.progress().unwrap();
            b1.progress().unwrap();
        }
        assert!(
            b1.take_completion(r).is_none(),
            "fast {fast}: delivered to b1"
        );
        b1.cancel(r).unwrap();
        drop((a2, b2));
    }
}

//! Review 15: receive and read lengths no allocation can honour are typed errors on every
//! path, never a panic or an abort of the process.

mod common;

use common::{done, ep, udp_pair};
use tagmatch::{Endpoint, Error, MemFabric, ANY_SOURCE, ANY_TAG};

/// `trecv`/`recv` of up to `usize::MAX` or 2^40 bytes, `mrecv` and `read` of as many:
/// on the fast path a receive allocates only what the message needs when it matches (so
/// it succeeds); elsewhere the buffer is allocated when the receive is posted, and a
/// length no allocation can honour is [`Error::BufferTooLarge`] (for `mrecv`, inside
/// [`Error::ClaimKept`] with the message, still receivable), the endpoint unharmed.
/// Guards: the protocol path's eager `vec![0; len]`, which panicked (capacity overflow)
/// for `usize::MAX` and aborted the process (allocation failure) for 2^40.
#[test]
fn impossible_buffer_lengths_are_refused_not_fatal() {
    for kind in ["fast", "proto", "udp"] {
        let f = MemFabric::new();
        let (mut a, mut b): (Endpoint, Endpoint) = match kind {
            "udp" => udp_pair(),
            _ => (ep(&f, kind == "fast"), ep(&f, kind == "fast")),
        };
        let ab = a.insert_peer(&b.address()).unwrap();
        let ba = b.insert_peer(&a.address()).unwrap();
        for len in [usize::MAX, 1 << 40] {
            let r = b.trecv(ANY_SOURCE, ANY_TAG, len);
            let u = b.recv(ba, len);
            if kind == "fast" {
                // Nothing allocated up front: both post, and take a message each.
                let s1 = a.tsend(ab, 1, vec![1; 8]).unwrap();
                let s2 = a.send(ab, vec![2; 8]).unwrap();
                assert_eq!(done(&mut b, r.unwrap(), &mut [&mut a]).data, vec![1; 8]);
                assert_eq!(done(&mut b, u.unwrap(), &mut [&mut a]).data, vec![2; 8]);
                for s in [s1, s2] {
                    done(&mut a, s, &mut [&mut b]).into_result().unwrap();
                }
                continue;
            }
            for x in [r, u] {
                match x {
                    Err(Error::BufferTooLarge { len: l }) => assert_eq!(l, len, "{kind}"),
                    other => panic!("{kind} {len}: {other:?}"),
                }
            }
            let mr = b.register(vec![0; 64]).unwrap();
            match a.read(ab, len, mr.remote_key().at(0)) {
                Err(Error::BufferTooLarge { len: l }) => assert_eq!(l, len, "{kind}"),
                other => panic!("{kind} read {len}: {other:?}"),
            }
            // A claimed message: handed back, then received.
            let s = a.tsend(ab, 5, vec![5; 8]).unwrap();
            let mut m = None;
            for _ in 0..100_000 {
                a.progress().unwrap();
                b.progress().unwrap();
                m = b.tmprobe(ba, 5u64);
                if m.is_some() {
                    break;
                }
            }
            let m = match b.mrecv(m.expect("claimed"), len) {
                Err(Error::ClaimKept { message, error }) => {
                    assert!(matches!(*error, Error::BufferTooLarge { .. }), "{kind}");
                    message
                }
                other => panic!("{kind} mrecv {len}: {other:?}"),
            };
            let r = b.mrecv(m, 8).unwrap();
            assert_eq!(done(&mut b, r, &mut [&mut a]).data, vec![5; 8], "{kind}");
            done(&mut a, s, &mut [&mut b]).into_result().unwrap();
        }
        // Still working, and the refusals counted as refused calls.
        let r = b.trecv(ba, 9u64, 8).unwrap();
        let s = a.tsend(ab, 9, vec![9; 8]).unwrap();
        assert_eq!(done(&mut b, r, &mut [&mut a]).data, vec![9; 8], "{kind}");
        done(&mut a, s, &mut [&mut b]).into_result().unwrap();
        if kind != "fast" {
            assert_eq!(b.stats().facade.call_errors, 6, "{kind}");
            assert_eq!(a.stats().facade.call_errors, 2, "{kind}");
        }
    }
}

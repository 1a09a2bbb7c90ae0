//! Review 15: a receiver whose unexpected budget is full still takes a message that a
//! posted receive is waiting for, on every path.

mod common;

use std::time::Duration;

use common::done;
use tagmatch::{Endpoint, MemFabric, Peer, ANY_SOURCE, ANY_TAG};

fn pair(kind: &str, msgs: usize) -> (Endpoint, Endpoint, Peer, Peer, Option<MemFabric>) {
    let f = MemFabric::new();
    let budget = |b: tagmatch::Builder| b.memory_budget(1 << 24, msgs);
    let (mut a, mut b) = match kind {
        "udp" => {
            let mk = || {
                budget(
                    Endpoint::builder()
                        .udp("127.0.0.1:0".parse().unwrap())
                        .wait_limit(Duration::from_secs(20)),
                )
                .build()
                .unwrap()
            };
            (mk(), mk())
        }
        _ => (
            budget(Endpoint::builder().mem(&f).fast_path(kind == "fast"))
                .build()
                .unwrap(),
            budget(Endpoint::builder().mem(&f).fast_path(kind != "proto"))
                .build()
                .unwrap(),
        ),
    };
    let ab = a.insert_peer(&b.address()).unwrap();
    let ba = b.insert_peer(&a.address()).unwrap();
    (a, b, ab, ba, Some(f))
}

/// Budget of 2 messages; messages tagged 1, 2 (unexpected: the budget is full), then 3
/// (held back: refused, or waiting at its sender). A receive for 3 is posted: it gets 3
/// (a message a receive waits for needs no room), then 1 and 2 are received in order.
/// Then an untagged message behind a tagged one nothing wants yet: both arrive once the
/// tagged one has a receive. Guards: a receiver that, full, looks at nothing held back
/// (the receive would wait for ever: the application will not receive 1 or 2 before 3),
/// or forgets the untagged message behind the tagged one.
#[test]
fn a_full_receiver_takes_the_message_a_receive_waits_for() {
    for kind in ["fast", "proto", "mixed", "udp"] {
        let (mut a, mut b, ab, ba, _f) = pair(kind, 2);
        let sends: Vec<_> = (1..=3u64)
            .map(|t| a.tsend(ab, t, vec![t as u8; 8]).unwrap())
            .collect();
        for _ in 0..200 {
            a.progress().unwrap();
            b.progress().unwrap();
        }
        let r3 = b.trecv(ba, 3u64, 8).unwrap();
        let c = done(&mut b, r3, &mut [&mut a]);
        assert_eq!((c.tag, c.data), (3, vec![3; 8]), "{kind}");
        for t in 1..=2u64 {
            let r = b.trecv(ANY_SOURCE, ANY_TAG, 8).unwrap();
            assert_eq!(done(&mut b, r, &mut [&mut a]).tag, t, "{kind}");
        }
        for s in sends {
            done(&mut a, s, &mut [&mut b]).into_result().unwrap();
        }
        // Tagged 4, 5 fill it; tagged 6 (nothing wants it yet) and an untagged message
        // wait. Every path keeps a peer's messages in order while one waits for room
        // (the protocol path by its message ids, the fast path in the lane), so the
        // untagged receive completes once 6 has a receive: then all complete.
        let mut sends: Vec<_> = (4..=6u64)
            .map(|t| a.tsend(ab, t, vec![t as u8; 8]).unwrap())
            .collect();
        sends.push(a.send(ab, vec![7; 8]).unwrap());
        let u = b.recv(ANY_SOURCE, 8).unwrap();
        let r6 = b.trecv(ba, 6u64, 8).unwrap();
        assert_eq!(done(&mut b, r6, &mut [&mut a]).tag, 6, "{kind}");
        assert_eq!(done(&mut b, u, &mut [&mut a]).data, vec![7; 8], "{kind}");
        for t in 4..=5u64 {
            let r = b.trecv(ba, t, 8).unwrap();
            assert_eq!(done(&mut b, r, &mut [&mut a]).tag, t, "{kind}");
        }
        for s in sends {
            done(&mut a, s, &mut [&mut b]).into_result().unwrap();
        }
    }
}

//! Review 15: what an RMA write's target sees in its completion queue
//! (`FI_REMOTE_CQ_DATA`): one `RemoteWrite` completion per write that carries CQ data,
//! none for one that does not, on every path and size class.

mod common;

use common::{done, ep, udp_pair};
use tagmatch::{Completion, Endpoint, MemFabric, OpKind, SendOptions, ANY_SOURCE};

/// Progresses both for a while, collecting `b`'s completions.
fn drain(a: &mut Endpoint, b: &mut Endpoint, udp: bool) -> Vec<Completion> {
    let mut got = Vec::new();
    for i in 0..3000 {
        a.progress().unwrap();
        b.progress().unwrap();
        while let Some(c) = b.poll_completion() {
            got.push(c);
        }
        if udp && i % 100 == 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    got
}

/// Writes small (eager or direct) and large (long-read or long-CTS write), with and
/// without delivery complete, with and without CQ data: the target's queue gets exactly
/// one `RemoteWrite` completion for each write with CQ data (its data, length and
/// sender; a request of its own that is none of the target's operations) and nothing for
/// the others; the target's pending receive is untouched. Guards: a completion per
/// packet or chunk of a long write, a completion for a write without CQ data (records
/// the application never asked for), CQ data lost on one subprotocol.
#[test]
fn a_write_with_cq_data_completes_once_at_the_target() {
    for kind in ["fast", "proto", "udp"] {
        let f = MemFabric::new();
        let (mut a, mut b) = match kind {
            "udp" => udp_pair(),
            _ => (ep(&f, kind == "fast"), ep(&f, kind == "fast")),
        };
        let ab = a.insert_peer(&b.address()).unwrap();
        let ba = b.insert_peer(&a.address()).unwrap();
        let mr = b.register(vec![0u8; 1 << 20]).unwrap();
        let pending = b.trecv(ANY_SOURCE, 99u64, 8).unwrap();
        for len in [8usize, 300_000] {
            for dc in [false, true] {
                for cq in [None, Some(len as u64 * 2 + u64::from(dc))] {
                    let label = format!("{kind} len {len} dc {dc} cq {cq:?}");
                    let o = SendOptions {
                        cq_data: cq,
                        delivery_complete: dc,
                    };
                    let w = a
                        .write_with(ab, vec![len as u8 ^ 0x5a; len], mr.remote_key().at(64), o)
                        .unwrap();
                    done(&mut a, w, &mut [&mut b]).into_result().unwrap();
                    let got = drain(&mut a, &mut b, kind == "udp");
                    match cq {
                        None => assert!(got.is_empty(), "{label}: {got:?}"),
                        Some(v) => {
                            assert_eq!(got.len(), 1, "{label}: {got:?}");
                            let c = &got[0];
                            assert_eq!(c.kind, OpKind::RemoteWrite, "{label}");
                            assert_eq!(
                                (c.cq_data(), c.source(), c.len, c.is_ok()),
                                (Some(v), Some(ba), len as u64, true),
                                "{label}"
                            );
                            assert_ne!(c.request, pending, "{label}");
                        }
                    }
                    assert!(
                        b.region(&mr).unwrap()[64..64 + len]
                            .iter()
                            .all(|&x| x == len as u8 ^ 0x5a),
                        "{label}: bytes"
                    );
                }
            }
        }
        assert!(b.take_completion(pending).is_none(), "{kind}");
        b.cancel(pending).unwrap();
    }
}

//! Review 15: probe / mprobe + mrecv against later receives (non-overtaking per source,
//! wildcards, masks), arrival order across a self-sender and another sender, and order
//! between injected and regular sends, on every path.

mod common;

use common::{done, ep, pair, PATHS};
use tagmatch::{Endpoint, Error, MemFabric, OpError, SendOptions, TagMatch, ANY_SOURCE, ANY_TAG};

/// Progresses both until `b` holds `n` unexpected messages.
fn until_unexpected(a: &mut Endpoint, b: &mut Endpoint, n: usize, label: &str) {
    for _ in 0..200_000 {
        a.progress().unwrap();
        b.progress().unwrap();
        if b.stats().unexpected >= n {
            return;
        }
    }
    panic!("{label}: {} unexpected, wanted {n}", b.stats().unexpected);
}

/// Unexpected messages from one sender, claimed and received in every way: a probe does
/// not consume (twice the same answer, and a receive then gets that message); a claimed
/// message is invisible to probes and receives, which take the next one in order
/// (non-overtaking per source for what is left); masks and ANY_SOURCE/ANY_TAG pick the
/// earliest accepted; tagged and untagged never mix; `mrecv` into a short buffer
/// truncates with the first bytes; a receive posted while the only accepted message is
/// claimed waits for the next arrival. Guards: a claim that leaves the message visible
/// (received twice), a probe that consumes, a receive that overtakes to a later message
/// while an earlier accepted one is unclaimed, a masked mprobe that ignores the mask.
#[test]
fn claimed_messages_are_skipped_and_the_rest_keep_their_order() {
    for kind in PATHS {
        let (mut a, mut b, ab, ba, _f) = pair(kind);
        // (tag, length): lengths tell the messages apart.
        let msgs: [(Option<u64>, usize); 6] = [
            (Some(0x1ff), 1),
            (Some(0x2ff), 2),
            (Some(0x1ff), 3),
            (Some(0x101), 4),
            (None, 5),
            (Some(0x1ff), 6),
        ];
        let data = |len: usize| vec![len as u8 * 17; len];
        let mut sends = Vec::new();
        for (tag, len) in msgs {
            sends.push(match tag {
                Some(t) => a.tsend(ab, t, data(len)).unwrap(),
                None => a.send(ab, data(len)).unwrap(),
            });
        }
        until_unexpected(&mut a, &mut b, 6, kind);
        let probes0 = b.stats().facade.probes;
        // Probes do not consume.
        for _ in 0..2 {
            let p = b.tprobe(ba, 0x1ffu64).expect(kind);
            assert_eq!((p.tag, p.len, p.source), (0x1ff, 1, ba), "{kind}");
        }
        let p = b.tprobe(ANY_SOURCE, ANY_TAG).expect(kind);
        assert_eq!(p.len, 1, "{kind}: the earliest tagged");
        let p = b.probe(ANY_SOURCE).expect(kind);
        assert_eq!(p.len, 5, "{kind}: the untagged one");
        // Masked claim: the earliest of 0x1ff, 0x1ff, 0x101, 0x1ff.
        let mask = TagMatch::masked(0x100, 0xf00);
        let m1 = b.tmprobe(ANY_SOURCE, mask).expect(kind);
        assert_eq!((m1.info.tag, m1.info.len), (0x1ff, 1), "{kind}");
        // Now the exact probe sees the next 0x1ff, and a receive takes that one.
        assert_eq!(b.tprobe(ba, 0x1ffu64).map(|p| p.len), Some(3), "{kind}");
        let r = b.trecv(ba, 0x1ffu64, 64).unwrap();
        let c = done(&mut b, r, &mut [&mut a]);
        assert_eq!(c.data, data(3), "{kind}: not the claimed one");
        // The next masked claim: 0x101 (before the last 0x1ff).
        let m4 = b.tmprobe(ba, mask).expect(kind);
        assert_eq!((m4.info.tag, m4.info.len), (0x101, 4), "{kind}");
        // Untagged: only the untagged one, and a tagged mprobe never sees it.
        let mu = b.mprobe(ba).expect(kind);
        assert_eq!((mu.info.tag, mu.info.len), (0, 5), "{kind}");
        assert!(b.mprobe(ANY_SOURCE).is_none(), "{kind}: claimed");
        // What is left, in order: 0x2ff, then the last 0x1ff.
        for want in [2usize, 6] {
            let r = b.trecv(ANY_SOURCE, ANY_TAG, 64).unwrap();
            assert_eq!(done(&mut b, r, &mut [&mut a]).data, data(want), "{kind}");
        }
        assert!(b.tprobe(ANY_SOURCE, ANY_TAG).is_none(), "{kind}");
        // A receive posted while the only messages are claimed: waits.
        let late = b.trecv(ANY_SOURCE, ANY_TAG, 64).unwrap();
        for _ in 0..50 {
            a.progress().unwrap();
            b.progress().unwrap();
        }
        assert!(
            b.take_completion(late).is_none(),
            "{kind}: claimed: not taken"
        );
        // mrecv: truncated (first bytes), into a buffer, untagged.
        let r = b.mrecv(m4, 2).unwrap();
        let c = done(&mut b, r, &mut [&mut a]);
        assert_eq!(
            c.status(),
            Err(OpError::Truncated {
                msg_len: 4,
                buf_len: 2
            }),
            "{kind}"
        );
        assert_eq!((c.tag, &c.data[..]), (0x101, &data(4)[..2]), "{kind}");
        let r = b.mrecv_into(m1, vec![0xee; 16]).unwrap();
        let c = done(&mut b, r, &mut [&mut a]);
        assert_eq!(
            (c.tag, c.len, c.data.clone()),
            (0x1ff, 1, data(1)),
            "{kind}"
        );
        let r = b.mrecv(mu, 64).unwrap();
        let c = done(&mut b, r, &mut [&mut a]);
        assert_eq!((c.tag, c.data.clone()), (0, data(5)), "{kind}");
        assert_eq!(c.source(), Some(ba), "{kind}");
        // The late receive takes the next arrival.
        let s = a.tsend(ab, 7, b"late".to_vec()).unwrap();
        let c = done(&mut b, late, &mut [&mut a]);
        assert_eq!((c.tag, &c.data[..]), (7, &b"late"[..]), "{kind}");
        sends.push(s);
        for s in sends {
            done(&mut a, s, &mut [&mut b]).into_result().unwrap();
        }
        // 2 + 1 + 1 probes, 1 probe, 3 mprobes + 1 failed one, 1 empty probe.
        assert_eq!(b.stats().facade.probes - probes0, 10, "{kind}");
        assert_eq!(b.stats().unexpected, 0, "{kind}");
    }
}

/// A claimed message handed to another endpoint's `mrecv` is [`Error::StaleMessage`], a
/// typed error, and that endpoint's own claim (likely the same handle number in its own
/// engine or protocol endpoint) is untouched: still received once, with its own bytes.
/// Guards: an `mrecv` that looks the claim up without checking whose it is (it would
/// receive the other endpoint's own claimed message).
#[test]
fn a_claimed_message_of_another_endpoint_is_stale() {
    for kind in PATHS {
        let (mut a, mut b, ab, ba, _f) = pair(kind);
        let sa = a.tsend(ab, 3, vec![1; 8]).unwrap();
        let sb = b.tsend(ba, 3, vec![2; 8]).unwrap();
        until_unexpected(&mut a, &mut b, 1, kind);
        until_unexpected(&mut b, &mut a, 1, kind);
        let mb = b.tmprobe(ANY_SOURCE, ANY_TAG).expect(kind);
        let ma = a.tmprobe(ANY_SOURCE, ANY_TAG).expect(kind);
        assert!(matches!(a.mrecv(mb, 8), Err(Error::StaleMessage)), "{kind}");
        let r = a.mrecv(ma, 8).unwrap();
        assert_eq!(done(&mut a, r, &mut [&mut b]).data, vec![2; 8], "{kind}");
        done(&mut a, sa, &mut [&mut b]).into_result().unwrap();
        done(&mut b, sb, &mut [&mut a]).into_result().unwrap();
    }
}

/// `b` sends to itself and receives from `a` at once. Per source, ANY_TAG receives get
/// each sender's messages in send order; ANY_SOURCE receives get them in arrival order:
/// here each message arrived (was seen unexpected by a probe) before the next was sent,
/// so arrival order is the send order across both senders. Guards: a self-send that
/// jumps ahead of (or behind) a lane message that arrived before it, a self-send path that
/// keeps its own order but not the engine's arrival order.
#[test]
fn self_sends_and_a_peers_sends_arrive_in_order() {
    for kind in PATHS {
        let (mut a, mut b, ab, ba, _f) = pair(kind);
        let me = b.insert_peer(&b.address()).unwrap();
        // (from self?, tag)
        let plan: Vec<(bool, u64)> = (0..12u64).map(|i| (i % 3 != 1, i)).collect();
        let mut sends_a = Vec::new();
        let mut sends_b = Vec::new();
        for (k, &(own, tag)) in plan.iter().enumerate() {
            let payload = vec![tag as u8; 8 + tag as usize];
            if own {
                if tag % 2 == 0 {
                    b.tinject(me, tag, &payload).unwrap();
                } else {
                    sends_b.push(b.tsend(me, tag, payload).unwrap());
                }
            } else {
                sends_a.push(a.tsend(ab, tag, payload).unwrap());
            }
            until_unexpected(&mut a, &mut b, k + 1, kind);
        }
        // Arrival order across both: ANY_SOURCE, ANY_TAG, the first half.
        for &(own, tag) in &plan[..6] {
            let r = b.trecv(ANY_SOURCE, ANY_TAG, 64).unwrap();
            let c = done(&mut b, r, &mut [&mut a]);
            assert_eq!(c.tag, tag, "{kind}: arrival order");
            assert_eq!(c.source(), Some(if own { me } else { ba }), "{kind}");
            assert_eq!(c.data, vec![tag as u8; 8 + tag as usize], "{kind}");
        }
        // Per source, the second half: first every message from a, then from self.
        for (src, own) in [(ba, false), (me, true)] {
            for &(o, tag) in plan[6..].iter().filter(|(o, _)| *o == own) {
                let r = b.trecv(src, ANY_TAG, 64).unwrap();
                let c = done(&mut b, r, &mut [&mut a]);
                assert_eq!((o, c.tag), (own, tag), "{kind}: per-source order");
            }
        }
        for s in sends_a {
            done(&mut a, s, &mut [&mut b]).into_result().unwrap();
        }
        for s in sends_b {
            done(&mut b, s, &mut [&mut a]).into_result().unwrap();
        }
        assert!(b.poll_completion().is_none(), "{kind}: injects are silent");
    }
}

/// Injected and regular sends (small, past the inline size, large, delivery complete)
/// interleaved to one peer, more of them than a fast-path lane's ring holds, none taken
/// until all are sent: they arrive in send order. The same to the endpoint itself.
/// Guards: an inject that goes straight into the ring while regular sends wait for ring
/// space (or the other way round), an inject path that skips a queued self-send.
#[test]
fn injected_and_regular_sends_keep_one_order() {
    for kind in ["fast", "proto", "mixed", "udp", "self-fast", "self-proto"] {
        let (mut a, mut b, ab, ba, _f) = match kind.strip_prefix("self-") {
            // `b` sends to itself (`a` idles beside it).
            Some(p) => {
                let f = MemFabric::new();
                let (a, mut b) = (ep(&f, p == "fast"), ep(&f, p == "fast"));
                let me = b.insert_peer(&b.address()).unwrap();
                (a, b, me, me, Some(f))
            }
            None => pair(kind),
        };
        let own = kind.starts_with("self-");
        let n: u64 = if kind == "udp" { 300 } else { 1200 };
        let dc = SendOptions {
            cq_data: Some(5),
            delivery_complete: true,
        };
        let body = |i: u64| -> Vec<u8> {
            let len = match i % 5 {
                0 | 2 => 8,
                1 => 40,
                3 => 33,
                _ => {
                    if i % 50 == 4 {
                        20_000
                    } else {
                        1
                    }
                }
            };
            (0..len).map(|x| (i as usize * 13 + x) as u8).collect()
        };
        let mut sends = Vec::new();
        for i in 0..n {
            let d = body(i);
            let x = if own { &mut b } else { &mut a };
            match i % 5 {
                0 | 3 => x.tinject(ab, i, &d).unwrap(),
                2 => sends.push(x.tsend_with(ab, i, d, dc).unwrap()),
                _ => sends.push(x.tsend(ab, i, d).unwrap()),
            }
        }
        for i in 0..n {
            let r = b.trecv(ba, ANY_TAG, 20_000).unwrap();
            let c = done(&mut b, r, &mut [&mut a]);
            assert_eq!(c.tag, i, "{kind}: send order");
            assert!(c.data == body(i), "{kind}: message {i}'s bytes");
        }
        for s in sends {
            let c = if own {
                done(&mut b, s, &mut [&mut a])
            } else {
                done(&mut a, s, &mut [&mut b])
            };
            c.into_result().unwrap();
        }
        assert!(a.poll_completion().is_none(), "{kind}");
        assert!(b.poll_completion().is_none(), "{kind}");
        let st = if own { b.stats() } else { a.stats() };
        assert_eq!(st.facade.injected, 2 * n / 5, "{kind}: injected counted");
    }
}

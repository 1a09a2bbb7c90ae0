//! Review of the index hash's high-bit fold (`hash_key`: `blk ^ (blk >> 11)`): a
//! performance change, so matching must be exactly what it was. Exact receives with
//! tags that differ only in the bits the fold moves (high blocks, strides of powers of
//! two, tags near `u64::MAX`, tags equal after the fold's shift but not before), posted
//! and then met by arrivals in a scrambled order: each arrival takes its own receive,
//! and a tag no receive has stays unexpected.

use tagmatch_engine::{Arrived, Config, Engine, Envelope, Posted, RecvSpec};

fn engine() -> Engine<u64, u64> {
    Engine::new(
        Config::default()
            .max_messages(usize::MAX)
            .max_posted(usize::MAX)
            .max_bytes(usize::MAX),
    )
}

/// Tags whose blocks (tag >> 2) collide in their low bits or differ only above bit 11.
fn tricky_tags() -> Vec<u64> {
    let mut t = Vec::new();
    for i in 0..512u64 {
        t.push(i << 16);
        t.push(i << 13);
        t.push((i << 40) | 3);
        t.push(u64::MAX - i);
        t.push((1 << 63) | (i << 13));
        // Blocks b and b ^ (b >> 11) for the same b: a pair the fold relates.
        let b = (i + 1) << 11;
        t.push(b << 2);
        t.push((b ^ (b >> 11)) << 2);
    }
    t.sort_unstable();
    t.dedup();
    t
}

#[test]
fn strided_and_high_tags_match_their_own_receives() {
    let tags = tricky_tags();
    for (comm, src) in [(0u32, 0u32), (7, 3), (u32::MAX, u32::MAX)] {
        let mut e = engine();
        for (i, &tag) in tags.iter().enumerate() {
            match e.post(RecvSpec::new(comm, Some(src), Some(tag)), i as u64) {
                Ok(Posted::Pending(_)) => {}
                other => panic!("post {tag:#x}: {other:?}"),
            }
        }
        // A scrambled arrival order.
        let mut order: Vec<usize> = (0..tags.len()).collect();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in (1..order.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        for &i in &order {
            match e.arrive(Envelope::new(comm, src, tags[i]), 0, i as u64) {
                Ok(Arrived::Matched(m)) => {
                    assert_eq!(m.recv, i as u64, "tag {:#x} took another receive", tags[i])
                }
                other => panic!("tag {:#x}: {other:?}", tags[i]),
            }
        }
        // Everything taken: a repeated tag is unexpected now.
        match e.arrive(Envelope::new(comm, src, tags[0]), 0, 0) {
            Ok(Arrived::Unexpected(_)) => {}
            other => panic!("no receive left: {other:?}"),
        }
    }
}

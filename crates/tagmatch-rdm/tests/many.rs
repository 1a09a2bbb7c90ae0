//! Many endpoints, wildcard receives: every message arrives exactly once, intact, and
//! messages from one source are received in send order (MPI non-overtaking).
mod common;
use common::*;
use std::collections::HashMap;
use tagmatch_rdm::testing::{Fabric, XorShift};
use tagmatch_rdm::{OpKind, SendOpts};

fn body(src: usize, seq: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len.max(16));
    v.extend_from_slice(&(src as u64).to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    let mut x = XorShift::new(src as u64 * 1_000_003 + seq);
    while v.len() < len {
        v.push(x.next_u64() as u8);
    }
    v
}

#[test]
fn six_endpoints_any_source_any_tag() {
    for seed in 0..3u64 {
        let n = 6;
        let mut fab = Fabric::new(seed);
        fab.faults.send_again = 50;
        fab.faults.register_fail = 50;
        let mut rng = XorShift::new(seed + 100);
        let nodes: Vec<usize> = (0..n).map(|_| fab.add(small_cfg())).collect();
        let peers: Vec<Vec<_>> = (0..n)
            .map(|i| (0..n).map(|j| fab.connect(nodes[i], nodes[j])).collect())
            .collect();
        let mut expected: HashMap<usize, usize> = HashMap::new();
        let mut seqs = vec![vec![0u64; n]; n];
        let mut lens: HashMap<(usize, u64, usize), usize> = HashMap::new();
        for _ in 0..600 {
            let s = rng.below(n as u64) as usize;
            let mut d = rng.below(n as u64 - 1) as usize;
            if d >= s {
                d += 1;
            }
            let seq = seqs[s][d];
            seqs[s][d] += 1;
            let len = 16 + [0, 100, 700, 3000, 6000][rng.below(5) as usize];
            lens.insert((s, seq, d), len);
            let tag = rng.below(4);
            fab.ep(nodes[s])
                .tsend(peers[s][d], tag, body(s, seq, len), SendOpts::default())
                .unwrap();
            *expected.entry(d).or_default() += 1;
            if rng.below(10) == 0 {
                fab.drive();
            }
        }
        fab.drive();
        for (&d, &count) in &expected {
            for _ in 0..count {
                fab.ep(nodes[d]).trecv(None, 0, u64::MAX, 7000).unwrap();
            }
        }
        fab.drive();
        for d in 0..n {
            let mut next = vec![0u64; n];
            let cs = fab.completions(nodes[d]);
            let mut recvs: Vec<_> = cs.iter().filter(|c| c.kind == OpKind::Recv).collect();
            // Posting order (completion order differs: a long message completes later).
            recvs.sort_by_key(|c| c.op);
            assert_eq!(recvs.len(), expected.get(&d).copied().unwrap_or(0));
            for c in recvs {
                assert_eq!(c.result, Ok(()));
                let src = u64::from_le_bytes(c.data[..8].try_into().unwrap()) as usize;
                let seq = u64::from_le_bytes(c.data[8..16].try_into().unwrap());
                // Receives were posted in order, so each source's messages come in order.
                assert_eq!(seq, next[src], "node {d} from {src}, seed {seed}");
                next[src] += 1;
                let len = lens[&(src, seq, d)];
                assert_eq!(c.len as usize, len);
                assert!(c.data[..len] == body(src, seq, len)[..]);
                assert_eq!(c.src, Some(peers[d][src]));
            }
            assert_eq!(next, (0..n).map(|s| seqs[s][d]).collect::<Vec<_>>());
        }
        assert!(fab.wire_errors.is_empty());
    }
}

//! Review 15: RMA and atomics that name bytes outside a region (past its end, straddling
//! it, wrapping below its start, a wrong key, a deregistered key), over `mem` (fast path
//! on and off: RMA takes the protocol either way) and UDP.

mod common;

use std::time::Duration;

use common::{done, ep, udp_pair};
use tagmatch::{
    AtomicArgs, AtomicOp, Completion, Datatype, DeviceStats, Endpoint, Error, MemFabric, OpKind,
    Peer, RemoteAddr, Request, SendOptions,
};

fn pair(kind: &str) -> (Endpoint, Endpoint, Peer, Option<MemFabric>) {
    let (mut a, b, f) = match kind {
        "udp" => {
            let (a, b) = udp_pair();
            (a, b, None)
        }
        _ => {
            let f = MemFabric::new();
            let (a, b) = (ep(&f, kind == "fast"), ep(&f, kind == "fast"));
            (a, b, Some(f))
        }
    };
    let ab = a.insert_peer(&b.address()).unwrap();
    (a, b, ab, f)
}

/// Requests the target refused: counted by the protocol endpoint (invalid packets) and
/// by the device's software RDMA (bad key, bounds, region gone).
fn refusals(e: &Endpoint) -> u64 {
    let st = e.stats();
    let r = match st.device {
        DeviceStats::Mem(r) => r,
        DeviceStats::Udp(u) => u.rdma,
        // With the `verbs` feature: these tests run on `mem` and `udp` only.
        #[allow(unreachable_patterns)]
        _ => panic!("review15_rma runs on the mem and udp devices only"),
    };
    st.rdm.rx_invalid
        + st.rdm.rx_unknown_op
        + r.rejected_key
        + r.rejected_bounds
        + r.rejected_memory
}

/// What a refused operation may come to within `limit` while both endpoints progress:
/// its completion, or none (EFA RDM v4 has no packet to tell the requester of a refused
/// emulated RMA; `Endpoint::read`'s documentation).
fn outcome(a: &mut Endpoint, b: &mut Endpoint, r: Request, rounds: usize) -> Option<Completion> {
    for _ in 0..rounds {
        if let Some(c) = a.take_completion(r) {
            return Some(c);
        }
        a.progress().unwrap();
        b.progress().unwrap();
        if rounds > 1000 {
            // UDP: let the datagrams travel.
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    a.take_completion(r)
}

const FILL: u8 = 0xaa;
const LEN: usize = 64;

/// Every out-of-range RMA and atomic is refused at the target: the region's bytes stay
/// as they were (no partial write of the part in range, no atomic applied across the
/// end), a read never completes successfully (its data would be bytes the region does
/// not have), nor does a delivery-complete write or an atomic, and the target counts each
/// refusal; afterwards the same endpoints still do correct RMA at the region's last
/// bytes. Guards: a bounds check of the start address only (a straddling write or atomic
/// lands its first bytes), `addr + len` overflowing past the check, a key looked up by
/// address alone.
#[test]
fn rma_outside_a_region_is_refused_and_changes_nothing() {
    for kind in ["fast", "proto", "udp"] {
        let (mut a, mut b, ab, _f) = pair(kind);
        let rounds = if kind == "udp" { 1500 } else { 300 };
        let mr = b.register(vec![FILL; LEN]).unwrap();
        let k = mr.remote_key();
        // A second region right after it (if the addresses are adjacent, a straddling
        // access could land in it): must stay untouched too.
        let next = b.register(vec![FILL; LEN]).unwrap();
        let wrong_key = RemoteAddr {
            addr: k.addr,
            key: k.key ^ 0x5a5a_0000,
        };
        // (what, where RMA goes and its length, where a u64 atomic goes)
        let targets: [(&str, RemoteAddr, usize, RemoteAddr); 6] = [
            (
                "straddling the end",
                k.at(LEN as u64 - 8),
                16,
                k.at(LEN as u64 - 4),
            ),
            ("just past the end", k.at(LEN as u64), 8, k.at(LEN as u64)),
            (
                "larger than the region",
                k.at(0),
                300_000,
                k.at(LEN as u64 - 4),
            ),
            (
                "wrapping below the start",
                k.at(u64::MAX - 3),
                8,
                k.at(u64::MAX - 3),
            ),
            (
                "far past the end",
                k.at(u64::MAX / 2),
                8,
                k.at(u64::MAX / 2),
            ),
            ("a wrong key", wrong_key, 8, wrong_key),
        ];
        let dc = SendOptions {
            cq_data: None,
            delivery_complete: true,
        };
        let before = refusals(&b);
        let mut cases = 0u64;
        for (what, at, len, aat) in targets {
            let label = format!("{kind}: {what}");
            // A plain write may complete (transmit complete) or fail; a delivery-complete
            // write must not report success.
            let w = a.write(ab, vec![0x11; len], at).unwrap();
            if let Some(c) = outcome(&mut a, &mut b, w, rounds) {
                assert_eq!(c.kind, OpKind::Write, "{label}");
            }
            let w = a.write_with(ab, vec![0x22; len], at, dc).unwrap();
            if let Some(c) = outcome(&mut a, &mut b, w, rounds) {
                assert!(!c.is_ok(), "{label}: delivery complete reported: {c:?}");
            }
            let r = a.read(ab, len, at).unwrap();
            if let Some(c) = outcome(&mut a, &mut b, r, rounds) {
                assert!(!c.is_ok(), "{label}: read succeeded: {:?}", c.data.len());
            }
            let f = a.fetch_add_u64(ab, aat, 1).unwrap();
            if let Some(c) = outcome(&mut a, &mut b, f, rounds) {
                assert!(!c.is_ok(), "{label}: fetch-add applied: {c:?}");
            }
            let cs = a
                .compare_swap_u64(ab, aat, u64::from_le_bytes([FILL; 8]), 7)
                .unwrap();
            if let Some(c) = outcome(&mut a, &mut b, cs, rounds) {
                assert!(!c.is_ok(), "{label}: compare-swap applied: {c:?}");
            }
            let args = AtomicArgs {
                datatype: Datatype::U32,
                op: AtomicOp::Bor,
                operand: vec![0xff; len.min(128)],
                compare: None,
            };
            let at4 = a.atomic(ab, args, at).unwrap();
            if let Some(c) = outcome(&mut a, &mut b, at4, rounds) {
                assert!(
                    c.kind == OpKind::AtomicWrite,
                    "{label}: {c:?} (an atomic without result completes when sent, or fails)"
                );
            }
            cases += 6;
            assert_eq!(b.region(&mr).unwrap(), &[FILL; LEN][..], "{label}");
            assert_eq!(b.region(&next).unwrap(), &[FILL; LEN][..], "{label}");
        }
        let refused = refusals(&b) - before;
        assert!(
            refused >= cases,
            "{kind}: {refused} refusals for {cases} requests"
        );
        // Still working, at the region's last bytes.
        let w = a
            .write_with(ab, vec![1, 2, 3, 4, 5, 6, 7, 8], k.at(LEN as u64 - 8), dc)
            .unwrap();
        done(&mut a, w, &mut [&mut b]).into_result().unwrap();
        let f = a.fetch_add_u64(ab, k.at(LEN as u64 - 16), 5).unwrap();
        let c = done(&mut a, f, &mut [&mut b]).into_result().unwrap();
        assert_eq!(c.data_u64(), Some(u64::from_le_bytes([FILL; 8])), "{kind}");
        let r = a.read(ab, 16, k.at(LEN as u64 - 16)).unwrap();
        let c = done(&mut a, r, &mut [&mut b]).into_result().unwrap();
        let mut want = u64::from_le_bytes([FILL; 8])
            .wrapping_add(5)
            .to_le_bytes()
            .to_vec();
        want.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(c.data, want, "{kind}");
        assert_eq!(&b.region(&mr).unwrap()[LEN - 16..], &want[..], "{kind}");
    }
}

/// A key that was valid and has been deregistered: refused like a key never issued,
/// the bytes handed back by `deregister` untouched, and a region registered afterwards
/// (which may reuse the address) untouched by an access with the old key. Guards:
/// a stale key that still resolves (a use after deregistration), a new region that
/// inherits the old key.
#[test]
fn rma_with_a_deregistered_key_is_refused() {
    for kind in ["fast", "proto", "udp"] {
        let (mut a, mut b, ab, _f) = pair(kind);
        let rounds = if kind == "udp" { 1500 } else { 300 };
        let mr = b.register(vec![FILL; LEN]).unwrap();
        let old = mr.remote_key();
        assert_eq!(b.deregister(mr).unwrap(), vec![FILL; LEN], "{kind}");
        let fresh = b.register(vec![0x33; LEN]).unwrap();
        assert_ne!(fresh.remote_key().key, old.key, "{kind}: a new key");
        let before = refusals(&b);
        let dc = SendOptions {
            cq_data: None,
            delivery_complete: true,
        };
        let w = a.write_with(ab, vec![0x44; 8], old.at(0), dc).unwrap();
        if let Some(c) = outcome(&mut a, &mut b, w, rounds) {
            assert!(!c.is_ok(), "{kind}: {c:?}");
        }
        let r = a.read(ab, 8, old.at(0)).unwrap();
        if let Some(c) = outcome(&mut a, &mut b, r, rounds) {
            assert!(!c.is_ok(), "{kind}: {c:?}");
        }
        let f = a.fetch_add_u64(ab, old.at(8), 1).unwrap();
        if let Some(c) = outcome(&mut a, &mut b, f, rounds) {
            assert!(!c.is_ok(), "{kind}: {c:?}");
        }
        assert!(refusals(&b) - before >= 3, "{kind}");
        assert_eq!(b.region(&fresh).unwrap(), &[0x33; LEN][..], "{kind}");
        // And the wait on a request that never completes names it.
        let r = a.read(ab, 8, old.at(0)).unwrap();
        match a.wait_for(r, Duration::from_millis(50)) {
            Err(Error::Timeout { request, .. }) => assert_eq!(request, r, "{kind}"),
            Err(Error::Failed { request, .. }) => assert_eq!(request, r, "{kind}"),
            other => panic!("{kind}: {other:?}"),
        }
    }
}

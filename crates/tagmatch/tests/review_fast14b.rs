//! Adversarial checks of 9bc87e2 (`tx_check` reads a finished send's fields in place and
//! drops its record in its slot): every send's completion still carries its own tag and
//! length, a region send's hold on the caller's region is released exactly once (the
//! region can be deregistered, and only after its sends completed), and an owned send's
//! buffer registration is released, over UDP and in process, at every protocol size.

mod common;

use common::{introduce, mem_pair_fast, udp_pair};
use tagmatch::{Endpoint, Error, MemFabric, OpKind, TagMatch};

/// Registrations the device holds for `ep` (registered − deregistered).
fn regs_held(ep: &Endpoint) -> u64 {
    match ep.stats().device {
        tagmatch::DeviceStats::Mem(d) => d.registered - d.deregistered,
        tagmatch::DeviceStats::Udp(u) => u.rdma.registered - u.rdma.deregistered,
        #[allow(unreachable_patterns)]
        _ => 0,
    }
}

fn sends_complete_with_their_own_fields(mut a: Endpoint, mut b: Endpoint) {
    let pb = a.insert_peer(&b.address()).unwrap();
    let pa = b.insert_peer(&a.address()).unwrap();
    // A round trip first: a learns b's features (RDMA read) for the long-read sizes.
    introduce(&mut a, &mut b, pb, pa);
    a.progress().unwrap();
    let held0 = regs_held(&a);
    let sizes = [0usize, 8, 4_000, 20_000, 300_000, 1 << 20];
    let data: Vec<u8> = (0..(1 << 20) + 64).map(|i| (i * 7 + i / 5) as u8).collect();
    let mut mr = a.register(data.clone()).unwrap();
    for (i, &len) in sizes.iter().enumerate() {
        let tag = 0x100 + i as u64;
        let off = i * 3;
        // A region send and an owned send of the same size, in flight together.
        let r1 = b.trecv(pa, TagMatch::exact(tag), len).unwrap();
        let r2 = b.trecv(pa, TagMatch::exact(tag + 0x1000), len).unwrap();
        let s1 = a.tsend_region(pb, tag, &mr, off..off + len).unwrap();
        let s2 = a.tsend(pb, tag + 0x1000, data[..len].to_vec()).unwrap();
        assert_eq!(a.region_sends_in_flight(&mr).unwrap(), 1, "size {len}");
        mr = match a.deregister(mr) {
            Err(Error::RegionInUse { region, sends }) => {
                assert_eq!(sends, 1, "size {len}");
                region
            }
            other => panic!("size {len}: expected RegionInUse, got {other:?}"),
        };
        let c1 = b.wait_with(r1, &mut [&mut a]).unwrap();
        let c2 = b.wait_with(r2, &mut [&mut a]).unwrap();
        assert!(c1.data == data[off..off + len], "size {len}: region data");
        assert!(c2.data == data[..len], "size {len}: owned data");
        let d2 = a.wait_with(s2, &mut [&mut b]).unwrap();
        let d1 = a.wait_with(s1, &mut [&mut b]).unwrap();
        for (d, t) in [(&d1, tag), (&d2, tag + 0x1000)] {
            assert_eq!(
                (d.kind, d.tag, d.len),
                (OpKind::Send, t, len as u64),
                "size {len}: send completion"
            );
        }
        assert_eq!(a.region_sends_in_flight(&mr).unwrap(), 0, "size {len}");
        // The owned send's buffer (registered for the larger protocols) is released;
        // the caller's region stays registered, with its bytes.
        a.progress().unwrap();
        assert_eq!(regs_held(&a), held0 + 1, "size {len}: registrations held");
        assert!(a.region(&mr).unwrap() == &data[..], "size {len}");
    }
    assert!(a.deregister(mr).unwrap() == data);
    a.progress().unwrap();
    assert_eq!(regs_held(&a), held0, "the region's registration released");
}

#[test]
fn sends_complete_with_their_own_fields_over_udp() {
    let (a, b) = udp_pair();
    sends_complete_with_their_own_fields(a, b);
}

#[test]
fn sends_complete_with_their_own_fields_in_process() {
    let fabric = MemFabric::new();
    let (a, b) = mem_pair_fast(&fabric, false);
    sends_complete_with_their_own_fields(a, b);
}

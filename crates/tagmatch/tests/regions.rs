//! Sends from registered regions (the registration cache for repeated large sends) and the
//! matching / HW-SW sections of `stats()`, over both transports.

mod common;

use common::{introduce, mem_pair, mem_pair_fast, udp_pair};
use tagmatch::{DeviceStats, Endpoint, Error, MemFabric, OpError, Protocol, TagMatch, ANY_SOURCE};

/// Registrations and deregistrations the device made for `ep`.
fn device_regs(ep: &Endpoint) -> (u64, u64) {
    match ep.stats().device {
        DeviceStats::Mem(d) => (d.registered, d.deregistered),
        DeviceStats::Udp(u) => (u.rdma.registered, u.rdma.deregistered),
        #[allow(unreachable_patterns)]
        _ => (0, 0),
    }
}

/// N large sends from one region: one registration on the sender, data byte for byte;
/// `tsend` of the same size registers once per send.
fn repeated_large_sends(mut a: Endpoint, mut b: Endpoint) {
    const N: usize = 5;
    const LEN: usize = 1 << 20;
    let pb = a.insert_peer(&b.address()).unwrap();
    let pa = b.insert_peer(&a.address()).unwrap();
    // One small message first: a learns b's features (RDMA read) from its handshake, so
    // every large send below can use long-read.
    // (A round trip: b's handshake goes out before its reply.)
    introduce(&mut a, &mut b, pb, pa);
    let data: Vec<u8> = (0..N * LEN + 3).map(|i| (i * 13 + i / 7) as u8).collect();
    let (r0, d0) = device_regs(&a);
    let mr = a.register(data.clone()).unwrap();
    for i in 0..N {
        let range = i * LEN + 3..(i + 1) * LEN + 3;
        let r = b.trecv(pa, TagMatch::exact(i as u64), LEN).unwrap();
        let s = a.tsend_region(pb, i as u64, &mr, range.clone()).unwrap();
        let c = b.wait_with(r, &mut [&mut a]).unwrap();
        assert!(c.data == data[range], "send {i}: data differs");
        assert_eq!(c.source(), Some(pa));
        a.wait_with(s, &mut [&mut b]).unwrap();
    }
    let st = a.stats();
    assert_eq!(st.facade.protocol(Protocol::LongRead), N as u64);
    assert_eq!(st.facade.region_sends, N as u64);
    assert_eq!(
        device_regs(&a),
        (r0 + 1, d0),
        "one registration for {N} sends"
    );
    assert_eq!(a.region_sends_in_flight(&mr).unwrap(), 0);
    assert_eq!(a.deregister(mr).unwrap(), data);
    a.progress().unwrap();
    assert_eq!(device_regs(&a), (r0 + 1, d0 + 1));

    // The same sends with owned buffers register (and deregister) every time.
    for i in 0..2 {
        let r = b.trecv(pa, TagMatch::exact(50), LEN).unwrap();
        let s = a.tsend(pb, 50, data[..LEN].to_vec()).unwrap();
        b.wait_with(r, &mut [&mut a]).unwrap();
        a.wait_with(s, &mut [&mut b]).unwrap();
        a.progress().unwrap();
        assert_eq!(device_regs(&a), (r0 + 2 + i, d0 + 2 + i));
    }

    // Small and medium ranges of a region are copied into packets; untagged too.
    let mr = a.register(data[..100_000].to_vec()).unwrap();
    for range in [10..30, 0..20_000, 1_000..100_000] {
        let r = b.recv(ANY_SOURCE, range.len()).unwrap();
        let s = a.send_region(pb, &mr, range.clone()).unwrap();
        let c = b.wait_with(r, &mut [&mut a]).unwrap();
        assert!(c.data == data[range.clone()], "range {range:?}");
        a.wait_with(s, &mut [&mut b]).unwrap();
    }
    a.deregister(mr).unwrap();
}

#[test]
fn repeated_large_sends_register_once_in_process() {
    let fabric = MemFabric::new();
    let (a, b) = mem_pair_fast(&fabric, false);
    repeated_large_sends(a, b);
}

/// On the fast path region sends copy the range at once: same bytes, in order with the
/// pair's other messages, no registration, complete (region free) on return.
#[test]
fn region_sends_on_the_fast_path_copy_at_once() {
    let fabric = MemFabric::new();
    let (mut a, mut b) = mem_pair(&fabric);
    let pb = a.insert_peer(&b.address()).unwrap();
    let pa = b.insert_peer(&a.address()).unwrap();
    let data: Vec<u8> = (0..300_000).map(|i| (i * 13 + i / 7) as u8).collect();
    let mr = a.register(data.clone()).unwrap();
    let regs = device_regs(&a);
    let mut sends = Vec::new();
    for (i, range) in [0..8, 10..40, 100..20_000, 0..300_000]
        .into_iter()
        .enumerate()
    {
        sends.push(a.tsend_region(pb, 7, &mr, range.clone()).unwrap());
        // An owned send between region sends: order is kept across both.
        sends.push(a.tsend(pb, 7, vec![i as u8; 3]).unwrap());
        assert_eq!(a.region_sends_in_flight(&mr).unwrap(), 0);
    }
    for (i, range) in [0..8, 10..40, 100..20_000, 0..300_000]
        .into_iter()
        .enumerate()
    {
        let r = b.trecv(pa, 7u64, 300_000).unwrap();
        assert!(b.wait_with(r, &mut [&mut a]).unwrap().data == data[range]);
        let r = b.trecv(ANY_SOURCE, 7u64, 8).unwrap();
        assert_eq!(
            b.wait_with(r, &mut [&mut a]).unwrap().data,
            vec![i as u8; 3]
        );
    }
    for s in sends {
        a.wait(s).unwrap();
    }
    assert_eq!(device_regs(&a), regs, "no registration per send");
    assert_eq!(a.stats().facade.region_sends, 4);
    assert_eq!(a.stats().facade.fast_sends, 8);
    assert_eq!(a.deregister(mr).unwrap(), data);
}

#[test]
fn repeated_large_sends_register_once_over_udp() {
    let (a, b) = udp_pair();
    repeated_large_sends(a, b);
}

#[test]
fn deregistering_a_region_in_use_is_refused_and_hands_it_back() {
    let fabric = MemFabric::new();
    let (mut a, mut b) = mem_pair_fast(&fabric, false);
    let pb = a.insert_peer(&b.address()).unwrap();
    let pa = b.insert_peer(&a.address()).unwrap();
    let data = vec![0x5a; 1 << 20];
    let mr = a.register(data.clone()).unwrap();
    let s = a.tsend_region(pb, 1, &mr, 0..data.len()).unwrap();
    assert_eq!(a.region_sends_in_flight(&mr).unwrap(), 1);
    let mr = match a.deregister(mr) {
        Err(Error::RegionInUse { region, sends }) => {
            assert_eq!(sends, 1);
            region
        }
        other => panic!("expected RegionInUse, got {other:?}"),
    };
    // Still registered and readable; the send completes from it.
    assert_eq!(a.region(&mr).unwrap(), &data[..]);
    let r = b.trecv(pa, 1u64, data.len()).unwrap();
    assert_eq!(b.wait_with(r, &mut [&mut a]).unwrap().data, data);
    a.wait_with(s, &mut [&mut b]).unwrap();
    assert_eq!(a.deregister(mr).unwrap(), data);
}

#[test]
fn bad_region_sends_are_typed_errors() {
    let fabric = MemFabric::new();
    let (mut a, mut b) = mem_pair(&fabric);
    let pb = a.insert_peer(&b.address()).unwrap();
    let mr = a.register(vec![1; 64]).unwrap();
    let other = b.register(vec![1; 64]).unwrap();
    assert!(matches!(
        a.tsend_region(pb, 1, &mr, 0..65),
        Err(Error::RegionRange {
            start: 0,
            end: 65,
            len: 64
        })
    ));
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = 10..5;
    assert!(matches!(
        a.send_region(pb, &mr, backwards),
        Err(Error::RegionRange { .. })
    ));
    assert!(matches!(
        a.tsend_region(pb, 1, &other, 0..8),
        Err(Error::UnknownRegion)
    ));
    assert!(matches!(
        a.region_sends_in_flight(&other),
        Err(Error::UnknownRegion)
    ));
    let pa_at_b = b.insert_peer(&a.address()).unwrap();
    assert!(matches!(
        a.tsend_region(pa_at_b, 1, &mr, 0..8),
        Err(Error::UnknownPeer(_))
    ));
    assert_eq!(a.stats().facade.region_sends, 0);
    assert!(a.stats().facade.call_errors >= 4);
    assert_eq!(a.deregister(mr).unwrap(), vec![1; 64]);
}

#[test]
fn stats_show_matching_counters_and_no_hw_offload() {
    for fast in [true, false] {
        stats_show_matching_counters_with(fast);
    }
}

fn stats_show_matching_counters_with(fast: bool) {
    let fabric = MemFabric::new();
    let (mut a, mut b) = mem_pair_fast(&fabric, fast);
    let pb = a.insert_peer(&b.address()).unwrap();
    let pa = b.insert_peer(&a.address()).unwrap();
    let before = b.stats();
    assert!(!before.offload.in_use);
    // Two posted receives wait; one message arrives unexpected.
    let r1 = b.trecv(pa, TagMatch::exact(1), 8).unwrap();
    let _r2 = b.trecv(ANY_SOURCE, TagMatch::exact(2), 8).unwrap();
    let s = a.tsend(pb, 3, vec![3; 8]).unwrap();
    a.wait_with(s, &mut [&mut b]).unwrap();
    b.progress().unwrap();
    let st = b.stats();
    assert_eq!(st.matching.posted_depth, 2);
    assert_eq!(st.matching.unexpected_depth, 1);
    assert_eq!(st.matching.bytes_held, 8);
    assert!(st.matching.misses >= before.matching.misses + 3);
    // A matching message: a hit, attempts counted.
    let s = a.tsend(pb, 1, vec![1; 8]).unwrap();
    b.wait_with(r1, &mut [&mut a]).unwrap();
    a.wait_with(s, &mut [&mut b]).unwrap();
    let st2 = b.stats();
    assert_eq!(st2.matching.posted_depth, 1);
    assert!(st2.matching.hits > st.matching.hits);
    assert!(st2.matching.match_attempts > st.matching.match_attempts);
    // The HW/SW split, honestly: no hardware path, every match in software.
    assert!(!st2.offload.in_use);
    assert_eq!((st2.offload.offloaded, st2.offload.matched_hw), (0, 0));
    assert_eq!(st2.offload.matched_sw, st2.matching.hits);
    let text = st2.to_string();
    assert!(text.contains("matching: posted 1 unexpected 1"), "{text}");
    assert!(text.contains("offload not in use"), "{text}");
    assert!(text.contains("attempts"), "{text}");
}

#[test]
fn udp_stats_have_no_hw_offload_either() {
    let (a, _b) = udp_pair();
    let st = a.stats();
    assert!(!st.offload.in_use);
    assert_eq!(st.offload.matched_hw, 0);
    assert!(st.to_string().contains("offload not in use"));
}

/// Receives into ranges of a local region: small, medium and large messages (on UDP, 1 MiB
/// goes long-read into the region), tagged and untagged, byte for byte at the range's
/// offset with the bytes around it unchanged; the completion carries the length and no
/// data; the region cannot be deregistered while a receive into it is pending.
fn receives_into_a_region(mut a: Endpoint, mut b: Endpoint) {
    const FILL: u8 = 0xEE;
    const OFF: usize = 5;
    let pb = a.insert_peer(&b.address()).unwrap();
    let pa = b.insert_peer(&a.address()).unwrap();
    for (i, len) in [8usize, 3000, 70_000, (1 << 20) + 3]
        .into_iter()
        .enumerate()
    {
        for tagged in [true, false] {
            let what = format!("len {len} tagged {tagged}");
            let mut mr = b.register_local(vec![FILL; len + 2 * OFF]).unwrap();
            let data: Vec<u8> = (0..len).map(|j| (j * 7 + i + 1) as u8).collect();
            let range = OFF..OFF + len;
            let r = if tagged {
                b.trecv_region(pa, TagMatch::exact(i as u64), &mr, range.clone())
            } else {
                b.recv_region(pa, &mr, range.clone())
            }
            .unwrap();
            // Pending: the region is in use, and comes back with the refusal.
            mr = match b.deregister(mr) {
                Err(Error::RegionInUse { region, .. }) => region,
                other => panic!("{what}: {other:?}"),
            };
            let s = if tagged {
                a.tsend(pb, i as u64, data.clone())
            } else {
                a.send(pb, data.clone())
            }
            .unwrap();
            let c = b.wait_with(r, &mut [&mut a]).unwrap();
            a.wait_with(s, &mut [&mut b]).unwrap();
            assert_eq!((c.len, c.data.len()), (len as u64, 0), "{what}");
            assert_eq!(c.source(), Some(pa), "{what}");
            let bytes = b.deregister(mr).unwrap();
            assert!(bytes[range] == data[..], "{what}: data differs");
            assert!(bytes[..OFF].iter().all(|&x| x == FILL), "{what}: before");
            assert!(
                bytes[OFF + len..].iter().all(|&x| x == FILL),
                "{what}: after"
            );
        }
    }
    // A window of receives into one range (as ucx_perftest's and the fabtests' servers):
    // all complete, the range holds one of the messages whole; then a message longer
    // than the range is truncated to it.
    const LEN: usize = 300_000;
    let mr = b.register_local(vec![0; LEN]).unwrap();
    let rs: Vec<_> = (0..4)
        .map(|_| b.trecv_region(pa, TagMatch::exact(9), &mr, 0..LEN).unwrap())
        .collect();
    let msgs: Vec<Vec<u8>> = (1..=4u8).map(|k| vec![k; LEN]).collect();
    let ss: Vec<_> = msgs
        .iter()
        .map(|m| a.tsend(pb, 9, m.clone()).unwrap())
        .collect();
    for r in rs {
        assert_eq!(b.wait_with(r, &mut [&mut a]).unwrap().len, LEN as u64);
    }
    for s in ss {
        a.wait_with(s, &mut [&mut b]).unwrap();
    }
    let bytes = b.region(&mr).unwrap();
    assert!(msgs.iter().any(|m| m[..] == bytes[..]), "one message whole");
    let r = b
        .trecv_region(pa, TagMatch::exact(10), &mr, 0..100)
        .unwrap();
    let s = a.tsend(pb, 10, vec![0x42; 5000]).unwrap();
    let c = b.wait_with(r, &mut [&mut a]);
    assert!(
        matches!(
            c,
            Err(Error::Failed {
                error: OpError::Truncated {
                    msg_len: 5000,
                    buf_len: 100
                },
                ..
            })
        ),
        "truncated: {c:?}"
    );
    a.wait_with(s, &mut [&mut b]).unwrap();
    let bytes = b.deregister(mr).unwrap();
    assert!(
        bytes[..100].iter().all(|&x| x == 0x42),
        "the range's bytes written"
    );
    assert!(
        bytes[100..].iter().all(|&x| x != 0x42),
        "nothing past the range"
    );
}

#[test]
fn receives_into_a_region_over_udp() {
    let (a, b) = udp_pair();
    receives_into_a_region(a, b);
}

#[test]
fn receives_into_a_region_in_process_fast_path() {
    let fabric = MemFabric::new();
    let (a, b) = mem_pair(&fabric);
    receives_into_a_region(a, b);
}

#[test]
fn receives_into_a_region_in_process_protocol() {
    let fabric = MemFabric::new();
    let (a, b) = mem_pair_fast(&fabric, false);
    receives_into_a_region(a, b);
}

/// Bad ranges and other endpoints' regions are refused with errors that say so.
#[test]
fn receives_into_a_bad_range_are_refused() {
    let fabric = MemFabric::new();
    let (mut a, mut b) = mem_pair(&fabric);
    let pa = b.insert_peer(&a.address()).unwrap();
    let mr = b.register_local(vec![0; 100]).unwrap();
    let e = b.trecv_region(pa, 1u64, &mr, 50..101).unwrap_err();
    assert!(
        matches!(
            e,
            Error::RegionRange {
                start: 50,
                end: 101,
                len: 100
            }
        ),
        "{e:?}"
    );
    #[allow(clippy::reversed_empty_ranges)]
    let e = b.recv_region(pa, &mr, 60..50).unwrap_err();
    assert!(matches!(e, Error::RegionRange { .. }), "{e:?}");
    let other = a.register_local(vec![0; 100]).unwrap();
    let e = b.trecv_region(pa, 1u64, &other, 0..10).unwrap_err();
    assert!(matches!(e, Error::UnknownRegion), "{e:?}");
    // Nothing was left pending by the refusals.
    assert_eq!(b.deregister(mr).unwrap().len(), 100);
}

/// A claimed message received into a region: a bad range hands the message back
/// ([`Error::ClaimKept`]) still claimed, and the next call receives it whole at the
/// range's offset; small and large messages.
fn mrecv_into_a_region(mut a: Endpoint, mut b: Endpoint) {
    let pb = a.insert_peer(&b.address()).unwrap();
    let pa = b.insert_peer(&a.address()).unwrap();
    for (i, len) in [8usize, 70_000, 1 << 20].into_iter().enumerate() {
        let data: Vec<u8> = (0..len).map(|j| (j * 5 + i) as u8).collect();
        let s = a.tsend(pb, 40 + i as u64, data.clone()).unwrap();
        let msg = loop {
            a.progress().unwrap();
            b.progress().unwrap();
            if let Some(m) = b.tmprobe(pa, TagMatch::exact(40 + i as u64)) {
                break m;
            }
        };
        let mr = b.register_local(vec![0; len + 3]).unwrap();
        let msg = match b.mrecv_region(msg, &mr, 4..len + 4) {
            Err(Error::ClaimKept { message, error }) => {
                assert!(matches!(*error, Error::RegionRange { .. }), "{error:?}");
                message
            }
            other => panic!("len {len}: {other:?}"),
        };
        // Still claimed: a plain receive does not take it.
        let r2 = b.trecv(pa, TagMatch::exact(40 + i as u64), len).unwrap();
        let r = b.mrecv_region(msg, &mr, 3..len + 3).unwrap();
        let c = b.wait_with(r, &mut [&mut a]).unwrap();
        assert_eq!((c.len, c.data.len()), (len as u64, 0));
        a.wait_with(s, &mut [&mut b]).unwrap();
        b.cancel(r2).unwrap();
        let bytes = b.deregister(mr).unwrap();
        assert!(bytes[3..] == data[..], "len {len}: data differs");
        assert!(bytes[..3].iter().all(|&x| x == 0));
    }
}

#[test]
fn mrecv_into_a_region_over_udp() {
    let (a, b) = udp_pair();
    mrecv_into_a_region(a, b);
}

#[test]
fn mrecv_into_a_region_in_process() {
    for fast in [true, false] {
        let fabric = MemFabric::new();
        let (a, b) = mem_pair_fast(&fabric, fast);
        mrecv_into_a_region(a, b);
    }
}

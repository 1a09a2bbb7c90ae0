//! Review (rev12) of the facade's receives into a registered region
//! (`Endpoint::trecv_region`, `Endpoint::recv_region`, `Endpoint::register_local`) over
//! every path: the in-process fast path (`mem`, small and large messages), the fast path
//! receiving a protocol-path message (a sender without the fast path: `mrecv_region`),
//! the EFA protocol over the in-memory device, and UDP over 127.0.0.1 (1 MiB and more:
//! long-read, received straight into a local-only region). Data byte for byte, the bytes
//! outside the range unchanged, truncation, cancel, the region's use count (deregister
//! refused while a receive is pending, allowed after), a region of another endpoint.

mod common;

use common::{done, ep, mem_pair_fast, udp_pair};
use tagmatch::{Endpoint, Error, MemFabric, MemoryRegion, OpError, Peer, Request, TagMatch};

const FILL: u8 = 0xEE;

fn pattern(len: usize, salt: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 251 + salt) as u8).collect()
}

/// Peers both ways and one small message each way (each side learns the other's
/// features, so large messages use long-read where the transport can).
fn connect(a: &mut Endpoint, b: &mut Endpoint) -> (Peer, Peer) {
    let pb = a.insert_peer(&b.address()).unwrap();
    let pa = b.insert_peer(&a.address()).unwrap();
    for _ in 0..2 {
        let r = b.recv(pa, 8).unwrap();
        let s = a.send(pb, vec![1; 8]).unwrap();
        done(b, r, &mut [a]);
        done(a, s, &mut [b]);
        let r = a.recv(pb, 8).unwrap();
        let s = b.send(pa, vec![2; 8]).unwrap();
        done(a, r, &mut [b]);
        done(b, s, &mut [a]);
    }
    (pb, pa)
}

fn reg(b: &mut Endpoint, len: usize, remote: bool) -> MemoryRegion {
    let bytes = vec![FILL; len];
    if remote {
        b.register(bytes).unwrap()
    } else {
        b.register_local(bytes).unwrap()
    }
}

fn post(
    b: &mut Endpoint,
    pa: Peer,
    tagged: bool,
    tag: u64,
    mr: &MemoryRegion,
    range: std::ops::Range<usize>,
) -> Request {
    if tagged {
        b.trecv_region(pa, TagMatch::exact(tag), mr, range).unwrap()
    } else {
        b.recv_region(pa, mr, range).unwrap()
    }
}

fn send(a: &mut Endpoint, pb: Peer, tagged: bool, tag: u64, data: Vec<u8>) -> Request {
    if tagged {
        a.tsend(pb, tag, data).unwrap()
    } else {
        a.send(pb, data).unwrap()
    }
}

/// `bytes` holds `want` at `off` and `FILL` everywhere else.
fn check(bytes: &[u8], off: usize, want: &[u8], what: &str) {
    let hi = off + want.len();
    if let Some(i) = (off..hi).find(|&i| bytes[i] != want[i - off]) {
        panic!("{what}: byte {} of the message differs", i - off);
    }
    if let Some(i) = (0..off).chain(hi..bytes.len()).find(|&i| bytes[i] != FILL) {
        panic!("{what}: byte {i} outside the range {off}..{hi} was written");
    }
}

/// Gives both endpoints some progress (an unexpected message arrives meanwhile).
fn spin(a: &mut Endpoint, b: &mut Endpoint) {
    for _ in 0..200 {
        a.progress().unwrap();
        b.progress().unwrap();
    }
}

/// Every size (eager, medium, long-CTS or long-read, ≥ 1 MiB), tagged and untagged,
/// remote and local-only regions, receive posted before and after the message:
/// complete, the message's length, no data in the completion, the bytes at the range
/// and nowhere else, the region free again and deregistered with the message in it. Then
/// a truncating range of each size.
fn scenario(mut a: Endpoint, mut b: Endpoint, label: &str) -> (Endpoint, Endpoint) {
    let (pb, pa) = connect(&mut a, &mut b);
    let mut tag = 1000;
    for len in [8usize, 20_000, 200_000, (1 << 20) + 5] {
        for remote in [false, true] {
            for tagged in [true, false] {
                for unexpected in [false, true] {
                    tag += 1;
                    let what = format!(
                        "{label}: len {len} remote {remote} tagged {tagged} unexpected {unexpected}"
                    );
                    let off = 7 + len % 13;
                    let mr = reg(&mut b, off + len + 31, remote);
                    let data = pattern(len, tag as usize);
                    let (r, s);
                    if unexpected {
                        s = send(&mut a, pb, tagged, tag, data.clone());
                        spin(&mut a, &mut b);
                        r = post(&mut b, pa, tagged, tag, &mr, off..off + len);
                    } else {
                        r = post(&mut b, pa, tagged, tag, &mr, off..off + len);
                        assert_eq!(b.region_sends_in_flight(&mr).unwrap(), 1, "{what}");
                        s = send(&mut a, pb, tagged, tag, data.clone());
                    }
                    let c = done(&mut b, r, &mut [&mut a]);
                    assert_eq!(c.status(), Ok(()), "{what}");
                    assert_eq!(c.len, len as u64, "{what}");
                    assert!(c.data.is_empty(), "{what}: the bytes are in the region");
                    assert_eq!(c.source(), Some(pa), "{what}");
                    if tagged {
                        assert_eq!(c.tag, tag, "{what}");
                    }
                    assert_eq!(done(&mut a, s, &mut [&mut b]).status(), Ok(()), "{what}");
                    check(b.region(&mr).unwrap(), off, &data, &what);
                    assert_eq!(b.region_sends_in_flight(&mr).unwrap(), 0, "{what}");
                    let bytes = b.deregister(mr).unwrap();
                    check(&bytes, off, &data, &what);
                }
            }
        }
        // Truncation: half the message fits.
        for remote in [false, true] {
            tag += 1;
            let what = format!("{label}: truncated len {len} remote {remote}");
            let keep = len / 2;
            let mr = reg(&mut b, keep + 40, remote);
            let data = pattern(len, tag as usize);
            let r = post(&mut b, pa, true, tag, &mr, 20..20 + keep);
            let s = send(&mut a, pb, true, tag, data.clone());
            let c = done(&mut b, r, &mut [&mut a]);
            assert_eq!(
                c.status(),
                Err(OpError::Truncated {
                    msg_len: len as u64,
                    buf_len: keep as u64
                }),
                "{what}"
            );
            assert!(c.data.is_empty(), "{what}");
            assert_eq!(done(&mut a, s, &mut [&mut b]).status(), Ok(()), "{what}");
            check(b.region(&mr).unwrap(), 20, &data[..keep], &what);
            assert_eq!(b.region_sends_in_flight(&mr).unwrap(), 0, "{what}");
            b.deregister(mr).unwrap();
        }
    }
    // A window of receives into one range, then released.
    let mr = reg(&mut b, 4096, false);
    let reqs: Vec<Request> = (0..8)
        .map(|_| post(&mut b, pa, true, 5, &mr, 0..4096))
        .collect();
    assert_eq!(b.region_sends_in_flight(&mr).unwrap(), 8, "{label}");
    let msgs: Vec<Vec<u8>> = (0..8).map(|i| vec![i as u8 + 1; 4096]).collect();
    let sends: Vec<Request> = msgs
        .iter()
        .map(|m| send(&mut a, pb, true, 5, m.clone()))
        .collect();
    for r in reqs {
        assert_eq!(done(&mut b, r, &mut [&mut a]).status(), Ok(()), "{label}");
    }
    for s in sends {
        done(&mut a, s, &mut [&mut b]);
    }
    let bytes = b.deregister(mr).unwrap();
    assert!(msgs.iter().any(|m| m[..] == bytes[..]), "{label}: window");
    (a, b)
}

/// Passes. Both endpoints on the in-process fast path.
#[test]
fn mem_fast_path_region_receives() {
    let f = MemFabric::new();
    let (a, b) = mem_pair_fast(&f, true);
    scenario(a, b, "mem fast");
}

/// Passes. The receiver on the fast path, the sender without it: every message takes the
/// protocol path and the fast path hands it to `mrecv_region`.
#[test]
fn mem_fast_receiver_protocol_sender_region_receives() {
    let f = MemFabric::new();
    let a = ep(&f, false);
    let b = ep(&f, true);
    scenario(a, b, "mem fast<-proto");
}

/// Passes. The EFA protocol over the in-memory device.
#[test]
fn mem_protocol_region_receives() {
    let f = MemFabric::new();
    let (a, b) = mem_pair_fast(&f, false);
    scenario(a, b, "mem proto");
}

/// Passes. UDP over 127.0.0.1.
#[test]
fn udp_region_receives() {
    let (a, b) = udp_pair();
    let (_a, b) = scenario(a, b, "udp");
    // The large messages were read straight into the regions (Linux): placed after a
    // peek, and in one call each once the read's next datagram was expected (local-only
    // regions only).
    if cfg!(target_os = "linux") {
        let tagmatch::DeviceStats::Udp(u) = b.stats().device else {
            panic!("a UDP endpoint");
        };
        assert!(u.rx_placed > 0, "{u:?}");
        assert!(u.rx_expected > 0, "{u:?}");
    }
}

/// Cancel, refused deregistration while pending, regions of the other endpoint.
fn admin(mut a: Endpoint, mut b: Endpoint, label: &str) {
    let (pb, pa) = connect(&mut a, &mut b);
    let mr = reg(&mut b, 1000, false);
    // A region of the other endpoint: refused, and nothing is counted on its owner.
    assert!(matches!(
        a.trecv_region(pb, TagMatch::exact(1), &mr, 0..10),
        Err(Error::UnknownRegion)
    ));
    assert!(matches!(
        a.recv_region(pb, &mr, 0..10),
        Err(Error::UnknownRegion)
    ));
    assert!(matches!(a.region(&mr), Err(Error::UnknownRegion)));
    assert_eq!(b.region_sends_in_flight(&mr).unwrap(), 0, "{label}");
    // A range outside the region.
    for range in [0..1001, 1000..1001] {
        assert!(
            matches!(
                b.trecv_region(pa, TagMatch::exact(1), &mr, range.clone()),
                Err(Error::RegionRange { .. })
            ),
            "{label}: {range:?}"
        );
    }
    assert_eq!(b.region_sends_in_flight(&mr).unwrap(), 0, "{label}");
    // Pending: deregister refused (the region handed back); cancelled: allowed.
    let r1 = post(&mut b, pa, true, 9, &mr, 0..1000);
    let r2 = post(&mut b, pa, false, 0, &mr, 500..1000);
    let mr = match b.deregister(mr) {
        Err(Error::RegionInUse { region, sends }) => {
            assert_eq!(sends, 2, "{label}");
            region
        }
        other => panic!("{label}: deregister with receives pending: {other:?}"),
    };
    b.cancel(r1).unwrap();
    b.cancel(r2).unwrap();
    for r in [r1, r2] {
        assert_eq!(
            done(&mut b, r, &mut [&mut a]).status(),
            Err(OpError::Canceled),
            "{label}"
        );
    }
    assert_eq!(b.region_sends_in_flight(&mr).unwrap(), 0, "{label}");
    // The message sent now goes to a fresh receive, not into the cancelled ranges.
    let r = b.trecv(pa, TagMatch::exact(9), 100).unwrap();
    let s = a.tsend(pb, 9, vec![3; 100]).unwrap();
    assert_eq!(done(&mut b, r, &mut [&mut a]).data, vec![3; 100], "{label}");
    done(&mut a, s, &mut [&mut b]);
    let bytes = b.deregister(mr).unwrap();
    assert!(
        bytes.iter().all(|&x| x == FILL),
        "{label}: cancelled untouched"
    );
}

/// Passes.
#[test]
fn mem_fast_path_cancel_and_foreign_regions() {
    let f = MemFabric::new();
    let (a, b) = mem_pair_fast(&f, true);
    admin(a, b, "mem fast");
}

/// Passes.
#[test]
fn udp_cancel_and_foreign_regions() {
    let (a, b) = udp_pair();
    admin(a, b, "udp");
}

/// FAILS before the fix. On the fast path a region receive refused at the posted-receive
/// limit (`Error::TooManyReceives`) kept the hold `trecv_region` took on the region
/// before posting: one use more than receives pending, for good, so `deregister` would
/// be refused forever after the pending receives complete.
#[test]
fn fast_path_receive_refused_at_the_limit_releases_its_hold() {
    let f = MemFabric::new();
    let (mut a, mut b) = mem_pair_fast(&f, true);
    let (_, pa) = connect(&mut a, &mut b);
    let mr = reg(&mut b, 64, false);
    let mut posted: u32 = 0;
    loop {
        match b.trecv_region(pa, TagMatch::exact(77), &mr, 0..64) {
            Ok(_) => posted += 1,
            Err(Error::TooManyReceives) => break,
            Err(e) => panic!("after {posted}: {e:?}"),
        }
        assert!(posted <= 1 << 23, "no receive limit met");
    }
    assert_eq!(
        b.region_sends_in_flight(&mr).unwrap(),
        posted,
        "uses of the region after a refused receive ({posted} pending)"
    );
}

/// A peer writes to and reads from `b`'s local-only region with its key (small and
/// long-CTS sizes; the device refuses the direct RDMA, the emulated protocols must too):
/// the region stays as it was and no read is served its bytes.
fn local_region_is_private(mut a: Endpoint, mut b: Endpoint, label: &str) {
    let (pb, _) = connect(&mut a, &mut b);
    let secret = pattern(300_000, 3);
    let mr = b.register_local(secret.clone()).unwrap();
    let key = mr.remote_key();
    let mut reads = Vec::new();
    for len in [64usize, 20_000, 300_000] {
        let _ = a.write(pb, vec![0x11; len], key.at(0)).unwrap();
        reads.push((len, a.read(pb, len, key.at(0)).unwrap()));
    }
    for _ in 0..20_000 {
        a.progress().unwrap();
        b.progress().unwrap();
    }
    assert!(
        b.region(&mr).unwrap() == &secret[..],
        "{label}: a peer's write changed a local-only region"
    );
    for (len, r) in reads {
        if let Some(c) = a.take_completion(r) {
            assert!(
                !c.is_ok() || c.data[..] != secret[..len],
                "{label}: a peer read {len} bytes of a local-only region"
            );
        }
    }
}

/// FAILS before the fix of `resolve` (tagmatch-rdm): the emulated write / read the
/// protocol falls back to after the device's refusal reached the region.
#[test]
fn mem_local_region_is_private() {
    let f = MemFabric::new();
    let (a, b) = mem_pair_fast(&f, false);
    local_region_is_private(a, b, "mem proto");
    let f = MemFabric::new();
    let (a, b) = mem_pair_fast(&f, true);
    local_region_is_private(a, b, "mem fast");
}

/// FAILS before the fix of `resolve` (tagmatch-rdm), as over mem.
#[test]
fn udp_local_region_is_private() {
    let (a, b) = udp_pair();
    local_region_is_private(a, b, "udp");
}

/// Passes. A large send from a local-only region over UDP pushes its data (long-CTS:
/// the peer cannot read the region) and lands whole in a region of the receiver; a
/// remote region's goes long-read.
#[test]
fn udp_large_send_from_a_local_region_into_a_region() {
    let (mut a, mut b) = udp_pair();
    let (pb, pa) = connect(&mut a, &mut b);
    let len = (1 << 20) + 9;
    for (i, remote) in [false, true].into_iter().enumerate() {
        let data = pattern(len, 40 + i);
        let src = if remote {
            a.register(data.clone()).unwrap()
        } else {
            a.register_local(data.clone()).unwrap()
        };
        let dst = reg(&mut b, len + 50, false);
        let r = b
            .trecv_region(pa, TagMatch::exact(3), &dst, 25..25 + len)
            .unwrap();
        let s = a.tsend_region(pb, 3, &src, 0..len).unwrap();
        let c = done(&mut b, r, &mut [&mut a]);
        assert_eq!(c.status(), Ok(()), "remote {remote}");
        let cs = done(&mut a, s, &mut [&mut b]);
        let want = if remote {
            tagmatch::Protocol::LongRead
        } else {
            tagmatch::Protocol::LongCts
        };
        assert_eq!(cs.protocol, Some(want), "remote {remote}");
        check(b.region(&dst).unwrap(), 25, &data, "local send");
        assert_eq!(a.deregister(src).unwrap(), data);
        b.deregister(dst).unwrap();
    }
}

/// Byte `j` of message `i`: not periodic, so a piece of a message at the wrong offset
/// does not pass for the right one.
fn mix(i: usize, j: usize) -> u8 {
    let x = ((i as u64) << 32 | j as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8
}

/// A window of large receives into one range over UDP, as the perf server receives
/// (several long-reads in flight into the same bytes, received straight into a
/// local-only region): all complete; every byte of the range is that byte of one of the
/// messages (whichever wrote it last), nothing outside the range is written.
fn udp_window_into_one_range(remote: bool) {
    const W: usize = 6;
    let len = (1 << 20) + 3;
    let (mut a, mut b) = udp_pair();
    let (pb, pa) = connect(&mut a, &mut b);
    let msgs: Vec<Vec<u8>> = (0..W)
        .map(|i| (0..len).map(|j| mix(i, j)).collect())
        .collect();
    for round in 0..3 {
        let mr = reg(&mut b, len + 40, remote);
        let reqs: Vec<Request> = (0..W)
            .map(|_| post(&mut b, pa, true, 8, &mr, 11..11 + len))
            .collect();
        let sends: Vec<Request> = msgs
            .iter()
            .map(|m| send(&mut a, pb, true, 8, m.clone()))
            .collect();
        for r in reqs {
            let c = done(&mut b, r, &mut [&mut a]);
            assert_eq!(c.status(), Ok(()), "round {round}");
        }
        for s in sends {
            done(&mut a, s, &mut [&mut b]);
        }
        let bytes = b.deregister(mr).unwrap();
        assert!(bytes[..11].iter().all(|&x| x == FILL), "before the range");
        assert!(
            bytes[11 + len..].iter().all(|&x| x == FILL),
            "after the range"
        );
        let bad = (0..len)
            .filter(|&j| !(0..W).any(|i| bytes[11 + j] == mix(i, j)))
            .count();
        assert_eq!(bad, 0, "round {round} remote {remote}: bytes of no message");
    }
}

/// Passes.
#[test]
fn udp_window_into_one_local_range() {
    udp_window_into_one_range(false);
}

/// Passes.
#[test]
fn udp_window_into_one_remote_range() {
    udp_window_into_one_range(true);
}

/// Empty ranges (at the region's start and end) take empty and non-empty messages:
/// an empty message completes, a non-empty one truncated; nothing is written.
fn empty_ranges(mut a: Endpoint, mut b: Endpoint, label: &str) {
    let (pb, pa) = connect(&mut a, &mut b);
    let mr = reg(&mut b, 100, false);
    for (i, (range, len)) in [
        (0..0, 0usize),
        (100..100, 0),
        (100..100, 50),
        (0..0, 300_000),
    ]
    .into_iter()
    .enumerate()
    {
        let what = format!("{label}: {range:?} len {len}");
        let r = post(&mut b, pa, i % 2 == 0, 70, &mr, range);
        let s = send(&mut a, pb, i % 2 == 0, 70, pattern(len, i));
        let c = done(&mut b, r, &mut [&mut a]);
        let want = if len == 0 {
            Ok(())
        } else {
            Err(OpError::Truncated {
                msg_len: len as u64,
                buf_len: 0,
            })
        };
        assert_eq!(c.status(), want, "{what}");
        assert_eq!(c.len, len as u64, "{what}");
        done(&mut a, s, &mut [&mut b]);
        assert!(b.region(&mr).unwrap().iter().all(|&x| x == FILL), "{what}");
    }
    assert_eq!(b.region_sends_in_flight(&mr).unwrap(), 0, "{label}");
    b.deregister(mr).unwrap();
}

/// Passes.
#[test]
fn empty_ranges_on_every_path() {
    let f = MemFabric::new();
    let (a, b) = mem_pair_fast(&f, true);
    empty_ranges(a, b, "mem fast");
    let f = MemFabric::new();
    let (a, b) = (ep(&f, false), ep(&f, true));
    empty_ranges(a, b, "mem fast<-proto");
    let (a, b) = udp_pair();
    empty_ranges(a, b, "udp");
}

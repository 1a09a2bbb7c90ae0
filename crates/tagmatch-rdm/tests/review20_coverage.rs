//! Review 20 (received-byte coverage, `endpoint/coverage.rs`): duplicated and withheld
//! segments of every data-carrying path (runting read before and after its READ_NACK
//! fallback, emulated read's READRSP and CTSDATA, medium segments in any order), and
//! what a peer can make the receiver keep for a message sent as many tiny disjoint
//! segments.
mod common;
#[path = "common/pump.rs"]
mod pump;
use common::*;
use pump::*;
use tagmatch_rdm::testing::Fabric;
use tagmatch_rdm::{Config, OpKind, SendOpts, SendOutcome, Transmit};
use tagmatch_wire::efa::{Field, PacketType as T, Repr};

/// small_cfg with runting read (runts of 500 bytes, two RUNTREAD packets at MTU 256
/// and more, before the read).
fn runt_cfg() -> Config {
    Config {
        runt_size: 500,
        ..small_cfg()
    }
}

/// efa-rdm-protocol-v4 §3.2 (runting read): the receiver starts its RDMA read only once
/// the runt's bytes are in place. A RUNTREAD segment delivered twice while another is
/// still missing must not stand in for it: no read is issued, the receive waits; once
/// the missing segment comes, the read (failed by this device) falls back to long-CTS
/// (READ_NACK, §4.7), and the receive completes with every byte, the runt's included.
#[test]
fn duplicated_runt_segment_does_not_start_the_read_with_a_runt_byte_missing() {
    let (mut fab, a, b, ab, _) = warm_pair(2101, runt_cfg(), runt_cfg(), false);
    let data = payload(6000, 11);
    let recv = fab.ep(b).recv(None, 6000).unwrap();
    let send = fab
        .ep(a)
        .send(ab, data.clone(), SendOpts::default())
        .unwrap();
    assert_eq!(
        fab.ep(a).protocol_of(send),
        Some(tagmatch_rdm::Protocol::RuntRead)
    );
    let mut n = 0;
    let mut withheld: Vec<Vec<u8>> = Vec::new();
    let seen = pump(&mut fab, [a, b], &mut |from, bytes| {
        let ty = ty_of(bytes);
        if from == a && matches!(ty, T::RuntreadMsgRtm) {
            n += 1;
            match n {
                1 => return vec![bytes.to_vec(), bytes.to_vec()],
                2 => {
                    withheld.push(bytes.to_vec());
                    return vec![];
                }
                _ => {}
            }
        }
        vec![bytes.to_vec()]
    });
    assert!(n >= 2, "the runt takes at least two packets: {n}");
    assert_eq!(
        seen.rdma_reads, 0,
        "a read started with a runt segment missing"
    );
    assert!(fab.completions(b).iter().all(|c| c.op != recv));
    assert_eq!(fab.ep(b).stats().rx_duplicate_data, 1);
    // The missing segment, then everything else.
    let ba = fab.nodes[b]
        .ep
        .lookup_peer(&fab.nodes[a].ep.addr().gid, fab.nodes[a].ep.addr().qpn);
    for p in &withheld {
        fab.ep(b).handle_packet(ba, p);
    }
    let seen = pump(&mut fab, [a, b], &mut |_, bytes| vec![bytes.to_vec()]);
    assert!(seen.rdma_reads > 0, "the read was never started");
    assert!(fab.ep(b).stats().read_nacks >= 1);
    let cb = fab.nodes[b].completions.clone();
    let r = done(&cb, recv);
    assert_eq!((r.kind, r.result), (OpKind::Recv, Ok(())));
    assert!(r.data == data, "the receive completed with a hole");
    assert_eq!(done(&fab.nodes[a].completions, send).result, Ok(()));
    assert_eq!(fab.ep(b).in_flight(), (0, 0, 0));
}

/// After a runting read falls back to long-CTS (READ_NACK), a late copy of a RUNTREAD
/// segment and copies of CTSDATA are dropped (the runt's bytes stay as first placed),
/// and the CTS windows start where the runt ended: the receive completes with exactly
/// the message.
#[test]
fn runt_then_read_nack_fallback_with_every_data_packet_delivered_twice() {
    let (mut fab, a, b, ab, _) = warm_pair(2102, runt_cfg(), runt_cfg(), false);
    let data = payload(7000, 13);
    let recv = fab.ep(b).recv(None, 7000).unwrap();
    let send = fab
        .ep(a)
        .send(ab, data.clone(), SendOpts::default())
        .unwrap();
    let mut copies = 0u64;
    let seen = pump(&mut fab, [a, b], &mut |from, bytes| {
        if from == a && matches!(ty_of(bytes), T::RuntreadMsgRtm | T::CtsData) {
            copies += 1;
            return vec![bytes.to_vec(), bytes.to_vec()];
        }
        vec![bytes.to_vec()]
    });
    assert!(seen.rdma_reads > 0);
    let cb = fab.nodes[b].completions.clone();
    let r = done(&cb, recv);
    assert_eq!(r.result, Ok(()));
    assert!(r.data == data, "the receive completed with wrong bytes");
    assert_eq!(done(&fab.nodes[a].completions, send).result, Ok(()));
    // Every copy is dropped as a duplicate, but the last CTSDATA's, which comes after
    // the receive completed (no operation left to find).
    assert_eq!(fab.ep(b).stats().rx_duplicate_data, copies - 1);
    assert_eq!(fab.ep(b).in_flight(), (0, 0, 0));
}

/// A MEDIUM message whose segments come in reverse order, each delivered twice, and
/// one of them withheld until the end: the receive completes only with the last
/// segment, with every byte in place.
#[test]
fn medium_segments_reversed_duplicated_and_one_late() {
    let (mut fab, a, b, ab, ba) = warm_pair(2103, small_cfg(), small_cfg(), false);
    let data = payload(1000, 17);
    let recv = fab.ep(b).recv(None, 1000).unwrap();
    let send = fab
        .ep(a)
        .send(ab, data.clone(), SendOpts::default())
        .unwrap();
    // Collect a's packets without delivering them.
    let mut segs = Vec::new();
    while let Some(t) = fab.ep(a).poll_transmit() {
        if let Transmit::Send { token, bytes, .. } = t {
            assert_eq!(ty_of(&bytes), T::MediumMsgRtm);
            segs.push(bytes);
            fab.ep(a).on_send_done(token, SendOutcome::Ok);
        }
    }
    assert!(segs.len() >= 4, "{}", segs.len());
    let late = segs.remove(1);
    for s in segs.iter().rev() {
        fab.ep(b).handle_packet(Some(ba), s);
        fab.ep(b).handle_packet(Some(ba), s);
    }
    assert!(polled(&mut fab, b).iter().all(|c| c.op != recv));
    assert_eq!(fab.ep(b).stats().rx_duplicate_data, segs.len() as u64);
    fab.ep(b).handle_packet(Some(ba), &late);
    let cb = polled(&mut fab, b);
    let r = done(&cb, recv);
    assert_eq!(r.result, Ok(()));
    assert!(r.data == data);
    fab.drive();
    assert_eq!(done(&fab.completions(a), send).result, Ok(()));
}

/// The completions endpoint `n` has ready (without driving the fabric).
fn polled(fab: &mut Fabric, n: usize) -> Vec<tagmatch_rdm::Completion> {
    let mut v = Vec::new();
    while let Some(c) = fab.ep(n).poll_completion() {
        v.push(c);
    }
    v
}

/// A hand-built MEDIUM_MSGRTM segment of message `msg_id` from `a`.
fn medium_seg(fab: &Fabric, a: usize, msg_id: u32, msg_len: u64, off: u64, data: &[u8]) -> Vec<u8> {
    let mut r = Repr::new(T::MediumMsgRtm)
        .with(Field::MsgId, msg_id as u64)
        .with(Field::MsgLength, msg_len)
        .with(Field::SegOffset, off);
    r.connid = Some(fab.nodes[a].ep.addr().qkey);
    let r = Repr { payload: data, ..r };
    let mut buf = vec![0; r.buffer_len()];
    r.emit(&mut buf).unwrap();
    buf
}

/// What a receiver keeps to know which bytes of a message it has must stay in
/// proportion to the message, whatever the segmentation: efa-rdm-protocol-v4 §3.2 leaves
/// MEDIUM segment sizes to the sender, so a peer may send a 64 KiB message as 1-byte
/// segments, every other byte first. Unbounded, the ranges kept (16 bytes per gap, in a
/// vector that doubles) reached 8 times the message (review 20: 524,404 bytes kept,
/// 786,548 at the peak, for 65,536). Now a message may have at most one gap per 256 of
/// its bytes (`coverage::max_ranges`): the segments past that are refused and counted as
/// invalid, the memory stays under a sixteenth of the message, and the message, cut this
/// finely out of order, never completes with a hole.
#[test]
fn tiny_disjoint_medium_segments_keep_memory_in_proportion_to_the_message() {
    const LEN: u64 = 64 << 10;
    let (mut fab, a, b, ab, ba) = warm_pair(2104, small_cfg(), small_cfg(), false);
    let msg_id = fab.ep(a).next_msg_id(ab).unwrap();
    let recv = fab.ep(b).recv(None, LEN as usize).unwrap();
    let data = payload(LEN as usize, 23);
    let seg = |fab: &Fabric, off: u64| {
        medium_seg(
            fab,
            a,
            msg_id,
            LEN,
            off,
            &data[off as usize..off as usize + 1],
        )
    };
    let even: Vec<Vec<u8>> = (0..LEN).step_by(2).map(|off| seg(&fab, off)).collect();
    let invalid0 = fab.ep(b).stats().rx_invalid;
    let ep = fab.ep(b);
    let info = allocation_counter::measure(|| {
        for p in &even {
            ep.handle_packet(Some(ba), p);
        }
    });
    // Kept: the ranges, at most LEN / 16 bytes, and the endpoint's bookkeeping of the
    // message (under 1 KiB; the receive's buffer was allocated before). At the peak,
    // also the first segment's message buffer, copied into the receive's and dropped.
    const KEEP: u64 = LEN / 16 + 1024;
    assert!(
        info.bytes_current <= KEEP as i64 && info.bytes_max <= LEN + KEEP,
        "{} bytes kept ({} at the peak) for the received bytes of a {LEN}-byte message \
         ({info:?})",
        info.bytes_current,
        info.bytes_max
    );
    // 256 gaps (one per 256 bytes) taken; the rest refused, each counted once.
    let refused = fab.ep(b).stats().rx_invalid - invalid0;
    assert_eq!(refused, LEN / 2 - 256);
    // The odd bytes, last first: those that join taken bytes are taken, the others
    // refused; the message is not complete, so the receive does not complete.
    for off in (0..LEN / 2).rev().map(|i| 2 * i + 1) {
        let p = seg(&fab, off);
        fab.ep(b).handle_packet(Some(ba), &p);
    }
    assert!(polled(&mut fab, b).iter().all(|c| c.op != recv));
    assert!(
        fab.ep(b).stats().rx_invalid - invalid0 > refused,
        "odd bytes opening gaps past the bound are refused too"
    );
}

/// The time to take a message's segments must not depend on their order more than by a
/// constant factor: efa-rdm-protocol-v4 §3.2 says MEDIUM segments "can arrive in a
/// different order". `Coverage::add` inserts a gap's range into a sorted vector, moving
/// every range after it; unbounded, 1-byte segments of every other byte, last first,
/// cost O(n) each, O(n²) per message (review 20, release build: 256 KiB, 131,072
/// segments, 5.8 ms in order, 2.65 s last first). With at most `max_ranges` gaps (1,024
/// for 256 KiB) an insert moves at most that many, whatever the order: the same packets
/// in either order take exactly that many and refuse the rest. (Counted, not timed: the
/// bound is what makes the cost per segment constant.)
#[test]
fn descending_tiny_medium_segments_are_bounded_like_ascending_ones() {
    const LEN: u64 = 256 << 10;
    for descending in [false, true] {
        let (mut fab, a, b, ab, ba) = warm_pair(2105, small_cfg(), small_cfg(), false);
        let msg_id = fab.ep(a).next_msg_id(ab).unwrap();
        fab.ep(b).recv(None, LEN as usize).unwrap();
        let mut offs: Vec<u64> = (0..LEN).step_by(2).collect();
        if descending {
            offs.reverse();
        }
        let invalid0 = fab.ep(b).stats().rx_invalid;
        for &off in &offs {
            let p = medium_seg(&fab, a, msg_id, LEN, off, &[1]);
            fab.ep(b).handle_packet(Some(ba), &p);
        }
        let refused = fab.ep(b).stats().rx_invalid - invalid0;
        assert_eq!(refused, LEN / 2 - 1024, "descending {descending}");
    }
}

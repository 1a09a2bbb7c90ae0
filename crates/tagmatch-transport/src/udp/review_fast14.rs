//! Review of d3c1595: an acknowledgement sets `fill_due` only when its connection has
//! frames to move into the window it opened (waiting frames, served reads to stream or
//! to finish). Sans-IO: datagrams carried by hand, times given as arguments.
use std::time::{Duration, Instant};

use tagmatch_rdm::MemHandle;

use super::*;

use super::tests::{deliver, dev, dev_with, headers, wire, NoMem as Mem};

/// `from` queues a packet for `to` at `now` and fills its windows (as `submit` does,
/// without the direct entry): eight bytes of the token.
fn send(from: &mut UdpDevice, to: &UdpDevice, token: u64, now: Instant) {
    super::tests::send(from, to, &[token as u8; 8], token, now);
}

fn conn_to(b: &UdpDevice) -> ConnKey {
    (b.addr.sock, b.addr.connid)
}

/// An acknowledgement carried by SACK bits only (the cumulative ACK does not move: the
/// first frame was lost) opens the window as well: the frame waiting behind it goes out.
///
/// Catches: setting `fill_due` (or `acked`) in the cumulative loop only.
#[test]
fn a_sack_only_ack_lets_the_waiting_frame_in() {
    let mut a = dev_with(|u| u.max_inflight = 2);
    let mut b = dev();
    let t0 = Instant::now();
    for t in 1..=3 {
        send(&mut a, &b, t, t0);
    }
    let k = conn_to(&b);
    assert_eq!(
        (a.conns[&k].unacked.len(), a.conns[&k].waiting.len()),
        (2, 1)
    );
    let out = wire(&mut a);
    assert_eq!(
        headers(&out).iter().map(|h| h.seq).collect::<Vec<_>>(),
        [1, 2]
    );
    // Frame 1 is lost: b gets 2 only and acknowledges it at once (out of order).
    deliver(&a, &mut b, &out[1..], t0);
    let t1 = t0 + Duration::from_millis(1);
    b.acks(Some(t1));
    let acks = wire(&mut b);
    assert_eq!(
        headers(&acks)
            .iter()
            .map(|h| (h.ack, h.sack))
            .collect::<Vec<_>>(),
        [(0, 1)]
    );
    a.fill_due = false;
    deliver(&b, &mut a, &acks, t1);
    assert!(a.fill_due, "frame 3 waits for the room the SACK opened");
    a.fill_windows(&Mem(Vec::new()), Some(t1));
    let out = wire(&mut a);
    assert_eq!(headers(&out).iter().map(|h| h.seq).collect::<Vec<_>>(), [3]);
}

/// Room that opens on one connection does nothing for another's frames (every window
/// rule is per connection): an ACK on a connection with nothing waiting leaves the walk
/// off while another connection's frame waits behind its full window, and a walk then
/// would have moved nothing; that connection's own ACK lets its frame in. An ACK
/// piggybacked on a data frame (not a pure ACK) does the same as a pure one.
///
/// Catches: an ACK that sets `fill_due` only for pure ACKs, or tests the frames of the
/// wrong connection.
#[test]
fn room_on_one_connection_is_nothing_to_another_and_a_piggybacked_ack_opens_it() {
    let mut a = dev_with(|u| u.max_inflight = 1);
    let mut b = dev();
    let mut c = dev();
    let t0 = Instant::now();
    send(&mut a, &b, 1, t0);
    send(&mut a, &b, 2, t0);
    send(&mut a, &c, 3, t0);
    let (kb, kc) = (conn_to(&b), conn_to(&c));
    assert_eq!(a.conns[&kb].waiting.len(), 1);
    let out = wire(&mut a);
    assert_eq!(out.len(), 2, "one frame to b, one to c");
    // The next walk finds b full and c without frames: the walk is off.
    a.fill_windows(&Mem(Vec::new()), Some(t0));
    assert!(wire(&mut a).is_empty() && !a.fill_due);
    for f in &out {
        deliver(&a, &mut b, std::slice::from_ref(f), t0);
        deliver(&a, &mut c, std::slice::from_ref(f), t0);
    }
    let t1 = t0 + Duration::from_secs(1);
    // c acknowledges its frame (pure ACK, its delay passed).
    c.acks(Some(t1));
    let acks = wire(&mut c);
    assert_eq!(acks.len(), 1);
    deliver(&c, &mut a, &acks, t1);
    assert!(a.conns[&kc].unacked.is_empty(), "c's frame acknowledged");
    assert!(!a.fill_due, "nothing waits on c; b is still full");
    // A walk now would have found nothing to move.
    a.fill_windows_due(&Mem(Vec::new()), Some(t1));
    assert!(wire(&mut a).is_empty() && !a.fill_due);
    // b answers with a data frame, which carries the ACK of frame 1.
    send(&mut b, &a, 9, t1);
    let data = wire(&mut b);
    assert_eq!(
        headers(&data)
            .iter()
            .map(|h| (h.kind, h.ack))
            .collect::<Vec<_>>(),
        [(KIND_PKT, 1)]
    );
    deliver(&b, &mut a, &data, t1);
    assert!(
        a.fill_due,
        "frame 2 waits for the room the piggybacked ACK opened"
    );
    a.fill_windows(&Mem(Vec::new()), Some(t1));
    let out = wire(&mut a);
    assert_eq!(
        headers(&out)
            .iter()
            .map(|h| (h.seq, h.dst_connid))
            .collect::<Vec<_>>(),
        [(2, b.addr.connid)]
    );
}

/// A connection whose only work is a served read (streaming, or finishing: its status
/// waits for the acknowledgement of its data) needs the walk after an ACK too: the read's
/// response goes out. (The reads are put in place by hand: their keys are unknown, so the
/// walk ends each with `NoMemory`, which is enough to see that it ran.)
///
/// Catches: a condition on `waiting` alone, or one that leaves out `reads` or
/// `finishing`.
#[test]
fn an_ack_on_a_connection_with_only_a_read_to_serve_asks_for_the_walk() {
    for finishing in [false, true] {
        let mut a = dev();
        let mut b = dev();
        let t0 = Instant::now();
        send(&mut a, &b, 1, t0);
        let k = conn_to(&b);
        let job = ReadJob {
            id: 42,
            key: 0xdead,
            mem: MemHandle(0),
            off: 0,
            len: 16,
            sent: if finishing { 16 } else { 0 },
            splice: Some(finishing),
        };
        {
            let cn = a.conns.get_mut(&k).expect("conn");
            assert!(cn.waiting.is_empty() && cn.reads.is_empty());
            if finishing {
                cn.finishing.push(job);
            } else {
                cn.reads.push_back(job);
            }
        }
        let out = wire(&mut a);
        deliver(&a, &mut b, &out, t0);
        let t1 = t0 + Duration::from_secs(1);
        b.acks(Some(t1));
        let acks = wire(&mut b);
        assert_eq!(acks.len(), 1);
        a.fill_due = false;
        deliver(&b, &mut a, &acks, t1);
        assert!(a.conns[&k].unacked.is_empty());
        assert!(
            a.fill_due,
            "finishing {finishing}: the read waits for the walk"
        );
        a.fill_windows(&Mem(vec![0; 16]), Some(t1));
        let out = wire(&mut a);
        assert_eq!(
            headers(&out).iter().map(|h| h.kind).collect::<Vec<_>>(),
            [KIND_READ_RESP],
            "finishing {finishing}"
        );
        let cn = &a.conns[&k];
        assert!(cn.reads.is_empty() && cn.finishing.is_empty());
    }
}

//! Adversarial checks of the direct window entry of `UdpDevice::enqueue` (a send
//! submitted to an idle connection enters its window in `submit`), against what
//! `fill_windows_due` does when it moves a waiting frame into the window.
use std::time::{Duration, Instant};

use tagmatch_rdm::{MemHandle, PeerId, SendOutcome, SendToken, Transmit};

use super::*;

pub(super) struct NoMem;

impl MemoryAccess for NoMem {
    fn region(&self, _: MemHandle) -> Option<&[u8]> {
        None
    }
    fn region_mut(&mut self, _: MemHandle) -> Option<&mut [u8]> {
        None
    }
}

fn dev() -> UdpDevice {
    UdpDevice::bind(UdpConfig::new("127.0.0.1:0".parse().expect("addr"))).expect("bind")
}

pub(super) fn submit(from: &mut UdpDevice, to: RawAddr, token: u64, body: &[u8]) {
    from.submit(
        Transmit::Send {
            token: SendToken(token),
            peer: PeerId(0),
            dest: to,
            bytes: body.to_vec(),
        },
        &mut NoMem,
    );
}

fn key(d: &UdpDevice) -> ConnKey {
    *d.conns.keys().next().expect("a connection")
}

/// Progresses `d` until `done` holds (at most 10 s); returns the packets handed up.
fn progress_until(d: &mut UdpDevice, done: impl Fn(&UdpDevice) -> bool) -> Vec<Vec<u8>> {
    let start = Instant::now();
    let mut got = Vec::new();
    while !done(d) {
        assert!(start.elapsed() < Duration::from_secs(10), "not done");
        d.progress(&mut NoMem, Some(Duration::from_millis(1)))
            .expect("progress");
        while let Some(ev) = d.poll_event() {
            if let DeviceEvent::Recv { bytes, .. } = ev {
                got.push(bytes);
            }
        }
    }
    got
}

/// A frame entering the window directly carries the acknowledgement of what its
/// connection received (the header is built when it is sent): the receive side's ACK
/// duty is discharged (`AckState::sent`), so no pure ACK follows, and the peer's frame
/// is acknowledged by the reply alone. The reply gets a transmission order (for the
/// RACK-like loss detection) and a retransmission deadline one RTO after it was timed.
#[test]
fn a_direct_reply_carries_the_ack_and_is_timed_and_ordered() {
    let mut a = dev();
    // A long ACK delay: b's ACK is still owed when its reply is submitted.
    let mut u = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
    u.ack_delay = Duration::from_millis(10);
    let mut b = UdpDevice::bind(u).expect("bind");
    let delay = b.cfg.ack_delay;
    // a's request reaches b: b owes an ACK (delayed: one short in-order frame).
    submit(&mut a, b.addr.to_raw(), 1, b"request");
    a.send_soon(&mut NoMem).expect("send");
    let got = progress_until(&mut b, |b| b.stats.frames_received == 1);
    assert_eq!(got, [b"request".to_vec()]);
    let kb = key(&b);
    assert!(b.conns[&kb].ack.needed(), "b owes an ACK");
    // b answers at once: its connection has nothing in flight, the reply goes direct.
    b.fill_due = false;
    submit(&mut b, a.addr.to_raw(), 2, b"reply");
    assert!(!b.fill_due, "direct entry");
    let c = &b.conns[&kb];
    assert!(
        !c.ack.needed() && c.ack.due.is_none(),
        "the reply carries the ACK"
    );
    let f = c.unacked.get(&1).expect("the reply is frame 1");
    assert_eq!((f.order, c.tx_order), (1, 1), "transmission order");
    assert_eq!(f.retries, 0);
    assert_eq!(f.alive, f.last_sent);
    assert_eq!(f.deadline, f.last_sent + c.rto(&b.cfg), "one RTO");
    assert_eq!(c.unacked_bytes, b"reply".len());
    b.send_soon(&mut NoMem).expect("send");
    // a gets the reply, and with it the ACK of its request.
    let got = progress_until(&mut a, |a| a.stats.frames_received == 1);
    assert_eq!(got, [b"reply".to_vec()]);
    let ka = key(&a);
    assert!(
        a.conns[&ka].unacked.is_empty(),
        "the request is acknowledged"
    );
    // b has nothing left to acknowledge: it sends no pure ACK of the request, ever.
    let start = Instant::now();
    while start.elapsed() < 3 * delay {
        b.progress(&mut NoMem, Some(Duration::from_millis(1)))
            .expect("progress");
    }
    assert_eq!(b.stats.acks_sent, 0, "{:?}", b.stats);
}

/// A connection whose sequence numbers are used up (`next_seq` beyond `u32::MAX`) takes
/// no more frames into its window, direct or not: the send waits, and the connection
/// fails (its sends complete with `Error`), as `fill_windows_due` and `timers` have it.
#[test]
fn no_direct_entry_once_the_sequence_numbers_are_used_up() {
    let mut a = dev();
    let b = dev();
    submit(&mut a, b.addr.to_raw(), 1, b"one");
    let k = key(&a);
    // Take the frame back out, as its ACK would (no peer progress needed).
    let c = a.conns.get_mut(&k).expect("conn");
    let f = c.unacked.remove(&1).expect("frame 1");
    c.unacked_bytes -= f.body.len();
    c.next_seq = u32::MAX as u64 + 1;
    a.txq.clear();
    let sent = a.stats.frames_sent;
    submit(&mut a, b.addr.to_raw(), 2, b"two");
    let c = &a.conns[&k];
    assert!(c.unacked.is_empty(), "no sequence number left");
    assert_eq!(c.waiting.len(), 1);
    assert_eq!(a.stats.frames_sent, sent);
    a.progress(&mut NoMem, Some(Duration::ZERO))
        .expect("progress");
    let outcomes: Vec<_> = std::iter::from_fn(|| a.poll_event())
        .filter_map(|ev| match ev {
            DeviceEvent::SendDone { token, outcome } => Some((token, outcome)),
            _ => None,
        })
        .collect();
    assert_eq!(outcomes, [(SendToken(2), SendOutcome::Error)]);
}

/// With the fault shim configured, a direct frame goes through it like any other: a shim
/// that drops everything leaves the wire empty.
#[test]
fn a_direct_frame_goes_through_the_shim() {
    let mut u = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
    u.shim = Some(shim::ShimConfig {
        seed: 1,
        drop: 1000,
        duplicate: 0,
        reorder: 0,
    });
    let mut a = UdpDevice::bind(u).expect("bind");
    let b = dev();
    a.fill_due = false;
    submit(&mut a, b.addr.to_raw(), 1, b"lost");
    assert!(!a.fill_due, "direct entry");
    assert_eq!(a.stats().shim.dropped, 1);
    assert!(a.txq.is_empty());
    a.send_soon(&mut NoMem).expect("send");
    assert_eq!(a.stats().sock.tx_datagrams, 0);
}

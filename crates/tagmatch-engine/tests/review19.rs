//! Review of ce0bcd8 + db79c9d (a control held out of order counts as one entry against
//! `Config::max_messages`, kept in `Engine::reserved`).
//!
//! The budget accounting of held controls matches the session-18 model (its random walks,
//! run in release, pass). What these tests pin down is the path the commits left as it
//! was: the next message in order is admitted without the budget's check whenever its
//! source has anything held (`peer.occupied > 0`), held controls included.

use tagmatch_engine::*;

type E = Engine<u64, u64>;

fn env(src: u32, tag: u64) -> Envelope {
    Envelope::new(0, src, tag)
}

/// `Config::max_bytes`: the next message in order passes the byte budget only "when
/// messages after it are held out of order (they wait for it; refusing it would leave the
/// source stuck ...)", and "the overshoot is at most, per source, the gaps below its held
/// messages". A held control holds no bytes: nothing of the source waits on the byte
/// budget, so a source with only a control held has no claim to pass it. On the reviewed
/// code every message below a held control (up to the window's edge, now within
/// `max_messages`) was admitted over `max_bytes`, whatever its size.
#[test]
fn messages_below_a_held_control_do_not_pass_the_byte_budget() {
    let mut e = E::new(
        Config::default()
            .max_bytes(100)
            .max_messages(64)
            .reorder_window(64),
    );
    // A control three ahead: holds no bytes, keeps room for the three missing messages.
    assert_eq!(e.deliver_control(1, 3, |_| panic!("held")), Ok(0));
    assert_eq!(e.counters().bytes_held, 0);
    // The next in order, 1000 bytes against a 100-byte budget, no receive posted: refused,
    // as it is from a source with nothing held.
    let r = e
        .deliver(env(1, 7), 0, 1000, 70, |_| panic!("refused"))
        .unwrap_err();
    assert_eq!(
        (r.reason, r.len, r.msg),
        (RejectReason::Backpressure, 1000, 70)
    );
    assert_eq!(e.counters().bytes_held, 0);
    assert_eq!(e.expected_seq(1), 0);
    // Within the budget it passes; a posted receive takes one of any size.
    assert_eq!(e.deliver(env(1, 7), 0, 60, 70, |_| {}), Ok(1));
    assert!(matches!(
        e.post(RecvSpec::exact(0, 1, 8), 5),
        Ok(Posted::Pending(_))
    ));
    let mut got = Vec::new();
    assert_eq!(
        e.deliver(env(1, 8), 1, 1 << 20, 71, |a| got.push(format!("{a:?}"))),
        Ok(1)
    );
    assert!(got[0].starts_with("Matched"), "{got:?}");
    // 41 more would pass the budget (60 + 41 > 100).
    let r = e.deliver(env(1, 9), 2, 41, 72, |_| {}).unwrap_err();
    assert_eq!(r.reason, RejectReason::Backpressure);
    assert_eq!(e.counters().bytes_held, 60);
    // The control's turn comes with the last message below it.
    let mut ev = Vec::new();
    assert_eq!(
        e.deliver_held(env(1, 9), 2, 40, 40, 72, |o| ev.push(format!("{o:?}"))),
        Ok(2)
    );
    assert!(ev[1].contains("Control"), "{ev:?}");
    assert_eq!(e.counters().bytes_held, 100);
    assert_eq!(e.pressure(), Pressure::Full);
}

/// Held messages keep the exception: the next in order is admitted over the byte budget
/// (the source's held bytes wait for it), also when a control is held besides them.
#[test]
fn a_held_message_still_lets_the_next_in_order_pass_the_byte_budget() {
    let mut e = E::new(
        Config::default()
            .max_bytes(100)
            .max_messages(64)
            .reorder_window(64),
    );
    assert_eq!(e.deliver_control(1, 1, |_| panic!("held")), Ok(0));
    assert_eq!(e.deliver(env(1, 2), 2, 100, 72, |_| panic!("held")), Ok(0));
    assert_eq!(e.counters().bytes_held, 100);
    let mut ev = Vec::new();
    assert_eq!(
        e.deliver_held(env(1, 0), 0, 50, 50, 70, |o| ev.push(format!("{o:?}"))),
        Ok(3)
    );
    assert_eq!(e.counters().bytes_held, 150);
    // After purge_comm turned the held message into a skip, nothing of the source holds
    // bytes any more: the budget applies again.
    let mut e = E::new(
        Config::default()
            .max_bytes(100)
            .max_messages(64)
            .reorder_window(64),
    );
    assert_eq!(
        e.deliver(Envelope::new(3, 1, 2), 2, 100, 72, |_| panic!("held")),
        Ok(0)
    );
    assert_eq!(e.purge_comm(3, |_| {}), 1);
    assert_eq!(e.counters().bytes_held, 0);
    assert_eq!(e.deliver(env(1, 0), 0, 60, 70, |_| {}), Ok(1));
    let r = e.deliver(env(1, 1), 1, 60, 71, |_| {}).unwrap_err();
    assert_eq!(r.reason, RejectReason::Backpressure);
    assert_eq!(e.deliver(env(1, 1), 1, 40, 71, |_| {}), Ok(1));
    assert_eq!(e.expected_seq(1), 3);
}

/// A message longer than `u32::MAX` bytes cannot be stored (the engine keeps lengths in
/// 32 bits; `Engine::deliver` documents a length over it as refused, `fits` checks it):
/// the next in order of a source with something held skipped that check with the budget's
/// and was stored with its length cut to `u32::MAX`, which `probe` and the match then
/// reported.
#[test]
fn the_next_in_order_longer_than_u32_is_refused_not_truncated() {
    let big = u32::MAX as usize + 10;
    let mut e = E::new(Config::default().max_bytes(usize::MAX).reorder_window(64));
    assert_eq!(e.deliver_control(1, 1, |_| panic!("held")), Ok(0));
    match e.deliver_held(env(1, 7), 0, big, 0, 70, |_| {}) {
        Err(r) => assert_eq!((r.reason, r.len), (RejectReason::Backpressure, big)),
        Ok(_) => {
            let p = e.probe(&RecvSpec::exact(0, 1, 7)).unwrap();
            panic!("stored, probe reports {} bytes for {big}", p.len);
        }
    }
    // A posted receive takes it at its length.
    assert!(matches!(
        e.post(RecvSpec::exact(0, 1, 7), 5),
        Ok(Posted::Pending(_))
    ));
    let mut len = 0;
    assert_eq!(
        e.deliver_held(env(1, 7), 0, big, 0, 70, |o| {
            if let Ordered::Arrived(Arrived::Matched(m)) = o {
                len = m.len;
            }
        }),
        Ok(2)
    );
    assert_eq!(len, big);
}

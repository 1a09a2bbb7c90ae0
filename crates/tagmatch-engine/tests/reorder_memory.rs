//! The reorder buffer's memory (issue #3: "a bounded reorder buffer", "never unbounded
//! growth", "no allocation per operation in steady state"): a source's buffer is
//! allocated only for an admitted out-of-order arrival, sized by how far ahead the source
//! got (not by the window), counted by `heap_bytes`, and given back after a deep burst.
//!
//! Found by the session-18 audit: the first out-of-order arrival of a source allocated
//! a ring of `window` slots before the duplicate and budget checks, so 200 sources each
//! sending one early message took 700 MiB while the engine reported `Pressure::Full`.

use tagmatch_engine::{Config, Engine, Envelope, Pressure, RejectReason};

fn env(src: u32, tag: u64) -> Envelope {
    Envelope::new(0, src, tag)
}

#[test]
fn early_arrivals_from_many_sources_stay_within_the_budget() {
    let mut e: Engine<u32, Vec<u8>> = Engine::new(
        Config::default()
            .reorder_window(1 << 16)
            .max_messages(64)
            .max_bytes(1024),
    );
    let mut refused = 0;
    for src in 0..200u32 {
        // Sequence 1 from each source: 0 is missing, so each is held (or refused).
        if let Err(r) = e.deliver(env(src, 1), 1, 0, Vec::new(), |_| {}) {
            assert_eq!(r.reason, RejectReason::Backpressure);
            refused += 1;
        }
    }
    assert_eq!(e.pressure(), Pressure::Full);
    // Each held message keeps room for the gap below it: 32 held, 168 refused.
    assert_eq!(e.counters().reorder_depth, 32);
    assert_eq!(refused, 168);
    // 32 rings of 4 slots and the 200 sources' sequence state (it was 734,017,808
    // bytes: 32 rings of 65,536 slots).
    assert!(e.heap_bytes() < 64 << 10, "{} bytes", e.heap_bytes());
}

/// The review of session 18 found the same growth through controls: a held control took
/// no budget, so one early control per source at the window's edge grew every source's
/// ring to 65,536 slots (734 MB for 200 sources). A held control now counts as one entry
/// and keeps room for the messages missing below it, as a held message does.
#[test]
fn early_controls_from_many_sources_stay_within_the_budget() {
    let mut e: Engine<u32, Vec<u8>> = Engine::new(
        Config::default()
            .reorder_window(1 << 16)
            .max_messages(64)
            .max_bytes(1024),
    );
    let before = e.heap_bytes();
    for src in 0..200u32 {
        // At the window's edge: 65,535 messages missing below it, more than the budget.
        assert_eq!(
            e.deliver_control(src, 65_535, |_| panic!("held, not in order")),
            Err(RejectReason::Backpressure),
            "source {src}"
        );
    }
    assert_eq!(e.counters().rejected_backpressure, 200);
    assert_eq!(e.pressure(), Pressure::Normal);
    assert!(
        e.heap_bytes() - before < 64 << 10,
        "{} bytes",
        e.heap_bytes() - before
    );
    // Near ones are held while the budget has room (each: itself and the gap below):
    // 32 of them; a control in order still takes no budget.
    let mut held = 0;
    for src in 0..200u32 {
        if e.deliver_control(src, 1, |_| panic!("held")).is_ok() {
            held += 1;
        }
    }
    assert_eq!(held, 32);
    assert_eq!(e.pressure(), Pressure::Full);
    assert!(e.heap_bytes() - before < 64 << 10);
    // Full, yet the in-order control of a held source passes and releases its held one,
    // giving back the two entries.
    let mut turns = Vec::new();
    assert_eq!(
        e.deliver_control(0, 0, |o| turns.push(format!("{o:?}"))),
        Ok(2)
    );
    assert_eq!(turns.len(), 2);
    assert_eq!(e.pressure(), Pressure::High);
    // Purging a peer gives back its held control's entry and its gap's: with source 0's
    // two, room for two more sources.
    assert_eq!(e.purge_peer(1, |_| {}), 0);
    assert_eq!(e.deliver_control(199, 1, |_| {}), Ok(0));
    assert_eq!(e.deliver_control(198, 1, |_| {}), Ok(0));
    assert_eq!(
        e.deliver_control(197, 1, |_| {}),
        Err(RejectReason::Backpressure)
    );
}

#[test]
fn a_rejected_arrival_allocates_nothing() {
    let mut e: Engine<u32, Vec<u8>> = Engine::new(
        Config::default()
            .reorder_window(4096)
            .max_messages(4)
            .max_bytes(1 << 20),
    );
    // Fill the message budget with in-order messages of source 0.
    for s in 0..4 {
        e.deliver(env(0, s), s as u32, 0, Vec::new(), |_| {})
            .unwrap();
    }
    assert_eq!(e.pressure(), Pressure::Full);
    // Sources 1..100 each send an early message: refused, and nothing grows but the
    // sources' sequence state.
    let before = e.heap_bytes();
    for src in 1..101u32 {
        let r = e
            .deliver(env(src, 5), 5, 0, Vec::new(), |_| {})
            .unwrap_err();
        assert_eq!(r.reason, RejectReason::Backpressure);
    }
    // The 100 sources' sequence state only (it was 100 rings of 4,096 slots, 16 MB).
    let peers_only = e.heap_bytes() - before;
    assert!(
        peers_only < 32 << 10,
        "refused arrivals allocated {peers_only} bytes"
    );
    // Beyond the window, stale, and duplicate arrivals allocate nothing either.
    let mut e: Engine<u32, Vec<u8>> = Engine::new(Config::default().reorder_window(4096));
    e.deliver(env(7, 2), 2, 0, Vec::new(), |_| {}).unwrap();
    let before = e.heap_bytes();
    for (seq, why) in [
        (5000, RejectReason::WindowOverflow),
        (u32::MAX, RejectReason::Stale),
        (2, RejectReason::Duplicate),
    ] {
        let r = e
            .deliver(env(7, 9), seq, 0, Vec::new(), |_| {})
            .unwrap_err();
        assert_eq!(r.reason, why, "seq {seq}");
        assert_eq!(e.heap_bytes(), before, "seq {seq}");
    }
}

#[test]
fn a_ring_is_as_large_as_the_source_got_ahead_and_keeps_its_items_when_it_grows() {
    let mut e: Engine<u32, Vec<u8>> = Engine::new(Config::default().reorder_window(16_384));
    // One swapped pair (the RDM endpoint's window is 16,384): 4 slots and the source's
    // sequence state, not 16,384 slots (655 kB).
    e.deliver(env(1, 1), 1, 1, vec![1], |_| {}).unwrap();
    let small = e.heap_bytes();
    assert!(small < 1024, "one early message: {small} bytes");
    // Further ahead, in an order that grows the ring while items are held at offsets
    // that wrap around its start: every held message keeps its place.
    let mut got = Vec::new();
    e.deliver(env(1, 0), 0, 1, vec![0], |a| got.push(a))
        .unwrap();
    assert_eq!(got.len(), 2);
    for seq in [3u32, 5, 4, 9, 40, 7, 1000, 33, 2] {
        let mut out = Vec::new();
        e.deliver(env(1, seq as u64), seq, 1, vec![seq as u8], |a| out.push(a))
            .unwrap();
        got.extend(out);
    }
    // 0..=5 delivered (2 released 3, 4, 5); 7, 9, 33, 40, 1000 still held.
    assert_eq!(got.len(), 6);
    assert_eq!(e.counters().reorder_depth, 5);
    // The ring covers offset 1000 - 6 = 994: 1,024 slots (with 6 stored messages).
    let deep = e.heap_bytes();
    assert!((1024 * 8..2048 * 64).contains(&deep), "{deep} bytes");
    // Fill the gaps in a shuffled order; everything comes out in sequence order.
    let mut order: Vec<u32> = (6..1000).filter(|s| ![7, 9, 33, 40].contains(s)).collect();
    order.reverse();
    order.rotate_left(300);
    let mut seqs = Vec::new();
    for s in order {
        e.deliver(env(1, s as u64), s, 1, vec![s as u8], |a| match a {
            tagmatch_engine::Arrived::Unexpected(env) => seqs.push(env.tag as u32),
            other => panic!("{other:?}"),
        })
        .unwrap();
    }
    assert_eq!(seqs, (6..=1000).collect::<Vec<u32>>());
    assert_eq!(e.counters().reorder_depth, 0);
    assert_eq!(e.expected_seq(1), 1001);
    // Drained after a deep burst: the 1,024-slot ring is given back.
    let mut fresh: Engine<u32, Vec<u8>> = Engine::new(Config::default().reorder_window(16_384));
    for s in 0..=1000u32 {
        fresh
            .deliver(env(1, s as u64), s, 1, vec![s as u8], |_| {})
            .unwrap();
    }
    assert_eq!(
        e.heap_bytes(),
        fresh.heap_bytes(),
        "after the drain: the same heap as in-order arrivals"
    );
}

#[test]
fn steady_small_reordering_allocates_nothing() {
    let mut e: Engine<u32, u32> = Engine::new(Config::default().reorder_window(16_384));
    let round = |e: &mut Engine<u32, u32>| {
        for src in 0..8u32 {
            let s = e.expected_seq(src);
            // Three ahead, then the missing ones: offsets up to 3 (4 slots).
            for d in [3u32, 1, 2, 0] {
                e.deliver(env(src, 0), s.wrapping_add(d), 0, d, |_| {})
                    .unwrap();
            }
        }
        // Take what was delivered, so that the queues do not grow either.
        while e
            .post(tagmatch_engine::RecvSpec::new(0, None, None), 0)
            .is_ok_and(|p| matches!(p, tagmatch_engine::Posted::Matched(_)))
        {}
        e.cancel_where(|_, _| true, |_, _| {});
    };
    round(&mut e);
    round(&mut e);
    let before = e.heap_bytes();
    // Counted by the allocator, not only by capacities: a ring freed and allocated
    // again would leave `heap_bytes` unchanged.
    let info = allocation_counter::measure(|| {
        for _ in 0..100 {
            round(&mut e);
        }
    });
    assert_eq!(info.count_total, 0, "{info:?}");
    assert_eq!(e.heap_bytes(), before);
    assert_eq!(e.counters().reorder_depth, 0);
}

#[test]
fn a_deep_burst_is_given_back_once_and_a_shallow_ring_is_kept() {
    let mut e: Engine<u32, u32> = Engine::new(Config::default().reorder_window(16_384));
    // A burst 200 ahead (a 256-slot ring), drained: the ring is freed.
    let burst = |e: &mut Engine<u32, u32>, depth: u32| {
        let s = e.expected_seq(1);
        for d in (1..=depth).rev() {
            e.deliver(env(1, 0), s.wrapping_add(d), 0, d, |_| {})
                .unwrap();
        }
        e.deliver(env(1, 0), s, 0, 0, |_| {}).unwrap();
        while e
            .post(tagmatch_engine::RecvSpec::new(0, None, None), 0)
            .is_ok_and(|p| matches!(p, tagmatch_engine::Posted::Matched(_)))
        {}
        e.cancel_where(|_, _| true, |_, _| {});
    };
    burst(&mut e, 200);
    let after_deep = e.heap_bytes();
    burst(&mut e, 3);
    let after_shallow = e.heap_bytes();
    // The shallow ring (4 slots) stays: the next shallow burst allocates nothing.
    let info = allocation_counter::measure(|| burst(&mut e, 3));
    assert_eq!(info.count_total, 0, "{info:?}");
    assert_eq!(e.heap_bytes(), after_shallow);
    // The deep ring was freed when drained: the heap after it is below what a
    // 256-slot ring alone takes on top of the shallow state.
    assert!(
        after_deep < after_shallow + 256 * 4,
        "{after_deep} vs {after_shallow}"
    );
    // Past 64 slots a drained ring is freed each time: one allocation for the burst (the
    // ring grown from 4 to 128 slots), and nothing of it left afterwards (the 4-slot
    // ring it replaced is gone too).
    let info = allocation_counter::measure(|| burst(&mut e, 100));
    assert_eq!(info.count_total, 1, "{info:?}");
    assert!(info.bytes_current <= 0, "{info:?}");
}

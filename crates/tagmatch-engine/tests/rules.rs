//! Targeted tests, one per ordering rule and per limit.

use tagmatch_engine::*;

type E = Engine<&'static str, u32>;

fn env(comm: u32, src: u32, tag: u64) -> Envelope {
    Envelope::new(comm, src, tag)
}

fn pending<R, M: std::fmt::Debug>(p: Result<Posted<R, M>, PostRejected<R>>) -> RecvHandle {
    match p {
        Ok(Posted::Pending(h)) => h,
        Ok(Posted::Matched(m)) => panic!("expected pending, matched {:?}", m.msg),
        Err(_) => panic!("post rejected"),
    }
}

fn matched_recv<R, M>(a: Result<Arrived<R, M>, Rejected<M>>) -> Option<R> {
    match a {
        Ok(Arrived::Matched(m)) => Some(m.recv),
        Ok(Arrived::Unexpected(_)) => None,
        Err(_) => panic!("arrival rejected"),
    }
}

fn matched_msg<R, M>(p: Result<Posted<R, M>, PostRejected<R>>) -> Option<M> {
    match p {
        Ok(Posted::Matched(m)) => Some(m.msg),
        Ok(Posted::Pending(_)) => None,
        Err(_) => panic!("post rejected"),
    }
}

#[test]
fn message_matches_earliest_posted_receive() {
    let mut e = E::default();
    pending(e.post(RecvSpec::exact(0, 1, 5), "r1"));
    pending(e.post(RecvSpec::exact(0, 1, 5), "r2"));
    assert_eq!(matched_recv(e.arrive(env(0, 1, 5), 0, 10)), Some("r1"));
    assert_eq!(matched_recv(e.arrive(env(0, 1, 5), 0, 11)), Some("r2"));
    assert_eq!(matched_recv(e.arrive(env(0, 1, 5), 0, 12)), None);
}

#[test]
fn posting_order_merges_exact_and_every_wildcard_kind() {
    // Receives of four kinds that all match (0,1,5), posted in a given order: arrivals must
    // take them in exactly that order, whichever index each lives on.
    let kinds = [
        RecvSpec::exact(0, 1, 5),
        RecvSpec::new(0, Some(1), None),
        RecvSpec::new(0, None, Some(5)),
        RecvSpec::new(0, None, None),
        RecvSpec::masked(0, Source::Any, 4, 4),
        RecvSpec::masked(0, Source::Rank(1), 1, 1),
    ];
    let names = [
        "exact", "anytag", "anysrc", "anyany", "mask-any", "mask-src",
    ];
    // several rotations of the posting order
    for rot in 0..kinds.len() {
        let mut e = E::default();
        let order: Vec<usize> = (0..kinds.len()).map(|i| (i + rot) % kinds.len()).collect();
        for &i in &order {
            pending(e.post(kinds[i], names[i]));
        }
        for &i in &order {
            assert_eq!(
                matched_recv(e.arrive(env(0, 1, 5), 0, 0)),
                Some(names[i]),
                "rotation {rot}"
            );
        }
        assert_eq!(e.counters().posted_depth, 0);
    }
}

#[test]
fn receive_matches_earliest_arrived_message_for_each_kind() {
    let mut e = E::default();
    // arrival order: m0 (src 2, tag 7), m1 (src 1, tag 7), m2 (src 1, tag 8), m3 (src 2, tag 8)
    let msgs = [(2, 7), (1, 7), (1, 8), (2, 8)];
    for (i, &(s, t)) in msgs.iter().enumerate() {
        assert_eq!(matched_recv(e.arrive(env(0, s, t), 0, i as u32)), None);
    }
    assert_eq!(
        matched_msg(e.post(RecvSpec::new(0, None, Some(8)), "anysrc8")),
        Some(2)
    );
    assert_eq!(
        matched_msg(e.post(RecvSpec::new(0, Some(2), None), "anytag2")),
        Some(0)
    );
    assert_eq!(
        matched_msg(e.post(RecvSpec::new(0, None, None), "any")),
        Some(1)
    );
    assert_eq!(
        matched_msg(e.post(RecvSpec::exact(0, 2, 8), "exact")),
        Some(3)
    );
    assert_eq!(e.counters().unexpected_depth, 0);
    // other communicator never matches
    assert_eq!(
        matched_msg(e.post(RecvSpec::new(1, None, None), "c1")),
        None
    );
}

#[test]
fn masked_receive_rule_and_order() {
    let mut e = E::default();
    // tag & 0xF0 == 0x30
    for (i, t) in [0x31u64, 0x42, 0x3F, 0x30].iter().enumerate() {
        e.arrive(env(0, 0, *t), 0, i as u32).unwrap();
    }
    let spec = RecvSpec::masked(0, Source::Any, 0x30, 0xF0);
    assert_eq!(matched_msg(e.post(spec, "a")), Some(0));
    assert_eq!(matched_msg(e.post(spec, "b")), Some(2));
    assert_eq!(matched_msg(e.post(spec, "c")), Some(3));
    assert_eq!(matched_msg(e.post(spec, "d")), None);
    // posted masked receive vs later exact receive: masked one is earlier
    pending(e.post(RecvSpec::exact(0, 0, 0x35), "e"));
    assert_eq!(matched_recv(e.arrive(env(0, 0, 0x35), 0, 9)), Some("d"));
    assert_eq!(matched_recv(e.arrive(env(0, 0, 0x35), 0, 9)), Some("e"));
    // degenerate masks are normalised and still match
    assert_eq!(
        matched_msg(e.post(RecvSpec::masked(0, Source::Rank(0), 0x42, u64::MAX), "f")),
        Some(1)
    );
    pending(e.post(RecvSpec::masked(0, Source::Rank(3), 0x1234, 0), "g"));
    assert_eq!(matched_recv(e.arrive(env(0, 3, 99), 0, 0)), Some("g"));
}

#[test]
fn non_overtaking_in_order_and_with_out_of_order_sequence_numbers() {
    // Two messages from one source both match a wildcard receive: the first sent wins,
    // even if the transport delivers the second first.
    let mut e = E::default();
    let mut out: Vec<String> = Vec::new();
    fn fmt(a: Arrived<&'static str, u32>) -> String {
        match a {
            Arrived::Matched(m) => format!("{}<-{}", m.recv, m.msg),
            Arrived::Unexpected(_) => "unexp".into(),
        }
    }
    pending(e.post(RecvSpec::new(0, None, None), "r1"));
    pending(e.post(RecvSpec::new(0, Some(4), None), "r2"));
    assert_eq!(
        e.deliver(env(0, 4, 2), 1, 0, 101, |a| out.push(fmt(a))),
        Ok(0)
    ); // early: held
    assert_eq!(e.counters().reorder_depth, 1);
    assert_eq!(
        e.deliver(env(0, 4, 1), 0, 0, 100, |a| out.push(fmt(a))),
        Ok(2)
    );
    assert_eq!(out, ["r1<-100", "r2<-101"]);
    assert_eq!(e.counters().reorder_depth, 0);
    assert_eq!(e.expected_seq(4), 2);
}

#[test]
fn no_ordering_across_sources() {
    let mut e = E::default();
    let mut got = Vec::new();
    pending(e.post(RecvSpec::new(0, None, None), "r1"));
    // source 5's seq 1 is held, source 6's seq 0 passes it.
    e.deliver(env(0, 5, 0), 1, 0, 51, |_| {}).unwrap();
    e.deliver(env(0, 6, 0), 0, 0, 60, |a| got.push(a)).unwrap();
    assert!(matches!(&got[..], [Arrived::Matched(m)] if m.msg == 60 && m.recv == "r1"));
}

#[test]
fn stale_handles_never_hit_new_entries() {
    let mut e = E::default();
    let h1 = pending(e.post(RecvSpec::exact(0, 0, 1), "a"));
    assert_eq!(e.cancel(h1), Ok("a"));
    assert_eq!(e.cancel(h1), Err(EngineError::StaleHandle));
    // the slot is reused by a new receive; the old handle must not reach it
    let h2 = pending(e.post(RecvSpec::exact(0, 0, 1), "b"));
    assert_ne!(h1, h2);
    assert_eq!(e.cancel(h1), Err(EngineError::StaleHandle));
    assert_eq!(e.recv_context(h1), Err(EngineError::StaleHandle));
    assert_eq!(e.recv_context(h2), Ok(&"b"));
    // matched receive: handle stale too
    assert_eq!(matched_recv(e.arrive(env(0, 0, 1), 0, 1)), Some("b"));
    assert_eq!(e.cancel(h2), Err(EngineError::StaleHandle));
    assert_eq!(e.counters().cancelled, 1);
}

#[test]
fn cancel_in_the_middle_keeps_fifo_order() {
    let mut e = E::default();
    let hs: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| pending(e.post(RecvSpec::new(0, None, Some(1)), *n)))
        .collect();
    assert_eq!(e.cancel(hs[1]), Ok("b"));
    assert_eq!(e.cancel(hs[0]), Ok("a")); // head
    assert_eq!(e.cancel(hs[3]), Ok("d")); // tail
    assert_eq!(matched_recv(e.arrive(env(0, 9, 1), 0, 0)), Some("c"));
    assert_eq!(e.counters().posted_depth, 0);
}

#[test]
fn probe_peeks_mprobe_claims_mrecv_receives() {
    let mut e = E::default();
    e.arrive(env(0, 1, 3), 16, 30).unwrap();
    e.arrive(env(0, 1, 4), 8, 40).unwrap();
    let any = RecvSpec::new(0, None, None);
    assert_eq!(e.probe(&any).map(|p| *p.msg), Some(30));
    assert_eq!(e.probe(&any).map(|p| *p.msg), Some(30)); // still there
    let c = e.mprobe(&any).unwrap();
    assert_eq!((c.env, c.len), (env(0, 1, 3), 16));
    assert_eq!(e.claimed(c.handle), Ok(&30));
    // claimed message is invisible to probe and receives
    assert_eq!(e.probe(&RecvSpec::exact(0, 1, 3)).map(|p| *p.msg), None);
    assert_eq!(matched_msg(e.post(RecvSpec::exact(0, 1, 3), "x")), None);
    assert_eq!(e.counters().claimed_depth, 1);
    assert_eq!(e.counters().bytes_held, 24);
    let m = e.mrecv(c.handle).unwrap();
    assert_eq!(m.msg, 30);
    assert_eq!(e.mrecv(c.handle), Err(EngineError::StaleHandle));
    assert_eq!(e.counters().bytes_held, 8);
    assert_eq!(e.mprobe(&RecvSpec::exact(0, 2, 3)), None);
}

#[test]
fn a_claim_handle_goes_stale_when_its_slot_is_reused() {
    // The freed slot of a received claimed message is reused by the next message; a
    // handle from the first claim must not name the second one (queued or claimed).
    let mut e = E::default();
    let any = RecvSpec::new(0, None, None);
    e.arrive(env(0, 1, 3), 1, 10).unwrap();
    let c1 = e.mprobe(&any).unwrap();
    assert_eq!(e.mrecv(c1.handle).map(|m| m.msg), Ok(10));
    e.arrive(env(0, 1, 3), 2, 20).unwrap();
    assert_eq!(e.claimed(c1.handle), Err(EngineError::StaleHandle));
    assert_eq!(e.mrecv(c1.handle), Err(EngineError::StaleHandle));
    let c2 = e.mprobe(&any).unwrap();
    assert_ne!(c2.handle, c1.handle);
    assert_eq!(e.claimed(c1.handle), Err(EngineError::StaleHandle));
    assert_eq!(e.mrecv(c1.handle), Err(EngineError::StaleHandle));
    assert_eq!(e.claimed(c2.handle), Ok(&20));
    assert_eq!(e.mrecv(c2.handle).map(|m| m.msg), Ok(20));
    assert_eq!(e.counters().claimed_depth, 0);
}

#[test]
fn purge_peer_and_comm() {
    let mut e = E::default();
    pending(e.post(RecvSpec::exact(0, 1, 1), "p1"));
    pending(e.post(RecvSpec::new(0, Some(1), None), "p1any"));
    pending(e.post(RecvSpec::new(0, None, Some(1)), "anysrc"));
    pending(e.post(RecvSpec::masked(2, Source::Rank(1), 0, 1), "p1mask"));
    e.arrive(env(1, 1, 5), 4, 15).unwrap();
    e.arrive(env(3, 1, 5), 4, 35).unwrap();
    e.arrive(env(1, 2, 5), 4, 25).unwrap();
    e.deliver(env(1, 1, 6), 3, 4, 16, |_| {}).unwrap(); // held
    let mut got = Vec::new();
    let n = e.purge_peer(1, |p| got.push(p));
    assert_eq!(n, 6);
    assert_eq!(
        got.iter().filter(|p| matches!(p, Purged::Recv(..))).count(),
        3
    );
    assert_eq!(
        got.iter()
            .filter(|p| matches!(p, Purged::Unexpected(_)))
            .count(),
        2
    );
    assert_eq!(
        got.iter().filter(|p| matches!(p, Purged::Held(_))).count(),
        1
    );
    let c = e.counters();
    assert_eq!(
        (
            c.posted_depth,
            c.unexpected_depth,
            c.reorder_depth,
            c.bytes_held
        ),
        (1, 1, 0, 4)
    );
    // comm purge
    let mut got = Vec::new();
    assert_eq!(e.purge_comm(0, |p| got.push(p)), 1);
    assert!(matches!(&got[..], [Purged::Recv(_, "anysrc")]));
    assert_eq!(e.purge_comm(1, |_| {}), 1);
    assert_eq!(e.counters().bytes_held, 0);
}

#[test]
fn purge_comm_skips_held_sequence_numbers() {
    let mut e = E::default();
    e.deliver(env(7, 1, 0), 1, 4, 1, |_| {}).unwrap(); // held, comm 7
    e.deliver(env(8, 1, 0), 2, 4, 2, |_| {}).unwrap(); // held, comm 8
    assert_eq!(e.purge_comm(7, |_| {}), 1);
    let mut seen = Vec::new();
    assert_eq!(e.deliver(env(8, 1, 0), 0, 4, 0, |a| seen.push(a)), Ok(2));
    assert_eq!(e.expected_seq(1), 3);
    assert_eq!(e.counters().unexpected_depth, 2);
    assert_eq!(e.counters().reorder_depth, 0);
}

#[test]
fn bulk_cancel_by_predicate_in_posting_order() {
    let mut e = E::default();
    for (i, n) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        pending(e.post(RecvSpec::exact(0, 0, i as u64 % 2), *n));
    }
    let mut got = Vec::new();
    assert_eq!(
        e.cancel_where(|s, _| s.tag == TagSel::Exact(0), |_, r| got.push(r)),
        3
    );
    assert_eq!(got, ["a", "c", "e"]);
    assert_eq!(e.counters().posted_depth, 2);
    assert_eq!(matched_recv(e.arrive(env(0, 0, 1), 0, 0)), Some("b"));
}

#[test]
fn counters_track_attempts_hits_misses() {
    let mut e = E::default();
    pending(e.post(RecvSpec::exact(0, 0, 1), "a")); // miss
    e.arrive(env(0, 0, 1), 0, 0).unwrap(); // hit
    e.arrive(env(0, 0, 2), 3, 0).unwrap(); // miss
    let c = e.counters();
    assert_eq!((c.hits, c.misses), (1, 2));
    assert!(c.match_attempts >= 1);
    assert_eq!((c.unexpected_depth, c.bytes_held), (1, 3));
}

#[test]
fn first_posted_match_reports_earliest_without_taking() {
    let mut e = E::default();
    assert_eq!(e.first_posted_match(&env(0, 1, 1)), None);
    let h1 = pending(e.post(RecvSpec::new(0, None, Some(1)), "w"));
    let h2 = pending(e.post(RecvSpec::exact(0, 1, 1), "x"));
    let info = e.first_posted_match(&env(0, 1, 1)).unwrap();
    assert_eq!(info.handle, h1);
    assert!(info.seq < e.posted_info(h2).unwrap().seq);
    assert_eq!(e.counters().posted_depth, 2);
}

// ----------------------------------------------------------------- reorder buffer

#[test]
fn reorder_window_overflow_is_an_error_not_a_drop() {
    let mut e = E::new(Config::default().reorder_window(4));
    for s in 1..4 {
        assert_eq!(e.deliver(env(0, 0, s as u64), s, 0, s, |_| {}), Ok(0));
    }
    let r = e.deliver(env(0, 0, 4), 4, 0, 4, |_| {}).unwrap_err();
    assert_eq!((r.reason, r.msg), (RejectReason::WindowOverflow, 4));
    assert_eq!(
        e.deliver(env(0, 0, 2), 2, 0, 2, |_| {}).unwrap_err().reason,
        RejectReason::Duplicate
    );
    // releasing the head drains all three
    assert_eq!(e.deliver(env(0, 0, 0), 0, 0, 0, |_| {}), Ok(4));
    assert_eq!(
        e.deliver(env(0, 0, 0), 0, 0, 0, |_| {}).unwrap_err().reason,
        RejectReason::Stale
    );
    // now 4 fits
    assert_eq!(e.deliver(env(0, 0, 4), 4, 0, 4, |_| {}), Ok(1));
    assert_eq!(e.counters().unexpected_depth, 5);
    assert_eq!(e.counters().rejected_sequence, 3);
}

#[test]
fn reorder_wraps_around_u32_max() {
    let start = u32::MAX - 2;
    let mut e = E::new(Config::default().reorder_window(8).initial_seq(start));
    pending(e.post(RecvSpec::new(0, Some(3), None), "r0"));
    let seqs: Vec<u32> = (0..6).map(|i| start.wrapping_add(i)).collect();
    // deliver in reverse: all but the first are held
    let mut order = Vec::new();
    for (i, &s) in seqs.iter().enumerate().rev() {
        e.deliver(env(0, 3, i as u64), s, 0, i as u32, |a| {
            order.push(match a {
                Arrived::Matched(m) => m.msg,
                Arrived::Unexpected(_) => 1000,
            })
        })
        .unwrap();
    }
    assert_eq!(order, [0, 1000, 1000, 1000, 1000, 1000]);
    assert_eq!(e.expected_seq(3), start.wrapping_add(6));
    // the unexpected ones are in send order
    for i in 1..6 {
        assert_eq!(
            matched_msg(e.post(RecvSpec::new(0, None, None), "x")),
            Some(i)
        );
    }
}

#[test]
fn set_expected_seq_refused_while_busy() {
    let mut e = E::default();
    e.set_expected_seq(1, 100).unwrap();
    assert_eq!(e.expected_seq(1), 100);
    e.deliver(env(0, 1, 0), 101, 0, 0, |_| {}).unwrap();
    assert_eq!(e.set_expected_seq(1, 5), Err(EngineError::PeerBusy));
}

// ----------------------------------------------------------------- memory budget

#[test]
fn byte_budget_gives_backpressure_and_leaves_state_unchanged() {
    let mut e = E::new(Config::default().max_bytes(100).high_water_percent(50));
    assert_eq!(e.pressure(), Pressure::Normal);
    e.arrive(env(0, 0, 0), 60, 0).unwrap();
    assert_eq!(e.pressure(), Pressure::High);
    let r = e.arrive(env(0, 0, 1), 41, 1).unwrap_err();
    assert_eq!((r.reason, r.msg), (RejectReason::Backpressure, 1));
    assert_eq!(e.counters().unexpected_depth, 1);
    // a message that matches a posted receive needs no budget
    pending(e.post(RecvSpec::exact(0, 0, 1), "r"));
    assert_eq!(matched_recv(e.arrive(env(0, 0, 1), 1000, 1)), Some("r"));
    e.arrive(env(0, 0, 2), 40, 2).unwrap();
    assert_eq!(e.pressure(), Pressure::Full);
    // sequenced: rejected in-order message does not advance the sequence
    let r = e.deliver(env(0, 5, 0), 0, 1, 3, |_| {}).unwrap_err();
    assert_eq!(r.reason, RejectReason::Backpressure);
    assert_eq!(e.expected_seq(5), 0);
    assert_eq!(
        e.deliver(env(0, 5, 0), 1, 1, 3, |_| {}).unwrap_err().reason,
        RejectReason::Backpressure
    );
    // freeing room lets it in
    assert_eq!(matched_msg(e.post(RecvSpec::exact(0, 0, 0), "s")), Some(0));
    assert_eq!(e.deliver(env(0, 5, 0), 0, 1, 3, |_| {}), Ok(1));
    assert_eq!(e.counters().rejected_backpressure, 3);
}

#[test]
fn message_count_budget_includes_held_claimed_and_the_room_kept_for_gaps() {
    let mut e = E::new(Config::default().max_messages(3));
    e.arrive(env(0, 0, 0), 0, 0).unwrap();
    let c = e.mprobe(&RecvSpec::new(0, None, None)).unwrap();
    // Seq 1 of source 1 is held: it and the message missing below it (seq 0) take two
    // places, so with the claimed message the budget of 3 is full.
    e.deliver(env(0, 1, 0), 1, 0, 1, |_| {}).unwrap();
    assert_eq!(e.pressure(), Pressure::Full);
    assert_eq!(
        e.arrive(env(0, 0, 0), 0, 2).unwrap_err().reason,
        RejectReason::Backpressure
    );
    // The next in order from source 1 takes the place kept for it; its held successor
    // follows. Draining a held message into the unexpected queue never fails, and the
    // budget is never exceeded: 4 and 1 queued, 0 claimed.
    assert_eq!(e.deliver(env(0, 1, 0), 0, 0, 4, |_| {}), Ok(2));
    assert_eq!(
        (e.counters().unexpected_depth, e.counters().claimed_depth),
        (2, 1)
    );
    e.mrecv(c.handle).unwrap();
    // Without held successors the budget applies to the next in order: one more fits.
    assert_eq!(e.deliver(env(0, 1, 0), 2, 0, 5, |_| {}), Ok(1));
    assert_eq!(
        e.deliver(env(0, 1, 0), 3, 0, 6, |_| {}).unwrap_err().reason,
        RejectReason::Backpressure
    );
}

/// A held successor and the gap below it fill the budget; a second successor, which
/// would need a third place, is refused (the transport hands it in again later). The
/// predecessor, which matches nothing, is admitted in the place kept for it: the source
/// progresses, and the budget holds.
#[test]
fn next_in_order_is_admitted_when_held_successors_fill_the_budget() {
    let mut e = E::new(Config::default().max_messages(2));
    pending(e.post(RecvSpec::exact(0, 7, 1), "r1"));
    pending(e.post(RecvSpec::exact(0, 7, 2), "r2"));
    e.deliver(env(0, 7, 1), 1, 0, 11, |_| {}).unwrap();
    assert_eq!(e.pressure(), Pressure::Full);
    assert_eq!(
        e.deliver(env(0, 7, 2), 2, 0, 12, |_| {})
            .unwrap_err()
            .reason,
        RejectReason::Backpressure
    );
    let mut got = Vec::new();
    let mut show = |a: Arrived<&'static str, u32>| {
        got.push(match a {
            Arrived::Matched(m) => (m.msg, Some(m.recv)),
            Arrived::Unexpected(en) => (en.tag as u32 + 10, None),
        })
    };
    assert_eq!(e.deliver(env(0, 7, 0), 0, 0, 10, &mut show), Ok(2));
    assert_eq!(e.deliver(env(0, 7, 2), 2, 0, 12, &mut show), Ok(1));
    assert_eq!(got, vec![(10, None), (11, Some("r1")), (12, Some("r2"))]);
    assert_eq!(e.counters().unexpected_depth, 1);
    assert_eq!(e.counters().reorder_depth, 0);
}

/// Successors arriving before their predecessors (here every round delivers a source's
/// messages in reverse order, and refused ones come again in the next round, as the
/// receiver-not-ready redelivery does) never take the engine over its message budget:
/// a held message keeps room for the ones missing below it. Before that rule, the budget
/// of 2 grew to 64 (the reorder window): each in-order message was admitted over it
/// while successors waited.
#[test]
fn reversed_arrivals_never_exceed_the_message_budget() {
    let mut e = E::new(Config::default().max_messages(2).reorder_window(64));
    let n = 200u32;
    let mut pending: Vec<u32> = (0..n).rev().collect();
    let mut order = Vec::new();
    let mut peak = 0;
    for _round in 0..10 * n {
        if pending.is_empty() {
            break;
        }
        let mut refused = Vec::new();
        for &s in &pending {
            let r = e.deliver(env(0, 3, u64::from(s)), s, 8, s, |a| {
                if let Arrived::Unexpected(en) = a {
                    order.push(en.tag as u32)
                }
            });
            if r.is_err() {
                refused.push(s);
            }
            let c = e.counters();
            peak = peak.max(c.unexpected_depth + c.reorder_depth);
            // The application receives one message per delivery attempt.
            if let Some(c) = e.mprobe(&RecvSpec::new(0, None, None)) {
                e.mrecv(c.handle).unwrap();
            }
        }
        refused.reverse();
        pending = refused;
    }
    assert!(pending.is_empty(), "{} never delivered", pending.len());
    assert_eq!(order, (0..n).collect::<Vec<_>>(), "in send order");
    assert!(peak <= 2, "peak {peak} over the budget of 2");
}

#[test]
fn post_limit_is_a_typed_error() {
    let mut e = E::new(Config::default().max_posted(1));
    pending(e.post(RecvSpec::exact(0, 0, 0), "a"));
    assert_eq!(e.post(RecvSpec::exact(0, 0, 0), "b").unwrap_err().recv, "b");
}

#[test]
fn oversize_unexpected_payload_is_refused() {
    let mut e = E::new(Config::default().max_bytes(usize::MAX));
    let big = u32::MAX as usize + 1;
    assert_eq!(
        e.arrive(env(0, 0, 0), big, 0).unwrap_err().reason,
        RejectReason::Backpressure
    );
    pending(e.post(RecvSpec::exact(0, 0, 0), "r"));
    assert!(matches!(e.arrive(env(0, 0, 0), big, 0), Ok(Arrived::Matched(m)) if m.len == big));
}

#[test]
fn steady_state_does_not_grow_any_container() {
    // The engine allocates only when a slab, an index or the reorder state grows; once a
    // cycle of every operation has run at a given depth, repeating it must leave the heap
    // footprint (computed from capacities) unchanged.
    let mut e: Engine<u32, u32> = Engine::new(Config::default().reorder_window(8));
    let cycle = |e: &mut Engine<u32, u32>, round: u64| {
        for i in 0..64u64 {
            let t = round * 64 + i; // fresh tags every round
            let h = match e.post(RecvSpec::exact(0, 1, t), 0) {
                Ok(Posted::Pending(h)) => h,
                _ => panic!("post"),
            };
            if i % 4 == 0 {
                e.cancel(h).unwrap();
            } else {
                e.arrive(env(0, 1, t), 0, 0).unwrap();
            }
            e.arrive(env(0, 2, t), 8, 1).unwrap();
            e.probe(&RecvSpec::new(0, None, Some(t))).unwrap();
            let c = e.mprobe(&RecvSpec::new(0, Some(2), None)).unwrap();
            e.mrecv(c.handle).unwrap();
            // out-of-order pair through the reorder buffer
            let s = e.expected_seq(3);
            e.deliver(env(0, 3, t), s.wrapping_add(1), 0, 2, |_| {})
                .unwrap();
            e.deliver(env(0, 3, t), s, 0, 3, |_| {}).unwrap();
            e.post(RecvSpec::new(0, None, None), 0).unwrap();
            e.post(RecvSpec::masked(0, Source::Any, t, 0xFF), 0)
                .unwrap();
            e.cancel_where(|_, _| true, |_, _| {});
        }
    };
    cycle(&mut e, 0);
    cycle(&mut e, 1);
    let before = e.heap_bytes();
    for round in 2..50 {
        cycle(&mut e, round);
    }
    assert_eq!(e.heap_bytes(), before);
    let c = e.counters();
    assert_eq!(
        (c.posted_depth, c.unexpected_depth, c.reorder_depth),
        (0, 0, 0)
    );
}

#[test]
fn reserve_is_capped_by_the_limits_and_then_allocation_free() {
    let mut e: Engine<u32, u32> =
        Engine::new(Config::default().max_posted(1000).max_messages(1000));
    e.reserve(usize::MAX, usize::MAX); // capped: must not panic on capacity overflow
    let before = e.heap_bytes();
    for i in 0..1000u64 {
        pending(e.post(RecvSpec::exact(0, 0, i), 0));
    }
    assert_eq!(e.heap_bytes(), before);
}

/// `Config::claims_count(false)`: a claimed message gives its bytes and its entry back to
/// the budget at once (its claimer counts it), and is not counted twice when received.
#[test]
fn claims_leave_the_budget_when_they_do_not_count() {
    for counted in [true, false] {
        let mut e = E::new(
            Config::default()
                .max_messages(2)
                .max_bytes(100)
                .claims_count(counted),
        );
        e.arrive(env(0, 0, 1), 40, 1).unwrap();
        e.arrive(env(0, 0, 2), 40, 2).unwrap();
        assert_eq!(e.pressure(), Pressure::Full);
        let c1 = e.mprobe(&RecvSpec::exact(0, 0, 1)).unwrap();
        let c2 = e.mprobe(&RecvSpec::exact(0, 0, 2)).unwrap();
        let third = e.arrive(env(0, 0, 3), 40, 3);
        if counted {
            // Two claims fill a budget of two: the third message is refused.
            assert_eq!(third.unwrap_err().reason, RejectReason::Backpressure);
            assert_eq!(e.counters().bytes_held, 80);
        } else {
            assert!(matches!(third, Ok(Arrived::Unexpected(_))));
            assert_eq!(e.counters().bytes_held, 40);
            assert_eq!(
                e.pressure(),
                Pressure::Normal,
                "1 of 2 entries, 40 of 100 bytes"
            );
        }
        assert_eq!(e.mrecv(c1.handle).unwrap().msg, 1);
        assert_eq!(e.mrecv(c2.handle).unwrap().msg, 2);
        let left = if counted { 0 } else { 40 };
        assert_eq!(e.counters().bytes_held, left, "counted {counted}");
        assert_eq!(e.counters().claimed_depth, 0);
    }
}

/// The wildcard lists of unexpected messages are built when first needed (from the
/// arrival order), kept while messages are queued, and forgotten when the queue drains:
/// whichever kind is needed first, with several communicators, a claimed message held
/// across the drains and a purge before any wildcard, every receive and probe still
/// finds the earliest-arrived match.
#[test]
fn wildcard_lists_built_on_first_use_keep_arrival_order() {
    // The four O(1) kinds, made from a queued message's envelope so that one matches.
    let spec_of = |kind: usize, m: &Envelope| match kind {
        0 => RecvSpec::exact(m.comm, m.src, m.tag),
        1 => RecvSpec::new(m.comm, Some(m.src), None),
        2 => RecvSpec::new(m.comm, None, Some(m.tag)),
        _ => RecvSpec::new(m.comm, None, None),
    };
    let hits = |kind: usize, k: &Envelope, m: &Envelope| {
        k.comm == m.comm
            && match kind {
                0 => k.src == m.src && k.tag == m.tag,
                1 => k.src == m.src,
                2 => k.tag == m.tag,
                _ => true,
            }
    };
    for (first, eager) in [(1, false), (2, false), (3, false), (1, true), (3, true)] {
        let mut e: Engine<u32, u32> = Engine::new(Config::default().eager_wildcard_lists(eager));
        let mut model: Vec<(u32, Envelope)> = Vec::new();
        let mut id = 0u32;
        let mut arrive = |e: &mut Engine<u32, u32>, model: &mut Vec<(u32, Envelope)>| {
            let m = env(id % 3, (id * 7) % 4, u64::from((id * 5) % 6));
            assert!(matches!(e.arrive(m, 0, id), Ok(Arrived::Unexpected(_))));
            model.push((id, m));
            id += 1;
        };
        let mut claim = None;
        for round in 0..3 {
            for _ in 0..40 {
                arrive(&mut e, &mut model);
            }
            if round == 0 {
                // Claimed: on no list, in the slab across the drains below.
                let (cid, cm) = model.remove(0);
                let c = e.mprobe(&RecvSpec::exact(cm.comm, cm.src, cm.tag)).unwrap();
                assert_eq!(*e.claimed(c.handle).unwrap(), cid);
                claim = Some((c.handle, cid));
            }
            if round == 1 {
                // A purge before any wildcard receive of this round: every message of
                // the peer, in arrival order within each communicator.
                let mut got = Vec::new();
                e.purge_peer(3, |p| match p {
                    Purged::Unexpected(m) => got.push((m.env.comm, m.msg)),
                    _ => panic!("only messages were queued"),
                });
                for c in 0..3 {
                    let want: Vec<u32> = model
                        .iter()
                        .filter(|(_, m)| m.src == 3 && m.comm == c)
                        .map(|&(i, _)| i)
                        .collect();
                    let of_c: Vec<u32> = got.iter().filter(|g| g.0 == c).map(|g| g.1).collect();
                    assert_eq!(of_c, want);
                }
                assert_eq!(got.len(), model.iter().filter(|(_, m)| m.src == 3).count());
                model.retain(|(_, m)| m.src != 3);
            }
            let mut step = 0usize;
            while !model.is_empty() {
                // The first wildcard kind of each round rotates with `first`; exact
                // receives and new arrivals interleave with the wildcards.
                let kind = match step % 4 {
                    0 => (first + round) % 3 + 1,
                    1 => 0,
                    2 => (first + round + 1) % 3 + 1,
                    _ => (first + round + 2) % 3 + 1,
                };
                let key = model[(step * 13) % model.len()].1;
                let spec = spec_of(kind, &key);
                let pos = model.iter().position(|(_, m)| hits(kind, &key, m)).unwrap();
                assert_eq!(e.probe(&spec).map(|p| *p.msg), Some(model[pos].0));
                assert_eq!(
                    matched_msg(e.post(spec, 0)),
                    Some(model.remove(pos).0),
                    "round {round} step {step} kind {kind}"
                );
                if step % 5 == 0 && step < 60 {
                    arrive(&mut e, &mut model);
                }
                step += 1;
            }
            assert_eq!(e.counters().unexpected_depth, 0);
        }
        let (h, cid) = claim.unwrap();
        assert_eq!(e.mrecv(h).unwrap().msg, cid);
        assert_eq!(e.counters().posted_depth, 0);
    }
}

//! Review 21: no operation waits for ever, and nothing grows without bound, because of a
//! peer. Requests a responder would refuse unanswered are refused at call time
//! (`CallError::ReadTooLarge`, `CallError::RemoteRange`); what only the peer knows is
//! ended by the owner with `Endpoint::abort` / `Endpoint::remove_peer`, which release
//! everything the operation held; the address book is bounded (`Config::max_peers`).
mod common;
#[path = "common/pump.rs"]
mod pump;
use common::*;
use pump::*;
use tagmatch_rdm::testing::Fabric;
use tagmatch_rdm::{
    AtomicArgs, AtomicOp, CallError, Completion, Config, Datatype, MemHandle, MrKey, OpError,
    OpKind, Protocol, RdmaToken, RemoteAddr, SendOpts, SendOutcome, Transmit, MAX_READ_SIZE,
};
use tagmatch_wire::efa::{Field, Packet, PacketType as T, RawAddr, RawAddrHdr, Repr};

/// Small thresholds and no RDMA on either side: writes and reads are emulated long-CTS.
fn no_rdma() -> Config {
    feats(|f| {
        f.rdma_read = false;
        f.rdma_write = false;
    })
}

/// [`pump`] delivering everything except what `b` sends, which is kept in `held` (a peer
/// that stopped answering, whose packets may still arrive late).
fn pump_b_silent(fab: &mut Fabric, a: usize, b: usize, held: &mut Vec<Vec<u8>>) -> Seen {
    pump(fab, [a, b], &mut |from, bytes| {
        if from == b {
            held.push(bytes.to_vec());
            return vec![];
        }
        vec![bytes.to_vec()]
    })
}

/// The one completion of `op` on node `n`, which must have failed with `Aborted`.
fn aborted(cs: &[Completion], op: tagmatch_rdm::OpId, kind: OpKind) -> &Completion {
    let mine: Vec<_> = cs.iter().filter(|c| c.op == op).collect();
    assert_eq!(mine.len(), 1, "exactly one completion of {op:?}: {cs:?}");
    assert_eq!(
        (mine[0].kind, mine[0].result),
        (kind, Err(OpError::Aborted))
    );
    mine[0]
}

/// A u64 fetch-add of 1.
fn add_one() -> AtomicArgs {
    AtomicArgs {
        datatype: Datatype::U64,
        op: AtomicOp::Sum,
        operand: 1u64.to_le_bytes().to_vec(),
        compare: None,
    }
}

/// The packet `r` as bytes.
fn bytes_of(r: &Repr<'_>) -> Vec<u8> {
    let mut buf = vec![0; r.buffer_len()];
    r.emit(&mut buf).unwrap();
    buf
}

// ---- Item 1: reads a responder refuses are refused when called.

/// The responder refuses an RTR over `MAX_READ_SIZE` without answering (efa-rdm-protocol-v4
/// §3.3: its only answer is READRSP); `read` applies the same rule before it allocates or
/// sends anything, whether the read would be direct or emulated (a direct read falls back
/// to the emulated one).
#[test]
fn a_read_over_the_responders_limit_is_refused_at_call_time() {
    for rdma in [true, false] {
        let cfg = if rdma { small_cfg() } else { no_rdma() };
        let (mut fab, a, _b, ab, _) = warm_pair(2101, cfg, cfg, false);
        let (_, k) = fab.register(1, vec![0; 64]);
        let remote = RemoteAddr {
            addr: k.addr,
            key: k.key,
        };
        let len = MAX_READ_SIZE as usize + 1;
        assert_eq!(
            fab.ep(a).read(ab, len, remote),
            Err(CallError::ReadTooLarge {
                len: len as u64,
                max: MAX_READ_SIZE
            }),
            "rdma {rdma}"
        );
        // A remote range that wraps the address space: no region can hold it.
        let wrap = RemoteAddr {
            addr: u64::MAX - 3,
            key: k.key,
        };
        assert_eq!(
            fab.ep(a).read(ab, 8, wrap),
            Err(CallError::RemoteRange {
                addr: u64::MAX - 3,
                len: 8
            })
        );
        assert_nothing_sent_or_held(&mut fab, a);
    }
}

/// The responder's side of the same limit: an RTR longer than `MAX_READ_SIZE` is dropped,
/// counted as a refused request, and nothing is allocated or sent for it.
#[test]
fn the_responder_counts_a_read_over_the_limit_as_refused() {
    let (mut fab, _a, b, _, ba) = warm_pair(2102, small_cfg(), small_cfg(), false);
    let (_, k) = fab.register(b, vec![0; 64]);
    let iov = [tagmatch_wire::efa::RmaIov::new(k.addr, 64, k.key)];
    let qkey = fab.nodes[0].ep.addr().qkey;
    for (len, refused) in [(MAX_READ_SIZE + 1, true), (64, false)] {
        let before = fab.ep(b).stats();
        let mut r = Repr::new(T::LongctsRtr)
            .with(Field::MsgLength, len)
            .with(Field::RecvId, 7)
            .with(Field::RecvLength, 64);
        r.rma_iov = &iov;
        r.connid = Some(qkey);
        fab.ep(b).handle_packet(Some(ba), &bytes_of(&r));
        let after = fab.ep(b).stats();
        let sent: Vec<_> = std::iter::from_fn(|| fab.ep(b).poll_transmit()).collect();
        if refused {
            assert_eq!(after.rx_requests_refused, before.rx_requests_refused + 1);
            assert_eq!(after.rx_invalid, before.rx_invalid + 1);
            assert!(sent.is_empty(), "{sent:?}");
            assert_eq!(fab.ep(b).in_flight().0, 0);
        } else {
            assert_eq!(after.rx_requests_refused, before.rx_requests_refused);
            assert!(sent.iter().any(|t| matches!(
                t,
                Transmit::Send { bytes, .. } if ty_of(bytes) == T::ReadRsp
            )));
        }
    }
}

// ---- Item 2: atomics.

/// What the requester can check of an atomic is checked at call time: the responder would
/// refuse a remote range that wraps the address space without an ATOMRSP.
#[test]
fn atomics_the_responder_would_refuse_for_their_arguments_are_refused_at_call_time() {
    let (mut fab, a, _b, ab, _) = warm_pair(2103, small_cfg(), small_cfg(), false);
    let wrap = RemoteAddr {
        addr: u64::MAX - 7,
        key: 1,
    };
    let want = Err(CallError::RemoteRange {
        addr: u64::MAX - 7,
        len: 8,
    });
    assert_eq!(fab.ep(a).atomic_fetch(ab, add_one(), wrap), want);
    let cswap = AtomicArgs {
        op: AtomicOp::Cswap,
        compare: Some(0u64.to_le_bytes().to_vec()),
        ..add_one()
    };
    assert_eq!(fab.ep(a).atomic_compare(ab, cswap, wrap), want);
    assert_eq!(
        fab.ep(a)
            .atomic_write(ab, add_one(), wrap, SendOpts::default()),
        want
    );
    assert_eq!(
        fab.ep(a).write(ab, vec![0; 8], wrap, SendOpts::default()),
        want
    );
    // The arguments the responder checks (`atomic::apply`) were already checked here.
    let bad = AtomicArgs {
        datatype: Datatype::F64,
        op: AtomicOp::Bor,
        ..add_one()
    };
    let ok = RemoteAddr { addr: 0, key: 1 };
    assert!(matches!(
        fab.ep(a).atomic_fetch(ab, bad, ok),
        Err(CallError::Atomic(_))
    ));
    assert_nothing_sent_or_held(&mut fab, a);
}

/// A fetch the responder refuses for what only it knows (a key it never issued) gets no
/// ATOMRSP: the responder counts it, the requester's operation waits until `abort` ends it
/// with `Aborted`, and everything it held is released. Aborting it again is refused.
#[test]
fn a_refused_fetch_waits_until_aborted() {
    let (mut fab, a, b, ab, _) = warm_pair(2104, small_cfg(), small_cfg(), false);
    let (_, k) = fab.register(b, vec![0; 64]);
    let bogus = RemoteAddr {
        addr: k.addr,
        key: k.key + 100,
    };
    let op = fab.ep(a).atomic_fetch(ab, add_one(), bogus).unwrap();
    fab.drive();
    assert_eq!(fab.ep(b).stats().rx_requests_refused, 1);
    assert!(fab.completions(a).is_empty(), "no answer, no completion");
    assert_eq!(fab.ep(a).in_flight(), (0, 1, 0));
    assert_eq!(fab.ep(a).resources(), (1, 0, 0));
    fab.ep(a).abort(op).unwrap();
    fab.drive();
    aborted(&fab.completions(a), op, OpKind::AtomicFetch);
    assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
    assert_eq!(fab.ep(a).resources(), (0, 0, 0));
    assert_eq!(fab.ep(a).stats().aborted, 1);
    assert_eq!(fab.ep(a).abort(op), Err(CallError::UnknownOp));
}

/// An ATOMRSP arriving after its fetch was aborted names a stale `recv_id`: dropped and
/// counted, the operation does not complete a second time, the target was updated (the
/// request had left: abort recalls nothing).
#[test]
fn a_late_atomrsp_after_abort_is_dropped_and_counted() {
    let (mut fab, a, b, ab, _) = warm_pair(2105, small_cfg(), small_cfg(), false);
    let (h, k) = fab.register(b, vec![0; 8]);
    let remote = RemoteAddr {
        addr: k.addr,
        key: k.key,
    };
    let op = fab.ep(a).atomic_fetch(ab, add_one(), remote).unwrap();
    // Aborted while its FETCH_RTA is still queued for the device.
    fab.ep(a).abort(op).unwrap();
    let before = fab.ep(a).stats().rx_unknown_op;
    let seen = pump(&mut fab, [a, b], &mut |_, bytes| vec![bytes.to_vec()]);
    assert!(
        seen.delivered.contains(&(b, T::AtomRsp)),
        "{:?}",
        seen.delivered
    );
    assert_eq!(fab.ep(a).stats().rx_unknown_op, before + 1);
    aborted(&fab.completions(a), op, OpKind::AtomicFetch);
    assert_eq!(fab.ep(b).memory(h).unwrap(), &1u64.to_le_bytes()[..]);
    assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
    assert_eq!(fab.ep(a).resources(), (0, 0, 0));
}

// ---- Item 3: a long-read towards a receiver without READ_NACK.

/// The receiver's RDMA read fails and it cannot READ_NACK (efa-rdm-protocol-v4 §4.7 is an
/// extra feature): its receive completes with `RdmaFailed`, and the sender waits for an EOR
/// that never comes until `abort` ends its send; its registered buffer is deregistered
/// and freed. A late EOR then names a stale `send_id`.
#[test]
fn a_long_read_send_to_a_receiver_without_read_nack_ends_with_abort() {
    let cb = feats(|f| f.read_nack = false);
    let (mut fab, a, b, ab, _) = warm_pair(2106, small_cfg(), cb, false);
    let data = payload(5000, 1);
    let recv = fab.ep(b).recv(None, 5000).unwrap();
    let send = fab.ep(a).send(ab, data, SendOpts::default()).unwrap();
    let mut rtm = None;
    let seen = pump(&mut fab, [a, b], &mut |from, bytes| {
        if from == a && ty_of(bytes) == T::LongreadMsgRtm {
            rtm = Some(bytes.to_vec());
        }
        vec![bytes.to_vec()]
    });
    assert_eq!(fab.ep(a).protocol_of(send), Some(Protocol::LongRead));
    assert!(seen.rdma_reads > 0);
    assert!(!seen.delivered.iter().any(|&(_, t)| t == T::ReadNack));
    // The receiver completes, with the error (not silently).
    let cb = fab.completions(b);
    assert_eq!(done(&cb, recv).result, Err(OpError::RdmaFailed));
    // The sender waits, its buffer registered.
    assert!(fab.completions(a).is_empty());
    assert_eq!(fab.ep(a).in_flight(), (1, 0, 0));
    assert_eq!(fab.ep(a).resources(), (1, 0, 0));
    fab.ep(a).abort(send).unwrap();
    let out: Vec<_> = std::iter::from_fn(|| fab.ep(a).poll_transmit()).collect();
    assert!(
        matches!(&out[..], [Transmit::Deregister { .. }]),
        "its registration is released: {out:?}"
    );
    while let Some(c) = fab.ep(a).poll_completion() {
        fab.nodes[a].completions.push(c);
    }
    aborted(&fab.completions(a), send, OpKind::Send);
    assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
    assert_eq!(fab.ep(a).resources(), (0, 0, 0));
    // A late EOR for it.
    let send_id = Packet::new_checked(&rtm.unwrap()[..])
        .unwrap()
        .send_id()
        .unwrap();
    let mut eor = Repr::new(T::Eor)
        .with(Field::SendId, send_id as u64)
        .with(Field::RecvId, 1);
    eor.connid = Some(fab.nodes[b].ep.addr().qkey);
    let before = fab.ep(a).stats().rx_unknown_op;
    fab.ep(a).handle_packet(Some(ab), &bytes_of(&eor));
    assert_eq!(fab.ep(a).stats().rx_unknown_op, before + 1);
    assert!(fab.ep(a).poll_completion().is_none(), "completed twice");
}

// ---- Item 4: long RTW / RTR towards a peer that stopped answering.

/// A long-CTS write whose target stops answering waits for a CTS for ever; `abort` ends
/// it. The target's CTS arriving late is dropped and counted. On the target, the write
/// target left waiting for CTSDATA goes with `remove_peer` (it has no completion).
#[test]
fn a_long_cts_write_to_a_silent_peer_ends_with_abort() {
    let (mut fab, a, b, ab, ba) = warm_pair(2107, no_rdma(), no_rdma(), false);
    let (_, k) = fab.register(b, vec![0; 4096]);
    let remote = RemoteAddr {
        addr: k.addr,
        key: k.key,
    };
    let w = fab
        .ep(a)
        .write(ab, payload(3000, 2), remote, SendOpts::default())
        .unwrap();
    let mut held = Vec::new();
    pump_b_silent(&mut fab, a, b, &mut held);
    assert_eq!(fab.ep(a).protocol_of(w), Some(Protocol::LongCtsWrite));
    assert!(fab.completions(a).is_empty());
    assert_eq!(fab.ep(a).in_flight(), (1, 0, 0));
    fab.ep(a).abort(w).unwrap();
    pump_b_silent(&mut fab, a, b, &mut held);
    aborted(&fab.completions(a), w, OpKind::Write);
    assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
    assert_eq!(fab.ep(a).resources(), (0, 0, 0));
    // The CTS comes after all.
    let cts: Vec<_> = held.iter().filter(|p| ty_of(p) == T::Cts).collect();
    assert_eq!(cts.len(), 1);
    let before = fab.ep(a).stats().rx_unknown_op;
    fab.ep(a).handle_packet(Some(ab), cts[0]);
    assert_eq!(fab.ep(a).stats().rx_unknown_op, before + 1);
    assert!(fab.ep(a).poll_transmit().is_none(), "no CTSDATA for it");
    assert!(fab.ep(a).poll_completion().is_none());
    // The target's side.
    assert_eq!(fab.ep(b).in_flight(), (0, 1, 0));
    assert_eq!(fab.ep(b).remove_peer(ba), Ok(0));
    assert_eq!(fab.ep(b).in_flight(), (0, 0, 0));
    assert_eq!(
        fab.ep(b).resources(),
        (1, 0, 0),
        "only the registered region"
    );
}

/// A peer that stops answering: its long-CTS read, long-CTS write, fetch atomic, and the
/// receive posted for it alone all wait; `remove_peer` ends every one of them (and only
/// them: a receive from any peer stays), releases what they held, and forgets the peer.
/// Its late packets are then those of an unknown address.
#[test]
fn remove_peer_ends_every_operation_with_a_silent_peer() {
    let (mut fab, a, b, ab, _) = warm_pair(2108, no_rdma(), no_rdma(), false);
    let (_, k) = fab.register(b, vec![0; 4096]);
    let remote = RemoteAddr {
        addr: k.addr,
        key: k.key,
    };
    let read = fab.ep(a).read(ab, 3000, remote).unwrap();
    let write = fab
        .ep(a)
        .write(ab, payload(3000, 3), remote, SendOpts::default())
        .unwrap();
    let fetch = fab.ep(a).atomic_fetch(ab, add_one(), remote).unwrap();
    let from_b = fab.ep(a).trecv(Some(ab), 5, 0, 64).unwrap();
    let any = fab.ep(a).trecv(None, 6, 0, 64).unwrap();
    let mut held = Vec::new();
    pump_b_silent(&mut fab, a, b, &mut held);
    assert_eq!(fab.ep(a).protocol_of(read), Some(Protocol::LongCtsRead));
    assert!(fab.completions(a).is_empty());
    assert_eq!(fab.ep(a).in_flight(), (1, 4, 0));
    assert_eq!(fab.ep(a).remove_peer(ab), Ok(4));
    let ca = fab.completions(a);
    let ca: Vec<_> = ca
        .into_iter()
        .chain(std::iter::from_fn(|| fab.ep(a).poll_completion()))
        .collect();
    aborted(&ca, read, OpKind::Read);
    aborted(&ca, write, OpKind::Write);
    aborted(&ca, fetch, OpKind::AtomicFetch);
    aborted(&ca, from_b, OpKind::Recv);
    assert!(
        ca.iter().all(|c| c.op != any),
        "the any-source receive stays"
    );
    assert_eq!(fab.ep(a).in_flight(), (0, 1, 0));
    assert_eq!(
        fab.ep(a).resources().0,
        1,
        "the any-source receive's buffer"
    );
    assert_eq!(fab.ep(a).stats().aborted, 4);
    assert_eq!(fab.ep(a).stats().peers_removed, 1);
    // Forgotten.
    assert_eq!(fab.ep(a).peer_addr(ab), None);
    assert_eq!(fab.ep(a).peer_count(), 0);
    let b_addr = fab.nodes[b].ep.addr();
    assert_eq!(fab.ep(a).lookup_peer(&b_addr.gid, b_addr.qpn), None);
    assert_eq!(
        fab.ep(a).send(ab, vec![1], SendOpts::default()),
        Err(CallError::UnknownPeer)
    );
    assert_eq!(fab.ep(a).remove_peer(ab), Err(CallError::UnknownPeer));
    // Late packets, the owner still reporting the removed id: an unknown address's
    // (these carry no raw address).
    let late: Vec<_> = held
        .iter()
        .filter(|p| matches!(ty_of(p), T::Cts | T::ReadRsp))
        .collect();
    assert_eq!(late.len(), 2, "the write's CTS, the read's READRSP");
    let before = fab.ep(a).stats();
    for p in &late {
        fab.ep(a).handle_packet(Some(ab), p);
    }
    let after = fab.ep(a).stats();
    assert_eq!(after.rx_unknown_sender, before.rx_unknown_sender + 2);
    assert_eq!(after.rx_unknown_op, before.rx_unknown_op);
    assert!(fab.ep(a).poll_completion().is_none());
    assert_eq!(fab.ep(a).peer_count(), 0);
    // Pending device answers come back; nothing is left but the any-source receive.
    pump_b_silent(&mut fab, a, b, &mut held);
    assert_eq!(fab.ep(a).resources(), (1, 0, 0));
    assert_eq!(fab.ep(a).cancel(any), Ok(()));
    assert_eq!(fab.ep(a).resources(), (0, 0, 0));
    // Inserted again, the address is a new peer.
    let again = fab.ep(a).add_peer(b_addr);
    assert_ne!(again, ab);
    assert_eq!(fab.ep(a).peer_count(), 1);
}

/// `remove_peer` purges the peer's unexpected messages and those held out of order (their
/// buffered bytes freed, the budget returned); a message of it claimed before the removal
/// keeps its claim, and its receive completes with `Aborted`.
#[test]
fn remove_peer_purges_unexpected_held_and_claimed_messages() {
    let (mut fab, a, b, ab, ba) = warm_pair(2109, small_cfg(), small_cfg(), false);
    let named = fab.ep(b).trecv(Some(ba), 99, 0, 8).unwrap();
    fab.ep(a)
        .tsend(ab, 1, payload(8, 1), SendOpts::default())
        .unwrap();
    fab.ep(a)
        .tsend(ab, 2, payload(800, 2), SendOpts::default())
        .unwrap();
    let long = fab
        .ep(a)
        .tsend(ab, 3, payload(2000, 3), SendOpts::default())
        .unwrap();
    // Tag 4 is lost on the way: tag 5 is held out of order behind it.
    fab.ep(a)
        .tsend(ab, 4, payload(8, 4), SendOpts::default())
        .unwrap();
    fab.ep(a)
        .tsend(ab, 5, payload(8, 5), SendOpts::default())
        .unwrap();
    let mut eager = 0;
    pump(&mut fab, [a, b], &mut |from, bytes| {
        if from == a && ty_of(bytes) == T::EagerTagRtm {
            eager += 1;
            if eager == 2 {
                return vec![];
            }
        }
        vec![bytes.to_vec()]
    });
    let (claim, info) = fab.ep(b).tmprobe(None, 2, 0).unwrap();
    assert_eq!(info.len, 800);
    let m = fab.ep(b).matching_stats();
    assert_eq!(
        (m.unexpected_depth, m.claimed_depth, m.reorder_depth),
        (2, 1, 1)
    );
    assert_eq!(fab.ep(b).in_flight(), (0, 1, 4));
    assert_eq!(fab.ep(b).remove_peer(ba), Ok(1), "the receive naming it");
    let cb: Vec<_> = std::iter::from_fn(|| fab.ep(b).poll_completion()).collect();
    aborted(&cb, named, OpKind::Recv);
    let m = fab.ep(b).matching_stats();
    assert_eq!(
        (
            m.unexpected_depth,
            m.claimed_depth,
            m.reorder_depth,
            m.posted_depth
        ),
        (0, 1, 0, 0)
    );
    assert_eq!(fab.ep(b).in_flight(), (0, 0, 1), "the claimed message");
    let r = fab.ep(b).mrecv(claim, 1024).unwrap();
    let c = fab.ep(b).poll_completion().unwrap();
    assert_eq!(
        (c.op, c.kind, c.result),
        (r, OpKind::Recv, Err(OpError::Aborted))
    );
    assert_eq!(fab.ep(b).in_flight(), (0, 0, 0));
    assert_eq!(fab.ep(b).resources(), (0, 0, 0));
    assert_eq!(fab.ep(b).matching_stats().bytes_held, 0);
    // The long-CTS sender waits for a CTS that will not come: its owner ends it.
    assert_eq!(fab.ep(a).in_flight().0, 1);
    fab.ep(a).abort(long).unwrap();
    assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
}

// ---- Item 5: what the device still holds for an aborted operation.

/// Moves packets between `nodes` (FIFO, every send succeeds) and answers registrations;
/// RDMA operations are held, not answered: returned as `(node, token)`.
fn drive_holding_rdma(fab: &mut Fabric, nodes: [usize; 2]) -> Vec<(usize, RdmaToken)> {
    pump_holding_rdma(fab, nodes).held
}

/// A direct read aborted while its registration is pending, then one aborted while its
/// RDMA read is in flight: the completion comes at once, the buffer stays (empty) until
/// the device answers, then it is freed and deregistered; a device answer repeated is an
/// unknown token. Nothing completes twice.
#[test]
fn abort_keeps_what_the_device_uses_until_it_answers() {
    let (mut fab, a, b, ab, _) = warm_pair(2110, small_cfg(), small_cfg(), false);
    let (_, k) = fab.register(b, vec![7; 256]);
    let remote = RemoteAddr {
        addr: k.addr,
        key: k.key,
    };
    // Registration pending.
    let r1 = fab.ep(a).read(ab, 100, remote).unwrap();
    let Some(Transmit::Register { mem, .. }) = fab.ep(a).poll_transmit() else {
        panic!("a direct read registers its buffer first");
    };
    fab.ep(a).abort(r1).unwrap();
    let c = fab.ep(a).poll_completion().unwrap();
    assert_eq!((c.op, c.result), (r1, Err(OpError::Aborted)));
    assert_eq!(fab.ep(a).resources(), (1, 0, 0), "the device registers it");
    fab.ep(a).on_register_done(
        mem,
        Ok(MrKey {
            addr: 1 << 40,
            key: 77,
        }),
    );
    assert_eq!(
        fab.ep(a).poll_transmit(),
        Some(Transmit::Deregister { key: 77 })
    );
    assert_eq!(fab.ep(a).resources(), (0, 0, 0));
    assert_eq!(fab.ep(a).mem_by_key(77), None);
    // RDMA read in flight.
    let r2 = fab.ep(a).read(ab, 100, remote).unwrap();
    let held = drive_holding_rdma(&mut fab, [a, b]);
    assert_eq!(fab.ep(a).protocol_of(r2), Some(Protocol::DirectRead));
    let [(node, token)] = held[..] else {
        panic!("one RDMA read: {held:?}")
    };
    assert_eq!(node, a);
    fab.ep(a).abort(r2).unwrap();
    let c = fab.ep(a).poll_completion().unwrap();
    assert_eq!((c.op, c.result), (r2, Err(OpError::Aborted)));
    assert!(c.data.is_empty(), "the device still writes into the buffer");
    assert_eq!(fab.ep(a).resources(), (1, 0, 1));
    fab.ep(a).on_rdma_done(token, true);
    assert!(matches!(
        fab.ep(a).poll_transmit(),
        Some(Transmit::Deregister { .. })
    ));
    assert_eq!(fab.ep(a).resources(), (0, 0, 0));
    assert!(fab.ep(a).poll_completion().is_none(), "completed twice");
    let unknown = fab.ep(a).stats().unknown_tokens;
    fab.ep(a).on_rdma_done(token, true);
    assert_eq!(fab.ep(a).stats().unknown_tokens, unknown + 1);
    assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
}

/// A long-read receive into the caller's region, aborted while its RDMA read is in
/// flight: the region stays in use (it cannot be released while the device may write
/// into it) until the device answers.
#[test]
fn an_aborted_receive_into_a_region_holds_it_until_the_device_answers() {
    let (mut fab, a, b, ab, _) = warm_pair(2111, small_cfg(), small_cfg(), false);
    let (mem, _) = fab.register(b, vec![0; 8192]);
    let recv = fab.ep(b).trecv_region(None, 0x77, 0, mem, 0, 5000).unwrap();
    let send = fab
        .ep(a)
        .tsend(ab, 0x77, payload(5000, 4), SendOpts::default())
        .unwrap();
    let held = drive_holding_rdma(&mut fab, [a, b]);
    assert_eq!(fab.ep(a).protocol_of(send), Some(Protocol::LongRead));
    assert_eq!(held.len(), 1);
    assert_eq!(fab.ep(b).mem_users(mem), Some(1));
    fab.ep(b).abort(recv).unwrap();
    aborted(
        &fab.ep(b).poll_completion().into_iter().collect::<Vec<_>>(),
        recv,
        OpKind::Recv,
    );
    assert_eq!(
        fab.ep(b).mem_users(mem),
        Some(1),
        "the RDMA read still writes there"
    );
    assert_eq!(fab.ep(b).try_release_memory(mem), Err(CallError::MemInUse));
    fab.ep(b).on_rdma_done(held[0].1, true);
    assert_eq!(fab.ep(b).mem_users(mem), Some(0));
    assert!(fab.ep(b).poll_completion().is_none());
    assert_eq!(fab.ep(b).in_flight(), (0, 0, 0));
    assert!(fab.ep(b).try_release_memory(mem).is_ok());
    assert_eq!(fab.ep(b).resources(), (0, 0, 0));
    // No EOR went to the sender: its owner ends it too.
    assert!(fab.completions(a).is_empty());
    fab.ep(a).abort(send).unwrap();
    assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
    drive_holding_rdma(&mut fab, [a, b]);
    assert_eq!(fab.ep(a).resources(), (0, 0, 0));
}

/// A packet of an aborted send that the device could not post (`SendOutcome::Again`) is
/// not posted again; a posted receive, one into a region, and an unknown operation.
#[test]
fn abort_of_queued_sends_posted_receives_and_unknown_operations() {
    let (mut fab, a, _b, ab, _) = warm_pair(2112, small_cfg(), small_cfg(), false);
    let s = fab
        .ep(a)
        .tsend(ab, 1, payload(8, 1), SendOpts::default())
        .unwrap();
    let Some(Transmit::Send { token, .. }) = fab.ep(a).poll_transmit() else {
        panic!("the eager packet");
    };
    fab.ep(a).abort(s).unwrap();
    aborted(
        &fab.ep(a).poll_completion().into_iter().collect::<Vec<_>>(),
        s,
        OpKind::Send,
    );
    fab.ep(a).on_send_done(token, SendOutcome::Again);
    assert!(fab.ep(a).poll_transmit().is_none(), "posted again");
    assert_eq!(fab.ep(a).resources(), (0, 0, 0));
    assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
    // Posted receives.
    let r = fab.ep(a).trecv(None, 3, 0, 16).unwrap();
    fab.ep(a).abort(r).unwrap();
    let c = fab.ep(a).poll_completion().unwrap();
    assert_eq!(
        (c.op, c.result, c.data.len()),
        (r, Err(OpError::Aborted), 16)
    );
    assert_eq!(fab.ep(a).matching_stats().posted_depth, 0);
    let (mem, _) = fab.register(a, vec![0; 64]);
    let r = fab.ep(a).trecv_region(None, 3, 0, mem, 0, 64).unwrap();
    assert_eq!(fab.ep(a).mem_users(mem), Some(1));
    fab.ep(a).abort(r).unwrap();
    assert_eq!(fab.ep(a).mem_users(mem), Some(0));
    assert_eq!(fab.ep(a).abort(r), Err(CallError::UnknownOp));
    assert_eq!(
        fab.ep(a).abort(tagmatch_rdm::OpId(1 << 40)),
        Err(CallError::UnknownOp)
    );
}

/// A delivery-complete send waiting for the peer's handshake, aborted: it leaves the
/// queue without taking a `msg_id` and without holding later sends behind it, so the
/// next (not delivery-complete) send goes at once, and the messages the peer gets are the
/// ones it expects.
#[test]
fn an_operation_waiting_for_the_handshake_is_aborted_without_a_trace() {
    let (mut fab, a, b, ab, _) = pair(2113, small_cfg(), small_cfg(), false);
    let dc = SendOpts {
        delivery_complete: true,
        ..SendOpts::default()
    };
    let s1 = fab.ep(a).tsend(ab, 1, payload(8, 1), dc).unwrap();
    let msg_id = fab.ep(a).next_msg_id(ab).unwrap();
    fab.ep(a).abort(s1).unwrap();
    let r2 = fab.ep(b).trecv(None, 2, 0, 8).unwrap();
    let r3 = fab.ep(b).trecv(None, 3, 0, 8).unwrap();
    let s2 = fab
        .ep(a)
        .tsend(ab, 2, payload(8, 2), SendOpts::default())
        .unwrap();
    let s3 = fab.ep(a).tsend(ab, 3, payload(8, 3), dc).unwrap();
    let seen = pump(&mut fab, [a, b], &mut |_, bytes| vec![bytes.to_vec()]);
    let at = |what: (usize, T)| seen.delivered.iter().position(|&d| d == what);
    let (eager, handshake) = (at((a, T::EagerTagRtm)), at((b, T::Handshake)));
    assert!(
        eager.is_some() && eager < handshake,
        "the plain send waited for the handshake: {:?}",
        seen.delivered
    );
    let dc_rtms = seen
        .delivered
        .iter()
        .filter(|&&(from, t)| from == a && t == T::DcEagerTagRtm)
        .count();
    assert_eq!(
        dc_rtms, 1,
        "only the third send went DC: {:?}",
        seen.delivered
    );
    let ca = fab.completions(a);
    aborted(&ca, s1, OpKind::Send);
    assert_eq!(done(&ca, s2).result, Ok(()));
    assert_eq!(done(&ca, s3).result, Ok(()));
    let cb = fab.completions(b);
    assert_eq!(done(&cb, r2).result, Ok(()));
    assert_eq!(done(&cb, r3).result, Ok(()));
    assert_eq!(fab.ep(a).next_msg_id(ab), Some(msg_id.wrapping_add(2)));
    assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
    assert_eq!(fab.ep(b).in_flight(), (0, 0, 0));
}

// ---- Item 6: the address book is bounded.

/// An EAGER_MSGRTM carrying raw address `from` (a sender the device cannot report).
fn hello_from(from: RawAddr, msg_id: u64) -> Vec<u8> {
    let mut r = Repr::new(T::EagerMsgRtm).with(Field::MsgId, msg_id);
    r.raw_addr = Some(RawAddrHdr::new(from));
    r.payload = b"hi";
    bytes_of(&r)
}

/// Packets from unknown raw addresses insert peers (efa-rdm-protocol-v4 §2.2) up to
/// `Config::max_peers`; past it they are dropped and counted, nothing else changes, and a
/// removed peer makes room again. A new connid on a known GID and QPN (§4.4) is bounded
/// alike.
#[test]
fn the_address_book_is_bounded() {
    let cfg = Config {
        max_peers: 3,
        ..small_cfg()
    };
    let mut fab = Fabric::new(2114);
    let n = fab.add(cfg);
    let addr = |i: u8, qkey: u32| RawAddr {
        gid: [i; 16],
        qpn: 40 + u16::from(i),
        qkey,
        next: 0,
    };
    let app = fab.ep(n).add_peer(addr(1, 1));
    for i in 2..=3 {
        fab.ep(n).handle_packet(None, &hello_from(addr(i, 1), 0));
    }
    assert_eq!(fab.ep(n).peer_count(), 3);
    let before = fab.ep(n).stats();
    let in_flight = fab.ep(n).in_flight();
    for i in 4..=9 {
        fab.ep(n).handle_packet(None, &hello_from(addr(i, 1), 0));
    }
    // A known GID and QPN with a new connid and its raw address: one more peer too.
    let p3 = fab.ep(n).lookup_peer(&[3; 16], 43).unwrap();
    fab.ep(n)
        .handle_packet(Some(p3), &hello_from(addr(3, 2), 0));
    let after = fab.ep(n).stats();
    assert_eq!(after.rx_peer_limit, before.rx_peer_limit + 7);
    assert_eq!(fab.ep(n).peer_count(), 3);
    assert_eq!(fab.ep(n).in_flight(), in_flight);
    assert_eq!(fab.ep(n).lookup_peer(&[4; 16], 44), None);
    assert_eq!(fab.ep(n).lookup_peer_exact(&[3; 16], 43, 2), None);
    // Known peers are still heard (a second message of peer 2).
    fab.ep(n).handle_packet(None, &hello_from(addr(2, 1), 1));
    assert_eq!(fab.ep(n).stats().rx_peer_limit, after.rx_peer_limit);
    assert_eq!(fab.ep(n).in_flight().2, in_flight.2 + 1);
    // The application may still add peers; removing one makes room for a sender.
    fab.ep(n).add_peer(addr(20, 1));
    assert_eq!(fab.ep(n).peer_count(), 4);
    fab.ep(n).remove_peer(app).unwrap();
    fab.ep(n).remove_peer(p3).unwrap();
    assert_eq!(fab.ep(n).peer_count(), 2);
    fab.ep(n).handle_packet(None, &hello_from(addr(4, 1), 0));
    assert_eq!(fab.ep(n).peer_count(), 3);
    assert!(fab.ep(n).lookup_peer(&[4; 16], 44).is_some());
    assert_eq!(fab.ep(n).stats().rx_peer_limit, after.rx_peer_limit);
    assert_eq!(Config::default().max_peers, 65_536);
}

/// A late REQ carrying the raw address of a removed peer inserts it again, as a new peer
/// (efa-rdm-protocol-v4 §2.2: its raw address is unknown again), even when the owner still
/// reports the removed id.
#[test]
fn a_removed_peers_raw_address_inserts_a_new_peer() {
    let mut fab = Fabric::new(2115);
    let n = fab.add(small_cfg());
    let addr = RawAddr {
        gid: [5; 16],
        qpn: 9,
        qkey: 3,
        next: 0,
    };
    fab.ep(n).handle_packet(None, &hello_from(addr, 0));
    let old = fab.ep(n).lookup_peer(&addr.gid, addr.qpn).unwrap();
    assert_eq!(fab.ep(n).in_flight().2, 1);
    fab.ep(n).remove_peer(old).unwrap();
    assert_eq!(
        fab.ep(n).in_flight().2,
        0,
        "its unexpected message is purged"
    );
    fab.ep(n).handle_packet(Some(old), &hello_from(addr, 0));
    let new = fab.ep(n).lookup_peer(&addr.gid, addr.qpn).unwrap();
    assert_ne!(new, old);
    assert_eq!(
        fab.ep(n).in_flight().2,
        1,
        "received as msg_id 0 of the new peer"
    );
    let r = fab.ep(n).recv(Some(new), 8).unwrap();
    let c = fab.ep(n).poll_completion().unwrap();
    assert_eq!((c.op, c.src, &c.data[..2]), (r, Some(new), &b"hi"[..]));
    let _ = MemHandle(0);
}

/// A claimed message can be dropped without receiving it (`FI_CLAIM | FI_DISCARD`): its
/// bytes and budget are freed, its later segments are dropped and counted (a message
/// already processed), and the claim is stale after.
#[test]
fn a_claimed_message_can_be_discarded() {
    let (mut fab, a, b, ab, ba) = warm_pair(2116, small_cfg(), small_cfg(), false);
    fab.ep(a)
        .tsend(ab, 2, payload(800, 2), SendOpts::default())
        .unwrap();
    // Only the first medium segment arrives before the claim.
    let mut rest = Vec::new();
    pump(&mut fab, [a, b], &mut |from, bytes| {
        if from == a && ty_of(bytes) == T::MediumTagRtm {
            rest.push(bytes.to_vec());
            if rest.len() > 1 {
                return vec![];
            }
        }
        vec![bytes.to_vec()]
    });
    assert!(rest.len() > 2);
    assert!(fab.ep(b).matching_stats().bytes_held > 0);
    let (claim, info) = fab.ep(b).tmprobe(None, 2, 0).unwrap();
    assert_eq!(info.len, 800);
    fab.ep(b).discard(claim).unwrap();
    assert_eq!(fab.ep(b).in_flight(), (0, 0, 0));
    assert_eq!(fab.ep(b).matching_stats().bytes_held, 0);
    assert_eq!(fab.ep(b).discard(claim), Err(CallError::UnknownOp));
    assert_eq!(fab.ep(b).mrecv(claim, 8), Err(CallError::UnknownOp));
    let before = fab.ep(b).stats().rx_reorder_rejected;
    for seg in &rest[1..] {
        fab.ep(b).handle_packet(Some(ba), seg);
    }
    assert_eq!(
        fab.ep(b).stats().rx_reorder_rejected,
        before + rest.len() as u64 - 1
    );
    assert_eq!(fab.ep(b).in_flight(), (0, 0, 0));
    assert!(fab.ep(b).poll_completion().is_none());
}

/// A device event the random driver below holds.
#[derive(Debug)]
enum Ev {
    Deliver {
        from: usize,
        to: usize,
        bytes: Vec<u8>,
    },
    SendDone {
        node: usize,
        token: tagmatch_rdm::SendToken,
    },
    Rdma {
        node: usize,
        token: RdmaToken,
    },
    Register {
        node: usize,
        mem: MemHandle,
    },
}

/// Random operations between two endpoints, device events in random order (RDMA and
/// registrations failing at random, so long-reads fall back or fail), and aborts of
/// random operations (in flight or not) at random points; a peer removed and added again
/// now and then. Then every operation still waiting is aborted. Every operation completes
/// exactly once, nothing panics, and once the device has answered everything both
/// endpoints hold nothing but the application's regions.
#[test]
fn random_aborts_complete_everything_once_and_leak_nothing() {
    use std::collections::HashMap;
    for seed in 0..40u64 {
        let cb = if seed % 3 == 0 {
            feats(|f| f.read_nack = false)
        } else {
            small_cfg()
        };
        let (mut fab, a, b, ab, ba) = pair(3000 + seed, small_cfg(), cb, false);
        let mut rng = tagmatch_rdm::testing::XorShift::new(seed);
        let mut peers = [ab, ba];
        let (_, ka) = fab.register(a, vec![0; 4096]);
        let (_, kb) = fab.register(b, vec![0; 4096]);
        let keys = [kb, ka];
        let mut issued: Vec<(usize, tagmatch_rdm::OpId)> = Vec::new();
        let mut seen: HashMap<(usize, tagmatch_rdm::OpId), usize> = HashMap::new();
        let mut events: Vec<Ev> = Vec::new();
        let mut next_key = 90_000u64;
        for step in 0..600 {
            // Something new from one side.
            if rng.chance(150) {
                let n = rng.below(2) as usize;
                let p = peers[n];
                let k = keys[n];
                let len = [8usize, 600, 2000, 5000][rng.below(4) as usize];
                let remote = RemoteAddr {
                    addr: k.addr + rng.below(2) * 8,
                    key: if rng.chance(200) { k.key + 7 } else { k.key },
                };
                let opts = SendOpts {
                    delivery_complete: rng.chance(300),
                    cq_data: None,
                };
                let ep = fab.ep(n);
                let r = match rng.below(6) {
                    0 => ep.tsend(p, rng.below(4), payload(len, 1), opts),
                    1 => ep.trecv(None, rng.below(4), 0, len),
                    2 => ep.trecv(Some(p), rng.below(4), 0, len),
                    3 => ep.write(p, payload(len.min(4000), 2), remote, opts),
                    4 => ep.read(p, len.min(4000), remote),
                    _ => ep.atomic_fetch(p, add_one(), remote),
                };
                if let Ok(op) = r {
                    issued.push((n, op));
                }
            }
            // Abort something.
            if rng.chance(60) && !issued.is_empty() {
                let (n, op) = issued[rng.below(issued.len() as u64) as usize];
                let _ = fab.ep(n).abort(op);
            }
            // Now and then, forget the peer and learn it again.
            if step % 200 == 199 {
                let n = rng.below(2) as usize;
                if fab.ep(n).remove_peer(peers[n]).is_ok() {
                    let addr = fab.nodes[1 - n].ep.addr();
                    peers[n] = fab.ep(n).add_peer(addr);
                }
            }
            // Take what the endpoints ask for.
            for n in [a, b] {
                while let Some(t) = fab.ep(n).poll_transmit() {
                    match t {
                        Transmit::Send { token, bytes, .. } => {
                            events.push(Ev::Deliver {
                                from: n,
                                to: 1 - n,
                                bytes,
                            });
                            events.push(Ev::SendDone { node: n, token });
                        }
                        Transmit::RdmaRead { token, .. } | Transmit::RdmaWrite { token, .. } => {
                            events.push(Ev::Rdma { node: n, token })
                        }
                        Transmit::Register { mem, .. } => {
                            events.push(Ev::Register { node: n, mem })
                        }
                        Transmit::Deregister { .. } => {}
                    }
                }
                while let Some(c) = fab.ep(n).poll_completion() {
                    *seen.entry((n, c.op)).or_default() += 1;
                }
            }
            // One device event, any of them.
            if !events.is_empty() {
                let e = events.swap_remove(rng.below(events.len() as u64) as usize);
                match e {
                    Ev::Deliver { from, to, bytes } => {
                        let s = fab.nodes[from].ep.addr();
                        let src = fab.nodes[to].ep.lookup_peer(&s.gid, s.qpn);
                        if fab.ep(to).handle_packet(src, &bytes) == tagmatch_rdm::Rx::Refused {
                            events.push(Ev::Deliver { from, to, bytes });
                        }
                    }
                    Ev::SendDone { node, token } => {
                        fab.ep(node).on_send_done(token, SendOutcome::Ok)
                    }
                    Ev::Rdma { node, token } => {
                        let ok = !rng.chance(300);
                        fab.ep(node).on_rdma_done(token, ok)
                    }
                    Ev::Register { node, mem } => {
                        next_key += 1;
                        let r = if rng.chance(200) {
                            Err(())
                        } else {
                            Ok(MrKey {
                                addr: next_key << 32,
                                key: next_key,
                            })
                        };
                        fab.ep(node).on_register_done(mem, r)
                    }
                }
            }
        }
        // Whatever still waits is aborted; the device answers everything.
        for &(n, op) in &issued {
            let _ = fab.ep(n).abort(op);
        }
        let mut guard = 0;
        loop {
            guard += 1;
            assert!(guard < 100_000, "seed {seed}: no end");
            for n in [a, b] {
                while let Some(t) = fab.ep(n).poll_transmit() {
                    match t {
                        Transmit::Send { token, .. } => {
                            events.push(Ev::SendDone { node: n, token })
                        }
                        Transmit::RdmaRead { token, .. } | Transmit::RdmaWrite { token, .. } => {
                            events.push(Ev::Rdma { node: n, token })
                        }
                        Transmit::Register { mem, .. } => {
                            events.push(Ev::Register { node: n, mem })
                        }
                        Transmit::Deregister { .. } => {}
                    }
                }
                while let Some(c) = fab.ep(n).poll_completion() {
                    *seen.entry((n, c.op)).or_default() += 1;
                }
            }
            let Some(e) = events.pop() else { break };
            match e {
                // Packets still on the wire are lost with everything that waited for them.
                Ev::Deliver { .. } => {}
                Ev::SendDone { node, token } => fab.ep(node).on_send_done(token, SendOutcome::Ok),
                Ev::Rdma { node, token } => fab.ep(node).on_rdma_done(token, false),
                Ev::Register { node, mem } => fab.ep(node).on_register_done(mem, Err(())),
            }
        }
        for &(n, op) in &issued {
            assert_eq!(
                seen.get(&(n, op)).copied(),
                Some(1),
                "seed {seed}: node {n} {op:?} completed {:?} times",
                seen.get(&(n, op))
            );
        }
        for n in [a, b] {
            // Unexpected messages of the peer go with it.
            let p = peers[n];
            fab.ep(n).remove_peer(p).unwrap();
            assert_eq!(fab.ep(n).in_flight(), (0, 0, 0), "seed {seed} node {n}");
            assert_eq!(
                fab.ep(n).resources(),
                (1, 0, 0),
                "seed {seed} node {n}: the region only"
            );
        }
    }
}

/// A call refused at call time left nothing behind on node `a`: no packet, no operation
/// in flight, no resource held.
fn assert_nothing_sent_or_held(fab: &mut Fabric, a: usize) {
    assert!(fab.ep(a).poll_transmit().is_none(), "nothing sent");
    assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
    assert_eq!(fab.ep(a).resources(), (0, 0, 0));
}

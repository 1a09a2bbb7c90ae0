//! The in-memory device: three endpoints in one process, every subprotocol, under seeded
//! reordering, delays, partial sends (`Again`) and registration failures; the same seed
//! gives the same run.
mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{config, config_emulated, payload};
use tagmatch_rdm::{
    AtomicArgs, AtomicOp, Completion, Datatype, OpId, OpKind, RemoteAddr, SendOpts,
};
use tagmatch_transport::mem::{MemDevice, MemFaults, MemNetwork};
use tagmatch_transport::{Node, RdmDevice};

/// Progresses every node round-robin until nothing is in flight; returns the completions
/// in the order they appeared.
fn drive(net: &MemNetwork, nodes: &mut [Node<MemDevice>]) -> Vec<(usize, Completion)> {
    let mut out = Vec::new();
    let mut quiet = 0;
    for _ in 0..1_000_000 {
        for (i, n) in nodes.iter_mut().enumerate() {
            n.progress(Some(Duration::ZERO)).expect("progress");
            while let Some(c) = n.poll_completion() {
                out.push((i, c));
                quiet = 0;
            }
        }
        if net.in_flight() == 0 && nodes.iter().all(|n| n.is_idle()) {
            quiet += 1;
            if quiet > 3 {
                return out;
            }
        }
    }
    panic!("the in-memory network did not settle");
}

fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// One run; returns a trace of every completion (node, op, kind, result, len, checksum).
fn run(seed: u64, faults: MemFaults) -> Vec<String> {
    let net = MemNetwork::with_faults(seed, MemFaults::default());
    let mut nodes: Vec<Node<MemDevice>> = vec![
        Node::new(config(), net.device()),
        Node::new(config(), net.device()),
        Node::new(config_emulated(), net.device()),
    ];
    let (a, b, c) = (0, 1, 2);
    let b_addr = nodes[b].addr();
    let ab = nodes[a].endpoint_mut().add_peer(b_addr);
    let cb = nodes[c].endpoint_mut().add_peer(b_addr);
    let region = payload(2 << 20, 5);
    let (_mem, key) = nodes[b]
        .register(region.clone(), Duration::from_secs(1))
        .expect("register");
    let at = |off: u64| RemoteAddr {
        addr: key.addr + off,
        key: key.key,
    };
    // Every fault from here on.
    net.set_faults(faults);

    // Two-sided: every size class and DC, tagged, to b (half the receives late).
    let sizes = [0usize, 100, 1400, 20_000, 150_000, 400_000, 1_500_000];
    let mut expect: HashMap<OpId, Vec<u8>> = HashMap::new();
    let mut late = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        for dc in [false, true] {
            let tag = (i as u64) << 1 | dc as u64;
            let data = payload(len, tag);
            let opts = SendOpts {
                delivery_complete: dc,
                ..SendOpts::default()
            };
            if tag % 3 == 0 {
                late.push((tag, data.clone()));
            } else {
                let r = nodes[b]
                    .endpoint_mut()
                    .trecv(None, tag, 0, len)
                    .expect("trecv");
                expect.insert(r, data.clone());
            }
            nodes[a]
                .endpoint_mut()
                .tsend(ab, tag, data, opts)
                .expect("tsend");
        }
    }
    let mut trace = Vec::new();
    let record =
        |cs: Vec<(usize, Completion)>, trace: &mut Vec<String>, expect: &HashMap<OpId, Vec<u8>>| {
            for (n, c) in cs {
                assert_eq!(c.result, Ok(()), "node {n} {:?}", c.kind);
                if let Some(want) = expect.get(&c.op) {
                    if n == b || n == c_node() {
                        assert!(c.data == *want, "node {n} op {:?} data intact", c.op);
                    }
                }
                trace.push(format!(
                    "{n} {:?} {:?} {} {:x}",
                    c.op,
                    c.kind,
                    c.len,
                    checksum(&c.data)
                ));
            }
        };
    fn c_node() -> usize {
        2
    }
    let cs = drive(&net, &mut nodes);
    record(cs, &mut trace, &expect);
    for (tag, data) in late {
        let r = nodes[b]
            .endpoint_mut()
            .trecv(None, tag, 0, data.len())
            .expect("trecv");
        expect.insert(r, data);
    }
    let cs = drive(&net, &mut nodes);
    let recvs = cs
        .iter()
        .filter(|(n, c)| *n == b && c.kind == OpKind::Recv)
        .count();
    record(cs, &mut trace, &expect);
    assert!(recvs > 0);

    // One-sided from a (direct and emulated writes, reads) and c (emulated only).
    let cq = SendOpts {
        cq_data: Some(9),
        ..SendOpts::default()
    };
    let writes = [
        (0u64, 100usize, cq),
        (4096, 30_000, cq),
        (65_536, 200_000, cq),
        (600_000, 300_000, SendOpts::default()),
    ];
    for &(off, len, opts) in &writes {
        nodes[a]
            .endpoint_mut()
            .write(ab, payload(len, off), at(off), opts)
            .expect("write");
    }
    nodes[c]
        .endpoint_mut()
        .write(cb, payload(700, 1), at(1 << 20), SendOpts::default())
        .expect("write");
    let cs = drive(&net, &mut nodes);
    let remote = cs
        .iter()
        .filter(|(n, c)| *n == b && c.kind == OpKind::RemoteWrite)
        .count();
    assert_eq!(remote, 3, "CQ data writes complete on the responder");
    record(cs, &mut trace, &expect);
    for &(off, len, _) in &writes {
        let r = nodes[a]
            .endpoint_mut()
            .read(ab, len, at(off))
            .expect("read");
        expect.insert(r, payload(len, off));
        let r = nodes[c]
            .endpoint_mut()
            .read(cb, len, at(off))
            .expect("read");
        expect.insert(r, payload(len, off));
    }
    let r = nodes[c]
        .endpoint_mut()
        .read(cb, 700, at(1 << 20))
        .expect("read");
    expect.insert(r, payload(700, 1));
    let off = 1_500_000u64;
    let init = u64::from_le_bytes(
        region[off as usize..off as usize + 8]
            .try_into()
            .expect("8"),
    );
    let args = AtomicArgs {
        datatype: Datatype::U64,
        op: AtomicOp::Sum,
        operand: 3u64.to_le_bytes().to_vec(),
        compare: None,
    };
    let f = nodes[a]
        .endpoint_mut()
        .atomic_fetch(ab, args, at(off))
        .expect("fetch");
    expect.insert(f, init.to_le_bytes().to_vec());
    let cs = drive(&net, &mut nodes);
    for (n, comp) in &cs {
        if let Some(want) = expect.get(&comp.op) {
            if *n != b && matches!(comp.kind, OpKind::Read | OpKind::AtomicFetch) {
                assert!(
                    comp.data == *want,
                    "node {n} {:?} {:?} returned the written bytes",
                    comp.op,
                    comp.kind
                );
            }
        }
    }
    record(cs, &mut trace, &expect);
    trace
}

fn faults() -> MemFaults {
    MemFaults {
        reorder: true,
        max_delay: 6,
        send_again: 100,
        register_fail: 40,
    }
}

#[test]
fn every_subprotocol_under_faults() {
    let t = run(7, faults());
    assert_eq!(
        t.len(),
        46,
        "14 sends, 14 receives, 5 writes, 3 remote writes, 9 reads, 1 fetch"
    );
}

#[test]
fn without_faults_too() {
    run(
        8,
        MemFaults {
            reorder: false,
            max_delay: 0,
            send_again: 0,
            register_fail: 0,
        },
    );
}

#[test]
fn same_seed_same_run() {
    let (x, y) = (run(11, faults()), run(11, faults()));
    assert_eq!(x, y);
    let z = run(12, faults());
    assert_ne!(x, z, "another seed schedules differently");
}

/// Packets the endpoint refused are handed in again only when its admission epoch moved,
/// and every cause of a refusal has a move that undoes it: here messages beyond a small
/// reorder window (reordering network) are refused although every receive is posted up
/// front, and are taken once earlier messages arrive (the window moves) — with no
/// further call by the application. Then a full budget: refused packets stay parked
/// (not redelivered at every progress) until receives are posted.
#[test]
fn refused_packets_come_back_when_they_can_be_taken() {
    let net = MemNetwork::with_faults(
        7,
        MemFaults {
            reorder: true,
            max_delay: 20,
            ..MemFaults::default()
        },
    );
    let small = tagmatch_rdm::Config {
        reorder_window: 2,
        max_unexpected_msgs: 2,
        ..config()
    };
    let mut a = Node::new(config(), net.device());
    let mut b = Node::new(small, net.device());
    let ab = a.add_peer(b.addr());
    // Window: every receive posted first.
    receive_in_order(&mut a, &mut b, ab, 60, 100_000);
    assert!(
        b.endpoint().stats().rx_refused > 0,
        "nothing was beyond the window"
    );
    // Budget: no receive posted, two messages fit.
    for i in 0..20 {
        a.endpoint_mut()
            .tsend(ab, 100 + i, payload(16, i), SendOpts::default())
            .unwrap();
    }
    for _ in 0..300 {
        a.progress(Some(Duration::ZERO)).unwrap();
        b.progress(Some(Duration::ZERO)).unwrap();
    }
    let refused = b.endpoint().stats().rx_refused;
    for _ in 0..300 {
        b.progress(Some(Duration::ZERO)).unwrap();
    }
    assert_eq!(
        b.endpoint().stats().rx_refused,
        refused,
        "parked, not handed in at every progress"
    );
    for i in 0..20 {
        let r = b.endpoint_mut().trecv(None, 0, !0, 16).unwrap();
        let c = b.wait(r, Duration::from_secs(10)).unwrap();
        assert_eq!((c.tag, c.data), (100 + i, payload(16, i)));
    }
}

/// No memory: the in-memory device's packet path does not touch registered regions.
struct NoMem;

impl tagmatch_transport::MemoryAccess for NoMem {
    fn region(&self, _: tagmatch_rdm::MemHandle) -> Option<&[u8]> {
        None
    }
    fn region_mut(&mut self, _: tagmatch_rdm::MemHandle) -> Option<&mut [u8]> {
        None
    }
}

/// Delays without reordering: each `progress` hands up the packets that are due in the
/// order they were sent (also those that waited behind later ones that were due first),
/// every packet exactly once; without delays every packet comes at the next `progress`,
/// in order. (The receive side swaps the inbox with a spare buffer when everything is due
/// and splits it otherwise: both must keep arrival order.)
#[test]
fn delayed_packets_keep_send_order_within_each_delivery() {
    use tagmatch_rdm::{PeerId, SendToken, Transmit};
    use tagmatch_transport::{DeviceEvent, RdmDevice};
    for max_delay in [0, 3, 8] {
        let net = MemNetwork::with_faults(
            3,
            MemFaults {
                reorder: false,
                max_delay,
                ..MemFaults::default()
            },
        );
        let mut a = net.device();
        let mut b = net.device();
        let mut batches = Vec::new();
        let mut next = 0u32;
        const N: u32 = 2000;
        while batches.iter().map(Vec::len).sum::<usize>() < N as usize {
            // A few packets per round, so that delayed ones meet newer ones.
            for _ in 0..7 {
                if next < N {
                    a.submit(
                        Transmit::Send {
                            token: SendToken(next as u64),
                            peer: PeerId(0),
                            dest: b.addr(),
                            bytes: next.to_le_bytes().to_vec(),
                        },
                        &mut NoMem,
                    );
                    next += 1;
                }
            }
            b.progress(&mut NoMem, Some(Duration::ZERO)).unwrap();
            let mut batch = Vec::new();
            while let Some(ev) = b.poll_event() {
                if let DeviceEvent::Recv { bytes, .. } = ev {
                    batch.push(u32::from_le_bytes(bytes[..4].try_into().unwrap()));
                }
            }
            batches.push(batch);
            assert!(
                batches.len() < 10 * N as usize,
                "max_delay {max_delay}: stuck"
            );
        }
        for b in &batches {
            assert!(
                b.windows(2).all(|w| w[0] < w[1]),
                "max_delay {max_delay}: a delivery out of send order: {b:?}"
            );
        }
        let mut all: Vec<u32> = batches.concat();
        if max_delay == 0 {
            assert_eq!(all, (0..N).collect::<Vec<_>>(), "no delay: in order");
        } else {
            assert!(
                batches.iter().flatten().zip(0..N).any(|(&x, i)| x != i),
                "max_delay {max_delay}: the delays changed nothing"
            );
        }
        all.sort_unstable();
        assert_eq!(all, (0..N).collect::<Vec<_>>(), "max_delay {max_delay}");
    }
}

/// A device that is dropped leaves the network: what was queued for it is dropped (not
/// counted in flight for ever), and sends to its address fail.
#[test]
fn a_dropped_device_leaves_the_network() {
    let net = MemNetwork::with_faults(
        5,
        MemFaults {
            reorder: false,
            max_delay: 0,
            ..MemFaults::default()
        },
    );
    let mut a = Node::new(config(), net.device());
    let b = Node::new(config(), net.device());
    let ab = a.add_peer(b.addr());
    let first = a
        .endpoint_mut()
        .tsend(ab, 1, payload(16, 1), SendOpts::default())
        .unwrap();
    a.progress(Some(Duration::ZERO)).unwrap();
    assert!(net.in_flight() > 0, "queued for b");
    drop(b);
    assert_eq!(net.in_flight(), 0, "dropped with b");
    // The first send's packet left before b went: it completed.
    assert_eq!(
        a.wait(first, Duration::from_secs(5)).unwrap().result,
        Ok(())
    );
    let second = a
        .endpoint_mut()
        .tsend(ab, 2, payload(16, 2), SendOpts::default())
        .unwrap();
    let c = a.wait(second, Duration::from_secs(5)).unwrap();
    assert_eq!(c.result, Err(tagmatch_rdm::OpError::SendFailed));
    assert_eq!(net.in_flight(), 0);
    // Delivery complete to a peer that never sent its handshake waits for it; the packet
    // provoking it fails, and so do the sends (they waited for ever).
    let c = Node::new(config(), net.device());
    let ac = a.add_peer(c.addr());
    drop(c);
    let dc = SendOpts {
        delivery_complete: true,
        ..SendOpts::default()
    };
    let ops: Vec<OpId> = (0..3)
        .map(|i| a.endpoint_mut().tsend(ac, i, payload(16, i), dc).unwrap())
        .collect();
    for op in ops {
        let c = a.wait(op, Duration::from_secs(5)).unwrap();
        assert_eq!(c.result, Err(tagmatch_rdm::OpError::SendFailed));
    }
    // A later one provokes the handshake again (and fails the same way).
    let op = a.endpoint_mut().tsend(ac, 9, payload(16, 9), dc).unwrap();
    let c = a.wait(op, Duration::from_secs(5)).unwrap();
    assert_eq!(c.result, Err(tagmatch_rdm::OpError::SendFailed));
}

/// A full budget emptied by claiming (`tmprobe`) and receiving (`mrecv`) the unexpected
/// messages, without posting a receive: the packets refused meanwhile are handed in again
/// (the admission epoch moves at `mrecv`), and every message arrives in order.
#[test]
fn messages_received_by_mprobe_and_mrecv_make_room_for_refused_ones() {
    let net = MemNetwork::with_faults(
        9,
        MemFaults {
            reorder: false,
            max_delay: 0,
            ..MemFaults::default()
        },
    );
    let small = tagmatch_rdm::Config {
        max_unexpected_msgs: 2,
        ..config()
    };
    let mut a = Node::new(config(), net.device());
    let mut b = Node::new(small, net.device());
    let ab = a.add_peer(b.addr());
    const N: u64 = 30;
    for i in 0..N {
        a.endpoint_mut()
            .tsend(ab, i, payload(16, i), SendOpts::default())
            .unwrap();
    }
    for _ in 0..50 {
        a.progress(Some(Duration::ZERO)).unwrap();
        b.progress(Some(Duration::ZERO)).unwrap();
    }
    assert!(b.endpoint().stats().rx_refused > 0, "b was never full");
    let mut got = Vec::new();
    for _ in 0..10_000 {
        a.progress(Some(Duration::ZERO)).unwrap();
        b.progress(Some(Duration::ZERO)).unwrap();
        while let Some((claim, info)) = b.endpoint_mut().tmprobe(None, 0, !0) {
            assert_eq!(info.tag, got.len() as u64, "in order");
            b.endpoint_mut().mrecv(claim, 16).unwrap();
            got.push(info.tag);
        }
        while let Some(c) = b.poll_completion() {
            assert_eq!(c.data, payload(16, c.tag));
        }
        if got.len() == N as usize {
            break;
        }
    }
    assert_eq!(got, (0..N).collect::<Vec<_>>());
}

/// A receiver with a reorder window of 2 and a sender whose sends are often refused
/// (`send_again`, so its packets leave out of order): more than `RNR_QUEUED_MAX` packets
/// beyond the window are parked at the receiver, and the packet the receiver needs next
/// must still get through (the gate on parked packets must not refuse it), or sender and
/// receiver wait for each other for ever.
#[test]
fn the_packet_the_receiver_needs_is_never_held_back_by_the_rnr_gate() {
    let net = MemNetwork::with_faults(
        3,
        MemFaults {
            reorder: true,
            max_delay: 3,
            send_again: 300,
            register_fail: 0,
        },
    );
    let small = tagmatch_rdm::Config {
        reorder_window: 2,
        ..config()
    };
    let mut a = Node::new(config(), net.device());
    let mut b = Node::new(small, net.device());
    let ab = a.add_peer(b.addr());
    receive_in_order(&mut a, &mut b, ab, 400, 20_000);
    assert!(
        a.device().rnr_waits() > 0,
        "the gate was never reached ({} redeliveries)",
        b.device().rnr_redeliveries()
    );
}

/// Posts `n` wildcard receives of 16 bytes at `b`, then sends `n` messages (tag `i`) from
/// `a` to `b` (`ab`), progresses both for at most `rounds` rounds until every receive
/// completed, and checks that each did, in send order, with its payload.
fn receive_in_order(
    a: &mut Node<MemDevice>,
    b: &mut Node<MemDevice>,
    ab: tagmatch_rdm::PeerId,
    n: u64,
    rounds: usize,
) {
    let recvs: Vec<OpId> = (0..n)
        .map(|_| b.endpoint_mut().trecv(None, 0, !0, 16).unwrap())
        .collect();
    for i in 0..n {
        a.endpoint_mut()
            .tsend(ab, i, payload(16, i), SendOpts::default())
            .unwrap();
    }
    let mut got = HashMap::new();
    for _ in 0..rounds {
        a.progress(Some(Duration::ZERO)).unwrap();
        b.progress(Some(Duration::ZERO)).unwrap();
        while let Some(c) = b.poll_completion() {
            got.insert(c.op, c);
        }
        if got.len() == recvs.len() {
            break;
        }
    }
    assert_eq!(got.len(), recvs.len(), "every message matched");
    for (i, r) in recvs.iter().enumerate() {
        assert_eq!(got[r].tag, i as u64, "in order");
        assert_eq!(got[r].data, payload(16, i as u64));
    }
}

/// A sender facing a receiver that holds `RNR_QUEUED_MAX` refused packets of it (its
/// budget is full and it posts no receive) does not spin: its sends wait in the network
/// unanswered instead of coming back `Again` at every `progress` to be resubmitted, and
/// its `progress` with a timeout sleeps on its doorbell. Once the receiver receives,
/// every message arrives, in order, and every send completes.
#[test]
fn a_sender_facing_a_full_receiver_waits_without_spinning() {
    let net = MemNetwork::with_faults(
        5,
        MemFaults {
            reorder: false,
            max_delay: 3,
            ..MemFaults::default()
        },
    );
    let small = tagmatch_rdm::Config {
        max_unexpected_msgs: 2,
        ..config()
    };
    // Emulated writes: a write to b is an RTW packet (a REQ without a `msg_id`).
    let mut a = Node::new(config_emulated(), net.device());
    let mut b = Node::new(small, net.device());
    let ab = a.add_peer(b.addr());
    const N: u64 = 200;
    let mut sends = Vec::new();
    // Half first, refused (and held) by b; then the other half meets the limit.
    for half in [0..N / 2, N / 2..N] {
        for i in half {
            sends.push(
                a.endpoint_mut()
                    .tsend(ab, i, payload(16, i), SendOpts::default())
                    .unwrap(),
            );
        }
        for _ in 0..50 {
            a.progress(Some(Duration::ZERO)).unwrap();
            b.progress(Some(Duration::ZERO)).unwrap();
        }
    }
    assert!(a.device().rnr_waits() > 0, "b never held enough");
    // b is not ready and stays so: a alone progresses.
    let again = a.endpoint().stats().tx_again;
    for _ in 0..1000 {
        a.progress(Some(Duration::ZERO)).unwrap();
    }
    let resubmitted = a.endpoint().stats().tx_again - again;
    // Answering the waiting sends `Again` resubmitted each of them at every call (over
    // 100 000 times here).
    assert_eq!(resubmitted, 0, "sends refused and resubmitted in a loop");
    let sleeps = a.device().doorbell().sleeps();
    a.progress(Some(Duration::from_millis(20))).unwrap();
    assert_eq!(
        a.device().doorbell().sleeps(),
        sleeps + 1,
        "a's progress did not sleep"
    );
    // A write (RTW) is never refused, so it does not wait behind the messages: it
    // completes while b is still not ready.
    let (h, key) = b.register(vec![0; 64], Duration::from_secs(1)).unwrap();
    let w = a
        .endpoint_mut()
        .write(
            ab,
            payload(64, 7),
            RemoteAddr {
                addr: key.addr,
                key: key.key,
            },
            SendOpts::default(),
        )
        .unwrap();
    for _ in 0..100 {
        a.progress(Some(Duration::ZERO)).unwrap();
        b.progress(Some(Duration::ZERO)).unwrap();
    }
    let c = a
        .wait(w, Duration::from_millis(100))
        .expect("the write waited behind the held messages");
    assert_eq!(c.result, Ok(()));
    assert_eq!(b.endpoint().memory(h).unwrap(), &payload(64, 7)[..]);
    // b receives: everything arrives in order, and a's sends complete.
    for i in 0..N {
        let r = b.endpoint_mut().trecv(None, 0, !0, 16).unwrap();
        let mut done = None;
        for _ in 0..10_000 {
            a.progress(Some(Duration::ZERO)).unwrap();
            b.progress(Some(Duration::ZERO)).unwrap();
            if let Some(c) = b.poll_completion() {
                done = Some(c);
                break;
            }
        }
        let c = done.unwrap_or_else(|| panic!("message {i} never arrived"));
        assert_eq!(c.op, r);
        assert_eq!((c.tag, c.data), (i, payload(16, i)));
    }
    for s in sends {
        assert_eq!(a.wait(s, Duration::from_secs(10)).unwrap().result, Ok(()));
    }
    for _ in 0..10 {
        a.progress(Some(Duration::ZERO)).unwrap();
        b.progress(Some(Duration::ZERO)).unwrap();
    }
    assert!(a.is_idle() && b.is_idle() && net.in_flight() == 0);
}

/// `b` holds packets it refused (its budget is full, no receive posted) after every send
/// of `a` completed: `flush` returns `true` at once instead of running to its limit — the
/// held packets wait for the application, not for the network — and keeps them: every
/// message arrives, in order, once `b` receives.
fn flush_returns_while_refused_packets_wait<D: RdmDevice + Send>(mut a: Node<D>, mut b: Node<D>) {
    let ab = a.add_peer(b.addr());
    const N: u64 = 10;
    let sends: Vec<OpId> = (0..N)
        .map(|i| {
            a.endpoint_mut()
                .tsend(ab, i, payload(16, i), SendOpts::default())
                .unwrap()
        })
        .collect();
    let mut done = 0;
    for _ in 0..10_000 {
        a.progress(Some(Duration::from_millis(1))).unwrap();
        b.progress(Some(Duration::ZERO)).unwrap();
        while let Some(c) = a.poll_completion() {
            assert!(sends.contains(&c.op) && c.result.is_ok());
            done += 1;
        }
        if done == N {
            break;
        }
    }
    assert_eq!(done, N, "a's sends completed");
    assert!(b.endpoint().stats().rx_refused > 0, "b was never full");
    assert!(!b.is_idle(), "b holds refused packets");
    let refused = b.endpoint().stats().rx_refused;
    // a keeps progressing meanwhile (it acknowledges what b sent), as a live peer does.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let flushed = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                a.progress(Some(Duration::from_millis(1))).unwrap();
            }
        });
        let r = b.flush(Duration::from_secs(5)).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    });
    assert!(flushed, "flush ran to its limit");
    assert!(
        b.endpoint().stats().rx_refused - refused <= N,
        "held packets handed in again and again"
    );
    for i in 0..N {
        let r = b.endpoint_mut().trecv(None, 0, !0, 16).unwrap();
        let mut got = None;
        for _ in 0..10_000 {
            a.progress(Some(Duration::ZERO)).unwrap();
            b.progress(Some(Duration::from_millis(1))).unwrap();
            if let Some(c) = b.poll_completion() {
                got = Some(c);
                break;
            }
        }
        let c = got.unwrap_or_else(|| panic!("message {i} never arrived"));
        assert_eq!((c.op, c.tag, c.data), (r, i, payload(16, i)));
    }
    for _ in 0..10_000 {
        if a.is_idle() && b.is_idle() {
            break;
        }
        a.progress(Some(Duration::ZERO)).unwrap();
        b.progress(Some(Duration::from_millis(1))).unwrap();
    }
    assert!(b.is_idle(), "nothing held any more");
}

fn small_budget() -> tagmatch_rdm::Config {
    tagmatch_rdm::Config {
        max_unexpected_msgs: 2,
        ..config()
    }
}

#[test]
fn flush_returns_while_refused_packets_wait_in_memory() {
    let net = MemNetwork::with_faults(
        11,
        MemFaults {
            reorder: false,
            ..MemFaults::default()
        },
    );
    let a = Node::new(config(), net.device());
    let b = Node::new(small_budget(), net.device());
    flush_returns_while_refused_packets_wait(a, b);
}

#[test]
fn flush_returns_while_refused_packets_wait_over_udp() {
    let a = common::udp_node("127.0.0.1:0", 1500, config());
    let b = common::udp_node("127.0.0.1:0", 1500, small_budget());
    flush_returns_while_refused_packets_wait(a, b);
}

/// The mail flag says whether the network queued something for a device since its last
/// `progress`: a new device has none, a peer's message raises it (before any progress of
/// the receiver), the receiver's progress clears it, and an idle progress leaves it clear.
#[test]
fn mail_flag_tells_whether_the_network_queued_something() {
    let net = MemNetwork::new(7);
    let mut a = Node::new(config(), net.device());
    let mut b = Node::new(config(), net.device());
    assert!(!b.device().has_mail() && !a.device().has_mail());
    let ab = a.endpoint_mut().add_peer(b.addr());
    let r = b.endpoint_mut().trecv(None, 5, 0, 8).expect("trecv");
    a.endpoint_mut()
        .tsend(ab, 5, vec![1; 8], SendOpts::default())
        .expect("tsend");
    a.progress(Some(Duration::ZERO)).expect("progress");
    assert!(b.device().has_mail(), "a packet was queued for b");
    b.progress(Some(Duration::ZERO)).expect("progress");
    assert!(!b.device().has_mail(), "b took it");
    let mut got = None;
    for _ in 0..1000 {
        a.progress(Some(Duration::ZERO)).expect("progress");
        b.progress(Some(Duration::ZERO)).expect("progress");
        if let Some(c) = b.poll_completion() {
            got = Some(c);
            break;
        }
    }
    assert_eq!(got.map(|c| (c.op, c.data)), Some((r, vec![1; 8])));
    // Let the acknowledgements settle, then nothing more arrives.
    for _ in 0..100 {
        a.progress(Some(Duration::ZERO)).expect("progress");
        b.progress(Some(Duration::ZERO)).expect("progress");
    }
    assert!(!a.device().has_mail() && !b.device().has_mail());
    b.progress(Some(Duration::ZERO)).expect("progress");
    assert!(!b.device().has_mail(), "an idle progress finds nothing");
}

/// The node's ready completions are the endpoint's queued ones that a pump found (they
/// stay in the endpoint's queue): one the endpoint queued outside a pump (a cancel) is
/// not ready before the next `progress`; `wait` takes one out of the middle and the
/// others still come in completion order, the cancel's last.
#[test]
fn completions_are_ready_after_a_pump_and_come_in_order_around_wait() {
    let net = MemNetwork::new(3);
    let mut a = Node::new(config(), net.device());
    let mut b = Node::new(config(), net.device());
    let ab = a.add_peer(b.addr());
    let r: Vec<OpId> = (0..3)
        .map(|_| b.endpoint_mut().recv(None, 16).expect("recv"))
        .collect();
    let late = b.endpoint_mut().recv(None, 16).expect("recv");
    for i in 0..3u8 {
        a.endpoint_mut()
            .send(ab, vec![i; 4], SendOpts::default())
            .expect("send");
    }
    let mut ready = 0;
    for _ in 0..10_000 {
        a.progress(Some(Duration::ZERO)).expect("progress");
        ready = b.progress(Some(Duration::ZERO)).expect("progress");
        if ready >= 3 {
            break;
        }
    }
    assert_eq!(ready, 3, "three receives completed");
    assert!(b.has_completions());
    // Queued by the endpoint now, outside a pump: not ready yet.
    b.endpoint_mut().cancel(late).expect("cancel");
    let second = b.wait(r[1], Duration::from_secs(1)).expect("wait");
    assert_eq!((second.op, &second.data[..4]), (r[1], &[1u8; 4][..]));
    let first = b.poll_completion().expect("first");
    assert_eq!((first.op, &first.data[..4]), (r[0], &[0u8; 4][..]));
    let third = b.poll_completion().expect("third");
    assert_eq!((third.op, &third.data[..4]), (r[2], &[2u8; 4][..]));
    assert!(b.poll_completion().is_none(), "the cancel waits for a pump");
    assert!(!b.has_completions());
    assert_eq!(b.progress(Some(Duration::ZERO)).expect("progress"), 1);
    let c = b.poll_completion().expect("the cancel");
    assert_eq!(c.op, late);
    assert!(c.result.is_err());
    assert!(b.poll_completion().is_none());
}

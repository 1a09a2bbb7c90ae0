//! Review 21: no operation waits for ever, and nothing grows without bound, because of a
//! peer. Requests a responder would refuse unanswered are refused at call time
//! (`CallError::ReadTooLarge`, `CallError::RemoteRange`).
mod common;
#[path = "common/pump.rs"]
mod pump;
use common::*;
use pump::*;
use tagmatch_rdm::{
    AtomicArgs, AtomicOp, CallError, Config, Datatype, RemoteAddr, SendOpts, Transmit,
    MAX_READ_SIZE,
};
use tagmatch_wire::efa::{Field, PacketType as T, Repr};

/// Small thresholds and no RDMA on either side: writes and reads are emulated long-CTS.
fn no_rdma() -> Config {
    feats(|f| {
        f.rdma_read = false;
        f.rdma_write = false;
    })
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
        assert!(fab.ep(a).poll_transmit().is_none(), "nothing sent");
        assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
        assert_eq!(fab.ep(a).resources(), (0, 0, 0));
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
    assert!(fab.ep(a).poll_transmit().is_none(), "nothing sent");
    assert_eq!(fab.ep(a).in_flight(), (0, 0, 0));
    assert_eq!(fab.ep(a).resources(), (0, 0, 0));
}

//! The facade over the verbs transport (`Builder::verbs`): every operation kind between two
//! endpoints on one RDMA device, simultaneous connection set-up, and a bounded failure
//! towards a peer that does not exist.
//!
//! Without an RDMA device these tests print `SKIPPED` and pass, unless
//! `TAGMATCH_REQUIRE_RDMA_DEVICE=1` (set by `cargo xtask vm-test`, which runs them on
//! Soft-RoCE inside QEMU). `TAGMATCH_RDMA_DEVICE` picks the device (default: the first).
#![cfg(feature = "verbs")]

mod common;

use std::io::Write as _;
use std::time::Duration;

use tagmatch::VerbsConfig as RdmConfig;
use tagmatch::{Address, DeviceStats, Endpoint, Error, TagMatch};

fn device_name() -> String {
    std::env::var("TAGMATCH_RDMA_DEVICE").unwrap_or_default()
}

/// An endpoint on the test device, or `None` (skip) when the host has no RDMA device.
fn endpoint(test: &str, cfg: RdmConfig) -> Option<Endpoint> {
    let r = Endpoint::builder()
        .verbs(&device_name())
        .verbs_config(cfg)
        .wait_limit(Duration::from_secs(120))
        .build();
    match r {
        Ok(e) => Some(e),
        Err(e) => {
            let require =
                std::env::var("TAGMATCH_REQUIRE_RDMA_DEVICE").is_ok_and(|v| v.trim() == "1");
            assert!(
                !require,
                "{test}: {e}, and TAGMATCH_REQUIRE_RDMA_DEVICE=1 requires a device"
            );
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {e}");
            None
        }
    }
}

/// Two endpoints on the test device, connected by one message from `b` to `a` (tag 1):
/// `(a, b, a's peer b, b's peer a)`, or `None` (skip) without a device.
fn connected_pair(test: &str) -> Option<(Endpoint, Endpoint, tagmatch::Peer, tagmatch::Peer)> {
    let mut a = endpoint(test, RdmConfig::default())?;
    let mut b = endpoint(test, RdmConfig::default())?;
    let pb = a.insert_peer(&b.address()).unwrap();
    let pa = b.insert_peer(&a.address()).unwrap();
    let r = a.trecv(pb, TagMatch::exact(1), 8).unwrap();
    let s = b.tsend(pa, 1, b"hello".to_vec()).unwrap();
    a.wait_with(r, &mut [&mut b]).unwrap();
    b.wait_with(s, &mut [&mut a]).unwrap();
    Some((a, b, pb, pa))
}

fn verbs_stats(e: &Endpoint) -> tagmatch::VerbsStats {
    match e.stats().device {
        DeviceStats::Verbs(v) => v,
        other => panic!("not a verbs device: {other:?}"),
    }
}

#[test]
fn every_operation_over_verbs() {
    let Some(a) = endpoint("every_operation_over_verbs", RdmConfig::default()) else {
        return;
    };
    let Some(b) = endpoint("every_operation_over_verbs", RdmConfig::default()) else {
        return;
    };
    assert_eq!(a.transport(), "verbs");
    let addr = a.address().to_string();
    assert!(addr.starts_with("verbs://["), "{addr}");
    assert_eq!(addr.parse::<Address>().unwrap(), a.address());
    let (sa, sb) = (verbs_stats(&a), verbs_stats(&b));
    assert_eq!(
        (sa.connects, sb.connects),
        (0, 0),
        "connections are made on first use"
    );
    // `exercise` asserts the data, completions and protocol choices of every operation;
    // it consumes the endpoints, so check the device counters through a second pair below.
    common::exercise(a, b);
}

#[test]
fn simultaneous_connects_and_counters() {
    let test = "simultaneous_connects_and_counters";
    let Some(mut a) = endpoint(test, RdmConfig::default()) else {
        return;
    };
    let Some(mut b) = endpoint(test, RdmConfig::default()) else {
        return;
    };
    let pb = a.connect(&b.address().to_string()).unwrap();
    let pa = b.connect(&a.address().to_string()).unwrap();
    // Both sides send before either progresses: both REQs cross, the lower address's wins.
    let ra = a.trecv(pb, TagMatch::exact(2), 64).unwrap();
    let rb = b.trecv(pa, TagMatch::exact(1), 64).unwrap();
    let sa = a.tsend(pb, 1, b"from a".to_vec()).unwrap();
    let sb = b.tsend(pa, 2, b"from b".to_vec()).unwrap();
    assert_eq!(b.wait_with(rb, &mut [&mut a]).unwrap().data, b"from a");
    assert_eq!(a.wait_with(ra, &mut [&mut b]).unwrap().data, b"from b");
    a.wait_with(sa, &mut [&mut b]).unwrap();
    b.wait_with(sb, &mut [&mut a]).unwrap();
    let (va, vb) = (verbs_stats(&a), verbs_stats(&b));
    assert_eq!((va.connects, vb.connects), (1, 1), "{va:?} {vb:?}");
    assert_eq!(
        (va.rdma_refused, vb.rdma_refused),
        (0, 0),
        "no RDMA was asked for"
    );
    assert_eq!((va.tx_errors, vb.tx_errors), (0, 0));
    assert!(va.tx_packets >= 2 && vb.rx_packets >= 2, "{va:?} {vb:?}");
    assert!(a.flush(Duration::from_secs(10)).unwrap());
    assert!(b.flush(Duration::from_secs(10)).unwrap());
}

#[test]
fn unreachable_peer_fails_in_bounded_time() {
    let test = "unreachable_peer_fails_in_bounded_time";
    let cfg = RdmConfig {
        connect_timeout: Duration::from_millis(500),
        cm_retry: Duration::from_millis(50),
        ..RdmConfig::default()
    };
    let Some(mut a) = endpoint(test, cfg) else {
        return;
    };
    // Our own GID, a QP number that is not a UD QP of ours, a connid nobody has.
    let me = a.address().to_string();
    let gid = me
        .split(']')
        .next()
        .unwrap()
        .trim_start_matches("verbs://[");
    let ghost = format!("verbs://[{gid}]:16777000/0x1234567");
    let p = a.connect(&ghost).unwrap();
    let s = a.tsend(p, 1, b"nobody".to_vec()).unwrap();
    // A failure, not `Error::Timeout` (the endpoint's wait limit is 120 s).
    let e = a.wait(s).unwrap_err();
    assert!(matches!(e, Error::Failed { .. }), "{e}");
    let v = verbs_stats(&a);
    assert!(
        v.cm_retransmits >= 1,
        "the request was retried before giving up: {v:?}"
    );
    assert!(v.tx_errors >= 1, "{v:?}");
}

#[test]
fn blocked_wait_wakes_on_a_completion_from_another_thread() {
    // `a` waits in its device's completion channel (poll(2)); `b` sends from another
    // thread a while later. The completion must wake `a` (the endpoint and its verbs
    // device move between threads).
    let test = "blocked_wait_wakes_on_a_completion_from_another_thread";
    // Connected first, so the wait below has no connection timer to wake it.
    let Some((mut a, mut b, pb, pa)) = connected_pair(test) else {
        return;
    };
    let r = a.trecv(pb, TagMatch::exact(2), 8).unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        for i in 0..3u64 {
            let s = b.tsend(pa, 2 + i, vec![i as u8; 8]).unwrap();
            b.wait(s).unwrap();
        }
        b
    });
    let c = a.wait(r).unwrap();
    assert_eq!(c.data, vec![0u8; 8]);
    for i in 1..3u64 {
        let r = a.trecv(pb, TagMatch::exact(2 + i), 8).unwrap();
        assert_eq!(a.wait(r).unwrap().data, vec![i as u8; 8]);
    }
    let mut b = t.join().unwrap();
    assert!(a.flush(Duration::from_secs(10)).unwrap());
    assert!(b.flush(Duration::from_secs(10)).unwrap());
}

#[test]
fn budget_holds_messages_back_without_losing_any() {
    // The receiver's budget is 2 unexpected messages; the sender sends 24 (eager and
    // medium). The endpoint refuses the excess, the verbs device holds it (one receive
    // buffer each) and redelivers it; every message arrives, in order, once receives are
    // posted.
    let test = "budget_holds_messages_back_without_losing_any";
    let cfg = RdmConfig {
        recv_slots: 16,
        ..RdmConfig::default()
    };
    let Some(mut a) = endpoint(test, cfg.clone()) else {
        return;
    };
    let mut b = Endpoint::builder()
        .verbs(&device_name())
        .verbs_config(cfg)
        .memory_budget(1 << 20, 2)
        .wait_limit(Duration::from_secs(120))
        .build()
        .expect("a second endpoint on the device that gave the first");
    let pb = a.insert_peer(&b.address()).unwrap();
    let pa = b.insert_peer(&a.address()).unwrap();
    let msg = |i: u64| -> Vec<u8> {
        let len = if i % 4 == 3 { 20_000 } else { 64 };
        (0..len).map(|x| (x as u64 * 7 + i) as u8).collect()
    };
    let sends: Vec<_> = (0..24u64)
        .map(|i| a.tsend(pb, i, msg(i)).unwrap())
        .collect();
    for _ in 0..2000 {
        a.progress().unwrap();
        b.progress().unwrap();
    }
    let st = b.stats();
    assert!(st.unexpected <= 2, "{} unexpected", st.unexpected);
    assert!(st.rdm.rx_refused > 0, "the budget refused nothing");
    assert!(verbs_stats(&b).rnr_held > 0);
    common::receive_in_order(&mut a, &mut b, pa, 24, sends, msg, "verbs");
    assert!(a.flush(Duration::from_secs(10)).unwrap());
    assert!(b.flush(Duration::from_secs(10)).unwrap());
}

#[test]
fn an_endpoint_sends_to_itself() {
    let test = "an_endpoint_sends_to_itself";
    let Some(mut a) = endpoint(test, RdmConfig::default()) else {
        return;
    };
    let me = a.insert_peer(&a.address()).unwrap();
    for (tag, len) in [(1u64, 16usize), (2, 20_000), (3, 300_000)] {
        let data: Vec<u8> = (0..len).map(|x| (x as u64 * 5 + tag) as u8).collect();
        let r = a.trecv(me, TagMatch::exact(tag), len).unwrap();
        let s = a.tsend(me, tag, data.clone()).unwrap();
        assert_eq!(a.wait(r).unwrap().data, data, "{len} bytes");
        a.wait(s).unwrap();
    }
    assert_eq!(verbs_stats(&a).connects, 0, "no connection to itself");
    assert!(a.flush(Duration::from_secs(10)).unwrap());
}

/// A pending future on a verbs endpoint arms the device's watcher (the CQ armed, a thread
/// in `poll(2)` on the completion channel) instead of waking itself at once: a parking
/// `block_on` polls a handful of times while a peer thread sends 300 ms later.
#[test]
fn a_pending_future_is_woken_by_a_completion() {
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let test = "a_pending_future_is_woken_by_a_completion";
    // Connected first, so no connection timer wakes the task.
    let Some((mut a, mut b, pb, pa)) = connected_pair(test) else {
        return;
    };
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let s = b.tsend(pa, 2, vec![7; 8]).unwrap();
        b.wait(s).unwrap();
        b
    });
    let r = a.trecv(pb, TagMatch::exact(2), 8).unwrap();
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = Box::pin(a.completion(r));
    let start = std::time::Instant::now();
    let mut polls = 0u32;
    let c = loop {
        polls += 1;
        if let Poll::Ready(c) = fut.as_mut().poll(&mut cx) {
            break c.unwrap();
        }
        assert!(start.elapsed() < Duration::from_secs(60), "never woken");
        std::thread::park_timeout(Duration::from_secs(1));
    };
    drop(fut);
    assert_eq!(c.data, vec![7; 8]);
    // A future that wakes itself at once is polled thousands of times in 300 ms.
    assert!(polls < 50, "{polls} polls");
    let mut b = t.join().unwrap();
    assert!(a.flush(Duration::from_secs(10)).unwrap());
    assert!(b.flush(Duration::from_secs(10)).unwrap());
}

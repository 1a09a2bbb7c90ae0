//! Scenarios shared by the facade's test binaries.

#![allow(dead_code)] // each test binary uses a different subset

use std::time::Duration;

use tagmatch::{
    Completion, Endpoint, Error, MemFabric, OpError, OpKind, Protocol, Request, SendOptions,
    TagMatch, ANY_SOURCE, ANY_TAG,
};

/// An endpoint on `f`, with the in-process fast path on or off.
pub fn ep(f: &MemFabric, fast: bool) -> Endpoint {
    Endpoint::builder().mem(f).fast_path(fast).build().unwrap()
}

/// Waits for `r` on `x`, progressing the others; a failed operation's completion is kept.
pub fn done(x: &mut Endpoint, r: Request, others: &mut [&mut Endpoint]) -> Completion {
    for _ in 0..2_000_000 {
        if let Some(c) = x.take_completion(r) {
            return c;
        }
        x.progress().unwrap();
        for o in others.iter_mut() {
            o.progress().unwrap();
        }
    }
    panic!("request {r:?} did not complete");
}

/// Every operation between `a` and `b`, driven by this thread.
pub fn exercise(mut a: Endpoint, mut b: Endpoint) {
    let pb = a.insert_peer(&b.address()).unwrap();
    let pa = b.insert_peer(&a.address()).unwrap();
    assert_eq!(
        a.insert_peer(&b.address()).unwrap(),
        pb,
        "same address, same peer"
    );

    // Tagged, every size class: eager, medium, long-CTS, long-read.
    for (i, len) in [8usize, 20_000, 200_000, 1 << 20].into_iter().enumerate() {
        let data: Vec<u8> = (0..len).map(|x| (x * 7 + i) as u8).collect();
        let r = b.trecv(pa, TagMatch::exact(100 + i as u64), len).unwrap();
        let s = a.tsend(pb, 100 + i as u64, data.clone()).unwrap();
        let c = b.wait_with(r, &mut [&mut a]).unwrap();
        assert_eq!(c.data, data, "size {len}");
        assert_eq!(c.source(), Some(pa));
        a.wait_with(s, &mut [&mut b]).unwrap();
    }

    // ANY_SOURCE + masked tag, CQ data.
    let r = b
        .trecv(ANY_SOURCE, TagMatch::masked(0xAB00, 0xFF00), 16)
        .unwrap();
    let opts = SendOptions {
        cq_data: Some(77),
        delivery_complete: true,
    };
    let s = a.tsend_with(pb, 0xAB42, b"masked".to_vec(), opts).unwrap();
    let c = b.wait_with(r, &mut [&mut a]).unwrap();
    assert_eq!(
        (c.tag, c.cq_data(), &c.data[..6]),
        (0xAB42, Some(77), &b"masked"[..])
    );
    a.wait_with(s, &mut [&mut b]).unwrap();

    // Untagged.
    let r = b.recv(ANY_SOURCE, 4).unwrap();
    let s = a.send(pb, b"untg".to_vec()).unwrap();
    assert_eq!(b.wait_with(r, &mut [&mut a]).unwrap().data, b"untg");
    a.wait_with(s, &mut [&mut b]).unwrap();

    // Probe, then mprobe + mrecv.
    let s = a.tsend(pb, 9, b"probe me".to_vec()).unwrap();
    a.wait_with(s, &mut [&mut b]).unwrap();
    let mut info = None;
    for _ in 0..100_000 {
        b.progress().unwrap();
        a.progress().unwrap();
        info = b.tprobe(ANY_SOURCE, ANY_TAG);
        if info.is_some() {
            break;
        }
    }
    let info = info.expect("probe finds the unexpected message");
    assert_eq!((info.tag, info.len, info.source), (9, 8, pa));
    let m = b.tmprobe(pa, 9).expect("mprobe claims it");
    assert!(
        b.tprobe(ANY_SOURCE, ANY_TAG).is_none(),
        "claimed: invisible"
    );
    let r = b.mrecv(m, 8).unwrap();
    assert_eq!(b.wait_with(r, &mut [&mut a]).unwrap().data, b"probe me");

    // Cancel.
    let r = b.trecv(ANY_SOURCE, 12345, 8).unwrap();
    b.cancel(r).unwrap();
    let c = b.wait(r).unwrap_err();
    assert!(
        matches!(
            c,
            Error::Failed {
                error: OpError::Canceled,
                ..
            }
        ),
        "{c}"
    );
    assert!(matches!(b.cancel(r), Err(Error::UnknownRequest(_))));

    // Truncation is reported with the first bytes.
    let r = b.trecv(pa, 5, 2).unwrap();
    let s = a.tsend(pb, 5, b"long".to_vec()).unwrap();
    let e = b.wait_with(r, &mut [&mut a]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Failed {
                error: OpError::Truncated {
                    msg_len: 4,
                    buf_len: 2
                },
                ..
            }
        ),
        "{e}"
    );
    a.wait_with(s, &mut [&mut b]).unwrap();

    // RMA: write then read back, small and large.
    let mr = b.register(vec![0u8; 1 << 20]).unwrap();
    let key = mr.remote_key();
    for len in [64usize, 300_000] {
        let data: Vec<u8> = (0..len).map(|x| (x % 251) as u8).collect();
        // Delivery complete: the read-back below must not overtake the write on a
        // reordering transport (a plain write completes once transmitted).
        let dc = SendOptions {
            cq_data: None,
            delivery_complete: true,
        };
        let w = a.write_with(pb, data.clone(), key.at(16), dc).unwrap();
        a.wait_with(w, &mut [&mut b]).unwrap();
        let rd = a.read(pb, len, key.at(16)).unwrap();
        assert_eq!(a.wait_with(rd, &mut [&mut b]).unwrap().data, data);
        assert_eq!(&b.region(&mr).unwrap()[16..16 + len], &data[..]);
    }

    // Atomics: a counter.
    let ctr = b.register(vec![0u8; 8]).unwrap();
    for i in 0..5u64 {
        let f = a.fetch_add_u64(pb, ctr.remote_key().at(0), 3).unwrap();
        let c = a.wait_with(f, &mut [&mut b]).unwrap();
        assert_eq!(c.data_u64(), Some(3 * i));
        assert_eq!(c.kind, OpKind::AtomicFetch);
    }
    let cs = a
        .compare_swap_u64(pb, ctr.remote_key().at(0), 15, 100)
        .unwrap();
    assert_eq!(a.wait_with(cs, &mut [&mut b]).unwrap().data_u64(), Some(15));
    assert_eq!(b.region(&ctr).unwrap(), &100u64.to_le_bytes());
    assert_eq!(b.deregister(ctr).unwrap(), 100u64.to_le_bytes().to_vec());

    let st = a.stats();
    if a.fast_path() {
        // Every message took the fast path; RMA and atomics the protocol.
        assert_eq!(st.facade.fast_sends, 8);
        assert_eq!(b.stats().facade.fast_recvs, 8);
        assert_eq!(st.facade.protocol(Protocol::Eager), 0);
    } else {
        assert_eq!(st.facade.fast_sends, 0);
        assert!(st.facade.protocol(Protocol::Eager) > 0);
        assert!(
            st.facade.protocol(Protocol::LongCts) > 0 || st.facade.protocol(Protocol::LongRead) > 0
        );
    }
    assert!(st.rdm.tx_packets > 0);
    assert!(!st.to_string().is_empty());
    assert!(a.flush(Duration::from_secs(5)).unwrap());
    assert!(b.flush(Duration::from_secs(5)).unwrap());
}

pub fn mem_pair(fabric: &MemFabric) -> (Endpoint, Endpoint) {
    mem_pair_fast(fabric, true)
}

/// In-process endpoints with the fast path on (the default) or off (EFA protocol over the
/// in-memory device).
pub fn mem_pair_fast(fabric: &MemFabric, fast: bool) -> (Endpoint, Endpoint) {
    let mk = || {
        Endpoint::builder()
            .mem(fabric)
            .fast_path(fast)
            .build()
            .unwrap()
    };
    (mk(), mk())
}

pub fn udp_pair() -> (Endpoint, Endpoint) {
    let mk = || {
        Endpoint::builder()
            .udp("127.0.0.1:0".parse().unwrap())
            .wait_limit(Duration::from_secs(20))
            .build()
            .unwrap()
    };
    (mk(), mk())
}

/// `b` receives `n` messages from its peer `ba` (`a`) with any tag: message `i` must
/// have tag `i` and the data `want(i)` (received into a buffer of its length); then
/// `a`'s `sends` complete. `label` names the case in failures.
pub fn receive_in_order(
    a: &mut Endpoint,
    b: &mut Endpoint,
    ba: tagmatch::Peer,
    n: u64,
    sends: Vec<tagmatch::Request>,
    want: impl Fn(u64) -> Vec<u8>,
    label: &str,
) {
    for i in 0..n {
        let data = want(i);
        let r = b.trecv(ba, ANY_TAG, data.len()).unwrap();
        let c = b.wait_with(r, &mut [&mut *a]).unwrap();
        assert_eq!((c.tag, c.data), (i, data), "{label}");
    }
    for s in sends {
        a.wait_with(s, &mut [&mut *b]).unwrap();
    }
}

/// A UDP endpoint's device counter `f` (panics on another transport).
fn udp_counter(e: &Endpoint, f: impl Fn(&tagmatch::DeviceStats) -> Option<u64>) -> u64 {
    let d = e.stats().device;
    f(&d).unwrap_or_else(|| panic!("not a UDP endpoint: {d:?}"))
}

/// Datagrams a UDP endpoint's sockets sent so far (the wire, not the window: a frame
/// enters the window, and counts in `frames_sent`, when it is submitted).
pub fn udp_tx_datagrams(e: &Endpoint) -> u64 {
    udp_counter(e, |d| match d {
        tagmatch::DeviceStats::Udp(u) => Some(u.sock.tx_datagrams),
        _ => None,
    })
}

/// System calls a UDP endpoint's sockets made to send so far.
pub fn udp_send_calls(e: &Endpoint) -> u64 {
    udp_counter(e, |d| match d {
        tagmatch::DeviceStats::Udp(u) => Some(u.sock.send_calls),
        _ => None,
    })
}

/// `poll(2)` calls (blocking waits) of a UDP endpoint's sockets so far.
pub fn udp_poll_calls(e: &Endpoint) -> u64 {
    udp_counter(e, |d| match d {
        tagmatch::DeviceStats::Udp(u) => Some(u.sock.poll_calls),
        _ => None,
    })
}

/// `n` UDP peers of `a`, each having exchanged a message both ways with it, and every
/// frame of `a`'s acknowledged (nothing of `a`'s in flight): the peers, `a`'s handle of
/// each, and each one's handle of `a`.
pub fn idle_fan_out(
    a: &mut Endpoint,
    n: usize,
) -> (Vec<Endpoint>, Vec<tagmatch::Peer>, Vec<tagmatch::Peer>) {
    let mut peers: Vec<Endpoint> = (0..n).map(|_| udp_pair().0).collect();
    let to: Vec<tagmatch::Peer> = peers
        .iter()
        .map(|p| a.insert_peer(&p.address()).unwrap())
        .collect();
    let from: Vec<tagmatch::Peer> = peers
        .iter_mut()
        .map(|p| p.insert_peer(&a.address()).unwrap())
        .collect();
    for i in 0..n {
        let s = a.tsend(to[i], 1, vec![1u8; 8]).unwrap();
        let r = peers[i].trecv(from[i], 1, 8).unwrap();
        peers[i].wait_with(r, &mut [&mut *a]).unwrap();
        a.wait_with(s, &mut [&mut peers[i]]).unwrap();
        let s = peers[i].tsend(from[i], 2, vec![2u8; 8]).unwrap();
        let r = a.trecv(to[i], 2, 8).unwrap();
        a.wait_with(r, &mut [&mut peers[i]]).unwrap();
        peers[i].wait_with(s, &mut [&mut *a]).unwrap();
    }
    // Until every frame of a's is acknowledged (the peers' acknowledgements need their
    // progress).
    let acked = (0..4000).any(|_| {
        for p in peers.iter_mut() {
            p.progress().unwrap();
        }
        a.flush(Duration::from_millis(1)).unwrap()
    });
    assert!(acked, "a's frames acknowledged");
    a.progress().unwrap();
    (peers, to, from)
}

/// Each of `peers` receives `a`'s message with `tag` (8 bytes of `tag`), then `a`'s
/// `sends` complete.
pub fn finish_fan_out(
    a: &mut Endpoint,
    peers: &mut [Endpoint],
    from: &[tagmatch::Peer],
    sends: Vec<Request>,
    tag: u64,
) {
    for (p, &f) in peers.iter_mut().zip(from) {
        let r = p.trecv(f, tag, 8).unwrap();
        let c = p.wait_with(r, &mut [&mut *a]).unwrap();
        assert_eq!(c.data, vec![tag as u8; 8]);
    }
    for s in sends {
        let mut others: Vec<&mut Endpoint> = peers.iter_mut().collect();
        a.wait_with(s, &mut others).unwrap();
    }
}

/// The facade's paths the review-15 tests compare: `"fast"`, `"proto"` (`mem` with the
/// fast path on / off), `"mixed"` (a sender without the fast path into a fast-path
/// receiver), `"udp"`.
pub const PATHS: [&str; 4] = ["fast", "proto", "mixed", "udp"];

/// A pair of endpoints on path `kind` (one of [`PATHS`]) and each one's handle of the
/// other; the fabric of the in-process paths is returned to keep it alive.
pub fn pair(
    kind: &str,
) -> (
    Endpoint,
    Endpoint,
    tagmatch::Peer,
    tagmatch::Peer,
    Option<MemFabric>,
) {
    let (mut a, mut b, f) = match kind {
        "udp" => {
            let (a, b) = udp_pair();
            (a, b, None)
        }
        _ => {
            let f = MemFabric::new();
            let a = ep(&f, kind == "fast");
            let b = ep(&f, kind != "proto");
            (a, b, Some(f))
        }
    };
    let ab = a.insert_peer(&b.address()).unwrap();
    let ba = b.insert_peer(&a.address()).unwrap();
    (a, b, ab, ba, f)
}

/// One small message each way between `a` and `b` (`pb`: `a`'s handle of `b`, `pa`: `b`'s
/// of `a`), each waited for: both handshakes done, so each side knows the other's features
/// (RDMA read, for the long-read sizes) before the sends a test is about.
pub fn introduce(a: &mut Endpoint, b: &mut Endpoint, pb: tagmatch::Peer, pa: tagmatch::Peer) {
    let r = b.recv(pa, 8).unwrap();
    let s = a.send(pb, vec![0; 8]).unwrap();
    b.wait_with(r, &mut [&mut *a]).unwrap();
    a.wait_with(s, &mut [&mut *b]).unwrap();
    let r = a.recv(pb, 8).unwrap();
    let s = b.send(pa, vec![0; 8]).unwrap();
    a.wait_with(r, &mut [&mut *b]).unwrap();
    b.wait_with(s, &mut [&mut *a]).unwrap();
}

//! Tagged messages over `tagmatch_transport::verbs::TaggedTransport` (feature `verbs`):
//! eager and rendezvous between two transports in one process and between two processes,
//! unexpected messages, wildcards, ordering, truncation, cancel, many outstanding receives,
//! and (on ConnectX-class hardware only) the tag-matching offload.
//!
//! Skipped with a reason when there is no RDMA device, unless
//! `TAGMATCH_REQUIRE_RDMA_DEVICE=1` (vm-test sets it). The hardware test additionally needs
//! a device with `tm_caps.max_num_tags > 0` (`TAGMATCH_REQUIRE_TM_DEVICE=1` makes its skip a
//! failure).
#![cfg(feature = "verbs")]

mod verbs_util;

use std::io::Read as _;
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tagmatch_engine::offload::MatchPath;
use tagmatch_engine::{Envelope, RecvSpec};
use tagmatch_transport::verbs::{
    Completion, Context, Mode, RecvError, RecvId, SendId, TaggedTransport, TmPolicy,
    TransportConfig,
};
use verbs_util::*;

/// Summary of a receive completion: (id, envelope, bytes, path).
fn recv_of(c: &Completion) -> Option<(RecvId, Envelope, Vec<u8>, MatchPath)> {
    match c {
        Completion::Recv {
            id,
            env,
            len,
            buf,
            path,
            result: Ok(()),
        } => Some((*id, *env, buf.as_slice()[..*len].to_vec(), *path)),
        Completion::Recv { result, .. } => panic!("receive failed: {result:?}"),
        _ => None,
    }
}

fn sends_ok(cs: &[Completion]) -> Vec<SendId> {
    cs.iter()
        .filter_map(|c| match c {
            Completion::Send { id, result, .. } => {
                assert_eq!(result, &Ok(()), "send {id:?}");
                Some(*id)
            }
            _ => None,
        })
        .collect()
}

fn sw(rank: u32) -> TransportConfig {
    TransportConfig {
        tm: TmPolicy::Software,
        ..cfg(rank)
    }
}

#[test]
fn loopback_eager_and_rendezvous() {
    let Some(ctx) = open_or_skip("loopback_eager_and_rendezvous") else {
        return;
    };
    let (mut a, mut b) = pair(&ctx, cfg(0), cfg(1));
    let (mut ca, mut cb) = (Vec::new(), Vec::new());

    // Expected eager: the receive is posted first.
    let r1 = b
        .post_recv(RecvSpec::exact(0, 0, 5), b.alloc_buf(4096).unwrap())
        .unwrap();
    let s1 = a.send_eager(1, 0, 5, &pattern(1, 1000)).unwrap();
    // Unexpected rendezvous: 256 KiB sent before any receive is posted.
    const RNDV: usize = 256 * 1024;
    let mut src = a.alloc_buf(RNDV).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(2, RNDV));
    let s2 = a.send_rndv(1, 0, 6, src).map_err(|(e, _)| e).unwrap();
    drive(&mut a, &mut b, &mut ca, &mut cb, "eager", |_, cb| {
        !cb.is_empty()
    });
    let (id, env, data, _) = recv_of(&cb[0]).expect("recv");
    assert_eq!((id, env), (r1, Envelope::new(0, 0, 5)));
    assert_eq!(data, pattern(1, 1000));
    // Let the RNDV request arrive and become unexpected, then post for it.
    let deadline = Instant::now() + TIMEOUT;
    while b.offload_counters().unexpected == 0 {
        b.progress().unwrap();
        assert!(
            Instant::now() < deadline,
            "rendezvous request never arrived"
        );
    }
    let r2 = b
        .post_recv(
            RecvSpec::new(0, None, None),
            b.alloc_buf(RNDV + 100).unwrap(),
        )
        .unwrap();
    drive(&mut a, &mut b, &mut ca, &mut cb, "rendezvous", |ca, cb| {
        cb.len() == 2 && ca.len() == 2
    });
    let (id, env, data, path) = recv_of(&cb[1]).expect("recv");
    assert_eq!((id, env.tag, env.src), (r2, 6, 0));
    assert_eq!(path, MatchPath::SwPost);
    assert!(data == pattern(2, RNDV), "rendezvous data differs");
    assert_eq!(sends_ok(&ca), [s1, s2]);
    // The rendezvous source came back with the FIN.
    let back = ca.iter().find_map(|c| match c {
        Completion::Send {
            id, buf: Some(b), ..
        } if *id == s2 => Some(b.len()),
        _ => None,
    });
    assert_eq!(back, Some(RNDV));
    if matches!(b.mode(), Mode::Software { .. }) {
        assert_eq!(b.counters().sw_reads, 1);
        assert_eq!(b.counters().fins_sent, 1);
    }
    assert_eq!(a.counters().fins_received, 1);
    assert!(
        a.errors().is_empty() && b.errors().is_empty(),
        "{:?} {:?}",
        a.errors(),
        b.errors()
    );

    // Non-overtaking: same envelope, posted order = arrival order; wildcard source.
    let ids: Vec<RecvId> = (0..3)
        .map(|_| {
            b.post_recv(RecvSpec::new(0, None, Some(9)), b.alloc_buf(64).unwrap())
                .unwrap()
        })
        .collect();
    for i in 0..3u8 {
        a.send_eager(1, 0, 9, &[i; 10]).unwrap();
    }
    drive(&mut a, &mut b, &mut ca, &mut cb, "ordered", |_, cb| {
        cb.len() == 5
    });
    for (k, c) in cb[2..].iter().enumerate() {
        let (id, _, data, _) = recv_of(c).expect("recv");
        assert_eq!((id, data), (ids[k], vec![k as u8; 10]));
    }
    say(&format!(
        "{}: loopback eager + rendezvous {RNDV} B ok ({:?})",
        ctx.name(),
        b.mode()
    ));
}

#[test]
fn truncation_is_reported() {
    let Some(ctx) = open_or_skip("truncation_is_reported") else {
        return;
    };
    let (mut a, mut b) = pair(&ctx, sw(0), sw(1));
    let (mut ca, mut cb) = (Vec::new(), Vec::new());
    b.post_recv(RecvSpec::exact(0, 0, 1), b.alloc_buf(16).unwrap())
        .unwrap();
    a.send_eager(1, 0, 1, &pattern(3, 100)).unwrap();
    b.post_recv(RecvSpec::exact(0, 0, 2), b.alloc_buf(1024).unwrap())
        .unwrap();
    let src = a.alloc_buf(8192).unwrap();
    a.send_rndv(1, 0, 2, src).map_err(|(e, _)| e).unwrap();
    drive(&mut a, &mut b, &mut ca, &mut cb, "truncation", |ca, cb| {
        cb.len() == 2 && ca.len() == 2
    });
    let results: Vec<_> = cb
        .iter()
        .map(|c| match c {
            Completion::Recv {
                len, buf, result, ..
            } => (*len, buf.as_slice()[..*len].to_vec(), result.clone()),
            c => panic!("unexpected {c:?}"),
        })
        .collect();
    assert_eq!(results[0].0, 16);
    assert_eq!(results[0].1, pattern(3, 16));
    assert_eq!(results[0].2, Err(RecvError::Truncated { len: 100 }));
    assert_eq!(results[1].2, Err(RecvError::Truncated { len: 8192 }));
    // The sender got its region back all the same (FIN without a read).
    assert_eq!(sends_ok(&ca).len(), 2);
}

#[test]
fn cancel_pending_and_matched_receives() {
    let Some(ctx) = open_or_skip("cancel_pending_and_matched_receives") else {
        return;
    };
    let (mut a, mut b) = pair(&ctx, cfg(0), cfg(1));
    let (mut ca, mut cb) = (Vec::new(), Vec::new());
    // Cancel of a pending receive hands the buffer back; a second cancel is an error.
    let r = b
        .post_recv(RecvSpec::exact(0, 0, 7), b.alloc_buf(128).unwrap())
        .unwrap();
    b.cancel(r).unwrap();
    drive(&mut a, &mut b, &mut ca, &mut cb, "cancel", |_, cb| {
        !cb.is_empty()
    });
    assert!(matches!(&cb[0], Completion::Cancelled { id, buf } if *id == r && buf.len() == 128));
    assert!(b.cancel(r).is_err());
    // The message for the cancelled receive is unexpected; the next post takes it.
    a.send_eager(1, 0, 7, b"late").unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while b.offload_counters().unexpected == 0 {
        b.progress().unwrap();
        assert!(Instant::now() < deadline, "message never arrived");
    }
    let r2 = b
        .post_recv(RecvSpec::exact(0, 0, 7), b.alloc_buf(128).unwrap())
        .unwrap();
    drive(
        &mut a,
        &mut b,
        &mut ca,
        &mut cb,
        "post after cancel",
        |_, cb| cb.len() == 2,
    );
    let (id, _, data, path) = recv_of(&cb[1]).unwrap();
    assert_eq!(
        (id, data.as_slice(), path),
        (r2, &b"late"[..], MatchPath::SwPost)
    );
    assert!(
        b.cancel(r2).is_err(),
        "a matched receive cannot be cancelled"
    );
    // Of two receives for the same envelope, cancelling the first sends the message to
    // the second.
    let first = b
        .post_recv(RecvSpec::exact(0, 0, 8), b.alloc_buf(64).unwrap())
        .unwrap();
    let second = b
        .post_recv(RecvSpec::exact(0, 0, 8), b.alloc_buf(64).unwrap())
        .unwrap();
    b.cancel(first).unwrap();
    a.send_eager(1, 0, 8, b"second").unwrap();
    drive(
        &mut a,
        &mut b,
        &mut ca,
        &mut cb,
        "cancel first of two",
        |_, cb| {
            cb.iter()
                .filter(|c| matches!(c, Completion::Recv { .. }))
                .count()
                == 2
                && cb
                    .iter()
                    .filter(|c| matches!(c, Completion::Cancelled { .. }))
                    .count()
                    == 2
        },
    );
    assert!(cb
        .iter()
        .any(|c| matches!(c, Completion::Cancelled { id, .. } if *id == first)));
    let got: Vec<_> = cb.iter().filter_map(recv_of).collect();
    assert_eq!((got[1].0, got[1].2.as_slice()), (second, &b"second"[..]));
    assert!(!cb
        .iter()
        .any(|c| matches!(c, Completion::CancelFailed { .. })));
}

#[test]
fn many_outstanding_receives() {
    let Some(ctx) = open_or_skip("many_outstanding_receives") else {
        return;
    };
    const N: u64 = 600; // more than the SRQ depth (256): receive buffers are recycled
    let (mut a, mut b) = pair(&ctx, cfg(0), cfg(1));
    let mut ids = Vec::new();
    for t in 0..N {
        let comm = (t % 3) as u32;
        ids.push(
            b.post_recv(RecvSpec::exact(comm, 0, t), b.alloc_buf(32).unwrap())
                .unwrap(),
        );
    }
    assert_eq!(b.offload_counters().matched_post, 0);
    let (mut ca, mut cb) = (Vec::new(), Vec::new());
    // Sent in reverse tag order, a few at a time (send slots are bounded).
    let mut next = N;
    let deadline = Instant::now() + TIMEOUT * 2;
    while cb.len() < N as usize {
        while next > 0 {
            let t = next - 1;
            match a.send_eager(1, (t % 3) as u32, t, &t.to_le_bytes()) {
                Ok(_) => next -= 1,
                Err(tagmatch_transport::verbs::Error::Busy) => break,
                Err(e) => panic!("send {t}: {e}"),
            }
        }
        a.progress().unwrap();
        b.progress().unwrap();
        while let Some(c) = a.poll_completion() {
            ca.push(c);
        }
        while let Some(c) = b.poll_completion() {
            cb.push(c);
        }
        assert!(
            Instant::now() < deadline,
            "{} of {N} receives completed",
            cb.len()
        );
    }
    let mut seen = vec![false; N as usize];
    for c in &cb {
        let (id, env, data, _) = recv_of(c).expect("recv");
        let t = env.tag;
        assert_eq!(env.comm, (t % 3) as u32);
        assert_eq!(id, ids[t as usize], "tag {t} matched the wrong receive");
        assert_eq!(data, t.to_le_bytes());
        assert!(!seen[t as usize]);
        seen[t as usize] = true;
    }
    drive(
        &mut a,
        &mut b,
        &mut ca,
        &mut cb,
        "send completions",
        |ca, _| ca.len() == N as usize,
    );
    assert_eq!(sends_ok(&ca).len(), N as usize);
    assert_eq!(b.offload_counters().order_violations, 0);
    say(&format!(
        "{}: {N} outstanding receives matched out of order",
        ctx.name()
    ));
}

const PEER_ENV: &str = "TAGMATCH_VERBS_TAGGED_PEER_PORT";
const RNDV2: usize = 1 << 20;

fn accept_with_timeout(l: &TcpListener, child: &mut std::process::Child) -> TcpStream {
    l.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).unwrap();
                return s;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("peer process exited before connecting: {status}");
                }
                assert!(Instant::now() < deadline, "peer never connected");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Eager and rendezvous tagged messages between two processes: this test re-runs its own
/// binary as the receiving peer (`peer_receiver`); the side channel is TCP on 127.0.0.1.
#[test]
fn two_process_eager_and_rendezvous() {
    let Some(ctx) = open_or_skip("two_process_eager_and_rendezvous") else {
        return;
    };
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "peer_receiver",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PEER_ENV, port.to_string())
        .env("TAGMATCH_RDMA_DEVICE", ctx.name())
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn peer");
    let mut child = Child(child);
    let mut side = accept_with_timeout(&l, &mut child.0);
    let mut t = TaggedTransport::new(&ctx, cfg(0)).unwrap();
    assert_eq!(t.connect(&mut side).unwrap(), 1);

    let ack = t
        .post_recv(RecvSpec::exact(0, 1, 999), t.alloc_buf(64).unwrap())
        .unwrap();
    let s1 = t.send_eager(1, 2, 100, &pattern(11, 3000)).unwrap();
    let mut src = t.alloc_buf(RNDV2).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(12, RNDV2));
    let s2 = t.send_rndv(1, 2, 200, src).map_err(|(e, _)| e).unwrap();
    let got = collect(&mut t, 3, "two-process sends and ack");
    let mut ack_seen = false;
    for c in &got {
        match c {
            Completion::Recv {
                id,
                env,
                len,
                buf,
                result,
                ..
            } => {
                assert_eq!(result, &Ok(()));
                assert_eq!((*id, env.src, env.tag), (ack, 1, 999));
                assert_eq!(&buf.as_slice()[..*len], b"ok 3000 1048576");
                ack_seen = true;
            }
            Completion::Send { id, buf, result } => {
                assert_eq!(result, &Ok(()));
                assert!(
                    *id == s1 && buf.is_none()
                        || *id == s2 && buf.as_ref().is_some_and(|b| b.len() == RNDV2)
                );
            }
            c => panic!("unexpected {c:?}"),
        }
    }
    assert!(ack_seen);
    drop(side); // the peer waits for EOF before tearing its QP down
    let status = child.0.wait().unwrap();
    assert!(status.success(), "peer process failed: {status}");
    say(&format!(
        "{}: two processes: eager 3000 B + rendezvous {RNDV2} B + ack ok ({:?})",
        ctx.name(),
        t.mode()
    ));
}

/// The receiving side of `two_process_eager_and_rendezvous` (only when spawned by it).
#[test]
#[ignore = "helper process, spawned by two_process_eager_and_rendezvous"]
fn peer_receiver() {
    let Ok(port) = std::env::var(PEER_ENV) else {
        return;
    };
    let ctx = Context::open(None).expect("peer: open device");
    let mut side = TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
    let mut t = TaggedTransport::new(&ctx, cfg(1)).unwrap();
    assert_eq!(t.connect(&mut side).unwrap(), 0);
    // The eager receive is posted up front; the rendezvous one only after the eager
    // message completed, so the request may well be unexpected by then.
    let r1 = t
        .post_recv(RecvSpec::exact(2, 0, 100), t.alloc_buf(4096).unwrap())
        .unwrap();
    let c = collect(&mut t, 1, "peer eager");
    let (id, env, data, _) = recv_of(&c[0]).unwrap();
    assert_eq!((id, env), (r1, Envelope::new(2, 0, 100)));
    assert!(data == pattern(11, 3000));
    let r2 = t
        .post_recv(RecvSpec::new(2, Some(0), None), t.alloc_buf(RNDV2).unwrap())
        .unwrap();
    let c = collect(&mut t, 1, "peer rendezvous");
    let (id, env, data, _) = recv_of(&c[0]).unwrap();
    assert_eq!((id, env.tag), (r2, 200));
    assert!(data == pattern(12, RNDV2), "rendezvous data differs");
    let msg = format!("ok {} {}", 3000, data.len());
    t.send_eager(0, 0, 999, msg.as_bytes()).unwrap();
    let c = collect(&mut t, 1, "peer ack send");
    assert!(matches!(&c[0], Completion::Send { result: Ok(()), .. }));
    // Keep the QP until the parent has everything (it closes the side channel).
    let _ = side.read(&mut [0u8; 1]);
    say("peer_receiver: done");
}

/// The tag-matching offload on hardware that has it (ConnectX-5 and later): receives
/// are offloaded, eager and rendezvous messages are matched by the TM-SRQ, and a cancel of
/// an offloaded receive goes through a DEL.
#[test]
fn tm_offload_on_hardware() {
    let Some(ctx) = open_or_skip("tm_offload_on_hardware") else {
        return;
    };
    let tm = ctx.caps().tm;
    if !tm.rc_tm() {
        skip(
            "tm_offload_on_hardware",
            &format!(
                "needs a device with tag matching (tm_caps.max_num_tags > 0 with RC); {} has \
                 max_num_tags = {}",
                ctx.name(),
                tm.max_num_tags
            ),
            REQUIRE_TM_ENV,
        );
        return;
    }
    let (mut a, mut b) = pair(&ctx, cfg(0), cfg(1));
    assert!(matches!(b.mode(), Mode::Hardware { .. }), "{:?}", b.mode());
    let (mut ca, mut cb) = (Vec::new(), Vec::new());
    let r1 = b
        .post_recv(RecvSpec::exact(0, 0, 1), b.alloc_buf(4096).unwrap())
        .unwrap();
    assert_eq!(b.is_offloaded(r1), Some(true));
    a.send_eager(1, 0, 1, &pattern(21, 2000)).unwrap();
    const RNDV: usize = 64 * 1024;
    let r2 = b
        .post_recv(RecvSpec::exact(0, 0, 2), b.alloc_buf(RNDV).unwrap())
        .unwrap();
    let mut src = a.alloc_buf(RNDV).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(22, RNDV));
    a.send_rndv(1, 0, 2, src).map_err(|(e, _)| e).unwrap();
    drive(
        &mut a,
        &mut b,
        &mut ca,
        &mut cb,
        "hardware matches",
        |ca, cb| cb.len() == 2 && ca.len() == 2,
    );
    let got: Vec<_> = cb.iter().filter_map(recv_of).collect();
    assert_eq!((got[0].0, got[0].3), (r1, MatchPath::Hw));
    assert_eq!(got[0].2, pattern(21, 2000));
    assert_eq!(got[1].0, r2);
    assert!(got[1].2 == pattern(22, RNDV));
    let r3 = b
        .post_recv(RecvSpec::exact(0, 0, 3), b.alloc_buf(64).unwrap())
        .unwrap();
    assert_eq!(b.is_offloaded(r3), Some(true));
    b.cancel(r3).unwrap();
    drive(
        &mut a,
        &mut b,
        &mut ca,
        &mut cb,
        "hardware cancel",
        |_, cb| cb.len() == 3,
    );
    assert!(matches!(&cb[2], Completion::Cancelled { id, .. } if *id == r3));
    let c = b.offload_counters();
    assert!(
        c.offloaded >= 3 && c.matched_hw >= 1 && c.order_violations == 0,
        "{c:?}"
    );
}

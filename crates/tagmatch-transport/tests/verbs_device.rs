//! Device-level tests of `tagmatch_transport::verbs` (feature `verbs`): capability query,
//! TM-SRQ creation (or its refusal and the software fallback), MR bounds (checked by Rust
//! when an SGE or RVH is made, and by the device when a peer reads outside a
//! registration). Skipped with a reason when there is no RDMA device, unless
//! `TAGMATCH_REQUIRE_RDMA_DEVICE=1` (vm-test sets it).
#![cfg(feature = "verbs")]

mod verbs_util;

use tagmatch_engine::offload::MatchPath;
use tagmatch_engine::RecvSpec;
use tagmatch_transport::verbs::{
    device_names, Access, Completion, Cq, Error, Mode, RecvError, RemoteBuf, Srq, SrqKind,
    TaggedTransport, TmPolicy, TransportConfig,
};
use verbs_util::*;

#[test]
fn capability_query() {
    let Some(ctx) = open_or_skip("capability_query") else {
        return;
    };
    let names = device_names().expect("device list");
    assert!(names.iter().any(|n| n == ctx.name()), "{names:?}");
    let caps = ctx.caps().clone();
    say(&format!("verbs caps: {caps:?}"));
    assert_eq!(caps.name, ctx.name());
    assert!(caps.max_qp_wr > 0, "max_qp_wr");
    assert!(
        caps.max_srq_wr > 0,
        "max_srq_wr (the transport needs an SRQ)"
    );
    assert!(caps.max_mr_size > 0, "max_mr_size");
    assert!(caps.max_sge > 0, "max_sge");
    assert!(
        [256, 512, 1024, 2048, 4096].contains(&caps.active_mtu),
        "active_mtu {}",
        caps.active_mtu
    );
    if caps.ethernet {
        assert_ne!(caps.gid, [0; 16], "RoCE needs a GID");
    } else {
        assert_ne!(caps.lid, 0, "InfiniBand needs a LID");
    }
    // tm_caps are consistent: no tags, no RC tag matching.
    assert_eq!(
        caps.tm.rc_tm(),
        caps.tm.max_num_tags > 0 && caps.tm.flags & 1 != 0,
        "{:?}",
        caps.tm
    );
    let model = caps.tm.to_model();
    assert_eq!(model.max_num_tags, caps.tm.max_num_tags);
    // A second open of the same device reports the same capabilities.
    let again = tagmatch_transport::verbs::Context::open(Some(ctx.name())).expect("reopen");
    assert_eq!(again.caps(), &caps);
    // Unknown device names are an error, not a panic.
    assert!(matches!(
        tagmatch_transport::verbs::Context::open(Some("no-such-device-xyz")),
        Err(Error::NoDevice(_))
    ));
}

#[test]
fn tm_srq_creation_or_software_fallback() {
    let Some(ctx) = open_or_skip("tm_srq_creation_or_software_fallback") else {
        return;
    };
    let tm = ctx.caps().tm;
    let pd = ctx.alloc_pd().expect("pd");
    // The TM-SRQ completes on an extended CQ with TM info; a device without tag matching
    // may refuse that CQ already, so then the SRQ itself is tried on a basic CQ.
    let cq = match Cq::new_ex(&ctx, 64, true) {
        Ok(cq) => cq,
        Err(e) => {
            assert!(!tm.rc_tm(), "a TM device refused the TM CQ: {e}");
            say(&format!(
                "{}: extended CQ with TM info refused: {e}",
                ctx.name()
            ));
            Cq::new(&ctx, 64).expect("basic CQ")
        }
    };
    let direct = Srq::tm(&pd, &cq, 64, 16, 34).map_err(|e| e.to_string());
    if tm.rc_tm() {
        let srq = direct.expect("a device reporting tag matching creates a TM-SRQ");
        assert_eq!(
            srq.kind(),
            SrqKind::Tm {
                max_num_tags: 16,
                max_ops: 34
            }
        );
    } else {
        let err = direct.expect_err("a device without tag matching must refuse IBV_SRQT_TM");
        assert!(err.contains("ibv_create_srq_ex(TM)"), "{err}");
        say(&format!(
            "{}: TM-SRQ refused as expected (max_num_tags = {}): {err}",
            ctx.name(),
            tm.max_num_tags
        ));
    }
    assert_eq!(
        Srq::basic(&pd, 64).expect("basic SRQ").kind(),
        SrqKind::Basic
    );

    // The transport: `Attempt` tries the TM-SRQ and reports the refusal; `Auto` goes by the
    // capabilities; both fall back to software matching over a basic SRQ.
    let attempt = TaggedTransport::new(
        &ctx,
        TransportConfig {
            tm: TmPolicy::Attempt,
            ..cfg(0)
        },
    )
    .expect("transport (attempt)");
    let auto = TaggedTransport::new(&ctx, cfg(0)).expect("transport (auto)");
    say(&format!(
        "{}: attempt -> {:?}; auto -> {:?}",
        ctx.name(),
        attempt.mode(),
        auto.mode()
    ));
    if tm.rc_tm() {
        assert!(matches!(attempt.mode(), Mode::Hardware { .. }));
        assert!(matches!(auto.mode(), Mode::Hardware { .. }));
    } else {
        match attempt.mode() {
            Mode::Software { reason } => assert!(
                reason.contains("refused the TM-SRQ") && reason.contains("ibv_create_"),
                "{reason}"
            ),
            m => panic!("expected the software fallback, got {m:?}"),
        }
        match auto.mode() {
            Mode::Software { reason } => assert!(reason.contains("max_num_tags"), "{reason}"),
            m => panic!("expected the software fallback, got {m:?}"),
        }
    }
    drop((attempt, auto));

    // The fallback carries tagged messages: one eager message, matched in software.
    let sw = TransportConfig {
        tm: TmPolicy::Software,
        ..cfg(0)
    };
    let (mut a, mut b) = pair(&ctx, sw, TransportConfig { rank: 1, ..sw });
    assert!(matches!(b.mode(), Mode::Software { .. }));
    let buf = b.alloc_buf(64).expect("buf");
    b.post_recv(RecvSpec::exact(3, 0, 42), buf).expect("post");
    a.send_eager(1, 3, 42, b"fallback").expect("send");
    let got = collect(&mut b, 1, "fallback eager");
    match &got[0] {
        Completion::Recv {
            env,
            len,
            buf,
            path,
            result,
            ..
        } => {
            assert_eq!(result, &Ok(()));
            assert_eq!((env.comm, env.src, env.tag), (3, 0, 42));
            assert_eq!(&buf.as_slice()[..*len], b"fallback");
            assert_eq!(*path, MatchPath::SwArrival);
        }
        c => panic!("unexpected {c:?}"),
    }
}

#[test]
fn mr_bounds_are_enforced() {
    let Some(ctx) = open_or_skip("mr_bounds_are_enforced") else {
        return;
    };
    // Rust-side checks: SGEs and remote descriptors never leave the registration.
    let pd = ctx.alloc_pd().expect("pd");
    let mut caller = vec![7u8; 4096];
    {
        let mr = pd
            .register(&mut caller[1024..3072], Access::LOCAL_WRITE)
            .expect("register caller buffer");
        assert_eq!(mr.len(), 2048);
        assert!(mr.sge(0, 2048).is_ok());
        assert!(mr.sge(2047, 1).is_ok());
        assert!(matches!(
            mr.sge(2047, 2),
            Err(Error::OutOfBounds { region: 2048, .. })
        ));
        assert!(matches!(
            mr.sge(usize::MAX, 2),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(mr.remote(1, 2048).is_err());
    }
    assert!(
        caller.iter().all(|&b| b == 7),
        "registration must not touch the bytes"
    );
    let owned = pd.alloc_mr(4096, Access::ALL).expect("owned mr");
    assert!(owned.remote(0, 4096).is_ok());
    assert!(matches!(
        owned.remote(4000, 200),
        Err(Error::OutOfBounds { region: 4096, .. })
    ));

    // Device-side checks: a rendezvous whose RVH names memory beyond the sender's
    // registration must fail the receiver's RDMA read (first a valid one on the same path).
    let sw = TransportConfig {
        tm: TmPolicy::Software,
        ..cfg(0)
    };
    let (mut a, mut b) = pair(&ctx, sw, TransportConfig { rank: 1, ..sw });
    let mut src = a.alloc_buf(4096).expect("src");
    src.as_mut_slice().copy_from_slice(&pattern(5, 4096));
    let inside = src.remote(0, 4096).expect("remote");
    a.send_rndv_unchecked(1, 0, 1, inside).expect("valid rndv");
    b.post_recv(RecvSpec::exact(0, 0, 1), b.alloc_buf(16384).unwrap())
        .expect("post");
    let got = collect(&mut b, 1, "valid rendezvous");
    match &got[0] {
        Completion::Recv {
            len, buf, result, ..
        } => {
            assert_eq!(result, &Ok(()));
            assert_eq!(*len, 4096);
            assert_eq!(&buf.as_slice()[..4096], &pattern(5, 4096)[..]);
        }
        c => panic!("unexpected {c:?}"),
    }
    let beyond = RemoteBuf {
        len: 8192,
        ..inside
    };
    a.send_rndv_unchecked(1, 0, 2, beyond).expect("forged rndv");
    b.post_recv(RecvSpec::exact(0, 0, 2), b.alloc_buf(16384).unwrap())
        .expect("post");
    let got = collect(&mut b, 1, "out-of-bounds rendezvous");
    match &got[0] {
        Completion::Recv { result, .. } => match result {
            Err(RecvError::Wc { status, text }) => {
                assert_ne!(*status, 0);
                say(&format!(
                    "{}: read of 8192 bytes from a 4096-byte MR failed: {text} ({status})",
                    ctx.name()
                ));
            }
            r => panic!("the device let a peer read outside the MR: {r:?}"),
        },
        c => panic!("unexpected {c:?}"),
    }
    drop(src);
}

#[test]
fn children_keep_their_parents_alive() {
    let Some(ctx) = open_or_skip("children_keep_their_parents_alive") else {
        return;
    };
    use tagmatch_transport::verbs::{Qp, QpEndpoint};
    let pd = ctx.alloc_pd().expect("pd");
    let cq = Cq::new(&ctx, 16).expect("cq");
    let srq = Srq::basic(&pd, 16).expect("srq");
    let mr = pd.alloc_mr(256, Access::LOCAL_WRITE).expect("mr");
    let qp = Qp::rc(
        &pd,
        &cq,
        &cq,
        Some(&srq),
        tagmatch_transport::verbs::QpCaps {
            max_send_wr: 4,
            max_recv_wr: 0,
            max_rd_atomic: 1,
        },
    )
    .expect("qp");
    let name = ctx.name().to_owned();
    // Drop the parents first: every child holds what it depends on, so destruction still
    // runs QP -> SRQ -> CQ -> MR -> PD -> context when the last handle goes.
    drop((ctx, pd, cq, srq));
    assert!(mr.sge(0, 256).is_ok());
    let ep: QpEndpoint = qp.endpoint(0x1234);
    assert_eq!(ep.qpn, qp.qpn());
    assert_eq!(ep.psn, 0x1234);
    drop(mr);
    drop(qp);
    // A transport whose setup fails part-way releases what it created (no leak, no crash).
    let ctx = tagmatch_transport::verbs::Context::open(Some(&name)).expect("reopen");
    let bad = TaggedTransport::new(
        &ctx,
        TransportConfig {
            srq_depth: u32::MAX,
            ..cfg(0)
        },
    );
    assert!(bad.is_err(), "an SRQ of 2^32-1 entries must be refused");
    let good = TaggedTransport::new(&ctx, cfg(0)).expect("transport after a failed one");
    drop(ctx);
    assert!(good.alloc_buf(64).is_ok());
}

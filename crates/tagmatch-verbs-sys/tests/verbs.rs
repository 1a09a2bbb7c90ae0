//! Verbs integration tests against a real RDMA device (Soft-RoCE `rxe0` inside
//! `cargo xtask vm-test`, or real hardware).
//!
//! * No device: every test prints `SKIPPED <test>: <reason>` and passes, unless
//!   `TAGMATCH_REQUIRE_RDMA_DEVICE=1` (set inside the VM), which turns that into a failure.
//! * Tag-matching hardware tests need a device with `tm_caps.max_num_tags > 0` (ConnectX-5+);
//!   otherwise they are skipped, unless `TAGMATCH_REQUIRE_TM_DEVICE=1`.
//! * `TAGMATCH_RDMA_DEVICE=<name>` picks the device, `TAGMATCH_RDMA_GID_INDEX=<n>` the GID.
#![cfg(feature = "verbs")]

mod common;

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::sync::mpsc;

use common::*;
use tagmatch_verbs_sys::*;

/// Lists the devices and prints each one's capabilities, tag matching included.
#[test]
fn device_capabilities() {
    let Some(devices) = devices_or_skip("device_capabilities") else {
        return;
    };
    for dev in devices.iter() {
        let ctx = Ctx::open(dev);
        let a = &ctx.attr.orig_attr;
        let tm = ctx.tm_caps();
        // SAFETY: fw_ver is a NUL-terminated C string inside the struct.
        let fw = unsafe { std::ffi::CStr::from_ptr(a.fw_ver.as_ptr()) }.to_string_lossy();
        say(&format!(
            "{}: fw={fw} ports={} max_qp={} max_qp_wr={} max_cqe={} max_srq={} max_srq_wr={} \
             link_layer={} port_state={} active_mtu={} gid_index={}",
            ctx.name,
            a.phys_port_cnt,
            a.max_qp,
            a.max_qp_wr,
            a.max_cqe,
            a.max_srq,
            a.max_srq_wr,
            if ctx.is_ethernet() {
                "Ethernet(RoCE)"
            } else {
                "InfiniBand"
            },
            ctx.port_attr.state,
            ctx.port_attr.active_mtu,
            ctx.gid_index,
        ));
        say(&format!(
            "{}: tm_caps.max_num_tags={} max_ops={} max_sge={} max_rndv_hdr_size={} flags={:#x}",
            ctx.name, tm.max_num_tags, tm.max_ops, tm.max_sge, tm.max_rndv_hdr_size, tm.flags
        ));
        assert!(a.phys_port_cnt >= 1, "{}: no port", ctx.name);
        assert_eq!(
            ctx.port_attr.state, IBV_PORT_ACTIVE,
            "{}: port 1 is not ACTIVE",
            ctx.name
        );
    }
}

/// `ibv_create_srq_ex(IBV_SRQT_TM)` succeeds exactly when the device reports tag matching;
/// otherwise it is refused and the transport's fallback, a basic SRQ, works.
#[test]
fn tm_srq_creation_or_basic_srq_fallback() {
    let Some(ctx) = open_or_skip("tm_srq_creation_or_basic_srq_fallback") else {
        return;
    };
    let caps = ctx.tm_caps();
    let cq = cq(&ctx, 64);
    let want = ibv_tm_cap {
        max_num_tags: caps.max_num_tags.clamp(1, 64),
        max_ops: caps.max_ops.clamp(1, 16),
    };
    match tm_srq(&ctx, cq.ptr, 64, want) {
        Ok(_srq) => {
            say(&format!("{}: create_srq_ex(IBV_SRQT_TM) ok", ctx.name));
            assert!(
                caps.max_num_tags > 0,
                "{}: TM-SRQ created although tm_caps.max_num_tags = 0",
                ctx.name
            );
        }
        Err(errno) => {
            say(&format!(
                "{}: create_srq_ex(IBV_SRQT_TM) refused: errno {} ({}){}",
                ctx.name,
                errno,
                std::io::Error::from_raw_os_error(errno),
                if errno == EOPNOTSUPP {
                    " = EOPNOTSUPP"
                } else {
                    ""
                }
            ));
            assert_eq!(
                caps.max_num_tags, 0,
                "{}: device reports max_num_tags={} but refused a TM-SRQ",
                ctx.name, caps.max_num_tags
            );
            let _srq = basic_srq(&ctx, 64);
            say(&format!(
                "{}: fallback: create_srq_ex(IBV_SRQT_BASIC) ok (software tag matching)",
                ctx.name
            ));
        }
    }
}

/// `ibv_create_cq_ex` with the standard completion fields (and TM info where supported).
#[test]
fn extended_cq() {
    let Some(ctx) = open_or_skip("extended_cq") else {
        return;
    };
    let flags = u64::from(IBV_WC_STANDARD_FLAGS);
    let cq = ExtCq::new(&ctx, 64, flags).unwrap_or_else(|e| {
        panic!(
            "{}: ibv_create_cq_ex(STANDARD_FLAGS): {}",
            ctx.name,
            errno_text(e)
        )
    });
    say(&format!(
        "{}: create_cq_ex(IBV_WC_STANDARD_FLAGS) ok",
        ctx.name
    ));
    // An empty CQ polls as ENOENT.
    let mut attr = ibv_poll_cq_attr::default();
    // SAFETY: live extended CQ; start_poll returned non-zero so no end_poll is due.
    let rc = unsafe { ibv_start_poll(cq.ex, &mut attr) };
    assert_eq!(rc, ENOENT, "empty CQ: ibv_start_poll");
    drop(cq);

    let tm_flags = flags | u64::from(IBV_WC_EX_WITH_TM_INFO);
    match ExtCq::new(&ctx, 64, tm_flags) {
        Ok(_) => say(&format!("{}: create_cq_ex(WITH_TM_INFO) ok", ctx.name)),
        Err(e) => {
            say(&format!(
                "{}: create_cq_ex(WITH_TM_INFO) refused: {}",
                ctx.name,
                errno_text(e)
            ));
            assert_eq!(
                ctx.tm_caps().max_num_tags,
                0,
                "a TM-capable device must accept WITH_TM_INFO"
            );
        }
    }
}

/// Two connected RC QPs on one device.
struct Pair {
    a: Owned<ibv_qp>,
    b: Owned<ibv_qp>,
    a_cq: Owned<ibv_cq>,
    b_cq: Owned<ibv_cq>,
}

fn pair(ctx: &Ctx) -> Pair {
    let a_cq = cq(ctx, 256);
    let b_cq = cq(ctx, 256);
    let a = rc_qp(ctx, a_cq.ptr, a_cq.ptr, std::ptr::null_mut());
    let b = rc_qp(ctx, b_cq.ptr, b_cq.ptr, std::ptr::null_mut());
    let (ea, eb) = (Endpoint::of(ctx, &a), Endpoint::of(ctx, &b));
    connect(ctx, &a, &ea, &eb);
    connect(ctx, &b, &eb, &ea);
    Pair { a, b, a_cq, b_cq }
}

/// Eager and rendezvous tagged messages over RC send/recv + RDMA read, with the software
/// framing (`ibv_tmh` / `ibv_rvh`) the transport uses when the device cannot match tags.
#[test]
fn rc_loopback_eager_and_rendezvous() {
    let Some(ctx) = open_or_skip("rc_loopback_eager_and_rendezvous") else {
        return;
    };
    let p = pair(&ctx);
    const EAGER: usize = 4000;
    const RNDV: usize = 256 * 1024;

    let mut a_mr = Mr::new(&ctx, 64 * 1024 + RNDV);
    let b_mr = Mr::new(&ctx, 64 * 1024 + RNDV);
    let rndv_data = pattern(7, RNDV);
    fill(&mut a_mr, 64 * 1024, &rndv_data);

    // Eager: TMH | payload.
    let eager = pattern(3, EAGER);
    let mut msg = tmh_bytes(IBV_TMH_EAGER, 11, 0x1111_0000_0000_0001).to_vec();
    msg.extend_from_slice(&eager);
    fill(&mut a_mr, 0, &msg);
    post_recv(&p.b, 1, b_mr.sge(0, 8192));
    post_send(&p.a, 100, IBV_WR_SEND, a_mr.sge(0, msg.len()), None);
    poll_ok(&p.a_cq, IBV_WC_SEND, "eager send");
    let wc = poll_ok(&p.b_cq, IBV_WC_RECV, "eager recv");
    assert_eq!(wc.wr_id, 1);
    assert_eq!(wc.byte_len as usize, msg.len());
    let got = b_mr.read(0, msg.len());
    assert_eq!(
        parse_tmh(&got),
        (IBV_TMH_EAGER as u8, 11, 0x1111_0000_0000_0001)
    );
    assert_eq!(&got[16..], &eager[..]);

    // Rendezvous: TMH(RNDV) | RVH; the receiver RDMA-reads the data and answers FIN.
    let rts: Vec<u8> = [
        tmh_bytes(IBV_TMH_RNDV, 12, 0x2222),
        rvh_bytes(a_mr.addr() + 64 * 1024, a_mr.rkey(), RNDV as u32),
    ]
    .concat();
    fill(&mut a_mr, 0, &rts);
    post_recv(&p.b, 2, b_mr.sge(0, 8192));
    post_recv(&p.a, 3, a_mr.sge(8192, 64)); // for the FIN
    post_send(&p.a, 101, IBV_WR_SEND, a_mr.sge(0, rts.len()), None);
    poll_ok(&p.a_cq, IBV_WC_SEND, "rts send");
    let wc = poll_ok(&p.b_cq, IBV_WC_RECV, "rts recv");
    assert_eq!(wc.byte_len, 32);
    let hdr = b_mr.read(0, 32);
    let (op, app_ctx, tag) = parse_tmh(&hdr);
    assert_eq!((op, app_ctx, tag), (IBV_TMH_RNDV as u8, 12, 0x2222));
    let (va, rkey, len) = parse_rvh(&hdr[16..]);
    post_send(
        &p.b,
        200,
        IBV_WR_RDMA_READ,
        b_mr.sge(64 * 1024, len as usize),
        Some((va, rkey)),
    );
    poll_ok(&p.b_cq, IBV_WC_RDMA_READ, "rndv rdma read");
    assert!(
        b_mr.read(64 * 1024, RNDV) == rndv_data,
        "rendezvous data differs"
    );
    let mut b_mr = b_mr;
    fill(&mut b_mr, 8192, &tmh_bytes(IBV_TMH_FIN, app_ctx, tag));
    post_send(&p.b, 201, IBV_WR_SEND, b_mr.sge(8192, 16), None);
    poll_ok(&p.b_cq, IBV_WC_SEND, "fin send");
    let wc = poll_ok(&p.a_cq, IBV_WC_RECV, "fin recv");
    assert_eq!(wc.wr_id, 3);
    assert_eq!(
        parse_tmh(&a_mr.read(8192, 16)),
        (IBV_TMH_FIN as u8, 12, 0x2222)
    );
    say(&format!(
        "{}: RC loopback: eager {EAGER} B and rendezvous {RNDV} B (RDMA read + FIN) ok",
        ctx.name
    ));
}

/// Many outstanding receives on a basic SRQ, completed through an extended CQ, in order.
#[test]
fn srq_many_outstanding_receives() {
    let Some(ctx) = open_or_skip("srq_many_outstanding_receives") else {
        return;
    };
    const N: usize = 512;
    const SLOT: usize = 256;
    let max_srq_wr = ctx.attr.orig_attr.max_srq_wr.max(0) as usize;
    let n = N.min(max_srq_wr.saturating_sub(1)).max(1);
    let recv_cq = ExtCq::new(&ctx, (n + 16) as u32, u64::from(IBV_WC_STANDARD_FLAGS))
        .unwrap_or_else(|e| panic!("ibv_create_cq_ex: {}", errno_text(e)));
    let a_cq = cq(&ctx, 256);
    let b_send_cq = cq(&ctx, 16);
    let srq = basic_srq(&ctx, n as u32 + 1);
    let a = rc_qp(&ctx, a_cq.ptr, a_cq.ptr, std::ptr::null_mut());
    let b = rc_qp(&ctx, b_send_cq.ptr, recv_cq.cq.ptr, srq.ptr);
    let (ea, eb) = (Endpoint::of(&ctx, &a), Endpoint::of(&ctx, &b));
    connect(&ctx, &a, &ea, &eb);
    connect(&ctx, &b, &eb, &ea);

    let b_mr = Mr::new(&ctx, n * SLOT);
    for i in 0..n {
        post_srq_recv(&srq, i as u64, b_mr.sge(i * SLOT, SLOT));
    }
    let mut a_mr = Mr::new(&ctx, n * 64);
    for i in 0..n {
        let mut msg = tmh_bytes(IBV_TMH_EAGER, i as u32, 0xABC0_0000 + i as u64).to_vec();
        msg.extend_from_slice(&pattern(i as u8, 48));
        fill(&mut a_mr, i * 64, &msg);
    }
    // Keep at most 64 sends in flight; receives are all posted up front.
    let mut sent = 0;
    let mut send_done = 0;
    while send_done < n {
        while sent < n && sent - send_done < 64 {
            post_send(&a, sent as u64, IBV_WR_SEND, a_mr.sge(sent * 64, 64), None);
            sent += 1;
        }
        poll_ok(&a_cq, IBV_WC_SEND, "srq send");
        send_done += 1;
    }
    for i in 0..n {
        let wc = poll_ex(&recv_cq, "srq recv");
        assert_eq!(
            wc.status,
            IBV_WC_SUCCESS,
            "recv {i}: {}",
            status_str(wc.status)
        );
        assert_eq!(wc.opcode, IBV_WC_RECV);
        assert_eq!(wc.wr_id, i as u64, "SRQ receives complete in posting order");
        assert_eq!(wc.byte_len, 64);
        let got = b_mr.read(i * SLOT, 64);
        assert_eq!(
            parse_tmh(&got),
            (IBV_TMH_EAGER as u8, i as u32, 0xABC0_0000 + i as u64)
        );
        assert_eq!(&got[16..], &pattern(i as u8, 48)[..]);
    }
    say(&format!(
        "{}: {n} outstanding SRQ receives completed in order (extended CQ)",
        ctx.name
    ));
}

/// An RDMA write inside a registered region succeeds; one that runs past its end, or uses a
/// wrong rkey, fails with a remote access error.
#[test]
fn mr_bounds_are_enforced() {
    let Some(ctx) = open_or_skip("mr_bounds_are_enforced") else {
        return;
    };
    const LEN: usize = 4096;
    let mut a_mr = Mr::new(&ctx, LEN);
    let b_mr = Mr::new(&ctx, LEN);
    fill(&mut a_mr, 0, &pattern(9, 64));

    let p = pair(&ctx);
    post_send(
        &p.a,
        1,
        IBV_WR_RDMA_WRITE,
        a_mr.sge(0, 64),
        Some((b_mr.addr() + (LEN - 64) as u64, b_mr.rkey())),
    );
    poll_ok(&p.a_cq, IBV_WC_RDMA_WRITE, "in-bounds write");
    assert_eq!(b_mr.read(LEN - 64, 64), pattern(9, 64));

    // 8 bytes past the end of the remote MR.
    post_send(
        &p.a,
        2,
        IBV_WR_RDMA_WRITE,
        a_mr.sge(0, 64),
        Some((b_mr.addr() + (LEN - 56) as u64, b_mr.rkey())),
    );
    let wc = poll(&p.a_cq, "out-of-bounds write");
    say(&format!(
        "{}: RDMA write 8 B past the MR end -> {} ({})",
        ctx.name,
        wc.status,
        status_str(wc.status)
    ));
    assert_eq!(
        wc.status, IBV_WC_REM_ACCESS_ERR,
        "write past the MR must fail"
    );
    drop(p); // the QP is in the error state now

    let p = pair(&ctx);
    post_send(
        &p.a,
        3,
        IBV_WR_RDMA_WRITE,
        a_mr.sge(0, 64),
        Some((b_mr.addr(), b_mr.rkey() ^ 0x00ff_ff00)),
    );
    let wc = poll(&p.a_cq, "wrong-rkey write");
    assert_eq!(
        wc.status, IBV_WC_REM_ACCESS_ERR,
        "write with a wrong rkey must fail"
    );
}

/// Hardware tag matching (ConnectX-5+): TAG_ADD, an eager tagged send matched by the NIC
/// (`IBV_WC_TM_RECV` with `TM_MATCH`/`TM_DATA_VALID` and `ibv_wc_read_tm_info`), then cancel
/// (TAG_DEL) of a second tag, whose message then arrives unexpected.
#[test]
fn tm_offload_tagged_receive_and_cancel() {
    let Some(ctx) = open_tm_or_skip("tm_offload_tagged_receive_and_cancel") else {
        return;
    };
    let caps = ctx.tm_caps();
    let flags = u64::from(IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_TM_INFO);
    let rcq = ExtCq::new(&ctx, 256, flags)
        .unwrap_or_else(|e| panic!("create_cq_ex(WITH_TM_INFO): {}", errno_text(e)));
    let tm_cap = ibv_tm_cap {
        max_num_tags: caps.max_num_tags.min(16),
        max_ops: caps.max_ops.clamp(1, 16),
    };
    let srq = tm_srq(&ctx, rcq.cq.ptr, 64, tm_cap)
        .unwrap_or_else(|e| panic!("create_srq_ex(TM): {}", errno_text(e)));
    let a_cq = cq(&ctx, 64);
    let b_send_cq = cq(&ctx, 64);
    let a = rc_qp(&ctx, a_cq.ptr, a_cq.ptr, std::ptr::null_mut());
    let b = rc_qp(&ctx, b_send_cq.ptr, rcq.cq.ptr, srq.ptr);
    let (ea, eb) = (Endpoint::of(&ctx, &a), Endpoint::of(&ctx, &b));
    connect(&ctx, &a, &ea, &eb);
    connect(&ctx, &b, &eb, &ea);

    // Unexpected-message buffers (they receive the TMH too).
    let unexp = Mr::new(&ctx, 16 * 4096);
    for i in 0..16 {
        post_srq_recv(&srq, 1000 + i as u64, unexp.sge(i * 4096, 4096));
    }
    let tagged = Mr::new(&ctx, 2 * 4096);

    let tag_op =
        |wr_id: u64, opcode: ibv_ops_wr_opcode, handle: u32, add: Option<(u64, ibv_sge, u64)>| {
            let mut sge = add.map(|(_, s, _)| s).unwrap_or_default();
            let mut op = ibv_ops_wr {
                wr_id,
                next: std::ptr::null_mut(),
                opcode,
                flags: IBV_OPS_SIGNALED as i32,
                ..Default::default()
            };
            op.tm.handle = handle;
            if let Some((recv_wr_id, _, tag)) = add {
                op.tm.add.recv_wr_id = recv_wr_id;
                op.tm.add.sg_list = &mut sge;
                op.tm.add.num_sge = 1;
                op.tm.add.tag = tag;
                op.tm.add.mask = u64::MAX;
            }
            let mut bad = std::ptr::null_mut();
            // SAFETY: live TM-SRQ; `op` and `sge` are valid for the call.
            let rc = unsafe { ibv_post_srq_ops(srq.ptr, &mut op, &mut bad) };
            assert_eq!(rc, 0, "ibv_post_srq_ops: {}", errno_text(rc));
            op.tm.handle
        };

    // TAG_ADD 0x1234 → TM_ADD completion.
    let h1 = tag_op(
        1,
        IBV_WR_TAG_ADD,
        0,
        Some((501, tagged.sge(0, 4096), 0x1234)),
    );
    let wc = poll_ex(&rcq, "TM_ADD");
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (1, IBV_WC_TM_ADD, IBV_WC_SUCCESS)
    );

    // Eager tagged message from A: matched by the NIC into the tagged buffer.
    let mut a_mr = Mr::new(&ctx, 4096);
    let payload = pattern(5, 256);
    let msg = [&tmh_bytes(IBV_TMH_EAGER, 7, 0x1234)[..], &payload].concat();
    fill(&mut a_mr, 0, &msg);
    post_send(&a, 10, IBV_WR_SEND, a_mr.sge(0, msg.len()), None);
    poll_ok(&a_cq, IBV_WC_SEND, "tagged send");
    let mut flags_seen = 0;
    while flags_seen & IBV_WC_TM_DATA_VALID == 0 {
        let wc = poll_ex(&rcq, "TM_RECV");
        assert_eq!(
            wc.status,
            IBV_WC_SUCCESS,
            "TM_RECV: {}",
            status_str(wc.status)
        );
        assert_eq!((wc.wr_id, wc.opcode), (501, IBV_WC_TM_RECV));
        if wc.wc_flags & IBV_WC_TM_MATCH != 0 {
            let tm = wc.tm.expect("tm info");
            assert_eq!((tm.tag, tm.priv_), (0x1234, 7));
        }
        flags_seen |= wc.wc_flags;
    }
    assert!(
        flags_seen & IBV_WC_TM_MATCH != 0,
        "matched message must carry TM_MATCH"
    );
    assert_eq!(tagged.read(0, payload.len()), payload);
    let _ = h1;

    // Cancel: TAG_ADD 0x5678 then TAG_DEL it; the message then arrives unexpected.
    let h2 = tag_op(
        2,
        IBV_WR_TAG_ADD,
        0,
        Some((502, tagged.sge(4096, 4096), 0x5678)),
    );
    let wc = poll_ex(&rcq, "TM_ADD 2");
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (2, IBV_WC_TM_ADD, IBV_WC_SUCCESS)
    );
    tag_op(3, IBV_WR_TAG_DEL, h2, None);
    let wc = poll_ex(&rcq, "TM_DEL");
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (3, IBV_WC_TM_DEL, IBV_WC_SUCCESS)
    );
    let msg = [&tmh_bytes(IBV_TMH_EAGER, 8, 0x5678)[..], &payload].concat();
    fill(&mut a_mr, 0, &msg);
    post_send(&a, 11, IBV_WR_SEND, a_mr.sge(0, msg.len()), None);
    poll_ok(&a_cq, IBV_WC_SEND, "send to cancelled tag");
    let wc = poll_ex(&rcq, "unexpected recv");
    assert_eq!(wc.status, IBV_WC_SUCCESS);
    assert!(
        wc.wr_id >= 1000,
        "cancelled tag must not match (wr_id {})",
        wc.wr_id
    );
    assert!(wc.wc_flags & IBV_WC_TM_MATCH == 0);
    say(&format!(
        "{}: TM offload: matched eager receive, cancel, unexpected delivery ok",
        ctx.name
    ));
}

const PEER_ENV: &str = "TAGMATCH_VERBS_PEER";

/// The spawned peer process; killed if the test fails before waiting for it.
struct Peer {
    child: std::process::Child,
}

impl Drop for Peer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Eager and rendezvous tagged messages between two processes: this test re-runs its own
/// binary as the peer (`peer_process`), exchanging QP details over the child's stdio.
#[test]
fn two_process_eager_and_rendezvous() {
    let Some(ctx) = open_or_skip("two_process_eager_and_rendezvous") else {
        return;
    };
    let exe = std::env::current_exe().expect("current_exe");
    let child = Command::new(exe)
        .args([
            "--exact",
            "peer_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PEER_ENV, "1")
        .env(DEVICE_ENV, &ctx.name)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn peer process");
    let mut peer = Peer { child };
    let mut to_child = peer.child.stdin.take().unwrap();
    // The peer's stdout is read on a thread so every wait for it is bounded by TIMEOUT.
    let from_child = BufReader::new(peer.child.stdout.take().unwrap());
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in from_child.lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let expect_line = |marker: &str| -> String {
        loop {
            match rx.recv_timeout(TIMEOUT) {
                // libtest may print "test peer_process ... " on the same line first.
                Ok(line) => {
                    if let Some((_, rest)) = line.split_once(marker) {
                        return rest.trim().to_owned();
                    }
                }
                Err(e) => panic!("waiting for {marker} from the peer process: {e}"),
            }
        }
    };

    let scq = cq(&ctx, 64);
    let qp = rc_qp(&ctx, scq.ptr, scq.ptr, std::ptr::null_mut());
    let local = Endpoint::of(&ctx, &qp);
    let remote = Endpoint::parse(&expect_line("PEER-ENDPOINT"));
    writeln!(to_child, "{}", local.to_line()).expect("write to peer");
    connect(&ctx, &qp, &local, &remote);
    expect_line("PEER-READY");

    const RNDV: usize = 128 * 1024;
    let mut mr = Mr::new(&ctx, 8192 + RNDV);
    let rndv_data = pattern(77, RNDV);
    fill(&mut mr, 8192, &rndv_data);
    post_recv(&qp, 9, mr.sge(4096, 64)); // FIN
    let eager = [&tmh_bytes(IBV_TMH_EAGER, 1, 0xE0E0)[..], &pattern(1, 1000)].concat();
    fill(&mut mr, 0, &eager);
    post_send(&qp, 1, IBV_WR_SEND, mr.sge(0, eager.len()), None);
    poll_ok(&scq, IBV_WC_SEND, "peer eager send");
    let rts = [
        tmh_bytes(IBV_TMH_RNDV, 2, 0xD0D0),
        rvh_bytes(mr.addr() + 8192, mr.rkey(), RNDV as u32),
    ]
    .concat();
    fill(&mut mr, 2048, &rts);
    post_send(&qp, 2, IBV_WR_SEND, mr.sge(2048, rts.len()), None);
    poll_ok(&scq, IBV_WC_SEND, "peer rts send");
    let wc = poll_ok(&scq, IBV_WC_RECV, "fin from peer");
    assert_eq!(wc.wr_id, 9);
    assert_eq!(
        parse_tmh(&mr.read(4096, 16)),
        (IBV_TMH_FIN as u8, 2, 0xD0D0)
    );
    expect_line("PEER-DONE");
    drop(to_child);
    let status = peer.child.wait().expect("wait for peer");
    assert!(status.success(), "peer process failed: {status}");
    say(&format!(
        "{}: two processes: eager 1000 B + rendezvous {RNDV} B (RDMA read + FIN) ok",
        ctx.name
    ));
}

/// The peer side of `two_process_eager_and_rendezvous` (runs only when spawned by it).
#[test]
#[ignore = "helper process, spawned by two_process_eager_and_rendezvous"]
fn peer_process() {
    if std::env::var_os(PEER_ENV).is_none() {
        return;
    }
    let ctx = open_or_skip("peer_process").expect("peer needs the parent's device");
    let scq = cq(&ctx, 64);
    let qp = rc_qp(&ctx, scq.ptr, scq.ptr, std::ptr::null_mut());
    let local = Endpoint::of(&ctx, &qp);
    let mut out = std::io::stdout();
    writeln!(out, "PEER-ENDPOINT {}", local.to_line()).unwrap();
    out.flush().unwrap();
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .expect("read parent endpoint");
    let remote = Endpoint::parse(&line);
    connect(&ctx, &qp, &local, &remote);

    const RNDV: usize = 128 * 1024;
    let mut mr = Mr::new(&ctx, 8192 + RNDV);
    post_recv(&qp, 1, mr.sge(0, 2048));
    post_recv(&qp, 2, mr.sge(2048, 2048));
    writeln!(out, "PEER-READY").unwrap();
    out.flush().unwrap();

    let wc = poll_ok(&scq, IBV_WC_RECV, "eager at peer");
    assert_eq!(wc.wr_id, 1);
    let got = mr.read(0, wc.byte_len as usize);
    assert_eq!(parse_tmh(&got), (IBV_TMH_EAGER as u8, 1, 0xE0E0));
    assert_eq!(&got[16..], &pattern(1, 1000)[..]);

    let wc = poll_ok(&scq, IBV_WC_RECV, "rts at peer");
    assert_eq!((wc.wr_id, wc.byte_len), (2, 32));
    let hdr = mr.read(2048, 32);
    let (op, app_ctx, tag) = parse_tmh(&hdr);
    assert_eq!(op, IBV_TMH_RNDV as u8);
    let (va, rkey, len) = parse_rvh(&hdr[16..]);
    assert_eq!(len as usize, RNDV);
    post_send(
        &qp,
        3,
        IBV_WR_RDMA_READ,
        mr.sge(8192, RNDV),
        Some((va, rkey)),
    );
    poll_ok(&scq, IBV_WC_RDMA_READ, "rndv read at peer");
    assert!(
        mr.read(8192, RNDV) == pattern(77, RNDV),
        "rendezvous data differs"
    );
    fill(&mut mr, 4096, &tmh_bytes(IBV_TMH_FIN, app_ctx, tag));
    post_send(&qp, 4, IBV_WR_SEND, mr.sge(4096, 16), None);
    poll_ok(&scq, IBV_WC_SEND, "fin send at peer");
    writeln!(out, "PEER-DONE").unwrap();
    out.flush().unwrap();
    // Wait for the parent to close stdin so our QP outlives its FIN completion.
    let _ = std::io::stdin().read_line(&mut String::new());
}

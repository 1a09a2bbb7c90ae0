//! Helpers shared by the offload test files (`mod offload_common;` in each): a TM-SRQ
//! model with receive-queue buffers, list operations, draining, and a driver with its
//! event helpers. Each file uses a subset.
#![allow(dead_code)]

use tagmatch_engine::offload::{Driver, DriverConfig, Event, MatchPath, OffHandle, PostOutcome};
use tagmatch_engine::tm_srq::{ops_flags, Cqe, OpsWr, PostOpError, TmCaps, TmOp, TmSrq};

/// Signalled, with the unexpected count.
pub const SIG: u32 = ops_flags::SIGNALED | ops_flags::TM_SYNC;

/// A model with `tags` tags, `ops` outstanding operations, 4096-byte packets and `bufs`
/// receive-queue buffers (`wr_id` 1000, 1001, …).
pub fn srq(tags: u32, ops: u32, bufs: u64) -> TmSrq<u32> {
    let mut s = TmSrq::new(
        TmCaps {
            max_num_tags: tags,
            max_ops: ops,
            max_rndv_hdr_size: 64,
        },
        4096,
    )
    .unwrap();
    for i in 0..bufs {
        s.post_srq_recv(1000 + i);
    }
    s
}

/// Posts list operation `op` (signalled, reporting `cnt` unexpected messages).
pub fn op(s: &mut TmSrq<u32>, wr_id: u64, cnt: u32, op: TmOp) -> Result<Option<u32>, PostOpError> {
    s.post_op(OpsWr {
        wr_id,
        flags: SIG,
        unexpected_cnt: cnt,
        op,
    })
}

/// Executes every queued operation and polls every completion.
pub fn drain(s: &mut TmSrq<u32>) -> Vec<Cqe<u32>> {
    while s.execute_op() {}
    std::iter::from_fn(|| s.poll_cq()).collect()
}

/// The driver type of the tests.
pub type D = Driver<&'static str, &'static str>;

/// A driver with `tags` hardware tags.
pub fn driver(tags: u32) -> D {
    Driver::new(DriverConfig {
        caps: Some(TmCaps::with_tags(tags)),
        ..DriverConfig::default()
    })
}

/// The handle of a receive that must be pending.
pub fn pending<R: std::fmt::Debug, M: std::fmt::Debug>(o: PostOutcome<R, M>) -> OffHandle {
    match o {
        PostOutcome::Pending(h) => h,
        PostOutcome::Matched(m) => panic!("unexpected match {m:?}"),
    }
}

/// (receive, message, path) of every match event.
pub fn matches(
    ev: &[Event<&'static str, &'static str>],
) -> Vec<(&'static str, &'static str, MatchPath)> {
    ev.iter()
        .filter_map(|e| match e {
            Event::Matched(m) => Some((m.recv, m.msg, m.path)),
            _ => None,
        })
        .collect()
}

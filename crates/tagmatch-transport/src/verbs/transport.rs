//! [`TaggedTransport`]: MPI-style tagged messages over RC QPs that share one SRQ.
//!
//! # Wire format (the same in hardware and software)
//!
//! Every message starts with the big-endian `struct ibv_tmh` the TM-SRQ parses; its 64-bit
//! tag is `TagLayout::encode(comm, src = sender's rank, tag)`. Senders refuse envelopes
//! whose fields do not fit the layout exactly, so the receiver decodes the whole envelope
//! from the tag and no envelope header is needed.
//!
//! - eager (`len <= eager_limit`): `TMH(EAGER, app_ctx 0, tag) | payload`;
//! - rendezvous: `TMH(RNDV, app_ctx = send id, tag) | RVH(va, rkey, len)`; the receiver
//!   RDMA-reads `len` bytes and answers `TMH(FIN, same app_ctx, tag) | RVH`; the sender's
//!   region is handed back when the FIN arrives.
//!
//! # Hardware or software matching
//!
//! With a tag-matching device (`tm_caps.max_num_tags > 0` and RC support) the SRQ is an
//! `IBV_SRQT_TM` SRQ on an extended CQ with TM info, driven by the engine's offload
//! [`Driver`] over the verbs TM-SRQ as its [`TmBackend`]: receives are
//! offloaded when the prefix rule allows (ADD with the unexpected count, DEL on cancel,
//! SYNC on `TM_SYNC_REQ`); hardware matches complete as `TM_RECV` (read with
//! `ibv_wc_read_tm_info`), the hardware performs matched rendezvous reads and sends the
//! FIN; unexpected messages arrive in receive-queue buffers and are matched in software.
//!
//! Otherwise (Soft-RoCE, most NICs) the SRQ is a plain SRQ and every message is matched by
//! the engine's offload driver without a TM-SRQ (`DriverConfig::caps = None`), with the same
//! framing: eager payloads are copied from the receive-queue buffer, rendezvous data is
//! RDMA-read by software, which then sends the FIN.
//!
//! # Memory
//!
//! Receive buffers and rendezvous sources are [`OwnedMr`]s moved into the operation and
//! handed back in its [`Completion`], so the device never writes memory Rust can see,
//! and nothing the device may still access is freed before its registration is gone.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};

use tagmatch_engine::offload::wr_id::{self, WrKind};
use tagmatch_engine::offload::{
    CancelOutcome, Carried, Driver, DriverConfig, Event, MatchPath, OffHandle, OffMatch,
    OffloadCounters, PostOutcome, TagLayout, TmBackend,
};
use tagmatch_engine::tm_srq::{Cqe, OpsWr, PostOpError, TmCaps, TmOp, WcOpcode, WcStatus, WireMsg};
use tagmatch_engine::{Config, Envelope, PostRejected, RecvSpec};
use tagmatch_verbs_sys as sys;
use tagmatch_wire::tm::{Rvh, TmOpcode, TmRepr, Tmh, RVH_LEN, TMH_LEN};

use super::conn::ConnInfo;
use super::device::{
    Access, Context, Cq, OwnedMr, Pd, Qp, QpCaps, QpEndpoint, RemoteBuf, Sge, Srq, TmCapsInfo, Wc,
};
use super::{Error, Result};

/// Whether to use a tag-matching SRQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TmPolicy {
    /// Use it when the device reports RC tag matching (`max_num_tags > 0`).
    Auto,
    /// Try to create it whatever the capabilities say; fall back to software (with the
    /// refusal as the reason) if the device refuses.
    Attempt,
    /// Never: software matching over a plain SRQ.
    Software,
}

/// Transport settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransportConfig {
    /// This side's rank: the envelope source of its messages.
    pub rank: u32,
    /// Largest eager payload; larger messages go by rendezvous.
    pub eager_limit: usize,
    /// Receive-queue buffers kept posted to the SRQ.
    pub srq_depth: u32,
    /// Send buffers for eager messages, rendezvous requests and FINs.
    pub send_slots: u32,
    /// Send queue depth per QP (sends plus RDMA reads).
    pub max_send_wr: u32,
    /// Entries of each CQ.
    pub cq_depth: u32,
    /// Tagged buffers asked of a TM-SRQ (capped by the device's `max_num_tags`).
    pub max_tags: u32,
    /// Tag bit layout of the TMH tag.
    pub layout: TagLayout,
    /// Software engine settings.
    pub engine: Config,
    /// Hardware or software matching.
    pub tm: TmPolicy,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            rank: 0,
            eager_limit: 4096,
            srq_depth: 256,
            send_slots: 64,
            max_send_wr: 128,
            cq_depth: 2048,
            max_tags: 64,
            layout: TagLayout::default(),
            engine: Config::default(),
            tm: TmPolicy::Auto,
        }
    }
}

/// Which matching path the transport runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A TM-SRQ with these device capabilities.
    Hardware {
        /// `tm_caps` of the device.
        caps: TmCapsInfo,
        /// Tagged buffers of the SRQ.
        max_num_tags: u32,
    },
    /// Software matching over a plain SRQ.
    Software {
        /// Why (capabilities, policy, or the device's refusal of the TM-SRQ).
        reason: String,
    },
}

/// A connected peer, by rank.
pub type PeerId = u32;

/// A posted receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecvId(pub u64);

/// A send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SendId(pub u64);

/// Why a receive completed without (all of) its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecvError {
    /// The message (`len` bytes) was longer than the buffer; eager data was truncated,
    /// rendezvous data was not read (the sender still got its FIN).
    Truncated {
        /// The message length.
        len: usize,
    },
    /// A work completion failed (for instance `IBV_WC_REM_ACCESS_ERR` when the sender's
    /// RVH names memory outside its registration).
    Wc {
        /// `IBV_WC_*` status.
        status: u32,
        /// Its text.
        text: String,
    },
}

/// Something [`TaggedTransport::poll_completion`] reports.
#[derive(Debug)]
pub enum Completion {
    /// A receive completed.
    Recv {
        /// The receive.
        id: RecvId,
        /// The matched envelope (when hardware completed the receive in error before
        /// reporting a match, the message's tag is undefined: the receive's own fields,
        /// wildcards as 0).
        env: Envelope,
        /// Bytes of the message placed in `buf`.
        len: usize,
        /// The receive buffer, handed back.
        buf: OwnedMr,
        /// Where the match was made.
        path: MatchPath,
        /// Success, or what went wrong.
        result: std::result::Result<(), RecvError>,
    },
    /// A send completed (eager: the device has it; rendezvous: the FIN arrived).
    Send {
        /// The send.
        id: SendId,
        /// The rendezvous source, handed back.
        buf: Option<OwnedMr>,
        /// Success, or the failed completion's status text.
        result: std::result::Result<(), String>,
    },
    /// A cancel succeeded; the buffer is handed back.
    Cancelled {
        /// The receive.
        id: RecvId,
        /// Its buffer.
        buf: OwnedMr,
    },
    /// A cancel failed: the receive matched first (its `Recv` completion is reported).
    CancelFailed {
        /// The receive.
        id: RecvId,
    },
}

/// Counters of the transport (besides the offload driver's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportCounters {
    /// Eager messages sent.
    pub eager_sent: u64,
    /// Rendezvous requests sent.
    pub rndv_sent: u64,
    /// RDMA reads performed by software.
    pub sw_reads: u64,
    /// FINs sent by software.
    pub fins_sent: u64,
    /// FINs received.
    pub fins_received: u64,
    /// Messages that could not be parsed or decoded.
    pub protocol_errors: u64,
    /// Failed work completions (other than flushes).
    pub wc_errors: u64,
    /// Arrivals the engine could not store (budget) and dropped.
    pub rejected: u64,
}

/// What a receive carries through the driver.
#[derive(Debug)]
struct RecvCtx {
    buf: OwnedMr,
}

/// What a message carries through the driver.
#[derive(Debug)]
enum Incoming {
    /// Eager payload copied out of a receive-queue buffer.
    Eager(Vec<u8>),
    /// A rendezvous request (the RVH travels in the driver's `sw_rndv`).
    Rndv { tmh: Tmh },
    /// Matched by hardware: the data is (or will be) in the receive buffer.
    Hw,
    /// Matched by hardware, `TM_RNDV_INCOMPLETE`: TMH and RVH are in the receive buffer.
    HwRndvIncomplete,
    /// FIN and NO_TAG messages.
    Control,
}

type Wire = WireMsg<Carried<Incoming>>;

fn ones(bits: u8) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// The envelope of a TMH tag, when no field is saturated.
fn decode_tag(layout: &TagLayout, tag: u64) -> Option<Envelope> {
    let (cb, sb, tb) = (layout.comm_bits(), layout.src_bits(), layout.tag_bits());
    let field = |shift: u8, bits: u8| tag.checked_shr(u32::from(shift)).unwrap_or(0) & ones(bits);
    let comm = field(tb + sb, cb);
    let src = field(tb, sb);
    let t = tag & ones(tb);
    let full = |v: u64, bits: u8, width: u8| bits < width && v == ones(bits);
    if (cb > 0 && full(comm, cb, 32)) || (sb > 0 && full(src, sb, 32)) || full(t, tb, 64) {
        return None;
    }
    Some(Envelope::new(
        u32::try_from(comm).ok()?,
        u32::try_from(src).ok()?,
        t,
    ))
}

/// Parses a whole message (from a receive-queue buffer) into a wire message.
fn parse_message(layout: &TagLayout, bytes: &[u8]) -> Option<Wire> {
    let r = TmRepr::parse_bytes(bytes).ok()?;
    let control = |r: &TmRepr<'_>| WireMsg {
        tmh: r.tmh,
        rvh: r.rvh,
        len: u32::try_from(r.payload.len()).unwrap_or(u32::MAX),
        payload: Carried {
            env: Envelope::new(0, 0, 0),
            msg: Incoming::Control,
        },
    };
    match r.tmh.opcode {
        TmOpcode::Eager => {
            let env = decode_tag(layout, r.tmh.tag)?;
            Some(WireMsg::eager(
                r.tmh.tag,
                r.tmh.app_ctx,
                u32::try_from(r.payload.len()).ok()?,
                Carried {
                    env,
                    msg: Incoming::Eager(r.payload.to_vec()),
                },
            ))
        }
        TmOpcode::Rndv => {
            let env = decode_tag(layout, r.tmh.tag)?;
            Some(WireMsg::rndv(
                r.tmh.tag,
                r.tmh.app_ctx,
                r.rvh?,
                0,
                Carried {
                    env,
                    msg: Incoming::Rndv { tmh: r.tmh },
                },
            ))
        }
        TmOpcode::Fin | TmOpcode::NoTag => Some(control(&r)),
    }
}

/// Receive-queue buffers: one registered pool, `n` slots, all posted to the SRQ.
struct RxRing {
    srq: Srq,
    // Dropped after `srq` (field order): no posted buffer outlives its registration.
    pool: OwnedMr,
    slot: usize,
}

impl RxRing {
    fn new(pd: &Pd, srq: Srq, n: u32, slot: usize) -> Result<RxRing> {
        let len = slot
            .checked_mul(n as usize)
            .ok_or_else(|| Error::Invalid("receive pool too large".into()))?;
        let pool = pd.alloc_mr(len.max(1), Access::LOCAL_WRITE)?;
        let ring = RxRing { srq, pool, slot };
        for i in 0..n {
            ring.repost(u64::from(i))?;
        }
        Ok(ring)
    }

    /// Posts slot `idx` with the receive-queue `wr_id` of that slot ([`wr_id::rq`]): it
    /// cannot be mistaken for a tagged buffer or a list operation, even in an error
    /// completion.
    fn repost(&self, idx: u64) -> Result<()> {
        let off = usize::try_from(idx).unwrap_or(usize::MAX);
        let sge = self.pool.sge(off.saturating_mul(self.slot), self.slot)?;
        self.srq.post_recv(wr_id::rq(idx), sge)
    }

    /// Copies the received bytes of the slot `wr` names out and reposts the slot.
    fn take(&self, wr: u64, len: u32) -> Result<Vec<u8>> {
        let WrKind::Rq(idx) = wr_id::kind(wr) else {
            return Err(Error::Protocol(format!(
                "receive completion for wr_id {wr:#x}, not a receive-queue buffer"
            )));
        };
        let off = usize::try_from(idx)
            .ok()
            .and_then(|i| i.checked_mul(self.slot))
            .filter(|&o| o < self.pool.len())
            .ok_or_else(|| Error::Protocol(format!("receive completion for slot {idx}")))?;
        let bytes = self.pool.copy_out(off, (len as usize).min(self.slot));
        self.repost(idx)?;
        Ok(bytes)
    }
}

// The driver passes the model's flag values straight to `ibv_post_srq_ops` and tests the
// model's flag bits on real completions: they must be the verbs values.
const _: () = {
    use tagmatch_engine::tm_srq::{ops_flags, wc_flags};
    assert!(ops_flags::SIGNALED == sys::IBV_OPS_SIGNALED);
    assert!(ops_flags::TM_SYNC == sys::IBV_OPS_TM_SYNC);
    assert!(wc_flags::TM_SYNC_REQ == sys::IBV_WC_TM_SYNC_REQ);
    assert!(wc_flags::TM_MATCH == sys::IBV_WC_TM_MATCH);
    assert!(wc_flags::TM_DATA_VALID == sys::IBV_WC_TM_DATA_VALID);
    assert!(WcOpcode::Recv as u32 == sys::IBV_WC_RECV);
    assert!(WcOpcode::TmAdd as u32 == sys::IBV_WC_TM_ADD);
    assert!(WcOpcode::TmDel as u32 == sys::IBV_WC_TM_DEL);
    assert!(WcOpcode::TmSync as u32 == sys::IBV_WC_TM_SYNC);
    assert!(WcOpcode::TmRecv as u32 == sys::IBV_WC_TM_RECV);
    assert!(WcOpcode::TmNoTag as u32 == sys::IBV_WC_TM_NO_TAG);
    assert!(WcStatus::Success as u32 == sys::IBV_WC_SUCCESS);
    assert!(WcStatus::LocLenErr as u32 == sys::IBV_WC_LOC_LEN_ERR);
    assert!(WcStatus::LocQpOpErr as u32 == sys::IBV_WC_LOC_QP_OP_ERR);
    assert!(WcStatus::LocEecOpErr as u32 == sys::IBV_WC_LOC_EEC_OP_ERR);
    assert!(WcStatus::LocProtErr as u32 == sys::IBV_WC_LOC_PROT_ERR);
    assert!(WcStatus::WrFlushErr as u32 == sys::IBV_WC_WR_FLUSH_ERR);
    assert!(WcStatus::MwBindErr as u32 == sys::IBV_WC_MW_BIND_ERR);
    assert!(WcStatus::BadRespErr as u32 == sys::IBV_WC_BAD_RESP_ERR);
    assert!(WcStatus::LocAccessErr as u32 == sys::IBV_WC_LOC_ACCESS_ERR);
    assert!(WcStatus::RemInvReqErr as u32 == sys::IBV_WC_REM_INV_REQ_ERR);
    assert!(WcStatus::RemAccessErr as u32 == sys::IBV_WC_REM_ACCESS_ERR);
    assert!(WcStatus::RemOpErr as u32 == sys::IBV_WC_REM_OP_ERR);
    assert!(WcStatus::RetryExcErr as u32 == sys::IBV_WC_RETRY_EXC_ERR);
    assert!(WcStatus::RnrRetryExcErr as u32 == sys::IBV_WC_RNR_RETRY_EXC_ERR);
    assert!(WcStatus::LocRddViolErr as u32 == sys::IBV_WC_LOC_RDD_VIOL_ERR);
    assert!(WcStatus::RemInvRdReqErr as u32 == sys::IBV_WC_REM_INV_RD_REQ_ERR);
    assert!(WcStatus::RemAbortErr as u32 == sys::IBV_WC_REM_ABORT_ERR);
    assert!(WcStatus::InvEecnErr as u32 == sys::IBV_WC_INV_EECN_ERR);
    assert!(WcStatus::InvEecStateErr as u32 == sys::IBV_WC_INV_EEC_STATE_ERR);
    assert!(WcStatus::FatalErr as u32 == sys::IBV_WC_FATAL_ERR);
    assert!(WcStatus::RespTimeoutErr as u32 == sys::IBV_WC_RESP_TIMEOUT_ERR);
    assert!(WcStatus::GeneralErr as u32 == sys::IBV_WC_GENERAL_ERR);
    assert!(WcStatus::TmErr as u32 == sys::IBV_WC_TM_ERR);
    assert!(WcStatus::TmRndvIncomplete as u32 == sys::IBV_WC_TM_RNDV_INCOMPLETE);
};

/// A list operation in flight, as the book recorded it when it was posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BookOp {
    Add { recv: u64 },
    Del { handle: u32 },
    Sync,
}

/// A tagged buffer the book knows: its entry handle and tag, and whether its match
/// completion was seen (a data completion follows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tagged {
    handle: u32,
    tag: u64,
    matched: bool,
}

/// The bookkeeping of a TM-SRQ that needs no device: operation slots and tag entries in
/// use (the verbs report both exhaustions as the same `ENOMEM`), lengths of
/// hardware-matched data, and the translation of list-operation and tag-matching
/// completions.
///
/// Every completion is attributed by its `wr_id` alone ([`wr_id`]: list operations,
/// tagged buffers and receive-queue buffers have disjoint spaces): `ibv_poll_cq(3)`: "If
/// the status is other than IBV_WC_SUCCESS, only the following attributes are valid:
/// wr_id, status, qp_num, and vendor_err". The book remembers what each outstanding
/// operation was and whether each tagged buffer already had its match completion, so an
/// error completion (opcode, flags and TM info undefined) still releases its operation
/// slot and its tag entry.
#[derive(Debug)]
struct TmBook {
    layout: TagLayout,
    max_ops: u32,
    max_tags: u32,
    ops_outstanding: u32,
    tags_in_use: u32,
    /// Outstanding list operations by `wr_id`.
    ops: HashMap<u64, BookOp>,
    /// Tagged buffers posted and not finished, by `recv_wr_id`.
    tagged: HashMap<u64, Tagged>,
    /// Entry handle → `recv_wr_id`, while the entry may be in the list.
    handles: HashMap<u32, u64>,
    /// Byte length of hardware-matched receives whose data is valid.
    data_len: HashMap<u64, u32>,
    /// `IBV_WC_*` status of hardware-matched receives whose data transfer failed.
    data_err: HashMap<u64, u32>,
    /// Entry tag (wildcard fields zero) of receives whose match completion failed: the
    /// message's tag is undefined in an error completion.
    failed_tag: HashMap<u64, u64>,
    errors: Vec<String>,
}

impl TmBook {
    fn new(layout: TagLayout, max_ops: u32, max_tags: u32) -> Self {
        TmBook {
            layout,
            max_ops,
            max_tags,
            ops_outstanding: 0,
            tags_in_use: 0,
            ops: HashMap::new(),
            tagged: HashMap::new(),
            handles: HashMap::new(),
            data_len: HashMap::new(),
            data_err: HashMap::new(),
            failed_tag: HashMap::new(),
            errors: Vec::new(),
        }
    }

    /// The status of `wc`; a value `verbs.h` does not define is logged and becomes
    /// `GeneralErr` (never a success, never a `TM_ERR` "tag consumed").
    fn status(&mut self, wc: &Wc) -> WcStatus {
        WcStatus::from_code(wc.status).unwrap_or_else(|| {
            self.errors
                .push(format!("unknown completion status {}", wc.status));
            WcStatus::GeneralErr
        })
    }

    /// A tag entry left the list (consumed, deleted, or never created).
    fn entry_gone(&mut self, recv: u64, handle: u32) {
        self.tags_in_use = self.tags_in_use.saturating_sub(1);
        if self.handles.get(&handle) == Some(&recv) {
            self.handles.remove(&handle);
        }
    }

    /// A list-operation or tagged-buffer completion, attributed by its `wr_id`; `None`
    /// (and an error logged) for a `wr_id` the book did not post.
    fn convert(&mut self, wc: &Wc) -> Option<Cqe<Carried<Incoming>>> {
        let status = self.status(wc);
        match wr_id::kind(wc.wr_id) {
            WrKind::Op(_) => self.op_completion(wc, status),
            WrKind::Tagged(recv) => self.tagged_completion(wc, recv, status),
            WrKind::Rq(_) | WrKind::Reserved(_) => {
                self.errors.push(format!(
                    "completion of wr_id {:#x}: not a TM work request",
                    wc.wr_id
                ));
                None
            }
        }
    }

    fn op_completion(&mut self, wc: &Wc, status: WcStatus) -> Option<Cqe<Carried<Incoming>>> {
        let Some(op) = self.ops.remove(&wc.wr_id) else {
            self.errors.push(format!(
                "completion of unknown list operation {:#x}",
                wc.wr_id
            ));
            return None;
        };
        self.ops_outstanding = self.ops_outstanding.saturating_sub(1);
        let ok = status == WcStatus::Success;
        if !ok && status != WcStatus::TmErr {
            self.errors
                .push(format!("TM list operation: {}", wc.status_str()));
        }
        let opcode = match op {
            BookOp::Add { recv } => {
                // "A handle that uniquely identifies the entry is returned upon success":
                // a failed ADD created no entry.
                if !ok {
                    if let Some(t) = self.tagged.remove(&recv) {
                        self.entry_gone(recv, t.handle);
                    }
                }
                WcOpcode::TmAdd
            }
            BookOp::Del { handle } => {
                // The entry left the list. A DEL that lost to a match fails with TM_ERR
                // (that entry was released by its consume completion); one that failed
                // otherwise left the entry where it was.
                if ok {
                    if let Some(recv) = self.handles.get(&handle).copied() {
                        if self.tagged.remove(&recv).is_some() {
                            self.entry_gone(recv, handle);
                        }
                    }
                }
                WcOpcode::TmDel
            }
            BookOp::Sync => WcOpcode::TmSync,
        };
        // Flags are defined on success, and on mlx5's TM_ERR of a DEL (wire-layouts §C.1).
        let flags = if ok || status == WcStatus::TmErr {
            wc.wc_flags
        } else {
            0
        };
        Some(Cqe::new(wc.wr_id, status, opcode, flags, None))
    }

    fn tagged_completion(
        &mut self,
        wc: &Wc,
        recv: u64,
        status: WcStatus,
    ) -> Option<Cqe<Carried<Incoming>>> {
        let Some(t) = self.tagged.get(&recv).copied() else {
            self.errors
                .push(format!("completion of unknown tagged buffer {recv}"));
            return None;
        };
        // rdma-core-tag-matching: "matching and data transfer completion are distinct
        // events that generate 2 completion events for the same recv_wr_id": the first
        // one of a buffer is its match, which consumes the entry.
        let first = !t.matched;
        if first {
            self.entry_gone(recv, t.handle);
        }
        if !status.fields_valid() {
            // An error ends the buffer's work; its opcode, flags and TM info are undefined.
            self.tagged.remove(&recv);
            if first {
                self.failed_tag.insert(recv, t.tag);
            } else {
                self.data_err.insert(recv, wc.status);
            }
            return Some(Cqe::new(wc.wr_id, status, WcOpcode::TmRecv, 0, None));
        }
        let data_valid = !first || wc.wc_flags & sys::IBV_WC_TM_DATA_VALID != 0;
        if data_valid || status == WcStatus::TmRndvIncomplete {
            self.tagged.remove(&recv);
        } else if let Some(x) = self.tagged.get_mut(&recv) {
            x.matched = true;
        }
        if data_valid {
            self.data_len.insert(recv, wc.byte_len);
        }
        let mut flags = wc.wc_flags & !(sys::IBV_WC_TM_MATCH | sys::IBV_WC_TM_DATA_VALID);
        if first {
            flags |= sys::IBV_WC_TM_MATCH;
        }
        if data_valid {
            flags |= sys::IBV_WC_TM_DATA_VALID;
        }
        if !first {
            return Some(Cqe::new(wc.wr_id, status, WcOpcode::TmRecv, flags, None));
        }
        let (tag, app_ctx) = wc.tm.unwrap_or((0, 0));
        let msg = if status == WcStatus::TmRndvIncomplete {
            Incoming::HwRndvIncomplete
        } else {
            Incoming::Hw
        };
        let env = decode_tag(&self.layout, tag).unwrap_or(Envelope::new(0, 0, tag));
        Some(Cqe::new(
            wc.wr_id,
            status,
            WcOpcode::TmRecv,
            flags,
            Some(WireMsg::eager(
                tag,
                app_ctx,
                wc.byte_len,
                Carried { env, msg },
            )),
        ))
    }

    /// Whether an operation may be posted now (`Err` says which resource is exhausted).
    fn admit(&self, add: bool) -> std::result::Result<(), PostOpError> {
        if self.ops_outstanding >= self.max_ops {
            Err(PostOpError::OpsFull)
        } else if add && self.tags_in_use >= self.max_tags {
            Err(PostOpError::TagsFull)
        } else {
            Ok(())
        }
    }

    /// Whether the driver's `wr_id`s are in their spaces (they always are; a work request
    /// outside them could not be attributed).
    fn well_formed(wr: &OpsWr) -> bool {
        matches!(wr_id::kind(wr.wr_id), WrKind::Op(_))
            && match wr.op {
                TmOp::Add { recv_wr_id, .. } => {
                    matches!(wr_id::kind(recv_wr_id), WrKind::Tagged(_))
                }
                TmOp::Del { .. } | TmOp::Sync => true,
            }
    }

    /// `wr` was posted; an ADD's entry got `handle`.
    fn posted(&mut self, wr: &OpsWr, handle: Option<u32>) {
        self.ops_outstanding += 1;
        let op = match wr.op {
            TmOp::Add {
                recv_wr_id, tag, ..
            } => {
                self.tags_in_use += 1;
                let handle = handle.unwrap_or(u32::MAX);
                self.handles.insert(handle, recv_wr_id);
                self.tagged.insert(
                    recv_wr_id,
                    Tagged {
                        handle,
                        tag,
                        matched: false,
                    },
                );
                BookOp::Add { recv: recv_wr_id }
            }
            TmOp::Del { handle } => BookOp::Del { handle },
            TmOp::Sync => BookOp::Sync,
        };
        self.ops.insert(wr.wr_id, op);
    }
}

/// The verbs TM-SRQ as the offload [`Driver`]'s [`TmBackend`].
struct VerbsTm {
    ring: RxRing,
    cq: Cq,
    book: TmBook,
    caps: TmCaps,
    queue: VecDeque<Cqe<Carried<Incoming>>>,
    wcs: Vec<Wc>,
}

/// Whether a completion of the TM-SRQ's CQ is a receive-queue buffer's: its `wr_id` is in
/// the receive-queue space ([`wr_id::rq`]), whatever its opcode, flags and status (on error
/// they are undefined, `ibv_poll_cq(3)`). On success it holds a whole message, TMH
/// included: `IBV_WC_RECV` ("used for unexpected messages", rdma-core `tag_matching.md`),
/// `IBV_WC_TM_NO_TAG`, or mlx5's unexpected `IBV_WC_TM_RECV` without flags (wire-layouts
/// §C.1: "UNEXPECTED → IBV_WC_TM_RECV with no MATCH flag").
fn in_rq_buffer(wc: &Wc) -> bool {
    matches!(wr_id::kind(wc.wr_id), WrKind::Rq(_))
}

impl VerbsTm {
    fn convert(&mut self, wc: Wc) -> Option<Cqe<Carried<Incoming>>> {
        if !in_rq_buffer(&wc) {
            return self.book.convert(&wc);
        }
        let status = self.book.status(&wc);
        if status == WcStatus::WrFlushErr {
            // The SRQ is in the error state: the buffer is not reposted.
            return Some(Cqe::new(wc.wr_id, status, WcOpcode::Recv, 0, None));
        }
        let bytes = match self.ring.take(wc.wr_id, wc.byte_len) {
            Ok(b) => b,
            Err(e) => {
                self.book.errors.push(e.to_string());
                return None;
            }
        };
        if status != WcStatus::Success {
            self.book
                .errors
                .push(format!("receive completion: {}", wc.status_str()));
            // No message; the slot was reposted.
            return Some(Cqe::new(wc.wr_id, status, WcOpcode::Recv, 0, None));
        }
        let Some(msg) = parse_message(&self.book.layout, &bytes) else {
            self.book.errors.push("unparsable message".into());
            return None;
        };
        let opcode = match msg.tmh.opcode {
            TmOpcode::Eager | TmOpcode::Rndv => WcOpcode::Recv,
            TmOpcode::Fin | TmOpcode::NoTag => WcOpcode::TmNoTag,
        };
        Some(Cqe::new(
            wc.wr_id,
            WcStatus::Success,
            opcode,
            wc.wc_flags,
            Some(msg),
        ))
    }
}

impl TmBackend<Incoming> for VerbsTm {
    type Buf = Sge;

    fn buf_len(buf: &Sge) -> u32 {
        buf.len
    }

    fn caps(&self) -> TmCaps {
        self.caps
    }

    fn replenish(&mut self) {
        // `RxRing::take` reposted the buffer when the completion was read.
    }

    fn post_op(
        &mut self,
        wr: OpsWr,
        sge: Option<Sge>,
    ) -> std::result::Result<Option<u32>, PostOpError> {
        let add = matches!(wr.op, TmOp::Add { .. });
        if !TmBook::well_formed(&wr) {
            self.book
                .errors
                .push(format!("list operation outside the wr_id spaces: {wr:?}"));
            return Err(PostOpError::BadHandle);
        }
        self.book.admit(add)?;
        let mut raw_sge = sge.map(Sge::raw).unwrap_or_default();
        let mut w = sys::ibv_ops_wr {
            wr_id: wr.wr_id,
            next: std::ptr::null_mut(),
            opcode: sys::IBV_WR_TAG_SYNC,
            flags: i32::try_from(wr.flags).unwrap_or(0),
            tm: sys::ibv_ops_wr__bindgen_ty_1 {
                unexpected_cnt: wr.unexpected_cnt,
                handle: 0,
                add: sys::ibv_ops_wr__bindgen_ty_1__bindgen_ty_1 {
                    recv_wr_id: 0,
                    sg_list: std::ptr::null_mut(),
                    num_sge: 0,
                    tag: 0,
                    mask: 0,
                },
            },
        };
        match wr.op {
            TmOp::Add {
                recv_wr_id,
                tag,
                mask,
                ..
            } => {
                w.opcode = sys::IBV_WR_TAG_ADD;
                w.tm.add.recv_wr_id = recv_wr_id;
                w.tm.add.sg_list = &mut raw_sge;
                w.tm.add.num_sge = 1;
                w.tm.add.tag = tag;
                w.tm.add.mask = mask;
            }
            TmOp::Del { handle } => {
                w.opcode = sys::IBV_WR_TAG_DEL;
                w.tm.handle = handle;
            }
            TmOp::Sync => {}
        }
        match self.ring.srq.post_op(&mut w) {
            Ok(()) => {
                let handle = add.then_some(w.tm.handle);
                self.book.posted(&wr, handle);
                Ok(handle)
            }
            Err(Error::Verbs { err, .. }) if err.raw_os_error() == Some(12) => {
                // ENOMEM: no free entry (ADD) or no operation slot.
                Err(if add {
                    PostOpError::TagsFull
                } else {
                    PostOpError::OpsFull
                })
            }
            Err(e) => {
                self.book.errors.push(e.to_string());
                Err(PostOpError::BadHandle)
            }
        }
    }

    fn poll(&mut self) -> Option<Cqe<Carried<Incoming>>> {
        if self.queue.is_empty() {
            let mut wcs = std::mem::take(&mut self.wcs);
            wcs.clear();
            match self.cq.poll(&mut wcs, 32) {
                Ok(_) => {
                    for wc in wcs.drain(..) {
                        if let Some(c) = self.convert(wc) {
                            self.queue.push_back(c);
                        }
                    }
                }
                Err(e) => self.book.errors.push(e.to_string()),
            }
            self.wcs = wcs;
        }
        self.queue.pop_front()
    }
}

enum Matcher {
    Sw {
        driver: Driver<RecvCtx, Incoming>,
        ring: RxRing,
        cq: Cq,
    },
    Hw(Driver<RecvCtx, Incoming, VerbsTm>),
}

struct Peer {
    qp: Qp,
    outstanding: u32,
}

/// What a send slot is used for.
#[derive(Clone, Copy, Debug)]
enum SlotUse {
    Eager(SendId),
    RndvReq(u32),
    Fin,
}

struct ReadState {
    env: Envelope,
    buf: OwnedMr,
    peer: u32,
    tmh: Tmh,
    rvh: Rvh,
    path: MatchPath,
}

const KIND_SHIFT: u32 = 56;
const KIND_SLOT: u64 = 1;
const KIND_READ: u64 = 2;
const ID_MASK: u64 = (1 << KIND_SHIFT) - 1;

/// A connection under way: the QP exists and this side's frame was sent.
#[derive(Debug)]
pub struct PendingConn {
    qp: Qp,
    local: QpEndpoint,
}

/// Tagged messages over RC QPs sharing one SRQ; see the [module documentation](self).
pub struct TaggedTransport {
    cfg: TransportConfig,
    mode: Mode,
    // Field order is drop order: QPs first, then the SRQ and its buffers, then what
    // operations hand back, the send pool, the CQs, the PD and the context.
    peers: HashMap<u32, Peer>,
    matcher: Matcher,
    reads: HashMap<u64, ReadState>,
    pending_reads: VecDeque<u64>,
    hw_pending: HashMap<u64, (Envelope, OwnedMr)>,
    rndv_sends: HashMap<u32, (SendId, OwnedMr)>,
    completions: VecDeque<Completion>,
    events: Vec<Event<RecvCtx, Incoming>>,
    pending_fins: VecDeque<(u32, Tmh, Rvh)>,
    send_pool: OwnedMr,
    send_slot: usize,
    free_slots: Vec<u32>,
    slot_use: Vec<Option<(u32, SlotUse)>>,
    send_cq: Cq,
    wcs: Vec<Wc>,
    next_send: u64,
    next_app_ctx: u32,
    c: TransportCounters,
    errors: Vec<String>,
    pd: Pd,
    ctx: Context,
}

impl std::fmt::Debug for TaggedTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaggedTransport")
            .field("rank", &self.cfg.rank)
            .field("mode", &self.mode)
            .field("peers", &self.peers.len())
            .finish_non_exhaustive()
    }
}

impl TaggedTransport {
    /// Creates the PD, CQs, the SRQ (tag-matching when the policy and device allow) and the
    /// buffer pools on `ctx`.
    pub fn new(ctx: &Context, cfg: TransportConfig) -> Result<TaggedTransport> {
        if cfg.eager_limit > u32::MAX as usize / 2 || cfg.send_slots == 0 || cfg.srq_depth == 0 {
            return Err(Error::Invalid(
                "eager_limit, send_slots or srq_depth".into(),
            ));
        }
        let pd = ctx.alloc_pd()?;
        let send_cq = Cq::new(ctx, cfg.cq_depth)?;
        let slot = TMH_LEN + RVH_LEN + cfg.eager_limit;
        let caps = ctx.caps().tm;
        let want_tm = match cfg.tm {
            TmPolicy::Auto => caps.rc_tm().then_some(()).ok_or_else(|| {
                format!(
                    "{}: no RC tag matching (tm_caps.max_num_tags = {})",
                    ctx.name(),
                    caps.max_num_tags
                )
            }),
            TmPolicy::Attempt => Ok(()),
            TmPolicy::Software => Err("software matching requested".to_owned()),
        };
        let (matcher, mode) = match want_tm {
            Ok(()) => match Self::hw_matcher(ctx, &pd, &cfg, slot) {
                Ok((m, tags)) => (
                    m,
                    Mode::Hardware {
                        caps,
                        max_num_tags: tags,
                    },
                ),
                Err(e) => (
                    Self::sw_matcher(ctx, &pd, &cfg, slot)?,
                    Mode::Software {
                        reason: format!("the device refused the TM-SRQ (or its TM CQ): {e}"),
                    },
                ),
            },
            Err(reason) => (
                Self::sw_matcher(ctx, &pd, &cfg, slot)?,
                Mode::Software { reason },
            ),
        };
        let send_slot = slot;
        let send_pool = pd.alloc_mr(send_slot * cfg.send_slots as usize, Access::LOCAL)?;
        Ok(TaggedTransport {
            cfg,
            mode,
            peers: HashMap::new(),
            matcher,
            reads: HashMap::new(),
            pending_reads: VecDeque::new(),
            hw_pending: HashMap::new(),
            rndv_sends: HashMap::new(),
            completions: VecDeque::new(),
            events: Vec::new(),
            pending_fins: VecDeque::new(),
            send_pool,
            send_slot,
            free_slots: (0..cfg.send_slots).rev().collect(),
            slot_use: vec![None; cfg.send_slots as usize],
            send_cq,
            wcs: Vec::new(),
            next_send: 0,
            next_app_ctx: 1,
            c: TransportCounters::default(),
            errors: Vec::new(),
            pd,
            ctx: ctx.clone(),
        })
    }

    fn sw_matcher(ctx: &Context, pd: &Pd, cfg: &TransportConfig, slot: usize) -> Result<Matcher> {
        let cq = Cq::new(ctx, cfg.cq_depth)?;
        let srq = Srq::basic(pd, cfg.srq_depth)?;
        let ring = RxRing::new(pd, srq, cfg.srq_depth, slot)?;
        let driver = Driver::new(DriverConfig {
            layout: cfg.layout,
            engine: cfg.engine,
            caps: None,
            ..DriverConfig::default()
        });
        Ok(Matcher::Sw { driver, ring, cq })
    }

    fn hw_matcher(
        ctx: &Context,
        pd: &Pd,
        cfg: &TransportConfig,
        slot: usize,
    ) -> Result<(Matcher, u32)> {
        let caps = ctx.caps().tm;
        let tags = if caps.max_num_tags > 0 {
            cfg.max_tags.min(caps.max_num_tags).max(1)
        } else {
            cfg.max_tags.max(1)
        };
        let ops = if caps.max_ops > 0 {
            caps.max_ops.min(2 * tags + 2)
        } else {
            2 * tags + 2
        };
        let cq = Cq::new_ex(ctx, cfg.cq_depth, true)?;
        let srq = Srq::tm(pd, &cq, cfg.srq_depth, tags, ops)?;
        let ring = RxRing::new(pd, srq, cfg.srq_depth, slot)?;
        let backend = VerbsTm {
            ring,
            cq,
            book: TmBook::new(cfg.layout, ops, tags),
            caps: TmCaps {
                max_num_tags: tags,
                max_ops: ops,
                max_rndv_hdr_size: caps.max_rndv_hdr_size,
            },
            queue: VecDeque::new(),
            wcs: Vec::new(),
        };
        let driver = Driver::with_backend(
            DriverConfig {
                layout: cfg.layout,
                engine: cfg.engine,
                ..DriverConfig::default()
            },
            Some(backend),
        );
        Ok((Matcher::Hw(driver), tags))
    }

    /// The matching path in use.
    pub fn mode(&self) -> &Mode {
        &self.mode
    }

    /// This side's rank.
    pub fn rank(&self) -> u32 {
        self.cfg.rank
    }

    /// The configuration.
    pub fn config(&self) -> &TransportConfig {
        &self.cfg
    }

    /// The device context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The protection domain: register receive buffers and rendezvous sources here.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// Allocates and registers a buffer usable as receive buffer and rendezvous source.
    pub fn alloc_buf(&self, len: usize) -> Result<OwnedMr> {
        self.pd
            .alloc_mr(len, Access::LOCAL_WRITE.union(Access::REMOTE_READ))
    }

    /// Transport counters.
    pub fn counters(&self) -> TransportCounters {
        self.c
    }

    /// The offload driver's counters.
    pub fn offload_counters(&self) -> OffloadCounters {
        match &self.matcher {
            Matcher::Sw { driver, .. } => driver.counters(),
            Matcher::Hw(d) => d.counters(),
        }
    }

    /// Errors seen on completions so far (failed work completions, bad messages).
    pub fn errors(&self) -> Vec<String> {
        let mut e = self.errors.clone();
        if let Some(hw) = self.verbs_tm() {
            e.extend(hw.book.errors.iter().cloned());
        }
        e
    }

    /// The verbs TM-SRQ under the offload driver (hardware mode only).
    fn verbs_tm(&self) -> Option<&VerbsTm> {
        match &self.matcher {
            Matcher::Hw(d) => d.hw(),
            Matcher::Sw { .. } => None,
        }
    }

    /// Connected peers' ranks.
    pub fn peers(&self) -> Vec<u32> {
        let mut p: Vec<u32> = self.peers.keys().copied().collect();
        p.sort_unstable();
        p
    }

    /// First half of a connection: creates the RC QP on the SRQ and writes this side's
    /// (rank, QPN, PSN, LID, GID) to the side channel.
    pub fn start_connect<W: Write>(&mut self, side: &mut W) -> Result<PendingConn> {
        let (srq, recv_cq) = match (&self.matcher, self.verbs_tm()) {
            (Matcher::Sw { ring, cq, .. }, _) => (ring.srq.clone(), cq.clone()),
            (Matcher::Hw(_), Some(hw)) => (hw.ring.srq.clone(), hw.cq.clone()),
            (Matcher::Hw(_), None) => return Err(Error::Invalid("no TM-SRQ".into())),
        };
        let qp = Qp::rc(
            &self.pd,
            &self.send_cq,
            &recv_cq,
            Some(&srq),
            QpCaps {
                max_send_wr: self.cfg.max_send_wr,
                max_recv_wr: 0,
                max_rd_atomic: self.rd_atomic(),
            },
        )?;
        let psn = (qp.qpn().wrapping_mul(0x9E37_79B1) ^ std::process::id()) & 0x00ff_ffff;
        let local = qp.endpoint(psn);
        ConnInfo {
            rank: self.cfg.rank,
            qp: local,
        }
        .send(side)?;
        Ok(PendingConn { qp, local })
    }

    /// Second half: reads the peer's frame and moves the QP to RTS. Returns the peer's rank.
    pub fn finish_connect<R: Read>(&mut self, pending: PendingConn, side: &mut R) -> Result<u32> {
        let remote = ConnInfo::recv(side)?;
        if self.peers.contains_key(&remote.rank) || remote.rank == self.cfg.rank {
            return Err(Error::Protocol(format!(
                "rank {} is already connected (or is this side's rank)",
                remote.rank
            )));
        }
        pending
            .qp
            .connect(&pending.local, &remote.qp, self.rd_atomic())?;
        self.peers.insert(
            remote.rank,
            Peer {
                qp: pending.qp,
                outstanding: 0,
            },
        );
        Ok(remote.rank)
    }

    /// Both halves over one bidirectional side channel (a `TcpStream`).
    pub fn connect<S: Read + Write>(&mut self, side: &mut S) -> Result<u32> {
        let p = self.start_connect(side)?;
        self.finish_connect(p, side)
    }

    fn rd_atomic(&self) -> u8 {
        u8::try_from(self.ctx.caps().max_qp_rd_atom.clamp(1, 16)).unwrap_or(1)
    }

    fn envelope_tag(&self, comm: u32, tag: u64) -> Result<u64> {
        let env = Envelope::new(comm, self.cfg.rank, tag);
        // `entry` of the exact spec exists iff no field is saturated.
        self.cfg
            .layout
            .entry(&RecvSpec::exact(comm, self.cfg.rank, tag))
            .map(|_| self.cfg.layout.encode(&env))
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "envelope (comm {comm}, rank {}, tag {tag}) does not fit the tag layout",
                    self.cfg.rank
                ))
            })
    }

    fn peer_ready(&self, rank: u32) -> Result<()> {
        let p = self.peers.get(&rank).ok_or(Error::UnknownPeer(rank))?;
        if p.outstanding >= self.cfg.max_send_wr {
            return Err(Error::Busy);
        }
        Ok(())
    }

    /// Posts the message `repr` from a send slot to `rank`.
    fn send_frame(&mut self, rank: u32, repr: &TmRepr<'_>, what: SlotUse) -> Result<()> {
        self.peer_ready(rank)?;
        let slot = self.free_slots.pop().ok_or(Error::Busy)?;
        let off = slot as usize * self.send_slot;
        let mut frame = vec![0u8; repr.buffer_len()];
        let sent = repr
            .emit(&mut frame)
            .map_err(|e| Error::Invalid(e.to_string()));
        let posted = sent.and_then(|n| {
            self.send_pool.copy_in(off, &frame[..n]);
            let sge = self.send_pool.sge(off, n)?;
            let peer = self.peers.get_mut(&rank).ok_or(Error::UnknownPeer(rank))?;
            peer.qp
                .post_send((KIND_SLOT << KIND_SHIFT) | u64::from(slot), sge)?;
            peer.outstanding += 1;
            Ok(())
        });
        match posted {
            Ok(()) => {
                self.slot_use[slot as usize] = Some((rank, what));
                Ok(())
            }
            Err(e) => {
                self.free_slots.push(slot);
                Err(e)
            }
        }
    }

    /// Sends `data` (at most `eager_limit` bytes) eagerly to `rank` with `(comm, tag)`.
    /// `Err(Busy)`: no send slot or send-queue entry now; progress and retry.
    pub fn send_eager(&mut self, rank: u32, comm: u32, tag: u64, data: &[u8]) -> Result<SendId> {
        if data.len() > self.cfg.eager_limit {
            return Err(Error::Invalid(format!(
                "{} bytes exceed the eager limit {}; use send_rndv",
                data.len(),
                self.cfg.eager_limit
            )));
        }
        let t = self.envelope_tag(comm, tag)?;
        let id = SendId(self.next_send);
        let repr = TmRepr {
            tmh: Tmh {
                opcode: TmOpcode::Eager,
                reserved: [0; 3],
                app_ctx: 0,
                tag: t,
            },
            rvh: None,
            payload: data,
        };
        self.send_frame(rank, &repr, SlotUse::Eager(id))?;
        self.next_send += 1;
        self.c.eager_sent += 1;
        Ok(id)
    }

    /// Sends the whole of `buf` (registered with remote read access, e.g. from
    /// [`TaggedTransport::alloc_buf`]) by rendezvous; `buf` comes back in the
    /// [`Completion::Send`] once the receiver's FIN arrived.
    pub fn send_rndv(
        &mut self,
        rank: u32,
        comm: u32,
        tag: u64,
        buf: OwnedMr,
    ) -> std::result::Result<SendId, (Error, OwnedMr)> {
        let remote = match buf.remote(0, buf.len()) {
            Ok(r) => r,
            Err(e) => return Err((e, buf)),
        };
        match self.send_rndv_request(rank, comm, tag, remote) {
            Ok((id, app_ctx)) => {
                self.rndv_sends.insert(app_ctx, (id, buf));
                Ok(id)
            }
            Err(e) => Err((e, buf)),
        }
    }

    /// Sends a rendezvous request announcing `remote` without any local region behind it
    /// (nothing comes back: no FIN is awaited). For tests of the device's bounds checks:
    /// the receiver's RDMA read of memory outside the sender's registration must fail.
    #[doc(hidden)]
    pub fn send_rndv_unchecked(
        &mut self,
        rank: u32,
        comm: u32,
        tag: u64,
        remote: RemoteBuf,
    ) -> Result<SendId> {
        self.send_rndv_request(rank, comm, tag, remote)
            .map(|(id, _)| id)
    }

    fn send_rndv_request(
        &mut self,
        rank: u32,
        comm: u32,
        tag: u64,
        remote: RemoteBuf,
    ) -> Result<(SendId, u32)> {
        let t = self.envelope_tag(comm, tag)?;
        let mut app_ctx = self.next_app_ctx;
        while app_ctx == 0 || self.rndv_sends.contains_key(&app_ctx) {
            app_ctx = app_ctx.wrapping_add(1);
        }
        let id = SendId(self.next_send);
        let repr = TmRepr {
            tmh: Tmh {
                opcode: TmOpcode::Rndv,
                reserved: [0; 3],
                app_ctx,
                tag: t,
            },
            rvh: Some(Rvh {
                va: remote.va,
                rkey: remote.rkey,
                len: remote.len,
            }),
            payload: &[],
        };
        self.send_frame(rank, &repr, SlotUse::RndvReq(app_ctx))?;
        self.next_app_ctx = app_ctx.wrapping_add(1);
        self.next_send += 1;
        self.c.rndv_sent += 1;
        Ok((id, app_ctx))
    }

    /// Posts a tagged receive into `buf` (registered with local write access). The
    /// earliest matching unexpected message is taken; otherwise the receive waits, in
    /// hardware when the offload driver places it there. Completion: [`Completion::Recv`].
    pub fn post_recv(
        &mut self,
        spec: RecvSpec,
        buf: OwnedMr,
    ) -> std::result::Result<RecvId, (Error, OwnedMr)> {
        let len = match u32::try_from(buf.len()) {
            Ok(l) => l,
            Err(_) => return Err((Error::Invalid("receive buffer above 4 GiB".into()), buf)),
        };
        let outcome = match &mut self.matcher {
            Matcher::Sw { driver, .. } => driver.post(spec, len, RecvCtx { buf }),
            Matcher::Hw(d) => {
                let sge = match buf.sge(0, buf.len()) {
                    Ok(s) => s,
                    Err(e) => return Err((e, buf)),
                };
                d.post(spec, sge, RecvCtx { buf })
            }
        };
        match outcome {
            Ok(PostOutcome::Pending(h)) => Ok(RecvId(h.0)),
            Ok(PostOutcome::Matched(m)) => {
                let id = RecvId(m.handle.0);
                self.on_match(m);
                Ok(id)
            }
            Err(PostRejected { recv }) => Err((
                Error::Invalid("the engine refused the receive (posted limit)".into()),
                recv.buf,
            )),
        }
    }

    /// Whether a pending receive lives in hardware (`Some(true)`), in software, or is not
    /// pending (`None`).
    pub fn is_offloaded(&self, id: RecvId) -> Option<bool> {
        match &self.matcher {
            Matcher::Sw { driver, .. } => driver.is_offloaded(OffHandle(id.0)),
            Matcher::Hw(d) => d.is_offloaded(OffHandle(id.0)),
        }
    }

    /// Cancels a pending receive. The outcome is a [`Completion::Cancelled`] (the buffer
    /// comes back) or, when the receive matched first, [`Completion::CancelFailed`].
    /// `Err` for a receive that is no longer pending.
    pub fn cancel(&mut self, id: RecvId) -> Result<()> {
        let r = match &mut self.matcher {
            Matcher::Sw { driver, .. } => driver.cancel(OffHandle(id.0)),
            Matcher::Hw(d) => d.cancel(OffHandle(id.0)),
        };
        match r {
            Ok(CancelOutcome::Cancelled(ctx)) => {
                self.completions
                    .push_back(Completion::Cancelled { id, buf: ctx.buf });
                Ok(())
            }
            Ok(CancelOutcome::InProgress) => Ok(()),
            Err(e) => Err(Error::Invalid(format!("cancel of {id:?}: {e:?}"))),
        }
    }

    /// The next completion, if any (call [`TaggedTransport::progress`] to produce more).
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// Polls both CQs once, runs the matching, starts rendezvous reads and FINs. Returns
    /// the number of work completions processed. Never blocks.
    pub fn progress(&mut self) -> Result<usize> {
        let mut n = self.progress_recv()?;
        n += self.progress_send()?;
        self.flush_pending();
        Ok(n)
    }

    fn progress_recv(&mut self) -> Result<usize> {
        let mut events = std::mem::take(&mut self.events);
        let n = match &mut self.matcher {
            Matcher::Sw { driver, ring, cq } => {
                let mut wcs = std::mem::take(&mut self.wcs);
                wcs.clear();
                let n = cq.poll(&mut wcs, 32)?;
                for wc in wcs.drain(..) {
                    if wc.status == sys::IBV_WC_WR_FLUSH_ERR {
                        continue;
                    }
                    let bytes = ring.take(wc.wr_id, wc.byte_len)?;
                    if wc.status != sys::IBV_WC_SUCCESS {
                        self.c.wc_errors += 1;
                        self.errors
                            .push(format!("receive completion: {}", wc.status_str()));
                        continue;
                    }
                    match parse_message(&self.cfg.layout, &bytes) {
                        None => self.c.protocol_errors += 1,
                        Some(m) if matches!(m.tmh.opcode, TmOpcode::Eager | TmOpcode::Rndv) => {
                            // Without a TM-SRQ the driver only queues: nothing can fail.
                            let _ = driver.wire(m);
                        }
                        Some(m) => events.push(Event::NoTag(m)),
                    }
                }
                self.wcs = wcs;
                driver.poll(&mut events);
                n
            }
            Matcher::Hw(d) => d.poll(&mut events),
        };
        for e in events.drain(..) {
            self.on_event(e);
        }
        self.events = events;
        Ok(n)
    }

    fn on_event(&mut self, e: Event<RecvCtx, Incoming>) {
        match e {
            Event::Matched(m) => self.on_match(m),
            Event::Unexpected { .. } => {}
            Event::Rejected(_) => self.c.rejected += 1,
            Event::Cancelled { handle, recv } => {
                self.completions.push_back(Completion::Cancelled {
                    id: RecvId(handle.0),
                    buf: recv.buf,
                })
            }
            Event::CancelFailed { handle } => {
                self.completions.push_back(Completion::CancelFailed {
                    id: RecvId(handle.0),
                })
            }
            Event::DataValid { handle, status } => {
                if let Some((env, buf)) = self.hw_pending.remove(&handle.0) {
                    let (len, err) = match &mut self.matcher {
                        Matcher::Hw(d) => d.hw_mut().map_or((0, None), |hw| {
                            (
                                hw.book.data_len.remove(&handle.0).unwrap_or(0),
                                hw.book.data_err.remove(&handle.0),
                            )
                        }),
                        Matcher::Sw { .. } => (0, None),
                    };
                    // rdma-core-tag-matching: "IBV_WC_TM_DATA_VALID - all data of the matched
                    // message has been delivered to memory"; an error completion of the
                    // transfer is not that.
                    let result = if status == WcStatus::Success {
                        Ok(())
                    } else {
                        self.c.wc_errors += 1;
                        let status = err.unwrap_or(status as u32);
                        Err(RecvError::Wc {
                            status,
                            text: super::device::status_str(status),
                        })
                    };
                    self.completions.push_back(Completion::Recv {
                        id: RecvId(handle.0),
                        env,
                        len: len as usize,
                        buf,
                        path: MatchPath::Hw,
                        result,
                    });
                }
            }
            Event::RecvFailed {
                handle,
                recv,
                status,
            } => {
                // The match completion failed: its message and tag are undefined; the
                // envelope reported is the entry's (wildcard fields 0).
                self.c.wc_errors += 1;
                let tag = match &mut self.matcher {
                    Matcher::Hw(d) => d
                        .hw_mut()
                        .and_then(|hw| hw.book.failed_tag.remove(&handle.0)),
                    Matcher::Sw { .. } => None,
                };
                let env = tag
                    .and_then(|t| decode_tag(&self.cfg.layout, t))
                    .unwrap_or(Envelope::new(0, 0, 0));
                let status = status as u32;
                self.completions.push_back(Completion::Recv {
                    id: RecvId(handle.0),
                    env,
                    len: 0,
                    buf: recv.buf,
                    path: MatchPath::Hw,
                    result: Err(RecvError::Wc {
                        status,
                        text: super::device::status_str(status),
                    }),
                });
            }
            Event::NoTag(w) => {
                if w.tmh.opcode == TmOpcode::Fin {
                    self.c.fins_received += 1;
                    if let Some((id, buf)) = self.rndv_sends.remove(&w.tmh.app_ctx) {
                        self.completions.push_back(Completion::Send {
                            id,
                            buf: Some(buf),
                            result: Ok(()),
                        });
                    } else {
                        self.c.protocol_errors += 1;
                    }
                }
            }
        }
    }

    fn on_match(&mut self, m: OffMatch<RecvCtx, Incoming>) {
        let id = m.handle.0;
        let RecvCtx { mut buf } = m.recv;
        match m.msg {
            Incoming::Eager(data) => {
                let n = data.len().min(buf.len());
                buf.as_mut_slice()[..n].copy_from_slice(&data[..n]);
                let result = if data.len() > buf.len() {
                    Err(RecvError::Truncated { len: data.len() })
                } else {
                    Ok(())
                };
                self.completions.push_back(Completion::Recv {
                    id: RecvId(id),
                    env: m.env,
                    len: n,
                    buf,
                    path: m.path,
                    result,
                });
            }
            Incoming::Rndv { tmh } => match m.sw_rndv {
                Some(rvh) => self.start_read(id, m.env, buf, tmh, rvh, m.path),
                None => {
                    self.c.protocol_errors += 1;
                    self.recv_failed(id, m.env, buf, m.path, "rendezvous without RVH");
                }
            },
            Incoming::Hw => {
                if m.data_pending {
                    self.hw_pending.insert(id, (m.env, buf));
                } else {
                    let len = match &mut self.matcher {
                        Matcher::Hw(d) => d
                            .hw_mut()
                            .and_then(|hw| hw.book.data_len.remove(&id))
                            .unwrap_or(0),
                        Matcher::Sw { .. } => 0,
                    };
                    self.completions.push_back(Completion::Recv {
                        id: RecvId(id),
                        env: m.env,
                        len: len as usize,
                        buf,
                        path: m.path,
                        result: Ok(()),
                    });
                }
            }
            Incoming::HwRndvIncomplete => {
                // TMH and RVH were scattered into the buffer; software continues.
                let hdr = buf
                    .as_slice()
                    .get(..TMH_LEN + RVH_LEN)
                    .map(TmRepr::parse_bytes);
                match (hdr, m.sw_rndv) {
                    (Some(Ok(r)), _) if r.rvh.is_some() => {
                        let (tmh, rvh) = (r.tmh, r.rvh.unwrap_or_default());
                        self.start_read(id, m.env, buf, tmh, rvh, m.path);
                    }
                    _ => {
                        self.c.protocol_errors += 1;
                        self.recv_failed(id, m.env, buf, m.path, "TM_RNDV_INCOMPLETE without RVH");
                    }
                }
            }
            Incoming::Control => {
                self.c.protocol_errors += 1;
                self.recv_failed(id, m.env, buf, m.path, "control message matched");
            }
        }
    }

    fn recv_failed(&mut self, id: u64, env: Envelope, buf: OwnedMr, path: MatchPath, why: &str) {
        self.errors.push(why.to_owned());
        self.completions.push_back(Completion::Recv {
            id: RecvId(id),
            env,
            len: 0,
            buf,
            path,
            result: Err(RecvError::Wc {
                status: sys::IBV_WC_GENERAL_ERR,
                text: why.to_owned(),
            }),
        });
    }

    fn start_read(
        &mut self,
        id: u64,
        env: Envelope,
        buf: OwnedMr,
        tmh: Tmh,
        rvh: Rvh,
        path: MatchPath,
    ) {
        if rvh.len as usize > buf.len() {
            // Do not read; still release the sender.
            self.pending_fins.push_back((env.src, tmh, rvh));
            self.completions.push_back(Completion::Recv {
                id: RecvId(id),
                env,
                len: 0,
                buf,
                path,
                result: Err(RecvError::Truncated {
                    len: rvh.len as usize,
                }),
            });
            return;
        }
        self.reads.insert(
            id,
            ReadState {
                env,
                buf,
                peer: env.src,
                tmh,
                rvh,
                path,
            },
        );
        self.pending_reads.push_back(id);
        self.flush_pending();
    }

    fn flush_pending(&mut self) {
        while let Some(&id) = self.pending_reads.front() {
            let Some(r) = self.reads.get(&id) else {
                self.pending_reads.pop_front();
                continue;
            };
            let peer = r.peer;
            if self.peer_ready(peer).is_err() {
                if !self.peers.contains_key(&peer) {
                    self.pending_reads.pop_front();
                    if let Some(r) = self.reads.remove(&id) {
                        self.recv_failed(
                            id,
                            r.env,
                            r.buf,
                            r.path,
                            "rendezvous from an unknown rank",
                        );
                    }
                    continue;
                }
                break;
            }
            let posted = r.buf.sge(0, r.rvh.len as usize).and_then(|sge| {
                let remote = RemoteBuf {
                    va: r.rvh.va,
                    rkey: r.rvh.rkey,
                    len: r.rvh.len,
                };
                let p = self.peers.get_mut(&peer).ok_or(Error::UnknownPeer(peer))?;
                p.qp.post_read((KIND_READ << KIND_SHIFT) | (id & ID_MASK), sge, remote)?;
                p.outstanding += 1;
                Ok(())
            });
            self.pending_reads.pop_front();
            match posted {
                Ok(()) => self.c.sw_reads += 1,
                Err(e) => {
                    if let Some(r) = self.reads.remove(&id) {
                        self.recv_failed(id, r.env, r.buf, r.path, &e.to_string());
                    }
                }
            }
        }
        while let Some(&(rank, tmh, rvh)) = self.pending_fins.front() {
            let fin = TmRepr {
                tmh: Tmh {
                    opcode: TmOpcode::Fin,
                    ..tmh
                },
                rvh: Some(rvh),
                payload: &[],
            };
            match self.send_frame(rank, &fin, SlotUse::Fin) {
                Ok(()) => {
                    self.c.fins_sent += 1;
                    self.pending_fins.pop_front();
                }
                Err(Error::Busy) => break,
                Err(e) => {
                    self.errors.push(format!("FIN to rank {rank}: {e}"));
                    self.pending_fins.pop_front();
                }
            }
        }
    }

    fn progress_send(&mut self) -> Result<usize> {
        let mut wcs = std::mem::take(&mut self.wcs);
        wcs.clear();
        let n = self.send_cq.poll(&mut wcs, 32)?;
        for wc in wcs.drain(..) {
            self.on_send_wc(wc);
        }
        self.wcs = wcs;
        Ok(n)
    }

    fn on_send_wc(&mut self, wc: Wc) {
        let ok = wc.status == sys::IBV_WC_SUCCESS;
        if !ok && wc.status != sys::IBV_WC_WR_FLUSH_ERR {
            self.c.wc_errors += 1;
            self.errors
                .push(format!("send completion: {}", wc.status_str()));
        }
        let id = wc.wr_id & ID_MASK;
        match wc.wr_id >> KIND_SHIFT {
            KIND_SLOT => {
                let slot = usize::try_from(id).unwrap_or(usize::MAX);
                let Some((rank, what)) = self.slot_use.get_mut(slot).and_then(Option::take) else {
                    return;
                };
                self.free_slots.push(slot as u32);
                if let Some(p) = self.peers.get_mut(&rank) {
                    p.outstanding = p.outstanding.saturating_sub(1);
                }
                let result = if ok { Ok(()) } else { Err(wc.status_str()) };
                match what {
                    SlotUse::Eager(sid) => self.completions.push_back(Completion::Send {
                        id: sid,
                        buf: None,
                        result,
                    }),
                    SlotUse::RndvReq(app_ctx) if !ok => {
                        if let Some((sid, buf)) = self.rndv_sends.remove(&app_ctx) {
                            self.completions.push_back(Completion::Send {
                                id: sid,
                                buf: Some(buf),
                                result,
                            });
                        }
                    }
                    SlotUse::RndvReq(_) | SlotUse::Fin => {}
                }
            }
            KIND_READ => {
                let Some(r) = self.reads.remove(&id) else {
                    return;
                };
                if let Some(p) = self.peers.get_mut(&r.peer) {
                    p.outstanding = p.outstanding.saturating_sub(1);
                }
                if ok {
                    self.pending_fins.push_back((r.peer, r.tmh, r.rvh));
                    self.completions.push_back(Completion::Recv {
                        id: RecvId(id),
                        env: r.env,
                        len: r.rvh.len as usize,
                        buf: r.buf,
                        path: r.path,
                        result: Ok(()),
                    });
                } else {
                    self.completions.push_back(Completion::Recv {
                        id: RecvId(id),
                        env: r.env,
                        len: 0,
                        buf: r.buf,
                        path: r.path,
                        result: Err(RecvError::Wc {
                            status: wc.status,
                            text: wc.status_str(),
                        }),
                    });
                }
            }
            _ => self.c.protocol_errors += 1,
        }
    }

    /// Runs [`TaggedTransport::progress`] until a completion is available or `timeout`
    /// passes (`None` then). Spins with `yield_now` (the CQs have no completion channel).
    pub fn wait_completion(&mut self, timeout: std::time::Duration) -> Result<Option<Completion>> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(c) = self.poll_completion() {
                return Ok(Some(c));
            }
            if self.progress()? == 0 {
                if std::time::Instant::now() >= deadline {
                    return Ok(None);
                }
                std::thread::yield_now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_decoding_inverts_the_layout_and_refuses_saturated_fields() {
        let layouts = [
            TagLayout::default(),
            TagLayout::new(8, 8, 48).unwrap(),
            TagLayout::new(0, 16, 48).unwrap(),
            TagLayout::new(32, 32, 0).unwrap(),
        ];
        for l in layouts {
            for env in [
                Envelope::new(0, 0, 0),
                Envelope::new(1, 2, 3),
                Envelope::new(
                    (ones(l.comm_bits()) as u32).saturating_sub(1),
                    (ones(l.src_bits()) as u32).saturating_sub(1),
                    ones(l.tag_bits()).saturating_sub(1),
                ),
            ] {
                if l.entry(&RecvSpec::exact(env.comm, env.src, env.tag))
                    .is_none()
                {
                    continue; // not representable: senders refuse it
                }
                assert_eq!(decode_tag(&l, l.encode(&env)), Some(env), "{l:?} {env:?}");
            }
            // A saturated field (what `encode` makes of a value that does not fit) is
            // refused rather than decoded into a wrong envelope.
            if l.tag_bits() < 64 {
                let big = Envelope::new(0, 0, u64::MAX);
                assert_eq!(decode_tag(&l, l.encode(&big)), None, "{l:?}");
            }
        }
    }

    #[test]
    fn messages_parse_into_wire_messages() {
        let l = TagLayout::default();
        let env = Envelope::new(4, 5, 6);
        let tag = l.encode(&env);
        let mut b = vec![0u8; 64];
        let tmh = Tmh {
            opcode: TmOpcode::Eager,
            reserved: [0; 3],
            app_ctx: 0,
            tag,
        };
        let n = TmRepr {
            tmh,
            rvh: None,
            payload: b"hello",
        }
        .emit(&mut b)
        .unwrap();
        let m = parse_message(&l, &b[..n]).unwrap();
        assert_eq!((m.tmh, m.rvh, m.len), (tmh, None, 5));
        assert_eq!(m.payload.env, env);
        assert!(matches!(&m.payload.msg, Incoming::Eager(d) if d == b"hello"));

        let rvh = Rvh {
            va: 0x1000,
            rkey: 7,
            len: 1 << 20,
        };
        let rndv = TmRepr {
            tmh: Tmh {
                opcode: TmOpcode::Rndv,
                app_ctx: 9,
                ..tmh
            },
            rvh: Some(rvh),
            payload: &[],
        };
        let n = rndv.emit(&mut b).unwrap();
        let m = parse_message(&l, &b[..n]).unwrap();
        assert_eq!((m.rvh, m.tmh.app_ctx, m.payload.env), (Some(rvh), 9, env));
        assert!(matches!(m.payload.msg, Incoming::Rndv { tmh } if tmh.app_ctx == 9));

        let n = TmRepr::fin_for(&rndv).emit(&mut b).unwrap();
        let m = parse_message(&l, &b[..n]).unwrap();
        assert_eq!((m.tmh.opcode, m.tmh.app_ctx), (TmOpcode::Fin, 9));
        assert!(matches!(m.payload.msg, Incoming::Control));

        // Truncated headers, unknown opcodes and saturated tags are refused.
        assert!(parse_message(&l, &b[..10]).is_none());
        b[0] = 9;
        assert!(parse_message(&l, &b[..n]).is_none());
        let sat = TmRepr {
            tmh: Tmh {
                tag: u64::MAX,
                ..tmh
            },
            rvh: None,
            payload: &[],
        };
        let n = sat.emit(&mut b).unwrap();
        assert!(parse_message(&l, &b[..n]).is_none());
    }
    /// The model behind the *verbs* translation: every list-operation and tag-matching
    /// completion of the model is turned into a `Wc` with the verbs numbers and goes
    /// through `TmBook::convert`; posts go through `TmBook::admit`.
    struct ModelViaVerbs {
        srq: tagmatch_engine::tm_srq::TmSrq<Carried<Incoming>>,
        book: TmBook,
    }

    impl TmBackend<Incoming> for ModelViaVerbs {
        type Buf = Sge;

        fn buf_len(buf: &Sge) -> u32 {
            buf.len
        }

        fn caps(&self) -> TmCaps {
            self.srq.caps()
        }

        fn replenish(&mut self) {
            self.srq.post_srq_recv(u64::MAX);
        }

        fn post_op(
            &mut self,
            wr: OpsWr,
            _sge: Option<Sge>,
        ) -> std::result::Result<Option<u32>, PostOpError> {
            let add = matches!(wr.op, TmOp::Add { .. });
            assert!(TmBook::well_formed(&wr), "{wr:?}");
            self.book.admit(add)?;
            let r = self.srq.post_op(wr);
            if let Ok(h) = r {
                self.book.posted(&wr, h);
            }
            r
        }

        fn poll(&mut self) -> Option<Cqe<Carried<Incoming>>> {
            let c = self.srq.poll_cq()?;
            // Attributed by wr_id alone, as `VerbsTm` does (the model's receive-queue
            // buffers carry their messages; the rest goes through the verbs translation).
            if matches!(wr_id::kind(c.wr_id), WrKind::Rq(_)) {
                return Some(c);
            }
            let wc = Wc {
                wr_id: c.wr_id,
                status: c.status as u32,
                opcode: c.opcode as u32,
                byte_len: c.byte_len,
                qp_num: 0,
                wc_flags: c.wc_flags,
                tm: c.tm_info.map(|t| (t.tag, t.priv_)),
            };
            let out = self.book.convert(&wc).expect("a TM completion");
            assert_eq!(self.book.ops_outstanding, self.srq.ops_outstanding());
            Some(out)
        }
    }

    /// The driver over the verbs translation equals the driver over the model, also when
    /// a list operation fails mid-run (every third seed: `inject_op_failure`, the verbs
    /// error state) and when the error completions reaching the translation have undefined
    /// opcode and flags (every other seed: `set_scramble_errors`, `ibv_poll_cq(3)`: on error
    /// "only ... wr_id, status, qp_num, and vendor_err" are valid).
    #[test]
    fn verbs_translation_keeps_the_engine_drivers_matches() {
        use tagmatch_engine::tm_srq::{TmCaps, TmSrq};
        use tagmatch_engine::{Source, TagSel};
        let mut total_hw = 0;
        let mut total_stops = 0;
        for seed in 1..120u64 {
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut below = |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            let caps = TmCaps::with_tags(1 + (seed % 4) as u32);
            let cfg = DriverConfig {
                caps: Some(caps),
                srq_depth: 64,
                ..DriverConfig::default()
            };
            let mut reference: Driver<u32, u32> = Driver::new(cfg);
            let mut srq = TmSrq::new(caps, cfg.mtu).unwrap();
            for _ in 0..64 {
                srq.post_srq_recv(u64::MAX);
            }
            let book = TmBook::new(cfg.layout, caps.max_ops, caps.max_num_tags);
            let mut ours: Driver<u32, Incoming, ModelViaVerbs> =
                Driver::with_backend(cfg, Some(ModelViaVerbs { srq, book }));
            let fail_at = (seed % 3 == 0).then(|| below(200) as u32);
            if seed % 2 == 0 {
                ours.hw_mut().unwrap().srq.set_scramble_errors(true);
            }
            let (mut log_ref, mut log_ours) = (Vec::new(), Vec::new());
            let sge = Sge {
                addr: 0,
                len: 64,
                lkey: 0,
            };
            let mut handles = Vec::new();
            let log = |ev: Vec<String>, into: &mut Vec<String>| into.extend(ev);
            for step in 0..300u32 {
                if fail_at == Some(step) {
                    let st = WcStatus::GeneralErr;
                    reference.hw_mut().unwrap().inject_op_failure(st);
                    ours.hw_mut().unwrap().srq.inject_op_failure(st);
                }
                match below(6) {
                    0 | 1 => {
                        let src = if below(4) == 0 {
                            Source::Any
                        } else {
                            Source::Rank(below(2) as u32)
                        };
                        let tag = if below(5) == 0 {
                            TagSel::Any
                        } else {
                            TagSel::Exact(below(3))
                        };
                        let spec = RecvSpec { comm: 0, src, tag };
                        match (
                            reference.post(spec, 64, step).unwrap(),
                            ours.post(spec, sge, step).unwrap(),
                        ) {
                            (PostOutcome::Pending(a), PostOutcome::Pending(b)) => {
                                assert_eq!(a, b);
                                handles.push(a);
                            }
                            (PostOutcome::Matched(a), PostOutcome::Matched(b)) => {
                                assert_eq!((a.recv, a.env), (b.recv, b.env), "seed {seed}")
                            }
                            (a, b) => panic!("seed {seed}: {a:?} vs {b:?}"),
                        }
                    }
                    2 => {
                        let env = Envelope::new(0, below(2) as u32, below(3));
                        let tag = cfg.layout.encode(&env);
                        reference.wire(reference.eager(env, 8, step)).unwrap();
                        let m = WireMsg::eager(
                            tag,
                            0,
                            8,
                            Carried {
                                env,
                                msg: Incoming::Eager(vec![0; 8]),
                            },
                        );
                        ours.hw_mut().unwrap().srq.arrive(m).unwrap();
                    }
                    3 => {
                        reference.hw_mut().unwrap().execute_op();
                        ours.hw_mut().unwrap().srq.execute_op();
                    }
                    4 if !handles.is_empty() => {
                        let h = handles.swap_remove(below(handles.len() as u64) as usize);
                        let a = reference.cancel(h).map(|o| format!("{o:?}"));
                        let b = ours.cancel(h).map(|o| match o {
                            CancelOutcome::Cancelled(r) => format!("Cancelled({r})"),
                            CancelOutcome::InProgress => "InProgress".to_owned(),
                        });
                        assert_eq!(a.is_ok(), b.is_ok(), "seed {seed}");
                        if let (Ok(a), Ok(b)) = (a, b) {
                            assert_eq!(a, b, "seed {seed}");
                        }
                    }
                    _ => {
                        let (mut a, mut b) = (Vec::new(), Vec::new());
                        reference.poll(&mut a);
                        ours.poll(&mut b);
                        log(summarize(a), &mut log_ref);
                        log(summarize(b), &mut log_ours);
                    }
                }
            }
            let (mut a, mut b) = (Vec::new(), Vec::new());
            reference.settle(&mut a);
            loop {
                ours.poll(&mut b);
                let srq = &mut ours.hw_mut().unwrap().srq;
                if !srq.execute_op() && srq.cq_len() == 0 && ours.deferred_ops() == 0 {
                    break;
                }
            }
            log(summarize(a), &mut log_ref);
            log(summarize(b), &mut log_ours);
            assert_eq!(log_ref, log_ours, "seed {seed}");
            let (rc, oc) = (reference.counters(), ours.counters());
            assert_eq!(
                (rc.offloaded, rc.matched_hw, rc.hw_unexpected, rc.syncs),
                (oc.offloaded, oc.matched_hw, oc.hw_unexpected, oc.syncs),
                "seed {seed}"
            );
            assert_eq!(oc.order_violations, 0);
            assert_eq!(
                (rc.offload_stops, rc.returned_to_sw, rc.del_errors),
                (oc.offload_stops, oc.returned_to_sw, oc.del_errors),
                "seed {seed}"
            );
            let book = &ours.hw().unwrap().book;
            match fail_at {
                None => assert!(book.errors.is_empty(), "{:?}", book.errors),
                Some(_) => assert!(
                    book.errors
                        .iter()
                        .all(|e| e.starts_with("TM list operation")),
                    "{:?}",
                    book.errors
                ),
            }
            // Nothing leaked: every operation slot and tag entry was given back.
            let srq = &ours.hw().unwrap().srq;
            assert_eq!(book.ops_outstanding, srq.ops_outstanding(), "seed {seed}");
            assert_eq!(book.tags_in_use as usize, srq.tags_in_use(), "seed {seed}");
            total_hw += oc.matched_hw;
            total_stops += oc.offload_stops;
        }
        assert!(
            total_stops > 0,
            "no run stopped offload: the failures were vacuous"
        );
        assert!(
            total_hw > 0,
            "no hardware match in any run: the comparison is vacuous"
        );
    }

    /// wire-layouts §C.1: mlx5 reports an unexpected message as "IBV_WC_TM_RECV with no
    /// MATCH flag"; its bytes are in a receive-queue buffer like an `IBV_WC_RECV`'s. Which
    /// buffer a completion names is read from its `wr_id` alone (disjoint spaces), never
    /// from the opcode or flags, which an error completion leaves undefined.
    #[test]
    fn unexpected_tm_recv_without_match_is_read_from_the_receive_queue() {
        let wc = |wr_id, opcode, status, wc_flags| Wc {
            wr_id,
            status,
            opcode,
            byte_len: 24,
            qp_num: 0,
            wc_flags,
            tm: None,
        };
        let ok = sys::IBV_WC_SUCCESS;
        let rq = wr_id::rq(3);
        let all = sys::IBV_WC_TM_MATCH | sys::IBV_WC_TM_DATA_VALID | sys::IBV_WC_TM_SYNC_REQ;
        for (opcode, flags) in [
            (sys::IBV_WC_RECV, 0),
            (sys::IBV_WC_TM_NO_TAG, 0),
            (sys::IBV_WC_TM_RECV, 0),
            (sys::IBV_WC_TM_RECV, sys::IBV_WC_TM_SYNC_REQ),
        ] {
            assert!(in_rq_buffer(&wc(rq, opcode, ok, flags)));
            // The same slot number as a tagged buffer's recv_wr_id is not a queue buffer.
            assert!(!in_rq_buffer(&wc(3, opcode, ok, flags)));
        }
        // Error completions: opcode and flags are garbage, the wr_id decides.
        for st in [sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_LOC_LEN_ERR, 99] {
            assert!(in_rq_buffer(&wc(rq, sys::IBV_WC_TM_ADD, st, all)));
            assert!(!in_rq_buffer(&wc(3, sys::IBV_WC_RECV, st, 0)));
            assert!(!in_rq_buffer(&wc(wr_id::op(3), sys::IBV_WC_RECV, st, 0)));
        }
    }

    /// A book with one ADD posted for receive `recv` (entry handle `handle`).
    fn book_with_add(recv: u64, handle: u32, op: u64) -> (TmBook, OpsWr) {
        let mut book = TmBook::new(TagLayout::default(), 4, 2);
        let wr = OpsWr {
            wr_id: wr_id::op(op),
            flags: 3,
            unexpected_cnt: 0,
            op: TmOp::Add {
                recv_wr_id: recv,
                tag: 7,
                mask: u64::MAX,
                buf_len: 64,
            },
        };
        book.admit(true).unwrap();
        book.posted(&wr, Some(handle));
        (book, wr)
    }

    fn tm_wc(wr_id: u64, status: u32, opcode: u32, wc_flags: u32) -> Wc {
        Wc {
            wr_id,
            status,
            opcode,
            byte_len: 0,
            qp_num: 0,
            wc_flags,
            tm: None,
        }
    }

    /// A failed data completion of a hardware match keeps its verbs status for the
    /// transport's `Completion::Recv` (the driver reports it as `DataValid` with an error
    /// status, not as valid data).
    #[test]
    fn failed_data_completion_keeps_its_verbs_status() {
        let (mut book, _) = book_with_add(5, 0, 0);
        let add = tm_wc(wr_id::op(0), sys::IBV_WC_SUCCESS, sys::IBV_WC_TM_ADD, 0);
        book.convert(&add).expect("the ADD");
        let matched = tm_wc(
            5,
            sys::IBV_WC_SUCCESS,
            sys::IBV_WC_TM_RECV,
            sys::IBV_WC_TM_MATCH,
        );
        let c = book.convert(&matched).expect("the match");
        assert_eq!(c.wc_flags & sys::IBV_WC_TM_MATCH, sys::IBV_WC_TM_MATCH);
        assert_eq!(book.tags_in_use, 0);
        // The data completion fails; its opcode and flags are undefined (here: garbage).
        let wc = tm_wc(
            5,
            sys::IBV_WC_REM_ACCESS_ERR,
            sys::IBV_WC_RECV,
            sys::IBV_WC_TM_MATCH,
        );
        assert!(!in_rq_buffer(&wc));
        let c = book.convert(&wc).expect("a TM completion");
        assert_eq!((c.wr_id, c.opcode), (5, WcOpcode::TmRecv));
        assert_eq!(c.status, WcStatus::RemAccessErr);
        assert_eq!(c.wc_flags, 0);
        assert_eq!(book.data_err.get(&5), Some(&sys::IBV_WC_REM_ACCESS_ERR));
        assert!(!book.data_len.contains_key(&5));
        assert!(book.tagged.is_empty());
    }

    /// Error completions release what they hold whatever their (undefined) opcode and
    /// flags: a failed ADD its operation slot and its tag entry (no entry was created), a
    /// failed match its tag entry; an unknown status is `GeneralErr`, never `LocLenErr`.
    #[test]
    fn error_completions_release_slots_and_entries_by_wr_id() {
        // A failed ADD, opcode garbage.
        let (mut book, _) = book_with_add(1, 0, 0);
        assert_eq!((book.ops_outstanding, book.tags_in_use), (1, 1));
        let wc = tm_wc(
            wr_id::op(0),
            sys::IBV_WC_GENERAL_ERR,
            sys::IBV_WC_RECV,
            0xff,
        );
        let c = book.convert(&wc).expect("the ADD's completion");
        assert_eq!(
            (c.opcode, c.status, c.wc_flags),
            (WcOpcode::TmAdd, WcStatus::GeneralErr, 0)
        );
        assert_eq!((book.ops_outstanding, book.tags_in_use), (0, 0));
        assert!(book.tagged.is_empty() && book.handles.is_empty());
        // The first completion of a tagged buffer fails without TM_MATCH: the entry is
        // consumed all the same (no leak), no message is made up.
        let (mut book, _) = book_with_add(2, 1, 9);
        book.convert(&tm_wc(wr_id::op(9), 0, sys::IBV_WC_TM_ADD, 0))
            .unwrap();
        let wc = tm_wc(2, sys::IBV_WC_LOC_LEN_ERR, sys::IBV_WC_TM_NO_TAG, 0);
        let c = book.convert(&wc).expect("the match's completion");
        assert_eq!(
            (c.opcode, c.status, c.wc_flags),
            (WcOpcode::TmRecv, WcStatus::LocLenErr, 0)
        );
        assert!(c.msg.is_none());
        assert_eq!(book.tags_in_use, 0);
        assert_eq!(book.failed_tag.get(&2), Some(&7));
        // An unknown status is a general error, and logged.
        let (mut book, _) = book_with_add(3, 0, 4);
        let c = book.convert(&tm_wc(wr_id::op(4), 1000, 0, 0)).unwrap();
        assert_eq!(c.status, WcStatus::GeneralErr);
        assert!(book
            .errors
            .iter()
            .any(|e| e.contains("unknown completion status 1000")));
        // A receive-queue wr_id or one the book never posted is not taken for a TM one.
        assert!(book
            .convert(&tm_wc(wr_id::rq(0), 0, sys::IBV_WC_TM_RECV, 0))
            .is_none());
        assert!(book
            .convert(&tm_wc(wr_id::op(77), 0, sys::IBV_WC_TM_ADD, 0))
            .is_none());
        assert!(book
            .convert(&tm_wc(77, 0, sys::IBV_WC_TM_RECV, 0))
            .is_none());
    }

    /// A failed DEL leaves its entry (still counted); a successful one frees it.
    #[test]
    fn del_completions_free_the_entry_only_on_success() {
        for (status, left) in [(sys::IBV_WC_SUCCESS, 0), (sys::IBV_WC_LOC_QP_OP_ERR, 1)] {
            let (mut book, _) = book_with_add(1, 3, 0);
            book.convert(&tm_wc(wr_id::op(0), 0, sys::IBV_WC_TM_ADD, 0))
                .unwrap();
            let del = OpsWr {
                wr_id: wr_id::op(1),
                flags: 3,
                unexpected_cnt: 0,
                op: TmOp::Del { handle: 3 },
            };
            book.posted(&del, None);
            let c = book
                .convert(&tm_wc(wr_id::op(1), status, sys::IBV_WC_RECV, 0))
                .unwrap();
            assert_eq!(c.opcode, WcOpcode::TmDel);
            assert_eq!(
                (book.tags_in_use, book.ops_outstanding),
                (left, 0),
                "{status}"
            );
        }
    }

    #[test]
    fn cancel_of_an_offloaded_receive_goes_through_del() {
        use tagmatch_engine::tm_srq::{TmCaps, TmSrq};
        let caps = TmCaps::with_tags(4);
        let srq = TmSrq::new(caps, 4096).unwrap();
        let book = TmBook::new(TagLayout::default(), caps.max_ops, caps.max_num_tags);
        let mut d: Driver<u32, Incoming, ModelViaVerbs> =
            Driver::with_backend(DriverConfig::default(), Some(ModelViaVerbs { srq, book }));
        assert_eq!(d.config().caps, Some(caps));
        let sge = Sge {
            addr: 0,
            len: 64,
            lkey: 0,
        };
        let PostOutcome::Pending(h) = d.post(RecvSpec::exact(0, 0, 5), sge, 7).unwrap() else {
            panic!("expected pending");
        };
        assert_eq!(d.is_offloaded(h), Some(true));
        assert_eq!(d.hw().unwrap().book.tags_in_use, 1);
        assert!(matches!(d.cancel(h), Ok(CancelOutcome::InProgress)));
        let mut ev = Vec::new();
        while d.hw_mut().unwrap().srq.execute_op() {}
        d.poll(&mut ev);
        assert!(matches!(ev.as_slice(), [Event::Cancelled { recv: 7, .. }]));
        assert_eq!(d.is_offloaded(h), None);
        assert!(d.cancel(h).is_err());
        // The DEL's completion gave the entry and the operation slots back.
        let book = &d.hw().unwrap().book;
        assert_eq!((book.tags_in_use, book.ops_outstanding), (0, 0));
        assert!(book.errors.is_empty(), "{:?}", book.errors);
    }

    fn summarize<R: std::fmt::Debug, M>(ev: Vec<Event<R, M>>) -> Vec<String> {
        ev.into_iter()
            .filter_map(|e| match e {
                Event::Matched(m) => Some(format!("match {:?} {:?} {:?}", m.recv, m.env, m.path)),
                Event::Cancelled { recv, .. } => Some(format!("cancelled {recv:?}")),
                Event::CancelFailed { handle } => Some(format!("cancel-failed {handle:?}")),
                Event::RecvFailed { handle, status, .. } => {
                    Some(format!("recv-failed {handle:?} {status:?}"))
                }
                _ => None,
            })
            .collect()
    }
}

//! An executable model of a Tag-Matching SRQ (rdma-core `Documentation/tag_matching.md`,
//! mlx5 provider behaviour from wire-layouts §C.1), used by the offload driver
//! ([`crate::offload`], whose default [`crate::offload::TmBackend`] it is) and its tests.
//! Its types ([`OpsWr`], [`Cqe`], ...) are also the vocabulary in which a real device's
//! backend talks to the driver.
//!
//! The model is *sans-IO and step-driven*: posting an operation only queues it; the caller
//! (a test, the replay tool) decides when the "hardware" executes the next queued operation
//! ([`TmSrq::execute_op`]), when a message hits the wire ([`TmSrq::arrive`]), when a
//! rendezvous read or a multi-packet transfer finishes ([`TmSrq::complete_transfer`]) and when
//! completions are polled ([`TmSrq::poll_cq`]). Every interleaving of those steps is a legal
//! hardware behaviour, which is what the exhaustive tests enumerate.
//!
//! # Contract modelled
//!
//! - Capabilities [`TmCaps`]: `max_num_tags` entries in the tag list, `max_ops` outstanding
//!   list operations, `max_rndv_hdr_size` bytes of rendezvous request (TMH + RVH + data).
//! - [`TmSrq::post_op`] is `ibv_post_srq_ops` for one work request. ADD returns the entry
//!   handle at post time (mlx5: the list index); operations execute in posting order.
//! - Unexpected-message count and *phase*: the hardware counts tagged messages it delivered
//!   as unexpected (`hw_cnt`); operations posted with [`ops_flags::TM_SYNC`] report the
//!   software's count (`sw_cnt`). An entry appended while `sw_cnt != hw_cnt` is **disabled**
//!   ("new tags" whose poster had not seen every unexpected message); when an operation
//!   brings `sw_cnt == hw_cnt`, every disabled entry is enabled. Disabled entries always form
//!   a suffix of the list (see the proof in [`crate::offload`]). A message whose first
//!   matching entry is disabled goes to software as unexpected.
//! - Counts are compared on 16 bits, as mlx5 puts them in the WQE.
//! - Completion flags: `TM_SYNC_REQ` on every list-operation completion executed while the
//!   counts disagree, and on an unexpected (`RECV`) completion once more than `0x3fff`
//!   unexpected messages are unreported (mlx5's `MLX5_TM_MAX_SYNC_DIFF`); `TM_MATCH` /
//!   `TM_DATA_VALID` on tag-matching receive completions.
//! - Entry lifetime (handle reuse): a handle is free again only once its entry left the
//!   list *and* no queued operation nor unpolled completion refers to it (mlx5 keeps a tag
//!   "until its consume completion"), so a late DEL can never hit a recycled entry.
//!
//! Simplifications (documented, deliberate): one SGE per tagged buffer, buffer contents are
//! not materialised (lengths only), receive queue buffers are counted, not addressed.
#![allow(clippy::module_name_repetitions)]

use std::collections::VecDeque;

use tagmatch_wire::tm::{Rvh, TmOpcode, TmRepr, Tmh, RVH_LEN, TMH_LEN};

/// `struct ibv_tm_caps` (the part the model uses) / `struct ibv_tm_cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TmCaps {
    /// Max number of tagged buffers in the matching list.
    pub max_num_tags: u32,
    /// Max number of outstanding tag-list operations.
    pub max_ops: u32,
    /// Max size of a rendezvous request (TMH + RVH + optional data).
    pub max_rndv_hdr_size: u32,
}

impl TmCaps {
    /// Capabilities with `max_ops = 2 * tags + 2` (UCX's command QP length) and mlx5's
    /// `max_rndv_hdr_size = 64`.
    pub const fn with_tags(max_num_tags: u32) -> Self {
        TmCaps {
            max_num_tags,
            max_ops: max_num_tags.saturating_mul(2).saturating_add(2),
            max_rndv_hdr_size: 64,
        }
    }
}

/// wire-layouts §C.1: `MLX5_TM_MAX_SYNC_DIFF`, the unreported unexpected messages above which
/// an unexpected completion carries `TM_SYNC_REQ`.
const MAX_SYNC_DIFF: u32 = 0x3fff;

/// `enum ibv_wc_status` (every value of `verbs.h`, wire-layouts §B). The model produces
/// `Success`, `LocLenErr`, `TmErr`, `TmRndvIncomplete`, and with fault injection
/// ([`TmSrq::inject_op_failure`]) any of them plus `WrFlushErr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS`.
    Success = 0,
    /// `IBV_WC_LOC_LEN_ERR`: an eager payload longer than the tagged buffer.
    LocLenErr = 1,
    /// `IBV_WC_LOC_QP_OP_ERR`.
    LocQpOpErr = 2,
    /// `IBV_WC_LOC_EEC_OP_ERR`.
    LocEecOpErr = 3,
    /// `IBV_WC_LOC_PROT_ERR`.
    LocProtErr = 4,
    /// `IBV_WC_WR_FLUSH_ERR`: the work request was flushed (its queue is in the error
    /// state) and had no effect.
    WrFlushErr = 5,
    /// `IBV_WC_MW_BIND_ERR`.
    MwBindErr = 6,
    /// `IBV_WC_BAD_RESP_ERR`.
    BadRespErr = 7,
    /// `IBV_WC_LOC_ACCESS_ERR`.
    LocAccessErr = 8,
    /// `IBV_WC_REM_INV_REQ_ERR`.
    RemInvReqErr = 9,
    /// `IBV_WC_REM_ACCESS_ERR`.
    RemAccessErr = 10,
    /// `IBV_WC_REM_OP_ERR`.
    RemOpErr = 11,
    /// `IBV_WC_RETRY_EXC_ERR`.
    RetryExcErr = 12,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`.
    RnrRetryExcErr = 13,
    /// `IBV_WC_LOC_RDD_VIOL_ERR`.
    LocRddViolErr = 14,
    /// `IBV_WC_REM_INV_RD_REQ_ERR`.
    RemInvRdReqErr = 15,
    /// `IBV_WC_REM_ABORT_ERR`.
    RemAbortErr = 16,
    /// `IBV_WC_INV_EECN_ERR`.
    InvEecnErr = 17,
    /// `IBV_WC_INV_EEC_STATE_ERR`.
    InvEecStateErr = 18,
    /// `IBV_WC_FATAL_ERR`.
    FatalErr = 19,
    /// `IBV_WC_RESP_TIMEOUT_ERR`.
    RespTimeoutErr = 20,
    /// `IBV_WC_GENERAL_ERR` (also what [`WcStatus::from_code`] makes of a value `verbs.h`
    /// does not define).
    GeneralErr = 21,
    /// `IBV_WC_TM_ERR`: DEL of an entry that was already consumed.
    TmErr = 22,
    /// `IBV_WC_TM_RNDV_INCOMPLETE`: rendezvous into a too-small tagged buffer; TMH+RVH were
    /// scattered into it and software continues.
    TmRndvIncomplete = 23,
}

impl WcStatus {
    const ALL: [WcStatus; 24] = [
        WcStatus::Success,
        WcStatus::LocLenErr,
        WcStatus::LocQpOpErr,
        WcStatus::LocEecOpErr,
        WcStatus::LocProtErr,
        WcStatus::WrFlushErr,
        WcStatus::MwBindErr,
        WcStatus::BadRespErr,
        WcStatus::LocAccessErr,
        WcStatus::RemInvReqErr,
        WcStatus::RemAccessErr,
        WcStatus::RemOpErr,
        WcStatus::RetryExcErr,
        WcStatus::RnrRetryExcErr,
        WcStatus::LocRddViolErr,
        WcStatus::RemInvRdReqErr,
        WcStatus::RemAbortErr,
        WcStatus::InvEecnErr,
        WcStatus::InvEecStateErr,
        WcStatus::FatalErr,
        WcStatus::RespTimeoutErr,
        WcStatus::GeneralErr,
        WcStatus::TmErr,
        WcStatus::TmRndvIncomplete,
    ];

    /// The status of an `ibv_wc.status` value; `None` for a value `verbs.h` does not define.
    pub fn from_code(code: u32) -> Option<WcStatus> {
        Self::ALL.get(code as usize).copied()
    }

    /// Whether the other fields of the completion are defined. `ibv_poll_cq(3)`: "If the
    /// status is other than IBV_WC_SUCCESS, only the following attributes are valid: wr_id,
    /// status, qp_num, and vendor_err"; `IBV_WC_TM_RNDV_INCOMPLETE` is the one TM status
    /// that reports a completed match (rdma-core-tag-matching: "tag-matching has still been
    /// completed!").
    pub fn fields_valid(self) -> bool {
        matches!(self, WcStatus::Success | WcStatus::TmRndvIncomplete)
    }
}

/// `enum ibv_wc_opcode` values of a TM-SRQ's CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcOpcode {
    /// `IBV_WC_RECV`: a tagged message handled as unexpected (whole message, TMH included).
    Recv = 128,
    /// `IBV_WC_TM_ADD`.
    TmAdd = 130,
    /// `IBV_WC_TM_DEL`.
    TmDel = 131,
    /// `IBV_WC_TM_SYNC`.
    TmSync = 132,
    /// `IBV_WC_TM_RECV`: a tag-matching receive completion.
    TmRecv = 133,
    /// `IBV_WC_TM_NO_TAG`: a NO_TAG (or FIN) message, always in software.
    TmNoTag = 134,
}

/// `enum ibv_wc_flags` bits of TM completions.
pub mod wc_flags {
    /// `IBV_WC_TM_SYNC_REQ`: software must report its unexpected count.
    pub const TM_SYNC_REQ: u32 = 16;
    /// `IBV_WC_TM_MATCH`: a match was performed.
    pub const TM_MATCH: u32 = 32;
    /// `IBV_WC_TM_DATA_VALID`: all data of the matched message is in memory.
    pub const TM_DATA_VALID: u32 = 64;
}

/// `enum ibv_ops_flags`.
pub mod ops_flags {
    /// `IBV_OPS_SIGNALED`: produce a completion.
    pub const SIGNALED: u32 = 1;
    /// `IBV_OPS_TM_SYNC`: `unexpected_cnt` is valid and reports software's count.
    pub const TM_SYNC: u32 = 2;
}

/// The operation of a work request (`enum ibv_ops_wr_opcode` with its `tm` arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TmOp {
    /// `IBV_WR_TAG_ADD`: append a tagged buffer of `buf_len` bytes matching
    /// `tag & mask == self.tag & mask`.
    Add {
        /// `tm.add.recv_wr_id`: identifies the buffer in receive completions.
        recv_wr_id: u64,
        /// `tm.add.tag`.
        tag: u64,
        /// `tm.add.mask`.
        mask: u64,
        /// Length of the single SGE.
        buf_len: u32,
    },
    /// `IBV_WR_TAG_DEL` of the entry `handle`.
    Del {
        /// `tm.handle` returned by the ADD.
        handle: u32,
    },
    /// `IBV_WR_TAG_SYNC`: report the count only.
    Sync,
}

/// `struct ibv_ops_wr` for one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpsWr {
    /// `wr_id` of the operation's own completion.
    pub wr_id: u64,
    /// [`ops_flags`] bits.
    pub flags: u32,
    /// `tm.unexpected_cnt`: unexpected messages handled by software (with
    /// [`ops_flags::TM_SYNC`]).
    pub unexpected_cnt: u32,
    /// What to do.
    pub op: TmOp,
}

/// Why [`TmSrq::post_op`] refused a work request (the `errno` of `ibv_post_srq_ops`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PostOpError {
    /// `max_ops` operations are outstanding (ENOMEM on the command QP).
    OpsFull,
    /// No free tag entry (mlx5: ENOMEM when `!tm_head->next`).
    TagsFull,
    /// DEL of a handle that names no entry (EINVAL).
    BadHandle,
}

/// A message on the wire: TMH, RVH for RNDV/FIN, the length of what follows the headers,
/// and an opaque payload value carried along (the model does not look inside it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WireMsg<P> {
    /// Tag-matching header.
    pub tmh: Tmh,
    /// Rendezvous header (RNDV and FIN).
    pub rvh: Option<Rvh>,
    /// Bytes after the headers: eager payload, or the RNDV request's optional data.
    pub len: u32,
    /// The payload value (for the driver: the envelope and the user message).
    pub payload: P,
}

impl<P> WireMsg<P> {
    /// An EAGER message of `len` payload bytes.
    pub fn eager(tag: u64, app_ctx: u32, len: u32, payload: P) -> Self {
        WireMsg {
            tmh: Tmh {
                opcode: TmOpcode::Eager,
                reserved: [0; 3],
                app_ctx,
                tag,
            },
            rvh: None,
            len,
            payload,
        }
    }

    /// A RNDV request for `rvh.len` bytes, carrying `hdr_data` bytes of optional data.
    pub fn rndv(tag: u64, app_ctx: u32, rvh: Rvh, hdr_data: u32, payload: P) -> Self {
        WireMsg {
            tmh: Tmh {
                opcode: TmOpcode::Rndv,
                reserved: [0; 3],
                app_ctx,
                tag,
            },
            rvh: Some(rvh),
            len: hdr_data,
            payload,
        }
    }

    /// A NO_TAG message of `len` bytes.
    pub fn no_tag(len: u32, payload: P) -> Self {
        WireMsg {
            tmh: Tmh {
                opcode: TmOpcode::NoTag,
                reserved: [0; 3],
                app_ctx: 0,
                tag: 0,
            },
            rvh: None,
            len,
            payload,
        }
    }

    /// The message of a parsed TM packet ([`TmRepr`] from `tagmatch-wire`).
    pub fn from_repr(r: &TmRepr<'_>, payload: P) -> Self {
        WireMsg {
            tmh: r.tmh,
            rvh: r.rvh,
            len: u32::try_from(r.payload.len()).unwrap_or(u32::MAX),
            payload,
        }
    }

    /// Total bytes on the wire (headers included).
    pub fn wire_len(&self) -> u64 {
        TMH_LEN as u64 + self.rvh.map_or(0, |_| RVH_LEN as u64) + u64::from(self.len)
    }
}

/// `struct ibv_wc_tm_info`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TmInfo {
    /// Tag from the TMH.
    pub tag: u64,
    /// Opaque user data (`app_ctx`) from the TMH.
    pub priv_: u32,
}

/// A completion of the TM-SRQ's CQ (`struct ibv_wc` plus the extended fields used).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cqe<P> {
    /// Operation `wr_id`, tagged buffer `recv_wr_id`, or receive-queue buffer `wr_id`.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Opcode.
    pub opcode: WcOpcode,
    /// [`wc_flags`] bits.
    pub wc_flags: u32,
    /// Bytes delivered.
    pub byte_len: u32,
    /// TM info of tag-matching receive completions.
    pub tm_info: Option<TmInfo>,
    /// For `RECV` / `TM_NO_TAG`: the whole message; for the `TM_MATCH` completion of a
    /// `TM_RECV`: the matched message (headers stripped, the payload value carried); for
    /// `TM_RNDV_INCOMPLETE`: the TMH and RVH scattered into the buffer.
    pub msg: Option<WireMsg<P>>,
    /// Entry handle this completion refers to (internal bookkeeping of handle reuse).
    slot: Option<u32>,
    /// A list-operation completion (internal bookkeeping of `max_ops`).
    op: bool,
}

impl<P> Cqe<P> {
    /// A completion produced outside the model (a real device's CQ translated into this
    /// vocabulary, e.g. by an [`crate::offload::TmBackend`]): `byte_len` is 0 and
    /// `tm_info` is `None` until the caller sets those public fields.
    pub fn new(
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        wc_flags: u32,
        msg: Option<WireMsg<P>>,
    ) -> Self {
        Cqe {
            wr_id,
            status,
            opcode,
            wc_flags,
            byte_len: 0,
            tm_info: None,
            msg,
            slot: None,
            op: false,
        }
    }
}

/// Why [`TmSrq::arrive`] refused a message (the sender sees an error, the SRQ is unchanged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArriveError<P> {
    /// No receive-queue buffer for an unexpected or NO_TAG message (RNR).
    Rnr(WireMsg<P>),
    /// A RNDV request larger than `max_rndv_hdr_size`.
    RndvHdrTooLarge(WireMsg<P>),
}

/// One entry of the matching list as the tests see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EntryView {
    /// Handle.
    pub handle: u32,
    /// `recv_wr_id`.
    pub recv_wr_id: u64,
    /// Tag (pre-masked).
    pub tag: u64,
    /// Mask.
    pub mask: u64,
    /// Whether it may match (false: appended while the counts disagreed).
    pub enabled: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum SlotState {
    Free,
    /// ADD posted, not executed.
    Queued,
    /// In the list.
    Listed,
    /// Consumed or deleted; waiting for references to drain.
    Gone,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Slot {
    state: SlotState,
    /// Queued operations and unpolled completions naming this handle.
    refs: u32,
    recv_wr_id: u64,
    tag: u64,
    mask: u64,
    buf_len: u32,
    enabled: bool,
}

const FREE_SLOT: Slot = Slot {
    state: SlotState::Free,
    refs: 0,
    recv_wr_id: 0,
    tag: 0,
    mask: 0,
    buf_len: 0,
    enabled: false,
};

/// A data transfer in progress: a rendezvous RDMA-Read or the rest of a multi-packet eager.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Transfer {
    slot: u32,
    recv_wr_id: u64,
    bytes: u32,
    tag: u64,
    app_ctx: u32,
    /// `Some` for rendezvous: the FIN to send afterwards.
    fin: Option<(Tmh, Rvh)>,
}

/// The Tag-Matching SRQ model. `P` is the payload value carried by messages.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TmSrq<P> {
    caps: TmCaps,
    mtu: u32,
    honor_phase: bool,
    slots: Vec<Slot>,
    /// Handles in list (append) order.
    list: Vec<u32>,
    /// Queued operations with the handle they name (`u32::MAX` for SYNC).
    ops: VecDeque<(OpsWr, u32)>,
    /// Outstanding operations: queued, or executed signaled and not yet polled.
    ops_outstanding: u32,
    cq: VecDeque<Cqe<P>>,
    transfers: VecDeque<Transfer>,
    srq_bufs: VecDeque<u64>,
    hw_cnt: u32,
    sw_cnt: u32,
    /// The count of the last *posted* operation with `TM_SYNC` (mlx5's `unexp_out`).
    unexp_out: u32,
    fins: Vec<(Tmh, Rvh)>,
    reads: Vec<Rvh>,
    /// Fault injection: the status of the next operation to execute.
    op_failure: Option<WcStatus>,
    /// The operation queue is in the error state: every operation is flushed.
    ops_broken: bool,
    /// Fault injection: error completions carry arbitrary opcode and flags.
    scramble_errors: bool,
}

impl<P> TmSrq<P> {
    /// `ibv_create_srq_ex(IBV_SRQT_TM)`. Fails (EINVAL, `cmd_srq.c:86-92`) when
    /// `max_num_tags` or `max_ops` is 0. `mtu` splits eager messages into packets: a
    /// message (TMH + payload) above it completes as `MATCH` then `DATA_VALID`.
    pub fn new(caps: TmCaps, mtu: u32) -> Option<Self> {
        if caps.max_num_tags == 0 || caps.max_ops == 0 {
            return None;
        }
        Some(TmSrq {
            caps,
            mtu: mtu.max(1),
            honor_phase: true,
            slots: vec![FREE_SLOT; caps.max_num_tags as usize],
            list: Vec::new(),
            ops: VecDeque::new(),
            ops_outstanding: 0,
            cq: VecDeque::new(),
            transfers: VecDeque::new(),
            srq_bufs: VecDeque::new(),
            hw_cnt: 0,
            sw_cnt: 0,
            unexp_out: 0,
            fins: Vec::new(),
            reads: Vec::new(),
            op_failure: None,
            ops_broken: false,
            scramble_errors: false,
        })
    }

    /// Fault injection for negative tests: with `false` the model ignores the phase counts
    /// (entries are always enabled), i.e. the hardware *without* the rule of
    /// rdma-core-tag-matching "whenever HW deems a message unexpected, tag matching must be
    /// disabled for new tags until SW and HW synchronize". The m1/m2/b1/b2 race then
    /// reorders matches.
    pub fn set_honor_phase(&mut self, on: bool) {
        self.honor_phase = on;
    }

    /// Fault injection: the next operation to execute completes with `status` (anything
    /// but `Success`) and has no effect, and the operation queue enters the error state:
    /// every later operation, queued or posted afterwards, completes with
    /// [`WcStatus::WrFlushErr`] and has no effect either. The matching list stays as it is
    /// and keeps matching arriving messages (only the queue that manipulates it broke).
    ///
    /// This is the verbs error model: `ibv_poll_cq(3)`: "If the status is other than
    /// IBV_WC_SUCCESS, only the following attributes are valid: wr_id, status, qp_num, and
    /// vendor_err"; a work request completing in error moves its queue to the error state,
    /// whose outstanding and later work requests complete with `IBV_WC_WR_FLUSH_ERR`
    /// (`ibv_modify_qp(3)`, `IBV_QPS_ERR`). mlx5 posts list operations on a hidden command
    /// QP (wire-layouts §C.1: "Each op is one WQE ... on a hidden command QP").
    ///
    /// `TmErr` is not a queue failure: on a DEL it means "the associated tag was consumed"
    /// (rdma-core-tag-matching), which the injected DEL did not check; inject other statuses.
    pub fn inject_op_failure(&mut self, status: WcStatus) {
        if status != WcStatus::Success {
            self.op_failure = Some(status);
        }
    }

    /// Whether the operation queue is in the error state ([`TmSrq::inject_op_failure`]).
    pub fn ops_broken(&self) -> bool {
        self.ops_broken
    }

    /// Fault injection: error completions (any status but `Success` and
    /// `TmRndvIncomplete`) carry an arbitrary opcode (`IBV_WC_RECV`), every flag bit and no
    /// message or TM info, as verbs allows ("only ... wr_id, status, qp_num, and vendor_err"
    /// are valid): a consumer must attribute them by `wr_id` alone.
    pub fn set_scramble_errors(&mut self, on: bool) {
        self.scramble_errors = on;
    }

    /// Queues a completion, scrambling the undefined fields of an error completion when
    /// asked to.
    fn push_cqe(&mut self, mut c: Cqe<P>) {
        if self.scramble_errors && !c.status.fields_valid() {
            c.opcode = WcOpcode::Recv;
            c.wc_flags = wc_flags::TM_SYNC_REQ | wc_flags::TM_MATCH | wc_flags::TM_DATA_VALID;
            c.byte_len = u32::MAX;
            c.tm_info = None;
            c.msg = None;
        }
        self.cq.push_back(c);
    }

    /// The capabilities.
    pub fn caps(&self) -> TmCaps {
        self.caps
    }

    /// `ibv_post_srq_recv` of one untagged buffer (for unexpected and NO_TAG messages).
    pub fn post_srq_recv(&mut self, wr_id: u64) {
        self.srq_bufs.push_back(wr_id);
    }

    /// Untagged buffers available.
    pub fn srq_bufs(&self) -> usize {
        self.srq_bufs.len()
    }

    /// `ibv_post_srq_ops` of one work request. ADD returns the new entry's handle.
    pub fn post_op(&mut self, wr: OpsWr) -> Result<Option<u32>, PostOpError> {
        // rdma-core-tag-matching "Managing TM receive buffers": "The number of outstanding
        // tag-manipulation operations must not exceed the max_ops capability."
        if self.ops_outstanding >= self.caps.max_ops {
            return Err(PostOpError::OpsFull);
        }
        let handle = match wr.op {
            TmOp::Add {
                recv_wr_id,
                tag,
                mask,
                buf_len,
            } => {
                // wire-layouts §C.1: "TAG_ADD fails with ENOMEM when !tm_head->next, so
                // max_num_tags entries are usable"; "The returned handle is the list index".
                let h = self
                    .slots
                    .iter()
                    .position(|s| s.state == SlotState::Free)
                    .ok_or(PostOpError::TagsFull)?;
                self.slots[h] = Slot {
                    state: SlotState::Queued,
                    refs: 1,
                    recv_wr_id,
                    tag: tag & mask,
                    mask,
                    buf_len,
                    enabled: false,
                };
                Some(h as u32)
            }
            TmOp::Del { handle } => {
                match self.slots.get_mut(handle as usize) {
                    Some(s) if s.state != SlotState::Free => s.refs += 1,
                    _ => return Err(PostOpError::BadHandle),
                }
                None
            }
            TmOp::Sync => None,
        };
        self.ops_outstanding += 1;
        // wire-layouts §C.1: "With IBV_OPS_TM_SYNC, srq->unexp_out = unexpected_cnt" (at post).
        if wr.flags & ops_flags::TM_SYNC != 0 {
            self.unexp_out = wr.unexpected_cnt;
        }
        let slot = match wr.op {
            TmOp::Add { .. } => handle.unwrap_or(u32::MAX),
            TmOp::Del { handle } => handle,
            TmOp::Sync => u32::MAX,
        };
        self.ops.push_back((wr, slot));
        Ok(handle)
    }

    /// Operations queued and not yet executed.
    pub fn pending_ops(&self) -> usize {
        self.ops.len()
    }

    /// Outstanding operations (queued, or signaled and not yet polled).
    pub fn ops_outstanding(&self) -> u32 {
        self.ops_outstanding
    }

    fn release(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        s.refs -= 1;
        if s.refs == 0 && s.state == SlotState::Gone {
            *s = FREE_SLOT;
        }
    }

    /// wire-layouts §C.1: the WQE carries `sw_cnt = htobe16(unexpected_cnt)`, "16 bits on
    /// the wire": the counts are compared modulo 2^16 (software must never fall 2^16
    /// unexpected messages behind; mlx5 asks for a sync from 0x3fff on).
    fn counts_agree(&self) -> bool {
        self.sw_cnt as u16 == self.hw_cnt as u16
    }

    fn sync_req(&self) -> u32 {
        if !self.counts_agree() {
            wc_flags::TM_SYNC_REQ
        } else {
            0
        }
    }

    /// The hardware executes the oldest queued operation; `false` if none was queued.
    pub fn execute_op(&mut self) -> bool {
        let Some((wr, slot)) = self.ops.pop_front() else {
            return false;
        };
        if let Some(status) = self
            .op_failure
            .take()
            .or(self.ops_broken.then_some(WcStatus::WrFlushErr))
        {
            self.fail_op(wr, slot, status);
            return true;
        }
        // rdma-core-tag-matching "Managing TM receive buffers": ADD, DEL and SYNC carry "the
        // latest unexpected message count" (applied with IBV_OPS_TM_SYNC, wire-layouts §C.1).
        if wr.flags & ops_flags::TM_SYNC != 0 {
            self.sw_cnt = wr.unexpected_cnt;
        }
        let in_sync = self.counts_agree() || !self.honor_phase;
        let (opcode, status, slot) = match wr.op {
            TmOp::Add { .. } => {
                let h = slot;
                let s = &mut self.slots[h as usize];
                s.state = SlotState::Listed;
                // rdma-core-tag-matching: "whenever HW deems a message unexpected, tag
                // matching must be disabled for new tags until SW and HW synchronize".
                s.enabled = in_sync;
                self.list.push(h);
                (WcOpcode::TmAdd, WcStatus::Success, h)
            }
            TmOp::Del { handle } => {
                let status = if self.slots[handle as usize].state == SlotState::Listed {
                    self.list.retain(|&x| x != handle);
                    self.slots[handle as usize].state = SlotState::Gone;
                    WcStatus::Success
                } else {
                    // rdma-core-tag-matching "Managing TM receive buffers": "the operation
                    // may fail if the associated tag was consumed by an incoming message.
                    // In this case IBV_WC_TM_ERR status will be returned in WC."
                    WcStatus::TmErr
                };
                (WcOpcode::TmDel, status, handle)
            }
            TmOp::Sync => (WcOpcode::TmSync, WcStatus::Success, u32::MAX),
        };
        // "When the SW and HW are in synch, tag matching resumes normally."
        if in_sync {
            for &h in &self.list {
                self.slots[h as usize].enabled = true;
            }
        }
        if wr.flags & ops_flags::SIGNALED != 0 {
            let slot = (slot != u32::MAX).then_some(slot);
            if let Some(s) = slot {
                self.slots[s as usize].refs += 1;
            }
            // "all completions indicate when synchronization is necessary by setting the
            // IBV_WC_TM_SYNC_REQ flag."
            let flags = if self.honor_phase { self.sync_req() } else { 0 };
            self.push_cqe(Cqe {
                wr_id: wr.wr_id,
                status,
                opcode,
                wc_flags: flags,
                byte_len: 0,
                tm_info: None,
                msg: None,
                slot,
                op: true,
            });
        } else {
            self.ops_outstanding -= 1;
        }
        if slot != u32::MAX {
            self.release(slot);
        }
        true
    }

    /// An operation completing in error: no effect (an ADD's entry never enters the list,
    /// its handle drains), and the queue is in the error state from now on.
    fn fail_op(&mut self, wr: OpsWr, slot: u32, status: WcStatus) {
        self.ops_broken = true;
        let opcode = match wr.op {
            TmOp::Add { .. } => {
                self.slots[slot as usize].state = SlotState::Gone;
                WcOpcode::TmAdd
            }
            TmOp::Del { .. } => WcOpcode::TmDel,
            TmOp::Sync => WcOpcode::TmSync,
        };
        // An error completion is produced whether or not the WR was signaled (verbs
        // reports every failed work request).
        let slot = (slot != u32::MAX).then_some(slot);
        if let Some(s) = slot {
            self.slots[s as usize].refs += 1;
        }
        self.push_cqe(Cqe {
            wr_id: wr.wr_id,
            status,
            opcode,
            wc_flags: 0,
            byte_len: 0,
            tm_info: None,
            msg: None,
            slot,
            op: true,
        });
        if let Some(s) = slot {
            self.release(s);
        }
    }

    /// A message hits the wire and is processed at once (matching is serialised at the
    /// TM-SRQ); its completions are queued on the CQ.
    pub fn arrive(&mut self, msg: WireMsg<P>) -> Result<(), ArriveError<P>> {
        match msg.tmh.opcode {
            // rdma-core-tag-matching "Sending TM messages": a NO_TAG message "will always be
            // treated as unexpected by the receiver TM-SRQ ... delivered in its entirety
            // (including the opcode) to the standard SRQ buffer". A FIN is not matched either
            // (wire-layouts §C.2: UCX gets it as a TM_NO_TAG completion). Neither is counted
            // as unexpected (mlx5 counts only UNEXPECTED CQEs, §C.1).
            TmOpcode::NoTag | TmOpcode::Fin => {
                let Some(wr_id) = self.srq_bufs.pop_front() else {
                    return Err(ArriveError::Rnr(msg));
                };
                self.push_cqe(Cqe {
                    wr_id,
                    status: WcStatus::Success,
                    opcode: WcOpcode::TmNoTag,
                    wc_flags: 0,
                    byte_len: u32::try_from(msg.wire_len()).unwrap_or(u32::MAX),
                    tm_info: None,
                    msg: Some(msg),
                    slot: None,
                    op: false,
                });
                Ok(())
            }
            TmOpcode::Eager | TmOpcode::Rndv => {
                // "The total rendezvous message size must not exceed the max_rndv_hdr_size
                // capability."
                if msg.tmh.opcode == TmOpcode::Rndv
                    && msg.wire_len() > u64::from(self.caps.max_rndv_hdr_size)
                {
                    return Err(ArriveError::RndvHdrTooLarge(msg));
                }
                let tag = msg.tmh.tag;
                // wire-layouts §B: "a message matches an entry when TMH.tag & entry.mask ==
                // entry.tag"; the first entry in list order wins.
                let first = self.list.iter().position(|&h| {
                    let s = &self.slots[h as usize];
                    tag & s.mask == s.tag
                });
                match first {
                    Some(pos) if self.slots[self.list[pos] as usize].enabled => {
                        let h = self.list.remove(pos);
                        self.consume(h, msg);
                        Ok(())
                    }
                    _ => self.unexpected(msg),
                }
            }
        }
    }

    fn unexpected(&mut self, msg: WireMsg<P>) -> Result<(), ArriveError<P>> {
        // rdma-core-tag-matching "TM completion processing": "IBV_WC_RECV - standard SRQ
        // completion; used for unexpected messages"; "the entire message, including any TM
        // headers, is scattered to the SRQ buffer."
        let Some(wr_id) = self.srq_bufs.pop_front() else {
            return Err(ArriveError::Rnr(msg));
        };
        self.hw_cnt = self.hw_cnt.wrapping_add(1);
        // rdma-core-tag-matching: "all completions indicate when synchronization is
        // necessary by setting the IBV_WC_TM_SYNC_REQ flag"; wire-layouts §C.1: on the
        // UNEXPECTED completion "when unexp_in - unexp_out > 0x3fff (MLX5_TM_MAX_SYNC_DIFF)",
        // before the 16-bit counts become ambiguous; unexp_out is the last count *posted*.
        let lag = self.hw_cnt.wrapping_sub(self.unexp_out) & 0xffff;
        let wc_flags = if self.honor_phase && lag > MAX_SYNC_DIFF {
            wc_flags::TM_SYNC_REQ
        } else {
            0
        };
        self.push_cqe(Cqe {
            wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            wc_flags,
            byte_len: u32::try_from(msg.wire_len()).unwrap_or(u32::MAX),
            tm_info: None,
            msg: Some(msg),
            slot: None,
            op: false,
        });
        Ok(())
    }

    fn consume(&mut self, h: u32, msg: WireMsg<P>) {
        let s = self.slots[h as usize];
        self.slots[h as usize].state = SlotState::Gone;
        let info = Some(TmInfo {
            tag: msg.tmh.tag,
            priv_: msg.tmh.app_ctx,
        });
        let mut cqe = Cqe {
            wr_id: s.recv_wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::TmRecv,
            wc_flags: wc_flags::TM_MATCH,
            byte_len: 0,
            tm_info: info,
            msg: None,
            slot: Some(h),
            op: false,
        };
        match (msg.tmh.opcode, msg.rvh) {
            (TmOpcode::Rndv, Some(rvh)) if rvh.len > s.buf_len => {
                // "when a posted tagged buffer is insufficient to hold the data of a
                // rendezvous request, the HW completes the buffer with an
                // IBV_WC_TM_RNDV_INCOMPLETE status. In this case, the TMH and RVH headers are
                // scattered into the tagged buffer (tag-matching has still been completed!)"
                cqe.status = WcStatus::TmRndvIncomplete;
                cqe.byte_len = (TMH_LEN + RVH_LEN) as u32;
                cqe.msg = Some(msg);
            }
            (TmOpcode::Rndv, Some(rvh)) => {
                let tmh = msg.tmh;
                // "In case the message uses the rendezvous protocol, HW will also initiate
                // the RDMA-Read data transfer and send a notification message when the data
                // transfer completes." Matching and data completions are distinct events.
                cqe.msg = Some(msg);
                self.slots[h as usize].refs += 1; // the transfer's DATA_VALID completion
                self.transfers.push_back(Transfer {
                    slot: h,
                    recv_wr_id: s.recv_wr_id,
                    bytes: rvh.len,
                    tag: tmh.tag,
                    app_ctx: tmh.app_ctx,
                    fin: Some((tmh, rvh)),
                });
            }
            _ if msg.len > s.buf_len => {
                cqe.status = WcStatus::LocLenErr;
                cqe.wc_flags |= wc_flags::TM_DATA_VALID;
                cqe.byte_len = s.buf_len;
                cqe.msg = Some(msg);
            }
            // "In single-packet eager messages, both flags are set." The packet holds the
            // TMH and the payload ("The message consists of a TMH followed by payload").
            _ if msg.wire_len() <= u64::from(self.mtu) => {
                cqe.wc_flags |= wc_flags::TM_DATA_VALID;
                cqe.byte_len = msg.len;
                cqe.msg = Some(msg);
            }
            _ => {
                // "When larger messages ... are involved, matching and data transfer
                // completion are distinct events that generate 2 completion events for the
                // same recv_wr_id."
                self.slots[h as usize].refs += 1;
                self.transfers.push_back(Transfer {
                    slot: h,
                    recv_wr_id: s.recv_wr_id,
                    bytes: msg.len,
                    tag: msg.tmh.tag,
                    app_ctx: msg.tmh.app_ctx,
                    fin: None,
                });
                cqe.msg = Some(msg);
            }
        }
        self.slots[h as usize].refs += 1;
        self.push_cqe(cqe);
    }

    /// Data transfers (rendezvous reads, multi-packet eager) still in progress.
    pub fn pending_transfers(&self) -> usize {
        self.transfers.len()
    }

    /// The oldest data transfer completes: `TM_RECV` with `TM_DATA_VALID`, and for a
    /// rendezvous the FIN goes back to the sender. `false` if none was in progress.
    pub fn complete_transfer(&mut self) -> bool {
        let Some(t) = self.transfers.pop_front() else {
            return false;
        };
        if let Some((tmh, rvh)) = t.fin {
            self.reads.push(rvh);
            // "IBV_TM_OP_FIN ... a copy of the original TMH and RVH of the rendezvous
            // request, apart the opcode."
            self.fins.push((
                Tmh {
                    opcode: TmOpcode::Fin,
                    ..tmh
                },
                rvh,
            ));
        }
        self.push_cqe(Cqe {
            wr_id: t.recv_wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::TmRecv,
            wc_flags: wc_flags::TM_DATA_VALID,
            byte_len: t.bytes,
            tm_info: Some(TmInfo {
                tag: t.tag,
                priv_: t.app_ctx,
            }),
            msg: None,
            slot: Some(t.slot),
            op: false,
        });
        true
    }

    /// Polls one completion (`ibv_poll_cq` with one entry).
    pub fn poll_cq(&mut self) -> Option<Cqe<P>> {
        let c = self.cq.pop_front()?;
        if c.op {
            self.ops_outstanding -= 1;
        }
        if let Some(s) = c.slot {
            self.release(s);
        }
        Some(c)
    }

    /// Completions waiting to be polled.
    pub fn cq_len(&self) -> usize {
        self.cq.len()
    }

    /// The matching list in list order.
    pub fn list(&self) -> Vec<EntryView> {
        self.list
            .iter()
            .map(|&h| {
                let s = &self.slots[h as usize];
                EntryView {
                    handle: h,
                    recv_wr_id: s.recv_wr_id,
                    tag: s.tag,
                    mask: s.mask,
                    enabled: s.enabled,
                }
            })
            .collect()
    }

    /// The lemma the driver's proof rests on: no enabled entry follows a disabled one in
    /// list order (disabled entries are those appended since the counts last agreed).
    pub fn disabled_entries_form_a_suffix(&self) -> bool {
        !self
            .list
            .iter()
            .map(|&h| self.slots[h as usize].enabled)
            .skip_while(|&enabled| enabled)
            .any(|enabled| enabled)
    }

    /// Handles not free (in the list, queued, or draining).
    pub fn tags_in_use(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.state != SlotState::Free)
            .count()
    }

    /// Tagged messages the hardware delivered as unexpected.
    pub fn hw_unexpected(&self) -> u32 {
        self.hw_cnt
    }

    /// The software count last reported by an operation.
    pub fn sw_reported(&self) -> u32 {
        self.sw_cnt
    }

    /// FIN messages the hardware sent (after rendezvous reads), oldest first.
    pub fn fins(&self) -> &[(Tmh, Rvh)] {
        &self.fins
    }

    /// RDMA-Reads the hardware performed, oldest first.
    pub fn reads(&self) -> &[Rvh] {
        &self.reads
    }
}

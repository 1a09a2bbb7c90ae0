//! The HW/SW split: a driver that owns the software [`Engine`] and a Tag-Matching SRQ
//! and decides which posted receives live in hardware, so that every match equals the
//! pure software engine's.
//!
//! The hardware is a [`TmBackend`]: the executable model [`crate::tm_srq::TmSrq`] (the
//! default, what [`Driver::new`] creates and the tests drive step by step) or a real
//! device's TM-SRQ translated into the `tm_srq` vocabulary ([`Driver::with_backend`]; the
//! verbs transport of `tagmatch-transport` does this), so one algorithm serves both.
//!
//! rdma-core-tag-matching "RDMA tag-matching offload": "HW will hold a bounded prefix of
//! Receive tags ... SW will handle any message that is either unexpected or whose tag is
//! not held in HW."
//!
//! # Tag bit layout
//!
//! The 64-bit TMH tag carries the whole envelope, so that wildcards become masks (UCX
//! never offloads ANY_SOURCE; this driver does, when the prefix rule below allows it).
//! [`TagLayout`] is configurable; the tag is in the low bits, then the source, then the
//! communicator:
//!
//! ```text
//!  63                                                                    0
//! +------------------+------------------------+--------------------------+
//! | comm (comm_bits) |      src (src_bits)    |      tag (tag_bits)      |
//! +------------------+------------------------+--------------------------+
//!   default 20 bits        default 20 bits           default 24 bits
//! ```
//!
//! (`comm_bits + src_bits + tag_bits <= 64`; unused high bits are zero.) A field value that
//! does not fit is **saturated** to the field's all-ones value, and the exact envelope
//! travels in the message (the payload header a real transport carries anyway). The
//! all-ones value is therefore reserved: a receive is offloaded only when its match set is
//! represented *exactly* by `(entry.tag, entry.mask)`, i.e. for every envelope `E`,
//! `encode(E) & mask == tag & mask` ⟺ the receive matches `E` ([`TagLayout::entry`]):
//!
//! - comm, an exact source and an exact tag must be below their field's all-ones value;
//!   their mask bits are all ones; ANY_SOURCE / ANY_TAG clear their field in the mask (so
//!   a saturated source or tag still matches a wildcard, which is right);
//! - a general mask (`TagSel::Masked`) must fix every bit above the tag field to zero and
//!   must not match the all-ones tag value; its low bits become the field's mask.
//!
//! # Which receives go to hardware (the prefix rule)
//!
//! The *class* of a receive is its match set, the envelopes it matches. A pending receive
//! is offloaded only when no **software-resident** pending receive has a class that
//! intersects its own ([`specs_intersect`]: same communicator, compatible sources, tags or
//! masks that share a value); all software-resident pending receives were posted earlier,
//! so for every envelope the offloaded receives that match it are a posting-order prefix of
//! all pending receives that match it. ADDs are posted in posting order, so list order is
//! posting order, and the TM-SRQ rule "first entry in list order" is "earliest posted".
//! Receives that cannot be encoded, find the list full, or find list operations waiting
//! for a free slot stay in software (counted per reason in [`OffloadCounters`]).
//!
//! # Unexpected count and the m1/m2/b1/b2 race
//!
//! rdma-core-tag-matching: "whenever HW deems a message unexpected, tag matching must be
//! disabled for new tags until SW and HW synchronize. This synchronization is achieved by
//! reporting to HW the number of unexpected messages handled by SW". The driver counts the
//! `RECV` (unexpected) completions it has processed and stamps every ADD, DEL and SYNC with
//! that count *when it decides the operation* (a DEL or SYNC deferred for want of an
//! operation slot keeps its stamp, and no ADD is posted while one waits). A message
//! coming from hardware as unexpected is matched in software first: the engine holds every
//! pending receive (offloaded ones included), so it takes the earliest-posted one. When
//! that receive is offloaded, a DEL of its (disabled) entry is queued *before* any
//! operation carrying a count that includes this message. When a completion carries
//! `TM_SYNC_REQ`, a SYNC is posted as soon as the count has moved.
//!
//! # Why matches equal the software engine's (linearization)
//!
//! The driver is linearizable with respect to [`Engine`]: a post takes effect when
//! [`Driver::post`] is called, an arrival when its completion is polled (completions are
//! serialised by the TM-SRQ in wire order, so arrivals keep wire order and per-source
//! order), and the cancel of an offloaded receive when its DEL completes. Sketch of the
//! invariant for a message `m` matched by hardware against entry `e` of receive `r`:
//! any receive `r'` posted before `r` and still pending that matches `m` is offloaded (prefix
//! rule) with an entry `e'` before `e`; `e'` was in the list (ADDs execute in order) and,
//! since disabled entries are exactly those appended after the last unsynchronised
//! unexpected message (a suffix of the list), `e'` was enabled when `e` was, so hardware
//! would have chosen `e'`. Conversely software consumes an offloaded receive only for a
//! message hardware deemed unexpected, which means its entry was not enabled; it stays
//! disabled until a count that includes that message reaches hardware, and the DEL is
//! queued before such a count. The property tests in `tests/offload_*.rs` check this
//! against the engine for random and for all interleavings of small bounds, and
//! [`OffloadCounters::order_violations`] checks it at run time with
//! [`Engine::first_posted_match`].
//!
//! # Cancel
//!
//! Cancelling an offloaded receive posts a DEL and reports the outcome later: success →
//! [`Event::Cancelled`]; `TM_ERR` ("the operation may fail if the associated tag was
//! consumed by an incoming message") → the match was already reported and the cancel
//! fails ([`Event::CancelFailed`]). If the match completes while the DEL still waits for
//! an operation slot, the DEL is dropped and the cancel fails at once. If software matched
//! the receive first (its entry was disabled), the DEL succeeds on the stale entry and the
//! cancel fails too. UCX reports every REMOVE completion as a successful cancel without
//! checking the status (wire-layouts §C.2); this driver never does.
//!
//! # List operations that fail
//!
//! rdma-core-tag-matching documents one failure of a list operation: a DEL's `TM_ERR`
//! ("the operation may fail if the associated tag was consumed by an incoming message").
//! Any other error status is a verbs error: the operation had no effect and its queue is in
//! the error state, which flushes every later operation (`ibv_modify_qp(3)`, `IBV_QPS_ERR`;
//! mlx5 posts list operations on a hidden command QP, wire-layouts §C.1). The driver then
//! **stops offloading** ([`Driver::offload_stopped`], [`Block::Stopped`]):
//!
//! - a failed or flushed ADD created no entry ("A handle that uniquely identifies the entry
//!   is returned upon success"): its receive goes back to software matching. The engine
//!   always held it in posting order, so nothing moves. Since operations execute in order
//!   and every one after the failure is flushed, the receives going back are the latest
//!   offloaded ones, and the receives whose entries stay listed are still a posting-order
//!   prefix of every class: the prefix rule and the proof above hold unchanged;
//! - a failed DEL leaves its entry where it was: a cancel is resolved as failed and the
//!   receive stays pending in hardware, where a later message matches it (MPI: a receive
//!   whose cancel fails completes normally); a DEL decided after the stop is not posted
//!   and fails the same way; a cancel of a receive whose ADD fails succeeds;
//! - disabled entries stay disabled (no count reaches hardware any more), so a message
//!   that would match one still arrives as unexpected and software matches it.
//!
//! Every completion is attributed by its `wr_id` ([`wr_id`]), never by an opcode or flags
//! that an error completion leaves undefined; a tagged buffer whose match completion
//! fails without naming the message ends in [`Event::RecvFailed`].
//!
//! # Example: the m1/m2/b1/b2 race
//!
//! ```
//! use tagmatch_engine::offload::{Driver, DriverConfig, Event, MatchPath, PostOutcome};
//! use tagmatch_engine::tm_srq::TmCaps;
//! use tagmatch_engine::{Envelope, RecvSpec};
//!
//! let mut d: Driver<&str, &str> = Driver::new(DriverConfig {
//!     caps: Some(TmCaps::with_tags(16)),
//!     ..DriverConfig::default()
//! });
//! let env = Envelope::new(0, 1, 7);
//! // m1 reaches the TM-SRQ before any tag: unexpected (software has not polled it yet).
//! let m1 = d.eager(env, 8, "m1");
//! d.wire(m1).unwrap();
//! // b1 is posted and its ADD executes, carrying the stale count 0: the entry is disabled.
//! let Ok(PostOutcome::Pending(_)) = d.post(RecvSpec::exact(0, 1, 7), 64, "b1") else {
//!     panic!()
//! };
//! d.hw_mut().unwrap().execute_op();
//! // m2 must not take b1 in hardware.
//! let m2 = d.eager(env, 8, "m2");
//! d.wire(m2).unwrap();
//! let mut ev = Vec::new();
//! d.settle(&mut ev);
//! // Software matched m1 to b1 (earliest arrival); m2 is unexpected, as in the engine.
//! assert!(matches!(&ev[0], Event::Matched(m) if (m.recv, m.msg, m.path) == ("b1", "m1", MatchPath::SwArrival)));
//! assert!(matches!(&ev[1], Event::Unexpected { .. }));
//! assert_eq!(d.counters().order_violations, 0);
//! ```

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use tagmatch_wire::tm::Rvh;

use self::wr_id::WrKind;
use crate::hash::FastMap;
use crate::tm_srq::{
    ops_flags, wc_flags, ArriveError, Cqe, OpsWr, PostOpError, TmCaps, TmOp, TmSrq, WcOpcode,
    WcStatus, WireMsg,
};
use crate::{
    Arrived, Claimed, Config, Counters, Engine, EngineError, Envelope, Message, MsgHandle,
    PostRejected, Posted, RecvHandle, RecvSpec, Rejected, Source, TagSel,
};

/// The placement of (comm, src, tag) in the 64-bit TMH tag; see the [module
/// documentation](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TagLayout {
    comm_bits: u8,
    src_bits: u8,
    tag_bits: u8,
}

impl Default for TagLayout {
    /// comm 20 | src 20 | tag 24 (Open MPI `pml_ucx` uses the same widths).
    fn default() -> Self {
        TagLayout {
            comm_bits: 20,
            src_bits: 20,
            tag_bits: 24,
        }
    }
}

fn all_ones(bits: u8) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

fn shl(v: u64, by: u8) -> u64 {
    if by >= 64 {
        0
    } else {
        v << by
    }
}

impl TagLayout {
    /// A layout of `comm_bits | src_bits | tag_bits` (most to least significant). `None`
    /// if the widths add up to more than 64 or a u32 field gets more than 32 bits.
    pub fn new(comm_bits: u8, src_bits: u8, tag_bits: u8) -> Option<Self> {
        let sum = u32::from(comm_bits) + u32::from(src_bits) + u32::from(tag_bits);
        (sum <= 64 && comm_bits <= 32 && src_bits <= 32).then_some(TagLayout {
            comm_bits,
            src_bits,
            tag_bits,
        })
    }

    /// Width of the communicator field.
    pub fn comm_bits(&self) -> u8 {
        self.comm_bits
    }
    /// Width of the source field.
    pub fn src_bits(&self) -> u8 {
        self.src_bits
    }
    /// Width of the tag field.
    pub fn tag_bits(&self) -> u8 {
        self.tag_bits
    }

    fn src_shift(&self) -> u8 {
        self.tag_bits
    }
    fn comm_shift(&self) -> u8 {
        self.tag_bits + self.src_bits
    }

    /// Whether `v` is represented exactly in a field of `bits` bits for values of a
    /// `width`-bit type (the all-ones value is reserved for saturation).
    fn fits(v: u64, bits: u8, width: u8) -> bool {
        bits >= width || v < all_ones(bits)
    }

    /// The TMH tag of a message: each field saturated to all ones when it does not fit.
    pub fn encode(&self, env: &Envelope) -> u64 {
        let f = |v: u64, bits: u8| v.min(all_ones(bits));
        shl(f(u64::from(env.comm), self.comm_bits), self.comm_shift())
            | shl(f(u64::from(env.src), self.src_bits), self.src_shift())
            | f(env.tag, self.tag_bits)
    }

    /// The `(tag, mask)` of a TM-SRQ entry whose match set is exactly the receive's, or
    /// `None` when the layout cannot represent it exactly (the receive stays in software).
    pub fn entry(&self, spec: &RecvSpec) -> Option<(u64, u64)> {
        let spec = spec.normalized();
        if !Self::fits(u64::from(spec.comm), self.comm_bits, 32) {
            return None;
        }
        let mut tag = shl(u64::from(spec.comm), self.comm_shift());
        let mut mask = shl(all_ones(self.comm_bits), self.comm_shift());
        if let Source::Rank(s) = spec.src {
            if !Self::fits(u64::from(s), self.src_bits, 32) {
                return None;
            }
            tag |= shl(u64::from(s), self.src_shift());
            mask |= shl(all_ones(self.src_bits), self.src_shift());
        }
        let tmax = all_ones(self.tag_bits);
        match spec.tag {
            TagSel::Any => {}
            TagSel::Exact(t) => {
                if !Self::fits(t, self.tag_bits, 64) {
                    return None;
                }
                tag |= t;
                mask |= tmax;
            }
            TagSel::Masked { want, mask: m } => {
                if self.tag_bits < 64 {
                    let high = !tmax;
                    // Every tag in the match set must be below 2^tag_bits - 1.
                    if m & high != high || want & high != 0 || tmax & m == want {
                        return None;
                    }
                }
                tag |= want & tmax;
                mask |= m & tmax;
            }
        }
        Some((tag, mask))
    }
}

/// Whether some envelope matches both receives.
pub fn specs_intersect(a: &RecvSpec, b: &RecvSpec) -> bool {
    let (a, b) = (a.normalized(), b.normalized());
    if a.comm != b.comm {
        return false;
    }
    if let (Source::Rank(x), Source::Rank(y)) = (a.src, b.src) {
        if x != y {
            return false;
        }
    }
    match (a.tag, b.tag) {
        (TagSel::Any, _) | (_, TagSel::Any) => true,
        (TagSel::Exact(x), TagSel::Exact(y)) => x == y,
        (TagSel::Exact(x), TagSel::Masked { want, mask })
        | (TagSel::Masked { want, mask }, TagSel::Exact(x)) => x & mask == want & mask,
        (TagSel::Masked { want: w1, mask: m1 }, TagSel::Masked { want: w2, mask: m2 }) => {
            (w1 ^ w2) & m1 & m2 == 0
        }
    }
}

/// What a wire message carries besides the headers: the exact envelope (needed when a field
/// was saturated) and the user's message.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Carried<M> {
    /// The exact envelope.
    pub env: Envelope,
    /// The user's message.
    pub msg: M,
}

/// Handle of a receive posted through the [`Driver`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OffHandle(pub u64);

/// Where a match was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatchPath {
    /// By the TM-SRQ against an offloaded receive.
    Hw,
    /// In software, for a message the TM-SRQ deemed unexpected.
    SwArrival,
    /// In software, by a post that found an unexpected message.
    SwPost,
}

/// A receive paired with a message by the driver.
#[derive(Debug, PartialEq, Eq)]
pub struct OffMatch<R, M> {
    /// The receive.
    pub handle: OffHandle,
    /// Its context.
    pub recv: R,
    /// The message.
    pub msg: M,
    /// The message's envelope.
    pub env: Envelope,
    /// Its length (eager payload, or RNDV optional data).
    pub len: usize,
    /// Where the match was made.
    pub path: MatchPath,
    /// `Some` when software must perform the rendezvous read and send the FIN (matched in
    /// software, or `TM_RNDV_INCOMPLETE`).
    pub sw_rndv: Option<Rvh>,
    /// Hardware still transfers data: [`Event::DataValid`] follows.
    pub data_pending: bool,
}

/// Result of [`Driver::post`].
#[derive(Debug, PartialEq, Eq)]
pub enum PostOutcome<R, M> {
    /// An unexpected message was taken.
    Matched(OffMatch<R, M>),
    /// Queued (in software or in hardware).
    Pending(OffHandle),
}

/// Result of [`Driver::cancel`].
#[derive(Debug, PartialEq, Eq)]
pub enum CancelOutcome<R> {
    /// Cancelled now (the receive was software-resident).
    Cancelled(R),
    /// A DEL is under way; [`Event::Cancelled`] or [`Event::CancelFailed`] follows.
    InProgress,
}

/// Something [`Driver::poll`] reports.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<R, M> {
    /// An arrival (in wire order) was matched.
    Matched(OffMatch<R, M>),
    /// An arrival (in wire order) matched nothing and is stored as unexpected.
    Unexpected {
        /// Its envelope.
        env: Envelope,
        /// Its length.
        len: usize,
    },
    /// An arrival could not be stored (engine budget); the message is handed back.
    Rejected(Rejected<M>),
    /// A cancel in progress succeeded.
    Cancelled {
        /// The receive.
        handle: OffHandle,
        /// Its context.
        recv: R,
    },
    /// A cancel in progress failed: the receive was matched first (its match is already
    /// reported, or follows when the DEL lost a race with it), or the TM-SRQ refused the DEL
    /// (offload stopped, [`Driver::offload_stopped`]): then the receive stays pending, in
    /// hardware, and completes by a later match like any receive whose cancel failed.
    CancelFailed {
        /// The receive.
        handle: OffHandle,
    },
    /// Hardware finished the data transfer of an earlier [`MatchPath::Hw`] match.
    DataValid {
        /// The receive.
        handle: OffHandle,
        /// [`WcStatus::Success`]: all data is in the buffer. Anything else: the transfer
        /// failed after the match (the buffer's content is undefined).
        status: WcStatus,
    },
    /// A NO_TAG or FIN message.
    NoTag(WireMsg<Carried<M>>),
    /// Hardware completed an offloaded receive in error before reporting a match: a
    /// message was consumed into its buffer, but an error completion does not say which
    /// (`ibv_poll_cq(3)`: only `wr_id` and `status` are valid). The receive is over.
    RecvFailed {
        /// The receive.
        handle: OffHandle,
        /// Its context.
        recv: R,
        /// The completion's status.
        status: WcStatus,
    },
}

/// Why a pending receive stayed in software.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Block {
    /// No TM-SRQ (capacity 0 or TM unsupported).
    NoHw,
    /// The layout cannot represent its match set exactly.
    Encoding,
    /// A software-resident receive could match the same message (prefix rule).
    SwPending,
    /// The tag list is full.
    TagsFull,
    /// List operations wait for a free operation slot.
    OpsBusy,
    /// Offload stopped: a list operation failed ([`Driver::offload_stopped`]).
    Stopped,
}

/// Offload counters (after UCX's `ucp_worker` TM statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffloadCounters {
    /// Receives offloaded (ADD posted).
    pub offloaded: u64,
    /// Arrivals matched by hardware.
    pub matched_hw: u64,
    /// Arrivals matched in software (hardware deemed them unexpected).
    pub matched_sw: u64,
    /// Posts that took an unexpected message.
    pub matched_post: u64,
    /// Arrivals stored as unexpected in software.
    pub unexpected: u64,
    /// `RECV` (unexpected) completions from hardware.
    pub hw_unexpected: u64,
    /// Blocked: no TM-SRQ.
    pub blocked_no_hw: u64,
    /// Blocked: not encodable.
    pub blocked_encoding: u64,
    /// Blocked: a software-resident receive of an intersecting class.
    pub blocked_sw_pending: u64,
    /// Blocked: tag list full.
    pub blocked_tags_full: u64,
    /// Blocked: operation slots busy.
    pub blocked_ops_busy: u64,
    /// DEL operations posted for entries software consumed.
    pub stale_dels: u64,
    /// Cancels of offloaded receives (DEL posted).
    pub hw_cancels: u64,
    /// SYNC operations posted.
    pub syncs: u64,
    /// Completions carrying `TM_SYNC_REQ`.
    pub sync_reqs: u64,
    /// Cancels that lost to a message (DEL completed with `TM_ERR`, or the match completed
    /// while the DEL still waited for an operation slot).
    pub tm_err_races: u64,
    /// `TM_RNDV_INCOMPLETE` completions.
    pub rndv_incomplete: u64,
    /// Rendezvous requests matched in software (software reads and sends FIN).
    pub sw_rndv: u64,
    /// Hardware matches that were not the engine's earliest candidate, or completions
    /// naming unknown receives. Always 0 unless the hardware breaks its contract.
    pub order_violations: u64,
    /// Blocked: offload stopped after a failed list operation.
    pub blocked_stopped: u64,
    /// List operations that failed with a status other than a DEL's `TM_ERR` (completion
    /// in error, or `ibv_post_srq_ops` refusing one).
    pub op_errors: u64,
    /// Times offload stopped (0 or 1).
    pub offload_stops: u64,
    /// Offloaded receives that went back to software matching because hardware never
    /// held their tag (failed or flushed ADD, flushed tagged buffer).
    pub returned_to_sw: u64,
    /// DELs that failed with a status other than `TM_ERR`.
    pub del_errors: u64,
    /// Offloaded receives whose match completion failed ([`Event::RecvFailed`]).
    pub recv_errors: u64,
    /// Receive-queue buffers that completed in error (no message).
    pub rq_errors: u64,
}

/// Driver configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverConfig {
    /// Tag bit layout.
    pub layout: TagLayout,
    /// Software engine configuration.
    pub engine: Config,
    /// TM capabilities; `None` (TM unsupported) or `max_num_tags == 0` runs everything in
    /// software.
    pub caps: Option<TmCaps>,
    /// Packet size of the model (eager messages, TMH + payload, above it complete in two
    /// steps).
    pub mtu: u32,
    /// Untagged receive buffers kept posted to the SRQ.
    pub srq_depth: u32,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            layout: TagLayout::default(),
            engine: Config::default(),
            caps: None,
            mtu: 4096,
            srq_depth: 4096,
        }
    }
}

/// The hardware under a [`Driver`]: a Tag-Matching SRQ and its CQ, spoken to in the
/// vocabulary of [`crate::tm_srq`] (`ibv_post_srq_ops` work requests, `ibv_wc`
/// completions). Implemented by the model [`TmSrq`] and by real devices.
///
/// The driver posts every operation with [`ops_flags::SIGNALED`] and [`ops_flags::TM_SYNC`]
/// and its unexpected count, expects one completion per operation, and relies on the
/// contract the model documents: operations execute in posting order, an ADD's entry
/// handle is known at post time, a handle is not reused before the completions naming it
/// were polled, and a tagged message whose first matching entry is disabled (appended while
/// the counts disagreed) is delivered as unexpected.
pub trait TmBackend<M> {
    /// The tagged buffer of an ADD (the model: its length in bytes; a verbs device: a
    /// scatter/gather entry).
    type Buf: Copy;

    /// The length of a tagged buffer, in bytes.
    fn buf_len(buf: &Self::Buf) -> u32;

    /// The TM-SRQ's capabilities.
    fn caps(&self) -> TmCaps;

    /// `ibv_post_srq_ops` of one work request. An ADD comes with its tagged buffer `buf`
    /// (`TmOp::Add::buf_len` is its length) and returns the new entry's handle; DEL and
    /// SYNC come with `None`. [`PostOpError::OpsFull`] defers the operation,
    /// [`PostOpError::TagsFull`] keeps an ADD's receive in software.
    fn post_op(&mut self, wr: OpsWr, buf: Option<Self::Buf>) -> Result<Option<u32>, PostOpError>;

    /// The next completion of the TM-SRQ's CQ: list operations (`TM_ADD`, `TM_DEL`,
    /// `TM_SYNC`, `wr_id` of the operation), tag-matching receives (`TM_RECV`, `wr_id` =
    /// the ADD's `recv_wr_id`, the message's envelope and value in `msg`), unexpected
    /// (`RECV`, or as mlx5 reports them `TM_RECV` with neither `TM_MATCH` nor
    /// `TM_DATA_VALID`) and `TM_NO_TAG` messages (whole, in `msg`). `TM_SYNC_REQ` is
    /// honoured on every completion.
    fn poll(&mut self) -> Option<Cqe<Carried<M>>>;

    /// Gives the receive queue one untagged buffer back after a `RECV` or `TM_NO_TAG`
    /// completion (a backend that reposts its buffers itself does nothing).
    fn replenish(&mut self);
}

/// The `wr_id` spaces of a TM-SRQ's CQ. Three kinds of work complete there: receive-queue
/// buffers (`ibv_post_srq_recv`), tagged buffers (`tm.add.recv_wr_id`) and list operations
/// (`ibv_ops_wr.wr_id`), and an error completion can only be attributed by its `wr_id`:
/// `ibv_poll_cq(3)`: "If the status is other than IBV_WC_SUCCESS, only the following
/// attributes are valid: wr_id, status, qp_num, and vendor_err" (no opcode, no flags, no TM
/// info). The two high bits of every `wr_id` the driver and its backends post name the
/// kind, so the spaces are disjoint:
///
/// ```text
///  63 62 61                                                      0
/// +-----+---------------------------------------------------------+
/// |kind |                     id (62 bits)                        |
/// +-----+---------------------------------------------------------+
///  00 tagged buffer: id = the driver's receive id (OffHandle)
///  10 list operation: id = the driver's operation sequence number
///  11 receive-queue buffer: id = the backend's slot number
///  01 reserved (a completion naming it is reported as a contract breach)
/// ```
pub mod wr_id {
    /// Bits of the id below the kind.
    pub const ID_BITS: u32 = 62;
    /// Mask of the id.
    pub const ID_MASK: u64 = (1 << ID_BITS) - 1;
    const OP: u64 = 0b10 << ID_BITS;
    const RQ: u64 = 0b11 << ID_BITS;

    /// What a `wr_id` names.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum WrKind {
        /// A tagged buffer: the driver's receive id.
        Tagged(u64),
        /// A list operation (ADD, DEL, SYNC): its sequence number.
        Op(u64),
        /// A receive-queue buffer: the backend's slot number.
        Rq(u64),
        /// The reserved kind: no work request of the driver or its backends has it.
        Reserved(u64),
    }

    /// The `wr_id` of list operation `n` (`n` is truncated to [`ID_BITS`]).
    pub const fn op(n: u64) -> u64 {
        OP | (n & ID_MASK)
    }

    /// The `wr_id` of receive-queue buffer `n` (`n` is truncated to [`ID_BITS`]).
    pub const fn rq(n: u64) -> u64 {
        RQ | (n & ID_MASK)
    }

    /// The `recv_wr_id` of the tagged buffer of receive `id`; `None` if `id` does not fit
    /// in [`ID_BITS`].
    pub const fn tagged(id: u64) -> Option<u64> {
        if id <= ID_MASK {
            Some(id)
        } else {
            None
        }
    }

    /// What `wr_id` names.
    pub const fn kind(wr_id: u64) -> WrKind {
        let id = wr_id & ID_MASK;
        match wr_id >> ID_BITS {
            0b00 => WrKind::Tagged(id),
            0b10 => WrKind::Op(id),
            0b11 => WrKind::Rq(id),
            _ => WrKind::Reserved(id),
        }
    }
}

/// `wr_id`s of the model's receive-queue buffers (their slot number is not used).
const SRQ_WR_ID: u64 = wr_id::rq(wr_id::ID_MASK);

/// The model as a backend; a tagged buffer is its length (the model does not materialise
/// buffer contents).
impl<M> TmBackend<M> for TmSrq<Carried<M>> {
    type Buf = u32;

    fn buf_len(buf: &u32) -> u32 {
        *buf
    }

    fn caps(&self) -> TmCaps {
        TmSrq::caps(self)
    }

    fn post_op(&mut self, wr: OpsWr, _buf: Option<u32>) -> Result<Option<u32>, PostOpError> {
        TmSrq::post_op(self, wr)
    }

    fn poll(&mut self) -> Option<Cqe<Carried<M>>> {
        self.poll_cq()
    }

    fn replenish(&mut self) {
        self.post_srq_recv(SRQ_WR_ID);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct HwState {
    tag_handle: u32,
    cancel: bool,
}

#[derive(Debug)]
struct Rec<R> {
    ctx: R,
    eh: RecvHandle,
    spec: RecvSpec,
    hw: Option<HwState>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum OpKind {
    Add { id: u64 },
    Del { id: u64, cancel: bool },
    Sync,
}

/// Software-resident pending receives, indexed for the prefix rule.
#[derive(Debug, Default)]
struct CommSw {
    total: u32,
    exact: FastMap<(u32, u64), u32>,
    src_anytag: FastMap<u32, u32>,
    anysrc_tag: FastMap<u64, u32>,
    anysrc_anytag: u32,
    by_src: FastMap<u32, u32>,
    anysrc: u32,
    by_tag: FastMap<u64, u32>,
    anytag: u32,
    masked: FastMap<u64, RecvSpec>,
    all: FastMap<u64, RecvSpec>,
}

fn bump<K: std::hash::Hash + Eq>(m: &mut FastMap<K, u32>, k: K, up: bool) {
    if up {
        *m.entry(k).or_insert(0) += 1;
    } else if let Some(v) = m.get_mut(&k) {
        *v -= 1;
        if *v == 0 {
            m.remove(&k);
        }
    }
}

fn get<K: std::hash::Hash + Eq>(m: &FastMap<K, u32>, k: &K) -> bool {
    m.get(k).is_some_and(|&v| v > 0)
}

impl CommSw {
    fn update(&mut self, id: u64, s: &RecvSpec, up: bool) {
        let d = |v: &mut u32| {
            if up {
                *v += 1
            } else {
                *v -= 1
            }
        };
        d(&mut self.total);
        match s.src {
            Source::Rank(r) => bump(&mut self.by_src, r, up),
            Source::Any => d(&mut self.anysrc),
        }
        match s.tag {
            TagSel::Exact(t) => bump(&mut self.by_tag, t, up),
            TagSel::Any => d(&mut self.anytag),
            TagSel::Masked { .. } => {
                if up {
                    self.masked.insert(id, *s);
                } else {
                    self.masked.remove(&id);
                }
            }
        }
        match (s.src, s.tag) {
            (Source::Rank(r), TagSel::Exact(t)) => bump(&mut self.exact, (r, t), up),
            (Source::Rank(r), TagSel::Any) => bump(&mut self.src_anytag, r, up),
            (Source::Any, TagSel::Exact(t)) => bump(&mut self.anysrc_tag, t, up),
            (Source::Any, TagSel::Any) => d(&mut self.anysrc_anytag),
            _ => {}
        }
        if up {
            self.all.insert(id, *s);
        } else {
            self.all.remove(&id);
        }
    }

    fn intersects(&self, s: &RecvSpec) -> bool {
        if self.total == 0 {
            return false;
        }
        let masked_hit = || self.masked.values().any(|m| specs_intersect(m, s));
        match (s.src, s.tag) {
            (Source::Any, TagSel::Any) => true,
            (Source::Rank(r), TagSel::Any) => get(&self.by_src, &r) || self.anysrc > 0,
            (Source::Any, TagSel::Exact(t)) => {
                get(&self.by_tag, &t) || self.anytag > 0 || masked_hit()
            }
            (Source::Rank(r), TagSel::Exact(t)) => {
                get(&self.exact, &(r, t))
                    || get(&self.src_anytag, &r)
                    || get(&self.anysrc_tag, &t)
                    || self.anysrc_anytag > 0
                    || masked_hit()
            }
            (_, TagSel::Masked { .. }) => self.all.values().any(|m| specs_intersect(m, s)),
        }
    }
}

/// A message stored in the engine.
#[derive(Debug)]
struct Unexp<M> {
    msg: M,
    rvh: Option<Rvh>,
}

/// The offload driver over the hardware `B`; see the [module documentation](self).
#[derive(Debug)]
pub struct Driver<R, M, B = TmSrq<Carried<M>>> {
    cfg: DriverConfig,
    engine: Engine<u64, Unexp<M>>,
    recvs: FastMap<u64, Rec<R>>,
    next_id: u64,
    hw: Option<B>,
    sw: FastMap<u32, CommSw>,
    /// Operations decided but not yet posted (no free operation slot), with their
    /// stamped count.
    fifo: VecDeque<(TmOp, u32, OpKind)>,
    ops: FastMap<u64, OpKind>,
    next_wr: u64,
    sw_unexp: u32,
    last_reported: u32,
    sync_wanted: bool,
    plain: VecDeque<WireMsg<Carried<M>>>,
    c: OffloadCounters,
    ignore_prefix_rule: bool,
    /// The status that stopped offload.
    stopped: Option<WcStatus>,
    /// Events decided outside [`Driver::poll`], reported by the next poll.
    later: Vec<Event<R, M>>,
}

const SIGNALED_SYNC: u32 = ops_flags::SIGNALED | ops_flags::TM_SYNC;

impl<R, M> Driver<R, M> {
    /// Creates the driver and, when `cfg.caps` allows, the TM-SRQ model (with
    /// `cfg.srq_depth` receive-queue buffers and packets of `cfg.mtu` bytes).
    pub fn new(cfg: DriverConfig) -> Self {
        let hw = cfg.caps.and_then(|caps| {
            let mut s = TmSrq::new(caps, cfg.mtu)?;
            for _ in 0..cfg.srq_depth {
                s.post_srq_recv(SRQ_WR_ID);
            }
            Some(s)
        });
        Self::with_backend(cfg, hw)
    }

    /// A message hits the wire: the TM-SRQ processes it now (its completion is reported by
    /// a later [`Driver::poll`]); without one it is queued for the next poll.
    pub fn wire(&mut self, msg: WireMsg<Carried<M>>) -> Result<(), ArriveError<Carried<M>>> {
        match self.hw.as_mut() {
            Some(hw) => hw.arrive(msg),
            None => {
                self.plain.push_back(msg);
                Ok(())
            }
        }
    }

    /// Runs the hardware until every queued operation has executed and every completion
    /// is processed (data transfers stay as they are). For tools that want a quiescent
    /// state; tests drive the steps themselves.
    pub fn settle(&mut self, out: &mut Vec<Event<R, M>>) {
        loop {
            self.poll(out);
            let progressed = self.hw.as_mut().is_some_and(|hw| hw.execute_op());
            let idle = self.hw.as_ref().is_none_or(|hw| hw.cq_len() == 0);
            if !progressed && self.fifo.is_empty() && idle && self.plain.is_empty() {
                return;
            }
        }
    }
}

impl<R, M, B: TmBackend<M>> Driver<R, M, B> {
    /// Creates the driver over `hw` (`None`: everything in software), whose receive queue
    /// the caller has already filled. `cfg.caps` becomes `hw`'s capabilities; `cfg.mtu`
    /// and `cfg.srq_depth` only configure the model of [`Driver::new`].
    pub fn with_backend(mut cfg: DriverConfig, hw: Option<B>) -> Self {
        if let Some(hw) = &hw {
            cfg.caps = Some(hw.caps());
        }
        Driver {
            cfg,
            engine: Engine::new(cfg.engine),
            recvs: FastMap::default(),
            next_id: 0,
            hw,
            sw: FastMap::default(),
            fifo: VecDeque::new(),
            ops: FastMap::default(),
            next_wr: 0,
            sw_unexp: 0,
            last_reported: 0,
            sync_wanted: false,
            plain: VecDeque::new(),
            c: OffloadCounters::default(),
            ignore_prefix_rule: false,
            stopped: None,
            later: Vec::new(),
        }
    }

    /// Fault injection for negative tests: with `true` the driver offloads receives
    /// without the prefix rule (an earlier software-resident receive of an intersecting
    /// class no longer blocks), which breaks posting order.
    pub fn set_ignore_prefix_rule(&mut self, on: bool) {
        self.ignore_prefix_rule = on;
    }

    /// The configuration.
    pub fn config(&self) -> &DriverConfig {
        &self.cfg
    }

    /// The TM-SRQ, if any (tests drive the model's steps through [`Driver::hw_mut`]).
    pub fn hw(&self) -> Option<&B> {
        self.hw.as_ref()
    }

    /// The TM-SRQ, mutably: execute operations, complete transfers. Do not post
    /// operations or poll its CQ behind the driver's back.
    pub fn hw_mut(&mut self) -> Option<&mut B> {
        self.hw.as_mut()
    }

    /// Offload counters.
    pub fn counters(&self) -> OffloadCounters {
        self.c
    }

    /// The software engine's counters (`posted_depth` includes offloaded receives).
    pub fn engine_counters(&self) -> Counters {
        self.engine.counters()
    }

    /// The engine's heap bytes.
    pub fn engine_heap_bytes(&self) -> usize {
        self.engine.heap_bytes()
    }

    /// `Some(true)` if the pending receive lives in hardware, `Some(false)` in software,
    /// `None` if it is not pending.
    pub fn is_offloaded(&self, h: OffHandle) -> Option<bool> {
        self.recvs.get(&h.0).map(|r| r.hw.is_some())
    }

    /// `Some(status)` once offload stopped: a list operation failed with `status` (other
    /// than a DEL's `TM_ERR`), or `ibv_post_srq_ops` refused one (`GeneralErr`). New
    /// receives then stay in software; see the module documentation, "List operations that
    /// fail".
    pub fn offload_stopped(&self) -> Option<WcStatus> {
        self.stopped
    }

    /// Operations decided but waiting for a free operation slot.
    pub fn deferred_ops(&self) -> usize {
        self.fifo.len()
    }

    /// Unexpected messages software has processed (the count it reports).
    pub fn sw_unexpected(&self) -> u32 {
        self.sw_unexp
    }

    /// An EAGER wire message for `env` with `len` payload bytes.
    pub fn eager(&self, env: Envelope, len: u32, msg: M) -> WireMsg<Carried<M>> {
        WireMsg::eager(self.cfg.layout.encode(&env), 0, len, Carried { env, msg })
    }

    /// A RNDV request for `env`.
    pub fn rndv(&self, env: Envelope, rvh: Rvh, msg: M) -> WireMsg<Carried<M>> {
        WireMsg::rndv(
            self.cfg.layout.encode(&env),
            0,
            rvh,
            0,
            Carried { env, msg },
        )
    }

    /// Posts a receive with the tagged buffer `buf` (for the model: its length in bytes).
    /// The earliest-arrived matching unexpected message (among those already polled) is
    /// taken; otherwise the receive is queued, in hardware when the prefix rule allows it.
    pub fn post(
        &mut self,
        spec: RecvSpec,
        buf: B::Buf,
        ctx: R,
    ) -> Result<PostOutcome<R, M>, PostRejected<R>> {
        let spec = spec.normalized();
        let id = self.next_id;
        match self.engine.post(spec, id) {
            Err(_) => Err(PostRejected { recv: ctx }),
            Ok(Posted::Matched(m)) => {
                self.next_id += 1;
                self.c.matched_post += 1;
                if m.msg.rvh.is_some() {
                    self.c.sw_rndv += 1;
                }
                Ok(PostOutcome::Matched(OffMatch {
                    handle: OffHandle(id),
                    recv: ctx,
                    msg: m.msg.msg,
                    env: m.env,
                    len: m.len,
                    path: MatchPath::SwPost,
                    sw_rndv: m.msg.rvh,
                    data_pending: false,
                }))
            }
            Ok(Posted::Pending(eh)) => {
                self.next_id += 1;
                let hw = match self.try_offload(id, &spec, buf) {
                    Ok(tag_handle) => Some(HwState {
                        tag_handle,
                        cancel: false,
                    }),
                    Err(b) => {
                        let c = &mut self.c;
                        *match b {
                            Block::NoHw => &mut c.blocked_no_hw,
                            Block::Encoding => &mut c.blocked_encoding,
                            Block::SwPending => &mut c.blocked_sw_pending,
                            Block::TagsFull => &mut c.blocked_tags_full,
                            Block::OpsBusy => &mut c.blocked_ops_busy,
                            Block::Stopped => &mut c.blocked_stopped,
                        } += 1;
                        self.sw
                            .entry(spec.comm)
                            .or_default()
                            .update(id, &spec, true);
                        None
                    }
                };
                self.recvs.insert(id, Rec { ctx, eh, spec, hw });
                Ok(PostOutcome::Pending(OffHandle(id)))
            }
        }
    }

    fn try_offload(&mut self, id: u64, spec: &RecvSpec, buf: B::Buf) -> Result<u32, Block> {
        let Some(hw) = self.hw.as_mut() else {
            return Err(Block::NoHw);
        };
        if self.stopped.is_some() {
            return Err(Block::Stopped);
        }
        let (tag, mask) = self.cfg.layout.entry(spec).ok_or(Block::Encoding)?;
        let recv_wr_id = wr_id::tagged(id).ok_or(Block::Encoding)?;
        // rdma-core-tag-matching: "HW will hold a bounded prefix of Receive tags": no
        // software-resident (hence earlier) receive may match what this one matches.
        if !self.ignore_prefix_rule && self.sw.get(&spec.comm).is_some_and(|c| c.intersects(spec)) {
            return Err(Block::SwPending);
        }
        if !self.fifo.is_empty() {
            return Err(Block::OpsBusy);
        }
        let wr_id = wr_id::op(self.next_wr);
        let r = hw.post_op(
            OpsWr {
                wr_id,
                flags: SIGNALED_SYNC,
                unexpected_cnt: self.sw_unexp,
                op: TmOp::Add {
                    recv_wr_id,
                    tag,
                    mask,
                    buf_len: B::buf_len(&buf),
                },
            },
            Some(buf),
        );
        match r {
            Ok(Some(h)) => {
                self.next_wr += 1;
                self.ops.insert(wr_id, OpKind::Add { id });
                self.last_reported = self.sw_unexp;
                self.c.offloaded += 1;
                Ok(h)
            }
            Err(PostOpError::TagsFull) => Err(Block::TagsFull),
            Err(PostOpError::OpsFull) => Err(Block::OpsBusy),
            // The device refused a well-formed ADD: treat the TM-SRQ as unusable (the
            // receive stays in software, which is sound).
            Ok(None) | Err(PostOpError::BadHandle) => {
                self.c.op_errors += 1;
                self.stop(WcStatus::GeneralErr);
                Err(Block::Stopped)
            }
        }
    }

    /// Queues an operation stamped with the current count and posts what fits.
    fn enqueue(&mut self, op: TmOp, kind: OpKind) {
        self.fifo.push_back((op, self.sw_unexp, kind));
        self.last_reported = self.sw_unexp;
        self.flush();
    }

    fn flush(&mut self) {
        while let Some(&(op, cnt, kind)) = self.fifo.front() {
            if self.stopped.is_some() {
                // Offload stopped: the operation is not posted (it would be flushed) and has
                // no effect; a cancel's DEL fails.
                self.fifo.pop_front();
                if let OpKind::Del { id, cancel } = kind {
                    // A cancel whose receive's ADD is still under way is decided by that
                    // ADD's completion (failed: the cancel succeeds; done: it fails).
                    let add_pending = self.recvs.contains_key(&id)
                        && self.ops.values().any(|&k| k == OpKind::Add { id });
                    if !(cancel && add_pending) {
                        let mut later = std::mem::take(&mut self.later);
                        self.del_done(id, cancel, WcStatus::WrFlushErr, &mut later);
                        self.later = later;
                    }
                }
                continue;
            }
            let Some(hw) = self.hw.as_mut() else {
                return;
            };
            let wr_id = wr_id::op(self.next_wr);
            match hw.post_op(
                OpsWr {
                    wr_id,
                    flags: SIGNALED_SYNC,
                    unexpected_cnt: cnt,
                    op,
                },
                None,
            ) {
                Ok(_) => {
                    self.next_wr += 1;
                    self.ops.insert(wr_id, kind);
                    self.fifo.pop_front();
                }
                Err(PostOpError::OpsFull) => break,
                Err(_) => {
                    // `ibv_post_srq_ops` refused it: the TM-SRQ is unusable; the loop
                    // resolves the operation as not posted.
                    self.c.op_errors += 1;
                    self.stop(WcStatus::GeneralErr);
                }
            }
        }
    }

    fn stop(&mut self, status: WcStatus) {
        if self.stopped.is_none() {
            self.stopped = Some(status);
            self.c.offload_stops += 1;
        }
    }

    /// Cancels a pending receive. A software-resident one is cancelled now; an offloaded
    /// one gets a DEL and the outcome is reported by [`Driver::poll`]. A receive already
    /// matched or cancelled is [`EngineError::StaleHandle`].
    pub fn cancel(&mut self, h: OffHandle) -> Result<CancelOutcome<R>, EngineError> {
        let rec = self.recvs.get_mut(&h.0).ok_or(EngineError::StaleHandle)?;
        match rec.hw {
            None => {
                let rec = self.recvs.remove(&h.0).ok_or(EngineError::StaleHandle)?;
                self.engine.cancel(rec.eh)?;
                if let Some(c) = self.sw.get_mut(&rec.spec.comm) {
                    c.update(h.0, &rec.spec, false);
                }
                Ok(CancelOutcome::Cancelled(rec.ctx))
            }
            Some(ref mut hs) if hs.cancel => Ok(CancelOutcome::InProgress),
            Some(ref mut hs) => {
                hs.cancel = true;
                let handle = hs.tag_handle;
                self.c.hw_cancels += 1;
                self.enqueue(
                    TmOp::Del { handle },
                    OpKind::Del {
                        id: h.0,
                        cancel: true,
                    },
                );
                Ok(CancelOutcome::InProgress)
            }
        }
    }

    /// Processes every completion available now; events go to `out` in order. Returns the
    /// number of completions processed.
    pub fn poll(&mut self, out: &mut Vec<Event<R, M>>) -> usize {
        out.append(&mut self.later);
        let mut n = 0;
        while self.poll_one(out) {
            n += 1;
        }
        n
    }

    /// Processes one completion (or one queued arrival without a TM-SRQ); `false` if none.
    pub fn poll_one(&mut self, out: &mut Vec<Event<R, M>>) -> bool {
        out.append(&mut self.later);
        let cqe = match self.hw.as_mut() {
            Some(hw) => hw.poll(),
            None => {
                let Some(m) = self.plain.pop_front() else {
                    return false;
                };
                self.sw_arrival(m, out);
                return true;
            }
        };
        let Some(c) = cqe else {
            return false;
        };
        self.process(c, out);
        // "all completions indicate when synchronization is necessary by setting the
        // IBV_WC_TM_SYNC_REQ flag": report the count once it has moved.
        if self.sync_wanted && self.stopped.is_none() && self.sw_unexp != self.last_reported {
            self.sync_wanted = false;
            self.c.syncs += 1;
            self.enqueue(TmOp::Sync, OpKind::Sync);
        }
        self.flush();
        out.append(&mut self.later);
        true
    }

    fn process(&mut self, c: Cqe<Carried<M>>, out: &mut Vec<Event<R, M>>) {
        // rdma-core-tag-matching "Managing TM receive buffers": "all completions indicate
        // when synchronization is necessary by setting the IBV_WC_TM_SYNC_REQ flag" — receive
        // completions too (mlx5 sets it on unexpected ones, wire-layouts §C.1), and a DEL's
        // TM_ERR (mlx5 compares phase counts on ADD/DEL completions). The flag of any other
        // error completion is undefined; honouring a spurious one only costs a SYNC.
        if c.wc_flags & wc_flags::TM_SYNC_REQ != 0
            && (c.status.fields_valid() || c.status == WcStatus::TmErr)
        {
            self.c.sync_reqs += 1;
            self.sync_wanted = true;
        }
        // ibv_poll_cq(3): "If the status is other than IBV_WC_SUCCESS, only the following
        // attributes are valid: wr_id, status, qp_num, and vendor_err": every completion is
        // attributed by its wr_id (module `wr_id`), the opcode and flags are read only when
        // the status says they are defined.
        match wr_id::kind(c.wr_id) {
            WrKind::Op(_) => match self.ops.remove(&c.wr_id) {
                Some(kind) => self.op_done(kind, c.status, out),
                None => self.c.order_violations += 1,
            },
            WrKind::Rq(_) => self.rq_completion(c, out),
            WrKind::Tagged(id) => self.tagged_completion(id, c, out),
            WrKind::Reserved(_) => {
                self.c.order_violations += 1;
                if let (true, Some(m)) = (c.status.fields_valid(), c.msg) {
                    self.sw_arrival(m, out); // keep the message rather than lose it
                }
            }
        }
    }

    /// A completion of a receive-queue buffer: an unexpected or a NO_TAG message.
    fn rq_completion(&mut self, c: Cqe<Carried<M>>, out: &mut Vec<Event<R, M>>) {
        if !c.status.fields_valid() {
            // The buffer holds no message. A flushed one belongs to a queue in the error
            // state: it is not given back.
            self.c.rq_errors += 1;
            if c.status != WcStatus::WrFlushErr {
                self.replenish();
            }
            return;
        }
        match c.opcode {
            WcOpcode::TmNoTag => {
                self.replenish();
                if let Some(m) = c.msg {
                    out.push(Event::NoTag(m));
                }
            }
            // `IBV_WC_RECV`, or as mlx5 reports an unexpected message (wire-layouts §C.1)
            // "IBV_WC_TM_RECV with no MATCH flag".
            _ => {
                // rdma-core-tag-matching: "SW will handle any message that is either
                // unexpected or whose tag is not held in HW"; the count reported back is
                // "the number of unexpected messages handled by SW".
                self.c.hw_unexpected += 1;
                self.sw_unexp = self.sw_unexp.wrapping_add(1);
                self.replenish();
                if let Some(m) = c.msg {
                    self.sw_arrival(m, out);
                }
            }
        }
    }

    /// A completion of the tagged buffer of receive `id`.
    fn tagged_completion(&mut self, id: u64, c: Cqe<Carried<M>>, out: &mut Vec<Event<R, M>>) {
        if c.status.fields_valid() {
            if c.status == WcStatus::TmRndvIncomplete || c.wc_flags & wc_flags::TM_MATCH != 0 {
                self.hw_match(c, out);
            } else if c.wc_flags & wc_flags::TM_DATA_VALID != 0 {
                // "IBV_WC_TM_DATA_VALID - all data of the matched message has been delivered
                // to memory": the second completion of an earlier match.
                out.push(Event::DataValid {
                    handle: OffHandle(id),
                    status: c.status,
                });
            } else {
                // A tagged buffer completing with neither flag: not in the contract.
                self.c.order_violations += 1;
                if let Some(m) = c.msg {
                    self.sw_arrival(m, out);
                }
            }
            return;
        }
        let live = self.recvs.get(&id).is_some_and(|r| r.hw.is_some());
        if !live {
            // The match was reported: this is its data transfer, failed ("matching and
            // data transfer completion are distinct events that generate 2 completion
            // events for the same recv_wr_id"). Keep the status: it is not "all data ...
            // delivered to memory".
            out.push(Event::DataValid {
                handle: OffHandle(id),
                status: c.status,
            });
        } else if c.status == WcStatus::WrFlushErr {
            // Flushed: no message reached the buffer and the TM-SRQ is in the error state.
            // The receive goes back to software matching (it never left the engine, in
            // posting order).
            self.c.op_errors += 1;
            self.stop(c.status);
            self.add_failed(id, out);
        } else if c.msg.is_some() {
            // A backend that knows the message (the model) hands it over with the error.
            self.hw_match(c, out);
        } else {
            self.recv_failed(id, c.status, out);
        }
    }

    /// A list operation completed.
    fn op_done(&mut self, kind: OpKind, status: WcStatus, out: &mut Vec<Event<R, M>>) {
        // rdma-core-tag-matching "Managing TM receive buffers": the one documented failure of
        // a list operation is the DEL's: "the operation may fail if the associated tag was
        // consumed by an incoming message. In this case IBV_WC_TM_ERR status will be
        // returned in WC." Any other error is the queue's: verbs moves a queue whose work
        // request fails to the error state and flushes every later one, so offload stops.
        let tm_err_del = matches!(kind, OpKind::Del { .. }) && status == WcStatus::TmErr;
        if status != WcStatus::Success && !tm_err_del {
            self.c.op_errors += 1;
            self.stop(status);
        }
        match kind {
            OpKind::Add { id } if status != WcStatus::Success => self.add_failed(id, out),
            OpKind::Add { id } if self.stopped.is_some() => self.added_after_stop(id, out),
            OpKind::Del { id, cancel } => self.del_done(id, cancel, status, out),
            OpKind::Add { .. } | OpKind::Sync => {}
        }
    }

    /// Receive `id`'s ADD succeeded but offload has stopped: a cancel whose DEL was
    /// dropped unposted fails now (the entry is in the list and no DEL can remove it).
    fn added_after_stop(&mut self, id: u64, out: &mut Vec<Event<R, M>>) {
        let waiting = self
            .recvs
            .get(&id)
            .and_then(|r| r.hw)
            .is_some_and(|hs| hs.cancel);
        let del = OpKind::Del { id, cancel: true };
        let del_pending =
            self.ops.values().any(|&k| k == del) || self.fifo.iter().any(|&(_, _, k)| k == del);
        if waiting && !del_pending {
            self.del_done(id, true, WcStatus::WrFlushErr, out);
        }
    }

    /// Hardware never held receive `id`'s tag (its ADD failed or its buffer was flushed):
    /// rdma-core-tag-matching "IBV_WR_TAG_ADD ... A handle that uniquely identifies the
    /// entry is returned upon success", so without success there is no entry. The receive
    /// is software-resident again; the engine kept it in posting order all along. A cancel
    /// under way succeeds now.
    fn add_failed(&mut self, id: u64, out: &mut Vec<Event<R, M>>) {
        let Some(rec) = self.recvs.get_mut(&id) else {
            return; // software matched it first; its stale DEL fails harmlessly
        };
        let Some(hs) = rec.hw.take() else {
            return;
        };
        self.c.returned_to_sw += 1;
        if hs.cancel {
            let Some(rec) = self.recvs.remove(&id) else {
                return;
            };
            if self.engine.cancel(rec.eh).is_err() {
                self.c.order_violations += 1;
            }
            // Its DEL resolves nothing any more (it fails, or was never posted).
            let del = OpKind::Del { id, cancel: true };
            self.fifo.retain(|&(_, _, k)| k != del);
            for k in self.ops.values_mut() {
                if *k == del {
                    *k = OpKind::Del { id, cancel: false };
                }
            }
            out.push(Event::Cancelled {
                handle: OffHandle(id),
                recv: rec.ctx,
            });
        } else {
            let spec = rec.spec;
            self.sw
                .entry(spec.comm)
                .or_default()
                .update(id, &spec, true);
        }
    }

    /// The first completion of receive `id`'s tagged buffer failed without naming the
    /// message: the receive is over, in error.
    fn recv_failed(&mut self, id: u64, status: WcStatus, out: &mut Vec<Event<R, M>>) {
        let Some(rec) = self.recvs.remove(&id) else {
            self.c.order_violations += 1;
            return;
        };
        if self.engine.cancel(rec.eh).is_err() {
            self.c.order_violations += 1;
        }
        self.c.recv_errors += 1;
        let lost_cancel = self.drop_queued_cancel(id, rec.hw);
        out.push(Event::RecvFailed {
            handle: OffHandle(id),
            recv: rec.ctx,
            status,
        });
        if lost_cancel {
            self.c.tm_err_races += 1;
            out.push(Event::CancelFailed {
                handle: OffHandle(id),
            });
        }
    }

    /// A cancel whose DEL still waits in `fifo` lost the race with a completion that
    /// consumed the tag; the DEL must not be posted: the handle may be reused once this
    /// completion is polled. Whether the cancel must be reported failed now: its DEL was
    /// waiting, or was dropped unposted (offload stopped); a posted DEL reports itself.
    fn drop_queued_cancel(&mut self, id: u64, hw: Option<HwState>) -> bool {
        if !hw.is_some_and(|hs| hs.cancel) {
            return false;
        }
        let del = OpKind::Del { id, cancel: true };
        let before = self.fifo.len();
        self.fifo.retain(|&(_, _, k)| k != del);
        before != self.fifo.len() || !self.ops.values().any(|&k| k == del)
    }

    fn replenish(&mut self) {
        if let Some(hw) = self.hw.as_mut() {
            hw.replenish();
        }
    }

    fn del_done(&mut self, id: u64, cancel: bool, status: WcStatus, out: &mut Vec<Event<R, M>>) {
        let failed = !matches!(status, WcStatus::Success | WcStatus::TmErr);
        if failed {
            self.c.del_errors += 1;
        }
        if !cancel {
            // An entry software had consumed: nothing to report. If the DEL failed, the
            // entry stays in the list, disabled for good (no operation executes any more,
            // so no count reaches hardware to enable it).
            return;
        }
        if status == WcStatus::TmErr {
            self.c.tm_err_races += 1;
        }
        match self.recvs.get_mut(&id) {
            Some(_) if status == WcStatus::Success => {
                let Some(rec) = self.recvs.remove(&id) else {
                    return;
                };
                if self.engine.cancel(rec.eh).is_err() {
                    self.c.order_violations += 1;
                }
                out.push(Event::Cancelled {
                    handle: OffHandle(id),
                    recv: rec.ctx,
                });
            }
            Some(rec) => {
                if !failed {
                    // TM_ERR but the consume completion was not seen yet (wire-layouts §C.1:
                    // mlx5 keeps the tag "until its consume completion"): the match follows.
                    self.c.order_violations += 1;
                }
                // The entry may still be in the list: the receive stays pending in hardware
                // and completes by a match; the cancel fails (MPI: a receive whose cancel
                // fails completes normally).
                if let Some(hs) = rec.hw.as_mut() {
                    hs.cancel = false;
                }
                out.push(Event::CancelFailed {
                    handle: OffHandle(id),
                });
            }
            // Matched first (in hardware: TM_ERR; or in software while the entry was
            // disabled: the DEL succeeded on a stale entry). Never a false cancel.
            None => out.push(Event::CancelFailed {
                handle: OffHandle(id),
            }),
        }
    }

    fn hw_match(&mut self, c: Cqe<Carried<M>>, out: &mut Vec<Event<R, M>>) {
        let id = c.wr_id;
        let Some(wire) = c.msg else {
            // A match completion without its message: report the receive in error rather
            // than lose it.
            self.c.order_violations += 1;
            let status = if c.status == WcStatus::Success {
                WcStatus::GeneralErr
            } else {
                c.status
            };
            self.recv_failed(id, status, out);
            return;
        };
        let live = self.recvs.get(&id).is_some_and(|r| r.hw.is_some());
        if !live {
            // Hardware matched an entry software no longer has: contract broken. Keep the
            // message rather than lose it.
            self.c.order_violations += 1;
            self.sw_arrival(wire, out);
            return;
        }
        let Some(rec) = self.recvs.remove(&id) else {
            return;
        };
        let Carried { env, msg } = wire.payload;
        if self
            .engine
            .first_posted_match(&env)
            .is_none_or(|p| p.handle != rec.eh)
        {
            self.c.order_violations += 1;
        }
        if self.engine.cancel(rec.eh).is_err() {
            self.c.order_violations += 1;
        }
        self.c.matched_hw += 1;
        let lost_cancel = self.drop_queued_cancel(id, rec.hw);
        let incomplete = c.status == WcStatus::TmRndvIncomplete;
        if incomplete {
            self.c.rndv_incomplete += 1;
        }
        out.push(Event::Matched(OffMatch {
            handle: OffHandle(id),
            recv: rec.ctx,
            msg,
            env,
            len: wire.len as usize,
            path: MatchPath::Hw,
            sw_rndv: if incomplete { wire.rvh } else { None },
            // An error completion ends the buffer's work (its flags are undefined).
            data_pending: c.status == WcStatus::Success
                && c.wc_flags & wc_flags::TM_DATA_VALID == 0,
        }));
        if lost_cancel {
            self.c.tm_err_races += 1;
            out.push(Event::CancelFailed {
                handle: OffHandle(id),
            });
        }
    }

    fn sw_arrival(&mut self, wire: WireMsg<Carried<M>>, out: &mut Vec<Event<R, M>>) {
        let Carried { env, msg } = wire.payload;
        let rvh = wire.rvh;
        match self
            .engine
            .arrive(env, wire.len as usize, Unexp { msg, rvh })
        {
            Ok(Arrived::Matched(m)) => {
                let id = m.recv;
                let Some(rec) = self.recvs.remove(&id) else {
                    self.c.order_violations += 1;
                    return;
                };
                let mut cancel_failed = false;
                match rec.hw {
                    None => {
                        if let Some(c) = self.sw.get_mut(&rec.spec.comm) {
                            c.update(id, &rec.spec, false);
                        }
                    }
                    Some(hs) if !hs.cancel => {
                        // The entry is disabled (hardware deemed this message unexpected);
                        // remove it before any count that includes this message.
                        self.c.stale_dels += 1;
                        self.enqueue(
                            TmOp::Del {
                                handle: hs.tag_handle,
                            },
                            OpKind::Del { id, cancel: false },
                        );
                    }
                    Some(_) => {
                        // Its cancel's DEL is queued or posted (it removes the stale entry and
                        // reports the failed cancel), unless offload stopped and it was
                        // dropped unposted: then the cancel fails now.
                        let del = OpKind::Del { id, cancel: true };
                        if !self.ops.values().any(|&k| k == del)
                            && !self.fifo.iter().any(|&(_, _, k)| k == del)
                        {
                            cancel_failed = true;
                        }
                    }
                }
                self.c.matched_sw += 1;
                if rvh.is_some() {
                    self.c.sw_rndv += 1;
                }
                out.push(Event::Matched(OffMatch {
                    handle: OffHandle(id),
                    recv: rec.ctx,
                    msg: m.msg.msg,
                    env: m.env,
                    len: m.len,
                    path: MatchPath::SwArrival,
                    sw_rndv: rvh,
                    data_pending: false,
                }));
                if cancel_failed {
                    self.c.tm_err_races += 1;
                    out.push(Event::CancelFailed {
                        handle: OffHandle(id),
                    });
                }
            }
            Ok(Arrived::Unexpected(env)) => {
                self.c.unexpected += 1;
                out.push(Event::Unexpected {
                    env,
                    len: wire.len as usize,
                });
            }
            Err(r) => out.push(Event::Rejected(Rejected {
                reason: r.reason,
                env: r.env,
                len: r.len,
                msg: r.msg.msg,
            })),
        }
    }

    /// `MPI_Iprobe` over the unexpected messages polled so far: envelope, length, payload.
    pub fn probe(&mut self, spec: &RecvSpec) -> Option<(Envelope, usize, &M)> {
        self.engine.probe(spec).map(|p| (p.env, p.len, &p.msg.msg))
    }

    /// `MPI_Mprobe`: claims the earliest matching unexpected message.
    pub fn mprobe(&mut self, spec: &RecvSpec) -> Option<Claimed> {
        self.engine.mprobe(spec)
    }

    /// The payload of a claimed message.
    pub fn claimed(&self, h: MsgHandle) -> Result<&M, EngineError> {
        self.engine.claimed(h).map(|u| &u.msg)
    }

    /// `MPI_Mrecv` of a claimed message.
    pub fn mrecv(&mut self, h: MsgHandle) -> Result<Message<M>, EngineError> {
        self.engine.mrecv(h).map(|m| Message {
            env: m.env,
            len: m.len,
            msg: m.msg.msg,
        })
    }
}

impl<R: Hash, M: Hash, B: Hash> Driver<R, M, B> {
    /// Feeds the driver's state to `h` for state-space exploration in tests: everything
    /// that decides future behaviour except the engine's internals (its pending receives
    /// are the driver's records; its unexpected messages are the caller's to digest) and
    /// except counters and engine handle values.
    #[doc(hidden)]
    pub fn fingerprint<H: Hasher>(&self, h: &mut H) {
        let mut recs: Vec<_> = self.recvs.iter().collect();
        recs.sort_by_key(|(k, _)| **k);
        for (id, r) in recs {
            id.hash(h);
            r.ctx.hash(h);
            r.spec.hash(h);
            r.hw.hash(h);
        }
        self.next_id.hash(h);
        self.fifo.hash(h);
        let mut ops: Vec<_> = self.ops.iter().collect();
        ops.sort();
        ops.hash(h);
        self.next_wr.hash(h);
        self.sw_unexp.hash(h);
        self.last_reported.hash(h);
        self.sync_wanted.hash(h);
        self.stopped.hash(h);
        self.later.len().hash(h);
        self.plain.hash(h);
        self.hw.hash(h);
    }
}

//! Public value types: envelopes, receive specifications, handles, outcomes, errors, counters.

use core::fmt;

/// The matching envelope of a message: communicator, source and tag.
///
/// `src` is a *peer identifier* that must be unique across communicators (a world rank, a
/// fabric address index, an EFA peer id): the engine's per-source sequence space
/// (non-overtaking, reorder buffer) and [`Engine::purge_peer`](crate::Engine::purge_peer)
/// are keyed by it. An MPI layer translates communicator-relative ranks to these ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Envelope {
    /// Communicator (context id).
    pub comm: u32,
    /// Source peer.
    pub src: u32,
    /// Tag (MPI tags are non-negative; the engine accepts any `u64`).
    pub tag: u64,
}

impl Envelope {
    /// Builds an envelope.
    pub const fn new(comm: u32, src: u32, tag: u64) -> Self {
        Envelope { comm, src, tag }
    }
}

/// Source selector of a receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// `MPI_ANY_SOURCE`.
    Any,
    /// One peer.
    Rank(u32),
}

/// Tag selector of a receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TagSel {
    /// `MPI_ANY_TAG`: every tag of the communicator matches.
    Any,
    /// Exactly this tag.
    Exact(u64),
    /// Verbs TM-SRQ rule: a message tag `t` matches when `t & mask == want & mask`.
    ///
    /// `mask == u64::MAX` is normalised to [`TagSel::Exact`] and `mask == 0` to
    /// [`TagSel::Any`], so those get the O(1) paths; other masks are matched by a scan.
    Masked {
        /// Wanted bits.
        want: u64,
        /// Bits that must be equal.
        mask: u64,
    },
}

/// What a receive (or a probe) asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvSpec {
    /// Communicator (context id). There is no wildcard for it, as in MPI.
    pub comm: u32,
    /// Source selector.
    pub src: Source,
    /// Tag selector.
    pub tag: TagSel,
}

impl RecvSpec {
    /// Receive from `src` with `tag` on `comm` (no wildcard).
    pub const fn exact(comm: u32, src: u32, tag: u64) -> Self {
        RecvSpec {
            comm,
            src: Source::Rank(src),
            tag: TagSel::Exact(tag),
        }
    }

    /// Builds a spec from optional source and tag (`None` = wildcard).
    pub const fn new(comm: u32, src: Option<u32>, tag: Option<u64>) -> Self {
        let src = match src {
            Some(s) => Source::Rank(s),
            None => Source::Any,
        };
        let tag = match tag {
            Some(t) => TagSel::Exact(t),
            None => TagSel::Any,
        };
        RecvSpec { comm, src, tag }
    }

    /// Verbs-style masked receive: `tag & mask == want & mask`.
    pub const fn masked(comm: u32, src: Source, want: u64, mask: u64) -> Self {
        RecvSpec {
            comm,
            src,
            tag: TagSel::Masked { want, mask },
        }
    }

    /// The literal MPI 4.0 §3.5 matching rule (plus the mask form).
    pub fn matches(&self, env: &Envelope) -> bool {
        if self.comm != env.comm {
            return false;
        }
        if let Source::Rank(s) = self.src {
            if s != env.src {
                return false;
            }
        }
        match self.tag {
            TagSel::Any => true,
            TagSel::Exact(t) => t == env.tag,
            TagSel::Masked { want, mask } => env.tag & mask == want & mask,
        }
    }

    /// Replaces degenerate masks by the equivalent exact / any selector and clears the
    /// `want` bits outside the mask. The engine stores, reports ([`PostedInfo`],
    /// [`Purged::Recv`]) and passes to predicates specs in this form.
    pub fn normalized(self) -> Self {
        let tag = match self.tag {
            TagSel::Masked {
                mask: u64::MAX,
                want,
            } => TagSel::Exact(want),
            TagSel::Masked { mask: 0, .. } => TagSel::Any,
            TagSel::Masked { want, mask } => TagSel::Masked {
                want: want & mask,
                mask,
            },
            t => t,
        };
        RecvSpec { tag, ..self }
    }
}

/// Handle of a posted receive. Generation-checked: after the receive is matched or
/// cancelled, the handle is stale and every use of it returns
/// [`EngineError::StaleHandle`], even if its slot has been reused by a newer receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvHandle {
    pub(crate) idx: u32,
    pub(crate) gen: u32,
}

/// Handle of a message claimed by [`Engine::mprobe`](crate::Engine::mprobe); only
/// [`Engine::mrecv`](crate::Engine::mrecv) consumes it. Checked against the claim id
/// of its mprobe, so it goes stale like a [`RecvHandle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MsgHandle {
    pub(crate) idx: u32,
    pub(crate) gen: u32,
}

/// A receive paired with a message.
#[derive(Debug, PartialEq, Eq)]
pub struct Match<R, M> {
    /// The receive's user context.
    pub recv: R,
    /// The message's user payload (or payload handle).
    pub msg: M,
    /// The message's envelope.
    pub env: Envelope,
    /// The message's payload length as given on arrival.
    pub len: usize,
}

/// Result of [`Engine::post`](crate::Engine::post).
#[derive(Debug, PartialEq, Eq)]
pub enum Posted<R, M> {
    /// The earliest-arrived matching unexpected message was taken.
    Matched(Match<R, M>),
    /// No unexpected message matches; the receive is queued.
    Pending(RecvHandle),
}

/// Result of processing one arrived message (in send order).
#[derive(Debug, PartialEq, Eq)]
pub enum Arrived<R, M> {
    /// The earliest-posted matching receive was taken.
    Matched(Match<R, M>),
    /// No posted receive matches; the message is stored as unexpected.
    Unexpected(Envelope),
}

/// One in-order step of a source's sequence, from [`Engine::deliver_held`] or
/// [`Engine::deliver_control`](crate::Engine::deliver_control).
///
/// [`Engine::deliver_held`]: crate::Engine::deliver_held
#[derive(Debug, PartialEq, Eq)]
pub enum Ordered<R, M> {
    /// A message was processed, as by [`Engine::arrive`](crate::Engine::arrive).
    Arrived(Arrived<R, M>),
    /// The turn of a sequence number consumed by
    /// [`Engine::deliver_control`](crate::Engine::deliver_control) has come: every
    /// earlier message of `src` has been processed, and no later one yet.
    Control {
        /// The source.
        src: u32,
        /// The control's sequence number.
        seq: u32,
    },
}

/// A message taken out of the engine by [`Engine::mrecv`](crate::Engine::mrecv) or a purge.
#[derive(Debug, PartialEq, Eq)]
pub struct Message<M> {
    /// Envelope.
    pub env: Envelope,
    /// Payload length as given on arrival.
    pub len: usize,
    /// User payload.
    pub msg: M,
}

/// Result of a successful [`Engine::mprobe`](crate::Engine::mprobe).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// Handle for [`Engine::mrecv`](crate::Engine::mrecv).
    pub handle: MsgHandle,
    /// Envelope of the claimed message.
    pub env: Envelope,
    /// Payload length.
    pub len: usize,
}

/// Result of [`Engine::probe`](crate::Engine::probe): a view of the earliest matching
/// unexpected message, which stays queued.
#[derive(Debug, PartialEq, Eq)]
pub struct Peek<'a, M> {
    /// Envelope.
    pub env: Envelope,
    /// Payload length.
    pub len: usize,
    /// The payload, borrowed.
    pub msg: &'a M,
}

/// Something removed by a purge or a bulk cancel.
#[derive(Debug, PartialEq, Eq)]
pub enum Purged<R, M> {
    /// A posted receive.
    Recv(RecvSpec, R),
    /// An unexpected message.
    Unexpected(Message<M>),
    /// A message that was held in the reorder buffer (not yet in send order).
    Held(Message<M>),
}

/// Information about a posted receive, for the HW/SW split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostedInfo {
    /// Its handle.
    pub handle: RecvHandle,
    /// Its posting sequence number (strictly increasing over the engine's life).
    pub seq: u64,
    /// What it asks for (normalised).
    pub spec: RecvSpec,
}

/// Memory state of the unexpected side, for the transport to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pressure {
    /// Below the high-water mark.
    Normal,
    /// At or above [`Config::high_water_percent`] of a budget: throttle the senders.
    High,
    /// A budget is exhausted: the next message that does not match a posted receive
    /// (or arrives out of order) is rejected with [`RejectReason::Backpressure`].
    Full,
}

/// Why an arriving message was refused. The message is handed back and the engine state is
/// unchanged (in particular the source's expected sequence number did not move), so the
/// transport can retry it later (RNR, credit, retransmit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectReason {
    /// Storing it (unexpected or held) would exceed the byte or entry budget.
    Backpressure,
    /// Its sequence number is at or beyond `expected + reorder_window`.
    WindowOverflow,
    /// Its sequence number was already processed (it is "behind" the expected one).
    Stale,
    /// A message with this sequence number is already held in the reorder buffer.
    Duplicate,
}

/// A refused arrival, with the message handed back.
#[derive(Debug, PartialEq, Eq)]
pub struct Rejected<M> {
    /// Why.
    pub reason: RejectReason,
    /// Envelope of the refused message.
    pub env: Envelope,
    /// Its length.
    pub len: usize,
    /// The message.
    pub msg: M,
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RejectReason::Backpressure => "unexpected-message budget exhausted (backpressure)",
            RejectReason::WindowOverflow => "sequence number beyond the reorder window",
            RejectReason::Stale => "sequence number already processed",
            RejectReason::Duplicate => "sequence number already held in the reorder buffer",
        })
    }
}

impl<M: fmt::Debug> fmt::Display for Rejected<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "message {:?} rejected: {}", self.env, self.reason)
    }
}

impl<M: fmt::Debug> std::error::Error for Rejected<M> {}

/// A refused post: the posted-receive limit ([`Config::max_posted`]) is reached.
#[derive(Debug, PartialEq, Eq)]
pub struct PostRejected<R> {
    /// The receive context, handed back.
    pub recv: R,
}

impl<R: fmt::Debug> fmt::Display for PostRejected<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("posted-receive limit reached")
    }
}

impl<R: fmt::Debug> std::error::Error for PostRejected<R> {}

/// Errors of handle-based and configuration operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineError {
    /// The handle does not name a live entry of the right kind (already matched,
    /// cancelled, received, purged, or never valid).
    StaleHandle,
    /// The peer has messages held in its reorder buffer; its sequence number cannot be
    /// reset now.
    PeerBusy,
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EngineError::StaleHandle => "stale or invalid handle",
            EngineError::PeerBusy => "peer has messages held in its reorder buffer",
        })
    }
}

impl std::error::Error for EngineError {}

/// Engine configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Reorder window per source, in messages: a sequenced arrival with
    /// `seq - expected` (wrapping) in `1..window` is held; beyond it is an error.
    /// 0 and 1 both mean "no out-of-order arrival accepted". At most
    /// [`MAX_REORDER_WINDOW`](crate::MAX_REORDER_WINDOW) (65,536, ob1's 16-bit sequence
    /// space): [`Engine::new`](crate::Engine::new) clamps larger values to it, and
    /// [`Engine::config`](crate::Engine::config) shows the window in force.
    ///
    /// Memory: a source's buffer is allocated at its first admitted out-of-order
    /// arrival and grows (by powers of two, from 4 slots) to the furthest offset it held,
    /// not to the window; it is freed once drained if larger than 64 slots. An early
    /// message is admitted only with room in [`Config::max_messages`] for it and every
    /// message missing below it, so the buffers follow that budget; so is an early
    /// control ([`Engine::deliver_control`](crate::Engine::deliver_control)), which
    /// counts as one entry while held. A rejected
    /// arrival allocates no buffer (a source seen for the first time keeps its sequence
    /// state, under 100 bytes, even when its arrival is refused).
    pub reorder_window: u32,
    /// Budget of payload bytes held by the engine (unexpected + reorder buffer + claimed).
    /// One exception: [`Engine::deliver`](crate::Engine::deliver) admits a source's next
    /// message in order over the byte budget when messages after it are held out of
    /// order (they wait for it; refusing it would leave the source stuck, and its size is
    /// not known when they are held). Out-of-order arrivals themselves enter only within
    /// the budget, so the overshoot is at most, per source, the gaps below its held
    /// messages (within the reorder window).
    pub max_bytes: usize,
    /// Budget of entries held by the engine (unexpected + reorder buffer + claimed), never
    /// exceeded: a message held out of order keeps room for itself and for every message
    /// of its source missing below it (one that cannot is refused with
    /// [`RejectReason::Backpressure`](crate::RejectReason::Backpressure)), so the next in
    /// order always has its place. A control sequence number held out of order
    /// ([`Engine::deliver_control`](crate::Engine::deliver_control)) counts as one entry
    /// and keeps room likewise; in order it takes none. Capped at [`MAX_ENTRIES`].
    pub max_messages: usize,
    /// Limit of posted receives (capped at [`MAX_ENTRIES`]).
    pub max_posted: usize,
    /// [`Pressure::High`] from this percentage of either budget on.
    pub high_water_percent: u8,
    /// The sequence number a source starts at when first seen by
    /// [`Engine::deliver`](crate::Engine::deliver).
    pub initial_seq: u32,
    /// Whether claimed messages ([`Engine::mprobe`](crate::Engine::mprobe), not yet
    /// received) count against the budgets (default `true`, MPI's view: an mprobed
    /// message still occupies the library's memory). `false` is for a caller that hands
    /// each claimed message to a matching engine of its own with its own budget (the
    /// `tagmatch` facade's in-process fast path claims every message that reaches it over
    /// the protocol): counting them in both would let claimed messages that match no
    /// receive yet fill this engine's budget and refuse, for ever, the message a receive
    /// waits for.
    pub claims_count: bool,
    /// Whether every unexpected message is linked into the wildcard lists ((comm, src),
    /// (comm, tag), (comm)) at arrival (`true`), instead of when a wildcard receive, probe
    /// or purge first needs a kind (`false`, the default; see the crate documentation).
    /// On first use, an exact-only workload pays for two lists per message instead of
    /// four and a message's arrival costs about half, but the first wildcard receive
    /// after the queue was empty links every queued message into its kind (O(queued)
    /// once). `true` spreads that work over the arrivals: for callers that post
    /// wildcard receives against deep unexpected queues and want no such step. `true`
    /// also keeps the (comm, src, tag) lists of the queued messages through runs of
    /// wildcard receives (see the crate documentation), so that no exact receive
    /// rebuilds them.
    pub eager_wildcard_lists: bool,
}

/// Hard ceiling on the posted receives and on the stored (unexpected and claimed) messages
/// of one engine: 2^23 − 1 = 8,388,607 each. Slab indices are 23-bit fields in the list
/// links and index buckets (so that a message's four list links take 24 bytes instead of
/// 32 and an index bucket 4 bytes instead of 8). [`Config::max_messages`] and
/// [`Config::max_posted`] are capped at it; at it, a post is refused with
/// [`PostRejected`] and an arrival that would be stored with
/// [`RejectReason::Backpressure`] (also when the admission of a source's next message
/// over [`Config::max_messages`] would pass it).
pub const MAX_ENTRIES: usize = (1 << 23) - 1;

impl Default for Config {
    fn default() -> Self {
        Config {
            reorder_window: 256,
            max_bytes: 256 << 20,
            max_messages: 1 << 22,
            max_posted: 1 << 22,
            high_water_percent: 75,
            initial_seq: 0,
            claims_count: true,
            eager_wildcard_lists: false,
        }
    }
}

impl Config {
    /// Sets [`Config::eager_wildcard_lists`].
    pub fn eager_wildcard_lists(mut self, on: bool) -> Self {
        self.eager_wildcard_lists = on;
        self
    }

    /// Sets [`Config::reorder_window`] (at most
    /// [`MAX_REORDER_WINDOW`](crate::MAX_REORDER_WINDOW); larger values are clamped).
    pub fn reorder_window(mut self, w: u32) -> Self {
        self.reorder_window = w;
        self
    }
    /// Sets [`Config::max_bytes`].
    pub fn max_bytes(mut self, b: usize) -> Self {
        self.max_bytes = b;
        self
    }
    /// Sets [`Config::max_messages`] (capped at [`MAX_ENTRIES`]).
    pub fn max_messages(mut self, n: usize) -> Self {
        self.max_messages = n;
        self
    }
    /// Sets [`Config::claims_count`].
    pub fn claims_count(mut self, on: bool) -> Self {
        self.claims_count = on;
        self
    }
    /// Sets [`Config::max_posted`] (capped at [`MAX_ENTRIES`]).
    pub fn max_posted(mut self, n: usize) -> Self {
        self.max_posted = n;
        self
    }
    /// Sets [`Config::initial_seq`].
    pub fn initial_seq(mut self, s: u32) -> Self {
        self.initial_seq = s;
        self
    }
    /// Sets [`Config::high_water_percent`] (capped at 100).
    pub fn high_water_percent(mut self, p: u8) -> Self {
        self.high_water_percent = p;
        self
    }
}

/// Counters (like MPICH PVARs / UCX stats): depths are current values, the rest are
/// totals since creation. (The fields every match updates come last: the engine keeps
/// them in the cache line of its exact index.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Posted receives waiting.
    pub posted_depth: usize,
    /// Unexpected messages waiting (not counting claimed ones).
    pub unexpected_depth: usize,
    /// Messages claimed by mprobe and not yet mrecv'd.
    pub claimed_depth: usize,
    /// Messages held in reorder buffers.
    pub reorder_depth: usize,
    /// Searches that found none.
    pub misses: u64,
    /// Receives cancelled (single, bulk or purge).
    pub cancelled: u64,
    /// Arrivals rejected for backpressure.
    pub rejected_backpressure: u64,
    /// Arrivals rejected for window overflow, staleness or duplication.
    pub rejected_sequence: u64,
    /// Payload bytes held (unexpected + claimed + reorder buffer): each message's held
    /// bytes as given to `Engine::deliver_held` / `Engine::arrive_held`, else its length.
    pub bytes_held: usize,
    /// Candidate entries inspected by searches (queue heads looked at, entries scanned).
    pub match_attempts: u64,
    /// Searches (post, arrival, probe, mprobe) that found a partner.
    pub hits: u64,
}

//! `tagmatch-engine`: MPI tag matching in constant time, wildcards included.
//!
//! A sans-IO, clock-free, deterministic matcher of posted receives against arriving
//! messages, generic over the caller's receive context `R` and message payload `M`
//! ([`Engine<R, M>`]).
//!
//! # Rules (MPI 4.0 §3.5, as UCX, ob1, MPICH and libfabric implement them)
//!
//! - An [`Envelope`] is (communicator, source, tag). A [`RecvSpec`] names a communicator
//!   and either a source or [`Source::Any`], and a tag, [`TagSel::Any`] or a verbs-style
//!   mask ([`TagSel::Masked`]: `tag & mask == want & mask`).
//! - A message matches the **earliest-posted** matching receive; a receive matches the
//!   **earliest-arrived** matching unexpected message.
//! - Messages from one source are matched in send order (non-overtaking), also when the
//!   transport reorders them: [`Engine::deliver`] takes a per-source `u32` sequence number
//!   (wrapping) and holds early arrivals in a bounded reorder buffer
//!   ([`Config::reorder_window`]); beyond the window, behind it, or duplicated is an
//!   explicit [`Rejected`] error handing the message back, never a silent drop. The
//!   sequence space is per **source** (`Envelope::src`, a peer id unique across
//!   communicators): the RDM protocol's per-peer `msg_id`, and stronger than MPI's
//!   per-(source, communicator) order. Ordered transports use [`Engine::arrive`].
//! - Unexpected, held and claimed messages count against a byte and an entry budget
//!   ([`Config::max_bytes`], [`Config::max_messages`]); [`Engine::pressure`] reports
//!   [`Pressure::High`] / [`Pressure::Full`], and a message that would exceed a budget is
//!   refused with [`RejectReason::Backpressure`] (the engine state is unchanged, the
//!   sequence number not consumed): the queue never grows without bound.
//!
//! # Operations and cost
//!
//! | operation | cost |
//! |---|---|
//! | [`Engine::post`] exact / ANY_TAG / ANY_SOURCE / both | O(1); amortised for a wildcard kind's first use since it was last forgotten (below) |
//! | [`Engine::post`] general mask | scan of the unexpected messages of (comm, src) or (comm) |
//! | [`Engine::arrive`], [`Engine::deliver`] | O(1), plus a scan of the communicator's general-mask receives if any are posted |
//! | [`Engine::probe`], [`Engine::mprobe`] | as `post` |
//! | [`Engine::mrecv`], [`Engine::cancel`] | O(1), generation-checked handles |
//! | [`Engine::cancel_where`] (bulk cancel by predicate) | O(posted) |
//! | [`Engine::purge_peer`] | O(posted) + O(communicators + that peer's messages); amortised O(queued) when its wildcard lists are not built |
//! | [`Engine::purge_comm`] | O(posted) + O(its messages) + O(peers × window) |
//!
//! How: every unexpected message sits on up to four FIFOs at once — keyed (comm, src, tag),
//! (comm, src), (comm, tag) and (comm) — so the earliest match for each receive kind is a
//! list head. The three wildcard kinds are built on first use: until a receive, probe or
//! purge needs one, a message is linked only into its (comm, src, tag) list and appended
//! to an arrival log, an array whose entries of messages since taken are left dead and
//! dropped once the log is half dead (an exact-only workload pays for one list, not
//! four); the first that needs a kind builds its lists from the arrival order (the log's
//! live entries), once, in O(log entries) — the queued messages plus dead entries not yet
//! dropped, fewer than twice the queue, their cost spread over the appends that made them —
//! after which arrivals are linked into it too; when the queue empties, a kind stays
//! kept if a receive, probe or purge needed it since the queue was last empty, and is
//! forgotten otherwise (a program that keeps posting wildcard receives has its arrivals
//! linked as they come; one that stopped is back to one list per message after one
//! period of the queue). The (comm) build also builds the other two kinds when the
//! (comm) index is much larger than the queue, so that no later build visits a large
//! index; for the same reason the (comm) kind is not kept alone (without both others)
//! across an empty queue over such an index: it is built again from the arrival log.
//! Once a kind is built the log itself is freed (while the message slab is in
//! proportion to the queue): its positions stay in the queued messages as arrival
//! stamps, later arrivals take the next stamp, and a later build of another kind puts
//! the log back from the stamps with a radix sort, O(queue) — so the first wildcard
//! receive on a deep queue adds its kind's list heads (4 bytes a key, the arrays
//! trimmed to their last key after the build) and gives back the log's 4 bytes a
//! message. Each
//! message is linked into each kind at most once, so, like an index doubling, the build
//! is amortised O(1) per message. The (comm, src, tag) lists are lazy the other way
//! round: kept from the start (most receives are exact), they are dropped after a run
//! of wildcard receives as long as a quarter of the queue (at least 32) that each took
//! a message alone on its hashed (comm, src, tag) list, with no exact receive, probe
//! or mprobe in between (such a receive otherwise pays that list's removal from the
//! hash index, at a random bucket); arrivals then skip them, and the next exact
//! receive, probe or mprobe builds them again from the arrival order, O(queue),
//! amortised over that run. Each rebuild doubles the run the next drop waits for (up
//! to 64×), so a program alternating the two pays rebuilds ever more rarely; an empty
//! queue has them back at no cost ([`Config::eager_wildcard_lists`] never drops them). Each posted receive sits on the one FIFO of its kind;
//! an arrival looks at (at most) four list heads and takes the lowest posting sequence
//! number. The lists are
//! intrusive, doubly linked through 23-bit slab indices (a message's eight links pack
//! into 24 bytes), and their heads live in open-addressing hash indexes of 4-byte buckets
//! (reference, distance from home, hash fingerprint) whose keys are read from the nodes,
//! except the (comm, src) and (comm, tag) heads of source ranks and tags below 2^16: like
//! ob1's per-peer arrays, those are slots of per-communicator arrays indexed by the rank
//! or tag, which grow only while they (or the hash index of their kind, as far as
//! growths were refused since the last one it allowed) hold at least one
//! list per 4 slots (larger keys stay in the hash index), and are allocated or grown only when the queued entries pay
//! for them (8 bytes per posted receive or stored message for each of the two kinds,
//! their directory included): until then, as at a small depth, those lists' heads are in
//! the hash index, and the array that the entries first pay for takes them over. The
//! (comm, src, tag) heads of communicator 0's tags below 2^16 are, by the same rules,
//! slots of per-(comm, src) arrays indexed by the tag (sources below 4,096, kept in the
//! arrays' directory only): an exact match there is two dependent loads and a store,
//! with no hash, probe or backward shift (101 instructions per `posted-exact` match at
//! every depth from 64 against 144–177 through the hash index, and ~0.001 mispredicted
//! branches against ~0.6). The lists of communicator 0's keys that no such array covers
//! (many sources with a few tags each, the shape of halo exchanges and of the
//! `many-peers` workload) go, by the same rules and under the same 8-byte budget, to
//! transposed per-(comm, tag) arrays indexed by the source (tags below 4,096, sources
//! below 2^16): `many-peers` at 65,536 peers matches in 6 ns instead of 33 through the
//! hash index. While the (comm, src, tag) hash index holds one list (a queue of one
//! key: a ping-pong's receive or message), the exact paths look first at the bucket
//! where it last started a list, checked by the node's key, so the match needs no hash
//! or probe either (140 instructions per `posted-exact` match at depth 1 instead of 185,
//! harness included). A posted receive and an unexpected message with the same key never coexist (one would
//! have matched the other), so each key has one list. Nothing is allocated per operation
//! once the slabs and indexes have grown to the working depth ([`Engine::reserve`]).
//!
//! # Limits
//!
//! At most [`MAX_ENTRIES`] (2^23 − 1) posted receives and as many stored messages
//! (unexpected and claimed): [`Config::max_posted`] and [`Config::max_messages`] are
//! capped at it, and at it a post is refused with [`PostRejected`] and an arrival with
//! [`RejectReason::Backpressure`] (typed errors, engine unchanged).
//!
//! # Handles
//!
//! [`RecvHandle`] (from a pending post) carries a slot generation and [`MsgHandle`] (from
//! an mprobe) a claim id: after the entry is matched, cancelled, received or purged, every
//! use of the handle returns [`EngineError::StaleHandle`], even when the slot holds a
//! newer entry (until the same slot has been reused 2^32 − 1 times, or 2^32 − 1 further
//! messages have been claimed).
//!
//! # For a HW/SW split
//!
//! Every posted receive gets a posting sequence number ([`PostedInfo::seq`],
//! [`Engine::next_post_seq`]); [`Engine::first_posted_match`] answers "which posted
//! receive would an arrival of this envelope take now" without changing anything, which
//! is the check a TM-SRQ model needs before letting hardware match a message against an
//! offloaded receive that is not the earliest candidate.
//!
//! # Example
//!
//! ```
//! use tagmatch_engine::{Arrived, Config, Engine, Envelope, Posted, RecvSpec, RejectReason};
//!
//! // Receive contexts are &str, payloads Vec<u8> (stored at their exact size).
//! let mut e: Engine<&str, Vec<u8>> = Engine::new(Config::default().reorder_window(8));
//!
//! // ANY_SOURCE receive on communicator 1, tag 7.
//! let Ok(Posted::Pending(h)) = e.post(RecvSpec::new(1, None, Some(7)), "r0") else {
//!     panic!("nothing has arrived yet")
//! };
//!
//! // Peer 3 sends seq 0 and seq 1; the transport delivers seq 1 first: it is held.
//! let mut events = Vec::new();
//! e.deliver(Envelope::new(1, 3, 7), 1, 2, b"m1".to_vec(), |a| events.push(a)).unwrap();
//! assert!(events.is_empty());
//! assert_eq!(e.counters().reorder_depth, 1);
//!
//! // seq 0 arrives: it takes the receive, then seq 1 becomes unexpected, in send order.
//! e.deliver(Envelope::new(1, 3, 7), 0, 2, b"m0".to_vec(), |a| events.push(a)).unwrap();
//! match &events[..] {
//!     [Arrived::Matched(m), Arrived::Unexpected(env)] => {
//!         assert_eq!((m.recv, m.msg.as_slice()), ("r0", &b"m0"[..]));
//!         assert_eq!(env.src, 3);
//!     }
//!     other => panic!("{other:?}"),
//! }
//!
//! // The handle of the matched receive is stale now.
//! assert!(e.cancel(h).is_err());
//!
//! // An exact receive takes the unexpected message.
//! let Ok(Posted::Matched(m)) = e.post(RecvSpec::exact(1, 3, 7), "r1") else { panic!() };
//! assert_eq!(m.msg, b"m1");
//!
//! // A sequence number too far ahead is an explicit error with the message handed back.
//! let r = e.deliver(Envelope::new(1, 3, 7), 100, 0, Vec::new(), |_| {}).unwrap_err();
//! assert_eq!(r.reason, RejectReason::WindowOverflow);
//! ```
//!
//! # Benchmarks
//!
//! [`workload`] holds the seven workloads of the project's benchmark spec; the criterion
//! bench `matching` and `tagmatch bench match` both run them. [`baseline`] re-implements
//! the matching schemes of UCX, Open MPI ob1 and MPICH's linear lists, so that `tagmatch
//! bench match --engine ucx-like|ob1-like|linear` measures them on the same workloads.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod baseline;
mod dense;
mod engine;
mod hash;
mod index;
mod list;
pub mod offload;
mod slab;
pub mod tm_srq;
mod types;
pub mod workload;

pub use engine::{Engine, MAX_REORDER_WINDOW};
pub use types::*;

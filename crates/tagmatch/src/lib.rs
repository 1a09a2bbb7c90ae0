//! `tagmatch`: tagged messaging, RMA and atomics over the EFA RDM protocol v4, with the
//! habits of UCX's `ucp_tag_*` and libfabric's `fi_tagged`.
//!
//! An [`Endpoint`] is built on a transport ([`Builder::mem`] in-process, [`Builder::udp`]
//! over UDP with EFA SRD semantics and software RDMA, `Builder::verbs` over an ibverbs
//! device with the `verbs` feature: RC queue pairs, so ConnectX/RoCE, not AWS EFA
//! hardware), hands out its [`Address`], and inserts peers ([`Endpoint::insert_peer`]).
//! Every operation returns a [`Request`]; completions are polled
//! ([`Endpoint::progress`] + [`Endpoint::poll_completion`]), waited on
//! ([`Endpoint::wait`]) or, with the `async` feature, awaited (`Endpoint::completion`).
//!
//! | operation | UCX | libfabric | here |
//! |---|---|---|---|
//! | tagged send / receive | `ucp_tag_send_nbx` / `ucp_tag_recv_nbx` | `fi_tsend` / `fi_trecv` | [`Endpoint::tsend`] / [`Endpoint::trecv`] |
//! | untagged | `ucp_am_*` / `ucp_stream_*` | `fi_send` / `fi_recv` | [`Endpoint::send`] / [`Endpoint::recv`] |
//! | wildcards | `tag_mask`, no ANY_SOURCE | `ignore`, `FI_ADDR_UNSPEC` | [`TagMatch`], [`ANY_TAG`], [`ANY_SOURCE`] |
//! | probe / mprobe | `ucp_tag_probe_nb`, `ucp_tag_msg_recv_nbx` | `FI_PEEK`, `FI_CLAIM` | [`Endpoint::tprobe`], [`Endpoint::tmprobe`], [`Endpoint::mrecv`] |
//! | cancel | `ucp_request_cancel` | `fi_cancel` | [`Endpoint::cancel`] |
//! | RMA | `ucp_put_nbx` / `ucp_get_nbx` | `fi_write` / `fi_read` | [`Endpoint::write`] / [`Endpoint::read`] |
//! | atomics | `ucp_atomic_op_nbx` | `fi_atomic` family | [`Endpoint::fetch_add_u64`], [`Endpoint::compare_swap_u64`], [`Endpoint::atomic`] |
//! | CQ data, delivery complete | — | `FI_REMOTE_CQ_DATA`, `FI_DELIVERY_COMPLETE` | [`SendOptions`] |
//! | memory | `ucp_mem_map` | `fi_mr_reg` | [`Endpoint::register`] |
//!
//! # Example: a tagged round trip in one process
//!
//! ```
//! use tagmatch::{Endpoint, MemFabric, ANY_SOURCE, ANY_TAG};
//!
//! # fn main() -> Result<(), tagmatch::Error> {
//! let fabric = MemFabric::new();
//! let mut a = Endpoint::builder().mem(&fabric).build()?;
//! let mut b = Endpoint::builder().mem(&fabric).build()?;
//! let b_at_a = a.insert_peer(&b.address())?;
//!
//! let recv = b.trecv(ANY_SOURCE, ANY_TAG, 64)?;
//! let send = a.tsend(b_at_a, 42, b"hello".to_vec())?;
//! // One thread drives both endpoints: wait on one, progress the other.
//! let got = b.wait_with(recv, &mut [&mut a])?;
//! assert_eq!((got.tag, &got.data[..]), (42, &b"hello"[..]));
//! a.wait_with(send, &mut [&mut b])?;
//! # Ok(()) }
//! ```
//!
//! # Example: awaiting (feature `async`)
//!
//! ```
//! # #[cfg(feature = "async")] {
//! use std::future::Future;
//! use std::sync::Arc;
//! use std::task::{Context, Poll, Wake, Waker};
//! use tagmatch::{Endpoint, MemFabric};
//!
//! struct Noop;
//! impl Wake for Noop { fn wake(self: Arc<Self>) {} }
//!
//! let fabric = MemFabric::new();
//! let mut a = Endpoint::builder().mem(&fabric).build().unwrap();
//! let mut b = Endpoint::builder().mem(&fabric).build().unwrap();
//! let peer = a.insert_peer(&b.address()).unwrap();
//! let r = b.recv(tagmatch::ANY_SOURCE, 8).unwrap();
//! let s = a.send(peer, vec![7u8; 8]).unwrap();
//! a.wait_with(s, &mut [&mut b]).unwrap();
//! // Any executor works; here a hand-written poll loop.
//! let waker = Waker::from(Arc::new(Noop));
//! let mut cx = Context::from_waker(&waker);
//! let mut fut = Box::pin(b.completion(r));
//! let c = loop {
//!     if let Poll::Ready(c) = fut.as_mut().poll(&mut cx) { break c.unwrap() }
//! };
//! assert_eq!(c.data, vec![7u8; 8]);
//! # }
//! ```
//!
//! A `CompletionFuture` borrows its endpoint mutably for as long as it lives (each poll
//! progresses the endpoint), so one endpoint has one pending future at a time: two of its
//! requests cannot be awaited together (`join!` of two futures of one endpoint does not
//! compile). Await them one after the other — a completion that arrives meanwhile stays
//! queued for its own request — or poll ([`Endpoint::progress`],
//! [`Endpoint::poll_completion`]) for many at once. Futures of different endpoints are
//! independent.
//!
//! # Buffers
//!
//! Send buffers move into the endpoint (`Vec<u8>`, no copy on the way to the device) and
//! received, read and fetched bytes come back owned in [`Completion::data`]. RMA targets
//! are registered once ([`Endpoint::register`]) and stay registered for any number of
//! operations; their [`RemoteKey`] travels to peers in a message. Registered regions are
//! also the registration cache for repeated large sends: [`Endpoint::tsend_region`] and
//! [`Endpoint::send_region`] send a range of a region using its existing registration, so
//! N long-read sends cost one registration; [`Endpoint::deregister`] is refused while such
//! sends are in flight.
//!
//! Without allocation per message: [`Endpoint::tinject`] / [`Endpoint::inject`] copy from a
//! borrowed slice and generate no completion (`fi_tinject`); [`Endpoint::trecv_into`] /
//! [`Endpoint::recv_into`] / [`Endpoint::mrecv_into`] receive into the caller's buffer,
//! handed back in [`Completion::data`] for reuse.
//!
//! # In-process fast path
//!
//! Endpoints on the same [`MemFabric`] (default [`Builder::fast_path`]) exchange tagged and
//! untagged messages through per-pair lock-free lanes into the receiver's matching engine:
//! no EFA packet, no region, and no allocation for payloads up to 32 bytes, with the same
//! matching, ordering, probe, cancel, truncation, CQ data, delivery-complete and budget
//! semantics as the protocol path. RMA and atomics take the protocol path.
//!
//! # Observability
//!
//! [`Endpoint::stats`] gathers counters of the facade, the protocol endpoint (packets,
//! drops by reason, handshakes, READ_NACKs, queue depths), the matching engine (depths,
//! match attempts, hits, misses), the HW/SW split (software only with these transports)
//! and the device (datagrams, retransmissions, duplicates, software RDMA).
//!
//! The crates report through [`tracing`](https://docs.rs/tracing): a `trace` event per
//! operation (`tsend`, `trecv`, `write`, …, with peer, tag and length); on the protocol
//! path, a `debug` event per send from `tagmatch_rdm` naming the subprotocol it chose
//! (`send`: `op`, `proto`, `len`) and a `complete` event per completion (`op`, `kind`,
//! `len`, `ok`) — `debug` with the subprotocol (`protocol`) for sends, RMA and atomics,
//! `trace` for receives; a `trace` span `wait` (field `request`) around everything a
//! [`Endpoint::wait`] or [`Endpoint::wait_with`] drives; `debug` and `warn` events of the
//! devices (a peer given up, a verbs connection failed). Messages on the in-process fast
//! path choose no subprotocol and report only the operation's event. With no subscriber
//! or the level off, an event costs one relaxed load. `tests/tracing_events.rs` checks
//! these events.
//!
//! # Logging
//!
//! Nothing is printed until the application installs a `tracing` subscriber. With
//! [`tracing-subscriber`](https://docs.rs/tracing-subscriber) (feature `fmt`), to print
//! each send's subprotocol and each completion:
//!
//! ```
//! use tagmatch::{Endpoint, MemFabric, ANY_SOURCE};
//!
//! tracing_subscriber::fmt()
//!     .with_max_level(tracing::Level::DEBUG) // TRACE adds every operation and the waits
//!     .init();
//! let fabric = MemFabric::new();
//! let mut a = Endpoint::builder().mem(&fabric).fast_path(false).build().unwrap();
//! let mut b = Endpoint::builder().mem(&fabric).fast_path(false).build().unwrap();
//! let peer = a.insert_peer(&b.address()).unwrap();
//! let r = b.recv(ANY_SOURCE, 8).unwrap();
//! let s = a.send(peer, b"logged".to_vec()).unwrap(); // DEBUG … send … proto=Eager len=6
//! b.wait_with(r, &mut [&mut a]).unwrap();
//! a.wait_with(s, &mut [&mut b]).unwrap(); // DEBUG … complete … kind=Send protocol=Eager
//! ```
//!
//! The events' targets are their modules (`tagmatch::endpoint`,
//! `tagmatch_rdm::endpoint::two_sided`, `tagmatch_transport::udp`, …), so a filter by
//! target (`tracing_subscriber::filter::Targets`, or `EnvFilter` of its `env-filter`
//! feature with `RUST_LOG=tagmatch=trace,tagmatch_rdm=debug`) picks layers.
#![forbid(unsafe_code)]

mod address;
mod builder;
mod endpoint;
mod error;
mod fast;
#[cfg(feature = "async")]
mod future;
mod inproc;
mod proto;
mod slot;
mod stats;

pub use address::Address;
pub use builder::{Builder, MemFabric, Transport};
pub use endpoint::{
    Completion, Endpoint, MemoryRegion, Message, Peer, ProbeInfo, RemoteKey, Request, SendOptions,
    Source, TagMatch, ANY_SOURCE, ANY_TAG,
};
pub use error::{Error, Result};
#[cfg(feature = "async")]
pub use future::CompletionFuture;
pub use slot::{RecvInfo, RecvSlot};
pub use stats::{Counters, DeviceStats, OffloadStats, Stats};
pub use tagmatch_rdm::{
    AtomicArgs, AtomicOp, Datatype, Features, MatchCounters, OpError, OpKind, Protocol, RemoteAddr,
    MAX_READ_SIZE,
};
pub use tagmatch_transport::mem::MemFaults;
/// Settings of the UDP device ([`Builder::udp_config`]: peer timeout, path MTU, windows).
pub use tagmatch_transport::udp::UdpConfig;
/// Settings and counters of the verbs device ([`Builder::verbs_config`], [`DeviceStats::Verbs`]).
#[cfg(feature = "verbs")]
pub use tagmatch_transport::verbs::{RdmConfig as VerbsConfig, RdmStats as VerbsStats};

/// The README's Rust examples, compiled and run as doctests so the front page cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

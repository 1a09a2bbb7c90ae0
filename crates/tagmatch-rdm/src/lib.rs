//! `tagmatch-rdm`: the EFA RDM communication protocol v4 endpoint, sans-IO.
//!
//! An [`Endpoint`] is a deterministic state machine with no IO and no clock, in the style of
//! quinn-proto. The application calls operations ([`Endpoint::tsend`], [`Endpoint::send`],
//! [`Endpoint::trecv`], [`Endpoint::recv`], [`Endpoint::write`], [`Endpoint::read`],
//! [`Endpoint::atomic_write`], [`Endpoint::atomic_fetch`], [`Endpoint::atomic_compare`],
//! [`Endpoint::cancel`]); the owner (a device driver, or the test fabric of the `testing`
//! feature) feeds it received packets ([`Endpoint::handle_packet`]) and device completions
//! ([`Endpoint::on_send_done`], [`Endpoint::on_rdma_done`], [`Endpoint::on_register_done`]),
//! and drains [`Endpoint::poll_transmit`] (packets ≤ MTU, RDMA reads/writes, registrations)
//! and [`Endpoint::poll_completion`].
//!
//! The device model is efa-rdm-protocol-v4 §1.1: "send/receive a message up to the EFA
//! device's Maximum Transmission Unit (MTU) size" with "no ordering guarantee" but reliable
//! delivery, optional RDMA read and write, and memory registration that can fail.
//!
//! Memory: application buffers are moved into the endpoint (`Vec<u8>`) and live in
//! endpoint-owned regions named by [`MemHandle`]; the device reads and writes them through
//! [`Endpoint::memory`] / [`Endpoint::memory_mut`] and resolves peer keys with
//! [`Endpoint::mem_by_key`]. Receives, reads and fetches hand the bytes back in their
//! [`Completion`]. [`Endpoint::tsend_from`] / [`Endpoint::send_from`] send a range of a
//! region registered with [`Endpoint::register_memory`] without registering per send.
//!
//! Counters: [`Endpoint::stats`] (packets, drops by reason) and
//! [`Endpoint::matching_stats`] (the matching engine's depths, attempts, hits, misses).
//!
//! Every packet is parsed with `tagmatch-wire`; tag matching and per-peer `msg_id`
//! reordering use `tagmatch-engine`. See `docs/protocol.md` for the subprotocol selection
//! and a sequence diagram of each subprotocol.
#![forbid(unsafe_code)]

pub mod atomic;
mod config;
mod endpoint;
mod genslab;
#[cfg(feature = "testing")]
pub mod testing;
mod types;

pub use atomic::{AtomicOp, Datatype};
pub use config::{Config, Features};
pub use endpoint::{Endpoint, PeerHandshake, PROTOCOL_MEMORY};
pub use types::*;

/// The matching engine's counters, as returned by [`Endpoint::matching_stats`].
pub use tagmatch_engine::Counters as MatchCounters;

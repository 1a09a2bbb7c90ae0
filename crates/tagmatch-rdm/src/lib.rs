//! `tagmatch-rdm`: the EFA RDM communication protocol v4 endpoint, sans-IO.
//!
//! An [`Endpoint`] is a deterministic state machine with no IO and no clock, in the style of
//! quinn-proto. The application calls operations ([`Endpoint::tsend`], [`Endpoint::send`],
//! [`Endpoint::trecv`], [`Endpoint::recv`], [`Endpoint::write`], [`Endpoint::read`],
//! [`Endpoint::atomic_write`], [`Endpoint::atomic_fetch`], [`Endpoint::atomic_compare`],
//! [`Endpoint::cancel`], [`Endpoint::abort`], [`Endpoint::remove_peer`]); the owner (a device driver, or the test fabric of the `testing`
//! feature) feeds it received packets ([`Endpoint::handle_packet`]) and device completions
//! ([`Endpoint::on_send_done`], [`Endpoint::on_rdma_done`], [`Endpoint::on_register_done`]),
//! and drains [`Endpoint::poll_transmit`] (packets ≤ MTU, RDMA reads/writes, registrations)
//! and [`Endpoint::poll_completion`].
//!
//! # Example: two endpoints, the owner as the device
//!
//! ```
//! use tagmatch_rdm::{Config, Endpoint, OpKind, SendOpts, SendOutcome, Transmit};
//! use tagmatch_wire::efa::RawAddr;
//!
//! let addr = |qpn| RawAddr { gid: [0; 16], qpn, qkey: 0x1234, next: 0 };
//! let mut eps = [1, 2].map(|qpn| Endpoint::new(Config::default(), addr(qpn)));
//! let b_at_a = eps[0].add_peer(addr(2));
//! let recv = eps[1].trecv(None, 42, 0, 64).unwrap(); // tag 42 exactly, from anyone
//! eps[0].tsend(b_at_a, 42, b"hello".to_vec(), SendOpts::default()).unwrap();
//! // A reliable device: deliver each packet to the other endpoint, report its send done.
//! // (An eager message needs no RDMA and no registration.)
//! let mut moved = true;
//! while moved {
//!     moved = false;
//!     for (from, to) in [(0, 1), (1, 0)] {
//!         while let Some(t) = eps[from].poll_transmit() {
//!             let Transmit::Send { token, bytes, .. } = t else { unreachable!("{t:?}") };
//!             let a = eps[from].addr();
//!             let src = eps[to].lookup_peer(&a.gid, a.qpn); // None: learnt from the packet
//!             eps[to].handle_packet(src, &bytes);
//!             eps[from].on_send_done(token, SendOutcome::Ok);
//!             moved = true;
//!         }
//!     }
//! }
//! let got = eps[1].poll_completion().unwrap();
//! assert_eq!((got.op, got.kind, got.tag), (recv, OpKind::Recv, 42));
//! assert_eq!(&got.data[..got.len as usize], b"hello");
//! assert_eq!(eps[0].poll_completion().unwrap().kind, OpKind::Send);
//! ```
//!
//! `tagmatch-transport`'s `Node` does this for real devices (RDMA and registrations
//! included), and the `testing` feature's `Fabric` with seeded reordering and faults.
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
pub use endpoint::{Endpoint, PeerHandshake, MAX_READ_SIZE, PROTOCOL_MEMORY};
pub use types::*;

/// The matching engine's counters, as returned by [`Endpoint::matching_stats`].
pub use tagmatch_engine::Counters as MatchCounters;

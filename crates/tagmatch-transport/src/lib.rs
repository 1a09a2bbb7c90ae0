//! `tagmatch-transport`: devices for the sans-IO EFA RDM endpoint of `tagmatch-rdm`, and
//! the [`Node`] driver that couples one endpoint with one device.
//!
//! - [`device`]: the device traits: [`RdmDevice`] (what the RDM endpoint needs from an
//!   EFA-like device: packets ≤ MTU with the source address, RDMA read/write against
//!   registered memory, registrations with keys, completions) and [`RcTmDevice`] (the RC /
//!   tag-matching SRQ path of the verbs device).
//! - [`mem`]: the in-memory device: many endpoints in one process, deterministic under a
//!   seed (reordering, delays, partial sends, registration failures).
//! - [`udp`]: the UDP device: EFA SRD semantics over UDP (reliable, unordered,
//!   MTU-bounded; acknowledgements, retransmission with backoff, duplicate suppression) and
//!   software RDMA ([`soft_rdma`]) with key and bounds checks; batched `sendmmsg`/`recvmmsg`.
//! - [`node`]: [`Node::progress`], completions out.
//!
//! `unsafe` is denied in the whole crate; only a future `verbs` module (real ibverbs
//! devices) may `#[allow(unsafe_code)]`, with a `// SAFETY:` comment on every block.
#![deny(unsafe_code)]

pub mod addr;
pub mod device;
pub mod mem;
pub mod node;
pub mod rng;
pub mod soft_rdma;
pub mod udp;
#[cfg(feature = "verbs")]
pub mod verbs;

pub use addr::UdpAddr;
pub use device::{DeviceEvent, MemoryAccess, RcTmDevice, RdmDevice};
pub use node::Node;

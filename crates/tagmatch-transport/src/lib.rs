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
//! # Driving an endpoint
//!
//! ```no_run
//! use std::time::Duration;
//! use tagmatch_rdm::{Config, SendOpts};
//! use tagmatch_transport::udp::{UdpConfig, UdpDevice};
//! use tagmatch_transport::{Node, UdpAddr};
//!
//! # fn main() -> std::io::Result<()> {
//! let dev = UdpDevice::bind(UdpConfig::new("127.0.0.1:4000".parse().unwrap()))?;
//! let mut node = Node::new(Config::default(), dev);
//! println!("listening on {}", node.device().udp_addr()); // udp://127.0.0.1:4000/0x…
//! let peer: UdpAddr = "udp://127.0.0.1:4001/0x1a2b3c4d".parse().unwrap();
//! let p = node.add_peer(peer.to_raw());
//! let op = node.endpoint_mut().tsend(p, 7, b"hello".to_vec(), SendOpts::default()).unwrap();
//! let done = node.wait(op, Duration::from_secs(5))?; // or: loop { node.progress(..)?; node.poll_completion() }
//! assert!(done.result.is_ok());
//! node.linger(Duration::from_millis(200), Duration::from_secs(5))?; // before exiting
//! # Ok(()) }
//! ```
//!
//! [`Node::progress`] blocks at most its timeout, and only when there is nothing to do at
//! once (the UDP device computes its poll timeout from the next retransmission deadline).
//! Operations are submitted through [`Node::endpoint_mut`]; peers are inserted with
//! [`Node::add_peer`]; completions come out of [`Node::poll_completion`] (or
//! [`Node::wait`] for one operation). [`Node::linger`] keeps answering acknowledgements for
//! a moment before a process exits or stops progressing a node.
//!
//! `unsafe` is denied in the whole crate; only a future `verbs` module (real ibverbs
//! devices) may `#[allow(unsafe_code)]`, with a `// SAFETY:` comment on every block.
#![deny(unsafe_code)]

pub mod addr;
pub mod bell;
pub mod device;
pub mod mem;
pub mod node;
pub mod rng;
pub mod soft_rdma;
pub mod udp;
#[cfg(feature = "verbs")]
pub mod verbs;
pub mod watch;

pub use addr::UdpAddr;
pub use device::{DeviceEvent, MemoryAccess, RcTmDevice, RdmDevice};
pub use node::Node;

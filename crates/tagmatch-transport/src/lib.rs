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
//! Two nodes over loopback UDP (port 0: the OS picks free ports), driven by one thread:
//!
//! ```
//! use std::time::{Duration, Instant};
//! use tagmatch_rdm::{Config, OpKind, SendOpts};
//! use tagmatch_transport::udp::{UdpConfig, UdpDevice};
//! use tagmatch_transport::{Node, UdpAddr};
//!
//! # fn main() -> std::io::Result<()> {
//! let node = || -> std::io::Result<_> {
//!     let dev = UdpDevice::bind(UdpConfig::new("127.0.0.1:0".parse().unwrap()))?;
//!     Ok(Node::new(Config::default(), dev))
//! };
//! let (mut a, mut b) = (node()?, node()?);
//! let b_addr = b.device().udp_addr().to_string(); // udp://127.0.0.1:PORT/0xCONNID: for peers
//! let b_at_a = a.add_peer(b_addr.parse::<UdpAddr>().unwrap().to_raw());
//! let recv = b.endpoint_mut().trecv(None, 7, 0, 64).unwrap();
//! let send = a.endpoint_mut().tsend(b_at_a, 7, b"hello".to_vec(), SendOpts::default()).unwrap();
//! let (mut done, start) = (Vec::new(), Instant::now());
//! while done.len() < 2 {
//!     assert!(start.elapsed() < Duration::from_secs(10), "no completion");
//!     // Each `progress` blocks at most its timeout; a process with one node would
//!     // `node.wait(op, limit)` instead.
//!     a.progress(Some(Duration::ZERO))?;
//!     b.progress(Some(Duration::from_millis(1)))?;
//!     done.extend(a.poll_completion().into_iter().chain(b.poll_completion()));
//! }
//! let got = done.iter().find(|c| c.op == recv).unwrap();
//! assert_eq!((got.kind, &got.data[..got.len as usize]), (OpKind::Recv, &b"hello"[..]));
//! assert!(done.iter().any(|c| c.op == send && c.result.is_ok()));
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
//! `unsafe` is denied in the whole crate; only the `verbs` module (real ibverbs devices,
//! feature `verbs`) allows it, with a `// SAFETY:` comment on every block.
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

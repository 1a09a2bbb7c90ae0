//! Wire formats for tagmatch: rdma-core tag-matching headers and every EFA RDM protocol v4
//! packet, as zero-copy checked views and owned representations.
//!
//! - [`tm`]: `struct ibv_tmh` / `struct ibv_rvh` (big-endian) and the eager, rendezvous,
//!   FIN and NO_TAG message forms.
//! - [`efa`]: the EFA RDM v4 base header, the raw address, `efa_rma_iov`, and every packet
//!   type of efa-rdm-protocol-v4 §1.3 with the C layouts libfabric puts on the wire
//!   (little-endian; where the protocol document and `efa_rdm_protocol.h` disagree, the C
//!   layout wins — see `docs/conformance.md`).
//!
//! Parsing never panics and never overflows: every input gets either a checked view or a
//! typed [`Error`] — a [`LengthError`] naming the part that does not fit and the bytes it
//! needs, or a [`ContentError`] naming what is invalid. Emitting writes into a caller
//! buffer, allocation-free, padding zeroed. The `alloc` feature adds conveniences that
//! allocate (`Repr::to_vec`).
//!
//! ```
//! use tagmatch_wire::efa::{Field, Packet, PacketType, Repr};
//!
//! // Build an EAGER_TAGRTM with CQ data and a connid header, then read it back.
//! let mut repr = Repr::new(PacketType::EagerTagRtm)
//!     .with(Field::MsgId, 1)
//!     .with(Field::Tag, 0x1122334455667788);
//! repr.cq_data = Some(0xCAFEBABE12345678);
//! repr.connid = Some(0xA1B2C3D4);
//! repr.payload = b"hello";
//! let mut buf = [0u8; 64];
//! let n = repr.emit(&mut buf).unwrap();
//! assert_eq!(n, repr.buffer_len());
//! let pkt = Packet::new_checked(&buf[..n]).unwrap();
//! assert_eq!(pkt.header_len(), 28);
//! assert_eq!(pkt.connid(), Some(0xA1B2C3D4));
//! assert_eq!(Repr::parse(&pkt), repr);
//! ```
// no_std; the unit tests use std (and share the integration tests' vector module).
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

mod bytes;
pub mod efa;
mod error;
pub mod tm;

pub use error::{ContentError, Error, LengthError, Part, Result};

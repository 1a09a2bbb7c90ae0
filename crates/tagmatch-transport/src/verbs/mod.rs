//! Real ibverbs devices (feature `verbs`): a safe layer over `tagmatch-verbs-sys` and the
//! RC / tag-matching transport on top of it.
//!
//! - [`device`]: device discovery and capabilities (`ibv_query_device_ex`, `tm_caps`),
//!   [`Context`], [`Pd`], memory registration of caller buffers ([`Mr`]) or owned buffers
//!   ([`OwnedMr`]), basic and extended CQs ([`Cq`]), basic and tag-matching SRQs ([`Srq`]),
//!   RC QPs attached to an SRQ ([`Qp`]). Children hold reference-counted handles of their
//!   parents, so destruction always runs QP → SRQ → CQ → MR → PD → context.
//! - [`conn`]: the TCP side channel that exchanges (rank, QP number, PSN, LID, GID).
//! - [`rdm`]: [`VerbsRdmDevice`], the EFA RDM endpoint's device over verbs (UD for
//!   addressing and connection set-up, RC SENDs through a shared receive queue for the
//!   packets), which the `tagmatch` facade uses for `Builder::verbs`.
//! - [`transport`]: [`TaggedTransport`]: tagged receives posted through the engine's
//!   offload driver (`tagmatch_engine::offload::Driver`, over the verbs TM-SRQ as its
//!   `TmBackend` when the device reports `max_num_tags > 0`, else the software engine over
//!   a plain SRQ), eager (`TMH | payload`) and rendezvous (`TMH | RVH`, the receiver
//!   RDMA-reads and answers with a FIN) sends, cancel, and `progress()`.
//!
//! The rest of the crate denies `unsafe`; this module is the FFI boundary and allows it.
//! Every `unsafe` block carries a `// SAFETY:` comment.
// FFI to libibverbs: the only place of this crate allowed to use `unsafe`.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod conn;
pub mod device;
pub mod rdm;
pub mod transport;

pub use conn::ConnInfo;
pub use device::{
    device_names, Access, Ah, CompChannel, Context, Cq, DeviceCaps, Mr, OwnedMr, Pd, Qp, QpCaps,
    QpEndpoint, RemoteBuf, Sge, Srq, SrqKind, TmCapsInfo, Wc,
};
pub use rdm::{RdmConfig, RdmStats, VerbsRdmDevice};
pub use transport::{
    Completion, Mode, PeerId, RecvError, RecvId, SendId, TaggedTransport, TmPolicy, TransportConfig,
};

/// Errors of the verbs layer.
#[derive(Debug)]
pub enum Error {
    /// A verbs call failed.
    Verbs {
        /// The call.
        call: &'static str,
        /// Its errno.
        err: std::io::Error,
    },
    /// No (matching) RDMA device.
    NoDevice(String),
    /// An offset/length outside a registered region.
    OutOfBounds {
        /// Offset asked for.
        offset: usize,
        /// Length asked for.
        len: usize,
        /// Region length.
        region: usize,
    },
    /// An argument the transport cannot carry (envelope field too wide, message too long).
    Invalid(String),
    /// No free send slot or send-queue entry right now: call `progress` and retry.
    Busy,
    /// Unknown peer rank.
    UnknownPeer(u32),
    /// The side channel or the peer broke the protocol.
    Protocol(String),
    /// Side-channel IO.
    Io(std::io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Verbs { call, err } => write!(f, "{call}: {err}"),
            Error::NoDevice(why) => write!(f, "no RDMA device: {why}"),
            Error::OutOfBounds {
                offset,
                len,
                region,
            } => write!(
                f,
                "{len} bytes at offset {offset} are outside the {region}-byte region"
            ),
            Error::Invalid(why) => write!(f, "invalid: {why}"),
            Error::Busy => write!(f, "no free send resource; progress and retry"),
            Error::UnknownPeer(r) => write!(f, "no connection to rank {r}"),
            Error::Protocol(why) => write!(f, "protocol: {why}"),
            Error::Io(e) => write!(f, "side channel: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// `Result` of the verbs layer.
pub type Result<T> = std::result::Result<T, Error>;

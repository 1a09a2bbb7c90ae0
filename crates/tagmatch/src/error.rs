//! The facade's error type: every failure names what was wrong.

use std::fmt;
use std::io;

use tagmatch_rdm::atomic::AtomicError;
use tagmatch_rdm::{CallError, OpError, OpKind};

use crate::{Peer, Request};

/// Everything that can go wrong in the facade. Bad input never panics: it comes back as
/// one of these, naming the argument or the state that was wrong.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A builder setting is out of range.
    Config {
        /// The setting (`"udp path_mtu"`, `"max_medium_size"`, …).
        setting: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// The builder was not told which transport to use.
    NoTransport,
    /// The verbs device could not be opened or set up (no such device, no RDMA support,
    /// resources refused).
    Verbs {
        /// The device name asked for (empty: the first device).
        device: String,
        /// What failed, as the verbs layer reported it.
        reason: String,
    },
    /// An address string did not parse.
    InvalidAddress {
        /// The string.
        input: String,
        /// Why.
        reason: String,
    },
    /// An address of one transport was handed to an endpoint of another.
    WrongTransport {
        /// The address.
        address: String,
        /// The endpoint's transport.
        endpoint: &'static str,
    },
    /// No such peer in this endpoint's address vector.
    UnknownPeer(Peer),
    /// No such request, or it can no longer be cancelled / waited for.
    UnknownRequest(Request),
    /// A claimed message (from `mprobe`) is no longer valid.
    StaleMessage,
    /// A receive slot of another endpoint.
    UnknownSlot,
    /// A receive slot posted again before its receive completed.
    SlotPosted,
    /// No such memory region (deregistered, or from another endpoint).
    UnknownRegion,
    /// Too many operations in flight.
    TooManyOps,
    /// The matching engine's receive limit is reached.
    TooManyReceives,
    /// Invalid atomic arguments.
    Atomic(AtomicError),
    /// An atomic operand does not fit in one packet.
    AtomicTooLarge {
        /// Operand bytes.
        len: usize,
    },
    /// A read longer than a peer serves ([`crate::MAX_READ_SIZE`]): the peer
    /// would drop the request without an answer (EFA RDM v4 has none), so it is refused
    /// before anything is sent.
    ReadTooLarge {
        /// Bytes asked for.
        len: u64,
        /// The largest read a peer serves.
        max: u64,
    },
    /// A remote range of a read, write or atomic runs past the end of the 64-bit address
    /// space: no peer region can hold it, so it is refused before anything is sent.
    RemoteRange {
        /// Remote address of the first byte.
        addr: u64,
        /// Length of the range.
        len: u64,
    },
    /// A receive or read buffer of this length cannot be allocated (the receive or read
    /// allocates it when posted, off the in-process fast path): refused instead of
    /// aborting the process. Receive into a buffer of your own
    /// ([`crate::Endpoint::trecv_into`]) or a registered region for other sizes.
    BufferTooLarge {
        /// The length asked for.
        len: usize,
    },
    /// A memory registration failed.
    RegistrationFailed,
    /// A byte range does not lie inside the memory region.
    RegionRange {
        /// Start of the range.
        start: usize,
        /// End of the range (exclusive).
        end: usize,
        /// The region's length.
        len: usize,
    },
    /// [`crate::Endpoint::deregister`] was refused: sends from the region
    /// ([`crate::Endpoint::tsend_region`]) or receives into it
    /// ([`crate::Endpoint::trecv_region`]) are still in flight. The region comes back
    /// unchanged (still registered); deregister it after those operations complete.
    RegionInUse {
        /// The region, still registered.
        region: crate::MemoryRegion,
        /// Sends from it and receives into it still in flight.
        sends: u32,
    },
    /// [`crate::Endpoint::deregister`] was given a region of another endpoint: it comes
    /// back unchanged (still registered there); deregister it on its own endpoint.
    ForeignRegion {
        /// The region, still registered with its endpoint.
        region: crate::MemoryRegion,
    },
    /// [`crate::Endpoint::mrecv_region`] was refused before the claim was used: the
    /// message comes back, still claimed (no other receive can take it); receive it with
    /// another call.
    ClaimKept {
        /// The claimed message, still to be received.
        message: crate::Message,
        /// Why the receive was refused.
        error: Box<Error>,
    },
    /// The request did not complete within the wait limit.
    Timeout {
        /// The request.
        request: Request,
        /// The limit, in milliseconds.
        limit_ms: u128,
    },
    /// The operation completed with an error.
    Failed {
        /// The request.
        request: Request,
        /// What it was.
        kind: OpKind,
        /// The error.
        error: OpError,
    },
    /// The device's IO failed.
    Io {
        /// What the facade was doing.
        context: &'static str,
        /// The error.
        source: io::Error,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config { setting, reason } => write!(f, "invalid {setting}: {reason}"),
            Error::NoTransport => write!(
                f,
                "no transport chosen: call Builder::mem, Builder::udp or Builder::transport"
            ),
            // The empty name asks for the first device: say so rather than quote "".
            Error::Verbs { device, reason } if device.is_empty() => {
                write!(f, "the first verbs device: {reason}")
            }
            Error::Verbs { device, reason } => {
                write!(f, "verbs device {device:?}: {reason}")
            }
            Error::InvalidAddress { input, reason } => {
                write!(f, "invalid address {input:?}: {reason}")
            }
            Error::WrongTransport { address, endpoint } => {
                write!(f, "address {address} is not a {endpoint} address")
            }
            Error::UnknownPeer(p) => write!(
                f,
                "unknown peer {} (not inserted into this endpoint)",
                p.index()
            ),
            Error::UnknownRequest(r) => write!(f, "unknown or finished request {}", r.id()),
            Error::StaleMessage => write!(f, "claimed message is no longer valid"),
            Error::UnknownSlot => write!(f, "receive slot of another endpoint"),
            Error::SlotPosted => write!(f, "receive slot posted again before its receive completed"),
            Error::UnknownRegion => write!(f, "unknown memory region"),
            Error::TooManyOps => write!(f, "too many operations in flight"),
            Error::TooManyReceives => write!(f, "too many posted receives"),
            Error::Atomic(e) => write!(f, "invalid atomic arguments: {}", atomic_text(e)),
            Error::AtomicTooLarge { len } => {
                write!(
                    f,
                    "atomic operand of {len} bytes does not fit in one packet"
                )
            }
            Error::ReadTooLarge { len, max } => write!(
                f,
                "a read of {len} bytes is longer than a peer serves ({max} bytes): it would never be answered"
            ),
            Error::RemoteRange { addr, len } => write!(
                f,
                "remote range of {len} bytes at {addr:#x} runs past the end of the address space"
            ),
            Error::BufferTooLarge { len } => {
                write!(f, "a buffer of {len} bytes cannot be allocated")
            }
            Error::RegistrationFailed => write!(f, "memory registration failed"),
            Error::RegionRange { start, end, len } => write!(
                f,
                "range {start}..{end} is not inside the memory region of {len} bytes"
            ),
            Error::RegionInUse { sends, .. } => write!(
                f,
                "memory region still has {sends} operation(s) in flight (sends from it, receives into it): deregister it after they complete"
            ),
            Error::ForeignRegion { .. } => write!(
                f,
                "memory region of another endpoint: deregister it on the endpoint that registered it"
            ),
            Error::ClaimKept { error, .. } => write!(
                f,
                "{error} (the claimed message is kept: receive it with another call)"
            ),
            Error::Timeout { request, limit_ms } => write!(
                f,
                "request {} did not complete within {limit_ms} ms",
                request.id()
            ),
            Error::Failed {
                request,
                kind,
                error,
            } => write!(
                f,
                "{kind:?} request {} failed: {}",
                request.id(),
                op_error_text(error)
            ),
            Error::Io { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

/// What an operation's error means, in words (the variant's name in parentheses, so logs
/// can still be searched for it).
fn op_error_text(e: &OpError) -> String {
    match e {
        OpError::Truncated { msg_len, buf_len } => format!(
            "truncated (Truncated): the message has {msg_len} bytes, the receive buffer {buf_len}"
        ),
        OpError::Canceled => "cancelled (Canceled)".into(),
        OpError::DeliveryCompleteUnsupported => "delivery complete asked of a peer that does \
            not support it (DeliveryCompleteUnsupported)"
            .into(),
        OpError::SendFailed => {
            "the peer did not take it: unreachable, gone, or not answering (SendFailed)".into()
        }
        OpError::RdmaFailed => "an RDMA operation or registration failed and no fallback \
            was possible (RdmaFailed)"
            .into(),
        OpError::Atomic(a) => format!("the target could not apply it: {}", atomic_text(a)),
        OpError::Aborted => "aborted (Aborted): ended by abort or remove_peer before it \
            completed"
            .into(),
    }
}

/// [`AtomicError`] in words.
fn atomic_text(e: &AtomicError) -> String {
    match e {
        AtomicError::Datatype(d) => format!("unknown or unsupported datatype {d}"),
        AtomicError::Op(o) => format!("unknown operation {o}"),
        AtomicError::OpNotValidForType => "the operation is not defined on the datatype".into(),
        AtomicError::Length => {
            "operand lengths are not a multiple of the element size or differ from the target"
                .into()
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Error {
    pub(crate) fn io(context: &'static str) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Io { context, source }
    }

    /// Maps an RDM call error; `peer`/`request` name the arguments of the call.
    pub(crate) fn call(e: CallError, peer: Option<Peer>, request: Option<Request>) -> Error {
        match e {
            CallError::UnknownPeer => match peer {
                Some(p) => Error::UnknownPeer(p),
                None => Error::UnknownPeer(Peer {
                    id: tagmatch_rdm::PeerId(u32::MAX),
                    ep: 0,
                }),
            },
            CallError::UnknownOp => match request {
                Some(r) => Error::UnknownRequest(r),
                None => Error::StaleMessage,
            },
            CallError::UnknownMem => Error::UnknownRegion,
            CallError::TooManyOps => Error::TooManyOps,
            CallError::TooManyReceives => Error::TooManyReceives,
            CallError::Atomic(a) => Error::Atomic(a),
            CallError::AtomicTooLarge => Error::AtomicTooLarge { len: 0 },
            // The facade checks ranges before calling and `deregister` maps `MemInUse`
            // itself (with the region); neither reaches here in practice.
            CallError::MemRange => Error::RegionRange {
                start: 0,
                end: 0,
                len: 0,
            },
            CallError::MemInUse => Error::UnknownRegion,
            CallError::ReadTooLarge { len, max } => Error::ReadTooLarge { len, max },
            CallError::RemoteRange { addr, len } => Error::RemoteRange { addr, len },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation error reads as words and still names its variant.
    #[test]
    fn failed_operations_display_in_words_with_the_variant_name() {
        let req = Request {
            op: tagmatch_rdm::OpId(7),
            ep: 0,
        };
        let cases = [
            (
                OpError::Truncated {
                    msg_len: 10,
                    buf_len: 4,
                },
                "the message has 10 bytes, the receive buffer 4",
                "(Truncated)",
            ),
            (OpError::Canceled, "cancelled", "(Canceled)"),
            (
                OpError::DeliveryCompleteUnsupported,
                "does not support it",
                "(DeliveryCompleteUnsupported)",
            ),
            (
                OpError::SendFailed,
                "the peer did not take it",
                "(SendFailed)",
            ),
            (OpError::RdmaFailed, "no fallback", "(RdmaFailed)"),
            (
                OpError::Aborted,
                "ended by abort or remove_peer",
                "(Aborted)",
            ),
            (
                OpError::Atomic(AtomicError::OpNotValidForType),
                "could not apply it: the operation is not defined on the datatype",
                "",
            ),
        ];
        for (error, words, name) in cases {
            let e = Error::Failed {
                request: req,
                kind: OpKind::Send,
                error,
            };
            let s = e.to_string();
            assert!(s.starts_with("Send request 7 failed: "), "{s}");
            assert!(s.contains(words) && s.contains(name), "{s}");
        }
        let s = Error::call(
            CallError::ReadTooLarge {
                len: (1 << 32) + 1,
                max: 1 << 32,
            },
            None,
            None,
        )
        .to_string();
        assert_eq!(
            s,
            "a read of 4294967297 bytes is longer than a peer serves (4294967296 bytes): it would never be answered"
        );
        let s = Error::call(
            CallError::RemoteRange {
                addr: u64::MAX - 3,
                len: 8,
            },
            None,
            None,
        )
        .to_string();
        assert_eq!(
            s,
            "remote range of 8 bytes at 0xfffffffffffffffc runs past the end of the address space"
        );
        let s = Error::Atomic(AtomicError::Datatype(99)).to_string();
        assert_eq!(
            s,
            "invalid atomic arguments: unknown or unsupported datatype 99"
        );
    }

    /// A verbs error names the device asked for, or says "the first" for the empty name
    /// (which asks for the first device) instead of quoting "".
    #[test]
    fn verbs_errors_name_the_device_or_the_first() {
        let e = |device: &str| Error::Verbs {
            device: device.into(),
            reason: "no RDMA devices".into(),
        };
        assert_eq!(e("").to_string(), "the first verbs device: no RDMA devices");
        assert_eq!(
            e("mlx5_0").to_string(),
            "verbs device \"mlx5_0\": no RDMA devices"
        );
    }
}

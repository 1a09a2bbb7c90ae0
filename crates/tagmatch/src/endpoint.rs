//! [`Endpoint`]: operations, requests, completions.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tagmatch_rdm::{
    AtomicArgs, AtomicOp, CallError, Claim, Config, Datatype, MemHandle, OpError, OpId, OpKind,
    PeerId, Protocol, RemoteAddr, SendOpts, Transmit,
};
use tagmatch_transport::device::{DeviceEvent, MemoryAccess, RdmDevice};
use tagmatch_transport::mem::MemDevice;
use tagmatch_transport::udp::UdpDevice;
use tagmatch_transport::Node;
use tagmatch_wire::efa::RawAddr;
use tracing::{debug, trace};

use crate::stats::{Counters, DeviceStats, OffloadStats, Stats};
use crate::{Address, Builder, Error, Result};

/// How long [`Endpoint::wait`] keeps looking after its first 64 rounds, yielding the core
/// at each round, before it sleeps: long enough for a peer thread's answer to a
/// ping-pong to arrive without a wake-up (20–23 µs per in-process round trip when the
/// waiter slept after 64 rounds, 0.42–0.50 µs with this; `docs/benchmarks.md`), short
/// enough that an idle wait costs nothing noticeable. Yielding rather than spinning
/// leaves the core to a peer that shares it.
const WAIT_YIELD_SPIN: Duration = Duration::from_micros(20);

/// Receive and read buffers at least this long are tried before the protocol endpoint
/// allocates them (zeroed, at their full length, when the operation is posted): a length
/// no allocation can honour is refused ([`Error::BufferTooLarge`]) instead of aborting
/// the process. (Shorter ones fail only when the whole system runs out of memory.)
const CHECKED_ALLOC: usize = 1 << 16;

/// The device under an endpoint (one per endpoint: the size difference does not matter).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Device {
    Mem(MemDevice),
    Udp(Box<UdpDevice>),
    #[cfg(feature = "verbs")]
    Verbs(Box<tagmatch_transport::verbs::VerbsRdmDevice>),
}

/// `$body` with `$d` bound to whichever device `$dev` holds (every variant implements
/// [`RdmDevice`]).
macro_rules! with_device {
    ($dev:expr, $d:ident => $body:expr) => {
        match $dev {
            Device::Mem($d) => $body,
            Device::Udp($d) => $body,
            #[cfg(feature = "verbs")]
            Device::Verbs($d) => $body,
        }
    };
}

impl RdmDevice for Device {
    fn addr(&self) -> RawAddr {
        with_device!(self, d => d.addr())
    }

    fn mtu(&self) -> usize {
        with_device!(self, d => d.mtu())
    }

    fn submit(&mut self, t: Transmit, mem: &mut dyn MemoryAccess) {
        with_device!(self, d => d.submit(t, mem))
    }

    fn progress(
        &mut self,
        mem: &mut dyn MemoryAccess,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        with_device!(self, d => d.progress(mem, timeout))
    }

    fn flush_tx(&mut self, mem: &mut dyn MemoryAccess) -> io::Result<()> {
        with_device!(self, d => d.flush_tx(mem))
    }

    fn send_soon(&mut self, mem: &mut dyn MemoryAccess) -> io::Result<()> {
        with_device!(self, d => d.send_soon(mem))
    }

    #[inline]
    fn poll_event(&mut self) -> Option<DeviceEvent> {
        with_device!(self, d => d.poll_event())
    }

    #[inline]
    fn has_events(&self) -> bool {
        with_device!(self, d => d.has_events())
    }

    fn is_idle(&self) -> bool {
        with_device!(self, d => d.is_idle())
    }

    fn is_idle_apart_from_refused(&self) -> bool {
        with_device!(self, d => d.is_idle_apart_from_refused())
    }

    fn rx_count(&self) -> u64 {
        with_device!(self, d => d.rx_count())
    }

    fn refuse(&mut self, src: RawAddr, bytes: Vec<u8>) {
        with_device!(self, d => d.refuse(src, bytes))
    }

    fn retry_refused(&mut self) {
        with_device!(self, d => d.retry_refused())
    }
}

/// A peer in the endpoint's address vector (`fi_addr_t`, `ucp_ep_h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Peer {
    pub(crate) id: PeerId,
    /// The endpoint that inserted it (a peer of another endpoint is refused).
    pub(crate) ep: u32,
}

impl Peer {
    /// Index in the address vector.
    pub fn index(&self) -> u32 {
        self.id.0
    }
}

/// A submitted operation; its [`Completion`] names it. `Copy`, cheap, and only meaningful
/// for the endpoint that returned it.
#[must_use = "a request completes later: wait for it or poll its completion"]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    pub(crate) op: OpId,
    /// The endpoint that issued it (another endpoint's request is refused).
    pub(crate) ep: u32,
}

impl Request {
    /// The request's number (unique per endpoint).
    pub fn id(&self) -> u64 {
        self.op.0
    }
}

/// Which senders a receive or probe accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// Any peer (`MPI_ANY_SOURCE`, `FI_ADDR_UNSPEC`).
    Any,
    /// One peer.
    Peer(Peer),
}

/// Any sender.
pub const ANY_SOURCE: Source = Source::Any;

impl From<Peer> for Source {
    fn from(p: Peer) -> Source {
        Source::Peer(p)
    }
}

/// Which tags a receive or probe accepts: a tag and the bits of it that must match
/// (`ucp_tag_recv_nbx`'s `tag_mask`; libfabric's `ignore` is its complement).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TagMatch {
    /// The wanted tag.
    pub tag: u64,
    /// Bits that must equal `tag`'s (all ones: exact; zero: any tag).
    pub mask: u64,
}

/// Any tag.
pub const ANY_TAG: TagMatch = TagMatch { tag: 0, mask: 0 };

impl TagMatch {
    /// Exactly `tag`.
    pub const fn exact(tag: u64) -> TagMatch {
        TagMatch {
            tag,
            mask: u64::MAX,
        }
    }

    /// Tags `t` with `t & mask == tag & mask` (UCX convention).
    pub const fn masked(tag: u64, mask: u64) -> TagMatch {
        TagMatch { tag, mask }
    }

    /// Tags `t` with `t & !ignore == tag & !ignore` (libfabric convention).
    pub const fn ignoring(tag: u64, ignore: u64) -> TagMatch {
        TagMatch { tag, mask: !ignore }
    }

    /// Whether `t` is accepted.
    pub const fn matches(&self, t: u64) -> bool {
        t & self.mask == self.tag & self.mask
    }

    fn ignore(&self) -> u64 {
        !self.mask
    }
}

impl From<u64> for TagMatch {
    fn from(tag: u64) -> TagMatch {
        TagMatch::exact(tag)
    }
}

/// Options of a send or write: remote CQ data (`fi_senddata`) and delivery complete.
pub type SendOptions = SendOpts;

/// A finished operation.
///
/// 80 bytes: the outcome is a one-byte code (plus the buffer length of a truncated
/// receive or the value of an atomic's error), the source a peer index and the CQ data a
/// word, each with a presence bit, instead of `Result<(), OpError>` (24 bytes),
/// `Option<Peer>` (12) and `Option<u64>` (16): completions are built, queued and moved
/// once or twice per message. Read them with [`Completion::status`],
/// [`Completion::is_ok`], [`Completion::source`] and [`Completion::cq_data`].
///
/// Two completions are equal when everything they show is (see the `PartialEq` impl).
#[derive(Clone)]
pub struct Completion {
    /// The request (for [`OpKind::RemoteWrite`] on the target, a fresh one).
    pub request: Request,
    /// Received, read or fetched bytes (empty for sends and writes): owned by the caller;
    /// a receive's are cut to the message length.
    pub data: Vec<u8>,
    /// Message length (receives: the sender's length, even when truncated). A truncated
    /// receive's [`Completion::status`] reports this field as
    /// [`OpError::Truncated::msg_len`]: read the status before changing it.
    pub len: u64,
    /// Tag of a tagged receive.
    pub tag: u64,
    /// Remote CQ data (meaningful when `flags` has [`HAS_CQ`]).
    cq: u64,
    /// [`OpError::Truncated`]'s buffer length, or the value carried by an atomic error.
    aux: u64,
    /// The sender's peer index (meaningful when `flags` has [`HAS_SRC`]).
    src: u32,
    /// What it was.
    pub kind: OpKind,
    /// The subprotocol the operation used, when known (`None` for messages of the
    /// in-process fast path, which use none).
    pub protocol: Option<Protocol>,
    code: Code,
    flags: u8,
}

/// [`Completion::flags`]: a source is known.
const HAS_SRC: u8 = 1;
/// [`Completion::flags`]: the completion carries remote CQ data.
const HAS_CQ: u8 = 2;

/// A completion's outcome in one byte (an [`OpError`] without its fields; those live in
/// [`Completion::aux`] and [`Completion::len`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Code {
    Ok,
    Truncated,
    Canceled,
    DeliveryCompleteUnsupported,
    SendFailed,
    RdmaFailed,
    AtomicDatatype,
    AtomicOp,
    AtomicOpNotValidForType,
    AtomicLength,
    Aborted,
}

/// Equal when every observable field is: the public fields, [`Completion::status`],
/// [`Completion::source`] and [`Completion::cq_data`]. The compact form's words are
/// compared only where they are meaningful: `aux` is the buffer length only for a
/// truncated receive (the fast path stores a receive's buffer length in it whether or
/// not the receive was truncated) and the value only for an atomic error; `src` and
/// `cq` only with their presence bits.
impl PartialEq for Completion {
    fn eq(&self, other: &Completion) -> bool {
        let aux_used = matches!(
            self.code,
            Code::Truncated | Code::AtomicDatatype | Code::AtomicOp
        );
        self.request == other.request
            && self.kind == other.kind
            && self.code == other.code
            && (!aux_used || self.aux == other.aux)
            && self.flags == other.flags
            && (self.flags & HAS_SRC == 0 || self.src == other.src)
            && (self.flags & HAS_CQ == 0 || self.cq == other.cq)
            && self.len == other.len
            && self.tag == other.tag
            && self.protocol == other.protocol
            && self.data == other.data
    }
}

impl Eq for Completion {}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion")
            .field("request", &self.request)
            .field("kind", &self.kind)
            .field("status", &self.status())
            .field("data", &self.data)
            .field("len", &self.len)
            .field("tag", &self.tag)
            .field("source", &self.source())
            .field("cq_data", &self.cq_data())
            .field("protocol", &self.protocol)
            .finish()
    }
}

impl Completion {
    /// A completion from its parts. A truncated receive's message length is `len` (the
    /// completion's length is the sender's, as [`OpError::Truncated::msg_len`] is).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn new(
        request: Request,
        kind: OpKind,
        status: std::result::Result<(), OpError>,
        data: Vec<u8>,
        len: u64,
        tag: u64,
        src: Option<PeerId>,
        cq_data: Option<u64>,
        protocol: Option<Protocol>,
    ) -> Completion {
        use tagmatch_rdm::atomic::AtomicError as A;
        let (code, aux, len) = match status {
            Ok(()) => (Code::Ok, 0, len),
            Err(e) => match e {
                OpError::Truncated { msg_len, buf_len } => (Code::Truncated, buf_len, msg_len),
                OpError::Canceled => (Code::Canceled, 0, len),
                OpError::DeliveryCompleteUnsupported => (Code::DeliveryCompleteUnsupported, 0, len),
                OpError::SendFailed => (Code::SendFailed, 0, len),
                OpError::RdmaFailed => (Code::RdmaFailed, 0, len),
                OpError::Atomic(A::Datatype(d)) => (Code::AtomicDatatype, u64::from(d), len),
                OpError::Atomic(A::Op(o)) => (Code::AtomicOp, u64::from(o), len),
                OpError::Atomic(A::OpNotValidForType) => (Code::AtomicOpNotValidForType, 0, len),
                OpError::Atomic(A::Length) => (Code::AtomicLength, 0, len),
                OpError::Aborted => (Code::Aborted, 0, len),
            },
        };
        let mut flags = 0;
        if src.is_some() {
            flags |= HAS_SRC;
        }
        if cq_data.is_some() {
            flags |= HAS_CQ;
        }
        Completion {
            request,
            data,
            len,
            tag,
            cq: cq_data.unwrap_or(0),
            aux,
            src: src.map_or(0, |p| p.0),
            kind,
            protocol,
            code,
            flags,
        }
    }

    /// A receive of a `len`-byte message into a `buf_len`-byte buffer (truncated if the
    /// message is longer), from peer index `src`: the fast path's completion, built
    /// without going through an `OpError`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn received(
        request: Request,
        data: Vec<u8>,
        len: u64,
        buf_len: u64,
        tag: u64,
        src: u32,
        cq_data: Option<u64>,
    ) -> Completion {
        Completion {
            request,
            data,
            len,
            tag,
            cq: cq_data.unwrap_or(0),
            // Read only for a truncated receive.
            aux: buf_len,
            src,
            kind: OpKind::Recv,
            protocol: None,
            code: if len > buf_len {
                Code::Truncated
            } else {
                Code::Ok
            },
            flags: HAS_SRC | if cq_data.is_some() { HAS_CQ } else { 0 },
        }
    }

    /// Success, or the error (a truncated receive still carries the first bytes).
    #[inline]
    pub fn status(&self) -> std::result::Result<(), OpError> {
        use tagmatch_rdm::atomic::AtomicError as A;
        Err(match self.code {
            Code::Ok => return Ok(()),
            Code::Truncated => OpError::Truncated {
                msg_len: self.len,
                buf_len: self.aux,
            },
            Code::Canceled => OpError::Canceled,
            Code::DeliveryCompleteUnsupported => OpError::DeliveryCompleteUnsupported,
            Code::SendFailed => OpError::SendFailed,
            Code::RdmaFailed => OpError::RdmaFailed,
            // The value was a `u32` when stored.
            Code::AtomicDatatype => OpError::Atomic(A::Datatype(self.aux as u32)),
            Code::AtomicOp => OpError::Atomic(A::Op(self.aux as u32)),
            Code::AtomicOpNotValidForType => OpError::Atomic(A::OpNotValidForType),
            Code::AtomicLength => OpError::Atomic(A::Length),
            Code::Aborted => OpError::Aborted,
        })
    }

    /// Whether the operation succeeded (one byte compared: no error value built).
    #[inline]
    pub fn is_ok(&self) -> bool {
        self.code == Code::Ok
    }

    /// The error, if the operation failed.
    #[inline]
    pub fn error(&self) -> Option<OpError> {
        self.status().err()
    }

    /// Sender of a receive or of a remote write.
    #[inline]
    pub fn source(&self) -> Option<Peer> {
        (self.flags & HAS_SRC != 0).then_some(Peer {
            id: PeerId(self.src),
            ep: self.request.ep,
        })
    }

    /// Remote CQ data.
    #[inline]
    pub fn cq_data(&self) -> Option<u64> {
        (self.flags & HAS_CQ != 0).then_some(self.cq)
    }

    /// `Ok(self)` on success, [`Error::Failed`] otherwise.
    #[inline]
    pub fn into_result(self) -> Result<Completion> {
        match self.status() {
            Ok(()) => Ok(self),
            Err(error) => Err(Error::Failed {
                request: self.request,
                kind: self.kind,
                error,
            }),
        }
    }

    /// A receive that ended without data, with `error`.
    pub(crate) fn recv_failed(request: Request, error: OpError) -> Completion {
        Completion::new(
            request,
            OpKind::Recv,
            Err(error),
            Vec::new(),
            0,
            0,
            None,
            None,
            None,
        )
    }

    /// The first 8 bytes of `data` as a little-endian `u64` (fetched atomics).
    pub fn data_u64(&self) -> Option<u64> {
        let b: [u8; 8] = self.data.get(..8)?.try_into().ok()?;
        Some(u64::from_le_bytes(b))
    }
}

#[cfg(test)]
mod completion_tests {
    use super::*;
    use tagmatch_rdm::atomic::AtomicError as A;

    /// Every outcome, source and CQ data survives the compact form, and the record is 80
    /// bytes (it was 112).
    #[test]
    fn compact_completion_keeps_every_outcome() {
        assert_eq!(std::mem::size_of::<Completion>(), 80);
        let req = Request { op: OpId(9), ep: 3 };
        let errors = [
            OpError::Truncated {
                msg_len: 100,
                buf_len: 1 << 40,
            },
            OpError::Canceled,
            OpError::DeliveryCompleteUnsupported,
            OpError::SendFailed,
            OpError::RdmaFailed,
            OpError::Atomic(A::Datatype(u32::MAX)),
            OpError::Atomic(A::Op(7)),
            OpError::Atomic(A::OpNotValidForType),
            OpError::Atomic(A::Length),
            OpError::Aborted,
        ];
        for status in std::iter::once(Ok(())).chain(errors.into_iter().map(Err)) {
            for (src, cq) in [
                (None, None),
                (Some(PeerId(u32::MAX)), Some(0)),
                (Some(PeerId(0)), Some(u64::MAX)),
            ] {
                let c =
                    Completion::new(req, OpKind::Recv, status, vec![1, 2], 100, 5, src, cq, None);
                assert_eq!(c.status(), status);
                assert_eq!(c.is_ok(), status.is_ok());
                assert_eq!(c.error(), status.err());
                assert_eq!(c.source(), src.map(|id| Peer { id, ep: 3 }));
                assert_eq!(c.cq_data(), cq);
                assert_eq!((c.len, c.tag, &c.data[..]), (100, 5, &[1u8, 2][..]));
                let r = c.clone().into_result();
                match status {
                    Ok(()) => assert_eq!(r.ok(), Some(c)),
                    Err(e) => assert!(matches!(r, Err(Error::Failed { error, .. }) if error == e)),
                }
            }
        }
    }

    /// `==` sees what the accessors show, and only that: the fast path's receive keeps
    /// its buffer length in `aux` even when not truncated, which must not make equal
    /// completions unequal; a truncated receive's buffer length and an atomic error's
    /// value must still tell completions apart.
    #[test]
    fn equality_follows_the_observable_fields() {
        let req = Request { op: OpId(1), ep: 2 };
        let rx = |buf_len: u64, msg_len: u64| {
            Completion::received(req, vec![1; 4], msg_len, buf_len, 3, 4, None)
        };
        assert_eq!(rx(64, 4), rx(128, 4));
        assert_ne!(rx(2, 4), rx(3, 4));
        assert_eq!(rx(2, 4).status(), rx(2, 4).status());
        let proto = Completion::new(
            req,
            OpKind::Recv,
            Ok(()),
            vec![1; 4],
            4,
            3,
            Some(PeerId(4)),
            None,
            None,
        );
        assert_eq!(proto, rx(64, 4));
        let atomic = |e| {
            Completion::new(
                req,
                OpKind::AtomicWrite,
                Err(OpError::Atomic(e)),
                vec![],
                0,
                0,
                None,
                None,
                None,
            )
        };
        assert_ne!(atomic(A::Datatype(1)), atomic(A::Datatype(2)));
        assert_ne!(atomic(A::Op(1)), atomic(A::Op(2)));
        assert_ne!(atomic(A::Datatype(1)), atomic(A::Op(1)));
        assert_eq!(atomic(A::Length), atomic(A::Length));
    }
}

/// What a probe found: an unexpected message still queued (or claimed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeInfo {
    /// Sender.
    pub source: Peer,
    /// Tag (0 for untagged messages).
    pub tag: u64,
    /// Message length.
    pub len: u64,
    /// Remote CQ data.
    pub cq_data: Option<u64>,
}

impl ProbeInfo {
    pub(crate) fn new(p: tagmatch_rdm::ProbeInfo, ep: u32) -> Self {
        ProbeInfo {
            source: Peer { id: p.src, ep },
            tag: p.tag,
            len: p.len,
            cq_data: p.cq_data,
        }
    }
}

/// A message claimed by [`Endpoint::tmprobe`] / [`Endpoint::mprobe`]: no receive can take
/// it any more; [`Endpoint::mrecv`] receives it (once: it is not `Clone`).
#[derive(Debug, PartialEq, Eq)]
pub struct Message {
    pub(crate) claim: MsgClaim,
    pub(crate) ep: u32,
    /// What was probed.
    pub info: ProbeInfo,
}

/// Whose claim a [`Message`] holds: the protocol endpoint's or the fast path's engine.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum MsgClaim {
    Rdm(Claim),
    Fast(tagmatch_engine::MsgHandle),
}

/// Where peers address a registered region: send it to them (e.g. in a message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteKey {
    /// Remote virtual address of the region's first byte.
    pub addr: u64,
    /// Remote key.
    pub key: u64,
    /// Region length.
    pub len: u64,
}

impl RemoteKey {
    /// The remote address `offset` bytes into the region.
    pub fn at(&self, offset: u64) -> RemoteAddr {
        RemoteAddr {
            addr: self.addr.wrapping_add(offset),
            key: self.key,
        }
    }

    /// 24 bytes (addr, key, len; little-endian) to put in a message.
    pub fn to_bytes(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.key.to_le_bytes());
        b[16..].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Parses [`RemoteKey::to_bytes`]; `None` unless `b` is 24 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<RemoteKey> {
        if b.len() != 24 {
            return None;
        }
        let w = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        Some(RemoteKey {
            addr: w(0),
            key: w(8),
            len: w(16),
        })
    }
}

/// A region registered with [`Endpoint::register`]: it stays registered (and its key
/// valid) for any number of RMA operations until [`Endpoint::deregister`].
#[derive(Debug, PartialEq, Eq)]
pub struct MemoryRegion {
    handle: MemHandle,
    ep: u32,
    key: RemoteKey,
}

impl MemoryRegion {
    /// What peers need to RDMA into or out of it.
    pub fn remote_key(&self) -> RemoteKey {
        self.key
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.key.len as usize
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.key.len == 0
    }
}

/// A communication endpoint: one RDM protocol endpoint on one device. See the crate
/// documentation for an example.
#[derive(Debug)]
pub struct Endpoint {
    pub(crate) id: u32,
    pub(crate) node: crate::proto::ProtoNode,
    pub(crate) ready: VecDeque<Completion>,
    /// Receive slots ([`Endpoint::recv_slot`]).
    pub(crate) slots: Vec<crate::slot::Slot>,
    pub(crate) counters: Counters,
    wait_limit: Duration,
    /// The in-process fast path (mem transport with [`Builder::fast_path`] on).
    pub(crate) fast: Option<Box<crate::inproc::Fast>>,
    /// Protocol-path extras: injected sends (no completion on success) and receives into
    /// a caller's buffer.
    pub(crate) extra: crate::inproc::ProtoExtras,
}

impl Endpoint {
    /// A builder.
    pub fn builder() -> Builder {
        Builder::default()
    }

    #[inline]
    pub(crate) fn pid(&mut self, p: Peer) -> Result<PeerId> {
        if p.ep == self.id {
            Ok(p.id)
        } else {
            self.counters.call_errors += 1;
            Err(Error::UnknownPeer(p))
        }
    }

    #[inline]
    pub(crate) fn src(&mut self, s: Source) -> Result<Option<PeerId>> {
        match s {
            Source::Any => Ok(None),
            Source::Peer(p) => self.pid(p).map(Some),
        }
    }

    pub(crate) fn request(&self, op: OpId) -> Request {
        Request { op, ep: self.id }
    }

    pub(crate) fn from_parts(
        cfg: Config,
        dev: Device,
        wait_limit: Duration,
        hub: Option<(std::sync::Arc<crate::fast::Hub>, bool)>,
    ) -> Endpoint {
        static NEXT_ID: AtomicU32 = AtomicU32::new(1);
        // The fast path claims every protocol-path message into its own engine, whose
        // budget counts it: the protocol endpoint's budget counts only the messages not
        // claimed yet (else claims that match no receive yet would fill it and refuse, for
        // ever, the message a receive waits for).
        let cfg = if hub.is_some() {
            Config {
                claims_count: false,
                ..cfg
            }
        } else {
            cfg
        };
        let fast = hub.map(|(h, throttle)| {
            // The fast path rings and sleeps on the in-memory device's doorbell, so one
            // wait covers both (a fast-path hub exists only with an in-memory device).
            let bell = match &dev {
                Device::Mem(d) => d.doorbell().clone(),
                _ => Default::default(),
            };
            Box::new(crate::inproc::Fast::new(
                h,
                dev.addr(),
                bell,
                &cfg,
                throttle,
            ))
        });
        Endpoint {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            node: crate::proto::ProtoNode::new(Node::new(cfg, dev)),
            ready: VecDeque::new(),
            slots: Vec::new(),
            counters: Counters::default(),
            wait_limit,
            fast,
            extra: Default::default(),
        }
    }

    /// This endpoint's address, to hand to peers.
    pub fn address(&self) -> Address {
        match self.node.device() {
            Device::Mem(d) => Address::Mem(d.addr()),
            Device::Udp(d) => Address::Udp(d.udp_addr()),
            #[cfg(feature = "verbs")]
            Device::Verbs(d) => Address::Verbs(d.addr()),
        }
    }

    /// The transport's name (`"mem"`, `"udp"`).
    pub fn transport(&self) -> &'static str {
        match self.node.device() {
            Device::Mem(_) => "mem",
            Device::Udp(_) => "udp",
            #[cfg(feature = "verbs")]
            Device::Verbs(_) => "verbs",
        }
    }

    /// The protocol features this endpoint advertises to its peers (efa-rdm-protocol-v4
    /// §2.1). On a device without RDMA (the verbs transport today) `rdma_read` and
    /// `rdma_write` are off, and large messages, RMA and atomics use the emulated
    /// subprotocols (long-CTS, long-CTS write/read, emulated atomics).
    ///
    /// ```
    /// let fabric = tagmatch::MemFabric::new();
    /// let ep = tagmatch::Endpoint::builder().mem(&fabric).build().unwrap();
    /// assert!(ep.features().rdma_read);
    /// ```
    pub fn features(&self) -> crate::Features {
        self.node.endpoint().config().features
    }

    /// The largest packet the device carries.
    pub fn mtu(&self) -> usize {
        self.node.device().mtu()
    }

    /// Inserts a peer (`fi_av_insert`): the same address gives the same peer. Nothing is
    /// sent until the first operation (the handshake travels with it).
    pub fn insert_peer(&mut self, addr: &Address) -> Result<Peer> {
        if addr.transport() != self.transport() {
            return Err(Error::WrongTransport {
                address: addr.to_string(),
                endpoint: self.transport(),
            });
        }
        // Through the node: its packets are then attributed by the whole address (a
        // restarted peer's new connid gets its own id) with one look-up.
        let p = self.node.get_mut().add_peer(addr.raw());
        trace!(peer = p.0, %addr, "insert_peer");
        Ok(Peer { id: p, ep: self.id })
    }

    /// Parses `addr` and inserts it ([`Endpoint::insert_peer`]); `ucp_ep_create`.
    pub fn connect(&mut self, addr: &str) -> Result<Peer> {
        let a: Address = addr.parse()?;
        self.insert_peer(&a)
    }

    /// Refuses a buffer of `len` bytes that cannot be allocated (see [`CHECKED_ALLOC`]).
    fn alloc_check(&mut self, len: usize) -> Result<()> {
        if len >= CHECKED_ALLOC && Vec::<u8>::new().try_reserve_exact(len).is_err() {
            self.counters.call_errors += 1;
            return Err(Error::BufferTooLarge { len });
        }
        Ok(())
    }

    pub(crate) fn req(
        &mut self,
        r: std::result::Result<OpId, tagmatch_rdm::CallError>,
        peer: Option<Peer>,
    ) -> Result<Request> {
        match r {
            Ok(op) => {
                self.counters.submitted += 1;
                Ok(self.request(op))
            }
            Err(e) => {
                self.counters.call_errors += 1;
                Err(Error::call(e, peer, None))
            }
        }
    }

    /// Tagged send (`ucp_tag_send_nbx`, `fi_tsend`). The buffer moves into the endpoint
    /// (no copy on the way to the device).
    pub fn tsend(&mut self, peer: Peer, tag: u64, data: impl Into<Vec<u8>>) -> Result<Request> {
        self.tsend_with(peer, tag, data, SendOptions::default())
    }

    /// Tagged send with remote CQ data and/or delivery complete.
    pub fn tsend_with(
        &mut self,
        peer: Peer,
        tag: u64,
        data: impl Into<Vec<u8>>,
        opts: SendOptions,
    ) -> Result<Request> {
        let data = data.into();
        trace!(peer = peer.index(), tag, len = data.len(), "tsend");
        let pid = self.pid(peer)?;
        if self.is_fast(pid) {
            return self.fast_send(pid, Some(tag), crate::fast::Bytes::Owned(data), opts, false);
        }
        let r = self
            .node
            .get_mut()
            .endpoint_mut()
            .tsend(pid, tag, data, opts);
        let r = self.req(r, Some(peer));
        self.sent();
        r
    }

    /// After a send, RMA or atomic was posted to the protocol: the UDP device sends it at
    /// once if nothing is in flight to its peer and it has not sent so since the last
    /// `progress` (see [`Node::send_now`]): a ping-pong's answer no longer waits for the
    /// owner's next `progress`. Behind frames in flight (a stream, a window of messages),
    /// or after another such send (a fan-out to many peers), it waits for `progress`,
    /// batched, as before. An error of the device's send is reported by the next
    /// `progress`, which tries again.
    #[inline]
    pub(crate) fn sent(&mut self) {
        if matches!(*self.node.device(), Device::Udp(_)) {
            if let Err(e) = self.node.get_mut().send_now() {
                tracing::debug!(error = %e, "send at once failed; left to progress");
            }
        }
    }

    /// Untagged send (`fi_send`).
    pub fn send(&mut self, peer: Peer, data: impl Into<Vec<u8>>) -> Result<Request> {
        self.send_with(peer, data, SendOptions::default())
    }

    /// Untagged send with options.
    pub fn send_with(
        &mut self,
        peer: Peer,
        data: impl Into<Vec<u8>>,
        opts: SendOptions,
    ) -> Result<Request> {
        let data = data.into();
        trace!(peer = peer.index(), len = data.len(), "send");
        let pid = self.pid(peer)?;
        if self.is_fast(pid) {
            return self.fast_send(pid, None, crate::fast::Bytes::Owned(data), opts, false);
        }
        let r = self.node.get_mut().endpoint_mut().send(pid, data, opts);
        let r = self.req(r, Some(peer));
        self.sent();
        r
    }

    /// Tagged receive of up to `len` bytes (`ucp_tag_recv_nbx`, `fi_trecv`) from `source`
    /// ([`ANY_SOURCE`] or a peer) with tags accepted by `tag` ([`ANY_TAG`], an exact `u64`,
    /// or a [`TagMatch`]). Off the in-process fast path the buffer is allocated when the
    /// receive is posted: a `len` no allocation can honour is [`Error::BufferTooLarge`].
    pub fn trecv(
        &mut self,
        source: impl Into<Source>,
        tag: impl Into<TagMatch>,
        len: usize,
    ) -> Result<Request> {
        let (source, tag) = (source.into(), tag.into());
        trace!(?source, tag = tag.tag, mask = tag.mask, len, "trecv");
        let src = self.src(source)?;
        if self.fast.is_some() {
            return self.fast_post(Some(tag), src, crate::inproc::RecvBuf::Alloc(len));
        }
        self.alloc_check(len)?;
        let r = self
            .node
            .get_mut()
            .endpoint_mut()
            .trecv(src, tag.tag, tag.ignore(), len);
        self.req(r, None)
    }

    /// Untagged receive of up to `len` bytes (`fi_recv`); see [`Endpoint::trecv`].
    pub fn recv(&mut self, source: impl Into<Source>, len: usize) -> Result<Request> {
        let src = self.src(source.into())?;
        if self.fast.is_some() {
            return self.fast_post(None, src, crate::inproc::RecvBuf::Alloc(len));
        }
        self.alloc_check(len)?;
        let r = self.node.get_mut().endpoint_mut().recv(src, len);
        self.req(r, None)
    }

    /// Peeks at the earliest unexpected tagged message accepted (`ucp_tag_probe_nb` with
    /// `remove = 0`, `FI_PEEK`). Call [`Endpoint::progress`] first to take in arrivals.
    pub fn tprobe(
        &mut self,
        source: impl Into<Source>,
        tag: impl Into<TagMatch>,
    ) -> Option<ProbeInfo> {
        let (source, tag) = (source.into(), tag.into());
        self.counters.probes += 1;
        let src = self.src(source).ok()?;
        let ep = self.id;
        if self.fast.is_some() {
            return self.fast_probe(Some(tag), src);
        }
        self.node
            .get_mut()
            .endpoint_mut()
            .tprobe(src, tag.tag, tag.ignore())
            .map(|p| ProbeInfo::new(p, ep))
    }

    /// Peeks at the earliest unexpected untagged message.
    pub fn probe(&mut self, source: impl Into<Source>) -> Option<ProbeInfo> {
        self.counters.probes += 1;
        let src = self.src(source.into()).ok()?;
        let ep = self.id;
        if self.fast.is_some() {
            return self.fast_probe(None, src);
        }
        self.node
            .get_mut()
            .endpoint_mut()
            .probe(src)
            .map(|p| ProbeInfo::new(p, ep))
    }

    /// Claims the earliest unexpected tagged message accepted (`MPI_Mprobe`,
    /// `ucp_tag_probe_nb` with `remove = 1`, `FI_CLAIM`).
    pub fn tmprobe(
        &mut self,
        source: impl Into<Source>,
        tag: impl Into<TagMatch>,
    ) -> Option<Message> {
        let (source, tag) = (source.into(), tag.into());
        self.counters.probes += 1;
        let src = self.src(source).ok()?;
        if self.fast.is_some() {
            return self.fast_mprobe(Some(tag), src);
        }
        let (claim, info) =
            self.node
                .get_mut()
                .endpoint_mut()
                .tmprobe(src, tag.tag, tag.ignore())?;
        Some(Message {
            claim: MsgClaim::Rdm(claim),
            ep: self.id,
            info: ProbeInfo::new(info, self.id),
        })
    }

    /// Claims the earliest unexpected untagged message.
    pub fn mprobe(&mut self, source: impl Into<Source>) -> Option<Message> {
        self.counters.probes += 1;
        let src = self.src(source.into()).ok()?;
        if self.fast.is_some() {
            return self.fast_mprobe(None, src);
        }
        let (claim, info) = self.node.get_mut().endpoint_mut().mprobe(src)?;
        Some(Message {
            claim: MsgClaim::Rdm(claim),
            ep: self.id,
            info: ProbeInfo::new(info, self.id),
        })
    }

    /// Receives a claimed message into a buffer of `len` bytes (`ucp_tag_msg_recv_nbx`).
    /// A `len` no allocation can honour is [`Error::ClaimKept`] with
    /// [`Error::BufferTooLarge`] (the message still claimed).
    pub fn mrecv(&mut self, msg: Message, len: usize) -> Result<Request> {
        if msg.ep != self.id {
            return Err(Error::StaleMessage);
        }
        if matches!(msg.claim, MsgClaim::Rdm(_)) {
            if let Err(e) = self.alloc_check(len) {
                return Err(Error::ClaimKept {
                    message: msg,
                    error: Box::new(e),
                });
            }
        }
        let claim = match msg.claim {
            MsgClaim::Rdm(c) => c,
            MsgClaim::Fast(h) => return self.fast_mrecv(h, crate::inproc::RecvBuf::Alloc(len)),
        };
        let r = self.node.get_mut().endpoint_mut().mrecv(claim, len);
        match r {
            Ok(op) => {
                self.counters.submitted += 1;
                Ok(self.request(op))
            }
            Err(tagmatch_rdm::CallError::UnknownOp) => Err(Error::StaleMessage),
            Err(e) => Err(Error::call(e, None, None)),
        }
    }

    /// Cancels a posted receive that has not matched yet; it completes with
    /// [`OpError::Canceled`]. Anything else (matched, finished, a send) is
    /// [`Error::UnknownRequest`].
    pub fn cancel(&mut self, req: Request) -> Result<()> {
        if req.ep != self.id {
            return Err(Error::UnknownRequest(req));
        }
        if crate::inproc::is_fast_op(req.op) {
            return self.fast_cancel(req);
        }
        self.node
            .get_mut()
            .endpoint_mut()
            .cancel(req.op)
            .map_err(|e| Error::call(e, None, Some(req)))?;
        self.counters.cancels += 1;
        Ok(())
    }

    /// Ends a request still in flight, whatever it waits for: a send, write, read or
    /// atomic whose peer does not answer, a receive (posted, or matched and still
    /// receiving). It completes with [`OpError::Aborted`] (so [`Endpoint::wait`] on it
    /// returns [`Error::Failed`] with that error), and everything it held is released (see
    /// `tagmatch_rdm::Endpoint::abort`). Nothing is recalled: what the peer already got
    /// stays there. A request that already completed (or another endpoint's) is
    /// [`Error::UnknownRequest`].
    ///
    /// The protocol has no error answer to a read, write or atomic the peer refuses (a key
    /// it never issued, a range outside its region), and no timer: such a request waits
    /// until the application gives up on it — bound the wait ([`Endpoint::wait_for`],
    /// the builder's wait limit), then abort it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tagmatch::{Endpoint, Error, MemFabric, OpError, RemoteAddr};
    /// let f = MemFabric::new();
    /// let mut a = Endpoint::builder().mem(&f).build().unwrap();
    /// let b = Endpoint::builder().mem(&f).build().unwrap();
    /// let pb = a.insert_peer(&b.address()).unwrap();
    /// // A key `b` never issued: `b` drops the read without an answer.
    /// let r = a.read(pb, 8, RemoteAddr { addr: 0, key: 12345 }).unwrap();
    /// assert!(matches!(a.wait_for(r, Duration::from_millis(20)), Err(Error::Timeout { .. })));
    /// a.abort(r).unwrap();
    /// let e = a.wait(r).unwrap_err();
    /// assert!(matches!(e, Error::Failed { error: OpError::Aborted, .. }), "{e}");
    /// ```
    pub fn abort(&mut self, req: Request) -> Result<()> {
        if req.ep != self.id {
            return Err(Error::UnknownRequest(req));
        }
        if crate::inproc::is_fast_op(req.op) {
            return self.fast_abort(req);
        }
        self.node
            .get_mut()
            .endpoint_mut()
            .abort(req.op)
            .map_err(|e| Error::call(e, None, Some(req)))?;
        self.counters.aborts += 1;
        Ok(())
    }

    /// Removes a peer (`fi_av_remove`): every request with it ends with
    /// [`OpError::Aborted`] — sends, writes, reads and atomics to it, receives posted for
    /// it alone, receives of its messages still in progress — its unexpected messages
    /// are dropped, and the peer is forgotten: requests naming it are refused with
    /// [`Error::UnknownPeer`] (on the in-process fast path a receive naming it is still
    /// accepted, and never matches). Returns how many requests it ended.
    ///
    /// Inserting its address again ([`Endpoint::insert_peer`]) makes a new peer. Later
    /// packets from the address are treated as from an unknown sender (see
    /// `tagmatch_rdm::Endpoint::remove_peer`); an in-process fast-path peer's lane into
    /// this endpoint is closed, so its later fast-path sends here fail with
    /// [`OpError::SendFailed`] as to a dropped endpoint.
    pub fn remove_peer(&mut self, peer: Peer) -> Result<usize> {
        let pid = self.pid(peer)?;
        if self.node.endpoint().peer_addr(pid).is_none() {
            self.counters.call_errors += 1;
            return Err(Error::UnknownPeer(peer));
        }
        let fast = self.fast_remove_peer(pid);
        let ended = self
            .node
            .get_mut()
            .endpoint_mut()
            .remove_peer(pid)
            .map_err(|e| Error::call(e, Some(peer), None))?;
        debug!(peer = peer.index(), ended = ended + fast, "remove_peer");
        Ok(ended + fast)
    }

    /// Registers `bytes` as an RMA target or source and waits for its key. The region
    /// stays registered for any number of operations until [`Endpoint::deregister`].
    pub fn register(&mut self, bytes: Vec<u8>) -> Result<MemoryRegion> {
        self.register_inner(bytes, true)
    }

    /// Registers `bytes` for this endpoint's own use only (`fi_mr_reg` with `FI_SEND |
    /// FI_RECV`, no remote access): a destination for [`Endpoint::trecv_region`] and a
    /// source for [`Endpoint::tsend_region`] that peers can neither read nor write (the
    /// device refuses their RMA naming its key). Its large sends push their data
    /// (long-CTS) instead of being read by the receiver; in exchange the UDP device
    /// receives a read's datagrams straight into it in one call each, which it does not
    /// for a region peers may read (they must never see bytes nobody wrote there).
    pub fn register_local(&mut self, bytes: Vec<u8>) -> Result<MemoryRegion> {
        self.register_inner(bytes, false)
    }

    fn register_inner(&mut self, bytes: Vec<u8>, remote: bool) -> Result<MemoryRegion> {
        let len = bytes.len() as u64;
        let (handle, k) = self
            .node
            .get_mut()
            .register_with(bytes, remote, self.wait_limit)
            .map_err(|e| match e.kind() {
                io::ErrorKind::TimedOut | io::ErrorKind::Other => Error::RegistrationFailed,
                _ => Error::Io {
                    context: "register",
                    source: e,
                },
            })?;
        self.counters.registrations += 1;
        Ok(MemoryRegion {
            handle,
            ep: self.id,
            key: RemoteKey {
                addr: k.addr,
                key: k.key,
                len,
            },
        })
    }

    /// Tagged receive into `range` of a registered region (`fi_trecv` with a memory
    /// descriptor, `ucp_tag_recv_nbx` with a `memh`): the message lands there (a large one
    /// straight from the RDMA read), and the completion's `data` is empty — its `len` is
    /// the message's length, and a message longer than the range completes
    /// [`OpError::Truncated`] with the range's bytes written. The region stays registered
    /// and the caller's; [`Endpoint::deregister`] is refused while such receives are
    /// pending. Several receives may name the same bytes (as `ucx_perftest` and the
    /// fabtests receive a whole window into one buffer): the bytes then hold whichever
    /// message wrote them last. Read the bytes with [`Endpoint::region`].
    ///
    /// ```
    /// # fn main() -> Result<(), tagmatch::Error> {
    /// use tagmatch::{Endpoint, MemFabric, ANY_SOURCE};
    /// let fabric = MemFabric::new();
    /// let mut a = Endpoint::builder().mem(&fabric).build()?;
    /// let mut b = Endpoint::builder().mem(&fabric).build()?;
    /// let to_b = a.insert_peer(&b.address())?;
    /// let mr = b.register_local(vec![0u8; 16])?;
    /// let r = b.trecv_region(ANY_SOURCE, 7u64, &mr, 4..12)?;
    /// a.tsend(to_b, 7, b"8 bytes!".to_vec())?;
    /// let c = b.wait_with(r, &mut [&mut a])?;
    /// assert_eq!((c.len, c.data.len()), (8, 0));
    /// assert_eq!(&b.region(&mr)?[4..12], b"8 bytes!");
    /// # Ok(()) }
    /// ```
    pub fn trecv_region(
        &mut self,
        source: impl Into<Source>,
        tag: impl Into<TagMatch>,
        mr: &MemoryRegion,
        range: std::ops::Range<usize>,
    ) -> Result<Request> {
        self.region_recv(source.into(), Some(tag.into()), mr, range)
    }

    /// Untagged [`Endpoint::trecv_region`].
    pub fn recv_region(
        &mut self,
        source: impl Into<Source>,
        mr: &MemoryRegion,
        range: std::ops::Range<usize>,
    ) -> Result<Request> {
        self.region_recv(source.into(), None, mr, range)
    }

    /// Checks that `range` lies in `mr`, a region of this endpoint.
    fn region_check(&mut self, mr: &MemoryRegion, range: &std::ops::Range<usize>) -> Result<()> {
        if mr.ep != self.id {
            self.counters.call_errors += 1;
            return Err(Error::UnknownRegion);
        }
        if range.start > range.end || range.end > mr.len() {
            self.counters.call_errors += 1;
            return Err(Error::RegionRange {
                start: range.start,
                end: range.end,
                len: mr.len(),
            });
        }
        Ok(())
    }

    fn region_recv(
        &mut self,
        source: Source,
        tag: Option<TagMatch>,
        mr: &MemoryRegion,
        range: std::ops::Range<usize>,
    ) -> Result<Request> {
        trace!(?source, ?range, "receive into region");
        let src = self.src(source)?;
        self.region_check(mr, &range)?;
        let (off, len) = (range.start, range.end - range.start);
        if self.fast.is_some() {
            let buf = self.region_buf(mr, off, len)?;
            let r = self.fast_post(tag, src, buf);
            if r.is_err() {
                // Refused (the posted-receive limit): the receive was dropped, and with
                // it the use it held on the region.
                self.node.get_mut().endpoint_mut().unhold_memory(mr.handle);
            }
            return r;
        }
        let ep = self.node.get_mut().endpoint_mut();
        let r = match tag {
            Some(t) => ep.trecv_region(src, t.tag, t.ignore(), mr.handle, off as u64, len as u64),
            None => ep.recv_region(src, mr.handle, off as u64, len as u64),
        };
        self.req(r, None)
    }

    /// The fast path's buffer for a receive into `len` bytes at `off` of `mr`, the region
    /// held (counted as in use) until the receive is done.
    fn region_buf(
        &mut self,
        mr: &MemoryRegion,
        off: usize,
        len: usize,
    ) -> Result<crate::inproc::RecvBuf> {
        let held = self
            .node
            .get_mut()
            .endpoint_mut()
            .hold_memory(mr.handle, off as u64, len as u64);
        if let Err(e) = held {
            self.counters.call_errors += 1;
            return Err(Error::call(e, None, None));
        }
        Ok(crate::inproc::RecvBuf::Region {
            mem: mr.handle,
            off,
            len,
        })
    }

    /// Receives a claimed message ([`Endpoint::tmprobe`], [`Endpoint::mprobe`]) into
    /// `range` of a registered region (see [`Endpoint::trecv_region`]). A region of
    /// another endpoint or a range outside it is refused with [`Error::ClaimKept`], which
    /// hands the message back still claimed.
    pub fn mrecv_region(
        &mut self,
        msg: Message,
        mr: &MemoryRegion,
        range: std::ops::Range<usize>,
    ) -> Result<Request> {
        if msg.ep != self.id {
            return Err(Error::StaleMessage);
        }
        let kept = |message, error| Error::ClaimKept {
            message,
            error: Box::new(error),
        };
        if let Err(e) = self.region_check(mr, &range) {
            return Err(kept(msg, e));
        }
        let (off, len) = (range.start, range.end - range.start);
        match msg.claim {
            MsgClaim::Fast(h) => match self.region_buf(mr, off, len) {
                Ok(buf) => {
                    let r = self.fast_mrecv(h, buf);
                    if r.is_err() {
                        // Not received (a stale claim): the hold goes with it.
                        self.node.get_mut().endpoint_mut().unhold_memory(mr.handle);
                    }
                    r
                }
                Err(e) => Err(kept(msg, e)),
            },
            MsgClaim::Rdm(c) => {
                let ep = self.node.get_mut().endpoint_mut();
                match ep.mrecv_region(c, mr.handle, off as u64, len as u64) {
                    Ok(op) => {
                        self.counters.submitted += 1;
                        Ok(self.request(op))
                    }
                    Err(CallError::UnknownOp) => Err(Error::StaleMessage),
                    // Refused before the claim was taken (the range was checked above;
                    // the region may be gone from the protocol endpoint).
                    Err(e @ (CallError::MemRange | CallError::UnknownMem)) => {
                        self.counters.call_errors += 1;
                        Err(kept(msg, Error::call(e, None, None)))
                    }
                    Err(e) => {
                        self.counters.call_errors += 1;
                        Err(Error::call(e, None, None))
                    }
                }
            }
        }
    }

    /// The bytes of a registered region (peers' writes land here).
    pub fn region(&self, mr: &MemoryRegion) -> Result<&[u8]> {
        if mr.ep != self.id {
            return Err(Error::UnknownRegion);
        }
        self.node
            .endpoint()
            .memory(mr.handle)
            .ok_or(Error::UnknownRegion)
    }

    /// The bytes of a registered region, mutably (what peers' reads see).
    pub fn region_mut(&mut self, mr: &MemoryRegion) -> Result<&mut [u8]> {
        if mr.ep != self.id {
            return Err(Error::UnknownRegion);
        }
        self.node
            .get_mut()
            .endpoint_mut()
            .memory_mut(mr.handle)
            .ok_or(Error::UnknownRegion)
    }

    /// Deregisters a region and hands its bytes back.
    ///
    /// Refused with [`Error::RegionInUse`] (which hands the region back, still registered)
    /// while sends from it ([`Endpoint::tsend_region`], [`Endpoint::send_region`]) are in
    /// flight (the receiver may still be reading it) or receives into it
    /// ([`Endpoint::trecv_region`], [`Endpoint::recv_region`]) are pending (a message may
    /// still land there).
    pub fn deregister(&mut self, mr: MemoryRegion) -> Result<Vec<u8>> {
        if mr.ep != self.id {
            // Another endpoint's: handed back, so that its owner can still deregister it.
            return Err(Error::ForeignRegion { region: mr });
        }
        let ep = self.node.get_mut().endpoint_mut();
        match ep.try_release_memory(mr.handle) {
            Ok(bytes) => Ok(bytes),
            Err(tagmatch_rdm::CallError::MemInUse) => {
                let sends = ep.mem_users(mr.handle).unwrap_or(0);
                Err(Error::RegionInUse { region: mr, sends })
            }
            Err(_) => Err(Error::UnknownRegion),
        }
    }

    /// Sends from `mr` and receives into it not completed yet (while non-zero,
    /// [`Endpoint::deregister`] refuses).
    pub fn region_sends_in_flight(&self, mr: &MemoryRegion) -> Result<u32> {
        if mr.ep != self.id {
            return Err(Error::UnknownRegion);
        }
        self.node
            .endpoint()
            .mem_users(mr.handle)
            .ok_or(Error::UnknownRegion)
    }

    /// Tagged send of `range` of a registered region (the registration cache for repeated
    /// sends): the region's existing registration serves every send from it, so N large
    /// (long-read) sends cost one registration — made by [`Endpoint::register`] — instead
    /// of one registration and deregistration each. Small and medium sends copy the range
    /// into packets. The region stays the caller's; keep the range unchanged until the send
    /// completes (the receiver may RDMA-read it until then). [`Endpoint::deregister`] is
    /// refused while such sends are in flight. On the in-process fast path the range is
    /// copied at once (like every message of the pair, to keep their order): the send is
    /// complete when this returns.
    pub fn tsend_region(
        &mut self,
        peer: Peer,
        tag: u64,
        mr: &MemoryRegion,
        range: std::ops::Range<usize>,
    ) -> Result<Request> {
        self.tsend_region_with(peer, tag, mr, range, SendOptions::default())
    }

    /// [`Endpoint::tsend_region`] with remote CQ data and/or delivery complete.
    pub fn tsend_region_with(
        &mut self,
        peer: Peer,
        tag: u64,
        mr: &MemoryRegion,
        range: std::ops::Range<usize>,
        opts: SendOptions,
    ) -> Result<Request> {
        self.region_send(peer, Some(tag), mr, range, opts)
    }

    /// Untagged send of `range` of a registered region; see [`Endpoint::tsend_region`].
    pub fn send_region(
        &mut self,
        peer: Peer,
        mr: &MemoryRegion,
        range: std::ops::Range<usize>,
    ) -> Result<Request> {
        self.send_region_with(peer, mr, range, SendOptions::default())
    }

    /// [`Endpoint::send_region`] with options.
    pub fn send_region_with(
        &mut self,
        peer: Peer,
        mr: &MemoryRegion,
        range: std::ops::Range<usize>,
        opts: SendOptions,
    ) -> Result<Request> {
        self.region_send(peer, None, mr, range, opts)
    }

    fn region_send(
        &mut self,
        peer: Peer,
        tag: Option<u64>,
        mr: &MemoryRegion,
        range: std::ops::Range<usize>,
        opts: SendOptions,
    ) -> Result<Request> {
        trace!(peer = peer.index(), ?tag, ?range, "send from region");
        let pid = self.pid(peer)?;
        self.region_check(mr, &range)?;
        if self.is_fast(pid) {
            // The fast path copies the range at once (no packet, no registration): the
            // send is complete, and the region free, when this returns.
            let bytes = match self.node.endpoint().memory(mr.handle) {
                Some(m) => m[range].to_vec(),
                None => {
                    self.counters.call_errors += 1;
                    return Err(Error::UnknownRegion);
                }
            };
            let r = self.fast_send(pid, tag, crate::fast::Bytes::Owned(bytes), opts, false);
            if r.is_ok() {
                self.counters.region_sends += 1;
            }
            return r;
        }
        let (off, len) = (range.start as u64, (range.end - range.start) as u64);
        let ep = self.node.get_mut().endpoint_mut();
        let r = match tag {
            Some(tag) => ep.tsend_from(pid, tag, mr.handle, off, len, opts),
            None => ep.send_from(pid, mr.handle, off, len, opts),
        };
        let r = self.req(r, Some(peer));
        if r.is_ok() {
            self.counters.region_sends += 1;
        }
        self.sent();
        r
    }

    /// RMA write of `data` to the peer's `remote` (`fi_write`, `ucp_put_nbx`).
    ///
    /// The completion means what `fi_write`'s default (transmit complete) means: the data
    /// left for the peer and `data` is no longer needed. On a transport that reorders
    /// (UDP, EFA), a read issued after it may still be served before the write is
    /// applied. For "visible at the target" completion (`FI_DELIVERY_COMPLETE`, or a
    /// `ucp_ep_flush` after the put), use [`Endpoint::write_with`] with
    /// `SendOptions { delivery_complete: true, .. }`.
    pub fn write(
        &mut self,
        peer: Peer,
        data: impl Into<Vec<u8>>,
        remote: RemoteAddr,
    ) -> Result<Request> {
        self.write_with(peer, data, remote, SendOptions::default())
    }

    /// RMA write with remote CQ data (`fi_writedata`) and/or delivery complete.
    pub fn write_with(
        &mut self,
        peer: Peer,
        data: impl Into<Vec<u8>>,
        remote: RemoteAddr,
        opts: SendOptions,
    ) -> Result<Request> {
        let data = data.into();
        trace!(peer = peer.index(), len = data.len(), "write");
        let pid = self.pid(peer)?;
        let r = self
            .node
            .get_mut()
            .endpoint_mut()
            .write(pid, data, remote, opts);
        let r = self.req(r, Some(peer));
        self.sent();
        r
    }

    /// RMA read of `len` bytes from the peer's `remote` (`fi_read`, `ucp_get_nbx`); the
    /// completion's `data` holds them (allocated when the read is posted: a `len` no
    /// allocation can honour is [`Error::BufferTooLarge`]).
    ///
    /// A `remote` the peer does not accept (a key it never issued or deregistered, a
    /// region it registered local-only, a range outside the region) is refused there and
    /// counted in its stats (`rdm.rx_requests_refused`); EFA RDM v4 has no packet that
    /// tells the requester, so the request does not complete: bound the wait
    /// ([`Endpoint::wait`] fails with [`Error::Timeout`] at the builder's wait limit),
    /// then end it with [`Endpoint::abort`]. The same holds for writes and atomics. What
    /// the requester can check is refused here: a `len` over
    /// [`crate::MAX_READ_SIZE`] ([`Error::ReadTooLarge`]), a range past the end of
    /// the address space ([`Error::RemoteRange`]).
    pub fn read(&mut self, peer: Peer, len: usize, remote: RemoteAddr) -> Result<Request> {
        trace!(peer = peer.index(), len, "read");
        let pid = self.pid(peer)?;
        self.alloc_check(len)?;
        let r = self.node.get_mut().endpoint_mut().read(pid, len, remote);
        let r = self.req(r, Some(peer));
        self.sent();
        r
    }

    fn atomic_len_check(&self, args: &AtomicArgs) -> usize {
        args.operand.len()
    }

    /// Atomic without result (`fi_atomic`).
    pub fn atomic(&mut self, peer: Peer, args: AtomicArgs, remote: RemoteAddr) -> Result<Request> {
        let n = self.atomic_len_check(&args);
        let pid = self.pid(peer)?;
        let r = self.node.get_mut().endpoint_mut().atomic_write(
            pid,
            args,
            remote,
            SendOptions::default(),
        );
        self.atomic_req(r, peer, n)
    }

    /// Fetching atomic (`fi_fetch_atomic`): the completion's `data` is the old value.
    pub fn fetch_atomic(
        &mut self,
        peer: Peer,
        args: AtomicArgs,
        remote: RemoteAddr,
    ) -> Result<Request> {
        let n = self.atomic_len_check(&args);
        let pid = self.pid(peer)?;
        let r = self
            .node
            .get_mut()
            .endpoint_mut()
            .atomic_fetch(pid, args, remote);
        self.atomic_req(r, peer, n)
    }

    /// Compare atomic (`fi_compare_atomic`): the completion's `data` is the old value.
    pub fn compare_atomic(
        &mut self,
        peer: Peer,
        args: AtomicArgs,
        remote: RemoteAddr,
    ) -> Result<Request> {
        let n = self.atomic_len_check(&args);
        let pid = self.pid(peer)?;
        let r = self
            .node
            .get_mut()
            .endpoint_mut()
            .atomic_compare(pid, args, remote);
        self.atomic_req(r, peer, n)
    }

    fn atomic_req(
        &mut self,
        r: std::result::Result<OpId, tagmatch_rdm::CallError>,
        peer: Peer,
        n: usize,
    ) -> Result<Request> {
        match r {
            Err(tagmatch_rdm::CallError::AtomicTooLarge) => {
                self.counters.call_errors += 1;
                Err(Error::AtomicTooLarge { len: n })
            }
            r => {
                let r = self.req(r, Some(peer));
                self.sent();
                r
            }
        }
    }

    /// Atomic fetch-and-add of a `u64` at `remote`; the completion's
    /// [`Completion::data_u64`] is the old value.
    pub fn fetch_add_u64(&mut self, peer: Peer, remote: RemoteAddr, add: u64) -> Result<Request> {
        self.fetch_atomic(
            peer,
            AtomicArgs {
                datatype: Datatype::U64,
                op: AtomicOp::Sum,
                operand: add.to_le_bytes().to_vec(),
                compare: None,
            },
            remote,
        )
    }

    /// Atomic compare-and-swap of a `u64` at `remote`: stores `new` if it holds
    /// `expected`; the completion's [`Completion::data_u64`] is the old value.
    pub fn compare_swap_u64(
        &mut self,
        peer: Peer,
        remote: RemoteAddr,
        expected: u64,
        new: u64,
    ) -> Result<Request> {
        self.compare_atomic(
            peer,
            AtomicArgs {
                datatype: Datatype::U64,
                op: AtomicOp::Cswap,
                operand: new.to_le_bytes().to_vec(),
                compare: Some(expected.to_le_bytes().to_vec()),
            },
            remote,
        )
    }

    fn convert(&mut self, mut c: tagmatch_rdm::Completion) -> Option<Completion> {
        if c.kind == OpKind::Recv && (c.data.len() as u64) > c.len {
            // The receive buffer is handed back at the message's length (no copy).
            c.data.truncate(c.len as usize);
        }
        let protocol = self.node.endpoint().protocol_of(c.op);
        if !self.adjust(&mut c) {
            // An injected send that succeeded: no completion is delivered, so none is
            // counted (`Counters::completed` counts completions delivered; the fast
            // path's injected sends count none either).
            return None;
        }
        self.counters.note(&c, protocol);
        if let Some(p) = protocol {
            debug!(op = c.op.0, kind = ?c.kind, protocol = ?p, len = c.len, ok = c.result.is_ok(), "complete");
        } else {
            trace!(op = c.op.0, kind = ?c.kind, len = c.len, ok = c.result.is_ok(), "complete");
        }
        Some(Completion::new(
            self.request(c.op),
            c.kind,
            c.result,
            c.data,
            c.len,
            c.tag,
            c.src,
            c.cq_data,
            protocol,
        ))
    }

    /// Moves the protocol node's completions into `ready` (a check of an empty queue when
    /// there are none, as on the fast path).
    #[inline]
    fn take_node(&mut self) {
        if self.node.has_completions() {
            self.take_node_slow();
        }
    }

    fn take_node_slow(&mut self) {
        while let Some(c) = self.node.get_mut().poll_completion() {
            if let Some(c) = self.convert(c) {
                // A receive slot's completion goes to its slot, not the queue.
                if !self.extra.slot_ops.is_empty() {
                    if let Some(i) = self.extra.slot_ops.remove(&c.request.op.0) {
                        self.slot_deliver(i as usize, c);
                        continue;
                    }
                }
                self.ready.push_back(c);
            }
        }
    }

    /// Does the IO without blocking; returns how many completions are ready.
    #[inline]
    pub fn progress(&mut self) -> Result<usize> {
        // `progress_timeout` with no timeout is one pass (it sleeps only with one).
        self.progress_pass(Duration::ZERO)
    }

    /// Does the IO, blocking at most `timeout` when nothing is ready at once (UDP waits in
    /// `poll(2)`, verbs on its completion channel, the in-process transport on the
    /// endpoint's doorbell, which peers ring when they hand it a packet or a fast-path
    /// message; [`Counters::idle_sleeps`](crate::Counters::idle_sleeps) counts those sleeps).
    #[inline]
    pub fn progress_timeout(&mut self, timeout: Duration) -> Result<usize> {
        if timeout.is_zero() {
            return self.progress_pass(Duration::ZERO);
        }
        self.progress_blocking(timeout)
    }

    /// [`Endpoint::progress_timeout`] with a timeout (out of line: a zero one is a pass).
    fn progress_blocking(&mut self, timeout: Duration) -> Result<usize> {
        if let (false, Device::Mem(d)) = (timeout.is_zero(), self.node.device()) {
            // In-process: the device has no descriptor to block on. Look for work with the
            // doorbell's epoch taken first; with nothing new, sleep until a peer rings (a
            // packet, a fast-path message, an acknowledgement, freed ring space) or the
            // timeout passes, then look again (see `tagmatch_transport::bell`).
            let bell = d.doorbell().clone();
            let seen = bell.epoch();
            let before = self.ready.len();
            self.progress_pass(Duration::ZERO)?;
            if self.ready.len() == before && self.in_process_idle() {
                self.counters.idle_sleeps += 1;
                if bell.wait(seen, timeout) {
                    self.device_poll_now();
                }
                self.progress_pass(Duration::ZERO)?;
            }
            return Ok(self.ready.len());
        }
        self.progress_pass(timeout)
    }

    /// Whether an in-process endpoint has nothing to do until a peer hands it something.
    /// A pass has just pumped the protocol's output into the device and flushed the fast
    /// path's lanes as far as they have room; what is left (a send waiting for ring space
    /// or for the peer's answer, a message waiting for the application to post a receive)
    /// moves only when a peer rings or the application calls in. So: the device is quiet.
    ///
    /// Not idle either while the protocol node has work of its own that no peer will ring
    /// for: what the fast path's claims and receives of protocol-path messages (after the
    /// device's pass) queued in the protocol endpoint, and refused packets those claims
    /// made admissible ([`Node::has_own_work`]); the next pass then polls the device.
    pub(crate) fn in_process_idle(&mut self) -> bool {
        if self.node.has_own_work() {
            self.device_poll_now();
            return false;
        }
        match self.node.device() {
            Device::Mem(d) => d.quiet(),
            _ => false,
        }
    }

    /// The in-process device's doorbell (`None` on other transports).
    #[cfg(feature = "async")]
    pub(crate) fn doorbell(&self) -> Option<std::sync::Arc<tagmatch_transport::bell::Doorbell>> {
        match self.node.device() {
            Device::Mem(d) => Some(d.doorbell().clone()),
            _ => None,
        }
    }

    /// A UDP or verbs endpoint with nothing to do: has its device wake `waker` when a
    /// datagram or completion arrives or a timer is due (`false`: not armed, the caller
    /// polls again).
    #[cfg(feature = "async")]
    pub(crate) fn wake_when_ready(&mut self, waker: &std::task::Waker) -> Result<bool> {
        // Work of its own (completions to take, output to hand the device, refused packets
        // now due for redelivery) needs another poll, not a readable descriptor.
        if self.node.has_own_work() {
            return Ok(false);
        }
        match self.node.get_mut().device_mut() {
            Device::Udp(d) => d.wake_when_ready(waker).map_err(Error::io("progress")),
            #[cfg(feature = "verbs")]
            Device::Verbs(d) => d.wake_when_ready(waker).map_err(Error::io("progress")),
            Device::Mem(_) => Ok(false),
        }
    }

    /// Counts a sleep of an idle endpoint (a wait, or a pending future).
    #[cfg(feature = "async")]
    pub(crate) fn note_idle_sleep(&mut self) {
        self.counters.idle_sleeps += 1;
    }

    /// One [`Endpoint::progress_timeout`] pass: the device (blocking at most `timeout`),
    /// then the fast path.
    #[inline]
    fn progress_pass(&mut self, timeout: Duration) -> Result<usize> {
        self.counters.progress_calls += 1;
        if self.device_due() {
            self.device_pass(timeout)?;
        }
        // (Out of line, and nothing to do without a fast path: not called then.)
        if self.fast.is_some() {
            self.fast_progress();
        }
        Ok(self.ready.len())
    }

    /// The device's share of a pass (out of line: with the fast path most passes skip it).
    #[inline(never)]
    fn device_pass(&mut self, timeout: Duration) -> Result<()> {
        self.node
            .get_mut()
            .progress(Some(timeout))
            .map_err(Error::io("progress"))?;
        self.take_node();
        self.device_polled();
        Ok(())
    }

    /// The next completion, in completion order.
    #[inline(always)]
    pub fn poll_completion(&mut self) -> Option<Completion> {
        if self.ready.is_empty() {
            self.take_node();
        }
        self.ready.pop_front()
    }

    /// Takes `req`'s completion if it is ready (others stay queued).
    #[inline]
    pub fn take_completion(&mut self, req: Request) -> Option<Completion> {
        self.take_node();
        match self.ready.front() {
            None => None,
            Some(c) if c.request == req => self.ready.pop_front(),
            Some(_) => self.take_completion_behind(req),
        }
    }

    /// [`Endpoint::take_completion`] when `req`'s is not the first one.
    fn take_completion_behind(&mut self, req: Request) -> Option<Completion> {
        let i = self.ready.iter().position(|c| c.request == req)?;
        if i + 1 == self.ready.len() {
            // The newest (a receive's completion behind a send's that came with its
            // message's ACK): no shifting.
            return self.ready.pop_back();
        }
        self.ready.remove(i)
    }

    /// Progresses until `req` completes (others stay queued for
    /// [`Endpoint::poll_completion`]); a failed operation is [`Error::Failed`], no
    /// completion within the builder's wait limit is [`Error::Timeout`], a request of
    /// another endpoint is [`Error::UnknownRequest`] (at once).
    pub fn wait(&mut self, req: Request) -> Result<Completion> {
        self.wait_with(req, &mut [])
    }

    /// [`Endpoint::wait`] with a limit.
    pub fn wait_for(&mut self, req: Request, limit: Duration) -> Result<Completion> {
        self.wait_inner(req, &mut [], limit)
    }

    /// [`Endpoint::wait`] that also progresses `others`: for several in-process endpoints
    /// driven by one thread (the in-process transport delivers only when the receiving
    /// endpoint progresses).
    pub fn wait_with(&mut self, req: Request, others: &mut [&mut Endpoint]) -> Result<Completion> {
        let limit = self.wait_limit;
        self.wait_inner(req, others, limit)
    }

    fn wait_inner(
        &mut self,
        req: Request,
        others: &mut [&mut Endpoint],
        limit: Duration,
    ) -> Result<Completion> {
        if req.ep != self.id {
            // Another endpoint's: it never completes here (as `cancel` answers).
            return Err(Error::UnknownRequest(req));
        }
        let _span = tracing::trace_span!("wait", request = req.id()).entered();
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if let Some(c) = self.take_completion(req) {
                return c.into_result();
            }
            // Spin briefly (lowest latency), then for up to `WAIT_YIELD_SPIN` keep looking
            // but yield the core at each round (a peer thread on this core runs; with a
            // core to itself this thread comes straight back), then let the device block
            // in poll(2) or on its doorbell, never past the limit.
            let slice = if spins < 64 || !others.is_empty() {
                Duration::ZERO
            } else if start.elapsed() < WAIT_YIELD_SPIN {
                std::thread::yield_now();
                Duration::ZERO
            } else {
                let left = limit.saturating_sub(start.elapsed());
                left.min(Duration::from_millis(5))
            };
            spins = spins.saturating_add(1);
            // In-process too, a non-zero slice sleeps until a peer hands this endpoint
            // something (see `progress_timeout`).
            self.progress_timeout(slice)?;
            for o in others.iter_mut() {
                o.progress()?;
            }
            if let Some(c) = self.take_completion(req) {
                return c.into_result();
            }
            if (spins >= 64 || spins % 16 == 0) && start.elapsed() >= limit {
                trace!(request = req.id(), "wait timed out");
                return Err(Error::Timeout {
                    request: req,
                    limit_ms: limit.as_millis(),
                });
            }
        }
    }

    /// Progresses until every datagram has been acknowledged (UDP) or `limit` passes;
    /// returns whether it got there. Call before exiting so peers get everything.
    /// Messages this endpoint refused for now (receiver not ready: its unexpected budget
    /// is full) do not keep it from getting there: only a receive can take them (see
    /// `tagmatch_transport::Node::flush`).
    pub fn flush(&mut self, limit: Duration) -> Result<bool> {
        let start = Instant::now();
        let r = self
            .node
            .get_mut()
            .flush(limit)
            .map_err(Error::io("flush"))?;
        self.take_node();
        // Fast-path messages waiting for ring space leave as the receiver drains.
        self.fast_progress();
        let bell = match self.node.device() {
            Device::Mem(d) => Some(d.doorbell().clone()),
            _ => None,
        };
        while !self.fast_idle() && start.elapsed() < limit {
            // The receiver rings this endpoint when it frees ring space.
            let seen = bell.as_ref().map(|b| b.epoch());
            self.fast_progress();
            if let (Some(b), Some(seen), false) = (&bell, seen, self.fast_idle()) {
                b.wait(
                    seen,
                    limit
                        .saturating_sub(start.elapsed())
                        .min(Duration::from_millis(5)),
                );
            }
        }
        Ok(r && self.fast_idle())
    }

    /// Counters of every layer: facade, RDM protocol, device.
    pub fn stats(&self) -> Stats {
        let ep = self.node.endpoint();
        let (tx, rx, inbound) = ep.in_flight();
        let (regions, sends, rdmas) = ep.resources();
        let mut matching = ep.matching_stats();
        // The protocol endpoint's messages received and not received yet, less the
        // claimed ones: those wait for their `mrecv`, not in the unexpected queue.
        let mut unexpected = inbound.saturating_sub(matching.claimed_depth);
        let mut lanes = (0, 0);
        let mut facade = self.counters.clone();
        if let Some(f) = &self.fast {
            // With the fast path the protocol endpoint's engine only passes protocol-path
            // messages on: every receive, probe and claim of the application is the fast
            // path's engine's, and so is the search of every message (each is claimed
            // into it). The protocol engine's claims (the fast path's own) and its
            // searches (the arrivals before the claim, the claims) would count them
            // twice.
            matching.claimed_depth = 0;
            matching.match_attempts = 0;
            matching.hits = 0;
            matching.misses = 0;
            matching.cancelled = 0;
            unexpected += f.add_matching(&mut matching);
            f.add_facade(&mut facade);
            lanes = f.lanes();
        }
        Stats {
            matching,
            offload: OffloadStats::software_only(&matching),
            facade,
            rdm: ep.stats(),
            tx_in_flight: tx,
            rx_in_flight: rx,
            unexpected,
            regions,
            device_sends_pending: sends,
            device_rdma_pending: rdmas,
            ready_completions: self.ready.len(),
            fast_lanes_in: lanes.0,
            fast_lanes_out: lanes.1,
            device: match self.node.device() {
                Device::Mem(d) => DeviceStats::Mem(d.rdma_stats()),
                Device::Udp(d) => DeviceStats::Udp(d.stats()),
                #[cfg(feature = "verbs")]
                Device::Verbs(d) => DeviceStats::Verbs(d.stats()),
            },
        }
    }
}

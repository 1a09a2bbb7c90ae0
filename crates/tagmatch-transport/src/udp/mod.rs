//! The UDP device: EFA SRD semantics over UDP sockets.
//!
//! - **Reliable, unordered, MTU-bounded.** Every frame but a pure acknowledgement carries a
//!   per-connection sequence number; the receiver acknowledges cumulatively plus a 64-bit
//!   selective-ack bitmap, piggybacked on every frame it sends, or in a pure ACK frame
//!   when no frame carried it within [`UdpConfig::ack_delay`] (delayed ACK: an answered
//!   request costs one datagram each way; frames out of order, duplicates and every
//!   [`ACK_EVERY`]-th frame are acknowledged at the end of the `progress` that received
//!   them; the retransmission timeout adds the delay). A frame is sent again when a frame
//!   sent more than [`REORDER_THRESHOLD`] transmissions after it is acknowledged first
//!   (RACK-like loss detection), or when its retransmission timeout fires (RTT-estimated,
//!   doubled on every retry, bounded; at most [`RTO_BURST`] frames per connection at once;
//!   timers are checked only after `progress` has read the socket, so an ACK that arrived
//!   while the owner was not progressing is never taken for a loss, and a timer that
//!   expired while the socket was not watched for a quarter of `min_rto` is re-armed once
//!   so that a peer descheduled alike can send its delayed ACK);
//!   a frame neither acknowledged nor reported held back (see [`RNR_HELD_MAX`]: a
//!   receiver-not-ready notice restarts it) for [`UdpConfig::peer_timeout`] fails the
//!   connection (its sends complete with `SendOutcome::Error`, its RDMA operations fail). Duplicates
//!   (retransmissions, duplicated datagrams) are suppressed by the receive window; frames
//!   are handed up in arrival order, which may differ from the send order (SRD does not
//!   order either). A send completes (`SendOutcome::Ok`) when the peer acknowledges it; a
//!   send beyond [`UdpConfig::max_queued`] queued frames is refused with
//!   `SendOutcome::Again`, which the endpoint retries (the "partial send").
//! - **Datagrams** fit a path MTU of [`UdpConfig::path_mtu`] (default 1500, up to 9000):
//!   `path_mtu − 48` bytes (IPv6 + UDP headers, so IPv4 fits too); the EFA packet MTU is that
//!   minus the 32-byte frame header ([`UdpDevice::mtu`]).
//! - **Software RDMA** ([`crate::soft_rdma`]): a read or write names `(key, addr, len)` of a
//!   region the peer registered; the serving device checks key and bounds and rejects (and
//!   counts) anything else, leaving the data untouched. Registrations get fresh keys whose
//!   upper 32 bits are random per device. A served read is streamed as the send window
//!   opens, its bytes read from memory whenever their frame is sent or resent (and its key
//!   checked again each time; a deregistered key turns the frame into the read's
//!   `READ_RESP` with `NoMemory`), so a served read costs no copy in user space. Between
//!   loopback addresses, software-RDMA frames (read data, write chunks) are datagrams of up
//!   to [`LOOPBACK_RDMA_DATAGRAM`] bytes (the loopback MTU is 64 KiB; a loopback device
//!   receives into 64 KiB buffers), elsewhere they fit the path MTU. Unacknowledged bytes
//!   per connection are bounded by half the socket's receive buffer (so a window of large
//!   datagrams does not overflow the peer's) and by [`MAX_INFLIGHT_BYTES`].
//! - **Bounded state**: at most [`UdpConfig::max_conns`] connections; a receive window of
//!   [`RECV_WINDOW`] frames per connection.
//! - **Non-blocking socket, batched syscalls** (`sendmmsg`/`recvmmsg` on Linux; `sendmsg`
//!   and `recvfrom` for one datagram), received datagrams parsed in place. No staging copy
//!   on the way out: a frame's header is built when it is sent and gathered with its body
//!   (`sendmsg` iovecs), a served read's bytes straight from the region. On the way in,
//!   while reads of ours are in flight, datagrams are peeked at and a new `READ_DATA`
//!   frame's data is received straight into the read's destination (Linux and Android);
//!   once one has been, the read's next datagram is expected and received in one call
//!   into the read's next range (no peek; anything else is put back together), unless
//!   the destination is a region registered for peers (`remote`), which they may read
//!   meanwhile and must never see bytes nobody wrote there; otherwise an RDMA payload is
//!   copied once, from the receive buffer to its place. A blocking
//!   `progress` busy-polls for [`UdpConfig::spin`] (default zero) when an answer is
//!   expected, then waits in `ppoll` until the next retransmission or ACK deadline: no
//!   busy-spin when idle.
//! - **A socket per peer** ([`UdpConfig::connect_peers`], Linux and Android): the first
//!   peers get a socket of their own, bound to the device's address beside its socket
//!   and `connect`ed to the peer (`SO_REUSEPORT` is set on the device's sockets only
//!   while one binds, so nothing else can bind the address outside those moments; a
//!   process of the same user that binds it with `SO_REUSEPORT` in one of them keeps it,
//!   see [`sock::Sock::connect_beside`]). Their datagrams go without
//!   a route look-up each and come in through the kernel's demultiplexing of connected
//!   sockets: 0.3–0.8 µs less per one-way trip on loopback. Every socket is read; the one
//!   that received last first, the others every few busy-polls, after a wait that a
//!   socket ended, and before timers are judged. A failed connection's socket is closed
//!   and its slot goes to the next peer.
//! - **Spliced reads** ([`UdpConfig::splice`], Linux and Android): when reads of a peer
//!   with a socket of its own stream (another one queued behind a read, or one before it
//!   still finishing), their datagrams of at least [`SPLICE_MIN`] bytes (loopback's) go
//!   with `vmsplice` + `splice` ([`sock::Sock::send_spliced`]): the kernel references
//!   the region's pages, and the receiver's copy is the only one. A lone read (a
//!   ping-pong's) is copied: its bytes then cross two copies on two cores at once,
//!   which finishes it sooner than the receiver's copy alone. Spliced datagrams end
//!   where their data has touched [`sock::SPLICE_PAGES`] pages, so that each reaches the
//!   socket in one piece (else the kernel checksums it in software); the reader places
//!   a datagram longer than the one it expected by moving its tail. The region is read
//!   when the peer receives the datagram: RDMA rules already forbid changing it while
//!   the read is in progress, and the read's final status waits until every datagram of
//!   it is acknowledged, then fails the read if the key was deregistered meanwhile (its
//!   memory may have been written since).
//! - **Address**: the socket address and a random connid ([`crate::UdpAddr`],
//!   `udp://127.0.0.1:4000/0x1a2b3c4d`), which is also the endpoint's raw address.
//!
//! # Wire format
//!
//! Each UDP datagram is one frame: a 32-byte header, then the body. Little-endian.
//!
//! | Offset | Size | Field | Meaning |
//! |---|---|---|---|
//! | 0 | 2 | magic | `"TM"` (`54 4D`) |
//! | 2 | 1 | version | 1 |
//! | 3 | 1 | kind | 0 ACK (no body, `seq` 0), 1 PKT (body: one EFA packet), 2–6 software RDMA (bodies in [`crate::soft_rdma`]), 7 RNR (receiver not ready, `seq` 0, body: the held-back sequence numbers, u32 each) |
//! | 4 | 4 | src_connid | sender's connid |
//! | 8 | 4 | dst_connid | receiver's connid as the sender knows it; frames for another connid are dropped (a restarted peer) |
//! | 12 | 4 | seq | sequence number of this frame on the connection, from 1; 0 only for ACK |
//! | 16 | 4 | ack | every seq ≤ `ack` of the other direction was received |
//! | 20 | 8 | sack | bit *i*: seq `ack + 2 + i` was received too |
//! | 28 | 2 | body_len | bytes after the header; must equal the datagram length − 32 |
//! | 30 | 2 | reserved | 0 |
//! | 32 | body_len | body | |
//!
//! A connection is identified by the peer's socket address and connid; it carries at most
//! 2³² − 1 frames in each direction (then it is failed like a dead peer). Datagrams that do
//! not parse are counted and dropped; nothing panics on network input.

pub mod frame;
pub mod shim;
pub mod sock;
mod socks;
mod window;

#[cfg(test)]
mod review_direct13;
#[cfg(test)]
mod review_fast14;
#[cfg(test)]
mod review_fast14b;

use foldhash::{HashMap, HashSet};
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tagmatch_rdm::{MemHandle, SendOutcome, SendToken, Transmit};
use tagmatch_wire::efa::RawAddr;

use crate::addr::UdpAddr;
use crate::device::{DeviceEvent, MemoryAccess, RdmDevice};
use crate::rng::{entropy, XorShift};
use crate::soft_rdma::{
    RdmaMsg, RdmaStats, RdmaStatus, SoftRdma, KIND_READ_DATA, KIND_READ_RESP, KIND_WRITE,
    MAX_RDMA_HDR, READ_DATA_HDR, WRITE_HDR,
};
use frame::{Header, HDR_LEN, KIND_ACK, KIND_PKT, KIND_RNR};
use shim::{Shim, ShimConfig, ShimStats};
use sock::{Sock, SockStats};
use socks::Socks;
use window::SeqWindow;

/// Longest header of a datagram gathered at send time: the frame header and a
/// `READ_DATA` message header (the read's bytes follow from the region).
const HEAD_MAX: usize = HDR_LEN + READ_DATA_HDR;

/// IPv6 + UDP header bytes subtracted from the path MTU.
pub const IP_UDP_OVERHEAD: usize = 48;
/// Smallest accepted path MTU.
pub const MIN_PATH_MTU: usize = 576;
/// Largest accepted path MTU.
pub const MAX_PATH_MTU: usize = 9000;
/// Most frames of one connection sent again when their retransmission timer fires at
/// once (the rest wait for the ACKs of these, or one more RTO).
pub const RTO_BURST: usize = 16;
/// Transmissions a later-sent, acknowledged frame must be ahead of an unacknowledged one
/// for the latter to count as lost (TCP's duplicate-ACK threshold).
pub const REORDER_THRESHOLD: u64 = 3;
/// Largest software-RDMA datagram (read data, write chunks) between loopback addresses:
/// the loopback interface's MTU is 64 KiB, so these are not fragmented, and a 1 MiB read
/// takes 17 datagrams instead of 740 at a 1500-byte path. (32,000 bytes measured faster
/// while each byte was copied three times in user space; since the bytes go from the
/// region into the socket and from the receive buffer into the destination, 65,000 takes
/// 10-20 % less CPU per MiB than 32,000 through `tagmatch perf`.) Other addresses use the
/// path MTU.
pub const LOOPBACK_RDMA_DATAGRAM: usize = 65_000;
/// Most body bytes unacknowledged per connection (less if the socket's receive buffer is
/// small). More in flight only fills caches and socket buffers: on loopback, 4 MiB in
/// flight streamed 1 MiB reads at half the rate of 1 MiB while each byte was copied
/// three times in user space; without those copies, 2 MiB took about 9 % less CPU per
/// MiB than 1 MiB (4 interleaved runs, no retransmission either way).
pub const MAX_INFLIGHT_BYTES: usize = 2 << 20;
/// How far beyond the cumulative ack a received sequence number may be.
pub const RECV_WINDOW: u32 = 1 << 16;
/// Packets the endpoint refused (receiver not ready, [`RdmDevice::refuse`]) held per
/// connection for redelivery. Beyond it, new REQ packet frames (new messages) of that
/// connection are left unacknowledged (control packets always get through) and reported
/// in a receiver-not-ready notice ([`frame::KIND_RNR`]) at the end of the `progress`, so
/// the sender keeps them and its retransmission timer, with its backoff, retries them —
/// the RNR retry of an EFA device. (The next frame in order is
/// taken up to twice this many: held packets may be waiting for it.) Held memory per
/// connection stays below twice this many packets plus what one `progress` receives (at most the sender's
/// unacknowledged window, [`MAX_INFLIGHT_BYTES`]). The notice proves the receiver alive:
/// the sender's peer timeout for those frames restarts with it, so a receiver that is
/// progressed but stays not ready for any length of time is never taken for dead (the
/// unlimited RNR retry count 7 of InfiniBand); one that stops answering altogether still
/// fails the connection one [`UdpConfig::peer_timeout`] after its last notice.
pub const RNR_HELD_MAX: usize = 64;
/// Most refused sequence numbers a connection reports in one receiver-not-ready notice
/// (4 bytes each: the notice fits the smallest path MTU); more refused before the notice
/// goes are not named in it (their sender's timer sends them again, and they are
/// refused and reported then).
pub const RNR_REPORT_MAX: usize = 256;
/// Received in-order frames after which a pure ACK goes at the end of the `progress` that
/// received them instead of waiting for [`UdpConfig::ack_delay`] (TCP acknowledges every
/// second full segment at once, QUIC every second ack-eliciting packet): a stream is
/// acknowledged as it arrives, only a lone frame waits for a reply to carry its ACK.
pub const ACK_EVERY: u32 = 2;
/// Frames whose body is at least this long (software-RDMA datagrams on loopback, up to
/// [`LOOPBACK_RDMA_DATAGRAM`]; a path-MTU frame is shorter) are acknowledged by bytes
/// rather than by [`ACK_EVERY`]: a pure ACK goes at the end of the `progress` that
/// received the quarter of the send window's bytes (see `UdpDevice::ack_bytes`), else
/// after [`UdpConfig::ack_delay`] or on the next data frame. Two 65,000-byte datagrams
/// per ACK had the receiver of a 1 MiB stream send 6.5 pure ACKs per MiB, a `sendmsg`
/// through the loopback path each, and the sender take them in.
pub const ACK_BULK_FRAME: usize = 16 << 10;

/// How many bodies of acknowledged frames a device keeps to receive packets into (see
/// `UdpDevice::spare`).
const SPARE_BODIES: usize = 64;

/// Longest a blocking `progress` busy-polls while a spliced read's status waits for the
/// acknowledgement of its data (see `UdpDevice::spin`).
const FINISH_SPIN: Duration = Duration::from_micros(50);

/// Smallest payload of a served read's datagram spliced from its region
/// ([`UdpConfig::splice`]): three system calls per datagram pay off against copying
/// 16 KiB or more (loopback's 65,000-byte datagrams), not against a path-MTU datagram.
pub const SPLICE_MIN: usize = 16 << 10;

/// Most sockets connected to one peer each ([`UdpConfig::connect_peers`]).
pub const MAX_CONNECT_PEERS: usize = 64;

/// A one-datagram receive that finds the socket that received last empty reads the
/// other sockets every this many times (see `UdpDevice::receive`).
const COLD_EVERY: u32 = 4;

/// Width of the first batched receive after a one-datagram receive found one.
const RX_PROBE: usize = 4;

/// UDP device settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpConfig {
    /// Address to bind: a concrete IP (it becomes the printed address); port 0 picks one.
    pub bind: SocketAddr,
    /// Path MTU (576..=9000; default 1500).
    pub path_mtu: usize,
    /// The connid; `None` draws a random one.
    pub connid: Option<u32>,
    /// Unacknowledged frames per connection (the send window).
    pub max_inflight: usize,
    /// Frames queued per connection (window + waiting) before a send gets `Again`.
    pub max_queued: usize,
    /// Retransmission timeout before the first RTT sample.
    pub initial_rto: Duration,
    /// Smallest retransmission timeout.
    pub min_rto: Duration,
    /// Largest retransmission timeout (after backoff).
    pub max_rto: Duration,
    /// A frame unacknowledged this long fails its connection (from its first transmission,
    /// or from the peer's latest receiver-not-ready notice for it).
    pub peer_timeout: Duration,
    /// Datagrams per `sendmmsg`/`recvmmsg` call (a receive call takes at most
    /// [`sock::RECV_BATCH_MAX`]).
    pub batch: usize,
    /// Most connections (peer socket address and connid); frames that would open one more
    /// are dropped and counted, so spoofed sources cannot grow the table without bound.
    pub max_conns: usize,
    /// Socket-layer fault injection (tests).
    pub shim: Option<ShimConfig>,
    /// Longest a received frame waits for a data frame to carry its acknowledgement before
    /// a pure ACK is sent (TCP's delayed ACK, QUIC's `max_ack_delay`): a request answered
    /// within it costs one datagram each way instead of two. Frames received out of order,
    /// duplicates and every [`ACK_EVERY`]-th frame are acknowledged at once. At most half of
    /// `min_rto` and of `initial_rto` (clamped at bind); the retransmission timeout adds it,
    /// on the assumption that the peer delays its ACKs no longer (both ends of a
    /// deployment use the same setting). A send completes when its ACK arrives, so a
    /// one-way send the peer does not answer completes up to this much later. Zero: a pure
    /// ACK at the end of every `progress` that received something. Default 200 µs.
    pub ack_delay: Duration,
    /// How long `progress` busy-polls the socket (non-blocking receives) before it blocks
    /// in `poll(2)`, when it would block and a frame of this device is unacknowledged or an
    /// RDMA operation is in flight, i.e. an answer is expected soon (UCX and libfabric
    /// progress loops spin likewise): an answer that arrives within it costs no wake-up.
    /// Bounded by the `progress` timeout and the next timer; an idle device (nothing in
    /// flight) never spins. Worth it only where each communicating thread has a core of
    /// its own: where threads outnumber cores, the spin holds the core the peer needs to
    /// answer (on a shared 2-core machine, 50 µs made the two-thread ping-pong of
    /// `examples/udp_bench.rs` 5× slower, 130 against 25 µs round trip). Default zero:
    /// block at once; owners that busy-poll do it by calling `progress` with a zero
    /// timeout, as `tagmatch perf` does.
    pub spin: Duration,
    /// Peers given a socket of their own, `connect`ed to them and bound to the device's
    /// address beside the socket every peer reaches (Linux and Android; at most
    /// [`MAX_CONNECT_PEERS`]): their datagrams go without a route look-up each, and
    /// come in through the kernel's demultiplexing of connected sockets, 0.3–0.8 µs less
    /// per one-way trip on loopback. The first peers to open a connection get them; the
    /// others share the device's socket. Each costs a receive call per `progress` that
    /// reads a batch (a busy-poll that reads one datagram reads the socket that
    /// received last, and the others every fourth time it finds nothing). Zero: one
    /// socket for every peer. Default 4.
    pub connect_peers: usize,
    /// Send the data of served RDMA reads in datagrams of at least [`SPLICE_MIN`] bytes
    /// (loopback's) to peers with a connected socket by splicing it from the region
    /// (`vmsplice` + `splice`, Linux and Android): the kernel references the region's
    /// pages instead of copying them, so on loopback the receiver's copy is the only one.
    /// The region's bytes are then read when the peer receives the datagram, which RDMA
    /// rules allow (a region must not change while a read of it is in progress). Only
    /// streams of reads are spliced (another read queued behind one, or one before it
    /// still finishing); a lone read is copied (see the module documentation). Default
    /// on.
    pub splice: bool,
    /// Most bytes registered at once (local and remote registrations alive), as a verbs
    /// device's registrations count against the locked-memory limit (`RLIMIT_MEMLOCK`;
    /// `ibv_reg_mr` then fails with `ENOMEM`): a registration that would pass it fails
    /// ([`DeviceEvent::RegisterDone`] with an error; counted in
    /// [`RdmaStats::refused_registrations`]). The RDM endpoint answers a long-read
    /// message whose receive buffer it cannot register with READ_NACK, and the sender
    /// falls back to long-CTS (efa-rdm-protocol-v4 §4.7). Default `u64::MAX`
    /// (unlimited).
    pub max_registered_bytes: u64,
}

impl UdpConfig {
    /// Defaults, bound to `bind`.
    pub fn new(bind: SocketAddr) -> UdpConfig {
        UdpConfig {
            bind,
            path_mtu: 1500,
            connid: None,
            max_inflight: 256,
            max_queued: 8192,
            initial_rto: Duration::from_millis(50),
            min_rto: Duration::from_millis(25),
            max_rto: Duration::from_millis(1000),
            peer_timeout: Duration::from_secs(10),
            batch: 32,
            max_conns: 4096,
            shim: None,
            ack_delay: Duration::from_micros(200),
            spin: Duration::ZERO,
            connect_peers: 4,
            splice: true,
            max_registered_bytes: u64::MAX,
        }
    }
}

/// UDP device counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UdpStats {
    /// Socket counters (datagrams, syscalls).
    pub sock: SockStats,
    /// Software-RDMA counters (served and rejected requests).
    pub rdma: RdmaStats,
    /// Fault-shim counters.
    pub shim: ShimStats,
    /// Sequenced frames sent for the first time.
    pub frames_sent: u64,
    /// Frames sent again after a timeout.
    pub retransmits: u64,
    /// Frames sent again because a later-sent frame was acknowledged first.
    pub fast_retransmits: u64,
    /// Pure ACK frames sent.
    pub acks_sent: u64,
    /// Sequenced frames received and handed up.
    pub frames_received: u64,
    /// Received frames already seen (suppressed).
    pub duplicates: u64,
    /// Datagrams that are not frames.
    pub bad_frames: u64,
    /// Frames for another connid.
    pub wrong_connid: u64,
    /// Frames too far ahead of the receive window (dropped, retransmitted later).
    pub beyond_window: u64,
    /// Packets the endpoint refused (receiver not ready) and the device held for
    /// redelivery, counted each time.
    pub rnr_held: u64,
    /// Packet frames left unacknowledged because [`RNR_HELD_MAX`] packets of their
    /// connection were held (the sender retransmits them).
    pub rnr_dropped: u64,
    /// Receiver-not-ready notices sent (frames naming refused sequence numbers).
    pub rnr_sent: u64,
    /// Frames of ours the peer reported held back (receiver not ready): kept and sent
    /// again after a backoff, with the peer timeout restarted.
    pub rnr_received: u64,
    /// `READ_DATA` datagrams whose data was received straight into the read's destination
    /// (no copy through a receive buffer; Linux and Android).
    pub rx_placed: u64,
    /// Of [`UdpStats::rx_placed`], those received without a peek: the datagram was the
    /// one expected next (the continuation of the read last placed into) and went
    /// straight to its place in one receive call (Linux and Android).
    pub rx_expected: u64,
    /// Datagrams received where the next datagram of a read was expected that turned out
    /// to be something else (reassembled from the scattered pieces and handled as usual).
    pub rx_unexpected: u64,
    /// Frame bodies that did not parse (RDMA messages).
    pub bad_bodies: u64,
    /// Sends refused with `Again` (queue full).
    pub send_again: u64,
    /// Connections failed (peer timeout).
    pub peers_failed: u64,
    /// Frames dropped because they would open a connection beyond `max_conns`.
    pub conn_limit: u64,
    /// Blocking `progress` calls whose busy-poll ([`UdpConfig::spin`]) received something,
    /// so they did not block in `poll(2)`.
    pub spin_hits: u64,
    /// Sockets connected to one peer opened (see [`UdpConfig::connect_peers`]).
    pub peer_sockets: u64,
    /// Sockets connected to one peer that could not be opened (the peer shares the
    /// device's socket).
    pub peer_socket_errors: u64,
}

/// A frame's body.
#[derive(Debug)]
enum Body {
    /// The bytes.
    Bytes(Vec<u8>),
    /// `READ_DATA` of a served read: `len` bytes at `off` of region `mem` (registered under
    /// `key`), read from memory each time the frame is sent (as a NIC's DMA would, with
    /// the key checked again; a range no longer readable turns the frame into the read's
    /// `READ_RESP` with `NoMemory`, see `UdpDevice::check_frames`). No copy of the bytes
    /// is kept: `sendmsg` gathers them from the region.
    Read {
        id: u64,
        offset: u64,
        key: u64,
        mem: MemHandle,
        off: u64,
        len: u64,
        /// Sent spliced from the region (its read's choice, see `ReadJob::splice`).
        splice: bool,
    },
}

impl Body {
    /// Whether it is a served read's data (read from the region when sent).
    fn is_read(&self) -> bool {
        matches!(self, Body::Read { .. })
    }

    fn len(&self) -> usize {
        match self {
            Body::Bytes(b) => b.len(),
            Body::Read { len, .. } => READ_DATA_HDR + *len as usize,
        }
    }
}

/// A queued datagram: built already (pure ACKs, and everything when the fault shim is on),
/// or a reference to an unacknowledged frame, whose header (with the acknowledgement
/// state of the moment) is built when it is sent and whose body is sent from where it lies.
#[derive(Debug, Clone)]
enum Out {
    /// A whole datagram, to a peer, and the socket slot of the peer's connection when it
    /// was queued (see `socks`; the listener if that slot is another peer's by then).
    Dgram(SocketAddr, usize, Vec<u8>),
    /// Frame `seq` of a connection (skipped if acknowledged by then); `true`: its body was
    /// a served read's when queued (see `UdpDevice::check_frames`).
    Frame(ConnKey, u64, bool),
}

#[derive(Debug)]
struct TxFrame {
    kind: u8,
    body: Body,
    token: Option<SendToken>,
    last_sent: Instant,
    deadline: Instant,
    retries: u32,
    /// Receiver-not-ready notices received for it (see [`frame::KIND_RNR`]).
    rnr: u32,
    /// When the peer last proved it has this frame in view: its first transmission, or
    /// the latest receiver-not-ready notice for it. The peer timeout runs from here.
    alive: Instant,
    /// Its timer expired while the device was not progressed and was re-armed once
    /// instead of firing (see `UdpDevice::timers`).
    deferred: bool,
    /// Transmission order on the connection (of the latest copy).
    order: u64,
}

impl TxFrame {
    /// A frame waiting to enter its connection's window; its times are set then
    /// (`now` only fills them).
    fn waiting(kind: u8, body: Body, token: Option<SendToken>, now: Instant) -> TxFrame {
        TxFrame {
            kind,
            body,
            token,
            last_sent: now,
            deadline: now,
            retries: 0,
            rnr: 0,
            alive: now,
            deferred: false,
            order: 0,
        }
    }
}

#[derive(Debug)]
struct Conn {
    peer: RawAddr,
    sock: SocketAddr,
    /// The socket slot its datagrams go through (see `socks`): its peer's connected
    /// socket, or the listener (0).
    via: usize,
    next_seq: u64,
    unacked: SeqWindow<TxFrame>,
    waiting: VecDeque<TxFrame>,
    srtt: Option<Duration>,
    rttvar: Duration,
    cum: u32,
    ooo: HashSet<u32>,
    ack: AckState,
    tx_order: u64,
    reads: VecDeque<ReadJob>,
    /// Served reads whose data frames were all queued and may have been spliced: their
    /// final status waits until those frames are acknowledged (see `fill_windows_due`),
    /// while the reads after them go on.
    finishing: Vec<ReadJob>,
    /// Body bytes of the frames in `unacked`.
    unacked_bytes: usize,
    /// Packets the endpoint refused for now, redelivered at the `progress` after
    /// `retry_refused`.
    held: VecDeque<Vec<u8>>,
    /// REQ packet frames handed up since the current `progress` began (the endpoint has
    /// not seen them yet, so they may be refused too).
    fresh: usize,
    /// Sequence numbers of frames refused (receiver not ready) and not reported to the
    /// sender yet; at most [`RNR_REPORT_MAX`].
    rnr: Vec<u32>,
}

impl Conn {
    fn new(peer: RawAddr, sock: SocketAddr, via: usize) -> Conn {
        Conn {
            peer,
            sock,
            via,
            next_seq: 1,
            unacked: SeqWindow::default(),
            waiting: VecDeque::new(),
            srtt: None,
            rttvar: Duration::ZERO,
            cum: 0,
            ooo: HashSet::default(),
            ack: AckState::default(),
            tx_order: 0,
            reads: VecDeque::new(),
            finishing: Vec::new(),
            unacked_bytes: 0,
            held: VecDeque::new(),
            fresh: 0,
            rnr: Vec::new(),
        }
    }

    fn sack(&self) -> u64 {
        if self.ooo.is_empty() {
            return 0;
        }
        let mut s = 0u64;
        for i in 0..64u32 {
            if let Some(q) = self.cum.checked_add(2 + i) {
                if self.ooo.contains(&q) {
                    s |= 1 << i;
                }
            }
        }
        s
    }

    /// The retransmission timeout: RFC 6298's `SRTT + 4·RTTVAR`, plus the peer's ACK delay
    /// (QUIC's PTO adds `max_ack_delay` likewise; a lone frame's ACK may wait that long).
    fn rto(&self, cfg: &UdpConfig) -> Duration {
        rto_of(self.srtt, self.rttvar, cfg)
    }

    /// Accounts for frame `f`, acknowledged at `now` and removed from the window: its
    /// bytes, an RTT sample, its transmission order into `latest`, its send completion.
    fn on_acked(
        &mut self,
        f: TxFrame,
        now: Instant,
        latest: &mut Option<u64>,
        events: &mut VecDeque<DeviceEvent>,
        spare: &mut Vec<Vec<u8>>,
        datagram_max: usize,
    ) {
        self.unacked_bytes -= f.body.len();
        if f.retries == 0 {
            // Only frames sent once say which copy was acknowledged (an ACK of a
            // retransmitted frame may be for the first copy).
            *latest = Some(latest.map_or(f.order, |l| l.max(f.order)));
            // Karn: RTT samples from frames sent once only.
            let r = now.duration_since(f.last_sent);
            match self.srtt {
                None => {
                    self.srtt = Some(r);
                    self.rttvar = r / 2;
                }
                Some(s) => {
                    let d = s.abs_diff(r);
                    self.rttvar = (self.rttvar * 3 + d) / 4;
                    self.srtt = Some((s * 7 + r) / 8);
                }
            }
        }
        if let Some(token) = f.token {
            events.push_back(DeviceEvent::SendDone {
                token,
                outcome: SendOutcome::Ok,
            });
        }
        if let Body::Bytes(b) = f.body {
            if spare.len() < SPARE_BODIES && b.capacity() <= datagram_max {
                spare.push(b);
            }
        }
    }

    fn idle(&self) -> bool {
        self.idle_apart_from_held() && self.held.is_empty()
    }

    /// Idle but for the packets the endpoint refused and this connection holds.
    fn idle_apart_from_held(&self) -> bool {
        self.unacked.is_empty()
            && self.waiting.is_empty()
            && self.reads.is_empty()
            && self.finishing.is_empty()
            && self.rnr.is_empty()
            && !self.ack.needed()
    }
}

/// [`Conn::rto`] of a connection's `srtt` and `rttvar` (for a caller that borrows the
/// connection's window mutably).
#[inline]
fn rto_of(srtt: Option<Duration>, rttvar: Duration, cfg: &UdpConfig) -> Duration {
    match srtt {
        None => cfg.initial_rto,
        Some(s) => (s + 4 * rttvar + cfg.ack_delay).clamp(cfg.min_rto, cfg.max_rto),
    }
}

/// How a received sequenced frame relates to the receive window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrival {
    /// The next expected frame, with no gap behind it.
    InOrder,
    /// Ahead of a gap, filling one, a duplicate, or beyond the window: the sender learns
    /// about losses (or that its retransmission was not needed) from the ACK, at once.
    Urgent,
}

/// The receive side's acknowledgement duty on one connection (sans-IO: every decision
/// takes the time as an argument).
///
/// A received frame is acknowledged by the next frame sent on the connection (every
/// header carries `ack` and `sack`), or by a pure ACK: at the end of the `progress` that
/// received it if it was [`Arrival::Urgent`], the [`ACK_EVERY`]-th unacknowledged short one
/// or brought the unacknowledged bulk bytes to a quarter window ([`ACK_BULK_FRAME`]), else
/// once [`UdpConfig::ack_delay`] has passed since the first unacknowledged arrival.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct AckState {
    /// Frames received since the last frame sent to the peer.
    pending: u32,
    /// When a pure ACK is due if no data frame carries it first.
    due: Option<Instant>,
    /// Of `pending`, frames shorter than [`ACK_BULK_FRAME`].
    small: u32,
    /// Body bytes of the pending frames of [`ACK_BULK_FRAME`] bytes or more.
    bulk: usize,
}

impl AckState {
    /// Notes a received frame at `now` whose body is `len` bytes long; a pure ACK is due
    /// at once when it is urgent, the [`ACK_EVERY`]-th short frame or brings the bulk
    /// frames' bytes to `bulk_bytes` ([`ACK_BULK_FRAME`]).
    fn on_frame(
        &mut self,
        arrival: Arrival,
        now: Instant,
        delay: Duration,
        len: usize,
        bulk_bytes: usize,
    ) {
        self.pending = self.pending.saturating_add(1);
        if len >= ACK_BULK_FRAME {
            self.bulk = self.bulk.saturating_add(len);
        } else {
            self.small = self.small.saturating_add(1);
        }
        let due =
            if arrival == Arrival::Urgent || self.small >= ACK_EVERY || self.bulk >= bulk_bytes {
                now
            } else {
                now + delay
            };
        self.due = Some(self.due.map_or(due, |d| d.min(due)));
    }

    /// Makes the pure ACK of what was received due now (the peer waits for it).
    fn hurry(&mut self, now: Instant) {
        if self.pending > 0 {
            self.due = Some(self.due.map_or(now, |d| d.min(now)));
        }
    }

    /// Whether something received is unacknowledged.
    fn needed(&self) -> bool {
        self.pending > 0
    }

    /// Whether a pure ACK should go now.
    fn ready(&self, now: Instant) -> bool {
        self.due.is_some_and(|d| d <= now)
    }

    /// A frame (data or pure ACK) carrying the current `ack`/`sack` was sent.
    fn sent(&mut self) {
        *self = AckState::default();
    }
}

/// A peer's accepted RDMA read, streamed as the send window opens (the bytes are read
/// from memory when their frame is built, as a NIC's DMA would).
#[derive(Debug)]
struct ReadJob {
    id: u64,
    key: u64,
    mem: MemHandle,
    off: u64,
    len: u64,
    sent: u64,
    /// Whether its datagrams are spliced, decided when its first one is queued (see
    /// `UdpDevice::fill_windows_due`).
    splice: Option<bool>,
}

type ConnKey = (SocketAddr, u32);

/// A datagram as `UdpDevice::flush` gathers it: (queue index, socket slot, destination,
/// frame header and message header, their length, payload).
type Piece<'a> = (
    usize,
    usize,
    SocketAddr,
    [u8; HEAD_MAX],
    usize,
    &'a [u8],
    bool,
);

/// The destination and iovecs of a gathered datagram.
fn gather<'a>(
    (_, _, to, head, head_len, payload, _): &'a Piece<'a>,
) -> (SocketAddr, [IoSlice<'a>; 2]) {
    (
        *to,
        [IoSlice::new(&head[..*head_len]), IoSlice::new(payload)],
    )
}

/// Bytes from offset `off` of region `h` to the end of the [`sock::SPLICE_PAGES`]-th 4 KiB
/// page they touch (a bound for larger pages too); unbounded if the region is gone.
fn splice_span(mem: &dyn MemoryAccess, h: MemHandle, off: u64) -> u64 {
    const PAGE: usize = 4096;
    match (mem.region(h), usize::try_from(off)) {
        (Some(r), Ok(off)) => {
            let at = (r.as_ptr() as usize).wrapping_add(off);
            (sock::SPLICE_PAGES * PAGE - at % PAGE) as u64
        }
        _ => u64::MAX,
    }
}

/// The socket slot for a new connection with `peer` (see [`Socks::attach`]); a socket
/// opened now is added to the readiness thread's, if one runs.
fn attach(socks: &mut Socks, watch: &Option<crate::watch::Watcher>, peer: SocketAddr) -> usize {
    let (via, opened) = socks.attach(peer, watch.is_some());
    if let (Some(w), Some(fd)) = (watch, opened) {
        w.add(fd);
    }
    via
}

/// What [`UdpDevice::ack_conn`] needs of the device besides the connection.
struct AckCtx<'a> {
    cfg: &'a UdpConfig,
    dmax: usize,
    events: &'a mut VecDeque<DeviceEvent>,
    spare: &'a mut Vec<Vec<u8>>,
    fill_due: &'a mut bool,
    stats: &'a mut UdpStats,
    shim: &'a mut Option<Shim<Out>>,
    txq: &'a mut VecDeque<Out>,
}

/// The [`AckCtx`] of a device (`$d`), borrowing its fields apart from `conns`.
macro_rules! ack_ctx {
    ($d:expr) => {
        AckCtx {
            dmax: $d.cfg.path_mtu - IP_UDP_OVERHEAD, // (`datagram_max`)
            cfg: &$d.cfg,
            events: &mut $d.events,
            spare: &mut $d.spare,
            fill_due: &mut $d.fill_due,
            stats: &mut $d.stats,
            shim: &mut $d.shim,
            txq: &mut $d.txq,
        }
    };
}

/// The UDP device. See the module documentation.
#[derive(Debug)]
pub struct UdpDevice {
    cfg: UdpConfig,
    /// The listener and the peers' connected sockets (see [`UdpConfig::connect_peers`]).
    socks: Socks,
    /// The socket slot that received last: read first (see `receive`).
    rx_hot: usize,
    /// The socket slot whose send buffer was full at the last flush (frames wait in
    /// `txq`): the only one a blocking wait asks to be woken for when writable.
    tx_blocked: Option<usize>,
    /// A frame was queued for a peer with nothing in flight: [`RdmDevice::send_soon`]
    /// sends it (cleared by every flush).
    send_soon: bool,
    /// `send_soon` sent since the last `progress`: the next frames to peers on the shared
    /// socket wait for `progress`, batched (a fan-out of sends to many idle peers makes
    /// one system call for the first, one batch for the rest, not one call each).
    sent_soon: bool,
    /// One-datagram receives that found the hot slot empty (see `receive`).
    rx_cold: u32,
    /// The next one-datagram receive reads every slot (set after a wait in `poll(2)`,
    /// which may have woken for any of them).
    rx_all: bool,
    addr: UdpAddr,
    conns: HashMap<ConnKey, Conn>,
    txq: VecDeque<Out>,
    /// Receive buffers, one per datagram of a batched receive call; frames are parsed in
    /// place.
    rx_bufs: Vec<Vec<u8>>,
    /// `(buffer, sender, length)` of the last receive call's datagrams.
    rx_got: Vec<(usize, SocketAddr, usize)>,
    /// The read last placed into without a copy: its connection, id and datagram payload
    /// length. Its next datagram is expected next ([`UdpDevice::receive_placed`]).
    expect: Option<(ConnKey, u64, usize)>,
    shim: Option<Shim<Out>>,
    rdma: SoftRdma,
    events: VecDeque<DeviceEvent>,
    /// Sends refused because the queue was full, answered `Again` at the next `progress`.
    again: Vec<SendToken>,
    /// Most body bytes unacknowledged per connection: half the socket's receive buffer
    /// (the peer's is assumed alike), so a window of large datagrams does not overflow it,
    /// and at most [`MAX_INFLIGHT_BYTES`].
    max_inflight_bytes: usize,
    /// Bytes of received bulk frames ([`ACK_BULK_FRAME`]) after which a pure ACK goes at
    /// once: a quarter of `max_inflight_bytes` (the peer's window, assumed alike), so a
    /// streaming sender gets about four ACKs per window and never waits for one.
    ack_bytes: usize,
    /// When the socket was last read or waited on (see `timers`).
    last_read: Option<Instant>,
    /// The last batched receive got at most one datagram: `progress` tries `recvfrom`
    /// first.
    rx_narrow: bool,
    /// The last `recvfrom` (of `rx_narrow`) found a datagram: the next batched receive
    /// starts narrow (see `RX_PROBE`).
    rx_probe: bool,
    /// When the device was bound (a placeholder for times not yet set).
    bound_at: Instant,
    /// `fill_windows`' frames to queue, kept for its allocation.
    fill_out: Vec<Out>,
    /// A connection may have frames to move into its window: set when frames are queued,
    /// a served read starts, or frames leave a window; cleared by a `fill_windows` that
    /// found no connection to fill (which then skips its scan until it is set again).
    fill_due: bool,
    /// Bodies of acknowledged frames (at most [`SPARE_BODIES`], none larger than a
    /// datagram), reused for the packets handed up in `DeviceEvent::Recv`: the owner hands
    /// those to the endpoint, which builds its next packets in them (see
    /// `tagmatch_rdm::Endpoint::recycle`), so a ping-pong allocates nothing per message
    /// for its packets.
    spare: Vec<Vec<u8>>,
    /// Some connection's `fresh` count is not zero (`progress` resets them).
    fresh_any: bool,
    /// [`RdmDevice::retry_refused`] was called: the held packets go up at the next
    /// `progress` (until then they are no work, see `busy` there).
    rnr_retry: bool,
    stats: UdpStats,
    /// The readiness thread of an asynchronous owner (see [`UdpDevice::wake_when_ready`]).
    watch: Option<crate::watch::Watcher>,
}

impl UdpDevice {
    /// For an asynchronous owner that found nothing to do: wakes `waker` once, when the
    /// socket is readable or the device's next timer (a retransmission, a delayed ACK) is
    /// due, from a thread blocked in `poll(2)` (see [`crate::watch`]). Returns `false` without
    /// arming when the device has work already (events, queued retries, packets held for
    /// redelivery) or cannot tell (the fault shim holds datagrams in user space): the owner
    /// then progresses again at once.
    pub fn wake_when_ready(&mut self, waker: &std::task::Waker) -> io::Result<bool> {
        let busy = !self.events.is_empty()
            || !self.again.is_empty()
            || !self.txq.is_empty()
            || self.shim.is_some()
            || (self.rnr_retry && self.conns.values().any(|c| !c.held.is_empty()));
        if busy {
            return Ok(false);
        }
        if self.watch.is_none() {
            self.watch = Some(crate::watch::Watcher::start(self.socks.duplicates()?)?);
        }
        if let Some(w) = &self.watch {
            w.arm(waker, self.next_deadline());
        }
        Ok(true)
    }

    /// A socket was closed: the readiness thread, if one runs, closes its duplicate of it
    /// (kept open, the duplicate would keep the socket, still `connect`ed to its peer,
    /// taking that peer's datagrams where nobody reads them). Without duplicates of the
    /// others (out of descriptors), the thread is stopped; the next
    /// [`UdpDevice::wake_when_ready`] starts another.
    fn unwatch_closed(&mut self) {
        let Some(w) = &self.watch else {
            return;
        };
        match self.socks.duplicates() {
            Ok(fds) => w.replace(fds),
            Err(e) => {
                tracing::debug!(error = %e, "readiness thread stopped");
                self.watch = None;
            }
        }
    }

    /// Tasks woken by [`UdpDevice::wake_when_ready`]'s thread so far.
    pub fn ready_wakes(&self) -> u64 {
        self.watch.as_ref().map_or(0, crate::watch::Watcher::wakes)
    }

    /// Binds a device.
    pub fn bind(cfg: UdpConfig) -> io::Result<UdpDevice> {
        let mut cfg = cfg;
        cfg.path_mtu = cfg.path_mtu.clamp(MIN_PATH_MTU, MAX_PATH_MTU);
        cfg.max_inflight = cfg.max_inflight.clamp(1, (RECV_WINDOW / 2) as usize);
        cfg.max_queued = cfg.max_queued.max(cfg.max_inflight);
        if cfg.bind.ip().is_unspecified() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bind a concrete IP: it is the device's printed address",
            ));
        }
        let rx_len = if cfg.bind.ip().is_loopback() {
            sock::RX_BUF_LOOPBACK
        } else {
            sock::RX_BUF
        };
        // A lone ACK would otherwise wait as long as the retransmission timer of the
        // frame it acknowledges.
        cfg.ack_delay = cfg.ack_delay.min(cfg.min_rto / 2).min(cfg.initial_rto / 2);
        let sock = Sock::bind(cfg.bind)?;
        let rcvbuf = sock.rcvbuf();
        let local = sock.local_addr()?;
        let socks = Socks::new(sock, cfg.connect_peers.min(MAX_CONNECT_PEERS));
        let max_inflight_bytes = match rcvbuf {
            0 => 256 << 10,
            n => (n / 2).clamp(2 * rx_len, MAX_INFLIGHT_BYTES),
        };
        let mut rng = XorShift::new(entropy() ^ local.port() as u64);
        let connid = cfg.connid.unwrap_or_else(|| (rng.next_u64() as u32).max(1));
        Ok(UdpDevice {
            socks,
            rx_hot: 0,
            tx_blocked: None,
            send_soon: false,
            sent_soon: false,
            rx_cold: 0,
            rx_all: false,
            addr: UdpAddr {
                sock: local,
                connid,
            },
            conns: HashMap::default(),
            txq: VecDeque::new(),
            rx_bufs: vec![vec![0u8; rx_len]; cfg.batch.max(1)],
            rx_got: Vec::with_capacity(cfg.batch.max(1)),
            expect: None,
            shim: cfg.shim.map(Shim::new),
            rdma: {
                let mut r = SoftRdma::new(rng.next_u64() as u32);
                r.set_registration_limit(cfg.max_registered_bytes);
                r
            },
            events: VecDeque::new(),
            again: Vec::new(),
            max_inflight_bytes,
            ack_bytes: (max_inflight_bytes / 4).max(1),
            last_read: None,
            rx_narrow: false,
            rx_probe: false,
            fill_out: Vec::new(),
            bound_at: Instant::now(),
            fill_due: false,
            rnr_retry: false,
            fresh_any: false,
            spare: Vec::new(),
            stats: UdpStats::default(),
            watch: None,
            cfg,
        })
    }

    /// The printable address (`udp://IP:PORT/CONNID`).
    pub fn udp_addr(&self) -> UdpAddr {
        self.addr
    }

    /// Counters.
    pub fn stats(&self) -> UdpStats {
        let mut s = self.stats;
        s.sock = self.socks.stats();
        s.peer_sockets = self.socks.opened;
        s.peer_socket_errors = self.socks.open_errors;
        s.rdma = self.rdma.stats;
        if let Some(sh) = &self.shim {
            s.shim = sh.stats;
        }
        s
    }

    /// The configuration in force (after clamping).
    pub fn config(&self) -> &UdpConfig {
        &self.cfg
    }

    fn datagram_max(&self) -> usize {
        self.cfg.path_mtu - IP_UDP_OVERHEAD
    }

    /// Largest software-RDMA datagram: [`LOOPBACK_RDMA_DATAGRAM`] on a loopback address,
    /// else the path's.
    fn rdma_datagram_max(&self) -> usize {
        if self.cfg.bind.ip().is_loopback() {
            LOOPBACK_RDMA_DATAGRAM
        } else {
            self.datagram_max()
        }
    }

    fn rdma_chunk(&self) -> usize {
        self.rdma_datagram_max() - HDR_LEN - MAX_RDMA_HDR
    }

    /// Queues a datagram through the shim.
    fn out(&mut self, o: Out) {
        match &mut self.shim {
            Some(s) => s.push(o, &mut self.txq),
            None => self.txq.push_back(o),
        }
    }

    /// Queues a reliable frame; `false` if the connection's queue is full. `direct`: the
    /// caller reads the real clock for the window (`fill_windows(_, None)`, as `submit`
    /// does), so a frame to an idle connection may enter its window at once, timed now.
    fn enqueue(
        &mut self,
        peer: &RawAddr,
        kind: u8,
        body: Vec<u8>,
        token: Option<SendToken>,
        bounded: bool,
        direct: bool,
    ) -> bool {
        let max_queued = self.cfg.max_queued;
        // A waiting frame's times are set when it enters the window (`fill_windows`); until
        // then they are not read: no clock read here.
        let now = self.bound_at;
        let u = UdpAddr::from_raw(peer);
        let k = (u.sock, u.connid);
        let (socks, watch) = (&mut self.socks, &self.watch);
        let c = self
            .conns
            .entry(k)
            .or_insert_with(|| Conn::new(*peer, u.sock, attach(socks, watch, u.sock)));
        if bounded && c.unacked.len() + c.waiting.len() >= max_queued {
            return false;
        }
        // A frame to a peer with nothing in flight (a ping-pong's answer, a request after
        // its reply) may leave at once (see `RdmDevice::send_soon`); behind frames in
        // flight it waits for the owner's next `progress`, batched with the others. A peer
        // with a socket of its own costs one system call either way (a `sendmmsg` sends
        // through one socket); peers on the shared socket share batches, so among them
        // only the first since the last `progress` leaves at once (a fan-out: one call,
        // then one batch).
        let idle = c.unacked.is_empty() && c.waiting.is_empty();
        let own_socket = c.via != 0;
        let soon = idle && (own_socket || !self.sent_soon);
        if soon
            && direct
            && c.reads.is_empty()
            && c.finishing.is_empty()
            && c.next_seq <= u32::MAX as u64
            && self.cfg.max_inflight > 0
            && self.max_inflight_bytes > 0
        {
            // Nothing in flight, nothing waiting, no read to stream: the frame enters the
            // window at once, as `fill_windows_due` would put it there (the first of an
            // empty window: room, span and order are given), without the walk over every
            // connection; its header is built when it is sent (at `send_soon`, or the
            // owner's next `progress`), through the fault shim when there is one.
            let now = Instant::now();
            let mut f = TxFrame::waiting(kind, Body::Bytes(body), token, now);
            f.deadline = now + c.rto(&self.cfg);
            let seq = c.next_seq;
            c.next_seq += 1;
            c.tx_order += 1;
            f.order = c.tx_order;
            c.ack.sent();
            c.unacked_bytes += f.body.len();
            c.unacked.insert(seq, f);
            self.stats.frames_sent += 1;
            self.out(Out::Frame(k, seq, false));
            self.send_soon = true;
            return true;
        }
        c.waiting
            .push_back(TxFrame::waiting(kind, Body::Bytes(body), token, now));
        self.send_soon |= soon;
        self.fill_due = true;
        true
    }

    /// Moves waiting frames of every connection into its window and onto the wire.
    /// `now`: the time, `None` to read the clock (only if something is sent).
    /// (Inlined: most calls find nothing due, and return before the call.)
    #[inline]
    fn fill_windows(&mut self, mem: &dyn MemoryAccess, now: Option<Instant>) {
        if self.fill_due {
            self.fill_windows_due(mem, now);
        }
    }

    /// [`UdpDevice::fill_windows`] when `fill_due` is set.
    #[inline(never)]
    fn fill_windows_due(&mut self, mem: &dyn MemoryAccess, now: Option<Instant>) {
        // The frames to queue go through a vector kept in the device (taken and put back:
        // no allocation per call), queued after the walk over the connections (in the
        // same order), which borrows them.
        let mut now = now;
        let chunk = self.rdma_chunk() as u64;
        // A served read's datagrams to a peer with a connected socket are spliced (see
        // `flush_queued`): each then ends where its data has touched `SPLICE_PAGES` pages,
        // so that the socket takes it in one piece.
        let splice_chunks = self.cfg.splice && sock::PEEK && chunk >= SPLICE_MIN as u64;
        let mut dgs = std::mem::take(&mut self.fill_out);
        dgs.clear();
        let mut filled = false;
        for (&k, c) in self.conns.iter_mut() {
            let has_frames =
                !c.waiting.is_empty() || !c.reads.is_empty() || !c.finishing.is_empty();
            let has_room = c.unacked.len() < self.cfg.max_inflight
                && c.unacked_bytes < self.max_inflight_bytes;
            if !(has_frames && has_room) {
                continue;
            }
            filled = true;
            let now = *now.get_or_insert_with(Instant::now);
            {
                // Top the waiting queue up from the streamed reads, one window's worth.
                let room = self.cfg.max_inflight.saturating_sub(c.unacked.len());
                let room_bytes = self.max_inflight_bytes.saturating_sub(c.unacked_bytes);
                // Spliced reads whose data frames are all acknowledged now (received, so
                // copied, while the key was registered, if it still is): their final
                // status goes. Their bytes were read from the region when the peer
                // received them, which may be after the owner deregistered it and wrote
                // it again; then the read fails.
                if !c.finishing.is_empty() {
                    let (unacked, waiting, rdma) = (&c.unacked, &mut c.waiting, &mut self.rdma);
                    c.finishing.retain(|job| {
                        let data_of_it =
                            |f: &TxFrame| matches!(f.body, Body::Read { id, .. } if id == job.id);
                        if unacked.values().any(data_of_it) || waiting.iter().any(data_of_it) {
                            return true;
                        }
                        let status = match rdma.read_chunk(job.key, job.mem, job.off, job.len, mem)
                        {
                            Some(_) => RdmaStatus::Ok,
                            None => RdmaStatus::NoMemory,
                        };
                        let mut b = Vec::new();
                        RdmaMsg::ReadResp { id: job.id, status }.emit(&mut b);
                        waiting.push_back(TxFrame::waiting(
                            KIND_READ_RESP,
                            Body::Bytes(b),
                            None,
                            now,
                        ));
                        false
                    });
                }
                // (Summed only when there are reads to top up from.)
                let mut waiting_bytes: usize = if c.reads.is_empty() {
                    0
                } else {
                    c.waiting.iter().map(|f| f.body.len()).sum()
                };
                while c.waiting.len() < room && waiting_bytes < room_bytes {
                    // A stream of reads (another one queued behind this one, or one
                    // before it still finishing) is spliced:
                    // the sender's core copies nothing, and the receiver's copy sets the
                    // pace either way. A lone read (a ping-pong's) is copied: its bytes
                    // then cross two copies on two cores at once, the sender's into the
                    // socket and the receiver's out of it, instead of the receiver's
                    // copy alone, and the kernel's own fragments are cheaper for the
                    // receiver to copy than the sender's pages (1 MiB ping-pong +31 %
                    // in session 12, streams level).
                    let stream = c.reads.len() > 1 || !c.finishing.is_empty();
                    let Some(job) = c.reads.front_mut() else {
                        break;
                    };
                    let splice = *job
                        .splice
                        .get_or_insert(splice_chunks && c.via != 0 && stream);
                    let mut n = (job.len - job.sent).min(chunk);
                    if splice {
                        n = n.min(splice_span(mem, job.mem, job.off + job.sent));
                    }
                    // The range is checked now (a deregistered key ends the read at once)
                    // and again whenever the frame is sent, when its bytes are read.
                    let status = if job.sent == job.len {
                        if splice {
                            // Its datagrams may have been spliced: the read succeeds only
                            // if every data frame was acknowledged while the key was still
                            // registered. Its status waits for those acknowledgements in
                            // `finishing` (above), and the next read goes on meanwhile.
                            if let Some(job) = c.reads.pop_front() {
                                c.finishing.push(job);
                            }
                            continue;
                        }
                        Some(RdmaStatus::Ok)
                    } else if self
                        .rdma
                        .read_chunk(job.key, job.mem, job.off + job.sent, n, mem)
                        .is_none()
                    {
                        Some(RdmaStatus::NoMemory)
                    } else {
                        None
                    };
                    let (kind, body) = match status {
                        Some(status) => {
                            let id = job.id;
                            c.reads.pop_front();
                            let mut b = Vec::new();
                            RdmaMsg::ReadResp { id, status }.emit(&mut b);
                            (KIND_READ_RESP, Body::Bytes(b))
                        }
                        None => {
                            let body = Body::Read {
                                id: job.id,
                                offset: job.sent,
                                key: job.key,
                                mem: job.mem,
                                off: job.off + job.sent,
                                len: n,
                                splice,
                            };
                            job.sent += n;
                            (KIND_READ_DATA, body)
                        }
                    };
                    waiting_bytes += body.len();
                    c.waiting.push_back(TxFrame::waiting(kind, body, None, now));
                }
                let rto = c.rto(&self.cfg);
                // The span from the oldest unacknowledged frame is bounded too (the window
                // is a ring over that span): a frame lost again and again does not let it
                // grow to the peer's receive window.
                let span_max = 4 * self.cfg.max_inflight.max(256) as u64;
                while c.unacked.len() < self.cfg.max_inflight
                    && c.unacked_bytes < self.max_inflight_bytes
                    && c.next_seq <= u32::MAX as u64
                    && c.unacked.span_to(c.next_seq) < span_max
                {
                    let Some(mut f) = c.waiting.pop_front() else {
                        break;
                    };
                    let seq = c.next_seq;
                    c.next_seq += 1;
                    f.alive = now;
                    f.last_sent = now;
                    f.deadline = now + rto;
                    c.tx_order += 1;
                    f.order = c.tx_order;
                    // The header, with the acknowledgement state of the moment, is built
                    // when the frame is sent (`flush`).
                    c.ack.sent();
                    dgs.push(Out::Frame(k, seq, f.body.is_read()));
                    c.unacked_bytes += f.body.len();
                    c.unacked.insert(seq, f);
                }
            }
        }
        if !filled {
            // No connection to fill: the next calls skip the walk until frames are queued,
            // a read starts or a window opens.
            self.fill_due = false;
        }
        self.stats.frames_sent += dgs.len() as u64;
        for o in dgs.drain(..) {
            self.out(o);
        }
        self.fill_out = dgs;
    }

    /// Frames that entered their window in `submit` (timed then) and were not sent since
    /// (the owner did not call `send_soon` or `flush_tx`, or the socket was full) are
    /// timed again at `now`, when `progress` sends them after an absence of the owner:
    /// [`UdpConfig::peer_timeout`] and the retransmission timer run from a frame's first
    /// transmission, and its RTT sample must not include the time it waited in the
    /// device. (A frame sent once and queued again is a retransmission, `retries > 0`,
    /// and keeps its times.)
    #[inline(never)]
    fn retime_unsent(&mut self, now: Instant) {
        let cfg = &self.cfg;
        for o in &self.txq {
            let Out::Frame(k, seq, _) = o else {
                continue;
            };
            let Some(c) = self.conns.get_mut(k) else {
                continue;
            };
            let rto = rto_of(c.srtt, c.rttvar, cfg);
            if let Some(f) = c.unacked.get_mut(seq) {
                if f.retries == 0 && f.last_sent < now {
                    f.last_sent = now;
                    f.alive = now;
                    f.deadline = now + rto;
                }
            }
        }
    }

    /// The earliest retransmission deadline, without firing anything: `progress` checks
    /// it before it waits, and fires timers only after it has read what the socket holds.
    fn next_deadline(&self) -> Option<Instant> {
        // Plain loops: the iterator chain (flat_map, chain, min) cost about twice as many
        // instructions for the usual one connection with one frame in flight.
        let mut next: Option<Instant> = None;
        let mut note = |t: Instant| {
            if next.is_none_or(|n| t < n) {
                next = Some(t);
            }
        };
        for c in self.conns.values() {
            if let Some(d) = c.ack.due {
                note(d);
            }
            for f in c.unacked.values() {
                note(f.deadline);
            }
        }
        next
    }

    /// Retransmits due frames, fails connections whose peer stopped answering; returns the
    /// next deadline. Call it only after the socket has been drained: an ACK that already
    /// arrived but was not read yet must not count as missing (a process descheduled
    /// beyond the RTO would otherwise resend a burst of frames its peer acknowledged long
    /// ago).
    ///
    /// `now` is when the socket was last found drained: a timer due by then expired with
    /// no ACK in the socket (a deschedule after the read does not count).
    /// `last_read`: when the socket was read or waited on before `now`. If that was a
    /// quarter of `min_rto` or more before `now` (the owner was busy or descheduled), a
    /// timer that expired in that absence is re-armed once, for `SRTT + ack_delay` (at
    /// least a millisecond), instead of firing: the peer may have been descheduled alike
    /// (a paused VM, or both ends stepped by one thread) with our ACK delayed and not
    /// sent yet, and gets that long to send it.
    ///
    /// The absence and each connection's RTO are worked out only when a timer is due
    /// (most calls find none).
    fn timers(&mut self, now: Instant, last_read: Option<Instant>) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut dead = Vec::new();
        let mut dgs = Vec::new();
        let cfg = &self.cfg;
        let mut absent: Option<bool> = None;
        // A frame last proved in view at or before this instant is past the peer timeout
        // (one subtraction per call instead of one per frame; `None`: none can be).
        let dead_before = now.checked_sub(cfg.peer_timeout);
        for (k, c) in self.conns.iter_mut() {
            let mut rto: Option<Duration> = None;
            let mut resent = 0usize;
            for (seq, f) in c.unacked.iter_mut() {
                // Not answered (neither acknowledged nor held back with a
                // receiver-not-ready notice) for the peer timeout: the peer is gone.
                if dead_before.is_some_and(|d| f.alive <= d) {
                    dead.push(*k);
                    break;
                }
                if f.deadline <= now {
                    let away = *absent.get_or_insert_with(|| {
                        last_read
                            .is_some_and(|l| now.saturating_duration_since(l) >= cfg.min_rto / 4)
                    });
                    let rto = *rto.get_or_insert_with(|| rto_of(c.srtt, c.rttvar, cfg));
                    if !f.deferred && away {
                        f.deferred = true;
                        let grace = c.srtt.unwrap_or_default() + cfg.ack_delay;
                        f.deadline = now + grace.max(Duration::from_millis(1));
                    } else if resent >= RTO_BURST {
                        // Only the oldest due frames go again (their ACK tells what else
                        // is missing, see `on_ack`); the others wait one more RTO.
                        f.deadline = now + rto;
                    } else {
                        f.retries += 1;
                        f.last_sent = now;
                        c.tx_order += 1;
                        f.order = c.tx_order;
                        let backoff = rto
                            .saturating_mul(1u32 << f.retries.min(16))
                            .min(cfg.max_rto);
                        f.deadline = now + backoff;
                        dgs.push(Out::Frame(*k, seq, f.body.is_read()));
                        resent += 1;
                    }
                }
                next = Some(next.map_or(f.deadline, |n| n.min(f.deadline)));
            }
            if resent > 0 {
                c.ack.sent();
            }
            if c.next_seq > u32::MAX as u64 && !c.waiting.is_empty() {
                dead.push(*k);
            }
        }
        // (Most calls have nothing to send or fail: no loop over empty vectors.)
        if !dgs.is_empty() {
            self.stats.retransmits += dgs.len() as u64;
            for o in dgs {
                self.out(o);
            }
        }
        if !dead.is_empty() {
            for k in dead {
                self.fail_conn(k);
            }
        }
        next
    }

    fn fail_conn(&mut self, k: ConnKey) {
        let Some(c) = self.conns.remove(&k) else {
            return;
        };
        if self.socks.detach(c.via) {
            self.unwatch_closed();
        }
        self.stats.peers_failed += 1;
        tracing::debug!(peer = %UdpAddr::from_raw(&c.peer), "UDP peer failed");
        for f in c.unacked.into_values().chain(c.waiting) {
            if let Some(token) = f.token {
                self.events.push_back(DeviceEvent::SendDone {
                    token,
                    outcome: SendOutcome::Error,
                });
            }
        }
        for token in self.rdma.fail_peer(&c.peer) {
            self.events
                .push_back(DeviceEvent::RdmaDone { token, ok: false });
        }
    }

    /// Handles the acknowledgement (`ack`, `sack`) of connection `k`'s frames.
    fn on_ack(&mut self, k: ConnKey, ack: u32, sack: u64, now: Instant) {
        let Some(c) = self.conns.get_mut(&k) else {
            return;
        };
        Self::ack_conn(c, k, ack, sack, now, ack_ctx!(self));
    }

    /// [`UdpDevice::on_ack`] for connection `c` (found already), with the parts of the
    /// device it needs.
    /// (Always inlined into its two callers: its context, eight references, is then not
    /// built in memory for the call, and the acknowledged frames' accounting is
    /// compiled with the caller's.)
    #[inline(always)]
    fn ack_conn(c: &mut Conn, k: ConnKey, ack: u32, sack: u64, now: Instant, x: AckCtx<'_>) {
        let dmax = x.dmax;
        // Each acknowledged frame is accounted for as it leaves the window (no list of
        // them is built).
        let mut latest: Option<u64> = None;
        let events = x.events;
        let spare = x.spare;
        let mut acked = false;
        while let Some((_, f)) = c.unacked.pop_first_upto(ack as u64) {
            c.on_acked(f, now, &mut latest, events, spare, dmax);
            acked = true;
        }
        if sack != 0 {
            for i in 0..64u64 {
                if sack & (1 << i) != 0 {
                    if let Some(f) = c.unacked.remove(&(ack as u64 + 2 + i)) {
                        c.on_acked(f, now, &mut latest, events, spare, dmax);
                        acked = true;
                    }
                }
            }
        }
        // The window opened: `fill_windows` has work only if this connection has frames
        // to move into it (waiting frames, served reads to stream or to finish; the acks
        // change none of those). Without any, the walk over the connections would find
        // nothing to do here (`fill_due` stays clear only while no connection has both
        // frames and room, and this one has no frames).
        if acked && (!c.waiting.is_empty() || !c.reads.is_empty() || !c.finishing.is_empty()) {
            *x.fill_due = true;
        }
        // Loss detection by transmission order (RACK-like): a frame sent more than
        // REORDER_THRESHOLD transmissions before a frame that is now acknowledged, still
        // unacknowledged and not sent again within the last quarter RTT, is lost.
        let Some(latest) = latest else {
            return;
        };
        if c.unacked.is_empty() {
            return;
        }
        let reo = c.srtt.map_or(Duration::ZERO, |s| s / 4);
        let rto = c.rto(x.cfg);
        let mut dgs = Vec::new();
        for (seq, f) in c.unacked.iter_mut() {
            // A frame the peer holds back (receiver not ready) waits for its timer's
            // backoff: later frames getting through says nothing about its loss.
            if f.rnr == 0
                && f.order + REORDER_THRESHOLD < latest
                && now.duration_since(f.last_sent) >= reo
            {
                f.retries += 1;
                f.last_sent = now;
                f.deadline = now + rto;
                c.tx_order += 1;
                f.order = c.tx_order;
                dgs.push(Out::Frame(k, seq, f.body.is_read()));
            }
        }
        if !dgs.is_empty() {
            c.ack.sent();
        }
        x.stats.fast_retransmits += dgs.len() as u64;
        for o in dgs {
            match x.shim {
                Some(s) => s.push(o, x.txq),
                None => x.txq.push_back(o),
            }
        }
    }

    #[inline(always)]
    fn on_datagram(
        &mut self,
        from: SocketAddr,
        d: &[u8],
        mem: &mut dyn MemoryAccess,
        now: Instant,
    ) {
        let (h, body) = match Header::parse(d) {
            Ok(x) => x,
            Err(_) => {
                self.stats.bad_frames += 1;
                return;
            }
        };
        self.on_frame(from, h, body, None, mem, now);
    }

    /// Handles a parsed frame. `placed`: a `READ_DATA` frame whose data was received
    /// straight into its destination (`(id, data length)`; `body` is empty), see
    /// `receive_placed`.
    fn on_frame(
        &mut self,
        from: SocketAddr,
        h: Header,
        body: &[u8],
        placed: Option<(u64, u64, u64)>,
        mem: &mut dyn MemoryAccess,
        now: Instant,
    ) {
        if h.dst_connid != self.addr.connid {
            self.stats.wrong_connid += 1;
            return;
        }
        let k = (from, h.src_connid);
        if h.kind == KIND_ACK {
            // A pure ACK creates no connection.
            self.on_ack(k, h.ack, h.sack, now);
            return;
        }
        if h.kind == KIND_RNR {
            self.on_ack(k, h.ack, h.sack, now);
            self.on_rnr(k, body, now);
            return;
        }
        // One look-up of the connection (it was three).
        let full = self.conns.len() >= self.cfg.max_conns;
        let c = match self.conns.entry(k) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                if full {
                    self.stats.conn_limit += 1;
                    return;
                }
                let peer = UdpAddr {
                    sock: from,
                    connid: h.src_connid,
                }
                .to_raw();
                e.insert(Conn::new(
                    peer,
                    from,
                    attach(&mut self.socks, &self.watch, from),
                ))
            }
        };
        // The sender's raw address, as `UdpAddr::to_raw` makes it of `k`: the
        // connection's (made of `k`, or of a raw address whose UDP address is `k`, which
        // maps back to the same GID, QPN and QKEY) without the `next` bytes.
        let peer = RawAddr { next: 0, ..c.peer };
        debug_assert_eq!(
            peer,
            UdpAddr {
                sock: from,
                connid: h.src_connid,
            }
            .to_raw()
        );
        Self::ack_conn(c, k, h.ack, h.sack, now, ack_ctx!(self));
        let seq = h.seq;
        let delay = self.cfg.ack_delay;
        if seq <= c.cum || (!c.ooo.is_empty() && c.ooo.contains(&seq)) {
            // The peer sent it again: our ACK was lost or late; it goes at once.
            c.ack.on_frame(Arrival::Urgent, now, delay, 0, 0);
            self.stats.duplicates += 1;
            return;
        }
        if seq - c.cum > RECV_WINDOW {
            c.ack.on_frame(Arrival::Urgent, now, delay, 0, 0);
            self.stats.beyond_window += 1;
            return;
        }
        // Receiver not ready: the endpoint refuses this peer's packets (some are held) and
        // enough are held or waiting for it.
        // Not recorded as received: the sender's timer sends it again. The next frame in
        // order is taken up to twice the limit: held packets may be waiting for exactly
        // that one (the endpoint's reorder buffer holds successors against the same
        // budget), and refusing it would leave them waiting for ever.
        let limit = if seq == c.cum + 1 {
            2 * RNR_HELD_MAX
        } else {
            RNR_HELD_MAX
        };
        // Only REQ packets (new messages, the only ones an endpoint refuses): control
        // packets (CTS, CTSDATA, READRSP, EOR, ...) always get through, or an operation the
        // not-ready receiver waits for could never finish.
        // wire-layouts §A.2: "any type ≥ 64 is treated as a REQ".
        let req = body.first().is_some_and(|&t| t >= 64);
        if h.kind == KIND_PKT && req && !c.held.is_empty() && c.held.len() + c.fresh >= limit {
            self.stats.rnr_dropped += 1;
            // The sender learns at the end of this `progress` that we are alive but not
            // ready (a receiver-not-ready notice), so it keeps the frame and backs off
            // instead of taking us for dead after its peer timeout.
            if c.rnr.len() < RNR_REPORT_MAX && !c.rnr.contains(&seq) {
                c.rnr.push(seq);
            }
            return;
        }
        let arrival = if seq == c.cum + 1 && c.ooo.is_empty() {
            Arrival::InOrder
        } else {
            Arrival::Urgent
        };
        let len = body.len() + placed.map_or(0, |p| p.2 as usize);
        c.ack.on_frame(arrival, now, delay, len, self.ack_bytes);
        if seq == c.cum + 1 {
            c.cum = seq;
            while let Some(n) = c.cum.checked_add(1) {
                if !c.ooo.remove(&n) {
                    break;
                }
                c.cum = n;
            }
        } else {
            c.ooo.insert(seq);
        }
        self.stats.frames_received += 1;
        if h.kind == KIND_PKT {
            c.fresh += usize::from(req);
            self.fresh_any |= req;
            let mut bytes = self.spare.pop().unwrap_or_default();
            bytes.clear();
            bytes.extend_from_slice(body);
            self.events
                .push_back(DeviceEvent::Recv { src: peer, bytes });
            return;
        }
        if let Some((id, offset, len)) = placed {
            if let Some((token, ok)) = self.rdma.on_read_placed(&peer, id, offset, len) {
                self.events.push_back(DeviceEvent::RdmaDone { token, ok });
            }
            self.hurry_read_ack(k, id, now);
            return;
        }
        let Some(msg) = RdmaMsg::parse(h.kind, body) else {
            self.stats.bad_bodies += 1;
            return;
        };
        if let RdmaMsg::ReadReq { id, key, addr, len } = msg {
            match self.rdma.check_read(key, addr, len, mem) {
                Ok((h, off)) => {
                    if let Some(c) = self.conns.get_mut(&k) {
                        self.fill_due = true;
                        c.reads.push_back(ReadJob {
                            id,
                            key,
                            mem: h,
                            off,
                            len,
                            sent: 0,
                            splice: None,
                        });
                    }
                }
                Err(status) => {
                    let r = RdmaMsg::ReadResp { id, status };
                    let mut b = Vec::new();
                    r.emit(&mut b);
                    self.enqueue(&peer, r.kind(), b, None, false, false);
                }
            }
        } else if msg.is_request() {
            let chunk = self.rdma_chunk();
            for r in self.rdma.serve(msg, mem, chunk) {
                let mut b = Vec::new();
                r.emit(&mut b);
                self.enqueue(&peer, r.kind(), b, None, false, false);
            }
        } else {
            let data_of = match msg {
                RdmaMsg::ReadData { id, .. } => Some(id),
                _ => None,
            };
            if let Some((token, ok)) = self.rdma.on_response(&peer, msg, mem) {
                self.events.push_back(DeviceEvent::RdmaDone { token, ok });
            }
            if let Some(id) = data_of {
                self.hurry_read_ack(k, id, now);
            }
        }
    }

    /// All data of our read `id` is in: the server's status of a spliced read waits for
    /// the acknowledgement of that data (see `Conn::finishing`), so it goes at once.
    fn hurry_read_ack(&mut self, k: ConnKey, id: u64, now: Instant) {
        if self.rdma.read_awaits_status(id) {
            if let Some(c) = self.conns.get_mut(&k) {
                c.ack.hurry(now);
            }
        }
    }

    /// The peer holds back frames of ours (receiver not ready, `body`: their sequence
    /// numbers): each one still unacknowledged is kept, its peer timeout restarts (the
    /// peer is alive), and it is sent again by its timer after a backoff that doubles with
    /// every notice (at most `max_rto`), not by loss detection.
    fn on_rnr(&mut self, k: ConnKey, body: &[u8], now: Instant) {
        let Some(c) = self.conns.get_mut(&k) else {
            return;
        };
        let rto = c.rto(&self.cfg);
        for b in body.chunks_exact(4) {
            let seq = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64;
            let Some(f) = c.unacked.get_mut(&seq) else {
                continue;
            };
            self.stats.rnr_received += 1;
            f.rnr = f.rnr.saturating_add(1);
            f.alive = now;
            f.deferred = false;
            f.deadline = now
                + rto
                    .saturating_mul(1u32 << f.rnr.min(16))
                    .min(self.cfg.max_rto);
        }
    }

    /// Sends pure ACKs where a received frame has not been acknowledged by a data frame
    /// and its ACK is due (see [`AckState`]), and receiver-not-ready notices (which carry
    /// the ACK too) where frames were refused.
    /// `now`: the time, `None` to read the clock (only if an ACK is pending).
    fn acks(&mut self, mut now: Option<Instant>) {
        let mut dgs = Vec::new();
        let mut rnrs = 0;
        for c in self.conns.values_mut() {
            let due = c.ack.due.is_some() && c.ack.ready(*now.get_or_insert_with(Instant::now));
            if due || !c.rnr.is_empty() {
                c.ack.sent();
                let (kind, body) = if c.rnr.is_empty() {
                    (KIND_ACK, Vec::new())
                } else {
                    rnrs += 1;
                    let body: Vec<u8> = c.rnr.drain(..).flat_map(u32::to_le_bytes).collect();
                    (KIND_RNR, body)
                };
                let h = Header {
                    kind,
                    src_connid: self.addr.connid,
                    dst_connid: c.peer.qkey,
                    seq: 0,
                    ack: c.cum,
                    sack: c.sack(),
                };
                dgs.push(Out::Dgram(c.sock, c.via, h.datagram(&body)));
            }
        }
        if dgs.is_empty() {
            return;
        }
        self.stats.rnr_sent += rnrs;
        self.stats.acks_sent += dgs.len() as u64 - rnrs;
        for o in dgs {
            self.out(o);
        }
    }

    /// Receives and handles what the socket holds: at most `max_calls` receive calls, the
    /// first of `first` datagrams, the others (made only while each call fills its width)
    /// of `width` (both at most the number of buffers and [`sock::RECV_BATCH_MAX`]);
    /// returns how many datagrams the calls returned.
    ///
    /// With several sockets (see [`UdpConfig::connect_peers`]) the one that received last
    /// (the hot one) is read first; the others only every [`COLD_EVERY`]-th time, or when
    /// `rx_all` is set (after a wait in `poll(2)` that a socket ended, and before timers
    /// are judged): a busy-polled peer with a socket of its own costs one call per poll,
    /// and datagrams on the other sockets wait at most a few polls longer. A
    /// one-datagram receive (`max_calls`, `first` and `width` 1: a busy-poll's) stops at
    /// the first socket that had one.
    fn receive(
        &mut self,
        mem: &mut dyn MemoryAccess,
        max_calls: usize,
        first: usize,
        width: usize,
    ) -> io::Result<usize> {
        if sock::PEEK && self.rdma.reads_pending() > 0 {
            return self.receive_placed(mem, max_calls * width);
        }
        let slots = self.socks.slots();
        if slots == 1 {
            return self.receive_from(0, mem, max_calls, first, width);
        }
        let one = max_calls == 1 && first == 1;
        let hot = self.rx_hot.min(slots - 1);
        let mut total = self.receive_from(hot, mem, max_calls, first, width)?;
        if one && total > 0 {
            return Ok(total);
        }
        if !std::mem::take(&mut self.rx_all) {
            self.rx_cold = self.rx_cold.wrapping_add(1);
            if self.rx_cold % COLD_EVERY != 0 {
                return Ok(total);
            }
        }
        for k in 1..slots {
            let i = (hot + k) % slots;
            let n = self.receive_from(i, mem, max_calls, first, width)?;
            if n > 0 {
                self.rx_hot = i;
                total += n;
                if one {
                    break;
                }
            }
        }
        Ok(total)
    }

    /// [`UdpDevice::receive`] from socket slot `i` (nothing if it is closed).
    fn receive_from(
        &mut self,
        i: usize,
        mem: &mut dyn MemoryAccess,
        max_calls: usize,
        first: usize,
        width: usize,
    ) -> io::Result<usize> {
        if max_calls == 1 && first <= 1 {
            // One datagram (a busy-poll's receive): the call below makes one
            // one-buffer `recv_batch`, done here without the batch bookkeeping.
            let Some(slot) = self.rx_bufs.first_mut() else {
                return Ok(0);
            };
            let mut buf = std::mem::take(slot);
            let r = match self.socks.get_mut(i) {
                Some(s) => s.recv_single(&mut buf),
                None => Ok((0, None)),
            };
            if let Ok((_, Some((from, len)))) = r {
                let now = Instant::now();
                self.on_datagram(from, &buf[..len], mem, now);
            }
            if let Some(slot) = self.rx_bufs.first_mut() {
                *slot = buf;
            }
            return r.map(|(n, _)| n);
        }
        if self.socks.get_mut(i).is_none() {
            return Ok(0);
        }
        let mut bufs = std::mem::take(&mut self.rx_bufs);
        let mut got = std::mem::take(&mut self.rx_got);
        let most = bufs.len().clamp(1, sock::RECV_BATCH_MAX);
        let width = width.clamp(1, most);
        let mut w = first.clamp(1, most);
        let mut r = Ok(0);
        let mut total = 0;
        for _ in 0..max_calls {
            r = match self.socks.get_mut(i) {
                Some(s) => s.recv_batch(&mut bufs[..w], &mut got),
                None => Ok(0),
            };
            if !got.is_empty() {
                let now = Instant::now();
                for &(j, from, len) in &got {
                    self.on_datagram(from, &bufs[j][..len], mem, now);
                }
            }
            match r {
                Ok(n) => total += n,
                Err(_) => break,
            }
            if !matches!(r, Ok(n) if n == w) {
                break;
            }
            w = width;
        }
        self.rx_bufs = bufs;
        self.rx_got = got;
        r.map(|_| total)
    }

    /// While RDMA reads of ours are in flight: receives up to `max` datagrams one at a
    /// time. The data of a `READ_DATA` frame for one of our reads, new on its connection
    /// (not a duplicate, inside the receive window), is received straight into the read's
    /// destination (its headers into a small buffer): no copy through a receive buffer.
    /// When the read last placed into has data left, its next datagram is expected and
    /// received in one call ([`UdpDevice::receive_expected`]); otherwise each datagram is
    /// first peeked at. Anything else is received into a receive buffer and handled as
    /// usual. Returns how many datagrams were received (0: none waiting).
    /// Every socket is read, the one that received last first.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn receive_placed(&mut self, mem: &mut dyn MemoryAccess, max: usize) -> io::Result<usize> {
        let slots = self.socks.slots();
        let hot = self.rx_hot.min(slots - 1);
        let mut n = 0;
        for k in 0..slots {
            if n >= max {
                break;
            }
            let i = (hot + k) % slots;
            let m = self.receive_placed_from(i, mem, max - n)?;
            if m > 0 {
                self.rx_hot = i;
                n += m;
            }
        }
        Ok(n)
    }

    /// [`UdpDevice::receive_placed`] from socket slot `i` (nothing if it is closed).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn receive_placed_from(
        &mut self,
        i: usize,
        mem: &mut dyn MemoryAccess,
        max: usize,
    ) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            match self.receive_expected(i, mem)? {
                Some(true) => {
                    n += 1;
                    continue;
                }
                Some(false) => break,
                None => {}
            }
            let mut head = [0u8; HEAD_MAX];
            let Some(sock) = self.socks.get_mut(i) else {
                break;
            };
            let Some((from, total)) = sock.peek(&mut head)? else {
                break;
            };
            n += 1;
            let now = Instant::now();
            if let Some((h, id, offset, dest, start)) = self.placeable(from, &head, total, mem) {
                let len = total - HEAD_MAX;
                let got = match (
                    mem.region_mut(dest)
                        .and_then(|b| b.get_mut(start..start + len)),
                    self.socks.get_mut(i),
                ) {
                    (Some(d), Some(sock)) => sock.recv_split(&mut head, d)?,
                    _ => None,
                };
                if let Some((from2, total2)) = got {
                    if (from2, total2) == (from, total) {
                        self.stats.rx_placed += 1;
                        self.expect = Some(((from, h.src_connid), id, len));
                        self.on_frame(from, h, &[], Some((id, offset, len as u64)), mem, now);
                    } else {
                        // Not the datagram peeked at (cannot happen on a socket only
                        // this device reads): its bytes went to the read's destination
                        // while the read is pending, and it is not counted: the sender
                        // sends the frame again.
                        self.stats.bad_frames += 1;
                    }
                }
                continue;
            }
            let mut bufs = std::mem::take(&mut self.rx_bufs);
            let mut got = std::mem::take(&mut self.rx_got);
            let r = match self.socks.get_mut(i) {
                Some(s) => s.recv_batch(&mut bufs[..1], &mut got),
                None => Ok(0),
            };
            for &(j, from, len) in &got {
                self.on_datagram(from, &bufs[j][..len], mem, now);
            }
            self.rx_bufs = bufs;
            self.rx_got = got;
            if r? == 0 {
                break;
            }
        }
        Ok(n)
    }

    /// Receives the next datagram in one call, without a peek, if a datagram is expected:
    /// the continuation of the read last placed into (`expect`), whose next
    /// range ([`SoftRdma::read_next`]: nothing of the read written there yet) receives
    /// the bytes after the headers, a receive buffer the rest of a longer datagram. If
    /// it is that read's next `READ_DATA` (valid, fresh, the expected offset and length)
    /// the data is in place; otherwise the datagram is put back together in the receive
    /// buffer and handled as usual (the read's range it passed through is written again
    /// by the read's own data before the read can finish). `None`: nothing expected (the
    /// caller peeks); `Some(false)`: nothing was waiting; `Some(true)`: one datagram
    /// received. Only on socket slot `i` of the read's connection (`None` on another).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn receive_expected(
        &mut self,
        i: usize,
        mem: &mut dyn MemoryAccess,
    ) -> io::Result<Option<bool>> {
        let Some((key, id, chunk)) = self.expect else {
            return Ok(None);
        };
        let Some(c) = self.conns.get(&key) else {
            self.expect = None;
            return Ok(None);
        };
        if c.via != i {
            return Ok(None);
        }
        let next = self.rdma.read_next(&c.peer, id).and_then(|(offset, left)| {
            let len = usize::try_from(left).ok()?.min(chunk);
            let (dest, start) = self.rdma.read_dest(&c.peer, id, offset, len as u64, mem)?;
            Some((offset, len, dest, start))
        });
        let Some((offset, len, dest, start)) = next else {
            self.expect = None;
            return Ok(None);
        };
        let mut bufs = std::mem::take(&mut self.rx_bufs);
        let mut head = [0u8; HEAD_MAX];
        let Some(d) = mem
            .region_mut(dest)
            .and_then(|b| b.get_mut(start..start + len))
        else {
            self.rx_bufs = bufs;
            self.expect = None;
            return Ok(None);
        };
        let got = match self.socks.get_mut(i) {
            Some(sock) => sock.recv_split3(&mut head, d, &mut bufs[0]),
            None => Ok(None),
        };
        let (from, total) = match got {
            Ok(Some(x)) => x,
            Ok(None) => {
                self.rx_bufs = bufs;
                return Ok(Some(false));
            }
            Err(e) => {
                self.rx_bufs = bufs;
                return Err(e);
            }
        };
        let now = Instant::now();
        if total == HEAD_MAX + len {
            if let Some((h, id2, offset2, dest2, start2)) = self.placeable(from, &head, total, mem)
            {
                if (id2, offset2, dest2, start2) == (id, offset, dest, start) {
                    self.rx_bufs = bufs;
                    self.stats.rx_placed += 1;
                    self.stats.rx_expected += 1;
                    self.on_frame(from, h, &[], Some((id, offset, len as u64)), mem, now);
                    return Ok(Some(true));
                }
            }
        }
        // The read's next data, longer than expected (the sender's datagrams are not all
        // alike, see `splice_span`): its tail, in the receive buffer, goes after the rest.
        let extra = total.saturating_sub(HEAD_MAX + len);
        if extra > 0 && extra <= bufs[0].len() {
            if let Some((h, id2, offset2, dest2, start2)) = self.placeable(from, &head, total, mem)
            {
                let tail = mem
                    .region_mut(dest)
                    .and_then(|b| b.get_mut(start + len..start + len + extra));
                if let (true, Some(t)) = (
                    (id2, offset2, dest2, start2) == (id, offset, dest, start),
                    tail,
                ) {
                    t.copy_from_slice(&bufs[0][..extra]);
                    self.rx_bufs = bufs;
                    self.stats.rx_placed += 1;
                    self.stats.rx_expected += 1;
                    self.expect = Some((key, id, len + extra));
                    let placed = Some((id, offset, (len + extra) as u64));
                    self.on_frame(from, h, &[], placed, mem, now);
                    return Ok(Some(true));
                }
            }
        }
        // Something else: put it back together in the receive buffer (its tail is
        // already there, after the part that went to the read's range) and handle it.
        self.stats.rx_unexpected += 1;
        let b = &mut bufs[0];
        if total > b.len() {
            // Longer than a receive buffer: dropped and counted, as a batched receive
            // does (one longer than all three pieces was counted already).
            if total <= HEAD_MAX + len + b.len() {
                if let Some(sock) = self.socks.get_mut(i) {
                    sock.stats.rx_truncated += 1;
                }
            }
        } else {
            let in_head = total.min(HEAD_MAX);
            let in_dest = (total - in_head).min(len);
            let in_spare = total - in_head - in_dest;
            b.copy_within(..in_spare, in_head + in_dest);
            b[..in_head].copy_from_slice(&head[..in_head]);
            if let Some(d) = mem.region(dest).and_then(|r| r.get(start..start + in_dest)) {
                b[in_head..in_head + in_dest].copy_from_slice(d);
                self.on_datagram(from, &b[..total], mem, now);
            }
        }
        self.rx_bufs = bufs;
        Ok(Some(true))
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn receive_placed(&mut self, _mem: &mut dyn MemoryAccess, _max: usize) -> io::Result<usize> {
        Ok(0)
    }

    /// Whether the peeked datagram (`head`: its first bytes, `total`: its length) is a
    /// `READ_DATA` frame whose data can be received into its destination: a valid header
    /// for this device from a known connection, a sequence number not seen yet and inside
    /// the receive window, and a pending read of that peer whose range holds the data.
    /// Returns the header, the read's id and offset, and the destination region and
    /// offset.
    fn placeable(
        &self,
        from: SocketAddr,
        head: &[u8; HEAD_MAX],
        total: usize,
        mem: &dyn MemoryAccess,
    ) -> Option<(Header, u64, u64, MemHandle, usize)> {
        if total <= HEAD_MAX || head[3] != KIND_READ_DATA {
            return None;
        }
        let h = Header::parse_head(head, total).ok()?;
        if h.dst_connid != self.addr.connid {
            return None;
        }
        let c = self.conns.get(&(from, h.src_connid))?;
        let fresh = h.seq > c.cum && h.seq - c.cum <= RECV_WINDOW && !c.ooo.contains(&h.seq);
        if !fresh {
            return None;
        }
        let mut w = [0u8; 8];
        w.copy_from_slice(&head[HDR_LEN..HDR_LEN + 8]);
        let id = u64::from_le_bytes(w);
        w.copy_from_slice(&head[HDR_LEN + 8..HEAD_MAX]);
        let offset = u64::from_le_bytes(w);
        let len = (total - HEAD_MAX) as u64;
        let (dest, start) = self.rdma.read_dest(&c.peer, id, offset, len, mem)?;
        Some((h, id, offset, dest, start))
    }

    /// Busy-polls the socket, one datagram per receive call, for at most
    /// [`UdpConfig::spin`] (and at most `wait`) when an answer is expected (a frame
    /// unacknowledged, an RDMA operation or read in flight) and nothing waits to be sent;
    /// returns whether it received something (else the caller blocks).
    fn spin(&mut self, mem: &mut dyn MemoryAccess, wait: Option<Duration>) -> io::Result<bool> {
        // A spliced read's status waits for the acknowledgement of its data, which the
        // reader sends as soon as it has it all (`hurry_read_ack`): worth a short spin
        // rather than a wake-up.
        let spin = if self.conns.values().any(|c| !c.finishing.is_empty()) {
            self.cfg.spin.max(FINISH_SPIN)
        } else {
            self.cfg.spin
        };
        let budget = wait.map_or(spin, |w| w.min(spin));
        if budget.is_zero() || !self.txq.is_empty() || !self.expects_answer() {
            return Ok(false);
        }
        let start = Instant::now();
        for i in 0u32.. {
            if self.receive(mem, 1, 1, 1)? > 0 {
                return Ok(true);
            }
            // The clock is read every fourth try (a receive call is about a microsecond).
            if i % 4 == 3 && start.elapsed() >= budget {
                break;
            }
            std::hint::spin_loop();
        }
        Ok(false)
    }

    /// Whether a peer's answer is expected: a frame unacknowledged, a read being served,
    /// or an RDMA operation of ours in flight.
    fn expects_answer(&self) -> bool {
        self.rdma.pending() > 0
            || self
                .conns
                .values()
                .any(|c| !c.unacked.is_empty() || !c.reads.is_empty() || !c.finishing.is_empty())
    }

    /// Served-read frames among the first `n` queued whose range can no longer be read
    /// (the key was deregistered, the region is gone or shrank) become the read's
    /// `READ_RESP` with `NoMemory`: the requester's read fails rather than waiting for data
    /// that will never come (a frame's sequence number must still be delivered).
    fn check_frames(&mut self, n: usize, mem: &dyn MemoryAccess) {
        for o in self.txq.range(..n) {
            // (A body never becomes a served read's: frames that were not one when queued
            // need no look-up.)
            let Out::Frame(k, seq, true) = o else {
                continue;
            };
            let Some(c) = self.conns.get_mut(k) else {
                continue;
            };
            let Some(f) = c.unacked.get_mut(seq) else {
                continue;
            };
            if let Body::Read {
                id,
                key,
                mem: h,
                off,
                len,
                ..
            } = f.body
            {
                if self.rdma.read_chunk(key, h, off, len, mem).is_none() {
                    let mut b = Vec::new();
                    RdmaMsg::ReadResp {
                        id,
                        status: RdmaStatus::NoMemory,
                    }
                    .emit(&mut b);
                    c.unacked_bytes -= f.body.len();
                    c.unacked_bytes += b.len();
                    self.fill_due = true;
                    f.kind = KIND_READ_RESP;
                    f.body = Body::Bytes(b);
                }
            }
        }
    }

    /// The pieces of queued datagram `o` (queue index `i`) as `flush` gathers them: the
    /// destination, the frame header (and a served read's message header) built now with
    /// the acknowledgement state of the moment, its length, and the payload where it lies.
    /// `None`: a frame acknowledged (or a connection failed) since it was queued, or a
    /// served read's range gone (checked by `check_frames` just before).
    /// (Always inlined: the piece, ~100 bytes with its header, is then built where the
    /// caller keeps it instead of returned through memory.)
    #[inline(always)]
    fn piece<'a>(
        conns: &'a HashMap<ConnKey, Conn>,
        socks: &Socks,
        i: usize,
        o: &'a Out,
        mem: &'a dyn MemoryAccess,
        my_connid: u32,
    ) -> Option<Piece<'a>> {
        match o {
            Out::Dgram(to, via, d) => {
                // The slot may have been closed, or reopened for another peer, since.
                let via = if socks.peer_at(*via) == Some(*to) {
                    *via
                } else {
                    0
                };
                Some((i, via, *to, [0; HEAD_MAX], 0, d, false))
            }
            Out::Frame(k, seq, _) => {
                let c = conns.get(k)?;
                let f = c.unacked.get(seq)?;
                let mut head = [0u8; HEAD_MAX];
                let mut head_len = HDR_LEN;
                let mut splice = false;
                let payload = match &f.body {
                    Body::Bytes(b) => &b[..],
                    Body::Read {
                        id,
                        offset,
                        mem: h,
                        off,
                        len,
                        splice: s,
                        ..
                    } => {
                        splice = *s;
                        let range = mem.region(*h).and_then(|b| {
                            let s = usize::try_from(*off).ok()?;
                            b.get(s..s.checked_add(usize::try_from(*len).ok()?)?)
                        })?;
                        head[HDR_LEN..HDR_LEN + READ_DATA_HDR]
                            .copy_from_slice(&RdmaMsg::read_data_header(*id, *offset));
                        head_len += READ_DATA_HDR;
                        range
                    }
                };
                Header {
                    kind: f.kind,
                    src_connid: my_connid,
                    dst_connid: c.peer.qkey,
                    seq: *seq as u32,
                    ack: c.cum,
                    sack: c.sack(),
                }
                .emit(f.body.len(), &mut head);
                Some((i, c.via, c.sock, head, head_len, payload, splice))
            }
        }
    }

    /// Sends the queued datagrams until the queue is empty or the socket would block, in
    /// batches of [`UdpConfig::batch`] gathered from their pieces: a frame's header is
    /// built now, its body (or a served read's bytes, from the region) is sent from where
    /// it lies. Frames acknowledged since they were queued are skipped; a datagram the
    /// kernel refuses is dropped and counted (the reliability layer sends it again).
    /// (Inlined: most calls find nothing queued, and return before the call.)
    #[inline]
    fn flush(&mut self, mem: &dyn MemoryAccess) -> io::Result<()> {
        if self.txq.is_empty() && self.shim.is_none() {
            return Ok(());
        }
        self.flush_queued(mem)
    }

    /// [`UdpDevice::flush`] when something is queued (or the shim may release some).
    #[inline(never)]
    fn flush_queued(&mut self, mem: &dyn MemoryAccess) -> io::Result<()> {
        if let Some(s) = &mut self.shim {
            s.release(&mut self.txq);
        }
        self.tx_blocked = None;
        self.send_soon = false;
        let my_connid = self.addr.connid;
        if self.txq.len() == 1 {
            // One frame queued, not a served read's (a ping-pong's message or answer): what
            // the loop below does with it, without its batch machinery. Such a frame needs
            // no `check_frames` and is never spliced; it goes alone through its
            // connection's socket slot. (Done with, it leaves the queue by `pop_front`:
            // the queue's only entry, a frame, has nothing to drop, where `clear` walks
            // the queue to drop each entry.)
            if let Some(o @ Out::Frame(_, _, false)) = self.txq.front() {
                let Some(p) = Self::piece(&self.conns, &self.socks, 0, o, mem, my_connid) else {
                    // Acknowledged (or its connection failed) since it was queued.
                    self.txq.pop_front();
                    return Ok(());
                };
                let msgs = [gather(&p)];
                let sock = self.socks.get_or_listener(p.1);
                match sock.send_gather(&msgs) {
                    Ok(0) => {} // (never for one datagram) the loop below tries again
                    Ok(_) => {
                        self.txq.pop_front();
                        return Ok(());
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.tx_blocked = Some(p.1);
                        return Ok(());
                    }
                    Err(e) => {
                        tracing::trace!(error = %e, "UDP send refused");
                        sock.count_refused();
                        self.txq.pop_front();
                        return Ok(());
                    }
                }
            }
        }
        let batch = self.cfg.batch.max(1);
        let splice = self.cfg.splice && sock::PEEK;
        while !self.txq.is_empty() {
            let n = self.txq.len().min(batch);
            self.check_frames(n, mem);
            // A lone datagram (a ping-pong's) is gathered on the stack, no allocation.
            let mut one: Option<Piece<'_>> = None;
            let mut pieces: Vec<Piece<'_>> = Vec::new();
            if n == 1 {
                let (conns, socks) = (&self.conns, &self.socks);
                one = self
                    .txq
                    .front()
                    .and_then(|o| Self::piece(conns, socks, 0, o, mem, my_connid));
            } else {
                pieces.reserve(n);
                pieces.extend(self.txq.range(..n).enumerate().filter_map(|(i, o)| {
                    Self::piece(&self.conns, &self.socks, i, o, mem, my_connid)
                }));
            }
            let pieces: &[Piece<'_>] = match &one {
                Some(p) => std::slice::from_ref(p),
                None => &pieces,
            };
            // A served read's large datagram to a peer with a connected socket: its data
            // spliced from the region, alone (see `Sock::send_spliced`).
            let socks = &self.socks;
            let spliced = |p: &Piece<'_>| {
                splice
                    && p.6
                    && p.4 > HDR_LEN
                    && p.5.len() >= SPLICE_MIN
                    && socks.peer_at(p.1) == Some(p.2)
            };
            if let Some(p) = pieces.first().filter(|p| spliced(p)) {
                let sock = self.socks.get_or_listener(p.1);
                let done = match sock.send_spliced(&p.3[..p.4], p.5) {
                    Ok(()) => pieces.get(1).map_or(n, |q| q.0),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        // Sent again at the next flush (a datagram begun was ended short
                        // and is dropped by the peer for its length).
                        self.tx_blocked = Some(p.1);
                        self.txq.drain(..p.0);
                        return Ok(());
                    }
                    Err(e) => {
                        tracing::trace!(error = %e, "UDP spliced send refused");
                        sock.count_refused();
                        p.0 + 1
                    }
                };
                self.txq.drain(..done);
                continue;
            }
            // One call sends through one socket: the datagrams up to the first of
            // another slot or to splice (the rest go in the next round).
            let via = pieces.first().map_or(0, |p| p.1);
            let run = pieces
                .iter()
                .take_while(|p| p.1 == via && !spliced(p))
                .count();
            let (pieces, rest) = pieces.split_at(run);
            let single: [(SocketAddr, [IoSlice<'_>; 2]); 1];
            let many: Vec<(SocketAddr, [IoSlice<'_>; 2])>;
            let msgs: &[(SocketAddr, [IoSlice<'_>; 2])] = if let [p] = pieces {
                single = [gather(p)];
                &single
            } else {
                many = pieces.iter().map(gather).collect();
                &many
            };
            // Queue entries up to (not including) this index are done.
            let sock = self.socks.get_or_listener(via);
            let done = match sock.send_gather(msgs) {
                Ok(sent) if sent >= pieces.len() => rest.first().map_or(n, |p| p.0),
                Ok(sent) => pieces[sent].0,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.tx_blocked = Some(via);
                    let skipped = pieces.first().map_or(n, |p| p.0);
                    self.txq.drain(..skipped);
                    return Ok(());
                }
                Err(e) => {
                    tracing::trace!(error = %e, "UDP send refused");
                    sock.count_refused();
                    pieces.first().map_or(n, |p| p.0 + 1)
                }
            };
            self.txq.drain(..done);
        }
        Ok(())
    }
}

impl RdmDevice for UdpDevice {
    fn addr(&self) -> RawAddr {
        self.addr.to_raw()
    }

    fn mtu(&self) -> usize {
        self.datagram_max() - HDR_LEN
    }

    fn submit(&mut self, t: Transmit, mem: &mut dyn MemoryAccess) {
        match t {
            Transmit::Send {
                token, dest, bytes, ..
            } => {
                if bytes.len() > self.mtu() {
                    self.events.push_back(DeviceEvent::SendDone {
                        token,
                        outcome: SendOutcome::Error,
                    });
                } else if !self.enqueue(&dest, KIND_PKT, bytes, Some(token), true, true) {
                    // Reported at the next `progress`, after IO may have made room: an
                    // immediate `Again` would have the owner resubmit in a loop.
                    self.stats.send_again += 1;
                    self.again.push(token);
                }
            }
            Transmit::RdmaRead {
                token,
                dest,
                local,
                offset,
                remote,
                len,
                ..
            } => {
                let req = self
                    .rdma
                    .start_read(token, dest, local, offset, remote, len);
                let mut b = Vec::new();
                req.emit(&mut b);
                self.enqueue(&dest, req.kind(), b, None, false, false);
            }
            Transmit::RdmaWrite {
                token,
                dest,
                local,
                offset,
                remote,
                len,
                ..
            } => {
                let chunk = self.rdma_chunk().max(1);
                let id = self.rdma.begin_write(token, dest, local, offset, len, mem);
                let src = mem.region(local).and_then(|b| {
                    let s = usize::try_from(offset).ok()?;
                    b.get(s..s.checked_add(usize::try_from(len).ok()?)?)
                });
                match (id, src) {
                    (Some(id), Some(src)) => {
                        // Each chunk's body is built from the region in one copy (at least
                        // one message, even for zero bytes).
                        let mut off = 0usize;
                        loop {
                            let end = (off + chunk).min(src.len());
                            let mut b = Vec::with_capacity(WRITE_HDR + end - off);
                            b.extend_from_slice(&RdmaMsg::write_header(
                                id,
                                remote.key,
                                remote.addr,
                                len,
                                off as u64,
                            ));
                            b.extend_from_slice(&src[off..end]);
                            self.enqueue(&dest, KIND_WRITE, b, None, false, false);
                            off = end;
                            if off >= src.len() {
                                break;
                            }
                        }
                    }
                    _ => self
                        .events
                        .push_back(DeviceEvent::RdmaDone { token, ok: false }),
                }
            }
            Transmit::Register {
                mem: h,
                len,
                remote,
            } => {
                let result = self.rdma.try_register(h, len, remote).ok_or(());
                self.events
                    .push_back(DeviceEvent::RegisterDone { mem: h, result });
            }
            Transmit::Deregister { key } => {
                self.rdma.deregister(key);
            }
        }
        self.fill_windows(mem, None);
    }

    fn progress(
        &mut self,
        mem: &mut dyn MemoryAccess,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        let now = Instant::now();
        self.sent_soon = false;
        if std::mem::take(&mut self.fresh_any) {
            for c in self.conns.values_mut() {
                c.fresh = 0;
            }
        }
        self.fill_windows(mem, Some(now));
        // Only after an absence (as `timers` judges one): frames queued since a recent
        // `progress` were timed recently enough, and a long queue (a full socket) is not
        // walked on every call.
        if !self.txq.is_empty()
            && self
                .last_read
                .is_none_or(|l| now.saturating_duration_since(l) >= self.cfg.min_rto / 4)
        {
            self.retime_unsent(now);
        }
        // No timer fires before the socket is read (see `timers`): an overdue deadline
        // only makes the wait zero. The deadline is needed for a wait, and to see whether
        // a timer is due before a one-datagram receive (below); a busy-polling call
        // that reads a batch anyway does not look for it.
        let zero = timeout == Some(Duration::ZERO);
        let next = if self.rx_narrow || !zero {
            self.next_deadline()
        } else {
            None
        };
        self.flush(mem)?;
        let busy = !self.events.is_empty()
            || !self.again.is_empty()
            || self.shim.as_ref().is_some_and(|s| s.held() > 0)
            || (self.rnr_retry && self.conns.values().any(|c| !c.held.is_empty()));
        let wait = if busy || zero {
            Some(Duration::ZERO)
        } else {
            let until_timer = next.map(|n| n.saturating_duration_since(now));
            match (timeout, until_timer) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        };
        // A zero wait needs no poll(2): the non-blocking receive below finds out as well,
        // one system call fewer on the fast path.
        let mut hit = false;
        if wait != Some(Duration::ZERO) {
            hit = self.spin(mem, wait)?;
            if hit {
                self.stats.spin_hits += 1;
            } else {
                let left = wait.map(|w| w.saturating_sub(now.elapsed()));
                // Woken by a socket: it is read first, and the others too (see `receive`).
                // Writable wanted of the blocked socket only: another one, writable,
                // would end every wait at once (a spin) while that one stays full.
                let write = self.tx_blocked.filter(|_| !self.txq.is_empty());
                if let Some(i) = self.socks.wait(write, left)? {
                    self.rx_hot = i;
                    self.rx_all = true;
                }
            }
            // Waiting on the socket is watching it (see `timers`).
            self.last_read = Some(Instant::now());
        }
        // Timers are judged at `read_at`: the socket held no ACK of theirs then. Without a
        // wait, the time read at the start serves (earlier than the read, so no timer is
        // judged expired that was not by then; one clock read fewer per busy-poll).
        let read_at = if wait == Some(Duration::ZERO) {
            now
        } else {
            Instant::now()
        };
        // After a busy-poll hit, the rest of the socket is read now only if a timer is
        // due (it must not fire with an ACK unread); otherwise at the next `progress`.
        // Likewise after a one-datagram receive that found one (`rx_narrow`: the last
        // batched receive got at most one datagram, as in a ping-pong, so `recvfrom` is
        // tried first; it needs no message-header arrays, a cheaper spin of the owner).
        let timer_due = next.is_some_and(|n| n <= read_at);
        // A `recvfrom` that found nothing found the socket empty: no batched receive
        // after it (a busy-polled ping-pong's miss cost a `recvfrom` and a `recvmmsg`).
        // After a hit, the next `progress` reads a batch (in a ping-pong it finds
        // nothing, just after the answer went out, and the device is narrow again; a
        // stream stays in batches while each `progress` finds two datagrams or more).
        // (Staying narrow until two consecutive hits saved that `recvmmsg` but read
        // streams of small messages one datagram per call for longer, with a pure ACK for
        // every second one: `tag_msgrate 8` lost ~10 %.)
        let mut drained = false;
        if !hit && self.rx_narrow {
            hit = self.receive(mem, 1, 1, 1)? > 0;
            self.rx_narrow = !hit;
            self.rx_probe = hit;
            drained = !hit;
        }
        if (!hit && !drained) || timer_due {
            // A timer is judged below: every socket is read first.
            self.rx_all |= timer_due;
            // The first batched receive after a one-datagram hit reads a few datagrams
            // only (`RX_PROBE`): in a ping-pong it finds the socket empty, and a call's
            // cost grows with its width (every message header is set up, ~20
            // instructions each); a stream that fills it goes on at full width.
            let all = self.rx_bufs.len();
            let first = if std::mem::take(&mut self.rx_probe) {
                RX_PROBE
            } else {
                all
            };
            let n = self.receive(mem, 16, first, all)?;
            self.rx_narrow = n <= 1;
        }
        let last_read = self.last_read.replace(read_at);
        self.timers(read_at, last_read);
        // The clock is read again only if a frame goes out or an ACK is pending.
        self.fill_windows(mem, None);
        self.acks(None);
        self.flush(mem)?;
        // Held packets go up again after the socket was read, so that the receive above
        // still saw how many are held (and left new packet frames unacknowledged beyond
        // RNR_HELD_MAX), and only when the endpoint may take them now (`retry_refused`).
        if std::mem::take(&mut self.rnr_retry) {
            for c in self.conns.values_mut() {
                for bytes in c.held.drain(..) {
                    self.events
                        .push_back(DeviceEvent::Recv { src: c.peer, bytes });
                }
            }
        }
        for token in self.again.drain(..) {
            self.events.push_back(DeviceEvent::SendDone {
                token,
                outcome: SendOutcome::Again,
            });
        }
        Ok(())
    }

    fn flush_tx(&mut self, mem: &mut dyn MemoryAccess) -> io::Result<()> {
        self.fill_windows(mem, None);
        self.flush(mem)
    }

    fn send_soon(&mut self, mem: &mut dyn MemoryAccess) -> io::Result<()> {
        if self.send_soon {
            self.sent_soon = true;
            self.flush_tx(mem)?;
        }
        Ok(())
    }

    #[inline]
    fn poll_event(&mut self) -> Option<DeviceEvent> {
        self.events.pop_front()
    }

    #[inline]
    fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    fn rx_count(&self) -> u64 {
        self.socks.stats().rx_datagrams
    }

    fn retry_refused(&mut self) {
        self.rnr_retry = true;
    }

    /// Receiver not ready: the packet is held on its connection and handed in again at
    /// the `progress` after [`RdmDevice::retry_refused`] (see [`RNR_HELD_MAX`] for what
    /// bounds it).
    fn refuse(&mut self, src: RawAddr, bytes: Vec<u8>) {
        let a = UdpAddr::from_raw(&src);
        if let Some(c) = self.conns.get_mut(&(a.sock, a.connid)) {
            self.stats.rnr_held += 1;
            c.held.push_back(bytes);
        }
    }

    fn is_idle(&self) -> bool {
        self.is_idle_apart_from_refused() && self.conns.values().all(Conn::idle)
    }

    /// Idle but for held refused packets that wait for [`RdmDevice::retry_refused`].
    fn is_idle_apart_from_refused(&self) -> bool {
        self.events.is_empty()
            && self.again.is_empty()
            && self.txq.is_empty()
            && self.rdma.pending() == 0
            && self.shim.as_ref().is_none_or(|s| s.held() == 0)
            && self.conns.values().all(Conn::idle_apart_from_held)
            && !(self.rnr_retry && self.conns.values().any(|c| !c.held.is_empty()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tagmatch_rdm::MemHandle;

    pub(super) struct NoMem(pub(super) Vec<u8>);

    impl MemoryAccess for NoMem {
        fn region(&self, mem: MemHandle) -> Option<&[u8]> {
            (mem.0 == 0).then_some(&self.0[..])
        }
        fn region_mut(&mut self, mem: MemHandle) -> Option<&mut [u8]> {
            (mem.0 == 0).then_some(&mut self.0[..])
        }
    }

    pub(super) fn dev() -> UdpDevice {
        UdpDevice::bind(UdpConfig::new("127.0.0.1:0".parse().expect("addr"))).expect("bind")
    }

    /// Busy-polling an empty socket (a ping-pong waiting for its answer) costs one
    /// `recvfrom` per `progress`, not a `recvfrom` and a `recvmmsg`; after a datagram,
    /// the next `progress` reads a batch, and a stream stays in batches until a batched
    /// receive finds at most one datagram.
    #[test]
    fn busy_polling_costs_one_receive_call_and_a_stream_is_read_in_batches() {
        let mut d = dev();
        let mut mem = NoMem(Vec::new());
        let calls = |d: &UdpDevice| d.socks.stats().recv_calls;
        let zero = Some(Duration::ZERO);
        // The first `progress` reads a batch (none yet), then the device is narrow.
        d.progress(&mut mem, zero).expect("progress");
        let before = calls(&d);
        for _ in 0..10 {
            d.progress(&mut mem, zero).expect("progress");
        }
        assert_eq!(calls(&d) - before, 10);
        // A stream of 40 datagrams (not frames: counted as bad and dropped).
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let to = d.addr.sock;
        let send = |n| {
            for _ in 0..n {
                tx.send_to(&[0u8; 40], to).expect("send");
            }
        };
        send(40);
        let before = calls(&d);
        d.progress(&mut mem, zero).expect("progress");
        assert_eq!((calls(&d) - before, d.socks.stats().rx_datagrams), (1, 1));
        // The next reads the other 39 in three batched calls: a probe of RX_PROBE = 4
        // (full, so the stream goes on at full width), 32, then 3 (drained).
        d.progress(&mut mem, zero).expect("progress");
        assert_eq!((calls(&d) - before, d.socks.stats().rx_datagrams), (4, 40));
        // Still batched (that `progress` got more than one), at full width: 5 more in one
        // call.
        send(5);
        d.progress(&mut mem, zero).expect("progress");
        assert_eq!((calls(&d) - before, d.socks.stats().rx_datagrams), (5, 45));
        // An empty batch returns the device to narrow mode.
        d.progress(&mut mem, zero).expect("progress");
        assert!(d.rx_narrow);
        d.progress(&mut mem, zero).expect("progress");
        assert_eq!(calls(&d) - before, 7);
        assert_eq!(d.stats().bad_frames, 45);
    }

    /// A device whose readiness thread was started releases its port when dropped (the
    /// thread's duplicate of the descriptor is closed with it): an endpoint restarted on
    /// the same port binds at once. (The thread held the socket open until its current
    /// `poll(2)` returned, up to `watch::STOP_LATENCY` later.)
    #[test]
    fn a_dropped_device_releases_its_port_although_its_watcher_ran() {
        struct Nop;
        impl std::task::Wake for Nop {
            fn wake(self: std::sync::Arc<Self>) {}
        }
        let waker = std::task::Waker::from(std::sync::Arc::new(Nop));
        for _ in 0..20 {
            let mut d = dev();
            let at = d.udp_addr().sock;
            assert!(d.wake_when_ready(&waker).expect("arm"));
            // Let the thread get into its `poll(2)`.
            std::thread::sleep(Duration::from_millis(5));
            drop(d);
            std::net::UdpSocket::bind(at).expect("the port is free once the device is dropped");
        }
    }

    /// Progresses `d` (busy) until `done` holds, for at most 5 s.
    fn progress_until(d: &mut UdpDevice, done: impl Fn(&UdpDevice) -> bool) {
        let t = Instant::now();
        while !done(d) && t.elapsed() < Duration::from_secs(5) {
            d.progress(&mut NoMem(Vec::new()), Some(Duration::ZERO))
                .expect("progress");
        }
        assert!(done(d), "{:?}", d.stats());
    }

    /// A peer's datagrams come through the socket connected to it once one is open: a
    /// readiness thread started before that socket existed watches it too, and a
    /// busy-poll of the idle device reads it once per call and the device's socket
    /// every `COLD_EVERY`-th call.
    #[test]
    fn a_peers_connected_socket_is_watched_and_busy_polled_first() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Count(AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: std::sync::Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let mut a = dev_with(|u| u.ack_delay = Duration::ZERO);
        let mut b = dev();
        let n = std::sync::Arc::new(Count(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(n.clone());
        // The thread starts with the device's socket only.
        assert!(a.wake_when_ready(&waker).expect("arm"));
        send(&mut b, &a, b"first", 1, Instant::now());
        b.flush(&NoMem(Vec::new())).expect("flush");
        progress_until(&mut a, |a| a.stats().frames_received == 1);
        // `a` answered b's frame with a pure ACK at once; it owes nothing, so only a
        // readable socket can wake the thread now.
        assert_eq!(a.stats().peer_sockets, 1);
        assert_eq!(a.next_deadline(), None);
        while a.poll_event().is_some() {}
        let before = n.0.load(Ordering::SeqCst);
        assert!(a.wake_when_ready(&waker).expect("arm"));
        send(&mut b, &a, b"second", 2, Instant::now());
        b.flush(&NoMem(Vec::new())).expect("flush");
        let t = Instant::now();
        while n.0.load(Ordering::SeqCst) == before && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            n.0.load(Ordering::SeqCst),
            before + 1,
            "woken by the connected socket"
        );
        let on_peer = |a: &mut UdpDevice| a.socks.get_mut(1).map_or(0, |s| s.stats.rx_datagrams);
        assert_eq!(on_peer(&mut a), 0);
        progress_until(&mut a, |a| a.stats().frames_received == 2);
        assert_eq!(
            on_peer(&mut a),
            1,
            "the second frame came through b's socket"
        );
        // Idle busy-polling: 8 calls read b's socket 8 times and the listener twice.
        for _ in 0..4 {
            a.progress(&mut NoMem(Vec::new()), Some(Duration::ZERO))
                .expect("progress");
        }
        let calls = |a: &UdpDevice| a.socks.stats().recv_calls;
        let before = calls(&a);
        for _ in 0..8 {
            a.progress(&mut NoMem(Vec::new()), Some(Duration::ZERO))
                .expect("progress");
        }
        assert_eq!(calls(&a) - before, 8 + 8 / COLD_EVERY as u64);
    }

    /// A send submitted to a connection with nothing in flight or waiting enters the
    /// window at once (no walk over the connections: nothing waits, the walk is not
    /// due); one submitted behind it waits for the window walk. Both reach the peer and
    /// complete once it acknowledges them.
    #[test]
    fn a_send_to_an_idle_connection_enters_the_window_at_once() {
        let mut a = dev();
        let mut b = dev();
        let mut mem = NoMem(Vec::new());
        let dest = b.addr.to_raw();
        let submit = |a: &mut UdpDevice, mem: &mut NoMem, token: u64, body: &[u8]| {
            let t = Transmit::Send {
                token: SendToken(token),
                peer: tagmatch_rdm::PeerId(0),
                dest,
                bytes: body.to_vec(),
            };
            a.submit(t, mem);
        };
        a.fill_due = false;
        submit(&mut a, &mut mem, 1, b"first");
        let k = *a.conns.keys().next().expect("a connection");
        let c = &a.conns[&k];
        assert_eq!((c.unacked.len(), c.waiting.len()), (1, 0));
        assert!(
            c.unacked.get(&1).is_some(),
            "the first frame has sequence 1"
        );
        assert!(!a.fill_due, "no window walk for it");
        assert!(a.send_soon, "it leaves at send_soon");
        assert!(matches!(a.txq.front(), Some(Out::Frame(_, 1, false))));
        // Behind a frame in flight: the waiting queue and the walk, as before.
        submit(&mut a, &mut mem, 2, b"second");
        let c = &a.conns[&k];
        assert_eq!(c.unacked.len() + c.waiting.len(), 2);
        assert_eq!(a.stats.frames_sent, 2);
        // Both reach b, in order, and complete at a once b acknowledges them.
        a.send_soon(&mut mem).expect("send");
        a.flush_tx(&mut mem).expect("flush");
        let (mut got, mut done) = (Vec::new(), Vec::new());
        let start = Instant::now();
        while got.len() < 2 || done.len() < 2 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "delivered {got:?}"
            );
            b.progress(&mut mem, Some(Duration::from_millis(1)))
                .expect("progress");
            while let Some(ev) = b.poll_event() {
                if let DeviceEvent::Recv { bytes, .. } = ev {
                    got.push(bytes);
                }
            }
            b.flush_tx(&mut mem).expect("flush");
            a.progress(&mut mem, Some(Duration::from_millis(1)))
                .expect("progress");
            done.extend(send_done(&mut a));
        }
        assert_eq!(got, [b"first".to_vec(), b"second".to_vec()]);
        done.sort_by_key(|(t, _)| t.0);
        assert_eq!(
            done,
            [
                (SendToken(1), SendOutcome::Ok),
                (SendToken(2), SendOutcome::Ok)
            ]
        );
        assert_eq!(a.stats.retransmits, 0);
    }

    // ---- Delayed acknowledgements, on a virtual clock: the devices' sans-IO parts
    // (`enqueue`, `fill_windows`, `on_datagram`, `timers`, `acks` take the time as an
    // argument) with datagrams carried by hand from one transmit queue to the other. No
    // socket IO and no wall-clock assertion.

    const US: Duration = Duration::from_micros(1);

    pub(super) fn dev_with(f: impl FnOnce(&mut UdpConfig)) -> UdpDevice {
        let mut u = UdpConfig::new("127.0.0.1:0".parse().expect("addr"));
        f(&mut u);
        UdpDevice::bind(u).expect("bind")
    }

    /// `from` queues a packet of `body` for `to` at `now` (what `submit` does).
    pub(super) fn send(
        from: &mut UdpDevice,
        to: &UdpDevice,
        body: &[u8],
        token: u64,
        now: Instant,
    ) {
        let dest = to.addr.to_raw();
        assert!(from.enqueue(
            &dest,
            KIND_PKT,
            body.to_vec(),
            Some(SendToken(token)),
            true,
            false
        ));
        from.fill_windows(&NoMem(Vec::new()), Some(now));
    }

    /// Takes the frames `d` queued for the wire, as `flush` would send them.
    pub(super) fn wire(d: &mut UdpDevice) -> Vec<Vec<u8>> {
        let outs: Vec<Out> = d.txq.drain(..).collect();
        outs.into_iter()
            .filter_map(|o| match o {
                Out::Dgram(_, _, b) => Some(b),
                Out::Frame(k, seq, _) => {
                    let c = d.conns.get(&k)?;
                    let f = c.unacked.get(&seq)?;
                    let Body::Bytes(b) = &f.body else {
                        return None;
                    };
                    let h = Header {
                        kind: f.kind,
                        src_connid: d.addr.connid,
                        dst_connid: c.peer.qkey,
                        seq: seq as u32,
                        ack: c.cum,
                        sack: c.sack(),
                    };
                    Some(h.datagram(b))
                }
            })
            .collect()
    }

    /// Hands `frames` to `to` at `now`, as sent by `from`.
    pub(super) fn deliver(from: &UdpDevice, to: &mut UdpDevice, frames: &[Vec<u8>], now: Instant) {
        for f in frames {
            to.on_datagram(from.addr.sock, f, &mut NoMem(Vec::new()), now);
        }
    }

    pub(super) fn headers(frames: &[Vec<u8>]) -> Vec<Header> {
        frames
            .iter()
            .map(|f| Header::parse(f).expect("frame").0)
            .collect()
    }

    fn send_done(d: &mut UdpDevice) -> Vec<(SendToken, SendOutcome)> {
        let mut v = Vec::new();
        while let Some(e) = d.poll_event() {
            if let DeviceEvent::SendDone { token, outcome } = e {
                v.push((token, outcome));
            }
        }
        v
    }

    /// An acknowledgement that opens a window asks for the walk over the connections
    /// (`fill_due`) only when its connection has frames waiting to enter it: the frame
    /// behind a full window goes out after the ACK; the ACK of the last frame in flight,
    /// with nothing waiting, leaves the walk off.
    #[test]
    fn an_ack_asks_for_the_window_walk_only_with_frames_waiting() {
        let mut a = dev_with(|u| u.max_inflight = 1);
        let mut b = dev();
        let t0 = Instant::now();
        send(&mut a, &b, b"one", 1, t0);
        send(&mut a, &b, b"two", 2, t0);
        let k = *a.conns.keys().next().expect("a connection");
        assert_eq!(
            (a.conns[&k].unacked.len(), a.conns[&k].waiting.len()),
            (1, 1)
        );
        let f1 = wire(&mut a);
        assert_eq!(headers(&f1).iter().map(|h| h.seq).collect::<Vec<_>>(), [1]);
        deliver(&a, &mut b, &f1, t0);
        let t1 = t0 + Duration::from_secs(1);
        b.acks(Some(t1));
        let acks = wire(&mut b);
        assert_eq!(
            headers(&acks).iter().map(|h| h.ack).collect::<Vec<_>>(),
            [1]
        );
        a.fill_due = false;
        deliver(&b, &mut a, &acks, t1);
        assert!(a.fill_due, "frame 2 waits for the window the ACK opened");
        a.fill_windows(&NoMem(Vec::new()), Some(t1));
        let f2 = wire(&mut a);
        assert_eq!(headers(&f2).iter().map(|h| h.seq).collect::<Vec<_>>(), [2]);
        assert_eq!(send_done(&mut a), [(SendToken(1), SendOutcome::Ok)]);
        deliver(&a, &mut b, &f2, t1);
        let t2 = t1 + Duration::from_secs(1);
        b.acks(Some(t2));
        let acks = wire(&mut b);
        a.fill_due = false;
        deliver(&b, &mut a, &acks, t2);
        assert!(!a.fill_due, "nothing waits: no walk");
        assert!(a.conns[&k].unacked.is_empty() && a.conns[&k].waiting.is_empty());
        assert_eq!(send_done(&mut a), [(SendToken(2), SendOutcome::Ok)]);
    }

    /// A lone queued frame is sent by itself (`flush_queued`'s one-frame path): it
    /// reaches the peer's socket and leaves the queue; one acknowledged while it waited
    /// in the queue is dropped from it without a send.
    #[test]
    fn a_lone_queued_frame_is_sent_or_dropped_once_acknowledged() {
        let mut a = dev();
        let mut b = dev();
        let mut mem = NoMem(Vec::new());
        let t0 = Instant::now();
        send(&mut a, &b, b"one", 1, t0);
        assert_eq!(a.txq.len(), 1);
        let before = a.socks.stats().tx_datagrams;
        a.flush_tx(&mut mem).expect("flush");
        assert!(a.txq.is_empty());
        assert_eq!(a.socks.stats().tx_datagrams, before + 1);
        let start = Instant::now();
        let mut got = Vec::new();
        while got.is_empty() {
            assert!(start.elapsed() < Duration::from_secs(10), "not delivered");
            b.progress(&mut mem, Some(Duration::from_millis(1)))
                .expect("progress");
            while let Some(ev) = b.poll_event() {
                if let DeviceEvent::Recv { bytes, .. } = ev {
                    got.push(bytes);
                }
            }
        }
        assert_eq!(got, [b"one".to_vec()]);
        // Frame 2 is queued; its copy reaches b by hand and b's ACK comes back before a
        // flushes: the queued entry is dropped, nothing is sent.
        let t1 = t0 + Duration::from_secs(1);
        send(&mut a, &b, b"two", 2, t1);
        assert_eq!(a.txq.len(), 1);
        let queued = a.txq.clone();
        let copy = wire(&mut a);
        a.txq = queued;
        assert_eq!(
            headers(&copy).iter().map(|h| h.seq).collect::<Vec<_>>(),
            [2]
        );
        deliver(&a, &mut b, &copy, t1);
        let t2 = t1 + Duration::from_secs(1);
        b.acks(Some(t2));
        let acks = wire(&mut b);
        deliver(&b, &mut a, &acks, t2);
        let k = *a.conns.keys().next().expect("a connection");
        assert!(a.conns[&k].unacked.is_empty(), "frame 2 acknowledged");
        let before = a.socks.stats().tx_datagrams;
        a.flush_tx(&mut mem).expect("flush");
        assert!(a.txq.is_empty(), "the acknowledged frame left the queue");
        assert_eq!(a.socks.stats().tx_datagrams, before, "and was not sent");
    }

    #[test]
    fn ack_state_rules() {
        let t0 = Instant::now();
        let d = 200 * US;
        let bulk = 512 << 10;
        let mut a = AckState::default();
        assert!(!a.needed() && !a.ready(t0 + d * 1000));
        a.on_frame(Arrival::InOrder, t0, d, 8, bulk);
        assert!(a.needed());
        assert_eq!(a.due, Some(t0 + d));
        assert!(!a.ready(t0 + d - US) && a.ready(t0 + d));
        // The ACK_EVERY-th frame makes it due at once, earlier than the first's delay.
        a.on_frame(Arrival::InOrder, t0 + 10 * US, d, 8, bulk);
        assert_eq!((a.pending, a.due), (2, Some(t0 + 10 * US)));
        a.sent();
        assert_eq!(a, AckState::default());
        a.on_frame(Arrival::Urgent, t0, d, 8, bulk);
        assert!(a.ready(t0));
        // A zero delay acknowledges every frame at the end of its progress.
        let mut z = AckState::default();
        z.on_frame(Arrival::InOrder, t0, Duration::ZERO, 8, bulk);
        assert!(z.ready(t0));
        // Bulk frames count by bytes: eight 65,000-byte frames (520,000 bytes, under
        // 512 KiB) wait for the delay, the ninth (585,000 bytes) makes the ACK due at once.
        let mut b = AckState::default();
        for i in 0..8 {
            b.on_frame(Arrival::InOrder, t0 + i * US, d, 65_000, bulk);
            assert_eq!(b.due, Some(t0 + d), "frame {i}");
        }
        b.on_frame(Arrival::InOrder, t0 + 8 * US, d, 65_000, bulk);
        assert_eq!((b.pending, b.due), (9, Some(t0 + 8 * US)));
        // A frame just under the bulk size counts as a short frame.
        let mut m = AckState::default();
        m.on_frame(Arrival::InOrder, t0, d, 65_000, bulk);
        m.on_frame(Arrival::InOrder, t0, d, ACK_BULK_FRAME - 1, bulk);
        assert_eq!(m.due, Some(t0 + d));
        m.on_frame(Arrival::InOrder, t0, d, 100, bulk);
        assert_eq!(m.due, Some(t0));
        // Out of order, a bulk frame is acknowledged at once all the same.
        let mut o = AckState::default();
        o.on_frame(Arrival::Urgent, t0, d, 65_000, bulk);
        assert!(o.ready(t0));
    }

    /// A request answered within the delay: the answer carries the ACK, no pure ACK is
    /// sent by either side (the requester's ACK of the answer rides on its next request).
    #[test]
    fn ack_rides_on_the_reply_within_the_delay() {
        let mut a = dev();
        let mut b = dev();
        let delay = b.cfg.ack_delay;
        assert_eq!(delay, 200 * US);
        let t0 = Instant::now();
        for round in 0..3u64 {
            let t = t0 + delay * 10 * round as u32;
            send(&mut a, &b, b"ping", 2 * round, t);
            let req = wire(&mut a);
            assert_eq!(headers(&req)[0].seq as u64, round + 1);
            // The request carries the ACK of b's previous answer.
            assert_eq!(headers(&req)[0].ack as u64, round);
            deliver(&a, &mut b, &req, t + 5 * US);
            b.acks(Some(t + 5 * US));
            assert!(b.txq.is_empty(), "no pure ACK before the delay");
            assert_eq!(b.next_deadline(), Some(t + 5 * US + delay));
            // b answers just before the delay runs out.
            send(&mut b, &a, b"pong", 2 * round + 1, t + 4 * US + delay);
            let ans = wire(&mut b);
            let h = headers(&ans);
            assert_eq!(
                (h.len(), h[0].kind, h[0].ack as u64),
                (1, KIND_PKT, round + 1)
            );
            b.acks(Some(t + 6 * US + delay));
            assert!(b.txq.is_empty(), "the answer acknowledged the request");
            deliver(&b, &mut a, &ans, t + 10 * US + delay);
            assert_eq!(
                send_done(&mut a),
                vec![(SendToken(2 * round), SendOutcome::Ok)]
            );
            a.acks(Some(t + 11 * US + delay));
            assert!(
                a.txq.is_empty(),
                "a's ACK of the answer waits for its next request"
            );
        }
        assert_eq!((a.stats.acks_sent, b.stats.acks_sent), (0, 0));
    }

    /// No answer within the delay: a pure ACK goes once it has passed, not before, and
    /// the sender's send completes with it.
    #[test]
    fn standalone_ack_when_no_reply_comes() {
        let mut a = dev();
        let mut b = dev();
        let delay = b.cfg.ack_delay;
        let t0 = Instant::now();
        send(&mut a, &b, b"one-way", 7, t0);
        let f = wire(&mut a);
        deliver(&a, &mut b, &f, t0 + US);
        for t in [t0 + US, t0 + delay] {
            b.acks(Some(t));
            assert!(b.txq.is_empty());
        }
        b.acks(Some(t0 + US + delay));
        let acks = wire(&mut b);
        let h = headers(&acks);
        assert_eq!((h.len(), h[0].kind, h[0].ack), (1, KIND_ACK, 1));
        assert_eq!(b.stats.acks_sent, 1);
        assert!(b.conns.values().all(Conn::idle));
        b.acks(Some(t0 + 3 * delay));
        assert!(b.txq.is_empty(), "one ACK only");
        deliver(&b, &mut a, &acks, t0 + 2 * US + delay);
        assert_eq!(send_done(&mut a), vec![(SendToken(7), SendOutcome::Ok)]);
        assert!(a.conns.values().all(Conn::idle));
    }

    /// Two frames in order are acknowledged at once (a stream is not slowed by the
    /// delay); a frame after a gap and a duplicate too, with the gap in `sack`.
    #[test]
    fn streams_gaps_and_duplicates_are_acknowledged_at_once() {
        let mut a = dev();
        let mut b = dev();
        let t0 = Instant::now();
        send(&mut a, &b, b"1", 1, t0);
        send(&mut a, &b, b"2", 2, t0);
        let f = wire(&mut a);
        deliver(&a, &mut b, &f, t0);
        b.acks(Some(t0));
        assert_eq!(headers(&wire(&mut b))[0].ack, 2);
        // Frame 3 lost, 4 arrives: ACK 2 with 4 in the sack bitmap, at once.
        send(&mut a, &b, b"3", 3, t0);
        send(&mut a, &b, b"4", 4, t0);
        let f = wire(&mut a);
        deliver(&a, &mut b, &f[1..], t0);
        b.acks(Some(t0));
        let h = headers(&wire(&mut b));
        assert_eq!((h[0].ack, h[0].sack), (2, 1 << 0));
        // A duplicate of frame 4.
        deliver(&a, &mut b, &f[1..], t0);
        b.acks(Some(t0));
        assert_eq!(headers(&wire(&mut b)).len(), 1);
        assert_eq!(b.stats.duplicates, 1);
        // Frame 3 fills the gap: at once too.
        deliver(&a, &mut b, &f[..1], t0);
        b.acks(Some(t0));
        assert_eq!(headers(&wire(&mut b))[0].ack, 4);
    }

    /// A timer that expired while the device was not progressed is re-armed once (the
    /// peer gets `SRTT + ack_delay`, at least 1 ms, to send its delayed ACK) instead of
    /// firing; it fires the next time, and at once when the device was not absent.
    #[test]
    fn a_timer_expired_in_an_absence_is_rearmed_once() {
        let mut a = dev();
        let b = dev();
        let t0 = Instant::now();
        send(&mut a, &b, b"x", 1, t0);
        assert_eq!(wire(&mut a).len(), 1);
        let rto = a.cfg.initial_rto;
        let late = t0 + rto * 3;
        // Last read at t0: absent since.
        a.timers(late, Some(t0));
        assert!(a.txq.is_empty());
        assert_eq!(a.stats.retransmits, 0);
        assert_eq!(a.next_deadline(), Some(late + Duration::from_millis(1)));
        let later = late + Duration::from_millis(1);
        a.timers(later, Some(t0));
        assert_eq!((wire(&mut a).len(), a.stats.retransmits), (1, 1));
        // Not absent (read just before, or never): a due timer fires at once.
        for last_read in [Some(late - Duration::from_micros(10)), None] {
            let mut c = dev();
            send(&mut c, &b, b"y", 2, t0);
            wire(&mut c);
            c.timers(late, last_read);
            assert_eq!((wire(&mut c).len(), c.stats.retransmits), (1, 1));
        }
    }

    /// `to` receives from `from` the request `req` as frame `seq` at `now`.
    fn deliver_request(
        from: &UdpDevice,
        to: &mut UdpDevice,
        seq: u32,
        req: RdmaMsg<'_>,
        mem: &mut dyn MemoryAccess,
        now: Instant,
    ) {
        let mut body = Vec::new();
        req.emit(&mut body);
        let h = Header {
            kind: req.kind(),
            src_connid: from.addr.connid,
            dst_connid: to.addr.connid,
            seq,
            ack: 0,
            sack: 0,
        };
        to.on_datagram(from.addr.sock, &h.datagram(&body), mem, now);
    }

    /// A served read's data frames keep no copy of the bytes: they are read from the region
    /// when sent. Once the key is deregistered, the frames not sent yet go as the read's
    /// `READ_RESP` with `NoMemory` (the requester's read fails) instead of reading memory
    /// that is no longer the registered region.
    #[test]
    fn a_served_read_whose_key_goes_answers_no_memory() {
        // (Not spliced: a spliced read's final status waits for its data's
        // acknowledgements, see `fill_windows_due`; tests/review_udp.rs checks that.)
        let mut a = dev_with(|u| u.splice = false);
        let b = dev();
        let len = 100_000u64;
        let mut mem = NoMem((0..len).map(|i| i as u8).collect());
        let key = a.rdma.register(MemHandle(0), len, true);
        let now = Instant::now();
        let req = RdmaMsg::ReadReq {
            id: 9,
            key: key.key,
            addr: key.addr,
            len,
        };
        deliver_request(&b, &mut a, 1, req, &mut mem, now);
        a.fill_windows(&mem, Some(now));
        let kinds = |a: &UdpDevice| -> Vec<u8> {
            a.conns
                .values()
                .flat_map(|c| c.unacked.values().map(|f| f.kind))
                .collect()
        };
        // Two data frames (no bytes copied into them), then the final status.
        assert_eq!(
            kinds(&a),
            vec![KIND_READ_DATA, KIND_READ_DATA, KIND_READ_RESP]
        );
        let unacked_bytes =
            |a: &UdpDevice| a.conns.values().map(|c| c.unacked_bytes).sum::<usize>();
        assert_eq!(unacked_bytes(&a), 2 * READ_DATA_HDR + len as usize + 12);
        assert!(a.rdma.deregister(key.key));
        a.flush(&mem).expect("flush");
        assert!(a.txq.is_empty());
        assert_eq!(kinds(&a), vec![KIND_READ_RESP; 3]);
        assert_eq!(unacked_bytes(&a), 3 * 12);
        for c in a.conns.values() {
            for f in c.unacked.values().take(2) {
                let Body::Bytes(b) = &f.body else {
                    panic!("not converted")
                };
                assert_eq!(
                    RdmaMsg::parse(f.kind, b),
                    Some(RdmaMsg::ReadResp {
                        id: 9,
                        status: RdmaStatus::NoMemory
                    })
                );
            }
        }
        assert_eq!(a.rdma.stats.rejected_key, 2);
    }

    /// Two reads served to a peer with a connected socket (spliced): both reads' data
    /// frames go at once, their final statuses only once the data is acknowledged (the
    /// first read's status does not hold the second read back), and a key deregistered
    /// before the acknowledgement turns the status into `NoMemory`.
    #[test]
    fn a_spliced_reads_status_waits_for_its_data_and_holds_no_other_read_back() {
        for deregister in [false, true] {
            let mut a = dev();
            let b = dev();
            let len = 100_000u64;
            let mut mem = NoMem((0..2 * len).map(|i| i as u8).collect());
            let key = a.rdma.register(MemHandle(0), 2 * len, true);
            let now = Instant::now();
            for (seq, id) in [(1, 9u64), (2, 10)] {
                let req = RdmaMsg::ReadReq {
                    id,
                    key: key.key,
                    addr: key.addr + (id - 9) * len,
                    len,
                };
                deliver_request(&b, &mut a, seq, req, &mut mem, now);
            }
            a.fill_windows(&mem, Some(now));
            let frames = |a: &UdpDevice| -> Vec<(u8, Option<RdmaStatus>)> {
                a.conns
                    .values()
                    .flat_map(|c| c.unacked.values())
                    .map(|f| match &f.body {
                        Body::Bytes(b) => match RdmaMsg::parse(f.kind, &b[..]) {
                            Some(RdmaMsg::ReadResp { status, .. }) => (f.kind, Some(status)),
                            _ => (f.kind, None),
                        },
                        Body::Read { .. } => (f.kind, None),
                    })
                    .collect()
            };
            assert_eq!(a.stats().peer_sockets, 1);
            assert_eq!(
                frames(&a),
                vec![(KIND_READ_DATA, None); 4],
                "both reads' data"
            );
            if deregister {
                assert!(a.rdma.deregister(key.key));
            }
            a.fill_windows(&mem, Some(now));
            assert_eq!(frames(&a).len(), 4, "no status before the acknowledgement");
            a.on_ack((b.addr.sock, b.addr.connid), 4, 0, now);
            a.fill_windows(&mem, Some(now));
            let status = if deregister {
                RdmaStatus::NoMemory
            } else {
                RdmaStatus::Ok
            };
            assert_eq!(frames(&a), vec![(KIND_READ_RESP, Some(status)); 2]);
        }
    }

    /// A lone read served to a peer with a connected socket (a ping-pong's) is copied,
    /// not spliced: its status goes with its data, without waiting for their
    /// acknowledgement; a read queued behind another is spliced.
    #[test]
    fn a_lone_read_is_copied_and_a_stream_of_reads_spliced() {
        let mut a = dev();
        let b = dev();
        let len = 100_000u64;
        let mut mem = NoMem((0..3 * len).map(|i| i as u8).collect());
        let key = a.rdma.register(MemHandle(0), 3 * len, true);
        let now = Instant::now();
        let req = |id: u64| RdmaMsg::ReadReq {
            id,
            key: key.key,
            addr: key.addr + (id - 9) * len,
            len,
        };
        let spliced = |a: &UdpDevice| -> Vec<(u8, bool)> {
            a.conns
                .values()
                .flat_map(|c| c.unacked.values())
                .map(|f| match &f.body {
                    Body::Read { splice, .. } => (f.kind, *splice),
                    Body::Bytes(_) => (f.kind, false),
                })
                .collect()
        };
        deliver_request(&b, &mut a, 1, req(9), &mut mem, now);
        a.fill_windows(&mem, Some(now));
        assert_eq!(a.stats().peer_sockets, 1);
        assert_eq!(
            spliced(&a),
            vec![
                (KIND_READ_DATA, false),
                (KIND_READ_DATA, false),
                (KIND_READ_RESP, false)
            ],
            "a lone read: copied, its status at once"
        );
        a.on_ack((b.addr.sock, b.addr.connid), 3, 0, now);
        deliver_request(&b, &mut a, 2, req(10), &mut mem, now);
        deliver_request(&b, &mut a, 3, req(11), &mut mem, now);
        a.fill_windows(&mem, Some(now));
        assert_eq!(
            spliced(&a),
            vec![(KIND_READ_DATA, true); 4],
            "two reads queued: both spliced, their statuses wait for the acknowledgements"
        );
    }

    /// Scenario of the receiver-not-ready tests: `a` sends `n` REQ packets to `b`, whose
    /// endpoint refuses every packet it is handed (it stays not ready); the datagrams are
    /// carried by hand every 5 ms of a virtual clock for `span`. Returns the time reached.
    fn not_ready_rounds(
        a: &mut UdpDevice,
        b: &mut UdpDevice,
        t0: Instant,
        span: Duration,
        b_answers: bool,
    ) -> Instant {
        let mut t = t0;
        while t < t0 + span {
            a.timers(t, None);
            // One frame at a time, each refused by b's endpoint as it comes up.
            for f in wire(a) {
                deliver(a, b, &[f], t);
                while let Some(e) = b.poll_event() {
                    if let DeviceEvent::Recv { src, bytes } = e {
                        b.refuse(src, bytes);
                    }
                }
            }
            b.acks(Some(t));
            let back = wire(b);
            if b_answers {
                deliver(b, a, &back, t);
            }
            t += 5 * Duration::from_millis(1);
        }
        t
    }

    fn short_timeouts(u: &mut UdpConfig) {
        u.peer_timeout = Duration::from_millis(300);
        u.initial_rto = Duration::from_millis(10);
        u.min_rto = Duration::from_millis(5);
        u.max_rto = Duration::from_millis(40);
    }

    /// Two devices with short timeouts, `a` having sent `n` = 3 × `RNR_HELD_MAX` REQ
    /// packets (type ≥ 64, wire-layouts §A.2) to `b` at `t0`: `(a, b, t0, n)`.
    fn flood_with_short_timeouts() -> (UdpDevice, UdpDevice, Instant, u64) {
        let mut a = dev_with(short_timeouts);
        let b = dev_with(short_timeouts);
        let t0 = Instant::now();
        let n = 3 * RNR_HELD_MAX as u64;
        for i in 0..n {
            send(&mut a, &b, &[64, i as u8], i, t0);
        }
        (a, b, t0, n)
    }

    /// A receiver that stays not ready (its endpoint refuses everything) for many peer
    /// timeouts, but is alive, tells the sender so (receiver-not-ready notices): the
    /// sender keeps its frames and retries them at a backoff, and never fails the
    /// connection. Once the receiver takes packets again, every send completes once.
    /// Before the notices existed the sender failed the connection after `peer_timeout`.
    #[test]
    fn a_receiver_not_ready_for_long_is_not_taken_for_dead() {
        let (mut a, mut b, t0, n) = flood_with_short_timeouts();
        let timeout = a.cfg.peer_timeout;
        let t = not_ready_rounds(&mut a, &mut b, t0, timeout * 10, true);
        let (sa, sb) = (a.stats, b.stats);
        assert_eq!(sa.peers_failed, 0, "{sa:?}");
        assert!(sb.rnr_dropped > 0 && sb.rnr_sent > 0, "{sb:?}");
        assert!(sa.rnr_received > 0 && sa.retransmits > 0, "{sa:?}");
        let done = send_done(&mut a);
        assert!(done.iter().all(|(_, o)| *o == SendOutcome::Ok));
        let refused = n as usize - done.len();
        assert!(refused > 0);
        assert_eq!(
            a.conns.values().map(|c| c.unacked.len()).sum::<usize>(),
            refused
        );
        // Backoff: retransmissions are bounded by one per frame per `max_rto` or so, far
        // fewer than one per 5 ms round.
        let rounds = (timeout * 10).as_millis() as u64 / 5;
        assert!(sa.retransmits < refused as u64 * rounds / 4, "{sa:?}");

        // The receiver becomes ready: its endpoint takes what it held and what comes.
        for c in b.conns.values_mut() {
            c.held.clear();
            c.fresh = 0;
        }
        let mut t = t;
        let mut completed: Vec<u64> = done.iter().map(|(tok, _)| tok.0).collect();
        for _ in 0..200 {
            a.timers(t, None);
            let f = wire(&mut a);
            deliver(&a, &mut b, &f, t);
            while b.poll_event().is_some() {}
            b.acks(Some(t));
            let back = wire(&mut b);
            deliver(&b, &mut a, &back, t);
            for (tok, o) in send_done(&mut a) {
                assert_eq!(o, SendOutcome::Ok);
                completed.push(tok.0);
            }
            t += Duration::from_millis(5);
        }
        completed.sort_unstable();
        assert_eq!(completed, (0..n).collect::<Vec<_>>());
        assert_eq!(a.stats.peers_failed, 0);
    }

    /// A dead receiver still fails the connection after the peer timeout, also when it
    /// was not ready (and said so) before it died: the timeout runs from its last notice.
    #[test]
    fn a_dead_receiver_still_fails_after_the_peer_timeout() {
        let (mut a, mut b, t0, _) = flood_with_short_timeouts();
        let timeout = a.cfg.peer_timeout;
        let t = not_ready_rounds(&mut a, &mut b, t0, timeout * 3, true);
        assert_eq!(a.stats.peers_failed, 0);
        assert!(a.stats.rnr_received > 0);
        let pending = a.conns.values().map(|c| c.unacked.len()).sum::<usize>();
        assert!(pending > 0);
        let _ = send_done(&mut a);
        // b dies: nothing comes back any more.
        let t1 = not_ready_rounds(&mut a, &mut b, t, timeout / 2, false);
        assert_eq!(a.stats.peers_failed, 0, "not before the timeout");
        not_ready_rounds(&mut a, &mut b, t1, timeout, false);
        assert_eq!(a.stats.peers_failed, 1);
        let failed = send_done(&mut a);
        assert_eq!(failed.len(), pending);
        assert!(failed.iter().all(|(_, o)| *o == SendOutcome::Error));
    }

    /// Whatever the configured delay and timeouts, and however long the network takes
    /// (up to a quarter of the smallest RTO each way, varying per datagram), a receiver
    /// that never answers and sends its ACKs only when due never causes a
    /// retransmission: the delay is clamped below the RTO and the RTO adds it. The
    /// network keeps each direction's order (a datagram is not delivered before one
    /// sent earlier the same way): reordering by more than the reorder threshold is
    /// loss evidence by design (RACK-like detection; `tests/loss.rs` covers reordering), and with
    /// it a datagram delayed past three later ones would be resent (e.g. latencies
    /// 0, 12 ms, 0 … against a 49 ms RTO).
    fn delayed_acks_cause_no_retransmission_with(
        delay_us: u32,
        min_rto_ms: u8,
        initial_rto_ms: u8,
        lat: Vec<u16>,
        n: u8,
    ) -> bool {
        let min_rto = Duration::from_millis(min_rto_ms as u64 % 50 + 1);
        let initial_rto = Duration::from_millis(initial_rto_ms as u64 % 100 + 1);
        let set = |u: &mut UdpConfig| {
            u.ack_delay = Duration::from_micros(delay_us as u64 % 200_000);
            u.min_rto = min_rto;
            u.initial_rto = initial_rto;
        };
        let mut a = dev_with(set);
        let mut b = dev_with(set);
        let max_lat = min_rto.min(initial_rto) / 4;
        let lat = |i: usize| {
            let l = lat.get(i % lat.len().max(1)).copied().unwrap_or(0) as u32;
            (max_lat * (l % 1000)) / 1000
        };
        let t0 = Instant::now();
        let mut t = t0;
        let mut in_flight: Vec<(Instant, bool, Vec<u8>)> = Vec::new();
        // Latest arrival time scheduled so far, per direction (to b, to a).
        let mut last = [t0, t0];
        let frames = n as u64 % 40 + 1;
        let mut sent = 0;
        let mut i = 0;
        // Step the virtual clock by 10 µs for one second.
        while t < t0 + Duration::from_secs(1) {
            if sent < frames && (t - t0).as_micros() % 3000 == 0 {
                send(&mut a, &b, b"x", sent, t);
                sent += 1;
            }
            for f in wire(&mut a) {
                last[0] = last[0].max(t + lat(i));
                in_flight.push((last[0], true, f));
                i += 1;
            }
            let (now_due, later): (Vec<_>, Vec<_>) =
                in_flight.drain(..).partition(|(at, _, _)| *at <= t);
            in_flight = later;
            for (_, to_b, f) in now_due {
                if to_b {
                    deliver(&a, &mut b, &[f], t);
                } else {
                    deliver(&b, &mut a, &[f], t);
                }
            }
            a.timers(t, None);
            b.acks(Some(t));
            for f in wire(&mut b) {
                last[1] = last[1].max(t + lat(i));
                in_flight.push((last[1], false, f));
                i += 1;
            }
            t += 10 * US;
        }
        let done = send_done(&mut a);
        a.stats.retransmits == 0
            && a.stats.fast_retransmits == 0
            && b.stats.duplicates == 0
            && done.len() as u64 == frames
            && done.iter().all(|(_, o)| *o == SendOutcome::Ok)
    }

    quickcheck::quickcheck! {
        fn delayed_acks_cause_no_retransmission(
            delay_us: u32, min_rto_ms: u8, initial_rto_ms: u8, lat: Vec<u16>, n: u8
        ) -> bool {
            delayed_acks_cause_no_retransmission_with(delay_us, min_rto_ms, initial_rto_ms, lat, n)
        }
    }

    /// The input quickcheck once found: with latencies 0, 12 ms, 0 … the network used to
    /// deliver a datagram after three sent later (a reordering, which the loss detection
    /// rightly takes as loss), so the property failed without any delayed ACK at fault.
    #[test]
    fn delayed_acks_cause_no_retransmission_with_varying_latency() {
        assert!(delayed_acks_cause_no_retransmission_with(
            0,
            48,
            48,
            vec![0, 4980, 0],
            8
        ));
    }

    quickcheck::quickcheck! {
        /// Arbitrary datagrams, and frames with arbitrary fields and bodies addressed to the
        /// device, straight into the receive path: no panic, and the device still answers.
        fn arbitrary_input_never_panics(raw: Vec<Vec<u8>>, frames: Vec<(u8, u8, u32, u32, u64, Vec<u8>)>) -> bool {
            let mut d = dev();
            let key = d.rdma.register(MemHandle(0), 64, true);
            let mut mem = NoMem(vec![0; 64]);
            let from: SocketAddr = "127.0.0.1:9".parse().expect("addr");
            let now = Instant::now();
            for r in &raw {
                d.on_datagram(from, r, &mut mem, now);
            }
            for (kind, src, seq, ack, sack, body) in frames {
                let mut body = body;
                if kind % 7 == 2 && body.len() >= 32 {
                    // Aim some RDMA requests at the live key.
                    body[8..16].copy_from_slice(&key.key.to_le_bytes());
                    body[16..24].copy_from_slice(&key.addr.wrapping_add(seq as u64 % 80).to_le_bytes());
                }
                let h = Header {
                    kind: kind % 7,
                    src_connid: (src % 3) as u32,
                    dst_connid: d.addr.connid,
                    seq: if kind % 7 == 0 { 0 } else { seq % 200 + 1 },
                    ack,
                    sack,
                };
                d.on_datagram(from, &h.datagram(&body), &mut mem, now);
            }
            d.timers(Instant::now(), None);
            d.acks(Some(Instant::now()));
            while d.poll_event().is_some() {}
            mem.0.len() == 64 && d.conns.len() <= 3
        }
    }
}

//! `tagmatch perf`: what `ucx_perftest` and `fi_pingpong` give their users.
//!
//! - `tagmatch perf server [--bind ADDR]` prints its address and serves one client
//!   (`--forever`: any number, one after the other);
//! - `tagmatch perf client ADDR --test T --size N[,N…] [--iters K] [--window W] [--json]
//!   [--plot FILE.svg] [--bind ADDR]` (over UDP the client binds, unless told, the local
//!   address of its route to the server); `--transport mem` runs both sides in this
//!   process (one thread, two endpoints: client and server); `--transport self` runs both
//!   roles on ONE endpoint that sends to itself (like-for-like with `ucx_perftest -l` over
//!   UCX's `self` transport, one worker; tag tests only); `--transport verbs [--device
//!   NAME]` (with the `verbs` feature, also for `server`) runs over an RDMA device, both
//!   sides in this process when no address is given.
//!
//! Tests: `tag_lat` (ping-pong; latency is half the round trip, as `ucx_perftest`
//! reports it), `tag_bw` and `tag_msgrate` (a window of `W` tagged sends in flight, the
//! server keeping `W` receives posted), `put_bw` and `get_bw` (a window of RMA writes or
//! reads into a region the server registered). 1 MB = 10^6 bytes.
//!
//! Buffers, as `ucx_perftest` and the fabtests use them: over the protocol (UDP, verbs)
//! every message is sent from one registered region and received into another (one
//! registration each per run; the server's window of receives all land in one local
//! region, `Endpoint::trecv_region`), so that no run allocates, zeroes or registers per
//! message, and the destination bytes stay in the cache as the peers' do.
//!
//! The two sides talk through control messages on reserved tags: the client announces
//! each run (test, size, iterations, window), the server answers (with a [`RemoteKey`]
//! for the RMA tests) and, for the bandwidth tests, acknowledges the last message.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use serde_json::json;
use tagmatch::{
    Completion, Endpoint, MemFabric, OpKind, Peer, RecvSlot, RemoteKey, Request, UdpConfig,
};

use crate::{input, Error};

const CTRL: u64 = 0x7A6D_0000_0000_0001;
const REPLY: u64 = 0x7A6D_0000_0000_0002;
const DATA: u64 = 0x7A6D_0000_0000_0003;
const ACK: u64 = 0x7A6D_0000_0000_0004;
const CTRL_LEN: usize = 32;
const QUIT: u8 = 255;
/// Largest `--window` a run may announce: the server ignores a control message with a
/// larger one (as one asking for more iterations than [`MAX_ITERS`]), so the client
/// refuses it up front.
const MAX_WINDOW: u64 = 1 << 16;
/// Largest `--iters` a run may announce (see [`MAX_WINDOW`]).
const MAX_ITERS: u64 = 1 << 32;
/// How long a UDP side busy-polls (progresses without blocking) in a wait of the latency
/// test before it blocks in poll(2). Every wait of a run is far shorter, so both sides
/// busy-poll through the ping-pong, as `ucx_perftest` and `fi_pingpong` do: a side that
/// blocked is woken through the scheduler, which on a loaded machine costs more than the
/// round trip (median one-way latency 7–8 µs against 120–170 µs with a 64-call spin, at
/// load average 5). An idle side (a server without client) blocks after it.
const SPIN_LAT: Duration = Duration::from_millis(20);
/// Largest latency-test message size that busy-polls ([`SPIN_LAT`]); larger ones wait as
/// the streaming tests do ([`SPIN_BW`]): a 1 MiB ping-pong is two bulk transfers, and
/// busy-polling through it tripled its round trip on this 2-core machine (2.3 ms against
/// 6–13 ms one-way).
const SPIN_LAT_MAX: usize = 64 << 10;
/// The same for the streaming tests, where both sides have work (copies, serving reads):
/// on this 2-core machine, busy-polling through them slowed `tag_bw 1m` 2–3× under load
/// (a waiting side's spin takes the core the other side's work needs).
const SPIN_BW: Duration = Duration::from_micros(100);
/// How long a UDP side blocks at most when idle.
const IDLE_WAIT: Duration = Duration::from_millis(1);

/// Arguments of `tagmatch perf`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which side.
    #[command(subcommand)]
    pub role: Role,
}

/// `server` or `client`.
#[derive(Debug, clap::Subcommand)]
pub enum Role {
    /// Serve a client: print this endpoint's address, answer its runs.
    Server(ServerArgs),
    /// Run tests against a server (or, with `--transport mem`, against one in-process).
    Client(ClientArgs),
}

/// `perf server --bind` unless given.
const DEFAULT_BIND: &str = "127.0.0.1:0";

/// Arguments of `tagmatch perf server`.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// `udp` or `verbs` (an RDMA device; needs the `verbs` feature).
    #[arg(long, default_value = "udp")]
    pub transport: String,
    /// UDP address to bind (a concrete IP; port 0 picks one).
    #[arg(long, default_value = DEFAULT_BIND)]
    pub bind: String,
    /// `--transport verbs`: the RDMA device (e.g. `mlx5_0`, `rxe0`; default: the first).
    #[arg(long, value_name = "NAME", default_value = "")]
    pub device: String,
    /// Serve clients one after the other until killed (default: exit after one).
    #[arg(long)]
    pub forever: bool,
    /// UDP path MTU (default 9000; only with `--transport udp`).
    #[arg(long)]
    pub path_mtu: Option<usize>,
    /// Print the endpoint's counters (every layer) on stderr after each client.
    #[arg(long)]
    pub stats: bool,
    /// Seconds without any message or completion in the middle of a run after which the
    /// client is taken for gone: the run is abandoned (with `--forever` the server then
    /// waits for the next client; otherwise it exits with an error). Default 10.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub client_timeout: f64,
    /// The CPU to run on: a CPU number, or `any` (the default: no pinning; a server and
    /// its client on one machine each need a core).
    #[arg(long, value_name = "N|any")]
    pub cpu: Option<String>,
}

/// The tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Test {
    /// Tagged ping-pong latency.
    #[value(name = "tag_lat")]
    TagLat,
    /// Tagged streaming bandwidth.
    #[value(name = "tag_bw")]
    TagBw,
    /// Tagged message rate (tag_bw, small messages).
    #[value(name = "tag_msgrate")]
    TagMsgrate,
    /// RMA write bandwidth.
    #[value(name = "put_bw")]
    PutBw,
    /// RMA read bandwidth.
    #[value(name = "get_bw")]
    GetBw,
}

impl Test {
    fn name(self) -> &'static str {
        match self {
            Test::TagLat => "tag_lat",
            Test::TagBw => "tag_bw",
            Test::TagMsgrate => "tag_msgrate",
            Test::PutBw => "put_bw",
            Test::GetBw => "get_bw",
        }
    }

    fn code(self) -> u8 {
        self as u8
    }

    fn from_code(c: u8) -> Option<Test> {
        [
            Test::TagLat,
            Test::TagBw,
            Test::TagMsgrate,
            Test::PutBw,
            Test::GetBw,
        ]
        .into_iter()
        .find(|t| t.code() == c)
    }
}

/// Arguments of `tagmatch perf client`.
#[derive(Debug, clap::Args)]
pub struct ClientArgs {
    /// The server's address (`udp://IP:PORT/CONNID`, as `perf server` prints it); not with
    /// `--transport mem`.
    pub addr: Option<String>,
    /// `udp` (to a server), `mem` (both sides in this process: two endpoints, client and
    /// server, through the in-process fast path), `self` (one endpoint that sends to
    /// itself, both roles on it: like-for-like with `ucx_perftest -l` over UCX's `self`
    /// transport, one worker; tag tests only) or `verbs` (to a server, or without an
    /// address both sides in this process, on one RDMA device; needs the `verbs`
    /// feature).
    #[arg(long, default_value = "udp")]
    pub transport: String,
    /// `--transport verbs`: the RDMA device (e.g. `mlx5_0`, `rxe0`; default: the first).
    #[arg(long, value_name = "NAME", default_value = "")]
    pub device: String,
    /// The test.
    #[arg(long, value_enum, default_value = "tag_lat")]
    pub test: Test,
    /// Message sizes, comma-separated; `k`/`m` suffixes are KiB/MiB (`8,4k,1m`).
    #[arg(long, default_value = "8")]
    pub size: String,
    /// Timed iterations per size (default: by size, about a second or less each).
    #[arg(long)]
    pub iters: Option<u64>,
    /// Operations in flight for the bandwidth tests.
    #[arg(long, default_value_t = 32)]
    pub window: u64,
    /// Print one JSON object per size instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also draw latency and bandwidth against size into this SVG file.
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
    /// UDP path MTU (default 9000; only with `--transport udp`).
    #[arg(long)]
    pub path_mtu: Option<usize>,
    /// Print the endpoint's counters (every layer) on stderr at the end.
    #[arg(long)]
    pub stats: bool,
    /// `--transport mem`: turn the in-process fast path off (messages take the EFA
    /// protocol over the in-memory device, as before the fast path existed).
    #[arg(long)]
    pub no_fast_path: bool,
    /// The CPU to run on: a CPU number, or `any` (no pinning). Default: with `--transport
    /// mem` or `self` (one thread), the CPU the command starts on, so that the scheduler
    /// does not move the run to a core with cold caches (as `ucx_perftest -c`); with a
    /// server (another process, maybe on this machine), `any`.
    #[arg(long, value_name = "N|any")]
    pub cpu: Option<String>,
    /// `--transport udp`: seconds without an answer from the server after which it is
    /// taken for unreachable and the client stops with an error (default 10).
    #[arg(long, value_name = "SECONDS")]
    pub peer_timeout: Option<f64>,
    /// `--transport udp`: the local address to bind (a concrete IP of the server's
    /// family; port 0 picks one). Default: the address of the interface the route to the
    /// server leaves by (the server answers to it), loopback for a loopback server.
    #[arg(long, value_name = "IP:PORT")]
    pub bind: Option<String>,
}

/// The local address of `perf client`'s UDP endpoint for a server at `server`: `bind`
/// (`--bind`) when given, which must be a concrete IP of the server's family; otherwise
/// loopback for a loopback server and, for any other, the source address the kernel
/// picks for the route to the server ([`route_source`]), port 0.
fn client_bind(server: SocketAddr, bind: Option<&str>) -> Result<SocketAddr, String> {
    let family = |a: &SocketAddr| if a.is_ipv4() { "IPv4" } else { "IPv6" };
    if let Some(b) = bind {
        let addr: SocketAddr = b
            .parse()
            .map_err(|_| format!("--bind {b:?}: not IP:PORT (e.g. 10.0.0.2:0)"))?;
        if addr.is_ipv4() != server.is_ipv4() {
            return Err(format!(
                "--bind {addr}: an {} address, but the server {server} is {}",
                family(&addr),
                family(&server)
            ));
        }
        if addr.ip().is_unspecified() {
            return Err(format!(
                "--bind {addr}: bind a concrete IP (the server answers to it)"
            ));
        }
        return Ok(addr);
    }
    match server.ip() {
        IpAddr::V4(ip) if ip.is_loopback() => Ok((Ipv4Addr::LOCALHOST, 0).into()),
        IpAddr::V6(ip) if ip.is_loopback() => Ok((Ipv6Addr::LOCALHOST, 0).into()),
        _ => route_source(server).map_err(|e| {
            format!(
                "no local address to reach the server {server} from ({e}): give one with \
                 --bind IP:0"
            )
        }),
    }
}

/// The local address (port 0) the kernel sends from to reach `server`: the address of a
/// UDP socket connected to it (a connect sends nothing; it looks the route up).
fn route_source(server: SocketAddr) -> std::io::Result<SocketAddr> {
    let any: SocketAddr = if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let probe = std::net::UdpSocket::bind(any)?;
    probe.connect(server)?;
    let mut local = probe.local_addr()?;
    if local.ip().is_unspecified() {
        return Err(std::io::Error::other("the route has no source address"));
    }
    local.set_port(0);
    Ok(local)
}

/// Parses `8,4k,1m`.
pub fn parse_sizes(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let p = part.trim();
        let (num, mul) = match p.char_indices().last() {
            Some((i, 'k' | 'K')) => (&p[..i], 1usize << 10),
            Some((i, 'm' | 'M')) => (&p[..i], 1 << 20),
            Some((i, 'g' | 'G')) => (&p[..i], 1 << 30),
            _ => (p, 1),
        };
        let n: usize = num
            .parse()
            .map_err(|_| format!("--size: {part:?} is not a size (e.g. 8, 4k, 1m)"))?;
        let v = n
            .checked_mul(mul)
            .filter(|v| *v <= 1 << 30)
            .ok_or_else(|| format!("--size: {part:?} is larger than 1 GiB"))?;
        out.push(v);
    }
    Ok(out)
}

/// One measured size.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The test.
    pub test: &'static str,
    /// The transport.
    pub transport: &'static str,
    /// Message size.
    pub size: usize,
    /// Timed iterations.
    pub iters: u64,
    /// Median one-way latency (µs), latency test only.
    pub lat_p50_us: Option<f64>,
    /// 99th percentile one-way latency (µs), latency test only.
    pub lat_p99_us: Option<f64>,
    /// Average time per operation (µs).
    pub lat_avg_us: f64,
    /// Bandwidth, 10^6 bytes per second.
    pub bw_mbs: f64,
    /// Million messages per second.
    pub msgrate_mmsgs: f64,
}

impl Row {
    fn json(&self) -> serde_json::Value {
        json!({
            "test": self.test,
            "transport": self.transport,
            "size": self.size,
            "iters": self.iters,
            "lat_p50_us": self.lat_p50_us,
            "lat_p99_us": self.lat_p99_us,
            "lat_avg_us": self.lat_avg_us,
            "bw_mbs": self.bw_mbs,
            "msgrate_mmsgs": self.msgrate_mmsgs,
        })
    }
}

/// A control message (client to server): the test's code at byte 0, then size,
/// iterations and window as little-endian `u64`s at 8, 16 and 24.
fn ctrl_msg(test: u8, size: u64, iters: u64, window: u64) -> Vec<u8> {
    let mut b = vec![0u8; CTRL_LEN];
    b[0] = test;
    b[8..16].copy_from_slice(&size.to_le_bytes());
    b[16..24].copy_from_slice(&iters.to_le_bytes());
    b[24..32].copy_from_slice(&window.to_le_bytes());
    b
}

fn default_iters(test: Test, size: usize) -> u64 {
    let by_bytes = ((512usize << 20) / size.max(1)) as u64;
    let cap = match test {
        Test::TagLat => 20_000,
        _ => 100_000,
    };
    by_bytes.clamp(100, cap)
}

fn fe(context: &'static str) -> impl Fn(tagmatch::Error) -> Error {
    move |e| Error::new(context, e)
}

// ---------------------------------------------------------------- server

/// What the server is doing.
#[derive(Debug)]
enum Phase {
    Idle,
    Lat {
        left: u64,
        size: usize,
    },
    Bw {
        left_to_post: u64,
        left: u64,
        size: usize,
    },
    Rma {
        region: tagmatch::MemoryRegion,
    },
    Quit,
}

/// The server side as a non-blocking state machine: [`Server::step`] progresses and
/// reacts to completions. The UDP server loops on it; the in-process client calls it
/// from its own waits (one thread drives both sides).
#[derive(Debug)]
pub struct Server {
    ep: Endpoint,
    client: Option<Peer>,
    ctrl: Option<Request>,
    phase: Phase,
    /// In-process: receive into recycled buffers and reply with `tinject` (no allocation
    /// per message); over UDP: the latency test replies with `tsend` of the received
    /// buffer (no copy). Streaming tests receive into recycled buffers on every transport.
    reuse: bool,
    /// Runs served.
    pub runs: u64,
    /// The data receives of the run in progress that have not completed (cancelled if the
    /// run is abandoned).
    pending: VecDeque<Request>,
    /// Whether `pending` is kept: not for a server its client drives in its own process
    /// (it is never abandoned; see [`Server::driven_by_client`]).
    track: bool,
    /// Completions handled so far (a sign of the client's life; see [`Server::stalled`]).
    completions: u64,
    /// When [`Server::stalled`] last saw a sign of life, and the completions plus
    /// [`activity`] it saw then.
    last_heard: Instant,
    last_seen: u64,
    /// The in-process server's data receives go into receive slots checked in place (no
    /// completion record per message): a ring of `ring` of them, `posted` posted from
    /// `next` on, in posting order; all of `slot_size` bytes.
    slots: Vec<RecvSlot>,
    slot_size: usize,
    ring: usize,
    next: usize,
    posted: usize,
    /// What the in-process server answers a latency test's message with (`ucx_perftest`'s
    /// server also sends from its own buffer).
    reply: Vec<u8>,
    /// Over the protocol: the region every data receive lands in (registered local, so
    /// the UDP device receives a read's datagrams straight into it), as `ucx_perftest`'s
    /// and the fabtests' servers receive a whole window into one buffer; and the region
    /// the latency test's replies are sent from. Grown (a new registration) for a larger
    /// size; regions a larger one replaced stay registered in `retired` (a send from one
    /// may still be in flight) until the endpoint goes.
    rx_mr: Option<tagmatch::MemoryRegion>,
    tx_mr: Option<tagmatch::MemoryRegion>,
    retired: Vec<tagmatch::MemoryRegion>,
}

/// Packets and datagrams the endpoint received so far: protocol packets, and the UDP
/// device's frames (software RDMA included).
fn activity(ep: &Endpoint) -> u64 {
    let st = ep.stats();
    let dev = match &st.device {
        tagmatch::DeviceStats::Udp(u) => u.frames_received,
        _ => 0,
    };
    st.rdm.rx_packets + dev
}

/// Whether a waiting side still busy-polls: for its spin since the wait began, or since
/// the endpoint was last seen receiving ([`activity`]). A long message's datagrams (a
/// software RDMA read of 1 MiB: ~120 of them, 140-250 µs on loopback) complete nothing
/// until the last, so a spin counted from the wait's start only ran out in the middle of
/// most 1 MiB transfers; the receiver then blocked in poll(2), and each datagram after
/// that cost the sender a wake-up of the other core. Measured (`tag_bw --size 1m`, fresh
/// server per run): runs fell into two modes, 6.2-7.3 GB/s with ~600-860 server blocks
/// per 2,000 MiB and 4.6-5.2 GB/s with 2,900-3,200, the sender's system time 0.27 s
/// against 0.42-0.46 s.
///
/// The activity count (the endpoint's statistics) is read only when the spin ran out, so
/// a wait answered within its spin (every 8-byte ping-pong) never reads it; a wait that
/// sees no new activity then blocks, one spin later than before at most.
struct SpinWatch {
    /// The first look (the wait's start).
    began: Option<Instant>,
    since: Option<Instant>,
    seen: u64,
}

impl SpinWatch {
    fn new() -> SpinWatch {
        SpinWatch {
            began: None,
            since: None,
            seen: u64::MAX,
        }
    }

    /// Something completed: the spin counts from now.
    fn busy(&mut self) {
        self.since = Some(Instant::now());
    }

    /// Whether to keep busy-polling `ep` (see [`SpinWatch`]).
    fn spinning(&mut self, ep: &Endpoint, spin: Duration) -> bool {
        let began = *self.began.get_or_insert_with(Instant::now);
        let since = *self.since.get_or_insert(began);
        if since.elapsed() < spin {
            return true;
        }
        let now = activity(ep);
        if now != self.seen {
            self.seen = now;
            self.since = Some(Instant::now());
            return true;
        }
        false
    }
}

impl Server {
    /// A server on `ep`, with its control receive posted.
    pub fn new(mut ep: Endpoint) -> Result<Server, tagmatch::Error> {
        let ctrl = ep.trecv(tagmatch::ANY_SOURCE, CTRL, CTRL_LEN)?;
        let reuse = ep.transport() == "mem";
        Ok(Server {
            ep,
            client: None,
            ctrl: Some(ctrl),
            phase: Phase::Idle,
            reuse,
            runs: 0,
            pending: VecDeque::new(),
            track: true,
            completions: 0,
            last_heard: Instant::now(),
            last_seen: 0,
            slots: Vec::new(),
            slot_size: 0,
            ring: 0,
            next: 0,
            posted: 0,
            reply: Vec::new(),
            rx_mr: None,
            tx_mr: None,
            retired: Vec::new(),
        })
    }

    /// The endpoint's address.
    pub fn address(&self) -> tagmatch::Address {
        self.ep.address()
    }

    /// Marks the server as driven by its client in the client's process (the in-process
    /// perf client): such a server is never abandoned, so it does not keep the handles of
    /// its receives for [`Server::abandon`].
    fn driven_by_client(mut self) -> Server {
        self.track = false;
        self
    }

    /// Whether data receives go into receive slots: the in-process server its client
    /// drives (never abandoned, so its receives need no handles to cancel).
    fn in_place(&self) -> bool {
        self.reuse && !self.track
    }

    /// Readies a ring of `w` slots of `size` bytes for a run (slots of another size stay
    /// with the endpoint, unused).
    fn ring_of(&mut self, size: usize, w: usize) {
        if self.slot_size != size {
            self.slots.clear();
            self.slot_size = size;
        }
        while self.slots.len() < w {
            let s = self.ep.recv_slot(size);
            self.slots.push(s);
        }
        self.ring = w;
        self.next = 0;
        self.posted = 0;
    }

    /// Posts slot `i`'s data receive from `client`.
    #[inline(always)]
    fn post_slot(&mut self, client: Peer, i: usize) -> Result<(), tagmatch::Error> {
        let _ = self.ep.tpost_slot(&self.slots[i], client, DATA)?;
        self.posted += 1;
        Ok(())
    }

    /// Handles the slots whose receives completed, in posting order.
    #[inline(always)]
    fn step_slots(&mut self) -> Result<usize, tagmatch::Error> {
        let mut n = 0;
        while self.posted > 0 {
            let i = self.next;
            let Some(done) = self.ep.slot_done(&self.slots[i]) else {
                break;
            };
            done?;
            n += 1;
            self.posted -= 1;
            self.next = if i + 1 == self.ring { 0 } else { i + 1 };
            self.on_slot(i)?;
        }
        Ok(n)
    }

    /// A data message arrived in slot `i` (see [`Server::on_completion`]).
    #[inline(always)]
    fn on_slot(&mut self, i: usize) -> Result<(), tagmatch::Error> {
        let Some(client) = self.client else {
            return Err(tagmatch::Error::UnknownSlot);
        };
        match &mut self.phase {
            Phase::Lat { left, .. } => {
                *left -= 1;
                let more = *left > 0;
                self.ep.tinject(client, DATA, &self.reply)?;
                if more {
                    self.post_slot(client, i)?;
                } else {
                    self.phase = Phase::Idle;
                    self.ctrl = Some(self.ep.trecv(client, CTRL, CTRL_LEN)?);
                }
            }
            Phase::Bw {
                left_to_post, left, ..
            } => {
                *left -= 1;
                let (done, more) = (*left == 0, *left_to_post > 0);
                if more {
                    *left_to_post -= 1;
                    self.post_slot(client, i)?;
                }
                if done {
                    self.phase = Phase::Idle;
                    self.ctrl = Some(self.ep.trecv(client, CTRL, CTRL_LEN)?);
                    let _ = self.ep.tsend(client, ACK, vec![1u8])?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether the client said it is done.
    pub fn done(&self) -> bool {
        matches!(self.phase, Phase::Quit)
    }

    /// Whether the server serves a client (a run in progress, or between two of its
    /// runs) and heard nothing of it for `limit`: no completion, and no packet or
    /// datagram reached the endpoint (one-sided runs complete nothing at the server). The
    /// client is gone (killed, or its host down). Reported between `limit` and twice
    /// `limit` after the client's last sign of life: the counters are compared only
    /// every `limit`, so that serving costs no clock read per message.
    pub fn stalled(&mut self, limit: Duration) -> bool {
        if self.client.is_none() || self.done() || self.last_heard.elapsed() <= limit {
            return false;
        }
        let seen = self.completions + activity(&self.ep);
        if seen != self.last_seen {
            self.last_seen = seen;
            self.last_heard = Instant::now();
            return false;
        }
        true
    }

    /// Abandons the run in progress: cancels its outstanding receives (a receive already
    /// matched to a message in transfer cannot be cancelled; it fails or completes on its
    /// own) and waits for a control message from any client again.
    pub fn abandon(&mut self) -> Result<(), tagmatch::Error> {
        for r in self.pending.drain(..) {
            let _ = self.ep.cancel(r);
        }
        if let Some(r) = self.ctrl.take() {
            let _ = self.ep.cancel(r);
        }
        while self.ep.poll_completion().is_some() {}
        self.client = None;
        self.phase = Phase::Idle;
        self.ctrl = Some(self.ep.trecv(tagmatch::ANY_SOURCE, CTRL, CTRL_LEN)?);
        self.last_heard = Instant::now();
        Ok(())
    }

    /// Posts a data receive of `size` bytes from `client` (into `buf` when given) and
    /// keeps its handle in [`Server::pending`].
    fn post_data(
        &mut self,
        client: Peer,
        size: usize,
        buf: Option<Vec<u8>>,
    ) -> Result<(), tagmatch::Error> {
        let r = match (&self.rx_mr, buf) {
            (Some(mr), _) if !self.reuse => self.ep.trecv_region(client, DATA, mr, 0..size)?,
            (_, Some(mut b)) => {
                b.resize(size, 0);
                self.ep.trecv_into(client, DATA, b)?
            }
            (_, None) => self.ep.trecv(client, DATA, size)?,
        };
        if self.track {
            self.pending.push_back(r);
        }
        Ok(())
    }

    /// Over the protocol: makes the receive region (and, for `reply`, the reply region)
    /// hold at least `size` bytes.
    fn regions_of(&mut self, size: usize, reply: bool) -> Result<(), tagmatch::Error> {
        if self.reuse {
            return Ok(());
        }
        if self.rx_mr.as_ref().is_none_or(|m| m.len() < size) {
            let mr = self.ep.register_local(vec![0; size.max(1)])?;
            self.retired.extend(self.rx_mr.replace(mr));
        }
        if reply && self.tx_mr.as_ref().is_none_or(|m| m.len() < size) {
            let mr = self.ep.register(vec![0x5a; size.max(1)])?;
            self.retired.extend(self.tx_mr.replace(mr));
        }
        Ok(())
    }

    /// Progresses once without blocking and handles what completed; returns how many
    /// completions it handled.
    pub fn step(&mut self) -> Result<usize, tagmatch::Error> {
        self.step_timeout(Duration::ZERO)
    }

    /// [`Server::step`], blocking at most `timeout` when nothing is ready.
    pub fn step_timeout(&mut self, timeout: Duration) -> Result<usize, tagmatch::Error> {
        self.ep.progress_timeout(timeout)?;
        let mut n = 0;
        while let Some(c) = self.ep.poll_completion() {
            n += 1;
            self.on_completion(c)?;
        }
        if self.posted > 0 {
            n += self.step_slots()?;
        }
        self.completions += n as u64;
        Ok(n)
    }

    fn on_completion(&mut self, c: Completion) -> Result<(), tagmatch::Error> {
        // Looked at in place (no move of the completion on the way).
        if !c.is_ok() {
            // Only Server::abandon cancels: a receive of the abandoned run.
            if c.kind == OpKind::Recv && c.error() == Some(tagmatch::OpError::Canceled) {
                return Ok(());
            }
            c.into_result()?;
            return Ok(());
        }
        if c.kind == OpKind::Send {
            return Ok(());
        }
        if Some(c.request) == self.ctrl {
            self.ctrl = None;
            return self.on_ctrl(c);
        }
        if c.kind != OpKind::Recv {
            return Ok(());
        }
        // Data receives complete in posting order except when a large message's transfer
        // outlasts a later small one's.
        match self.pending.front() {
            _ if !self.track => {}
            Some(&r) if r == c.request => {
                self.pending.pop_front();
            }
            _ => self.pending.retain(|&r| r != c.request),
        }
        // No error value built (and dropped) per message, as `ok_or` did.
        let Some(client) = self.client else {
            return Err(tagmatch::Error::UnknownRequest(c.request));
        };
        match &mut self.phase {
            Phase::Lat { left, size } => {
                let size = *size;
                *left -= 1;
                let more = *left > 0;
                if self.reuse {
                    // Reply from the received buffer, then receive the next message
                    // into it.
                    let buf = c.data;
                    self.ep.tinject(client, DATA, &buf)?;
                    if more {
                        self.post_data(client, size, Some(buf))?;
                    } else {
                        self.phase = Phase::Idle;
                        self.ctrl = Some(self.ep.trecv(client, CTRL, CTRL_LEN)?);
                    }
                    return Ok(());
                }
                // The reply goes first, from the server's own region (as `ucx_perftest`'s
                // and `fi_pingpong`'s servers send from their own buffer); the next
                // receive is posted after it, off the round trip's critical path (the
                // client's next message cannot come before the reply reached it).
                match &self.tx_mr {
                    Some(mr) => {
                        let _ = self.ep.tsend_region(client, DATA, mr, 0..size)?;
                    }
                    None => {
                        let _ = self.ep.tsend(client, DATA, c.data)?;
                    }
                }
                if more {
                    self.post_data(client, size, None)?;
                } else {
                    self.phase = Phase::Idle;
                    self.ctrl = Some(self.ep.trecv(client, CTRL, CTRL_LEN)?);
                }
            }
            Phase::Bw {
                left_to_post,
                left,
                size,
            } => {
                *left -= 1;
                let (size, done, more) = (*size, *left == 0, *left_to_post > 0);
                if more {
                    *left_to_post -= 1;
                    // Every transport: the next receive goes into the buffer that came
                    // back (no allocation or zeroing per message).
                    self.post_data(client, size, Some(c.data))?;
                }
                if done {
                    self.phase = Phase::Idle;
                    self.ctrl = Some(self.ep.trecv(client, CTRL, CTRL_LEN)?);
                    let _ = self.ep.tsend(client, ACK, vec![1u8])?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn on_ctrl(&mut self, c: Completion) -> Result<(), tagmatch::Error> {
        let client = c
            .source()
            .ok_or(tagmatch::Error::UnknownRequest(c.request))?;
        self.client = Some(client);
        if let Phase::Rma { .. } = self.phase {
            if let Phase::Rma { region } = std::mem::replace(&mut self.phase, Phase::Idle) {
                self.ep.deregister(region)?;
            }
        }
        let w = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&c.data[i..i + 8]);
            u64::from_le_bytes(b)
        };
        if c.data.len() < CTRL_LEN || c.data[0] == QUIT {
            self.phase = Phase::Quit;
            return Ok(());
        }
        let (size, iters, window) = (w(8), w(16), w(24));
        let test = Test::from_code(c.data[0]);
        let problem = match test {
            None => Some(format!("unknown test code {}", c.data[0])),
            Some(_) if size > 1 << 30 => Some(format!("size {size} is larger than 1 GiB")),
            Some(_) if iters == 0 || iters > MAX_ITERS => Some(format!("iterations {iters}")),
            Some(_) if window == 0 || window > MAX_WINDOW => Some(format!("window {window}")),
            Some(_) => None,
        };
        let (Some(test), None) = (test, &problem) else {
            // A malformed request is reported and ignored: the server keeps serving.
            eprintln!(
                "tagmatch perf server: ignoring a control message: {}",
                problem.unwrap_or_default()
            );
            self.ctrl = Some(self.ep.trecv(client, CTRL, CTRL_LEN)?);
            return Ok(());
        };
        let size = size as usize;
        self.runs += 1;
        let mut key = [0u8; 24];
        match test {
            Test::TagLat if self.in_place() => {
                self.phase = Phase::Lat { left: iters, size };
                self.reply = vec![0x5a; size];
                self.ring_of(size, 1);
                self.post_slot(client, 0)?;
            }
            Test::TagLat => {
                self.phase = Phase::Lat { left: iters, size };
                self.regions_of(size, true)?;
                let buf = self.reuse.then(|| vec![0; size]);
                self.post_data(client, size, buf)?;
            }
            Test::TagBw | Test::TagMsgrate => {
                let first = window.min(iters);
                if self.in_place() {
                    self.ring_of(size, first as usize);
                    for i in 0..first as usize {
                        self.post_slot(client, i)?;
                    }
                } else {
                    self.regions_of(size, false)?;
                    for _ in 0..first {
                        let buf = self.reuse.then(|| vec![0; size]);
                        self.post_data(client, size, buf)?;
                    }
                }
                self.phase = Phase::Bw {
                    left_to_post: iters - first,
                    left: iters,
                    size,
                };
            }
            Test::PutBw | Test::GetBw => {
                let region = self.ep.register(vec![0x5a; size.max(8)])?;
                key = region.remote_key().to_bytes();
                self.phase = Phase::Rma { region };
            }
        }
        if !matches!(self.phase, Phase::Lat { .. } | Phase::Bw { .. }) {
            self.ctrl = Some(self.ep.trecv(client, CTRL, CTRL_LEN)?);
        }
        let _ = self.ep.tsend(client, REPLY, key.to_vec())?;
        Ok(())
    }
}

/// A builder on the verbs device `device` (empty: the first).
#[cfg(feature = "verbs")]
fn verbs_builder(_ctx: &str, device: &str) -> Result<tagmatch::Builder, Error> {
    Ok(Endpoint::builder().verbs(device))
}

/// Without the `verbs` feature: the error that says how to get it.
#[cfg(not(feature = "verbs"))]
fn verbs_builder(ctx: &str, _: &str) -> Result<tagmatch::Builder, Error> {
    Err(Error::new(ctx, crate::NO_VERBS))
}

/// The UDP path MTU when `--path-mtu` is not given (a jumbo-frame Ethernet's).
const DEFAULT_PATH_MTU: usize = 9000;

/// Runs `tagmatch perf server`.
fn run_server(a: ServerArgs) -> Result<(), Error> {
    if !(a.client_timeout.is_finite() && a.client_timeout > 0.0 && a.client_timeout <= 86_400.0) {
        return Err(Error::new(
            "perf server",
            format!(
                "--client-timeout {}: expected seconds in (0, 86400]",
                a.client_timeout
            ),
        ));
    }
    let client_timeout = Duration::from_secs_f64(a.client_timeout);
    let cpu = crate::cpu::parse(a.cpu.as_deref(), crate::cpu::Cpu::Any)
        .map_err(|e| Error::new("perf server", e))?;
    crate::cpu::pin(cpu).map_err(|e| Error::new("perf server", e))?;
    let ep = match a.transport.as_str() {
        "udp" => {
            if !a.device.is_empty() {
                return Err(Error::new(
                    "perf server",
                    "--device goes with --transport verbs",
                ));
            }
            let bind = a.bind.parse().map_err(|_| {
                Error::new("perf server", format!("--bind {:?}: not IP:PORT", a.bind))
            })?;
            Endpoint::builder()
                .udp(bind)
                .path_mtu(a.path_mtu.unwrap_or(DEFAULT_PATH_MTU))
                .build()
        }
        "verbs" => {
            if a.bind != DEFAULT_BIND {
                // The verbs endpoint's address is the device's (GID, QP): nothing to bind.
                return Err(Error::new(
                    "perf server",
                    format!("--bind {:?} goes with --transport udp", a.bind),
                ));
            }
            if a.path_mtu.is_some() {
                return Err(Error::new(
                    "perf server",
                    "--path-mtu goes with --transport udp",
                ));
            }
            verbs_builder("perf server", &a.device)?.build()
        }
        other => {
            return Err(Error::new(
                "perf server",
                format!("--transport {other:?}: expected udp or verbs"),
            ))
        }
    }
    .map_err(fe("perf server"))?;
    let mut s = Server::new(ep).map_err(fe("perf server"))?;
    input::print_line(&format!(
        "tagmatch perf server listening on {}",
        s.address()
    ))
    .map_err(|e| Error::new("perf server", e))?;
    loop {
        // Spin while busy (lowest latency), block in poll(2) when idle.
        let mut idle = SpinWatch::new();
        while !s.done() {
            let spin = if matches!(s.phase, Phase::Lat { size, .. } if size <= SPIN_LAT_MAX) {
                SPIN_LAT
            } else {
                SPIN_BW
            };
            let t = if idle.spinning(&s.ep, spin) {
                Duration::ZERO
            } else {
                IDLE_WAIT
            };
            let failed = match s.step_timeout(t) {
                Ok(n) => {
                    if n > 0 {
                        idle.busy();
                    }
                    None
                }
                // An operation of the run failed (a send to a client that is gone):
                // with --forever the run is abandoned, as when the client goes quiet.
                Err(e @ tagmatch::Error::Failed { .. }) if a.forever => Some(e.to_string()),
                Err(e) => return Err(Error::new("perf server", e)),
            };
            let stalled = s.stalled(client_timeout).then(|| {
                format!(
                    "the client sent nothing for {:.1} s in the middle of a run",
                    client_timeout.as_secs_f64()
                )
            });
            if let Some(why) = failed.or(stalled) {
                let msg = format!("{why}: run abandoned");
                if !a.forever {
                    return Err(Error::new("perf server", msg));
                }
                eprintln!("tagmatch perf server: {msg}; waiting for the next client");
                s.abandon().map_err(fe("perf server"))?;
            }
        }
        s.ep.flush(Duration::from_secs(2))
            .map_err(fe("perf server"))?;
        if a.stats {
            eprintln!("{}", s.ep.stats());
        }
        if !a.forever {
            return Ok(());
        }
        s.phase = Phase::Idle;
        s.ctrl = Some(
            s.ep.trecv(tagmatch::ANY_SOURCE, CTRL, CTRL_LEN)
                .map_err(fe("perf server"))?,
        );
    }
}

// ---------------------------------------------------------------- client

/// The client's endpoint and, in-process, the server it drives.
struct Client {
    ep: Endpoint,
    server: Peer,
    local: Option<Server>,
    sends: VecDeque<Request>,
    /// In-process: `tinject` from one buffer and `trecv_into` a recycled one (no
    /// allocation per message); over UDP: `tsend` of an owned buffer, `trecv`.
    reuse: bool,
    /// How long a wait busy-polls ([`SPIN_LAT`] or [`SPIN_BW`], by test).
    spin: Duration,
    /// Receive slots by size (the in-process latency test's).
    slots: Vec<(usize, std::rc::Rc<RecvSlot>)>,
    /// `--transport self`: one endpoint plays both roles, sending to itself (`server`
    /// is its own address), as `ucx_perftest -l` over UCX's `self` transport.
    looped: bool,
}

impl Client {
    /// Progresses once; `spinning`: without blocking. In-process, the server's side
    /// first: a wait of the client follows its own send, so the server has the work (it
    /// takes the message and answers); the client's progress then takes the answer in
    /// the same round (client first, every round trip paid a pass of each side that
    /// found nothing).
    #[inline(always)]
    fn pump(&mut self, spinning: bool) -> Result<(), tagmatch::Error> {
        match &mut self.local {
            Some(s) => {
                s.step()?;
                self.ep.progress()?;
            }
            None if !spinning => {
                self.ep.progress_timeout(IDLE_WAIT)?;
            }
            None => {
                self.ep.progress()?;
            }
        }
        Ok(())
    }

    /// In-process: lets the server side run once (as a loopback transport's progress
    /// would), so that its receives are posted before the window's messages land.
    fn step_local(&mut self) -> Result<(), tagmatch::Error> {
        if let Some(s) = &mut self.local {
            s.step()?;
        }
        Ok(())
    }

    /// [`Client::wait`] for a receive: its bytes (the completion is not moved whole).
    fn wait_data(&mut self, r: Request) -> Result<Vec<u8>, tagmatch::Error> {
        let mut c = self.wait_done(r)?;
        if c.is_ok() {
            return Ok(std::mem::take(&mut c.data));
        }
        c.into_result().map(|c| c.data)
    }

    /// The receive slot of `size` bytes (one per size, kept for the client's runs).
    fn slot(&mut self, size: usize) -> std::rc::Rc<RecvSlot> {
        if let Some((_, s)) = self.slots.iter().find(|(n, _)| *n == size) {
            return s.clone();
        }
        let s = std::rc::Rc::new(self.ep.recv_slot(size));
        self.slots.push((size, s.clone()));
        s
    }

    /// Progresses until `slot`'s receive completes (the in-process client: it drives
    /// the server, never blocks, and looks at the clock only for the 30 s limit). It
    /// progresses before its first look at the slot: the wait follows the client's own
    /// send, so the reply cannot be there yet unless a progress brings it (a slot that
    /// completed earlier is still seen, one progress later).
    #[inline(always)]
    fn wait_slot(&mut self, slot: &RecvSlot, r: Request) -> Result<(), tagmatch::Error> {
        let mut start = None;
        let mut watch = SpinWatch::new();
        let mut n = 0u32;
        loop {
            let spinning =
                self.local.is_some() || self.looped || watch.spinning(&self.ep, self.spin);
            self.pump(spinning)?;
            if let Some(done) = self.ep.slot_done(slot) {
                return done.map(|_| ());
            }
            n = n.wrapping_add(1);
            // The 30 s count from the wait's start (a remote wait's first spin look).
            if n % 4096 == 0
                && start
                    .get_or_insert_with(|| watch.began.unwrap_or_else(Instant::now))
                    .elapsed()
                    > Duration::from_secs(30)
            {
                return Err(tagmatch::Error::Timeout {
                    request: r,
                    limit_ms: 30_000,
                });
            }
        }
    }

    fn wait(&mut self, r: Request) -> Result<Completion, tagmatch::Error> {
        self.wait_done(r)?.into_result()
    }

    /// Progresses until `r` completes; its completion, failed or not.
    #[inline(always)]
    fn wait_done(&mut self, r: Request) -> Result<Completion, tagmatch::Error> {
        // The clock is read only when it decides something: a remote server's wait
        // spins for `spin` (renewed while datagrams arrive: [`SpinWatch`]), then
        // blocks, and its 30 s limit counts from its first look; the in-process one
        // never blocks (it drives the server), so it reads the clock only for the 30 s
        // limit, every 4096 rounds (from the first of those readings on).
        let mut start = None;
        let mut watch = SpinWatch::new();
        let mut n = 0u32;
        loop {
            if let Some(c) = self.ep.take_completion(r) {
                return Ok(c);
            }
            let spinning =
                self.local.is_some() || self.looped || watch.spinning(&self.ep, self.spin);
            self.pump(spinning)?;
            n = n.wrapping_add(1);
            // The 30 s count from the wait's start (a remote wait's first spin look).
            if n % 4096 == 0
                && start
                    .get_or_insert_with(|| watch.began.unwrap_or_else(Instant::now))
                    .elapsed()
                    > Duration::from_secs(30)
            {
                return Err(tagmatch::Error::Timeout {
                    request: r,
                    limit_ms: 30_000,
                });
            }
        }
    }

    /// [`Client::wait`] for the server's `reply` to the control message sent by `send`:
    /// a send that failed (the server unreachable: no process at its address, or it
    /// stopped answering for the transport's peer timeout) ends the wait with its error
    /// at once, instead of the reply's wait running to its limit.
    fn wait_reply(&mut self, reply: Request, send: Request) -> Result<Completion, tagmatch::Error> {
        let start = Instant::now();
        let mut n = 0u32;
        loop {
            if let Some(c) = self.ep.take_completion(reply) {
                return c.into_result();
            }
            if let Some(c) = self.ep.take_completion(send) {
                self.sends.retain(|&r| r != send);
                if let Err(e) = c.into_result() {
                    let _ = self.ep.cancel(reply);
                    return Err(e);
                }
            }
            self.pump(start.elapsed() < self.spin)?;
            n = n.wrapping_add(1);
            if n % 4096 == 0 && start.elapsed() > Duration::from_secs(30) {
                return Err(tagmatch::Error::Timeout {
                    request: reply,
                    limit_ms: 30_000,
                });
            }
        }
    }

    /// Takes the send completions that are ready; waits while more than `keep` are
    /// outstanding.
    fn reap_sends(&mut self, keep: usize) -> Result<(), tagmatch::Error> {
        while let Some(&s) = self.sends.front() {
            if self.sends.len() > keep {
                self.wait(s)?;
            } else if let Some(c) = self.ep.take_completion(s) {
                c.into_result()?;
            } else {
                break;
            }
            self.sends.pop_front();
        }
        Ok(())
    }

    fn ctrl(
        &mut self,
        test: u8,
        size: usize,
        iters: u64,
        window: u64,
    ) -> Result<RemoteKey, tagmatch::Error> {
        let reply = self.ep.trecv(self.server, REPLY, 24)?;
        let b = ctrl_msg(test, size as u64, iters, window);
        let s = self.ep.tsend(self.server, CTRL, b)?;
        self.sends.push_back(s);
        let c = self.wait_reply(reply, s)?;
        Ok(RemoteKey::from_bytes(&c.data).unwrap_or(RemoteKey {
            addr: 0,
            key: 0,
            len: 0,
        }))
    }

    /// [`Client::run`] for `--transport self`: one endpoint, sending to itself (no
    /// server, no control messages), as `ucx_perftest -l` runs on one worker whose
    /// endpoint points at itself over UCX's `self` transport. `tag_lat`, per iteration:
    /// post a receive into the slot, inject the message to itself, see the slot complete
    /// (a self-send is delivered inside the send call; progress only if it is not), one
    /// lap per iteration as [`Client::run`] keeps it. `tag_bw`/`tag_msgrate`: a ring of
    /// `window` slots; per message: see the slot's previous receive complete, repost it,
    /// inject the message.
    fn run_looped(
        &mut self,
        test: Test,
        size: usize,
        iters: u64,
        window: u64,
        progress: &mut Progress,
    ) -> Result<(Vec<u64>, Duration), tagmatch::Error> {
        let me = self.server;
        let msg = vec![0xa5u8; size];
        // Both made before the run's clock starts: the lap buffer written, the clock (the
        // first time in the process) calibrated.
        let mut rtts = if test == Test::TagLat {
            Laps::new(iters)?
        } else {
            Laps::none()
        };
        let laps = LapClock::new();
        let start = Instant::now();
        match test {
            Test::TagLat => {
                let slot = self.slot(size);
                let mut t0 = laps.ticks();
                for i in 0..iters {
                    let r = self.ep.tpost_slot(&slot, me, DATA)?;
                    self.ep.tinject(me, DATA, &msg)?;
                    match self.ep.slot_done(&slot) {
                        Some(done) => done.map(|_| ())?,
                        None => self.wait_slot(&slot, r)?,
                    }
                    let t1 = laps.ticks();
                    rtts.record(t1.saturating_sub(t0));
                    t0 = t1;
                    progress.tick(i + 1, iters);
                }
            }
            Test::TagBw | Test::TagMsgrate => {
                let w = window.max(1) as usize;
                let mut ring: Vec<(RecvSlot, Option<Request>)> =
                    (0..w).map(|_| (self.ep.recv_slot(size), None)).collect();
                // The ring's index wraps by a compare (`i % w` was a division per
                // message).
                let mut k = 0;
                for i in 0..iters {
                    let (slot, posted) = &mut ring[k];
                    k = if k + 1 == w { 0 } else { k + 1 };
                    if let Some(r) = posted.take() {
                        match self.ep.slot_done(slot) {
                            Some(done) => done.map(|_| ())?,
                            None => self.wait_slot(slot, r)?,
                        }
                    }
                    *posted = Some(self.ep.tpost_slot(slot, me, DATA)?);
                    self.ep.tinject(me, DATA, &msg)?;
                    progress.tick(i + 1, iters);
                }
                for (slot, posted) in &mut ring {
                    if let Some(r) = posted.take() {
                        match self.ep.slot_done(slot) {
                            Some(done) => done.map(|_| ())?,
                            None => self.wait_slot(slot, r)?,
                        }
                    }
                }
            }
            Test::PutBw | Test::GetBw => {
                return Err(tagmatch::Error::Io {
                    context: "perf --transport self",
                    source: std::io::Error::other(
                        "--transport self runs tag_lat, tag_bw and tag_msgrate",
                    ),
                });
            }
        }
        let elapsed = start.elapsed();
        let rtts = rtts.into_nanos(&laps);
        progress.clear();
        Ok((rtts, elapsed))
    }

    /// One run; returns per-iteration round trips (latency test) and the elapsed time.
    fn run(
        &mut self,
        test: Test,
        size: usize,
        iters: u64,
        window: u64,
        progress: &mut Progress,
    ) -> Result<(Vec<u64>, Duration), tagmatch::Error> {
        self.spin = if test == Test::TagLat && size <= SPIN_LAT_MAX {
            SPIN_LAT
        } else {
            SPIN_BW
        };
        if self.looped {
            return self.run_looped(test, size, iters, window, progress);
        }
        // The lap buffer is written before the run is announced (a server told of a run
        // waits for its first message for at most its client timeout), the clock (the
        // first time in the process) calibrated before the run's clock starts.
        let mut rtts = if test == Test::TagLat {
            Laps::new(iters)?
        } else {
            Laps::none()
        };
        let key = self.ctrl(test.code(), size, iters, window)?;
        let laps = LapClock::new();
        let start = Instant::now();
        match test {
            Test::TagLat if self.reuse => {
                // Per iteration (as ucx_perftest's tag_lat loop): post a receive into the
                // endpoint's receive slot (a recycled buffer whose completion is checked
                // in place, as ucx_perftest checks its request), inject the message from
                // `msg`, progress until the reply completes (driving the in-process
                // server, which receives into its own recycled buffer and injects the
                // reply).
                let msg = vec![0xa5u8; size];
                let slot = self.slot(size);
                // One clock read per iteration, as ucx_perftest: an iteration's round
                // trip runs from the previous iteration's reading to its own, kept in
                // the lap clock's ticks (nanoseconds after the loop).
                let mut t0 = laps.ticks();
                for i in 0..iters {
                    let r = self.ep.tpost_slot(&slot, self.server, DATA)?;
                    self.ep.tinject(self.server, DATA, &msg)?;
                    self.wait_slot(&slot, r)?;
                    let t1 = laps.ticks();
                    rtts.record(t1.saturating_sub(t0));
                    t0 = t1;
                    progress.tick(i + 1, iters);
                }
            }
            Test::TagBw | Test::TagMsgrate if self.reuse => {
                // Per message: let the in-process server progress once (it takes what
                // arrived and reposts each receive with the returned buffer), inject
                // the next message. No send completions: injected sends have none.
                let ack = self.ep.trecv(self.server, ACK, 1)?;
                let msg = vec![0xa5u8; size];
                for i in 0..iters {
                    self.step_local()?;
                    self.ep.tinject(self.server, DATA, &msg)?;
                    progress.tick(i + 1, iters);
                }
                self.wait(ack)?;
            }
            Test::TagLat => {
                // Over the protocol, as `fi_pingpong` and `ucx_perftest`: every message is
                // sent from one registered region and received into another (registered
                // local: the UDP device receives a read's datagrams straight into it), no
                // allocation or zeroing per message, one registration each per run.
                let tx = self.ep.register(vec![0xa5u8; size.max(1)])?;
                let rx = self.ep.register_local(vec![0u8; size.max(1)])?;
                let mut t0 = laps.ticks();
                for i in 0..iters {
                    // Send, then post the reply's receive (as `ucx_perftest` does): the
                    // reply cannot come before the message reached the server, and the
                    // post stays off the round trip's critical path.
                    let s = self.ep.tsend_region(self.server, DATA, &tx, 0..size)?;
                    let r = self.ep.trecv_region(self.server, DATA, &rx, 0..size)?;
                    self.sends.push_back(s);
                    self.wait_data(r)?;
                    let t1 = laps.ticks();
                    rtts.record(t1.saturating_sub(t0));
                    t0 = t1;
                    self.reap_sends(8)?;
                    progress.tick(i + 1, iters);
                }
                self.reap_sends(0)?;
                self.ep.deregister(tx)?;
                self.ep.deregister(rx)?;
            }
            Test::TagBw | Test::TagMsgrate => {
                let ack = self.ep.trecv(self.server, ACK, 1)?;
                let w = window.max(1) as usize;
                // Over the protocol, every message is sent from one registered region, as
                // ucx_perftest sends from one preallocated buffer: no allocation, fill or
                // copy per message, and the region's registration is reused.
                let mr = self.ep.register(vec![0xa5u8; size.max(1)])?;
                for i in 0..iters {
                    self.step_local()?;
                    self.reap_sends(w - 1)?;
                    let s = self.ep.tsend_region(self.server, DATA, &mr, 0..size)?;
                    self.sends.push_back(s);
                    progress.tick(i + 1, iters);
                }
                self.reap_sends(0)?;
                self.wait(ack)?;
                self.ep.deregister(mr)?;
            }
            Test::PutBw | Test::GetBw => {
                let w = window.max(1) as usize;
                let mut ops = VecDeque::with_capacity(w);
                for i in 0..iters {
                    self.step_local()?;
                    if ops.len() >= w {
                        if let Some(r) = ops.pop_front() {
                            self.wait(r)?;
                        }
                    }
                    let r = if test == Test::PutBw {
                        self.ep.write(self.server, vec![0xa5u8; size], key.at(0))?
                    } else {
                        self.ep.read(self.server, size, key.at(0))?
                    };
                    ops.push_back(r);
                    progress.tick(i + 1, iters);
                }
                while let Some(r) = ops.pop_front() {
                    self.wait(r)?;
                }
            }
        }
        let elapsed = start.elapsed();
        let rtts = rtts.into_nanos(&laps);
        // Every lap lies between `start` and the end: their sum cannot exceed the
        // monotonic clock's time for the run (1 % for the TSC's calibration). A TSC that
        // disagrees would make the percentiles wrong: refused rather than reported.
        let sum: u64 = rtts.iter().sum();
        if sum as f64 > elapsed.as_nanos() as f64 * 1.01 + 1_000.0 {
            return Err(tagmatch::Error::Io {
                context: "perf clock",
                source: std::io::Error::other(format!(
                    "per-iteration times sum to {sum} ns, more than the run's {} ns",
                    elapsed.as_nanos()
                )),
            });
        }
        progress.clear();
        Ok((rtts, elapsed))
    }
}

/// A running line on stderr when it is a terminal and the run is long.
struct Progress {
    label: String,
    last: Instant,
    shown: bool,
    /// Iterations between two looks at the clock ([`progress_step`]).
    step: u64,
    /// The iteration count at which the next look is due (`u64::MAX`: never).
    next: u64,
}

/// Iterations between two looks of [`Progress`] at the clock in a run of `total`:
/// every 256 in a long run (the cost of the look is negligible per message), but at
/// least 100 looks per run, so that a run of few long iterations (sizes of 2 MiB and
/// more default to 100) shows its line too.
fn progress_step(total: u64) -> u64 {
    (total / 100).clamp(1, 256)
}

impl Progress {
    /// A progress line for a run of `total` iterations labelled `label`, shown when
    /// `on` (stderr is a terminal).
    fn new(on: bool, label: String, total: u64) -> Progress {
        let step = progress_step(total);
        Progress {
            label,
            last: Instant::now(),
            shown: false,
            step,
            next: if on { step } else { u64::MAX },
        }
    }

    /// A progress line that never shows (warm-up runs, tests).
    fn quiet() -> Progress {
        Progress::new(false, String::new(), 1)
    }

    /// Called per message: one compare with the precomputed next due count (no
    /// division) is inlined, the rest is not.
    #[inline]
    fn tick(&mut self, done: u64, total: u64) {
        if done >= self.next {
            self.next = done.saturating_add(self.step);
            self.show(done, total);
        }
    }

    #[inline(never)]
    fn show(&mut self, done: u64, total: u64) {
        if self.last.elapsed() < Duration::from_millis(250) {
            return;
        }
        self.last = Instant::now();
        self.shown = true;
        let _ = write!(
            std::io::stderr(),
            "\r{} {done}/{total} ({:.0}%)  ",
            self.label,
            done as f64 * 100.0 / total as f64
        );
    }

    fn clear(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r{:60}\r", "");
            self.shown = false;
        }
    }
}

/// The index of percentile `p` in `n` sorted values.
fn percentile_index(n: usize, p: f64) -> usize {
    (((n as f64 - 1.0) * p).round() as usize).min(n - 1)
}

/// The latency loops' per-iteration clock, read once per round trip as `ucx_perftest`
/// reads the CPU's time-stamp counter (`ucs_get_time`): through `quanta`, which uses
/// the TSC only when the CPU reports it invariant (constant rate, running in every
/// power state) and `rdtscp` exists, calibrated against the monotonic clock once per
/// process, and otherwise the monotonic clock itself. `Instant::now` is a vDSO call of
/// ~40 instructions; a tick reading is one `rdtsc`. Laps are kept in ticks and turned
/// into nanoseconds after the run (as `ucx_perftest` converts after its loop).
struct LapClock(quanta::Clock);

impl LapClock {
    fn new() -> LapClock {
        LapClock(quanta::Clock::new())
    }

    /// The clock's raw reading (TSC ticks, or nanoseconds of the fallback).
    #[inline(always)]
    fn ticks(&self) -> u64 {
        self.0.raw()
    }

    /// Turns laps in ticks (differences of two [`LapClock::ticks`]) into nanoseconds.
    fn to_nanos(&self, laps: &mut [u64]) {
        for l in laps {
            *l = self.0.delta_as_nanos(0, *l);
        }
    }
}

/// The round trips of a latency run, in lap-clock ticks, kept in memory that was written
/// before the run's clock started.
///
/// A `Vec` reserved up front still has its pages mapped by the kernel on their first
/// write, one fault per 4 KiB (512 laps): measured on this project's test machine (a KVM
/// guest), pushing into fresh memory cost 5.3 ns per lap against 1.2 ns into written
/// memory, 4 ns of a 20 ns in-process round trip that are the harness's, not the
/// library's. `ucx_perftest` keeps its laps in a fixed 2,048-entry ring and has no such
/// cost. Here every lap is kept (the percentiles are of all of them), in a buffer filled
/// once before the timed loop.
struct Laps {
    v: Vec<u64>,
    n: usize,
}

impl Laps {
    /// Room for `iters` laps, written once (its pages mapped) now; or an error saying that
    /// they do not fit in memory: up to [`MAX_ITERS`] iterations can be asked for, 8 bytes
    /// each, which would abort the process in an infallible reservation.
    fn new(iters: u64) -> Result<Laps, tagmatch::Error> {
        let mut v = Vec::new();
        usize::try_from(iters)
            .ok()
            .and_then(|n| v.try_reserve_exact(n).ok().map(|()| n))
            .map(|n| {
                // The writes that map the pages (the allocator's fresh pages are mapped
                // on first touch, zeroed or not).
                v.resize(n, 0);
                Laps { v, n: 0 }
            })
            .ok_or_else(|| tagmatch::Error::Io {
                context: "perf client",
                source: std::io::Error::other(format!(
                    "no memory for the round-trip times of {iters} iterations (8 bytes each): \
                     lower --iters"
                )),
            })
    }

    /// No laps (the tests that do not time iterations).
    fn none() -> Laps {
        Laps {
            v: Vec::new(),
            n: 0,
        }
    }

    /// Keeps one lap (past the room made, none: a run records at most its iterations).
    #[inline(always)]
    fn record(&mut self, lap: u64) {
        if let Some(slot) = self.v.get_mut(self.n) {
            *slot = lap;
            self.n += 1;
        }
    }

    /// The laps recorded, in nanoseconds.
    fn into_nanos(mut self, clock: &LapClock) -> Vec<u64> {
        self.v.truncate(self.n);
        clock.to_nanos(&mut self.v);
        self.v
    }
}

/// The 50th and 99th percentiles of `v` (reordered), as a full sort would give them
/// (`v[percentile_index]` of the sorted values) but in linear time: two selections, the
/// second among the values at or above the median.
fn p50_p99(v: &mut [u64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let (i50, i99) = (
        percentile_index(v.len(), 0.5),
        percentile_index(v.len(), 0.99),
    );
    let (_, &mut p50, above) = v.select_nth_unstable(i50);
    let p99 = if i99 == i50 {
        p50
    } else {
        // `above` holds the sorted positions i50 + 1 .. of `v`.
        *above.select_nth_unstable(i99 - i50 - 1).1
    };
    (p50 as f64, p99 as f64)
}

/// Whether a run's error means that the server is unreachable or gone: an operation to
/// it failed in the transport (a send or RDMA operation not taken within the peer
/// timeout), or a wait for it ran to its limit.
fn is_peer_failure(e: &tagmatch::Error) -> bool {
    matches!(
        e,
        tagmatch::Error::Failed {
            error: tagmatch::OpError::SendFailed | tagmatch::OpError::RdmaFailed,
            ..
        } | tagmatch::Error::Timeout { .. }
    )
}

/// Runs the tests of `a` and returns one row per size (used by the command and tests).
pub fn measure(a: &ClientArgs) -> Result<Vec<Row>, Error> {
    let ctx = "perf client";
    let sizes = parse_sizes(&a.size).map_err(|e| Error::new(ctx, e))?;
    if !a.device.is_empty() && a.transport != "verbs" {
        return Err(Error::new(ctx, "--device goes with --transport verbs"));
    }
    if a.path_mtu.is_some() && a.transport != "udp" {
        return Err(Error::new(ctx, "--path-mtu goes with --transport udp"));
    }
    if a.peer_timeout.is_some() && a.transport != "udp" {
        return Err(Error::new(ctx, "--peer-timeout goes with --transport udp"));
    }
    if let (Some(b), false) = (&a.bind, a.transport == "udp") {
        return Err(Error::new(
            ctx,
            format!("--bind {b:?} goes with --transport udp"),
        ));
    }
    let peer_timeout = match a.peer_timeout {
        Some(t) if !(t.is_finite() && t > 0.0 && t <= 86_400.0) => {
            return Err(Error::new(
                ctx,
                format!("--peer-timeout {t}: expected seconds in (0, 86400]"),
            ))
        }
        t => t.map(Duration::from_secs_f64),
    };
    // One thread runs both sides in process: pinned by default. A server may share the
    // machine: not pinned unless asked.
    let in_process = matches!(a.transport.as_str(), "mem" | "self")
        || (a.transport == "verbs" && a.addr.is_none());
    let default_cpu = if in_process {
        crate::cpu::Cpu::Current
    } else {
        crate::cpu::Cpu::Any
    };
    let cpu = crate::cpu::parse(a.cpu.as_deref(), default_cpu).map_err(|e| Error::new(ctx, e))?;
    crate::cpu::pin(cpu).map_err(|e| Error::new(ctx, e))?;
    if a.no_fast_path && !matches!(a.transport.as_str(), "mem" | "self") {
        return Err(Error::new(
            ctx,
            "--no-fast-path goes with --transport mem or self",
        ));
    }
    if a.window == 0 {
        return Err(Error::new(ctx, "--window: must be at least 1"));
    }
    if a.window > MAX_WINDOW {
        return Err(Error::new(
            ctx,
            format!("--window {}: at most {MAX_WINDOW}", a.window),
        ));
    }
    match a.iters {
        Some(0) => return Err(Error::new(ctx, "--iters: must be at least 1")),
        Some(n) if n > MAX_ITERS => {
            return Err(Error::new(ctx, format!("--iters {n}: at most {MAX_ITERS}")))
        }
        _ => {}
    }
    if matches!(a.test, Test::PutBw | Test::GetBw) && sizes.contains(&0) {
        return Err(Error::new(
            ctx,
            format!("--size 0 is not allowed for {}", a.test.name()),
        ));
    }
    let (transport, mut client) = match a.transport.as_str() {
        "mem" => {
            if let Some(addr) = &a.addr {
                return Err(Error::new(ctx, format!("--transport mem runs both sides in this process: drop the address {addr:?}")));
            }
            let fabric = MemFabric::new();
            let fast = !a.no_fast_path;
            let sep = Endpoint::builder()
                .mem(&fabric)
                .fast_path(fast)
                .build()
                .map_err(fe(ctx))?;
            let server = Server::new(sep).map_err(fe(ctx))?.driven_by_client();
            let mut ep = Endpoint::builder()
                .mem(&fabric)
                .fast_path(fast)
                .build()
                .map_err(fe(ctx))?;
            let peer = ep.insert_peer(&server.address()).map_err(fe(ctx))?;
            (
                "mem",
                Client {
                    ep,
                    server: peer,
                    local: Some(server),
                    sends: VecDeque::new(),
                    reuse: true,
                    spin: SPIN_BW,
                    slots: Vec::new(),
                    looped: false,
                },
            )
        }
        "udp" => {
            let addr = a.addr.as_deref().ok_or_else(|| Error::new(ctx, "missing the server address (udp://IP:PORT/CONNID, as `tagmatch perf server` prints it)"))?;
            let server: tagmatch::Address = addr.parse().map_err(fe(ctx))?;
            let tagmatch::Address::Udp(udp) = &server else {
                return Err(Error::new(
                    ctx,
                    tagmatch::Error::WrongTransport {
                        address: addr.to_owned(),
                        endpoint: "udp",
                    },
                ));
            };
            let bind = client_bind(udp.sock, a.bind.as_deref()).map_err(|e| Error::new(ctx, e))?;
            let mut b = Endpoint::builder()
                .udp(bind)
                .path_mtu(a.path_mtu.unwrap_or(DEFAULT_PATH_MTU));
            if let Some(t) = peer_timeout {
                let mut ucfg = UdpConfig::new(bind);
                ucfg.peer_timeout = t;
                b = b.udp_config(ucfg);
            }
            let mut ep = b
                .build()
                .map_err(|e| Error::new(ctx, format!("UDP endpoint on {bind}: {e}")))?;
            let peer = ep.insert_peer(&server).map_err(fe(ctx))?;
            (
                "udp",
                Client {
                    ep,
                    server: peer,
                    local: None,
                    sends: VecDeque::new(),
                    reuse: false,
                    spin: SPIN_BW,
                    slots: Vec::new(),
                    looped: false,
                },
            )
        }
        "verbs" => {
            let mut ep = verbs_builder(ctx, &a.device)?.build().map_err(fe(ctx))?;
            let (peer, local) = match &a.addr {
                Some(addr) => {
                    let server: tagmatch::Address = addr.parse().map_err(fe(ctx))?;
                    (ep.insert_peer(&server).map_err(fe(ctx))?, None)
                }
                None => {
                    // Both sides in this process, on the same device (as `ucx_perftest`
                    // without a server name runs both sides over loopback).
                    let sep = verbs_builder(ctx, &a.device)?.build().map_err(fe(ctx))?;
                    let server = Server::new(sep).map_err(fe(ctx))?;
                    (
                        ep.insert_peer(&server.address()).map_err(fe(ctx))?,
                        Some(server),
                    )
                }
            };
            (
                "verbs",
                Client {
                    ep,
                    server: peer,
                    local,
                    sends: VecDeque::new(),
                    reuse: false,
                    spin: SPIN_BW,
                    slots: Vec::new(),
                    looped: false,
                },
            )
        }
        "self" => {
            if let Some(addr) = &a.addr {
                return Err(Error::new(ctx, format!("--transport self runs on one endpoint in this process: drop the address {addr:?}")));
            }
            if matches!(a.test, Test::PutBw | Test::GetBw) {
                return Err(Error::new(
                    ctx,
                    format!(
                        "--transport self runs tag_lat, tag_bw and tag_msgrate, not {}",
                        a.test.name()
                    ),
                ));
            }
            let fabric = MemFabric::new();
            let mut ep = Endpoint::builder()
                .mem(&fabric)
                .fast_path(!a.no_fast_path)
                .build()
                .map_err(fe(ctx))?;
            let me = ep.insert_peer(&ep.address()).map_err(fe(ctx))?;
            (
                "self",
                Client {
                    ep,
                    server: me,
                    local: None,
                    sends: VecDeque::new(),
                    reuse: true,
                    spin: SPIN_BW,
                    slots: Vec::new(),
                    looped: true,
                },
            )
        }
        other => {
            return Err(Error::new(
                ctx,
                format!("--transport {other:?}: expected udp, mem, self or verbs"),
            ))
        }
    };
    let mut rows = Vec::new();
    let mut result = Ok(());
    // Whether the run failed because the server is unreachable or gone.
    let mut peer_gone = false;
    for &size in &sizes {
        let iters = a.iters.unwrap_or_else(|| default_iters(a.test, size));
        let warm = (iters / 10).clamp(1, 2000);
        let mut progress = Progress::new(
            std::io::stderr().is_terminal(),
            format!("{} {size} B", a.test.name()),
            iters,
        );
        let mut quiet = Progress::quiet();
        let r = client
            .run(a.test, size, warm, a.window, &mut quiet)
            .and_then(|_| client.run(a.test, size, iters, a.window, &mut progress));
        let (mut rtts, elapsed) = match r {
            Ok(x) => x,
            Err(e) => {
                let hint = match (&e, &a.addr) {
                    (
                        tagmatch::Error::Failed {
                            error: tagmatch::OpError::SendFailed,
                            ..
                        },
                        Some(addr),
                    ) => format!(
                        " (no answer from {addr}: is `tagmatch perf server` running there?)"
                    ),
                    _ => String::new(),
                };
                peer_gone = is_peer_failure(&e);
                result = Err(Error::new(
                    ctx,
                    format!("{} size {size}: {e}{hint}", a.test.name()),
                ));
                break;
            }
        };
        let secs = elapsed.as_secs_f64().max(1e-12);
        let row = if a.test == Test::TagLat {
            let (p50, p99) = p50_p99(&mut rtts);
            let one_way = secs / iters as f64 / 2.0;
            Row {
                test: a.test.name(),
                transport,
                size,
                iters,
                lat_p50_us: Some(p50 / 2e3),
                lat_p99_us: Some(p99 / 2e3),
                lat_avg_us: one_way * 1e6,
                bw_mbs: size as f64 / one_way / 1e6,
                msgrate_mmsgs: 1.0 / one_way / 1e6,
            }
        } else {
            Row {
                test: a.test.name(),
                transport,
                size,
                iters,
                lat_p50_us: None,
                lat_p99_us: None,
                lat_avg_us: secs / iters as f64 * 1e6,
                bw_mbs: size as f64 * iters as f64 / secs / 1e6,
                msgrate_mmsgs: iters as f64 / secs / 1e6,
            }
        };
        if a.json {
            input::print_line(&row.json().to_string()).map_err(|e| Error::new(ctx, e))?;
        }
        rows.push(row);
    }
    // Tell the server we are done (it does not answer QUIT): after a run that passed, a
    // wait for the QUIT's send, then for its acknowledgement (at most 2 s); after one that
    // failed only the flush, the sends of the run left behind; and nothing to a server
    // that is unreachable or gone, as a send to it would fail only after another peer
    // timeout (the error took one already), nor after a failed run to an in-process
    // server (it ends with this process, and only a wait would drive it to take QUIT).
    let mut quit = vec![0u8; CTRL_LEN];
    quit[0] = QUIT;
    if client.looped || peer_gone || (result.is_err() && client.local.is_some()) {
        // No server, or none that would take it.
    } else if let Ok(s) = client.ep.tsend(client.server, CTRL, quit) {
        if result.is_ok() {
            client.sends.push_back(s);
            let _ = client.reap_sends(0);
        } else {
            client.sends.clear();
        }
        let _ = client.ep.flush(Duration::from_secs(2));
    }
    if a.stats {
        eprintln!("{}", client.ep.stats());
    }
    result.map(|()| rows)
}

/// The final table.
pub fn table(rows: &[Row]) -> String {
    let mut out = vec![format!(
        "{:<12} {:<5} {:>10} {:>8} {:>10} {:>10} {:>10} {:>12} {:>10}",
        "test", "tport", "size", "iters", "p50 µs", "p99 µs", "avg µs", "MB/s", "Mmsg/s"
    )];
    let opt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3}"));
    for r in rows {
        out.push(format!(
            "{:<12} {:<5} {:>10} {:>8} {:>10} {:>10} {:>10.3} {:>12.1} {:>10.4}",
            r.test,
            r.transport,
            r.size,
            r.iters,
            opt(r.lat_p50_us),
            opt(r.lat_p99_us),
            r.lat_avg_us,
            r.bw_mbs,
            r.msgrate_mmsgs
        ));
    }
    out.join("\n")
}

/// `1048576` → `1m`, `4096` → `4k`.
fn human(n: usize) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}m", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}k", n >> 10),
        n => n.to_string(),
    }
}

/// A tick label: few digits.
fn short(v: f64) -> String {
    if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Latency (p50, or average for the bandwidth tests) and bandwidth against size, as an
/// SVG of two panels with a logarithmic size axis. Written by hand: a few dozen lines of
/// text, no plotting dependency.
pub fn svg(rows: &[Row]) -> String {
    let (w, h, pad) = (420.0, 300.0, 50.0);
    // Latency spans orders of magnitude: log scale; bandwidth: linear from 0.
    let panel = |x0: f64, title: &str, unit: &str, ys: Vec<f64>, log_y: bool| -> String {
        let mut s = String::new();
        let sizes: Vec<f64> = rows.iter().map(|r| (r.size.max(1) as f64).log2()).collect();
        let (xmin, xmax) = sizes
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(*v), b.max(*v)));
        let xspan = if xmax > xmin { xmax - xmin } else { 1.0 };
        let top = ys.iter().cloned().fold(0.0f64, f64::max).max(1e-9);
        let bottom = ys.iter().cloned().fold(f64::MAX, f64::min).max(1e-9);
        let (lo, hi) = if log_y {
            let (a, b) = (bottom.log10().floor(), top.log10().ceil());
            (a, if b > a { b } else { a + 1.0 })
        } else {
            (0.0, top * 1.1)
        };
        let fy = |y: f64| if log_y { y.max(1e-9).log10() } else { y };
        let px = |x: f64| x0 + pad + (x - xmin) / xspan * (w - 2.0 * pad);
        let py = |y: f64| h - pad - (fy(y) - lo) / (hi - lo) * (h - 2.0 * pad);
        s += &format!(
            "<text x=\"{}\" y=\"20\" font-size=\"14\" text-anchor=\"middle\">{title}</text>\n",
            x0 + w / 2.0
        );
        s += &format!("<line x1=\"{a}\" y1=\"{b}\" x2=\"{c}\" y2=\"{b}\" stroke=\"black\"/><line x1=\"{a}\" y1=\"{d}\" x2=\"{a}\" y2=\"{b}\" stroke=\"black\"/>\n", a = x0 + pad, b = h - pad, c = x0 + w - pad, d = pad);
        s += &format!("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">message size (bytes, log scale)</text>\n", x0 + w / 2.0, h - 12.0);
        let scale = if log_y { ", log scale" } else { "" };
        s += &format!(
            "<text x=\"{}\" y=\"{}\" font-size=\"11\">{unit}{scale} (max {top:.3})</text>\n",
            x0 + 4.0,
            pad - 8.0,
        );
        // y ticks: decades (log) or quarters (linear).
        let ticks: Vec<f64> = if log_y {
            (lo as i32..=hi as i32).map(|e| 10f64.powi(e)).collect()
        } else {
            (0..=4).map(|i| hi / 4.0 * i as f64).collect()
        };
        for t in ticks {
            s += &format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" text-anchor=\"end\">{}</text>\n",
                x0 + pad - 4.0,
                py(t) + 3.0,
                short(t)
            );
        }
        let pts: Vec<String> = sizes
            .iter()
            .zip(&ys)
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        s += &format!(
            "<polyline fill=\"none\" stroke=\"steelblue\" stroke-width=\"2\" points=\"{}\"/>\n",
            pts.join(" ")
        );
        for ((x, y), r) in sizes.iter().zip(&ys).zip(rows) {
            s += &format!("<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"steelblue\"/><text x=\"{:.1}\" y=\"{}\" font-size=\"9\" text-anchor=\"middle\">{}</text>\n", px(*x), py(*y), px(*x), h - pad + 14.0, human(r.size));
        }
        s
    };
    let test = rows.first().map_or("", |r| r.test);
    let lat = rows
        .iter()
        .map(|r| r.lat_p50_us.unwrap_or(r.lat_avg_us))
        .collect();
    let bw = rows.iter().map(|r| r.bw_mbs).collect();
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{h}\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{}{}</svg>\n",
        2.0 * w,
        panel(0.0, &format!("{test}: latency"), "µs", lat, true),
        panel(w, &format!("{test}: bandwidth"), "MB/s", bw, false)
    )
}

/// Runs `tagmatch perf`.
pub fn run(args: Args) -> Result<(), Error> {
    match args.role {
        Role::Server(a) => run_server(a),
        Role::Client(a) => {
            let ctx = "perf client";
            let plot_error = |p: &std::path::Path, e: std::io::Error| {
                Error::new(ctx, format!("--plot {}: {e}", p.display()))
            };
            // The plot's file is opened (created if it does not exist, not truncated yet)
            // before the run, so that a path that cannot be written fails at once instead
            // of after every size has run.
            let plot = match &a.plot {
                Some(p) => {
                    let existed = p.exists();
                    let f = std::fs::OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(false)
                        .open(p)
                        .map_err(|e| plot_error(p, e))?;
                    Some((p, f, existed))
                }
                None => None,
            };
            let rows = match measure(&a) {
                Ok(rows) => rows,
                Err(e) => {
                    // A file this run created is not left behind empty.
                    if let Some((p, f, false)) = plot {
                        drop(f);
                        let _ = std::fs::remove_file(p);
                    }
                    return Err(e);
                }
            };
            if !a.json {
                input::print_line(&table(&rows)).map_err(|e| Error::new(ctx, e))?;
            }
            if let Some((p, mut f, _)) = plot {
                f.set_len(0)
                    .and_then(|()| f.write_all(svg(&rows).as_bytes()))
                    .map_err(|e| plot_error(p, e))?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waiting side spins for its spin since the wait began; past it, only while the
    /// endpoint keeps receiving (the datagrams of a long transfer complete nothing until
    /// the last); it blocks once nothing new arrived for a spin.
    #[test]
    fn a_wait_spins_on_while_its_endpoint_receives() {
        let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut a = Endpoint::builder().udp(lo).build().unwrap();
        let mut b = Endpoint::builder().udp(lo).build().unwrap();
        let to_b = a.insert_peer(&b.address()).unwrap();
        let long = Duration::from_secs(3600);
        let mut w = SpinWatch::new();
        assert!(w.spinning(&b, long), "within the spin");
        let mut w = SpinWatch::new();
        assert!(
            w.spinning(&b, Duration::ZERO),
            "a spin ran out: the activity is read once, and counts as news"
        );
        assert!(!w.spinning(&b, Duration::ZERO), "nothing new since: block");
        let r = b.trecv(tagmatch::ANY_SOURCE, 5, 8).unwrap();
        let _send = a.tsend(to_b, 5, vec![1; 8]).unwrap();
        let start = Instant::now();
        while b.take_completion(r).is_none() {
            a.progress().unwrap();
            b.progress().unwrap();
            assert!(start.elapsed() < Duration::from_secs(30), "never delivered");
        }
        assert!(w.spinning(&b, Duration::ZERO), "b received: spin on");
        assert!(!w.spinning(&b, Duration::ZERO), "and then nothing: block");
        w.busy();
        assert!(w.spinning(&b, long), "a completion restarts the spin");
    }

    /// A lap buffer keeps what was recorded, in order, up to its room (no more, no
    /// panic past it), and turns ticks into the clock's nanoseconds.
    #[test]
    fn laps_keep_what_was_recorded_up_to_their_room() {
        let clock = LapClock::new();
        let mut laps = Laps::new(4).unwrap();
        for t in [30u64, 10, 20] {
            laps.record(t);
        }
        let mut want = vec![30u64, 10, 20];
        clock.to_nanos(&mut want);
        assert_eq!(laps.into_nanos(&clock), want);
        let mut full = Laps::new(2).unwrap();
        for t in 1..=5u64 {
            full.record(t * 1_000);
        }
        assert_eq!(full.into_nanos(&clock).len(), 2);
        let mut none = Laps::none();
        none.record(1);
        assert!(none.into_nanos(&clock).is_empty());
        assert!(
            Laps::new(u64::MAX).is_err(),
            "an impossible reservation is an error"
        );
    }

    /// The minor page faults of this thread so far (`minflt`, field 10 of
    /// /proc/thread-self/stat: the test threads running beside it fault too).
    #[cfg(target_os = "linux")]
    fn minor_faults() -> u64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        // The command name (field 2) is in parentheses and may hold spaces.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        rest.split(' ').nth(7).unwrap().parse().unwrap()
    }

    /// Recording laps maps no memory: the buffer's pages were written when it was made,
    /// before a run's clock starts. (A buffer only reserved takes a fault per 4 KiB page
    /// in the timed loop: checked here too, as the control; with transparent huge pages
    /// on for every mapping the control has few faults and the test says so.)
    #[cfg(target_os = "linux")]
    #[test]
    fn recording_laps_takes_no_page_faults() {
        const N: usize = 1 << 20; // 8 MiB: 2,048 pages of 4 KiB
        let mut reserved: Vec<u64> = Vec::with_capacity(N);
        let before = minor_faults();
        for i in 0..N as u64 {
            reserved.push(i);
        }
        let control = minor_faults() - before;
        drop(reserved);
        let mut laps = Laps::new(N as u64).unwrap();
        let before = minor_faults();
        for i in 0..N as u64 {
            laps.record(i);
        }
        let faults = minor_faults() - before;
        assert!(
            faults < 64,
            "{faults} page faults recording {N} laps (a reserved Vec: {control})"
        );
        if control < (N / 512) as u64 / 2 {
            eprintln!("control: only {control} faults filling a reserved Vec (huge pages?)");
        }
        assert_eq!(laps.into_nanos(&LapClock::new()).len(), N);
    }

    /// Laps recorded and converted as the latency loops do sum to the time `Instant`
    /// measures around them: at least the time between two `Instant` readings taken
    /// inside the first and last lap readings, at most the time between two taken
    /// outside them (1 % for the calibration, 1 ns per lap for the rounding down of
    /// each). Being descheduled only widens the outer pair, so this holds on a loaded
    /// machine; it fails if ticks are scaled wrongly or laps are lost.
    #[test]
    fn laps_agree_with_instant_over_a_run() {
        let laps = LapClock::new();
        let mut v = Vec::with_capacity(20_000);
        let outer0 = Instant::now();
        let mut t0 = laps.ticks();
        let inner0 = Instant::now();
        let mut inner1 = inner0;
        while v.len() < 20_000 {
            // About a microsecond per lap, as a round trip.
            let until = Instant::now() + Duration::from_micros(1);
            while Instant::now() < until {}
            if v.len() == 19_999 {
                inner1 = Instant::now();
            }
            let t1 = laps.ticks();
            v.push(t1.saturating_sub(t0));
            t0 = t1;
        }
        let outer1 = Instant::now();
        laps.to_nanos(&mut v);
        let sum = v.iter().sum::<u64>() as f64;
        let inner = (inner1 - inner0).as_nanos() as f64;
        let outer = (outer1 - outer0).as_nanos() as f64;
        let rounding = v.len() as f64;
        assert!(
            sum >= inner * 0.99 - rounding && sum <= outer * 1.01,
            "laps sum to {sum} ns; Instant: {inner} ns inside, {outer} ns outside"
        );
    }

    #[test]
    fn sizes_parse_with_suffixes_and_reject_garbage() {
        assert_eq!(parse_sizes("8,4k,1M").unwrap(), vec![8, 4096, 1 << 20]);
        for bad in ["", "x", "8,", "-1", "2g0", "4096g"] {
            assert!(parse_sizes(bad).is_err(), "{bad}");
        }
    }

    /// The selections give what indexing the sorted values gives, for every length from 1
    /// to 300 (with duplicates, sorted and reversed inputs).
    #[test]
    fn percentiles_by_selection_equal_those_of_a_sort() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in 1..=300usize {
            for shape in 0..3 {
                let mut v: Vec<u64> = (0..n)
                    .map(|i| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        match shape {
                            0 => x % 50,
                            1 => i as u64,
                            _ => (n - i) as u64 * 3,
                        }
                    })
                    .collect();
                let mut sorted = v.clone();
                sorted.sort_unstable();
                let want = (
                    sorted[percentile_index(n, 0.5)] as f64,
                    sorted[percentile_index(n, 0.99)] as f64,
                );
                assert_eq!(p50_p99(&mut v), want, "n {n} shape {shape}");
            }
        }
        assert_eq!(p50_p99(&mut []), (0.0, 0.0));
    }

    /// A run of `total` iterations looks at the clock every `progress_step(total)`
    /// iterations: at least 100 times (every iteration in runs of up to 199), at most
    /// every 256 iterations; a quiet one never does.
    #[test]
    fn progress_looks_at_least_a_hundred_times_per_run() {
        for (total, step) in [
            (1, 1),
            (99, 1),
            (100, 1),
            (199, 1),
            (200, 2),
            (1_000, 10),
            (25_599, 255),
            (25_600, 256),
            (1_000_000, 256),
            (MAX_ITERS, 256),
        ] {
            assert_eq!(progress_step(total), step, "{total}");
        }
        for total in [1u64, 7, 100, 150, 2_000, 30_000] {
            let mut p = Progress::new(true, "t".into(), total);
            // The line itself never draws: its last drawing is in the future.
            p.last = Instant::now() + Duration::from_secs(3600);
            let mut looks = 0;
            for done in 1..=total {
                let next = p.next;
                p.tick(done, total);
                looks += u64::from(p.next != next);
            }
            assert_eq!(looks, total / progress_step(total), "{total}");
            assert!(looks >= total.min(100), "{total}: {looks}");
            assert!(!p.shown);
            let mut q = Progress::quiet();
            for done in 1..=total {
                q.tick(done, total);
            }
            assert_eq!(q.next, u64::MAX, "{total}");
        }
    }

    fn args(test: Test, size: &str) -> ClientArgs {
        ClientArgs {
            addr: None,
            transport: "mem".into(),
            device: String::new(),
            test,
            size: size.into(),
            iters: Some(20),
            window: 8,
            json: false,
            plot: None,
            path_mtu: None,
            stats: false,
            no_fast_path: false,
            cpu: None,
            peer_timeout: None,
            bind: None,
        }
    }

    #[test]
    fn every_test_in_process() {
        for (t, no_fast_path) in [
            (Test::TagLat, false),
            (Test::TagLat, true),
            (Test::TagBw, false),
            (Test::TagBw, true),
            (Test::TagMsgrate, false),
            (Test::PutBw, false),
            (Test::GetBw, false),
        ] {
            let mut a = args(t, "8,20k");
            a.no_fast_path = no_fast_path;
            let rows = measure(&a).unwrap();
            assert_eq!(rows.len(), 2, "{t:?}");
            assert!(
                rows.iter().all(|r| r.bw_mbs > 0.0 && r.msgrate_mmsgs > 0.0),
                "{t:?}"
            );
            assert_eq!(rows[0].lat_p50_us.is_some(), t == Test::TagLat);
            let svg = svg(&rows);
            assert!(svg.starts_with("<svg") && svg.contains("polyline"));
            assert_eq!(table(&rows).lines().count(), 3);
        }
    }

    /// `--transport self`: one endpoint sending to itself runs every tag test (its fast
    /// path and, with `--no-fast-path`, the protocol over the in-memory device), sizes
    /// inline and not; RMA tests and an address are refused with a message.
    #[test]
    fn every_tag_test_on_one_endpoint_sending_to_itself() {
        for t in [Test::TagLat, Test::TagBw, Test::TagMsgrate] {
            for no_fast_path in [false, true] {
                let mut a = args(t, "8,20k");
                a.transport = "self".into();
                a.window = 4;
                a.no_fast_path = no_fast_path;
                let rows = measure(&a).unwrap();
                assert_eq!(rows.len(), 2, "{t:?}");
                assert!(rows.iter().all(|r| r.transport == "self"));
                assert!(
                    rows.iter().all(|r| r.bw_mbs > 0.0 && r.msgrate_mmsgs > 0.0),
                    "{t:?}"
                );
                assert_eq!(rows[0].lat_p50_us.is_some(), t == Test::TagLat);
                assert_eq!(table(&rows).lines().count(), 3);
            }
        }
        let mut a = args(Test::PutBw, "8");
        a.transport = "self".into();
        let e = measure(&a).unwrap_err().to_string();
        assert!(e.contains("--transport self runs tag_lat"), "{e}");
        let mut a = args(Test::TagLat, "8");
        a.transport = "self".into();
        a.addr = Some("udp://127.0.0.1:1/0".into());
        let e = measure(&a).unwrap_err().to_string();
        assert!(e.contains("drop the address"), "{e}");
    }

    /// A client that vanishes in the middle of a run (its endpoint dropped after three
    /// of 100 messages) is taken for gone once the server heard nothing of it for the
    /// limit; the abandoned run's receives are cancelled, and the next client is served
    /// a whole run.
    #[test]
    fn server_abandons_the_run_of_a_vanished_client_and_serves_the_next() {
        let fabric = MemFabric::new();
        let mut server = Server::new(Endpoint::builder().mem(&fabric).build().unwrap()).unwrap();
        {
            let mut c = Endpoint::builder().mem(&fabric).build().unwrap();
            let p = c.insert_peer(&server.address()).unwrap();
            let reply = c.trecv(p, REPLY, 24).unwrap();
            let _ = c
                .tsend(p, CTRL, ctrl_msg(Test::TagBw.code(), 8, 100, 4))
                .unwrap();
            let mut got = None;
            for _ in 0..10_000 {
                c.progress().unwrap();
                server.step().unwrap();
                got = c.take_completion(reply);
                if got.is_some() {
                    break;
                }
            }
            got.expect("the server answers the control message")
                .into_result()
                .unwrap();
            for _ in 0..3 {
                let _ = c.tsend(p, DATA, vec![7; 8]).unwrap();
            }
            for _ in 0..1000 {
                c.progress().unwrap();
                server.step().unwrap();
            }
        }
        assert!(
            matches!(server.phase, Phase::Bw { left: 97, .. }),
            "{:?}",
            server.phase
        );
        assert_eq!(server.pending.len(), 4, "the window of receives is posted");
        let limit = Duration::from_millis(20);
        assert!(!server.stalled(limit), "heard of just now");
        let start = Instant::now();
        while !server.stalled(limit) {
            server.step_timeout(Duration::from_millis(5)).unwrap();
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "never taken for gone"
            );
        }
        server.abandon().unwrap();
        assert!(server.pending.is_empty());
        assert!(!server.stalled(limit), "no client after abandoning");
        // The cancelled receives complete as cancelled; the server ignores them.
        for _ in 0..100 {
            server.step().unwrap();
        }
        let mut ep = Endpoint::builder().mem(&fabric).build().unwrap();
        let peer = ep.insert_peer(&server.address()).unwrap();
        let mut next = Client {
            ep,
            server: peer,
            local: Some(server),
            sends: VecDeque::new(),
            reuse: true,
            spin: SPIN_BW,
            slots: Vec::new(),
            looped: false,
        };
        let mut quiet = Progress::quiet();
        let (rtts, _) = next.run(Test::TagLat, 8, 50, 1, &mut quiet).unwrap();
        assert_eq!(rtts.len(), 50);
        assert_eq!(next.local.as_ref().map(|s| s.runs), Some(2));
    }

    #[test]
    fn server_ignores_malformed_control_messages() {
        let fabric = MemFabric::new();
        let mut server = Server::new(Endpoint::builder().mem(&fabric).build().unwrap()).unwrap();
        let mut c = Endpoint::builder().mem(&fabric).build().unwrap();
        let p = c.insert_peer(&server.address()).unwrap();
        let ctrl = ctrl_msg;
        for bad in [
            ctrl(77, 8, 1, 1),
            ctrl(0, 1 << 40, 1, 1),
            ctrl(3, 8, 0, 1),
            ctrl(1, 8, 10, u64::MAX),
        ] {
            let s = c.tsend(p, CTRL, bad).unwrap();
            for _ in 0..1000 {
                c.progress().unwrap();
                server.step().unwrap();
            }
            c.take_completion(s).unwrap().into_result().unwrap();
            assert!(!server.done());
        }
        assert_eq!(server.runs, 0);
        let s = c.tsend(p, CTRL, ctrl(QUIT, 0, 0, 0)).unwrap();
        for _ in 0..1000 {
            c.progress().unwrap();
            server.step().unwrap();
        }
        c.take_completion(s).unwrap().into_result().unwrap();
        assert!(server.done());
    }

    /// The client's UDP endpoint binds loopback for a loopback server, the source
    /// address of the route for another (for a loopback server that is loopback too),
    /// and `--bind` when given: of the server's family, a concrete IP.
    #[test]
    fn the_client_binds_where_the_server_can_answer() {
        let v4: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let v6: SocketAddr = "[::1]:9".parse().unwrap();
        assert_eq!(
            client_bind(v4, None).unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert_eq!(client_bind(v6, None).unwrap(), "[::1]:0".parse().unwrap());
        // Another loopback address of the server is reached from 127.0.0.1 as well.
        let other: SocketAddr = "127.0.0.2:9".parse().unwrap();
        assert_eq!(
            client_bind(other, None).unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        // The route's source address, port 0: for a loopback destination, loopback.
        assert_eq!(route_source(v4).unwrap(), "127.0.0.1:0".parse().unwrap());
        let src = route_source(other).unwrap();
        assert!(src.ip().is_loopback() && src.port() == 0, "{src}");
        // An explicit --bind is honoured, port included.
        assert_eq!(
            client_bind(v4, Some("127.0.0.3:4567")).unwrap(),
            "127.0.0.3:4567".parse().unwrap()
        );
        for (server, bind, want) in [
            (
                v4,
                "[::1]:0",
                "--bind [::1]:0: an IPv6 address, but the server 127.0.0.1:9 is IPv4",
            ),
            (
                v6,
                "127.0.0.1:0",
                "--bind 127.0.0.1:0: an IPv4 address, but the server [::1]:9 is IPv6",
            ),
            (v4, "0.0.0.0:0", "--bind 0.0.0.0:0: bind a concrete IP"),
            (v4, "10.0.0.1", "--bind \"10.0.0.1\": not IP:PORT"),
        ] {
            let e = client_bind(server, Some(bind)).unwrap_err();
            assert!(e.starts_with(want), "{bind}: {e}");
        }
    }

    #[test]
    fn bad_arguments_are_errors() {
        let mut a = args(Test::PutBw, "0");
        assert!(measure(&a).unwrap_err().to_string().contains("--size 0"));
        a.size = "8".into();
        a.window = 0;
        assert!(measure(&a).unwrap_err().to_string().contains("--window"));
        a.window = MAX_WINDOW + 1;
        let e = measure(&a).unwrap_err().to_string();
        assert!(e.contains("--window 65537: at most 65536"), "{e}");
        a.window = 1;
        a.iters = Some(MAX_ITERS + 1);
        let e = measure(&a).unwrap_err().to_string();
        assert!(e.contains("--iters 4294967297: at most 4294967296"), "{e}");
        a.iters = Some(20);
        a.transport = "tcp".into();
        assert!(measure(&a).unwrap_err().to_string().contains("--transport"));
        a.transport = "udp".into();
        assert!(measure(&a)
            .unwrap_err()
            .to_string()
            .contains("missing the server address"));
        a.addr = Some("udp://nope".into());
        assert!(measure(&a)
            .unwrap_err()
            .to_string()
            .contains("invalid address"));
    }
}

//! [`Stats`]: counters of every layer.

use std::fmt;

use tagmatch_rdm::{OpKind, Protocol};
use tagmatch_transport::soft_rdma::RdmaStats;
use tagmatch_transport::udp::UdpStats;

/// Facade counters: what the application asked for and what completed how.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Operations submitted (sends, receives, RMA, atomics).
    pub submitted: u64,
    /// Operation calls refused (bad peer, limits, bad atomic arguments).
    pub call_errors: u64,
    /// Completions delivered.
    pub completed: u64,
    /// Completions with an error.
    pub failed: u64,
    /// Receives cancelled.
    pub cancels: u64,
    /// Operations ended by [`crate::Endpoint::abort`] (those ended by
    /// [`crate::Endpoint::remove_peer`] are in `Stats::rdm.aborted` and the fast path's
    /// completions).
    pub aborts: u64,
    /// Probes and mprobes.
    pub probes: u64,
    /// Memory regions registered through the facade.
    pub registrations: u64,
    /// Sends from registered regions (`Endpoint::tsend_region` / `send_region`): each
    /// reused its region's registration instead of registering its own buffer.
    pub region_sends: u64,
    /// `progress` calls.
    pub progress_calls: u64,
    /// In-process endpoints: times a `progress_timeout` (or a `wait`) found nothing to do
    /// and slept on the endpoint's doorbell instead of spinning.
    pub idle_sleeps: u64,
    /// Bytes moved by completed operations (sent, received, written, read).
    pub bytes: u64,
    /// Completions per subprotocol, in [`Counters::PROTOCOLS`] order.
    pub protocols: [u64; 13],
    /// Messages sent on the in-process fast path (no EFA packets).
    pub fast_sends: u64,
    /// Messages received on the in-process fast path.
    pub fast_recvs: u64,
    /// Times the receiver's memory budget made it stop taking messages from a fast-path
    /// lane (or from the protocol endpoint) until receives drain it.
    pub fast_backpressure: u64,
    /// Sends by `tinject` / `inject` (no completion unless they fail).
    pub injected: u64,
    /// Fast-path lanes into this endpoint released because their sender was dropped
    /// (after every message in them was taken).
    pub fast_lanes_released: u64,
}

impl Counters {
    /// The subprotocols counted in [`Counters::protocols`].
    pub const PROTOCOLS: [Protocol; 13] = [
        Protocol::Eager,
        Protocol::Medium,
        Protocol::LongCts,
        Protocol::LongRead,
        Protocol::RuntRead,
        Protocol::EagerWrite,
        Protocol::LongCtsWrite,
        Protocol::LongReadWrite,
        Protocol::ShortRead,
        Protocol::LongCtsRead,
        Protocol::DirectRead,
        Protocol::DirectWrite,
        Protocol::Atomic,
    ];

    /// Completions that used `p`.
    pub fn protocol(&self, p: Protocol) -> u64 {
        Self::PROTOCOLS
            .iter()
            .position(|q| *q == p)
            .map_or(0, |i| self.protocols[i])
    }

    pub(crate) fn note(&mut self, c: &tagmatch_rdm::Completion, p: Option<Protocol>) {
        self.completed += 1;
        if c.result.is_err() {
            self.failed += 1;
        }
        if c.kind != OpKind::RemoteWrite {
            self.bytes += c.len;
        }
        if let Some(i) = p.and_then(|p| Self::PROTOCOLS.iter().position(|q| *q == p)) {
            self.protocols[i] += 1;
        }
    }
}

/// Device counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// A snapshot returned by value from `stats()`; boxing the UDP counters would only make
// matching on it clumsier.
#[allow(clippy::large_enum_variant)]
pub enum DeviceStats {
    /// In-process device: software-RDMA requests served and rejected.
    Mem(RdmaStats),
    /// UDP device: datagrams, syscalls, retransmissions, drops by reason.
    Udp(UdpStats),
    /// Verbs device: packets, connections, connection-message retransmissions.
    #[cfg(feature = "verbs")]
    Verbs(tagmatch_transport::verbs::RdmStats),
}

/// The HW/SW split of tag matching.
///
/// No hardware tag-matching path backs the facade today: the `mem` and `udp` transports
/// match every message in software (the `tagmatch-engine` offload split is not wired to
/// any device the facade builds). So [`OffloadStats::in_use`] is `false`, the hardware
/// counters are zero and every match counts as software.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffloadStats {
    /// Whether a hardware tag-matching path is in use (always `false` with `mem`/`udp`).
    pub in_use: bool,
    /// Receives offloaded to hardware.
    pub offloaded: u64,
    /// Messages matched by hardware.
    pub matched_hw: u64,
    /// Searches that found a partner in software (the matching engine's hits: posts,
    /// arrivals, probes and mprobes).
    pub matched_sw: u64,
}

impl OffloadStats {
    /// The split of an endpoint that matches in software only.
    pub fn software_only(m: &tagmatch_rdm::MatchCounters) -> OffloadStats {
        OffloadStats {
            in_use: false,
            offloaded: 0,
            matched_hw: 0,
            matched_sw: m.hits,
        }
    }
}

/// Counters of every layer, from [`crate::Endpoint::stats`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Facade counters.
    pub facade: Counters,
    /// RDM protocol counters: packets, drops by reason (parse errors, connid mismatch,
    /// unknown sender or operation, invalid, stale or duplicate; and messages refused for now by the budget or the reorder window, which the device redelivers), handshakes,
    /// READ_NACK fallbacks.
    pub rdm: tagmatch_rdm::Stats,
    /// Sender-side operations in flight.
    pub tx_in_flight: usize,
    /// Receiver-side operations in flight (posted receives included).
    pub rx_in_flight: usize,
    /// Unexpected messages queued for a receive (a message claimed by `tmprobe` /
    /// `mprobe` is not: `matching.claimed_depth` counts it until its `mrecv`).
    pub unexpected: usize,
    /// Memory regions held by the protocol endpoint.
    pub regions: usize,
    /// Packets handed to the device and not yet answered.
    pub device_sends_pending: usize,
    /// RDMA operations handed to the device and not yet answered.
    pub device_rdma_pending: usize,
    /// Completions waiting for `poll_completion`.
    pub ready_completions: usize,
    /// In-process fast path: lanes into this endpoint that its `progress` reads (one per
    /// live sender, plus those of dropped senders not drained yet).
    pub fast_lanes_in: usize,
    /// In-process fast path: lanes out of this endpoint to receivers still alive.
    pub fast_lanes_out: usize,
    /// The matching engine: posted, unexpected, claimed and reorder-buffer depths, bytes
    /// held, match attempts (candidates inspected), hits, misses, cancels, rejections.
    pub matching: tagmatch_rdm::MatchCounters,
    /// The HW/SW split of tag matching (software only with the `mem` and `udp`
    /// transports).
    pub offload: OffloadStats,
    /// Device counters.
    pub device: DeviceStats,
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.facade;
        writeln!(
            f,
            "facade: submitted {} completed {} failed {} call_errors {} cancels {} aborts {} probes {} bytes {} progress {} idle sleeps {}",
            c.submitted, c.completed, c.failed, c.call_errors, c.cancels, c.aborts, c.probes,
            c.bytes, c.progress_calls, c.idle_sleeps
        )?;
        let used: Vec<String> = Counters::PROTOCOLS
            .iter()
            .zip(c.protocols)
            .filter(|(_, n)| *n > 0)
            .map(|(p, n)| format!("{p:?} {n}"))
            .collect();
        writeln!(f, "protocols: {}", used.join(", "))?;
        writeln!(
            f,
            "fast path: sends {} receives {} backpressure {} injected {} lanes in {} out {} released {}",
            c.fast_sends,
            c.fast_recvs,
            c.fast_backpressure,
            c.injected,
            self.fast_lanes_in,
            self.fast_lanes_out,
            c.fast_lanes_released
        )?;
        writeln!(
            f,
            "queues: tx {} rx {} unexpected {} regions {} ready {}",
            self.tx_in_flight,
            self.rx_in_flight,
            self.unexpected,
            self.regions,
            self.ready_completions
        )?;
        let m = &self.matching;
        writeln!(
            f,
            "matching: posted {} unexpected {} claimed {} reorder {} bytes_held {} attempts {} hits {} misses {} cancelled {} rejected: budget {} sequence {}",
            m.posted_depth, m.unexpected_depth, m.claimed_depth, m.reorder_depth, m.bytes_held,
            m.match_attempts, m.hits, m.misses, m.cancelled, m.rejected_backpressure,
            m.rejected_sequence
        )?;
        let o = &self.offload;
        if o.in_use {
            writeln!(
                f,
                "hw/sw: offloaded {} matched hw {} sw {}",
                o.offloaded, o.matched_hw, o.matched_sw
            )?;
        } else {
            writeln!(
                f,
                "hw/sw: tag-matching offload not in use (software matching only: {} matched)",
                o.matched_sw
            )?;
        }
        writeln!(
            f,
            "buffers: registrations {} region sends {}",
            c.registrations, c.region_sends
        )?;
        let r = &self.rdm;
        writeln!(
            f,
            "rdm: rx {} tx {} tx_again {} handshakes {} read_nacks {} not-ready (redelivered) {} drops: parse {} connid {} unknown_sender {} unknown_op {} invalid {} stale/duplicate {} duplicate data {} address book full {}",
            r.rx_packets, r.tx_packets, r.tx_again, r.handshakes_sent, r.read_nacks,
            r.rx_refused, r.rx_parse_errors, r.rx_connid_mismatch, r.rx_unknown_sender,
            r.rx_unknown_op, r.rx_invalid, r.rx_reorder_rejected, r.rx_duplicate_data,
            r.rx_peer_limit
        )?;
        writeln!(
            f,
            "rdm: requests refused unanswered {} operations aborted {} peers removed {}",
            r.rx_requests_refused, r.aborted, r.peers_removed
        )?;
        match &self.device {
            DeviceStats::Mem(d) => write!(f, "device mem: {d:?}"),
            DeviceStats::Udp(u) => write!(
                f,
                "device udp: frames sent {} received {} pure acks sent {} retransmits {} fast_retransmits {} duplicates {} bad_frames {} wrong_connid {} beyond_window {} send_again {} not-ready held {} not-ready unacknowledged {} not-ready notices sent {} received {} peer sockets {} (not opened {}) receive calls {} send calls {} placed {} (expected {}, not {}) spliced {}",
                u.frames_sent, u.frames_received, u.acks_sent, u.retransmits, u.fast_retransmits,
                u.duplicates, u.bad_frames, u.wrong_connid, u.beyond_window, u.send_again,
                u.rnr_held, u.rnr_dropped, u.rnr_sent, u.rnr_received, u.peer_sockets,
                u.peer_socket_errors, u.sock.recv_calls, u.sock.send_calls, u.rx_placed,
                u.rx_expected, u.rx_unexpected, u.sock.tx_spliced
            ),
            #[cfg(feature = "verbs")]
            DeviceStats::Verbs(v) => write!(
                f,
                "device verbs: packets sent {} received {} tx_errors {} connects {} cm_retransmits {} cm_dropped {} send_again {} rdma_refused {}",
                v.tx_packets, v.rx_packets, v.tx_errors, v.connects, v.cm_retransmits,
                v.cm_dropped, v.send_again, v.rdma_refused
            ),
        }
    }
}

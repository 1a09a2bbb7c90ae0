//! Endpoint configuration: the features it advertises, the requests it makes, and the
//! protocol-selection thresholds.

use tagmatch_wire::efa::extra;

/// Which extra features/requests the endpoint advertises in its HANDSHAKE
/// (efa-rdm-protocol-v4 §2.1, table 2.1; wire-layouts §A.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// Bit 0: the device can RDMA-read (long-read, runting read, direct read).
    pub rdma_read: bool,
    /// Bit 1: delivery complete.
    pub delivery_complete: bool,
    /// Bit 2 (request): keep the REQ header length constant.
    pub request_constant_header_length: bool,
    /// Bit 3 (request): put the sender connid in every header.
    pub request_connid_header: bool,
    /// Bit 4: runting read.
    pub runt: bool,
    /// Bit 5: the device can RDMA-write (direct write).
    pub rdma_write: bool,
    /// Bit 6: READ_NACK.
    pub read_nack: bool,
}

impl Default for Features {
    /// What libfabric 2.x advertises on a device with RDMA read and write (wire-layouts
    /// §A.4: "always: 1, 3, 4, 6 … depending on the device: 0, 5").
    fn default() -> Self {
        Features {
            rdma_read: true,
            delivery_complete: true,
            request_constant_header_length: false,
            request_connid_header: true,
            runt: true,
            rdma_write: true,
            read_nack: true,
        }
    }
}

impl Features {
    /// Only the baseline (a libfabric 1.10-like peer without RDMA).
    pub fn baseline() -> Self {
        Features {
            rdma_read: false,
            delivery_complete: false,
            request_constant_header_length: false,
            request_connid_header: false,
            runt: false,
            rdma_write: false,
            read_nack: false,
        }
    }

    /// The `extra_info[0]` word.
    pub fn word(&self) -> u64 {
        let mut w = 0u64;
        let mut set = |bit: usize, on: bool| {
            if on {
                w |= 1 << bit;
            }
        };
        set(extra::FEATURE_RDMA_READ, self.rdma_read);
        set(extra::FEATURE_DELIVERY_COMPLETE, self.delivery_complete);
        set(
            extra::REQUEST_CONSTANT_HEADER_LENGTH,
            self.request_constant_header_length,
        );
        set(extra::REQUEST_CONNID_HEADER, self.request_connid_header);
        set(extra::FEATURE_RUNT, self.runt);
        set(extra::FEATURE_RDMA_WRITE, self.rdma_write);
        set(extra::FEATURE_READ_NACK, self.read_nack);
        w
    }
}

/// Endpoint configuration. See `docs/protocol.md` for how the thresholds choose a
/// subprotocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Largest packet the device sends (EFA reports 8928 on current hardware).
    pub mtu: usize,
    /// Messages up to this size that do not fit one packet use the medium protocol
    /// (libfabric `FI_EFA_INTER_MAX_MEDIUM_MESSAGE_SIZE` default 65536): medium has no flow
    /// control, so it is kept to a few dozen packets.
    pub max_medium_size: u64,
    /// Messages of at least this size use long-read (or runting read) when both sides can
    /// RDMA-read (libfabric `FI_EFA_INTER_MIN_READ_MESSAGE_SIZE` default 1 MiB): below it
    /// the registration and the extra round trip cost more than the copies of long-CTS.
    pub min_read_msg_size: u64,
    /// Emulated writes of at least this size use long-read write when the peer can
    /// RDMA-read (libfabric `FI_EFA_INTER_MIN_READ_WRITE_SIZE` default 64 KiB).
    pub min_read_write_size: u64,
    /// Bytes sent as runts before the RDMA read of a runting-read message; 0 disables
    /// runting read (libfabric uses it for device memory only; default 0 here).
    pub runt_size: u64,
    /// `credit_request` of LONGCTS REQs (libfabric `FI_EFA_TX_MIN_CREDITS` default 32).
    pub tx_min_credits: u32,
    /// Most CTSDATA packets one CTS allows (the receive window).
    pub rx_window_packets: u32,
    /// Largest single RDMA read/write (EFA: 1 GiB).
    pub max_rdma_size: u64,
    /// Use direct RDMA read for `read` when both sides advertise RDMA read.
    pub direct_read: bool,
    /// Use direct RDMA write for `write` when both sides advertise RDMA write.
    pub direct_write: bool,
    /// Reorder window per peer, in messages (libfabric `FI_EFA_RECVWIN_SIZE` 16384).
    pub reorder_window: u32,
    /// Budget of bytes buffered for unexpected and out-of-order messages (eager and medium
    /// data, LONGCTS_RTM first segments, runts). A message that would exceed it is
    /// refused for now (`Rx::Refused`, counted in `Stats::rx_refused`): the owner
    /// hands it in again later, so nothing is lost and memory stays bounded.
    pub max_unexpected_bytes: usize,
    /// Budget of unexpected and out-of-order messages, never exceeded: a message held out
    /// of order keeps room for the messages of its peer missing below it, and one that
    /// cannot is refused for now like a message over the byte budget.
    pub max_unexpected_msgs: usize,
    /// Whether messages claimed with `mprobe`/`tmprobe` and not yet received count
    /// against the two budgets above (default `true`). An owner that claims every message
    /// into a matching engine of its own, with its own budget (the `tagmatch` facade's
    /// in-process fast path), turns it off: see `tagmatch_engine::Config::claims_count`.
    pub claims_count: bool,
    /// The first `msg_id` used towards, and expected from, every peer (0 in libfabric;
    /// settable to test wraparound).
    pub initial_msg_id: u32,
    /// What the HANDSHAKE advertises.
    pub features: Features,
    /// HANDSHAKE DEVICE_VERSION (always sent: libfabric reads it without checking its
    /// flag, wire-layouts §A.5).
    pub device_version: u32,
    /// HANDSHAKE HOST_ID (sent when non-zero).
    pub host_id: u64,
    /// Send the HMEM_P2P HANDSHAKE header (libfabric main only).
    pub send_hmem_p2p: bool,
    /// Most peers the address book holds before a packet from an unknown sender may not
    /// add one more (default 65,536, generous for any job). efa-rdm-protocol-v4 §2.2 lets
    /// a receiver insert a sender's raw address from its REQ, and §4.4 a new connid on a
    /// known GID and QPN: without a bound, every new address a peer makes up would grow
    /// the address book. A packet that would add a peer past the bound is dropped and
    /// counted (`Stats::rx_peer_limit`); nothing else changes. Peers the application adds
    /// ([`crate::Endpoint::add_peer`]) are not refused, but count towards the bound;
    /// removed ones ([`crate::Endpoint::remove_peer`]) do not.
    pub max_peers: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mtu: 8928,
            max_medium_size: 65536,
            min_read_msg_size: 1 << 20,
            min_read_write_size: 65536,
            runt_size: 0,
            tx_min_credits: 32,
            rx_window_packets: 64,
            max_rdma_size: 1 << 30,
            direct_read: true,
            direct_write: true,
            reorder_window: 16384,
            max_unexpected_bytes: 256 << 20,
            max_unexpected_msgs: 1 << 20,
            claims_count: true,
            initial_msg_id: 0,
            features: Features::default(),
            device_version: 0xEFA1,
            host_id: 0,
            send_hmem_p2p: false,
            max_peers: 1 << 16,
        }
    }
}

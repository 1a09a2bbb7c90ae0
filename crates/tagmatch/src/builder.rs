//! [`Builder`]: transport, protocol thresholds, memory budget.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tagmatch_rdm::Config;
use tagmatch_transport::mem::{MemFaults, MemNetwork};
use tagmatch_transport::udp::{UdpConfig, UdpDevice, MAX_PATH_MTU, MIN_PATH_MTU};

use crate::endpoint::{Device, Endpoint};
use crate::fast::Hub;
use crate::Error;

/// The in-process fabric: endpoints built on the same fabric reach each other without
/// sockets (packets and software RDMA go through shared in-memory queues). Cloning gives
/// another handle to the same fabric; endpoints may live in different threads.
#[derive(Debug, Clone)]
pub struct MemFabric {
    net: MemNetwork,
    /// Fast-path endpoints of this fabric, by address.
    hub: Arc<Hub>,
    /// Whether the fabric injects faults (reordering, delays, refusals): its delays count
    /// device polls, so fast-path endpoints poll the device at every `progress` then.
    faulty: bool,
}

impl MemFabric {
    /// A fabric that delivers in order and at once (the fast path for in-process use).
    pub fn new() -> MemFabric {
        MemFabric::with_faults(
            0,
            MemFaults {
                reorder: false,
                max_delay: 0,
                send_again: 0,
                register_fail: 0,
            },
        )
    }

    /// A fabric that reorders, delays and injects faults deterministically under `seed`
    /// (for testing an application against an unordered, EFA-like device).
    pub fn with_faults(seed: u64, faults: MemFaults) -> MemFabric {
        let faulty = faults.reorder
            || faults.max_delay > 0
            || faults.send_again > 0
            || faults.register_fail > 0;
        MemFabric {
            net: MemNetwork::with_faults(seed, faults),
            hub: Arc::new(Hub::default()),
            faulty,
        }
    }

    /// The underlying network.
    pub fn network(&self) -> &MemNetwork {
        &self.net
    }
}

impl Default for MemFabric {
    fn default() -> Self {
        MemFabric::new()
    }
}

/// Which transport an endpoint uses.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Transport {
    /// In-process, on a [`MemFabric`].
    Mem(MemFabric),
    /// UDP (EFA SRD semantics with software RDMA) bound to this address; port 0 picks one.
    Udp(SocketAddr),
    /// An ibverbs device (ConnectX, Soft-RoCE) by name: the RDM protocol over verbs (UD
    /// for addressing and connection set-up, RC SENDs for packets; RMA and atomics use the
    /// protocol's emulated paths). See `tagmatch_transport::verbs::rdm`.
    #[cfg(feature = "verbs")]
    Verbs(String),
}

/// Builds an [`Endpoint`]: `Endpoint::builder().mem(&fabric).build()`.
///
/// ```
/// use tagmatch::{Endpoint, Error};
/// let e = Endpoint::builder().udp("127.0.0.1:0".parse().unwrap()).path_mtu(100).build();
/// assert!(matches!(e, Err(Error::Config { setting: "path_mtu", .. })));
/// assert!(matches!(Endpoint::builder().build(), Err(Error::NoTransport)));
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    transport: Option<Transport>,
    cfg: Config,
    udp_mtu: Option<usize>,
    udp: Option<UdpConfig>,
    #[cfg(feature = "verbs")]
    verbs: Option<tagmatch_transport::verbs::RdmConfig>,
    wait_limit: Duration,
    fast_path: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            transport: None,
            cfg: Config::default(),
            udp_mtu: None,
            udp: None,
            #[cfg(feature = "verbs")]
            verbs: None,
            wait_limit: Duration::from_secs(30),
            fast_path: true,
        }
    }
}

impl Builder {
    /// Chooses the transport.
    pub fn transport(mut self, t: Transport) -> Self {
        self.transport = Some(t);
        self
    }

    /// In-process transport on `fabric`.
    pub fn mem(self, fabric: &MemFabric) -> Self {
        self.transport(Transport::Mem(fabric.clone()))
    }

    /// UDP transport bound to `bind` (a concrete IP; port 0 picks a free port).
    pub fn udp(self, bind: SocketAddr) -> Self {
        self.transport(Transport::Udp(bind))
    }

    /// The ibverbs transport on device `name` (`mlx5_0`, `rxe0`; `""` for the first
    /// device). The endpoint's address is `verbs://[GID]:QPN/0xCONNID`; peers connect on
    /// the first packet. The device has no RDMA path yet, so the endpoint advertises
    /// neither RDMA read nor write and RMA, atomics and large messages use the protocol's
    /// emulated subprotocols (efa-rdm-protocol-v4 §2.1 feature bits 0 and 5).
    ///
    /// The device sends its packets over RC queue pairs and a shared receive queue (a UD
    /// QP only for the address and connection set-up): ConnectX and other RC-capable
    /// devices (RoCE, Soft-RoCE). AWS EFA devices offer no RC QPs (only UD and SRD), and
    /// there is no SRD path, so this transport does not run on EFA hardware.
    ///
    /// A device that does not exist is a typed error naming it:
    ///
    /// ```
    /// let e = tagmatch::Endpoint::builder().verbs("no_such_rdma_dev").build();
    /// assert!(matches!(e, Err(tagmatch::Error::Verbs { .. })));
    /// ```
    #[cfg(feature = "verbs")]
    pub fn verbs(self, name: &str) -> Self {
        self.transport(Transport::Verbs(name.to_owned()))
    }

    /// Every verbs device setting at once (its `device` is replaced by the transport's).
    #[cfg(feature = "verbs")]
    pub fn verbs_config(mut self, cfg: tagmatch_transport::verbs::RdmConfig) -> Self {
        self.verbs = Some(cfg);
        self
    }

    /// Largest message sent with the medium protocol (larger ones use long-CTS or
    /// long-read). Default 64 KiB.
    pub fn max_medium_size(mut self, bytes: u64) -> Self {
        self.cfg.max_medium_size = bytes;
        self
    }

    /// Smallest message sent with long-read when both sides can RDMA-read. Default 1 MiB.
    pub fn min_read_msg_size(mut self, bytes: u64) -> Self {
        self.cfg.min_read_msg_size = bytes;
        self
    }

    /// Smallest emulated write sent with long-read write. Default 64 KiB.
    pub fn min_read_write_size(mut self, bytes: u64) -> Self {
        self.cfg.min_read_write_size = bytes;
        self
    }

    /// Memory budget for unexpected and out-of-order messages (bytes, messages): beyond it
    /// messages are refused and counted, never buffered without bound.
    pub fn memory_budget(mut self, bytes: usize, messages: usize) -> Self {
        self.cfg.max_unexpected_bytes = bytes;
        self.cfg.max_unexpected_msgs = messages;
        self
    }

    /// Path MTU of the UDP transport (576..=9000, default 1500).
    pub fn path_mtu(mut self, mtu: usize) -> Self {
        self.udp_mtu = Some(mtu);
        self
    }

    /// Every RDM endpoint setting at once (thresholds, features, windows).
    pub fn rdm_config(mut self, cfg: Config) -> Self {
        self.cfg = cfg;
        self
    }

    /// Every UDP device setting at once (its `bind` is replaced by the transport's).
    pub fn udp_config(mut self, cfg: UdpConfig) -> Self {
        self.udp = Some(cfg);
        self
    }

    /// How long [`Endpoint::wait`] waits before [`Error::Timeout`]. Default 30 s.
    pub fn wait_limit(mut self, limit: Duration) -> Self {
        self.wait_limit = limit;
        self
    }

    /// The in-process fast path (mem transport only; default on): tagged and untagged
    /// messages between two endpoints of the same [`MemFabric`] that both have it skip the
    /// EFA protocol — no packet, no region, no allocation for payloads up to 32 bytes —
    /// and go through a per-pair lock-free lane into the receiver's matching engine, with
    /// the same matching rules, ordering, probes, cancel, truncation, CQ data, delivery
    /// complete and memory budget. RMA and atomics keep the protocol path. A fabric's
    /// faults ([`MemFabric::with_faults`]) apply to the packet path only: the fast path
    /// is in order and lossless. A send to an endpoint that has been dropped completes
    /// with `OpError::SendFailed`. Lanes (32 KiB each) live only while both ends do: the
    /// messages a dropped sender sent (also those still queued at it for ring space) are
    /// still received, then its lane is released; the lanes to a dropped receiver are
    /// released by the sender's next `progress`, so endpoints that come and go leave no
    /// lane behind (`Stats::fast_lanes_in` / `fast_lanes_out`); what stays per peer that
    /// ever was is small (its peer entry in the protocol endpoint, its address slot in
    /// the fabric). Off: every message
    /// takes the EFA protocol over the in-memory device (as between processes).
    ///
    /// ```
    /// use tagmatch::{Endpoint, MemFabric};
    /// let f = MemFabric::new();
    /// assert!(Endpoint::builder().mem(&f).build().unwrap().fast_path());
    /// assert!(!Endpoint::builder().mem(&f).fast_path(false).build().unwrap().fast_path());
    /// ```
    pub fn fast_path(mut self, on: bool) -> Self {
        self.fast_path = on;
        self
    }

    fn check(&self) -> Result<(), Error> {
        let cfg = &self.cfg;
        if cfg.max_medium_size > cfg.max_rdma_size {
            return Err(Error::Config {
                setting: "max_medium_size",
                reason: format!(
                    "{} is larger than max_rdma_size {}",
                    cfg.max_medium_size, cfg.max_rdma_size
                ),
            });
        }
        if cfg.max_unexpected_msgs == 0 {
            return Err(Error::Config {
                setting: "memory_budget",
                reason: "0 messages: nothing unexpected could ever be received".into(),
            });
        }
        if let Some(m) = self.udp_mtu {
            if !(MIN_PATH_MTU..=MAX_PATH_MTU).contains(&m) {
                return Err(Error::Config {
                    setting: "path_mtu",
                    reason: format!("{m} is outside {MIN_PATH_MTU}..={MAX_PATH_MTU}"),
                });
            }
        }
        if self.wait_limit.is_zero() {
            return Err(Error::Config {
                setting: "wait_limit",
                reason: "zero".into(),
            });
        }
        Ok(())
    }

    /// Creates the endpoint (binds the socket for UDP).
    pub fn build(self) -> Result<Endpoint, Error> {
        self.check()?;
        let transport = self.transport.clone().ok_or(Error::NoTransport)?;
        let mut hub = None;
        let dev = match transport {
            Transport::Mem(f) => {
                if self.fast_path {
                    hub = Some((f.hub.clone(), !f.faulty));
                }
                Device::Mem(f.net.device())
            }
            Transport::Udp(bind) => {
                if bind.ip().is_unspecified() {
                    return Err(Error::Config {
                        setting: "udp bind address",
                        reason: format!("{bind}: bind a concrete IP, it is the printed address"),
                    });
                }
                let mut ucfg = self.udp.unwrap_or_else(|| UdpConfig::new(bind));
                ucfg.bind = bind;
                if let Some(m) = self.udp_mtu {
                    ucfg.path_mtu = m;
                }
                Device::Udp(Box::new(
                    UdpDevice::bind(ucfg).map_err(Error::io("udp bind"))?,
                ))
            }
            #[cfg(feature = "verbs")]
            Transport::Verbs(device) => {
                use tagmatch_transport::verbs::VerbsRdmDevice;
                let mut vcfg = self.verbs.clone().unwrap_or_default();
                vcfg.device = (!device.is_empty()).then(|| device.clone());
                let dev = VerbsRdmDevice::open(vcfg).map_err(|e| Error::Verbs {
                    device: device.clone(),
                    reason: e.to_string(),
                })?;
                // efa-rdm-protocol-v4 §2.1: the device has no RDMA, so the endpoint must
                // not advertise it (peers then never ask for it, and this side uses the
                // emulated subprotocols).
                let mut cfg = self.cfg;
                cfg.features.rdma_read = false;
                cfg.features.rdma_write = false;
                cfg.features.runt = false;
                cfg.direct_read = false;
                cfg.direct_write = false;
                return Ok(Endpoint::from_parts(
                    cfg,
                    Device::Verbs(Box::new(dev)),
                    self.wait_limit,
                    None,
                ));
            }
        };
        Ok(Endpoint::from_parts(self.cfg, dev, self.wait_limit, hub))
    }
}

//! A deterministic in-memory fabric for endpoints: seeded reordering of every device event
//! (packet deliveries, send completions, RDMA completions, registrations), fault injection
//! (partial sends, RDMA failures, registration failures), and a wire log in which every
//! emitted packet is re-parsed with `tagmatch-wire`.
//!
//! ```
//! use tagmatch_rdm::testing::Fabric;
//! use tagmatch_rdm::{Config, SendOpts};
//! let mut fab = Fabric::new(7);
//! let a = fab.add(Config::default());
//! let b = fab.add(Config::default());
//! let b_from_a = fab.connect(a, b);
//! fab.ep(b).recv(None, 16).unwrap();
//! fab.ep(a).send(b_from_a, b"hi".to_vec(), SendOpts::default()).unwrap();
//! fab.drive();
//! assert_eq!(fab.completions(b)[0].data[..2], b"hi"[..]);
//! ```

use std::collections::VecDeque;

use tagmatch_wire::efa::{flags, Packet, PacketType, RawAddr, Repr};

use crate::{
    Completion, Config, Endpoint, MemHandle, MrKey, PeerId, RdmaToken, SendOutcome, SendToken,
    Transmit,
};

/// xorshift64* — tiny, seeded, good enough for schedules.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator from `seed` (0 is remapped).
    pub fn new(seed: u64) -> Self {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `permille`/1000.
    pub fn chance(&mut self, permille: u32) -> bool {
        permille > 0 && self.below(1000) < permille as u64
    }
}

/// Fault rates, in permille.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// A send is refused with [`SendOutcome::Again`] (a partial send).
    pub send_again: u32,
    /// An RDMA read fails.
    pub rdma_read_fail: u32,
    /// An RDMA write fails.
    pub rdma_write_fail: u32,
    /// A registration fails.
    pub register_fail: u32,
    /// A HANDSHAKE send fails with [`SendOutcome::Error`] (and is not delivered).
    pub handshake_error: u32,
    /// Every registration on these nodes fails.
    pub register_fail_nodes: &'static [usize],
    /// Every RDMA read issued by these nodes fails.
    pub rdma_read_fail_nodes: &'static [usize],
}

/// One packet put on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireRecord {
    /// Sending node.
    pub from: usize,
    /// Receiving node.
    pub to: usize,
    /// Packet type.
    pub pkt_type: PacketType,
    /// Wire flags.
    pub flags: u16,
    /// Packet length.
    pub len: usize,
    /// The packet, when [`Fabric::record_bytes`] is set.
    pub bytes: Vec<u8>,
}

/// One registration or deregistration a node asked of its device, in emission order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MrRecord {
    /// [`Transmit::Register`].
    Register {
        /// The node.
        node: usize,
        /// The region.
        mem: MemHandle,
        /// Its length.
        len: u64,
        /// Packets in [`Fabric::log`] when it was asked for.
        after_packets: usize,
    },
    /// [`Transmit::Deregister`].
    Deregister {
        /// The node.
        node: usize,
        /// The key released.
        key: u64,
        /// Packets in [`Fabric::log`] when it was asked for.
        after_packets: usize,
    },
}

#[derive(Debug)]
enum Event {
    Deliver {
        from: usize,
        to: usize,
        bytes: Vec<u8>,
    },
    SendDone {
        node: usize,
        token: SendToken,
        outcome: SendOutcome,
    },
    Rdma {
        node: usize,
        token: RdmaToken,
        read: bool,
        peer: usize,
        local: MemHandle,
        offset: u64,
        addr: u64,
        key: u64,
        len: u64,
    },
    Register {
        node: usize,
        mem: MemHandle,
        len: u64,
    },
}

/// A node: an endpoint and the completions it produced.
#[derive(Debug)]
pub struct Node {
    /// The endpoint.
    pub ep: Endpoint,
    /// Completions not yet taken by [`Fabric::completions`].
    pub completions: Vec<Completion>,
}

/// The in-memory fabric.
#[derive(Debug)]
pub struct Fabric {
    /// The nodes, by index.
    pub nodes: Vec<Node>,
    rng: XorShift,
    /// Pick the next device event at random (otherwise FIFO).
    pub reorder: bool,
    /// Fault rates.
    pub faults: Faults,
    events: VecDeque<Event>,
    /// Every packet put on the wire, in emission order.
    pub log: Vec<WireRecord>,
    /// Emitted packets that failed the re-parse checks, with the reason.
    pub wire_errors: Vec<String>,
    next_key: u64,
    /// Device events processed so far.
    pub steps: u64,
    /// Keep each packet's bytes in the [`WireRecord`]s.
    pub record_bytes: bool,
    /// Keep a [`WireRecord`] per packet (turn off for long soaks).
    pub record_log: bool,
    /// Every registration and deregistration asked for, in emission order (kept with
    /// [`Fabric::record_log`]).
    pub mr_log: Vec<MrRecord>,
    /// Packets a receiver refused ([`crate::Rx::Refused`], receiver not ready), redelivered
    /// at the next [`Fabric::drive`] (as an EFA device retries after RNR).
    parked: Vec<Event>,
    /// Packets refused so far.
    pub refused: u64,
}

impl Fabric {
    /// An empty fabric, reordering with `seed`, no faults.
    pub fn new(seed: u64) -> Self {
        Fabric {
            nodes: Vec::new(),
            rng: XorShift::new(seed),
            reorder: true,
            faults: Faults::default(),
            events: VecDeque::new(),
            log: Vec::new(),
            wire_errors: Vec::new(),
            next_key: 1,
            steps: 0,
            record_bytes: false,
            record_log: true,
            mr_log: Vec::new(),
            parked: Vec::new(),
            refused: 0,
        }
    }

    /// The fabric's random generator (for test workloads).
    pub fn rng(&mut self) -> &mut XorShift {
        &mut self.rng
    }

    /// Adds an endpoint with a fresh address (random connid) and returns its node index.
    pub fn add(&mut self, cfg: Config) -> usize {
        let n = self.nodes.len();
        let mut gid = [0u8; 16];
        gid[0] = 0xfe;
        gid[1] = 0x80;
        gid[15] = n as u8;
        gid[14] = (n >> 8) as u8;
        let addr = RawAddr {
            gid,
            qpn: 1 + n as u16,
            qkey: self.rng.next_u64() as u32,
            next: 0,
        };
        self.add_with_addr(cfg, addr)
    }

    /// Adds an endpoint with the given address (e.g. reusing another's GID and QPN to
    /// model a QP collision).
    pub fn add_with_addr(&mut self, cfg: Config, addr: RawAddr) -> usize {
        self.nodes.push(Node {
            ep: Endpoint::new(cfg, addr),
            completions: Vec::new(),
        });
        self.nodes.len() - 1
    }

    /// The endpoint of node `n`.
    pub fn ep(&mut self, n: usize) -> &mut Endpoint {
        &mut self.nodes[n].ep
    }

    /// Inserts `to`'s address in `from`'s address vector.
    pub fn connect(&mut self, from: usize, to: usize) -> PeerId {
        let addr = self.nodes[to].ep.addr();
        self.nodes[from].ep.add_peer(addr)
    }

    /// Takes node `n`'s completions.
    pub fn completions(&mut self, n: usize) -> Vec<Completion> {
        std::mem::take(&mut self.nodes[n].completions)
    }

    /// Every packet as `(from, type)`, in emission order.
    pub fn sequence(&self) -> Vec<(usize, PacketType)> {
        self.log.iter().map(|r| (r.from, r.pkt_type)).collect()
    }

    /// Packet types sent from `from` to `to`, in emission order.
    pub fn types(&self, from: usize, to: usize) -> Vec<PacketType> {
        self.log
            .iter()
            .filter(|r| r.from == from && r.to == to)
            .map(|r| r.pkt_type)
            .collect()
    }

    /// Registers `bytes` on node `n` and drives until the registration completes.
    pub fn register(&mut self, n: usize, bytes: Vec<u8>) -> (MemHandle, MrKey) {
        let faults = std::mem::take(&mut self.faults);
        let h = self.nodes[n].ep.register_memory(bytes);
        self.drive();
        self.faults = faults;
        match self.nodes[n].ep.mem_key(h) {
            Some(Ok(k)) => (h, k),
            other => unreachable!("registration without faults failed: {other:?}"),
        }
    }

    fn node_of(&self, addr: &RawAddr) -> Option<usize> {
        self.nodes.iter().position(|n| {
            let a = n.ep.addr();
            a.gid == addr.gid && a.qpn == addr.qpn && a.qkey == addr.qkey
        })
    }

    fn check_packet(&mut self, from: usize, bytes: &[u8]) -> Option<(PacketType, u16)> {
        let mtu = self.nodes[from].ep.config().mtu;
        if bytes.len() > mtu {
            self.wire_errors
                .push(format!("node {from}: {} bytes > MTU {mtu}", bytes.len()));
        }
        let pkt = match Packet::new_checked(bytes) {
            Ok(p) => p,
            Err(e) => {
                self.wire_errors.push(format!("node {from}: {e}"));
                return None;
            }
        };
        let repr = Repr::parse(&pkt);
        let mut again = vec![0u8; repr.buffer_len()];
        match repr.emit(&mut again) {
            Ok(_) if again == bytes => {}
            other => self.wire_errors.push(format!(
                "node {from}: {} does not round-trip ({other:?})",
                pkt.pkt_type()
            )),
        }
        let f = pkt.flags();
        if pkt.pkt_type().is_req()
            && f & flags::REQ_OPT_RAW_ADDR_HDR != 0
            && f & flags::CONNID_HDR != 0
        {
            self.wire_errors
                .push(format!("node {from}: raw address and connid together"));
        }
        Some((pkt.pkt_type(), f))
    }

    fn pull(&mut self) -> bool {
        let mut any = false;
        for i in 0..self.nodes.len() {
            while let Some(t) = self.nodes[i].ep.poll_transmit() {
                any = true;
                self.on_transmit(i, t);
            }
            while let Some(c) = self.nodes[i].ep.poll_completion() {
                self.nodes[i].completions.push(c);
            }
        }
        any
    }

    fn on_transmit(&mut self, i: usize, t: Transmit) {
        match t {
            Transmit::Send {
                token, dest, bytes, ..
            } => {
                let Some(to) = self.node_of(&dest) else {
                    self.events.push_back(Event::SendDone {
                        node: i,
                        token,
                        outcome: SendOutcome::Error,
                    });
                    return;
                };
                if self.rng.chance(self.faults.send_again) {
                    self.events.push_back(Event::SendDone {
                        node: i,
                        token,
                        outcome: SendOutcome::Again,
                    });
                    return;
                }
                let Some((pkt_type, f)) = self.check_packet(i, &bytes) else {
                    return;
                };
                if pkt_type == PacketType::Handshake && self.rng.chance(self.faults.handshake_error)
                {
                    self.events.push_back(Event::SendDone {
                        node: i,
                        token,
                        outcome: SendOutcome::Error,
                    });
                    return;
                }
                if self.record_log {
                    self.log.push(WireRecord {
                        from: i,
                        to,
                        pkt_type,
                        flags: f,
                        len: bytes.len(),
                        bytes: if self.record_bytes {
                            bytes.clone()
                        } else {
                            Vec::new()
                        },
                    });
                }
                self.events.push_back(Event::Deliver { from: i, to, bytes });
                self.events.push_back(Event::SendDone {
                    node: i,
                    token,
                    outcome: SendOutcome::Ok,
                });
            }
            Transmit::RdmaRead {
                token,
                dest,
                local,
                offset,
                remote,
                len,
                ..
            }
            | Transmit::RdmaWrite {
                token,
                dest,
                local,
                offset,
                remote,
                len,
                ..
            } => {
                let read = matches!(t, Transmit::RdmaRead { .. });
                let peer = self.node_of(&dest).unwrap_or(usize::MAX);
                self.events.push_back(Event::Rdma {
                    node: i,
                    token,
                    read,
                    peer,
                    local,
                    offset,
                    addr: remote.addr,
                    key: remote.key,
                    len,
                });
            }
            Transmit::Register { mem, len, .. } => {
                if self.record_log {
                    self.mr_log.push(MrRecord::Register {
                        node: i,
                        mem,
                        len,
                        after_packets: self.log.len(),
                    });
                }
                self.events.push_back(Event::Register { node: i, mem, len })
            }
            Transmit::Deregister { key } => {
                if self.record_log {
                    self.mr_log.push(MrRecord::Deregister {
                        node: i,
                        key,
                        after_packets: self.log.len(),
                    });
                }
            }
        }
    }

    fn rdma(&mut self, ev: &Event) -> bool {
        let Event::Rdma {
            node,
            read,
            peer,
            local,
            offset,
            addr,
            key,
            len,
            ..
        } = *ev
        else {
            return false;
        };
        if peer >= self.nodes.len() {
            return false;
        }
        let Some((h, base)) = self.nodes[peer].ep.mem_by_key(key) else {
            return false;
        };
        let (Some(roff), Ok(len)) = (addr.checked_sub(base), usize::try_from(len)) else {
            return false;
        };
        let (roff, loff) = (roff as usize, offset as usize);
        if read {
            let Some(src) = self.nodes[peer]
                .ep
                .memory(h)
                .and_then(|m| m.get(roff..roff.checked_add(len)?))
                .map(|s| s.to_vec())
            else {
                return false;
            };
            match self.nodes[node]
                .ep
                .memory_mut(local)
                .and_then(|m| m.get_mut(loff..loff.checked_add(len)?))
            {
                Some(dst) => dst.copy_from_slice(&src),
                None => return false,
            }
        } else {
            let Some(src) = self.nodes[node]
                .ep
                .memory(local)
                .and_then(|m| m.get(loff..loff.checked_add(len)?))
                .map(|s| s.to_vec())
            else {
                return false;
            };
            match self.nodes[peer]
                .ep
                .memory_mut(h)
                .and_then(|m| m.get_mut(roff..roff.checked_add(len)?))
            {
                Some(dst) => dst.copy_from_slice(&src),
                None => return false,
            }
        }
        true
    }

    /// Runs device events until nothing is left to do. Returns the number of events.
    pub fn drive(&mut self) -> u64 {
        let start = self.steps;
        self.events.extend(self.parked.drain(..));
        loop {
            self.pull();
            if self.events.is_empty() {
                break;
            }
            let idx = if self.reorder {
                self.rng.below(self.events.len() as u64) as usize
            } else {
                0
            };
            let Some(ev) = self.events.remove(idx) else {
                break;
            };
            self.steps += 1;
            match ev {
                Event::Deliver { from, to, bytes } => {
                    let a = self.nodes[from].ep.addr();
                    let src = self.nodes[to].ep.lookup_peer(&a.gid, a.qpn);
                    if self.nodes[to].ep.handle_packet(src, &bytes) == crate::Rx::Refused {
                        self.refused += 1;
                        self.parked.push(Event::Deliver { from, to, bytes });
                    }
                }
                Event::SendDone {
                    node,
                    token,
                    outcome,
                } => self.nodes[node].ep.on_send_done(token, outcome),
                Event::Register { node, mem, len } => {
                    let result = if self.rng.chance(self.faults.register_fail)
                        || self.faults.register_fail_nodes.contains(&node)
                    {
                        Err(())
                    } else {
                        let key = self.next_key;
                        self.next_key += 1;
                        let _ = len;
                        Ok(MrKey {
                            addr: key << 32,
                            key,
                        })
                    };
                    self.nodes[node].ep.on_register_done(mem, result);
                }
                ref e @ Event::Rdma {
                    node, token, read, ..
                } => {
                    let rate = if read {
                        self.faults.rdma_read_fail
                    } else {
                        self.faults.rdma_write_fail
                    };
                    let forced = read && self.faults.rdma_read_fail_nodes.contains(&node);
                    let ok = !forced && !self.rng.chance(rate) && self.rdma(e);
                    self.nodes[node].ep.on_rdma_done(token, ok);
                }
            }
        }
        self.steps - start
    }
}

/// Two connected endpoints on a [`Fabric`]: the common case of the tests.
///
/// ```
/// use tagmatch_rdm::testing::Pair;
/// use tagmatch_rdm::{Config, SendOpts};
/// let mut p = Pair::new(Config::default(), Config::default(), 1);
/// let r = p.b().trecv(None, 5, 0, 4).unwrap();
/// let to_b = p.a_to_b;
/// p.a().tsend(to_b, 5, vec![1, 2, 3, 4], SendOpts::default()).unwrap();
/// p.drive();
/// let c = p.fab.completions(p.nb);
/// assert_eq!((c[0].op, &c[0].data[..]), (r, &[1, 2, 3, 4][..]));
/// ```
#[derive(Debug)]
pub struct Pair {
    /// The fabric.
    pub fab: Fabric,
    /// Node index of `a`.
    pub na: usize,
    /// Node index of `b`.
    pub nb: usize,
    /// `b` in `a`'s address vector.
    pub a_to_b: PeerId,
    /// `a` in `b`'s address vector.
    pub b_to_a: PeerId,
}

impl Pair {
    /// Two endpoints that know each other's address, on a fabric reordering with `seed`.
    pub fn new(a: Config, b: Config, seed: u64) -> Pair {
        let mut fab = Fabric::new(seed);
        let na = fab.add(a);
        let nb = fab.add(b);
        let a_to_b = fab.connect(na, nb);
        let b_to_a = fab.connect(nb, na);
        Pair {
            fab,
            na,
            nb,
            a_to_b,
            b_to_a,
        }
    }

    /// Endpoint `a`.
    pub fn a(&mut self) -> &mut Endpoint {
        self.fab.ep(self.na)
    }

    /// Endpoint `b`.
    pub fn b(&mut self) -> &mut Endpoint {
        self.fab.ep(self.nb)
    }

    /// Runs the fabric until nothing is left to do.
    pub fn drive(&mut self) -> u64 {
        self.fab.drive()
    }
}

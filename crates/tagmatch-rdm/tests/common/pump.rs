//! A hand-driven device for two endpoints whose packets a test may drop or duplicate
//! (the review-20 tests: `mod pump;` with `#[path = "common/pump.rs"]`).
#![allow(dead_code)]

use tagmatch_rdm::testing::Fabric;
use tagmatch_rdm::{MrKey, RdmaToken, SendOutcome, Transmit};
use tagmatch_wire::efa::{Packet, PacketType as T};

/// What [`pump`] saw besides packets.
#[derive(Debug, Default)]
pub struct Seen {
    pub rdma_reads: usize,
    pub rdma_writes: usize,
    /// `(from, type)` of every packet delivered.
    pub delivered: Vec<(usize, T)>,
    /// With [`pump_holding_rdma`]: the RDMA operations, not answered, as `(node, token)`.
    pub held: Vec<(usize, RdmaToken)>,
}

/// Decides the copies of a packet to deliver (see [`pump`]).
pub type Tap<'a> = &'a mut dyn FnMut(usize, &[u8]) -> Vec<Vec<u8>>;

/// A hand-driven device for nodes `a` and `b`: FIFO, every send succeeds, every
/// registration succeeds, RDMA operations are counted and failed. `tap(from, bytes)` gives
/// the copies of each packet to deliver (none: dropped; two: duplicated).
pub fn pump(fab: &mut Fabric, nodes: [usize; 2], tap: Tap<'_>) -> Seen {
    pump_with(fab, nodes, tap, false)
}

/// [`pump`] delivering every packet once and answering no RDMA operation: they are held
/// in [`Seen::held`] for the test to answer (or not).
pub fn pump_holding_rdma(fab: &mut Fabric, nodes: [usize; 2]) -> Seen {
    pump_with(fab, nodes, &mut |_, bytes| vec![bytes.to_vec()], true)
}

fn pump_with(fab: &mut Fabric, nodes: [usize; 2], tap: Tap<'_>, hold: bool) -> Seen {
    let mut seen = Seen::default();
    let mut key = 1000u64;
    loop {
        let mut any = false;
        for (i, &from) in nodes.iter().enumerate() {
            let to = nodes[1 - i];
            while let Some(t) = fab.ep(from).poll_transmit() {
                any = true;
                match t {
                    Transmit::Send { token, bytes, .. } => {
                        let a = fab.nodes[from].ep.addr();
                        let src = fab.nodes[to].ep.lookup_peer(&a.gid, a.qpn);
                        for copy in tap(from, &bytes) {
                            let ty = Packet::new_checked(&copy[..]).unwrap().pkt_type();
                            seen.delivered.push((from, ty));
                            fab.ep(to).handle_packet(src, &copy);
                        }
                        fab.ep(from).on_send_done(token, SendOutcome::Ok);
                    }
                    Transmit::Register { mem, .. } => {
                        key += 1;
                        fab.ep(from).on_register_done(
                            mem,
                            Ok(MrKey {
                                addr: key << 32,
                                key,
                            }),
                        );
                    }
                    Transmit::RdmaRead { token, .. } => {
                        seen.rdma_reads += 1;
                        if hold {
                            seen.held.push((from, token));
                        } else {
                            fab.ep(from).on_rdma_done(token, false);
                        }
                    }
                    Transmit::RdmaWrite { token, .. } => {
                        seen.rdma_writes += 1;
                        if hold {
                            seen.held.push((from, token));
                        } else {
                            fab.ep(from).on_rdma_done(token, false);
                        }
                    }
                    Transmit::Deregister { .. } => {}
                }
            }
            while let Some(c) = fab.ep(from).poll_completion() {
                fab.nodes[from].completions.push(c);
            }
        }
        if !any {
            return seen;
        }
    }
}

pub fn ty_of(bytes: &[u8]) -> T {
    Packet::new_checked(bytes).unwrap().pkt_type()
}

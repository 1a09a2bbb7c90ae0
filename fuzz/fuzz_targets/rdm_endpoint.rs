//! The RDM endpoint (`tagmatch-rdm`) under hostile input, coverage-guided: the input is a
//! script of application operations (tagged sends and receives of every size class, RMA
//! write and read, atomics), fabric steps, and packets handed straight to an endpoint —
//! packets recorded on the fabric with a bit flipped and/or cut short, or arbitrary bytes,
//! from a known peer or an unknown sender — so that forged packets meet endpoints in the
//! middle of every subprotocol.
//!
//! Checked: nothing panics; every packet handed in is counted exactly once
//! (`Stats::rx_packets`); the fabric's re-parse of every packet an endpoint emits finds no
//! malformed packet (`Fabric::wire_errors`: whatever an endpoint is fed, what it sends
//! stays well-formed); `Fabric::drive` ends (a livelock would be a libFuzzer timeout).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagmatch_rdm::testing::Fabric;
use tagmatch_rdm::{AtomicArgs, AtomicOp, Config, Datatype, RemoteAddr, SendOpts};

/// Small thresholds, so that short inputs reach every subprotocol (eager, medium,
/// long-CTS, long-read, runting read; eager, long-CTS and long-read writes).
fn cfg() -> Config {
    Config {
        mtu: 256,
        max_medium_size: 1024,
        min_read_msg_size: 4096,
        min_read_write_size: 2048,
        rx_window_packets: 4,
        tx_min_credits: 4,
        ..Config::default()
    }
}

struct Script<'a>(&'a [u8]);

impl Script<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u16(&mut self) -> u16 {
        let lo = self.byte().unwrap_or(0);
        let hi = self.byte().unwrap_or(0);
        u16::from_le_bytes([lo, hi])
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        b
    }
}

/// At most this many packets are kept for replay (the oldest are dropped).
const LOG: usize = 512;

fuzz_target!(|data: &[u8]| {
    let mut s = Script(data);
    let seed = s.byte().unwrap_or(0);
    let mut fab = Fabric::new(u64::from(seed));
    fab.reorder = seed & 1 == 1;
    fab.record_bytes = true;
    let a = fab.add(cfg());
    let b = fab.add(cfg());
    let ab = fab.connect(a, b);
    let ba = fab.connect(b, a);
    let (_, key) = fab.register(b, vec![0x5a; 8192]);
    let mut steps = 0;
    while let Some(op) = s.byte() {
        steps += 1;
        if steps > 256 {
            break;
        }
        // Which endpoint acts, for operations that have a direction.
        let (from, to, peer) = if op & 0x80 == 0 { (a, b, ab) } else { (b, a, ba) };
        match op & 0x0f {
            0 | 1 => {
                let len = usize::from(s.u16()) % 12_000;
                let opts = SendOpts {
                    cq_data: (op & 0x10 != 0).then_some(7),
                    delivery_complete: op & 0x20 != 0,
                };
                let tag = u64::from(s.byte().unwrap_or(0) % 4);
                let _ = fab.ep(from).tsend(peer, tag, vec![op; len], opts);
            }
            2 => {
                let len = usize::from(s.u16()) % 12_000;
                let tag = u64::from(s.byte().unwrap_or(0) % 4);
                let src = (op & 0x10 != 0).then_some(if to == b { ba } else { ab });
                let ignore = if op & 0x20 != 0 { !0 } else { 0 };
                let _ = fab.ep(to).trecv(src, tag, ignore, len);
            }
            3 => {
                // RMA against b's region (a wrong key or a range past its end sometimes).
                let len = usize::from(s.u16()) % 10_000;
                let off = u64::from(s.byte().unwrap_or(0)) * 64;
                let bad_key = op & 0x10 != 0;
                let remote = RemoteAddr {
                    addr: key.addr + off,
                    key: if bad_key { key.key ^ 1 } else { key.key },
                };
                if op & 0x20 != 0 {
                    let _ = fab.ep(a).read(ab, len.max(1), remote);
                } else {
                    let opts = SendOpts {
                        cq_data: (op & 0x40 != 0).then_some(9),
                        delivery_complete: false,
                    };
                    let _ = fab.ep(a).write(ab, vec![op; len], remote, opts);
                }
            }
            4 => {
                let remote = RemoteAddr {
                    addr: key.addr + u64::from(s.byte().unwrap_or(0) % 16) * 8,
                    key: key.key,
                };
                let args = AtomicArgs {
                    op: if op & 0x10 != 0 { AtomicOp::Cswap } else { AtomicOp::Sum },
                    datatype: Datatype::U64,
                    operand: vec![1, 0, 0, 0, 0, 0, 0, 0],
                    compare: (op & 0x10 != 0).then(|| vec![0x5a; 8]),
                };
                let _ = if op & 0x10 != 0 {
                    fab.ep(a).atomic_compare(ab, args, remote)
                } else if op & 0x20 != 0 {
                    fab.ep(a).atomic_fetch(ab, args, remote)
                } else {
                    fab.ep(a).atomic_write(ab, args, remote, SendOpts::default())
                };
            }
            5..=8 => {
                fab.drive();
                let _ = fab.completions(a);
                let _ = fab.completions(b);
                if fab.log.len() > LOG {
                    let cut = fab.log.len() - LOG;
                    fab.log.drain(..cut);
                }
            }
            9..=11 => {
                // A recorded packet, a bit flipped and/or cut short, to its receiver.
                if fab.log.is_empty() {
                    continue;
                }
                let i = usize::from(s.u16()) % fab.log.len();
                let rec = &fab.log[i];
                let mut p = rec.bytes.clone();
                let dest = rec.to;
                let pos = usize::from(s.u16());
                let bit = s.byte().unwrap_or(0);
                if !p.is_empty() && op & 0x10 == 0 {
                    let at = pos % p.len();
                    p[at] ^= 1 << (bit % 8);
                }
                if !p.is_empty() && op & 0x20 != 0 {
                    p.truncate(pos % p.len());
                }
                let src = if dest == b { ba } else { ab };
                hand_in(&mut fab, dest, (op & 0x40 == 0).then_some(src), &p);
            }
            _ => {
                // Arbitrary bytes.
                let n = usize::from(s.byte().unwrap_or(0));
                let p = s.bytes(n).to_vec();
                let src = (op & 0x40 == 0).then_some(if to == b { ba } else { ab });
                hand_in(&mut fab, to, src, &p);
            }
        }
    }
    fab.drive();
    assert!(fab.wire_errors.is_empty(), "{:?}", fab.wire_errors);
});

/// Hands packet `p` to endpoint `n` as if from `src`: it is counted exactly once.
fn hand_in(fab: &mut Fabric, n: usize, src: Option<tagmatch_rdm::PeerId>, p: &[u8]) {
    let before = fab.nodes[n].ep.stats().rx_packets;
    let _ = fab.ep(n).handle_packet(src, p);
    assert_eq!(fab.nodes[n].ep.stats().rx_packets, before + 1);
}

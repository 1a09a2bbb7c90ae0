//! A fault shim at the socket layer: drops, duplicates and reorders outgoing datagrams,
//! deterministically under a seed. Used by the loss tests; off unless configured.

use std::collections::VecDeque;

use crate::rng::XorShift;

/// Fault rates of the shim, in permille of outgoing datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShimConfig {
    /// Seed of the fault schedule.
    pub seed: u64,
    /// Datagrams dropped.
    pub drop: u32,
    /// Datagrams sent twice.
    pub duplicate: u32,
    /// Datagrams held back and sent after the next batch (reordered).
    pub reorder: u32,
}

/// What the shim did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShimStats {
    /// Datagrams dropped.
    pub dropped: u64,
    /// Datagrams duplicated.
    pub duplicated: u64,
    /// Datagrams held back.
    pub reordered: u64,
}

/// The shim state, over queued datagrams of type `T` (the device queues datagrams and
/// references to frames it builds when it sends them).
#[derive(Debug)]
pub struct Shim<T> {
    cfg: ShimConfig,
    rng: XorShift,
    held: Vec<T>,
    /// Counters.
    pub stats: ShimStats,
}

impl<T: Clone> Shim<T> {
    /// A shim with these rates.
    pub fn new(cfg: ShimConfig) -> Shim<T> {
        Shim {
            cfg,
            rng: XorShift::new(cfg.seed),
            held: Vec::new(),
            stats: ShimStats::default(),
        }
    }

    /// Releases the datagrams held back by earlier calls at the end of `txq`, then passes
    /// `d` through the faults into `txq` (or holds it back).
    pub fn push(&mut self, d: T, txq: &mut VecDeque<T>) {
        if self.rng.chance(self.cfg.drop) {
            self.stats.dropped += 1;
            return;
        }
        if self.rng.chance(self.cfg.duplicate) {
            self.stats.duplicated += 1;
            txq.push_back(d.clone());
        }
        if self.rng.chance(self.cfg.reorder) {
            self.stats.reordered += 1;
            self.held.push(d);
            return;
        }
        txq.push_back(d);
    }

    /// Moves the held-back datagrams to the end of `txq` (after whatever was queued since).
    pub fn release(&mut self, txq: &mut VecDeque<T>) {
        txq.extend(self.held.drain(..));
    }

    /// Datagrams held back.
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

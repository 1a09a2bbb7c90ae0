//! A connection's send window: unacknowledged frames by sequence number.
//!
//! Frames enter in sequence order (`fill_windows` numbers them consecutively) and mostly
//! leave from the front (cumulative ACKs), some from the middle (selective ACKs). A ring
//! of slots indexed by `seq − base` does each of these in a few instructions, where the
//! `BTreeMap` it replaces walked and rebalanced nodes and moved each ~100-byte frame into
//! and out of them (about a thousand instructions per frame in an 8-byte ping-pong).

use std::collections::VecDeque;

/// Values by `u64` key, for keys that arrive (mostly) in increasing order and stay within
/// a bounded span: `slots[i]` holds key `base + i`; the first slot is always occupied
/// (empty slots at the front are dropped at once), so the span is that of the live keys.
#[derive(Debug)]
pub(super) struct SeqWindow<T> {
    base: u64,
    slots: VecDeque<Option<T>>,
    len: usize,
}

impl<T> Default for SeqWindow<T> {
    fn default() -> Self {
        SeqWindow {
            base: 0,
            slots: VecDeque::new(),
            len: 0,
        }
    }
}

impl<T> SeqWindow<T> {
    /// How many values it holds.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The smallest key held.
    #[cfg(test)]
    fn first_key(&self) -> Option<u64> {
        (self.len > 0).then_some(self.base)
    }

    fn index(&self, seq: u64) -> Option<usize> {
        let i = seq.checked_sub(self.base)?;
        usize::try_from(i).ok().filter(|&i| i < self.slots.len())
    }

    /// Inserts `v` at `seq`, returning the value it replaces. Cheapest for a key beyond
    /// the last one (the usual case); a key before the first one shifts the ring.
    #[inline]
    pub(super) fn insert(&mut self, seq: u64, v: T) -> Option<T> {
        if self.slots.is_empty() {
            self.base = seq;
        }
        if seq == self.base + self.slots.len() as u64 {
            // The next key: the value is moved into the ring once.
            self.slots.push_back(Some(v));
            self.len += 1;
            return None;
        }
        self.insert_other(seq, v)
    }

    /// [`SeqWindow::insert`] of a key other than the next one.
    #[inline(never)]
    fn insert_other(&mut self, seq: u64, v: T) -> Option<T> {
        if seq < self.base {
            for _ in seq..self.base {
                self.slots.push_front(None);
            }
            self.base = seq;
        }
        let i = (seq - self.base) as usize;
        while self.slots.len() <= i {
            self.slots.push_back(None);
        }
        let old = self.slots[i].replace(v);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// The value at `seq`.
    #[inline]
    pub(super) fn get(&self, seq: &u64) -> Option<&T> {
        let i = self.index(*seq)?;
        self.slots[i].as_ref()
    }

    /// The value at `seq`, mutably.
    #[inline]
    pub(super) fn get_mut(&mut self, seq: &u64) -> Option<&mut T> {
        let i = self.index(*seq)?;
        self.slots[i].as_mut()
    }

    /// Removes the value at `seq`.
    pub(super) fn remove(&mut self, seq: &u64) -> Option<T> {
        let i = self.index(*seq)?;
        let v = self.slots[i].take()?;
        self.len -= 1;
        if i == 0 {
            self.trim();
        }
        Some(v)
    }

    /// Removes and returns the first value if its key is at most `upto`.
    #[inline]
    pub(super) fn pop_first_upto(&mut self, upto: u64) -> Option<(u64, T)> {
        if self.len == 0 || self.base > upto {
            return None;
        }
        let seq = self.base;
        let v = self.slots.front_mut()?.take()?;
        self.len -= 1;
        self.trim();
        Some((seq, v))
    }

    /// Drops the empty slots at the front.
    fn trim(&mut self) {
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.base += 1;
        }
    }

    /// How many keys from the first one held to `seq` (0 when empty): the ring's size
    /// if `seq` were inserted, less one.
    #[inline]
    pub(super) fn span_to(&self, seq: u64) -> u64 {
        if self.len == 0 {
            0
        } else {
            seq.saturating_sub(self.base)
        }
    }

    /// The values in key order, with their keys.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut T)> {
        let base = self.base;
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(move |(i, v)| v.as_mut().map(|v| (base + i as u64, v)))
    }

    /// The values in key order.
    pub(super) fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().flatten()
    }

    /// The values in key order, by value.
    pub(super) fn into_values(self) -> impl Iterator<Item = T> {
        self.slots.into_iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Any sequence of inserts, removals and cumulative pops leaves the window holding
    /// what a `BTreeMap` given the same operations holds, in the same order.
    fn same_as_btreemap(ops: Vec<(u8, u16)>) -> bool {
        let mut w = SeqWindow::default();
        let mut m = BTreeMap::new();
        let mut next = 1000u64;
        for (op, x) in ops {
            let x = u64::from(x % 64);
            match op % 4 {
                // The usual insert: the next key.
                0 => {
                    if w.insert(next, next) != m.insert(next, next) {
                        return false;
                    }
                    next += 1 + x / 32;
                }
                // An insert anywhere near (before the first key too).
                1 => {
                    let k = (next + 10).saturating_sub(x);
                    if w.insert(k, k) != m.insert(k, k) {
                        return false;
                    }
                }
                2 => {
                    let k = next.saturating_sub(x);
                    if w.remove(&k) != m.remove(&k) {
                        return false;
                    }
                }
                _ => {
                    let upto = next.saturating_sub(x);
                    loop {
                        let a = w.pop_first_upto(upto);
                        let b = match m.first_key_value() {
                            Some((&k, _)) if k <= upto => m.remove(&k).map(|v| (k, v)),
                            _ => None,
                        };
                        if a != b {
                            return false;
                        }
                        if a.is_none() {
                            break;
                        }
                    }
                }
            }
            let got: Vec<(u64, u64)> = w.iter_mut().map(|(k, v)| (k, *v)).collect();
            let want: Vec<(u64, u64)> = m.iter().map(|(&k, &v)| (k, v)).collect();
            if got != want
                || w.len() != m.len()
                || w.is_empty() != m.is_empty()
                || w.first_key() != m.first_key_value().map(|(&k, _)| k)
                || w.values().copied().collect::<Vec<_>>()
                    != m.values().copied().collect::<Vec<_>>()
            {
                return false;
            }
            for k in next.saturating_sub(80)..next + 12 {
                if w.get(&k) != m.get(&k) || w.get_mut(&k).map(|v| *v) != m.get(&k).copied() {
                    return false;
                }
            }
        }
        w.into_values().collect::<Vec<_>>() == m.into_values().collect::<Vec<_>>()
    }

    quickcheck::quickcheck! {
        fn behaves_as_a_btreemap(ops: Vec<(u8, u16)>) -> bool {
            same_as_btreemap(ops)
        }
    }

    #[test]
    fn a_selective_ack_leaves_a_hole_the_cumulative_one_closes() {
        let mut w = SeqWindow::default();
        for s in 5..10u64 {
            assert_eq!(w.insert(s, s * 10), None);
        }
        assert_eq!(w.remove(&7), Some(70));
        assert_eq!(w.remove(&7), None);
        assert_eq!(w.len(), 4);
        assert_eq!(w.pop_first_upto(4), None);
        assert_eq!(w.pop_first_upto(8), Some((5, 50)));
        assert_eq!(w.pop_first_upto(8), Some((6, 60)));
        // 7 is gone: 8 is next.
        assert_eq!(w.pop_first_upto(8), Some((8, 80)));
        assert_eq!(w.pop_first_upto(8), None);
        assert_eq!(w.first_key(), Some(9));
        assert_eq!(w.remove(&9), Some(90));
        assert!(w.is_empty());
        assert_eq!(w.first_key(), None);
        // An empty window starts again at any key.
        assert_eq!(w.insert(100, 1), None);
        assert_eq!(w.get(&100), Some(&1));
        assert_eq!(w.get(&99), None);
    }
}

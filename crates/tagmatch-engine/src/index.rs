//! Intrusive hash index: an open-addressing (linear probing) table of `u32` node
//! references whose keys live in the nodes themselves.
//!
//! A bucket is 4 bytes (hashbrown needs key + value + control byte, 25 bytes for an exact
//! key), and the table is kept at most half full, so an index costs 8–16 bytes per
//! distinct key. Lookups compare keys through a caller closure (one node read per
//! occupied bucket probed, about 1.5 on average at load ≤ 1/2); the engine finds the
//! bucket of a node it already holds by reference identity, without reading any node.
//! Removal uses backward-shift deletion, so there are no tombstones and the table never
//! degrades under churn. The table only grows (doubling), so a steady state allocates
//! nothing.

/// Marks an empty bucket (node references are below 2^31 | the posted flag).
pub(crate) const EMPTY: u32 = u32::MAX;

#[derive(Debug, Default)]
pub(crate) struct Index {
    slots: Vec<u32>,
    len: usize,
}

impl Index {
    #[inline]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 4
    }

    /// Bucket of the entry whose key satisfies `eq` (`Ok`), or the empty bucket where it
    /// would be inserted (`Err`). The table must have a free bucket (see
    /// [`Index::reserve_one`]); an unallocated table answers `Err(0)`.
    #[inline]
    pub(crate) fn find(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Result<usize, usize> {
        if self.slots.is_empty() {
            return Err(0);
        }
        let mask = self.mask();
        let mut i = hash as usize & mask;
        loop {
            let v = self.slots[i];
            if v == EMPTY {
                return Err(i);
            }
            if eq(v) {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The entry whose key satisfies `eq`.
    #[inline]
    pub(crate) fn get(&self, hash: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        self.find(hash, eq).ok().map(|i| self.slots[i])
    }

    /// Bucket holding exactly the value `v` (an engine invariant: it is present).
    #[inline]
    pub(crate) fn pos_of_value(&self, hash: u64, v: u32) -> usize {
        match self.find(hash, |x| x == v) {
            Ok(i) => i,
            Err(_) => unreachable!("engine invariant: index entry {v:#x} is present"),
        }
    }

    #[inline]
    pub(crate) fn value_at(&self, pos: usize) -> u32 {
        self.slots[pos]
    }

    #[inline]
    pub(crate) fn set_at(&mut self, pos: usize, v: u32) {
        self.slots[pos] = v;
    }

    /// Inserts `v` into the empty bucket `pos` returned by [`Index::find`].
    #[inline]
    pub(crate) fn insert_at(&mut self, pos: usize, v: u32) {
        debug_assert_eq!(self.slots[pos], EMPTY);
        self.slots[pos] = v;
        self.len += 1;
    }

    /// Grows (rehashing with `hash_of`) so that one more entry keeps the load ≤ 1/2.
    #[inline]
    pub(crate) fn reserve_one(&mut self, hash_of: impl FnMut(u32) -> u64) {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow((self.slots.len() * 2).max(16), hash_of);
        }
    }

    /// Pre-sizes for `n` entries.
    pub(crate) fn reserve(&mut self, n: usize, hash_of: impl FnMut(u32) -> u64) {
        let want = (n.saturating_mul(2)).next_power_of_two().max(16);
        if want > self.slots.len() {
            self.grow(want, hash_of);
        }
    }

    #[cold]
    fn grow(&mut self, new_len: usize, mut hash_of: impl FnMut(u32) -> u64) {
        let old = core::mem::replace(&mut self.slots, vec![EMPTY; new_len]);
        let mask = self.mask();
        for v in old {
            if v != EMPTY {
                let mut i = hash_of(v) as usize & mask;
                while self.slots[i] != EMPTY {
                    i = (i + 1) & mask;
                }
                self.slots[i] = v;
            }
        }
    }

    /// Removes the entry at `pos` by backward shifting the rest of its cluster.
    pub(crate) fn remove_at(&mut self, mut pos: usize, mut hash_of: impl FnMut(u32) -> u64) {
        let mask = self.mask();
        self.len -= 1;
        let mut j = pos;
        loop {
            j = (j + 1) & mask;
            let v = self.slots[j];
            if v == EMPTY {
                self.slots[pos] = EMPTY;
                return;
            }
            let home = hash_of(v) as usize & mask;
            // The entry at j may fill the hole at pos unless its home lies cyclically
            // within (pos, j].
            let stays = if pos <= j {
                pos < home && home <= j
            } else {
                pos < home || home <= j
            };
            if !stays {
                self.slots[pos] = v;
                pos = j;
            }
        }
    }

    /// Every stored value.
    pub(crate) fn values(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().copied().filter(|&v| v != EMPTY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn h(v: u32) -> u64 {
        // few distinct homes to force long clusters and wraparound
        u64::from(v % 7).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 3
    }

    #[test]
    fn insert_find_remove_against_a_hashmap() {
        let mut ix = Index::default();
        let mut model: HashMap<u32, ()> = HashMap::new();
        let mut x: u64 = 12345;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = (x % 300) as u32;
            let key = |y: u32| y == v;
            if x % 3 == 0 {
                if let Ok(pos) = ix.find(h(v), key) {
                    ix.remove_at(pos, h);
                    assert!(model.remove(&v).is_some(), "step {step}");
                } else {
                    assert!(!model.contains_key(&v));
                }
            } else {
                ix.reserve_one(h);
                match ix.find(h(v), key) {
                    Ok(_) => assert!(model.contains_key(&v)),
                    Err(pos) => {
                        ix.insert_at(pos, v);
                        assert!(model.insert(v, ()).is_none());
                    }
                }
            }
            assert_eq!(ix.len, model.len());
        }
        for v in 0..300 {
            assert_eq!(ix.get(h(v), |y| y == v).is_some(), model.contains_key(&v));
        }
        assert_eq!(ix.values().count(), model.len());
    }
}

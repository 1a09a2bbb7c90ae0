//! Intrusive hash index: an open-addressing (linear probing) table of node references
//! whose keys live in the nodes themselves.
//!
//! A bucket is 8 bytes: the low 32 bits of the key's hash and a `u32` node reference
//! (hashbrown would need key + value + control byte, 25 bytes for an exact key). The stored
//! hash bits give the home bucket, so probing, backward-shift deletion and growth never
//! read a node; a node is read only to confirm a lookup whose 32 hash bits agree. The
//! table is kept at most 3/4 full (16 bytes per key at power-of-two depths). Removal uses
//! backward-shift deletion, so there are no tombstones and the table does not degrade
//! under churn. It only grows (doubling), so a steady state allocates nothing.

const EMPTY: u64 = u64::MAX;

#[derive(Debug, Default)]
pub(crate) struct Index {
    slots: Vec<u64>,
    len: usize,
}

#[inline]
fn pack(h: u32, v: u32) -> u64 {
    (u64::from(h) << 32) | u64::from(v)
}

#[inline]
fn val(b: u64) -> u32 {
    b as u32
}

#[inline]
fn hash32(b: u64) -> u32 {
    (b >> 32) as u32
}

impl Index {
    #[inline]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// The home bucket of a 32-bit stored hash.
    #[inline(always)]
    fn home(&self, h: u32, mask: usize) -> usize {
        h as usize & mask
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 8
    }

    /// Bucket of the entry whose key satisfies `eq` (`Ok`), or the empty bucket where it
    /// would be inserted (`Err`). The table must have a free bucket (see
    /// [`Index::reserve_one`]); an unallocated table answers `Err(0)`.
    #[inline(always)]
    pub(crate) fn find(&self, hash: u64, eq: impl FnMut(u32) -> bool) -> Result<usize, usize> {
        if self.slots.is_empty() {
            return Err(0);
        }
        self.find_in(hash, eq)
    }

    /// [`Index::find`] on an allocated table.
    #[inline(always)]
    fn find_in(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Result<usize, usize> {
        let h = hash as u32;
        let mask = self.mask();
        let mut i = self.home(h, mask);
        loop {
            let b = self.slots[i];
            if b == EMPTY {
                return Err(i);
            }
            if hash32(b) == h && eq(val(b)) {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// [`Index::find`] that first grows the table if the answer is `Err` (an insertion
    /// position) and one more entry would exceed the load limit: lookups that hit never
    /// pay for the growth check.
    #[inline(always)]
    pub(crate) fn find_or_reserve(
        &mut self,
        hash: u64,
        eq: impl FnMut(u32) -> bool,
    ) -> Result<usize, usize> {
        match self.find(hash, eq) {
            Err(_) if (self.len + 1) * 4 > self.slots.len() * 3 => {
                self.reserve_one();
                // The key is absent: its place is the first empty bucket from its home.
                let mask = self.mask();
                let mut i = self.home(hash as u32, mask);
                while self.slots[i] != EMPTY {
                    i = (i + 1) & mask;
                }
                Err(i)
            }
            r => r,
        }
    }

    /// The entry whose key satisfies `eq`.
    #[inline]
    pub(crate) fn get(&self, hash: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        self.find(hash, eq).ok().map(|i| val(self.slots[i]))
    }

    /// Bucket holding exactly the value `v` (an engine invariant: it is present).
    #[inline(always)]
    pub(crate) fn pos_of_value(&self, hash: u64, v: u32) -> usize {
        // Present, so the table is allocated and the scan from its home reaches the bucket
        // that is exactly (hash, v): one compare per bucket.
        let want = pack(hash as u32, v);
        let mask = self.mask();
        let mut i = self.home(hash as u32, mask);
        for _ in 0..self.slots.len() {
            if self.slots[i] == want {
                return i;
            }
            i = (i + 1) & mask;
        }
        unreachable!("engine invariant: index entry {v:#x} is present")
    }

    #[inline]
    pub(crate) fn value_at(&self, pos: usize) -> u32 {
        val(self.slots[pos])
    }

    /// Replaces the value at `pos` (same key, so same hash).
    #[inline]
    pub(crate) fn set_at(&mut self, pos: usize, v: u32) {
        self.slots[pos] = pack(hash32(self.slots[pos]), v);
    }

    /// Inserts `v` with `hash` into the empty bucket `pos` returned by [`Index::find`].
    #[inline]
    pub(crate) fn insert_at(&mut self, pos: usize, hash: u64, v: u32) {
        debug_assert_eq!(self.slots[pos], EMPTY);
        self.slots[pos] = pack(hash as u32, v);
        self.len += 1;
    }

    /// Grows so that one more entry keeps the load ≤ 3/4.
    #[inline]
    pub(crate) fn reserve_one(&mut self) {
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow((self.slots.len() * 2).max(16));
        }
    }

    /// Pre-sizes for `n` entries.
    pub(crate) fn reserve(&mut self, n: usize) {
        let want = (n.saturating_mul(4) / 3 + 1).next_power_of_two().max(16);
        if want > self.slots.len() {
            self.grow(want);
        }
    }

    #[cold]
    fn grow(&mut self, new_len: usize) {
        let old = core::mem::replace(&mut self.slots, vec![EMPTY; new_len]);
        let mask = self.mask();
        for b in old {
            if b != EMPTY {
                let mut i = self.home(hash32(b), mask);
                while self.slots[i] != EMPTY {
                    i = (i + 1) & mask;
                }
                self.slots[i] = b;
            }
        }
    }

    /// Removes the entry at `pos` by backward shifting the rest of its cluster.
    #[inline]
    pub(crate) fn remove_at(&mut self, mut pos: usize) {
        let mask = self.mask();
        self.len -= 1;
        let mut j = pos;
        loop {
            j = (j + 1) & mask;
            let b = self.slots[j];
            if b == EMPTY {
                self.slots[pos] = EMPTY;
                return;
            }
            let home = self.home(hash32(b), mask);
            // The entry at j may fill the hole at pos unless its home lies cyclically
            // within (pos, j].
            let stays = if pos <= j {
                pos < home && home <= j
            } else {
                pos < home || home <= j
            };
            if !stays {
                self.slots[pos] = b;
                pos = j;
            }
        }
    }

    /// Every stored value.
    pub(crate) fn values(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().filter(|&&b| b != EMPTY).map(|&b| val(b))
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
                    ix.remove_at(pos);
                    assert!(model.remove(&v).is_some(), "step {step}");
                } else {
                    assert!(!model.contains_key(&v));
                }
            } else {
                ix.reserve_one();
                match ix.find(h(v), key) {
                    Ok(_) => assert!(model.contains_key(&v)),
                    Err(pos) => {
                        ix.insert_at(pos, h(v), v);
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

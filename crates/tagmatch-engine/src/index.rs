//! Intrusive hash index: an open-addressing (linear probing) table of node references
//! whose keys live in the nodes themselves.
//!
//! A bucket is 4 bytes (hashbrown would need key + value + control byte, 25 bytes for an
//! exact key; this index stored 32 hash bits beside the reference, 8 bytes, before):
//!
//! | bits | field |
//! |---|---|
//! | 0..23 | node reference (a slab index ≤ [`MAX_REF`]) |
//! | 23 | side flag of the caller (the engine: posted receive or unexpected message) |
//! | 24..28 | 4 bits of the key's hash above those of its home (a fingerprint) |
//! | 28..32 | distance from the key's home bucket, saturated at 15 |
//!
//! The value the caller stores is bits 0..24. An all-ones bucket is empty (its reference
//! would be 2^23 − 1 > [`MAX_REF`]).
//!
//! The distance takes the place of the 32 stored hash bits of the previous layout: a
//! lookup probing `d` buckets past its home reads a node to compare keys only when the
//! bucket's distance is `d` (its key has the same home) and its fingerprint is the
//! lookup's, so a foreign key costs a node read (a cache miss at depth) once in 16 of the
//! same-home keys it meets (without the fingerprint: +18 % wall clock on `posted-exact`
//! at depth 65,536); and backward-shift deletion knows every entry's home without
//! hashing. Only an entry 15 or more buckets from its home has its home recomputed from
//! its node's key (the caller's `rehash`; [`Index::remove_at`] stops and hands it back),
//! as does every entry when the table grows. The table is kept at most
//! 3/4 full and its size is a power of two. Removal uses backward-shift deletion, so
//! there are no tombstones and the table does not degrade under churn. It only grows
//! (doubling), so a steady state allocates nothing.

use crate::list::MAX_REF;

const EMPTY: u32 = u32::MAX;
/// Buckets of the smallest table: two, so that one key costs 8 bytes, not 64 (a queue of
/// one message or receive stays within 64 bytes of engine memory per entry).
const MIN_BUCKETS: usize = 2;
/// Bits of the caller's value (reference and side flag).
const VAL: u32 = (1 << 24) - 1;
const FP_SHIFT: u32 = 24;
const DIST_SHIFT: u32 = 28;
/// Saturated distance: "15 or more, ask the node". The crate's unit tests use 3, so
/// that the engine's tests run the saturated paths (node reads for homes) constantly.
const SAT: u32 = if cfg!(test) { 3 } else { 15 };

/// The fingerprint bits of a hash, in place: bits 32..36 (the home uses the low bits).
#[inline(always)]
fn fp(h: u64) -> u32 {
    ((h >> 32) as u32 & 0xF) << FP_SHIFT
}

/// A backward shift stopped at an entry with a saturated distance: the hole is at
/// `pos`, the entry `b` at `j`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Saturated {
    pos: usize,
    j: usize,
    b: u32,
}

impl Saturated {
    /// The value of the stopped-at entry.
    pub(crate) fn value(&self) -> u32 {
        val(self.b)
    }
}

#[derive(Debug, Default)]
pub(crate) struct Index {
    slots: Vec<u32>,
    len: usize,
}

#[inline(always)]
fn val(b: u32) -> u32 {
    b & VAL
}

#[inline(always)]
fn dist(b: u32) -> u32 {
    b >> DIST_SHIFT
}

#[inline(always)]
fn pack(v: u32, h: u64, d: usize) -> u32 {
    debug_assert!(v & !VAL == 0 && (v & ((1 << 23) - 1)) <= MAX_REF);
    v | fp(h) | ((d.min(SAT as usize) as u32) << DIST_SHIFT)
}

impl Index {
    #[inline(always)]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// The home bucket of a hash.
    #[inline(always)]
    fn home(h: u64, mask: usize) -> usize {
        h as u32 as usize & mask
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 4
    }

    /// Entries stored.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Buckets allocated (what [`Index::values`] visits).
    pub(crate) fn buckets(&self) -> usize {
        self.slots.len()
    }

    /// Bucket of the entry whose key satisfies `eq` (`Ok`), or the empty bucket where it
    /// would be inserted (`Err`). The table must have a free bucket (see
    /// [`Index::reserve_one`]); an unallocated table answers `Err(0)`.
    #[inline(always)]
    pub(crate) fn find(&self, hash: u64, eq: impl FnMut(u32) -> bool) -> Result<usize, usize> {
        self.find_value(hash, eq).map(|(i, _)| i)
    }

    /// [`Index::find`] that also gives the value of the bucket found (so the caller does
    /// not read the bucket again).
    #[inline(always)]
    pub(crate) fn find_value(
        &self,
        hash: u64,
        eq: impl FnMut(u32) -> bool,
    ) -> Result<(usize, u32), usize> {
        if self.slots.is_empty() {
            return Err(0);
        }
        self.find_in(hash, eq)
    }

    /// [`Index::find_value`] on an allocated table.
    #[inline(always)]
    fn find_in(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Result<(usize, u32), usize> {
        let mask = self.mask();
        let mut i = Self::home(hash, mask);
        // The fingerprint and distance bits of a bucket here holding a key of this home:
        // the home bucket first (most lookups end there), distance 0.
        let mut want = fp(hash);
        let b = self.slots[i];
        if b & !VAL == want {
            if eq(val(b)) {
                return Ok((i, val(b)));
            }
        } else if b == EMPTY {
            return Err(i);
        }
        loop {
            i = (i + 1) & mask;
            if want < SAT << DIST_SHIFT {
                want += 1 << DIST_SHIFT;
            }
            let b = self.slots[i];
            if b == EMPTY {
                return Err(i);
            }
            if b & !VAL == want && eq(val(b)) {
                return Ok((i, val(b)));
            }
        }
    }

    /// [`Index::find`] that first grows the table if the answer is `Err` (an insertion
    /// position) and one more entry would exceed the load limit: lookups that hit never
    /// pay for the growth check. `rehash(value)` is the hash of a stored entry's key.
    #[inline(always)]
    pub(crate) fn find_or_reserve(
        &mut self,
        hash: u64,
        eq: impl FnMut(u32) -> bool,
        rehash: impl FnMut(u32) -> u64,
    ) -> Result<usize, usize> {
        self.find_value_or_reserve(hash, eq, rehash).map(|(i, _)| i)
    }

    /// [`Index::find_or_reserve`] that also gives the value of the bucket found.
    #[inline(always)]
    pub(crate) fn find_value_or_reserve(
        &mut self,
        hash: u64,
        eq: impl FnMut(u32) -> bool,
        rehash: impl FnMut(u32) -> u64,
    ) -> Result<(usize, u32), usize> {
        match self.find_value(hash, eq) {
            Err(pos) => Err(self.reserve_at(hash, pos, rehash)),
            r => r,
        }
    }

    /// The bucket where an absent key with `hash` goes, given the empty bucket `pos`
    /// that [`Index::find_value`] answered: `pos`, unless one more entry would exceed
    /// the load limit; then the table grows first and the answer is the first empty
    /// bucket from the key's home in the grown table. Callers that probe with
    /// [`Index::find_value`] on their hot path call this only when inserting.
    #[inline(always)]
    pub(crate) fn reserve_at(
        &mut self,
        hash: u64,
        pos: usize,
        rehash: impl FnMut(u32) -> u64,
    ) -> usize {
        if (self.len + 1) * 4 <= self.slots.len() * 3 {
            return pos;
        }
        self.reserve_one(rehash);
        // The key is absent: its place is the first empty bucket from its home.
        let mask = self.mask();
        let mut i = Self::home(hash, mask);
        while self.slots[i] != EMPTY {
            i = (i + 1) & mask;
        }
        i
    }

    /// The entry whose key satisfies `eq`.
    #[inline]
    pub(crate) fn get(&self, hash: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        self.find_value(hash, eq).ok().map(|(_, v)| v)
    }

    /// Bucket holding exactly the value `v` (an engine invariant: it is present).
    #[inline(always)]
    pub(crate) fn pos_of_value(&self, hash: u64, v: u32) -> usize {
        // Present, so the table is allocated and the scan from its home reaches the bucket
        // holding v: one compare per bucket, no node read. An empty bucket never matches:
        // its reference (2^23 − 1) is no slab index.
        let mask = self.mask();
        let mut i = Self::home(hash, mask);
        for _ in 0..self.slots.len() {
            if val(self.slots[i]) == v {
                return i;
            }
            i = (i + 1) & mask;
        }
        unreachable!("engine invariant: index entry {v:#x} is present")
    }

    /// Asks the CPU to start loading the cache line of the home bucket of `hash` (a
    /// hint: the table is not read, nothing changes; on an unallocated table the
    /// address hinted at is meaningless and harmless), for a caller that will probe
    /// there after other work. `prefetch-index` wraps the instruction (`prefetcht0` on
    /// x86-64, `prfm` on aarch64, nothing elsewhere) in a safe function: this crate
    /// forbids `unsafe`.
    #[inline(always)]
    pub(crate) fn prefetch_home(&self, hash: u64) {
        prefetch_index::prefetch_index(&self.slots, Self::home(hash, self.mask()));
    }

    #[inline(always)]
    pub(crate) fn value_at(&self, pos: usize) -> u32 {
        val(self.slots[pos])
    }

    /// Replaces the value at `pos` (same key, so same home).
    #[inline]
    pub(crate) fn set_at(&mut self, pos: usize, v: u32) {
        self.slots[pos] = (self.slots[pos] & !VAL) | v;
    }

    /// Inserts `v` with `hash` into the empty bucket `pos` returned by [`Index::find`].
    #[inline]
    pub(crate) fn insert_at(&mut self, pos: usize, hash: u64, v: u32) {
        debug_assert_eq!(self.slots[pos], EMPTY);
        let mask = self.mask();
        let d = pos.wrapping_sub(Self::home(hash, mask)) & mask;
        self.slots[pos] = pack(v, hash, d);
        self.len += 1;
    }

    /// Grows so that one more entry keeps the load ≤ 3/4.
    #[inline]
    pub(crate) fn reserve_one(&mut self, rehash: impl FnMut(u32) -> u64) {
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow((self.slots.len() * 2).max(MIN_BUCKETS), rehash);
        }
    }

    /// Pre-sizes for `n` entries.
    pub(crate) fn reserve(&mut self, n: usize, rehash: impl FnMut(u32) -> u64) {
        let want = (n.saturating_mul(4) / 3 + 1)
            .next_power_of_two()
            .max(MIN_BUCKETS);
        if want > self.slots.len() {
            self.grow(want, rehash);
        }
    }

    /// Re-inserts every entry into a table of `new_len` buckets: each entry's home comes
    /// from `rehash` (a node read), O(entries), amortised over the insertions that fill
    /// the table.
    #[cold]
    fn grow(&mut self, new_len: usize, mut rehash: impl FnMut(u32) -> u64) {
        let old = core::mem::replace(&mut self.slots, vec![EMPTY; new_len]);
        let mask = self.mask();
        for b in old {
            if b != EMPTY {
                let v = val(b);
                let h = rehash(v);
                let mut i = Self::home(h, mask);
                let mut d = 0;
                while self.slots[i] != EMPTY {
                    i = (i + 1) & mask;
                    d += 1;
                }
                self.slots[i] = pack(v, h, d);
            }
        }
    }

    /// Removes the entry at `pos` by backward shifting the rest of its cluster. Stops at
    /// an entry whose distance is saturated: the caller then computes its home from its
    /// key and calls [`Index::resume_remove`].
    #[inline(always)]
    pub(crate) fn remove_at(&mut self, pos: usize) -> Option<Saturated> {
        self.len -= 1;
        self.shift_from(pos, pos)
    }

    /// [`Index::remove_at`] followed by the resumptions it asks for, with `rehash` giving
    /// the hash of a stored entry's key.
    #[cfg(test)]
    pub(crate) fn remove_with(&mut self, pos: usize, mut rehash: impl FnMut(u32) -> u64) {
        let mut r = self.remove_at(pos);
        while let Some(s) = r {
            let h = rehash(val(s.b));
            r = self.resume_remove(s, h);
        }
    }

    /// Continues a removal stopped at [`Saturated`] `s`, whose entry's key hashes to `h`.
    #[cold]
    #[inline(never)]
    pub(crate) fn resume_remove(&mut self, s: Saturated, h: u64) -> Option<Saturated> {
        let mask = self.mask();
        let d = s.j.wrapping_sub(Self::home(h, mask)) & mask;
        let mut pos = s.pos;
        let gap = s.j.wrapping_sub(pos) & mask;
        if d >= gap {
            self.slots[pos] = pack(val(s.b), h, d - gap);
            pos = s.j;
        }
        self.shift_from(pos, s.j)
    }

    /// The backward shift of the hole at `pos`, from the bucket after `j` on.
    #[inline(always)]
    fn shift_from(&mut self, mut pos: usize, mut j: usize) -> Option<Saturated> {
        let mask = self.mask();
        loop {
            j = (j + 1) & mask;
            let b = self.slots[j];
            if b == EMPTY {
                // `pos` is a bucket (< len): masking it is a no-op that lets the
                // optimiser drop the bounds check (the table is known non-empty here).
                self.slots[pos & mask] = EMPTY;
                return None;
            }
            let d = dist(b);
            if d == SAT {
                return Some(Saturated { pos, j, b });
            }
            // The entry at j (home j − d) may fill the hole at pos unless its home lies
            // cyclically within (pos, j], i.e. unless d < j − pos.
            let gap = j.wrapping_sub(pos) & mask;
            if d as usize >= gap {
                self.slots[pos & mask] = b - ((gap as u32) << DIST_SHIFT);
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
    use std::collections::HashSet;

    /// Few distinct homes: long clusters, wraparound, and distances past the saturation
    /// point (3 in unit tests).
    fn h(v: u32) -> u64 {
        u64::from(v % 7).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 3
    }

    fn rh(y: u32) -> u64 {
        h(y & 0x7F_FFFF)
    }

    fn check_all(ix: &Index, model: &HashSet<u32>) {
        for v in 0..300 {
            let got = ix.get(h(v), |y| y & 0x7F_FFFF == v);
            assert_eq!(got.is_some(), model.contains(&v), "{v}");
        }
        let mut vals: Vec<u32> = ix.values().map(|y| y & 0x7F_FFFF).collect();
        vals.sort_unstable();
        let mut want: Vec<u32> = model.iter().copied().collect();
        want.sort_unstable();
        assert_eq!(vals, want);
        assert_eq!(ix.len(), model.len());
        // Stored distances are exact below saturation.
        let mask = ix.mask();
        for (i, &b) in ix.slots.iter().enumerate() {
            if b != EMPTY {
                let true_d = i.wrapping_sub(Index::home(rh(b), mask)) & mask;
                assert_eq!(dist(b) as usize, true_d.min(SAT as usize));
            }
        }
    }

    #[test]
    fn insert_find_remove_against_a_set_with_colliding_hashes() {
        let mut ix = Index::default();
        let mut model: HashSet<u32> = HashSet::new();
        let mut x: u64 = 12345;
        let mut saturated = false;
        for step in 0..30_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = (x % 300) as u32;
            // Every other value is "posted" (bit 23 of the value).
            let stored = v | ((v & 1) << 23);
            let key = |y: u32| y & 0x7F_FFFF == v;
            if x % 3 == 0 {
                if let Ok(pos) = ix.find(h(v), key) {
                    assert_eq!(pos, ix.pos_of_value(h(v), stored));
                    ix.remove_with(pos, rh);
                    assert!(model.remove(&v), "step {step}");
                } else {
                    assert!(!model.contains(&v));
                }
            } else {
                match ix.find_or_reserve(h(v), key, rh) {
                    Ok(pos) => {
                        assert!(model.contains(&v));
                        assert_eq!(ix.value_at(pos), stored);
                    }
                    Err(pos) => {
                        ix.insert_at(pos, h(v), stored);
                        assert!(model.insert(v));
                    }
                }
            }
            saturated |= ix.slots.iter().any(|&b| b != EMPTY && dist(b) == SAT);
            if step % 1000 == 0 {
                check_all(&ix, &model);
            }
        }
        assert!(saturated, "the test must reach saturated distances");
        check_all(&ix, &model);
    }

    #[test]
    fn largest_reference_and_side_flag_survive_growth_and_set_at() {
        let mut ix = Index::default();
        let hh = |v: u32| u64::from(v & 0x7F_FFFF);
        for v in [MAX_REF, MAX_REF | 1 << 23, 0, 1 << 23] {
            let pos = ix.find_or_reserve(hh(v), |y| y == v, hh);
            let pos = pos.expect_err("absent");
            ix.insert_at(pos, hh(v), v);
        }
        ix.reserve(1000, hh);
        for v in [MAX_REF, MAX_REF | 1 << 23, 0, 1 << 23] {
            assert_eq!(ix.get(hh(v), |y| y == v), Some(v));
        }
        assert_eq!(ix.get(hh(5), |y| y == 5), None);
        let pos = ix.pos_of_value(hh(0), 0);
        ix.set_at(pos, 1 << 23);
        assert_eq!(ix.value_at(pos), 1 << 23);
        assert_eq!(ix.heap_bytes(), 2048 * 4);
    }
}

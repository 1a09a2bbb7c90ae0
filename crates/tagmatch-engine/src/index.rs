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
//! would be 2^23 − 1 > [`MAX_REF`]). A bucket holding [`TOMB`] (the same reference,
//! other upper bits) is a tombstone: an entry removed without the backward shift
//! ([`Index::bury_at`]), which probes pass over like any entry and no key matches.
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
//! 3/4 full (7/8 up to [`SMALL_TABLE`] buckets, see [`fits`]) and its size is a power
//! of two. Removal uses backward-shift deletion, so
//! the table does not degrade under churn (but see tombstones below). It never shrinks
//! and grows by doubling, so a steady state allocates nothing.
//!
//! Tombstones come only from [`Index::bury_at`], which the engine uses for the removals
//! that wildcard receives defer: a removal's backward shift branches on every bucket of
//! the cluster after it, and at random positions those branches are mispredicted about
//! once per removal (callgrind's branch simulation), ~5 ns each at depth 65,536, against
//! one store for a tombstone. Tombstones count toward the 3/4 load limit; reaching it
//! clears them in place, each by the backward shift it was spared, in one sequential
//! pass without allocation, when at most 5/8 of the buckets are live entries (at least
//! an eighth then comes free: amortised O(1)), and doubles the table otherwise (the
//! table is then at most twice the size of one without tombstones for the same entries,
//! while they are between 5/8 and 3/4 of its buckets). A backward shift passes over a
//! tombstone as over an entry that cannot move.

use crate::list::MAX_REF;

const EMPTY: u32 = u32::MAX;
/// A tombstone (see the module documentation): the value bits of [`EMPTY`] (reference
/// 2^23 − 1, no node: no value searched for is ever equal), fingerprint 0 and a saturated
/// distance, so that its bits above the value match a probe's only past the saturation
/// point, where [`Index::find_value`] checks for it before comparing keys.
const TOMB: u32 = (SAT << DIST_SHIFT) | VAL;
/// Buckets of the smallest table: two, so that one key costs 8 bytes, not 64 (a queue of
/// one message or receive stays within 64 bytes of engine memory per entry).
const MIN_BUCKETS: usize = 2;
/// Largest table held to 7/8 full instead of 3/4 ([`fits`]).
const SMALL_TABLE: usize = 16;

/// Whether `used` entries (tombstones included) fit a table of `buckets` buckets: at
/// most 3/4 full, or 7/8 up to [`SMALL_TABLE`] buckets (7 entries in 8 buckets, 14 in
/// 16, where 3/4 takes 16 and 32). In a table that small a probe reads at most one
/// cache line whatever its load, and the load limit decides the bytes per key of small
/// queues: `unexpected-any-source` at depths 7 and 13 held 66.3 and 65.2 bytes per
/// message after its first receive with 3/4 (issue #3: at most 64). Every table keeps
/// an empty bucket, which ends every probe.
#[inline]
fn fits(used: usize, buckets: usize) -> bool {
    used * 4 <= buckets * 3 || (buckets <= SMALL_TABLE && used * 8 <= buckets * 7)
}

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

    /// Whether the stopped-at bucket is a tombstone: it has no key (and no hash), and
    /// [`Index::resume_remove`] ignores the hash it is given.
    pub(crate) fn is_tomb(&self) -> bool {
        self.b == TOMB
    }
}

#[derive(Debug, Default)]
pub(crate) struct Index {
    slots: Vec<u32>,
    /// Entries stored (tombstones excluded). `u32`s (entries are fewer than 2^23): the
    /// index stays 32 bytes, so the engine's array of indexes is addressed by a shift.
    len: u32,
    /// Tombstones in `slots`.
    tombs: u32,
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
    pub(crate) fn home(h: u64, mask: usize) -> usize {
        h as u32 as usize & mask
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 4
    }

    /// Entries stored.
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    /// Tombstones (see [`Index::bury_at`]).
    pub(crate) fn tombs(&self) -> usize {
        self.tombs as usize
    }

    /// Buckets taken: entries and tombstones.
    #[inline(always)]
    fn used(&self) -> usize {
        self.len as usize + self.tombs as usize
    }

    /// Buckets allocated (what [`Index::values`] visits).
    pub(crate) fn buckets(&self) -> usize {
        self.slots.len()
    }

    /// The value in bucket `pos` (the value bits of an empty bucket or a tombstone,
    /// which no stored value equals), `None` past the table.
    #[inline(always)]
    pub(crate) fn get_value_at(&self, pos: usize) -> Option<u32> {
        self.slots.get(pos).map(|&b| val(b))
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
            if b & !VAL == want {
                // A tombstone's bits above the value equal `want` only at a saturated
                // distance with fingerprint 0; it names no node, so `eq` never sees it.
                if b == TOMB {
                    continue;
                }
                if eq(val(b)) {
                    return Ok((i, val(b)));
                }
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
        if (self.used() + 1) * 4 <= self.slots.len() * 3 {
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

    /// [`Index::pos_of_value`] for values at random positions (the engine's deferred
    /// removals): the first 4 buckets from the home compared without branches (selects),
    /// then, past them (rare at a load of at most 3/4), the loop. Where positions are
    /// predictable (a cancel of receives posted in order) the loop's branches are
    /// predicted and cheaper: `cancel-mix` at 4,096 ran 12.2 ns with the loop, 13.6 with
    /// this; the deferred removals of `unexpected-any-source` at 65,536 21.8-22.3 with the
    /// loop, 20.4-20.7 with this (its exit branch was mispredicted about one time in two).
    #[inline(always)]
    pub(crate) fn pos_of_value_unpredictable(&self, hash: u64, v: u32) -> usize {
        let mask = self.mask();
        let i = Self::home(hash, mask);
        if let Some(&[b0, b1, b2, b3]) = self.slots.get(i..i + 4) {
            let mut p = i + 3;
            p = if val(b2) == v { i + 2 } else { p };
            p = if val(b1) == v { i + 1 } else { p };
            p = if val(b0) == v { i } else { p };
            if p != i + 3 || val(b3) == v {
                return p;
            }
        }
        self.pos_of_value(hash, v)
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

    /// Grows (or rebuilds without tombstones) so that one more entry keeps the load,
    /// tombstones included, within [`fits`].
    #[inline]
    pub(crate) fn reserve_one(&mut self, rehash: impl FnMut(u32) -> u64) {
        if !fits(self.used() + 1, self.slots.len()) {
            // Live entries at most 5/8 of the buckets: clearing the tombstones in place
            // frees an eighth of them or more (amortised O(1)); more live entries than
            // that, doubled.
            if self.tombs > 0 && (self.len as usize + 1) * 8 <= self.slots.len() * 5 {
                self.purge_tombs(rehash);
            } else {
                self.grow((self.slots.len() * 2).max(MIN_BUCKETS), rehash);
            }
        }
    }

    /// Clears every tombstone in place: each is removed as an entry would be, by the
    /// backward shift of the cluster after it (other tombstones stay put meanwhile, as
    /// entries that cannot move). One pass in bucket order, sequential memory, no
    /// allocation; the shifts ask `rehash` only for entries at the saturated distance.
    #[cold]
    #[inline(never)]
    fn purge_tombs(&mut self, mut rehash: impl FnMut(u32) -> u64) {
        for pos in 0..self.slots.len() {
            if self.slots[pos] != TOMB {
                continue;
            }
            // Tombstones never move, so each is met here once.
            self.tombs -= 1;
            let mut r = self.shift_from(pos, pos);
            while let Some(s) = r {
                let h = if s.is_tomb() { 0 } else { rehash(val(s.b)) };
                r = self.resume_remove(s, h);
            }
        }
        debug_assert_eq!(self.tombs, 0);
    }

    /// Pre-sizes for `n` entries: insertions up to `n` entries then neither grow nor
    /// rebuild the table. Tombstones take room too: when `n` entries and them would pass
    /// the load limit, the table is rebuilt without them (at its size if that holds `n`).
    pub(crate) fn reserve(&mut self, n: usize, rehash: impl FnMut(u32) -> u64) {
        let mut want = (n.saturating_mul(4) / 3 + 1)
            .next_power_of_two()
            .max(MIN_BUCKETS);
        if want / 2 >= MIN_BUCKETS && fits(n, want / 2) {
            want /= 2;
        }
        if want > self.slots.len() {
            self.grow(want, rehash);
        } else if self.tombs > 0 && !fits(n.saturating_add(self.tombs as usize), self.slots.len()) {
            self.purge_tombs(rehash);
        }
    }

    /// Re-inserts every entry into a table of `new_len` buckets (tombstones dropped):
    /// each entry's home comes from `rehash` (a node read), O(entries), amortised over
    /// the insertions that fill the table.
    #[cold]
    fn grow(&mut self, new_len: usize, mut rehash: impl FnMut(u32) -> u64) {
        let old = core::mem::replace(&mut self.slots, vec![EMPTY; new_len]);
        self.tombs = 0;
        let mask = self.mask();
        for b in old {
            if b != EMPTY && b != TOMB {
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

    /// Removes the entry at `pos` by leaving a tombstone there (see the module
    /// documentation): one store, no shift.
    #[inline(always)]
    pub(crate) fn bury_at(&mut self, pos: usize) {
        debug_assert!(self.slots[pos] != EMPTY && self.slots[pos] != TOMB);
        self.slots[pos] = TOMB;
        self.len -= 1;
        self.tombs += 1;
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
            let h = if s.is_tomb() { 0 } else { rehash(val(s.b)) };
            r = self.resume_remove(s, h);
        }
    }

    /// Continues a removal stopped at [`Saturated`] `s`, whose entry's key hashes to `h`.
    #[cold]
    #[inline(never)]
    pub(crate) fn resume_remove(&mut self, s: Saturated, h: u64) -> Option<Saturated> {
        if s.is_tomb() {
            // Stays, as an entry that cannot move: it has no home and never fills the
            // hole, which goes on from there.
            return self.shift_from(s.pos, s.j);
        }
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
                // (A tombstone too: [`Index::resume_remove`] passes over it.)
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

    /// Removes every entry whose value `keep` refuses, in one sequential pass over the
    /// buckets: each becomes a tombstone, then the tombstones are cleared in place
    /// ([`Index::purge_tombs`], `rehash` asked only for kept entries at the saturated
    /// distance); when no entry is kept the buckets are simply emptied. The table keeps
    /// its size (no allocation).
    pub(crate) fn retain(
        &mut self,
        mut keep: impl FnMut(u32) -> bool,
        rehash: impl FnMut(u32) -> u64,
    ) {
        for b in self.slots.iter_mut() {
            if *b != EMPTY && *b != TOMB && !keep(val(*b)) {
                *b = TOMB;
                self.len -= 1;
                self.tombs += 1;
            }
        }
        if self.len == 0 {
            self.slots.fill(EMPTY);
            self.tombs = 0;
        } else if self.tombs > 0 {
            self.purge_tombs(rehash);
        }
    }

    /// Removes every entry (the table keeps its size): one fill of the buckets.
    pub(crate) fn clear(&mut self) {
        self.slots.fill(EMPTY);
        self.len = 0;
        self.tombs = 0;
    }

    /// Every stored value.
    pub(crate) fn values(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots
            .iter()
            .filter(|&&b| b != EMPTY && b != TOMB)
            .map(|&b| val(b))
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

    /// The key comparison of value `v`, which a tombstone must never reach.
    fn key(v: u32) -> impl FnMut(u32) -> bool {
        move |y: u32| {
            assert_ne!(y, VAL, "a tombstone reached a key comparison");
            y & 0x7F_FFFF == v
        }
    }

    fn check_all(ix: &Index, model: &HashSet<u32>) {
        for v in 0..300 {
            let got = ix.get(h(v), key(v));
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
        let tombs = ix.slots.iter().filter(|&&b| b == TOMB).count();
        assert_eq!(tombs, ix.tombs as usize);
        assert!(fits(ix.len() + tombs, ix.buckets()));
        for (i, &b) in ix.slots.iter().enumerate() {
            if b != EMPTY && b != TOMB {
                let true_d = i.wrapping_sub(Index::home(rh(b), mask)) & mask;
                assert_eq!(dist(b) as usize, true_d.min(SAT as usize));
            }
        }
    }

    #[test]
    fn insert_find_remove_against_a_set_with_colliding_hashes() {
        walk(false);
    }

    /// The same walk with every other removal a tombstone ([`Index::bury_at`]): probes
    /// and shifts pass over them, no key comparison sees one, rebuilds drop them.
    #[test]
    fn tombstones_among_colliding_hashes() {
        let (tombs, rebuilds) = walk(true);
        assert!(tombs > 1000 && rebuilds > 0, "{tombs} {rebuilds}");
    }

    /// A random walk of insertions, look-ups and removals over 300 values with 7
    /// distinct homes, checked against a set; `bury`: every other removal leaves a
    /// tombstone. Returns the tombstones left and the rebuilds that dropped some.
    fn walk(bury: bool) -> (usize, usize) {
        let (mut tombs, mut rebuilds, mut removed) = (0, 0, 0);
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
            // The operation from other bits than the value's (`x % 3` would remove only
            // multiples of 3 and insert only the others).
            if (x >> 32) % 3 == 0 {
                if let Ok(pos) = ix.find(h(v), key(v)) {
                    assert_eq!(pos, ix.pos_of_value(h(v), stored));
                    assert_eq!(pos, ix.pos_of_value_unpredictable(h(v), stored));
                    if bury && (x >> 11) & 1 == 0 {
                        ix.bury_at(pos);
                        tombs += 1;
                    } else {
                        ix.remove_with(pos, rh);
                        removed += 1;
                    }
                    assert!(model.remove(&v), "step {step}");
                } else {
                    assert!(!model.contains(&v));
                }
            } else {
                let before = ix.tombs;
                let r = ix.find_or_reserve(h(v), key(v), rh);
                if ix.tombs < before {
                    assert_eq!(ix.tombs, 0, "a rebuild drops every tombstone");
                    rebuilds += 1;
                }
                match r {
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
        assert!(removed > 1000, "the walk must remove: {removed}");
        check_all(&ix, &model);
        (tombs, rebuilds)
    }

    /// A well-spread hash for the tombstone tests.
    fn hh(v: u32) -> u64 {
        u64::from(v).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    /// Inserts absent value `v` (hash [`hh`]).
    fn put(ix: &mut Index, v: u32) {
        let pos = ix.find_or_reserve(hh(v), key(v), hh).expect_err("absent");
        ix.insert_at(pos, hh(v), v);
    }

    /// A table holding the values `0..n`.
    fn filled(n: u32) -> Index {
        let mut ix = Index::default();
        for v in 0..n {
            put(&mut ix, v);
        }
        ix
    }

    /// A table whose load is mostly tombstones is rebuilt at its size, not doubled; one
    /// whose live entries exceed 5/8 of the buckets doubles.
    #[test]
    fn tombstones_rebuild_in_place_unless_live_entries_pass_five_eighths() {
        let mut ix = filled(96);
        assert_eq!(ix.buckets(), 128);
        for v in 0..80 {
            let pos = ix.find(hh(v), key(v)).expect("present");
            ix.bury_at(pos);
        }
        assert_eq!((ix.len(), ix.tombs), (16, 80));
        // 16 live + 80 tombstones = 96 = 3/4 of 128: the next insertion rebuilds.
        put(&mut ix, 1000);
        assert_eq!((ix.buckets(), ix.len(), ix.tombs), (128, 17, 0));
        for v in (80..96).chain([1000]) {
            assert!(ix.get(hh(v), key(v)).is_some(), "{v}");
        }
        for v in 2000..2030 {
            put(&mut ix, v);
        }
        for v in 2000..2020 {
            let pos = ix.find(hh(v), key(v)).expect("present");
            ix.bury_at(pos);
        }
        // 27 live, 20 tombstones: filled to the limit, 76 live (≤ 80 = 5/8 of 128):
        // rebuilt in place; then to the limit again, 96 live: doubled.
        let mut v = 3000;
        while ix.tombs > 0 {
            put(&mut ix, v);
            v += 1;
        }
        assert_eq!((ix.buckets(), ix.len()), (128, 77), "rebuilt in place");
        while ix.buckets() == 128 {
            put(&mut ix, v);
            v += 1;
        }
        assert_eq!((ix.buckets(), ix.len()), (256, 97), "doubled at the limit");
        for v in 3000..v {
            assert!(ix.get(hh(v), key(v)).is_some(), "{v}");
        }
        assert_eq!(ix.values().count(), ix.len());
    }

    /// `reserve(n)` on a table large enough for `n` entries but whose tombstones would
    /// take their room rebuilds it without them, at its size: the insertions up to `n`
    /// then neither rebuild nor double. With room for both, the tombstones stay.
    #[test]
    fn reserve_drops_tombstones_that_would_take_the_reserved_room() {
        let mut ix = filled(96);
        for v in 0..10 {
            let pos = ix.find(hh(v), key(v)).expect("present");
            ix.bury_at(pos);
        }
        ix.reserve(80, hh);
        assert_eq!((ix.buckets(), ix.len(), ix.tombs), (128, 86, 10));
        ix.reserve(90, hh);
        assert_eq!((ix.buckets(), ix.len(), ix.tombs), (128, 86, 0));
        for v in 1000..1004 {
            put(&mut ix, v);
        }
        assert_eq!((ix.buckets(), ix.len()), (128, 90));
        for v in (10..96).chain(1000..1004) {
            assert!(ix.get(hh(v), key(v)).is_some(), "{v}");
        }
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

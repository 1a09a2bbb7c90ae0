//! Dense list heads: per-communicator arrays indexed by a small key (a source rank or a
//! tag), for the (comm, src) and (comm, tag) list kinds.
//!
//! matching-notes §1.3 (ob1): "per-communicator, per-peer" queues, found by indexing an
//! array with the source rank. MPI ranks are dense small integers (below the
//! communicator's size), and most programs use small tags, so the head of the list of key
//! `x < DENSE_KEYS` of communicator `c` is one array element: a lookup is two dependent
//! loads, and an insertion or removal one store, instead of hashing and probing a shared
//! hash index whose removals shift its clusters (see `index`). Keys from `DENSE_KEYS` on
//! stay in the hash index: which of the two holds a key depends on the key only, so no
//! entry ever moves between them.
//!
//! A communicator's array is allocated the first time one of its lists is stored here and
//! grows (doubling, at least 64 slots) to cover larger keys, but only while that keeps
//! it within 4 slots per list it holds (plus 64): a key past the array's end that would
//! make it larger goes to the hash index. So the arrays hold at most ~32 bytes per list
//! they have held at once (4-8 for dense ranks or tags), whatever the keys: tags used as
//! growing sequence numbers, or a few large ranks, stay in the hash index. The array
//! covering a key (`key < len`) is the one place that key's list head can be: when an
//! array grows, the engine moves the lists of the newly covered keys out of the hash
//! index (see `Engine::dense_grow`). The communicator is found by indexing a directory
//! with its id when below `DIR_COMMS` (MPI context ids are small), else through a hash
//! map.
//!
//! A position (`pos`) names one slot across the arrays: `DPOS | table << 16 | key`; the
//! `DPOS` bit tells it from a bucket number of the hash index.

use crate::hash::{map_heap_bytes, FastMap};

/// Keys below this are kept in the arrays.
pub(crate) const DENSE_KEYS: u64 = 1 << KEY_BITS;
const KEY_BITS: u32 = 16;

/// Communicator ids below this are found through the directory (4 bytes each).
const DIR_COMMS: u32 = 1 << 12;

/// The flag of a position in the arrays (never set in a hash bucket number).
pub(crate) const DPOS: usize = 1 << 62;

/// An empty slot (no list). Values are slab references below 2^24.
pub(crate) const EMPTY: u32 = u32::MAX;

/// Smallest array length.
const MIN_LEN: usize = 64;

/// One communicator's array.
#[derive(Debug, Default)]
struct Table {
    heads: Vec<u32>,
}

#[derive(Debug, Default)]
pub(crate) struct Dense {
    /// Table number + 1 of communicator `c < DIR_COMMS`, 0 when it has none.
    dir: Vec<u32>,
    /// Table number of the other communicators.
    sparse: FastMap<u32, u32>,
    /// One array of heads per communicator.
    tables: Vec<Table>,
}

impl Dense {
    /// The table of communicator `comm`.
    #[inline(always)]
    fn table_of(&self, comm: u32) -> Option<usize> {
        if comm < DIR_COMMS {
            match self.dir.get(comm as usize) {
                Some(&t) if t != 0 => Some(t as usize - 1),
                _ => None,
            }
        } else {
            self.sparse_table(comm)
        }
    }

    /// [`Dense::table_of`] of a communicator id from `DIR_COMMS` on (out of line: the
    /// directory's lookups stay small where they are inlined).
    #[inline(never)]
    fn sparse_table(&self, comm: u32) -> Option<usize> {
        self.sparse.get(&comm).map(|&t| t as usize)
    }

    /// Position of the slot of `(comm, x)` if an array covers it (the slot may be
    /// empty); `None` when the key's list head, if any, is in the hash index.
    #[inline(always)]
    pub(crate) fn covers(&self, comm: u32, x: u64) -> Option<usize> {
        let t = self.table_of(comm)?;
        (x < self.tables[t].heads.len() as u64).then(|| pos(t, x))
    }

    /// The value of `(comm, x)` (`EMPTY` if none) if an array covers it; `None` when
    /// the key's list head, if any, is in the hash index.
    #[inline(always)]
    pub(crate) fn get(&self, comm: u32, x: u64) -> Option<u32> {
        let t = self.table_of(comm)?;
        self.tables[t].heads.get(x as usize).copied()
    }

    /// The slot of `(comm, x)` if an array covers it.
    #[inline(always)]
    pub(crate) fn slot_mut(&mut self, comm: u32, x: u64) -> Option<&mut u32> {
        let t = self.table_of(comm)?;
        self.tables[t].heads.get_mut(x as usize)
    }

    /// Appends to the list of `(comm, x)` if an array covers it: the slot's value before
    /// (`EMPTY` when there was no list: the slot is then set to `v`, the new list's
    /// head); `None` when the key is not covered.
    #[inline(always)]
    pub(crate) fn push(&mut self, comm: u32, x: u64, v: u32) -> Option<u32> {
        let t = self.table_of(comm)?;
        let s = self.tables[t].heads.get_mut(x as usize)?;
        let old = *s;
        if old == EMPTY {
            *s = v;
        }
        Some(old)
    }

    /// [`Dense::push`] at a position given by [`Dense::grow`].
    #[inline]
    pub(crate) fn push_at(&mut self, pos: usize, v: u32) -> u32 {
        let s = self.at_mut(pos);
        let old = *s;
        if old == EMPTY {
            *s = v;
        }
        old
    }

    /// Allocates or grows the array of `comm` to cover key `x` (not covered yet) if the
    /// growth rule allows it (see the module documentation): the slot's position and the
    /// range of keys newly covered, else `None`.
    #[cold]
    #[inline(never)]
    pub(crate) fn grow(&mut self, comm: u32, x: u64) -> Option<(usize, core::ops::Range<u64>)> {
        let want = (x as usize + 1).next_power_of_two().max(MIN_LEN);
        let t = self.table_of(comm);
        // Counted here rather than kept: growth visits the array anyway.
        let live = t.map_or(0, |t| {
            self.tables[t].heads.iter().filter(|&&v| v != EMPTY).count()
        });
        if x >= DENSE_KEYS || want > 4 * live + MIN_LEN {
            return None;
        }
        let t = match t {
            Some(t) => t,
            None => {
                let t = self.tables.len();
                self.tables.push(Table::default());
                if comm < DIR_COMMS {
                    let c = comm as usize;
                    if self.dir.len() <= c {
                        self.dir.resize((c + 1).next_power_of_two().max(16), 0);
                    }
                    self.dir[c] = t as u32 + 1;
                } else {
                    self.sparse.insert(comm, t as u32);
                }
                t
            }
        };
        let heads = &mut self.tables[t].heads;
        let old = heads.len() as u64;
        heads.resize(want, EMPTY);
        Some((pos(t, x), old..want as u64))
    }

    /// The value at a position given by [`Dense::covers`] or [`Dense::grow`] (`EMPTY`
    /// if none).
    #[inline(always)]
    pub(crate) fn value_at(&self, pos: usize) -> u32 {
        let (t, x) = split(pos);
        self.tables[t].heads[x]
    }

    /// The slot at a position given by [`Dense::covers`] or [`Dense::grow`]: a list head
    /// (or `EMPTY`, to empty it).
    #[inline(always)]
    pub(crate) fn at_mut(&mut self, pos: usize) -> &mut u32 {
        let (t, x) = split(pos);
        &mut self.tables[t].heads[x]
    }

    /// Non-empty slots.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let n = |t: &Table| t.heads.iter().filter(|&&v| v != EMPTY).count();
        self.tables.iter().map(n).sum()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.dir.capacity() * 4
            + map_heap_bytes(&self.sparse)
            + self.tables.capacity() * core::mem::size_of::<Table>()
            + self
                .tables
                .iter()
                .map(|t| t.heads.capacity() * 4)
                .sum::<usize>()
    }
}

#[inline(always)]
fn pos(t: usize, x: u64) -> usize {
    DPOS | (t << KEY_BITS) | x as usize
}

#[inline(always)]
fn split(pos: usize) -> (usize, usize) {
    ((pos & !DPOS) >> KEY_BITS, pos & ((1 << KEY_BITS) - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value at `(comm, x)`, stored through `covers`, else `grow`.
    fn put(d: &mut Dense, comm: u32, x: u64, v: u32) -> bool {
        let p = match d.covers(comm, x) {
            Some(p) => p,
            None => match d.grow(comm, x) {
                Some((p, r)) => {
                    assert!(r.contains(&x));
                    p
                }
                None => return false,
            },
        };
        assert_ne!(p & DPOS, 0);
        assert_eq!(d.push_at(p, v), EMPTY);
        true
    }

    fn get(d: &Dense, comm: u32, x: u64) -> Option<u32> {
        let v = d.value_at(d.covers(comm, x)?);
        assert_eq!(d.get(comm, x), Some(v));
        (v != EMPTY).then_some(v)
    }

    #[test]
    fn arrays_of_directory_and_sparse_communicators_are_distinct_and_grow_in_proportion() {
        let mut d = Dense::default();
        let keys = [(0u32, 0u64), (0, 63), (1, 5), (DIR_COMMS, 0), (u32::MAX, 7)];
        for (i, &(c, x)) in keys.iter().enumerate() {
            assert_eq!(get(&d, c, x), None);
            assert!(put(&mut d, c, x, i as u32), "{c} {x}");
            assert_eq!(d.len(), i + 1);
        }
        // Communicator 0 holds 2 lists: 128 slots would pass 4 · 2 + 64.
        assert_eq!(d.covers(0, 64), None);
        assert!(!put(&mut d, 0, 64, 9));
        // With 16 more lists (4 · 18 + 64 = 136), 100 is covered: the array doubles.
        for x in 1..=16 {
            assert!(put(&mut d, 0, x, 1000 + x as u32));
        }
        assert!(put(&mut d, 0, 100, 100));
        assert!(d.covers(0, 127).is_some() && d.covers(0, 128).is_none());
        // Growth kept every earlier value.
        for (j, &(c, x)) in keys.iter().enumerate() {
            assert_eq!(get(&d, c, x), Some(j as u32), "{c} {x}");
        }
        assert_eq!(get(&d, 0, 100), Some(100));
        assert_eq!(d.grow(5, DENSE_KEYS), None);
        // A push to a list keeps its head; emptied slots are forgotten.
        let n = d.len();
        assert_eq!(d.push(0, 100, 99), Some(100));
        assert_eq!(get(&d, 0, 100), Some(100));
        assert_eq!(d.len(), n);
        let p = d.covers(0, 100).unwrap();
        *d.at_mut(p) = EMPTY;
        assert_eq!(get(&d, 0, 100), None);
        assert_eq!(d.len(), n - 1);
        assert_eq!(d.push(0, 100, 7), Some(EMPTY));
        assert_eq!(get(&d, 0, 100), Some(7));
        assert_eq!(d.push(0, 128, 7), None);
        assert_eq!(d.get(0, 128), None);
        // Keys past an array's end and unknown communicators are not covered.
        assert_eq!(d.covers(1, 64), None);
        assert_eq!(d.covers(2, 0), None);
        assert_eq!(d.covers(DIR_COMMS + 1, 0), None);
    }

    /// Growing in proportion to the lists held: 65,536 consecutive keys fit (each grows
    /// the array at most to twice what the lists held justify), one array of 2^16 slots.
    #[test]
    fn consecutive_keys_fill_an_array_of_their_count() {
        let mut d = Dense::default();
        for x in 0..DENSE_KEYS {
            assert!(put(&mut d, 3, x, x as u32), "{x}");
        }
        assert_eq!(d.len(), DENSE_KEYS as usize);
        assert!(d.heap_bytes() < 4 * DENSE_KEYS as usize + 1024);
        assert_eq!(d.grow(3, DENSE_KEYS), None);
    }
}

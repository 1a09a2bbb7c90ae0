//! Dense list heads: per-communicator arrays indexed by a small key (a source rank or a
//! tag), for the (comm, src) and (comm, tag) list kinds.
//!
//! matching-notes §1.3 (ob1): "**Per (comm, peer)** `mca_pml_ob1_comm_proc_t`:
//! `specific_receives`, `unexpected_frags`" — ob1 finds a peer's lists by indexing a
//! per-communicator array with the source rank. MPI ranks are dense small integers (below
//! the communicator's size), and most programs use small tags, so here the head of the
//! (comm, src) or (comm, tag) list of key `x` is, when an array covers `x`, one array
//! element: a lookup is two dependent loads, an insertion or removal one store, instead
//! of hashing and probing a shared hash index whose removals shift its clusters (see
//! `index`). Keys from `DENSE_KEYS` on always stay in the hash index.
//!
//! A communicator's array is allocated the first time one of its lists is stored here and
//! grows (doubling, at least 64 slots) to cover larger keys, but only to at most 4 slots
//! per list it holds at that time, plus 64: a key past the array's end that would make it
//! larger goes to the hash index. So an array takes at most 16 bytes per list it held
//! when it last grew, plus 256 (4-8 bytes per list for dense ranks or tags), whatever
//! the keys: tags used as growing sequence numbers, or a few large ranks, stay in the
//! hash index. An array does not shrink while it holds lists, but the arrays that hold
//! none are freed when the arrays' slots have doubled since the last such sweep (see
//! [`Dense::sweep`]): so the arrays' total stays within twice what the arrays holding
//! lists took at the last sweep (plus `SWEEP_MIN` slots), not one array per
//! communicator ever seen (communicator ids that come and go, each past peak of a
//! communicator used in turn). The array covering a key
//! (`key < len`) is the one place that key's list head can be: when an array grows, the
//! engine moves the lists of the newly covered keys out of the hash index (see
//! `Engine::dense_grow`). Each array counts its lists (kept exact through [`Slot`]), so
//! refusing a growth costs no scan. A communicator below `DIR_COMMS` (MPI context ids are
//! small) finds its array at its id in a directory; the others through a hash map.
//!
//! A position (`pos`) names one slot across the arrays: `DPOS | table << 16 | key`; the
//! `DPOS` bit tells it from a bucket number of the hash index.

use crate::hash::{map_heap_bytes, FastMap};

// Positions (`DPOS`, `FAR`) use the upper bits of a `usize`: the crate needs 64-bit
// pointers (every RDMA and MPI target this serves has them); say so rather than misbuild.
#[cfg(not(target_pointer_width = "64"))]
compile_error!(
    "tagmatch-engine needs a 64-bit target: dense-array positions use usize bits 40 and 62"
);

/// Keys below this are kept in the arrays.
pub(crate) const DENSE_KEYS: u64 = 1 << KEY_BITS;
const KEY_BITS: u32 = 16;

/// Communicator ids below this index the directory of arrays (32 bytes each).
const DIR_COMMS: u32 = 1 << 12;

/// The flag of a position in the arrays (never set in a hash bucket number).
pub(crate) const DPOS: usize = 1 << 62;

/// An empty slot (no list). Values are slab references below 2^24.
pub(crate) const EMPTY: u32 = u32::MAX;

/// Smallest array length.
const MIN_LEN: usize = 64;

/// Total slots of the arrays below which empty arrays are not swept (64 KiB).
const SWEEP_MIN: usize = 1 << 14;

/// The flag of the number of a far communicator's array (in `Dense::far`); in a
/// position, shifted by `KEY_BITS` (below `DPOS`).
const FAR: usize = 1 << 40;

/// One communicator's array of list heads.
#[derive(Debug, Default)]
struct Arr {
    heads: Vec<u32>,
    /// Non-empty slots (what the growth rule weighs).
    live: usize,
}

/// A slot of an array, with its array's count of non-empty slots.
pub(crate) struct Slot<'a> {
    v: &'a mut u32,
    live: &'a mut usize,
}

impl Slot<'_> {
    /// The value (`EMPTY` if no list).
    #[inline(always)]
    pub(crate) fn get(&self) -> u32 {
        *self.v
    }

    /// Sets the value (a list head).
    #[inline(always)]
    pub(crate) fn set(&mut self, v: u32) {
        debug_assert!(v != EMPTY);
        *self.live += usize::from(*self.v == EMPTY);
        *self.v = v;
    }

    /// Empties the non-empty slot.
    #[inline(always)]
    pub(crate) fn clear(&mut self) {
        debug_assert!(*self.v != EMPTY);
        *self.live -= 1;
        *self.v = EMPTY;
    }

    /// Appends to the slot's list: the value before (`EMPTY`: the slot was empty and is
    /// now `v`, the new list's head).
    #[inline(always)]
    fn push(mut self, v: u32) -> u32 {
        let old = self.get();
        if old == EMPTY {
            self.set(v);
        }
        old
    }
}

#[derive(Debug, Default)]
pub(crate) struct Dense {
    /// The array of communicator `c < DIR_COMMS`, at `near[c]` (empty: none).
    near: Vec<Arr>,
    /// The number in `far` of the array of each other communicator.
    sparse: FastMap<u32, u32>,
    far: Vec<Arr>,
    /// The communicator of each array of `far`.
    far_comm: Vec<u32>,
    /// Slots of all the arrays.
    slots: usize,
    /// The total of slots past which the next allocation or growth first frees the
    /// arrays that hold no list ([`Dense::sweep`]).
    sweep_at: usize,
}

impl Dense {
    /// The array of communicator `comm` and its number (`comm` itself, or `FAR` | its
    /// number in `far`).
    #[inline(always)]
    fn array(&self, comm: u32) -> Option<(usize, &Arr)> {
        if comm < DIR_COMMS {
            self.near.get(comm as usize).map(|a| (comm as usize, a))
        } else {
            self.far_array(comm)
        }
    }

    /// [`Dense::array`] of a communicator id from `DIR_COMMS` on (out of line: the
    /// directory's lookups stay small where they are inlined).
    #[inline(never)]
    fn far_array(&self, comm: u32) -> Option<(usize, &Arr)> {
        let t = *self.sparse.get(&comm)? as usize;
        Some((FAR | t, &self.far[t]))
    }

    /// The array of communicator `comm`, mutably.
    #[inline(always)]
    fn array_mut(&mut self, comm: u32) -> Option<&mut Arr> {
        if comm < DIR_COMMS {
            self.near.get_mut(comm as usize)
        } else {
            self.far_array_mut(comm)
        }
    }

    #[inline(never)]
    fn far_array_mut(&mut self, comm: u32) -> Option<&mut Arr> {
        let t = *self.sparse.get(&comm)? as usize;
        Some(&mut self.far[t])
    }

    /// The array numbered `t` (see [`Dense::array`]).
    #[inline(always)]
    fn numbered_mut(&mut self, t: usize) -> &mut Arr {
        if t & FAR == 0 {
            &mut self.near[t]
        } else {
            &mut self.far[t & !FAR]
        }
    }

    /// Position of the slot of `(comm, x)` if an array covers it (the slot may be
    /// empty); `None` when the key's list head, if any, is in the hash index.
    #[inline(always)]
    pub(crate) fn covers(&self, comm: u32, x: u64) -> Option<usize> {
        let (t, a) = self.array(comm)?;
        (x < a.heads.len() as u64).then(|| pos(t, x))
    }

    /// The value of `(comm, x)` (`EMPTY` if none) if an array covers it; `None` when
    /// the key's list head, if any, is in the hash index.
    #[inline(always)]
    pub(crate) fn get(&self, comm: u32, x: u64) -> Option<u32> {
        self.array(comm)?.1.heads.get(x as usize).copied()
    }

    /// The slot of `(comm, x)` if an array covers it.
    #[inline(always)]
    pub(crate) fn slot_mut(&mut self, comm: u32, x: u64) -> Option<Slot<'_>> {
        let a = self.array_mut(comm)?;
        let v = a.heads.get_mut(x as usize)?;
        Some(Slot {
            v,
            live: &mut a.live,
        })
    }

    /// The array of `comm` (its slots and its count of non-empty slots), if it has one:
    /// for a caller that visits many keys of one communicator (see [`Slot`] for the
    /// count's rule: a slot set from `EMPTY` counts one more).
    #[inline(always)]
    pub(crate) fn heads_mut(&mut self, comm: u32) -> Option<(&mut [u32], &mut usize)> {
        let a = self.array_mut(comm)?;
        Some((&mut a.heads, &mut a.live))
    }

    /// Appends to the list of `(comm, x)` if an array covers it: the slot's value before
    /// (`EMPTY` when there was no list: the slot is then set to `v`, the new list's
    /// head); `None` when the key is not covered.
    #[inline(always)]
    pub(crate) fn push(&mut self, comm: u32, x: u64, v: u32) -> Option<u32> {
        Some(self.slot_mut(comm, x)?.push(v))
    }

    /// [`Dense::push`] at a position given by [`Dense::grow`].
    #[inline]
    pub(crate) fn push_at(&mut self, pos: usize, v: u32) -> u32 {
        self.at_mut(pos).push(v)
    }

    /// Allocates or grows the array of `comm` to cover key `x` (not covered yet) if the
    /// growth rule allows it (see the module documentation): the slot's position and the
    /// range of keys newly covered, else `None`.
    #[cold]
    #[inline(never)]
    pub(crate) fn grow(&mut self, comm: u32, x: u64) -> Option<(usize, core::ops::Range<u64>)> {
        let want = (x as usize + 1).next_power_of_two().max(MIN_LEN);
        let (live, len) = self
            .array(comm)
            .map_or((0, 0), |(_, a)| (a.live, a.heads.len()));
        if x >= DENSE_KEYS || want > 4 * live + MIN_LEN {
            return None;
        }
        // `x` is not covered (`x >= len`), so `want > len`.
        if self.slots + (want - len) > self.sweep_at {
            self.sweep();
            self.sweep_at = (2 * (self.slots + want)).max(SWEEP_MIN);
        }
        let t = match self.array(comm) {
            Some((t, _)) => t,
            None if comm < DIR_COMMS => {
                let c = comm as usize;
                self.near
                    .resize_with((c + 1).next_power_of_two(), Arr::default);
                c
            }
            None => {
                let t = self.far.len();
                self.far.push(Arr::default());
                self.far_comm.push(comm);
                self.sparse.insert(comm, t as u32);
                FAR | t
            }
        };
        let a = &mut self.numbered_mut(t).heads;
        let old = a.len();
        a.resize(want, EMPTY);
        self.slots += want - old;
        Some((pos(t, x), old as u64..want as u64))
    }

    /// Frees the arrays that hold no list (a directory entry is emptied, a far array
    /// dropped and the others renumbered): their keys are then not covered, which is
    /// right since no list of theirs exists in either place. Positions given before are
    /// invalid after it (it runs only inside [`Dense::grow`], which gives a new one).
    /// O(arrays), amortised over the slots allocated since the last sweep.
    #[cold]
    #[inline(never)]
    fn sweep(&mut self) {
        for a in &mut self.near {
            if a.live == 0 && a.heads.capacity() != 0 {
                self.slots -= a.heads.len();
                a.heads = Vec::new();
            }
        }
        let mut sparse = FastMap::default();
        let mut j = 0;
        for i in 0..self.far.len() {
            if self.far[i].live == 0 {
                self.slots -= self.far[i].heads.len();
                continue;
            }
            self.far.swap(i, j);
            self.far_comm.swap(i, j);
            sparse.insert(self.far_comm[j], j as u32);
            j += 1;
        }
        self.far.truncate(j);
        self.far_comm.truncate(j);
        self.far.shrink_to(2 * j);
        self.far_comm.shrink_to(2 * j);
        self.sparse = sparse;
    }

    /// The value at a position given by [`Dense::covers`] or [`Dense::grow`] (`EMPTY`
    /// if none).
    #[inline(always)]
    pub(crate) fn value_at(&self, pos: usize) -> u32 {
        let (t, x) = split(pos);
        if t & FAR == 0 {
            self.near[t].heads[x]
        } else {
            self.far[t & !FAR].heads[x]
        }
    }

    /// The slot at a position given by [`Dense::covers`] or [`Dense::grow`]: a list head
    /// (or `EMPTY`, to empty it).
    #[inline(always)]
    pub(crate) fn at_mut(&mut self, pos: usize) -> Slot<'_> {
        let (t, x) = split(pos);
        let a = self.numbered_mut(t);
        Slot {
            v: &mut a.heads[x],
            live: &mut a.live,
        }
    }

    /// Non-empty slots.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let n = |a: &Arr| {
            let n = a.heads.iter().filter(|&&v| v != EMPTY).count();
            assert_eq!(n, a.live, "the count of non-empty slots is exact");
            n
        };
        self.near.iter().chain(&self.far).map(n).sum()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        let v = core::mem::size_of::<Arr>();
        (self.near.capacity() + self.far.capacity()) * v
            + self.far_comm.capacity() * 4
            + map_heap_bytes(&self.sparse)
            + self
                .near
                .iter()
                .chain(&self.far)
                .map(|a| a.heads.capacity() * 4)
                .sum::<usize>()
    }
}

/// Position of key `x` in array number `t`.
#[inline(always)]
fn pos(t: usize, x: u64) -> usize {
    DPOS | (t << KEY_BITS) | x as usize
}

/// Array number and key of a position.
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
        d.at_mut(p).clear();
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

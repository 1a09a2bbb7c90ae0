//! Dense list heads: per-communicator arrays indexed by a small key (a source rank or a
//! tag), for the (comm, src) and (comm, tag) list kinds, and per-(comm, src) arrays
//! indexed by the tag for the (comm, src, tag) kind (see the last section).
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
//! A communicator's array is allocated when one of its lists would be stored here and
//! the arrays can pay for it, and grows (doubling, at least 16 slots) to cover larger
//! keys, under two rules. (1) At most 4 slots per list it holds at that time or its kind's
//! hash index holds (those lists may be the keys past its end, left there while rule (2)
//! refused a growth: they count toward the next one; but only up to the growths refused
//! since the last one they allowed, so that a list cannot buy an array sized by other
//! communicators' lists, see [`Dense::grow`]), plus 64: a key past the array's end
//! that would make it larger goes to the hash index. So tags used as growing sequence
//! numbers, or a few large ranks, stay in the hash index. (2) The arrays of a kind and
//! their directory take at most `BYTES_PER_ENTRY` (8) bytes per queued entry (posted
//! receive or stored message) once allocated or grown: until then the lists stay in the
//! hash index (a few wildcard lists at a small depth cost their buckets, not a 64-slot
//! array and a directory; issue #3's 64 bytes per entry hold from depth 1), and the first
//! growth that the entries pay for takes them over. An array does not shrink while it
//! holds lists, but the arrays that hold none are freed when the arrays' slots have
//! doubled since the last such sweep (see [`Dense::refile`]): so the arrays' total stays
//! within twice what the arrays holding lists took at the last sweep (plus `SWEEP_MIN`
//! slots), not one array per communicator ever seen (communicator ids that come and go,
//! each past peak of a communicator used in turn). The array covering a key
//! (`key < len`) is the one place that key's list head can be: when an array is
//! allocated or grows, the engine moves the lists of the newly covered keys out of the
//! hash index (see `Engine::dense_grow`). Each array counts its lists (kept exact through
//! [`Slot`]), so refusing a growth costs no scan. A communicator below the directory's
//! length finds its array at its id in the directory (MPI context ids are small); the
//! others through a hash map. The directory covers communicator ids below a power of two
//! and grows (to at most `DIR_COMMS` entries, 32 bytes each) only when the arrays then
//! have at least 8 slots per entry (or to `DIR_MIN` entries), so that it takes at most as
//! much as the arrays did when it last grew; when it grows it takes over the arrays of
//! the communicators it now covers.
//!
//! A position (`pos`) names one slot across the arrays: `DPOS | table << 16 | key`; the
//! `DPOS` bit tells it from a bucket number of the hash index.
//!
//! # (comm, src, tag) lists
//!
//! The same machinery holds the heads of the (comm, src, tag) lists of small tags
//! (`Engine::dense[2]`): the array's owner is the (comm, src) pair ([`exact_owner`]:
//! the communicator in the upper 32 bits) instead of a communicator, its key the tag.
//! Why: in the hash index an exact match hashes the key, probes (the probe's branch on
//! what the buckets hold was mispredicted ~0.6 times per match under callgrind's branch
//! simulation, 92 % of the mispredictions of `posted-exact`), compares the key in the
//! node and shifts the cluster back on removal: 160–190 instructions per match of
//! `posted-exact` / `unexpected-exact` at depth 4,096–65,536 (`ir_per_op`, whole timed
//! loop), and a random index cache line per 4 matches at depth 65,536. Through an
//! array, a match is two dependent loads (directory entry, slot) and one store, with no
//! branch on the data: 101 and 117 instructions at every depth from 64 up, ~0.001
//! mispredictions per match, and consecutive tags touch consecutive slots.
//!
//! The arrays of this kind are all in the directory (`near_only`): an owner is filed
//! only if its number is below the directory's length (the sources below 4,096 of
//! communicator 0, see [`exact_owner`]: the world communicator's point-to-point context
//! id in MPICH and ob1, the `tagmatch` facade's tagged messages), and an owner past it
//! stays in the hash index, so that a key with no array costs the exact
//! paths a bounds check (~3 instructions per match of `many-peers`, whose sources have
//! no array: 4 lists each), not a map lookup. The growth and memory rules are those
//! above (8 bytes per queued entry for this kind's arrays and directory), and the
//! engine frees the hash index when a growth leaves it empty (the arrays hold every
//! (comm, src, tag) list): an array's slots then replace the index's buckets instead of
//! adding to them (`posted-exact` at depth 4,096: 44.5 bytes per receive against 48.5;
//! without the freeing the arrays pushed `unexpected-exact` at depth 13 to 64.3). Up to
//! the depth [`Engine::reserve`](crate::Engine::reserve) reserved, the lists stay in
//! the reserved index (its promise: no allocation up to that depth).
//!
//! # Transposed (comm, src, tag) arrays
//!
//! A second set (`Engine::dense[3]`, [`Dense::near_only_transposed`]) holds the heads
//! of the (comm, src, tag) lists that no array of the first covers, in an array per
//! (comm, tag) indexed by the source ([`exact_t_owner`]: communicator 0's tags below
//! 4,096). Many sources with a few tags each is what the first set cannot hold: an
//! array per source would cost 16 slots and a directory entry for a few lists, which
//! the memory rule refuses. The first set has precedence: a key it covers is never in
//! the second; when one of its arrays grows, it takes the lists of the newly covered
//! keys over from the second set as well as from the hash index, and a growth of the
//! second takes from the hash index only the keys the first does not cover. Both sets
//! share one budget (8 bytes per queued entry, [`Dense::lent`]). Their positions are
//! told apart by [`TPOS`].

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

/// Communicator ids below this may index the directory of arrays (32 bytes an entry).
const DIR_COMMS: u64 = 1 << 12;

/// Smallest directory worth its entries: communicators below it may always be filed in
/// the directory (128 bytes at most).
const DIR_MIN: usize = 4;

/// The flag of a position in the arrays (never set in a hash bucket number).
pub(crate) const DPOS: usize = 1 << 62;

/// The flag of a position in the transposed (comm, src, tag) arrays (`Engine::dense[3]`,
/// see [`exact_t_owner`]), with `DPOS`.
pub(crate) const TPOS: usize = 1 << 61;

/// An empty slot (no list). Values are slab references below 2^24.
pub(crate) const EMPTY: u32 = u32::MAX;

/// Smallest array length.
const MIN_LEN: usize = 16;

/// Slots an array may have beyond 4 per list it holds (see the growth rule).
const SLACK: usize = 64;

/// Heap bytes the arrays and their directory may take per queued entry (posted
/// receive or stored message) when one is allocated or grows: what keeps a few
/// wildcard lists at a small depth from costing more than their entries.
const BYTES_PER_ENTRY: usize = 8;

/// Total slots of the arrays below which empty arrays are not swept (64 KiB).
const SWEEP_MIN: usize = 1 << 14;

/// The flag of the number of a far communicator's array (in `Dense::far`); in a
/// position, shifted by `KEY_BITS` (below `DPOS`).
const FAR: usize = 1 << 40;

/// Bytes of an array's entry (in the directory or `far`).
const ARR: usize = core::mem::size_of::<Arr>();

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
    pub(crate) fn push(mut self, v: u32) -> u32 {
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
    sparse: FastMap<u64, u32>,
    far: Vec<Arr>,
    /// The communicator of each array of `far`.
    far_comm: Vec<u64>,
    /// Slots of all the arrays.
    slots: usize,
    /// The total of slots past which the next allocation or growth first frees the
    /// arrays that hold no list ([`Dense::sweep`]).
    sweep_at: usize,
    /// Growths refused (pushes of small keys left in the hash index) since the last
    /// growth that counted hashed lists (see [`Dense::grow`]): the hashed lists count
    /// toward a growth only up to it, so that the slots a growth takes beyond 4 per
    /// list of its array (plus `SLACK`) were paid for by as many operations.
    deferred: usize,
    /// Arrays only in the directory (no far arrays): set for the (comm, src, tag) kind,
    /// whose owners (see [`exact_owner`]) past the directory go to the hash index, so
    /// that an uncovered exact key costs a bounds check, not a map lookup.
    near_only: bool,
    /// With `near_only`: the owners below it may be filed now (see
    /// [`Dense::may_file`]).
    file_below: u64,
    /// Bytes taken by arrays that share this one's memory budget (the other
    /// orientation of the (comm, src, tag) arrays), set by the engine before a growth:
    /// the budget is what is left of `BYTES_PER_ENTRY` per entry after them.
    pub(crate) lent: usize,
}

/// Communicators below this have (comm, src, tag) arrays: communicator 0 (see
/// [`exact_owner`]).
const EXACT_COMMS: u32 = 1 << EXACT_COMM_BITS;
const EXACT_COMM_BITS: u32 = 0;

/// Most directory entries of the (comm, src, tag) kind: sources below 4,096 of each of
/// the [`EXACT_COMMS`] communicators (the other kinds': [`DIR_COMMS`]).
const DIR_EXACT: u64 = 1 << (12 + EXACT_COMM_BITS);

/// The owner of the array of a (comm, src, tag) list (`Engine::dense[2]`): the
/// (comm, src) pair, `src << EXACT_COMM_BITS | comm` for the communicators below
/// [`EXACT_COMMS`], so that their sources below 4,096 index the directory, and `comm <<
/// 32 | src` (past every directory: hashed) for the others. Only communicator 0 (the
/// world communicator's point-to-point context id in MPICH and ob1; the `tagmatch`
/// facade's tagged messages): the directory widens only when its 32-byte entries take
/// at most what the arrays do, so interleaving more communicators leaves entries unused
/// when only one is in use (with 1 bit, communicators 0 and 1, the unit tests' 250
/// lists of sources 2 and 4 of communicator 0 left 22 hashed that communicator 0 alone
/// files in arrays).
#[inline(always)]
pub(crate) fn exact_owner(comm: u32, src: u32) -> u64 {
    if comm < EXACT_COMMS {
        (u64::from(src) << EXACT_COMM_BITS) | u64::from(comm)
    } else {
        (u64::from(comm) << 32) | u64::from(src)
    }
}

/// The owner of the transposed array (`Engine::dense[3]`) that may hold the (comm, src,
/// tag) list of `(comm, tag)`, keyed by the source rank: the tag, for the tags below
/// 4,096 of the communicators below [`EXACT_COMMS`]; `u64::MAX` (no array) for the
/// others.
///
/// bench-workloads `many-peers`: "P = N peers, 4 receives posted per peer, exact | 4·P
/// messages arrive round-robin over peers". Many sources with a few tags each is the
/// shape of halo exchanges and all-to-all phases: an array per (comm, src) would cost
/// its directory entry and its smallest array (16 slots) per source for 4 lists, which
/// the memory rule refuses, so those lists stayed in the hash index, one random cache
/// line per match at 65,536 peers (27 ns a match against 4.4 for `posted-exact`). An
/// array per (comm, tag), indexed by the source, holds them at 4 bytes a list, and the
/// round-robin arrivals walk it in order.
#[inline(always)]
pub(crate) fn exact_t_owner(comm: u32, tag: u64) -> u64 {
    if comm < EXACT_COMMS && tag < DIR_EXACT {
        tag
    } else {
        u64::MAX
    }
}

/// The (comm, src) pair of an owner made by [`exact_owner`].
#[inline]
pub(crate) fn exact_owner_parts(o: u64) -> (u32, u32) {
    if o >> 32 >= u64::from(EXACT_COMMS) {
        ((o >> 32) as u32, o as u32)
    } else {
        (
            (o & u64::from(EXACT_COMMS - 1)) as u32,
            (o >> EXACT_COMM_BITS) as u32,
        )
    }
}

impl Dense {
    /// Arrays kept in the directory only (see `Dense::near_only`).
    pub(crate) fn near_only() -> Self {
        let mut d = Dense {
            near_only: true,
            ..Dense::default()
        };
        d.set_file_below();
        d
    }

    /// [`Dense::near_only`] for the transposed (comm, src, tag) arrays: owners from
    /// [`exact_t_owner`], keys the source ranks (the engine flags their positions with
    /// `TPOS`; [`Dense::at_mut`] and [`Dense::value_at`] ignore the flag).
    pub(crate) fn near_only_transposed() -> Self {
        Dense::near_only()
    }

    /// Heap bytes of the arrays and their directory in O(1) (the slots counted at
    /// their length; what [`Dense::lent`] carries to the other orientation).
    pub(crate) fn bytes(&self) -> usize {
        4 * self.slots + self.near.capacity() * ARR + self.far_bytes()
    }

    /// The budget of a growth with `entries` queued: `BYTES_PER_ENTRY` per entry less
    /// what the arrays sharing it take ([`Dense::lent`]).
    #[inline]
    fn budget(&self, entries: usize) -> usize {
        (BYTES_PER_ENTRY * entries).saturating_sub(self.lent)
    }

    /// Whether any array is allocated (then it may hold lists), in O(1).
    pub(crate) fn lists_any(&self) -> bool {
        self.slots > 0
    }

    /// Non-empty slots of all the arrays (O(arrays): for sizing, not per operation).
    pub(crate) fn lists(&self) -> usize {
        self.near.iter().chain(&self.far).map(|a| a.live).sum()
    }

    /// The array of communicator `comm` and its number (`comm` itself, or `FAR` | its
    /// number in `far`).
    #[inline(always)]
    fn array(&self, comm: u64) -> Option<(usize, &Arr)> {
        match self.near.get(comm as usize) {
            Some(a) => Some((comm as usize, a)),
            None if self.far.is_empty() => None,
            None => self.far_array(comm),
        }
    }

    /// [`Dense::array`] of a communicator id past the directory (out of line: the
    /// directory's lookups stay small where they are inlined).
    #[inline(never)]
    fn far_array(&self, comm: u64) -> Option<(usize, &Arr)> {
        let t = *self.sparse.get(&comm)? as usize;
        Some((FAR | t, &self.far[t]))
    }

    /// The array of communicator `comm`, mutably.
    #[inline(always)]
    fn array_mut(&mut self, comm: u64) -> Option<&mut Arr> {
        if (comm as usize) < self.near.len() {
            Some(&mut self.near[comm as usize])
        } else if self.far.is_empty() {
            None
        } else {
            self.far_array_mut(comm)
        }
    }

    #[inline(never)]
    fn far_array_mut(&mut self, comm: u64) -> Option<&mut Arr> {
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
    pub(crate) fn covers(&self, comm: u64, x: u64) -> Option<usize> {
        let (t, a) = self.array(comm)?;
        (x < a.heads.len() as u64).then(|| pos(t, x))
    }

    /// The position and value (`EMPTY` if none) of `(comm, x)` if an array of the
    /// directory covers it: [`Dense::covers`] and [`Dense::value_at`] for arrays that
    /// are all in the directory (`near_only`), with no far lookup and no key check
    /// (an array is shorter than `DENSE_KEYS`).
    #[inline(always)]
    pub(crate) fn near_get(&self, comm: u64, x: u64) -> Option<(usize, u32)> {
        debug_assert!(self.near_only);
        let a = self.near.get(comm as usize)?;
        let v = *a.heads.get(x as usize)?;
        Some((pos(comm as usize, x), v))
    }

    /// [`Dense::slot_mut`] for arrays that are all in the directory (see
    /// [`Dense::near_get`]).
    #[inline(always)]
    pub(crate) fn near_slot_mut(&mut self, comm: u64, x: u64) -> Option<Slot<'_>> {
        debug_assert!(self.near_only);
        let a = self.near.get_mut(comm as usize)?;
        let v = a.heads.get_mut(x as usize)?;
        Some(Slot {
            v,
            live: &mut a.live,
        })
    }

    /// The value of `(comm, x)` (`EMPTY` if none) if an array covers it; `None` when
    /// the key's list head, if any, is in the hash index.
    #[inline(always)]
    pub(crate) fn get(&self, comm: u64, x: u64) -> Option<u32> {
        self.array(comm)?.1.heads.get(x as usize).copied()
    }

    /// The slot of `(comm, x)` if an array covers it.
    #[inline(always)]
    pub(crate) fn slot_mut(&mut self, comm: u64, x: u64) -> Option<Slot<'_>> {
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
    pub(crate) fn heads_mut(&mut self, comm: u64) -> Option<(&mut [u32], &mut usize)> {
        let a = self.array_mut(comm)?;
        Some((&mut a.heads, &mut a.live))
    }

    /// Appends to the list of `(comm, x)` if an array covers it: the slot's value before
    /// (`EMPTY` when there was no list: the slot is then set to `v`, the new list's
    /// head); `None` when the key is not covered.
    #[inline(always)]
    pub(crate) fn push(&mut self, comm: u64, x: u64, v: u32) -> Option<u32> {
        Some(self.slot_mut(comm, x)?.push(v))
    }

    /// [`Dense::push`] at a position given by [`Dense::grow`].
    #[inline]
    pub(crate) fn push_at(&mut self, pos: usize, v: u32) -> u32 {
        self.at_mut(pos).push(v)
    }

    /// Whether no growth to cover key `x` can be paid for by `entries` queued entries:
    /// the least any growth takes ([`MIN_LEN`] more slots, the directory as it is) is over
    /// the budget. Counted as a refused growth, like [`Dense::grow`]'s refusals. Checked
    /// before [`Dense::grow`] so that a small queue spread over many communicators, whose
    /// every arrival and wildcard receive on an uncovered key retries the growth, does
    /// not pay for `grow` and its cost estimate each time (~300 instructions per refused
    /// attempt, review_wild2).
    #[inline]
    pub(crate) fn refuses(&mut self, x: u64, entries: usize) -> bool {
        let least = 4 * (self.slots + MIN_LEN) + self.near.capacity() * ARR;
        let refused = x < DENSE_KEYS && least > self.budget(entries);
        if refused {
            self.deferred = self.deferred.saturating_add(1);
        }
        refused
    }

    /// Most directory entries: [`DIR_EXACT`] for the (comm, src, tag) kind (`near_only`),
    /// [`DIR_COMMS`] for the others.
    #[inline(always)]
    fn dir_cap(&self) -> u64 {
        if self.near_only {
            DIR_EXACT
        } else {
            DIR_COMMS
        }
    }

    /// For arrays kept in the directory only (`near_only`): whether owner `comm` has
    /// an array or the directory may now be widened to file one (the test of
    /// [`Dense::cost`] for the least growth, `MIN_LEN` slots, without the budget: a
    /// larger growth, which could widen it further, is then not tried). When not, a
    /// push to its keys would be refused by [`Dense::grow`]: the caller leaves the key
    /// in the hash index without calling it (its estimate, ~200 instructions, was paid
    /// by every new list of an owner past the directory: `many-peers`' 4 lists per
    /// source, 485 instructions per post at depth 65,536 before, 707 with it). Not
    /// counted as a refused growth: the lists of such owners do not pay for another
    /// owner's array.
    #[inline(always)]
    pub(crate) fn may_file(&self, comm: u64) -> bool {
        comm < self.file_below
    }

    /// Sets `file_below` from the directory and the slots (after they change): an
    /// owner below it has a directory entry, or the directory may be widened to it,
    /// `dir_len(comm) <= max((slots + SLACK) / 8, DIR_MIN)` (both powers of two
    /// bound the same owners).
    fn set_file_below(&mut self) {
        // A new owner's first array takes up to `SLACK` slots when its entries pay
        // (`Dense::grow`): bounded with `MIN_LEN`, no owner from 4 up was ever filed
        // on an engine without arrays (a job whose only sender is rank 4).
        let most = ((self.slots + SLACK) / 8).max(DIR_MIN);
        let widen = (1usize << most.ilog2()).min(self.dir_cap() as usize);
        self.file_below = self.near.len().max(widen) as u64;
    }

    /// Counts a growth that the caller refused for its own reason (as [`Dense::grow`]
    /// counts its refusals): the list it left in the hash index counts toward the next
    /// growth.
    pub(crate) fn refused(&mut self) {
        self.deferred = self.deferred.saturating_add(1);
    }

    /// Allocates or grows the array of `comm` to cover key `x` (not covered yet) if the
    /// growth rule allows it with `entries` posted receives and stored messages queued
    /// and `hashed` lists in the hash index of the same kind (see the module
    /// documentation): the slot's position and the range of keys newly
    /// covered, else `None`. Positions given before are invalid after an allocation
    /// (arrays may be refiled, see [`Dense::refile`]).
    #[cold]
    #[inline(never)]
    pub(crate) fn grow(
        &mut self,
        comm: u64,
        x: u64,
        entries: usize,
        hashed: usize,
    ) -> Option<(usize, core::ops::Range<u64>)> {
        if x >= DENSE_KEYS {
            return None;
        }
        let mut want = (x as usize + 1).next_power_of_two().max(MIN_LEN);
        let (live, len) = self
            .array(comm)
            .map_or((0, 0), |(_, a)| (a.live, a.heads.len()));
        // The hashed lists count only up to the pushes refused since the last growth
        // they allowed (`deferred`): they may be other communicators' lists or keys no
        // array takes (>= `DENSE_KEYS`), and counted alone they let one list buy an
        // array of up to 2^16 slots, taken over key by key in the hash index, and again
        // after each sweep, for ever in a steady state (review_wildmem.rs,
        // `one_list_does_not_buy_an_array_sized_by_other_hashed_lists`). So the slots a
        // growth takes beyond 4 per list of its array (plus `SLACK`) were paid for by
        // as many earlier operations; a communicator's own lists past its array's end
        // (sparse keys, or left there while the budget refused) were each pushed there
        // by such an operation, so they still count.
        let own = 4 * live + SLACK;
        if want > own + 4 * hashed.min(self.deferred) {
            self.deferred = self.deferred.saturating_add(1);
            return None;
        }
        // `x` is not covered (`x >= len`), so `want > len`.
        let budget = self.budget(entries);
        let Some(mut widen) = self.cost(comm, len, want, budget) else {
            self.deferred = self.deferred.saturating_add(1);
            return None;
        };
        if want > own {
            self.deferred = 0;
        }
        // A new array is given the most slots the growth rule allows (`SLACK`) that the
        // entries pay for: a queue that fills gets one allocation, not one per doubling.
        while len == 0 && 2 * want <= SLACK {
            match self.cost(comm, len, 2 * want, budget) {
                Some(w) => (want, widen) = (2 * want, w),
                None => break,
            }
        }
        let slots = self.slots + (want - len);
        let near = dir_len(comm, self.dir_cap());
        if slots > self.sweep_at {
            self.refile(self.near.len(), true);
            self.sweep_at = (2 * (self.slots + want)).max(SWEEP_MIN);
        }
        if widen {
            self.refile(near, false);
        }
        let t = match self.array(comm) {
            Some((t, _)) => t,
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
        self.set_file_below();
        Some((pos(t, x), old as u64..want as u64))
    }

    /// After a bulk build (a wildcard kind's lists built at its first use, see
    /// `Engine::build_unexp`, whose pushes grow the arrays a doubling at a time): each
    /// array grown during it (`grown`: the owner of each growth, as recorded by the
    /// engine, which knows when a build runs) is trimmed to its last list (not below
    /// `MIN_LEN`). That is never below its length before the build: a growth covers a
    /// key past the old end, whose list the build then holds. Arrays the build did not
    /// grow are left as they are.
    /// Freshly grown by doubling, an array sized by the build's largest key costs up
    /// to 8 bytes a key; trimmed, 4 (issue #3: `unexpected-any-source` at depth 33,000
    /// held 68.5 bytes per message after its first receive). An array only ever
    /// shrinks to at least what it was before the build, so a program that builds a
    /// kind again in every period reaches a steady size and then allocates nothing
    /// (trimming every array to its last list did not: review_wild2,
    /// `periods_of_kept_and_forgotten_kinds_reach_a_steady_heap`). The keys past the
    /// new end hold no list in either place. Positions given before are invalid
    /// after it. O(growths + slots of the grown arrays).
    #[cold]
    #[inline(never)]
    pub(crate) fn trim_grown(&mut self, mut grown: Vec<u64>) {
        grown.sort_unstable();
        grown.dedup();
        for comm in grown {
            let Some(a) = self.array_mut(comm) else {
                continue;
            };
            let end = a
                .heads
                .iter()
                .rposition(|&v| v != EMPTY)
                .map_or(0, |p| p + 1)
                .max(MIN_LEN);
            if end < a.heads.len() {
                let cut = a.heads.len() - end;
                a.heads.truncate(end);
                a.heads.shrink_to_fit();
                self.slots -= cut;
            }
        }
        self.set_file_below();
    }

    /// Whether the arrays and their directory take at most `budget` bytes once the
    /// array of `comm` (of `len` slots) has `want`: `None` if not, else whether the
    /// directory is then widened to file `comm` (it is if it then takes at most as much
    /// as the arrays, or `DIR_MIN` entries, and the budget pays for it; else a new array
    /// is filed past it).
    fn cost(&self, comm: u64, len: usize, want: usize, budget: usize) -> Option<bool> {
        let slots = self.slots + (want - len);
        let near = dir_len(comm, self.dir_cap());
        let widen = near > self.near.len() && near <= (slots / 8).max(DIR_MIN);
        let fixed = self.near.capacity() * ARR + self.far_bytes();
        if widen && 4 * slots + fixed + (near - self.near.len()) * ARR <= budget {
            return Some(true);
        }
        if self.near_only && (comm as usize) >= self.near.len() {
            return None;
        }
        let fixed = if len == 0 && (comm as usize) >= self.near.len() {
            // One more far array: its entry, its communicator and the map's growth.
            fixed + self.far_bytes() + ARR + 8 + 64
        } else {
            fixed
        };
        (4 * slots + fixed <= budget).then_some(false)
    }

    /// Bytes of the far arrays' entries, communicators and map (not their slots).
    fn far_bytes(&self) -> usize {
        self.far.capacity() * ARR + self.far_comm.capacity() * 8 + map_heap_bytes(&self.sparse)
    }

    /// Files the arrays anew: the directory widened to `near` entries (exactly), taking
    /// over the far arrays of the communicators below it; with `sweep`, the arrays that
    /// hold no list are freed (a directory entry is emptied, a far array dropped):
    /// their keys are then not covered, which is right since no list of theirs exists
    /// in either place. The far arrays are renumbered, so positions given before are
    /// invalid after it (it runs only inside [`Dense::grow`], which gives a new one).
    /// O(arrays), amortised over the slots allocated since the last sweep or the
    /// directory's doubling.
    #[cold]
    #[inline(never)]
    fn refile(&mut self, near: usize, sweep: bool) {
        if near > self.near.len() {
            self.near.reserve_exact(near - self.near.len());
            self.near.resize_with(near, Arr::default);
        }
        if sweep {
            for a in &mut self.near {
                if a.live == 0 && a.heads.capacity() != 0 {
                    self.slots -= a.heads.len();
                    a.heads = Vec::new();
                }
            }
        }
        let mut sparse = FastMap::default();
        let mut j = 0;
        for i in 0..self.far.len() {
            let c = self.far_comm[i];
            if sweep && self.far[i].live == 0 {
                self.slots -= self.far[i].heads.len();
                continue;
            }
            if (c as usize) < self.near.len() {
                self.near[c as usize] = core::mem::take(&mut self.far[i]);
                continue;
            }
            self.far.swap(i, j);
            self.far_comm.swap(i, j);
            sparse.insert(c, j as u32);
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

    /// The non-empty slots of the directory's arrays: (owner, key, value).
    #[cfg(test)]
    pub(crate) fn near_slots(&self) -> Vec<(u64, u64, u32)> {
        let mut v = Vec::new();
        for (o, a) in self.near.iter().enumerate() {
            for (x, &h) in a.heads.iter().enumerate() {
                if h != EMPTY {
                    v.push((o as u64, x as u64, h));
                }
            }
        }
        v
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

    /// Empties every slot whose value `keep` refuses (the arrays stay allocated, their
    /// counts exact): O(slots), one sequential pass.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) {
        for a in self.near.iter_mut().chain(self.far.iter_mut()) {
            if a.live == 0 {
                continue;
            }
            for v in a.heads.iter_mut() {
                if *v != EMPTY && !keep(*v) {
                    *v = EMPTY;
                    a.live -= 1;
                }
            }
        }
    }

    /// Empties every slot (the arrays stay allocated): one fill per array that holds
    /// lists.
    pub(crate) fn clear(&mut self) {
        for a in self.near.iter_mut().chain(self.far.iter_mut()) {
            if a.live != 0 {
                a.heads.fill(EMPTY);
                a.live = 0;
            }
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.near.capacity() * ARR
            + self.far_bytes()
            + self
                .near
                .iter()
                .chain(&self.far)
                .map(|a| a.heads.capacity() * 4)
                .sum::<usize>()
    }
}

/// The directory's length that files owner `comm` (0 from `cap`, the kind's most
/// directory entries: owners of the (comm, src, tag) kind reach 2^64 − 1).
#[inline]
fn dir_len(comm: u64, cap: u64) -> usize {
    if comm < cap {
        (comm as usize + 1).next_power_of_two()
    } else {
        0
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
    (
        (pos & !(DPOS | TPOS)) >> KEY_BITS,
        pos & ((1 << KEY_BITS) - 1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Queued entries enough for any growth the other rules allow.
    const MANY: usize = 1 << 30;

    /// The value at `(comm, x)`, stored through `covers`, else `grow`.
    fn put(d: &mut Dense, comm: u64, x: u64, v: u32) -> bool {
        put_with(d, comm, x, v, MANY)
    }

    /// [`put`] with `entries` queued.
    fn put_with(d: &mut Dense, comm: u64, x: u64, v: u32, entries: usize) -> bool {
        let p = match d.covers(comm, x) {
            Some(p) => p,
            None => match d.grow(comm, x, entries, 0) {
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

    fn get(d: &Dense, comm: u64, x: u64) -> Option<u32> {
        let v = d.value_at(d.covers(comm, x)?);
        assert_eq!(d.get(comm, x), Some(v));
        (v != EMPTY).then_some(v)
    }

    #[test]
    fn arrays_of_directory_and_sparse_communicators_are_distinct_and_grow_in_proportion() {
        let mut d = Dense::default();
        let keys = [
            (0u64, 0u64),
            (0, 63),
            (1, 5),
            (DIR_COMMS, 0),
            (u64::from(u32::MAX), 7),
        ];
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
        assert_eq!(d.grow(5, DENSE_KEYS, MANY, 0), None);
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
        assert_eq!(d.grow(3, DENSE_KEYS, MANY, 0), None);
    }

    /// An array is allocated or grown only when the arrays and their directory then take
    /// at most `BYTES_PER_ENTRY` bytes per queued entry: a single list at depth 1 stays
    /// in the hash index; the first array is as small as its key allows.
    #[test]
    fn arrays_wait_for_the_entries_that_pay_for_them() {
        let mut d = Dense::default();
        // 16 slots (64 bytes) and one directory entry (32 bytes): 12 entries.
        assert!(!put_with(&mut d, 0, 3, 1, 11));
        assert_eq!(d.heap_bytes(), 0);
        assert!(put_with(&mut d, 0, 3, 1, 12));
        assert_eq!(d.heap_bytes(), 4 * MIN_LEN + ARR);
        assert!(d.covers(0, 15).is_some() && d.covers(0, 16).is_none());
        // Growing to 64 slots: 256 + 32 bytes, 36 entries.
        assert!(!put_with(&mut d, 0, 40, 2, 35));
        assert!(put_with(&mut d, 0, 40, 2, 36));
        assert_eq!(d.heap_bytes(), 4 * 64 + ARR);
        assert_eq!((get(&d, 0, 3), get(&d, 0, 40)), (Some(1), Some(2)));
        assert_eq!(d.len(), 2);
    }

    /// Hashed lists count toward a growth only up to the growths refused since the last
    /// one they allowed: 1,100 hashed lists (another communicator's, or keys past
    /// `DENSE_KEYS`) do not buy a fresh communicator a 4,096-slot array for one list;
    /// 1,008 refused pushes do, and the credit is then spent.
    #[test]
    fn hashed_lists_count_only_up_to_the_growths_refused_since() {
        let mut d = Dense::default();
        assert_eq!(d.grow(1, DENSE_KEYS, MANY, 1100), None);
        assert_eq!(d.deferred, 0, "keys no array takes are not refusals");
        for i in 0..1008 {
            assert_eq!(d.grow(1, 4095, MANY, 1100), None, "push {i}");
        }
        assert_eq!(d.heap_bytes(), 0);
        let (_, keys) = d.grow(1, 4095, MANY, 1100).unwrap();
        assert_eq!(keys, 0..4096);
        assert_eq!(d.deferred, 0);
        // Spent: a second fresh communicator starts over.
        assert_eq!(d.grow(2, 4095, MANY, 1100), None);
        assert_eq!(d.deferred, 1);
    }

    /// The directory takes at most as much as the arrays (or `DIR_MIN` entries): a
    /// communicator past it gets a far array, taken into the directory once the arrays
    /// have grown enough to pay for the directory's entries, with its lists.
    #[test]
    fn the_directory_grows_with_the_arrays_and_takes_over_far_arrays() {
        let mut d = Dense::default();
        assert!(put(&mut d, 3, 0, 30));
        assert_eq!(d.near.len(), DIR_MIN);
        // Communicator 100 would need 128 entries (4 KiB) for 16 slots: filed far.
        assert!(put(&mut d, 100, 1, 100));
        assert_eq!((d.near.len(), d.far.len()), (DIR_MIN, 1));
        assert_eq!(get(&d, 100, 1), Some(100));
        // Grown to 1024 slots (with 4 · 240 + 64 = 1024), communicator 100's array pays
        // for the 128 entries and moves into the directory, its lists with it.
        for x in 2..=240 {
            assert!(put(&mut d, 100, x, 100 + x as u32));
        }
        assert!(put(&mut d, 100, 1000, 7));
        assert_eq!((d.near.len(), d.far.len()), (128, 0));
        assert!(d.sparse.is_empty());
        for x in 1..=240 {
            assert_eq!(get(&d, 100, x), Some(100 + x as u32 * u32::from(x > 1)));
        }
        assert_eq!(get(&d, 100, 1000), Some(7));
        assert_eq!(get(&d, 3, 0), Some(30));
        assert!(d.heap_bytes() <= 2 * 4 * d.slots + 4 * 4 * MIN_LEN);
        // Communicators past `DIR_COMMS` stay far.
        assert!(put(&mut d, DIR_COMMS, 0, 9));
        assert_eq!((d.far.len(), get(&d, DIR_COMMS, 0)), (1, Some(9)));
        assert_eq!(d.len(), 240 + 3);
    }
}

//! A slab with per-slot generations (handles go stale when their slot is freed).
//!
//! The generation of an occupied slot lives in the entry itself ([`Generational`]) as a
//! `NonZeroU32`: its zero niche tells an occupied slot from a vacant one, so a slot is
//! exactly the size of its entry (no separate generation word or discriminant: 8 bytes
//! per slot less than a `(gen, val)` enum).

use core::num::NonZeroU32;

/// An entry that stores the generation its slab gave it.
pub(crate) trait Generational {
    fn gen(&self) -> NonZeroU32;
}

/// One slot. The generation is bumped each time an occupied slot is freed.
#[derive(Debug)]
enum Slot<T> {
    Occupied(T),
    Vacant { gen: u32, next_free: u32 },
}

const NONE: u32 = u32::MAX;

/// A full slab grows by `1 / GROWTH_DIVISOR` of its slots (see [`GenSlab::grow`]).
pub(crate) const GROWTH_DIVISOR: usize = 64;

/// The generation after `g` (wrapping, skipping zero).
#[inline]
fn bump(g: NonZeroU32) -> u32 {
    match g.get().wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

/// Reports a broken engine invariant: slot `idx` was expected to be occupied. Cold and
/// out of line, so that callers keep `idx` in a register rather than spill it for the
/// message.
#[cold]
#[inline(never)]
pub(crate) fn vacant(idx: u32) -> ! {
    unreachable!("engine invariant: slot {idx} is occupied")
}

/// Generation-checked slab. Indices are `u32`; freed slots are reused LIFO, so the
/// memory footprint is the high-water mark of live entries.
#[derive(Debug)]
pub(crate) struct GenSlab<T> {
    slots: Vec<Slot<T>>,
    free: u32,
    len: usize,
}

impl<T: Generational> GenSlab<T> {
    pub(crate) fn new() -> Self {
        GenSlab {
            slots: Vec::new(),
            free: NONE,
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Heap bytes from the capacity.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<Slot<T>>()
    }

    /// Room for `additional` more entries: exactly that (no rounding up), so that a
    /// caller that pre-sizes gets no slack.
    pub(crate) fn reserve(&mut self, additional: usize) {
        let free_slots = self.slots.len() - self.len;
        if additional > free_slots {
            self.slots.reserve_exact(additional - free_slots);
        }
    }

    /// Grows a full slab by 1/64 of its size (at least one slot) rather than doubling:
    /// the slack past the high-water mark stays within 1/64 of a slot per entry (0.75 B
    /// with 48-byte slots), at the price of more reallocations while a queue first
    /// fills (a geometric series still: O(64) slot copies per insertion amortised, and
    /// large blocks are moved by the allocator's `mremap` without copying). Cold: in
    /// steady state the free list or the spare capacity serves every insertion.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let n = self.slots.len();
        self.slots.reserve_exact((n / GROWTH_DIVISOR).max(1));
    }

    /// Inserts the entry `make` builds with its generation; returns (index, generation).
    /// The caller keeps `len` at most `MAX_ENTRIES` (indices fit the 23-bit links).
    #[inline(always)]
    pub(crate) fn insert(&mut self, make: impl FnOnce(NonZeroU32) -> T) -> (u32, u32) {
        self.len += 1;
        if self.free != NONE {
            let idx = self.free;
            let slot = &mut self.slots[idx as usize];
            let (gen, next) = match *slot {
                Slot::Vacant { gen, next_free } => (gen, next_free),
                Slot::Occupied(_) => unreachable!("free list points at an occupied slot"),
            };
            let g = NonZeroU32::new(gen).unwrap_or(NonZeroU32::MIN);
            *slot = Slot::Occupied(make(g));
            self.free = next;
            (idx, g.get())
        } else {
            if self.slots.len() == self.slots.capacity() {
                self.grow();
            }
            let idx = self.slots.len() as u32;
            self.slots.push(Slot::Occupied(make(NonZeroU32::MIN)));
            (idx, 1)
        }
    }

    /// Removes the entry at `idx` (any generation).
    #[inline]
    pub(crate) fn remove(&mut self, idx: u32) -> Option<T> {
        let slot = self.slots.get_mut(idx as usize)?;
        let gen = match slot {
            Slot::Occupied(v) => bump(v.gen()),
            Slot::Vacant { .. } => return None,
        };
        let old = core::mem::replace(
            slot,
            Slot::Vacant {
                gen,
                next_free: self.free,
            },
        );
        self.free = idx;
        self.len -= 1;
        match old {
            Slot::Occupied(val) => Some(val),
            Slot::Vacant { .. } => None,
        }
    }

    /// Removes the entry at `idx`, known to be occupied (an engine invariant).
    #[inline(always)]
    pub(crate) fn take(&mut self, idx: u32) -> T {
        match self.remove(idx) {
            Some(v) => v,
            None => vacant(idx),
        }
    }

    /// The entry at `idx`, if occupied (any generation).
    pub(crate) fn get(&self, idx: u32) -> Option<&T> {
        match self.slots.get(idx as usize) {
            Some(Slot::Occupied(val)) => Some(val),
            _ => None,
        }
    }

    /// The entry at `idx`, if occupied (any generation), mutably.
    #[inline(always)]
    pub(crate) fn get_mut(&mut self, idx: u32) -> Option<&mut T> {
        match self.slots.get_mut(idx as usize) {
            Some(Slot::Occupied(val)) => Some(val),
            _ => None,
        }
    }

    pub(crate) fn get_checked(&self, idx: u32, gen: u32) -> Option<&T> {
        match self.slots.get(idx as usize) {
            Some(Slot::Occupied(val)) if val.gen().get() == gen => Some(val),
            _ => None,
        }
    }

    pub(crate) fn get_checked_mut(&mut self, idx: u32, gen: u32) -> Option<&mut T> {
        match self.slots.get_mut(idx as usize) {
            Some(Slot::Occupied(val)) if val.gen().get() == gen => Some(val),
            _ => None,
        }
    }

    /// The generation of an occupied slot (an engine invariant).
    pub(crate) fn gen_of(&self, idx: u32) -> u32 {
        self.at(idx).gen().get()
    }

    /// Internal access to a slot known to be occupied (an engine invariant).
    #[inline]
    pub(crate) fn at(&self, idx: u32) -> &T {
        match &self.slots[idx as usize] {
            Slot::Occupied(val) => val,
            Slot::Vacant { .. } => vacant(idx),
        }
    }

    /// Internal mutable access to a slot known to be occupied (an engine invariant).
    #[inline]
    pub(crate) fn at_mut(&mut self, idx: u32) -> &mut T {
        match &mut self.slots[idx as usize] {
            Slot::Occupied(val) => val,
            Slot::Vacant { .. } => vacant(idx),
        }
    }

    /// Slots, occupied or vacant (the high-water mark: what [`GenSlab::indices`]
    /// visits).
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Occupied indices, in slot order.
    pub(crate) fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().enumerate().filter_map(|(i, s)| match s {
            Slot::Occupied(_) => Some(i as u32),
            Slot::Vacant { .. } => None,
        })
    }

    /// Size of one slot in bytes.
    pub(crate) const fn slot_size() -> usize {
        core::mem::size_of::<Slot<T>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E {
        gen: NonZeroU32,
        v: u32,
        w: u64,
    }

    impl Generational for E {
        fn gen(&self) -> NonZeroU32 {
            self.gen
        }
    }

    #[test]
    fn a_slot_is_its_entry_and_handles_go_stale() {
        // The vacant variant fits beside the generation's niche.
        assert_eq!(GenSlab::<E>::slot_size(), core::mem::size_of::<E>());
        let mut s = GenSlab::new();
        let (i, g) = s.insert(|gen| E { gen, v: 7, w: 0 });
        assert_eq!(s.get_checked(i, g).map(|e| e.v), Some(7));
        assert_eq!(s.remove(i).map(|e| e.v), Some(7));
        assert!(s.get_checked(i, g).is_none());
        assert!(s.remove(i).is_none());
        let (j, h) = s.insert(|gen| E { gen, v: 8, w: 1 });
        assert_eq!((j, h), (i, g + 1));
        assert!(s.get_checked(i, g).is_none());
        assert_eq!(s.get_checked_mut(j, h).map(|e| (e.v, e.w)), Some((8, 1)));
        assert_eq!(s.len(), 1);
        assert_eq!(s.indices().collect::<Vec<_>>(), [j]);
    }

    #[test]
    fn growth_leaves_at_most_a_64th_of_slack_and_reserve_is_exact() {
        let mut s = GenSlab::new();
        for n in 1..=20_000usize {
            s.insert(|gen| E { gen, v: 0, w: 0 });
            let cap = s.heap_bytes() / GenSlab::<E>::slot_size();
            assert!(
                cap >= n && cap <= n + (n - 1) / GROWTH_DIVISOR + 1,
                "{n}: {cap}"
            );
        }
        // Freed slots are reused before any growth.
        s.remove(3);
        s.remove(7);
        let before = s.heap_bytes();
        s.reserve(2);
        assert_eq!(s.heap_bytes(), before);
        let mut t = GenSlab::<E>::new();
        t.reserve(12_289);
        assert_eq!(t.heap_bytes(), 12_289 * GenSlab::<E>::slot_size());
    }

    #[test]
    fn generations_wrap_past_zero() {
        assert_eq!(bump(NonZeroU32::MAX), 1);
        assert_eq!(bump(NonZeroU32::MIN), 2);
    }
}

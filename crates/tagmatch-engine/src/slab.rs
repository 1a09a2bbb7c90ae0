//! A slab with per-slot generations (handles go stale when their slot is freed).

/// One slot. The generation is bumped each time an occupied slot is freed.
#[derive(Debug)]
enum Slot<T> {
    Occupied { gen: u32, val: T },
    Vacant { gen: u32, next_free: u32 },
}

const NONE: u32 = u32::MAX;

/// Generation-checked slab. Indices are `u32`; freed slots are reused LIFO, so the
/// memory footprint is the high-water mark of live entries.
#[derive(Debug)]
pub(crate) struct GenSlab<T> {
    slots: Vec<Slot<T>>,
    free: u32,
    len: usize,
}

impl<T> GenSlab<T> {
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

    pub(crate) fn reserve(&mut self, additional: usize) {
        let free_slots = self.slots.len() - self.len;
        if additional > free_slots {
            self.slots.reserve(additional - free_slots);
        }
    }

    /// Inserts; returns (index, generation). The caller keeps `len` below 2^31.
    pub(crate) fn insert(&mut self, val: T) -> (u32, u32) {
        self.len += 1;
        if self.free != NONE {
            let idx = self.free;
            let slot = &mut self.slots[idx as usize];
            let (gen, next) = match *slot {
                Slot::Vacant { gen, next_free } => (gen, next_free),
                Slot::Occupied { .. } => unreachable!("free list points at an occupied slot"),
            };
            *slot = Slot::Occupied { gen, val };
            self.free = next;
            (idx, gen)
        } else {
            let idx = self.slots.len() as u32;
            self.slots.push(Slot::Occupied { gen: 0, val });
            (idx, 0)
        }
    }

    /// Removes the entry at `idx` (any generation).
    pub(crate) fn remove(&mut self, idx: u32) -> Option<T> {
        let slot = self.slots.get_mut(idx as usize)?;
        let gen = match slot {
            Slot::Occupied { gen, .. } => *gen,
            Slot::Vacant { .. } => return None,
        };
        let old = core::mem::replace(
            slot,
            Slot::Vacant {
                gen: gen.wrapping_add(1),
                next_free: self.free,
            },
        );
        self.free = idx;
        self.len -= 1;
        match old {
            Slot::Occupied { val, .. } => Some(val),
            Slot::Vacant { .. } => None,
        }
    }

    pub(crate) fn get_checked(&self, idx: u32, gen: u32) -> Option<&T> {
        match self.slots.get(idx as usize) {
            Some(Slot::Occupied { gen: g, val }) if *g == gen => Some(val),
            _ => None,
        }
    }

    pub(crate) fn get_checked_mut(&mut self, idx: u32, gen: u32) -> Option<&mut T> {
        match self.slots.get_mut(idx as usize) {
            Some(Slot::Occupied { gen: g, val }) if *g == gen => Some(val),
            _ => None,
        }
    }

    pub(crate) fn gen_of(&self, idx: u32) -> u32 {
        match self.slots.get(idx as usize) {
            Some(Slot::Occupied { gen, .. }) | Some(Slot::Vacant { gen, .. }) => *gen,
            None => 0,
        }
    }

    /// Internal access to a slot known to be occupied (an engine invariant).
    #[inline]
    pub(crate) fn at(&self, idx: u32) -> &T {
        match &self.slots[idx as usize] {
            Slot::Occupied { val, .. } => val,
            Slot::Vacant { .. } => unreachable!("engine invariant: slot {idx} is occupied"),
        }
    }

    /// Internal mutable access to a slot known to be occupied (an engine invariant).
    #[inline]
    pub(crate) fn at_mut(&mut self, idx: u32) -> &mut T {
        match &mut self.slots[idx as usize] {
            Slot::Occupied { val, .. } => val,
            Slot::Vacant { .. } => unreachable!("engine invariant: slot {idx} is occupied"),
        }
    }

    /// Occupied indices, in slot order.
    pub(crate) fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().enumerate().filter_map(|(i, s)| match s {
            Slot::Occupied { .. } => Some(i as u32),
            Slot::Vacant { .. } => None,
        })
    }

    /// Size of one slot in bytes.
    pub(crate) const fn slot_size() -> usize {
        core::mem::size_of::<Slot<T>>()
    }
}

//! Slab keys with a generation check, for the 32-bit `send_id`/`recv_id` on the wire.
//!
//! efa-rdm-protocol-v4 §3.2: "`send_id` can be reused between messages. Because `send_id` is
//! used to distinguish on-the-fly TX operations, a send operation may have the same `send_id`
//! as a previous one that has already finished." A bare slab index would let a late packet
//! for a finished operation hit the new operation in the same slot; the generation in the
//! top bits makes such an id stale instead.

use slab::Slab;

/// Bits of the id that hold the slab index (up to 2^20 concurrent operations per kind).
pub(crate) const INDEX_BITS: u32 = 20;
const INDEX_MASK: u32 = (1 << INDEX_BITS) - 1;
const GEN_MASK: u32 = (1 << (32 - INDEX_BITS)) - 1;

/// A slab whose keys are `index | generation << 20`.
#[derive(Debug)]
pub(crate) struct GenSlab<T> {
    slab: Slab<(u32, T)>,
    next_gen: u32,
}

impl<T> Default for GenSlab<T> {
    fn default() -> Self {
        GenSlab {
            slab: Slab::new(),
            next_gen: 1,
        }
    }
}

impl<T> GenSlab<T> {
    /// Inserts and returns the wire id, or `None` when the index space is exhausted.
    /// (Always inlined: the caller's operation record, ~250 bytes, is then built in
    /// place instead of on the stack and copied into the slot.)
    #[inline(always)]
    pub(crate) fn insert(&mut self, value: T) -> Option<u32> {
        let entry = self.slab.vacant_entry();
        let idx = entry.key();
        if idx > INDEX_MASK as usize {
            return None;
        }
        let gen = self.next_gen & GEN_MASK;
        self.next_gen = self.next_gen.wrapping_add(1);
        entry.insert((gen, value));
        Some(idx as u32 | gen << INDEX_BITS)
    }

    fn split(id: u32) -> (usize, u32) {
        ((id & INDEX_MASK) as usize, id >> INDEX_BITS)
    }

    /// The live entry named by `id`, `None` if stale or never valid.
    pub(crate) fn get(&self, id: u32) -> Option<&T> {
        let (idx, gen) = Self::split(id);
        match self.slab.get(idx) {
            Some((g, v)) if *g == gen => Some(v),
            _ => None,
        }
    }

    /// Mutable form of [`GenSlab::get`].
    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        let (idx, gen) = Self::split(id);
        match self.slab.get_mut(idx) {
            Some((g, v)) if *g == gen => Some(v),
            _ => None,
        }
    }

    /// Removes the live entry named by `id`.
    pub(crate) fn remove(&mut self, id: u32) -> Option<T> {
        self.get(id)?;
        let (idx, _) = Self::split(id);
        Some(self.slab.remove(idx).1)
    }

    /// Removes and drops the live entry named by `id`; `false` if there is none.
    #[inline(always)]
    pub(crate) fn discard(&mut self, id: u32) -> bool {
        if self.get(id).is_none() {
            return false;
        }
        let (idx, _) = Self::split(id);
        self.slab.try_remove(idx).is_some()
    }

    /// Number of live entries.
    pub(crate) fn len(&self) -> usize {
        self.slab.len()
    }

    /// The live entries with their ids.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> + '_ {
        self.slab
            .iter()
            .map(|(i, (g, v))| (i as u32 | g << INDEX_BITS, v))
    }

    /// Ids of every live entry.
    #[cfg(test)]
    pub(crate) fn ids(&self) -> Vec<u32> {
        self.slab
            .iter()
            .map(|(i, (g, _))| i as u32 | g << INDEX_BITS)
            .collect()
    }
}

impl<T> core::ops::Index<u32> for GenSlab<T> {
    type Output = T;
    /// Internal invariant access: only used with ids just checked with [`GenSlab::get`].
    fn index(&self, id: u32) -> &T {
        match self.get(id) {
            Some(v) => v,
            None => unreachable!("endpoint invariant: op {id:#x} is live"),
        }
    }
}

impl<T> core::ops::IndexMut<u32> for GenSlab<T> {
    fn index_mut(&mut self, id: u32) -> &mut T {
        match self.get_mut(id) {
            Some(v) => v,
            None => unreachable!("endpoint invariant: op {id:#x} is live"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_id_does_not_hit_the_reused_slot() {
        let mut s = GenSlab::default();
        let a = s.insert("a").unwrap();
        assert_eq!(s.remove(a), Some("a"));
        let b = s.insert("b").unwrap();
        assert_eq!(a & INDEX_MASK, b & INDEX_MASK, "slot is reused");
        assert_ne!(a, b);
        assert_eq!(s.get(a), None);
        assert_eq!(s.remove(a), None);
        assert_eq!(s.get(b), Some(&"b"));
        assert_eq!(s.len(), 1);
        assert_eq!(s.ids(), vec![b]);
    }

    /// `discard` drops the live entry (its value's destructor runs) and frees the slot;
    /// a stale or unknown id discards nothing.
    #[test]
    fn discard_drops_the_live_entry_only() {
        let mut s = GenSlab::default();
        let v = std::rc::Rc::new(());
        let a = s.insert(v.clone()).unwrap();
        let b = s.insert(v.clone()).unwrap();
        assert_eq!(std::rc::Rc::strong_count(&v), 3);
        assert!(s.discard(a));
        assert_eq!(std::rc::Rc::strong_count(&v), 2, "dropped");
        assert!(!s.discard(a), "stale");
        let c = s.insert(v.clone()).unwrap();
        assert_eq!(a & INDEX_MASK, c & INDEX_MASK, "slot is reused");
        assert!(!s.discard(a), "stale id of a reused slot");
        assert!(s.get(c).is_some());
        assert!(!s.discard(c | INDEX_MASK), "unknown");
        assert_eq!((s.len(), s.ids()), (2, vec![c, b]));
        assert_eq!(std::rc::Rc::strong_count(&v), 3);
    }
}

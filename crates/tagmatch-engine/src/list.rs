//! Intrusive circular doubly-linked FIFOs threaded through slab entries.
//!
//! A list is named by its head index, stored in an index map; the tail is `head.prev`.
//! Every node keeps, per list it is on, a `(prev, next)` pair of slab indices below
//! [`MAX_REF`] + 1 = 2^23 − 1 (see [`crate::MAX_ENTRIES`]). Bit 23 of `prev` ([`HEAD`])
//! marks the list's head, so unlinking never needs the map unless the head changes.
//!
//! Two encodings of the pairs, both with a never-zero part that gives the slab its
//! vacancy niche (see `slab`):
//! - [`Wide`]: one pair in 8 bytes (`prev: u32`, `!next` as a `NonZeroU32`), for posted
//!   receives (on one list each).
//! - [`Packed4`]: four pairs of 24-bit fields in 24 bytes instead of 32, for unexpected
//!   messages (on four lists each): pair `k` keeps `prev` and the low byte of `next` in
//!   one `u32` and bits 8..24 of `next` in a `NonZeroU16`, whose top bit (bit 23 of the
//!   stored `next`) is always set.

use core::num::{NonZeroU16, NonZeroU32};

use crate::slab::{GenSlab, Generational};

/// Bit of [`Link::prev`] marking the head node of the list.
pub(crate) const HEAD: u32 = 1 << 23;

/// Largest slab index a link (or an index bucket) can name: 2^23 − 2. `MAX_REF + 1` is a
/// sentinel that is never a slab index (e.g. the engine's "claimed" mark).
pub(crate) const MAX_REF: u32 = (1 << 23) - 2;

/// Mask of a 23-bit node reference.
const REF: u32 = (1 << 23) - 1;

/// A node's `(prev, next)` pair on one list, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Link {
    /// Previous node, with [`HEAD`] set on the head node.
    pub(crate) prev: u32,
    /// Next node (the head, after the tail).
    pub(crate) next: u32,
}

impl Link {
    #[inline(always)]
    fn prev_idx(self) -> u32 {
        self.prev & !HEAD
    }
    #[inline(always)]
    fn is_head(self) -> bool {
        self.prev & HEAD != 0
    }
}

/// One pair in 8 bytes: `prev` (with [`HEAD`]) and `!next`, never zero.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wide {
    prev: u32,
    next_c: NonZeroU32,
}

/// `!n` as a `NonZeroU32`, for `n < 2^31`: its top bit is set, so or-ing it in changes
/// nothing and proves it non-zero.
#[inline(always)]
fn enc(n: u32) -> NonZeroU32 {
    debug_assert!(n < 1 << 31);
    NonZeroU32::new(1 << 31).unwrap_or(NonZeroU32::MAX) | !n
}

impl Default for Wide {
    fn default() -> Self {
        Wide {
            prev: 0,
            next_c: enc(0),
        }
    }
}

impl Wide {
    #[inline(always)]
    pub(crate) fn get(self) -> Link {
        Link {
            prev: self.prev,
            next: !self.next_c.get(),
        }
    }
    #[inline(always)]
    pub(crate) fn set(&mut self, l: Link) {
        self.prev = l.prev;
        self.next_c = enc(l.next);
    }
    #[inline(always)]
    pub(crate) fn set_next(&mut self, n: u32) {
        self.next_c = enc(n);
    }
    #[inline(always)]
    pub(crate) fn set_prev(&mut self, p: u32) {
        self.prev = p;
    }
    /// Sets `prev` to `p` | its own [`HEAD`] bit.
    #[inline(always)]
    pub(crate) fn relink_prev(&mut self, p: u32) {
        self.prev = p | (self.prev & HEAD);
    }
}

/// Four pairs in 24 bytes (see the module documentation).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Packed4 {
    /// Pair `k`: `prev` (24 bits, with [`HEAD`]) | low byte of `next` << 24.
    lo: [u32; 4],
    /// Pair `k`: bits 8..24 of the stored `next` (`next | 2^23`): never zero.
    hi: [NonZeroU16; 4],
}

/// Bits 8..24 of a stored `next` (`n | 2^23`): never zero.
#[inline(always)]
fn hi16(n: u32) -> NonZeroU16 {
    NonZeroU16::new(1 << 15).unwrap_or(NonZeroU16::MAX) | ((n >> 8) as u16)
}

impl Default for Packed4 {
    fn default() -> Self {
        Packed4 {
            lo: [0; 4],
            hi: [hi16(0); 4],
        }
    }
}

impl Packed4 {
    /// Pair `k` (`k < 4`).
    #[inline(always)]
    pub(crate) fn get(&self, k: usize) -> Link {
        let lo = self.lo[k];
        Link {
            prev: lo & 0x00FF_FFFF,
            next: ((lo >> 24) | (u32::from(self.hi[k].get()) << 8)) & REF,
        }
    }
    #[inline(always)]
    pub(crate) fn set(&mut self, k: usize, l: Link) {
        debug_assert!(l.next <= REF && l.prev < 1 << 24);
        self.lo[k] = l.prev | (l.next << 24);
        self.hi[k] = hi16(l.next);
    }
    /// Sets the next node of pair `k` (`n ≤ MAX_REF + 1`).
    #[inline(always)]
    pub(crate) fn set_next(&mut self, k: usize, n: u32) {
        debug_assert!(n <= REF);
        self.lo[k] = (self.lo[k] & 0x00FF_FFFF) | (n << 24);
        self.hi[k] = hi16(n);
    }
    /// Sets `prev` (with its [`HEAD`] bit) of pair `k`.
    #[inline(always)]
    pub(crate) fn set_prev(&mut self, k: usize, p: u32) {
        debug_assert!(p < 1 << 24);
        self.lo[k] = (self.lo[k] & 0xFF00_0000) | p;
    }
    /// Sets `prev` of pair `k` to `p` | its own [`HEAD`] bit.
    #[inline(always)]
    pub(crate) fn relink_prev(&mut self, k: usize, p: u32) {
        debug_assert!(p < 1 << 24);
        self.lo[k] = (self.lo[k] & (0xFF00_0000 | HEAD)) | p;
    }
    /// Keeps a 32-bit value in the `prev` word of pair `k` of a node on no list (e.g. a
    /// claim id); the `next` of pair `k` keeps only its upper 16 bits (and the niche).
    pub(crate) fn stash(&mut self, k: usize, v: u32) {
        self.lo[k] = v;
    }
    /// The value kept by [`Packed4::stash`].
    pub(crate) fn stashed(&self, k: usize) -> u32 {
        self.lo[k]
    }
}

/// A slab entry that sits on one or more lists.
pub(crate) trait Linked: Generational {
    fn link(&self, k: usize) -> Link;
    fn set_link(&mut self, k: usize, l: Link);
    fn set_next(&mut self, k: usize, n: u32);
    /// Sets `prev` (with its [`HEAD`] bit).
    fn set_prev(&mut self, k: usize, p: u32);
    /// Sets `prev` to `p`, or-ing in the node's own [`HEAD`] bit.
    fn relink_prev(&mut self, k: usize, p: u32);
}

/// What unlinking did to the list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unlinked {
    /// The node was not the head; the index map is unchanged.
    Inner,
    /// The node was the head; the new head is this one.
    NewHead(u32),
    /// The node was the only one; the list is now empty.
    Empty,
}

/// Appends `new` to list `k` whose head is `head` (or starts a list).
#[inline(always)]
pub(crate) fn push_back<T: Linked>(s: &mut GenSlab<T>, k: usize, head: Option<u32>, new: u32) {
    match head {
        Some(h) => {
            let tail = s.at(h).link(k).prev_idx();
            s.at_mut(h).set_prev(k, new | HEAD);
            s.at_mut(tail).set_next(k, new);
            s.at_mut(new).set_link(
                k,
                Link {
                    prev: tail,
                    next: h,
                },
            );
        }
        None => {
            s.at_mut(new).set_link(
                k,
                Link {
                    prev: new | HEAD,
                    next: new,
                },
            );
        }
    }
}

/// Starts list `k` with node `idx` (`node`, the slab entry at `idx`) alone: what
/// [`push_back`] does without a head, for a caller that holds the node already.
#[inline(always)]
pub(crate) fn start<T: Linked>(node: &mut T, k: usize, idx: u32) {
    node.set_link(
        k,
        Link {
            prev: idx | HEAD,
            next: idx,
        },
    );
}

/// Removes `idx` from list `k`.
#[inline(always)]
pub(crate) fn unlink<T: Linked>(s: &mut GenSlab<T>, k: usize, idx: u32) -> Unlinked {
    let l = s.at(idx).link(k);
    unlink_detached(s, k, idx, l)
}

/// Removes `idx`, whose link on list `k` was `l`, from that list: `idx` itself is not
/// accessed, so it may already have been taken out of the slab (its neighbours are
/// still there).
#[inline(always)]
pub(crate) fn unlink_detached<T: Linked>(
    s: &mut GenSlab<T>,
    k: usize,
    idx: u32,
    l: Link,
) -> Unlinked {
    let next = l.next;
    if next == idx {
        return Unlinked::Empty;
    }
    s.at_mut(l.prev_idx()).set_next(k, next);
    // The successor keeps its own head mark (it is the head when `idx` was the tail)
    // and inherits `idx`'s (it becomes the head when `idx` was).
    s.at_mut(next).relink_prev(k, l.prev);
    if l.is_head() {
        Unlinked::NewHead(next)
    } else {
        Unlinked::Inner
    }
}

/// The next node of list `k` after `idx`, or `None` when back at `head`.
#[inline]
pub(crate) fn next<T: Linked>(s: &GenSlab<T>, k: usize, head: u32, idx: u32) -> Option<u32> {
    let n = s.at(idx).link(k).next;
    (n != head).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_pairs_round_trip_every_field_independently_up_to_the_limit() {
        assert_eq!(core::mem::size_of::<Packed4>(), 24);
        assert_eq!(core::mem::size_of::<Option<Packed4>>(), 24);
        let vals = [0, 1, 0xFF, 0x100, 0xABCDE, MAX_REF, MAX_REF + 1];
        let mut p = Packed4::default();
        for k in 0..4 {
            assert_eq!(p.get(k), Link { prev: 0, next: 0 });
        }
        for (i, &a) in vals.iter().enumerate() {
            for &b in &vals {
                let k = i % 4;
                let other = (k + 1) % 4;
                p.set(other, Link { prev: 7, next: 9 });
                let prev = a.min(MAX_REF) | if b & 1 == 1 { HEAD } else { 0 };
                p.set(k, Link { prev, next: b });
                assert_eq!(p.get(k), Link { prev, next: b });
                p.set_next(k, a);
                assert_eq!(p.get(k), Link { prev, next: a });
                p.set_prev(k, b.min(MAX_REF));
                assert_eq!(
                    p.get(k),
                    Link {
                        prev: b.min(MAX_REF),
                        next: a
                    }
                );
                assert_eq!(p.get(other), Link { prev: 7, next: 9 });
            }
        }
        for v in [u32::MAX, 0, 0x1234_5678] {
            p.stash(1, v);
            assert_eq!(p.stashed(1), v);
            p.set_next(0, MAX_REF + 1);
            assert_eq!(p.stashed(1), v);
            assert_eq!(p.get(0).next, MAX_REF + 1);
        }
    }

    #[test]
    fn wide_pairs_round_trip() {
        let mut w = Wide::default();
        w.set(Link {
            prev: MAX_REF | HEAD,
            next: MAX_REF + 1,
        });
        assert_eq!(
            w.get(),
            Link {
                prev: MAX_REF | HEAD,
                next: MAX_REF + 1
            }
        );
        assert_eq!(core::mem::size_of::<Option<Wide>>(), 8);
    }
}

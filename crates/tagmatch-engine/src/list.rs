//! Intrusive circular doubly-linked FIFOs threaded through slab entries.
//!
//! A list is named by its head index, stored in an index map; the tail is `head.prev`.
//! Every node keeps, per list it is on, a `(prev, next)` pair of `u32` slab indices. The
//! top bit of `prev` marks the list's head (slab indices stay below 2^31), so unlinking
//! never needs the map unless the head changes, and no separate flag byte is needed.
//! `next` is stored complemented, so it is never zero: that zero niche is what lets the
//! slab tell a vacant slot from an occupied one without a tag word (see `slab`).

use core::num::NonZeroU32;

use crate::slab::{GenSlab, Generational};

/// Top bit of [`Link::prev`]: this node is the head of the list.
const HEAD: u32 = 1 << 31;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Link {
    /// Previous node, with [`HEAD`] set on the head node.
    prev: u32,
    /// `!next`: at least 2^31 for a slab index (and for any value below 2^31).
    next_c: NonZeroU32,
}

impl Default for Link {
    fn default() -> Self {
        Link {
            prev: 0,
            next_c: enc(0),
        }
    }
}

/// `!n` as a `NonZeroU32`, for `n < 2^31` (slab indices and the engine's sentinels):
/// its top bit is set, so or-ing it in changes nothing and proves it non-zero.
#[inline(always)]
fn enc(n: u32) -> NonZeroU32 {
    debug_assert!(n < HEAD);
    NonZeroU32::new(HEAD).unwrap_or(NonZeroU32::MAX) | !n
}

impl Link {
    /// The next node (the head, after the tail).
    #[inline(always)]
    pub(crate) fn next(self) -> u32 {
        !self.next_c.get()
    }
    /// The link of a node on no list of this kind, keeping `v` (e.g. a claim id).
    pub(crate) fn stash(v: u32) -> Link {
        Link {
            prev: v,
            next_c: enc(0),
        }
    }
    /// The value kept by [`Link::stash`].
    pub(crate) fn stashed(self) -> u32 {
        self.prev
    }
    /// Sets the next node (`n < 2^31`).
    #[inline(always)]
    pub(crate) fn set_next(&mut self, n: u32) {
        self.next_c = enc(n);
    }
    #[inline(always)]
    fn prev(self) -> u32 {
        self.prev & !HEAD
    }
    #[inline(always)]
    fn is_head(self) -> bool {
        self.prev & HEAD != 0
    }
}

/// A slab entry that sits on one or more lists.
pub(crate) trait Linked: Generational {
    fn link(&self, k: usize) -> Link;
    fn link_mut(&mut self, k: usize) -> &mut Link;
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
            let hl = s.at_mut(h).link_mut(k);
            let tail = hl.prev();
            hl.prev = new | HEAD;
            s.at_mut(tail).link_mut(k).set_next(new);
            *s.at_mut(new).link_mut(k) = Link {
                prev: tail,
                next_c: enc(h),
            };
        }
        None => {
            *s.at_mut(new).link_mut(k) = Link {
                prev: new | HEAD,
                next_c: enc(new),
            };
        }
    }
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
    let next = l.next();
    if next == idx {
        return Unlinked::Empty;
    }
    let prev = l.prev();
    s.at_mut(prev).link_mut(k).set_next(next);
    let nl = s.at_mut(next).link_mut(k);
    // The successor keeps its own head mark (it is the head when `idx` was the tail)
    // and inherits `idx`'s (it becomes the head when `idx` was).
    nl.prev = l.prev | (nl.prev & HEAD);
    if l.is_head() {
        Unlinked::NewHead(next)
    } else {
        Unlinked::Inner
    }
}

/// The next node of list `k` after `idx`, or `None` when back at `head`.
#[inline]
pub(crate) fn next<T: Linked>(s: &GenSlab<T>, k: usize, head: u32, idx: u32) -> Option<u32> {
    let n = s.at(idx).link(k).next();
    (n != head).then_some(n)
}

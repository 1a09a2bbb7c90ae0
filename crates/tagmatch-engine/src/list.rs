//! Intrusive circular doubly-linked FIFOs threaded through slab entries.
//!
//! A list is named by its head index, stored in an index map; the tail is `head.prev`.
//! Every node keeps, per list it is on, a `(prev, next)` pair of `u32` slab indices and an
//! "is head" bit, so unlinking never needs the map unless the head changes.

use crate::slab::GenSlab;

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Link {
    pub(crate) prev: u32,
    pub(crate) next: u32,
}

/// A slab entry that sits on one or more lists.
pub(crate) trait Linked {
    fn link(&self, k: usize) -> Link;
    fn link_mut(&mut self, k: usize) -> &mut Link;
    fn is_head(&self, k: usize) -> bool;
    fn set_head(&mut self, k: usize, head: bool);
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
#[inline]
pub(crate) fn push_back<T: Linked>(s: &mut GenSlab<T>, k: usize, head: Option<u32>, new: u32) {
    match head {
        Some(h) => {
            let tail = s.at(h).link(k).prev;
            s.at_mut(tail).link_mut(k).next = new;
            s.at_mut(h).link_mut(k).prev = new;
            let n = s.at_mut(new);
            *n.link_mut(k) = Link {
                prev: tail,
                next: h,
            };
            n.set_head(k, false);
        }
        None => {
            let n = s.at_mut(new);
            *n.link_mut(k) = Link {
                prev: new,
                next: new,
            };
            n.set_head(k, true);
        }
    }
}

/// Removes `idx` from list `k`.
#[inline]
pub(crate) fn unlink<T: Linked>(s: &mut GenSlab<T>, k: usize, idx: u32) -> Unlinked {
    let n = s.at(idx);
    let l = n.link(k);
    let was_head = n.is_head(k);
    if l.next == idx {
        return Unlinked::Empty;
    }
    s.at_mut(l.prev).link_mut(k).next = l.next;
    s.at_mut(l.next).link_mut(k).prev = l.prev;
    if was_head {
        s.at_mut(l.next).set_head(k, true);
        Unlinked::NewHead(l.next)
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

//! Which bytes of a message have been received: the ranges its segments (MEDIUM and
//! RUNTREAD segments, CTSDATA, an RTW's payload) filled, so that a segment delivered
//! twice, or overlapping one already placed, is refused instead of counted again.
//!
//! efa-rdm-protocol-v4 §3.2 (medium): the receiver needs `seg_offset` "to put the data
//! in the correct location"; (eager, step 4) the data must be in the application buffer
//! before the receive completes. Counting bytes alone, a duplicate counted as a missing
//! segment and the receive completed with a hole.

use smallvec::SmallVec;

/// Disjoint byte ranges `[start, end)`, sorted, adjacent ones merged: one range while
/// segments arrive in order (no allocation), one more per gap, up to
/// [`max_ranges`] of the message's length.
#[derive(Debug, Default, Clone)]
pub(super) struct Coverage {
    ranges: SmallVec<[(u64, u64); 2]>,
    total: u64,
}

/// What [`Coverage::add`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Added {
    /// The range is covered now.
    Yes,
    /// It overlaps bytes already covered (a segment delivered twice), or its end
    /// overflows: nothing added.
    Overlap,
    /// It would open one gap more than the message may have ([`max_ranges`]): nothing
    /// added.
    TooFragmented,
}

/// Most disjoint ranges a message of `msg_len` bytes may have received at once: one per
/// 256 bytes of it, at least 16 and at most 4,096. A peer decides how it cuts a message
/// (efa-rdm-protocol-v4 §3.2 leaves segment sizes to the sender), so without a bound one
/// sending 1-byte segments, every other byte first, made the receiver keep 16 bytes per
/// byte pair (8 times the message) and, in descending order, move every range on each
/// insert (time quadratic in the segments). Bounded, the ranges take at most 1/16 of the
/// message (64 KiB from 1 MiB up) and an insert moves at most 4,096; a legitimate sender
/// cuts at its packet size (a kilobyte or more) and has far fewer segments in flight, so
/// it never meets the bound. A segment past it is refused (the caller counts it as
/// invalid): that message, from a peer cutting it this finely out of order, does not
/// complete.
pub(super) fn max_ranges(msg_len: u64) -> usize {
    (msg_len / 256).clamp(16, 4096) as usize
}

impl Coverage {
    /// Bytes covered.
    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// Adds `[off, off + len)` of a message of `msg_len` bytes (which bounds the gaps:
    /// [`max_ranges`]). An empty range is always added (it covers nothing).
    pub(super) fn add(&mut self, off: u64, len: u64, msg_len: u64) -> Added {
        let Some(end) = off.checked_add(len) else {
            return Added::Overlap;
        };
        if len == 0 {
            return Added::Yes;
        }
        // In order: past the last range (the common case), merged into it when adjacent.
        let at = match self.ranges.last_mut() {
            None => 0,
            Some(last) if off >= last.1 => {
                if off == last.1 {
                    last.1 = end;
                    self.total += len;
                    return Added::Yes;
                }
                self.ranges.len()
            }
            Some(_) => {
                // The first range ending after `off`: the new one must end at or
                // before its start.
                let i = self.ranges.partition_point(|r| r.1 <= off);
                if end > self.ranges[i].0 {
                    return Added::Overlap;
                }
                i
            }
        };
        let joins_prev = at > 0 && self.ranges[at - 1].1 == off;
        let joins_next = at < self.ranges.len() && self.ranges[at].0 == end;
        if !joins_prev && !joins_next && self.ranges.len() >= max_ranges(msg_len) {
            return Added::TooFragmented;
        }
        self.total += len;
        match (joins_prev, joins_next) {
            (true, true) => {
                self.ranges[at - 1].1 = self.ranges[at].1;
                self.ranges.remove(at);
            }
            (true, false) => self.ranges[at - 1].1 = end,
            (false, true) => self.ranges[at].0 = off,
            (false, false) => self.ranges.insert(at, (off, end)),
        }
        Added::Yes
    }
}

#[cfg(test)]
mod tests {
    use super::{max_ranges, Added, Coverage};

    /// Large enough that the bound on gaps never applies.
    const BIG: u64 = 1 << 40;

    fn add(c: &mut Coverage, off: u64, len: u64) -> bool {
        c.add(off, len, BIG) == Added::Yes
    }

    /// A naive model: one flag per byte.
    fn model_add(bytes: &mut [bool], off: u64, len: u64) -> bool {
        let (s, e) = (off as usize, (off + len) as usize);
        if bytes[s..e].iter().any(|&b| b) {
            return false;
        }
        bytes[s..e].iter_mut().for_each(|b| *b = true);
        true
    }

    #[test]
    fn in_order_segments_stay_one_range() {
        let mut c = Coverage::default();
        for i in 0..100 {
            assert!(add(&mut c, i * 8, 8));
        }
        assert_eq!((c.total(), c.ranges.len()), (800, 1));
        assert!(!add(&mut c, 792, 8), "the last segment again");
        assert!(!add(&mut c, 0, 1), "the first byte again");
        assert!(!add(&mut c, u64::MAX, 2), "an end past u64::MAX");
        assert!(add(&mut c, 5, 0), "an empty range covers nothing");
        assert_eq!(c.total(), 800);
    }

    #[test]
    fn any_order_agrees_with_a_byte_map() {
        // Segments of random offsets and lengths over 256 bytes, many seeds: what is
        // added and refused, and the total, match a map of one flag per byte, and the
        // ranges stay disjoint, sorted and merged.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..2000 {
            let mut c = Coverage::default();
            let mut bytes = [false; 256];
            for _ in 0..40 {
                let off = next(256);
                let len = next(257 - off).min(next(33));
                assert_eq!(add(&mut c, off, len), model_add(&mut bytes, off, len));
                let want = bytes.iter().filter(|&&b| b).count() as u64;
                assert_eq!(c.total(), want);
                for w in c.ranges.windows(2) {
                    assert!(w[0].1 < w[1].0, "{:?}", c.ranges);
                }
                assert!(c.ranges.iter().all(|r| r.0 < r.1));
            }
        }
    }

    #[test]
    fn gaps_are_bounded_by_the_message_length() {
        assert_eq!(
            (
                max_ranges(0),
                max_ranges(4096),
                max_ranges(1 << 20),
                max_ranges(u64::MAX)
            ),
            (16, 16, 4096, 4096)
        );
        // A 64 KiB message cut into 1-byte segments, every other byte: 256 ranges, then
        // a new gap is refused; filling gaps (or extending a range) is still accepted.
        let len = 64 << 10;
        let mut c = Coverage::default();
        let mut took = 0;
        for off in (0..len).step_by(2) {
            match c.add(off, 1, len) {
                Added::Yes => took += 1,
                Added::TooFragmented => {}
                Added::Overlap => panic!("no overlap at {off}"),
            }
        }
        assert_eq!((took, c.ranges.len()), (256, 256));
        assert_eq!(
            c.add(1, 1, len),
            Added::Yes,
            "closing a gap merges two ranges"
        );
        assert_eq!(c.ranges.len(), 255);
        assert_eq!(c.add(511, 1, len), Added::Yes, "extending the last range");
        assert_eq!(c.add(1000, 1, len), Added::Yes, "room again for one gap");
        assert_eq!(c.add(2000, 1, len), Added::TooFragmented);
        assert_eq!(c.add(0, 1, len), Added::Overlap);
    }
}

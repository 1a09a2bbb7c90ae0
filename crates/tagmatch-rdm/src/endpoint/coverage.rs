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
/// segments arrive in order (no allocation), one more per gap.
#[derive(Debug, Default, Clone)]
pub(super) struct Coverage {
    ranges: SmallVec<[(u64, u64); 2]>,
    total: u64,
}

impl Coverage {
    /// Bytes covered.
    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// Adds `[off, off + len)`. `false` (nothing added) if it overlaps bytes already
    /// covered or its end overflows; an empty range is always added (it covers nothing).
    pub(super) fn add(&mut self, off: u64, len: u64) -> bool {
        let Some(end) = off.checked_add(len) else {
            return false;
        };
        if len == 0 {
            return true;
        }
        // In order: past the last range (the common case), merged into it when adjacent.
        let at = match self.ranges.last_mut() {
            None => 0,
            Some(last) if off >= last.1 => {
                if off == last.1 {
                    last.1 = end;
                    self.total += len;
                    return true;
                }
                self.ranges.len()
            }
            Some(_) => {
                // The first range ending after `off`: the new one must end at or
                // before its start.
                let i = self.ranges.partition_point(|r| r.1 <= off);
                if end > self.ranges[i].0 {
                    return false;
                }
                i
            }
        };
        self.total += len;
        let joins_prev = at > 0 && self.ranges[at - 1].1 == off;
        let joins_next = at < self.ranges.len() && self.ranges[at].0 == end;
        match (joins_prev, joins_next) {
            (true, true) => {
                self.ranges[at - 1].1 = self.ranges[at].1;
                self.ranges.remove(at);
            }
            (true, false) => self.ranges[at - 1].1 = end,
            (false, true) => self.ranges[at].0 = off,
            (false, false) => self.ranges.insert(at, (off, end)),
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::Coverage;

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
            assert!(c.add(i * 8, 8));
        }
        assert_eq!((c.total(), c.ranges.len()), (800, 1));
        assert!(!c.add(792, 8), "the last segment again");
        assert!(!c.add(0, 1), "the first byte again");
        assert!(!c.add(u64::MAX, 2), "an end past u64::MAX");
        assert!(c.add(5, 0), "an empty range covers nothing");
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
                assert_eq!(c.add(off, len), model_add(&mut bytes, off, len));
                let want = bytes.iter().filter(|&&b| b).count() as u64;
                assert_eq!(c.total(), want);
                for w in c.ranges.windows(2) {
                    assert!(w[0].1 < w[1].0, "{:?}", c.ranges);
                }
                assert!(c.ranges.iter().all(|r| r.0 < r.1));
            }
        }
    }
}

//! A fast, deterministic hasher for the small integer keys of the indexes.
//!
//! SipHash (the std default) costs more than the rest of an O(1) match. Keys here are
//! communicator / source / tag integers chosen by peers; a multiply-xorshift finaliser
//! (MurmurHash3 fmix64) spreads them over both the low bits (bucket index) and the high
//! bits (hashbrown's control byte). It is not DoS-resistant, which matters little for a
//! matcher whose keys come from the job's own ranks.

use core::hash::{BuildHasherDefault, Hasher};
use std::collections::HashMap;

/// See the module documentation.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct FastHasher(u64);

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(23) ^ v).wrapping_mul(K);
    }
    #[inline]
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h
    }
}

pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// Heap bytes of a hashbrown-backed map, from its capacity (buckets × (entry + control
/// byte) + one SIMD group of control bytes). An estimate of the real layout.
pub(crate) fn map_heap_bytes<K, V, S>(m: &HashMap<K, V, S>) -> usize {
    let cap = m.capacity();
    if cap == 0 {
        return 0;
    }
    let buckets = if cap < 8 {
        (cap + 1).next_power_of_two()
    } else {
        (cap * 8 / 7).next_power_of_two()
    };
    buckets * (core::mem::size_of::<(K, V)>() + 1) + 16
}

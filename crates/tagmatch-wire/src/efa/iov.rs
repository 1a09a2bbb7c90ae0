//! `struct efa_rma_iov` (wire-layouts §A.1): `addr` u64 @0, `len` size_t (8 bytes) @8,
//! `key` u64 @16 — 24 bytes, little-endian. The same layout serves `read_iov` entries.

use zerocopy::little_endian::U64;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// One remote memory region: an entry of `rma_iov[]` or `read_iov[]`, in wire format.
///
/// The struct *is* the 24 wire bytes (little-endian, alignment 1), so a `&[RmaIov]` borrows
/// directly from a packet, and [`RmaIov::slice_as_bytes`] turns a slice back into bytes.
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
#[repr(C)]
pub struct RmaIov {
    addr: U64,
    len: U64,
    key: U64,
}

impl RmaIov {
    /// An entry for `len` bytes at remote virtual address `addr` under memory key `key`.
    pub const fn new(addr: u64, len: u64, key: u64) -> Self {
        RmaIov {
            addr: U64::new(addr),
            len: U64::new(len),
            key: U64::new(key),
        }
    }

    /// Remote virtual address.
    pub fn addr(&self) -> u64 {
        self.addr.get()
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len.get()
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Remote memory key.
    pub fn key(&self) -> u64 {
        self.key.get()
    }

    /// Borrows entries from wire bytes; `None` unless `bytes.len()` is a multiple of 24.
    pub fn slice_from_bytes(bytes: &[u8]) -> Option<&[RmaIov]> {
        <[RmaIov]>::ref_from_bytes(bytes).ok()
    }

    /// The wire bytes of a slice of entries (e.g. to build a LONGREAD payload).
    pub fn slice_as_bytes(iovs: &[RmaIov]) -> &[u8] {
        iovs.as_bytes()
    }
}

impl core::fmt::Debug for RmaIov {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RmaIov")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .field("key", &format_args!("{:#x}", self.key()))
            .finish()
    }
}

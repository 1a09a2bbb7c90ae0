//! Bounds-checked fixed-width loads and stores. Every accessor returns 0 (loads) or does
//! nothing (stores) when the range is out of bounds, so no input can make them panic; the
//! checked constructors guarantee the ranges they are used with are in bounds.

macro_rules! accessors {
    ($get:ident, $put:ident, $ty:ty, $n:expr, $from:ident, $to:ident) => {
        #[inline(always)]
        pub(crate) fn $get(b: &[u8], off: usize) -> $ty {
            match b.get(off..off.wrapping_add($n)) {
                Some(s) => {
                    let mut a = [0u8; $n];
                    a.copy_from_slice(s);
                    <$ty>::$from(a)
                }
                None => 0,
            }
        }

        #[inline(always)]
        pub(crate) fn $put(b: &mut [u8], off: usize, v: $ty) {
            if let Some(s) = b.get_mut(off..off.wrapping_add($n)) {
                s.copy_from_slice(&v.$to());
            }
        }
    };
}

accessors!(le16, put_le16, u16, 2, from_le_bytes, to_le_bytes);
accessors!(le32, put_le32, u32, 4, from_le_bytes, to_le_bytes);
accessors!(le64, put_le64, u64, 8, from_le_bytes, to_le_bytes);
accessors!(be32, put_be32, u32, 4, from_be_bytes, to_be_bytes);
accessors!(be64, put_be64, u64, 8, from_be_bytes, to_be_bytes);

#[inline(always)]
pub(crate) fn byte(b: &[u8], off: usize) -> u8 {
    b.get(off).copied().unwrap_or(0)
}

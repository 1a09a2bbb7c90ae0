//! Emulated atomics: the libfabric `enum fi_datatype` and `enum fi_op` values carried in RTA
//! packets, and the arithmetic the responder applies.
//!
//! efa-rdm-protocol-v4 §3.3: "`atomic_datatype` and `atomic_op` … A list of atomic datatypes
//! can be found in the libfabric fi_atomic man page." Values are those of
//! `include/rdma/fi_domain.h` (wire-layouts §E: `FI_UINT64` = 7, `FI_SUM` = 2,
//! `FI_ATOMIC_READ` = 10, `FI_CSWAP` = 12).

/// `enum fi_datatype` (the integer and real types; complex and long double are refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Datatype {
    /// `FI_INT8`
    I8 = 0,
    /// `FI_UINT8`
    U8 = 1,
    /// `FI_INT16`
    I16 = 2,
    /// `FI_UINT16`
    U16 = 3,
    /// `FI_INT32`
    I32 = 4,
    /// `FI_UINT32`
    U32 = 5,
    /// `FI_INT64`
    I64 = 6,
    /// `FI_UINT64`
    U64 = 7,
    /// `FI_FLOAT`
    F32 = 8,
    /// `FI_DOUBLE`
    F64 = 9,
}

impl Datatype {
    /// Every supported datatype.
    pub const ALL: [Datatype; 10] = [
        Datatype::I8,
        Datatype::U8,
        Datatype::I16,
        Datatype::U16,
        Datatype::I32,
        Datatype::U32,
        Datatype::I64,
        Datatype::U64,
        Datatype::F32,
        Datatype::F64,
    ];

    /// From the wire value; `None` for unsupported or unknown types.
    pub fn from_wire(v: u32) -> Option<Datatype> {
        Datatype::ALL.get(v as usize).copied()
    }

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            Datatype::I8 | Datatype::U8 => 1,
            Datatype::I16 | Datatype::U16 => 2,
            Datatype::I32 | Datatype::U32 | Datatype::F32 => 4,
            Datatype::I64 | Datatype::U64 | Datatype::F64 => 8,
        }
    }

    fn is_float(self) -> bool {
        matches!(self, Datatype::F32 | Datatype::F64)
    }
}

/// `enum fi_op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum AtomicOp {
    /// `FI_MIN`
    Min = 0,
    /// `FI_MAX`
    Max = 1,
    /// `FI_SUM`
    Sum = 2,
    /// `FI_PROD`
    Prod = 3,
    /// `FI_LOR`
    Lor = 4,
    /// `FI_LAND`
    Land = 5,
    /// `FI_BOR`
    Bor = 6,
    /// `FI_BAND`
    Band = 7,
    /// `FI_LXOR`
    Lxor = 8,
    /// `FI_BXOR`
    Bxor = 9,
    /// `FI_ATOMIC_READ`
    Read = 10,
    /// `FI_ATOMIC_WRITE`
    Write = 11,
    /// `FI_CSWAP`: write if compare == target.
    Cswap = 12,
    /// `FI_CSWAP_NE`: write if compare != target.
    CswapNe = 13,
    /// `FI_CSWAP_LE`: write if compare <= target.
    CswapLe = 14,
    /// `FI_CSWAP_LT`: write if compare < target.
    CswapLt = 15,
    /// `FI_CSWAP_GE`: write if compare >= target.
    CswapGe = 16,
    /// `FI_CSWAP_GT`: write if compare > target.
    CswapGt = 17,
    /// `FI_MSWAP`: target = (buf & compare) | (target & !compare).
    Mswap = 18,
}

impl AtomicOp {
    /// Every operation.
    pub const ALL: [AtomicOp; 19] = [
        AtomicOp::Min,
        AtomicOp::Max,
        AtomicOp::Sum,
        AtomicOp::Prod,
        AtomicOp::Lor,
        AtomicOp::Land,
        AtomicOp::Bor,
        AtomicOp::Band,
        AtomicOp::Lxor,
        AtomicOp::Bxor,
        AtomicOp::Read,
        AtomicOp::Write,
        AtomicOp::Cswap,
        AtomicOp::CswapNe,
        AtomicOp::CswapLe,
        AtomicOp::CswapLt,
        AtomicOp::CswapGe,
        AtomicOp::CswapGt,
        AtomicOp::Mswap,
    ];

    /// From the wire value.
    pub fn from_wire(v: u32) -> Option<AtomicOp> {
        AtomicOp::ALL.get(v as usize).copied()
    }

    /// The compare-and-swap family (COMPARE_RTA).
    pub fn is_compare(self) -> bool {
        (self as u32) >= AtomicOp::Cswap as u32
    }

    /// Whether `self` is defined on `dt` (libfabric: no logical or bitwise ops on reals).
    pub fn valid_for(self, dt: Datatype) -> bool {
        use AtomicOp::*;
        !(dt.is_float() && matches!(self, Lor | Land | Bor | Band | Lxor | Bxor | Mswap))
    }
}

/// Why an atomic cannot be applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicError {
    /// Unknown or unsupported `fi_datatype`.
    Datatype(u32),
    /// Unknown `fi_op`.
    Op(u32),
    /// The op is not defined on the datatype.
    OpNotValidForType,
    /// Operand lengths are not a multiple of the element size, or differ from the target.
    Length,
}

/// The compare-and-swap family (`FI_CSWAP*`): the source replaces the destination when the
/// comparand relates to it as the operation says; shared by the integer and float types.
fn compare_swap<T: PartialOrd + Copy>(op: AtomicOp, d: T, s: T, c: T) -> T {
    let swap = match op {
        AtomicOp::Cswap => c == d,
        AtomicOp::CswapNe => c != d,
        AtomicOp::CswapLe => c <= d,
        AtomicOp::CswapLt => c < d,
        AtomicOp::CswapGe => c >= d,
        AtomicOp::CswapGt => c > d,
        _ => false,
    };
    if swap {
        s
    } else {
        d
    }
}

macro_rules! int_apply {
    ($t:ty, $op:expr, $dst:expr, $src:expr, $cmp:expr) => {{
        let d: $t = <$t>::from_le_bytes($dst.try_into().map_err(|_| AtomicError::Length)?);
        let s: $t = <$t>::from_le_bytes($src.try_into().map_err(|_| AtomicError::Length)?);
        let c: $t = match $cmp {
            Some(c) => <$t>::from_le_bytes(c.try_into().map_err(|_| AtomicError::Length)?),
            None => 0,
        };
        let zero: $t = 0;
        let b = |x: bool| if x { 1 as $t } else { zero };
        let r: $t = match $op {
            AtomicOp::Min => d.min(s),
            AtomicOp::Max => d.max(s),
            AtomicOp::Sum => d.wrapping_add(s),
            AtomicOp::Prod => d.wrapping_mul(s),
            AtomicOp::Lor => b(d != zero || s != zero),
            AtomicOp::Land => b(d != zero && s != zero),
            AtomicOp::Bor => d | s,
            AtomicOp::Band => d & s,
            AtomicOp::Lxor => b((d != zero) ^ (s != zero)),
            AtomicOp::Bxor => d ^ s,
            AtomicOp::Read => d,
            AtomicOp::Write => s,
            AtomicOp::Cswap
            | AtomicOp::CswapNe
            | AtomicOp::CswapLe
            | AtomicOp::CswapLt
            | AtomicOp::CswapGe
            | AtomicOp::CswapGt => compare_swap($op, d, s, c),
            AtomicOp::Mswap => (s & c) | (d & !c),
        };
        $dst.copy_from_slice(&r.to_le_bytes());
    }};
}

macro_rules! float_apply {
    ($t:ty, $op:expr, $dst:expr, $src:expr, $cmp:expr) => {{
        let d: $t = <$t>::from_le_bytes($dst.try_into().map_err(|_| AtomicError::Length)?);
        let s: $t = <$t>::from_le_bytes($src.try_into().map_err(|_| AtomicError::Length)?);
        let c: $t = match $cmp {
            Some(c) => <$t>::from_le_bytes(c.try_into().map_err(|_| AtomicError::Length)?),
            None => 0.0,
        };
        let r: $t = match $op {
            AtomicOp::Min => {
                if s < d {
                    s
                } else {
                    d
                }
            }
            AtomicOp::Max => {
                if s > d {
                    s
                } else {
                    d
                }
            }
            AtomicOp::Sum => d + s,
            AtomicOp::Prod => d * s,
            AtomicOp::Read => d,
            AtomicOp::Write => s,
            AtomicOp::Cswap
            | AtomicOp::CswapNe
            | AtomicOp::CswapLe
            | AtomicOp::CswapLt
            | AtomicOp::CswapGe
            | AtomicOp::CswapGt => compare_swap($op, d, s, c),
            _ => return Err(AtomicError::OpNotValidForType),
        };
        $dst.copy_from_slice(&r.to_le_bytes());
    }};
}

/// Applies `op` element-wise to `target` with operand `src` (and `compare` for the
/// compare family), returning the original target bytes (what FETCH/COMPARE return).
pub fn apply(
    dt: Datatype,
    op: AtomicOp,
    target: &mut [u8],
    src: &[u8],
    compare: Option<&[u8]>,
) -> Result<Vec<u8>, AtomicError> {
    if !op.valid_for(dt) {
        return Err(AtomicError::OpNotValidForType);
    }
    let n = dt.size();
    let reads = op == AtomicOp::Read;
    if target.len() % n != 0
        || (!reads && src.len() != target.len())
        || compare.is_some_and(|c| c.len() != target.len())
        || (op.is_compare() && compare.is_none())
    {
        return Err(AtomicError::Length);
    }
    let old = target.to_vec();
    if reads {
        return Ok(old);
    }
    for (i, dst) in target.chunks_exact_mut(n).enumerate() {
        let s = &src[i * n..(i + 1) * n];
        let c = compare.map(|c| &c[i * n..(i + 1) * n]);
        match dt {
            Datatype::I8 => int_apply!(i8, op, dst, s, c),
            Datatype::U8 => int_apply!(u8, op, dst, s, c),
            Datatype::I16 => int_apply!(i16, op, dst, s, c),
            Datatype::U16 => int_apply!(u16, op, dst, s, c),
            Datatype::I32 => int_apply!(i32, op, dst, s, c),
            Datatype::U32 => int_apply!(u32, op, dst, s, c),
            Datatype::I64 => int_apply!(i64, op, dst, s, c),
            Datatype::U64 => int_apply!(u64, op, dst, s, c),
            Datatype::F32 => float_apply!(f32, op, dst, s, c),
            Datatype::F64 => float_apply!(f64, op, dst, s, c),
        }
    }
    Ok(old)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64s(v: &[u64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn integer_ops() {
        let cases: &[(AtomicOp, u64, u64, Option<u64>, u64)] = &[
            (AtomicOp::Sum, 5, 7, None, 12),
            (AtomicOp::Prod, 5, 7, None, 35),
            (AtomicOp::Min, 5, 7, None, 5),
            (AtomicOp::Max, 5, 7, None, 7),
            (AtomicOp::Bor, 0b1010, 0b0110, None, 0b1110),
            (AtomicOp::Band, 0b1010, 0b0110, None, 0b0010),
            (AtomicOp::Bxor, 0b1010, 0b0110, None, 0b1100),
            (AtomicOp::Lor, 0, 3, None, 1),
            (AtomicOp::Land, 0, 3, None, 0),
            (AtomicOp::Lxor, 2, 3, None, 0),
            (AtomicOp::Write, 2, 3, None, 3),
            (AtomicOp::Cswap, 2, 9, Some(2), 9),
            (AtomicOp::Cswap, 2, 9, Some(1), 2),
            (AtomicOp::CswapNe, 2, 9, Some(1), 9),
            (AtomicOp::CswapLe, 2, 9, Some(1), 9),
            (AtomicOp::CswapLt, 2, 9, Some(2), 2),
            (AtomicOp::CswapGe, 2, 9, Some(3), 9),
            (AtomicOp::CswapGt, 2, 9, Some(2), 2),
            (AtomicOp::Mswap, 0xF0F0, 0x1234, Some(0x00FF), 0xF034),
        ];
        for &(op, t, s, c, want) in cases {
            let mut target = u64s(&[t]);
            let cmp = c.map(|c| u64s(&[c]));
            let old = apply(Datatype::U64, op, &mut target, &u64s(&[s]), cmp.as_deref()).unwrap();
            assert_eq!(old, u64s(&[t]), "{op:?}");
            assert_eq!(target, u64s(&[want]), "{op:?}");
        }
    }

    #[test]
    fn float_compare_swap_family() {
        // (op, target, source, comparand, result): the same rule as the integer table.
        let cases: &[(AtomicOp, f64, f64, f64, f64)] = &[
            (AtomicOp::Cswap, 2.0, 9.5, 2.0, 9.5),
            (AtomicOp::Cswap, 2.0, 9.5, 1.0, 2.0),
            (AtomicOp::CswapNe, 2.0, 9.5, 1.0, 9.5),
            (AtomicOp::CswapNe, 2.0, 9.5, 2.0, 2.0),
            (AtomicOp::CswapLe, 2.0, 9.5, 1.0, 9.5),
            (AtomicOp::CswapLe, 2.0, 9.5, 3.0, 2.0),
            (AtomicOp::CswapLt, 2.0, 9.5, 2.0, 2.0),
            (AtomicOp::CswapLt, 2.0, 9.5, 1.5, 9.5),
            (AtomicOp::CswapGe, 2.0, 9.5, 3.0, 9.5),
            (AtomicOp::CswapGe, 2.0, 9.5, 1.0, 2.0),
            (AtomicOp::CswapGt, 2.0, 9.5, 2.0, 2.0),
            (AtomicOp::CswapGt, 2.0, 9.5, 2.5, 9.5),
        ];
        for &(op, t, src, c, want) in cases {
            let mut target = t.to_le_bytes().to_vec();
            let old = apply(
                Datatype::F64,
                op,
                &mut target,
                &src.to_le_bytes(),
                Some(&c.to_le_bytes()[..]),
            )
            .unwrap();
            assert_eq!(old, t.to_le_bytes(), "{op:?}");
            assert_eq!(target, want.to_le_bytes(), "{op:?}");
        }
    }

    #[test]
    fn signed_min_and_float_sum() {
        let mut t = (-3i32).to_le_bytes().to_vec();
        apply(
            Datatype::I32,
            AtomicOp::Min,
            &mut t,
            &2i32.to_le_bytes(),
            None,
        )
        .unwrap();
        assert_eq!(t, (-3i32).to_le_bytes());
        let mut f = 1.5f64.to_le_bytes().to_vec();
        apply(
            Datatype::F64,
            AtomicOp::Sum,
            &mut f,
            &2.25f64.to_le_bytes(),
            None,
        )
        .unwrap();
        assert_eq!(f64::from_le_bytes(f.try_into().unwrap()), 3.75);
        let mut g = 1.0f32.to_le_bytes().to_vec();
        assert_eq!(
            apply(Datatype::F32, AtomicOp::Bor, &mut g, &[0; 4], None),
            Err(AtomicError::OpNotValidForType)
        );
        assert_eq!(
            apply(Datatype::U32, AtomicOp::Sum, &mut g, &[0; 3], None),
            Err(AtomicError::Length)
        );
    }
}

//! Total big-endian byte access: reads outside the slice yield 0 and writes
//! outside it are dropped. Views call these only at offsets their
//! `new_checked` proved in range, so the fallback never triggers on checked
//! views; it exists so that no input (nor `new_unchecked` misuse) can panic.
//! The cost is the same bounds check indexing would do.

#[inline(always)]
pub(crate) fn u8_at(b: &[u8], off: usize) -> u8 {
    b.get(off).copied().unwrap_or(0)
}

#[inline(always)]
pub(crate) fn u16_at(b: &[u8], off: usize) -> u16 {
    match b.get(off..) {
        Some([x0, x1, ..]) => u16::from_be_bytes([*x0, *x1]),
        _ => 0,
    }
}

#[inline(always)]
pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    match b.get(off..) {
        Some([x0, x1, x2, x3, ..]) => u32::from_be_bytes([*x0, *x1, *x2, *x3]),
        _ => 0,
    }
}

#[inline(always)]
pub(crate) fn array_at<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = b.get(off..).and_then(|s| s.get(..N)) {
        out.copy_from_slice(src);
    }
    out
}

#[inline(always)]
pub(crate) fn set_u8(b: &mut [u8], off: usize, v: u8) {
    if let Some(x) = b.get_mut(off) {
        *x = v;
    }
}

#[inline(always)]
pub(crate) fn set_u16(b: &mut [u8], off: usize, v: u16) {
    if let Some([x0, x1, ..]) = b.get_mut(off..) {
        [*x0, *x1] = v.to_be_bytes();
    }
}

#[inline(always)]
pub(crate) fn set_u32(b: &mut [u8], off: usize, v: u32) {
    if let Some([x0, x1, x2, x3, ..]) = b.get_mut(off..) {
        [*x0, *x1, *x2, *x3] = v.to_be_bytes();
    }
}

#[inline(always)]
pub(crate) fn set_bytes(b: &mut [u8], off: usize, v: &[u8]) {
    if let Some(dst) = b.get_mut(off..).and_then(|s| s.get_mut(..v.len())) {
        dst.copy_from_slice(v);
    }
}

/// `b[start..end]`, or empty when out of range.
#[inline(always)]
pub(crate) fn sub(b: &[u8], start: usize, end: usize) -> &[u8] {
    b.get(start..end).unwrap_or(&[])
}

/// Mutable `b[start..end]`, or empty when out of range.
#[inline(always)]
pub(crate) fn sub_mut(b: &mut [u8], start: usize, end: usize) -> &mut [u8] {
    b.get_mut(start..end).unwrap_or(&mut [])
}

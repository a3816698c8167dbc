//! Software prefetch by reference: the line holding a value, or the line just past it (where a
//! `SmallVec` keeps its capacity word). A prefetch, unlike a load, does not hold up
//! retirement, so the misses of several packets ahead overlap. `upf-prefetch` wraps the one
//! intrinsic; this crate stays `forbid(unsafe_code)`.

/// Prefetches the cache line holding the start of `x`.
#[inline(always)]
pub(crate) fn line<T>(x: &T) {
    upf_prefetch::l1_ref(x);
}

/// Prefetches the cache line just past `x`.
#[inline(always)]
pub(crate) fn past<T>(x: &T) {
    upf_prefetch::l1(std::slice::from_ref(x), 1);
}

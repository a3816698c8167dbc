//! Software prefetch of the cache line holding `slice[i]`, into L1 ([`l1`]) or only into L2
//! ([`l2`]). A prefetch is a hint: it never faults, reads nothing into a register and changes
//! no memory, whatever the address; an index past the end of the slice is allowed (the
//! address is computed with `wrapping_add` and never dereferenced).
//!
//! Why L2: the pipeline prefetches some six lines a packet, eight packets ahead. Into L1 each
//! one holds an L1 miss buffer until its line arrives, and there are far fewer of those than
//! lines in flight; into L2 they queue at the L2, which keeps more misses in flight, and the
//! later demand load costs an L2 hit (docs/benchmarks/datapath-memory.md).
#![allow(unsafe_code)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};

/// Prefetches the line holding `data[i]` into every cache level.
#[inline(always)]
pub fn l1<T>(data: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let p = data.as_ptr().wrapping_add(i).cast::<i8>();
        // SAFETY: PREFETCHT0 is a hint that never faults and never accesses memory
        // architecturally; any address is allowed. SSE is part of the x86_64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, i);
}

/// Prefetches the line holding `data[i]` into L2 (and the levels below), not L1.
#[inline(always)]
pub fn l2<T>(data: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let p = data.as_ptr().wrapping_add(i).cast::<i8>();
        // SAFETY: as in `l1`: PREFETCHT1 is a hint that never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, i);
}

/// [`l1`] of the line holding the start of `x`.
#[inline(always)]
pub fn l1_ref<T>(x: &T) {
    l1(std::slice::from_ref(x), 0);
}

/// [`l2`] of the line holding the start of `x`.
#[inline(always)]
pub fn l2_ref<T>(x: &T) {
    l2(std::slice::from_ref(x), 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_index_is_a_harmless_hint() {
        let v = [1u64, 2, 3];
        for i in [0, 2, 3, 1 << 20, usize::MAX] {
            l1(&v, i);
            l2(&v, i);
        }
        l1_ref(&v);
        l2_ref(&v[1]);
        let empty: [u8; 0] = [];
        l1(&empty, 0);
        l2(&empty, 5);
        assert_eq!(v, [1, 2, 3]);
    }
}

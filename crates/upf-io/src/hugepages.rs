//! A global allocator that backs large allocations (≥ 2 MiB: session tables, hot records,
//! packet pools) with transparent huge pages, so that a packet touching a random session
//! does not also pay a page walk through 4 KiB pages (docs/benchmarks/datapath-memory.md). Small allocations go to the system allocator untouched. Binaries opt
//! in with `#[global_allocator] static A: upf_io::hugepages::HugePageAlloc = HugePageAlloc;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

/// The size of a huge page on x86-64 and arm64 (4 KiB base pages), and the threshold.
pub const HUGE_PAGE: usize = 2 << 20;

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns huge-page backing of later large allocations on or off (for A/B measurements).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

#[derive(Debug, Clone, Copy, Default)]
pub struct HugePageAlloc;

/// Large blocks are aligned to a huge page whether or not advice is on, so that `dealloc`
/// can tell the layout from the size alone.
fn large(l: Layout) -> Option<Layout> {
    if l.size() < HUGE_PAGE {
        return None;
    }
    Layout::from_size_align(l.size(), l.align().max(HUGE_PAGE)).ok()
}

fn advise(p: *mut u8, size: usize) {
    if !p.is_null() && ENABLED.load(Ordering::Relaxed) {
        // SAFETY: `p` is the start of a live block of `size` octets we just allocated, aligned
        // to a huge page; MADV_HUGEPAGE only changes how the kernel backs those pages (it
        // neither frees nor moves them), and a failure (THP off) is harmless and ignored.
        unsafe {
            libc::madvise(p.cast(), size, libc::MADV_HUGEPAGE);
        }
    }
}

// SAFETY: every block comes from `System` with the layout `large` gives (or the caller's, for
// small ones), and is returned to `System` with that same layout; `realloc` of a block that
// crosses the threshold allocates anew, copies the smaller size and frees the old block.
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        match large(l) {
            Some(big) => {
                // SAFETY: `big` has a non-zero size (≥ 2 MiB) and a valid alignment.
                let p = unsafe { System.alloc(big) };
                advise(p, big.size());
                p
            }
            // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
            None => unsafe { System.alloc(l) },
        }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        match large(l) {
            Some(big) => {
                // SAFETY: as in `alloc`.
                let p = unsafe { System.alloc_zeroed(big) };
                advise(p, big.size());
                p
            }
            // SAFETY: the caller's layout.
            None => unsafe { System.alloc_zeroed(l) },
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` was allocated by `alloc`/`realloc` with this layout, hence by `System`
        // with `large(l)` (if large) or `l`.
        unsafe { System.dealloc(p, large(l).unwrap_or(l)) }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        if l.size() < HUGE_PAGE && new_size < HUGE_PAGE {
            // SAFETY: small to small: the system allocator's own realloc, same layout rules.
            return unsafe { System.realloc(p, l, new_size) };
        }
        let Ok(new) = Layout::from_size_align(new_size, l.align()) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `new` has a non-zero size (the caller guarantees new_size > 0).
        let q = unsafe { self.alloc(new) };
        if !q.is_null() {
            // SAFETY: both blocks are live, distinct, and at least `min` octets long.
            unsafe {
                std::ptr::copy_nonoverlapping(p, q, l.size().min(new_size));
                self.dealloc(p, l);
            }
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_are_aligned_and_round_trip() {
        let a = HugePageAlloc;
        for size in [64, HUGE_PAGE - 1, HUGE_PAGE, 3 * HUGE_PAGE + 5] {
            let l = Layout::from_size_align(size, 8).unwrap();
            // SAFETY: non-zero layouts; every block written within bounds and freed with its
            // own layout.
            unsafe {
                let p = a.alloc_zeroed(l);
                assert!(!p.is_null());
                if size >= HUGE_PAGE {
                    assert_eq!(p as usize % HUGE_PAGE, 0);
                }
                *p.add(size - 1) = 7;
                // Grow across the threshold and back, keeping the contents.
                let q = a.realloc(p, l, size * 2 + HUGE_PAGE);
                assert_eq!(*q.add(size - 1), 7);
                let l2 = Layout::from_size_align(size * 2 + HUGE_PAGE, 8).unwrap();
                let r = a.realloc(q, l2, size);
                assert_eq!(*r.add(size - 1), 7);
                a.dealloc(r, l);
            }
        }
    }
}

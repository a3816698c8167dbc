//! The four single-producer single-consumer rings of an XDP socket, mmap'd from the kernel.
//! Producer and consumer indices are free-running u32s shared with the kernel: the side that
//! owns an index publishes it with a release store after writing (or reading) the entries, and
//! reads the other side's with an acquire load before touching them.

use super::sys::{Mmap, XdpDesc, XdpRingOffset, XDP_RING_NEED_WAKEUP};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};

/// One ring; `T` is `u64` (fill, completion: frame addresses) or [`XdpDesc`] (RX, TX).
#[derive(Debug)]
pub struct Ring<T: Copy> {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut T,
    mask: u32,
    size: u32,
    /// Our copy of the index we own (the producer of a producer ring, the consumer of a
    /// consumer ring).
    local: u32,
    _map: Mmap,
}

// SAFETY: the ring memory is owned by this value (and the kernel); it is used from one thread
// at a time (the owning worker) and the shared words are atomics.
unsafe impl<T: Copy> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Maps the ring of `size` entries described by `off` at page offset `pgoff`.
    pub fn map(
        fd: &OwnedFd,
        off: &XdpRingOffset,
        size: u32,
        pgoff: libc::off_t,
        producer_side: bool,
        what: &str,
    ) -> io::Result<Self> {
        let bytes = usize::try_from(off.desc)
            .ok()
            .and_then(|d| d.checked_add(size as usize * std::mem::size_of::<T>()))
            .ok_or_else(|| io::Error::other(format!("{what}: ring offsets out of range")))?;
        let map = Mmap::ring(fd, bytes, pgoff, what)?;
        let at = |o: u64| -> io::Result<*mut u8> {
            let o = usize::try_from(o).map_err(io::Error::other)?;
            if o + 4 > bytes {
                return Err(io::Error::other(format!(
                    "{what}: ring offset out of range"
                )));
            }
            // SAFETY: o + 4 <= bytes, so the result stays inside the mapping.
            Ok(unsafe { map.ptr.add(o) })
        };
        let producer = at(off.producer)?.cast::<AtomicU32>();
        let consumer = at(off.consumer)?.cast::<AtomicU32>();
        let flags = at(off.flags)?.cast::<AtomicU32>();
        let desc = at(off.desc)?.cast::<T>();
        // SAFETY: producer/consumer point at u32s inside the mapping, aligned by the kernel.
        let local = unsafe {
            if producer_side {
                (*producer).load(Ordering::Relaxed)
            } else {
                (*consumer).load(Ordering::Relaxed)
            }
        };
        Ok(Ring {
            producer,
            consumer,
            flags,
            desc,
            mask: size - 1,
            size,
            local,
            _map: map,
        })
    }

    fn entry(&self, idx: u32) -> *mut T {
        // SAFETY: idx & mask < size, and the mapping holds size entries from desc.
        unsafe { self.desc.add((idx & self.mask) as usize) }
    }

    /// Whether the kernel asks to be woken (XDP_USE_NEED_WAKEUP).
    pub fn needs_wakeup(&self) -> bool {
        // SAFETY: flags points at a u32 inside the mapping.
        unsafe { (*self.flags).load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0 }
    }

    // --- producer side (fill, TX) ---

    /// Free entries we may write.
    pub fn free(&self) -> u32 {
        // SAFETY: consumer points at a u32 inside the mapping; acquire pairs with the
        // kernel's release after it read the entries.
        let cons = unsafe { (*self.consumer).load(Ordering::Acquire) };
        self.size - self.local.wrapping_sub(cons)
    }

    /// Writes one entry at the next free position (the caller checked [`Ring::free`]); it
    /// becomes visible with [`Ring::submit`].
    pub fn push(&mut self, v: T) {
        // SAFETY: the entry is within the ring and, by the free() check, not owned by the
        // kernel until we publish the producer index.
        unsafe { self.entry(self.local).write(v) };
        self.local = self.local.wrapping_add(1);
    }

    /// Publishes the entries pushed so far.
    pub fn submit(&self) {
        // SAFETY: producer points at a u32 inside the mapping; release orders the entry
        // writes before the index.
        unsafe { (*self.producer).store(self.local, Ordering::Release) };
    }

    // --- consumer side (RX, completion) ---

    /// Entries waiting to be read.
    pub fn available(&self) -> u32 {
        // SAFETY: producer points at a u32 inside the mapping; acquire pairs with the
        // kernel's release after writing the entries.
        let prod = unsafe { (*self.producer).load(Ordering::Acquire) };
        prod.wrapping_sub(self.local)
    }

    /// The i-th waiting entry (i < available()).
    pub fn peek(&self, i: u32) -> T {
        // SAFETY: the entry is within the ring and published by the kernel (i < available).
        unsafe { self.entry(self.local.wrapping_add(i)).read() }
    }

    /// Gives `n` read entries back to the kernel.
    pub fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        // SAFETY: consumer points at a u32 inside the mapping; release orders our reads of the
        // entries before the kernel may overwrite them.
        unsafe { (*self.consumer).store(self.local, Ordering::Release) };
    }
}

pub type AddrRing = Ring<u64>;
pub type DescRing = Ring<XdpDesc>;

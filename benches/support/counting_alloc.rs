//! The benches' counting global allocator (`#[path]`-included by `memory.rs` and `sync_loop.rs`): live
//! bytes and their peak, what they cost as glibc malloc chunks, and the allocations made and bytes
//! allocated since start (deterministic per run of the same code, unlike time).
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts live bytes and their peak.
pub struct Counting;

/// Bytes allocated and not freed.
pub static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The highest `LIVE` since it was last reset (store `LIVE` into it to start a measurement).
pub static PEAK: AtomicUsize = AtomicUsize::new(0);
/// What the live blocks cost in glibc malloc (see [`chunk`]): the figure the daemon's heap gauge reads.
pub static CHUNKS: AtomicUsize = AtomicUsize::new(0);
/// Allocations (and growing reallocations) since start.
pub static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
/// Bytes allocated since start (a growing reallocation counts its growth).
pub static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

/// Bytes glibc malloc (64-bit) spends on a block of `size` bytes: the size plus an 8-byte header,
/// rounded up to 16, at least 32; from the daemon's fixed 128 KiB mmap threshold on, its own pages.
pub fn chunk(size: usize) -> usize {
    if size >= 128 * 1024 {
        return (size + 16).div_ceil(4096) * 4096;
    }
    ((size + 8 + 15) & !15).max(32)
}

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    ALLOCATED.fetch_add(by, Ordering::Relaxed);
}

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
            CHUNKS.fetch_add(chunk(layout.size()), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        CHUNKS.fetch_sub(chunk(layout.size()), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            CHUNKS.fetch_sub(chunk(layout.size()), Ordering::Relaxed);
            CHUNKS.fetch_add(chunk(new_size), Ordering::Relaxed);
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Allocations, bytes allocated and the peak above the start, over one stretch of work.
#[derive(Debug, Clone, Copy)]
pub struct AllocMeter {
    allocations: usize,
    allocated: usize,
    live: usize,
}

/// What [`AllocMeter::stop`] measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllocCounts {
    pub allocations: usize,
    pub allocated: usize,
    /// The highest live bytes above the start.
    pub peak: usize,
}

impl AllocMeter {
    /// Starts a measurement (resets the peak).
    pub fn start() -> AllocMeter {
        let live = LIVE.load(Ordering::Relaxed);
        PEAK.store(live, Ordering::Relaxed);
        AllocMeter {
            allocations: ALLOCATIONS.load(Ordering::Relaxed),
            allocated: ALLOCATED.load(Ordering::Relaxed),
            live,
        }
    }

    /// The counts since [`AllocMeter::start`].
    pub fn stop(self) -> AllocCounts {
        AllocCounts {
            allocations: ALLOCATIONS.load(Ordering::Relaxed) - self.allocations,
            allocated: ALLOCATED.load(Ordering::Relaxed) - self.allocated,
            peak: PEAK.load(Ordering::Relaxed).saturating_sub(self.live),
        }
    }
}

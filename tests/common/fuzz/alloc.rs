//! A counting global allocator, so the fuzz loop can check the memory each case takes. A binary that
//! runs the targets installs it (`#[global_allocator] static A: alloc::Counting = alloc::Counting;`);
//! [`installed`] tells whether it was. Counts are per thread (tests run side by side in one process):
//! a case's figure is what its own thread allocated.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    /// Bytes this thread has allocated and not freed (frees of other threads' memory lower it).
    static CURRENT: Cell<isize> = const { Cell::new(0) };
    /// The most of [`CURRENT`] since the last [`reset_peak`].
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// The system allocator, counting.
pub struct Counting;

fn moved(by: isize) {
    // `try_with`: nothing is counted while the thread's locals are being torn down.
    let _ = CURRENT.try_with(|c| {
        let now = c.get() + by;
        c.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

fn size(n: usize) -> isize {
    isize::try_from(n).unwrap_or(isize::MAX)
}

// SAFETY: every call is forwarded to `System` with the caller's arguments unchanged; the counters are
// thread-local cells with constant initialisers (they never allocate) and never affect the allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            moved(size(layout.size()));
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc` is passed on unchanged.
        unsafe { System.dealloc(ptr, layout) };
        moved(-size(layout.size()));
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc_zeroed` is passed on unchanged.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            moved(size(layout.size()));
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc` is passed on unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            moved(size(new_size) - size(layout.size()));
        }
        p
    }
}

/// Starts a new peak at this thread's current allocation.
pub fn reset_peak() {
    let now = CURRENT.with(Cell::get);
    PEAK.with(|p| p.set(now));
}

/// The most this thread held since [`reset_peak`], above what it held then.
pub fn peak_since_reset(base: isize) -> usize {
    usize::try_from(PEAK.with(Cell::get) - base).unwrap_or(0)
}

/// This thread's current allocation.
pub fn current() -> isize {
    CURRENT.with(Cell::get)
}

/// Whether the counting allocator is the global one (an allocation moves the counter).
pub fn installed() -> bool {
    let before = current();
    let probe = std::hint::black_box(vec![0u8; 4096]);
    let moved = current() != before;
    drop(probe);
    moved
}

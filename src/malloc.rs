//! The C allocator's (glibc malloc) statistics and controls: bytes in use, bytes held free, returning
//! free memory to the kernel and the arena limit. On targets without glibc every reading is `None` and
//! every control does nothing.

/// What glibc malloc holds at one point in time, in bytes (all arenas, from `mallinfo2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeapStats {
    /// Allocated and not yet freed: chunks in use (`uordblks`) plus mmapped blocks (`hblkhd`).
    pub in_use: u64,
    /// Freed but still held by the allocator (`fordblks`): resident until trimmed or reused.
    pub free: u64,
}

/// Current allocator statistics, or `None` where the allocator is not glibc's.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn stats() -> Option<HeapStats> {
    let m = crate::sys::malloc::mallinfo2();
    let bytes = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
    Some(HeapStats {
        in_use: bytes(m.uordblks).saturating_add(bytes(m.hblkhd)),
        free: bytes(m.fordblks),
    })
}

/// Current allocator statistics, or `None` where the allocator is not glibc's.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn stats() -> Option<HeapStats> {
    None
}

/// Log target of [`mark`]: enable it (`KUBE_PROXY_LOG=info,kube_proxy_rs::heap=debug`) to see the heap
/// at each point of a sync that marks it.
pub const MARK_TARGET: &str = "kube_proxy_rs::heap";

/// Logs the bytes in use and held free at `point` of a sync, at debug level on [`MARK_TARGET`]; costs
/// nothing more than a level check while that target is off.
pub fn mark(point: &str) {
    if !tracing::enabled!(target: MARK_TARGET, tracing::Level::DEBUG) {
        return;
    }
    if let Some(s) = stats() {
        let mib = |b: u64| format!("{:.1}", b as f64 / 1048576.0);
        // V(4): several marks per sync; `KUBE_PROXY_LOG` (no V filter) shows them whenever the target is on.
        tracing::debug!(target: MARK_TARGET, v = 4, point, inUseMiB = %mib(s.in_use), freeMiB = %mib(s.free), "Heap");
    }
}

/// Gives free memory of every arena back to the kernel (`malloc_trim(0)`); true when some was released.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim() -> bool {
    crate::sys::malloc::trim()
}

/// Gives free memory back to the kernel; does nothing without glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() -> bool {
    false
}

/// Returns free memory to the kernel when the allocator holds more than `max(min_free, in_use / 8)`
/// free bytes; the statistics before the trim when it trimmed.
pub fn trim_if_wasteful(min_free: u64) -> Option<HeapStats> {
    let s = stats()?;
    if s.free <= min_free.max(s.in_use / 8) {
        return None;
    }
    trim();
    Some(s)
}

/// When to look for free memory to trim: at most once per `interval`.
#[derive(Debug, Clone)]
pub struct TrimSchedule {
    interval: std::time::Duration,
    last: Option<std::time::Instant>,
}

impl TrimSchedule {
    /// A schedule whose first check is due at once.
    pub fn new(interval: std::time::Duration) -> Self {
        TrimSchedule {
            interval,
            last: None,
        }
    }

    /// Whether a check is due at `now`; a due check counts as done.
    pub fn due(&mut self, now: std::time::Instant) -> bool {
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < self.interval)
        {
            return false;
        }
        self.last = Some(now);
        true
    }
}

/// Most arenas the daemon's allocator keeps ([`configure`]): one per busy thread (a watcher's worker and
/// the sync's blocking thread); more only spread fragmentation over more memory.
pub const ARENA_MAX: i32 = 2;
/// Allocations from this size on get their own mapping and go back to the kernel when freed
/// ([`configure`]); glibc's default starts here too but raises it to the largest block freed so far (up
/// to 32 MiB), after which the sync's large transient buffers stay resident in the heap.
pub const MMAP_THRESHOLD: i32 = 128 * 1024;

/// Sets the allocator up for a long-running daemon: at most [`ARENA_MAX`] arenas and a fixed
/// [`MMAP_THRESHOLD`]. Call before starting threads. Returns false when the allocator refused a setting
/// or is not glibc's.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn configure() -> bool {
    let arenas = crate::sys::malloc::mallopt(libc::M_ARENA_MAX, ARENA_MAX);
    let mmap = crate::sys::malloc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    arenas && mmap
}

/// Sets the allocator up for a long-running daemon; does nothing without glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn configure() -> bool {
    false
}

#[cfg(test)]
mod schedule_tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn trim_checks_are_due_at_most_once_per_interval() {
        let mut s = TrimSchedule::new(Duration::from_secs(30));
        let t0 = Instant::now();
        assert!(s.due(t0), "the first check is due at once");
        assert!(!s.due(t0 + Duration::from_secs(29)));
        assert!(s.due(t0 + Duration::from_secs(30)));
        assert!(!s.due(t0 + Duration::from_secs(31)));
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    #[test]
    fn in_use_follows_a_large_live_allocation() {
        let before = stats().expect("glibc").in_use;
        let block = vec![7u8; 64 << 20];
        let during = stats().expect("glibc").in_use;
        assert!(
            during >= before + (60 << 20),
            "in_use {during} after allocating 64 MiB on top of {before}"
        );
        drop(std::hint::black_box(block));
        let after = stats().expect("glibc").in_use;
        assert!(
            after + (32 << 20) < during,
            "in_use {after} after freeing, {during} before"
        );
    }

    #[test]
    fn glibc_accepts_the_daemon_settings() {
        assert!(
            configure(),
            "mallopt refused M_ARENA_MAX or M_MMAP_THRESHOLD"
        );
    }

    #[test]
    fn trim_if_wasteful_skips_a_heap_without_waste() {
        // Nothing to release beyond the threshold: no trim, no statistics.
        assert_eq!(trim_if_wasteful(u64::MAX), None);
    }
}

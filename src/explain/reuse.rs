//! A value computed at most once per period and shared: callers that arrive while it is being computed
//! wait for that computation (single flight) and get its result, as do callers until it is
//! [`Reuse::period`] old.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One shared, briefly reused value.
#[derive(Debug)]
pub struct Reuse<T> {
    period: Duration,
    slot: Mutex<Option<(Instant, T)>>,
}

impl<T: Clone> Reuse<T> {
    /// An empty slot whose values are reused for `period`.
    pub fn new(period: Duration) -> Self {
        Reuse {
            period,
            slot: Mutex::new(None),
        }
    }

    /// How long a value is reused.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The value computed less than [`Reuse::period`] ago, else `compute`'s, computed now while the slot
    /// is held: concurrent callers wait and share it.
    pub fn get(&self, compute: impl FnOnce() -> T) -> T {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, v)) = slot.as_ref()
            && at.elapsed() < self.period
        {
            return v.clone();
        }
        let v = compute();
        *slot = Some((Instant::now(), v.clone()));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn concurrent_callers_share_one_computation() {
        let r = Arc::new(Reuse::new(Duration::from_secs(60)));
        let runs = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (r, runs) = (r.clone(), runs.clone());
                std::thread::spawn(move || {
                    r.get(|| {
                        std::thread::sleep(Duration::from_millis(50));
                        runs.fetch_add(1, Ordering::SeqCst)
                    })
                })
            })
            .collect();
        let got: Vec<u32> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(got.iter().all(|&g| g == 0), "{got:?}");
    }

    #[test]
    fn a_stale_value_is_computed_again() {
        let r = Reuse::new(Duration::ZERO);
        assert_eq!(r.get(|| 1), 1);
        assert_eq!(r.get(|| 2), 2);
        let r = Reuse::new(Duration::from_secs(60));
        assert_eq!(r.get(|| 1), 1);
        assert_eq!(r.get(|| 2), 1);
    }
}

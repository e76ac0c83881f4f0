//! Injectable wall clock: the system's, or (tests) one that moves only when told to.

use std::time::SystemTime;

/// Source of the current wall-clock time.
pub trait Clock: Send + Sync {
    /// Current time.
    fn now(&self) -> SystemTime;
}

/// The real system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that only moves when told to, for deterministic tests.
#[cfg(any(test, feature = "testkit"))]
#[derive(Debug)]
pub struct FakeClock {
    now: std::sync::Mutex<SystemTime>,
}

#[cfg(any(test, feature = "testkit"))]
impl FakeClock {
    /// A fake clock showing `start`.
    pub fn new(start: SystemTime) -> FakeClock {
        FakeClock {
            now: std::sync::Mutex::new(start),
        }
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: std::time::Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now += d;
    }

    /// Sets the clock to `t`.
    pub fn set(&self, t: SystemTime) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }
}

#[cfg(any(test, feature = "testkit"))]
impl Clock for FakeClock {
    fn now(&self) -> SystemTime {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn fake_clock_moves_only_when_told() {
        let c = FakeClock::new(UNIX_EPOCH);
        assert_eq!(c.now(), UNIX_EPOCH);
        c.advance(Duration::from_secs(5));
        assert_eq!(c.now(), UNIX_EPOCH + Duration::from_secs(5));
    }
}

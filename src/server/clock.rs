//! Injectable wall clock and Go-compatible (RFC 3339, nanoseconds) timestamp rendering.

use crate::logging::clock::civil_from_days;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
#[derive(Debug)]
pub struct FakeClock {
    now: Mutex<SystemTime>,
}

impl FakeClock {
    /// A fake clock showing `start`.
    pub fn new(start: SystemTime) -> FakeClock {
        FakeClock {
            now: Mutex::new(start),
        }
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now += d;
    }

    /// Sets the clock to `t`.
    pub fn set(&self, t: SystemTime) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> SystemTime {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What Go's `time.Time{}` marshals to: the zero time, used for "never".
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Renders `t` in UTC the way Go's `time.Time` marshals to JSON (RFC 3339 with up to nine fractional
/// digits, trailing zeros dropped), e.g. `2026-11-22T17:52:59.1234Z`. `None` renders Go's zero time.
pub fn format_rfc3339_nano(t: Option<SystemTime>) -> String {
    let Some(t) = t else {
        return ZERO_TIME.to_string();
    };
    let (secs, nanos) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let mut secs = -(d.as_secs() as i64);
            let mut nanos = d.subsec_nanos();
            if nanos > 0 {
                secs -= 1;
                nanos = 1_000_000_000 - nanos;
            }
            (secs, nanos)
        }
    };
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    let mut out = format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    );
    if nanos > 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_go_rfc3339nano() {
        assert_eq!(
            format_rfc3339_nano(Some(UNIX_EPOCH)),
            "1970-01-01T00:00:00Z"
        );
        // 2026-11-22T17:52:59Z = 1795369979
        let t = UNIX_EPOCH + Duration::new(1_795_369_979, 120_000_000);
        assert_eq!(format_rfc3339_nano(Some(t)), "2026-11-22T17:52:59.12Z");
        let t = UNIX_EPOCH + Duration::new(951_782_400, 1); // 2000-02-29
        assert_eq!(
            format_rfc3339_nano(Some(t)),
            "2000-02-29T00:00:00.000000001Z"
        );
        let t = UNIX_EPOCH - Duration::from_millis(500);
        assert_eq!(format_rfc3339_nano(Some(t)), "1969-12-31T23:59:59.5Z");
        assert_eq!(format_rfc3339_nano(None), ZERO_TIME);
    }

    #[test]
    fn fake_clock_moves_only_when_told() {
        let c = FakeClock::new(UNIX_EPOCH);
        assert_eq!(c.now(), UNIX_EPOCH);
        c.advance(Duration::from_secs(5));
        assert_eq!(c.now(), UNIX_EPOCH + Duration::from_secs(5));
    }
}

//! Polling until a condition holds, for async tests. Standalone, so a test binary takes it alone:
//! `#[path = "common/wait.rs"] pub mod wait;`.

use std::time::{Duration, Instant};

/// How often [`eventually`] and [`within`] check.
pub const POLL: Duration = Duration::from_millis(20);

/// Checks `cond` up to `tries` times, [`POLL`] apart; panics naming `what` if it never held.
pub async fn eventually(tries: u32, what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..tries {
        if cond() {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("timed out waiting for {what}");
}

/// Checks `cond` every [`POLL`] until it holds; panics naming `what` once `timeout` has passed.
pub async fn within(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(POLL).await;
    }
}

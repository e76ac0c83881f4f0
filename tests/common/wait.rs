//! Polling until a condition holds, for async tests.
#![allow(dead_code)]

use std::time::Duration;

/// How often [`eventually`] checks.
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

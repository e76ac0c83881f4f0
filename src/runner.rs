//! Bounded-frequency runner that drives sync_proxy_rules (upstream's `BoundedFrequencyRunner`).
//!
//! Runs a function at most `burst` times in quick succession and then at most once per `min_interval`,
//! at least once per `max_interval`. [`RunnerHandle::run`] requests coalesce; [`RunnerHandle::retry_after`]
//! schedules a retry after a failed sync.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A token bucket: `burst` tokens, refilled at `rate` tokens per second.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. `rate <= 0` means unlimited.
    pub fn new(rate: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn unlimited(&self) -> bool {
        self.rate <= 0.0 || !self.rate.is_finite()
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now;
    }

    /// Takes a token if one is available.
    pub fn try_accept(&mut self, now: Instant) -> bool {
        if self.unlimited() {
            return true;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// How long until a token is available (zero if one is).
    pub fn time_to_token(&mut self, now: Instant) -> Duration {
        if self.unlimited() {
            return Duration::ZERO;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / self.rate)
        }
    }

    /// Empties the bucket as of `now` (the next token comes one interval later).
    pub fn drain(&mut self, now: Instant) {
        self.tokens = 0.0;
        self.last = now;
    }

    /// Takes a token, waiting for one if needed (reserving it, so concurrent callers queue up fairly).
    pub fn reserve(&mut self, now: Instant) -> Duration {
        if self.unlimited() {
            return Duration::ZERO;
        }
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }
}

/// Timing of a [`Runner`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunnerConfig {
    /// Minimum time between runs once the burst is used up (0 = unlimited).
    pub min_interval: Duration,
    /// Maximum time between runs (periodic sync); zero disables periodic runs.
    pub max_interval: Duration,
    /// Runs allowed back to back (upstream's `pkg/util/async` runner uses 2).
    pub burst: u32,
    /// Measure `min_interval` from the end of a run instead of refilling tokens from its start
    /// (upstream's newer `pkg/proxy/runner`, which has no burst; use with `burst: 1`).
    pub cooldown_after_run: bool,
}

impl RunnerConfig {
    /// Upstream's `pkg/util/async.BoundedFrequencyRunner` as kube-proxy used it: burst 2.
    pub fn token_bucket(min_interval: Duration, max_interval: Duration) -> Self {
        Self {
            min_interval,
            max_interval,
            burst: 2,
            cooldown_after_run: false,
        }
    }

    /// Upstream's newer `pkg/proxy/runner.BoundedFrequencyRunner`: `min_interval` between the end of
    /// one run and the start of the next, no burst.
    pub fn cooldown(min_interval: Duration, max_interval: Duration) -> Self {
        Self {
            min_interval,
            max_interval,
            burst: 1,
            cooldown_after_run: true,
        }
    }
}

#[derive(Debug, Default)]
struct Shared {
    run: Notify,
    retry: Notify,
    retry_at: Mutex<Option<Instant>>,
}

/// Cloneable handle to request runs.
#[derive(Debug, Clone)]
pub struct RunnerHandle {
    shared: Arc<Shared>,
}

impl RunnerHandle {
    /// Requests a run as soon as the limits allow; requests made before it starts coalesce.
    pub fn run(&self) {
        self.shared.run.notify_one();
    }

    /// Ensures a run no later than `delay` from now (e.g. after a failed sync).
    pub fn retry_after(&self, delay: Duration) {
        let at = Instant::now() + delay;
        if let Ok(mut slot) = self.shared.retry_at.lock() {
            match *slot {
                Some(existing) if existing <= at => {}
                _ => *slot = Some(at),
            }
        }
        self.shared.retry.notify_one();
    }
}

/// The loop side of the runner; drive it with [`Runner::run`] or [`Runner::run_blocking`].
#[derive(Debug)]
pub struct Runner {
    config: RunnerConfig,
    shared: Arc<Shared>,
}

/// Creates a runner and its handle.
pub fn bounded_frequency_runner(config: RunnerConfig) -> (RunnerHandle, Runner) {
    let shared = Arc::new(Shared::default());
    (
        RunnerHandle {
            shared: shared.clone(),
        },
        Runner { config, shared },
    )
}

const FAR_FUTURE: Duration = Duration::from_secs(86400 * 365);

impl Runner {
    /// Loops until `shutdown` completes, calling `sync` whenever a run is due.
    pub async fn run<F, Fut>(self, mut sync: F, shutdown: impl Future<Output = ()>)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = ()>,
    {
        let cfg = self.config;
        let rate = if cfg.min_interval.is_zero() {
            0.0
        } else {
            1.0 / cfg.min_interval.as_secs_f64()
        };
        let period = if cfg.max_interval.is_zero() {
            FAR_FUTURE
        } else {
            cfg.max_interval
        };
        let mut bucket = TokenBucket::new(rate, cfg.burst, Instant::now());
        let mut deadline = Instant::now() + period;
        tokio::pin!(shutdown);
        loop {
            let attempt = tokio::select! {
                biased;
                _ = &mut shutdown => return,
                _ = self.shared.retry.notified() => {
                    let at = self.shared.retry_at.lock().ok().and_then(|mut s| s.take());
                    if let Some(at) = at {
                        deadline = deadline.min(at);
                    }
                    false
                }
                _ = self.shared.run.notified() => true,
                _ = tokio::time::sleep_until(deadline) => true,
            };
            if !attempt {
                continue;
            }
            let now = Instant::now();
            if bucket.try_accept(now) {
                sync().await;
                let end = Instant::now();
                if cfg.cooldown_after_run {
                    bucket.drain(end);
                }
                deadline = end + period;
            } else {
                // Not allowed yet: try again when a token is back, or at the scheduled time if sooner.
                let next_possible = now + bucket.time_to_token(now);
                deadline = if deadline <= now {
                    next_possible
                } else {
                    deadline.min(next_possible)
                };
            }
        }
    }

    /// Like [`run`](Self::run) but calls a synchronous `sync` on a blocking thread.
    pub async fn run_blocking<F>(self, sync: F, shutdown: impl Future<Output = ()>)
    where
        F: FnMut() + Send + 'static,
    {
        let sync = Arc::new(Mutex::new(sync));
        self.run(
            move || {
                let sync = sync.clone();
                async move {
                    let result = tokio::task::spawn_blocking(move || {
                        if let Ok(mut f) = sync.lock() {
                            f();
                        }
                    })
                    .await;
                    if let Err(e) = result {
                        tracing::error!(error = %e, "Sync function panicked");
                    }
                }
            },
            shutdown,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn token_bucket_refills_at_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1.0, 2, t0);
        assert!(b.try_accept(t0));
        assert!(b.try_accept(t0));
        assert!(!b.try_accept(t0));
        assert_eq!(b.time_to_token(t0), Duration::from_secs(1));
        assert!(!b.try_accept(t0 + Duration::from_millis(999)));
        assert!(b.try_accept(t0 + Duration::from_secs(1)));
        // reserve queues callers up
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(b.reserve(t1), Duration::from_secs(1));
        assert_eq!(b.reserve(t1), Duration::from_secs(2));
    }
}

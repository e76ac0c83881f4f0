//! Bounded-frequency runner behaviour under tokio's paused clock.

use kube_proxy_rs::runner::{RunnerConfig, RunnerHandle, bounded_frequency_runner};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep};

type Log = Arc<Mutex<Vec<Duration>>>;

/// Starts a runner whose sync records its start time (relative to t0) and takes `sync_takes`.
fn start(
    min: u64,
    max: u64,
    sync_takes: Duration,
) -> (RunnerHandle, Log, Instant, oneshot::Sender<()>) {
    let (handle, runner) = bounded_frequency_runner(RunnerConfig {
        min_interval: Duration::from_secs(min),
        max_interval: Duration::from_secs(max),
        burst: 2,
    });
    let log: Log = Arc::default();
    let t0 = Instant::now();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let l = log.clone();
    tokio::spawn(runner.run(
        move || {
            let l = l.clone();
            async move {
                l.lock().unwrap().push(t0.elapsed());
                sleep(sync_takes).await;
            }
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    (handle, log, t0, stop_tx)
}

fn secs(v: &[f64]) -> Vec<Duration> {
    v.iter().map(|s| Duration::from_secs_f64(*s)).collect()
}

async fn settle() {
    // Let spawned tasks run without moving the clock.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

async fn sleep_until_t(t0: Instant, s: f64) {
    tokio::time::sleep_until(t0 + Duration::from_secs_f64(s)).await;
    settle().await;
}

#[tokio::test(start_paused = true)]
async fn periodic_runs_at_max_interval() {
    let (_h, log, t0, _stop) = start(1, 10, Duration::ZERO);
    sleep_until_t(t0, 35.0).await;
    assert_eq!(*log.lock().unwrap(), secs(&[10.0, 20.0, 30.0]));
}

#[tokio::test(start_paused = true)]
async fn burst_of_two_then_min_interval() {
    let (h, log, t0, _stop) = start(1, 100, Duration::ZERO);
    settle().await;
    h.run();
    settle().await;
    h.run();
    settle().await;
    h.run(); // bucket empty: deferred until a token is back (1 s)
    settle().await;
    assert_eq!(*log.lock().unwrap(), secs(&[0.0, 0.0]));
    sleep_until_t(t0, 1.5).await;
    assert_eq!(*log.lock().unwrap(), secs(&[0.0, 0.0, 1.0]));
    // many requests in a row coalesce into one run when the next token arrives
    for _ in 0..5 {
        h.run();
        settle().await;
    }
    sleep_until_t(t0, 10.0).await;
    assert_eq!(*log.lock().unwrap(), secs(&[0.0, 0.0, 1.0, 2.0]));
}

#[tokio::test(start_paused = true)]
async fn requests_during_a_run_coalesce_into_one() {
    let (h, log, t0, _stop) = start(0, 100, Duration::from_secs(5));
    settle().await;
    h.run();
    settle().await;
    for _ in 0..10 {
        h.run();
    }
    sleep_until_t(t0, 30.0).await;
    // one run at 0, one right after it finished at 5, nothing else until the period
    assert_eq!(*log.lock().unwrap(), secs(&[0.0, 5.0]));
}

#[tokio::test(start_paused = true)]
async fn unlimited_when_min_interval_is_zero() {
    let (h, log, _t0, _stop) = start(0, 100, Duration::ZERO);
    settle().await;
    for _ in 0..5 {
        h.run();
        settle().await;
    }
    assert_eq!(log.lock().unwrap().len(), 5);
}

#[tokio::test(start_paused = true)]
async fn retry_after_schedules_earlier_run_only() {
    let (h, log, t0, _stop) = start(1, 10, Duration::ZERO);
    settle().await;
    h.retry_after(Duration::from_secs(3));
    settle().await;
    sleep_until_t(t0, 4.0).await;
    assert_eq!(*log.lock().unwrap(), secs(&[3.0]));
    // the period restarts after a run: next periodic at 13; a later retry (20) does not delay or add
    h.retry_after(Duration::from_secs(16));
    settle().await;
    sleep_until_t(t0, 14.0).await;
    assert_eq!(*log.lock().unwrap(), secs(&[3.0, 13.0]));
}

#[tokio::test(start_paused = true)]
async fn retry_respects_min_interval() {
    let (h, log, t0, _stop) = start(10, 100, Duration::ZERO);
    settle().await;
    h.run();
    settle().await;
    h.run();
    settle().await;
    // both tokens used at t=0; a retry after 1 s must wait for a token (t=10)
    h.retry_after(Duration::from_secs(1));
    settle().await;
    sleep_until_t(t0, 5.0).await;
    assert_eq!(log.lock().unwrap().len(), 2);
    sleep_until_t(t0, 11.0).await;
    assert_eq!(*log.lock().unwrap(), secs(&[0.0, 0.0, 10.0]));
}

#[tokio::test(start_paused = true)]
async fn stops_on_shutdown() {
    let (h, log, t0, stop) = start(0, 10, Duration::ZERO);
    settle().await;
    stop.send(()).unwrap();
    settle().await;
    h.run();
    sleep_until_t(t0, 50.0).await;
    assert!(log.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn blocking_sync_runs_on_blocking_thread() {
    let (handle, runner) = bounded_frequency_runner(RunnerConfig {
        min_interval: Duration::ZERO,
        max_interval: Duration::from_secs(100),
        burst: 2,
    });
    let count = Arc::new(Mutex::new(0u32));
    let c = count.clone();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(
        runner.run_blocking(move || *c.lock().unwrap() += 1, async move {
            let _ = rx.await;
        }),
    );
    handle.run();
    for _ in 0..100 {
        if *count.lock().unwrap() == 1 {
            break;
        }
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(*count.lock().unwrap(), 1);
    tx.send(()).unwrap();
    task.await.unwrap();
}

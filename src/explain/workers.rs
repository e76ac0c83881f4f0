//! The threads explanation work runs on: threads of its own, not tokio's blocking pool (where the sync
//! job runs, which must never queue behind an explanation) nor the async workers (which serve `/healthz`
//! and read the watches), at a lower CPU priority than the rest of the process, and admitting a small,
//! fixed number of jobs: one more is refused at once ([`Busy`]), never queued.

use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use tokio::sync::{Semaphore, oneshot};

/// Nice value of the worker threads (the rest of the process keeps its own, normally 0).
pub const NICE: i32 = 10;

type Job = Box<dyn FnOnce() + Send>;

/// Every slot is taken: the job was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy;

/// A fixed pool of threads with a fixed number of job slots.
pub struct Workers {
    queue: SyncSender<Job>,
    slots: Arc<Semaphore>,
    capacity: usize,
}

/// Lowers the calling thread's CPU priority to [`NICE`] (best effort: on failure it keeps its own).
fn lower_priority() {
    if let Err(e) = crate::sys::process::set_thread_nice(NICE) {
        tracing::debug!(error = %e, "Cannot lower the explanation threads' priority");
    }
}

impl Workers {
    /// Starts `threads` threads named `<name>-<i>` and `slots` job slots (a job holds its slot while it
    /// waits and while it runs).
    pub fn start(name: &str, threads: usize, slots: usize) -> std::io::Result<Workers> {
        let slots = slots.max(1);
        let (queue, rx) = sync_channel::<Job>(slots);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    lower_priority();
                    loop {
                        let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                        match job {
                            Ok(job) => job(),
                            // The pool was dropped.
                            Err(_) => return,
                        }
                    }
                })?;
        }
        Ok(Workers {
            queue,
            slots: Arc::new(Semaphore::new(slots)),
            capacity: slots,
        })
    }

    /// Job slots in all.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Runs `f` on a worker; its result arrives on the receiver. [`Busy`] when every slot is taken. A job
    /// whose receiver is dropped before it starts (the client went away) is skipped.
    pub fn submit<T, F>(&self, f: F) -> Result<oneshot::Receiver<T>, Busy>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let slot = self.slots.clone().try_acquire_owned().map_err(|_| Busy)?;
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _slot = slot;
            if !tx.is_closed() {
                let _ = tx.send(f());
            }
        });
        // Never full: the queue has a place for every slot.
        self.queue.try_send(job).map_err(|_| Busy)?;
        Ok(rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn admits_up_to_its_slots_and_skips_abandoned_jobs() {
        let w = Workers::start("test-explain", 1, 2).unwrap();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let r = release_rx.clone();
        let first = w
            .submit(move || {
                let _ = r.lock().unwrap().recv();
                1
            })
            .unwrap();
        let ran = Arc::new(Mutex::new(false));
        let flag = ran.clone();
        let second = w.submit(move || *flag.lock().unwrap() = true).unwrap();
        assert_eq!(w.submit(|| ()).err(), Some(Busy), "both slots are taken");
        // The client of the queued job goes away: it is skipped, its slot freed.
        drop(second);
        release_tx.send(()).unwrap();
        assert_eq!(first.blocking_recv(), Ok(1));
        // Both slots come back: the first job's when it ends, the abandoned one's when it is skipped.
        let start = std::time::Instant::now();
        while w.slots.available_permits() < 2 {
            assert!(start.elapsed() < Duration::from_secs(5), "slots not freed");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!*ran.lock().unwrap(), "the abandoned job ran");
        let third = w.submit(|| 3).unwrap();
        assert_eq!(third.blocking_recv(), Ok(3));
    }

    #[test]
    fn runs_at_a_lower_priority() {
        let w = Workers::start("test-nice", 1, 1).unwrap();
        let nice = w
            .submit(crate::sys::process::thread_nice)
            .unwrap()
            .blocking_recv()
            .unwrap();
        assert!(nice >= NICE, "nice {nice}");
    }
}

//! `go_goroutines` for the standard dashboards' "Goroutines" panel: this program has no goroutines, so
//! the gauge counts their counterpart, the tasks alive on the async runtime, read at scrape time.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGauge, Opts};

/// The collector; register it once per registry.
#[derive(Clone)]
pub struct TasksCollector {
    gauge: IntGauge,
}

impl TasksCollector {
    /// A collector reporting on the tokio runtime it is scraped from.
    pub fn new() -> Result<TasksCollector, prometheus::Error> {
        let gauge = IntGauge::with_opts(Opts::new(
            "go_goroutines",
            "Tasks alive on the tokio runtime (this program's counterpart of goroutines), read at scrape time",
        ))?;
        Ok(TasksCollector { gauge })
    }
}

impl Collector for TasksCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        // A scrape outside any runtime (a unit test) reports 0.
        let alive = tokio::runtime::Handle::try_current()
            .map(|h| h.metrics().num_alive_tasks())
            .unwrap_or(0);
        self.gauge.set(i64::try_from(alive).unwrap_or(i64::MAX));
        self.gauge.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn counts_tasks_alive_on_the_runtime() {
        let c = TasksCollector::new().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = rx.await;
        });
        let value = |c: &TasksCollector| c.collect()[0].get_metric()[0].get_gauge().value();
        let with_task = value(&c);
        assert!(with_task >= 1.0, "{with_task}");
        tx.send(()).unwrap();
        task.await.unwrap();
        // The finished task is released by the scheduler shortly after its handle resolves.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while value(&c) >= with_task && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(value(&c) < with_task);
    }
}

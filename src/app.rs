//! The daemon entry point: `--cleanup`, `--init-only`, or the running proxier.

use crate::config::Options;
use crate::daemon;
use anyhow::Context;
use std::time::Duration;

/// Runs kube-proxy with resolved options. Returns an error (non-zero exit) when cleanup fails, when
/// start-up fails, or when the daemon stops for a reason other than a signal.
pub fn run(options: Options) -> anyhow::Result<()> {
    tracing::info!(
        node = %options.node_name,
        mode = %options.config.mode,
        config_file = ?options.config_path,
        version = env!("CARGO_PKG_VERSION"),
        "kube-proxy-rs starting"
    );
    tracing::debug!(config = ?options.config, "effective configuration");
    if options.cleanup {
        return daemon::backends::cleanup();
    }
    daemon::backends::cleanup_other_modes();
    if options.init_only {
        return daemon::backends::init_only(&options);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(worker_threads())
        .thread_name("kube-proxy")
        .build()
        .context("starting the tokio runtime")?;
    let result = runtime.block_on(daemon::run(options));
    // Blocking work still running (a kernel step of an unfinished sync, a heap trim) is not waited for.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// Most async worker threads the daemon runs. The workers only decode watch events and serve HTTP; syncs
/// run on the blocking pool. Tokio's default (one per CPU) costs a stack and, through glibc's per-thread
/// arenas, heap fragmentation per CPU on large nodes for no gain.
pub const MAX_WORKER_THREADS: usize = 2;

/// Async worker threads: one per CPU, at most [`MAX_WORKER_THREADS`].
fn worker_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, MAX_WORKER_THREADS)
}

//! The daemon entry point: `--cleanup`, `--init-only`, or the running proxier.

use crate::config::Options;
use crate::daemon;
use anyhow::Context;
use std::time::Duration;

/// Runs kube-proxy with resolved options. Returns an error (non-zero exit) when cleanup fails, when
/// start-up fails, or when the daemon stops for a reason other than a signal.
pub fn run(options: Options) -> anyhow::Result<()> {
    log_startup(&options);
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

/// The start-up lines upstream's operators look for: "Version info" and the runtime's settings (upstream
/// prints its Go runtime's as "Golang settings"; these are the environment variables this binary reads
/// for the same purposes), then the node and configuration at V(2).
fn log_startup(options: &Options) {
    tracing::info!(version = %crate::component::git_version(), "Version info");
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    tracing::info!(
        RUST_BACKTRACE = %env("RUST_BACKTRACE"),
        KUBE_PROXY_LOG = %env(crate::logging::FILTER_ENV),
        KUBE_PROXY_IPTABLES_BACKEND = %env(daemon::backends::BACKEND_ENV),
        workerThreads = worker_threads(),
        "Runtime settings"
    );
    tracing::debug!(
        node = %options.node_name,
        mode = %options.config.mode,
        configFile = %options
            .config_path
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        "Effective configuration"
    );
    tracing::debug!(v = 3, config = ?options.config, "Effective configuration in full");
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

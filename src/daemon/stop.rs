//! Why the daemon stops, and the signals that stop it.

/// Why the daemon stops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM / SIGINT: exit 0, kernel rules stay.
    Signal(&'static str),
    /// The Node's IPs or podCIDRs changed: exit non-zero so the DaemonSet restarts us.
    NodeChanged(String),
    /// The `--config` file changed.
    ConfigChanged(String),
}

/// The first SIGTERM or SIGINT (never, if the SIGTERM handler cannot be installed).
pub(super) async fn wait_for_signal() -> Stop {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "Cannot install the SIGTERM handler");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => Stop::Signal("SIGTERM"),
        _ = tokio::signal::ctrl_c() => Stop::Signal("SIGINT"),
    }
}

//! Exit when the `--config` file changes (upstream watches it and exits so the DaemonSet restarts
//! kube-proxy with the new configuration). A cheap poll of the file's content.

use super::Stop;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often the file is read.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// Starts polling `path`; sends [`Stop::ConfigChanged`] once its content differs from the first read.
/// A file that cannot be read (e.g. mid-replacement) is ignored until it can be read again. As upstream,
/// the daemon then exits with an error and is restarted by its DaemonSet.
pub fn spawn(path: PathBuf, stop: mpsc::UnboundedSender<Stop>) {
    tokio::spawn(async move {
        let initial = tokio::fs::read(&path).await.ok();
        loop {
            tokio::time::sleep(POLL_INTERVAL).await;
            let Ok(now) = tokio::fs::read(&path).await else {
                continue;
            };
            if initial.as_ref() != Some(&now) {
                let why = format!(
                    "content of the proxy server's configuration file was updated ({})",
                    path.display()
                );
                tracing::warn!("{why}");
                let _ = stop.send(Stop::ConfigChanged(why));
                return;
            }
        }
    });
}

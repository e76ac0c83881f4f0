//! Exit when the `--config` file changes (upstream watches it and exits so the DaemonSet restarts
//! kube-proxy with the new configuration). A cheap poll of the file's content.

use super::Stop;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often the file is read.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// The file's content now (read as early as possible, so later edits are seen as changes).
pub fn snapshot(path: &std::path::Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}

/// Starts polling `path`; sends [`Stop::ConfigChanged`] once its content differs from `initial` (a
/// [`snapshot`] taken at start). A file that cannot be read (e.g. mid-replacement) is ignored until it
/// can be read again. As upstream, the daemon then exits with an error and is restarted by its DaemonSet.
pub fn spawn(path: PathBuf, initial: Option<Vec<u8>>, stop: mpsc::UnboundedSender<Stop>) {
    tokio::spawn(async move {
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

//! Exit when the `--config` file changes (upstream watches it and exits so the DaemonSet restarts
//! kube-proxy with the new configuration). A cheap poll of the file's content.

use super::stop::Stop;
use crate::config::file::{FileError, read_limited};
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often the file is read.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// The file's content now (read as early as possible, so later edits are seen as changes), at most
/// [`MAX_FILE_BYTES`](crate::config::file::MAX_FILE_BYTES).
pub fn snapshot(path: &std::path::Path) -> Option<Vec<u8>> {
    read_limited(path).ok()
}

/// Starts polling `path`; sends [`Stop::ConfigChanged`] once its content differs from `initial` (a
/// [`snapshot`] taken at start). A file that cannot be read (e.g. mid-replacement) is ignored until it
/// can be read again. As upstream, the daemon then exits with an error and is restarted by its DaemonSet.
pub fn spawn(path: PathBuf, initial: Option<Vec<u8>>, stop: mpsc::UnboundedSender<Stop>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(POLL_INTERVAL).await;
            let p = path.clone();
            let now = match tokio::task::spawn_blocking(move || read_limited(&p)).await {
                Ok(Ok(bytes)) => Some(bytes),
                // Grown past the limit: changed (and no longer loadable).
                Ok(Err(FileError::TooLarge { .. })) => None,
                _ => continue,
            };
            if initial != now {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_edit_after_the_snapshot_stops_the_daemon() {
        let dir = std::env::temp_dir().join(format!("kp-watch-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.yaml");
        std::fs::write(&path, "mode: ipvs\n").unwrap();
        let initial = snapshot(&path);
        // Edited before the poller starts: still a change against the snapshot.
        std::fs::write(&path, "mode: ipvs\n# edited\n").unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        spawn(path.clone(), initial, tx);
        let stop = tokio::time::timeout(POLL_INTERVAL * 3, rx.recv())
            .await
            .expect("no stop after an edit")
            .unwrap();
        assert!(
            matches!(&stop, Stop::ConfigChanged(why) if why.contains("configuration file was updated")),
            "{stop:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn an_unchanged_or_missing_file_does_not() {
        let dir = std::env::temp_dir().join(format!("kp-watch-config-same-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.yaml");
        std::fs::write(&path, "mode: ipvs\n").unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        spawn(path.clone(), snapshot(&path), tx);
        tokio::time::sleep(POLL_INTERVAL + POLL_INTERVAL / 2).await;
        std::fs::remove_file(&path).unwrap();
        let r = tokio::time::timeout(POLL_INTERVAL * 2, rx.recv()).await;
        assert!(r.is_err(), "unexpected stop: {r:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

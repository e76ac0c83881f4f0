//! The test API server as a standalone process, for the demo and manual runs of the real binary. It is a
//! tool, not a test: `#[ignore]`d, it runs only when asked for:
//!
//! ```sh
//! KPRS_APISERVER_ADDR=127.0.0.1:6443 KPRS_APISERVER_OBJECTS=cluster.yaml \
//! KPRS_APISERVER_KUBECONFIG=/tmp/kubeconfig \
//!   cargo test --test apiserver_serve -- --ignored --exact serve --nocapture
//! ```
//!
//! - `KPRS_APISERVER_ADDR`: listen address (default `127.0.0.1:0`, a free port).
//! - `KPRS_APISERVER_OBJECTS`: multi-document YAML of Services/EndpointSlices/Nodes; re-read every 500 ms and
//!   synced (changed objects applied, removed ones deleted) whenever its content changes.
//! - `KPRS_APISERVER_KUBECONFIG`: where to write a kubeconfig for it.
//! - `KPRS_APISERVER_SECONDS`: stop after this many seconds (default: run until killed).
//!
//! Prints `listening on <url>` once serving, and one line per sync.
mod common {
    pub mod apiserver;
}

use common::apiserver::TestApiServer;
use std::io::Write;
use std::time::{Duration, Instant};

#[test]
#[ignore = "standalone server for demos; run explicitly"]
fn serve() {
    let addr = std::env::var("KPRS_APISERVER_ADDR").unwrap_or_else(|_| "127.0.0.1:0".into());
    let api = TestApiServer::start(addr.as_str()).unwrap();
    if let Ok(path) = std::env::var("KPRS_APISERVER_KUBECONFIG") {
        api.write_kubeconfig(&path).unwrap();
        println!("kubeconfig written to {path}");
    }
    let objects = std::env::var("KPRS_APISERVER_OBJECTS").ok();
    let stop_at = std::env::var("KPRS_APISERVER_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(|s| Instant::now() + Duration::from_secs(s));
    let mut last = None;
    let mut announced = false;
    loop {
        if let Some(path) = &objects {
            match std::fs::read_to_string(path) {
                Ok(text) if last.as_ref() != Some(&text) => {
                    match api.sync_yaml(&text) {
                        Ok(r) => println!(
                            "synced {path}: {} applied, {} deleted, {} unchanged (resourceVersion {})",
                            r.applied.len(),
                            r.deleted.len(),
                            r.unchanged,
                            api.resource_version()
                        ),
                        Err(e) => println!("not synced {path}: {e:#}"),
                    }
                    last = Some(text);
                }
                Ok(_) => {}
                Err(e) => println!("cannot read {path}: {e}"),
            }
        }
        if !announced {
            println!("listening on {}", api.url());
            announced = true;
        }
        let _ = std::io::stdout().flush();
        if stop_at.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

//! End to end: what the real daemon costs the API server to program 1,000 Services × 2 ports × 2
//! endpoints (issue 29 §4), in each of protobuf/JSON × gzip/none. The test API server serves lists as
//! kube-apiserver does (`resourceVersion=0` whole from the watch cache, gzip past 128 KiB when asked)
//! and counts every TCP connection it accepts (closed ones too) and every byte it sends on them, HTTP
//! heads and chunk framing included. One daemon run per combination, from its start until it has
//! programmed every Service and holds its three watches; the kubeconfig's `disable-compression: true`
//! turns gzip off, `clientConnection.contentType` picks the encoding.
//!
//! Prints `api-bytes:` lines (the figures of docs/performance.md) and checks that gzip at least halves
//! the bytes of either encoding.
mod common;

use common::api_bytes::{self, UPSTREAM_BYTES_1000};
use common::apiserver::{Kind, Options as ApiOptions, TestApiServer};
use common::e2e::{E2e, Options, boot, ipvs};
use std::time::Duration;

/// Services in the scenario.
const N: usize = 1000;

/// (name, JSON, gzip).
const RUNS: &[(&str, bool, bool)] = &[
    ("protobuf+gzip", false, true),
    ("protobuf", false, false),
    ("json+gzip", true, true),
    ("json", true, false),
];

/// `text` with `line` inserted after the first line containing `after`.
fn insert_after(text: &str, after: &str, line: &str) -> String {
    let mut out = String::new();
    let mut done = false;
    for l in text.lines() {
        out.push_str(l);
        out.push('\n');
        if !done && l.contains(after) {
            out.push_str(line);
            done = true;
        }
    }
    assert!(done, "no line with {after:?} in:\n{text}");
    out
}

/// ClusterIP virtual servers of the scenario in `ipvsadm -Sn` text.
fn programmed(ipvs_text: &str) -> usize {
    ipvs_text
        .lines()
        .filter(|l| l.starts_with("-A -t 10.97."))
        .count()
}

uml_test!(api_bytes_per_encoding_and_compression, boot(), {
    let api_opts = ApiOptions {
        watch_cache_lists: true,
        bookmark_interval: Duration::from_secs(3600),
        ..ApiOptions::default()
    };
    let api = TestApiServer::start_with("127.0.0.1:0", api_opts).expect("test API server");
    api_bytes::load(&api, N);
    let root = common::uml::guest_run_dir().expect("guest run dir");
    let mut e = E2e::start_with_api(
        Options {
            dir: Some(root.join("api-bytes")),
            ..Options::default()
        },
        api,
    );
    let config = std::fs::read_to_string(&e.config_path).expect("config");
    let kubeconfig_path = e.dir.join("kubeconfig");
    let kubeconfig = std::fs::read_to_string(&kubeconfig_path).expect("kubeconfig");
    let mut figures = Vec::new();
    for (name, json, gzip) in RUNS {
        let c = if *json {
            insert_after(&config, "kubeconfig:", "  contentType: application/json\n")
        } else {
            config.clone()
        };
        std::fs::write(&e.config_path, c).expect("write config");
        let kc = if *gzip {
            kubeconfig.clone()
        } else {
            insert_after(&kubeconfig, "server:", "    disable-compression: true\n")
        };
        std::fs::write(&kubeconfig_path, kc).expect("write kubeconfig");
        let before = e.api.traffic();
        let compressed0 = e.api.compressed().0;
        e.start_daemon();
        e.wait_ipvs(&format!("{name}: every Service"), |t| {
            programmed(t) == 2 * N
        });
        e.wait_for(
            &format!("{name}: three watches"),
            Duration::from_secs(30),
            |e| {
                [Kind::Service, Kind::EndpointSlice, Kind::Node]
                    .iter()
                    .all(|k| e.api.open_watches(*k) >= 1)
            },
        );
        e.stop_daemon();
        let t = e.api.traffic().since(before);
        let compressed = e.api.compressed().0 - compressed0;
        println!(
            "api-bytes: run={name} services={N} bytes={} connections={} request_bytes={} \
             compressed_responses={compressed} bytes_vs_upstream={:.2}",
            t.sent,
            t.connections,
            t.received,
            t.sent as f64 / UPSTREAM_BYTES_1000 as f64
        );
        figures.push((*name, t));
        assert!(programmed(&ipvs()) == 2 * N);
    }
    let bytes = |n: &str| {
        figures
            .iter()
            .find(|(name, _)| *name == n)
            .map(|(_, t)| t.sent as f64)
            .unwrap_or(f64::NAN)
    };
    println!(
        "api-bytes: ratios protobuf+gzip/json={:.3} protobuf/json={:.3} json+gzip/json={:.3} \
         protobuf+gzip/protobuf={:.3}",
        bytes("protobuf+gzip") / bytes("json"),
        bytes("protobuf") / bytes("json"),
        bytes("json+gzip") / bytes("json"),
        bytes("protobuf+gzip") / bytes("protobuf")
    );
    assert!(
        bytes("protobuf+gzip") * 2.0 < bytes("protobuf"),
        "{figures:?}"
    );
    assert!(bytes("json+gzip") * 2.0 < bytes("json"), "{figures:?}");
    for (name, t) in &figures {
        // The watchers' client and the Event publisher's: at least one connection each.
        assert!(t.connections >= 2, "{name}: {t:?}");
    }
});

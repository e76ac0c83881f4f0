//! JSON vs protobuf, with and without gzip, on the watch path (issues 22 and 29): `cargo bench --bench
//! wire` (sizes: `KPRS_WIRE_SIZES`, default `1000,10000,50000`; burst size: `KPRS_WIRE_BURST`, default
//! 10000).
//!
//! Per N and combination (JSON/protobuf × gzip/none), the daemon's own watchers (`cluster::watch::start`,
//! the list-watch loop and the lenient decoders, feeding the change trackers, over the daemon's own HTTP
//! stack: `transport::build`, which asks for gzip unless `disable_compression`) run on one thread with a
//! current-thread runtime against the in-process test API server (N scale-scenario Services with
//! 2-endpoint slices, and the Node), which serves lists as kube-apiserver does (`resourceVersion=0`
//! whole, gzip past 128 KiB when asked): the initial list (bytes on the wire, HTTP included, and body
//! bytes before compression; connections opened; CPU time of the watcher thread; wall time) and a
//! burst of EndpointSlice updates (each one a watch event; watches are never compressed) until the
//! trackers have recorded all of them. The server runs on other threads; its encoding cost is not
//! counted, its gzip time is printed. Then the upstream harness's shape (`tests/common/api_bytes.rs`:
//! 1,000 Services × 2 ports × 2 endpoints with the metadata a real API server serves) in each
//! combination against upstream's 0.14 MB. Then, per encoding, the decode of list pages alone (no
//! HTTP): JSON (lenient), protobuf pruned to the kept fields (what the daemon does) and protobuf decoded
//! into whole `k8s-pb` objects then converted (the alternative), for the scenario's lean objects and
//! for objects as a real cluster serves them (managed fields, the last-applied annotation, status).
//!
//! Prints `wire-list: ...`, `wire-burst: ...`, `wire-bytes: ...` and `wire-decode: ...` lines and the
//! ratios.

#[path = "../tests/common/mod.rs"]
mod common;

use common::api_bytes;
use common::apiserver::proto::{self as server_proto, Wire};
use common::apiserver::{Kind, Options as ApiOptions, TestApiServer};
use common::scale;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_proxy_rs::cluster::deadline::Deadlines;
use kube_proxy_rs::cluster::listwatch::request::{ListReader, decode_page};
use kube_proxy_rs::cluster::listwatch::{ApiClient, Encoding, MediaTypes};
use kube_proxy_rs::cluster::proto::{Protobuf, envelope};
use kube_proxy_rs::cluster::rate_limit::RateLimitLayer;
use kube_proxy_rs::cluster::rest_metrics::RestClientMetrics;
use kube_proxy_rs::cluster::transport::{self, Transport};
use kube_proxy_rs::cluster::watch::{Notifier, Trackers, start};
use prost::Message;
use serde_json::{Value, json};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Endpoints per slice.
const M: usize = 2;
/// Objects per list page (the watchers' page size).
const PAGE: usize = 500;

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the calling thread's CPU time into `ts`, which outlives the call.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(name)
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

/// One combination: the encoding and whether gzip is asked for.
#[derive(Debug, Clone, Copy)]
struct Combo {
    wire: Wire,
    gzip: bool,
}

impl Combo {
    const ALL: [Combo; 4] = [
        Combo {
            wire: Wire::Json,
            gzip: false,
        },
        Combo {
            wire: Wire::Json,
            gzip: true,
        },
        Combo {
            wire: Wire::Protobuf,
            gzip: false,
        },
        Combo {
            wire: Wire::Protobuf,
            gzip: true,
        },
    ];

    fn name(self) -> String {
        format!(
            "{}{}",
            self.wire.name(),
            if self.gzip { "+gzip" } else { "" }
        )
    }

    fn media(self) -> MediaTypes {
        match self.wire {
            Wire::Json => MediaTypes::json(),
            Wire::Protobuf => MediaTypes::protobuf(),
        }
    }
}

/// What one combination cost the watcher thread.
#[derive(Debug, Default, Clone, Copy)]
struct Cost {
    /// Response body bytes before compression.
    bytes: u64,
    /// Bytes on the wire (HTTP heads, framing and compressed bodies).
    wire: u64,
    /// Connections opened.
    connections: u64,
    cpu: Duration,
    wall: Duration,
}

fn bytes(api: &TestApiServer, wire: Wire, watch: bool) -> u64 {
    let c = api.counters();
    let table = if watch { c.watch_bytes } else { c.list_bytes };
    [Kind::Service, Kind::EndpointSlice, Kind::Node]
        .iter()
        .map(|k| table.get(&(*k, wire)).copied().unwrap_or(0))
        .sum()
}

/// A client of `api` over the daemon's HTTP stack (no rate limit), asking for gzip when `gzip`.
fn client(api: &TestApiServer, gzip: bool) -> kube::Client {
    let metrics = RestClientMetrics::register(&prometheus::Registry::new()).expect("metrics");
    let mut config = kube::Config::new(api.url().parse().expect("url"));
    config.disable_compression = !gzip;
    let t = Transport {
        rate_limit: RateLimitLayer::new(0.0, 1),
        deadlines: Deadlines::default(),
        metrics: &metrics,
    };
    transport::build(config, t).expect("client")
}

/// Runs the watchers on this thread: reports the list's cost once Services and EndpointSlices are
/// listed and the three watches open, then waits for `burst` more EndpointSlice updates (applied by
/// the caller after the first report) and reports their cost.
fn watcher_thread(api: &TestApiServer, combo: Combo, burst: u64, report: mpsc::Sender<Cost>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = client(api, combo.gzip);
        let trackers = Trackers::new(scale::NODE);
        let (cpu0, t0) = (thread_cpu(), Instant::now());
        let (stores, mut synced) = start(
            ApiClient::new(client, combo.media()),
            scale::NODE,
            trackers.clone(),
            Notifier::new(|| {}),
        );
        synced.wait_proxy_ready().await;
        let watching = || {
            [Kind::Service, Kind::EndpointSlice, Kind::Node]
                .iter()
                .all(|k| api.open_watches(*k) >= 1)
        };
        while !watching() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = report.send(Cost {
            cpu: thread_cpu() - cpu0,
            wall: t0.elapsed(),
            ..Cost::default()
        });
        let (cpu1, t1) = (thread_cpu(), Instant::now());
        let seen = trackers.totals().1;
        let deadline = Instant::now() + Duration::from_secs(600);
        while trackers.totals().1 < seen + burst {
            assert!(
                Instant::now() < deadline,
                "the burst did not arrive in 600 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = report.send(Cost {
            cpu: thread_cpu() - cpu1,
            wall: t1.elapsed(),
            ..Cost::default()
        });
        stores.abort();
    });
}

/// The list and burst cost of one combination; `update(u)` applies the burst's update `u`.
fn measure(
    api: &TestApiServer,
    combo: Combo,
    burst: usize,
    update: impl Fn(usize),
) -> (Cost, Cost) {
    let (tx, rx) = mpsc::channel();
    let wire = combo.wire;
    let (list_bytes0, traffic0) = (bytes(api, wire, false), api.traffic());
    std::thread::scope(|s| {
        s.spawn(|| watcher_thread(api, combo, burst as u64, tx));
        let mut list = rx.recv().expect("list cost");
        let traffic1 = api.traffic();
        list.bytes = bytes(api, wire, false) - list_bytes0;
        list.wire = traffic1.since(traffic0).sent;
        list.connections = traffic1.since(traffic0).connections;
        let watch_bytes1 = bytes(api, wire, true);
        (0..burst).for_each(&update);
        let mut updates = rx.recv().expect("burst cost");
        updates.bytes = bytes(api, wire, true) - watch_bytes1;
        let traffic2 = api.traffic().since(traffic1);
        updates.wire = traffic2.sent;
        updates.connections = traffic2.connections;
        (list, updates)
    })
}

fn line(what: &str, n: usize, combo: Combo, c: Cost) -> String {
    format!(
        "{what}: n={n} encoding={} bytes={} wire_bytes={} MiB={:.2} connections={} cpu_s={:.3} wall_s={:.3}",
        combo.name(),
        c.bytes,
        c.wire,
        c.wire as f64 / (1 << 20) as f64,
        c.connections,
        c.cpu.as_secs_f64(),
        c.wall.as_secs_f64()
    )
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "NA".into()
    }
}

/// An object as a real cluster serves it: managed fields, the last-applied annotation, a status.
fn realistic(mut obj: Value) -> Value {
    let applied = obj.to_string();
    obj["metadata"]["uid"] = json!("0b7c3e1a-5f7d-4a1e-9a52-1f4c1f2d3e4a");
    obj["metadata"]["resourceVersion"] = json!("123456789");
    obj["metadata"]["creationTimestamp"] = json!("2026-01-02T03:04:05Z");
    obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        json!(applied);
    obj["metadata"]["managedFields"] = json!([
        {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "v1",
         "time": "2026-01-02T03:04:05Z", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
                      "f:spec": {"f:ports": {".": {}, "k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}}, "f:selector": {}, "f:sessionAffinity": {}, "f:type": {}}}},
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
         "time": "2026-01-02T03:04:06Z", "fieldsType": "FieldsV1", "subresource": "status",
         "fieldsV1": {"f:status": {"f:loadBalancer": {}}}}
    ]);
    if obj["kind"] == "Service" {
        obj["status"] = json!({"loadBalancer": {}, "conditions": [
            {"type": "Ready", "status": "True", "reason": "Ok", "message": "", "lastTransitionTime": "2026-01-02T03:04:05Z", "observedGeneration": 1}
        ]});
    }
    obj
}

fn page_bodies(kind: Kind, objs: &[Value], wire: Wire) -> Vec<Vec<u8>> {
    objs.chunks(PAGE)
        .map(|chunk| {
            let items: Vec<&Value> = chunk.iter().collect();
            match wire {
                Wire::Json => serde_json::to_vec(&json!({
                    "kind": format!("{}List", kind.kind()), "apiVersion": kind.api_version(),
                    "metadata": {"resourceVersion": "1"}, "items": items,
                }))
                .expect("json"),
                Wire::Protobuf => server_proto::list(
                    kind,
                    k8s_pb::apimachinery::pkg::apis::meta::v1::ListMeta {
                        resource_version: Some("1".into()),
                        ..Default::default()
                    },
                    &items,
                )
                .expect("protobuf"),
            }
        })
        .collect()
}

/// CPU of decoding every page `reps` times with `decode`; the number of objects read.
fn cpu_of(pages: &[Vec<u8>], reps: usize, decode: impl Fn(&[u8]) -> usize) -> (Duration, usize) {
    let start = thread_cpu();
    let mut read = 0;
    for _ in 0..reps {
        read = pages.iter().map(|p| decode(p)).sum();
    }
    ((thread_cpu() - start) / reps as u32, read)
}

/// Protobuf decoded into whole `k8s-pb` objects, then converted (what skipping the pruning costs).
fn full_decode<K: Protobuf>(body: &[u8]) -> usize {
    let unknown = envelope::open(body).expect("envelope");
    let (_, items) = envelope::list_items(unknown.raw).expect("list");
    items
        .iter()
        .filter_map(|b| K::Message::decode(*b).ok())
        .filter_map(|m| K::convert(m).ok())
        .count()
}

fn decode_figures<K: Protobuf + kube_proxy_rs::cluster::listwatch::Watched>(
    label: &str,
    kind: Kind,
    objs: &[Value],
) {
    let json = page_bodies(kind, objs, Wire::Json);
    let pb = page_bodies(kind, objs, Wire::Protobuf);
    let size = |pages: &[Vec<u8>]| pages.iter().map(Vec::len).sum::<usize>();
    let reps = (20_000 / objs.len().max(1)).max(1);
    let page = |enc| move |b: &[u8]| decode_page::<K>(enc, b).map(|p| p.items.len()).unwrap_or(0);
    let (json_cpu, n1) = cpu_of(&json, reps, page(Encoding::Json));
    let (pruned_cpu, n2) = cpu_of(&pb, reps, page(Encoding::Protobuf));
    let (full_cpu, n3) = cpu_of(&pb, reps, full_decode::<K>);
    // What the daemon does since issue 29: the same pages read as they arrive, in 16 KiB pieces.
    let incremental = |enc| {
        move |b: &[u8]| {
            let mut reader = ListReader::<K>::new(enc);
            b.chunks(16 << 10)
                .try_for_each(|c| reader.push(c))
                .and_then(|()| reader.finish())
                .map(|p| p.items.len())
                .unwrap_or(0)
        }
    };
    let (json_inc_cpu, n4) = cpu_of(&json, reps, incremental(Encoding::Json));
    let (pb_inc_cpu, n5) = cpu_of(&pb, reps, incremental(Encoding::Protobuf));
    assert_eq!([n1, n2, n3, n4, n5], [objs.len(); 5]);
    let us = |d: Duration| d.as_secs_f64() * 1e6 / objs.len() as f64;
    println!(
        "wire-decode: {label} objects={} json_bytes={} protobuf_bytes={} json_us_per_obj={:.2} \
         json_incremental_us_per_obj={:.2} protobuf_pruned_us_per_obj={:.2} \
         protobuf_incremental_us_per_obj={:.2} protobuf_full_k8s_pb_us_per_obj={:.2}",
        objs.len(),
        size(&json),
        size(&pb),
        us(json_cpu),
        us(json_inc_cpu),
        us(pruned_cpu),
        us(pb_inc_cpu),
        us(full_cpu)
    );
}

/// A test API server serving lists as kube-apiserver does, with history for a burst of `burst`.
fn server(burst: usize) -> TestApiServer {
    let opts = ApiOptions {
        // History for the whole burst: a watch that falls behind must not get 410 and relist.
        history_limit: 4 * burst + 10,
        watch_cache_lists: true,
        bookmark_interval: Duration::from_secs(3600),
        ..ApiOptions::default()
    };
    TestApiServer::start_with("127.0.0.1:0", opts).expect("test API server")
}

/// The scale scenario at each size: list and burst per combination.
fn scale_figures(sizes: &[usize], burst: usize) {
    for &n in sizes {
        let api = server(burst * Combo::ALL.len());
        api.apply_value(Kind::Node, scale::node()).expect("node");
        for i in 0..n {
            api.apply_value(Kind::Service, scale::service(i))
                .expect("service");
            api.apply_value(Kind::EndpointSlice, scale::slice(i, M, &[], None))
                .expect("slice");
        }
        let mut results = Vec::new();
        for (round, combo) in Combo::ALL.into_iter().enumerate() {
            let update = |u: usize| {
                let i = (u * 7919) % n;
                let extra = [scale::extra_ip(round * burst + u)];
                api.apply_value(Kind::EndpointSlice, scale::slice(i, M, &extra, None))
                    .expect("slice update");
            };
            let (list, updates) = measure(&api, combo, burst, update);
            println!("{}", line("wire-list", n, combo, list));
            println!(
                "{}",
                line(&format!("wire-burst({burst})"), n, combo, updates)
            );
            results.push((combo, list, updates));
        }
        let json = results[0].1;
        for (combo, list, updates) in &results {
            println!(
                "wire-ratio: n={n} encoding={} list_wire_bytes={} list_cpu={} burst_cpu={} (to json without gzip)",
                combo.name(),
                ratio(list.wire as f64, json.wire as f64),
                ratio(list.cpu.as_secs_f64(), json.cpu.as_secs_f64()),
                ratio(updates.cpu.as_secs_f64(), results[0].2.cpu.as_secs_f64()),
            );
        }
        let (gz, plain, zipped) = api.compressed();
        println!(
            "wire-server: n={n} gzip_responses={gz} plain_bytes={plain} gzip_bytes={zipped} gzip_ms={}",
            api.compress_time().as_millis()
        );
    }
}

/// The upstream harness's shape: 1,000 Services × 2 ports × 2 endpoints, start-up until watching.
fn upstream_shape_figures() {
    let n = 1000;
    let api = server(10);
    api.apply_value(Kind::Node, scale::node()).expect("node");
    api_bytes::load(&api, n);
    let mut json = 0;
    for combo in Combo::ALL {
        let (list, _) = measure(&api, combo, 0, |_| {});
        if combo.wire == Wire::Json && !combo.gzip {
            json = list.wire;
        }
        println!(
            "wire-bytes: shape=upstream-harness n={n} encoding={} wire_bytes={} connections={} to_json={} to_upstream_0.14MB={}",
            combo.name(),
            list.wire,
            list.connections,
            ratio(list.wire as f64, json as f64),
            ratio(list.wire as f64, api_bytes::UPSTREAM_BYTES_1000 as f64),
        );
    }
}

fn main() {
    let sizes = env_list("KPRS_WIRE_SIZES", &[1000, 10_000, 50_000]);
    let burst = env_list("KPRS_WIRE_BURST", &[10_000])[0];
    upstream_shape_figures();
    scale_figures(&sizes, burst);
    let n = 10_000;
    let services: Vec<Value> = (0..n).map(scale::service).collect();
    let slices: Vec<Value> = (0..n).map(|i| scale::slice(i, M, &[], None)).collect();
    decode_figures::<Service>("services(lean)", Kind::Service, &services);
    decode_figures::<EndpointSlice>("slices(lean)", Kind::EndpointSlice, &slices);
    let services: Vec<Value> = services.into_iter().map(realistic).collect();
    let slices: Vec<Value> = slices.into_iter().map(realistic).collect();
    decode_figures::<Service>("services(realistic)", Kind::Service, &services);
    decode_figures::<EndpointSlice>("slices(realistic)", Kind::EndpointSlice, &slices);
}

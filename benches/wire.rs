//! JSON vs protobuf on the watch path (issue 22): `cargo bench --bench wire` (sizes: `KPRS_WIRE_SIZES`,
//! default `1000,10000,50000`; burst size: `KPRS_WIRE_BURST`, default 10000).
//!
//! Per N and encoding, the daemon's own watchers (`cluster::watch::start`, the list-watch loop and the
//! lenient decoders, feeding the change trackers) run on one thread with a current-thread runtime
//! against the in-process test API server (N scale-scenario Services with 2-endpoint slices, and the
//! Node): the initial list (bytes received, CPU time of the watcher thread, wall time) and a burst of
//! EndpointSlice updates (each one a watch event) until the trackers have recorded all of them. The
//! server runs on other threads; its encoding cost is not counted. Then, per encoding, the decode of
//! list pages alone (no HTTP): JSON (lenient), protobuf pruned to the kept fields (what the daemon
//! does) and protobuf decoded into whole `k8s-pb` objects then converted (the alternative), for the
//! scenario's lean objects and for objects as a real cluster serves them (managed fields, the
//! last-applied annotation, status).
//!
//! Prints `wire-list: ...`, `wire-burst: ...` and `wire-decode: ...` lines and the ratios.

#[path = "../tests/common/mod.rs"]
mod common;

use common::apiserver::proto::{self as server_proto, Wire};
use common::apiserver::{Kind, Options as ApiOptions, TestApiServer};
use common::scale;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_proxy_rs::cluster::listwatch::request::decode_page;
use kube_proxy_rs::cluster::listwatch::{ApiClient, Encoding, MediaTypes};
use kube_proxy_rs::cluster::proto::{Protobuf, envelope};
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

/// What one encoding cost the watcher thread.
#[derive(Debug, Default, Clone, Copy)]
struct Cost {
    bytes: u64,
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

async fn client(api: &TestApiServer) -> kube::Client {
    let dir = std::env::temp_dir().join(format!("kprs-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join("kubeconfig");
    api.write_kubeconfig(&path).expect("kubeconfig");
    let kc = kube::config::Kubeconfig::read_from(&path).expect("read kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(cfg).expect("client")
}

/// Runs the watchers on this thread: reports the list's cost, then waits for `burst` more
/// EndpointSlice updates (applied by the caller after the first report) and reports their cost.
fn watcher_thread(api: &TestApiServer, wire: Wire, burst: u64, report: mpsc::Sender<Cost>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let media = match wire {
            Wire::Json => MediaTypes::json(),
            Wire::Protobuf => MediaTypes::protobuf(),
        };
        let client = client(api).await;
        let trackers = Trackers::new(scale::NODE);
        let (cpu0, t0) = (thread_cpu(), Instant::now());
        let (stores, mut synced) = start(
            ApiClient::new(client, media),
            scale::NODE,
            trackers.clone(),
            Notifier::new(|| {}),
        );
        synced.wait_proxy_ready().await;
        let _ = report.send(Cost {
            bytes: 0,
            cpu: thread_cpu() - cpu0,
            wall: t0.elapsed(),
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
            bytes: 0,
            cpu: thread_cpu() - cpu1,
            wall: t1.elapsed(),
        });
        stores.abort();
    });
}

/// The list and burst cost of one encoding.
fn measure(api: &TestApiServer, n: usize, wire: Wire, burst: usize, round: usize) -> (Cost, Cost) {
    let (tx, rx) = mpsc::channel();
    let (list_bytes0, watch_bytes0) = (bytes(api, wire, false), bytes(api, wire, true));
    std::thread::scope(|s| {
        s.spawn(|| watcher_thread(api, wire, burst as u64, tx));
        let mut list = rx.recv().expect("list cost");
        list.bytes = bytes(api, wire, false) - list_bytes0;
        let watch_bytes1 = bytes(api, wire, true);
        for u in 0..burst {
            let i = (u * 7919) % n;
            let extra = [scale::extra_ip(round * burst + u)];
            api.apply_value(Kind::EndpointSlice, scale::slice(i, M, &extra, None))
                .expect("slice update");
        }
        let mut updates = rx.recv().expect("burst cost");
        updates.bytes = bytes(api, wire, true) - watch_bytes1;
        let _ = watch_bytes0;
        (list, updates)
    })
}

fn line(what: &str, n: usize, wire: Wire, c: Cost) -> String {
    format!(
        "{what}: n={n} encoding={} bytes={} MiB={:.2} cpu_s={:.3} wall_s={:.3}",
        wire.name(),
        c.bytes,
        c.bytes as f64 / (1 << 20) as f64,
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
    assert_eq!((n1, n2, n3), (objs.len(), objs.len(), objs.len()));
    let us = |d: Duration| d.as_secs_f64() * 1e6 / objs.len() as f64;
    println!(
        "wire-decode: {label} objects={} json_bytes={} protobuf_bytes={} json_us_per_obj={:.2} \
         protobuf_pruned_us_per_obj={:.2} protobuf_full_k8s_pb_us_per_obj={:.2}",
        objs.len(),
        size(&json),
        size(&pb),
        us(json_cpu),
        us(pruned_cpu),
        us(full_cpu)
    );
}

fn main() {
    let sizes = env_list("KPRS_WIRE_SIZES", &[1000, 10_000, 50_000]);
    let burst = env_list("KPRS_WIRE_BURST", &[10_000])[0];
    for &n in &sizes {
        // History for the whole burst: a watch that falls behind must not get 410 and relist.
        let opts = ApiOptions {
            history_limit: 4 * burst + 10,
            ..ApiOptions::default()
        };
        let api = TestApiServer::start_with("127.0.0.1:0", opts).expect("test API server");
        api.apply_value(Kind::Node, scale::node()).expect("node");
        for i in 0..n {
            api.apply_value(Kind::Service, scale::service(i))
                .expect("service");
            api.apply_value(Kind::EndpointSlice, scale::slice(i, M, &[], None))
                .expect("slice");
        }
        let mut results = Vec::new();
        for (round, wire) in [Wire::Json, Wire::Protobuf].into_iter().enumerate() {
            let (list, updates) = measure(&api, n, wire, burst, round);
            println!("{}", line("wire-list", n, wire, list));
            println!(
                "{}",
                line(&format!("wire-burst({burst})"), n, wire, updates)
            );
            results.push((list, updates));
        }
        let (j, p) = (results[0], results[1]);
        println!(
            "wire-ratio: n={n} list_bytes={} list_cpu={} burst_bytes={} burst_cpu={} (protobuf / json)",
            ratio(p.0.bytes as f64, j.0.bytes as f64),
            ratio(p.0.cpu.as_secs_f64(), j.0.cpu.as_secs_f64()),
            ratio(p.1.bytes as f64, j.1.bytes as f64),
            ratio(p.1.cpu.as_secs_f64(), j.1.cpu.as_secs_f64()),
        );
    }
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

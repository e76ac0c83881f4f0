//! End-to-end: the real daemon in a UML guest reads the API server in protobuf by default, in JSON when
//! `clientConnection.contentType` says so, and in JSON from a server that does not offer protobuf
//! (issue 22). Each run programs a Service from the initial list, follows an EndpointSlice change on
//! the watch, carries traffic to the ClusterIP, and the test API server's counters show which encoding
//! every list and watch response used. (The other e2e suites run with the default, protobuf.)
mod common;

use common::apiserver::Kind;
use common::apiserver::proto::Wire;
use common::e2e::{ABC, E2e, Options, abc_pods, boot, client, ip, real_servers, service, slice};
use serde_json::json;
use std::time::Duration;

const T: Duration = Duration::from_secs(2);

/// One run: (name, `clientConnection` lines, server offers protobuf, encoding expected).
const RUNS: &[(&str, &str, bool, Wire)] = &[
    ("protobuf-default", "", true, Wire::Protobuf),
    (
        "json-configured",
        "  contentType: application/json\n",
        true,
        Wire::Json,
    ),
    ("json-only-server", "", false, Wire::Json),
];

uml_test!(lists_and_watches_in_each_encoding, boot(), {
    let _pods = abc_pods();
    let c = client("client-a", "192.168.10.2", "192.168.10.1");
    let root = common::uml::guest_run_dir().expect("guest run dir");
    for (i, (name, client_connection, offer, wire)) in RUNS.iter().enumerate() {
        let vip = format!("10.96.0.{}", 20 + i);
        let mut e = E2e::start(Options {
            dir: Some(root.join(name)),
            client_connection: client_connection.to_string(),
            api_protobuf: *offer,
            ..Options::default()
        });
        let spec =
            json!({"ports": [{"name": "p", "port": 80, "targetPort": 8080, "protocol": "TCP"}]});
        e.apply(service("web", &vip, "TCP", 80, spec));
        e.apply(slice("web", "TCP", 8080, ABC));
        e.start_daemon();
        let vs = format!("{vip}:80");
        e.wait_ipvs(&format!("{name}: web from the list"), |t| {
            real_servers(t, "-t", &vs).len() == 3
        });
        // A change that arrives on the watch.
        e.apply(slice("web", "TCP", 8080, &ABC[..2]));
        e.wait_ipvs(&format!("{name}: web from the watch"), |t| {
            real_servers(t, "-t", &vs).len() == 2
        });
        let r = c.tcp_request(ip(&vip), 80, T).expect("ClusterIP");
        assert!(r.starts_with("pod-"), "{name}: {r}");

        let other = match wire {
            Wire::Json => Wire::Protobuf,
            Wire::Protobuf => Wire::Json,
        };
        for kind in [Kind::Service, Kind::EndpointSlice, Kind::Node] {
            let (used, unused) = (e.api.responses(kind, *wire), e.api.responses(kind, other));
            // At least the list and one watch in the expected encoding, none in the other.
            assert!(
                used >= 2,
                "{name}: {kind:?} answered {used} times in {wire:?}"
            );
            assert_eq!(unused, 0, "{name}: {kind:?} answered in {other:?}");
        }
        assert_eq!(e.api.counters().not_acceptable, 0, "{name}");
        let log = e.log();
        let accept = if client_connection.contains("application/json") {
            "application/json"
        } else {
            "application/vnd.kubernetes.protobuf, application/json"
        };
        assert!(
            log.contains(&format!("accept=\"{accept}\""))
                || log.contains(&format!("accept={accept}")),
            "{name}: the log does not name the media types asked for:\n{}",
            common::e2e::tail(&log, 30)
        );
        assert!(!log.contains("ignoring invalid object"), "{name}:\n{log}");
        e.stop_daemon();
        e.delete_service("web");
    }
});

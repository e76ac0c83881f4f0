//! Service and EndpointSlice fixtures: one plain object each, varied by struct update, as in
//! `Service { metadata: ObjectMeta { labels, ..meta("web") }, ..service("web", "10.96.0.1", 80) }`.
//! [`json`] turns any of them into the body the test API server takes.
//!
//! Standalone (k8s-openapi and serde_json only), so a test binary takes it alone:
//! `#[path = "common/fixtures.rs"] pub mod fixtures;`.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;
use std::collections::BTreeMap;

/// The namespace every fixture lives in.
pub const NAMESPACE: &str = "ns";

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Name and namespace, nothing else.
pub fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(NAMESPACE.into()),
        ..Default::default()
    }
}

/// Labels from pairs.
pub fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

/// A TCP Service port `name` = `port`.
pub fn port(name: &str, port: i32) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port,
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// A ClusterIP Service with the TCP port `http` = `port`.
pub fn service(name: &str, cluster_ip: &str, port_number: i32) -> Service {
    Service {
        metadata: meta(name),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some(cluster_ip.into()),
            ports: Some(vec![port("http", port_number)]),
            ..Default::default()
        }),
        status: None,
    }
}

/// A ready endpoint at `ip`.
pub fn endpoint(ip: &str) -> Endpoint {
    Endpoint {
        addresses: vec![ip.into()],
        conditions: Some(EndpointConditions {
            ready: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A TCP EndpointSlice port `name` = `port`.
pub fn slice_port(name: &str, port: i32) -> EndpointPort {
    EndpointPort {
        name: Some(name.into()),
        port: Some(port),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// The IPv4 EndpointSlice `name` of `service`: port `http` = 8080, one ready endpoint at `ip`.
pub fn slice(name: &str, service: &str, ip: &str) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            labels: labels(&[(SERVICE_NAME_LABEL, service)]),
            ..meta(name)
        },
        address_type: "IPv4".into(),
        endpoints: vec![endpoint(ip)],
        ports: Some(vec![slice_port("http", 8080)]),
    }
}

/// The object as JSON, with its `apiVersion` and `kind`.
pub fn json(object: &impl serde::Serialize) -> Value {
    serde_json::to_value(object).expect("a fixture serializes")
}

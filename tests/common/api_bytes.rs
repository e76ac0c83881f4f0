//! The scenario of the API-bytes measurement (issue 29 §4), the shape of the independent harness that
//! measured upstream kube-proxy at about 0.14 MB: N Services of 2 ports, each with one EndpointSlice of
//! 2 ready endpoints. Objects carry what kube-apiserver serves for objects made by a client and by the
//! EndpointSlice controller: uid, creationTimestamp, managedFields, the slice's owner reference and its
//! endpoints' Pod references (the API server's own bytes for the same objects differ a little:
//! resourceVersions, timestamps, field sets).
#![allow(dead_code)]

use super::apiserver::{Kind, TestApiServer};
use serde_json::{Value, json};

/// The namespace.
pub const NAMESPACE: &str = "bytes";
/// The node the daemon runs as.
pub const NODE: &str = "e2e-node";

fn uid(kind: u32, i: usize) -> String {
    format!(
        "{kind:08x}-{:04x}-4{:03x}-8000-{:012x}",
        i >> 16,
        i & 0xfff,
        i
    )
}

/// ClusterIP of Service `i`.
pub fn cluster_ip(i: usize) -> String {
    format!("10.97.{}.{}", i / 250, 1 + i % 250)
}

/// Service `i`: ClusterIP, ports 80→8080 (`http`) and 443→8443 (`https`).
pub fn service(i: usize) -> Value {
    let name = format!("bytes-{i}");
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": name, "namespace": NAMESPACE, "uid": uid(1, i),
            "creationTimestamp": "2026-11-28T10:00:00Z", "labels": {"app": name},
            "managedFields": [{
                "manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
                "time": "2026-11-28T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}},
                             "f:spec": {"f:ports": {
                                 "k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:name": {}, "f:port": {}, "f:targetPort": {}},
                                 "k:{\"port\":443,\"protocol\":\"TCP\"}": {".": {}, "f:name": {}, "f:port": {}, "f:targetPort": {}}},
                                 "f:selector": {}}}
            }]
        },
        "spec": {
            "type": "ClusterIP", "clusterIP": cluster_ip(i), "clusterIPs": [cluster_ip(i)],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "sessionAffinity": "None",
            "internalTrafficPolicy": "Cluster", "selector": {"app": name},
            "ports": [
                {"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080},
                {"name": "https", "protocol": "TCP", "port": 443, "targetPort": 8443}
            ]
        },
        "status": {"loadBalancer": {}}
    })
}

fn endpoint(i: usize, j: usize) -> Value {
    let pod = format!("bytes-{i}-{j}");
    json!({
        "addresses": [format!("10.130.{}.{}", (2 * i + j) / 250, 1 + (2 * i + j) % 250)],
        "conditions": {"ready": true, "serving": true, "terminating": false},
        "nodeName": format!("node-{}", (i + j) % 50), "zone": "zone-a",
        "targetRef": {"kind": "Pod", "namespace": NAMESPACE, "name": pod, "uid": uid(3, 2 * i + j)}
    })
}

/// The EndpointSlice of Service `i`: 2 ready endpoints on ports 8080 and 8443.
pub fn slice(i: usize) -> Value {
    let service = format!("bytes-{i}");
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{service}-abcde"), "generateName": format!("{service}-"),
            "namespace": NAMESPACE, "uid": uid(2, i), "generation": 1,
            "creationTimestamp": "2026-11-28T10:00:01Z",
            "labels": {"kubernetes.io/service-name": service,
                       "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": service,
                                 "uid": uid(1, i), "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{
                "manager": "kube-controller-manager", "operation": "Update",
                "apiVersion": "discovery.k8s.io/v1", "time": "2026-11-28T10:00:01Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:addressType": {}, "f:endpoints": {}, "f:metadata": {
                    "f:generateName": {}, "f:labels": {".": {}, "f:endpointslice.kubernetes.io/managed-by": {},
                    "f:kubernetes.io/service-name": {}}, "f:ownerReferences": {}}, "f:ports": {}}
            }]
        },
        "addressType": "IPv4",
        "endpoints": [endpoint(i, 0), endpoint(i, 1)],
        "ports": [
            {"name": "http", "protocol": "TCP", "port": 8080},
            {"name": "https", "protocol": "TCP", "port": 8443}
        ]
    })
}

/// Stores Services and slices `0..n` in `api`.
pub fn load(api: &TestApiServer, n: usize) {
    for i in 0..n {
        api.apply_value(Kind::Service, service(i))
            .expect("apply Service");
        api.apply_value(Kind::EndpointSlice, slice(i))
            .expect("apply EndpointSlice");
    }
}

/// Upstream kube-proxy's bytes for 1,000 such Services, as the independent harness measured them
/// (protobuf, gzip, one HTTP/2 connection to a real kube-apiserver): "about 0.14 MB".
pub const UPSTREAM_BYTES_1000: u64 = 140_000;

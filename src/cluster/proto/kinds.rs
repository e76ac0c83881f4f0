//! The three watched kinds in protobuf: which fields kube-proxy keeps (the same fields as the JSON
//! [`Lenient::KEEP`](crate::cluster::decode::Lenient) rules) and the conversion of what was kept into
//! the `k8s-openapi` types the trackers read.

use super::prune::{FieldRule, Rule};
use crate::cluster::convert::ANNOTATION_TRIGGER_TIME;
use crate::cluster::service_options::SERVICE_ANNOTATIONS;
use crate::pb_field as field;
use k8s_openapi::api::core::v1 as api;
use k8s_openapi::api::discovery::v1 as disc;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_pb::api::core::v1 as pb;
use k8s_pb::api::discovery::v1 as pbdisc;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pbmeta;
use std::collections::BTreeMap;
use std::sync::LazyLock;

/// A kind kube-proxy reads from protobuf.
pub trait Protobuf: Sized {
    /// The generated message of the kind.
    type Message: prost::Message + Default;

    /// The fields kept of the kind's message.
    fn rules() -> &'static [FieldRule];

    /// The kept fields as the `k8s-openapi` object; the error names a field that cannot be read.
    fn convert(message: Self::Message) -> Result<Self, ConvertError>;
}

/// A kept field whose value the `k8s-openapi` type cannot hold.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {source}")]
pub struct ConvertError {
    /// The field's path (`metadata.deletionTimestamp`).
    pub field: &'static str,
    /// Why the value does not fit.
    #[source]
    pub source: k8s_openapi::jiff::Error,
}

/// Metadata fields every kind keeps, plus `extra`.
fn meta_rules(extra: Vec<FieldRule>) -> Rule {
    let mut fields = vec![
        field!(pbmeta::ObjectMeta, name, "name", Rule::Text),
        field!(pbmeta::ObjectMeta, namespace, "namespace", Rule::Text),
        field!(
            pbmeta::ObjectMeta,
            resource_version,
            "resourceVersion",
            Rule::Text
        ),
        field!(pbmeta::ObjectMeta, labels, "labels", Rule::Entry(None)),
    ];
    fields.extend(extra);
    Rule::Message(fields)
}

/// Rules of `ObjectMeta`'s three identity fields (for unreadable objects).
pub fn identity_rules() -> &'static [FieldRule] {
    static RULES: LazyLock<Vec<FieldRule>> = LazyLock::new(|| match meta_rules(Vec::new()) {
        Rule::Message(mut fields) => {
            fields.truncate(3);
            fields
        }
        _ => Vec::new(),
    });
    &RULES
}

fn service_spec_rules() -> Rule {
    let port = Rule::Message(vec![
        field!(pb::ServicePort, name, "name", Rule::Text),
        field!(pb::ServicePort, protocol, "protocol", Rule::Text),
        field!(pb::ServicePort, port, "port", Rule::Keep),
        field!(pb::ServicePort, node_port, "nodePort", Rule::Keep),
    ]);
    let client_ip = Rule::Message(vec![field!(
        pb::ClientIpConfig,
        timeout_seconds,
        "timeoutSeconds",
        Rule::Keep
    )]);
    let affinity = Rule::Message(vec![field!(
        pb::SessionAffinityConfig,
        client_ip,
        "clientIP",
        client_ip
    )]);
    Rule::Message(vec![
        field!(pb::ServiceSpec, r#type, "type", Rule::Text),
        field!(pb::ServiceSpec, cluster_ip, "clusterIP", Rule::Text),
        field!(pb::ServiceSpec, cluster_ips, "clusterIPs", Rule::Text),
        field!(pb::ServiceSpec, external_ips, "externalIPs", Rule::Text),
        field!(
            pb::ServiceSpec,
            load_balancer_source_ranges,
            "loadBalancerSourceRanges",
            Rule::Text
        ),
        field!(
            pb::ServiceSpec,
            session_affinity,
            "sessionAffinity",
            Rule::Text
        ),
        field!(
            pb::ServiceSpec,
            session_affinity_config,
            "sessionAffinityConfig",
            affinity
        ),
        field!(
            pb::ServiceSpec,
            external_traffic_policy,
            "externalTrafficPolicy",
            Rule::Text
        ),
        field!(
            pb::ServiceSpec,
            internal_traffic_policy,
            "internalTrafficPolicy",
            Rule::Text
        ),
        field!(
            pb::ServiceSpec,
            health_check_node_port,
            "healthCheckNodePort",
            Rule::Keep
        ),
        field!(pb::ServiceSpec, ports, "ports", port),
    ])
}

fn service_rules() -> Vec<FieldRule> {
    let ingress = Rule::Message(vec![
        field!(pb::LoadBalancerIngress, ip, "ip", Rule::Text),
        field!(pb::LoadBalancerIngress, ip_mode, "ipMode", Rule::Text),
    ]);
    let lb = Rule::Message(vec![field!(
        pb::LoadBalancerStatus,
        ingress,
        "ingress",
        ingress
    )]);
    let annotations = field!(
        pbmeta::ObjectMeta,
        annotations,
        "annotations",
        Rule::Entry(Some(SERVICE_ANNOTATIONS))
    );
    vec![
        field!(
            pb::Service,
            metadata,
            "metadata",
            meta_rules(vec![annotations])
        ),
        field!(pb::Service, spec, "spec", service_spec_rules()),
        field!(
            pb::Service,
            status,
            "status",
            Rule::Message(vec![field!(
                pb::ServiceStatus,
                load_balancer,
                "loadBalancer",
                lb
            )])
        ),
    ]
}

fn slice_rules() -> Vec<FieldRule> {
    let name_only = || Rule::Message(vec![field!(pbdisc::ForZone, name, "name", Rule::Text)]);
    let hints = Rule::Message(vec![
        field!(pbdisc::EndpointHints, for_zones, "forZones", name_only()),
        field!(pbdisc::EndpointHints, for_nodes, "forNodes", name_only()),
    ]);
    let conditions = Rule::Message(vec![
        field!(pbdisc::EndpointConditions, ready, "ready", Rule::Keep),
        field!(pbdisc::EndpointConditions, serving, "serving", Rule::Keep),
        field!(
            pbdisc::EndpointConditions,
            terminating,
            "terminating",
            Rule::Keep
        ),
    ]);
    let endpoint = Rule::Message(vec![
        field!(pbdisc::Endpoint, addresses, "addresses", Rule::Text),
        field!(pbdisc::Endpoint, conditions, "conditions", conditions),
        field!(pbdisc::Endpoint, node_name, "nodeName", Rule::Text),
        field!(pbdisc::Endpoint, zone, "zone", Rule::Text),
        field!(pbdisc::Endpoint, hints, "hints", hints),
    ]);
    let port = Rule::Message(vec![
        field!(pbdisc::EndpointPort, name, "name", Rule::Text),
        field!(pbdisc::EndpointPort, port, "port", Rule::Keep),
        field!(pbdisc::EndpointPort, protocol, "protocol", Rule::Text),
    ]);
    const TRIGGER: &[&str] = &[ANNOTATION_TRIGGER_TIME];
    let annotations = field!(
        pbmeta::ObjectMeta,
        annotations,
        "annotations",
        Rule::Entry(Some(TRIGGER))
    );
    vec![
        field!(
            pbdisc::EndpointSlice,
            metadata,
            "metadata",
            meta_rules(vec![annotations])
        ),
        field!(
            pbdisc::EndpointSlice,
            address_type,
            "addressType",
            Rule::Text
        ),
        field!(pbdisc::EndpointSlice, endpoints, "endpoints", endpoint),
        field!(pbdisc::EndpointSlice, ports, "ports", port),
    ]
}

fn node_rules() -> Vec<FieldRule> {
    let deletion = field!(
        pbmeta::ObjectMeta,
        deletion_timestamp,
        "deletionTimestamp",
        Rule::Keep
    );
    let taint = Rule::Message(vec![
        field!(pb::Taint, key, "key", Rule::Text),
        field!(pb::Taint, effect, "effect", Rule::Text),
    ]);
    let spec = Rule::Message(vec![
        field!(pb::NodeSpec, pod_cidr, "podCIDR", Rule::Text),
        field!(pb::NodeSpec, pod_cid_rs, "podCIDRs", Rule::Text),
        field!(pb::NodeSpec, taints, "taints", taint),
    ]);
    let address = Rule::Message(vec![
        field!(pb::NodeAddress, address, "address", Rule::Text),
        field!(pb::NodeAddress, r#type, "type", Rule::Text),
    ]);
    vec![
        field!(pb::Node, metadata, "metadata", meta_rules(vec![deletion])),
        field!(pb::Node, spec, "spec", spec),
        field!(
            pb::Node,
            status,
            "status",
            Rule::Message(vec![field!(
                pb::NodeStatus,
                addresses,
                "addresses",
                address
            )])
        ),
    ]
}

/// An empty list as absent, as Go's protobuf decoding leaves a nil slice.
fn some_vec<T, U>(items: Vec<T>, f: impl FnMut(T) -> U) -> Option<Vec<U>> {
    (!items.is_empty()).then(|| items.into_iter().map(f).collect())
}

fn some_map(map: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!map.is_empty()).then_some(map)
}

fn time(t: pbmeta::Time, field: &'static str) -> Result<Time, ConvertError> {
    let nanos = t.nanos.unwrap_or_default();
    k8s_openapi::jiff::Timestamp::new(t.seconds.unwrap_or_default(), nanos)
        .map(Time)
        .map_err(|source| ConvertError { field, source })
}

fn meta(m: Option<pbmeta::ObjectMeta>) -> Result<ObjectMeta, ConvertError> {
    let m = m.unwrap_or_default();
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        resource_version: m.resource_version,
        labels: some_map(m.labels),
        annotations: some_map(m.annotations),
        deletion_timestamp: m
            .deletion_timestamp
            .map(|t| time(t, "metadata.deletionTimestamp"))
            .transpose()?,
        ..ObjectMeta::default()
    })
}

fn service_spec(s: pb::ServiceSpec) -> api::ServiceSpec {
    let port = |p: pb::ServicePort| api::ServicePort {
        name: p.name,
        protocol: p.protocol,
        port: p.port.unwrap_or_default(),
        node_port: p.node_port,
        ..api::ServicePort::default()
    };
    let affinity = s
        .session_affinity_config
        .map(|c| api::SessionAffinityConfig {
            client_ip: c.client_ip.map(|ip| api::ClientIPConfig {
                timeout_seconds: ip.timeout_seconds,
            }),
        });
    api::ServiceSpec {
        type_: s.r#type,
        cluster_ip: s.cluster_ip,
        cluster_ips: some_vec(s.cluster_ips, |x| x),
        external_ips: some_vec(s.external_ips, |x| x),
        load_balancer_source_ranges: some_vec(s.load_balancer_source_ranges, |x| x),
        session_affinity: s.session_affinity,
        session_affinity_config: affinity,
        external_traffic_policy: s.external_traffic_policy,
        internal_traffic_policy: s.internal_traffic_policy,
        health_check_node_port: s.health_check_node_port,
        ports: some_vec(s.ports, port),
        ..api::ServiceSpec::default()
    }
}

fn service_status(s: pb::ServiceStatus) -> api::ServiceStatus {
    let ingress = |i: pb::LoadBalancerIngress| api::LoadBalancerIngress {
        ip: i.ip,
        ip_mode: i.ip_mode,
        ..api::LoadBalancerIngress::default()
    };
    api::ServiceStatus {
        load_balancer: s.load_balancer.map(|lb| api::LoadBalancerStatus {
            ingress: some_vec(lb.ingress, ingress),
        }),
        conditions: None,
    }
}

impl Protobuf for api::Service {
    type Message = pb::Service;

    fn rules() -> &'static [FieldRule] {
        static RULES: LazyLock<Vec<FieldRule>> = LazyLock::new(service_rules);
        &RULES
    }

    fn convert(m: pb::Service) -> Result<Self, ConvertError> {
        Ok(api::Service {
            metadata: meta(m.metadata)?,
            spec: m.spec.map(service_spec),
            status: m.status.map(service_status),
        })
    }
}

fn endpoint(e: pbdisc::Endpoint) -> disc::Endpoint {
    let hints = e.hints.map(|h| disc::EndpointHints {
        for_zones: some_vec(h.for_zones, |z| disc::ForZone {
            name: z.name.unwrap_or_default(),
        }),
        for_nodes: some_vec(h.for_nodes, |n| disc::ForNode {
            name: n.name.unwrap_or_default(),
        }),
    });
    disc::Endpoint {
        addresses: e.addresses,
        conditions: e.conditions.map(|c| disc::EndpointConditions {
            ready: c.ready,
            serving: c.serving,
            terminating: c.terminating,
        }),
        node_name: e.node_name,
        zone: e.zone,
        hints,
        ..disc::Endpoint::default()
    }
}

impl Protobuf for disc::EndpointSlice {
    type Message = pbdisc::EndpointSlice;

    fn rules() -> &'static [FieldRule] {
        static RULES: LazyLock<Vec<FieldRule>> = LazyLock::new(slice_rules);
        &RULES
    }

    fn convert(m: pbdisc::EndpointSlice) -> Result<Self, ConvertError> {
        let port = |p: pbdisc::EndpointPort| disc::EndpointPort {
            name: p.name,
            port: p.port,
            protocol: p.protocol,
            ..disc::EndpointPort::default()
        };
        Ok(disc::EndpointSlice {
            metadata: meta(m.metadata)?,
            address_type: m.address_type.unwrap_or_default(),
            endpoints: m.endpoints.into_iter().map(endpoint).collect(),
            ports: some_vec(m.ports, port),
        })
    }
}

impl Protobuf for api::Node {
    type Message = pb::Node;

    fn rules() -> &'static [FieldRule] {
        static RULES: LazyLock<Vec<FieldRule>> = LazyLock::new(node_rules);
        &RULES
    }

    fn convert(m: pb::Node) -> Result<Self, ConvertError> {
        let taint = |t: pb::Taint| api::Taint {
            key: t.key.unwrap_or_default(),
            effect: t.effect.unwrap_or_default(),
            ..api::Taint::default()
        };
        let address = |a: pb::NodeAddress| api::NodeAddress {
            address: a.address.unwrap_or_default(),
            type_: a.r#type.unwrap_or_default(),
        };
        Ok(api::Node {
            metadata: meta(m.metadata)?,
            spec: m.spec.map(|s| api::NodeSpec {
                pod_cidr: s.pod_cidr,
                pod_cidrs: some_vec(s.pod_cid_rs, |x| x),
                taints: some_vec(s.taints, taint),
                ..api::NodeSpec::default()
            }),
            status: m.status.map(|s| api::NodeStatus {
                addresses: some_vec(s.addresses, address),
                ..api::NodeStatus::default()
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kept field has a number, and no two fields of a message share one.
    fn check(rules: &[FieldRule], path: &str) {
        let mut seen = std::collections::BTreeSet::new();
        for r in rules {
            assert!(r.tag > 0, "{path}.{} has no field number", r.name);
            assert!(
                seen.insert(r.tag),
                "{path}.{} repeats field {}",
                r.name,
                r.tag
            );
            if let Rule::Message(inner) = &r.rule {
                check(inner, &format!("{path}.{}", r.name));
            }
        }
    }

    #[test]
    fn every_rule_has_a_distinct_field_number() {
        check(api::Service::rules(), "Service");
        check(disc::EndpointSlice::rules(), "EndpointSlice");
        check(api::Node::rules(), "Node");
        assert_eq!(identity_rules().len(), 3);
    }

    #[test]
    fn a_time_out_of_range_names_the_field_and_keeps_jiff_s_error() {
        use std::error::Error;
        let bad = pbmeta::Time {
            seconds: Some(i64::MAX),
            nanos: Some(0),
        };
        let e = time(bad, "metadata.deletionTimestamp").unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("metadata.deletionTimestamp: "), "{text}");
        assert_eq!(text, format!("metadata.deletionTimestamp: {}", e.source));
        assert!(
            e.source()
                .is_some_and(|c| c.is::<k8s_openapi::jiff::Error>())
        );
    }
}

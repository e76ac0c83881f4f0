//! The test API server's protobuf encoding (`application/vnd.kubernetes.protobuf`), made from the same
//! stored JSON objects as its JSON answers, the way the real API server serves one object in either
//! encoding: each object becomes its `k8s-pb` message, wrapped in the `k8s\0` magic and a
//! `runtime.Unknown`; lists are `{metadata, items}` in that envelope; a watch is a stream of
//! `meta.v1.WatchEvent` messages, each preceded by its length (4 bytes, big-endian), whose object is
//! an enveloped encoding.
//!
//! The conversion is independent of the daemon's decoder (it builds whole `k8s-pb` messages with
//! prost). A stored object with a field this conversion does not carry, or a value of the wrong JSON
//! type, cannot be encoded: the request fails with 500 rather than silently losing data (the JSON
//! encoding serves such objects as they are).

use super::store::Kind;
use k8s_pb::api::core::v1 as pb;
use k8s_pb::api::discovery::v1 as pbdisc;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pbmeta;
use k8s_pb::apimachinery::pkg::runtime as pbrt;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::collections::BTreeMap;

/// The media type.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The media type of a watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

type Result<T> = std::result::Result<T, String>;

/// A JSON object being converted: every key must be read (or the object cannot be encoded).
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
    read: RefCell<Vec<&'static str>>,
}

impl<'a> Obj<'a> {
    fn new(v: &'a Value, path: String) -> Result<Self> {
        let map = v
            .as_object()
            .ok_or_else(|| format!("{path}: not an object"))?;
        Ok(Obj {
            map,
            path,
            read: RefCell::new(Vec::new()),
        })
    }

    /// The value of `key`, `None` when absent or null (null reads as absent, as in Go).
    fn get(&self, key: &'static str) -> Option<&'a Value> {
        self.read.borrow_mut().push(key);
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn at(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    fn str(&self, key: &'static str) -> Result<Option<String>> {
        self.get(key)
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{}: not a string", self.at(key)))
            })
            .transpose()
    }

    fn int<T: TryFrom<i64>>(&self, key: &'static str) -> Result<Option<T>> {
        self.get(key)
            .map(|v| {
                v.as_i64()
                    .and_then(|n| T::try_from(n).ok())
                    .ok_or_else(|| format!("{}: not an integer in range", self.at(key)))
            })
            .transpose()
    }

    fn bool(&self, key: &'static str) -> Result<Option<bool>> {
        self.get(key)
            .map(|v| {
                v.as_bool()
                    .ok_or_else(|| format!("{}: not a boolean", self.at(key)))
            })
            .transpose()
    }

    fn time(&self, key: &'static str) -> Result<Option<pbmeta::Time>> {
        let Some(s) = self.str(key)? else {
            return Ok(None);
        };
        let t: k8s_openapi::jiff::Timestamp =
            s.parse().map_err(|e| format!("{}: {e}", self.at(key)))?;
        Ok(Some(pbmeta::Time {
            seconds: Some(t.as_second()),
            nanos: Some(t.subsec_nanosecond()),
        }))
    }

    fn strs(&self, key: &'static str) -> Result<Vec<String>> {
        self.list_of(key, |v, path| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{path}: not a string"))
        })
    }

    fn map(&self, key: &'static str) -> Result<BTreeMap<String, String>> {
        let Some(v) = self.get(key) else {
            return Ok(BTreeMap::new());
        };
        let m = v
            .as_object()
            .ok_or_else(|| format!("{}: not an object", self.at(key)))?;
        m.iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| match v.as_str() {
                Some(s) => Ok((k.clone(), s.to_string())),
                None => Err(format!("{}.{k}: not a string", self.at(key))),
            })
            .collect()
    }

    fn list_of<T>(
        &self,
        key: &'static str,
        f: impl Fn(&Value, String) -> Result<T>,
    ) -> Result<Vec<T>> {
        let Some(v) = self.get(key) else {
            return Ok(Vec::new());
        };
        let items = v
            .as_array()
            .ok_or_else(|| format!("{}: not a list", self.at(key)))?;
        items
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.is_null())
            .map(|(i, v)| f(v, format!("{}[{i}]", self.at(key))))
            .collect()
    }

    fn list<T>(&self, key: &'static str, f: fn(&Obj<'_>) -> Result<T>) -> Result<Vec<T>> {
        self.list_of(key, |v, path| convert(v, path, f))
    }

    fn obj<T>(&self, key: &'static str, f: fn(&Obj<'_>) -> Result<T>) -> Result<Option<T>> {
        self.get(key)
            .map(|v| convert(v, self.at(key), f))
            .transpose()
    }

    /// Fails when the object has a key that was never read.
    fn done(&self) -> Result<()> {
        let read = self.read.borrow();
        match self
            .map
            .iter()
            .find(|(k, v)| !v.is_null() && !read.contains(&k.as_str()))
        {
            Some((k, _)) => Err(format!("{}: field not encodable in protobuf", self.at(k))),
            None => Ok(()),
        }
    }
}

fn convert<T>(v: &Value, path: String, f: fn(&Obj<'_>) -> Result<T>) -> Result<T> {
    let o = Obj::new(v, path)?;
    let out = f(&o)?;
    o.done()?;
    Ok(out)
}

fn owner(o: &Obj<'_>) -> Result<pbmeta::OwnerReference> {
    Ok(pbmeta::OwnerReference {
        api_version: o.str("apiVersion")?,
        kind: o.str("kind")?,
        name: o.str("name")?,
        uid: o.str("uid")?,
        controller: o.bool("controller")?,
        block_owner_deletion: o.bool("blockOwnerDeletion")?,
    })
}

fn managed(o: &Obj<'_>) -> Result<pbmeta::ManagedFieldsEntry> {
    let fields = o.get("fieldsV1").map(|v| pbmeta::FieldsV1 {
        raw: Some(v.to_string().into_bytes()),
    });
    Ok(pbmeta::ManagedFieldsEntry {
        manager: o.str("manager")?,
        operation: o.str("operation")?,
        api_version: o.str("apiVersion")?,
        time: o.time("time")?,
        fields_type: o.str("fieldsType")?,
        fields_v1: fields,
        subresource: o.str("subresource")?,
    })
}

fn meta(o: &Obj<'_>) -> Result<pbmeta::ObjectMeta> {
    Ok(pbmeta::ObjectMeta {
        name: o.str("name")?,
        generate_name: o.str("generateName")?,
        namespace: o.str("namespace")?,
        self_link: o.str("selfLink")?,
        uid: o.str("uid")?,
        resource_version: o.str("resourceVersion")?,
        generation: o.int("generation")?,
        creation_timestamp: o.time("creationTimestamp")?,
        deletion_timestamp: o.time("deletionTimestamp")?,
        deletion_grace_period_seconds: o.int("deletionGracePeriodSeconds")?,
        labels: o.map("labels")?,
        annotations: {
            let mut a = o.map("annotations")?;
            a.remove(APPEND_ANNOTATION);
            a
        },
        owner_references: o.list("ownerReferences", owner)?,
        finalizers: o.strs("finalizers")?,
        managed_fields: o.list("managedFields", managed)?,
    })
}

fn condition(o: &Obj<'_>) -> Result<pbmeta::Condition> {
    Ok(pbmeta::Condition {
        r#type: o.str("type")?,
        status: o.str("status")?,
        observed_generation: o.int("observedGeneration")?,
        last_transition_time: o.time("lastTransitionTime")?,
        reason: o.str("reason")?,
        message: o.str("message")?,
    })
}

fn int_or_string(v: &Value, path: String) -> Result<IntOrString> {
    match v {
        Value::String(s) => Ok(IntOrString {
            r#type: Some(1),
            int_val: None,
            str_val: Some(s.clone()),
        }),
        v => match v.as_i64().and_then(|n| i32::try_from(n).ok()) {
            Some(n) => Ok(IntOrString {
                r#type: Some(0),
                int_val: Some(n),
                str_val: None,
            }),
            None => Err(format!("{path}: neither an integer nor a string")),
        },
    }
}

fn service_port(o: &Obj<'_>) -> Result<pb::ServicePort> {
    let target = o
        .get("targetPort")
        .map(|v| int_or_string(v, o.at("targetPort")))
        .transpose()?;
    Ok(pb::ServicePort {
        name: o.str("name")?,
        protocol: o.str("protocol")?,
        app_protocol: o.str("appProtocol")?,
        port: o.int("port")?,
        target_port: target,
        node_port: o.int("nodePort")?,
    })
}

fn client_ip(o: &Obj<'_>) -> Result<pb::ClientIpConfig> {
    Ok(pb::ClientIpConfig {
        timeout_seconds: o.int("timeoutSeconds")?,
    })
}

fn affinity(o: &Obj<'_>) -> Result<pb::SessionAffinityConfig> {
    Ok(pb::SessionAffinityConfig {
        client_ip: o.obj("clientIP", client_ip)?,
    })
}

fn service_spec(o: &Obj<'_>) -> Result<pb::ServiceSpec> {
    Ok(pb::ServiceSpec {
        ports: o.list("ports", service_port)?,
        selector: o.map("selector")?,
        cluster_ip: o.str("clusterIP")?,
        cluster_ips: o.strs("clusterIPs")?,
        r#type: o.str("type")?,
        external_ips: o.strs("externalIPs")?,
        session_affinity: o.str("sessionAffinity")?,
        load_balancer_ip: o.str("loadBalancerIP")?,
        load_balancer_source_ranges: o.strs("loadBalancerSourceRanges")?,
        external_name: o.str("externalName")?,
        external_traffic_policy: o.str("externalTrafficPolicy")?,
        health_check_node_port: o.int("healthCheckNodePort")?,
        publish_not_ready_addresses: o.bool("publishNotReadyAddresses")?,
        session_affinity_config: o.obj("sessionAffinityConfig", affinity)?,
        ip_families: o.strs("ipFamilies")?,
        ip_family_policy: o.str("ipFamilyPolicy")?,
        allocate_load_balancer_node_ports: o.bool("allocateLoadBalancerNodePorts")?,
        load_balancer_class: o.str("loadBalancerClass")?,
        internal_traffic_policy: o.str("internalTrafficPolicy")?,
        traffic_distribution: o.str("trafficDistribution")?,
    })
}

fn port_status(o: &Obj<'_>) -> Result<pb::PortStatus> {
    Ok(pb::PortStatus {
        port: o.int("port")?,
        protocol: o.str("protocol")?,
        error: o.str("error")?,
    })
}

fn ingress(o: &Obj<'_>) -> Result<pb::LoadBalancerIngress> {
    Ok(pb::LoadBalancerIngress {
        ip: o.str("ip")?,
        hostname: o.str("hostname")?,
        ip_mode: o.str("ipMode")?,
        ports: o.list("ports", port_status)?,
    })
}

fn lb_status(o: &Obj<'_>) -> Result<pb::LoadBalancerStatus> {
    Ok(pb::LoadBalancerStatus {
        ingress: o.list("ingress", ingress)?,
    })
}

fn service_status(o: &Obj<'_>) -> Result<pb::ServiceStatus> {
    Ok(pb::ServiceStatus {
        load_balancer: o.obj("loadBalancer", lb_status)?,
        conditions: o.list("conditions", condition)?,
    })
}

fn service(o: &Obj<'_>) -> Result<pb::Service> {
    type_meta(o);
    Ok(pb::Service {
        metadata: o.obj("metadata", meta)?,
        spec: o.obj("spec", service_spec)?,
        status: o.obj("status", service_status)?,
    })
}

fn object_ref(o: &Obj<'_>) -> Result<pb::ObjectReference> {
    Ok(pb::ObjectReference {
        kind: o.str("kind")?,
        namespace: o.str("namespace")?,
        name: o.str("name")?,
        uid: o.str("uid")?,
        api_version: o.str("apiVersion")?,
        resource_version: o.str("resourceVersion")?,
        field_path: o.str("fieldPath")?,
    })
}

fn endpoint_conditions(o: &Obj<'_>) -> Result<pbdisc::EndpointConditions> {
    Ok(pbdisc::EndpointConditions {
        ready: o.bool("ready")?,
        serving: o.bool("serving")?,
        terminating: o.bool("terminating")?,
    })
}

fn for_zone(o: &Obj<'_>) -> Result<pbdisc::ForZone> {
    Ok(pbdisc::ForZone {
        name: o.str("name")?,
    })
}

fn for_node(o: &Obj<'_>) -> Result<pbdisc::ForNode> {
    Ok(pbdisc::ForNode {
        name: o.str("name")?,
    })
}

fn hints(o: &Obj<'_>) -> Result<pbdisc::EndpointHints> {
    Ok(pbdisc::EndpointHints {
        for_zones: o.list("forZones", for_zone)?,
        for_nodes: o.list("forNodes", for_node)?,
    })
}

fn endpoint(o: &Obj<'_>) -> Result<pbdisc::Endpoint> {
    Ok(pbdisc::Endpoint {
        addresses: o.strs("addresses")?,
        conditions: o.obj("conditions", endpoint_conditions)?,
        hostname: o.str("hostname")?,
        target_ref: o.obj("targetRef", object_ref)?,
        deprecated_topology: o.map("deprecatedTopology")?,
        node_name: o.str("nodeName")?,
        zone: o.str("zone")?,
        hints: o.obj("hints", hints)?,
    })
}

fn endpoint_port(o: &Obj<'_>) -> Result<pbdisc::EndpointPort> {
    Ok(pbdisc::EndpointPort {
        name: o.str("name")?,
        protocol: o.str("protocol")?,
        port: o.int("port")?,
        app_protocol: o.str("appProtocol")?,
    })
}

fn endpoint_slice(o: &Obj<'_>) -> Result<pbdisc::EndpointSlice> {
    type_meta(o);
    Ok(pbdisc::EndpointSlice {
        metadata: o.obj("metadata", meta)?,
        address_type: o.str("addressType")?,
        endpoints: o.list("endpoints", endpoint)?,
        ports: o.list("ports", endpoint_port)?,
    })
}

fn taint(o: &Obj<'_>) -> Result<pb::Taint> {
    Ok(pb::Taint {
        key: o.str("key")?,
        value: o.str("value")?,
        effect: o.str("effect")?,
        time_added: o.time("timeAdded")?,
    })
}

fn node_spec(o: &Obj<'_>) -> Result<pb::NodeSpec> {
    Ok(pb::NodeSpec {
        pod_cidr: o.str("podCIDR")?,
        pod_cid_rs: o.strs("podCIDRs")?,
        provider_id: o.str("providerID")?,
        unschedulable: o.bool("unschedulable")?,
        taints: o.list("taints", taint)?,
        external_id: o.str("externalID")?,
        ..Default::default()
    })
}

fn node_condition(o: &Obj<'_>) -> Result<pb::NodeCondition> {
    Ok(pb::NodeCondition {
        r#type: o.str("type")?,
        status: o.str("status")?,
        last_heartbeat_time: o.time("lastHeartbeatTime")?,
        last_transition_time: o.time("lastTransitionTime")?,
        reason: o.str("reason")?,
        message: o.str("message")?,
    })
}

fn node_address(o: &Obj<'_>) -> Result<pb::NodeAddress> {
    Ok(pb::NodeAddress {
        r#type: o.str("type")?,
        address: o.str("address")?,
    })
}

fn daemon_endpoint(o: &Obj<'_>) -> Result<pb::DaemonEndpoint> {
    Ok(pb::DaemonEndpoint {
        port: o.int("Port")?,
    })
}

fn daemon_endpoints(o: &Obj<'_>) -> Result<pb::NodeDaemonEndpoints> {
    Ok(pb::NodeDaemonEndpoints {
        kubelet_endpoint: o.obj("kubeletEndpoint", daemon_endpoint)?,
    })
}

fn system_info(o: &Obj<'_>) -> Result<pb::NodeSystemInfo> {
    Ok(pb::NodeSystemInfo {
        machine_id: o.str("machineID")?,
        system_uuid: o.str("systemUUID")?,
        boot_id: o.str("bootID")?,
        kernel_version: o.str("kernelVersion")?,
        os_image: o.str("osImage")?,
        container_runtime_version: o.str("containerRuntimeVersion")?,
        kubelet_version: o.str("kubeletVersion")?,
        kube_proxy_version: o.str("kubeProxyVersion")?,
        operating_system: o.str("operatingSystem")?,
        architecture: o.str("architecture")?,
        swap: None,
    })
}

fn image(o: &Obj<'_>) -> Result<pb::ContainerImage> {
    Ok(pb::ContainerImage {
        names: o.strs("names")?,
        size_bytes: o.int("sizeBytes")?,
    })
}

fn quantities(o: &Obj<'_>, key: &'static str) -> Result<BTreeMap<String, Quantity>> {
    Ok(o.map(key)?
        .into_iter()
        .map(|(k, v)| (k, Quantity { string: Some(v) }))
        .collect())
}

fn node_status(o: &Obj<'_>) -> Result<pb::NodeStatus> {
    Ok(pb::NodeStatus {
        capacity: quantities(o, "capacity")?,
        allocatable: quantities(o, "allocatable")?,
        phase: o.str("phase")?,
        conditions: o.list("conditions", node_condition)?,
        addresses: o.list("addresses", node_address)?,
        daemon_endpoints: o.obj("daemonEndpoints", daemon_endpoints)?,
        node_info: o.obj("nodeInfo", system_info)?,
        images: o.list("images", image)?,
        volumes_in_use: o.strs("volumesInUse")?,
        ..Default::default()
    })
}

fn node(o: &Obj<'_>) -> Result<pb::Node> {
    type_meta(o);
    Ok(pb::Node {
        metadata: o.obj("metadata", meta)?,
        spec: o.obj("spec", node_spec)?,
        status: o.obj("status", node_status)?,
    })
}

/// `apiVersion` and `kind` travel in the envelope, not in the message.
fn type_meta(o: &Obj<'_>) {
    o.get("apiVersion");
    o.get("kind");
}

/// Annotation whose value (hex) is appended to the object's protobuf encoding, and not encoded as an
/// annotation: a test's way to put wire-level oddities (unknown fields, wrong wire types, invalid
/// UTF-8, a truncated field) into an otherwise real encoding. Protobuf merges appended fields into
/// the message (an appended `spec` merges into the spec; a repeated field gains an item).
pub const APPEND_ANNOTATION: &str = "kprs.test/protobuf-append";

/// The message encoding of a stored object (no envelope).
pub fn message(kind: Kind, v: &Value) -> Result<Vec<u8>> {
    let path = kind.kind().to_string();
    let mut out = match kind {
        Kind::Service => convert(v, path, service)?.encode_to_vec(),
        Kind::EndpointSlice => convert(v, path, endpoint_slice)?.encode_to_vec(),
        Kind::Node => convert(v, path, node)?.encode_to_vec(),
    };
    let append = v
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(APPEND_ANNOTATION))
        .and_then(Value::as_str);
    if let Some(hex) = append {
        out.extend(from_hex(hex)?);
    }
    Ok(out)
}

fn from_hex(hex: &str) -> Result<Vec<u8>> {
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
                .ok_or_else(|| format!("{APPEND_ANNOTATION}: not hex: {hex}"))
        })
        .collect()
}

/// `k8s\0` + `runtime.Unknown { typeMeta, raw }`.
pub fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = pbrt::Unknown {
        type_meta: Some(pbrt::TypeMeta {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

/// A stored object in its envelope.
pub fn object(kind: Kind, v: &Value) -> Result<Vec<u8>> {
    Ok(envelope(kind.api_version(), kind.kind(), message(kind, v)?))
}

/// A list page in its envelope: `{metadata, items}` of the kind's list message, each item the
/// object's own encoding (appended oddities included).
pub fn list(kind: Kind, meta: pbmeta::ListMeta, objects: &[&Value]) -> Result<Vec<u8>> {
    let metadata = Some(meta);
    // The list message with its metadata, and one empty item to learn the items' field number.
    let (mut raw, probe) = match kind {
        Kind::Service => (
            pb::ServiceList {
                metadata,
                items: vec![],
            }
            .encode_to_vec(),
            pb::ServiceList {
                metadata: None,
                items: vec![Default::default()],
            }
            .encode_to_vec(),
        ),
        Kind::EndpointSlice => (
            pbdisc::EndpointSliceList {
                metadata,
                items: vec![],
            }
            .encode_to_vec(),
            pbdisc::EndpointSliceList {
                metadata: None,
                items: vec![Default::default()],
            }
            .encode_to_vec(),
        ),
        Kind::Node => (
            pb::NodeList {
                metadata,
                items: vec![],
            }
            .encode_to_vec(),
            pb::NodeList {
                metadata: None,
                items: vec![Default::default()],
            }
            .encode_to_vec(),
        ),
    };
    let items_tag = u32::from(probe[0] >> 3);
    for (i, item) in objects.iter().enumerate() {
        let m = message(kind, item).map_err(|e| format!("items[{i}]: {e}"))?;
        prost::encoding::encode_key(
            items_tag,
            prost::encoding::WireType::LengthDelimited,
            &mut raw,
        );
        prost::encoding::encode_varint(m.len() as u64, &mut raw);
        raw.extend_from_slice(&m);
    }
    Ok(envelope(
        kind.api_version(),
        &format!("{}List", kind.kind()),
        raw,
    ))
}

/// A `Status` in its envelope.
pub fn status(code: u16, reason: &str, message: &str) -> Vec<u8> {
    let s = pbmeta::Status {
        metadata: Some(Default::default()),
        status: Some("Failure".into()),
        message: Some(message.into()),
        reason: Some(reason.into()),
        details: None,
        code: Some(i32::from(code)),
    };
    envelope("v1", "Status", s.encode_to_vec())
}

/// A bookmark object: the kind with only `metadata.resourceVersion` (and the initial-events-end
/// annotation), enveloped.
pub fn bookmark(kind: Kind, rv: u64, initial_end: bool) -> Vec<u8> {
    let mut meta = pbmeta::ObjectMeta {
        resource_version: Some(rv.to_string()),
        ..Default::default()
    };
    if initial_end {
        meta.annotations
            .insert("k8s.io/initial-events-end".into(), "true".into());
    }
    let raw = match kind {
        Kind::Service => pb::Service {
            metadata: Some(meta),
            ..Default::default()
        }
        .encode_to_vec(),
        Kind::EndpointSlice => pbdisc::EndpointSlice {
            metadata: Some(meta),
            ..Default::default()
        }
        .encode_to_vec(),
        Kind::Node => pb::Node {
            metadata: Some(meta),
            ..Default::default()
        }
        .encode_to_vec(),
    };
    envelope(kind.api_version(), kind.kind(), raw)
}

/// One watch stream frame: length (4 bytes, big-endian), then `WatchEvent { type, object }`.
pub fn watch_frame(event_type: &str, object: Vec<u8>) -> Vec<u8> {
    let event = pbmeta::WatchEvent {
        r#type: Some(event_type.to_string()),
        object: Some(pbrt::RawExtension { raw: Some(object) }),
    }
    .encode_to_vec();
    let mut out = (event.len() as u32).to_be_bytes().to_vec();
    out.extend(event);
    out
}

/// The encoding of one response, negotiated from the request's `Accept` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Wire {
    /// `application/json`.
    Json,
    /// `application/vnd.kubernetes.protobuf`.
    Protobuf,
}

impl Wire {
    /// The first media type of `accept` the server offers (protobuf only when `offer_protobuf`); no
    /// header means JSON; `None` when nothing offered is acceptable (406).
    pub fn negotiate(accept: Option<&str>, offer_protobuf: bool) -> Option<Wire> {
        let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
            return Some(Wire::Json);
        };
        accept.split(',').find_map(|entry| {
            let media = entry.split(';').next().unwrap_or_default().trim();
            match media {
                "application/json" | "application/*" | "*/*" => Some(Wire::Json),
                MEDIA_TYPE if offer_protobuf => Some(Wire::Protobuf),
                _ => None,
            }
        })
    }

    /// `json` or `protobuf`.
    pub fn name(self) -> &'static str {
        match self {
            Wire::Json => "json",
            Wire::Protobuf => "protobuf",
        }
    }
}

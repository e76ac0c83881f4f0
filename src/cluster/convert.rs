//! Conversion of API objects (Service, EndpointSlice) into the proxier's models, with validation.
//!
//! A malformed object is rejected whole with a [`ConvertError`] naming it; single bad entries inside lists
//! (an invalid externalIP, LB ingress IP or source range) are dropped as upstream does and reported as warnings.

use super::model::{
    Endpoint, IpFamily, LoadBalancerIngress, Name, Protocol, ServiceName, ServicePort,
    ServicePortName, Topology,
};
use super::service_options::ServiceOptions;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

/// Label on an EndpointSlice naming its Service.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// EndpointSlice annotation with the time of the change that triggered the update.
pub const ANNOTATION_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// Session affinity timeout when the Service does not set one (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10800;

/// Which kind of object a conversion error or warning is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Service,
    EndpointSlice,
    Node,
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectKind::Service => "Service",
            ObjectKind::EndpointSlice => "EndpointSlice",
            ObjectKind::Node => "Node",
        })
    }
}

/// Why an object was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidReason {
    #[error("invalid ClusterIP {0:?}")]
    InvalidClusterIp(String),
    #[error("more than one ClusterIP of family {0}")]
    DuplicateClusterIpFamily(&'static str),
    #[error("port {port_name:?}: invalid port number {value}")]
    InvalidPort { port_name: String, value: i64 },
    #[error("port {port_name:?}: invalid nodePort {value}")]
    InvalidNodePort { port_name: String, value: i64 },
    #[error("invalid healthCheckNodePort {0}")]
    InvalidHealthCheckNodePort(i64),
    #[error("port {port_name:?}: unknown protocol {protocol:?}")]
    UnknownProtocol { port_name: String, protocol: String },
    #[error("duplicate port name {0:?}")]
    DuplicatePortName(String),
    #[error("duplicate port {port}/{protocol}")]
    DuplicatePort { port: u16, protocol: &'static str },
    #[error("invalid session affinity timeout {0}")]
    InvalidAffinityTimeout(i64),
    #[error("missing label {LABEL_SERVICE_NAME}")]
    MissingServiceName,
    #[error("invalid endpoint address {0:?}")]
    InvalidAddress(String),
    #[error("address {address} does not match addressType {address_type}")]
    AddressFamilyMismatch {
        address: String,
        address_type: String,
    },
    #[error("unknown addressType {0:?}")]
    UnknownAddressType(String),
    #[error("missing namespace or name")]
    MissingName,
    /// The object could not be decoded (a field kube-proxy reads has the wrong type or is missing).
    #[error("unreadable: {0}")]
    Unreadable(String),
}

/// A rejected object: kind, namespace/name and the reason. The object is skipped whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {namespace}/{name} rejected: {reason}")]
pub struct ConvertError {
    pub kind: ObjectKind,
    pub namespace: String,
    pub name: String,
    pub reason: InvalidReason,
}

/// A dropped entry inside an otherwise valid object (as upstream, which logs and ignores it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertWarning {
    pub kind: ObjectKind,
    pub namespace: String,
    pub name: String,
    pub message: String,
}

impl fmt::Display for ConvertWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}/{}: {}",
            self.kind, self.namespace, self.name, self.message
        )
    }
}

/// A converted Service: its ports (empty when the service is not proxied) and the warnings raised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertedService {
    pub name: ServiceName,
    pub ports: Vec<ServicePort>,
    pub warnings: Vec<ConvertWarning>,
}

/// One port of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlicePort {
    pub name: Name,
    pub protocol: Protocol,
    pub port: u16,
}

/// The part of an EndpointSlice kube-proxy uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceInfo {
    pub service: ServiceName,
    pub slice_name: Name,
    /// Ports, sorted.
    pub ports: Vec<SlicePort>,
    /// Endpoints, sorted by address. `port` is the slice's port when it has exactly one, else 0 (set
    /// per slice port by [`SliceInfo::endpoints_for`]); shared so that a single-port slice's list can be
    /// its service port's endpoint list as is.
    pub endpoints: Arc<Vec<Endpoint>>,
    /// `endpoints.kubernetes.io/last-change-trigger-time`, if present and parseable.
    pub trigger_time: Option<SystemTime>,
    pub warnings: Vec<ConvertWarning>,
}

impl SliceInfo {
    /// The ServicePortName of one slice port.
    pub fn port_name(&self, port: &SlicePort) -> ServicePortName {
        ServicePortName {
            namespace: self.service.namespace.clone(),
            name: self.service.name.clone(),
            port_name: port.name.clone(),
            protocol: port.protocol,
        }
    }

    /// The endpoints of this slice for one of its ports.
    pub fn endpoints_for(&self, port: &SlicePort) -> impl Iterator<Item = Endpoint> + '_ {
        let number = port.port;
        self.endpoints.iter().map(move |e| {
            let mut e = e.clone();
            e.port = number;
            e
        })
    }

    /// Equality ignoring warnings and trigger time: whether applying `other` would change anything.
    pub fn same_content(&self, other: &SliceInfo) -> bool {
        self.service == other.service
            && self.ports == other.ports
            && self.endpoints == other.endpoints
    }
}

struct Ctx<'a> {
    kind: ObjectKind,
    namespace: &'a str,
    name: &'a str,
}

impl Ctx<'_> {
    fn err(&self, reason: InvalidReason) -> ConvertError {
        ConvertError {
            kind: self.kind,
            namespace: self.namespace.to_string(),
            name: self.name.to_string(),
            reason,
        }
    }

    fn warn(&self, message: String) -> ConvertWarning {
        ConvertWarning {
            kind: self.kind,
            namespace: self.namespace.to_string(),
            name: self.name.to_string(),
            message,
        }
    }
}

/// Parses an IP like Go's `ParseIPSloppy`: IPv4 octets may carry leading zeros (read as decimal).
pub fn parse_ip(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    if let Ok(ip) = s.parse() {
        return Some(ip);
    }
    if s.contains(':') {
        return None;
    }
    let mut octets = [0u8; 4];
    let mut parts = s.split('.');
    for o in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *o = part.parse().ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(IpAddr::from(octets))
}

/// Parses a CIDR like Go's `ParseCIDRSloppy`: leading zeros allowed, host bits cleared.
pub fn parse_cidr(s: &str) -> Option<IpNet> {
    let (addr, prefix) = s.trim().split_once('/')?;
    let ip = parse_ip(addr)?;
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    IpNet::new(ip, prefix.parse().ok()?).ok().map(|n| n.trunc())
}

fn port_u16(value: i32) -> Option<u16> {
    u16::try_from(value).ok().filter(|p| *p != 0)
}

/// Converts a Service into its service ports.
///
/// Services without a ClusterIP (headless, `None`, empty) and ExternalName services yield no ports, as upstream.
pub fn service_ports(svc: &Service) -> Result<ConvertedService, ConvertError> {
    let namespace = svc.metadata.namespace.as_deref().unwrap_or_default();
    let name = svc.metadata.name.as_deref().unwrap_or_default();
    let ctx = Ctx {
        kind: ObjectKind::Service,
        namespace,
        name,
    };
    if namespace.is_empty() || name.is_empty() {
        return Err(ctx.err(InvalidReason::MissingName));
    }
    let mut out = ConvertedService {
        name: ServiceName {
            namespace: namespace.into(),
            name: name.into(),
        },
        ports: Vec::new(),
        warnings: Vec::new(),
    };
    let Some(spec) = &svc.spec else {
        return Ok(out);
    };
    let svc_type = spec.type_.as_deref().unwrap_or("ClusterIP");
    let primary = spec.cluster_ip.as_deref().unwrap_or_default();
    if primary.is_empty() || primary == "None" || svc_type == "ExternalName" {
        return Ok(out);
    }
    let template = port_template(svc, spec, svc_type, &ctx, &out.name, &mut out.warnings)?;
    out.ports = ports_of(spec, &template, &ctx)?;
    Ok(out)
}

/// Everything a service's ports share (the per-port fields left empty).
fn port_template(
    svc: &Service,
    spec: &ServiceSpec,
    svc_type: &str,
    ctx: &Ctx<'_>,
    service: &ServiceName,
    warnings: &mut Vec<ConvertWarning>,
) -> Result<ServicePort, ConvertError> {
    // In the order upstream validates and warns.
    let cluster_ips = cluster_ips(spec, ctx)?;
    let external_ips = parsed_list(&spec.external_ips, parse_ip, "externalIP", ctx, warnings);
    // Source ranges come from the spec field only: upstream kube-proxy ignores the legacy annotation.
    let load_balancer_source_ranges = parsed_list(
        &spec.load_balancer_source_ranges,
        parse_cidr,
        "loadBalancerSourceRange",
        ctx,
        warnings,
    );
    let load_balancer_ingress = load_balancer_ingress(svc, ctx, warnings);
    let session_affinity_timeout = affinity_timeout(spec, ctx)?;
    let externally_accessible = matches!(svc_type, "LoadBalancer" | "NodePort")
        || (svc_type == "ClusterIP" && spec.external_ips.as_ref().is_some_and(|v| !v.is_empty()));
    // One parse of the annotations per Service; kube-router's `service.local` overrides both policies.
    let options = ServiceOptions::from_annotations(svc.metadata.annotations.as_ref());
    let local_override = options.as_ref().is_some_and(|o| o.local_override.is_some());
    let spec_external_local =
        externally_accessible && spec.external_traffic_policy.as_deref() == Some("Local");
    let external_policy_local = spec_external_local || (externally_accessible && local_override);
    // The API server allocates a health-check node port for the spec's policy only.
    let health_check_node_port = if svc_type == "LoadBalancer" && spec_external_local {
        health_check_node_port(spec, ctx, warnings)?
    } else {
        None
    };
    Ok(ServicePort {
        name: ServicePortName {
            namespace: service.namespace.clone(),
            name: service.name.clone(),
            port_name: Name::default(),
            protocol: Protocol::Tcp,
        },
        cluster_ips,
        port: 0,
        protocol: Protocol::Tcp,
        node_port: None,
        external_ips,
        load_balancer_ingress,
        load_balancer_source_ranges,
        session_affinity_timeout,
        external_policy_local,
        internal_policy_local: !local_override
            && spec.internal_traffic_policy.as_deref() == Some("Local"),
        health_check_node_port,
        // A bad value never rejects the Service: it is reported from the planner's decision record.
        options,
    })
}

/// ClusterIPs: `spec.clusterIPs` when set, else `spec.clusterIP`; at most one per family.
fn cluster_ips(spec: &ServiceSpec, ctx: &Ctx<'_>) -> Result<Vec<IpAddr>, ConvertError> {
    let primary = spec.cluster_ip.as_deref().unwrap_or_default();
    let raw_ips: Vec<&str> = match &spec.cluster_ips {
        Some(list) if !list.is_empty() => list.iter().map(String::as_str).collect(),
        _ => vec![primary],
    };
    let mut cluster_ips: Vec<IpAddr> = Vec::new();
    for raw in raw_ips {
        let ip =
            parse_ip(raw).ok_or_else(|| ctx.err(InvalidReason::InvalidClusterIp(raw.into())))?;
        let family = IpFamily::of(&ip);
        if cluster_ips.iter().any(|o| IpFamily::of(o) == family) {
            return Err(ctx.err(InvalidReason::DuplicateClusterIpFamily(family.label())));
        }
        cluster_ips.push(ip);
    }
    Ok(cluster_ips)
}

/// The entries of an optional list that `parse` accepts; each other one is dropped with a warning.
fn parsed_list<T>(
    raw: &Option<Vec<String>>,
    parse: fn(&str) -> Option<T>,
    what: &str,
    ctx: &Ctx<'_>,
    warnings: &mut Vec<ConvertWarning>,
) -> Vec<T> {
    raw.iter()
        .flatten()
        .filter_map(|raw| {
            let parsed = parse(raw);
            if parsed.is_none() {
                warnings.push(ctx.warn(format!("ignoring invalid {what} {raw:?}")));
            }
            parsed
        })
        .collect()
}

/// The status' load-balancer ingress IPs; invalid ones are dropped with a warning.
fn load_balancer_ingress(
    svc: &Service,
    ctx: &Ctx<'_>,
    warnings: &mut Vec<ConvertWarning>,
) -> Vec<LoadBalancerIngress> {
    let mut out = Vec::new();
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref());
    for ing in ingress.into_iter().flatten() {
        let Some(raw) = ing.ip.as_deref().filter(|s| !s.is_empty()) else {
            continue;
        };
        match parse_ip(raw) {
            Some(ip) => out.push(LoadBalancerIngress {
                ip,
                ip_mode_proxy: ing.ip_mode.as_deref().is_some_and(|m| m != "VIP"),
            }),
            None => warnings
                .push(ctx.warn(format!("ignoring invalid load-balancer ingress IP {raw:?}"))),
        }
    }
    out
}

/// The ClientIP affinity timeout (default 3 hours), `None` without affinity.
fn affinity_timeout(spec: &ServiceSpec, ctx: &Ctx<'_>) -> Result<Option<u32>, ConvertError> {
    if spec.session_affinity.as_deref() != Some("ClientIP") {
        return Ok(None);
    }
    let configured = spec
        .session_affinity_config
        .as_ref()
        .and_then(|c| c.client_ip.as_ref())
        .and_then(|c| c.timeout_seconds);
    match configured {
        None => Ok(Some(DEFAULT_AFFINITY_TIMEOUT)),
        Some(t) if t > 0 => Ok(Some(t.unsigned_abs())),
        Some(t) => Err(ctx.err(InvalidReason::InvalidAffinityTimeout(t.into()))),
    }
}

/// The health-check node port of a LoadBalancer with externalTrafficPolicy Local.
fn health_check_node_port(
    spec: &ServiceSpec,
    ctx: &Ctx<'_>,
    warnings: &mut Vec<ConvertWarning>,
) -> Result<Option<u16>, ConvertError> {
    match spec.health_check_node_port.unwrap_or(0) {
        0 => {
            warnings.push(ctx.warn("service has no healthCheckNodePort".into()));
            Ok(None)
        }
        p => port_u16(p)
            .map(Some)
            .ok_or_else(|| ctx.err(InvalidReason::InvalidHealthCheckNodePort(p.into()))),
    }
}

/// One [`ServicePort`] per spec port, from `template`; names and port/protocol pairs must be unique.
fn ports_of(
    spec: &ServiceSpec,
    template: &ServicePort,
    ctx: &Ctx<'_>,
) -> Result<Vec<ServicePort>, ConvertError> {
    let mut names = BTreeSet::new();
    let mut numbers = BTreeSet::new();
    let mut out = Vec::new();
    for p in spec.ports.iter().flatten() {
        let port = one_port(p, template, ctx)?;
        if !names.insert(port.name.port_name.clone()) {
            return Err(ctx.err(InvalidReason::DuplicatePortName(
                port.name.port_name.to_string(),
            )));
        }
        if !numbers.insert((port.port, port.protocol)) {
            return Err(ctx.err(InvalidReason::DuplicatePort {
                port: port.port,
                protocol: port.protocol.as_upper(),
            }));
        }
        out.push(port);
    }
    Ok(out)
}

/// One spec port: protocol, port and node port checked, the rest from `template`.
fn one_port(
    p: &k8s_openapi::api::core::v1::ServicePort,
    template: &ServicePort,
    ctx: &Ctx<'_>,
) -> Result<ServicePort, ConvertError> {
    let port_name = p.name.clone().unwrap_or_default();
    let protocol_raw = p.protocol.as_deref().unwrap_or("TCP");
    let protocol = Protocol::from_api(protocol_raw).ok_or_else(|| {
        ctx.err(InvalidReason::UnknownProtocol {
            port_name: port_name.clone(),
            protocol: protocol_raw.into(),
        })
    })?;
    let port = port_u16(p.port).ok_or_else(|| {
        ctx.err(InvalidReason::InvalidPort {
            port_name: port_name.clone(),
            value: p.port.into(),
        })
    })?;
    let node_port = match p.node_port.unwrap_or(0) {
        0 => None,
        np => Some(port_u16(np).ok_or_else(|| {
            ctx.err(InvalidReason::InvalidNodePort {
                port_name: port_name.clone(),
                value: np.into(),
            })
        })?),
    };
    let mut out = template.clone();
    out.name.port_name = port_name.into();
    out.name.protocol = protocol;
    out.port = port;
    out.protocol = protocol;
    out.node_port = node_port;
    Ok(out)
}

/// Namespace, slice name and (if labelled) service name of an EndpointSlice, without validating the rest.
pub fn slice_keys(slice: &EndpointSlice) -> (String, String, Option<String>) {
    let md = &slice.metadata;
    (
        md.namespace.clone().unwrap_or_default(),
        md.name.clone().unwrap_or_default(),
        md.labels
            .as_ref()
            .and_then(|l| l.get(LABEL_SERVICE_NAME))
            .filter(|s| !s.is_empty())
            .cloned(),
    )
}

/// Parses the `last-change-trigger-time` annotation (RFC 3339).
pub fn trigger_time(slice: &EndpointSlice) -> Option<SystemTime> {
    let raw = slice
        .metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_TRIGGER_TIME)?;
    raw.parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(SystemTime::from)
}

/// Converts an EndpointSlice. `Ok(None)` for address types kube-proxy ignores (FQDN).
pub fn slice_info(slice: &EndpointSlice) -> Result<Option<SliceInfo>, ConvertError> {
    let (namespace, slice_name, service) = slice_keys(slice);
    let ctx = Ctx {
        kind: ObjectKind::EndpointSlice,
        namespace: &namespace,
        name: &slice_name,
    };
    if namespace.is_empty() || slice_name.is_empty() {
        return Err(ctx.err(InvalidReason::MissingName));
    }
    let family = match slice.address_type.as_str() {
        "IPv4" => IpFamily::V4,
        "IPv6" => IpFamily::V6,
        "FQDN" => return Ok(None),
        other => return Err(ctx.err(InvalidReason::UnknownAddressType(other.into()))),
    };
    let service = service.ok_or_else(|| ctx.err(InvalidReason::MissingServiceName))?;
    let mut warnings = Vec::new();
    let ports = slice_ports(slice, &ctx, &mut warnings)?;
    let only_port = match ports.as_slice() {
        [p] => p.port,
        _ => 0,
    };
    let endpoints = slice_endpoints(slice, family, only_port, &ctx, &mut warnings)?;

    Ok(Some(SliceInfo {
        service: ServiceName {
            namespace: namespace.into(),
            name: service.into(),
        },
        slice_name: slice_name.into(),
        ports,
        endpoints: Arc::new(endpoints),
        trigger_time: trigger_time(slice),
        warnings,
    }))
}

/// The ports of a slice, sorted; nameless or numberless ones are dropped with a warning.
fn slice_ports(
    slice: &EndpointSlice,
    ctx: &Ctx<'_>,
    warnings: &mut Vec<ConvertWarning>,
) -> Result<Vec<SlicePort>, ConvertError> {
    let mut ports = Vec::new();
    let mut names = BTreeSet::new();
    let mut numbers = BTreeSet::new();
    for p in slice.ports.iter().flatten() {
        let Some(port_name) = p.name.clone() else {
            warnings.push(ctx.warn("ignoring port with nil name".into()));
            continue;
        };
        let Some(number) = p.port else {
            warnings.push(ctx.warn(format!("ignoring port {port_name:?} without number")));
            continue;
        };
        let port = port_u16(number).ok_or_else(|| {
            ctx.err(InvalidReason::InvalidPort {
                port_name: port_name.clone(),
                value: number.into(),
            })
        })?;
        let protocol_raw = p.protocol.as_deref().unwrap_or("TCP");
        let protocol = Protocol::from_api(protocol_raw).ok_or_else(|| {
            ctx.err(InvalidReason::UnknownProtocol {
                port_name: port_name.clone(),
                protocol: protocol_raw.into(),
            })
        })?;
        if !names.insert((port_name.clone(), protocol)) {
            return Err(ctx.err(InvalidReason::DuplicatePortName(port_name)));
        }
        if !numbers.insert((port, protocol)) {
            return Err(ctx.err(InvalidReason::DuplicatePort {
                port,
                protocol: protocol.as_upper(),
            }));
        }
        ports.push(SlicePort {
            name: port_name.into(),
            protocol,
            port,
        });
    }
    ports.sort();
    ports.shrink_to_fit();
    Ok(ports)
}

/// The endpoints of a slice of address family `family`, sorted; each carries `port`.
fn slice_endpoints(
    slice: &EndpointSlice,
    family: IpFamily,
    port: u16,
    ctx: &Ctx<'_>,
    warnings: &mut Vec<ConvertWarning>,
) -> Result<Vec<Endpoint>, ConvertError> {
    let mut endpoints = Vec::with_capacity(slice.endpoints.len());
    for ep in &slice.endpoints {
        let Some(raw) = ep.addresses.first() else {
            warnings.push(ctx.warn("ignoring endpoint without addresses".into()));
            continue;
        };
        let ip =
            parse_ip(raw).ok_or_else(|| ctx.err(InvalidReason::InvalidAddress(raw.clone())))?;
        if IpFamily::of(&ip) != family {
            return Err(ctx.err(InvalidReason::AddressFamilyMismatch {
                address: raw.clone(),
                address_type: slice.address_type.clone(),
            }));
        }
        endpoints.push(endpoint(ep, ip, port));
    }
    endpoints.sort();
    Ok(endpoints)
}

/// One endpoint: conditions (ready by default, serving as ready, not terminating) and hints.
fn endpoint(ep: &k8s_openapi::api::discovery::v1::Endpoint, ip: IpAddr, port: u16) -> Endpoint {
    let cond = ep.conditions.as_ref();
    let ready = cond.and_then(|c| c.ready).unwrap_or(true);
    let serving = cond.and_then(|c| c.serving).unwrap_or(ready);
    let terminating = cond.and_then(|c| c.terminating).unwrap_or(false);
    let hints = ep.hints.as_ref();
    let topology = Topology {
        node_name: ep.node_name.as_deref().map(Arc::from),
        zone: ep.zone.as_deref().map(Arc::from),
        hints_for_nodes: hints
            .and_then(|h| h.for_nodes.as_ref())
            .filter(|v| !v.is_empty())
            .map(|v| v.iter().map(|n| Arc::from(n.name.as_str())).collect()),
        hints_for_zones: hints
            .and_then(|h| h.for_zones.as_ref())
            .filter(|v| !v.is_empty())
            .map(|v| v.iter().map(|z| Arc::from(z.name.as_str())).collect()),
    };
    let mut out = Endpoint::new(ip, port).with_topology(topology);
    out.ready = ready;
    out.serving = serving;
    out.terminating = terminating;
    out
}

//! The explanation of one Service on this node, as served on `/debug/services`: the planner's decision
//! records merged with the kernel's side (real servers with their weights and connection counts as IPVS
//! reports them, draining ones, whether the last full sync repaired drift on the Service).

use super::drift::DriftMarks;
use super::index::FamilyDecisions;
use super::kernel::KernelView;
use crate::cluster::model::{Endpoint, ServiceName};
use crate::gotime::instant::format_rfc3339_nano;
use crate::proxier::graceful::DrainQueue;
use crate::proxier::plan::decision::{EndpointSet, PortDecision, SchedulerSource, VsDecision};
use serde::Serialize;

/// Every Service the node programs (`/debug/services`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeExplanation {
    pub node: String,
    /// Why the kernel's side is missing, when IPVS could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_error: Option<String>,
    pub services: Vec<ServiceExplanation>,
}

/// One Service.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExplanation {
    pub service: ServiceRef,
    pub node: String,
    /// Why the kernel's side is missing, when IPVS could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_error: Option<String>,
    /// Annotations not applied, and why.
    pub problems: Vec<Problem>,
    pub drift: Drift,
    pub ports: Vec<PortExplanation>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    pub annotation: String,
    pub value: String,
    pub reason: String,
    /// `Invalid` or `Unsupported`.
    pub kind: String,
}

/// What the last full sync repaired on this Service.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    /// RFC 3339 time of the last full sync, as Go marshals a time (empty: none yet).
    pub last_full_sync: String,
    /// Kinds repaired on this Service (empty: none).
    pub repaired: Vec<String>,
}

/// One Service port in one IP family.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PortExplanation {
    pub name: String,
    pub protocol: String,
    pub family: String,
    pub port: u16,
    pub external_traffic_policy: String,
    pub internal_traffic_policy: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_check_node_port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_endpoints: Option<u32>,
    pub virtual_servers: Vec<VirtualServer>,
    pub endpoints: Vec<EndpointExplanation>,
}

/// One virtual server: planned, and as the kernel has it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualServer {
    pub kind: &'static str,
    pub address: String,
    pub port: u16,
    pub scheduler: &'static str,
    pub scheduler_flags: Vec<&'static str>,
    pub scheduler_source: &'static str,
    /// Why the scheduler is what it is, for people.
    pub scheduler_note: String,
    /// Which endpoints its real servers come from: `cluster`, `local` or `clusterNoLocal`.
    pub endpoint_set: &'static str,
    /// Whether the kernel has it (false: not programmed, or the kernel could not be read).
    pub programmed: bool,
    pub real_servers: Vec<RealServer>,
}

/// One real server as IPVS reports it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RealServer {
    pub address: String,
    pub port: u16,
    pub weight: u32,
    pub active_conns: u32,
    pub inactive_conns: u32,
    pub draining: bool,
    pub draining_seconds: u64,
}

/// One endpoint the planner considered.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointExplanation {
    pub address: String,
    pub port: u16,
    pub node_name: String,
    pub zone: String,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub selected: bool,
    /// Empty when selected.
    pub reason: &'static str,
    pub reason_text: &'static str,
    /// The kinds of virtual servers whose real servers include it.
    pub used_by: Vec<&'static str>,
}

/// What the explanation of one Service reads besides its decision records.
pub struct Context<'a> {
    pub node: &'a str,
    pub kernel: &'a KernelView,
    pub drains: &'a DrainQueue,
    pub drift: &'a DriftMarks,
}

fn endpoint_set(s: EndpointSet) -> &'static str {
    match s {
        EndpointSet::Cluster => "cluster",
        EndpointSet::Local => "local",
        EndpointSet::ClusterNoLocal => "clusterNoLocal",
    }
}

/// Why the virtual servers have their scheduler, for people.
fn scheduler_note(source: &SchedulerSource) -> String {
    match source {
        SchedulerSource::Node => "the node's scheduler, ipvs.scheduler".to_string(),
        SchedulerSource::Annotation(key) => format!("asked for by annotation {key}"),
        SchedulerSource::AnnotationRejected(key) => {
            format!("annotation {key} rejected (see problems); the node's scheduler is used")
        }
        SchedulerSource::Unavailable(r) => format!(
            "annotation {} asks for {:?}, which this node cannot use (see problems); the node's \
             scheduler is used",
            r.annotation,
            r.scheduler.name()
        ),
    }
}

impl Context<'_> {
    /// The explanation of Service `name` from its records.
    pub fn service(&self, name: &ServiceName, d: &FamilyDecisions) -> ServiceExplanation {
        let problems = d
            .problems()
            .into_iter()
            .map(|p| Problem {
                annotation: p.annotation.to_string(),
                value: p.value,
                reason: p.reason,
                kind: format!("{:?}", p.kind),
            })
            .collect();
        let repaired = self.drift.services.get(name);
        ServiceExplanation {
            service: ServiceRef {
                namespace: name.namespace.to_string(),
                name: name.name.to_string(),
            },
            node: self.node.to_string(),
            kernel_error: None,
            problems,
            drift: Drift {
                last_full_sync: self
                    .drift
                    .at
                    .map(|t| format_rfc3339_nano(Some(t)))
                    .unwrap_or_default(),
                repaired: repaired
                    .into_iter()
                    .flatten()
                    .map(|k| k.label().to_string())
                    .collect(),
            },
            ports: d
                .iter()
                .flat_map(|r| r.ports.iter())
                .map(|p| self.port(p))
                .collect(),
        }
    }

    fn port(&self, p: &PortDecision) -> PortExplanation {
        let policy = |local: bool| if local { "Local" } else { "Cluster" }.to_string();
        PortExplanation {
            name: p.port.name.port_name.to_string(),
            protocol: p.port.protocol.as_upper().to_string(),
            family: p.family.label().to_string(),
            port: p.port.port,
            external_traffic_policy: policy(p.port.external_policy_local()),
            internal_traffic_policy: policy(p.port.internal_policy_local),
            health_check_node_port: p.health_check.map(|h| h.node_port),
            local_endpoints: p.health_check.map(|h| h.local_endpoints),
            virtual_servers: p
                .virtual_servers
                .iter()
                .map(|v| self.virtual_server(p, v))
                .collect(),
            endpoints: p.endpoints().map(|(e, v)| endpoint(p, e, v)).collect(),
        }
    }

    fn virtual_server(&self, p: &PortDecision, v: &VsDecision) -> VirtualServer {
        let s = &p.scheduler;
        let kernel = self.kernel.get(&v.key);
        let drains = self.drains.get(&v.key);
        let real_servers = kernel
            .map(|k| k.real_servers.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|d| {
                let since = drains.and_then(|q| q.get(&(d.addr, d.port)));
                RealServer {
                    address: d.addr.to_string(),
                    port: d.port,
                    weight: d.weight,
                    active_conns: d.active_conns,
                    inactive_conns: d.inactive_conns,
                    draining: since.is_some(),
                    draining_seconds: since.map_or(0, |t| t.elapsed().as_secs()),
                }
            })
            .collect();
        VirtualServer {
            kind: v.kind.name(),
            address: v.key.addr.to_string(),
            port: v.key.port,
            scheduler: s.scheduler.name(),
            scheduler_flags: s.scheduler.flag_names(s.flags),
            scheduler_source: s.source.name(),
            scheduler_note: scheduler_note(&s.source),
            endpoint_set: endpoint_set(v.endpoints),
            programmed: kernel.is_some(),
            real_servers,
        }
    }
}

fn endpoint(
    p: &PortDecision,
    e: &Endpoint,
    v: crate::cluster::select::Verdict,
) -> EndpointExplanation {
    let selection = p.selection(v);
    let reason = selection.err();
    let used_by = p
        .virtual_servers
        .iter()
        .filter(|vs| vs.endpoints.pick(v) == crate::cluster::select::Pick::Selected)
        .map(|vs| vs.kind.name());
    let mut used_by: Vec<&'static str> = used_by.collect();
    used_by.dedup();
    EndpointExplanation {
        address: e.ip.to_string(),
        port: e.port,
        node_name: e.node_name().unwrap_or_default().to_string(),
        zone: e.zone().unwrap_or_default().to_string(),
        ready: e.ready,
        serving: e.serving,
        terminating: e.terminating,
        selected: selection.is_ok(),
        reason: reason.map_or("", |r| r.code()),
        reason_text: reason.map_or("", |r| r.text()),
        used_by,
    }
}

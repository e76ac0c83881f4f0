//! The desired kernel state computed by the planner for one IP family.

use crate::cluster::model::{IpFamily, ServiceName};
use crate::kernel::ipset::IpSetSpec;
use crate::kernel::ipvs::{IpvsDestination, IpvsService, IpvsServiceKey};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

/// One IPVS virtual server with the real servers it should have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredVirtualServer {
    pub service: IpvsService,
    /// Real servers keyed by (address, port); weight and forwarding method in the value.
    pub destinations: BTreeMap<(IpAddr, u16), IpvsDestination>,
}

/// Members one ipset should have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredIpSet {
    pub spec: IpSetSpec,
    /// Entries in `ipset save` canonical text form, e.g. `10.96.0.1,tcp:443`.
    pub entries: BTreeSet<String>,
}

/// Health-check listener wanted for one externalTrafficPolicy=Local service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheckService {
    pub service: ServiceName,
    pub node_port: u16,
    pub local_endpoints: usize,
}

/// Everything `sync_proxy_rules` programs for one family, as a pure value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredState {
    pub family: IpFamily,
    /// Shared values: the reconciler keeps the same `Arc`s as what it applied.
    pub virtual_servers: BTreeMap<IpvsServiceKey, Arc<DesiredVirtualServer>>,
    /// Every ipset of this family (empty sets included: they are always created).
    pub ipsets: BTreeMap<String, DesiredIpSet>,
    /// Full `iptables-restore --noflush` payload (nat then filter, as upstream writes it), built-in-chain jumps excluded.
    pub iptables_payload: String,
    /// Jump rules that must sit at the top of built-in chains (checked, then inserted).
    pub jumps: Vec<JumpRule>,
    /// Addresses bound to kube-ipvs0 (/32 or /128).
    pub bound_addresses: BTreeSet<IpAddr>,
    /// Health-check node port listeners (externalTrafficPolicy=Local services).
    pub health_checks: Vec<HealthCheckService>,
    /// Service ports that fell back to cluster endpoints because they had no local one, by traffic policy,
    /// for the no-local-endpoints metric.
    pub no_local_endpoints: BTreeMap<TrafficPolicy, u64>,
}

/// A traffic policy set to Local (the `traffic_policy` label of
/// `sync_proxy_rules_no_local_endpoints_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TrafficPolicy {
    /// internalTrafficPolicy=Local (ClusterIP).
    Internal,
    /// externalTrafficPolicy=Local (NodePort, external IPs, load balancers).
    External,
}

impl TrafficPolicy {
    /// Both policies.
    pub const ALL: [TrafficPolicy; 2] = [TrafficPolicy::Internal, TrafficPolicy::External];

    /// Label value as upstream spells it.
    pub fn label(self) -> &'static str {
        match self {
            TrafficPolicy::Internal => "internal",
            TrafficPolicy::External => "external",
        }
    }
}

/// A jump from a built-in chain to one of ours, placed at the top of that chain.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JumpRule {
    pub table: &'static str,
    pub chain: &'static str,
    pub target: &'static str,
    pub comment: &'static str,
}

impl JumpRule {
    /// Rule arguments after the chain name, as passed to `iptables -I <chain>`.
    pub fn args(&self) -> Vec<String> {
        vec![
            "-m".into(),
            "comment".into(),
            "--comment".into(),
            self.comment.into(),
            "-j".into(),
            self.target.into(),
        ]
    }
}

//! The vocabulary of drift: what a full sync repaired, by kind and where, and the kinds of foreign
//! objects it left alone (measured in [`crate::proxier::reconcile::drift`], read by the metrics,
//! explain and the sync loop).

use crate::kernel::ipvs::IpvsServiceKey;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// What was repaired, as the `kind` label of `kubeproxy_rs_drift_repairs_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DriftKind {
    /// A virtual server of ours deleted, or one added on our addresses.
    VirtualServer,
    /// A real server deleted or added.
    RealServer,
    /// A real server's weight changed.
    Weight,
    /// A virtual server's scheduler, flags or timeout changed.
    Scheduler,
    /// A member of one of our sets deleted or added.
    IpsetMember,
    /// A rule of our chains changed, or a jump into them deleted.
    IptablesRule,
    /// An address on kube-ipvs0 deleted or added.
    Address,
}

impl DriftKind {
    /// Every kind.
    pub const ALL: [DriftKind; 7] = [
        DriftKind::VirtualServer,
        DriftKind::RealServer,
        DriftKind::Weight,
        DriftKind::Scheduler,
        DriftKind::IpsetMember,
        DriftKind::IptablesRule,
        DriftKind::Address,
    ];

    /// The metric's label value.
    pub fn label(self) -> &'static str {
        match self {
            DriftKind::VirtualServer => "virtual_server",
            DriftKind::RealServer => "real_server",
            DriftKind::Weight => "weight",
            DriftKind::Scheduler => "scheduler",
            DriftKind::IpsetMember => "ipset_member",
            DriftKind::IptablesRule => "iptables_rule",
            DriftKind::Address => "address",
        }
    }
}

/// Objects another tool owns that the full sync found and left alone, as the `kind` label of
/// `kubeproxy_rs_foreign_objects`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ForeignKind {
    /// IPVS virtual servers that are not ours (or in `ipvs.excludeCIDRs`).
    VirtualServer,
    /// ipsets that are not ours.
    Ipset,
}

impl ForeignKind {
    /// Every kind.
    pub const ALL: [ForeignKind; 2] = [ForeignKind::VirtualServer, ForeignKind::Ipset];

    /// The metric's label value.
    pub fn label(self) -> &'static str {
        match self {
            ForeignKind::VirtualServer => "virtual_server",
            ForeignKind::Ipset => "ipset",
        }
    }
}

/// What one full sync found changed behind its back, and where.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriftReport {
    /// Repairs by kind (kinds with none are absent).
    pub counts: BTreeMap<DriftKind, u64>,
    /// Virtual servers with drift of an IPVS kind, and what kind.
    pub virtual_servers: BTreeMap<IpvsServiceKey, BTreeSet<DriftKind>>,
    /// kube-ipvs0 addresses deleted or added.
    pub addresses: BTreeSet<IpAddr>,
    /// (set, member) deleted or added.
    pub set_members: BTreeSet<(String, String)>,
}

impl DriftReport {
    /// Whether nothing drifted.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Counts `n` repairs of `kind`.
    pub fn add(&mut self, kind: DriftKind, n: u64) {
        if n > 0 {
            *self.counts.entry(kind).or_default() += n;
        }
    }

    /// Counts one repair of `kind` at virtual server `key`.
    pub fn add_virtual_server(&mut self, key: IpvsServiceKey, kind: DriftKind) {
        self.add(kind, 1);
        self.virtual_servers.entry(key).or_default().insert(kind);
    }
}

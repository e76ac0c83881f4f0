//! Each sync's input per family: the node's facts (its addresses read from the kernel, the Node's zone
//! and podCIDRs) and the plan configuration, with the shared service and endpoint maps.

use super::settings::SyncSettings;
use crate::cluster::model::{EndpointsMap, ServiceMap};
use crate::cluster::watch::NodeInfo;
use crate::kernel::KernelResult;
use crate::kernel::link::DUMMY_DEVICE;
use crate::proxier::plan::{NodeFacts, node_port_ips};
use crate::proxier::{FamilySnapshot, Proxier};
use ipnet::IpNet;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

/// The node's addresses: (link, address) for every link but kube-ipvs0, and kube-ipvs0's.
pub type LocalAddresses = (Vec<(String, IpAddr)>, Vec<IpAddr>);

/// The service and endpoint maps a sync plans (shared, not copied).
#[derive(Debug, Clone, Copy)]
pub struct Maps<'a> {
    pub services: &'a Arc<ServiceMap>,
    pub endpoints: &'a Arc<EndpointsMap>,
}

/// The node's addresses. A full sync reads them all from the kernel. An event-driven sync reads every
/// link but kube-ipvs0 (cached by the backend until a link or address changes) and takes kube-ipvs0's
/// from the last plan (the addresses this proxier keeps there), so its cost does not grow with the
/// number of services. Of kube-ipvs0's it keeps only those a nodePortAddresses CIDR contains: the
/// only ones [`node_port_ips`] can pick (without CIDRs it picks none of them), so an event-driven sync
/// copies none of the service addresses.
pub fn local_addresses(
    p: &mut Proxier,
    settings: &SyncSettings,
    full: bool,
) -> KernelResult<LocalAddresses> {
    if full {
        return Ok(split_dummy(p.backends_mut().links.local_addresses()?));
    }
    let others = p
        .backends_mut()
        .links
        .local_addresses_except(DUMMY_DEVICE)?;
    let mut on_dummy = Vec::new();
    for &family in &settings.families {
        if let Some(d) = p.desired(family) {
            on_dummy.extend(selectable(&d.bound_addresses, &settings.node_port_cidrs));
        }
    }
    Ok((others, on_dummy))
}

/// The addresses of `bound` that a nodePortAddresses CIDR contains (none without CIDRs).
pub fn selectable<'a, I>(bound: I, cidrs: &'a [IpNet]) -> impl Iterator<Item = IpAddr> + 'a
where
    I: IntoIterator<Item = &'a IpAddr>,
    I::IntoIter: 'a,
{
    // Without CIDRs nothing is selectable: the walk is skipped.
    let walk = (!cidrs.is_empty()).then(|| bound.into_iter());
    walk.into_iter()
        .flatten()
        .copied()
        .filter(|ip| cidrs.iter().any(|c| c.contains(ip)))
}

/// Splits (link, address) pairs into the other links' and kube-ipvs0's addresses.
pub fn split_dummy(local: Vec<(String, IpAddr)>) -> LocalAddresses {
    let (on_dummy, others): (Vec<_>, Vec<_>) = local
        .into_iter()
        .partition(|(link, _)| link == DUMMY_DEVICE);
    (others, on_dummy.into_iter().map(|(_, a)| a).collect())
}

/// Node facts and plan configuration of every family, from one read of the local addresses.
pub fn snapshots(
    settings: &SyncSettings,
    node: Option<&NodeInfo>,
    local: &LocalAddresses,
    maps: Maps<'_>,
) -> Vec<FamilySnapshot> {
    let (others, on_dummy) = local;
    let mut by_iface: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
    for (iface, ip) in others {
        by_iface.entry(iface.clone()).or_default().push(*ip);
    }
    let local_addresses: Vec<IpAddr> = by_iface.values().flatten().copied().collect();
    let pod_cidrs = node.map(|n| n.pod_cidrs.as_slice()).unwrap_or_default();
    settings
        .families
        .iter()
        .filter_map(|&family| {
            let config = settings.plan_config(family, pod_cidrs)?;
            let cidrs = &settings.node_port_cidrs;
            let facts = NodeFacts {
                node_name: settings.node_name.clone(),
                zone: node.and_then(|n| n.zone.clone()),
                node_ips: settings.node_ips.clone(),
                node_port_ips: node_port_ips(&by_iface, on_dummy, cidrs, family),
                local_addresses: local_addresses.clone(),
            };
            Some(FamilySnapshot {
                services: maps.services.clone(),
                endpoints: maps.endpoints.clone(),
                node: facts,
                config,
            })
        })
        .collect()
}

//! Stale UDP conntrack flows of services whose real servers changed or that were removed.
//!
//! A UDP flow is deleted when its original destination is one of our UDP virtual servers that has real
//! servers and its reply source is not one of them, or when the virtual server was removed. The table is
//! dumped only when something changed (or on a full sync, or when the trackers report stale entries).

use super::ipvs::UdpChanges;
use super::{Backends, ConntrackHints, FamilyInput, Reconciler};
use crate::cluster::model::Protocol;
use crate::proxier::report::{FailureKind, SyncReport, SyncStep};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Instant;

impl Reconciler {
    pub(super) fn sync_conntrack(
        &mut self,
        k: &mut Backends,
        families: &[FamilyInput<'_>],
        full: bool,
        udp: &UdpChanges,
        hints: &ConntrackHints,
        report: &mut SyncReport,
    ) {
        if !full && !udp.changed && udp.removed.is_empty() && hints.is_empty() {
            return;
        }
        for f in families {
            let start = Instant::now();
            let deleted = report.conntrack_deleted;
            conntrack_family(k, f, udp, hints, report);
            let d = start.elapsed();
            let deleted = report.conntrack_deleted - deleted;
            let fam = report.family_mut(f.desired.family);
            fam.conntrack_deleted += deleted;
            fam.conntrack_duration = Some(d);
            report.add_family_step(SyncStep::Conntrack, f.desired.family, d);
        }
    }
}

/// Deletes one family's stale UDP flows.
fn conntrack_family(
    k: &mut Backends,
    f: &FamilyInput<'_>,
    udp: &UdpChanges,
    hints: &ConntrackHints,
    report: &mut SyncReport,
) {
    let family = f.desired.family;
    // (vip, port) -> real servers; only virtual servers that have some.
    let live: BTreeMap<(IpAddr, u16), BTreeSet<(IpAddr, u16)>> = f
        .desired
        .virtual_servers
        .iter()
        .filter(|(key, vs)| key.protocol == Protocol::Udp && !vs.destinations.is_empty())
        .map(|(key, vs)| ((key.addr, key.port), vs.destinations.keys().collect()))
        .collect();
    let planned: BTreeSet<(IpAddr, u16)> = f
        .desired
        .virtual_servers
        .keys()
        .filter(|key| key.protocol == Protocol::Udp)
        .map(|key| (key.addr, key.port))
        .collect();
    let removed: BTreeSet<(IpAddr, u16)> = udp
        .removed
        .iter()
        .map(|key| (key.addr, key.port))
        .filter(|vp| !planned.contains(vp))
        .collect();
    if live.is_empty() && removed.is_empty() && hints.stale_service_ips.is_empty() {
        return;
    }
    let flows = match k.conntrack.udp_flows(family) {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(ipFamily = family.label(), error = %e, "Failed to list conntrack entries");
            report.fail(FailureKind::Conntrack);
            return;
        }
    };
    for flow in flows {
        let dst = (flow.orig_dst, flow.orig_dport);
        let stale = match live.get(&dst) {
            Some(reals) => !reals.contains(&(flow.reply_src, flow.reply_sport)),
            None => {
                removed.contains(&dst)
                    || (hints.stale_service_ips.contains(&flow.orig_dst) && !planned.contains(&dst))
            }
        };
        if !stale {
            continue;
        }
        match k.conntrack.delete(&flow) {
            Ok(true) => report.conntrack_deleted += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::error!(?flow, error = %e, "Failed to delete conntrack flow");
                report.fail(FailureKind::Conntrack);
            }
        }
    }
}

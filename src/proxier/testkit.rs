//! Test support: the backends' in-memory fakes wrapped in [`Rec`], which logs every call of every backend in
//! one ordered list (so tests can check cross-backend order, minimality and that event-driven syncs do not
//! read the kernel) and can make chosen operations fail persistently.

use crate::kernel::conntrack::fake::FakeConntrack;
use crate::kernel::conntrack::{Conntrack, ConntrackFlow};
use crate::kernel::ipset::fake::FakeIpSets;
use crate::kernel::ipset::save::SavedSets;
use crate::kernel::ipset::{ApplyReport, IpSetOp, IpSetSpec, IpSets};
use crate::kernel::iptables::Iptables;
use crate::kernel::iptables::fake::FakeIptables;
use crate::kernel::ipvs::fake::FakeIpvs;
use crate::kernel::ipvs::{
    Ipvs, IpvsDestination, IpvsOp, IpvsService, IpvsServiceKey, IpvsTimeouts,
};
use crate::kernel::link::Links;
use crate::kernel::link::fake::FakeLinks;
use crate::kernel::{KernelError, KernelResult};
use crate::net::IpFamily;
use crate::proxier::graceful::GracefulCheck;
use crate::proxier::reconcile::{Backends, ConntrackHints, FamilyInput, Reconciler};
use crate::proxier::report::SyncReport;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Shared call log and failure switches.
#[derive(Debug, Default)]
pub struct Log {
    /// `W <backend>.<op> <object>` for writes, `R ...` for reads, in call order.
    pub calls: Vec<String>,
    /// Operations (`<backend>.<op>`) that fail while listed.
    pub fail: BTreeSet<String>,
    /// Payloads restored successfully, in order.
    pub restored: Vec<(IpFamily, String)>,
}

/// A backend wrapped with the shared log.
#[derive(Debug, Clone)]
pub struct Rec<T> {
    pub inner: T,
    pub log: Arc<Mutex<Log>>,
}

impl<T> Rec<T> {
    fn call(&self, kind: char, op: &str, what: String) -> KernelResult<()> {
        let mut l = self.log.lock().unwrap_or_else(|e| e.into_inner());
        l.calls.push(format!("{kind} {op} {what}"));
        if l.fail.contains(op) {
            return Err(KernelError::Errno {
                op: op.into(),
                errno: libc::EIO,
                message: "injected failure".into(),
            });
        }
        Ok(())
    }
    fn w(&self, op: &str, what: String) -> KernelResult<()> {
        self.call('W', op, what)
    }
    fn r(&self, op: &str, what: String) -> KernelResult<()> {
        self.call('R', op, what)
    }
    /// Logs that a check-then-write call did write.
    fn wrote(&self, op: &str, what: String) {
        let mut l = self.log.lock().unwrap_or_else(|e| e.into_inner());
        l.calls.push(format!("W {op} {what}"));
    }
}

impl<T: Ipvs> Ipvs for Rec<T> {
    fn version(&mut self) -> KernelResult<String> {
        self.r("ipvs.version", String::new())?;
        self.inner.version()
    }
    fn services(&mut self) -> KernelResult<Vec<IpvsService>> {
        self.r("ipvs.services", String::new())?;
        self.inner.services()
    }
    fn service(&mut self, key: &IpvsServiceKey) -> KernelResult<Option<IpvsService>> {
        self.r("ipvs.service", key.to_string())?;
        self.inner.service(key)
    }
    /// Recorded as a services read too (`ipvs.services ipv4`): one per full sync.
    fn ipv4_services(&mut self) -> KernelResult<Option<Vec<IpvsService>>> {
        self.r("ipvs.services", "ipv4".into())?;
        self.inner.ipv4_services()
    }
    fn add_service(&mut self, svc: &IpvsService) -> KernelResult<()> {
        self.w("ipvs.add_service", svc.key.to_string())?;
        self.inner.add_service(svc)
    }
    fn update_service(&mut self, svc: &IpvsService) -> KernelResult<()> {
        self.w("ipvs.update_service", svc.key.to_string())?;
        self.inner.update_service(svc)
    }
    fn delete_service(&mut self, key: &IpvsServiceKey) -> KernelResult<()> {
        self.w("ipvs.delete_service", key.to_string())?;
        self.inner.delete_service(key)
    }
    fn destinations(&mut self, key: &IpvsServiceKey) -> KernelResult<Vec<IpvsDestination>> {
        self.r("ipvs.destinations", key.to_string())?;
        self.inner.destinations(key)
    }
    fn add_destination(&mut self, key: &IpvsServiceKey, d: &IpvsDestination) -> KernelResult<()> {
        self.w(
            "ipvs.add_destination",
            format!("{key} {}:{}", d.addr, d.port),
        )?;
        self.inner.add_destination(key, d)
    }
    fn update_destination(
        &mut self,
        key: &IpvsServiceKey,
        d: &IpvsDestination,
    ) -> KernelResult<()> {
        self.w(
            "ipvs.update_destination",
            format!("{key} {}:{} w{}", d.addr, d.port, d.weight),
        )?;
        self.inner.update_destination(key, d)
    }
    fn delete_destination(
        &mut self,
        key: &IpvsServiceKey,
        addr: IpAddr,
        port: u16,
    ) -> KernelResult<()> {
        self.w("ipvs.delete_destination", format!("{key} {addr}:{port}"))?;
        self.inner.delete_destination(key, addr, port)
    }
    fn flush(&mut self) -> KernelResult<()> {
        self.w("ipvs.flush", String::new())?;
        self.inner.flush()
    }
    fn set_timeouts(&mut self, t: IpvsTimeouts) -> KernelResult<()> {
        self.w("ipvs.set_timeouts", format!("{t:?}"))?;
        self.inner.set_timeouts(t)
    }
    /// Logs each change like the single calls, fails the injected ones, sends the rest as one batch.
    fn apply(&mut self, ops: &[IpvsOp]) -> KernelResult<Vec<KernelResult<()>>> {
        let mut out: Vec<Option<KernelResult<()>>> = Vec::with_capacity(ops.len());
        let mut send = Vec::new();
        for op in ops {
            let (name, what) = match op {
                IpvsOp::AddService(s) => ("ipvs.add_service", s.key.to_string()),
                IpvsOp::UpdateService(s) => ("ipvs.update_service", s.key.to_string()),
                IpvsOp::DeleteService(k) => ("ipvs.delete_service", k.to_string()),
                IpvsOp::AddDestination(k, d) => {
                    ("ipvs.add_destination", format!("{k} {}:{}", d.addr, d.port))
                }
                IpvsOp::UpdateDestination(k, d) => (
                    "ipvs.update_destination",
                    format!("{k} {}:{} w{}", d.addr, d.port, d.weight),
                ),
                IpvsOp::DeleteDestination(k, a, p) => {
                    ("ipvs.delete_destination", format!("{k} {a}:{p}"))
                }
            };
            match self.w(name, what) {
                Ok(()) => {
                    out.push(None);
                    send.push(op.clone());
                }
                Err(e) => out.push(Some(Err(e))),
            }
        }
        {
            let mut l = self.log.lock().unwrap_or_else(|e| e.into_inner());
            l.calls.push(format!("B ipvs.batch {}", send.len()));
        }
        let mut sent = self.inner.apply(&send)?.into_iter();
        Ok(out
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    sent.next().unwrap_or_else(|| {
                        Err(KernelError::Invalid("no answer for IPVS change".into()))
                    })
                })
            })
            .collect())
    }
    fn destination_view(
        &mut self,
    ) -> KernelResult<Option<crate::kernel::ipvs::procfs::DestinationView>> {
        self.r("ipvs.destination_view", String::new())?;
        self.inner.destination_view()
    }
    /// Recorded as a view read too (`ipvs.destination_view`): one per full sync.
    fn destination_slice(
        &mut self,
        max_services: usize,
    ) -> KernelResult<Option<crate::kernel::ipvs::procfs::ViewSlice>> {
        self.r("ipvs.destination_view", String::new())?;
        self.inner.destination_slice(max_services)
    }
}

impl<T: IpSets> IpSets for Rec<T> {
    fn create(&mut self, spec: &IpSetSpec) -> KernelResult<()> {
        self.w("ipset.create", spec.name.clone())?;
        self.inner.create(spec)
    }
    fn dump(&mut self) -> KernelResult<SavedSets> {
        self.r("ipset.dump", String::new())?;
        self.inner.dump()
    }
    fn apply(&mut self, ops: &[IpSetOp]) -> KernelResult<ApplyReport> {
        self.w("ipset.apply", format!("{} ops", ops.len()))?;
        self.inner.apply(ops)
    }
    fn destroy(&mut self, name: &str) -> KernelResult<()> {
        self.w("ipset.destroy", name.into())?;
        self.inner.destroy(name)
    }
    fn swap(&mut self, a: &str, b: &str) -> KernelResult<()> {
        self.w("ipset.swap", format!("{a} {b}"))?;
        self.inner.swap(a, b)
    }
}

impl<T: Iptables> Iptables for Rec<T> {
    fn save(&mut self, family: IpFamily, table: &str) -> KernelResult<String> {
        self.r("iptables.save", format!("{family:?} {table}"))?;
        self.inner.save(family, table)
    }
    fn restore(&mut self, family: IpFamily, payload: &str) -> KernelResult<()> {
        self.w("iptables.restore", format!("{family:?}"))?;
        self.inner.restore(family, payload)?;
        let mut l = self.log.lock().unwrap_or_else(|e| e.into_inner());
        l.restored.push((family, payload.to_string()));
        Ok(())
    }
    fn ensure_chain(&mut self, family: IpFamily, table: &str, chain: &str) -> KernelResult<()> {
        self.r(
            "iptables.ensure_chain",
            format!("{family:?} {table} {chain}"),
        )?;
        self.inner.ensure_chain(family, table, chain)
    }
    fn ensure_rule_at(
        &mut self,
        family: IpFamily,
        table: &str,
        chain: &str,
        position: usize,
        args: &[String],
    ) -> KernelResult<bool> {
        let what = format!("{family:?} {table} {chain} {}", args.join(" "));
        self.r("iptables.check_rule", what.clone())?;
        let inserted = self
            .inner
            .ensure_rule_at(family, table, chain, position, args)?;
        if inserted {
            self.wrote("iptables.insert_rule", what);
        }
        Ok(inserted)
    }
    fn delete_rule(
        &mut self,
        family: IpFamily,
        table: &str,
        chain: &str,
        args: &[String],
    ) -> KernelResult<bool> {
        self.w(
            "iptables.delete_rule",
            format!("{family:?} {table} {chain} {}", args.join(" ")),
        )?;
        self.inner.delete_rule(family, table, chain, args)
    }
    fn delete_chain(&mut self, family: IpFamily, table: &str, chain: &str) -> KernelResult<bool> {
        self.w(
            "iptables.delete_chain",
            format!("{family:?} {table} {chain}"),
        )?;
        self.inner.delete_chain(family, table, chain)
    }
    fn supports_random_fully(&mut self) -> bool {
        self.inner.supports_random_fully()
    }
    // Forwarded unlogged: a getsockopt read, not a process.
    fn inspect(
        &mut self,
        family: IpFamily,
        tables: &[&str],
    ) -> Option<crate::kernel::iptables::TablesView> {
        self.inner.inspect(family, tables)
    }
    fn fingerprint(&mut self, family: IpFamily, tables: &[&str]) -> Option<u64> {
        self.inner.fingerprint(family, tables)
    }
}

impl<T: Links> Links for Rec<T> {
    fn ensure_dummy(&mut self, name: &str) -> KernelResult<bool> {
        self.r("link.ensure_dummy", name.into())?;
        let created = self.inner.ensure_dummy(name)?;
        if created {
            self.wrote("link.create", name.into());
        }
        Ok(created)
    }
    fn addresses(&mut self, name: &str) -> KernelResult<Vec<IpAddr>> {
        self.r("link.addresses", name.into())?;
        self.inner.addresses(name)
    }
    fn add_address(&mut self, name: &str, ip: IpAddr) -> KernelResult<bool> {
        self.w("link.add_address", format!("{name} {ip}"))?;
        self.inner.add_address(name, ip)
    }
    fn del_address(&mut self, name: &str, ip: IpAddr) -> KernelResult<bool> {
        self.w("link.del_address", format!("{name} {ip}"))?;
        self.inner.del_address(name, ip)
    }
    fn host_scoped(&mut self, name: &str) -> KernelResult<std::collections::BTreeSet<IpAddr>> {
        self.r("link.host_scoped", name.into())?;
        self.inner.host_scoped(name)
    }
    fn add_host_scoped(&mut self, name: &str, ips: &[IpAddr]) -> Vec<KernelResult<bool>> {
        ips.iter()
            .map(|ip| {
                self.w("link.add_address", format!("{name} {ip} scope host"))?;
                let mut r = self.inner.add_host_scoped(name, &[*ip]);
                r.pop().unwrap_or(Ok(false))
            })
            .collect()
    }
    fn local_addresses(&mut self) -> KernelResult<Vec<(String, IpAddr)>> {
        self.r("link.local_addresses", String::new())?;
        self.inner.local_addresses()
    }
    fn local_addresses_except(&mut self, except: &str) -> KernelResult<Vec<(String, IpAddr)>> {
        self.r("link.local_addresses_except", except.into())?;
        self.inner.local_addresses_except(except)
    }
    fn delete_link(&mut self, name: &str) -> KernelResult<bool> {
        self.w("link.delete", name.into())?;
        self.inner.delete_link(name)
    }
}

impl<T: Conntrack> Conntrack for Rec<T> {
    fn udp_flows(&mut self, family: IpFamily) -> KernelResult<Vec<ConntrackFlow>> {
        self.r("conntrack.udp_flows", format!("{family:?}"))?;
        self.inner.udp_flows(family)
    }
    fn delete(&mut self, flow: &ConntrackFlow) -> KernelResult<bool> {
        self.w(
            "conntrack.delete",
            format!("{}:{}", flow.orig_dst, flow.orig_dport),
        )?;
        self.inner.delete(flow)
    }
}

/// A [`Reconciler`] with its backends, for tests that apply hand-built plans (no planner).
pub struct Applier {
    pub backends: Backends,
    pub reconciler: Reconciler,
}

impl Applier {
    /// A fresh reconciler over `backends` (its first sync is full).
    pub fn new(backends: Backends) -> Self {
        Applier {
            backends,
            reconciler: Reconciler::new(),
        }
    }

    /// [`Reconciler::sync`] of `families`.
    pub fn apply(
        &mut self,
        families: &[FamilyInput<'_>],
        full: bool,
        hints: &ConntrackHints,
    ) -> SyncReport {
        self.reconciler
            .sync(&mut self.backends, families, full, hints)
    }

    /// [`Reconciler::check_graceful`].
    pub fn check_graceful(&mut self) -> GracefulCheck {
        self.reconciler.check_graceful(&mut self.backends)
    }

    /// The reconciler (applied state, graceful queue).
    pub fn reconciler(&self) -> &Reconciler {
        &self.reconciler
    }
}

/// The fakes of every backend plus the shared log; clones share everything.
#[derive(Debug, Clone)]
pub struct Kit {
    pub ipvs: FakeIpvs,
    pub ipsets: FakeIpSets,
    pub iptables: FakeIptables,
    pub links: FakeLinks,
    pub conntrack: FakeConntrack,
    pub log: Arc<Mutex<Log>>,
}

impl Default for Kit {
    fn default() -> Self {
        Self::new()
    }
}

impl Kit {
    /// Fresh fakes (iptables checks set names against the ipset fake, as the kernel does).
    pub fn new() -> Self {
        let ipsets = FakeIpSets::new();
        let iptables = FakeIptables::new();
        iptables.link_ipsets(&ipsets);
        Kit {
            ipvs: FakeIpvs::new(),
            ipsets,
            iptables,
            links: FakeLinks::new(),
            conntrack: FakeConntrack::new(),
            log: Arc::default(),
        }
    }
    fn rec<T>(&self, inner: T) -> Rec<T> {
        Rec {
            inner,
            log: self.log.clone(),
        }
    }
    /// Backends for a proxier, all recording into this kit's log.
    pub fn backends(&self) -> Backends {
        Backends {
            ipvs: Box::new(self.rec(self.ipvs.clone())),
            ipsets: Box::new(self.rec(self.ipsets.clone())),
            iptables: Box::new(self.rec(self.iptables.clone())),
            links: Box::new(self.rec(self.links.clone())),
            conntrack: Box::new(self.rec(self.conntrack.clone())),
        }
    }
    /// A reconciler over this kit's backends, for hand-built plans.
    pub fn applier(&self) -> Applier {
        Applier::new(self.backends())
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Write calls since the last clear (without the `W ` prefix).
    pub fn writes(&self) -> Vec<String> {
        self.lock()
            .calls
            .iter()
            .filter_map(|c| c.strip_prefix("W ").map(String::from))
            .collect()
    }
    /// Read calls since the last clear (without the `R ` prefix).
    pub fn reads(&self) -> Vec<String> {
        self.lock()
            .calls
            .iter()
            .filter_map(|c| c.strip_prefix("R ").map(String::from))
            .collect()
    }
    pub fn clear_logs(&self) {
        self.lock().calls.clear();
    }
    /// Makes `op` (e.g. `iptables.restore`) fail until switched off.
    pub fn set_fail(&self, op: &str, on: bool) {
        let mut l = self.lock();
        if on {
            l.fail.insert(op.into());
        } else {
            l.fail.remove(op);
        }
    }
    /// Payloads restored successfully.
    pub fn restored(&self) -> Vec<(IpFamily, String)> {
        self.lock().restored.clone()
    }
    /// Real servers of one virtual server by (addr, port); None if the service does not exist.
    pub fn dests(&self, key: &IpvsServiceKey) -> Option<BTreeMap<(IpAddr, u16), IpvsDestination>> {
        self.ipvs
            .snapshot()
            .get(key)
            .map(|(_, d)| d.iter().map(|d| ((d.addr, d.port), d.clone())).collect())
    }
    /// Keys of every virtual server.
    pub fn services(&self) -> BTreeSet<IpvsServiceKey> {
        self.ipvs.snapshot().keys().copied().collect()
    }
    /// Addresses of a link (empty if missing).
    pub fn addrs(&self, link: &str) -> Vec<IpAddr> {
        self.links.link(link).map(|l| l.addrs).unwrap_or_default()
    }
}

//! Test-only in-memory kernel behind every backend trait, with one log of calls in order, so tests can
//! check ordering, minimality and ownership across backends. (Test-local: the backends' own fakes are
//! exercised by their owners' tests.)

use crate::cluster::model::IpFamily;
use crate::kernel::conntrack::{Conntrack, ConntrackFlow};
use crate::kernel::ipset::{ApplyReport, IpSetOp, IpSetSpec, IpSets};
use crate::kernel::iptables::Iptables;
use crate::kernel::ipvs::{Ipvs, IpvsDestination, IpvsService, IpvsServiceKey, IpvsTimeouts};
use crate::kernel::link::Links;
use crate::kernel::sysctl::Sysctl;
use crate::kernel::{KernelError, KernelResult};
use crate::proxier::reconcile::Backends;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

type Dests = BTreeMap<(IpAddr, u16), IpvsDestination>;

#[derive(Debug, Default)]
pub struct State {
    pub services: BTreeMap<IpvsServiceKey, (IpvsService, Dests)>,
    pub sets: BTreeMap<String, BTreeSet<String>>,
    /// (family, table, chain) -> rules (args after the chain name).
    pub chains: BTreeMap<(IpFamily, String, String), Vec<Vec<String>>>,
    pub restored: Vec<(IpFamily, String)>,
    pub links: BTreeMap<String, BTreeSet<IpAddr>>,
    pub flows: Vec<ConntrackFlow>,
    pub sysctls: BTreeMap<String, i64>,
    pub timeouts: Option<IpvsTimeouts>,
    /// Every mutating call, in order (`<backend>.<op> <object>`).
    pub writes: Vec<String>,
    /// Every dump/read call, in order.
    pub reads: Vec<String>,
    /// Operations (`<backend>.<op>`) that fail with an errno.
    pub fail: BTreeSet<String>,
}

/// A handle to the shared fake kernel; clone it into every backend slot.
#[derive(Debug, Clone, Default)]
pub struct FakeKernel(pub Arc<Mutex<State>>);

impl FakeKernel {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn st(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }
    pub fn backends(&self) -> Backends {
        Backends {
            ipvs: Box::new(self.clone()),
            ipsets: Box::new(self.clone()),
            iptables: Box::new(self.clone()),
            links: Box::new(self.clone()),
            conntrack: Box::new(self.clone()),
        }
    }
    fn write(&self, op: &str, what: String) -> KernelResult<MutexGuard<'_, State>> {
        let mut s = self.st();
        s.writes.push(format!("{op} {what}"));
        if s.fail.contains(op) {
            return Err(KernelError::Errno {
                op: op.into(),
                errno: 1,
                message: "injected".into(),
            });
        }
        Ok(s)
    }
    fn read(&self, op: &str, what: String) -> KernelResult<MutexGuard<'_, State>> {
        let mut s = self.st();
        s.reads.push(format!("{op} {what}"));
        if s.fail.contains(op) {
            return Err(KernelError::Errno {
                op: op.into(),
                errno: 1,
                message: "injected".into(),
            });
        }
        Ok(s)
    }
    pub fn clear_logs(&self) {
        let mut s = self.st();
        s.writes.clear();
        s.reads.clear();
    }
    pub fn writes(&self) -> Vec<String> {
        self.st().writes.clone()
    }
    pub fn reads(&self) -> Vec<String> {
        self.st().reads.clone()
    }
    pub fn set_fail(&self, op: &str, on: bool) {
        let mut s = self.st();
        if on {
            s.fail.insert(op.into());
        } else {
            s.fail.remove(op);
        }
    }
    pub fn dests(&self, key: &IpvsServiceKey) -> Option<Dests> {
        self.st().services.get(key).map(|(_, d)| d.clone())
    }
}

impl Ipvs for FakeKernel {
    fn version(&mut self) -> KernelResult<String> {
        Ok("1.2.1".into())
    }
    fn services(&mut self) -> KernelResult<Vec<IpvsService>> {
        let s = self.read("ipvs.services", String::new())?;
        Ok(s.services.values().map(|(v, _)| v.clone()).collect())
    }
    fn add_service(&mut self, svc: &IpvsService) -> KernelResult<()> {
        let mut s = self.write("ipvs.add_service", svc.key.to_string())?;
        if s.services.contains_key(&svc.key) {
            return Err(KernelError::Exists(svc.key.to_string()));
        }
        s.services.insert(svc.key, (svc.clone(), BTreeMap::new()));
        Ok(())
    }
    fn update_service(&mut self, svc: &IpvsService) -> KernelResult<()> {
        let mut s = self.write("ipvs.update_service", svc.key.to_string())?;
        match s.services.get_mut(&svc.key) {
            Some(e) => {
                e.0 = svc.clone();
                Ok(())
            }
            None => Err(KernelError::NotFound(svc.key.to_string())),
        }
    }
    fn delete_service(&mut self, key: &IpvsServiceKey) -> KernelResult<()> {
        let mut s = self.write("ipvs.delete_service", key.to_string())?;
        s.services
            .remove(key)
            .map(|_| ())
            .ok_or_else(|| KernelError::NotFound(key.to_string()))
    }
    fn destinations(&mut self, key: &IpvsServiceKey) -> KernelResult<Vec<IpvsDestination>> {
        let s = self.read("ipvs.destinations", key.to_string())?;
        s.services
            .get(key)
            .map(|(_, d)| d.values().cloned().collect())
            .ok_or_else(|| KernelError::NotFound(key.to_string()))
    }
    fn add_destination(&mut self, key: &IpvsServiceKey, dst: &IpvsDestination) -> KernelResult<()> {
        let mut s = self.write(
            "ipvs.add_destination",
            format!("{key} {}:{}", dst.addr, dst.port),
        )?;
        let d = &mut s
            .services
            .get_mut(key)
            .ok_or_else(|| KernelError::NotFound(key.to_string()))?
            .1;
        if d.contains_key(&(dst.addr, dst.port)) {
            return Err(KernelError::Exists(format!("{}:{}", dst.addr, dst.port)));
        }
        d.insert((dst.addr, dst.port), dst.clone());
        Ok(())
    }
    fn update_destination(
        &mut self,
        key: &IpvsServiceKey,
        dst: &IpvsDestination,
    ) -> KernelResult<()> {
        let mut s = self.write(
            "ipvs.update_destination",
            format!("{key} {}:{} w{}", dst.addr, dst.port, dst.weight),
        )?;
        let d = &mut s
            .services
            .get_mut(key)
            .ok_or_else(|| KernelError::NotFound(key.to_string()))?
            .1;
        let cur = d
            .get_mut(&(dst.addr, dst.port))
            .ok_or_else(|| KernelError::NotFound(format!("{}:{}", dst.addr, dst.port)))?;
        // Counters are the kernel's: keep them.
        let (a, i) = (cur.active_conns, cur.inactive_conns);
        *cur = dst.clone();
        cur.active_conns = a;
        cur.inactive_conns = i;
        Ok(())
    }
    fn delete_destination(
        &mut self,
        key: &IpvsServiceKey,
        addr: IpAddr,
        port: u16,
    ) -> KernelResult<()> {
        let mut s = self.write("ipvs.delete_destination", format!("{key} {addr}:{port}"))?;
        let d = &mut s
            .services
            .get_mut(key)
            .ok_or_else(|| KernelError::NotFound(key.to_string()))?
            .1;
        d.remove(&(addr, port))
            .map(|_| ())
            .ok_or_else(|| KernelError::NotFound(format!("{addr}:{port}")))
    }
    fn flush(&mut self) -> KernelResult<()> {
        let mut s = self.write("ipvs.flush", String::new())?;
        s.services.clear();
        Ok(())
    }
    fn set_timeouts(&mut self, t: IpvsTimeouts) -> KernelResult<()> {
        let mut s = self.write("ipvs.set_timeouts", format!("{t:?}"))?;
        s.timeouts = Some(t);
        Ok(())
    }
}

impl IpSets for FakeKernel {
    fn create(&mut self, spec: &IpSetSpec) -> KernelResult<()> {
        let mut s = self.write("ipset.create", spec.name.clone())?;
        s.sets.entry(spec.name.clone()).or_default();
        Ok(())
    }
    fn save_all(&mut self) -> KernelResult<BTreeMap<String, BTreeSet<String>>> {
        let s = self.read("ipset.save_all", String::new())?;
        Ok(s.sets.clone())
    }
    fn apply(&mut self, ops: &[IpSetOp]) -> KernelResult<ApplyReport> {
        let mut s = self.write("ipset.apply", format!("{} ops", ops.len()))?;
        let mut r = ApplyReport::default();
        for op in ops {
            match op {
                IpSetOp::Add { set, entry } => match s.sets.get_mut(set) {
                    Some(m) if !entry.contains(' ') => {
                        m.insert(entry.clone());
                        r.applied += 1;
                    }
                    _ => r.rejected.push((op.clone(), "invalid".into())),
                },
                IpSetOp::Del { set, entry } => {
                    if let Some(m) = s.sets.get_mut(set) {
                        m.remove(entry);
                    }
                    r.applied += 1;
                }
            }
        }
        Ok(r)
    }
    fn destroy(&mut self, name: &str) -> KernelResult<()> {
        let mut s = self.write("ipset.destroy", name.into())?;
        s.sets
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| KernelError::NotFound(name.into()))
    }
}

impl Iptables for FakeKernel {
    fn save(&mut self, family: IpFamily, table: &str) -> KernelResult<String> {
        let s = self.read("iptables.save", format!("{family:?} {table}"))?;
        let mut out = String::new();
        for ((f, t, c), rules) in &s.chains {
            if *f == family && t == table {
                for r in rules {
                    out.push_str(&format!("-A {c} {}\n", r.join(" ")));
                }
            }
        }
        Ok(out)
    }
    fn restore(&mut self, family: IpFamily, payload: &str) -> KernelResult<()> {
        let mut s = self.write("iptables.restore", format!("{family:?}"))?;
        // --noflush: declared chains are created and flushed, others left alone.
        let mut table = String::new();
        for line in payload.lines() {
            if let Some(t) = line.strip_prefix('*') {
                table = t.to_string();
            } else if let Some(decl) = line.strip_prefix(':') {
                let chain = decl
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
                s.chains.insert((family, table.clone(), chain), Vec::new());
            } else if let Some(rule) = line.strip_prefix("-A ") {
                let mut it = rule.split_whitespace();
                let chain = it.next().unwrap_or_default().to_string();
                let args = it.map(String::from).collect();
                s.chains
                    .entry((family, table.clone(), chain))
                    .or_default()
                    .push(args);
            }
        }
        s.restored.push((family, payload.to_string()));
        Ok(())
    }
    fn ensure_chain(&mut self, family: IpFamily, table: &str, chain: &str) -> KernelResult<()> {
        let mut s = self.st();
        s.reads
            .push(format!("iptables.ensure_chain {family:?} {table} {chain}"));
        let key = (family, table.to_string(), chain.to_string());
        if !s.chains.contains_key(&key) {
            s.writes
                .push(format!("iptables.new_chain {family:?} {table} {chain}"));
            s.chains.insert(key, Vec::new());
        }
        Ok(())
    }
    fn ensure_rule_first(
        &mut self,
        family: IpFamily,
        table: &str,
        chain: &str,
        args: &[String],
    ) -> KernelResult<bool> {
        let mut s = self.read("iptables.check_rule", format!("{family:?} {table} {chain}"))?;
        let rules = s
            .chains
            .entry((family, table.to_string(), chain.to_string()))
            .or_default();
        if rules.iter().any(|r| r == args) {
            return Ok(false);
        }
        rules.insert(0, args.to_vec());
        s.writes.push(format!(
            "iptables.insert_rule {family:?} {table} {chain} {}",
            args.join(" ")
        ));
        Ok(true)
    }
    fn delete_rule(
        &mut self,
        family: IpFamily,
        table: &str,
        chain: &str,
        args: &[String],
    ) -> KernelResult<bool> {
        let mut s = self.write(
            "iptables.delete_rule",
            format!("{family:?} {table} {chain} {}", args.join(" ")),
        )?;
        let Some(rules) = s
            .chains
            .get_mut(&(family, table.to_string(), chain.to_string()))
        else {
            return Ok(false);
        };
        match rules.iter().position(|r| r == args) {
            Some(i) => {
                rules.remove(i);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn delete_chain(&mut self, family: IpFamily, table: &str, chain: &str) -> KernelResult<bool> {
        let mut s = self.write(
            "iptables.delete_chain",
            format!("{family:?} {table} {chain}"),
        )?;
        let referenced = s.chains.iter().any(|((f, t, c), rules)| {
            *f == family
                && t == table
                && c != chain
                && rules
                    .iter()
                    .any(|r| r.last().map(String::as_str) == Some(chain))
        });
        if referenced {
            return Err(KernelError::Command {
                command: "iptables -X".into(),
                status: "1".into(),
                stderr: "Too many links".into(),
            });
        }
        Ok(s.chains
            .remove(&(family, table.to_string(), chain.to_string()))
            .is_some())
    }
    fn supports_random_fully(&mut self) -> bool {
        true
    }
}

impl Links for FakeKernel {
    fn ensure_dummy(&mut self, name: &str) -> KernelResult<bool> {
        let mut s = self.read("link.ensure_dummy", name.into())?;
        if s.links.contains_key(name) {
            return Ok(false);
        }
        s.writes.push(format!("link.create {name}"));
        s.links.insert(name.into(), BTreeSet::new());
        Ok(true)
    }
    fn addresses(&mut self, name: &str) -> KernelResult<Vec<IpAddr>> {
        let s = self.read("link.addresses", name.into())?;
        s.links
            .get(name)
            .map(|a| a.iter().copied().collect())
            .ok_or_else(|| KernelError::NotFound(name.into()))
    }
    fn add_address(&mut self, name: &str, ip: IpAddr) -> KernelResult<bool> {
        let mut s = self.write("link.add_address", format!("{name} {ip}"))?;
        let l = s
            .links
            .get_mut(name)
            .ok_or_else(|| KernelError::NotFound(name.into()))?;
        Ok(l.insert(ip))
    }
    fn del_address(&mut self, name: &str, ip: IpAddr) -> KernelResult<bool> {
        let mut s = self.write("link.del_address", format!("{name} {ip}"))?;
        let l = s
            .links
            .get_mut(name)
            .ok_or_else(|| KernelError::NotFound(name.into()))?;
        Ok(l.remove(&ip))
    }
    fn local_addresses(&mut self) -> KernelResult<Vec<(String, IpAddr)>> {
        let s = self.read("link.local_addresses", String::new())?;
        Ok(s.links
            .iter()
            .flat_map(|(n, a)| a.iter().map(move |ip| (n.clone(), *ip)))
            .collect())
    }
    fn delete_link(&mut self, name: &str) -> KernelResult<bool> {
        let mut s = self.write("link.delete", name.into())?;
        Ok(s.links.remove(name).is_some())
    }
}

impl Conntrack for FakeKernel {
    fn udp_flows(&mut self, family: IpFamily) -> KernelResult<Vec<ConntrackFlow>> {
        let s = self.read("conntrack.udp_flows", format!("{family:?}"))?;
        Ok(s.flows
            .iter()
            .filter(|f| IpFamily::of(&f.orig_dst) == family)
            .copied()
            .collect())
    }
    fn delete(&mut self, flow: &ConntrackFlow) -> KernelResult<bool> {
        let mut s = self.write(
            "conntrack.delete",
            format!("{}:{}", flow.orig_dst, flow.orig_dport),
        )?;
        let before = s.flows.len();
        s.flows.retain(|f| f != flow);
        Ok(s.flows.len() != before)
    }
}

impl Sysctl for FakeKernel {
    fn get(&mut self, path: &str) -> KernelResult<i64> {
        let s = self.read("sysctl.get", path.into())?;
        s.sysctls
            .get(path)
            .copied()
            .ok_or_else(|| KernelError::NotFound(path.into()))
    }
    fn set(&mut self, path: &str, value: i64) -> KernelResult<()> {
        let mut s = self.write("sysctl.set", format!("{path}={value}"))?;
        s.sysctls.insert(path.into(), value);
        Ok(())
    }
}

//! In-memory IPVS table that answers like the kernel, errors included.
//!
//! Clones share one table, so a test can keep a handle while the code under test owns another.

use super::{
    FLAG_HASHED, ForwardMethod, Ipvs, IpvsDestination, IpvsService, IpvsServiceKey, IpvsStats,
    IpvsTimeouts,
};
use crate::kernel::{KernelError, KernelResult};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug, Default)]
struct Table {
    services: BTreeMap<IpvsServiceKey, (IpvsService, Vec<IpvsDestination>)>,
    timeouts: IpvsTimeouts,
    ops: Vec<String>,
    failures: Vec<(String, KernelError)>,
    /// Traffic counters set by tests (zero for a service without an entry).
    stats: BTreeMap<IpvsServiceKey, IpvsStats>,
    /// Reads performed so far, by operation.
    reads: BTreeMap<&'static str, u64>,
}

/// Fake IPVS table. `Clone` shares the same table.
#[derive(Debug, Clone, Default)]
pub struct FakeIpvs {
    table: Arc<Mutex<Table>>,
}

impl FakeIpvs {
    /// An empty table with kernel-default timeouts (900/120/300).
    pub fn new() -> Self {
        let fake = FakeIpvs::default();
        fake.lock().timeouts = IpvsTimeouts {
            tcp: 900,
            tcp_fin: 120,
            udp: 300,
        };
        fake
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // A panicking test thread must not hide the table from the others.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the active/inactive connection counters of a real server (as traffic would).
    pub fn set_conns(
        &self,
        key: &IpvsServiceKey,
        addr: IpAddr,
        port: u16,
        active: u32,
        inactive: u32,
    ) -> KernelResult<()> {
        let mut t = self.lock();
        let (_, dests) = t
            .services
            .get_mut(key)
            .ok_or_else(|| KernelError::NotFound(format!("service {key}")))?;
        let d = dests
            .iter_mut()
            .find(|d| d.addr == addr && d.port == port)
            .ok_or_else(|| KernelError::NotFound(format!("destination {addr}:{port}")))?;
        d.active_conns = active;
        d.inactive_conns = inactive;
        Ok(())
    }

    /// Sets the traffic counters [`Ipvs::services_with_stats`] reports for a virtual server (as traffic
    /// would); they are dropped with the service.
    pub fn set_stats(&self, key: &IpvsServiceKey, stats: IpvsStats) -> KernelResult<()> {
        let mut t = self.lock();
        if !t.services.contains_key(key) {
            return Err(KernelError::NotFound(format!("service {key}")));
        }
        t.stats.insert(*key, stats);
        Ok(())
    }

    /// Makes the next call of operation `op` (e.g. `"add_service"`) fail with `err`.
    pub fn fail_next(&self, op: &str, err: KernelError) {
        self.lock().failures.push((op.to_string(), err));
    }

    /// Mutating operations performed so far, as `"add_service 10.0.0.1:80/TCP"` lines.
    pub fn ops(&self) -> Vec<String> {
        self.lock().ops.clone()
    }

    /// How many reads of operation `op` (`"services"`, `"service"`, `"destinations"`,
    /// `"destination_view"`, `"version"`) were made so far.
    pub fn reads(&self, op: &str) -> u64 {
        self.lock().reads.get(op).copied().unwrap_or(0)
    }

    /// Forgets the recorded operations.
    pub fn clear_ops(&self) {
        self.lock().ops.clear();
    }

    /// Current timeouts.
    pub fn timeouts(&self) -> IpvsTimeouts {
        self.lock().timeouts
    }

    /// Snapshot of every service with its destinations.
    pub fn snapshot(&self) -> BTreeMap<IpvsServiceKey, (IpvsService, Vec<IpvsDestination>)> {
        self.lock().services.clone()
    }
}

impl Table {
    fn begin(&mut self, op: &str, what: String) -> KernelResult<()> {
        if let Some(i) = self.failures.iter().position(|(o, _)| o == op) {
            let (_, err) = self.failures.remove(i);
            return Err(err);
        }
        const READS: [&str; 5] = [
            "services",
            "service",
            "destinations",
            "destination_view",
            "version",
        ];
        match READS.iter().find(|r| **r == op) {
            Some(r) => *self.reads.entry(r).or_default() += 1,
            None => self.ops.push(format!("{op} {what}")),
        }
        Ok(())
    }
}

fn check_scheduler(name: &str) -> KernelResult<()> {
    // The fake "has loaded" every scheduler of a stock kernel.
    if name.parse::<crate::scheduler::Scheduler>().is_ok() {
        Ok(())
    } else {
        Err(KernelError::SchedulerNotFound {
            scheduler: name.to_string(),
            detail: "no such scheduler module".into(),
        })
    }
}

fn check_dest_family(key: &IpvsServiceKey, dst: &IpvsDestination) -> KernelResult<()> {
    // The kernel accepts a foreign-family real server only with tunnel forwarding.
    if key.addr.is_ipv4() != dst.addr.is_ipv4() && dst.forward != ForwardMethod::Tunnel {
        return Err(KernelError::Errno {
            op: "add destination".into(),
            errno: libc::EINVAL,
            message: "destination family differs from the service's".into(),
        });
    }
    Ok(())
}

impl Ipvs for FakeIpvs {
    fn version(&mut self) -> KernelResult<String> {
        self.lock().begin("version", String::new())?;
        Ok("1.2.1".into())
    }

    fn services(&mut self) -> KernelResult<Vec<IpvsService>> {
        let mut t = self.lock();
        t.begin("services", String::new())?;
        Ok(t.services.values().map(|(s, _)| s.clone()).collect())
    }

    fn service(&mut self, key: &IpvsServiceKey) -> KernelResult<Option<IpvsService>> {
        let mut t = self.lock();
        t.begin("service", key.to_string())?;
        Ok(t.services.get(key).map(|(s, _)| s.clone()))
    }

    fn add_service(&mut self, svc: &IpvsService) -> KernelResult<()> {
        let mut t = self.lock();
        t.begin("add_service", svc.key.to_string())?;
        // The kernel looks the service up before it loads the scheduler.
        if t.services.contains_key(&svc.key) {
            return Err(KernelError::Exists(format!("service {}", svc.key)));
        }
        check_scheduler(&svc.scheduler)?;
        let mut stored = svc.clone();
        stored.flags |= FLAG_HASHED;
        t.services.insert(svc.key, (stored, Vec::new()));
        Ok(())
    }

    fn update_service(&mut self, svc: &IpvsService) -> KernelResult<()> {
        let mut t = self.lock();
        t.begin("update_service", svc.key.to_string())?;
        let Some((cur, _)) = t.services.get_mut(&svc.key) else {
            return Err(KernelError::NotFound(format!("service {}", svc.key)));
        };
        check_scheduler(&svc.scheduler)?;
        *cur = svc.clone();
        cur.flags |= FLAG_HASHED;
        Ok(())
    }

    fn delete_service(&mut self, key: &IpvsServiceKey) -> KernelResult<()> {
        let mut t = self.lock();
        t.begin("delete_service", key.to_string())?;
        t.stats.remove(key);
        t.services
            .remove(key)
            .map(|_| ())
            .ok_or_else(|| KernelError::NotFound(format!("service {key}")))
    }

    fn destinations(&mut self, key: &IpvsServiceKey) -> KernelResult<Vec<IpvsDestination>> {
        let mut t = self.lock();
        t.begin("destinations", key.to_string())?;
        // Like the kernel's dump: an unknown service yields an empty list, not an error.
        Ok(t.services
            .get(key)
            .map(|(_, d)| d.clone())
            .unwrap_or_default())
    }

    /// Like `/proc/net/ip_vs`: every virtual server's real servers, thresholds not shown.
    fn destination_view(&mut self) -> KernelResult<Option<super::procfs::DestinationView>> {
        let mut t = self.lock();
        t.begin("destination_view", String::new())?;
        Ok(Some(
            t.services
                .iter()
                .map(|(k, (_, dests))| {
                    let shown = dests
                        .iter()
                        .map(|d| IpvsDestination {
                            upper_threshold: 0,
                            lower_threshold: 0,
                            ..d.clone()
                        })
                        .collect();
                    (*k, shown)
                })
                .collect(),
        ))
    }

    fn add_destination(&mut self, key: &IpvsServiceKey, dst: &IpvsDestination) -> KernelResult<()> {
        let mut t = self.lock();
        t.begin(
            "add_destination",
            format!("{key} -> {}:{}", dst.addr, dst.port),
        )?;
        let Some((_, dests)) = t.services.get_mut(key) else {
            return Err(KernelError::NotFound(format!("service {key}")));
        };
        check_dest_family(key, dst)?;
        if dests
            .iter()
            .any(|d| d.addr == dst.addr && d.port == dst.port)
        {
            return Err(KernelError::Exists(format!(
                "destination {}:{} of {key}",
                dst.addr, dst.port
            )));
        }
        let mut stored = dst.clone();
        stored.active_conns = 0;
        stored.inactive_conns = 0;
        // As the kernel links a new real server: at the head of the list.
        dests.insert(0, stored);
        Ok(())
    }

    fn update_destination(
        &mut self,
        key: &IpvsServiceKey,
        dst: &IpvsDestination,
    ) -> KernelResult<()> {
        let mut t = self.lock();
        t.begin(
            "update_destination",
            format!("{key} -> {}:{}", dst.addr, dst.port),
        )?;
        let Some((_, dests)) = t.services.get_mut(key) else {
            return Err(KernelError::NotFound(format!("service {key}")));
        };
        let Some(cur) = dests
            .iter_mut()
            .find(|d| d.addr == dst.addr && d.port == dst.port)
        else {
            return Err(KernelError::NotFound(format!(
                "destination {}:{} of {key}",
                dst.addr, dst.port
            )));
        };
        cur.weight = dst.weight;
        cur.forward = dst.forward;
        cur.upper_threshold = dst.upper_threshold;
        cur.lower_threshold = dst.lower_threshold;
        Ok(())
    }

    fn delete_destination(
        &mut self,
        key: &IpvsServiceKey,
        addr: IpAddr,
        port: u16,
    ) -> KernelResult<()> {
        let mut t = self.lock();
        t.begin("delete_destination", format!("{key} -> {addr}:{port}"))?;
        let Some((_, dests)) = t.services.get_mut(key) else {
            return Err(KernelError::NotFound(format!("service {key}")));
        };
        let before = dests.len();
        dests.retain(|d| !(d.addr == addr && d.port == port));
        if dests.len() == before {
            return Err(KernelError::NotFound(format!(
                "destination {addr}:{port} of {key}"
            )));
        }
        Ok(())
    }

    fn flush(&mut self) -> KernelResult<()> {
        let mut t = self.lock();
        t.begin("flush", String::new())?;
        t.services.clear();
        t.stats.clear();
        Ok(())
    }

    fn services_with_stats(&mut self) -> KernelResult<Vec<(IpvsServiceKey, IpvsStats)>> {
        let mut t = self.lock();
        if let Some(i) = t
            .failures
            .iter()
            .position(|(o, _)| o == "services_with_stats")
        {
            return Err(t.failures.remove(i).1);
        }
        Ok(t.services
            .keys()
            .map(|k| (*k, t.stats.get(k).copied().unwrap_or_default()))
            .collect())
    }

    fn set_timeouts(&mut self, new: IpvsTimeouts) -> KernelResult<()> {
        let mut t = self.lock();
        t.begin(
            "set_timeouts",
            format!("{} {} {}", new.tcp, new.tcp_fin, new.udp),
        )?;
        if new.tcp != 0 {
            t.timeouts.tcp = new.tcp;
        }
        if new.tcp_fin != 0 {
            t.timeouts.tcp_fin = new.tcp_fin;
        }
        if new.udp != 0 {
            t.timeouts.udp = new.udp;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Protocol;

    fn svc(addr: &str, port: u16, sched: &str) -> IpvsService {
        IpvsService {
            key: IpvsServiceKey {
                addr: addr.parse().unwrap(),
                port,
                protocol: Protocol::Tcp,
            },
            scheduler: sched.into(),
            flags: 0,
            timeout: 0,
            netmask: 0xffff_ffff,
        }
    }

    #[test]
    fn services_behave_like_the_kernel() {
        let mut f = FakeIpvs::new();
        let s = svc("10.0.0.1", 80, "rr");
        f.add_service(&s).unwrap();
        assert!(matches!(f.add_service(&s), Err(KernelError::Exists(_))));
        assert!(matches!(
            f.add_service(&svc("10.0.0.2", 80, "nope")),
            Err(KernelError::SchedulerNotFound { scheduler, .. }) if scheduler == "nope"
        ));
        let listed = f.services().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].flags, FLAG_HASHED);
        let mut upd = s.clone();
        upd.scheduler = "wrr".into();
        f.update_service(&upd).unwrap();
        assert_eq!(f.services().unwrap()[0].scheduler, "wrr");
        // A GET of one virtual server: the one asked for, or none; a read, not an operation.
        assert_eq!(
            f.service(&s.key).unwrap().map(|s| s.scheduler),
            Some("wrr".into())
        );
        assert_eq!(f.service(&svc("10.0.0.9", 80, "rr").key).unwrap(), None);
        assert_eq!((f.reads("service"), f.reads("services")), (2, 2));
        assert!(f.ops().iter().all(|o| !o.starts_with("service ")));
        assert!(matches!(
            f.update_service(&svc("10.0.0.9", 80, "rr")),
            Err(KernelError::NotFound(_))
        ));
        f.delete_service(&s.key).unwrap();
        assert!(matches!(
            f.delete_service(&s.key),
            Err(KernelError::NotFound(_))
        ));
    }

    #[test]
    fn destinations_and_counters() {
        let mut f = FakeIpvs::new();
        let s = svc("10.0.0.1", 80, "rr");
        let d = IpvsDestination::masq("10.1.0.1".parse().unwrap(), 8080, 1);
        assert!(matches!(
            f.add_destination(&s.key, &d),
            Err(KernelError::NotFound(_))
        ));
        f.add_service(&s).unwrap();
        f.add_destination(&s.key, &d).unwrap();
        assert!(matches!(
            f.add_destination(&s.key, &d),
            Err(KernelError::Exists(_))
        ));
        let v6 = IpvsDestination::masq("fd00::1".parse().unwrap(), 8080, 1);
        assert!(matches!(
            f.add_destination(&s.key, &v6),
            Err(KernelError::Errno { .. })
        ));
        let handle = f.clone();
        handle.set_conns(&s.key, d.addr, 8080, 3, 4).unwrap();
        let got = f.destinations(&s.key).unwrap();
        assert_eq!((got[0].active_conns, got[0].inactive_conns), (3, 4));
        let mut w = d.clone();
        w.weight = 0;
        f.update_destination(&s.key, &w).unwrap();
        assert_eq!(f.destinations(&s.key).unwrap()[0].weight, 0);
        f.delete_destination(&s.key, d.addr, 8080).unwrap();
        assert!(matches!(
            f.delete_destination(&s.key, d.addr, 8080),
            Err(KernelError::NotFound(_))
        ));
        assert!(
            f.destinations(&svc("1.1.1.1", 1, "rr").key)
                .unwrap()
                .is_empty()
        );
        f.fail_next("flush", KernelError::Invalid("boom".into()));
        assert!(f.flush().is_err());
        f.flush().unwrap();
        assert!(f.services().unwrap().is_empty());
        assert!(
            f.ops()
                .iter()
                .any(|o| o.starts_with("add_service 10.0.0.1:80/TCP"))
        );
    }

    #[test]
    fn timeouts_zero_keeps_value() {
        let mut f = FakeIpvs::new();
        f.set_timeouts(IpvsTimeouts {
            tcp: 0,
            tcp_fin: 30,
            udp: 0,
        })
        .unwrap();
        assert_eq!(
            f.timeouts(),
            IpvsTimeouts {
                tcp: 900,
                tcp_fin: 30,
                udp: 300
            }
        );
    }
}

//! In-memory links and addresses that answer like rtnetlink.
//!
//! Clones share one state. A new fake holds `lo` with 127.0.0.1 and ::1.

use super::Links;
use crate::kernel::{KernelError, KernelResult};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

/// One fake link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeLink {
    /// Link kind (`dummy`, `loopback`, `ether`, ...).
    pub kind: String,
    /// Administrative state.
    pub up: bool,
    /// Addresses in the order they were added.
    pub addrs: Vec<IpAddr>,
    /// Those bound with scope host.
    pub host_scoped: BTreeSet<IpAddr>,
}

#[derive(Debug, Default)]
struct State {
    links: BTreeMap<String, FakeLink>,
    ops: Vec<String>,
    /// Addresses the fake kernel refuses to bind.
    refused: BTreeSet<IpAddr>,
}

/// Fake link table. `Clone` shares the same state.
#[derive(Debug, Clone)]
pub struct FakeLinks {
    state: Arc<Mutex<State>>,
}

impl Default for FakeLinks {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeLinks {
    /// A table with only the loopback link.
    pub fn new() -> Self {
        let fake = FakeLinks {
            state: Arc::default(),
        };
        fake.add_link(
            "lo",
            "loopback",
            true,
            &[
                IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
                IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            ],
        );
        fake
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds (or replaces) a link, e.g. the node's `eth0` with its addresses.
    pub fn add_link(&self, name: &str, kind: &str, up: bool, addrs: &[IpAddr]) {
        self.lock().links.insert(
            name.to_string(),
            FakeLink {
                kind: kind.to_string(),
                up,
                addrs: addrs.to_vec(),
                host_scoped: BTreeSet::new(),
            },
        );
    }

    /// A copy of one link.
    pub fn link(&self, name: &str) -> Option<FakeLink> {
        self.lock().links.get(name).cloned()
    }

    /// Mutating operations performed so far (`"add_address kube-ipvs0 10.0.0.1"`).
    pub fn ops(&self) -> Vec<String> {
        self.lock().ops.clone()
    }

    /// Makes binding `ip` fail (EINVAL), as a kernel refusing one address.
    pub fn refuse_address(&self, ip: IpAddr) {
        self.lock().refused.insert(ip);
    }

    /// Forgets the recorded operations.
    pub fn clear_ops(&self) {
        self.lock().ops.clear();
    }

    /// Binds `ip` to `name`, with scope host when `host`.
    fn add_scoped(&self, name: &str, ip: IpAddr, host: bool) -> KernelResult<bool> {
        let mut s = self.lock();
        let link = s.links.get_mut(name).ok_or_else(|| no_link(name))?;
        if link.addrs.contains(&ip) {
            return Ok(false);
        }
        if s.refused.contains(&ip) {
            return Err(KernelError::Errno {
                op: format!("add address {ip} on {name}"),
                errno: libc::EINVAL,
                message: "Invalid argument".into(),
            });
        }
        let link = s.links.get_mut(name).ok_or_else(|| no_link(name))?;
        link.addrs.push(ip);
        if host {
            link.host_scoped.insert(ip);
        }
        let scope = if host { " scope host" } else { "" };
        s.ops.push(format!("add_address {name} {ip}{scope}"));
        Ok(true)
    }
}

fn no_link(name: &str) -> KernelError {
    KernelError::NotFound(format!("link {name}"))
}

impl Links for FakeLinks {
    fn ensure_dummy(&mut self, name: &str) -> KernelResult<bool> {
        let mut s = self.lock();
        if s.links.contains_key(name) {
            return Ok(false);
        }
        s.ops.push(format!("ensure_dummy {name}"));
        s.links.insert(
            name.to_string(),
            FakeLink {
                kind: "dummy".into(),
                up: false,
                addrs: Vec::new(),
                host_scoped: BTreeSet::new(),
            },
        );
        Ok(true)
    }

    fn addresses(&mut self, name: &str) -> KernelResult<Vec<IpAddr>> {
        let s = self.lock();
        s.links
            .get(name)
            .map(|l| l.addrs.clone())
            .ok_or_else(|| no_link(name))
    }

    fn add_address(&mut self, name: &str, ip: IpAddr) -> KernelResult<bool> {
        self.add_scoped(name, ip, false)
    }

    fn host_scoped(&mut self, name: &str) -> KernelResult<BTreeSet<IpAddr>> {
        let s = self.lock();
        s.links
            .get(name)
            .map(|l| l.host_scoped.clone())
            .ok_or_else(|| no_link(name))
    }

    fn add_host_scoped(&mut self, name: &str, ips: &[IpAddr]) -> Vec<KernelResult<bool>> {
        ips.iter()
            .map(|ip| self.add_scoped(name, *ip, true))
            .collect()
    }

    fn del_address(&mut self, name: &str, ip: IpAddr) -> KernelResult<bool> {
        let mut s = self.lock();
        let link = s.links.get_mut(name).ok_or_else(|| no_link(name))?;
        let before = link.addrs.len();
        link.addrs.retain(|a| *a != ip);
        link.host_scoped.remove(&ip);
        if link.addrs.len() == before {
            return Ok(false);
        }
        s.ops.push(format!("del_address {name} {ip}"));
        Ok(true)
    }

    fn local_addresses(&mut self) -> KernelResult<Vec<(String, IpAddr)>> {
        let s = self.lock();
        Ok(s.links
            .iter()
            .flat_map(|(n, l)| l.addrs.iter().map(move |a| (n.clone(), *a)))
            .collect())
    }

    fn delete_link(&mut self, name: &str) -> KernelResult<bool> {
        let mut s = self.lock();
        if s.links.remove(name).is_none() {
            return Ok(false);
        }
        s.ops.push(format!("delete_link {name}"));
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dummy_and_addresses() {
        let mut f = FakeLinks::new();
        assert!(matches!(
            f.addresses("kube-ipvs0"),
            Err(KernelError::NotFound(_))
        ));
        assert!(f.ensure_dummy("kube-ipvs0").unwrap());
        assert!(!f.ensure_dummy("kube-ipvs0").unwrap());
        assert!(!f.link("kube-ipvs0").unwrap().up);
        let ip: IpAddr = "10.96.0.1".parse().unwrap();
        assert!(f.add_address("kube-ipvs0", ip).unwrap());
        assert!(!f.add_address("kube-ipvs0", ip).unwrap());
        assert_eq!(f.addresses("kube-ipvs0").unwrap(), vec![ip]);
        let local = f.local_addresses().unwrap();
        assert!(local.contains(&("kube-ipvs0".into(), ip)));
        assert!(local.contains(&("lo".into(), "127.0.0.1".parse().unwrap())));
        assert!(f.del_address("kube-ipvs0", ip).unwrap());
        assert!(!f.del_address("kube-ipvs0", ip).unwrap());
        assert!(f.add_address("nope", ip).is_err());
        // Batches: one result per address, a refused one fails alone.
        let ips: Vec<IpAddr> = (1..=4).map(|i| IpAddr::from([10, 96, 1, i])).collect();
        f.refuse_address(ips[2]);
        let r = f.add_addresses("kube-ipvs0", &ips);
        assert!(
            matches!(r[..], [Ok(true), Ok(true), Err(_), Ok(true)]),
            "{r:?}"
        );
        let r = f.del_addresses("kube-ipvs0", &ips);
        assert!(
            matches!(r[..], [Ok(true), Ok(true), Ok(false), Ok(true)]),
            "{r:?}"
        );
        assert!(f.addresses("kube-ipvs0").unwrap().is_empty());
        assert!(f.delete_link("kube-ipvs0").unwrap());
        assert!(!f.delete_link("kube-ipvs0").unwrap());
    }
}

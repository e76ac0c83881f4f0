//! In-memory sysctls with the kernel's errors: unknown paths do not exist, read-only ones refuse writes.
//! Cloning shares the state.

use super::Sysctl;
use crate::kernel::{KernelError, KernelResult};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug, Default)]
struct State {
    values: BTreeMap<String, i64>,
    read_only: BTreeSet<String>,
    writes: Vec<(String, i64)>,
}

/// In-memory [`Sysctl`].
#[derive(Debug, Clone, Default)]
pub struct FakeSysctl {
    inner: Arc<Mutex<State>>,
}

/// Paths kube-proxy touches, with a fresh kernel's defaults (IPVS loaded).
pub const DEFAULTS: &[(&str, i64)] = &[
    ("net/ipv4/vs/conntrack", 0),
    ("net/ipv4/vs/expire_nodest_conn", 0),
    ("net/ipv4/vs/expire_quiescent_template", 0),
    ("net/ipv4/vs/conn_reuse_mode", 1),
    ("net/ipv4/ip_forward", 0),
    ("net/ipv6/conf/all/forwarding", 0),
    ("net/ipv4/conf/all/arp_ignore", 0),
    ("net/ipv4/conf/all/arp_announce", 0),
    ("net/ipv4/conf/all/route_localnet", 0),
    ("net/bridge/bridge-nf-call-iptables", 1),
    ("net/netfilter/nf_conntrack_max", 65536),
    ("net/netfilter/nf_conntrack_tcp_timeout_established", 432000),
    ("net/netfilter/nf_conntrack_tcp_timeout_close_wait", 60),
];

impl FakeSysctl {
    /// No sysctl exists.
    pub fn new() -> Self {
        Self::default()
    }

    /// The paths in [`DEFAULTS`] with their default values.
    pub fn with_defaults() -> Self {
        let f = Self::new();
        for (p, v) in DEFAULTS {
            f.insert(p, *v);
        }
        f
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates or overwrites a path (not logged as a write).
    pub fn insert(&self, path: &str, value: i64) {
        self.lock().values.insert(path.to_string(), value);
    }

    /// Makes writes to a path fail with EROFS (as in a container with a read-only /proc/sys).
    pub fn make_read_only(&self, path: &str) {
        self.lock().read_only.insert(path.to_string());
    }

    /// Current value of a path, if it exists.
    pub fn value(&self, path: &str) -> Option<i64> {
        self.lock().values.get(path).copied()
    }

    /// Every successful write, in order.
    pub fn writes(&self) -> Vec<(String, i64)> {
        self.lock().writes.clone()
    }
}

impl Sysctl for FakeSysctl {
    fn get(&mut self, path: &str) -> KernelResult<i64> {
        self.lock()
            .values
            .get(path)
            .copied()
            .ok_or_else(|| KernelError::NotFound(format!("/proc/sys/{path}")))
    }

    fn set(&mut self, path: &str, value: i64) -> KernelResult<()> {
        let mut st = self.lock();
        if !st.values.contains_key(path) {
            return Err(KernelError::NotFound(format!("/proc/sys/{path}")));
        }
        if st.read_only.contains(path) {
            return Err(KernelError::Errno {
                op: format!("write /proc/sys/{path}"),
                errno: libc::EROFS,
                message: "Read-only file system".into(),
            });
        }
        st.values.insert(path.to_string(), value);
        st.writes.push((path.to_string(), value));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_set_ensure_and_errors() {
        let mut s = FakeSysctl::with_defaults();
        assert_eq!(s.get("net/ipv4/vs/conntrack").unwrap(), 0);
        assert!(s.ensure("net/ipv4/vs/conntrack", 1).unwrap());
        assert!(!s.ensure("net/ipv4/vs/conntrack", 1).unwrap());
        assert_eq!(s.writes(), vec![("net/ipv4/vs/conntrack".to_string(), 1)]);
        assert!(matches!(s.get("net/nope"), Err(KernelError::NotFound(_))));
        assert!(matches!(
            s.set("net/nope", 1),
            Err(KernelError::NotFound(_))
        ));
        s.make_read_only("net/ipv4/ip_forward");
        assert!(s.set("net/ipv4/ip_forward", 1).is_err());
        assert!(!s.ensure("net/ipv4/ip_forward", 0).unwrap());
    }
}

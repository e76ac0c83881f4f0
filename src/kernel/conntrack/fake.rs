//! In-memory UDP conntrack table.
//!
//! Clones share one table.

use super::{Conntrack, ConntrackFlow};
use crate::kernel::KernelResult;
use crate::net::IpFamily;
use std::sync::{Arc, Mutex, MutexGuard};

/// Fake conntrack table. `Clone` shares the same flows.
#[derive(Debug, Clone, Default)]
pub struct FakeConntrack {
    flows: Arc<Mutex<Vec<ConntrackFlow>>>,
    deleted: Arc<Mutex<Vec<ConntrackFlow>>>,
}

impl FakeConntrack {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<ConntrackFlow>> {
        self.flows.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a flow (as traffic would).
    pub fn add_flow(&self, flow: ConntrackFlow) {
        self.lock().push(flow);
    }

    /// Flows currently in the table.
    pub fn flows(&self) -> Vec<ConntrackFlow> {
        self.lock().clone()
    }

    /// Flows deleted through [`Conntrack::delete`] so far.
    pub fn deleted(&self) -> Vec<ConntrackFlow> {
        self.deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

fn same_orig(a: &ConntrackFlow, b: &ConntrackFlow) -> bool {
    a.orig_src == b.orig_src
        && a.orig_sport == b.orig_sport
        && a.orig_dst == b.orig_dst
        && a.orig_dport == b.orig_dport
}

impl Conntrack for FakeConntrack {
    fn udp_flows(&mut self, family: IpFamily) -> KernelResult<Vec<ConntrackFlow>> {
        Ok(self
            .lock()
            .iter()
            .filter(|f| IpFamily::of(&f.orig_src) == family)
            .copied()
            .collect())
    }

    fn delete(&mut self, flow: &ConntrackFlow) -> KernelResult<bool> {
        let mut flows = self.lock();
        let Some(i) = flows.iter().position(|f| same_orig(f, flow)) else {
            return Ok(false);
        };
        let gone = flows.remove(i);
        drop(flows);
        self.deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(gone);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_by_family_and_delete_by_original_tuple() {
        let mut f = FakeConntrack::new();
        let v4 = ConntrackFlow {
            orig_src: "10.0.0.5".parse().unwrap(),
            orig_sport: 40000,
            orig_dst: "10.96.0.10".parse().unwrap(),
            orig_dport: 53,
            reply_src: "10.244.1.7".parse().unwrap(),
            reply_sport: 53,
        };
        let v6 = ConntrackFlow {
            orig_src: "fd00::5".parse().unwrap(),
            orig_dst: "fd00:96::10".parse().unwrap(),
            reply_src: "fd00:244::7".parse().unwrap(),
            ..v4
        };
        f.add_flow(v4);
        f.add_flow(v6);
        assert_eq!(f.udp_flows(IpFamily::V4).unwrap(), vec![v4]);
        assert_eq!(f.udp_flows(IpFamily::V6).unwrap(), vec![v6]);
        let mut probe = v4;
        probe.reply_src = "1.1.1.1".parse().unwrap();
        assert!(f.delete(&probe).unwrap());
        assert!(!f.delete(&v4).unwrap());
        assert_eq!(f.deleted(), vec![v4]);
        assert_eq!(f.flows(), vec![v6]);
    }
}

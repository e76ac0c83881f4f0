//! The kernel's side of the explanation: the virtual servers IPVS has and their real servers, with the
//! weights and connection counts it reports. Read on the explainer's own IPVS socket, never the sync
//! loop's.

use crate::kernel::ipvs::{Ipvs, IpvsDestination, IpvsServiceKey};
use crate::kernel::{KernelError, KernelResult};
use std::collections::{BTreeMap, BTreeSet};

/// One virtual server as the kernel has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelVs {
    pub scheduler: String,
    pub real_servers: Vec<IpvsDestination>,
}

/// The virtual servers asked for that the kernel has (absent: not programmed).
pub type KernelView = BTreeMap<IpvsServiceKey, KernelVs>;

/// Above this many virtual servers, one read of every real server (the quick view) beats a dump each.
const PER_KEY_LIMIT: usize = 64;

/// The virtual servers in `keys` as the kernel has them: one dump of the virtual servers, then their
/// real servers (one dump each, or the quick view for many).
pub fn read(ipvs: &mut dyn Ipvs, keys: &BTreeSet<IpvsServiceKey>) -> KernelResult<KernelView> {
    let mut out: KernelView = ipvs
        .services()?
        .into_iter()
        .filter(|s| keys.contains(&s.key))
        .map(|s| {
            let vs = KernelVs {
                scheduler: s.scheduler,
                real_servers: Vec::new(),
            };
            (s.key, vs)
        })
        .collect();
    let view = if out.len() > PER_KEY_LIMIT {
        ipvs.destination_view()?
    } else {
        None
    };
    for (key, vs) in out.iter_mut() {
        vs.real_servers = match &view {
            Some(v) => v.get(key).cloned().unwrap_or_default(),
            None => match ipvs.destinations(key) {
                Ok(d) => d,
                // Deleted between the two dumps: shown without real servers.
                Err(KernelError::NotFound(_)) => Vec::new(),
                Err(e) => return Err(e),
            },
        };
    }
    Ok(out)
}

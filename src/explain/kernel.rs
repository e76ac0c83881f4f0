//! The kernel's side of the explanation: the virtual servers IPVS has and their real servers, with the
//! weights and connection counts it reports. Read on the explainer's own IPVS socket, never the sync
//! loop's: one Service by a GET of each of its virtual servers, the listing from one dump of the whole
//! table that concurrent requests share and reuse briefly ([`KernelSource`]).

use super::metrics::ExplainMetrics;
use super::reuse::Reuse;
use crate::kernel::ipvs::{Ipvs, IpvsDestination, IpvsServiceKey};
use crate::kernel::{KernelError, KernelResult};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One virtual server as the kernel has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelVs {
    pub scheduler: String,
    pub real_servers: Vec<IpvsDestination>,
}

/// The virtual servers the kernel has (absent: not programmed).
pub type KernelView = BTreeMap<IpvsServiceKey, KernelVs>;

/// Above this many virtual servers, one read of every real server (the quick view) beats a dump each.
const PER_KEY_LIMIT: usize = 64;

/// The real servers of `key`; none when it was deleted since it was listed.
fn real_servers(ipvs: &mut dyn Ipvs, key: &IpvsServiceKey) -> KernelResult<Vec<IpvsDestination>> {
    match ipvs.destinations(key) {
        Ok(d) => Ok(d),
        Err(KernelError::NotFound(_)) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The whole IPVS table: one dump of the virtual servers, then their real servers (one dump each, or
/// the quick view for many).
pub fn read_all(ipvs: &mut dyn Ipvs) -> KernelResult<KernelView> {
    let mut out: KernelView = ipvs
        .services()?
        .into_iter()
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
            None => real_servers(ipvs, key)?,
        };
    }
    Ok(out)
}

/// The virtual servers in `keys` only: a GET of each, then a dump of its real servers.
pub fn read_keys(ipvs: &mut dyn Ipvs, keys: &BTreeSet<IpvsServiceKey>) -> KernelResult<KernelView> {
    let mut out = KernelView::new();
    for key in keys {
        if let Some(s) = ipvs.service(key)? {
            let vs = KernelVs {
                scheduler: s.scheduler,
                real_servers: real_servers(ipvs, key)?,
            };
            out.insert(*key, vs);
        }
    }
    Ok(out)
}

/// The full table, or why it could not be read.
type Shared = Result<Arc<KernelView>, Arc<IpvsReadError>>;

/// Why the kernel's IPVS table could not be read for an explanation.
#[derive(Debug, thiserror::Error)]
pub enum IpvsReadError {
    /// The daemon has no IPVS handle.
    #[error("IPVS could not be opened")]
    Unavailable,
    /// The read failed.
    #[error("reading IPVS: {0}")]
    Read(#[source] KernelError),
}

/// The explainer's IPVS socket and the shared full read.
pub struct KernelSource {
    /// `None`: IPVS could not be opened; the kernel's side is then missing.
    ipvs: Option<Mutex<Box<dyn Ipvs>>>,
    full: Reuse<Shared>,
    metrics: ExplainMetrics,
}

impl KernelSource {
    /// Reads through `ipvs`; a full read is reused for `reuse`.
    pub fn new(ipvs: Option<Box<dyn Ipvs>>, reuse: Duration, metrics: ExplainMetrics) -> Self {
        KernelSource {
            ipvs: ipvs.map(Mutex::new),
            full: Reuse::new(reuse),
            metrics,
        }
    }

    fn with_ipvs<T>(
        &self,
        f: impl FnOnce(&mut dyn Ipvs) -> KernelResult<T>,
    ) -> Result<T, IpvsReadError> {
        let Some(ipvs) = &self.ipvs else {
            return Err(IpvsReadError::Unavailable);
        };
        let mut ipvs = ipvs.lock().unwrap_or_else(|p| p.into_inner());
        f(ipvs.as_mut()).map_err(IpvsReadError::Read)
    }

    /// The whole table: at most one read at a time, shared by the requests that wait for it and reused
    /// (errors too) for the reuse period.
    pub fn full(&self) -> Shared {
        self.full.get(|| {
            self.metrics.kernel_reads("dump", 1);
            self.with_ipvs(read_all).map(Arc::new).map_err(Arc::new)
        })
    }

    /// The virtual servers in `keys`, read now (one GET each).
    pub fn keys(&self, keys: &BTreeSet<IpvsServiceKey>) -> Result<KernelView, IpvsReadError> {
        self.metrics.kernel_reads("get", keys.len() as u64);
        self.with_ipvs(|ipvs| read_keys(ipvs, keys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn a_failed_read_keeps_the_kernel_error() {
        let e = IpvsReadError::Read(KernelError::Unsupported("ipvs".into()));
        assert_eq!(e.to_string(), "reading IPVS: unsupported: ipvs");
        assert!(e.source().is_some_and(|c| c.is::<KernelError>()));
        let metrics = ExplainMetrics::unregistered().expect("metrics");
        let none = KernelSource::new(None, Duration::ZERO, metrics);
        assert!(matches!(
            none.keys(&BTreeSet::new()),
            Err(IpvsReadError::Unavailable)
        ));
    }
}

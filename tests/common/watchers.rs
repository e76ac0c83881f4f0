//! The daemon's watchers (`cluster::watch::start`, as the daemon starts them) on a client, and the Services
//! and endpoints they converged to. Standalone, so a test binary takes it alone:
//! `#[path = "common/watchers.rs"] pub mod watchers;`.

use kube_proxy_rs::cluster::listwatch::{ApiClient, MediaTypes};
use kube_proxy_rs::cluster::model::{EndpointsMap, ServiceMap};
use kube_proxy_rs::cluster::watch::{NodeInfo, Notifier, Stores, Synced, Trackers, start};
use kube_proxy_rs::daemon::events::{Events, on_invalid_object};
use kube_proxy_rs::metrics::Metrics;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Running watchers and what they converged to.
pub struct Watchers {
    /// The change trackers they feed.
    pub trackers: Arc<Trackers>,
    /// The Node store and the counters.
    pub stores: Stores,
    /// Whether each kind was listed.
    pub synced: Synced,
    /// The metrics an unreadable object counts in ([`Watchers::reporting`]).
    pub metrics: Arc<Metrics>,
    /// The Services applied so far ([`Watchers::apply`]).
    pub services: ServiceMap,
    /// The endpoints applied so far.
    pub endpoints: EndpointsMap,
}

impl Watchers {
    /// Watchers of node `node` reading `media`, telling `notifier`.
    pub fn start(client: kube::Client, node: &str, media: MediaTypes, notifier: Notifier) -> Self {
        let trackers = Trackers::new(node);
        let (stores, synced) = start(
            ApiClient::new(client, media),
            node,
            trackers.clone(),
            notifier,
        );
        Watchers {
            trackers,
            stores,
            synced,
            metrics: Arc::new(Metrics::new().expect("metrics")),
            services: ServiceMap::default(),
            endpoints: EndpointsMap::default(),
        }
    }

    /// Watchers that report an unreadable object as the daemon does: a warning, the metric in
    /// [`Watchers::metrics`] and an Event.
    pub fn reporting(client: kube::Client, node: &str, media: MediaTypes) -> Self {
        let metrics = Arc::new(Metrics::new().expect("metrics"));
        let events = Events::start(client.clone(), node);
        let notifier = Notifier::new(|| {}).on_invalid(on_invalid_object(metrics.clone(), events));
        Watchers {
            metrics,
            ..Watchers::start(client, node, media, notifier)
        }
    }

    /// Waits up to `timeout` until Services and EndpointSlices are listed.
    pub async fn listed(&mut self, timeout: Duration) {
        tokio::time::timeout(timeout, self.synced.wait_proxy_ready())
            .await
            .expect("Services and EndpointSlices listed");
    }

    /// Applies the pending changes; the Services and endpoints so far.
    pub fn apply(&mut self) -> (&ServiceMap, &EndpointsMap) {
        self.trackers.apply(&mut self.services, &mut self.endpoints);
        (&self.services, &self.endpoints)
    }

    /// The Node as the store holds it.
    pub fn node(&self) -> Option<NodeInfo> {
        self.stores.node.borrow().as_deref().cloned()
    }

    /// Objects skipped as unreadable so far.
    pub fn invalid(&self) -> u64 {
        self.stores.invalid_objects.load(Ordering::SeqCst)
    }
}

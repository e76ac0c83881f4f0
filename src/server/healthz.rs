//! Proxy health shared between the sync loop and the HTTP servers (upstream's ProxyHealthServer state).
//!
//! Rule (as upstream): each family that has synced at least once is healthy unless an update was queued
//! for it and has not been applied for `health_timeout` (2 × syncPeriod) or longer. A family that never
//! completed a sync does not count, so the proxy is healthy while starting up. `/healthz` additionally
//! requires the Node to be eligible (present, not being deleted, not tainted `ToBeDeletedByClusterAutoscaler`);
//! `/livez` ignores the Node.
//!
//! Call contract for the sync loop (as upstream's proxier): [`ProxyHealth::loop_started`] once when the sync
//! loop of a family starts (so a loop whose syncs never succeed turns unhealthy), [`ProxyHealth::queued_update`]
//! whenever a sync is requested, and [`ProxyHealth::updated`] after every successful sync.
//!
//! Start-up (beyond upstream, which answers 200 until the first sync whatever happens): the servers answer
//! from the moment the process starts, and until the first successful sync the cluster's state counts as an
//! update queued at process start. `/healthz` answers 503 once that first sync is `health_timeout` late
//! (an API server that never answers, a first sync that never succeeds), so neither the kubelet's readiness
//! probe nor a load balancer's health check believes a node whose rules were never programmed. `/livez`
//! keeps upstream's rule: the process is alive and waiting, and a restart would not bring the API server back.

use crate::gotime::instant::format_rfc3339_nano;
use crate::metrics::Metrics;
use crate::net::IpFamily;
use crate::server::clock::{Clock, SystemClock};
use k8s_openapi::api::core::v1::Node;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// Taint the cluster autoscaler puts on a node it is about to delete.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// Health of one family's proxier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FamilyHealth {
    /// Time of its last successful sync.
    pub last_updated: SystemTime,
    pub healthy: bool,
}

/// Health of the whole proxy at one instant (node eligibility not included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthStatus {
    /// Latest successful sync over all families (`None`: never).
    pub last_updated: Option<SystemTime>,
    pub current_time: SystemTime,
    /// All families healthy.
    pub healthy: bool,
    /// Families that have synced at least once.
    pub families: BTreeMap<IpFamily, FamilyHealth>,
}

/// An HTTP answer of `/healthz` or `/livez`: status code and JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthResponse {
    pub code: u16,
    pub body: String,
}

#[derive(Debug, Default)]
struct State {
    last_updated: BTreeMap<IpFamily, SystemTime>,
    oldest_pending: BTreeMap<IpFamily, SystemTime>,
    node_eligible: bool,
    /// A sync succeeded at least once ([`ProxyHealth::updated`]).
    synced: bool,
}

/// Shared health state; wrap in an [`Arc`] and hand clones to the sync loop and the servers.
pub struct ProxyHealth {
    clock: Arc<dyn Clock>,
    /// When this state was created (the process start).
    started: SystemTime,
    health_timeout: Duration,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
}

#[derive(Serialize)]
struct FamilyJson {
    #[serde(rename = "lastUpdated")]
    last_updated: String,
    healthy: bool,
}

#[derive(Serialize)]
struct HealthJson {
    #[serde(rename = "lastUpdated")]
    last_updated: String,
    #[serde(rename = "currentTime")]
    current_time: String,
    #[serde(rename = "nodeEligible", skip_serializing_if = "Option::is_none")]
    node_eligible: Option<bool>,
    healthy: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    status: BTreeMap<&'static str, FamilyJson>,
}

/// Whether a Node may receive load-balancer traffic: present, not being deleted, not marked for deletion.
pub fn node_eligible(node: Option<&Node>) -> bool {
    let Some(node) = node else {
        return false;
    };
    if node.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    !taints.is_some_and(|ts| ts.iter().any(|t| t.key == TO_BE_DELETED_TAINT))
}

impl ProxyHealth {
    /// Health state judged with `health_timeout` (upstream: 2 × syncPeriod), reading time from `clock`,
    /// counting answers in `metrics`. The node counts as eligible until [`ProxyHealth::sync_node`] says otherwise.
    pub fn new(
        health_timeout: Duration,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
    ) -> ProxyHealth {
        ProxyHealth {
            started: clock.now(),
            clock,
            health_timeout,
            metrics,
            state: Mutex::new(State {
                node_eligible: true,
                ..State::default()
            }),
        }
    }

    /// Same as [`ProxyHealth::new`] with the system clock.
    pub fn with_system_clock(health_timeout: Duration, metrics: Arc<Metrics>) -> ProxyHealth {
        ProxyHealth::new(health_timeout, Arc::new(SystemClock), metrics)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The timeout after which a queued, unapplied update makes the proxy unhealthy.
    pub fn health_timeout(&self) -> Duration {
        self.health_timeout
    }

    /// The sync loop of `family` received a change it has not applied yet. Only the oldest pending
    /// change counts: later calls before [`ProxyHealth::updated`] keep the first time.
    pub fn queued_update(&self, family: IpFamily) {
        let now = self.clock.now();
        self.state().oldest_pending.entry(family).or_insert(now);
    }

    /// The sync loop of `family` applied everything successfully.
    pub fn updated(&self, family: IpFamily) {
        let now = self.clock.now();
        let mut s = self.state();
        s.oldest_pending.remove(&family);
        s.last_updated.insert(family, now);
        s.synced = true;
    }

    /// The sync loop of `family` starts: it counts as updated now (upstream's `Updated` at the start of
    /// `SyncLoop`), which is not a successful sync.
    pub fn loop_started(&self, family: IpFamily) {
        let now = self.clock.now();
        let mut s = self.state();
        s.oldest_pending.remove(&family);
        s.last_updated.insert(family, now);
    }

    /// Whether no sync succeeded yet while the process started `health_timeout` or longer ago.
    pub fn first_sync_overdue(&self) -> bool {
        let late = self
            .clock
            .now()
            .duration_since(self.started)
            .is_ok_and(|d| d >= self.health_timeout);
        late && !self.state().synced
    }

    /// Re-evaluates node eligibility from the current Node object (`None`: the Node does not exist).
    pub fn sync_node(&self, node: Option<&Node>) {
        self.set_node_eligible(node_eligible(node));
    }

    /// Sets node eligibility directly.
    pub fn set_node_eligible(&self, eligible: bool) {
        self.state().node_eligible = eligible;
    }

    /// Whether the node is eligible for traffic.
    pub fn node_eligible(&self) -> bool {
        self.state().node_eligible
    }

    /// Proxier health now (node eligibility ignored), as upstream's `Health()`.
    pub fn health(&self) -> HealthStatus {
        let now = self.clock.now();
        let s = self.state();
        let mut status = HealthStatus {
            last_updated: s.last_updated.values().max().copied(),
            current_time: now,
            healthy: true,
            families: BTreeMap::new(),
        };
        for (family, &last) in &s.last_updated {
            let late = s.oldest_pending.get(family).is_some_and(|&queued| {
                now.duration_since(queued).unwrap_or(Duration::ZERO) >= self.health_timeout
            });
            if late {
                status.healthy = false;
            }
            status.families.insert(
                *family,
                FamilyHealth {
                    last_updated: last,
                    healthy: !late,
                },
            );
        }
        status
    }

    /// Proxier health only (what the per-service health checks report as `serviceProxyHealthy`).
    pub fn is_healthy(&self) -> bool {
        self.health().healthy
    }

    fn render(&self, health: &HealthStatus, node_eligible: Option<bool>, ok: bool) -> String {
        // As upstream: a healthy answer reports the current time as lastUpdated (old clients read it as
        // "the sync loop ran recently").
        let last_updated = if ok {
            Some(health.current_time)
        } else {
            health.last_updated
        };
        let json = HealthJson {
            last_updated: format_rfc3339_nano(last_updated),
            current_time: format_rfc3339_nano(Some(health.current_time)),
            node_eligible,
            healthy: health.healthy,
            status: health
                .families
                .iter()
                .map(|(f, h)| {
                    (
                        f.label(),
                        FamilyJson {
                            last_updated: format_rfc3339_nano(Some(h.last_updated)),
                            healthy: h.healthy,
                        },
                    )
                })
                .collect(),
        };
        serde_json::to_string(&json).unwrap_or_default()
    }

    /// The `/healthz` answer (200 when the proxier is healthy, its first sync not overdue and the node
    /// eligible, else 503), counted in `kubeproxy_proxy_healthz_total`.
    pub fn healthz(&self) -> HealthResponse {
        let mut health = self.health();
        health.healthy &= !self.first_sync_overdue();
        let eligible = self.node_eligible();
        let ok = health.healthy && eligible;
        let code = if ok { 200 } else { 503 };
        self.metrics.inc_healthz(code);
        HealthResponse {
            code,
            body: self.render(&health, Some(eligible), ok),
        }
    }

    /// The `/livez` answer (200 when the proxier is healthy, node ignored), counted in
    /// `kubeproxy_proxy_livez_total`.
    pub fn livez(&self) -> HealthResponse {
        let health = self.health();
        let ok = health.healthy;
        let code = if ok { 200 } else { 503 };
        self.metrics.inc_livez(code);
        HealthResponse {
            code,
            body: self.render(&health, None, ok),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::clock::FakeClock;
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::time::UNIX_EPOCH;

    fn setup() -> (Arc<FakeClock>, ProxyHealth) {
        let clock = Arc::new(FakeClock::new(UNIX_EPOCH + Duration::from_secs(1_000_000)));
        let metrics = Arc::new(Metrics::new().unwrap());
        let h = ProxyHealth::new(Duration::from_secs(60), clock.clone(), metrics);
        (clock, h)
    }

    #[test]
    fn healthy_at_start_even_with_queued_update_and_no_sync() {
        let (clock, h) = setup();
        h.queued_update(IpFamily::V4);
        clock.advance(Duration::from_secs(600));
        let s = h.health();
        assert!(s.healthy);
        assert!(s.families.is_empty());
        assert_eq!(s.last_updated, None);
    }

    #[test]
    fn loop_started_but_never_synced_turns_unhealthy() {
        let (clock, h) = setup();
        h.updated(IpFamily::V4); // sync loop start
        h.queued_update(IpFamily::V4);
        clock.advance(Duration::from_secs(59));
        assert!(h.is_healthy());
        clock.advance(Duration::from_secs(1));
        assert!(!h.is_healthy());
        assert_eq!(h.healthz().code, 503);
        assert_eq!(h.livez().code, 503);
    }

    #[test]
    fn late_update_makes_only_its_family_unhealthy() {
        let (clock, h) = setup();
        h.updated(IpFamily::V4);
        h.updated(IpFamily::V6);
        let synced = clock.now();
        h.queued_update(IpFamily::V6);
        clock.advance(Duration::from_secs(59));
        assert!(h.is_healthy());
        h.queued_update(IpFamily::V6); // does not reset the oldest pending time
        clock.advance(Duration::from_secs(1));
        let s = h.health();
        assert!(!s.healthy);
        assert!(s.families[&IpFamily::V4].healthy);
        assert!(!s.families[&IpFamily::V6].healthy);
        assert_eq!(s.families[&IpFamily::V6].last_updated, synced);
        h.updated(IpFamily::V4);
        assert!(!h.is_healthy());
        h.updated(IpFamily::V6);
        assert!(h.is_healthy());
    }

    #[test]
    fn overdue_first_sync_fails_healthz_not_livez() {
        let (clock, h) = setup();
        clock.advance(Duration::from_secs(30));
        h.loop_started(IpFamily::V4);
        clock.advance(Duration::from_secs(29));
        assert_eq!((h.healthz().code, h.livez().code), (200, 200));
        clock.advance(Duration::from_secs(1));
        assert!(h.first_sync_overdue());
        let r = h.healthz();
        assert_eq!(r.code, 503, "{}", r.body);
        assert!(r.body.contains("\"healthy\":false"), "{}", r.body);
        assert_eq!(h.livez().code, 200);
        h.updated(IpFamily::V4);
        assert!(!h.first_sync_overdue());
        assert_eq!(h.healthz().code, 200);
    }

    #[test]
    fn node_eligibility_rules() {
        let mut node = Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(node_eligible(Some(&node)));
        assert!(!node_eligible(None));
        node.spec = Some(NodeSpec {
            taints: Some(vec![Taint {
                key: "other".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(node_eligible(Some(&node)));
        node.spec
            .as_mut()
            .unwrap()
            .taints
            .as_mut()
            .unwrap()
            .push(Taint {
                key: TO_BE_DELETED_TAINT.into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            });
        assert!(!node_eligible(Some(&node)));
        node.spec = None;
        node.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(!node_eligible(Some(&node)));
    }
}

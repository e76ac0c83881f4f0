//! End-to-end: UDP flows across endpoint and Service changes (kubernetes#71514, #76664, #139628, #141371,
//! #122740; kube-router#899). The real daemon in a UML guest; five long-lived UDP flows, each one connected
//! socket sending a numbered datagram every 20 ms, go through every path of one Service at once: ClusterIP
//! from a pod and from the node, NodePort, external IP and LoadBalancer IP from a client outside the node.
//! After each change every flow must be answered again, by the new endpoints only: an endpoint removed,
//! an endpoint replaced, the Service scaled to zero and back, the Service deleted and re-created with the
//! same addresses (the stale conntrack entries made while it was gone blackhole all but one flow unless
//! they are deleted), and a restart of the daemon (which must move no flow). Each change prints the
//! datagrams every flow lost; on this shared host they include the guest's stalls, so they are figures,
//! not assertions ([performance.md](../docs/performance.md#udp-flows-across-changes)).
mod common;

use common::e2e::{E2e, Options, POD_GW, boot, client, metric_sum};
use common::netns::Pod;
use common::udp_service::{DNS, Ep, KEEP, default_route, echo_pod, report, wait_recovered};
use common::udp_stream::Mode;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

const EVERY: Duration = Duration::from_millis(20);
/// How long every flow may take to answer from the new endpoints once the kernel has them.
const RECOVER: Duration = Duration::from_secs(20);

/// The distinct peers of the last 100 datagrams a pod answered (one per flow).
fn last_peers(p: &Pod) -> BTreeSet<SocketAddr> {
    let peers = p.peers();
    peers[peers.len().saturating_sub(100)..]
        .iter()
        .copied()
        .collect()
}

uml_test!(udp_flows_across_endpoint_and_service_changes, boot(), {
    let inside = Pod::create("udp-client", "10.244.0.50", POD_GW).expect("client pod");
    let outside = client("outside", "192.168.10.2", "192.168.10.1");
    default_route();
    let mut e = E2e::start(Options {
        sync_period: "300s".to_string(),
        ..Options::default()
    });
    let keep = echo_pod("pod-k", "10.244.0.20");
    e.apply(KEEP.object());
    e.apply(KEEP.slice(&[(&keep, Ep::Ready)]));
    let a = echo_pod("pod-a", "10.244.0.11");
    let b = echo_pod("pod-b", "10.244.0.12");
    e.apply(DNS.object());
    e.apply(DNS.slice(&[(&a, Ep::Ready), (&b, Ep::Ready)]));
    e.start_daemon();
    DNS.wait_real_servers(&mut e, &[&a, &b]);
    let flows = DNS.flows(&inside, &outside, Mode::Held, EVERY);
    let now = || flows[0].now();
    wait_recovered(&flows, &["pod-a", "pod-b"], now(), RECOVER, "start");

    // 1. An endpoint removed: pod-a dies, then leaves the slice.
    let t = now();
    drop(a);
    e.apply(DNS.slice(&[(&b, Ep::Ready)]));
    DNS.wait_real_servers(&mut e, &[&b]);
    wait_recovered(&flows, &["pod-b"], now(), RECOVER, "endpoint removed");
    std::thread::sleep(Duration::from_secs(1));
    report(&flows, "endpoint removed", t, now());

    // 2. An endpoint replaced, as a rollout does it: pod-c ready next to pod-b, pod-b terminating but
    // serving, then gone.
    let c = echo_pod("pod-c", "10.244.0.13");
    let t = now();
    e.apply(DNS.slice(&[(&b, Ep::Ready), (&c, Ep::Ready)]));
    DNS.wait_real_servers(&mut e, &[&b, &c]);
    e.apply(DNS.slice(&[(&b, Ep::Draining), (&c, Ep::Ready)]));
    DNS.wait_real_servers(&mut e, &[&c]);
    wait_recovered(&flows, &["pod-c"], now(), RECOVER, "endpoint replaced");
    drop(b);
    e.apply(DNS.slice(&[(&c, Ep::Ready)]));
    std::thread::sleep(Duration::from_secs(1));
    report(&flows, "endpoint replaced", t, now());
    assert_eq!(
        flows
            .iter()
            .map(|f| f.last_pod())
            .collect::<BTreeSet<_>>()
            .len(),
        1
    );

    // 3. Scaled to zero and back.
    drop(c);
    e.apply(DNS.slice(&[]));
    DNS.wait_real_servers(&mut e, &[]);
    std::thread::sleep(Duration::from_secs(2));
    let d = echo_pod("pod-d", "10.244.0.14");
    let t = now();
    e.apply(DNS.slice(&[(&d, Ep::Ready)]));
    DNS.wait_real_servers(&mut e, &[&d]);
    wait_recovered(
        &flows,
        &["pod-d"],
        now(),
        RECOVER,
        "scaled to zero and back",
    );
    std::thread::sleep(Duration::from_secs(1));
    report(&flows, "scaled to zero and back", t, now());

    // 4. Deleted, and re-created with the same addresses: while it is gone, the flows' datagrams leave by
    // the default route and leave conntrack entries without the Service's translation, which the
    // re-created Service's first sync must delete.
    let deleted_before = metric_sum(
        &e.metrics(),
        "kubeproxy_conntrack_reconciler_deleted_entries_total",
    );
    e.delete_service("dns");
    e.wait_ipvs("the Service's virtual servers deleted", |t| {
        !t.contains(&format!("{}:53", DNS.cluster_ip))
    });
    drop(d);
    std::thread::sleep(Duration::from_secs(2));
    let f = echo_pod("pod-e", "10.244.0.15");
    let t = now();
    e.apply(DNS.object());
    e.apply(DNS.slice(&[(&f, Ep::Ready)]));
    DNS.wait_real_servers(&mut e, &[&f]);
    wait_recovered(&flows, &["pod-e"], now(), RECOVER, "deleted and re-created");
    std::thread::sleep(Duration::from_secs(1));
    report(&flows, "deleted and re-created", t, now());
    let deleted = metric_sum(
        &e.metrics(),
        "kubeproxy_conntrack_reconciler_deleted_entries_total",
    );
    assert!(
        deleted > deleted_before,
        "no stale conntrack entry deleted ({deleted_before} -> {deleted})"
    );

    // 5. The daemon restarts under the flows: its first (full) sync deletes no conntrack entry of a flow
    // that still goes where IPVS sends it, so no flow is moved or masqueraded anew (upstream deletes every
    // UDP entry of its Services then, kubernetes#122740): pod-e sees the same peers before and after.
    let peers = last_peers(&f);
    assert_eq!(peers.len(), flows.len(), "{peers:?}");
    let t = now();
    assert!(e.stop_daemon().success(), "{}", e.log());
    e.start_daemon();
    std::thread::sleep(Duration::from_secs(2));
    report(&flows, "daemon restarted", t, now());
    assert_eq!(last_peers(&f), peers, "flows moved by the restart");
    assert!(e.daemon_exit().is_none(), "daemon died:\n{}", e.log());
    drop(keep);
});

//! The own Node: waiting for it at start, its IPs (as upstream's `detectNodeIPs`), and the IP families
//! to serve.

use crate::cluster::decode::Decoded;
use crate::cluster::watch::{NodeInfo, node_info};
use crate::net::IpFamily;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// How long to wait for the Node object at start before falling back (upstream: 30 s).
pub const NODE_WAIT: Duration = Duration::from_secs(30);

/// Polls the API server for Node `name` until it exists or `timeout` passes, whatever the API server
/// does (each request has its own deadline too; one that never returns does not hold the wait).
pub async fn wait_for_node(
    client: &kube::Client,
    name: &str,
    timeout: Duration,
) -> Option<NodeInfo> {
    tokio::time::timeout(timeout, poll_node(client, name))
        .await
        .ok()
}

/// Gets Node `name` every 500 ms until it exists and can be read.
async fn poll_node(client: &kube::Client, name: &str) -> NodeInfo {
    // Decoded leniently, as the Node watch does: fields kube-proxy does not read cannot fail it.
    let api: Api<Decoded<Node>> = Api::all(client.clone());
    loop {
        match api.get_opt(name).await {
            Ok(Some(Decoded::Object(node))) => return node_info(&node),
            Ok(Some(Decoded::Unreadable(u))) => {
                tracing::warn!(node = name, error = %u.error, "Cannot read the Node object")
            }
            Ok(None) => tracing::info!(node = name, "Waiting for the Node object"),
            Err(e) => tracing::warn!(node = name, error = %e, "Cannot get the Node object"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The node's host IPs as the Node lists them: the first address, then the first address of the other
/// family (InternalIP before ExternalIP), as upstream's `GetNodeHostIPs`.
pub fn host_ips(info: &NodeInfo) -> Vec<IpAddr> {
    let all: Vec<IpAddr> = info
        .internal_ips
        .iter()
        .chain(info.external_ips.iter())
        .copied()
        .collect();
    let Some(first) = all.first().copied() else {
        return Vec::new();
    };
    let mut out = vec![first];
    if let Some(other) = all
        .iter()
        .find(|ip| IpFamily::of(ip) != IpFamily::of(&first))
    {
        out.push(*other);
    }
    out
}

/// The node IPs kube-proxy works with, primary first: the Node's host IPs, with a specific `bindAddress`
/// taking the primary place; 127.0.0.1 when nothing is known (as upstream, with a warning).
pub fn node_ips(info: Option<&NodeInfo>, bind_address: &str) -> Vec<IpAddr> {
    let mut ips = info.map(host_ips).unwrap_or_default();
    if let Ok(bind) = bind_address.trim().parse::<IpAddr>()
        && !bind.is_unspecified()
        && !bind.is_loopback()
    {
        ips.retain(|ip| IpFamily::of(ip) != IpFamily::of(&bind));
        ips.insert(0, bind);
    }
    if ips.is_empty() {
        tracing::info!(
            "Can't determine this node's IP, assuming loopback; if this is incorrect, please set the --bind-address flag"
        );
        ips.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    ips
}

/// The families to serve, primary first: the primary node IP's family, plus the other one when the
/// kernel supports both (upstream runs its dual-stack proxier whenever both iptables families work).
pub fn families(node_ips: &[IpAddr], ipv6_supported: bool) -> Vec<IpFamily> {
    let primary = node_ips.first().map(IpFamily::of).unwrap_or(IpFamily::V4);
    match (primary, ipv6_supported) {
        (IpFamily::V4, true) => vec![IpFamily::V4, IpFamily::V6],
        (IpFamily::V4, false) => vec![IpFamily::V4],
        (IpFamily::V6, _) => vec![IpFamily::V6, IpFamily::V4],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(internal: &[&str], external: &[&str]) -> NodeInfo {
        NodeInfo {
            internal_ips: internal.iter().map(|s| s.parse().unwrap()).collect(),
            external_ips: external.iter().map(|s| s.parse().unwrap()).collect(),
            ..Default::default()
        }
    }

    fn ips(v: &[&str]) -> Vec<IpAddr> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn node_wait_gives_up_on_a_silent_api_server() {
        // Accepts connections and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let _held = conn;
                    std::future::pending::<()>().await
                });
            }
        });
        let config = kube::Config::new(url.parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let start = tokio::time::Instant::now();
        let waited = tokio::time::timeout(NODE_WAIT * 4, wait_for_node(&client, "n1", NODE_WAIT));
        assert_eq!(waited.await, Ok(None), "the wait never ended");
        assert_eq!(start.elapsed(), NODE_WAIT);
    }

    #[test]
    fn host_ips_take_first_of_each_family() {
        let n = info(
            &["10.0.0.1", "10.0.0.2", "fd00::1"],
            &["1.2.3.4", "2001:db8::1"],
        );
        assert_eq!(host_ips(&n), ips(&["10.0.0.1", "fd00::1"]));
        let n = info(&["10.0.0.1"], &["2001:db8::1"]);
        assert_eq!(host_ips(&n), ips(&["10.0.0.1", "2001:db8::1"]));
        assert!(host_ips(&info(&[], &[])).is_empty());
    }

    #[test]
    fn bind_address_wins_primary_and_fallback_is_loopback() {
        let n = info(&["10.0.0.1", "fd00::1"], &[]);
        assert_eq!(node_ips(Some(&n), "0.0.0.0"), ips(&["10.0.0.1", "fd00::1"]));
        assert_eq!(node_ips(Some(&n), "fd00::9"), ips(&["fd00::9", "10.0.0.1"]));
        assert_eq!(node_ips(None, "192.168.1.5"), ips(&["192.168.1.5"]));
        assert_eq!(node_ips(None, ""), ips(&["127.0.0.1"]));
    }

    #[test]
    fn families_follow_primary_ip_and_kernel_support() {
        assert_eq!(
            families(&ips(&["10.0.0.1"]), true),
            vec![IpFamily::V4, IpFamily::V6]
        );
        assert_eq!(families(&ips(&["10.0.0.1"]), false), vec![IpFamily::V4]);
        assert_eq!(
            families(&ips(&["fd00::1"]), true),
            vec![IpFamily::V6, IpFamily::V4]
        );
    }
}

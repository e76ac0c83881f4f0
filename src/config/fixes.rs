//! kube-proxy-rs's fixes of upstream IPVS-mode behaviour that change what the node's kernel holds (issue
//! 32). Each is off by default (upstream's behaviour) and switched on by a flag of its own; the flags also
//! apply with `--config` (the file keeps upstream's schema).

/// Which fixes are on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IpvsFixes {
    /// `--ipvs-lb-source-ranges-for-node`: every connection the node itself makes to a LoadBalancer
    /// address with `loadBalancerSourceRanges` is checked against them, whatever its source address
    /// (kubernetes#119656). Upstream drops only those sourced from the LB address, when no range covers
    /// the node IP.
    pub lb_source_ranges_for_node: bool,
    /// `--ipvs-arp-per-address`: the node answers no ARP request for the ClusterIPs and LoadBalancer
    /// ingress IPs it binds to kube-ipvs0 (they get scope host, and `conf/all/arp_ignore` is 3), and
    /// still answers for external IPs and its own addresses on any interface (kubernetes#59976).
    /// Upstream answers for all of them unless `strictARP` stops every answer on another interface.
    pub arp_per_address: bool,
    /// `--ipvs-etp-local-node-masquerade`: the node's own connections (host-network pods included) to
    /// the LoadBalancer and external IPs of `externalTrafficPolicy: Local` Services are masqueraded, as
    /// iptables mode does (kubernetes#71596, #93456). Upstream leaves them with the Service address as
    /// source, which every node holds, so that an endpoint on another node answers its own node.
    pub etp_local_node_masquerade: bool,
}

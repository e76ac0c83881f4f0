//! The ipsets kube-proxy's IPVS mode keeps (upstream's `ipsetInfo` table) and their per-family kernel
//! names; their members are typed values ([`crate::kernel::ipset::entry::IpSetEntry`]).

use crate::kernel::ipset::{IpSetSize, IpSetSpec, IpSetType};
use crate::net::IpFamily;
use std::ops::{Index, IndexMut};

/// Longest set name the kernel accepts.
pub const MAX_SET_NAME: usize = 31;

/// One of the sets the planner fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetKind {
    LoopBack,
    ClusterIp,
    ExternalIp,
    ExternalIpLocal,
    LoadBalancer,
    LoadBalancerFw,
    LoadBalancerLocal,
    LoadBalancerSourceIp,
    LoadBalancerSourceCidr,
    NodePortTcp,
    NodePortLocalTcp,
    NodePortUdp,
    NodePortLocalUdp,
    NodePortSctp,
    NodePortLocalSctp,
    HealthCheckNodePort,
    IpvsIps,
}

impl SetKind {
    /// Number of sets.
    pub const COUNT: usize = 17;

    /// Every set, in upstream's table order.
    pub const ALL: [SetKind; SetKind::COUNT] = [
        SetKind::LoopBack,
        SetKind::ClusterIp,
        SetKind::ExternalIp,
        SetKind::ExternalIpLocal,
        SetKind::LoadBalancer,
        SetKind::LoadBalancerFw,
        SetKind::LoadBalancerLocal,
        SetKind::LoadBalancerSourceIp,
        SetKind::LoadBalancerSourceCidr,
        SetKind::NodePortTcp,
        SetKind::NodePortLocalTcp,
        SetKind::NodePortUdp,
        SetKind::NodePortLocalUdp,
        SetKind::NodePortSctp,
        SetKind::NodePortLocalSctp,
        SetKind::HealthCheckNodePort,
        SetKind::IpvsIps,
    ];

    /// IPv4 (base) name.
    pub fn base_name(self) -> &'static str {
        match self {
            SetKind::LoopBack => "KUBE-LOOP-BACK",
            SetKind::ClusterIp => "KUBE-CLUSTER-IP",
            SetKind::ExternalIp => "KUBE-EXTERNAL-IP",
            SetKind::ExternalIpLocal => "KUBE-EXTERNAL-IP-LOCAL",
            SetKind::LoadBalancer => "KUBE-LOAD-BALANCER",
            SetKind::LoadBalancerFw => "KUBE-LOAD-BALANCER-FW",
            SetKind::LoadBalancerLocal => "KUBE-LOAD-BALANCER-LOCAL",
            SetKind::LoadBalancerSourceIp => "KUBE-LOAD-BALANCER-SOURCE-IP",
            SetKind::LoadBalancerSourceCidr => "KUBE-LOAD-BALANCER-SOURCE-CIDR",
            SetKind::NodePortTcp => "KUBE-NODE-PORT-TCP",
            SetKind::NodePortLocalTcp => "KUBE-NODE-PORT-LOCAL-TCP",
            SetKind::NodePortUdp => "KUBE-NODE-PORT-UDP",
            SetKind::NodePortLocalUdp => "KUBE-NODE-PORT-LOCAL-UDP",
            SetKind::NodePortSctp => "KUBE-NODE-PORT-SCTP-HASH",
            SetKind::NodePortLocalSctp => "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
            SetKind::HealthCheckNodePort => "KUBE-HEALTH-CHECK-NODE-PORT",
            SetKind::IpvsIps => "KUBE-IPVS-IPS",
        }
    }

    /// Set type.
    pub fn set_type(self) -> IpSetType {
        match self {
            SetKind::LoopBack | SetKind::LoadBalancerSourceIp => IpSetType::HashIpPortIp,
            SetKind::LoadBalancerSourceCidr => IpSetType::HashIpPortNet,
            SetKind::NodePortTcp
            | SetKind::NodePortLocalTcp
            | SetKind::NodePortUdp
            | SetKind::NodePortLocalUdp
            | SetKind::HealthCheckNodePort => IpSetType::BitmapPort,
            SetKind::IpvsIps => IpSetType::HashIp,
            _ => IpSetType::HashIpPort,
        }
    }

    /// Comment carried by the iptables rules matching this set.
    pub fn comment(self) -> &'static str {
        match self {
            SetKind::LoopBack => {
                "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"
            }
            SetKind::ClusterIp => "Kubernetes service cluster ip + port for masquerade purpose",
            SetKind::ExternalIp => {
                "Kubernetes service external ip + port for masquerade and filter purpose"
            }
            SetKind::ExternalIpLocal => {
                "Kubernetes service external ip + port with externalTrafficPolicy=local"
            }
            SetKind::LoadBalancer => "Kubernetes service lb portal",
            SetKind::LoadBalancerFw => {
                "Kubernetes service load balancer ip + port for load balancer with sourceRange"
            }
            SetKind::LoadBalancerLocal => {
                "Kubernetes service load balancer ip + port with externalTrafficPolicy=local"
            }
            SetKind::LoadBalancerSourceIp => {
                "Kubernetes service load balancer ip + port + source IP for packet filter purpose"
            }
            SetKind::LoadBalancerSourceCidr => {
                "Kubernetes service load balancer ip + port + source cidr for packet filter purpose"
            }
            SetKind::NodePortTcp => "Kubernetes nodeport TCP port for masquerade purpose",
            SetKind::NodePortLocalTcp => {
                "Kubernetes nodeport TCP port with externalTrafficPolicy=local"
            }
            SetKind::NodePortUdp => "Kubernetes nodeport UDP port for masquerade purpose",
            SetKind::NodePortLocalUdp => {
                "Kubernetes nodeport UDP port with externalTrafficPolicy=local"
            }
            SetKind::NodePortSctp => {
                "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'"
            }
            SetKind::NodePortLocalSctp => {
                "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'"
            }
            SetKind::HealthCheckNodePort => "Kubernetes health check node port",
            SetKind::IpvsIps => "Addresses on the ipvs interface",
        }
    }

    /// Kernel name for `family`.
    pub fn name(self, family: IpFamily) -> String {
        set_name(self.base_name(), family)
    }

    /// Full definition for `family`, at upstream's size (a planned set is sized from its members).
    pub fn spec(self, family: IpFamily) -> IpSetSpec {
        IpSetSpec {
            comment: self.comment().to_string(),
            ..IpSetSpec::new(self.name(family), self.set_type(), family)
        }
    }
}

/// The size a set holding `members` entries needs: upstream's (`hashsize 1024 maxelem 65536`) while they
/// fit in it, so a node within upstream's limits has upstream's sets; beyond, the smallest power of two
/// that leaves room for a quarter more members (the next grow is that far away), with upstream's 1:64
/// ratio of hashsize to maxelem. The reconciler grows a set whose kernel `maxelem` is below this and
/// never shrinks one.
pub fn size_for(members: usize) -> IpSetSize {
    let upstream = IpSetSize::UPSTREAM;
    let members = u64::try_from(members).unwrap_or(u64::MAX);
    if members <= u64::from(upstream.maxelem) {
        return upstream;
    }
    // The kernel's limit is a u32; 2^31 members would need hundreds of GiB anyway.
    let wanted = members.saturating_add(members.div_ceil(4)).min(1 << 31);
    let maxelem = u32::try_from(wanted.next_power_of_two()).unwrap_or(1 << 31);
    IpSetSize {
        hashsize: maxelem / (upstream.maxelem / upstream.hashsize),
        maxelem,
    }
}

/// The name a set of ours is grown under before it is swapped in (the set's name cut to 29 characters
/// and `-G`): unique per set, never the name of one, and at most 31 characters.
pub fn staging_name(name: &str) -> String {
    let mut n: String = name.chars().take(MAX_SET_NAME - 2).collect();
    n.push_str("-G");
    n
}

// `ALL` lists every kind once, in declaration order: the last kind closes the count.
const _: () = assert!(SetKind::IpvsIps as usize + 1 == SetKind::COUNT);

/// One value per set kind, indexed by [`SetKind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PerSet<T>([T; SetKind::COUNT]);

impl<T> PerSet<T> {
    /// The value of each kind from `f`.
    pub fn from_fn(f: impl FnMut(SetKind) -> T) -> Self {
        PerSet(SetKind::ALL.map(f))
    }

    /// The value of each kind mapped through `f`.
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> PerSet<U> {
        PerSet::from_fn(|k| f(&self[k]))
    }
}

impl<T> IntoIterator for PerSet<T> {
    type Item = (SetKind, T);
    type IntoIter = std::iter::Zip<
        std::array::IntoIter<SetKind, { SetKind::COUNT }>,
        std::array::IntoIter<T, { SetKind::COUNT }>,
    >;

    fn into_iter(self) -> Self::IntoIter {
        SetKind::ALL.into_iter().zip(self.0)
    }
}

impl<T> Index<SetKind> for PerSet<T> {
    type Output = T;

    fn index(&self, kind: SetKind) -> &T {
        &self.0[kind as usize]
    }
}

impl<T> IndexMut<SetKind> for PerSet<T> {
    fn index_mut(&mut self, kind: SetKind) -> &mut T {
        &mut self.0[kind as usize]
    }
}

/// Kernel name of a set: IPv6 sets swap the `KUBE-` prefix for `KUBE-6-` and are cut to 31 characters.
pub fn set_name(base: &str, family: IpFamily) -> String {
    match (family, base.strip_prefix("KUBE-")) {
        (IpFamily::V6, Some(rest)) => {
            let mut name = format!("KUBE-6-{rest}");
            name.truncate(MAX_SET_NAME);
            name
        }
        _ => base.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_names_follow_upstream_rule() {
        assert_eq!(
            set_name("KUBE-LOAD-BALANCER-SOURCE-CIDR", IpFamily::V6),
            "KUBE-6-LOAD-BALANCER-SOURCE-CID"
        );
        assert_eq!(
            set_name("KUBE-NODE-PORT-LOCAL-SCTP-HASH", IpFamily::V6),
            "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS"
        );
        assert_eq!(
            set_name("KUBE-CLUSTER-IP", IpFamily::V6),
            "KUBE-6-CLUSTER-IP"
        );
        assert_eq!(set_name("KUBE-CLUSTER-IP", IpFamily::V4), "KUBE-CLUSTER-IP");
        for k in SetKind::ALL {
            assert!(k.name(IpFamily::V6).len() <= MAX_SET_NAME);
            assert_eq!(SetKind::ALL[k as usize], k);
            assert_eq!(PerSet::from_fn(|x| x)[k], k);
        }
    }

    #[test]
    fn sets_keep_upstream_size_until_members_outgrow_it() {
        let up = IpSetSize::UPSTREAM;
        assert_eq!((up.hashsize, up.maxelem), (1024, 65536));
        for n in [0, 1, 52_429, 65_535, 65_536] {
            assert_eq!(size_for(n), up, "{n} members");
        }
        let size = |hashsize, maxelem| IpSetSize { hashsize, maxelem };
        // Beyond 65,536: a power of two with room for a quarter more, hashsize 1/64 of it.
        assert_eq!(size_for(65_537), size(2048, 131_072));
        assert_eq!(size_for(100_000), size(2048, 131_072));
        assert_eq!(size_for(104_857), size(2048, 131_072));
        assert_eq!(size_for(104_858), size(4096, 262_144));
        assert_eq!(size_for(1_000_000), size(32_768, 2_097_152));
        assert_eq!(size_for(usize::MAX), size(1 << 25, 1 << 31));
        // Monotonic and always with room: a set of n members never needs to shrink to hold n + 1.
        let mut last = up;
        for n in (0..3_000_000).step_by(997) {
            let s = size_for(n);
            assert!(s >= last && s.maxelem as usize >= n, "{n}: {s:?}");
            last = s;
        }
    }

    #[test]
    fn staging_names_are_unique_and_short() {
        let mut all = std::collections::BTreeSet::new();
        for f in [IpFamily::V4, IpFamily::V6] {
            for k in SetKind::ALL {
                all.insert(k.name(f));
            }
        }
        let staged: std::collections::BTreeSet<String> =
            all.iter().map(|n| staging_name(n)).collect();
        assert_eq!(staged.len(), all.len());
        assert!(
            staged
                .iter()
                .all(|n| n.len() <= MAX_SET_NAME && !all.contains(n))
        );
        assert_eq!(staging_name("KUBE-CLUSTER-IP"), "KUBE-CLUSTER-IP-G");
        assert_eq!(
            staging_name("KUBE-6-LOAD-BALANCER-SOURCE-CID"),
            "KUBE-6-LOAD-BALANCER-SOURCE-C-G"
        );
    }
}

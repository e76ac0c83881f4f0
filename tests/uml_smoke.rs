//! Smoke test of the UML harness: the guest has IPVS, ipset, dummy links and legacy iptables.
mod common {
    pub mod uml;
}

uml_test!(guest_has_ipvs_ipset_iptables, {
    let v = common::uml::sh("cat /proc/net/ip_vs");
    assert!(v.contains("IP Virtual Server version"), "no IPVS: {v}");
    common::uml::sh("ip link add kprs-smoke type dummy && ip link del kprs-smoke");
    common::uml::sh("ipset create kprs-smoke hash:ip && ipset destroy kprs-smoke");
    let nat = common::uml::sh("iptables -t nat -S");
    assert!(nat.contains("-P PREROUTING ACCEPT"), "{nat}");
});

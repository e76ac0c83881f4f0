//! The rtnetlink link backend against a real kernel (UML): kube-ipvs0, its addresses, local addresses.
mod common;

use common::uml::sh;
use kube_proxy_rs::kernel::KernelError;
use kube_proxy_rs::kernel::link::rtnetlink::RtnetlinkLinks;
use kube_proxy_rs::kernel::link::{DUMMY_DEVICE, Links};
use std::collections::BTreeSet;
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Addresses `ip` shows on a link, without prefix lengths.
fn ip_addr_show(dev: &str) -> BTreeSet<IpAddr> {
    sh(&format!("ip -o addr show dev {dev}"))
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            w.find(|x| *x == "inet" || *x == "inet6")?;
            w.next()?.split('/').next()?.parse().ok()
        })
        .collect()
}

uml_test!(link_dummy_addresses_and_local_dump, {
    let mut l = RtnetlinkLinks::new().unwrap();
    assert!(matches!(
        l.addresses(DUMMY_DEVICE),
        Err(KernelError::NotFound(_))
    ));
    assert!(l.ensure_dummy(DUMMY_DEVICE).unwrap());
    assert!(!l.ensure_dummy(DUMMY_DEVICE).unwrap());
    let show = sh(&format!("ip -d link show {DUMMY_DEVICE}"));
    assert!(show.contains("dummy"), "{show}");
    assert!(show.contains("state DOWN"), "{show}");
    assert!(!show.contains("<BROADCAST,NOARP,UP"), "{show}");

    let v4 = ip("10.96.0.1");
    let v4b = ip("10.96.100.10");
    let v6 = ip("fd00:96::1");
    assert!(l.add_address(DUMMY_DEVICE, v4).unwrap());
    assert!(!l.add_address(DUMMY_DEVICE, v4).unwrap());
    assert!(l.add_address(DUMMY_DEVICE, v4b).unwrap());
    assert!(l.add_address(DUMMY_DEVICE, v6).unwrap());
    assert!(!l.add_address(DUMMY_DEVICE, v6).unwrap());
    let ours: BTreeSet<IpAddr> = l.addresses(DUMMY_DEVICE).unwrap().into_iter().collect();
    assert_eq!(ours, BTreeSet::from([v4, v4b, v6]));
    assert_eq!(ours, ip_addr_show(DUMMY_DEVICE));
    let prefixes = sh(&format!("ip -o addr show dev {DUMMY_DEVICE}"));
    assert!(prefixes.contains("10.96.0.1/32"), "{prefixes}");
    assert!(prefixes.contains("fd00:96::1/128"), "{prefixes}");

    // Local addresses: every link's, in one dump, with names.
    sh(
        "ip link add kprs-eth type dummy && ip addr add 192.168.50.2/24 dev kprs-eth && ip link set kprs-eth up",
    );
    let local = l.local_addresses().unwrap();
    let set: BTreeSet<(String, IpAddr)> = local.into_iter().collect();
    for want in [
        ("lo".to_string(), ip("127.0.0.1")),
        ("kprs-eth".to_string(), ip("192.168.50.2")),
        (DUMMY_DEVICE.to_string(), v4),
        (DUMMY_DEVICE.to_string(), v6),
    ] {
        assert!(set.contains(&want), "{want:?} missing from {set:?}");
    }
    let total_ip = sh("ip -o addr show | wc -l")
        .trim()
        .parse::<usize>()
        .unwrap();
    assert_eq!(set.len(), total_ip, "{set:?}");
    // Without kube-ipvs0 (the event-driven sync's read): the same minus kube-ipvs0's addresses, also
    // when the kernel filters per link.
    let except: BTreeSet<(String, IpAddr)> = l
        .local_addresses_except(DUMMY_DEVICE)
        .unwrap()
        .into_iter()
        .collect();
    let want: BTreeSet<(String, IpAddr)> = set
        .iter()
        .filter(|(n, _)| n != DUMMY_DEVICE)
        .cloned()
        .collect();
    assert_eq!(except, want);
    assert!(except.contains(&("kprs-eth".to_string(), ip("192.168.50.2"))));
    // The answer is cached between calls and refreshed by rtnetlink notifications: a change on another
    // link (made by another tool) is seen at once; our own kube-ipvs0 changes do not matter.
    let read = |l: &mut RtnetlinkLinks| -> BTreeSet<(String, IpAddr)> {
        l.local_addresses_except(DUMMY_DEVICE)
            .unwrap()
            .into_iter()
            .collect()
    };
    assert_eq!(read(&mut l), except);
    sh("ip addr add 192.168.50.3/24 dev kprs-eth");
    let added = read(&mut l);
    assert!(
        added.contains(&("kprs-eth".to_string(), ip("192.168.50.3"))),
        "{added:?}"
    );
    assert_eq!(added.len(), except.len() + 1);
    assert!(l.add_address(DUMMY_DEVICE, ip("10.96.7.7")).unwrap());
    assert_eq!(read(&mut l), added);
    sh("ip addr del 192.168.50.3/24 dev kprs-eth");
    assert_eq!(read(&mut l), except);
    assert!(l.del_address(DUMMY_DEVICE, ip("10.96.7.7")).unwrap());

    // Removal.
    assert!(l.del_address(DUMMY_DEVICE, v4).unwrap());
    assert!(!l.del_address(DUMMY_DEVICE, v4).unwrap());
    assert!(l.del_address(DUMMY_DEVICE, v6).unwrap());
    assert!(!l.del_address(DUMMY_DEVICE, v6).unwrap());
    assert_eq!(ip_addr_show(DUMMY_DEVICE), BTreeSet::from([v4b]));
    assert_eq!(l.addresses(DUMMY_DEVICE).unwrap(), vec![v4b]);
    assert!(matches!(
        l.add_address("nosuchdev", v4),
        Err(KernelError::NotFound(_))
    ));

    // Delete the link.
    assert!(l.delete_link(DUMMY_DEVICE).unwrap());
    assert!(!l.delete_link(DUMMY_DEVICE).unwrap());
    let links = sh("ip -o link show");
    assert!(!links.contains(DUMMY_DEVICE), "{links}");
    assert!(links.contains("kprs-eth"), "{links}");

    // Usable from inside a tokio runtime thread (no nested runtime).
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let n = rt.block_on(async { l.local_addresses().unwrap().len() });
    let now_ip = sh("ip -o addr show | wc -l")
        .trim()
        .parse::<usize>()
        .unwrap();
    assert_eq!(n, now_ip);
    assert!(n < total_ip);
});

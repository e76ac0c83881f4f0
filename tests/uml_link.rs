//! The rtnetlink link backend against a real kernel (UML): kube-ipvs0, its addresses, local addresses.
mod common {
    pub mod uml;
}

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

// 5,000 addresses (both families) bound and unbound with pipelined requests: one result per address,
// a refused address (multicast) fails alone and is named in its error, present/absent ones answer false.
uml_test!(link_addresses_pipelined, {
    let mut l = RtnetlinkLinks::new().unwrap();
    l.ensure_dummy(DUMMY_DEVICE).unwrap();
    let mut ips: Vec<IpAddr> = (0..5000u32)
        .map(|i| {
            if i % 5 == 4 {
                ip(&format!("fd00:96::{:x}", i + 1))
            } else {
                ip(&format!("10.96.{}.{}", i / 250, i % 250 + 1))
            }
        })
        .collect();
    let bad = ip("ff02::1234");
    ips.insert(2500, bad);
    assert!(l.add_address(DUMMY_DEVICE, ips[10]).unwrap());
    let started = std::time::Instant::now();
    let results = l.add_addresses(DUMMY_DEVICE, &ips);
    println!(
        "FIGURE pipelined add of {} addresses (UML, debug build): {:.1} ms",
        ips.len(),
        started.elapsed().as_secs_f64() * 1000.0
    );
    assert_eq!(results.len(), ips.len());
    for (i, r) in results.iter().enumerate() {
        match i {
            2500 => {
                let e = r.as_ref().expect_err("multicast address bound");
                assert!(e.to_string().contains("ff02::1234"), "{e}");
            }
            10 => assert!(matches!(r, Ok(false)), "{i}: {r:?}"),
            _ => assert!(matches!(r, Ok(true)), "{i}: {r:?}"),
        }
    }
    let want: BTreeSet<IpAddr> = ips.iter().copied().filter(|a| *a != bad).collect();
    assert_eq!(ip_addr_show(DUMMY_DEVICE), want);
    let read: BTreeSet<IpAddr> = l.addresses(DUMMY_DEVICE).unwrap().into_iter().collect();
    assert_eq!(read, want);

    // Unbind every other one plus one that is not bound.
    let all: Vec<IpAddr> = want.iter().copied().collect();
    let gone: Vec<IpAddr> = all.iter().step_by(2).copied().collect();
    let kept: Vec<IpAddr> = all.iter().skip(1).step_by(2).copied().collect();
    let mut dels = gone.clone();
    dels.push(ip("10.200.0.1"));
    let results = l.del_addresses(DUMMY_DEVICE, &dels);
    assert_eq!(results.len(), dels.len());
    assert!(results[..gone.len()].iter().all(|r| matches!(r, Ok(true))));
    assert!(matches!(results[gone.len()], Ok(false)));
    assert_eq!(
        ip_addr_show(DUMMY_DEVICE),
        kept.iter().copied().collect::<BTreeSet<_>>()
    );

    // A missing link: every address fails with NotFound, nothing is sent.
    let results = l.add_addresses("nosuchdev", &kept[..3]);
    assert_eq!(results.len(), 3);
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Err(KernelError::NotFound(_))))
    );
    assert!(
        l.del_addresses(DUMMY_DEVICE, &kept)
            .iter()
            .all(|r| matches!(r, Ok(true)))
    );
    assert!(ip_addr_show(DUMMY_DEVICE).is_empty());
    assert!(l.add_addresses(DUMMY_DEVICE, &[]).is_empty());
});

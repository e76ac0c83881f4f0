//! Sync cost at scale over the in-memory backends: prints figures, asserts only on write counts.
//! Run: `cargo test --release --test proxier_scale -- --nocapture`.

use kube_proxy_rs::cluster::model::{IpFamily, Protocol};
use kube_proxy_rs::kernel::ipset::{IpSetSpec, IpSetType};
use kube_proxy_rs::kernel::ipvs::{IpvsDestination, IpvsService, IpvsServiceKey};
use kube_proxy_rs::proxier::desired::{DesiredIpSet, DesiredState, DesiredVirtualServer};
use kube_proxy_rs::proxier::plan::PlanConfig;
use kube_proxy_rs::proxier::testkit::{Applier, Kit};
use kube_proxy_rs::proxier::{ConntrackHints, FamilyInput, SyncReport};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

const SERVICES: u32 = 10_000;
const ENDPOINTS: u32 = 3;

fn vip(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a60_0000 + i))
}

fn pod(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0af4_0000 + i))
}

fn plan(extra_endpoint_on: Option<u32>) -> DesiredState {
    let mut virtual_servers = BTreeMap::new();
    let mut cluster = BTreeSet::new();
    let mut ips = BTreeSet::new();
    for i in 0..SERVICES {
        let key = IpvsServiceKey {
            addr: vip(i),
            port: 80,
            protocol: Protocol::Tcp,
        };
        let n = ENDPOINTS + u32::from(extra_endpoint_on == Some(i));
        let destinations = (0..n)
            .map(|e| {
                let a = pod(i * 8 + e);
                ((a, 8080), IpvsDestination::masq(a, 8080, 1))
            })
            .collect();
        let service = IpvsService {
            key,
            scheduler: "rr".into(),
            flags: 0,
            timeout: 0,
            netmask: 0xffff_ffff,
        };
        virtual_servers.insert(
            key,
            std::sync::Arc::new(DesiredVirtualServer {
                service,
                destinations,
            }),
        );
        cluster.insert(format!("{},tcp:80", vip(i)));
        ips.insert(vip(i).to_string());
    }
    let set = |name: &str, set_type, entries| {
        (
            name.to_string(),
            DesiredIpSet::new(IpSetSpec::new(name, set_type, IpFamily::V4), entries),
        )
    };
    DesiredState {
        family: IpFamily::V4,
        decisions: Default::default(),
        shared: Default::default(),
        bound_addresses: virtual_servers.keys().map(|k| k.addr).collect(),
        arp_quiet: Default::default(),
        virtual_servers,
        ipsets: [
            set("KUBE-CLUSTER-IP", IpSetType::HashIpPort, cluster),
            set("KUBE-IPVS-IPS", IpSetType::HashIp, ips),
        ]
        .into(),
        iptables_payload: "*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n".into(),
        jumps: vec![],
        health_checks: vec![],
        no_local_endpoints: BTreeMap::new(),
    }
}

fn run(p: &mut Applier, d: &DesiredState, full: bool) -> SyncReport {
    let config = PlanConfig {
        scheduler: kube_proxy_rs::scheduler::Scheduler::Rr,
        ..PlanConfig::new(IpFamily::V4)
    };
    let start = Instant::now();
    let r = p.apply(
        &[FamilyInput {
            desired: d,
            delta: None,
            config: &config,
            node_port_ips: &[],
        }],
        full,
        &ConntrackHints::default(),
    );
    println!(
        "{:<40} {:>9.2} ms  writes {:>6}",
        if full {
            "full sync"
        } else {
            "event-driven sync"
        },
        start.elapsed().as_secs_f64() * 1e3,
        r.writes()
    );
    println!("    steps: {:?}", r.step_durations);
    assert_eq!(r.failure_count(), 0);
    r
}

#[test]
fn sync_cost_with_10k_services() {
    let k = Kit::new();
    let mut p = k.applier();
    let base = plan(None);
    let changed = plan(Some(SERVICES / 2));
    println!("{SERVICES} services x {ENDPOINTS} endpoints, in-memory backends");
    let r = run(&mut p, &base, true);
    assert_eq!(r.ipvs_services.added, SERVICES as usize);
    let r = run(&mut p, &base, false);
    assert_eq!(r.writes(), 0);
    let start = Instant::now();
    let _ = changed.clone();
    println!(
        "(clone of a plan: {:.2} ms)",
        start.elapsed().as_secs_f64() * 1e3
    );
    let r = run(&mut p, &changed, false);
    assert_eq!(r.ipvs_destinations.added, 1);
    assert_eq!(r.writes(), 1);
    let r = run(&mut p, &changed, true);
    assert_eq!(
        r.writes(),
        0,
        "periodic sync: the kernel already holds everything"
    );
}

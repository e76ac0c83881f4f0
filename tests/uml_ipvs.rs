//! The IPVS generic netlink client against a real kernel (UML): CRUD, errors, ipvsadm agreement, traffic.
mod common;

use common::netns::python_http_pod;
use common::uml::sh;
use kube_proxy_rs::cluster::model::Protocol;
use kube_proxy_rs::kernel::KernelError;
use kube_proxy_rs::kernel::ipvs::netlink::NetlinkIpvs;
use kube_proxy_rs::kernel::ipvs::{
    FLAG_HASHED, FLAG_PERSISTENT, Ipvs, IpvsDestination, IpvsOp, IpvsService, IpvsServiceKey,
    IpvsTimeouts,
};
use std::collections::BTreeSet;
use std::net::IpAddr;

fn key(addr: &str, port: u16, protocol: Protocol) -> IpvsServiceKey {
    IpvsServiceKey {
        addr: addr.parse().unwrap(),
        port,
        protocol,
    }
}

fn svc(k: IpvsServiceKey, sched: &str) -> IpvsService {
    IpvsService {
        key: k,
        scheduler: sched.into(),
        flags: 0,
        timeout: 0,
        netmask: if k.addr.is_ipv4() { 0xffff_ffff } else { 128 },
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// `ipvsadm -Sn` rendering of what our client reads back (the subset of options we use).
fn render(c: &mut NetlinkIpvs) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for s in c.services().unwrap() {
        let proto = match s.key.protocol {
            Protocol::Tcp => "-t",
            Protocol::Udp => "-u",
            Protocol::Sctp => "--sctp-service",
        };
        let vip = match s.key.addr {
            IpAddr::V4(a) => format!("{a}:{}", s.key.port),
            IpAddr::V6(a) => format!("[{a}]:{}", s.key.port),
        };
        let mut line = format!("-A {proto} {vip} -s {}", s.scheduler);
        if s.flags & FLAG_PERSISTENT != 0 {
            line.push_str(&format!(" -p {}", s.timeout));
        }
        out.insert(line);
        for d in c.destinations(&s.key).unwrap() {
            let rip = match d.addr {
                IpAddr::V4(a) => format!("{a}:{}", d.port),
                IpAddr::V6(a) => format!("[{a}]:{}", d.port),
            };
            out.insert(format!("-a {proto} {vip} -r {rip} -m -w {}", d.weight));
        }
    }
    out
}

fn ipvsadm_lines() -> BTreeSet<String> {
    sh("ipvsadm -Sn")
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

uml_test!(ipvs_crud_errors_and_ipvsadm_agree, {
    let mut c = NetlinkIpvs::new().expect("IPVS family");
    let proc_header = sh("head -1 /proc/net/ip_vs");
    let v = c.version().unwrap();
    assert!(
        proc_header.contains(&format!("version {v} ")),
        "{v} vs {proc_header}"
    );

    // A foreign service created by ipvsadm must be listed and left alone by deletes of ours.
    sh("ipvsadm -A -t 192.0.2.1:7 -s rr");

    let tcp4 = key("10.96.0.10", 80, Protocol::Tcp);
    let udp4 = key("10.96.0.10", 53, Protocol::Udp);
    let sctp4 = key("10.96.0.11", 9000, Protocol::Sctp);
    let tcp6 = key("fd00:96::10", 443, Protocol::Tcp);
    let udp6 = key("fd00:96::10", 53, Protocol::Udp);
    for (k, s) in [
        (tcp4, "rr"),
        (udp4, "wrr"),
        (sctp4, "sh"),
        (tcp6, "rr"),
        (udp6, "lc"),
    ] {
        c.add_service(&svc(k, s)).unwrap();
    }
    let dests = [
        (tcp4, "10.244.1.2", 8080),
        (tcp4, "10.244.2.2", 8080),
        (udp4, "10.244.1.3", 5353),
        (sctp4, "10.244.1.4", 9000),
        (tcp6, "fd00:244::2", 8443),
        (tcp6, "fd00:244::3", 8443),
        (udp6, "fd00:244::4", 5353),
    ];
    for (k, a, p) in dests {
        c.add_destination(&k, &IpvsDestination::masq(ip(a), p, 1))
            .unwrap();
    }

    // Read back: flags carry HASHED like the kernel reports them, netmask and family as set.
    let listed = c.services().unwrap();
    assert_eq!(listed.len(), 6, "{listed:?}");
    let got = listed.iter().find(|s| s.key == tcp6).unwrap();
    assert_eq!(got.netmask, 128);
    assert_eq!(got.flags & !FLAG_HASHED, 0);
    assert_eq!(c.destinations(&tcp4).unwrap().len(), 2);
    assert!(c.destinations(&tcp6).unwrap()[0].addr.is_ipv6());
    assert_eq!(render(&mut c), ipvsadm_lines());
    // One virtual server by its key (a GET, as the explanation reads a Service): the dump's entry, of
    // either family and any protocol, ours or foreign; none for an address:port the kernel lacks.
    for s in &listed {
        assert_eq!(
            c.service(&s.key).unwrap().as_ref(),
            Some(s),
            "GET {}",
            s.key
        );
    }
    assert_eq!(
        c.service(&key("10.96.0.10", 81, Protocol::Tcp)).unwrap(),
        None
    );
    assert_eq!(
        c.service(&key("fd00:96::10", 53, Protocol::Tcp)).unwrap(),
        None
    );

    // Updates: scheduler, persistence (flag + timeout), weight.
    let mut s = svc(tcp4, "wrr");
    s.flags = FLAG_PERSISTENT;
    s.timeout = 10800;
    c.update_service(&s).unwrap();
    let mut s6 = svc(tcp6, "sh");
    s6.flags = FLAG_PERSISTENT;
    s6.timeout = 300;
    c.update_service(&s6).unwrap();
    c.update_destination(&tcp4, &IpvsDestination::masq(ip("10.244.1.2"), 8080, 0))
        .unwrap();
    c.update_destination(&tcp6, &IpvsDestination::masq(ip("fd00:244::3"), 8443, 5))
        .unwrap();
    let back = c.services().unwrap();
    let b4 = back.iter().find(|x| x.key == tcp4).unwrap();
    assert_eq!(
        (b4.scheduler.as_str(), b4.flags & !FLAG_HASHED, b4.timeout),
        ("wrr", FLAG_PERSISTENT, 10800)
    );
    let lines = ipvsadm_lines();
    assert!(
        lines.contains("-A -t 10.96.0.10:80 -s wrr -p 10800"),
        "{lines:?}"
    );
    assert!(
        lines.contains("-a -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 0"),
        "{lines:?}"
    );
    assert!(
        lines.contains("-a -t [fd00:96::10]:443 -r [fd00:244::3]:8443 -m -w 5"),
        "{lines:?}"
    );
    assert_eq!(render(&mut c), lines);

    // Typed errors.
    assert!(matches!(
        c.add_service(&svc(tcp4, "rr")),
        Err(KernelError::Exists(_))
    ));
    match c.add_service(&svc(key("10.96.0.12", 80, Protocol::Tcp), "nosuch")) {
        Err(e @ KernelError::SchedulerNotFound { .. }) => {
            assert!(e.to_string().contains("\"nosuch\""), "{e}")
        }
        other => panic!("unknown scheduler: {other:?}"),
    }
    assert!(matches!(
        c.update_service(&svc(tcp4, "nosuch")),
        Err(KernelError::SchedulerNotFound { scheduler, .. }) if scheduler == "nosuch"
    ));
    let missing = key("10.96.9.9", 80, Protocol::Tcp);
    assert!(matches!(
        c.update_service(&svc(missing, "rr")),
        Err(KernelError::NotFound(_))
    ));
    assert!(matches!(
        c.delete_service(&missing),
        Err(KernelError::NotFound(_))
    ));
    let d = IpvsDestination::masq(ip("10.244.1.2"), 8080, 1);
    assert!(matches!(
        c.add_destination(&missing, &d),
        Err(KernelError::NotFound(_))
    ));
    assert!(matches!(
        c.add_destination(&tcp4, &d),
        Err(KernelError::Exists(_))
    ));
    let nod = IpvsDestination::masq(ip("10.244.9.9"), 1, 1);
    assert!(matches!(
        c.update_destination(&tcp4, &nod),
        Err(KernelError::NotFound(_))
    ));
    assert!(matches!(
        c.delete_destination(&tcp4, nod.addr, nod.port),
        Err(KernelError::NotFound(_))
    ));
    assert!(c.destinations(&missing).unwrap().is_empty());

    // Batched changes: results in order, a failure does not stop the rest.
    let extra = key("10.96.0.30", 80, Protocol::Tcp);
    let results = c
        .apply(&[
            IpvsOp::AddService(svc(extra, "rr")),
            IpvsOp::AddService(svc(extra, "rr")),
            IpvsOp::AddDestination(extra, IpvsDestination::masq(ip("10.244.3.3"), 80, 2)),
            IpvsOp::DeleteDestination(tcp4, ip("10.244.2.2"), 8080),
            IpvsOp::DeleteService(missing),
        ])
        .unwrap();
    assert!(results[0].is_ok(), "{results:?}");
    assert!(
        matches!(results[1], Err(KernelError::Exists(_))),
        "{results:?}"
    );
    assert!(results[2].is_ok() && results[3].is_ok(), "{results:?}");
    assert!(
        matches!(results[4], Err(KernelError::NotFound(_))),
        "{results:?}"
    );
    let lines = ipvsadm_lines();
    assert!(
        lines.contains("-a -t 10.96.0.30:80 -r 10.244.3.3:80 -m -w 2"),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|l| l.contains("10.244.2.2")), "{lines:?}");
    assert_eq!(render(&mut c), lines);

    // Timeouts.
    c.set_timeouts(IpvsTimeouts {
        tcp: 901,
        tcp_fin: 121,
        udp: 301,
    })
    .unwrap();
    let t = sh("ipvsadm -L --timeout");
    assert!(t.contains("901 121 301"), "{t}");
    c.set_timeouts(IpvsTimeouts {
        tcp: 0,
        tcp_fin: 0,
        udp: 299,
    })
    .unwrap();
    let t = sh("ipvsadm -L --timeout");
    assert!(t.contains("901 121 299"), "{t}");

    // Deletes: ours go, the foreign one stays; flush removes everything.
    for k in [tcp4, udp4, sctp4, tcp6, udp6, extra] {
        c.delete_service(&k).unwrap();
        assert_eq!(c.service(&k).unwrap(), None, "GET {k} after its delete");
    }
    let lines = ipvsadm_lines();
    assert_eq!(
        lines,
        BTreeSet::from(["-A -t 192.0.2.1:7 -s rr".to_string()])
    );
    c.flush().unwrap();
    assert!(ipvsadm_lines().is_empty());
    assert!(c.services().unwrap().is_empty());
});

uml_test!(ipvs_real_tcp_connection_and_counters, {
    let _pod = python_http_pod("pod1", "10.244.1.2", "10.244.1.1");
    sh("ip link add kube-ipvs0 type dummy && ip addr add 10.96.0.20/32 dev kube-ipvs0");
    let mut c = NetlinkIpvs::new().unwrap();
    let k = key("10.96.0.20", 80, Protocol::Tcp);
    c.add_service(&svc(k, "rr")).unwrap();
    c.add_destination(&k, &IpvsDestination::masq(ip("10.244.1.2"), 8080, 1))
        .unwrap();

    let body = sh("curl -s -m 5 -o /dev/null -w '%{http_code}' http://10.96.0.20:80/");
    assert_eq!(body.trim(), "200");
    // A held-open connection is active; the finished curl one is inactive (TIME_WAIT / FIN_WAIT).
    let held = std::net::TcpStream::connect("10.96.0.20:80").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let d = &c.destinations(&k).unwrap()[0];
    assert_eq!(d.active_conns, 1, "{d:?}");
    assert!(d.inactive_conns >= 1, "{d:?}");
    let listing = sh("ipvsadm -Ln");
    let row = listing
        .lines()
        .find(|l| l.contains("10.244.1.2:8080"))
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect::<Vec<_>>();
    // -> RemoteAddress:Port Forward Weight ActiveConn InActConn
    assert_eq!(row[4], d.active_conns.to_string(), "{listing}");
    assert_eq!(row[5], d.inactive_conns.to_string(), "{listing}");
    drop(held);
});

uml_test!(ipvs_proc_view_matches_netlink_dumps, {
    // The quick view (`/proc/net/ip_vs`) against per-virtual-server netlink dumps: every family and
    // protocol, persistence, forwarding methods and weights set by ipvsadm, fwmark services skipped, and
    // enough virtual servers that the text spans many pages (the kernel hands it out a page per read).
    let mut c = NetlinkIpvs::new().expect("IPVS family");
    let mut ops = Vec::new();
    for i in 0..400u32 {
        let k = key(
            &format!("10.97.{}.{}", i / 200, i % 200 + 1),
            80,
            Protocol::Tcp,
        );
        let mut s = svc(k, "rr");
        if i % 7 == 0 {
            s.flags = FLAG_PERSISTENT;
            s.timeout = 10800;
        }
        ops.push(IpvsOp::AddService(s));
        for j in 0..3 {
            let d = IpvsDestination::masq(ip(&format!("10.245.{}.{}", i % 250, j + 1)), 8080, j);
            ops.push(IpvsOp::AddDestination(k, d));
        }
    }
    for r in c.apply(&ops).unwrap() {
        r.unwrap();
    }
    let udp6 = key("fd00:97::1", 53, Protocol::Udp);
    let sctp4 = key("10.97.9.9", 9000, Protocol::Sctp);
    c.add_service(&svc(udp6, "lc")).unwrap();
    c.add_service(&svc(sctp4, "sh")).unwrap();
    c.add_destination(&udp6, &IpvsDestination::masq(ip("fd00:245::7"), 5353, 2))
        .unwrap();
    sh("ipvsadm -a --sctp-service 10.97.9.9:9000 -r 10.245.9.9:9000 -g -w 4 -x 100 -y 10");
    sh("ipvsadm -a --sctp-service 10.97.9.9:9000 -r 10.245.9.10:9000 -i -w 3");
    sh("ipvsadm -A -f 7 -s rr && ipvsadm -a -f 7 -r 10.245.9.11:0 -g -w 1");

    let view = c
        .destination_view()
        .unwrap()
        .expect("the netlink backend has the view");
    let services = c.services().unwrap();
    assert_eq!(
        view.len(),
        services.len(),
        "fwmark skipped, the rest listed"
    );
    for s in &services {
        let mut dumped = c.destinations(&s.key).unwrap();
        for d in &mut dumped {
            d.upper_threshold = 0;
            d.lower_threshold = 0;
        }
        dumped.sort_by_key(|d| (d.addr, d.port));
        let mut shown = view[&s.key].clone();
        shown.sort_by_key(|d| (d.addr, d.port));
        assert_eq!(shown, dumped, "{}", s.key);
    }
    assert_eq!(view[&sctp4].len(), 2);
    assert_eq!(view[&udp6][0].addr, ip("fd00:245::7"));
    // The view is read again from the start: a change shows up.
    c.delete_destination(&udp6, ip("fd00:245::7"), 5353)
        .unwrap();
    assert!(c.destination_view().unwrap().unwrap()[&udp6].is_empty());
    sh("ipvsadm -C");
});

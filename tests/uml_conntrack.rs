//! The ctnetlink conntrack backend against a real kernel (UML): a UDP flow through IPVS is dumped and deleted.
mod common {
    pub mod uml;
}

use common::uml::sh;
use kube_proxy_rs::cluster::model::{IpFamily, Protocol};
use kube_proxy_rs::kernel::conntrack::netlink::NetlinkConntrack;
use kube_proxy_rs::kernel::conntrack::{Conntrack, ConntrackFlow};
use kube_proxy_rs::kernel::ipvs::netlink::NetlinkIpvs;
use kube_proxy_rs::kernel::ipvs::{Ipvs, IpvsDestination, IpvsService, IpvsServiceKey};
use std::net::{IpAddr, UdpSocket};
use std::time::Duration;

const UDP_ECHO: &str = "import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('10.244.1.2', 5353))
while True:
    d, a = s.recvfrom(2048)
    s.sendto(d, a)
";

uml_test!(conntrack_udp_flow_through_ipvs_dumped_and_deleted, {
    let dir = common::uml::guest_run_dir().unwrap();
    std::fs::write(dir.join("echo.py"), UDP_ECHO).unwrap();
    sh(&format!(
        "sysctl -qw net.ipv4.vs.conntrack=1
         iptables -A OUTPUT -m conntrack --ctstate NEW,ESTABLISHED -j ACCEPT
         ip6tables -A OUTPUT -m conntrack --ctstate NEW,ESTABLISHED -j ACCEPT
         ip netns add pod1
         ip link add veth1 type veth peer name eth0 netns pod1
         ip addr add 10.244.1.1/24 dev veth1 && ip link set veth1 up
         ip netns exec pod1 ip addr add 10.244.1.2/24 dev eth0
         ip netns exec pod1 ip link set eth0 up
         ip netns exec pod1 ip link set lo up
         ip netns exec pod1 ip route add default via 10.244.1.1
         (ip netns exec pod1 /usr/bin/python3 {} >/tmp/echo.log 2>&1 &)
         ip link add kube-ipvs0 type dummy && ip addr add 10.96.0.30/32 dev kube-ipvs0",
        dir.join("echo.py").display()
    ));
    let mut ipvs = NetlinkIpvs::new().unwrap();
    let key = IpvsServiceKey {
        addr: "10.96.0.30".parse().unwrap(),
        port: 53,
        protocol: Protocol::Udp,
    };
    ipvs.add_service(&IpvsService {
        key,
        scheduler: "rr".into(),
        flags: 0,
        timeout: 0,
        netmask: 0xffff_ffff,
    })
    .unwrap();
    ipvs.add_destination(
        &key,
        &IpvsDestination::masq("10.244.1.2".parse().unwrap(), 5353, 1),
    )
    .unwrap();

    // Conntrack hooks are registered on demand: the conntrack-match rules above make the kernel track.
    // One UDP exchange through the virtual server, retried until the echo server is up.
    let client = UdpSocket::bind("0.0.0.0:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 64];
    let mut answered = false;
    for _ in 0..50 {
        client.send_to(b"ping", "10.96.0.30:53").unwrap();
        if let Ok((n, _)) = client.recv_from(&mut buf) {
            assert_eq!(&buf[..n], b"ping");
            answered = true;
            break;
        }
    }
    assert!(
        answered,
        "no UDP answer through IPVS: {}",
        sh("cat /tmp/echo.log; ipvsadm -Ln")
    );
    let sport = client.local_addr().unwrap().port();

    // A v6 flow (unanswered UDP on loopback) must only show in the v6 dump.
    let v6 = UdpSocket::bind("[::1]:0").unwrap();
    v6.send_to(b"x", "[::1]:9").unwrap();
    let v6_sport = v6.local_addr().unwrap().port();

    let mut ct = NetlinkConntrack::new().unwrap();
    let flows = ct.udp_flows(IpFamily::V4).unwrap();
    let ours: Vec<ConntrackFlow> = flows
        .iter()
        .copied()
        .filter(|f| f.orig_dport == 53 && f.orig_sport == sport)
        .collect();
    assert_eq!(
        ours.len(),
        1,
        "{flows:?}\n{}",
        sh("conntrack -L -p udp 2>&1")
    );
    let f = ours[0];
    assert_eq!(f.orig_dst, "10.96.0.30".parse::<IpAddr>().unwrap());
    assert_eq!(f.reply_src, "10.244.1.2".parse::<IpAddr>().unwrap());
    assert_eq!(f.reply_sport, 5353);
    assert!(flows.iter().all(|f| f.orig_src.is_ipv4()));
    let cli = sh("conntrack -L -p udp --orig-port-dst 53 2>/dev/null");
    assert!(cli.contains(&format!("sport={sport} dport=53")), "{cli}");

    let flows6 = ct.udp_flows(IpFamily::V6).unwrap();
    assert!(
        flows6
            .iter()
            .any(|f| f.orig_sport == v6_sport && f.orig_dport == 9 && f.orig_dst.is_ipv6()),
        "{flows6:?}"
    );

    // Delete by the original tuple: gone from the kernel, a second delete reports false.
    assert!(ct.delete(&f).unwrap());
    assert!(!ct.delete(&f).unwrap());
    let cli = sh("conntrack -L -p udp --orig-port-dst 53 2>/dev/null");
    assert!(!cli.contains(&format!("sport={sport} dport=53")), "{cli}");
    assert!(
        !ct.udp_flows(IpFamily::V4)
            .unwrap()
            .iter()
            .any(|x| x.orig_sport == sport && x.orig_dport == 53)
    );
    // The v6 flow was not touched.
    assert!(
        ct.udp_flows(IpFamily::V6)
            .unwrap()
            .iter()
            .any(|f| f.orig_sport == v6_sport)
    );
});

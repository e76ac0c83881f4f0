//! Kernel I/O benchmark in one UML boot: (a) ipset read-back of 10k services' worth of set entries,
//! `ipset save` + parse (the CLI backend) versus one netlink dump (the netlink backend), and the writes
//! of the same entries both ways; (b) binding kube-ipvs0 addresses one request per round trip versus
//! pipelined, and unbinding them both ways. Run with `cargo bench --bench kernel_io` (prints a table).
//!
//! `KERNEL_IO_SERVICES` (default 10,000) and `KERNEL_IO_ADDRESSES` (default 50,000) override the sizes.

#[path = "../tests/common/uml.rs"]
mod uml;

use kube_proxy_rs::cluster::model::IpFamily;
use kube_proxy_rs::kernel::ipset::cli::IpsetCli;
use kube_proxy_rs::kernel::ipset::netlink::NetlinkIpSets;
use kube_proxy_rs::kernel::ipset::{IpSetOp, IpSetSpec, IpSetType, IpSets};
use kube_proxy_rs::kernel::link::rtnetlink::RtnetlinkLinks;
use kube_proxy_rs::kernel::link::{DUMMY_DEVICE, Links};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn result_file() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kernel_io-result.txt")
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn spec(name: &str, set_type: IpSetType) -> IpSetSpec {
    IpSetSpec::new(name, set_type, IpFamily::V4)
}

/// Sets and entries of `n` services: a ClusterIP each (KUBE-CLUSTER-IP, KUBE-IPVS-IPS), one local
/// endpoint each (KUBE-LOOP-BACK), a NodePort for one in five (KUBE-NODE-PORT-TCP).
fn workload(n: usize) -> (Vec<IpSetSpec>, Vec<IpSetOp>) {
    let specs = vec![
        spec("KUBE-CLUSTER-IP", IpSetType::HashIpPort),
        spec("KUBE-IPVS-IPS", IpSetType::HashIp),
        spec("KUBE-LOOP-BACK", IpSetType::HashIpPortIp),
        spec("KUBE-NODE-PORT-TCP", IpSetType::BitmapPort),
    ];
    let add = |set: &str, entry: String| IpSetOp::Add {
        set: set.into(),
        entry,
    };
    let mut ops = Vec::new();
    for i in 0..n {
        let (hi, lo) = (i / 250, i % 250 + 1);
        ops.push(add("KUBE-CLUSTER-IP", format!("10.96.{hi}.{lo},tcp:80")));
        ops.push(add("KUBE-IPVS-IPS", format!("10.96.{hi}.{lo}")));
        let ep = format!("10.244.{hi}.{lo}");
        ops.push(add("KUBE-LOOP-BACK", format!("{ep},tcp:8080,{ep}")));
        if i % 5 == 0 {
            ops.push(add("KUBE-NODE-PORT-TCP", format!("{}", 30000 + i / 5)));
        }
    }
    (specs, ops)
}

/// Records one figure and prints it at once (the guest's output shows progress).
fn row(rows: &mut Vec<(String, Duration)>, name: String, d: Duration) {
    println!("{name}: {:.3} s", d.as_secs_f64());
    rows.push((name, d));
}

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        let v = f();
        best = best.min(t.elapsed());
        last = Some(v);
    }
    (best, last.expect("at least one run"))
}

fn ipset_rows(n: usize, rows: &mut Vec<(String, Duration)>) {
    let (specs, ops) = workload(n);
    let mut nl = NetlinkIpSets::new().unwrap();
    let mut cli = IpsetCli::new();
    for (name, backend) in [
        ("netlink", &mut nl as &mut dyn IpSets),
        ("ipset restore", &mut cli as &mut dyn IpSets),
    ] {
        backend.create_all(&specs).unwrap();
        let t = Instant::now();
        let r = backend.apply(&ops).unwrap();
        row(
            rows,
            format!("ipset write {} entries, {name}", ops.len()),
            t.elapsed(),
        );
        assert_eq!(r.applied, ops.len(), "{:?}", r.rejected.first());
        if name == "netlink" {
            for s in &specs {
                backend.destroy(&s.name).unwrap();
            }
        }
    }
    let (t_cli, by_cli) = best_of(3, || cli.save_all().unwrap());
    let (t_nl, by_nl) = best_of(3, || nl.save_all().unwrap());
    assert_eq!(by_cli, by_nl, "read-backs differ");
    let total: usize = by_nl.values().map(|m| m.len()).sum();
    assert_eq!(total, ops.len());
    row(
        rows,
        format!("ipset read-back {total} entries, ipset save + parse (best of 3)"),
        t_cli,
    );
    row(
        rows,
        format!("ipset read-back {total} entries, netlink dump (best of 3)"),
        t_nl,
    );
    for s in &specs {
        nl.destroy(&s.name).unwrap();
    }
}

fn addresses(n: usize) -> Vec<IpAddr> {
    (0..n)
        .map(|i| {
            IpAddr::V4(Ipv4Addr::new(
                10,
                96 + (i >> 16) as u8,
                (i >> 8) as u8,
                i as u8,
            ))
        })
        .collect()
}

fn address_rows(n: usize, rows: &mut Vec<(String, Duration)>) {
    let ips = addresses(n);
    let mut l = RtnetlinkLinks::new().unwrap();
    l.ensure_dummy(DUMMY_DEVICE).unwrap();
    let t = Instant::now();
    for ip in &ips {
        assert!(l.add_address(DUMMY_DEVICE, *ip).unwrap());
    }
    row(
        rows,
        format!("bind {n} addresses, one per round trip"),
        t.elapsed(),
    );
    assert_eq!(l.addresses(DUMMY_DEVICE).unwrap().len(), n);
    let t = Instant::now();
    for ip in &ips {
        assert!(l.del_address(DUMMY_DEVICE, *ip).unwrap());
    }
    row(
        rows,
        format!("unbind {n} addresses, one per round trip"),
        t.elapsed(),
    );
    let t = Instant::now();
    let r = l.add_addresses(DUMMY_DEVICE, &ips);
    row(rows, format!("bind {n} addresses, pipelined"), t.elapsed());
    assert!(r.iter().all(|r| matches!(r, Ok(true))));
    assert_eq!(l.addresses(DUMMY_DEVICE).unwrap().len(), n);
    let t = Instant::now();
    let r = l.del_addresses(DUMMY_DEVICE, &ips);
    row(
        rows,
        format!("unbind {n} addresses, pipelined"),
        t.elapsed(),
    );
    assert!(r.iter().all(|r| matches!(r, Ok(true))));
    assert!(l.addresses(DUMMY_DEVICE).unwrap().is_empty());
}

fn guest_body() {
    let services = env_or("KERNEL_IO_SERVICES", 10_000);
    let n_addr = env_or("KERNEL_IO_ADDRESSES", 50_000);
    let mut rows = Vec::new();
    ipset_rows(services, &mut rows);
    address_rows(n_addr, &mut rows);
    let mut table = format!(
        "kernel I/O: {services} services' ipset entries, {n_addr} kube-ipvs0 addresses, UML {}\n",
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
    );
    let _ = writeln!(table, "{:<72} {:>10}", "step", "seconds");
    for (name, d) in &rows {
        let _ = writeln!(table, "{name:<72} {:>10.3}", d.as_secs_f64());
    }
    print!("{table}");
    std::fs::write(result_file(), table).unwrap();
}

fn main() {
    uml::bench_main(
        "kernel_io",
        "1024M",
        Duration::from_secs(1800),
        &result_file(),
        guest_body,
    );
}

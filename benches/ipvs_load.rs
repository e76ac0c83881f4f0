//! IPVS load benchmark in one UML boot: 10,000 virtual servers with 2 real servers each, created through our
//! netlink client (one request at a time, and batched) versus `ipvsadm -R`, flushing in between; also the
//! time to read everything back. Run with `cargo bench --bench ipvs_load` (prints a table).
//!
//! `IPVS_LOAD_SERVICES` overrides the number of services.

#[path = "../tests/common/uml.rs"]
mod uml;

use kube_proxy_rs::cluster::model::Protocol;
use kube_proxy_rs::kernel::ipvs::netlink::NetlinkIpvs;
use kube_proxy_rs::kernel::ipvs::{Ipvs, IpvsDestination, IpvsOp, IpvsService, IpvsServiceKey};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn result_file() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ipvs_load-result.txt")
}

fn services(n: usize) -> Vec<(IpvsService, [IpvsDestination; 2])> {
    (0..n)
        .map(|i| {
            let (hi, lo) = ((i / 250) as u8, (i % 250 + 1) as u8);
            let key = IpvsServiceKey {
                addr: IpAddr::V4(Ipv4Addr::new(10, 96, hi, lo)),
                port: 80,
                protocol: Protocol::Tcp,
            };
            let svc = IpvsService {
                key,
                scheduler: "rr".into(),
                flags: 0,
                timeout: 0,
                netmask: 0xffff_ffff,
            };
            let d1 = IpvsDestination::masq(IpAddr::V4(Ipv4Addr::new(10, 244, hi, lo)), 8080, 1);
            let d2 = IpvsDestination::masq(IpAddr::V4(Ipv4Addr::new(10, 245, hi, lo)), 8080, 1);
            (svc, [d1, d2])
        })
        .collect()
}

fn ipvsadm_rules(set: &[(IpvsService, [IpvsDestination; 2])]) -> String {
    let mut s = String::new();
    for (svc, dests) in set {
        let _ = writeln!(s, "-A -t {}:{} -s rr", svc.key.addr, svc.key.port);
        for d in dests {
            let _ = writeln!(
                s,
                "-a -t {}:{} -r {}:{} -m -w 1",
                svc.key.addr, svc.key.port, d.addr, d.port
            );
        }
    }
    s
}

fn ipvsadm_count(ns: &str) -> usize {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ipvsadm", "-Sn"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

fn check_loaded(c: &mut NetlinkIpvs, ns: &str, n: usize) {
    assert_eq!(c.services().unwrap().len(), n);
    assert_eq!(ipvsadm_count(ns), 3 * n);
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Runs `f` on a thread inside a fresh network namespace `ns`. Each method gets its own namespace, hence
/// its own pristine IPVS table: flushed real servers otherwise linger in the kernel's destination trash
/// (for minutes) and every later add searches that list, which would penalise whichever method runs later.
fn in_new_netns<R: Send>(ns: &str, f: impl FnOnce() -> R + Send) -> R {
    // lo up creates the namespace's local routing table, which IPVS consults to validate real servers.
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!("ip netns add {ns} && ip -n {ns} link set lo up"))
        .status()
        .unwrap();
    assert!(st.success());
    let path = format!("/run/netns/{ns}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = std::fs::File::open(&path).unwrap();
            use std::os::fd::AsRawFd;
            // SAFETY: setns on an open namespace file descriptor; affects only this thread.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}");
            f()
        })
        .join()
        .unwrap()
    })
}

fn load_one_by_one(c: &mut NetlinkIpvs, set: &[(IpvsService, [IpvsDestination; 2])]) -> Duration {
    let t = Instant::now();
    for (svc, dests) in set {
        c.add_service(svc).unwrap();
        for d in dests {
            c.add_destination(&svc.key, d).unwrap();
        }
    }
    t.elapsed()
}

fn guest_body() {
    let n: usize = std::env::var("IPVS_LOAD_SERVICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let set = services(n);
    let mut rows: Vec<(String, Duration)> = Vec::new();

    // 1. Our client, one request per round trip (the trait's plain methods), then read back and flush.
    in_new_netns("b-single", || {
        let mut c = NetlinkIpvs::new().unwrap();
        rows.push((
            "netlink client, one request per ACK".into(),
            load_one_by_one(&mut c, &set),
        ));
        check_loaded(&mut c, "b-single", n);
        // Read back everything (what a sync does): one service dump + one destination dump per service.
        let t = Instant::now();
        let listed = c.services().unwrap();
        let mut dests = 0;
        for s in &listed {
            dests += c.destinations(&s.key).unwrap().len();
        }
        assert_eq!(dests, 2 * n);
        rows.push(("netlink client, read back all (dumps)".into(), t.elapsed()));
        let t = Instant::now();
        assert_eq!(ipvsadm_count("b-single"), 3 * n);
        rows.push(("ipvsadm -Sn (read back all)".into(), t.elapsed()));
        let t = Instant::now();
        c.flush().unwrap();
        rows.push(("netlink client, flush".into(), t.elapsed()));
        // Reload right after the flush: the destination trash is now full.
        rows.push((
            "netlink client, one request per ACK, reload after flush (dest trash)".into(),
            load_one_by_one(&mut c, &set),
        ));
        check_loaded(&mut c, "b-single", n);
    });

    // 2. Our client through apply(): batch=1 is one request per datagram; best of two runs each.
    let ops: Vec<IpvsOp> = set
        .iter()
        .flat_map(|(svc, dests)| {
            std::iter::once(IpvsOp::AddService(svc.clone())).chain(
                dests
                    .iter()
                    .map(|d| IpvsOp::AddDestination(svc.key, d.clone())),
            )
        })
        .collect();
    for batch in [1usize, 16, 64, 256] {
        let mut best = Duration::MAX;
        let mut effective = batch;
        for round in 0..2 {
            let ns = format!("b-batch{batch}-{round}");
            let elapsed = in_new_netns(&ns, || {
                let mut c = NetlinkIpvs::new().unwrap();
                c.set_batch(batch);
                effective = c.effective_batch();
                let t = Instant::now();
                let results = c.apply(&ops).unwrap();
                let elapsed = t.elapsed();
                assert!(results.iter().all(|r| r.is_ok()));
                check_loaded(&mut c, &ns, n);
                elapsed
            });
            best = best.min(elapsed);
        }
        rows.push((
            format!("netlink client, apply() batch={effective} (best of 2)"),
            best,
        ));
    }

    // 3. ipvsadm -R with the same rules.
    let rules = ipvsadm_rules(&set);
    let dir = uml::guest_run_dir().unwrap();
    let file = dir.join("rules.txt");
    std::fs::write(&file, &rules).unwrap();
    in_new_netns("b-ipvsadm", || {
        let t = Instant::now();
        let st = Command::new("sh")
            .arg("-c")
            .arg(format!("ipvsadm -R < {}", file.display()))
            .status()
            .unwrap();
        let elapsed = t.elapsed();
        assert!(st.success());
        rows.push(("ipvsadm -R".into(), elapsed));
        let mut c = NetlinkIpvs::new().unwrap();
        check_loaded(&mut c, "b-ipvsadm", n);
    });

    let mut table = format!(
        "IPVS load: {n} services x 2 destinations ({} requests), UML {}\n",
        3 * n,
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
    );
    let _ = writeln!(
        table,
        "{:<50} {:>10} {:>12}",
        "method", "seconds", "requests/s"
    );
    for (name, d) in &rows {
        let rate = if name.ends_with(", flush")
            || name.starts_with("ipvsadm -C")
            || name.contains("read back")
        {
            "-".to_string()
        } else {
            format!("{:.0}", (3 * n) as f64 / secs(*d))
        };
        let _ = writeln!(table, "{name:<50} {:>10.3} {rate:>12}", secs(*d));
    }
    print!("{table}");
    std::fs::write(result_file(), table).unwrap();
}

fn main() {
    uml::bench_main(
        "ipvs_load",
        "1024M",
        Duration::from_secs(900),
        &result_file(),
        guest_body,
    );
}

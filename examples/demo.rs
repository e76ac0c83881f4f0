//! Demo: the real `kube-proxy` balancing traffic in a real Linux kernel with IPVS.
//!
//! Boots a User-Mode Linux kernel; inside it starts a small Kubernetes API server loaded with
//! `config/demo-cluster.yaml` (Node demo-node 10.0.0.10; Services web, web-np, dns-udp; pods
//! 10.244.0.11-13, and a fourth web endpoint not ready yet), creates the three pods as network namespaces
//! that answer with their names over TCP and UDP, runs `kube-proxy`, prints `ipvsadm -Ln`, then sends
//! requests to the ClusterIPs and the NodePort and shows which pod answered each one, and finally asks
//! `kube-proxy explain default/web` why the fourth one got nothing. Ends with PASS or FAIL (exit status 0
//! or 1).
//!
//! Run with `scripts/demo.sh` (installs the packages, builds the binary and this example, runs it).

#[path = "../tests/common/mod.rs"]
mod common;

use common::e2e::{self, E2e, Options};
use common::uml;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const CLUSTER_YAML: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/demo-cluster.yaml");
const PODS: [(&str, &str); 3] = [
    ("pod-a", "10.244.0.11"),
    ("pod-b", "10.244.0.12"),
    ("pod-c", "10.244.0.13"),
];

fn main() {
    if uml::in_guest() {
        // Re-executed inside the guest by the harness: the demo itself. A panic exits non-zero, which
        // the host reports as FAIL.
        guest();
        return;
    }
    std::process::exit(host());
}

/// Host side: boot the guest, stream its output, print the verdict.
fn host() -> i32 {
    println!("kube-proxy-rs demo: booting a User-Mode Linux kernel (IPVS, ipset, iptables) ...");
    if !Path::new(uml::KERNEL).exists() {
        println!(
            "FAIL: {} not found; install the user-mode-linux package (scripts/demo.sh does)",
            uml::KERNEL
        );
        return 1;
    }
    let bin = e2e::kube_proxy_bin();
    if !bin.exists() {
        println!(
            "FAIL: {} not found; build it first (cargo build --bin kube-proxy)",
            bin.display()
        );
        return 1;
    }
    let done = Arc::new(AtomicBool::new(false));
    let streamer = {
        let done = done.clone();
        std::thread::spawn(move || stream_guest_output(&done))
    };
    let started = Instant::now();
    // The harness panics (with the guest output, already streamed) when the guest fails.
    std::panic::set_hook(Box::new(|_| {}));
    let outcome = std::panic::catch_unwind(|| {
        uml::run(
            "demo",
            uml::BootOptions {
                mem: "512M",
                timeout: Duration::from_secs(180),
            },
            || {},
        )
    });
    let _ = std::panic::take_hook();
    done.store(true, Ordering::Relaxed);
    let _ = streamer.join();
    let secs = started.elapsed().as_secs_f64();
    match outcome {
        Ok(()) => {
            println!(
                "\nPASS: kube-proxy programmed IPVS and balanced every Service across its pods ({secs:.1} s in all)"
            );
            0
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let first = msg.lines().next().unwrap_or("the guest failed");
            println!("\nFAIL: {first} ({secs:.1} s)");
            if let Some(i) = msg.find("--- console (tail) ---") {
                println!("{}", e2e::tail(&msg[i..], 25));
            }
            1
        }
    }
}

/// Prints the guest's output file (`uml-runs/demo-<pid>-*/guest-output.log`) as it grows.
fn stream_guest_output(done: &AtomicBool) {
    let boot = format!("demo-{}", std::process::id());
    let mut file: Option<PathBuf> = None;
    let mut printed = 0usize;
    loop {
        let finished = done.load(Ordering::Relaxed);
        if file.is_none() {
            file = common::uml::find_run_dir(&boot).map(|d| d.join("guest-output.log"));
        }
        if let Some(f) = &file
            && let Ok(bytes) = std::fs::read(f)
            && bytes.len() > printed
        {
            // Print whole lines only, except at the end.
            let end = if finished {
                bytes.len()
            } else {
                bytes[printed..]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(printed, |i| printed + i + 1)
            };
            let text = String::from_utf8_lossy(&bytes[printed..end]);
            print!("{text}");
            let _ = std::io::stdout().flush();
            printed = end;
        }
        if finished {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `kube-proxy explain default/web`, as through `kubectl exec`: pod-d (not ready) is left out, and why.
fn explain(e: &E2e, failures: &mut Vec<String>) {
    println!(
        "  web lists a fourth pod, pod-d 10.244.0.14, that is not ready yet: it got none of the requests above."
    );
    println!(
        "  kube-proxy says why (kubectl -n kube-system exec <kube-proxy pod> -- kube-proxy explain default/web):"
    );
    println!(
        "\n$ kube-proxy explain default/web --config {}",
        e.config_path.display()
    );
    let out = std::process::Command::new(&e.bin)
        .args(["explain", "default/web"])
        .arg(format!("--config={}", e.config_path.display()))
        .output();
    let text = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => format!("ERROR {}", String::from_utf8_lossy(&o.stderr)),
        Err(err) => format!("ERROR running kube-proxy explain: {err}"),
    };
    print!("{text}");
    let left_out = text
        .lines()
        .any(|l| l.contains("10.244.0.14:8080") && l.contains("left out: not ready"));
    if !left_out {
        failures.push(
            "kube-proxy explain default/web does not show pod-d left out as not ready".into(),
        );
    }
}

/// Guest side: the demo itself.
fn guest() {
    let t0 = Instant::now();
    println!("\n== 1. Node and pods ==");
    let _pods = e2e::pods(&PODS);
    for (name, ip) in PODS {
        println!("  pod {name:<6} {ip:<12} answers its name on TCP 8080 and UDP 5353");
    }
    let client = e2e::client("client", "192.168.10.2", "192.168.10.1");
    println!("  node demo-node 10.0.0.10 (dummy link node0); an outside client at 192.168.10.2");

    println!("\n== 2. Kubernetes API server ==");
    let mut e = E2e::start(Options {
        node: "demo-node".to_string(),
        node_ip: "10.0.0.10".to_string(),
        ..Options::default()
    });
    let yaml = std::fs::read_to_string(CLUSTER_YAML).expect("read config/demo-cluster.yaml");
    let loaded = e.api.load_yaml(&yaml).expect("load demo cluster");
    println!(
        "  test API server at {} loaded with config/demo-cluster.yaml:",
        e.api.url()
    );
    for (kind, ns, name) in &loaded {
        let key = if ns.is_empty() {
            name.clone()
        } else {
            format!("{ns}/{name}")
        };
        println!("    {:<14} {key}", kind.kind());
    }

    println!("\n== 3. kube-proxy ==");
    let spawned = Instant::now();
    e.start_daemon();
    e.wait_ipvs("the demo Services programmed", |t| {
        e2e::real_servers(t, "-t", "10.96.100.10:80").len() == 3
            && e2e::real_servers(t, "-t", "10.0.0.10:30080").len() == 3
            && e2e::real_servers(t, "-u", "10.96.100.53:53").len() == 3
    });
    println!(
        "  kube-proxy --config {} : first sync done, IPVS programmed {:.1} s after start",
        e.config_path.display(),
        spawned.elapsed().as_secs_f64()
    );
    println!(
        "  (a full sync is slow under User-Mode Linux: every iptables/ipset call starts a process, ~0.2 s each here)"
    );
    println!("\n$ ipvsadm -Ln");
    print!("{}", uml::sh("ipvsadm -Ln"));
    println!("\n$ ip -brief addr show kube-ipvs0");
    print!("{}", uml::sh("ip -brief addr show kube-ipvs0"));

    println!("\n== 4. Traffic ==");
    let mut failures = Vec::new();
    let mut check = |title: &str, answers: Vec<Result<String, String>>| {
        println!("  {title}");
        let mut per_pod: BTreeMap<String, usize> = BTreeMap::new();
        for (i, a) in answers.iter().enumerate() {
            match a {
                Ok(name) => {
                    println!("    request {:>2} -> {name}", i + 1);
                    *per_pod.entry(name.clone()).or_default() += 1;
                }
                Err(err) => println!("    request {:>2} -> ERROR {err}", i + 1),
            }
        }
        let ok = answers.iter().filter(|a| a.is_ok()).count();
        let summary: Vec<String> = per_pod.iter().map(|(p, n)| format!("{p}: {n}")).collect();
        println!(
            "    => {ok}/{} answered; {}",
            answers.len(),
            summary.join(", ")
        );
        let all_pods = PODS.iter().all(|(p, _)| per_pod.contains_key(*p));
        if ok != answers.len() || !all_pods {
            failures.push(format!(
                "{title}: {ok}/{} answered, pods {:?}",
                answers.len(),
                per_pod.keys().collect::<Vec<_>>()
            ));
        }
    };
    let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
    let http = |addr: &str| -> Result<String, String> {
        let r = e2e::http_get(addr.parse().expect("addr"), "/").ok_or("no HTTP response")?;
        if r.status == 200 {
            Ok(r.body.trim().to_string())
        } else {
            Err(format!("HTTP {}", r.status))
        }
    };
    check(
        "HTTP GET http://10.96.100.10:80/  (Service web, ClusterIP, from the node)",
        (0..9).map(|_| http("10.96.100.10:80")).collect(),
    );
    check(
        "TCP 10.0.0.10:30080  (Service web-np, NodePort, from the outside client)",
        (0..9)
            .map(|_| {
                client
                    .tcp_request(ip("10.0.0.10"), 30080, Duration::from_secs(2))
                    .map_err(|e| format!("{e:#}"))
            })
            .collect(),
    );
    check(
        "UDP 10.96.100.53:53  (Service dns-udp, ClusterIP, from the node)",
        (0..6)
            .map(|_| {
                common::netns::udp_request(ip("10.96.100.53"), 53, Duration::from_secs(2))
                    .map_err(|e| format!("{e:#}"))
            })
            .collect(),
    );

    println!("\n== 5. Why does web go where it goes? ==");
    explain(&e, &mut failures);

    println!("\n== 6. Shutdown ==");
    let status = e.stop_daemon();
    println!(
        "  kube-proxy stopped on SIGTERM: {status} (IPVS rules are left in place, as upstream)"
    );
    println!(
        "  kube-proxy log: {}",
        e.dir.join("kube-proxy-1.log").display()
    );
    if !status.success() {
        failures.push(format!("kube-proxy exit status {status}"));
    }
    println!(
        "  demo took {:.1} s inside the guest",
        t0.elapsed().as_secs_f64()
    );
    if !failures.is_empty() {
        println!("\nkube-proxy log (tail):\n{}", e2e::tail(&e.log(), 20));
        panic!("demo checks failed: {failures:?}");
    }
}

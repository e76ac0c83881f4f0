//! The HTTP servers under abuse: hundreds of idle and byte-a-second connections and oversized requests
//! against the healthz, metrics and service health-check servers at once. Probes keep being answered
//! (checked with a generous deadline: a functional check, not a timing one), and the server closes every
//! abusive connection within a bounded time. Latencies and the process RSS are printed, not asserted.

use kube_proxy_rs::cluster::model::ServiceName;
use kube_proxy_rs::metrics::Metrics;
use kube_proxy_rs::server::http::Limits;
use kube_proxy_rs::server::{
    MetricsServerState, ProxyHealth, ServiceHealthServer, SystemClock, start_healthz_server,
    start_metrics_server,
};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

/// Deadline of one probe: far above what a healthy server needs, so only a server that stopped
/// answering fails it.
const PROBE_DEADLINE: Duration = Duration::from_secs(10);
/// Slack on top of the server's own bounds before an open abusive connection counts as a failure.
const CLOSE_MARGIN: Duration = Duration::from_secs(10);

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Raises the soft descriptor limit to the hard one (both ends of every connection live in this process).
fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid, initialised rlimit struct.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    if got == 0 {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit with a valid, initialised rlimit struct.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
        // SAFETY: as above; reads back what the kernel granted.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    }
    lim.rlim_cur
}

/// `GET path` on a fresh connection: the status code and how long the answer took.
async fn probe(addr: SocketAddr, path: &str) -> Result<(u16, Duration), String> {
    let start = Instant::now();
    let exchange = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&raw);
        text.split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("no status line in {text:?}"))
    };
    match tokio::time::timeout(PROBE_DEADLINE, exchange).await {
        Ok(Ok(code)) => Ok((code, start.elapsed())),
        Ok(Err(e)) => Err(format!("probe {addr}{path}: {e}")),
        Err(_) => Err(format!(
            "probe {addr}{path}: no answer within {PROBE_DEADLINE:?}"
        )),
    }
}

/// What an abusive client does.
#[derive(Debug, Clone, Copy)]
enum Abuse {
    /// Connects and sends nothing.
    Idle,
    /// Sends a request head one byte per second, never finishing it.
    Slowloris,
    /// Sends a 1 MiB request head.
    Oversized,
    /// Sends one request, reads the answer, then keeps the connection open without a second request.
    KeepAliveIdle,
    /// Sends a request head announcing a 1 MB body, then the body one byte per second.
    SlowBody,
}

/// Runs one abusive client until the server closes its connection; returns how long that took, or an
/// error if the server left it open past `bound`.
async fn abuse(addr: SocketAddr, kind: Abuse, bound: Duration) -> Result<Duration, String> {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("{kind:?} connect: {e}"))?;
    let run = async {
        match kind {
            Abuse::Idle => {}
            Abuse::Slowloris => {
                let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nX-Slow: ").await;
            }
            Abuse::Oversized => {
                let mut head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n".to_vec();
                for i in 0..256 {
                    head.extend(format!("X-Pad-{i}: {}\r\n", "a".repeat(4096)).bytes());
                }
                // The server stops reading early; a failed write is the expected outcome.
                let _ = s.write_all(&head).await;
            }
            Abuse::KeepAliveIdle => {
                let _ = s
                    .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    .await;
            }
            Abuse::SlowBody => {
                let head = "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n";
                let _ = s.write_all(head.as_bytes()).await;
            }
        }
        let mut buf = [0u8; 4096];
        loop {
            tokio::select! {
                r = s.read(&mut buf) => match r {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                },
                _ = tokio::time::sleep(Duration::from_secs(1)), if matches!(kind, Abuse::Slowloris | Abuse::SlowBody) => {
                    if s.write_all(b"a").await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    match tokio::time::timeout(bound, run).await {
        Ok(()) => Ok(start.elapsed()),
        Err(_) => Err(format!(
            "{kind:?} connection to {addr} still open after {bound:?}"
        )),
    }
}

/// The three servers, running on their own runtime and threads (as in the daemon, where the abusive
/// clients are other processes), until dropped.
struct Servers {
    targets: Vec<(&'static str, SocketAddr, &'static str)>,
    _stop: std::sync::mpsc::Sender<()>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

async fn serve_all() -> Vec<(&'static str, SocketAddr, &'static str)> {
    let metrics = Arc::new(Metrics::new().unwrap());
    let health = Arc::new(ProxyHealth::new(
        Duration::from_secs(60),
        Arc::new(SystemClock),
        metrics.clone(),
    ));
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let never = std::future::pending::<()>;
    let healthz = start_healthz_server(loopback, health.clone(), true, never())
        .await
        .unwrap();
    let state = MetricsServerState {
        metrics,
        proxy_mode: "ipvs".into(),
        configz: serde_json::json!({}),
        explain: None,
        zpages: std::sync::Arc::new(kube_proxy_rs::component::zpages::ZPages::for_process(
            Default::default(),
        )),
    };
    let metrics_srv = start_metrics_server(loopback, state, true, never())
        .await
        .unwrap();
    let hc = Arc::new(ServiceHealthServer::new(
        vec!["127.0.0.1".parse().unwrap()],
        health,
    ));
    let svc = ServiceName {
        namespace: "default".into(),
        name: "lb".into(),
    };
    let port = free_port();
    assert!(
        hc.sync_services(&BTreeMap::from([(svc.clone(), port)]))
            .await
            .is_empty()
    );
    hc.sync_endpoints(&BTreeMap::from([(svc, 1)]));
    // The health-check listeners live as long as the server object.
    let _ = Box::leak(Box::new(hc));
    vec![
        ("healthz", healthz.local_addr.unwrap(), "/healthz"),
        ("metrics", metrics_srv.local_addr.unwrap(), "/healthz"),
        (
            "health-check",
            SocketAddr::from(([127, 0, 0, 1], port)),
            "/",
        ),
    ]
}

fn start_servers() -> Servers {
    let (addrs_tx, addrs_rx) = std::sync::mpsc::channel();
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let targets = rt.block_on(serve_all());
        let _ = addrs_tx.send(targets);
        // Serve until the test drops its sender, then drop the runtime (and every server task).
        let _ = stopped.recv();
    });
    Servers {
        targets: addrs_rx.recv().expect("servers started"),
        _stop: stop,
    }
}

/// Connections of each kind per server, scaled down if the descriptor limit is low.
fn counts(fd_limit: u64) -> [(Abuse, usize); 5] {
    // 3 servers x 2 descriptors per connection (client and server end here) + headroom.
    let per_server = ((fd_limit.saturating_sub(200)) / 6).min(700) as usize;
    let idle = per_server * 4 / 7;
    let slow = per_server * 2 / 7;
    [
        (Abuse::Idle, idle),
        (Abuse::Slowloris, slow),
        (Abuse::Oversized, 20),
        (Abuse::KeepAliveIdle, 30),
        (Abuse::SlowBody, 30),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_answered_while_abusive_connections_are_closed() {
    let fd_limit = raise_fd_limit();
    let servers = start_servers();
    let limits = Limits::default();
    let bound = limits.header_read_timeout + CLOSE_MARGIN;
    let rss_before = rss_kib();
    let mut abusers = JoinSet::new();
    let counts = counts(fd_limit);
    for &(name, addr, _) in &servers.targets {
        for (kind, n) in counts {
            for _ in 0..n {
                abusers.spawn(async move { (name, kind, abuse(addr, kind, bound).await) });
            }
        }
    }
    let opened: usize = counts.iter().map(|(_, n)| n).sum::<usize>() * servers.targets.len();
    // Let the connections open and the oversized heads arrive, then probe while they are held.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let rss_during = rss_kib();
    let mut latencies = Vec::new();
    for round in 0..5 {
        for &(name, addr, path) in &servers.targets {
            let (code, took) = probe(addr, path)
                .await
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert_eq!(code, 200, "{name} answered {code} under abuse");
            latencies.push(took);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    latencies.sort();
    let (median, worst) = (
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
    );
    let mut closed_after: BTreeMap<String, Duration> = BTreeMap::new();
    let mut evicted = 0;
    let mut failures = Vec::new();
    while let Some(done) = abusers.join_next().await {
        let (name, kind, r) = done.expect("abuser task");
        match r {
            Ok(t) => {
                if matches!(kind, Abuse::Idle) && t < Duration::from_secs(2) {
                    evicted += 1;
                }
                let e = closed_after.entry(format!("{name} {kind:?}")).or_default();
                *e = (*e).max(t);
            }
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    let rss_after = rss_kib();
    println!(
        "abuse: {opened} abusive connections over {} servers (fd limit {fd_limit}); {} probes: median {median:?}, slowest {worst:?}",
        servers.targets.len(),
        latencies.len()
    );
    for (what, t) in &closed_after {
        println!("abuse: {what} closed by the server after at most {t:?}");
    }
    println!(
        "abuse: {evicted} idle connections closed within 2 s (the oldest, at the connection cap)"
    );
    println!(
        "abuse: RSS (servers and clients, one process) before {rss_before} KiB, under abuse {rss_during} KiB, after {rss_after} KiB"
    );
    assert!(
        failures.is_empty(),
        "{} abusive connections left open:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // And the servers still answer once it is over.
    for &(name, addr, path) in &servers.targets {
        let (code, _) = probe(addr, path).await.unwrap();
        assert_eq!(code, 200, "{name} after abuse");
    }
}

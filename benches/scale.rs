//! Scale benchmark of the real daemon on a real kernel (issue "Scale", items 2 and 3).
//!
//! `cargo bench --bench scale -- [N...]` (or `scripts/bench-scale.sh [N...]`) boots ONE User-Mode Linux
//! guest; inside it the test API server holds N Services × 10 endpoints (see `tests/common/scale.rs`) and
//! the release `kube-proxy` binary, connected through a kubeconfig, programs the kernel. For every N it
//! measures the cold start (daemon start → first successful sync, from the daemon's
//! `kubeproxy_sync_proxy_rules_last_timestamp_seconds`), verifies the IPVS / ipset / kube-ipvs0 state by
//! counting what the kernel holds, records peak RSS and CPU seconds, then stops the daemon, dumps the kernel
//! state, flushes it and times loading the same state with `ipset restore`, `ipvsadm -R` and
//! `iptables-restore` (the floor). At N = 10 000 (or the first N given) it also times 100 one-endpoint
//! changes (API apply → real server in IPVS) and the no-op periodic full sync (after a restart with
//! syncPeriod 2s; at every N up to 20k). At that N it then runs the churn mode (see `scale/churn.rs`):
//! `KPRS_BENCH_CHURN_RATE` (default 10) endpoint changes per second over random services for
//! `KPRS_BENCH_CHURN_SECS` (default 300; 0 skips it), once with minSyncPeriod 0 and once with 1s, measuring
//! the daemon's CPU seconds per minute, syncs per minute, sampled programming latency and RSS.
//! `KPRS_BENCH_SKIP_FLOOR=1` skips the floor (quick runs); `KPRS_BENCH_CONTENT_TYPE` sets the daemon's
//! `--kube-api-content-type` (default: protobuf); `KPRS_BENCH_HEAP_MARKS=1` makes the daemons log
//! the heap in use at every step of a sync (target `kube_proxy_rs::heap`; off by default: it costs time). Figures are printed and written to
//! `scale-results.txt` in the run directory; wrong kernel state or a dead daemon fails the bench. Every N
//! ends with one machine-readable line:
//! `scale-summary: n=N cold_s=.. floor_s=.. noop_full_sync_s=.. peak_rss_mib=.. heap_mib=.. churn_cpu_s_per_min=.. p99_ms=..`
//! (`heap_mib`: the daemon's `kubeproxy_rs_heap_inuse_bytes` after the cold start; `churn_cpu_s_per_min`
//! and `p99_ms`: the churn run with minSyncPeriod 1s; NA where not measured).
//! `cargo bench --bench scale -- iptables-cost` runs the iptables-cost mode instead (issue 23: the
//! iptables step under a failing module autoload and a busy CPU; see `scale/iptcost.rs`).
//! `KPRS_BENCH_BASELINE=<kube-proxy binary>` runs the paired mode instead: this build and that one
//! alternately in the same boot, medians per figure (see `scale/pair.rs`).
#[path = "scale/churn.rs"]
mod churn;
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "scale/costs.rs"]
mod costs;
#[path = "scale/iptcost.rs"]
mod iptcost;
#[path = "scale/pair.rs"]
mod pair;
#[path = "scale/reads.rs"]
mod reads;

use anyhow::{Context, Result, bail};
use common::apiserver::{Kind, Options as ApiOptions, TestApiServer};
use common::scale::{self, Expected, Metrics, ProcStats};
use kube_proxy_rs::cluster::model::Protocol;
use kube_proxy_rs::kernel::ipvs::netlink::NetlinkIpvs;
use kube_proxy_rs::kernel::ipvs::{Ipvs, IpvsServiceKey};
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

const M: usize = 10;
const CHANGES: usize = 100;
const METRICS: &str = "127.0.0.1:10249";
const HEALTHZ: &str = "127.0.0.1:10256";
/// Longest a cold start may take before it is reported as capped: 480 s, or 20 ms per service beyond
/// that (UML: binding 50k addresses to one device and 550k real servers to IPVS take minutes).
fn cold_start_cap(n: usize) -> Duration {
    Duration::from_secs(480).max(Duration::from_millis(20 * n as u64))
}
/// Longest the one-endpoint change test may run before it stops with fewer samples.
const CHANGE_BUDGET: Duration = Duration::from_secs(180);
const NAME_PREFIX: &str = "scale-";
/// The daemon cargo built for this bench; copied to a private path before the boot because other builds
/// in a shared target directory may replace it while the bench runs. `KPRS_BENCH_DAEMON` overrides it.
const DAEMON: &str = env!("CARGO_BIN_EXE_kube-proxy");

/// Parameters handed from the host to the guest (through a file named after the boot).
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone)]
struct Params {
    sizes: Vec<usize>,
    change_n: usize,
    daemon: PathBuf,
    skip_floor: bool,
    /// Churn mode: seconds per run (0: skipped) and changes per second.
    churn_secs: u64,
    churn_rate: f64,
    /// The daemons log the heap at every step of a sync (`KPRS_BENCH_HEAP_MARKS=1`).
    heap_marks: bool,
    /// The iptables-cost mode instead of the sizes (argument `iptables-cost`).
    iptables_cost: Option<iptcost::Params>,
    /// The paired mode's baseline daemon (`KPRS_BENCH_BASELINE`, a private copy) and its rounds
    /// (`KPRS_BENCH_PAIR_ROUNDS`, default 2); see `scale/pair.rs`.
    baseline: Option<PathBuf>,
    pair_rounds: usize,
    /// `KPRS_BENCH_PAIR_CHURN` (`0s`, `1s`; both when unset) and `KPRS_BENCH_PAIR_ONLY_CHURN=1`.
    pair_churn: Option<String>,
    pair_only_churn: bool,
    /// Seconds to wait after a flush before a paired cold start that is not the boot's first
    /// (`KPRS_BENCH_PAIR_SETTLE_SECS`, default 200); see `scale/pair.rs`.
    pair_settle_secs: u64,
}

/// Whether the daemons log heap marks (set once in the guest from [`Params::heap_marks`]).
static HEAP_MARKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn params_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.params.json"))
}

fn main() {
    if common::uml::in_guest() {
        let mut args = std::env::args().skip_while(|a| a != "--exact");
        let name = args.nth(1).unwrap_or_default();
        if let Err(e) = guest(&name) {
            eprintln!("scale bench FAILED: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    let mut sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.replace('_', "").parse().ok())
        .collect();
    let iptables_cost = std::env::args().any(|a| a == "iptables-cost");
    if sizes.is_empty() && !iptables_cost {
        sizes = vec![1_000, 10_000, 50_000];
    }
    // The change and no-op tests run once: at 10k if asked, else at the first N up to 20k.
    let change_n = if sizes.contains(&10_000) {
        10_000
    } else {
        sizes.iter().copied().find(|&n| n <= 20_000).unwrap_or(0)
    };
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let name = format!("{NAME_PREFIX}{stamp}");
    let daemon = private_daemon_copy(&name);
    let params = Params {
        sizes,
        change_n,
        daemon: daemon.clone(),
        skip_floor: std::env::var_os("KPRS_BENCH_SKIP_FLOOR").is_some(),
        churn_secs: env_or("KPRS_BENCH_CHURN_SECS", 300),
        churn_rate: env_or("KPRS_BENCH_CHURN_RATE", 10.0),
        heap_marks: std::env::var("KPRS_BENCH_HEAP_MARKS").is_ok_and(|v| v == "1"),
        iptables_cost: iptables_cost.then(|| iptcost::Params::from_env(&daemon)),
        baseline: std::env::var_os("KPRS_BENCH_BASELINE").map(|src| {
            let dst = daemon.with_extension("pair-baseline");
            std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("copy {src:?}: {e}"));
            dst
        }),
        pair_rounds: env_or("KPRS_BENCH_PAIR_ROUNDS", 2),
        pair_churn: std::env::var("KPRS_BENCH_PAIR_CHURN").ok(),
        pair_only_churn: std::env::var("KPRS_BENCH_PAIR_ONLY_CHURN").is_ok_and(|v| v == "1"),
        pair_settle_secs: env_or("KPRS_BENCH_PAIR_SETTLE_SECS", 200),
    };
    std::fs::write(
        params_path(&name),
        serde_json::to_string(&params).expect("params"),
    )
    .expect("write params");
    println!(
        "scale bench: sizes {:?}, change/no-op tests at N = {}, daemon {}",
        params.sizes,
        params.change_n,
        daemon.display()
    );
    // The test API server keeps every object as JSON in the guest: 50k services with their slices need
    // more than the 3G that 10k fit in.
    let mem = if params.sizes.iter().any(|&n| n > 20_000) {
        "7G"
    } else {
        "3G"
    };
    println!(
        "booting one UML guest (mem={mem}); progress: tail -f {}/uml-runs/{name}-*/guest-output.log",
        env!("CARGO_TARGET_TMPDIR")
    );
    let budget = boot_budget(&params);
    common::uml::run(
        &name,
        common::uml::BootOptions {
            mem,
            timeout: Duration::from_secs(budget.max(900)),
        },
        || {},
    );
    let _ = std::fs::remove_file(params_path(&name));
    let _ = std::fs::remove_file(&daemon);
    if let Some(b) = params
        .iptables_cost
        .as_ref()
        .and_then(|p| p.baseline.as_ref())
    {
        let _ = std::fs::remove_file(b);
    }
    if let Some(b) = &params.baseline {
        let _ = std::fs::remove_file(b);
    }
    // The run directory of this boot (its name is unique to the boot).
    let dir = common::uml::find_run_dir(&name);
    let results = match (&params.iptables_cost, &params.baseline) {
        (Some(_), _) => iptcost::RESULTS,
        (None, Some(_)) => pair::RESULTS,
        (None, None) => "scale-results.txt",
    };
    match dir.map(|d| d.join(results)) {
        Some(f) => {
            println!("results ({}):", f.display());
            print!("{}", std::fs::read_to_string(&f).unwrap_or_default());
        }
        None => panic!(
            "no run directory for {name} under {}",
            common::uml::runs_base().display()
        ),
    }
}

/// Seconds the host allows the one boot.
fn boot_budget(params: &Params) -> u64 {
    match &params.iptables_cost {
        Some(p) => p.budget(),
        None => {
            // The paired mode runs every step once per daemon and round.
            let (runs, settle) = match params.baseline {
                Some(_) => {
                    let runs = 2 * params.pair_rounds.max(1) as u64;
                    (runs, runs * params.pair_settle_secs)
                }
                None => (1, 0),
            };
            600 + settle
                + runs
                    * (params
                        .sizes
                        .iter()
                        .map(|&n| 60 + n / 50 + cold_start_cap(n).as_secs() as usize)
                        .sum::<usize>() as u64
                        * 2
                        + 2 * (params.churn_secs + 120))
        }
    }
}

/// Copies the daemon binary to a private path and checks that it is ours (`--version` names kube-proxy-rs).
fn private_daemon_copy(name: &str) -> PathBuf {
    let src = std::env::var_os("KPRS_BENCH_DAEMON")
        .map(PathBuf::from)
        .or_else(own_daemon_build)
        .unwrap_or_else(|| PathBuf::from(DAEMON));
    let dst = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.kube-proxy"));
    std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
    println!(
        "daemon binary: {} (copied to {})",
        src.display(),
        dst.display()
    );
    let out = Command::new(&dst)
        .arg("--version")
        .output()
        .expect("run kube-proxy --version");
    let v = String::from_utf8_lossy(&out.stdout);
    assert!(
        v.contains("kube-proxy-rs"),
        "{} --version printed {v:?}: not this project's daemon (replaced by another build in the shared \
         target dir?); rebuild with `cargo build --release` and rerun",
        src.display()
    );
    dst
}

/// The newest `kube_proxy-<hash>` binary in the target's `deps/` (or the uplifted one) that was built from
/// this checkout: its debug info names this worktree's directory. Other checkouts sharing the target dir
/// uplift their own builds to `release/kube-proxy`.
fn own_daemon_build() -> Option<PathBuf> {
    let deps = Path::new(DAEMON).parent()?.join("deps");
    let needle = env!("CARGO_MANIFEST_DIR").as_bytes();
    let mut candidates: Vec<(SystemTime, PathBuf)> = std::fs::read_dir(&deps)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("kube_proxy-") && !n.contains('.'))
        })
        .chain(std::iter::once(PathBuf::from(DAEMON)))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    candidates.sort_by_key(|c| std::cmp::Reverse(c.0));
    candidates.into_iter().map(|(_, p)| p).find(|p| {
        std::fs::read(p).is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
    })
}

/// The daemon process; killed when dropped.
struct Daemon {
    child: Option<Child>,
    log: PathBuf,
    started: SystemTime,
    started_at: Instant,
}

/// The daemons' log filter: sync reports and reconcile steps; the heap marks at every step of a sync only
/// with `KPRS_BENCH_HEAP_MARKS=1` (each mark reads malloc's statistics, which walks its free lists: not
/// free under churn, so the timed runs leave them off; `scripts/mem-probe.sh` turns them on).
fn daemon_log_filter() -> &'static str {
    if HEAP_MARKS.load(std::sync::atomic::Ordering::Relaxed) {
        "info,kube_proxy_rs::daemon::sync=trace,kube_proxy_rs::proxier::reconcile=debug,kube_proxy_rs::heap=debug"
    } else {
        "info,kube_proxy_rs::daemon::sync=trace,kube_proxy_rs::proxier::reconcile=debug"
    }
}

impl Daemon {
    fn spawn(
        exe: &Path,
        kubeconfig: &Path,
        (sync_period, min_sync): (&str, &str),
        log: &Path,
    ) -> Result<Daemon> {
        let out = std::fs::File::create(log)?;
        let args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--hostname-override={}", scale::NODE),
            "--proxy-mode=ipvs".into(),
            format!("--cluster-cidr={}", scale::CLUSTER_CIDR),
            format!("--healthz-bind-address={HEALTHZ}"),
            format!("--metrics-bind-address={METRICS}"),
            format!("--nodeport-addresses={}", scale::NODE_PORT_CIDR),
            format!("--ipvs-min-sync-period={min_sync}"),
            format!("--ipvs-sync-period={sync_period}"),
            // JSON lines carry epoch timestamps (`ts`, milliseconds), which the breakdowns below read.
            "--logging-format=json".into(),
        ];
        let mut args = args;
        // `KPRS_BENCH_CONTENT_TYPE=application/json` compares the JSON watch path (default: protobuf).
        if let Ok(ct) = std::env::var("KPRS_BENCH_CONTENT_TYPE") {
            args.push(format!("--kube-api-content-type={ct}"));
        }
        let started = SystemTime::now();
        let started_at = Instant::now();
        let child = Command::new(exe)
            .args(&args)
            .env("KUBE_PROXY_IPTABLES_BACKEND", "legacy")
            .env("KUBE_PROXY_LOG", daemon_log_filter())
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("spawn kube-proxy")?;
        Ok(Daemon {
            child: Some(child),
            log: log.to_path_buf(),
            started,
            started_at,
        })
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    fn log_tail(&self) -> String {
        let t = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Fails when the daemon has exited.
    fn check_alive(&mut self) -> Result<()> {
        if let Some(c) = self.child.as_mut()
            && let Some(status) = c.try_wait()?
        {
            bail!("kube-proxy died ({status}); log tail:\n{}", self.log_tail());
        }
        Ok(())
    }

    fn stats(&self) -> Result<ProcStats> {
        scale::proc_stats(self.pid())
    }

    /// SIGTERM and wait (kernel rules stay in place).
    fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    bail!(
                        "kube-proxy exited with {status} after SIGTERM; log tail:\n{}",
                        self.log_tail()
                    );
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("kube-proxy did not stop within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn metrics(&mut self) -> Result<Metrics> {
        self.check_alive()?;
        Ok(Metrics::parse(&scale::http_get(METRICS, "/metrics")?))
    }

    /// Waits until the daemon reports a successful sync later than `after` (unix seconds); returns its time.
    fn wait_synced_after(&mut self, after: f64, cap: Duration) -> Result<Option<f64>> {
        let deadline = Instant::now() + cap;
        loop {
            self.check_alive()?;
            if let Ok(m) = self.metrics() {
                let ts = m.sum(
                    "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
                    &["ip_family=\"IPv4\""],
                );
                if ts > after {
                    return Ok(Some(ts));
                }
            }
            if Instant::now() > deadline {
                return Ok(None);
            }
            // The figures come from the daemon's own timestamp, not from when the poll saw it: polling
            // slowly costs no precision, while each scrape (a connection, the daemon rendering /metrics,
            // this side parsing it) competes with the daemon measured for the guest's one CPU.
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// Results of one N.
#[derive(Default, Debug, Clone)]
struct Row {
    n: usize,
    cold_start: Option<f64>,
    cold_detect: f64,
    first_sync_metric: f64,
    peak_rss_cold: u64,
    cpu_cold: f64,
    peak_rss_end: u64,
    cpu_end: f64,
    floor_ipset: f64,
    floor_ipvs: f64,
    floor_iptables: f64,
    floor_addresses: f64,
    dump_sizes: (usize, usize, usize),
    steps: String,
    /// Where the cold start's seconds went (from the daemon's log).
    cold_breakdown: String,
    /// `kubeproxy_rs_heap_inuse_bytes` after the cold start (None: the daemon does not export it).
    heap: Option<f64>,
    floor_skipped: bool,
    noop: Option<Noop>,
    churn: Vec<churn::ChurnResult>,
    /// The cold start's first sync's counts (`costs.rs`).
    cold_counts: costs::Counts,
    /// Event-driven syncs: changes at once, syncs, counts.
    event_counts: costs::EventCounts,
    /// The kernel-read floor table (`reads.rs`).
    reads: String,
}

/// No-op periodic full syncs after a warm restart.
#[derive(Default, Debug, Clone)]
struct Noop {
    warm_start: f64,
    syncs: f64,
    metric_ms: f64,
    cpu_ms: f64,
    window: f64,
    steps: String,
    /// Median counts of the window's full syncs.
    counts: costs::Counts,
    /// Module requests the kernel made per no-op full sync (counting wrapper, after the window).
    module_requests: Option<f64>,
}

impl Row {
    fn floor(&self) -> f64 {
        self.floor_ipset + self.floor_ipvs + self.floor_iptables
    }
}

/// Out-of-band results at the change N.
#[derive(Default, Debug, Clone)]
struct ChangeResults {
    n: usize,
    latencies_ms: Vec<f64>,
    npl_mean_ms: f64,
    npl_count: f64,
    sync_mean_ms: f64,
    sync_count: f64,
    change_steps: String,
}

struct Run {
    dir: PathBuf,
    report: std::fs::File,
    api: TestApiServer,
    kubeconfig: PathBuf,
    daemon: PathBuf,
    loaded: usize,
    /// N of the services the kernel holds from the last cold start (0: unknown).
    loaded_kernel: usize,
    skip_floor: bool,
    churn_secs: u64,
    churn_rate: f64,
}

impl Run {
    fn log(&mut self, line: &str) {
        let stamp = format!("[{:>8.1}s] {line}", uptime());
        println!("{stamp}");
        let _ = writeln!(self.report, "{stamp}");
    }
}

fn uptime() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

fn guest(name: &str) -> Result<()> {
    let params: Params = serde_json::from_str(
        &std::fs::read_to_string(params_path(name)).context("read bench parameters")?,
    )?;
    let dir = common::uml::guest_run_dir().context("no run dir")?;
    HEAP_MARKS.store(params.heap_marks, std::sync::atomic::Ordering::Relaxed);
    raise_nofile();
    scale::run_ok(&format!(
        "ip link add node0 type dummy && ip link set node0 up && ip addr add {}/24 dev node0",
        scale::NODE_IP
    ))?;
    let api = TestApiServer::start_with(
        "127.0.0.1:0",
        ApiOptions {
            // Watch history only serves watches resumed after the daemon's list (a few hundred changes);
            // an older resourceVersion gets 410 Gone and a relist, as from a real API server.
            history_limit: 20_000,
            ..Default::default()
        },
    )?;
    api.apply_value(Kind::Node, scale::node())?;
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig)?;
    let report = std::fs::File::create(dir.join("scale-log.txt"))?;
    let mut run = Run {
        dir: dir.clone(),
        report,
        api,
        kubeconfig,
        daemon: params.daemon.clone(),
        loaded: 0,
        loaded_kernel: 0,
        skip_floor: params.skip_floor,
        churn_secs: params.churn_secs,
        churn_rate: params.churn_rate,
    };
    let mem = scale::run_ok("grep -E 'MemTotal' /proc/meminfo")?;
    run.log(&format!(
        "guest: {} {}, daemon {}",
        scale::run_ok("uname -r")?.trim(),
        mem.trim(),
        params.daemon.display()
    ));
    let spawn = timed("true")?;
    let ipt = timed("iptables -t nat -S >/dev/null")?;
    let ips = timed("ipset list -n >/dev/null")?;
    run.log(&format!(
        "guest process spawn costs: bash -c true {:.1} ms, iptables -t nat -S {:.1} ms, ipset list -n {:.1} ms",
        spawn * 1e3,
        ipt * 1e3,
        ips * 1e3
    ));
    if let Some(p) = &params.iptables_cost {
        return iptcost::guest(&mut run, p);
    }
    if let Some(baseline) = &params.baseline {
        let opts = pair::Options {
            baseline: baseline.clone(),
            rounds: params.pair_rounds,
            churn: params.pair_churn.clone(),
            only_churn: params.pair_only_churn,
            settle: std::time::Duration::from_secs(params.pair_settle_secs),
        };
        for &n in &params.sizes {
            load(&mut run, n)?;
            let exp = Expected::compute(n, M, 0);
            println!("{}", pair::compare(&mut run, n, &exp, &opts)?);
            // The kernel holds the last daemon's state: the reads every full sync makes, alone.
            println!("{}", reads::floor(&mut run, n)?);
        }
        return Ok(());
    }
    let mut rows = Vec::new();
    let mut change = None;
    for &n in &params.sizes {
        let (row, ch) = one_size(&mut run, n, n == params.change_n)?;
        rows.push(row);
        if ch.is_some() {
            change = ch;
        }
        write_results(&run.dir, &rows, change.as_ref())?;
    }
    let table = write_results(&run.dir, &rows, change.as_ref())?;
    println!("{table}");
    Ok(())
}

fn raise_nofile() {
    let lim = libc::rlimit {
        rlim_cur: 1 << 20,
        rlim_max: 1 << 20,
    };
    // SAFETY: setrlimit with a valid struct; failure only leaves the old limit.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
}

/// Makes the API server hold exactly services 0..n with their slices.
fn load(run: &mut Run, n: usize) -> Result<()> {
    let t = Instant::now();
    for i in 0..n {
        run.api.apply_value(Kind::Service, scale::service(i))?;
        run.api
            .apply_value(Kind::EndpointSlice, scale::slice(i, M, &[], None))?;
    }
    for i in n..run.loaded {
        run.api
            .delete(Kind::Service, scale::NAMESPACE, &scale::service_name(i));
        run.api.delete(
            Kind::EndpointSlice,
            scale::NAMESPACE,
            &format!("{}-x1", scale::service_name(i)),
        );
    }
    run.loaded = n;
    let msg = format!(
        "N={n}: API server holds {} Services, {} EndpointSlices (loaded in {:.1?})",
        run.api.count(Kind::Service),
        run.api.count(Kind::EndpointSlice),
        t.elapsed()
    );
    run.log(&msg);
    Ok(())
}

/// Removes everything from IPVS, iptables, ipset and kube-ipvs0 (the guest has nothing else there).
fn flush_kernel() -> Result<()> {
    scale::run_ok(
        "ipvsadm -C; \
         for t in nat filter mangle; do iptables -t $t -F; iptables -t $t -X; ip6tables -t $t -F; ip6tables -t $t -X; done; \
         ipset flush; ipset destroy; ip link del kube-ipvs0 2>/dev/null; true",
    )?;
    let (vs, _, _) = scale::ipvs_counts()?;
    let sets = scale::ipset_counts()?;
    if vs != 0 || !sets.is_empty() {
        bail!("kernel not clean after flush: {vs} virtual servers, ipsets {sets:?}");
    }
    Ok(())
}

fn verify(run: &mut Run, what: &str, exp: &Expected) -> Result<()> {
    let t = Instant::now();
    let obs = scale::observe()?;
    let bad = scale::mismatches(exp, &obs);
    if !bad.is_empty() {
        bail!("{what}: kernel state is wrong:\n  {}", bad.join("\n  "));
    }
    let msg = format!(
        "{what}: kernel verified in {:.1?}: {} virtual servers, {} real servers, {} persistent, {} kube-ipvs0 addresses, ipsets {:?}",
        t.elapsed(),
        obs.virtual_servers,
        obs.destinations,
        obs.persistent,
        obs.ipvs0_addresses,
        exp.ipsets
            .keys()
            .map(|k| (k.to_string(), obs.ipsets.get(*k).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
    );
    run.log(&msg);
    Ok(())
}

fn one_size(run: &mut Run, n: usize, change_here: bool) -> Result<(Row, Option<ChangeResults>)> {
    load(run, n)?;
    flush_kernel()?;
    let exp = Expected::compute(n, M, 0);
    let mut row = Row {
        n,
        floor_skipped: run.skip_floor,
        ..Default::default()
    };
    let Some(mut d) = cold_start(run, &mut row, &exp)? else {
        return Ok((row, None));
    };
    let mut change = None;
    if change_here {
        let mut ch = ChangeResults {
            n,
            ..Default::default()
        };
        endpoint_changes(run, &mut d, n, &mut ch)?;
        change = Some(ch);
    }
    d.check_alive()?;
    let st = d.stats()?;
    row.peak_rss_end = st.peak_rss;
    row.cpu_end = st.cpu_seconds;
    d.stop()?;
    if n <= 20_000 {
        // Warm restart with a short syncPeriod: no-op periodic full syncs.
        noop_syncs(run, n, &exp, &mut row)?;
    }
    row.event_counts = costs::event_driven(run, n, &EVENT_SIZES)?;
    row.reads = reads::floor(run, n)?;
    if change_here && run.churn_secs > 0 {
        for min_sync in ["0s", "1s"] {
            let c = churn_run(run, n, &exp, min_sync)?;
            row.peak_rss_end = row.peak_rss_end.max(c.rss_end);
            row.churn.push(c);
        }
    }
    verify(run, &format!("N={n} after the daemon stopped"), &exp)?;
    if run.skip_floor {
        run.log(&format!("N={n}: floor skipped (KPRS_BENCH_SKIP_FLOOR)"));
        flush_kernel()?;
    } else {
        floor(run, &mut row, &exp)?;
    }
    run.log(&summary_line(&row));
    Ok((row, change))
}

/// Changes applied at once in the event-driven phase (`costs.rs`).
const EVENT_SIZES: [usize; 3] = [1, 10, 100];

/// How often [`Daemon::wait_synced_after`] scrapes the daemon's /metrics.
const POLL: Duration = Duration::from_millis(250);

/// Starts the daemon on an empty kernel and waits for its first successful sync; records the cold-start
/// figures in `row`. None when it did not sync within the cap (the kernel is flushed).
fn cold_start(run: &mut Run, row: &mut Row, exp: &Expected) -> Result<Option<Daemon>> {
    let n = row.n;
    let log = run.dir.join(format!("kube-proxy-{n}-cold.log"));
    let mut d = Daemon::spawn(&run.daemon, &run.kubeconfig, ("30s", "0s"), &log)?;
    let started = unix(d.started);
    let cap = cold_start_cap(n);
    let Some(ts) = d.wait_synced_after(started, cap)? else {
        let st = d.stats().unwrap_or_default();
        run.log(&format!(
            "N={n}: NOT synced within {cap:?} (cap); peak RSS {:.1} MiB, CPU {:.1} s; skipping",
            mib(st.peak_rss),
            st.cpu_seconds
        ));
        row.peak_rss_cold = st.peak_rss;
        row.cpu_cold = st.cpu_seconds;
        d.kill();
        flush_kernel()?;
        return Ok(None);
    };
    row.cold_detect = d.started_at.elapsed().as_secs_f64();
    row.cold_start = Some(ts - started);
    let st = d.stats()?;
    row.peak_rss_cold = st.peak_rss;
    row.cpu_cold = st.cpu_seconds;
    let m = d.metrics()?;
    row.heap = m.get("kubeproxy_rs_heap_inuse_bytes");
    // The cold start's full sync (later event-driven syncs are in the other histogram's count too).
    let (s, c) = m.histogram_v4("kubeproxy_sync_full_proxy_rules_duration_seconds");
    row.first_sync_metric = if c > 0.0 { s / c } else { f64::NAN };
    run.log(&format!(
        "N={n}: cold start {:.3} s (seen by poller after {:.3} s); daemon's sync_full_proxy_rules_duration {:.3} s over {c} full sync(s); peak RSS {:.1} MiB, heap {}, CPU {:.2} s",
        ts - started,
        row.cold_detect,
        row.first_sync_metric,
        mib(st.peak_rss),
        fmt_mib(row.heap),
        st.cpu_seconds
    ));
    let steps = sync_steps(&d.log, SyncPick::FirstFull);
    run.log(&format!("N={n}: cold-start sync steps: {steps}"));
    row.cold_counts = costs::reports(&d.log)
        .into_iter()
        .find(|r| r.full)
        .map(|r| r.counts)
        .unwrap_or_default();
    run.log(&format!(
        "N={n}: cold-start sync counts: {}",
        costs::line(&row.cold_counts)
    ));
    row.steps = steps;
    row.cold_breakdown = cold_breakdown(&d.log, d.started, ts);
    run.log(&format!(
        "N={n}: cold start breakdown: {}",
        row.cold_breakdown
    ));
    verify(run, &format!("N={n} cold start"), exp)?;
    Ok(Some(d))
}

/// The summary line ending every N.
fn summary_line(r: &Row) -> String {
    let na = |v: Option<f64>, digits: usize| {
        v.filter(|v| v.is_finite())
            .map(|v| format!("{v:.digits$}"))
            .unwrap_or_else(|| "NA".into())
    };
    let slow = r.churn.iter().find(|c| c.min_sync == "1s");
    format!(
        "scale-summary: n={} cold_s={} floor_s={} noop_full_sync_s={} peak_rss_mib={} heap_mib={} churn_cpu_s_per_min={} p99_ms={}",
        r.n,
        na(r.cold_start, 3),
        na(
            (!r.floor_skipped && r.cold_start.is_some()).then(|| r.floor()),
            3
        ),
        na(r.noop.as_ref().map(|x| x.metric_ms / 1e3), 3),
        na(Some(mib(r.peak_rss_end.max(r.peak_rss_cold))), 1),
        na(r.heap.map(|b| b / (1024.0 * 1024.0)), 1),
        na(slow.map(|c| c.cpu_per_min), 2),
        na(slow.map(|c| c.p(99.0)), 1),
    )
}

fn fmt_mib(b: Option<f64>) -> String {
    b.map(|b| format!("{:.1} MiB", b / (1024.0 * 1024.0)))
        .unwrap_or_else(|| "NA (no kubeproxy_rs_heap_inuse_bytes)".into())
}

/// 100 one-endpoint additions, each to a different plain ClusterIP service: API apply → the new real server
/// present in IPVS. Then the services are put back.
fn endpoint_changes(run: &mut Run, d: &mut Daemon, n: usize, ch: &mut ChangeResults) -> Result<()> {
    let mut ipvs = NetlinkIpvs::new().context("open IPVS netlink")?;
    let before = d.metrics()?;
    let groups = (n / 10).max(1);
    let mut touched = Vec::new();
    let budget = Instant::now() + CHANGE_BUDGET;
    for c in 0..CHANGES {
        if Instant::now() > budget {
            run.log(&format!(
                "N={n}: change test capped after {c} changes ({CHANGE_BUDGET:?} budget)"
            ));
            break;
        }
        let i = ((97 * c) % groups) * 10 + 5;
        if i >= n {
            bail!("N={n} too small for the change test");
        }
        let extra = scale::extra_ip(c);
        let key = IpvsServiceKey {
            addr: IpAddr::V4(scale::cluster_ip(i)),
            port: scale::PORT,
            protocol: Protocol::Tcp,
        };
        let t0 = Instant::now();
        let obj = scale::slice(i, M, &[extra], Some(SystemTime::now()));
        run.api.apply_value(Kind::EndpointSlice, obj)?;
        loop {
            let dsts = ipvs
                .destinations(&key)
                .with_context(|| format!("list real servers of {key}"))?;
            if dsts.iter().any(|x| x.addr == IpAddr::V4(extra)) {
                break;
            }
            if t0.elapsed() > Duration::from_secs(120) {
                d.check_alive()?;
                bail!("change {c}: {extra} not in IPVS service {key} after 120 s");
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        ch.latencies_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        touched.push(i);
        // Let the sync that programmed it finish before the next change.
        std::thread::sleep(Duration::from_millis(50));
    }
    d.check_alive()?;
    std::thread::sleep(Duration::from_millis(300));
    let after = d.metrics()?;
    let (s0, c0) = before.histogram_v4("kubeproxy_network_programming_duration_seconds");
    let (s1, c1) = after.histogram_v4("kubeproxy_network_programming_duration_seconds");
    ch.npl_count = c1 - c0;
    ch.npl_mean_ms = if c1 > c0 {
        (s1 - s0) / (c1 - c0) * 1e3
    } else {
        f64::NAN
    };
    let (s0, c0) = before.histogram_v4("kubeproxy_sync_proxy_rules_duration_seconds");
    let (s1, c1) = after.histogram_v4("kubeproxy_sync_proxy_rules_duration_seconds");
    ch.sync_count = c1 - c0;
    ch.sync_mean_ms = if c1 > c0 {
        (s1 - s0) / (c1 - c0) * 1e3
    } else {
        f64::NAN
    };
    ch.change_steps = sync_steps(&d.log, SyncPick::Last);
    let mut sorted = ch.latencies_ms.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    run.log(&format!(
        "N={n}: {} one-endpoint changes: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; daemon: network_programming mean {:.2} ms over {} observations, sync_proxy_rules mean {:.2} ms over {} syncs",
        sorted.len(),
        scale::percentile(&sorted, 50.0),
        scale::percentile(&sorted, 99.0),
        sorted.last().copied().unwrap_or(f64::NAN),
        ch.npl_mean_ms,
        ch.npl_count,
        ch.sync_mean_ms,
        ch.sync_count
    ));
    verify(
        run,
        &format!("N={n} after {} endpoint changes", touched.len()),
        &Expected::compute(n, M, touched.len()),
    )?;
    // Put the slices back.
    for &i in &touched {
        run.api
            .apply_value(Kind::EndpointSlice, scale::slice(i, M, &[], None))?;
    }
    let exp = Expected::compute(n, M, 0);
    let deadline = Instant::now() + Duration::from_secs(600);
    while scale::ipvs_counts()?.1 != exp.destinations {
        d.check_alive()?;
        if Instant::now() > deadline {
            bail!("N={n}: extra real servers not removed within 600 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// Restarts the daemon with syncPeriod 2s on the programmed kernel (warm start), then reads the no-op
/// periodic full syncs over a quiet window from its metrics and its CPU time.
fn noop_syncs(run: &mut Run, n: usize, exp: &Expected, row: &mut Row) -> Result<()> {
    let mut ch = Noop::default();
    let log = run.dir.join(format!("kube-proxy-{n}-warm.log"));
    let mut d = Daemon::spawn(&run.daemon, &run.kubeconfig, ("2s", "0s"), &log)?;
    let started = unix(d.started);
    let Some(ts) = d.wait_synced_after(started, cold_start_cap(n))? else {
        bail!(
            "N={n}: warm restart did not sync within {:?}",
            cold_start_cap(n)
        );
    };
    ch.warm_start = ts - started;
    verify(run, &format!("N={n} warm restart"), exp)?;
    // Skip past the next periodic sync so the window starts right after one.
    let first = d
        .wait_synced_after(ts, Duration::from_secs(300))?
        .context("no periodic sync within 300 s")?;
    let m0 = d.metrics()?;
    let cpu0 = d.stats()?.cpu_seconds;
    let t0 = Instant::now();
    let mut last = first;
    for _ in 0..2 {
        last = d
            .wait_synced_after(last, Duration::from_secs(300))?
            .context("no periodic sync within 300 s")?;
    }
    let m1 = d.metrics()?;
    let st = d.stats()?;
    ch.window = t0.elapsed().as_secs_f64();
    let (s0, c0) = m0.histogram_v4("kubeproxy_sync_full_proxy_rules_duration_seconds");
    let (s1, c1) = m1.histogram_v4("kubeproxy_sync_full_proxy_rules_duration_seconds");
    let (_, a0) = m0.histogram_v4("kubeproxy_sync_proxy_rules_duration_seconds");
    let (_, a1) = m1.histogram_v4("kubeproxy_sync_proxy_rules_duration_seconds");
    ch.syncs = c1 - c0;
    ch.metric_ms = if c1 > c0 {
        (s1 - s0) / (c1 - c0) * 1e3
    } else {
        f64::NAN
    };
    ch.cpu_ms = if a1 > a0 {
        (st.cpu_seconds - cpu0) / (a1 - a0) * 1e3
    } else {
        f64::NAN
    };
    run.log(&format!(
        "N={n}: warm restart {:.3} s; {} no-op full syncs in {:.1} s ({} syncs in all): daemon's sync_full_proxy_rules_duration mean {:.1} ms; daemon CPU per sync {:.1} ms; peak RSS {:.1} MiB",
        ch.warm_start,
        ch.syncs,
        ch.window,
        a1 - a0,
        ch.metric_ms,
        ch.cpu_ms,
        mib(st.peak_rss)
    ));
    row.peak_rss_end = row.peak_rss_end.max(st.peak_rss);
    ch.steps = sync_steps(&d.log, SyncPick::LastFull);
    run.log(&format!("N={n}: last no-op sync: {}", ch.steps));
    let window: Vec<costs::Report> = costs::reports(&d.log)
        .into_iter()
        // Each report is logged right after its sync's timestamp: the window's are after `first`'s.
        .filter(|r| r.full && r.ts > first + 0.5 && r.ts <= last + 0.5)
        .collect();
    ch.counts = costs::median(&window.iter().collect::<Vec<_>>());
    run.log(&format!(
        "N={n}: no-op full sync counts (median of {}): {}",
        window.len(),
        costs::line(&ch.counts)
    ));
    ch.module_requests = Some(module_requests(&mut d, last)?);
    d.stop()?;
    row.noop = Some(ch);
    Ok(())
}

/// Module requests the kernel makes per sync: the counting wrapper installed as the kernel's modprobe
/// (it logs, then runs the real one) over two more syncs after `after`. Outside the timed window: the
/// wrapper's own process start would inflate it.
fn module_requests(d: &mut Daemon, after: f64) -> Result<f64> {
    let req = iptcost::Requests::install()?;
    let mut last = d
        .wait_synced_after(after, Duration::from_secs(300))?
        .context("no periodic sync within 300 s")?;
    let before = req.count();
    for _ in 0..2 {
        last = d
            .wait_synced_after(last, Duration::from_secs(300))?
            .context("no periodic sync within 300 s")?;
    }
    Ok((req.count() - before) as f64 / 2.0)
}

/// One churn run: a warm restart with `min_sync`, changes at the configured rate over random services,
/// then the slices put back and the kernel verified.
fn churn_run(
    run: &mut Run,
    n: usize,
    exp: &Expected,
    min_sync: &str,
) -> Result<churn::ChurnResult> {
    let log = run.dir.join(format!("kube-proxy-{n}-churn-{min_sync}.log"));
    let mut d = Daemon::spawn(&run.daemon, &run.kubeconfig, ("30s", min_sync), &log)?;
    let started = unix(d.started);
    d.wait_synced_after(started, cold_start_cap(n))?
        .context("churn: warm restart did not sync")?;
    std::thread::sleep(Duration::from_secs(2));
    let m0 = d.metrics()?;
    let st0 = d.stats()?;
    let t0 = Instant::now();
    let mut c = churn::Churn {
        api: &mut run.api,
        n,
        m: M,
        rate: run.churn_rate,
        duration: Duration::from_secs(run.churn_secs),
        seed: 20261125,
    };
    let (latencies_ms, changes, touched) = c.drive(|| d.check_alive())?;
    let seconds = t0.elapsed().as_secs_f64();
    let m1 = d.metrics()?;
    let st1 = d.stats()?;
    c.restore(&touched)?;
    let per_min = |v: f64| v / seconds * 60.0;
    let count = |m: &Metrics, h: &str| m.histogram_v4(h).1;
    let sync_h = "kubeproxy_sync_proxy_rules_duration_seconds";
    let full_h = "kubeproxy_sync_full_proxy_rules_duration_seconds";
    let res = churn::ChurnResult {
        min_sync: min_sync.into(),
        seconds,
        changes,
        cpu_per_min: per_min(st1.cpu_seconds - st0.cpu_seconds),
        child_cpu_per_min: per_min(st1.child_cpu_seconds - st0.child_cpu_seconds),
        syncs_per_min: per_min(count(&m1, sync_h) - count(&m0, sync_h)),
        full_syncs: count(&m1, full_h) - count(&m0, full_h),
        latencies_ms,
        rss_end: st1.rss,
        last_steps: sync_steps(&d.log, SyncPick::Last),
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    while scale::ipvs_counts()?.1 != exp.destinations {
        d.check_alive()?;
        if Instant::now() > deadline {
            bail!("N={n}: churn endpoints not removed within 600 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    run.log(&format!(
        "N={n}: churn minSyncPeriod {min_sync}: {changes} changes in {seconds:.0} s, CPU {:.2} s/min (children {:.2}), {:.1} syncs/min, p50 {:.1} ms, p99 {:.1} ms, RSS {:.1} MiB",
        res.cpu_per_min,
        res.child_cpu_per_min,
        res.syncs_per_min,
        res.p(50.0),
        res.p(99.0),
        mib(res.rss_end)
    ));
    d.stop()?;
    verify(
        run,
        &format!("N={n} after churn (minSyncPeriod {min_sync})"),
        exp,
    )?;
    Ok(res)
}

/// Unix time of a daemon log line (the JSON format's `ts`, milliseconds since the epoch).
fn line_time(line: &str) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    Some(v["ts"].as_f64()? / 1e3)
}

/// Where the cold start's seconds went, from the daemon's log: process start → proxier started (flags,
/// kernel probes) → first sync starts (Services and EndpointSlices listed) → first full sync's steps →
/// the success recorded in the metrics (`synced`, unix seconds).
fn cold_breakdown(log: &Path, started: SystemTime, synced: f64) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let at = |needle: &str| {
        text.lines()
            .find(|l| l.contains(needle))
            .and_then(line_time)
    };
    let start = unix(started);
    let proxier = at("Using ipvs Proxier");
    let first = at("starting the first sync");
    let report = text
        .lines()
        .find(|l| l.contains("sync report") && l.contains("full: true"));
    let end = report.and_then(line_time);
    let secs = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.3} s", b - a),
        _ => "?".into(),
    };
    format!(
        "init {} | API list {} | first sync {} ({}) | publish {}",
        secs(Some(start), proxier),
        secs(proxier, first),
        secs(first, end),
        sync_steps(log, SyncPick::FirstFull),
        secs(end, Some(synced)),
    )
}

/// Which "sync report" line of a daemon log to show.
#[derive(Clone, Copy, PartialEq)]
enum SyncPick {
    FirstFull,
    LastFull,
    Last,
}

/// Duration and `step_durations` of one "sync report" line in a daemon log.
fn sync_steps(log: &Path, pick: SyncPick) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let reports = text.lines().filter(|l| l.contains("sync report"));
    let is_full = |l: &&str| l.contains("full: true");
    let line = match pick {
        SyncPick::FirstFull => reports.clone().find(is_full),
        SyncPick::LastFull => reports.clone().rfind(is_full),
        SyncPick::Last => reports.clone().next_back(),
    };
    let Some(line) = line else {
        return "(no sync report in the log)".into();
    };
    let grab = |key: &str| -> String {
        line.split_once(key)
            .map(|(_, rest)| {
                let mut depth = 0;
                let mut out = String::new();
                for ch in rest.chars() {
                    match ch {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 0 => break,
                        _ => {}
                    }
                    out.push(ch);
                    if depth == 0 && ch == '}' {
                        break;
                    }
                }
                out.trim().to_string()
            })
            .unwrap_or_default()
    };
    format!(
        "duration {} steps {}",
        grab("duration: "),
        grab("step_durations: ")
    )
}

fn timed(cmd: &str) -> Result<f64> {
    let t = Instant::now();
    scale::run_ok(cmd)?;
    Ok(t.elapsed().as_secs_f64())
}

/// Dumps the kernel state the daemon left, flushes it, and times loading it back with the stock tools.
fn floor(run: &mut Run, row: &mut Row, exp: &Expected) -> Result<()> {
    let n = row.n;
    let d = run.dir.join(format!("floor-{n}"));
    std::fs::create_dir_all(&d)?;
    let p = |f: &str| d.join(f).display().to_string();
    scale::run_ok(&format!(
        "ipvsadm -Sn > {ipvs} && ipset save > {ipset} && iptables-save > {ipt} && ip6tables-save > {ip6t} && \
         ip -o addr show dev kube-ipvs0 | awk '{{print \"addr add \" $4 \" dev kube-ipvs0\"}}' > {addrs}",
        ipvs = p("ipvsadm.txt"),
        ipset = p("ipset.txt"),
        ipt = p("iptables.txt"),
        ip6t = p("ip6tables.txt"),
        addrs = p("addrs.batch"),
    ))?;
    let lines = |f: &str| {
        std::fs::read_to_string(d.join(f))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    row.dump_sizes = (
        lines("ipvsadm.txt"),
        lines("ipset.txt"),
        lines("iptables.txt") + lines("ip6tables.txt"),
    );
    flush_kernel()?;
    row.floor_ipset = timed(&format!("ipset restore -f {}", p("ipset.txt")))?;
    row.floor_ipvs = timed(&format!("ipvsadm -R < {}", p("ipvsadm.txt")))?;
    row.floor_iptables = timed(&format!(
        "iptables-restore < {} && ip6tables-restore < {}",
        p("iptables.txt"),
        p("ip6tables.txt")
    ))?;
    row.floor_addresses = timed(&format!(
        "ip link add kube-ipvs0 type dummy && ip -batch {}",
        p("addrs.batch")
    ))?;
    run.log(&format!(
        "N={n}: floor: ipset restore {:.3} s ({} lines), ipvsadm -R {:.3} s ({} lines), iptables-restore {:.3} s ({} lines); kube-ipvs0 addresses with ip -batch {:.3} s",
        row.floor_ipset,
        row.dump_sizes.1,
        row.floor_ipvs,
        row.dump_sizes.0,
        row.floor_iptables,
        row.dump_sizes.2,
        row.floor_addresses
    ));
    verify(run, &format!("N={n} state loaded by the stock tools"), exp)?;
    flush_kernel()?;
    Ok(())
}

fn fmt_s(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.3}"))
        .unwrap_or_else(|| "capped".into())
}

/// The no-op, churn and cold-start breakdown lines of one N.
fn write_row_extras(t: &mut String, r: &Row) -> Result<()> {
    writeln!(
        t,
        "\nN = {}: cold start breakdown: {}",
        r.n, r.cold_breakdown
    )?;
    if let Some(c) = &r.noop {
        writeln!(
            t,
            "No-op periodic sync at N = {} (restart with syncPeriod 2s; warm restart to first sync {:.3} s):",
            r.n, c.warm_start
        )?;
        writeln!(
            t,
            "  daemon metric kubeproxy_sync_full_proxy_rules_duration_seconds mean {:.1} ms over {} syncs; outside: daemon CPU per sync {:.1} ms ({:.1} s window)",
            c.metric_ms, c.syncs, c.cpu_ms, c.window
        )?;
        writeln!(t, "  last no-op sync (daemon's report): {}", c.steps)?;
        writeln!(
            t,
            "  counts per no-op full sync: {}; module requests {}",
            costs::line(&c.counts),
            c.module_requests
                .map_or("NA".to_string(), |m| format!("{m:.1}"))
        )?;
    }
    writeln!(
        t,
        "  cold-start sync counts: {}",
        costs::line(&r.cold_counts)
    )?;
    for (k, syncs, c) in &r.event_counts {
        writeln!(
            t,
            "  event-driven, {k} change(s) at once ({syncs} sync(s)): {}",
            costs::line(c)
        )?;
    }
    t.push_str(&r.reads);
    for c in &r.churn {
        writeln!(
            t,
            "Churn at N = {} (minSyncPeriod {}, syncPeriod 30s): {} changes in {:.0} s; daemon CPU {:.2} s/min (children {:.2} s/min); {:.1} syncs/min ({} full); latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} samples); RSS at the end {:.1} MiB",
            r.n,
            c.min_sync,
            c.changes,
            c.seconds,
            c.cpu_per_min,
            c.child_cpu_per_min,
            c.syncs_per_min,
            c.full_syncs,
            c.p(50.0),
            c.p(99.0),
            c.latencies_ms.last().copied().unwrap_or(f64::NAN),
            c.latencies_ms.len(),
            mib(c.rss_end)
        )?;
        writeln!(
            t,
            "  last event-driven sync (daemon's report): {}",
            c.last_steps
        )?;
    }
    Ok(())
}

fn write_results(dir: &Path, rows: &[Row], ch: Option<&ChangeResults>) -> Result<String> {
    let mut t = String::new();
    writeln!(
        t,
        "\nScale bench: {M} endpoints per service, 10% NodePort (1% LoadBalancer eTP=Local + health check), 10% ClientIP affinity"
    )?;
    writeln!(
        t,
        "{:>7} | {:>10} | {:>10} | {:>9} | {:>9} | {:>9} | {:>9} | {:>8} | {:>8} | {:>10} | {:>9} | {:>8}",
        "N",
        "cold [s]",
        "full sync",
        "floor [s]",
        "ratio",
        "+addrs",
        "ratio",
        "RSS cold",
        "RSS peak",
        "CPU cold",
        "CPU total",
        "restore"
    )?;
    writeln!(
        t,
        "{:>7} | {:>10} | {:>10} | {:>9} | {:>9} | {:>9} | {:>9} | {:>8} | {:>8} | {:>10} | {:>9} | {:>8}",
        "",
        "",
        "(metric)",
        "set+vs+ipt",
        "cold/floor",
        "floor+ip",
        "cold/(..)",
        "[MiB]",
        "[MiB]",
        "[s]",
        "[s]",
        "set/vs/ipt"
    )?;
    for r in rows {
        let floor = r.floor();
        let floor2 = floor + r.floor_addresses;
        let ratio = |f: f64| {
            r.cold_start
                .filter(|_| f > 0.0)
                .map(|c| format!("{:.2}x", c / f))
                .unwrap_or_else(|| "-".into())
        };
        writeln!(
            t,
            "{:>7} | {:>10} | {:>10.3} | {:>9.3} | {:>9} | {:>9.3} | {:>9} | {:>8.1} | {:>8.1} | {:>10.2} | {:>9.2} | {:.2}/{:.2}/{:.2}",
            r.n,
            fmt_s(r.cold_start),
            r.first_sync_metric,
            floor,
            ratio(floor),
            floor2,
            ratio(floor2),
            mib(r.peak_rss_cold),
            mib(r.peak_rss_end),
            r.cpu_cold,
            r.cpu_end,
            r.floor_ipset,
            r.floor_ipvs,
            r.floor_iptables
        )?;
    }
    for r in rows {
        writeln!(
            t,
            "  N={}: cold-start full sync (daemon's report): {}",
            r.n, r.steps
        )?;
    }
    if let Some(c) = ch {
        let mut sorted = c.latencies_ms.clone();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let mean = sorted.iter().sum::<f64>() / sorted.len().max(1) as f64;
        writeln!(
            t,
            "\nAt N = {}: one endpoint added to one service ({} changes, minSyncPeriod 0): API apply -> real server in IPVS",
            c.n,
            sorted.len()
        )?;
        writeln!(
            t,
            "  outside: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, mean {:.2} ms",
            scale::percentile(&sorted, 50.0),
            scale::percentile(&sorted, 99.0),
            sorted.last().copied().unwrap_or(f64::NAN),
            mean
        )?;
        writeln!(
            t,
            "  daemon metrics: kubeproxy_network_programming_duration_seconds mean {:.2} ms ({} obs); kubeproxy_sync_proxy_rules_duration_seconds mean {:.2} ms ({} syncs)",
            c.npl_mean_ms, c.npl_count, c.sync_mean_ms, c.sync_count
        )?;
        writeln!(
            t,
            "  last change sync (daemon's report): {}",
            c.change_steps
        )?;
    }
    for r in rows {
        write_row_extras(&mut t, r)?;
    }
    for r in rows {
        writeln!(t, "{}", summary_line(r))?;
    }
    std::fs::write(dir.join("scale-results.txt"), &t)?;
    Ok(t)
}

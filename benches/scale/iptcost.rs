//! iptables-cost mode of the scale bench (issue 23): the iptables step of the daemon's full syncs on a
//! kernel whose module autoload fails, with the guest's one CPU kept busy.
//!
//! `cargo bench --bench scale -- iptables-cost` (or `scripts/bench-scale.sh iptables-cost`). In the
//! guest, `/proc/sys/kernel/modprobe` points at a counting wrapper that logs every module request the
//! kernel makes and then runs the real `/sbin/modprobe`, which fails (the guest's modules live outside
//! `/lib/modules`, as in a harness that loads them with `modprobe -d`). On this kernel
//! (`CONFIG_BPFILTER_UMH=m`) every IPv4 x_tables `getsockopt`/`setsockopt` first asks for `bpfilter`:
//! the mode checks that it does, and fails otherwise. `KPRS_BENCH_IPT_HOGS` (default 1) busy-loop
//! processes run throughout. For `KPRS_BENCH_IPT_ROUNDS` (default 3) rounds, the daemon starts on an
//! empty kernel with `KPRS_BENCH_IPT_SERVICES` (default 4) Services, syncPeriod `KPRS_BENCH_IPT_PERIOD`
//! seconds (default 3), and runs its first full sync and `KPRS_BENCH_IPT_NOOPS` (default 6) periodic
//! (no-op) full syncs. `KPRS_BENCH_IPT_BASELINE=<kube-proxy binary>` runs that daemon too, in the same
//! boot, alternating with this one round by round (before/after figures under the same load). For each
//! full sync it prints the daemon's own figures (sync duration, Iptables step, restores) and the module
//! requests the kernel made during it; then, per daemon, the median and max of the Iptables step over
//! first syncs and over no-op syncs, and one machine-readable line `iptables-cost-summary: daemon=..
//! first_median_ms=.. first_max_ms=.. noop_median_ms=.. noop_max_ms=.. noop_requests_median=..
//! noop_requests_max=..`.

use super::{Daemon, Run, flush_kernel, line_time, load, unix};
use anyhow::{Context, Result, bail};
use kube_proxy_rs::kernel::iptables::fingerprint;
use kube_proxy_rs::net::IpFamily;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// Parameters of the mode (from the host's environment).
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone)]
pub struct Params {
    pub services: usize,
    pub rounds: usize,
    pub noops: usize,
    pub hogs: usize,
    pub period_s: u64,
    /// Another daemon binary to run alternately (a private copy, see [`Params::from_env`]).
    pub baseline: Option<PathBuf>,
}

impl Params {
    /// The defaults, overridden by `KPRS_BENCH_IPT_*`; `KPRS_BENCH_IPT_BASELINE` is copied next to
    /// `private` (other builds may replace it while the bench runs).
    pub fn from_env(private: &Path) -> Params {
        let baseline = std::env::var_os("KPRS_BENCH_IPT_BASELINE").map(|src| {
            let dst = private.with_extension("baseline");
            std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("copy {src:?}: {e}"));
            dst
        });
        Params {
            baseline,
            services: super::env_or("KPRS_BENCH_IPT_SERVICES", 4),
            rounds: super::env_or("KPRS_BENCH_IPT_ROUNDS", 3),
            noops: super::env_or("KPRS_BENCH_IPT_NOOPS", 6),
            hogs: super::env_or("KPRS_BENCH_IPT_HOGS", 1),
            period_s: super::env_or("KPRS_BENCH_IPT_PERIOD", 3),
        }
    }

    /// Seconds the host allows the boot.
    pub fn budget(&self) -> u64 {
        let daemons = 1 + u64::from(self.baseline.is_some());
        600 + daemons * self.rounds as u64 * (240 + self.noops as u64 * (self.period_s + 60))
    }
}

/// The results file in the run directory.
pub const RESULTS: &str = "iptables-cost-results.txt";

/// Where the counting wrapper lives and logs (guest tmpfs).
const WRAPPER_DIR: &str = "/run/kprs-kmod";
const MODPROBE_SYSCTL: &str = "/proc/sys/kernel/modprobe";

/// The kernel's module requests, as the counting wrapper logged them.
pub(super) struct Requests {
    log: PathBuf,
    /// Wall clock minus uptime (the wrapper logs uptime; the daemon logs wall-clock time).
    offset: f64,
}

impl Requests {
    /// Installs the wrapper as the kernel's modprobe (it runs the real `/sbin/modprobe` after logging).
    pub(super) fn install() -> Result<Requests> {
        std::fs::create_dir_all(WRAPPER_DIR)?;
        let wrapper = Path::new(WRAPPER_DIR).join("modprobe");
        let log = Path::new(WRAPPER_DIR).join("log");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nread up rest < /proc/uptime\necho \"$up $*\" >> {}\nexec /sbin/modprobe \"$@\"\n",
                log.display()
            ),
        )?;
        super::scale::run_ok(&format!("chmod 755 {}", wrapper.display()))?;
        std::fs::write(&log, "")?;
        std::fs::write(MODPROBE_SYSCTL, wrapper.display().to_string())?;
        let offset = unix(SystemTime::now()) - super::uptime();
        Ok(Requests { log, offset })
    }

    /// Every request so far: (wall-clock time, arguments).
    fn all(&self) -> Vec<(f64, String)> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (t, args) = l.split_once(' ')?;
                Some((t.parse::<f64>().ok()? + self.offset, args.to_string()))
            })
            .collect()
    }

    pub(super) fn count(&self) -> usize {
        self.all().len()
    }

    /// Requests logged between `from` and `to` (wall clock), with a 20 ms margin for the uptime's
    /// 10 ms resolution.
    fn between(&self, from: f64, to: f64) -> usize {
        self.all()
            .iter()
            .filter(|(t, _)| *t >= from - 0.02 && *t <= to + 0.02)
            .count()
    }
}

impl Drop for Requests {
    fn drop(&mut self) {
        let _ = std::fs::write(MODPROBE_SYSCTL, "/sbin/modprobe");
    }
}

/// Busy-loop processes; killed when dropped.
struct Hogs(Vec<Child>);

impl Hogs {
    fn start(n: usize) -> Result<Hogs> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .stdin(Stdio::null())
                    .spawn()
                    .context("start a CPU hog")?,
            );
        }
        Ok(Hogs(v))
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One IPv4 (or IPv6) x_tables `getsockopt` from this process: (module requests, milliseconds).
fn probe(req: &Requests, family: IpFamily) -> Result<(usize, f64)> {
    let before = req.count();
    let t = Instant::now();
    fingerprint::table_size(family, "filter").context("IPT_SO_GET_INFO of the filter table")?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    Ok((req.count() - before, ms))
}

/// Checks the condition (bpfilter not loaded, its autoload failing, every IPv4 x_tables call asking
/// for it) and describes it.
fn condition(req: &Requests) -> Result<String> {
    if Path::new("/sys/module/bpfilter").exists() {
        bail!(
            "bpfilter is loaded: IPv4 x_tables calls do not ask for it (condition not reproduced)"
        );
    }
    if super::scale::run_ok("/sbin/modprobe -q -- bpfilter").is_ok() {
        bail!("`modprobe bpfilter` succeeds in this guest: module autoload does not fail");
    }
    let (v4, v4_ms) = probe(req, IpFamily::V4)?;
    let (v6, v6_ms) = probe(req, IpFamily::V6)?;
    let asked = req.all().last().map(|(_, a)| a.clone()).unwrap_or_default();
    if v4 == 0 {
        bail!(
            "an IPv4 x_tables getsockopt made no module request: this kernel has no bpfilter autoload"
        );
    }
    Ok(format!(
        "one IPv4 x_tables getsockopt: {v4} module request(s) ({asked}), {v4_ms:.1} ms; IPv6: {v6}, {v6_ms:.1} ms"
    ))
}

/// One full sync as the daemon reported it, with the module requests made during it.
#[derive(Debug, Clone)]
struct FullSync {
    /// `this` or `baseline`.
    daemon: &'static str,
    round: usize,
    index: usize,
    duration_ms: f64,
    iptables_ms: f64,
    restores: usize,
    requests: usize,
}

/// A `Duration`'s Debug text (`1.5s`, `812.3ms`, `7.2µs`, `100ns`) in milliseconds.
fn debug_duration_ms(text: &str) -> Option<f64> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().ok()?;
    Some(match unit {
        "s" => v * 1e3,
        "ms" => v,
        "µs" | "us" => v / 1e3,
        "ns" => v / 1e6,
        _ => return None,
    })
}

/// The text after `key` up to the next `,` or `}` (a field of a Debug-printed struct).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line.split_once(key)?.1;
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

/// The full syncs in a daemon log, in order.
fn full_syncs(log: &Path, (daemon, round): (&'static str, usize), req: &Requests) -> Vec<FullSync> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains("sync report") && l.contains("full: true"))
        .enumerate()
        .filter_map(|(index, l)| {
            let end = line_time(l)?;
            let duration_ms = debug_duration_ms(field(l, " duration: ")?)?;
            let iptables_ms = debug_duration_ms(field(l, "Iptables: ")?)?;
            let restores = field(l, "iptables_restores: ")?.parse().ok()?;
            Some(FullSync {
                daemon,
                round,
                index,
                duration_ms,
                iptables_ms,
                restores,
                requests: req.between(end - duration_ms / 1e3, end),
            })
        })
        .collect()
}

/// One round of one daemon (`name`, binary `exe`): an empty kernel, the daemon's first full sync and
/// `p.noops` periodic ones.
fn round(
    run: &mut Run,
    p: &Params,
    req: &Requests,
    (name, exe): (&'static str, &Path),
    r: usize,
) -> Result<Vec<FullSync>> {
    flush_kernel()?;
    let log = run.dir.join(format!("kube-proxy-iptcost-{name}-{r}.log"));
    let period = format!("{}s", p.period_s);
    let mut d = Daemon::spawn(exe, &run.kubeconfig, (&period, "0s"), &log)?;
    let want = 1 + p.noops;
    let cap = Duration::from_secs(180 + p.noops as u64 * (p.period_s + 60));
    let deadline = Instant::now() + cap;
    loop {
        d.check_alive()?;
        if full_syncs(&log, (name, r), req).len() >= want {
            break;
        }
        if Instant::now() > deadline {
            bail!("round {r}: fewer than {want} full syncs within {cap:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    d.stop()?;
    let syncs: Vec<FullSync> = full_syncs(&log, (name, r), req)
        .into_iter()
        .take(want)
        .collect();
    for s in &syncs {
        run.log(&format!(
            "{name} round {r} full sync {}: sync {:.1} ms, Iptables step {:.1} ms, {} restore(s), {} module request(s)",
            s.index, s.duration_ms, s.iptables_ms, s.restores, s.requests
        ));
    }
    Ok(syncs)
}

/// Median and max of `v` (NaN when empty).
fn median_max(v: &[f64]) -> (f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let max = s.last().copied().unwrap_or(f64::NAN);
    (super::scale::percentile(&s, 50.0), max)
}

/// The results table and, per daemon, the summary.
fn results(p: &Params, condition: &str, syncs: &[FullSync]) -> Result<String> {
    let mut t = String::new();
    writeln!(
        t,
        "\niptables cost under a failing module autoload: {} Services, {} CPU hog(s), syncPeriod {}s, {} round(s)",
        p.services, p.hogs, p.period_s, p.rounds
    )?;
    writeln!(t, "condition: {condition}")?;
    writeln!(
        t,
        "{:>8} | {:>5} | {:>4} | {:>12} | {:>15} | {:>8} | {:>15}",
        "daemon", "round", "sync", "sync [ms]", "Iptables [ms]", "restores", "module requests"
    )?;
    for s in syncs {
        writeln!(
            t,
            "{:>8} | {:>5} | {:>4} | {:>12.1} | {:>15.1} | {:>8} | {:>15}",
            s.daemon, s.round, s.index, s.duration_ms, s.iptables_ms, s.restores, s.requests
        )?;
    }
    for daemon in ["baseline", "this"] {
        let mine: Vec<&FullSync> = syncs.iter().filter(|s| s.daemon == daemon).collect();
        if !mine.is_empty() {
            summary(&mut t, daemon, &mine)?;
        }
    }
    Ok(t)
}

/// One daemon's medians and maxima, in words and as the machine-readable line.
fn summary(t: &mut String, daemon: &str, syncs: &[&FullSync]) -> Result<()> {
    let pick = |first: bool, f: fn(&FullSync) -> f64| -> Vec<f64> {
        syncs
            .iter()
            .filter(|s| (s.index == 0) == first)
            .map(|s| f(s))
            .collect()
    };
    let (fm, fx) = median_max(&pick(true, |s| s.iptables_ms));
    let (nm, nx) = median_max(&pick(false, |s| s.iptables_ms));
    let (rm, rx) = median_max(&pick(false, |s| s.requests as f64));
    let (frm, frx) = median_max(&pick(true, |s| s.requests as f64));
    writeln!(
        t,
        "{daemon}: Iptables step of the first full sync median {fm:.1} ms, max {fx:.1} ms ({frm:.0}/{frx:.0} module requests); \
         of no-op full syncs median {nm:.1} ms, max {nx:.1} ms ({rm:.0}/{rx:.0} module requests, median/max)"
    )?;
    writeln!(
        t,
        "iptables-cost-summary: daemon={daemon} first_median_ms={fm:.1} first_max_ms={fx:.1} noop_median_ms={nm:.1} noop_max_ms={nx:.1} noop_requests_median={rm:.0} noop_requests_max={rx:.0}"
    )?;
    Ok(())
}

/// The whole mode, in the guest: writes [`RESULTS`] into the run directory.
pub fn guest(run: &mut Run, p: &Params) -> Result<()> {
    let req = Requests::install()?;
    let quiet = condition(&req)?;
    run.log(&format!("quiet guest: {quiet}"));
    load(run, p.services)?;
    let _hogs = Hogs::start(p.hogs)?;
    std::thread::sleep(Duration::from_millis(500));
    let busy = condition(&req)?;
    run.log(&format!("with {} CPU hog(s): {busy}", p.hogs));
    let this = run.daemon.clone();
    let mut daemons = vec![("this", this.as_path())];
    daemons.extend(p.baseline.as_deref().map(|b| ("baseline", b)));
    let mut syncs = Vec::new();
    for r in 0..p.rounds {
        // Alternate which daemon goes first, so neither always follows the same one.
        let mut order = daemons.clone();
        if r % 2 == 1 {
            order.reverse();
        }
        for d in order {
            syncs.extend(round(run, p, &req, d, r)?);
        }
    }
    let text = results(p, &format!("{quiet}; with the hog(s): {busy}"), &syncs)?;
    std::fs::write(run.dir.join(RESULTS), &text)?;
    println!("{text}");
    Ok(())
}

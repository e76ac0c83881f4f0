//! The kernel-read floor of a full sync: each read a no-op periodic full sync makes, timed alone in the
//! guest against the state the daemon programmed (the daemon stopped), five times each, with the kernel
//! I/O it took (the daemon's own backends, counted by `kernel::io_counts`). Besides the daemon's reads
//! (decoded as the daemon decodes them), the same reads with nothing decoded, so that what the kernel
//! costs and what our decoding costs show apart; and two calibrations of this boot (a system call, a
//! page fault), which UML makes far dearer than a real node.

use super::Run;
use anyhow::{Context, Result};
use kube_proxy_rs::kernel::io_counts::{Backend, Call, Direction, IoCounts};
use kube_proxy_rs::kernel::ipset::IpSets;
use kube_proxy_rs::kernel::ipset::netlink::NetlinkIpSets;
use kube_proxy_rs::kernel::iptables::fingerprint::{self, SizeHints};
use kube_proxy_rs::kernel::ipvs::Ipvs;
use kube_proxy_rs::kernel::ipvs::codec::{IpvsMessage, cmd};
use kube_proxy_rs::kernel::ipvs::netlink::{NetlinkIpvs, resolve_family};
use kube_proxy_rs::kernel::ipvs::procfs::ProcView;
use kube_proxy_rs::kernel::link::rtnetlink::RtnetlinkLinks;
use kube_proxy_rs::kernel::link::{DUMMY_DEVICE, Links};
use kube_proxy_rs::kernel::netlink::NlSocket;
use kube_proxy_rs::net::IpFamily;
use netlink_packet_generic::GenlMessage;
use std::fmt::Write as _;
use std::io::Read as _;
use std::time::Instant;

const REPS: usize = 5;

/// One read's figures: each repetition's milliseconds and the I/O of one repetition.
struct Timed {
    name: &'static str,
    ms: Vec<f64>,
    io: IoCounts,
}

impl Timed {
    fn median(&self) -> f64 {
        let mut v = self.ms.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }
}

/// Runs `f` [`REPS`] times.
fn time(name: &'static str, mut f: impl FnMut() -> Result<()>) -> Result<Timed> {
    let mut ms = Vec::new();
    let mut io = IoCounts::default();
    for _ in 0..REPS {
        let before = IoCounts::now();
        let t = Instant::now();
        f().with_context(|| name.to_string())?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        io = IoCounts::now().since(&before);
    }
    Ok(Timed { name, ms, io })
}

/// The IPVS services dump with every answer only counted (no decoding, nothing kept).
fn raw_services(sock: &mut NlSocket, family: u16) -> Result<()> {
    let mut m = GenlMessage::from_payload(IpvsMessage {
        cmd: cmd::GET_SERVICE,
        attrs: vec![],
    });
    m.set_resolved_family_id(family);
    let mut n = 0usize;
    sock.dump_each(m, |_, _| {
        n += 1;
        Ok(())
    })
    .map_err(|e| anyhow::anyhow!("IPVS dump: {e}"))?;
    anyhow::ensure!(n > 0, "no service in the dump");
    Ok(())
}

/// `/proc/net/ip_vs` read through a 64 KiB buffer, nothing parsed.
fn raw_view(buf: &mut [u8]) -> Result<()> {
    let mut f = std::fs::File::open("/proc/net/ip_vs")?;
    while f.read(buf)? > 0 {}
    Ok(())
}

/// A cheap system call, 1,000 times (ms for all).
fn syscalls() -> Result<()> {
    for _ in 0..1000 {
        // SAFETY: getppid takes nothing and cannot fail.
        unsafe { libc::getppid() };
    }
    Ok(())
}

/// 4 MiB of fresh anonymous memory touched once: 1,024 page faults.
fn faults() -> Result<()> {
    let mut v: Vec<u8> = Vec::with_capacity(4 << 20);
    for i in (0..4 << 20).step_by(4096) {
        v.spare_capacity_mut()[i].write(1);
    }
    std::hint::black_box(&v);
    Ok(())
}

/// The IPv4 virtual servers through IPVS's socket options (`IP_VS_SO_GET_INFO`, then
/// `IP_VS_SO_GET_SERVICES`: one call for the whole table, with each one's real-server count).
fn sockopt_services() -> Result<()> {
    const BASE: libc::c_int = 64 + 1024 + 64;
    // struct ip_vs_service_entry (its u64 counters align it to 8) after the 8-byte-aligned count.
    const ENTRY: usize = 104;
    const HEAD: usize = 8;
    // SAFETY: socket(2) takes only integers.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
    anyhow::ensure!(fd >= 0, "raw socket");
    let get = |opt: libc::c_int, buf: &mut [u8]| {
        let mut len = buf.len() as libc::socklen_t;
        // SAFETY: buf is valid for len bytes.
        let rc = unsafe {
            libc::getsockopt(fd, libc::IPPROTO_IP, opt, buf.as_mut_ptr().cast(), &mut len)
        };
        rc == 0
    };
    let mut info = [0u8; 12];
    let ok = get(BASE + 1, &mut info);
    let n = u32::from_ne_bytes([info[8], info[9], info[10], info[11]]);
    let mut buf = vec![0u8; HEAD + ENTRY * n as usize];
    buf[..4].copy_from_slice(&n.to_ne_bytes());
    let ok = ok && get(BASE + 2, &mut buf);
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    anyhow::ensure!(ok, "IPVS getsockopt failed");
    Ok(())
}

/// `/proc/net/ip_vs` from its start to `skip` virtual servers untimed, then `take` more timed (ms):
/// what reading one slice of the table costs at that depth.
fn view_slice(skip: usize, take: usize) -> Result<f64> {
    let mut f = std::io::BufReader::new(std::fs::File::open("/proc/net/ip_vs")?);
    let mut line = String::new();
    let mut seen = 0usize;
    let mut t = None;
    loop {
        line.clear();
        if std::io::BufRead::read_line(&mut f, &mut line)? == 0 {
            break;
        }
        if line.starts_with("TCP") || line.starts_with("UDP") {
            seen += 1;
            if seen == skip + 1 {
                t = Some(Instant::now());
            }
            if seen > skip + take {
                break;
            }
        }
    }
    Ok(t.map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3))
}

/// Measures every read and returns the table (also logged).
pub fn floor(run: &mut Run, n: usize) -> Result<String> {
    let mut ipsets = NetlinkIpSets::new()?;
    let mut ipvs = NetlinkIpvs::new()?;
    let mut raw = NlSocket::new(netlink_sys::protocols::NETLINK_GENERIC, Backend::Ipvs)
        .map_err(|e| anyhow::anyhow!("open generic netlink: {e}"))?;
    let family = resolve_family(&mut raw, "IPVS")?;
    let mut view = ProcView::open().context("no /proc/net/ip_vs")?;
    let mut links = RtnetlinkLinks::new()?;
    let mut buf = vec![0u8; 64 * 1024];
    let tables = ["filter", "nat"];
    let mut hints = SizeHints::default();
    let mut xt = |f: IpFamily| {
        fingerprint::read(f, &tables, &mut hints, false)
            .map(drop)
            .context("x_tables read")
    };
    // Once each first: the steady state (size hints known, buffers grown).
    xt(IpFamily::V4)?;
    xt(IpFamily::V6)?;
    let rows = vec![
        time("ipset dump (decoded)", || {
            ipsets.dump().map(drop).map_err(Into::into)
        })?,
        time("IPVS services dump (decoded)", || {
            ipvs.services().map(drop).map_err(Into::into)
        })?,
        time("IPVS services dump (raw)", || {
            raw_services(&mut raw, family)
        })?,
        time("/proc/net/ip_vs (parsed)", || {
            view.read().map(drop).map_err(anyhow::Error::msg)
        })?,
        time("/proc/net/ip_vs (read only)", || raw_view(&mut buf))?,
        time("IPVS IPv4 services (getsockopt)", sockopt_services)?,
        time("kube-ipvs0 addresses", || {
            links.addresses(DUMMY_DEVICE).map(drop).map_err(Into::into)
        })?,
        time("all local addresses", || {
            links.local_addresses().map(drop).map_err(Into::into)
        })?,
        time("x_tables IPv4 filter+nat", || xt(IpFamily::V4))?,
        time("x_tables IPv6 filter+nat", || xt(IpFamily::V6))?,
        time("calibration: 1,000 getppid", syscalls)?,
        time("calibration: 1,024 page faults", faults)?,
    ];
    let mut t = format!("kernel-read floor at N={n} (median of {REPS}, ms; I/O of one read):\n");
    for r in &rows {
        let io = &r.io;
        let b = |b: Backend| {
            let calls: u64 = Call::ALL.iter().map(|c| io.calls(b, *c)).sum();
            (
                calls,
                io.bytes(b, Direction::In),
                io.messages(b, Direction::In),
            )
        };
        let (calls, bytes, msgs) = Backend::ALL.iter().fold((0, 0, 0), |a, x| {
            let (c, by, m) = b(*x);
            (a.0 + c, a.1 + by, a.2 + m)
        });
        let each: Vec<String> = r.ms.iter().map(|m| format!("{m:.1}")).collect();
        let _ = writeln!(
            t,
            "  {:<34} {:>9.1} ms [{}]  calls {calls}, bytes in {bytes}, messages in {msgs}",
            r.name,
            r.median(),
            each.join(", ")
        );
    }
    for (skip, take) in [(0, 2000), (n / 2, 2000), (n.saturating_sub(1000), 2000)] {
        let ms: Vec<f64> = (0..3)
            .map(|_| view_slice(skip, take))
            .collect::<Result<_>>()?;
        let _ = writeln!(
            t,
            "  /proc/net/ip_vs: {take} virtual servers after {skip}: {:.1} ms [{}]",
            median3(&ms),
            ms.iter()
                .map(|m| format!("{m:.1}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let _ = writeln!(t, "{}", bpfilter_loaded()?);
    for line in t.lines() {
        run.log(line);
    }
    Ok(t)
}

fn median3(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Loads the bpfilter module from the guest's module tree (as on a node whose modprobe finds it: the
/// kernel then stops asking for it on every IPv4 x_tables call) and times the IPv4 read again. The
/// module stays loaded for the rest of the boot: measured last.
fn bpfilter_loaded() -> Result<String> {
    if super::scale::run_ok("modprobe -d /run/m bpfilter").is_err() {
        return Ok("  bpfilter: the module does not load in this guest".into());
    }
    let mut hints = SizeHints::default();
    let tables = ["filter", "nat"];
    let mut ms = Vec::new();
    for _ in 0..=REPS {
        let t = Instant::now();
        fingerprint::read(IpFamily::V4, &tables, &mut hints, false).context("x_tables read")?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.remove(0);
    Ok(format!(
        "  x_tables IPv4 filter+nat, bpfilter loaded: {:.1} ms [{}]",
        median3(&ms),
        ms.iter()
            .map(|m| format!("{m:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

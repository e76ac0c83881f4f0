//! Pods as network namespaces inside the UML guest, with TCP/UDP echo-name servers and client helpers.
//!
//! Topology (routed, no bridge): each pod gets a veth pair; the pod side `eth0` holds the pod IP as /32 with
//! a default route via the gateway address, which is assigned (/32) to the host-side veth in the root
//! namespace; the root namespace routes the pod IP /32 to that host-side veth. Several pods may share one
//! gateway address. This works with IPVS in masquerade (NAT) mode: replies come back through the root
//! namespace, where IPVS reverses the translation.
//!
//! [`Pod::create_in`] puts the host side in another namespace instead (a node of a multi-node cluster,
//! `tests/common/cluster/`, or a router with its outside clients).
//!
//! Servers answer every TCP connection (plain or HTTP/1.x), SCTP association and UDP datagram with the pod
//! name (followed by the client address they saw, for a pod made with [`Pod::reporting_peers`]), and
//! remember the peer address of each request so tests can check the source IP a pod saw.
#![allow(dead_code)]

use anyhow::{Context, Result, anyhow, bail};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Runs a program with arguments; returns stdout, or an error with stderr on failure.
fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("spawn {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `ip -batch -` (in namespace `netns` when given) with `commands`, one per line.
fn batch(netns: Option<&str>, commands: &str) -> Result<()> {
    let mut cmd = Command::new("ip");
    if let Some(ns) = netns {
        cmd.args(["-n", ns]);
    }
    let mut child = cmd
        .args(["-batch", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("spawn ip -batch")?;
    child
        .stdin
        .take()
        .context("ip stdin")?
        .write_all(commands.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "ip -batch failed ({}): {}\ncommands:\n{commands}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Moves the calling thread into the network namespace `/run/netns/<name>`.
pub fn enter_netns(name: &str) -> Result<()> {
    let path = format!("/run/netns/{name}");
    let f = std::fs::File::open(&path).with_context(|| format!("open {path}"))?;
    // SAFETY: setns on a valid namespace fd; it only changes the calling thread's network namespace.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if r != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("setns {path}"));
    }
    Ok(())
}

/// Runs `f` on a fresh thread inside the network namespace `name` and returns its result.
pub fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| -> Result<T> {
            enter_netns(name)?;
            Ok(f())
        })
        .join()
        .map_err(|_| anyhow!("thread in netns {name} panicked"))?
    })
}

/// Writes `value` to `/proc/sys/<key>` of namespace `ns` (None: the calling thread's).
pub fn write_sysctl(ns: Option<&str>, key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{key}");
    let write = || std::fs::write(&path, value).with_context(|| format!("write {path}"));
    match ns {
        None => write(),
        Some(ns) => in_netns(ns, write)?,
    }
}

/// Opens a TCP connection, sends a line, and returns the (trimmed) reply read until the peer closes.
pub fn tcp_request(addr: IpAddr, port: u16, timeout: Duration) -> Result<String> {
    let sa = SocketAddr::new(addr, port);
    let s = TcpStream::connect_timeout(&sa, timeout).with_context(|| format!("connect {sa}"))?;
    exchange(s, sa, timeout)
}

/// Sends a line on a connected stream and returns the (trimmed) reply read until the peer closes.
fn exchange(mut s: TcpStream, sa: SocketAddr, timeout: Duration) -> Result<String> {
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.write_all(b"ping\n")
        .with_context(|| format!("send to {sa}"))?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .with_context(|| format!("read from {sa}"))?;
    Ok(out.trim().to_string())
}

/// Sends one UDP datagram and returns the (trimmed) reply.
pub fn udp_request(addr: IpAddr, port: u16, timeout: Duration) -> Result<String> {
    let sa = SocketAddr::new(addr, port);
    let bind: SocketAddr = if addr.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(bind)?;
    s.set_read_timeout(Some(timeout))?;
    s.connect(sa)?;
    s.send(b"ping")
        .with_context(|| format!("send to udp {sa}"))?;
    let mut buf = [0u8; 2048];
    let n = s
        .recv(&mut buf)
        .with_context(|| format!("recv from udp {sa}"))?;
    Ok(String::from_utf8_lossy(&buf[..n]).trim().to_string())
}

/// Opens an SCTP association (one-to-one style socket), sends a line and returns the (trimmed) reply read
/// until the peer shuts down; the same exchange as [`tcp_request`].
pub fn sctp_request(addr: IpAddr, port: u16, timeout: Duration) -> Result<String> {
    let sa = SocketAddr::new(addr, port);
    exchange(
        connect_stream(libc::IPPROTO_SCTP, None, sa, timeout)?,
        sa,
        timeout,
    )
}

/// [`tcp_request`] from source `src` (one of the caller's namespace's addresses; port 0 for any port, else
/// that port, reusable at once: a fixed flow, e.g. for a scheduler hashing the source port).
pub fn tcp_request_from(
    src: SocketAddr,
    addr: IpAddr,
    port: u16,
    timeout: Duration,
) -> Result<String> {
    let sa = SocketAddr::new(addr, port);
    exchange(
        connect_stream(libc::IPPROTO_TCP, Some(src), sa, timeout)?,
        sa,
        timeout,
    )
}

/// A `SOCK_STREAM` socket of `protocol` (TCP or SCTP) bound to `src` when given (`SO_REUSEADDR` for a
/// fixed port), connected to `sa` within `timeout` (a blocking connect waits at most the send timeout).
fn connect_stream(
    protocol: libc::c_int,
    src: Option<SocketAddr>,
    sa: SocketAddr,
    timeout: Duration,
) -> Result<TcpStream> {
    let s = stream_socket(sa.is_ipv6(), protocol)?;
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: libc::suseconds_t::from(timeout.subsec_micros()),
    };
    setsockopt(&s, libc::SO_SNDTIMEO, &tv).context("SO_SNDTIMEO")?;
    if let Some(src) = src {
        let one: libc::c_int = 1;
        setsockopt(&s, libc::SO_REUSEADDR, &one).context("SO_REUSEADDR")?;
        address_call(&s, src, libc::bind).with_context(|| format!("bind {src}"))?;
    }
    address_call(&s, sa, libc::connect)
        .with_context(|| format!("connect {sa} (protocol {protocol})"))?;
    Ok(TcpStream::from(s))
}

/// `bind(2)` or `connect(2)` (`call`) of socket `s` to `addr`.
fn address_call(
    s: &std::os::fd::OwnedFd,
    addr: SocketAddr,
    call: unsafe extern "C" fn(libc::c_int, *const libc::sockaddr, libc::socklen_t) -> libc::c_int,
) -> std::io::Result<()> {
    let (raw, len) = sockaddr(addr);
    // SAFETY: `raw` is a sockaddr of `len` bytes valid for the call; `s` is an open socket.
    let r = unsafe {
        call(
            s.as_raw_fd(),
            (&raw as *const libc::sockaddr_storage).cast(),
            len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A new `SOCK_STREAM` socket of `protocol` (for SCTP, one-to-one style); IPv6 ones also take IPv4 (not
/// `IPV6_V6ONLY`).
fn stream_socket(v6: bool, protocol: libc::c_int) -> Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: socket(2) with constant arguments; the result is checked before use.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM, protocol) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| {
            format!("socket(protocol {protocol}): for SCTP, is the sctp module loaded?")
        });
    }
    // SAFETY: `fd` was just returned by socket(2) and is owned by nothing else.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    if v6 {
        let off: libc::c_int = 0;
        setsockopt_level(&owned, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, &off)
            .context("IPV6_V6ONLY")?;
    }
    Ok(owned)
}

fn setsockopt<T>(fd: &std::os::fd::OwnedFd, opt: libc::c_int, value: &T) -> std::io::Result<()> {
    setsockopt_level(fd, libc::SOL_SOCKET, opt, value)
}

fn setsockopt_level<T>(
    fd: &std::os::fd::OwnedFd,
    level: libc::c_int,
    opt: libc::c_int,
    value: &T,
) -> std::io::Result<()> {
    let len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` points to a live `T` of `len` bytes; `fd` is an open socket.
    let r =
        unsafe { libc::setsockopt(fd.as_raw_fd(), level, opt, (value as *const T).cast(), len) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `sa` as a `sockaddr_storage` and its length.
fn sockaddr(sa: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut raw: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match sa {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut raw as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut raw as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (raw, len as libc::socklen_t)
}

/// An SCTP listener on `[::]:port` (IPv4 too), as a `TcpListener` (accept and read/write work alike).
fn sctp_listener(port: u16) -> Result<TcpListener> {
    let s = stream_socket(true, libc::IPPROTO_SCTP)?;
    let one: libc::c_int = 1;
    setsockopt(&s, libc::SO_REUSEADDR, &one).context("SO_REUSEADDR")?;
    let any = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port);
    address_call(&s, any, libc::bind).with_context(|| format!("bind sctp {port}"))?;
    // SAFETY: listen(2) on a bound socket we own.
    if unsafe { libc::listen(s.as_raw_fd(), 64) } != 0 {
        return Err(std::io::Error::last_os_error()).context("listen sctp");
    }
    Ok(TcpListener::from(s))
}

/// Host-side interface name for a pod (at most 15 bytes).
fn host_ifname(pod: &str) -> String {
    let direct = format!("vp-{pod}");
    if direct.len() <= 15 && pod.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return direct;
    }
    let hash = pod.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    });
    format!("vp{:012x}", hash & 0xffff_ffff_ffff)
}

/// A pod: a network namespace with one veth link to the root namespace.
pub struct Pod {
    /// Pod (and namespace) name; also what its servers answer.
    pub name: String,
    /// Pod IP.
    pub ip: Ipv4Addr,
    /// Gateway address (on the host-side veth).
    pub gateway: Ipv4Addr,
    /// IPv6 address and gateway, once added with [`Pod::add_ipv6`].
    pub ipv6: Option<(Ipv6Addr, Ipv6Addr)>,
    /// Host-side veth name.
    pub host_if: String,
    /// Namespace holding the host side (None: the root namespace).
    pub host_ns: Option<String>,
    /// Whether replies carry the client address the pod saw ([`Pod::reporting_peers`]).
    report_peer: bool,
    stop: Arc<AtomicBool>,
    servers: Mutex<Vec<JoinHandle<()>>>,
    peers: Arc<Mutex<Vec<SocketAddr>>>,
}

impl Pod {
    /// Creates namespace `name` with `eth0` = `ip`/32, default route via `gateway`, and the root-namespace
    /// side (`gateway`/32 on the host veth, route `ip`/32 to it, IPv4 forwarding on).
    pub fn create(name: &str, ip: &str, gateway: &str) -> Result<Pod> {
        Pod::create_in(None, name, ip, gateway)
    }

    /// [`Pod::create`] with the host side in namespace `host_ns` (None: the root namespace).
    pub fn create_in(host_ns: Option<&str>, name: &str, ip: &str, gateway: &str) -> Result<Pod> {
        let ip: Ipv4Addr = ip.parse().with_context(|| format!("pod IP {ip}"))?;
        let gw: Ipv4Addr = gateway
            .parse()
            .with_context(|| format!("gateway {gateway}"))?;
        let host_if = host_ifname(name);
        let pod = Pod {
            name: name.to_string(),
            ip,
            gateway: gw,
            ipv6: None,
            host_if: host_if.clone(),
            host_ns: host_ns.map(str::to_string),
            report_peer: false,
            stop: Arc::new(AtomicBool::new(false)),
            servers: Mutex::new(Vec::new()),
            peers: Arc::new(Mutex::new(Vec::new())),
        };
        run("ip", &["netns", "add", name])?;
        batch(
            host_ns,
            &format!(
                "link add {host_if} type veth peer name eth0 netns {name}\n\
                 link set {host_if} up\n\
                 addr add {gw}/32 dev {host_if}\n\
                 route add {ip}/32 dev {host_if} src {gw}\n"
            ),
        )?;
        batch(
            Some(name),
            &format!(
                "link set lo up\n\
                 link set eth0 up\n\
                 addr add {ip}/32 dev eth0\n\
                 route add {gw}/32 dev eth0 scope link\n\
                 route add default via {gw} dev eth0\n"
            ),
        )?;
        write_sysctl(host_ns, "net/ipv4/ip_forward", "1")?;
        Ok(pod)
    }

    /// The pod, its servers answering "`name` `client-ip`" (the address they saw) instead of the name alone.
    /// Set before the first `serve_*` call.
    pub fn reporting_peers(mut self) -> Pod {
        self.report_peer = true;
        self
    }

    /// Adds an IPv6 address to the pod the same way: `ip`/128 on `eth0` with a default route via `gateway`,
    /// `gateway`/128 on the host-side veth, a host route `ip`/128 to it, IPv6 forwarding on. No DAD.
    pub fn add_ipv6(&mut self, ip: &str, gateway: &str) -> Result<()> {
        let ip: Ipv6Addr = ip.parse().with_context(|| format!("pod IPv6 {ip}"))?;
        let gw: Ipv6Addr = gateway
            .parse()
            .with_context(|| format!("IPv6 gateway {gateway}"))?;
        let host_if = &self.host_if;
        batch(
            self.host_ns.as_deref(),
            &format!(
                "addr add {gw}/128 dev {host_if} nodad\n\
                 route add {ip}/128 dev {host_if}\n"
            ),
        )?;
        batch(
            Some(&self.name),
            &format!(
                "addr add {ip}/128 dev eth0 nodad\n\
                 route add {gw}/128 dev eth0\n\
                 route add ::/0 via {gw} dev eth0\n"
            ),
        )?;
        write_sysctl(self.host_ns.as_deref(), "net/ipv6/conf/all/forwarding", "1")?;
        self.ipv6 = Some((ip, gw));
        Ok(())
    }

    /// Runs `sh -c cmd` inside the pod's namespace; returns stdout.
    pub fn exec(&self, cmd: &str) -> Result<String> {
        run("ip", &["netns", "exec", &self.name, "sh", "-c", cmd])
    }

    /// Runs `f` on a thread inside the pod's namespace.
    pub fn run_in<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        in_netns(&self.name, f)
    }

    /// TCP request from inside the pod (source IP = pod IP).
    pub fn tcp_request(&self, addr: IpAddr, port: u16, timeout: Duration) -> Result<String> {
        self.run_in(|| tcp_request(addr, port, timeout))?
    }

    /// UDP request from inside the pod (source IP = pod IP).
    pub fn udp_request(&self, addr: IpAddr, port: u16, timeout: Duration) -> Result<String> {
        self.run_in(|| udp_request(addr, port, timeout))?
    }

    /// Peer addresses of every request the pod's servers answered so far.
    pub fn peers(&self) -> Vec<SocketAddr> {
        self.peers.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Serves TCP on `port` (all pod addresses): every connection is answered with the pod name (as an HTTP
    /// response when the request looks like HTTP) and closed. Returns once the socket is bound.
    pub fn serve_tcp(&self, port: u16) -> Result<()> {
        let name = self.name.clone();
        self.serve_stream(move || {
            // Dual-stack socket when IPv6 is available, IPv4 only otherwise.
            TcpListener::bind((Ipv6Addr::UNSPECIFIED, port))
                .or_else(|_| TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)))
                .with_context(|| format!("bind tcp {port} in {name}"))
        })
    }

    /// Serves SCTP on `port` the same way as [`Pod::serve_tcp`] (plain lines only).
    pub fn serve_sctp(&self, port: u16) -> Result<()> {
        let name = self.name.clone();
        self.serve_stream(move || sctp_listener(port).with_context(|| format!("in {name}")))
    }

    /// Starts python's `http.server` on `port` at the pod IP, serving and logging in `dir`, and waits until it
    /// answers a GET. Unlike [`Pod::serve_tcp`] it keeps an idle connection open, for tests that count
    /// held connections; the process ends with the guest.
    pub fn serve_python_http(&self, port: u16, dir: &std::path::Path) -> Result<()> {
        let (name, ip) = (&self.name, self.ip);
        let log = dir.join(format!("{name}-http.log"));
        let start = format!(
            "cd {} && (ip netns exec {name} /usr/bin/python3 -m http.server {port} --bind {ip} >{} 2>&1 &)",
            dir.display(),
            log.display()
        );
        run("sh", &["-c", &start])?;
        let url = format!("http://{ip}:{port}/");
        for _ in 0..100 {
            if run("curl", &["-s", "-o", "/dev/null", &url]).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        bail!("python http.server in {name} did not start: {text}")
    }

    /// Accepts on the listener `bind` makes inside the pod, answering each connection on its own thread.
    fn serve_stream(
        &self,
        bind: impl FnOnce() -> Result<TcpListener> + Send + 'static,
    ) -> Result<()> {
        let (name, stop, peers) = (self.name.clone(), self.stop.clone(), self.peers.clone());
        let report = self.report_peer;
        self.spawn_server(move || {
            enter_netns(&name)?;
            let l = bind()?;
            l.set_nonblocking(true)?;
            Ok(move || {
                while !stop.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((conn, peer)) => {
                            let peer = unmap(peer);
                            peers.lock().unwrap_or_else(|e| e.into_inner()).push(peer);
                            let reply = answer_text(&name, report, peer);
                            std::thread::spawn(move || answer_tcp(conn, &reply));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        })
    }

    /// Serves UDP on `port`: every datagram is answered with the pod name. Returns once the socket is bound.
    pub fn serve_udp(&self, port: u16) -> Result<()> {
        self.serve_udp_with(port, false)
    }

    /// Serves UDP on `port`, answering every datagram with `<pod name> <payload>` (so a client can match
    /// answers to datagrams). Returns once the socket is bound.
    pub fn serve_udp_echo(&self, port: u16) -> Result<()> {
        self.serve_udp_with(port, true)
    }

    fn serve_udp_with(&self, port: u16, echo: bool) -> Result<()> {
        let (name, stop, peers) = (self.name.clone(), self.stop.clone(), self.peers.clone());
        let report = self.report_peer;
        self.spawn_server(move || {
            enter_netns(&name)?;
            let s = UdpSocket::bind((Ipv6Addr::UNSPECIFIED, port))
                .or_else(|_| UdpSocket::bind((Ipv4Addr::UNSPECIFIED, port)))
                .with_context(|| format!("bind udp {port} in {name}"))?;
            s.set_read_timeout(Some(Duration::from_millis(20)))?;
            Ok(move || {
                let mut buf = [0u8; 2048];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, peer)) = s.recv_from(&mut buf) {
                        let seen = unmap(peer);
                        peers.lock().unwrap_or_else(|e| e.into_inner()).push(seen);
                        let mut answer = answer_text(&name, report, seen).into_bytes();
                        if echo {
                            answer.push(b' ');
                            answer.extend_from_slice(&buf[..n]);
                        }
                        let _ = s.send_to(&answer, peer);
                    }
                }
            })
        })
    }

    /// Spawns a server thread: `setup` runs first (enter netns, bind) and its error is returned here; the
    /// loop it returns then runs until the pod is dropped.
    fn spawn_server<L: FnOnce() + Send + 'static>(
        &self,
        setup: impl FnOnce() -> Result<L> + Send + 'static,
    ) -> Result<()> {
        let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
        let handle = std::thread::spawn(move || match setup() {
            Ok(serve) => {
                let _ = tx.send(Ok(()));
                serve();
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        });
        let res = rx
            .recv()
            .map_err(|_| anyhow!("server thread of {} died", self.name))?;
        self.servers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(handle);
        res
    }
}

/// What a server answers: the pod name, and with `report` the client address it saw.
fn answer_text(name: &str, report: bool, peer: SocketAddr) -> String {
    if report {
        format!("{name} {}", peer.ip())
    } else {
        name.to_string()
    }
}

/// An answer of a pod made with [`Pod::reporting_peers`]: who answered and the client address it saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The answering pod's name.
    pub pod: String,
    /// The client (source) address the pod saw.
    pub client: IpAddr,
}

impl Seen {
    /// Parses "`name` `client-ip`".
    pub fn parse(reply: &str) -> Result<Seen> {
        let (pod, client) = reply
            .trim()
            .split_once(' ')
            .ok_or_else(|| anyhow!("not a reporting pod's answer: {reply:?}"))?;
        let client = client
            .parse()
            .with_context(|| format!("client address in {reply:?}"))?;
        Ok(Seen {
            pod: pod.to_string(),
            client,
        })
    }
}

/// An IPv4-mapped IPv6 peer address (from a dual-stack socket) as the IPv4 address it is.
fn unmap(peer: SocketAddr) -> SocketAddr {
    match peer.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), peer.port()),
            None => peer,
        },
        IpAddr::V4(_) => peer,
    }
}

/// Answers one TCP connection with `name`.
fn answer_tcp(mut conn: TcpStream, name: &str) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    // Read until a full HTTP header, a line, EOF, or the timeout.
    while let Ok(n) = conn.read(&mut chunk) {
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let http = buf
            .windows(5)
            .next()
            .is_some_and(|w| w.starts_with(b"GET ") || w == b"HEAD " || w == b"POST ");
        if (http && buf.windows(4).any(|w| w == b"\r\n\r\n")) || (!http && buf.contains(&b'\n')) {
            break;
        }
        if buf.len() > 16 * 1024 {
            break;
        }
    }
    let is_http =
        buf.starts_with(b"GET ") || buf.starts_with(b"HEAD ") || buf.starts_with(b"POST ");
    let reply = if is_http {
        format!(
            "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{name}",
            name.len()
        )
    } else {
        name.to_string()
    };
    let _ = conn.write_all(reply.as_bytes());
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

impl Drop for Pod {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self
            .servers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = h.join();
        }
        let _ = match &self.host_ns {
            Some(ns) => run("ip", &["-n", ns, "link", "del", &self.host_if]),
            None => run("ip", &["link", "del", &self.host_if]),
        };
        let _ = run("ip", &["netns", "del", &self.name]);
    }
}

/// Pod `name` at `ip` (gateway `gateway`) with python's HTTP server on 8080 ([`Pod::serve_python_http`],
/// in the guest's run directory); panics when it cannot be made.
pub fn python_http_pod(name: &str, ip: &str, gateway: &str) -> Pod {
    let pod = Pod::create(name, ip, gateway).unwrap_or_else(|e| panic!("pod {name}: {e:#}"));
    let dir = super::uml::guest_run_dir().expect("inside the UML guest");
    pod.serve_python_http(8080, &dir)
        .unwrap_or_else(|e| panic!("HTTP server in {name}: {e:#}"));
    pod
}

/// Serves TCP `port` in the pod's namespace: every line received is answered with the pod name, and a
/// connection stays open until the client closes it (for tests that hold a connection across changes).
pub fn serve_hold(pod: &Pod, port: u16) {
    let name = pod.name.clone();
    let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
    std::thread::spawn(move || {
        let bound = enter_netns(&name)
            .map_err(|e| e.to_string())
            .and_then(|()| TcpListener::bind(("0.0.0.0", port)).map_err(|e| e.to_string()));
        let l = match bound {
            Ok(l) => l,
            Err(e) => return drop(tx.send(Err(e))),
        };
        let _ = tx.send(Ok(()));
        for conn in l.incoming().flatten() {
            let name = name.clone();
            std::thread::spawn(move || {
                let Ok(mut w) = conn.try_clone() else { return };
                for line in std::io::BufRead::lines(std::io::BufReader::new(conn)) {
                    if line.is_err() || writeln!(w, "{name}").is_err() {
                        return;
                    }
                }
            });
        }
    });
    if let Err(e) = rx
        .recv()
        .unwrap_or_else(|_| Err("server thread died".into()))
    {
        panic!("hold server in {}: {e}", pod.name);
    }
}

/// A connection held open from a pod to a [`serve_hold`] server behind some address, asked again and
/// again (tests of what keeps working while the daemon changes the rules under it).
pub struct Held {
    w: TcpStream,
    r: std::io::BufReader<TcpStream>,
}

impl Held {
    /// Connects from `client`'s namespace to `addr` (panics when it cannot).
    pub fn open(client: &Pod, addr: SocketAddr, timeout: Duration) -> Held {
        let w = client
            .run_in(|| TcpStream::connect_timeout(&addr, timeout))
            .unwrap_or_else(|e| panic!("enter {}: {e:#}", client.name))
            .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        Held::over(w, timeout)
    }

    /// Connects from the calling thread's namespace to `addr` (panics when it cannot).
    pub fn connect(addr: SocketAddr, timeout: Duration) -> Held {
        let w = TcpStream::connect_timeout(&addr, timeout)
            .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        Held::over(w, timeout)
    }

    fn over(w: TcpStream, timeout: Duration) -> Held {
        w.set_read_timeout(Some(timeout)).expect("read timeout");
        let r = std::io::BufReader::new(w.try_clone().expect("clone the stream"));
        Held { w, r }
    }

    /// Closes with a RST (SO_LINGER 0): IPVS moves the connection to CLOSE (10 s) instead of TIME_WAIT
    /// (2 min).
    pub fn reset(self) {
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: setsockopt on an open socket with a correctly sized linger struct.
        unsafe {
            libc::setsockopt(
                self.w.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
    }

    /// Sends a line and returns the answering pod's name.
    pub fn ask(&mut self) -> String {
        writeln!(self.w, "hello").expect("send on the held connection");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut self.r, &mut line).expect("answer on the held connection");
        assert!(!line.is_empty(), "held connection closed by the peer");
        line.trim().to_string()
    }
}

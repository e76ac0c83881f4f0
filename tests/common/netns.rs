//! Pods as network namespaces inside the UML guest, with TCP/UDP echo-name servers and client helpers.
//!
//! Topology (routed, no bridge): each pod gets a veth pair; the pod side `eth0` holds the pod IP as /32 with
//! a default route via the gateway address, which is assigned (/32) to the host-side veth in the root
//! namespace; the root namespace routes the pod IP /32 to that host-side veth. Several pods may share one
//! gateway address. This works with IPVS in masquerade (NAT) mode: replies come back through the root
//! namespace, where IPVS reverses the translation.
//!
//! Servers answer every TCP connection (plain or HTTP/1.x) and every UDP datagram with the pod name, and
//! remember the peer address of each request so tests can check the source IP a pod saw.
#![allow(dead_code)]

use anyhow::{Context, Result, anyhow, bail};
use std::io::{ErrorKind, Read, Write};
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

/// Opens a TCP connection, sends a line, and returns the (trimmed) reply read until the peer closes.
pub fn tcp_request(addr: IpAddr, port: u16, timeout: Duration) -> Result<String> {
    let sa = SocketAddr::new(addr, port);
    let mut s =
        TcpStream::connect_timeout(&sa, timeout).with_context(|| format!("connect {sa}"))?;
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
    stop: Arc<AtomicBool>,
    servers: Mutex<Vec<JoinHandle<()>>>,
    peers: Arc<Mutex<Vec<SocketAddr>>>,
}

impl Pod {
    /// Creates namespace `name` with `eth0` = `ip`/32, default route via `gateway`, and the root-namespace
    /// side (`gateway`/32 on the host veth, route `ip`/32 to it, IPv4 forwarding on).
    pub fn create(name: &str, ip: &str, gateway: &str) -> Result<Pod> {
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
            stop: Arc::new(AtomicBool::new(false)),
            servers: Mutex::new(Vec::new()),
            peers: Arc::new(Mutex::new(Vec::new())),
        };
        run("ip", &["netns", "add", name])?;
        batch(
            None,
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
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").context("enable ip_forward")?;
        Ok(pod)
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
            None,
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
        std::fs::write("/proc/sys/net/ipv6/conf/all/forwarding", "1")
            .context("enable IPv6 forwarding")?;
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
        let (name, stop, peers) = (self.name.clone(), self.stop.clone(), self.peers.clone());
        self.spawn_server(move || {
            enter_netns(&name)?;
            // Dual-stack socket when IPv6 is available, IPv4 only otherwise.
            let l = TcpListener::bind((Ipv6Addr::UNSPECIFIED, port))
                .or_else(|_| TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)))
                .with_context(|| format!("bind tcp {port} in {name}"))?;
            l.set_nonblocking(true)?;
            Ok(move || {
                while !stop.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((conn, peer)) => {
                            peers
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(unmap(peer));
                            let name = name.clone();
                            std::thread::spawn(move || answer_tcp(conn, &name));
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(5))
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
                        peers
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(unmap(peer));
                        let mut answer = name.as_bytes().to_vec();
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
        let _ = run("ip", &["link", "del", &self.host_if]);
        let _ = run("ip", &["netns", "del", &self.name]);
    }
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
        w.set_read_timeout(Some(timeout)).expect("read timeout");
        let r = std::io::BufReader::new(w.try_clone().expect("clone the stream"));
        Held { w, r }
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

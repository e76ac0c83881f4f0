//! `kube-proxy explain [NAMESPACE/NAME]`: prints the explanation by asking the local metrics server, so
//! it works through `kubectl exec` into the image (which has no shell and no curl).
//!
//! The server is found as the daemon would bind it (`--config`'s `metricsBindAddress` with the daemon's
//! defaults; a wildcard address is asked on loopback), or from the `--config` of the kube-proxy that is
//! process 1 (the container's, through `kubectl exec`). Every request is bounded: one total timeout for
//! connecting, sending and reading, a cap on the answer's head and body, and the body is copied to the
//! output as it arrives (control characters replaced), so a hostile or stuck server can neither hold
//! the command nor grow its memory.

use super::answer_reader::{AnswerLimits, plain, read_answer};
use super::request::{Form, path_of};
use crate::config::defaults::apply_defaults;
use crate::config::file;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Usage text.
pub const USAGE: &str = "Usage: kube-proxy explain [NAMESPACE/NAME] [flags]

Explains how this node programs one Service (or every Service): its virtual servers, their scheduler
and why, every endpoint considered and why it was selected or left out, the real servers as IPVS
reports them, and whether the last full sync repaired drift. Asks the metrics server of the
kube-proxy running on this node (/debug/services).

Flags:
      --config string      kube-proxy's configuration file: its metricsBindAddress is asked (a wildcard
                           address on loopback). Without --config or --server: the --config of the
                           kube-proxy that is process 1 (as through kubectl exec), else 127.0.0.1:10249
      --format string      text (default) or json
      --server string      metrics server address host:port
      --timeout duration   for the whole request (default 30s)
";

/// The metrics server's default address (the daemon's default `metricsBindAddress`).
pub const DEFAULT_SERVER: &str = "127.0.0.1:10249";
/// Default total time for connecting, sending and reading.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer copied out (the listing of 50,000 Services in JSON is about 200 MB).
pub const MAX_BODY: u64 = 512 << 20;

/// Where the metrics server is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// `host:port` to try, in order (the next one when a connection is refused).
    pub addrs: Vec<String>,
    /// Where the address came from, for messages (empty: the default or `--server`).
    pub source: String,
}

impl Server {
    fn named(addr: &str) -> Server {
        Server {
            addrs: vec![addr.to_string()],
            source: String::new(),
        }
    }
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainArgs {
    /// `namespace/name`, or `None` for every Service.
    pub service: Option<(String, String)>,
    /// `None`: found from process 1, else the default.
    pub server: Option<Server>,
    pub json: bool,
    pub timeout: Duration,
}

fn value(
    arg: &str,
    name: &str,
    next: &mut impl Iterator<Item = String>,
) -> Option<Result<String, String>> {
    let flag = format!("--{name}");
    if arg == flag {
        return Some(next.next().ok_or(format!("flag needs an argument: {flag}")));
    }
    arg.strip_prefix(&format!("{flag}="))
        .map(|v| Ok(v.to_string()))
}

/// The addresses a metrics server bound to `bind` (`host:port`) is reached at from this node: loopback
/// for a wildcard address (IPv6 first for `[::]`, which also accepts IPv4), else the address itself.
pub fn addrs_of_bind(bind: &str) -> Result<Vec<String>, String> {
    let a: SocketAddr = bind
        .parse()
        .map_err(|_| format!("metricsBindAddress {bind:?} is not IP:port"))?;
    let port = a.port();
    Ok(match a.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => vec![format!("127.0.0.1:{port}")],
        IpAddr::V6(ip) if ip.is_unspecified() => {
            vec![format!("[::1]:{port}"), format!("127.0.0.1:{port}")]
        }
        _ => vec![a.to_string()],
    })
}

/// The metrics server of a configuration file's text, with the daemon's defaults applied.
pub fn server_of_config_text(text: &str, source: &str) -> Result<Server, String> {
    let mut config = file::decode(text)
        .map_err(|e| format!("{source}: {e}"))?
        .config;
    apply_defaults(&mut config);
    if config.metrics_bind_address.is_empty() {
        return Err(format!("{source}: the metrics server is disabled"));
    }
    Ok(Server {
        addrs: addrs_of_bind(&config.metrics_bind_address).map_err(|e| format!("{source}: {e}"))?,
        source: format!("metricsBindAddress of {source}"),
    })
}

/// The metrics server of configuration file `path`.
fn server_of_config(path: &str) -> Result<Server, String> {
    let bytes = file::read_limited(std::path::Path::new(path)).map_err(|e| e.to_string())?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{path}: not UTF-8"))?;
    server_of_config_text(&text, path)
}

/// The `--config` of a kube-proxy command line as `/proc/<pid>/cmdline` holds it (NUL-separated);
/// `None` when it is not kube-proxy's or has no `--config`.
pub fn config_of_cmdline(cmdline: &[u8]) -> Option<String> {
    let mut args = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned());
    let argv0 = args.next()?;
    if argv0.rsplit('/').next() != Some("kube-proxy") {
        return None;
    }
    while let Some(arg) = args.next() {
        if let Some(v) = value(&arg, "config", &mut args) {
            return v.ok().filter(|p| !p.is_empty());
        }
    }
    None
}

/// The server of the kube-proxy that is process 1 (as in its container), else the default.
fn discover() -> Result<Server, String> {
    let mut cmdline = Vec::new();
    let read = std::fs::File::open("/proc/1/cmdline")
        .and_then(|f| f.take(64 << 10).read_to_end(&mut cmdline));
    match read.ok().and_then(|_| config_of_cmdline(&cmdline)) {
        Some(path) => server_of_config(&path).map(|mut s| {
            s.source = format!("{} (process 1's --config)", s.source);
            s
        }),
        None => Ok(Server::named(DEFAULT_SERVER)),
    }
}

/// Parses `explain`'s arguments (after the word `explain`).
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<ExplainArgs, String> {
    let mut out = ExplainArgs {
        service: None,
        server: None,
        json: false,
        timeout: DEFAULT_TIMEOUT,
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        if arg == "-h" || arg == "--help" {
            return Err(USAGE.to_string());
        } else if let Some(v) = value(&arg, "server", &mut it) {
            out.server = Some(Server::named(&v?));
        } else if let Some(v) = value(&arg, "config", &mut it) {
            out.server = Some(server_of_config(&v?)?);
        } else if let Some(v) = value(&arg, "format", &mut it) {
            out.json = match v?.as_str() {
                "json" => true,
                "text" => false,
                other => return Err(format!("unknown format {other:?}: use text or json")),
            };
        } else if let Some(v) = value(&arg, "timeout", &mut it) {
            let v = v?;
            let d = crate::gotime::GoDuration::parse(&v).map_err(|e| format!("--timeout: {e}"))?;
            if d.is_negative() || d.to_std().is_zero() {
                return Err(format!("--timeout {v:?} must be positive"));
            }
            out.timeout = d.to_std();
        } else if arg.starts_with('-') {
            return Err(format!("unknown flag: {arg}\n\n{USAGE}"));
        } else if out.service.is_some() {
            return Err(format!("one Service at most (got {arg:?} too)"));
        } else {
            let label = crate::cluster::model::is_rfc1123_label;
            let (ns, name) = arg
                .split_once('/')
                .filter(|(ns, n)| label(ns) && label(n))
                .ok_or(format!(
                    "expected NAMESPACE/NAME (lowercase letters, digits and '-'; a digit may lead), got {arg:?}"
                ))?;
            out.service = Some((ns.to_string(), name.to_string()));
        }
    }
    Ok(out)
}

/// The request path for `a` (names percent-encoded).
pub fn path(a: &ExplainArgs) -> String {
    let form = if a.json { Form::Json } else { Form::Text };
    let target = a.service.as_ref().map(|(ns, n)| (ns.as_str(), n.as_str()));
    path_of(target, form)
}

/// A stream whose reads and writes all end by one deadline.
struct Deadline {
    stream: TcpStream,
    deadline: Instant,
}

impl Deadline {
    fn remaining(&self) -> io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        Ok(left)
    }
}

impl Read for Deadline {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.remaining()?;
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

impl Write for Deadline {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.remaining()?;
        self.stream.set_write_timeout(Some(left))?;
        self.stream.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// Connects to the first of `server`'s addresses that accepts, by `deadline`.
fn connect(server: &Server, deadline: Instant) -> Result<(TcpStream, String), String> {
    let where_ = |addr: &str| {
        let from = if server.source.is_empty() {
            String::new()
        } else {
            format!(" ({})", server.source)
        };
        format!("could not reach the kube-proxy metrics server at {addr}{from}")
    };
    let mut last = String::from("no address");
    for addr in &server.addrs {
        let resolved = addr
            .to_socket_addrs()
            .map_err(|e| format!("{}: {}", where_(addr), plain(&e)))?
            .next()
            .ok_or(format!("{}: the address resolves to nothing", where_(addr)))?;
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("{}: timed out", where_(addr)));
        }
        match TcpStream::connect_timeout(&resolved, left) {
            Ok(s) => return Ok((s, addr.clone())),
            Err(e) => last = format!("{}: {}", where_(addr), plain(&e)),
        }
    }
    Err(format!(
        "{last} (is kube-proxy running on this node? --server or --config name its metrics server)"
    ))
}

/// `GET path` from `server` over HTTP/1.0 within `timeout`; a 200 answer's body is copied to `out` (at
/// most `limits.body` bytes), another answer is an error carrying the server's message.
pub fn get(
    server: &Server,
    path: &str,
    timeout: Duration,
    limits: AnswerLimits,
    out: &mut dyn Write,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let (stream, addr) = connect(server, deadline)?;
        let mut s = Deadline { stream, deadline };
        let failed = |what: &str, e: &io::Error| {
            let e = plain(e);
            format!("the kube-proxy metrics server at {addr} {what}: {e} (limit {timeout:?})")
        };
        let req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: */*\r\n\r\n");
        s.write_all(req.as_bytes())
            .map_err(|e| failed("did not take the request", &e))?;
        let e = match read_answer(&mut s, out, limits) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        // Busy: ask again when told to, if that is before the deadline.
        let again = e
            .retry_after
            .map(|s| Duration::from_secs(u64::from(s.clamp(1, 10))));
        if let Some(wait) = again.filter(|w| Instant::now() + *w < deadline) {
            std::thread::sleep(wait);
            continue;
        }
        return Err(match e.io {
            Some(io) => failed("did not answer in time", &io),
            None => format!("{addr}{path}: {}", e.message),
        });
    }
}

/// Runs `kube-proxy explain` with `args`, printing to `out`.
pub fn run(args: impl IntoIterator<Item = String>, out: &mut dyn Write) -> Result<(), String> {
    let args: Vec<String> = args.into_iter().collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return out
            .write_all(USAGE.as_bytes())
            .map_err(|e| format!("writing: {}", plain(&e)));
    }
    let a = parse(args)?;
    let server = match a.server.clone() {
        Some(s) => s,
        None => discover()?,
    };
    let limits = AnswerLimits {
        body: MAX_BODY,
        ..AnswerLimits::default()
    };
    get(&server, &path(&a), a.timeout, limits, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::mpsc;

    fn args(a: &[&str]) -> Result<ExplainArgs, String> {
        parse(a.iter().map(|s| s.to_string()))
    }

    #[test]
    fn arguments() {
        let a = args(&[]).unwrap();
        assert_eq!((a.service, a.server, a.json), (None, None, false));
        assert_eq!(a.timeout, DEFAULT_TIMEOUT);
        let a = args(&[
            "default/web",
            "--server",
            "10.0.0.1:10249",
            "--format=json",
            "--timeout=2s",
        ])
        .unwrap();
        assert_eq!(a.service, Some(("default".into(), "web".into())));
        assert_eq!(a.server, Some(Server::named("10.0.0.1:10249")));
        assert_eq!(a.timeout, Duration::from_secs(2));
        assert_eq!(path(&a), "/debug/services/default/web?format=json");
        assert_eq!(path(&args(&[]).unwrap()), "/debug/services?format=text");
        // Service names may start with a digit (Kubernetes 1.37), namespaces too.
        let a = args(&["1ns/0-web-9"]).unwrap();
        assert_eq!(a.service, Some(("1ns".into(), "0-web-9".into())));
        assert_eq!(path(&a), "/debug/services/1ns/0-web-9?format=text");
        for bad in [
            &["web"][..],
            &["a/b/c"],
            &["default/Web"],
            &["default/-web"],
            &["default/web-"],
            &["default/web\r\nHost: x"],
            &["default/web?format=json"],
            &["/web"],
            &["a/b", "c/d"],
            &["--bogus"],
            &["--format=xml"],
            &["--server"],
            &["--timeout=0s"],
            &["--timeout=-1s"],
            &["--timeout=soon"],
            &["--config=/nonexistent/kube-proxy.yaml"],
        ] {
            assert!(args(bad).is_err(), "{bad:?}");
        }
        assert!(
            args(&["--help"])
                .unwrap_err()
                .contains("Usage: kube-proxy explain")
        );
    }

    fn config(body: &str) -> Result<Vec<String>, String> {
        let text = format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n{body}"
        );
        server_of_config_text(&text, "test.yaml").map(|s| s.addrs)
    }

    #[test]
    fn the_config_is_read_with_the_daemons_defaults() {
        let v4 = |s: &str| vec![s.to_string()];
        assert_eq!(config("").unwrap(), v4("127.0.0.1:10249"));
        assert_eq!(
            config("metricsBindAddress: 0.0.0.0:10249\n").unwrap(),
            v4("127.0.0.1:10249")
        );
        assert_eq!(
            config("metricsBindAddress: 0.0.0.0\n").unwrap(),
            v4("127.0.0.1:10249")
        );
        assert_eq!(
            config("metricsBindAddress: \"::\"\n").unwrap(),
            vec!["[::1]:10249".to_string(), "127.0.0.1:10249".into()]
        );
        assert_eq!(
            config("metricsBindAddress: \"[::]:9999\"\n").unwrap(),
            vec!["[::1]:9999".to_string(), "127.0.0.1:9999".into()]
        );
        assert_eq!(config("bindAddress: \"::\"\n").unwrap(), v4("[::1]:10249"));
        assert_eq!(
            config("metricsBindAddress: fd00::5\n").unwrap(),
            v4("[fd00::5]:10249")
        );
        assert_eq!(
            config("metricsBindAddress: 10.0.0.5:1234\n").unwrap(),
            v4("10.0.0.5:1234")
        );
        assert!(config("metricsBindAddress: nowhere\n").is_err());
        assert!(config("mode: [\n").is_err());
    }

    #[test]
    fn process_ones_config_is_found_on_its_command_line() {
        let c = |s: &[u8]| config_of_cmdline(s);
        assert_eq!(
            c(b"/usr/local/bin/kube-proxy\0--config=/var/lib/kube-proxy/config.conf\0--v=2\0"),
            Some("/var/lib/kube-proxy/config.conf".into())
        );
        assert_eq!(
            c(b"kube-proxy\0--hostname-override=n\0--config\0/var/lib/kube-proxy-config/config\0"),
            Some("/var/lib/kube-proxy-config/config".into())
        );
        assert_eq!(c(b"/sbin/init\0--config=/x\0"), None);
        assert_eq!(c(b"/usr/local/bin/kube-proxy\0--v=2\0"), None);
        assert_eq!(c(b""), None);
    }

    /// A one-connection server on loopback: reads the request head, hands it over, then runs `answer`.
    fn serve_once(
        answer: impl FnOnce(&mut TcpStream) + Send + 'static,
    ) -> (Server, mpsc::Receiver<String>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = Server::named(&l.local_addr().unwrap().to_string());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut b).unwrap_or(0) == 1 {
                head.push(b[0]);
            }
            let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
            answer(&mut s);
        });
        (server, rx)
    }

    fn get_into(
        server: &Server,
        path: &str,
        timeout: Duration,
        body: u64,
    ) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        let limits = AnswerLimits {
            body,
            ..AnswerLimits::default()
        };
        get(server, path, timeout, limits, &mut out).map(|()| out)
    }

    #[test]
    fn a_trickling_server_is_cut_at_the_total_timeout() {
        let (server, _) = serve_once(|s| {
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
            // One byte every 100 ms, for far longer than the timeout.
            for _ in 0..200 {
                if s.write_all(b"a").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let start = Instant::now();
        let e = get_into(&server, "/debug/services", Duration::from_secs(1), MAX_BODY).unwrap_err();
        let took = start.elapsed();
        assert!(e.contains("did not answer in time: timed out"), "{e}");
        assert!(!e.contains("os error"), "{e}");
        assert!(took < Duration::from_secs(10), "took {took:?}");
    }

    #[test]
    fn an_endless_answer_is_cut_at_the_size_cap() {
        let (server, _) = serve_once(|s| {
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
            let chunk = [b'a'; 64 << 10];
            while s.write_all(&chunk).is_ok() {}
        });
        let mut out = Vec::new();
        let limits = AnswerLimits {
            body: 1 << 20,
            ..AnswerLimits::default()
        };
        let e = get(&server, "/x", Duration::from_secs(30), limits, &mut out).unwrap_err();
        assert!(e.contains("larger than 1 MiB"), "{e}");
        assert!(out.len() <= 1 << 20, "{} bytes copied", out.len());
    }

    #[test]
    fn a_name_that_is_not_a_kubernetes_name_never_reaches_the_request_line() {
        // Refused before any connection (the server, here, would record a request).
        let (server, head) = serve_once(|_| {});
        let addr = server.addrs[0].clone();
        let mut out = Vec::new();
        let e = run(
            ["a/x\r\nHost: evil".to_string(), format!("--server={addr}")],
            &mut out,
        )
        .unwrap_err();
        assert!(e.starts_with("expected NAMESPACE/NAME"), "{e}");
        assert!(head.recv_timeout(Duration::from_millis(300)).is_err());
        // And what the command sends is percent-encoded in any case (request.rs checks every byte).
        let p = super::path_of(Some(("a", "x\r\nHost: evil")), Form::Text);
        assert_eq!(p, "/debug/services/a/x%0D%0AHost%3A%20evil?format=text");
    }

    #[test]
    fn a_404_carries_the_servers_message() {
        let (server, head) = serve_once(|s| {
            let _ = s.write_all(b"HTTP/1.0 404 Not Found\r\nContent-Length: 9\r\n\r\nnot here\n");
        });
        let addr = server.addrs[0].clone();
        let mut out = Vec::new();
        let e = run(
            ["default/web".to_string(), format!("--server={addr}")],
            &mut out,
        )
        .unwrap_err();
        assert_eq!(
            head.recv().unwrap().lines().next(),
            Some("GET /debug/services/default/web?format=text HTTP/1.0")
        );
        assert!(e.ends_with("HTTP 404: not here"), "{e}");
    }

    #[test]
    fn an_absent_server_is_a_plain_error() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = Server::named(&format!("127.0.0.1:{port}"));
        let e = get_into(&server, "/x", Duration::from_secs(5), MAX_BODY).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "could not reach the kube-proxy metrics server at 127.0.0.1:{port}: connection refused"
            )),
            "{e}"
        );
        assert!(!e.contains("os error"), "{e}");
    }

    #[test]
    fn a_busy_server_is_asked_again() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = Server::named(&l.local_addr().unwrap().to_string());
        std::thread::spawn(move || {
            for answer in [
                &b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\r\nbusy"[..],
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n",
            ] {
                let (mut s, _) = l.accept().unwrap();
                let mut b = [0u8; 1024];
                let _ = s.read(&mut b);
                let _ = s.write_all(answer);
            }
        });
        let out = get_into(&server, "/x", Duration::from_secs(10), MAX_BODY).unwrap();
        assert_eq!(out, b"ok\n");
    }
}

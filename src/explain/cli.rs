//! `kube-proxy explain [NAMESPACE/NAME]`: prints the explanation by asking the local metrics server, so
//! it works through `kubectl exec` into the image (which has no shell and no curl).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Usage text.
pub const USAGE: &str = "Usage: kube-proxy explain [NAMESPACE/NAME] [flags]

Explains how this node programs one Service (or every Service): its virtual servers, their scheduler
and why, every endpoint considered and why it was selected or left out, the real servers as IPVS
reports them, and whether the last full sync repaired drift. Asks the metrics server of the
kube-proxy running on this node (/debug/services).

Flags:
      --config string    kube-proxy's configuration file: its metricsBindAddress is asked
      --format string    text (default) or json
      --server string    metrics server address (default \"127.0.0.1:10249\")
";

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainArgs {
    /// `namespace/name`, or `None` for every Service.
    pub service: Option<(String, String)>,
    pub server: String,
    pub json: bool,
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

/// The server address a configuration file's `metricsBindAddress` is reached at locally.
fn server_of_config(path: &str) -> Result<String, String> {
    let decoded =
        crate::config::file::load(std::path::Path::new(path)).map_err(|e| e.to_string())?;
    let mut addr = decoded.config.metrics_bind_address;
    if addr.is_empty() {
        addr = "127.0.0.1:10249".into();
    }
    Ok(addr
        .replace("0.0.0.0:", "127.0.0.1:")
        .replace("[::]:", "[::1]:"))
}

/// Parses `explain`'s arguments (after the word `explain`).
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<ExplainArgs, String> {
    let mut out = ExplainArgs {
        service: None,
        server: "127.0.0.1:10249".into(),
        json: false,
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        if arg == "-h" || arg == "--help" {
            return Err(USAGE.to_string());
        } else if let Some(v) = value(&arg, "server", &mut it) {
            out.server = v?;
        } else if let Some(v) = value(&arg, "config", &mut it) {
            out.server = server_of_config(&v?)?;
        } else if let Some(v) = value(&arg, "format", &mut it) {
            out.json = match v?.as_str() {
                "json" => true,
                "text" => false,
                other => return Err(format!("unknown format {other:?}: use text or json")),
            };
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

/// The request path for `a`.
pub fn path(a: &ExplainArgs) -> String {
    let format = if a.json { "json" } else { "text" };
    match &a.service {
        Some((ns, name)) => format!("/debug/services/{ns}/{name}?format={format}"),
        None => format!("/debug/services?format={format}"),
    }
}

/// `GET path` from `server` (host:port) over HTTP/1.0; the body of a 200 answer, else an error with
/// the server's answer.
pub fn get(server: &str, path: &str) -> Result<String, String> {
    let addr: SocketAddr = server
        .to_socket_addrs()
        .map_err(|e| format!("metrics server address {server:?}: {e}"))?
        .next()
        .ok_or(format!(
            "metrics server address {server:?} resolves to nothing"
        ))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connecting to kube-proxy's metrics server at {addr}: {e}"))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
    let req = format!("GET {path} HTTP/1.0\r\nHost: {server}\r\nAccept: */*\r\n\r\n");
    s.write_all(req.as_bytes())
        .map_err(|e| format!("sending the request: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("reading the answer: {e}"))?;
    let raw = String::from_utf8_lossy(&raw);
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or("the metrics server's answer has no header end")?;
    let status = head.split_whitespace().nth(1).unwrap_or("?");
    if status != "200" {
        return Err(format!(
            "{server}{path}: HTTP {status}: {}",
            body.trim_end()
        ));
    }
    Ok(body.to_string())
}

/// Runs `kube-proxy explain` with `args`; the text to print, or the error.
pub fn run(args: impl IntoIterator<Item = String>) -> Result<String, String> {
    let args: Vec<String> = args.into_iter().collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return Ok(USAGE.to_string());
    }
    let a = parse(args)?;
    get(&a.server, &path(&a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Result<ExplainArgs, String> {
        parse(a.iter().map(|s| s.to_string()))
    }

    #[test]
    fn arguments() {
        let a = args(&[]).unwrap();
        assert_eq!(
            (a.service, a.server.as_str(), a.json),
            (None, "127.0.0.1:10249", false)
        );
        let a = args(&["default/web", "--server", "10.0.0.1:10249", "--format=json"]).unwrap();
        assert_eq!(a.service, Some(("default".into(), "web".into())));
        assert_eq!(a.server, "10.0.0.1:10249");
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
        ] {
            assert!(args(bad).is_err(), "{bad:?}");
        }
        assert!(
            args(&["--help"])
                .unwrap_err()
                .contains("Usage: kube-proxy explain")
        );
    }
}

//! The real binary's log lines against upstream's: klog's text lines and component-base's JSON lines.
//! Upstream examples are in `tests/logging_data/`; each check runs on them first (the parser and the
//! rules must accept upstream's own output), then on the lines the built `kube-proxy` writes to stderr
//! when it starts without an API server (it fails at the client, before touching the kernel).

mod common {
    pub mod klog;
}

use common::klog::{Kind, Line, entries, parse};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

fn fixture(name: &str) -> Vec<String> {
    let path = format!("{}/tests/logging_data/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// Runs the binary with `args` (no API server reachable): its pid and stderr.
fn run(args: &[&str]) -> (u32, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_kube-proxy"))
        .args(args)
        .env_remove("KUBE_PROXY_LOG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kube-proxy");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait kube-proxy");
    (pid, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn upstream_line(message: &str) -> Line {
    fixture("upstream-klog.txt")
        .iter()
        .map(|l| parse(l).unwrap_or_else(|e| panic!("upstream line {l:?}: {e}")))
        .find(|l| l.message == message)
        .unwrap_or_else(|| panic!("no upstream line {message:?}"))
}

#[test]
fn upstream_klog_lines_parse() {
    let lines = fixture("upstream-klog.txt");
    assert!(lines.len() >= 10);
    for l in &lines {
        parse(l).unwrap_or_else(|e| panic!("upstream line {l:?}: {e}"));
    }
    let set = upstream_line("Set sysctl");
    assert_eq!(
        set.pairs,
        [("entry".into(), Kind::Str), ("value".into(), Kind::Number)]
    );
    assert_eq!(upstream_line("Kubelet version").pid, 2_299_031);
}

#[test]
fn real_text_lines_have_klogs_shape() {
    let (pid, stderr) = run(&["--hostname-override=n", "--proxy-mode=ipvs", "--v=2"]);
    let lines: Vec<Line> = entries(&stderr)
        .iter()
        .map(|l| parse(l).unwrap_or_else(|e| panic!("our line {l:?}: {e}\n{stderr}")))
        .collect();
    assert!(lines.len() >= 5, "{stderr}");
    for l in &lines {
        assert_eq!(l.pid, pid, "{l:?}");
        assert!(l.file.ends_with(".rs"), "{l:?}");
        assert!(
            (1..=12).contains(&l.month) && (1..=31).contains(&l.day),
            "{l:?}"
        );
        assert!(l.structured, "every line of ours is structured: {l:?}");
    }
    let ours = |m: &str| {
        lines
            .iter()
            .find(|l| l.message == m)
            .unwrap_or_else(|| panic!("no line {m:?} in:\n{stderr}"))
    };
    // Same message, severity, keys and value kinds as upstream's lines.
    for m in ["Version info", "command failed"] {
        assert_eq!(ours(m).shape(), upstream_line(m).shape(), "{m}");
    }
    let version = stderr
        .lines()
        .find(|l| l.contains("\"Version info\""))
        .unwrap();
    assert!(
        version.contains(" version=\"v1.36.0+kube-proxy-rs."),
        "{version}"
    );
    assert_eq!(ours("Runtime settings").severity, 'I');
    assert_eq!(ours("Error running ProxyServer").pairs[0].0, "err");
    // V(2) lines show with --v=2 only.
    assert!(lines.iter().any(|l| l.message == "Effective configuration"));
    let (_, quiet) = run(&["--hostname-override=n", "--proxy-mode=ipvs"]);
    assert!(!quiet.contains("Effective configuration"), "{quiet}");
    assert!(quiet.contains("\"Version info\""), "{quiet}");
}

#[test]
fn real_warning_lines_have_klogs_shape() {
    let (_, stderr) = run(&[
        "--hostname-override=n",
        "--logtostderr",
        "--write-config-to=/dev/null",
    ]);
    let warning = entries(&stderr)
        .into_iter()
        .find(|l| l.starts_with('W'))
        .unwrap_or_else(|| panic!("no W line:\n{stderr}"));
    let w = parse(&warning).unwrap();
    let up = fixture("upstream-klog.txt")
        .iter()
        .find(|l| l.starts_with('W'))
        .map(|l| parse(l).unwrap())
        .unwrap();
    assert_eq!((w.severity, up.severity), ('W', 'W'));
    assert!(w.message.contains("--logtostderr"), "{warning}");
}

/// The JSON keys of a line, in order.
fn keys(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_str(line);
    let v: serde_json::Value = serde::Deserialize::deserialize(&mut de).expect("JSON line");
    assert!(v.is_object(), "{line}");
    // serde_json's Map keeps insertion order only with a feature; read the order from the text.
    let mut rest = line;
    while let Some(i) = rest.find("\":") {
        let start = rest[..i].rfind(['{', ',']).expect("key start");
        let key = &rest[start + 2..i];
        if v.get(key).is_some() && !out.contains(&key.to_string()) {
            out.push(key.to_string());
        }
        rest = &rest[i + 2..];
    }
    out
}

/// component-base's rules: `ts`, `caller`, `msg` first; `v` next unless the line is an error; `err`
/// last on errors.
fn check_json_rules(line: &str) {
    let k = keys(line);
    assert_eq!(&k[..3], ["ts", "caller", "msg"], "{line}");
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert!(v["ts"].is_f64() || v["ts"].is_u64(), "{line}");
    let caller = v["caller"].as_str().unwrap();
    let (file, n) = caller.rsplit_once(':').expect("file:line");
    assert!(
        n.parse::<u32>().is_ok() && file.split('/').count() <= 2,
        "{line}"
    );
    if let Some(pos) = k.iter().position(|k| k == "v") {
        assert_eq!(pos, 3, "{line}");
        assert!(v["v"].is_u64(), "{line}");
    }
    if let Some(pos) = k.iter().position(|k| k == "err")
        && !k.contains(&"v".to_string())
    {
        assert_eq!(pos, k.len() - 1, "err last on an error line: {line}");
    }
}

#[test]
fn real_json_lines_follow_component_base() {
    for l in fixture("upstream-json.txt") {
        check_json_rules(&l);
    }
    let (_, stderr) = run(&[
        "--hostname-override=n",
        "--proxy-mode=ipvs",
        "--logging-format=json",
        "--v=2",
    ]);
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(lines.len() >= 5, "{stderr}");
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64;
    let mut seen_error = false;
    for l in &lines {
        check_json_rules(l);
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        // Milliseconds since the epoch, as upstream's encoder writes them.
        let ts = v["ts"].as_f64().unwrap();
        assert!(
            (now_ms - ts).abs() < 120_000.0,
            "ts {ts} vs now {now_ms}: {l}"
        );
        assert!(v["caller"].as_str().unwrap().contains(".rs:"), "{l}");
        if v["msg"] == "command failed" {
            seen_error = true;
            assert!(v.get("v").is_none(), "{l}");
            assert!(v["err"].as_str().unwrap().contains("in-cluster"), "{l}");
        }
        if v["msg"] == "Effective configuration" {
            assert_eq!(v["v"], 2, "{l}");
        }
    }
    assert!(seen_error, "{stderr}");
    let version: serde_json::Value = serde_json::from_str(
        lines
            .iter()
            .find(|l| l.contains("\"Version info\""))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(version["v"], 0);
    assert!(version["version"].as_str().unwrap().starts_with("v1.36.0"));
}

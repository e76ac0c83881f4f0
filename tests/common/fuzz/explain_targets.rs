//! Fuzz targets of the explanation: how `/debug/services` reads a request's path and query, and how
//! `kube-proxy explain` reads the metrics server's answer. Besides not panicking, each case is checked
//! for its time (a bound far above a linear parse of the largest input), its memory (the loop's counting
//! allocator, against [`REQUEST_MEMORY`] and [`ANSWER_MEMORY`]) and for what it keeps: the request's
//! names are never larger than the request, the answer reader never outputs more than it was given nor
//! reads more than its limits, and nothing it prints holds a control character.

use super::mutate::{mutate_bytes, mutate_text, random_bytes};
use super::targets::Memory;
use fastrand::Rng;
use kube_proxy_rs::cluster::model::is_rfc1123_label;
use kube_proxy_rs::explain::answer_reader::{AnswerLimits, read_answer};
use kube_proxy_rs::explain::request::{self, ExplainRequest, Target};
use std::io::Read;
use std::time::{Duration, Instant};

/// A request is read with a few copies of its path and query at most.
pub const REQUEST_MEMORY: Memory = Memory {
    fixed: 16 << 10,
    per_byte: 8,
};

/// The answer reader's buffers (head, a 16 KiB chunk and its sanitized copy) and the case's own output
/// copy, whatever the answer's length beyond them.
pub const ANSWER_MEMORY: Memory = Memory {
    fixed: 128 << 10,
    per_byte: 2,
};

/// The most one case may take: a linear parse of these inputs (at most a few KiB) takes microseconds.
const CASE_TIME: Duration = Duration::from_millis(200);

fn choose<'a, T>(rng: &mut Rng, v: &'a [T]) -> &'a T {
    &v[rng.usize(..v.len())]
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    if took > CASE_TIME {
        return Err(format!("{what} took {took:?} (bound {CASE_TIME:?})"));
    }
    Ok(out)
}

const REQUESTS: &[&str] = &[
    "/debug/services",
    "/debug/services?format=text",
    "/debug/services/default/web?format=json",
    "/debug/services/kube-system/kube-dns",
    "/debug/services/a%20b/x%0D%0AHost%3A%20evil?format=text",
    "/debug/services/ns/name.with.dots?x=1&format=json&format=text",
];

const REQUEST_WORDS: &[&str] = &[
    "%", "%0D%0A", "/", "?", "&", "=", "format=", "text", "json", "+", "%2F", "%C3%A9", "%C3",
    "..", "%00", "debug", "services", "%%", "%zz",
];

/// A request path and query: mutated samples, or random bytes.
pub fn gen_request(rng: &mut Rng, _: &super::Corpus) -> Vec<u8> {
    let sample = choose(rng, REQUESTS);
    match rng.u8(0..20) {
        0 => sample.as_bytes().to_vec(),
        1 => random_bytes(rng, 512),
        2 => format!("/debug/services/{}/x", "a".repeat(rng.usize(60..70))).into_bytes(),
        _ => mutate_text(rng, sample, REQUEST_WORDS, 6),
    }
}

/// Parses the path and query (split at the first `?`, as the server's URI is): an accepted request
/// names a valid Service no larger than the input, and the CLI's path for it reads back the same; a
/// refused one is a 400 or 404 with a short message.
pub fn check_request(buf: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(buf);
    let (path, query) = match text.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (text.as_ref(), None),
    };
    match timed("parsing the request", || request::parse(path, query))? {
        Ok(req) => check_accepted(&req, buf.len()),
        Err(r) if !matches!(r.status, 400 | 404) => Err(format!("status {}", r.status)),
        Err(r) if r.message.trim().is_empty() || r.message.len() > 512 => Err(format!(
            "message of {} bytes: {:?}",
            r.message.len(),
            r.message
        )),
        Err(_) => Ok(()),
    }
}

fn check_accepted(req: &ExplainRequest, input: usize) -> Result<(), String> {
    let target = match &req.target {
        Target::All => None,
        Target::One(n) => {
            if !is_rfc1123_label(&n.namespace) || !is_rfc1123_label(&n.name) {
                return Err(format!("accepted an invalid name {n:?}"));
            }
            if n.namespace.len() + n.name.len() > input {
                return Err("the names are larger than the request".into());
            }
            Some((n.namespace.as_ref(), n.name.as_ref()))
        }
    };
    let again = request::path_of(target, req.form);
    let (p, q) = again.split_once('?').unwrap_or((&again, ""));
    match request::parse(p, Some(q)) {
        Ok(back) if back == *req => Ok(()),
        other => Err(format!("{again} reads back as {other:?}, not {req:?}")),
    }
}

const BODY: &str = "Service default/web on node n1\n  drift: none at the last full sync (2026-11-29T02:00:00Z)\n  port http 80/TCP IPv4: externalTrafficPolicy Cluster, internalTrafficPolicy Cluster\n    virtual servers:\n      clusterIP 10.96.100.10:80  scheduler rr (the node's scheduler, ipvs.scheduler)\n        -> 10.244.0.11:8080  weight 1  active 0  inactive 0\n    endpoints:\n      10.244.0.14:8080  node demo-node  not ready  left out: NotReady\n";

fn answers() -> Vec<Vec<u8>> {
    let ok = |ct: &str, body: &str| {
        format!(
            "HTTP/1.0 200 OK\r\ncontent-type: {ct}\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    [
        ok("text/plain; charset=utf-8", BODY),
        ok("application/json", "{\"node\": \"n1\", \"services\": []}\n"),
        format!("HTTP/1.1 200 OK\r\n\r\n{BODY}"),
        "HTTP/1.0 404 Not Found\r\ncontent-length: 24\r\n\r\nService a/b is not here\n".into(),
        "HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-length: 5\r\n\r\nbusy\n"
            .into(),
        "HTTP/1.1 403 Forbidden\r\n\r\n/debug/* is served to this node only\n".into(),
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".into(),
        format!("HTTP/1.0 200 OK\r\n\r\n\x1b]0;title\x07{BODY}\u{9b}31m"),
    ]
    .map(String::into_bytes)
    .to_vec()
}

/// A metrics server's answer: mutated samples, or random bytes.
pub fn gen_answer(rng: &mut Rng, _: &super::Corpus) -> Vec<u8> {
    let samples = answers();
    let sample = choose(rng, &samples).clone();
    match rng.u8(0..20) {
        0 => sample,
        1 => random_bytes(rng, 1024),
        _ => {
            let other = choose(rng, &samples).clone();
            mutate_bytes(rng, sample, &other, 6)
        }
    }
}

/// A reader that counts what is read from it.
struct Counted<'a> {
    inner: &'a [u8],
    read: usize,
}

impl Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n;
        Ok(n)
    }
}

/// Whether `out` holds a control character a terminal acts on (C0 but newline and tab, DEL, C1).
fn has_control(out: &[u8]) -> bool {
    let c1 = out
        .windows(2)
        .any(|w| w[0] == 0xc2 && (0x80..=0x9f).contains(&w[1]));
    c1 || out
        .iter()
        .any(|&b| (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f)
}

/// Reads the answer with small limits: the output is never larger than the input nor holds control
/// characters; it reads at most the head and body limits (plus one read); an error has a short,
/// clean message.
pub fn check_answer(buf: &[u8]) -> Result<(), String> {
    let limits = AnswerLimits {
        head: 4096,
        body: 8192,
        message: 512,
    };
    let mut input = Counted {
        inner: buf,
        read: 0,
    };
    let mut out = Vec::new();
    let r = timed("reading the answer", || {
        read_answer(&mut input, &mut out, limits)
    })?;
    let most_read = limits.head + limits.body as usize + 2 * (16 << 10);
    if input.read > most_read {
        return Err(format!("read {} bytes (limit {most_read})", input.read));
    }
    if out.len() > buf.len() || out.len() > limits.body as usize + 1 {
        return Err(format!("printed {} bytes of {}", out.len(), buf.len()));
    }
    if has_control(&out) {
        return Err(format!("printed control characters: {out:?}"));
    }
    match r {
        Ok(()) if !buf.starts_with(b"HTTP/1.") => Err("accepted a non-HTTP answer".into()),
        Ok(()) => Ok(()),
        Err(e) if e.message.trim().is_empty() => Err("an error without a message".into()),
        Err(e) if e.message.len() > limits.message + 256 || has_control(e.message.as_bytes()) => {
            Err(format!("message {:?}", e.message))
        }
        Err(_) => Ok(()),
    }
}

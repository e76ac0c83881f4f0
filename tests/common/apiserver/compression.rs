//! Response compression as kube-apiserver does it (`SerializeObject` in apiserver's
//! `endpoints/handlers/responsewriters`): a response that is not a watch is gzip-compressed, at gzip
//! level 1 (the API server's `defaultGzipContentEncodingLevel`), when the request's `Accept-Encoding`
//! names gzip and the body is larger than 128 KiB (`defaultGzipThresholdBytes`); it then carries
//! `Content-Encoding: gzip` and `Vary: Accept-Encoding`. Watch streams are never compressed.

use super::faults::is_watch;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use flate2::Compression;
use flate2::write::GzEncoder;
use http_body_util::BodyExt;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bodies larger than this are compressed (the API server's threshold).
pub const THRESHOLD: usize = 128 * 1024;

/// What the compression did.
#[derive(Debug, Default)]
pub struct Compressed {
    /// Responses compressed.
    pub responses: AtomicU64,
    /// Their bodies' bytes before compression.
    pub plain_bytes: AtomicU64,
    /// Their bodies' bytes after compression.
    pub gzip_bytes: AtomicU64,
    /// Requests that asked for gzip.
    pub asked: AtomicU64,
    /// Time spent compressing, in nanoseconds (the API server's extra work).
    pub nanos: AtomicU64,
}

/// Whether an `Accept-Encoding` header names gzip (and does not refuse it with `q=0`).
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| {
            let mut parts = token.split(';').map(str::trim);
            let name = parts.next().unwrap_or_default();
            let refused = parts.any(|p| p.replace(' ', "") == "q=0");
            name.eq_ignore_ascii_case("gzip") && !refused
        })
}

/// The middleware: compresses large non-watch responses for clients that accept gzip.
pub async fn middleware(
    State(stats): State<Arc<Compressed>>,
    req: Request,
    next: Next,
) -> Response {
    let accepts = accepts_gzip(req.headers());
    let watch = is_watch(req.uri());
    if accepts {
        stats.asked.fetch_add(1, Ordering::SeqCst);
    }
    let response = next.run(req).await;
    let large = axum::body::HttpBody::size_hint(response.body())
        .exact()
        .is_some_and(|n| n as usize > THRESHOLD);
    if watch || !accepts || !large {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(plain) = body.collect().await.map(|b| b.to_bytes()) else {
        return Response::from_parts(parts, Body::empty());
    };
    let start = std::time::Instant::now();
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    let compressed = encoder
        .write_all(&plain)
        .and_then(|()| encoder.finish())
        .unwrap_or_default();
    let took = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    stats.nanos.fetch_add(took, Ordering::SeqCst);
    stats.responses.fetch_add(1, Ordering::SeqCst);
    stats
        .plain_bytes
        .fetch_add(plain.len() as u64, Ordering::SeqCst);
    stats
        .gzip_bytes
        .fetch_add(compressed.len() as u64, Ordering::SeqCst);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    parts
        .headers
        .append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    Response::from_parts(parts, Body::from(compressed))
}

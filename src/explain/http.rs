//! `/debug/services` and `/debug/services/<namespace>/<name>` on the metrics server: JSON by default,
//! `?format=text` for people.
//!
//! Every `/debug/*` request is answered only to this node (a loopback peer, or the node connecting to
//! its own address) unless remote access was allowed (`--allow-remote-debug`): the explanation names
//! every Service, endpoint, pod IP, node and zone. An admitted request is parsed on the async worker
//! (cheap), then explained and rendered on the explanation's own threads ([`Workers`]: one for the
//! listing, one for single Services); beyond their few slots it is refused at once with 503 and
//! `Retry-After`, and an answer not ready within
//! [`ANSWER_TIMEOUT`] is a 503 too (the work still holds its slot until it ends).

use super::Explainer;
use super::answer::Answer;
use super::metrics::ExplainMetrics;
use super::request;
use super::workers::Workers;
use crate::net::Peer;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Requests admitted at once per kind (the listing, one Service), explaining or waiting for their one
/// thread; more are refused with 503. Each kind has its own thread, so a flood of listings never
/// delays the explanation of one Service.
pub const SLOTS: usize = 2;
/// Longest a client waits for its answer.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// The `Retry-After` of a refusal for lack of slots, seconds.
pub const RETRY_AFTER: u32 = 1;

/// The `/debug/*` endpoints of one metrics server.
pub struct DebugEndpoints {
    explainer: Arc<Explainer>,
    /// For the listing, and for one Service.
    listing: Workers,
    one: Workers,
    /// Whether peers other than this node are answered.
    allow_remote: bool,
    metrics: ExplainMetrics,
}

impl DebugEndpoints {
    /// The endpoints over `explainer`, with their own worker threads.
    pub fn new(
        explainer: Arc<Explainer>,
        allow_remote: bool,
        metrics: ExplainMetrics,
    ) -> std::io::Result<DebugEndpoints> {
        Ok(DebugEndpoints {
            explainer,
            listing: Workers::start("explain-all", 1, SLOTS)?,
            one: Workers::start("explain-one", 1, SLOTS)?,
            allow_remote,
            metrics,
        })
    }
}

/// Whether a connection from `remote` to `local` comes from this node: a loopback address, or the node
/// connecting to its own address (Linux drops packets from outside that claim a local source address).
pub fn from_this_node(remote: SocketAddr, local: SocketAddr) -> bool {
    let r = remote.ip().to_canonical();
    r.is_loopback() || r == local.ip().to_canonical()
}

fn respond(a: Answer) -> Response {
    let status = StatusCode::from_u16(a.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (status, a.body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(a.content_type),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if let Some(s) = a.retry_after {
        h.insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

fn forbidden() -> Answer {
    Answer::text(
        403,
        "/debug/* is served to this node only (loopback): it lists every Service, endpoint, pod IP, \
         node and zone. Ask from the node (kubectl exec into kube-proxy: kube-proxy explain), or start \
         kube-proxy with --allow-remote-debug",
    )
}

/// Answers `/debug/*` to this node only (unless allowed) and counts every `/debug/*` answer.
async fn guard(State(d): State<Arc<DebugEndpoints>>, req: Request, next: Next) -> Response {
    if !req.uri().path().starts_with("/debug") {
        return next.run(req).await;
    }
    let peer = req.extensions().get::<Peer>().copied();
    let allowed = d.allow_remote || peer.is_some_and(|p| from_this_node(p.remote, p.local));
    let r = if allowed {
        next.run(req).await
    } else {
        respond(forbidden())
    };
    d.metrics.answered(r.status().as_u16());
    r
}

async fn explain(State(d): State<Arc<DebugEndpoints>>, uri: Uri) -> Response {
    let req = match request::parse(uri.path(), uri.query()) {
        Ok(r) => r,
        Err(r) => return respond(Answer::text(r.status, r.message)),
    };
    let workers = match req.target {
        request::Target::All => &d.listing,
        request::Target::One(_) => &d.one,
    };
    let x = d.explainer.clone();
    let Ok(answer) = workers.submit(move || x.answer(&req)) else {
        let why = format!(
            "{} requests like this one are in progress; retry in {RETRY_AFTER} s",
            workers.capacity()
        );
        return respond(Answer::busy(RETRY_AFTER, &why));
    };
    match tokio::time::timeout(ANSWER_TIMEOUT, answer).await {
        Ok(Ok(a)) => respond(a),
        Ok(Err(_)) => respond(Answer::text(500, "explaining failed")),
        Err(_) => respond(Answer::busy(
            RETRY_AFTER,
            &format!("no answer within {ANSWER_TIMEOUT:?}"),
        )),
    }
}

/// `router` with the explanation routes and the `/debug/*` guard over all of it.
pub fn serve_on(router: Router, d: Arc<DebugEndpoints>) -> Router {
    let routes = Router::new()
        .route(request::LISTING, get(explain))
        .route(&format!("{}/{{*rest}}", request::LISTING), get(explain))
        .with_state(d.clone());
    router
        .merge(routes)
        .layer(middleware::from_fn_with_state(d, guard))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_node_is_loopback_or_its_own_address() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let local = a("10.0.0.10:10249");
        assert!(from_this_node(a("127.0.0.1:5000"), local));
        assert!(from_this_node(a("127.8.9.1:5000"), local));
        assert!(from_this_node(a("[::1]:5000"), a("[::1]:10249")));
        assert!(from_this_node(
            a("[::ffff:127.0.0.1]:5000"),
            a("[::]:10249")
        ));
        assert!(from_this_node(a("10.0.0.10:5000"), local));
        assert!(from_this_node(
            a("[::ffff:10.0.0.10]:5000"),
            a("[::ffff:10.0.0.10]:10249")
        ));
        assert!(!from_this_node(a("10.0.0.11:5000"), local));
        assert!(!from_this_node(
            a("[::ffff:10.244.0.5]:5000"),
            a("[::ffff:10.0.0.10]:10249")
        ));
        assert!(!from_this_node(a("[fd00::5]:5000"), a("[fd00::10]:10249")));
    }
}

//! `/debug/services` and `/debug/services/<namespace>/<name>` on the metrics server: JSON by default,
//! `?format=text` for people.

use super::Explainer;
use super::text;
use crate::cluster::model::ServiceName;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The query string: `format=text` or `format=json` (the default).
#[derive(Debug, Default, Deserialize)]
pub struct Format {
    #[serde(default)]
    format: Option<String>,
}

/// Whether the text form was asked for; an unknown format is an error (the answer to send).
fn wants_text(f: &Format) -> Result<bool, Box<Response>> {
    match f.format.as_deref() {
        None | Some("" | "json") => Ok(false),
        Some("text") => Ok(true),
        Some(other) => Err(Box::new(respond(
            StatusCode::BAD_REQUEST,
            "text/plain; charset=utf-8",
            format!("unknown format {other:?}: use json or text\n"),
        ))),
    }
}

fn respond(status: StatusCode, content_type: &'static str, body: String) -> Response {
    let nosniff = HeaderValue::from_static("nosniff");
    let ct = HeaderValue::from_static(content_type);
    let headers = [
        (header::CONTENT_TYPE, ct),
        (header::X_CONTENT_TYPE_OPTIONS, nosniff),
    ];
    (status, headers, body).into_response()
}

/// The JSON or text form of `value`.
fn render<T: Serialize>(value: &T, as_text: bool, text: impl FnOnce(&T) -> String) -> Response {
    if as_text {
        return respond(StatusCode::OK, "text/plain; charset=utf-8", text(value));
    }
    match serde_json::to_string_pretty(value) {
        Ok(body) => respond(StatusCode::OK, "application/json", body + "\n"),
        Err(e) => respond(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain; charset=utf-8",
            format!("encoding the explanation: {e}\n"),
        ),
    }
}

fn failed(e: tokio::task::JoinError) -> Response {
    respond(
        StatusCode::INTERNAL_SERVER_ERROR,
        "text/plain; charset=utf-8",
        format!("explaining failed: {e}\n"),
    )
}

async fn all(State(x): State<Arc<Explainer>>, Query(f): Query<Format>) -> Response {
    let as_text = match wants_text(&f) {
        Ok(t) => t,
        Err(r) => return *r,
    };
    // Reads IPVS: off the async workers.
    match tokio::task::spawn_blocking(move || x.all()).await {
        Ok(n) => render(&n, as_text, text::node),
        Err(e) => failed(e),
    }
}

async fn one(
    State(x): State<Arc<Explainer>>,
    Path((namespace, name)): Path<(String, String)>,
    Query(f): Query<Format>,
) -> Response {
    let as_text = match wants_text(&f) {
        Ok(t) => t,
        Err(r) => return *r,
    };
    let service = ServiceName {
        namespace: namespace.as_str().into(),
        name: name.as_str().into(),
    };
    match tokio::task::spawn_blocking(move || x.service(&service)).await {
        Ok(Some(s)) => render(&s, as_text, text::service),
        Ok(None) => respond(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            format!(
                "Service {namespace}/{name} is not programmed on this node (unknown, headless, \
                 ExternalName, or without a ClusterIP of a family this node serves)\n"
            ),
        ),
        Err(e) => failed(e),
    }
}

/// The explanation routes, over `explainer`.
pub fn router(explainer: Arc<Explainer>) -> Router {
    Router::new()
        .route("/debug/services", get(all))
        .route("/debug/services/{namespace}/{name}", get(one))
        .with_state(explainer)
}

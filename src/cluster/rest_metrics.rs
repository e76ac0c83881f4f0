//! The API client's request metrics, named, labelled and bucketed as Kubernetes component-base's REST
//! client metrics (what the kubernetes-mixin dashboards query):
//!
//! - `rest_client_requests_total{code, method, host}`: every HTTP request sent (each retry counts), by
//!   status code, or `<error>` when no response came (connection failure, deadline);
//! - `rest_client_request_duration_seconds{verb, host}`: from sending to the whole body received (for a
//!   watch: to its response headers).
//!
//! `method` and `verb` are the HTTP method (`GET`, `POST`, ...); `host` is the API server's `host:port`.

use super::deadline::RequestKind;
use super::observed_body::{BodyEnd, ObservedBody, OnBodyEnd};
use super::response_layer::{WrapLayer, WrapResponse, Wrapped};
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};
use std::future::Future;
use std::time::Instant;
use tower::BoxError;

/// Label value of `code` for a request that got no response.
pub const ERROR_CODE: &str = "<error>";

/// Buckets of `rest_client_request_duration_seconds`, as component-base's.
pub fn request_duration_buckets() -> Vec<f64> {
    vec![
        0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
    ]
}

/// The two metrics, registered in a [`Registry`].
#[derive(Clone)]
pub struct RestClientMetrics {
    requests: IntCounterVec,
    duration: HistogramVec,
}

impl RestClientMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let requests = IntCounterVec::new(
            Opts::new(
                "rest_client_requests_total",
                "HTTP requests sent to the API server, by status code (<error> when none came), method and host",
            ),
            &["code", "method", "host"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "rest_client_request_duration_seconds",
                "Seconds from sending an API request to its complete response (a watch: its headers), by verb and host",
            )
            .buckets(request_duration_buckets()),
            &["verb", "host"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        Ok(RestClientMetrics { requests, duration })
    }

    /// A layer counting the requests of a client of the API server at `host` (`host:port`).
    pub fn layer(&self, host: &str) -> RestMetricsLayer {
        WrapLayer(Meter {
            metrics: self.clone(),
            host: host.to_string(),
        })
    }
}

/// Tower layer recording [`RestClientMetrics`] for every request.
pub type RestMetricsLayer = WrapLayer<Meter>;

/// Service produced by [`RestMetricsLayer`].
pub type Metered<S> = Wrapped<Meter, S>;

/// What [`RestMetricsLayer`] does: counts and times the requests of a client of the API server at
/// `host`.
#[derive(Clone)]
pub struct Meter {
    metrics: RestClientMetrics,
    host: String,
}

/// One request in flight: counted once (status code or `<error>`), timed once. Whatever is not recorded
/// when it is dropped is recorded then (a request abandoned by a deadline counts as `<error>`).
pub struct Attempt {
    metrics: RestClientMetrics,
    host: String,
    method: String,
    start: Instant,
    counted: bool,
}

impl Attempt {
    fn count(&mut self, code: &str) {
        self.counted = true;
        self.metrics
            .requests
            .with_label_values(&[code, &self.method, &self.host])
            .inc();
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.counted {
            self.count(ERROR_CODE);
        }
        self.metrics
            .duration
            .with_label_values(&[&self.method, &self.host])
            .observe(self.start.elapsed().as_secs_f64());
    }
}

impl WrapResponse for Meter {
    type Body<B> = MeteredBody<B>;
    /// Whether the request is a watch, and its attempt.
    type Ticket = (bool, Attempt);

    fn request<B>(&self, req: &mut hyper::Request<B>) -> (bool, Attempt) {
        let watch = matches!(RequestKind::of(req.uri()), RequestKind::Watch { .. });
        let attempt = Attempt {
            metrics: self.metrics.clone(),
            host: self.host.clone(),
            method: req.method().as_str().to_string(),
            start: Instant::now(),
            counted: false,
        };
        (watch, attempt)
    }

    async fn response<B>(
        (watch, mut attempt): (bool, Attempt),
        response: impl Future<Output = Result<hyper::Response<B>, BoxError>> + Send,
    ) -> Result<hyper::Response<MeteredBody<B>>, BoxError> {
        let response = response.await?;
        attempt.count(response.status().as_str());
        // A watch is timed to its headers (dropping the attempt records it); anything else to its end.
        let pending = if watch {
            drop(attempt);
            None
        } else {
            Some(attempt)
        };
        Ok(response.map(|inner| ObservedBody::new(inner, PendingAttempt(pending))))
    }
}

/// A response body that records its request's duration when it ends (or is dropped).
pub type MeteredBody<B> = ObservedBody<B, PendingAttempt>;

/// The attempt a body still has to record; recorded (dropped) when the body ends.
pub struct PendingAttempt(Option<Attempt>);

impl OnBodyEnd for PendingAttempt {
    fn ended(&mut self, _: BodyEnd) {
        self.0 = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::response_layer::BoxFuture;
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use tower::{Layer, Service, ServiceExt, service_fn};

    fn text(registry: &Registry) -> String {
        use prometheus::Encoder;
        let mut buf = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&registry.gather(), &mut buf)
            .unwrap();
        String::from_utf8(buf).unwrap()
    }

    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }

    /// Answers `/ok` 200, `/missing` 404, `/broken` with an error, `/slow` never.
    fn server(req: hyper::Request<()>) -> BoxFuture<hyper::Response<Full<Bytes>>> {
        let path = req.uri().path().to_string();
        Box::pin(async move {
            let code = match path.as_str() {
                "/ok" => 200,
                "/missing" => 404,
                "/broken" => return Err("connection refused".into()),
                _ => std::future::pending().await,
            };
            let mut r = hyper::Response::new(Full::new(Bytes::from_static(b"{}")));
            *r.status_mut() = hyper::StatusCode::from_u16(code).unwrap();
            Ok(r)
        })
    }

    #[tokio::test]
    async fn counts_every_request_by_code_method_and_host() {
        let registry = Registry::new();
        let metrics = RestClientMetrics::register(&registry).unwrap();
        let mut svc = metrics.layer("10.96.0.1:443").layer(service_fn(server));
        let req = |m: &str, p: &str| hyper::Request::builder().method(m).uri(p).body(()).unwrap();
        for (m, p) in [
            ("GET", "/ok"),
            ("GET", "/ok"),
            ("POST", "/missing"),
            ("GET", "/broken"),
        ] {
            if let Ok(r) = svc.ready().await.unwrap().call(req(m, p)).await {
                r.into_body().collect().await.unwrap();
            }
        }
        // A request abandoned before its answer (a deadline) counts as an error too.
        let abandoned = svc.ready().await.unwrap().call(req("GET", "/slow"));
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(10), abandoned)
                .await
                .is_err()
        );
        // A watch is timed to its headers: its body is still open here.
        let watch = svc
            .ready()
            .await
            .unwrap()
            .call(req("GET", "/ok?watch=true"))
            .await
            .unwrap();
        let t = text(&registry);
        let host = "host=\"10.96.0.1:443\"";
        let n = |code: &str, method: &str| {
            value(
                &t,
                &format!(
                    "rest_client_requests_total{{code=\"{code}\",{host},method=\"{method}\"}}"
                ),
            )
        };
        assert_eq!(n("200", "GET"), 3.0, "{t}");
        assert_eq!(n("404", "POST"), 1.0, "{t}");
        assert_eq!(n("<error>", "GET"), 2.0, "{t}");
        let count = |verb: &str| {
            value(
                &t,
                &format!("rest_client_request_duration_seconds_count{{{host},verb=\"{verb}\"}}"),
            )
        };
        assert_eq!((count("GET"), count("POST")), (5.0, 1.0), "{t}");
        let buckets: Vec<&str> = t
            .lines()
            .filter(|l| l.starts_with("rest_client_request_duration_seconds_bucket{host=\"10.96.0.1:443\",verb=\"POST\""))
            .collect();
        assert_eq!(buckets.len(), 13, "{buckets:?}");
        drop(watch);
    }
}

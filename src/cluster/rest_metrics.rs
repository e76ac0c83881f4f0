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
use hyper::body::{Body, Frame, SizeHint};
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
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
        RestMetricsLayer {
            metrics: self.clone(),
            host: host.to_string(),
        }
    }
}

/// Tower layer recording [`RestClientMetrics`] for every request.
#[derive(Clone)]
pub struct RestMetricsLayer {
    metrics: RestClientMetrics,
    host: String,
}

impl<S> tower::Layer<S> for RestMetricsLayer {
    type Service = Metered<S>;

    fn layer(&self, inner: S) -> Metered<S> {
        Metered {
            inner,
            metrics: self.metrics.clone(),
            host: self.host.clone(),
        }
    }
}

/// Service produced by [`RestMetricsLayer`].
#[derive(Clone)]
pub struct Metered<S> {
    inner: S,
    metrics: RestClientMetrics,
    host: String,
}

/// One request in flight: counted once (status code or `<error>`), timed once. Whatever is not recorded
/// when it is dropped is recorded then (a request abandoned by a deadline counts as `<error>`).
struct Attempt {
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

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl<S, ReqBody, ResBody> tower::Service<hyper::Request<ReqBody>> for Metered<S>
where
    S: tower::Service<hyper::Request<ReqBody>, Response = hyper::Response<ResBody>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = hyper::Response<MeteredBody<ResBody>>;
    type Error = BoxError;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: hyper::Request<ReqBody>) -> Self::Future {
        let watch = matches!(RequestKind::of(req.uri()), RequestKind::Watch { .. });
        let mut attempt = Attempt {
            metrics: self.metrics.clone(),
            host: self.host.clone(),
            method: req.method().as_str().to_string(),
            start: Instant::now(),
            counted: false,
        };
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await.map_err(Into::into)?;
            attempt.count(response.status().as_str());
            // A watch is timed to its headers (dropping the attempt records it); anything else to its end.
            let pending = if watch {
                drop(attempt);
                None
            } else {
                Some(attempt)
            };
            Ok(response.map(|inner| MeteredBody { inner, pending }))
        })
    }
}

/// A response body that records its request's duration when it ends (or is dropped).
pub struct MeteredBody<B> {
    inner: B,
    pending: Option<Attempt>,
}

impl<B> Body for MeteredBody<B>
where
    B: Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            this.pending = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

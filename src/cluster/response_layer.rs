//! The one tower layer and service behind the API client's response wrappers (deadlines, body limit,
//! gzip, request metrics): each says only what it does to a request and to what comes back
//! ([`WrapResponse`]); passing readiness on, calling the inner service and boxing the future are here.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower::BoxError;

/// The future every wrapped service returns.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

/// What one layer does to each request and its response.
pub trait WrapResponse: Clone + 'static {
    /// The body handed on, around the inner service's body `B`.
    type Body<B>;
    /// What [`request`](Self::request) keeps for the response.
    type Ticket: Send + 'static;

    /// Looks at (or changes) the request before it is sent.
    fn request<B>(&self, req: &mut hyper::Request<B>) -> Self::Ticket;

    /// Waits for the inner service's `response` and wraps it.
    fn response<B>(
        ticket: Self::Ticket,
        response: impl Future<Output = Result<hyper::Response<B>, BoxError>> + Send + 'static,
    ) -> impl Future<Output = Result<hyper::Response<Self::Body<B>>, BoxError>> + Send;
}

/// Tower layer applying `W` to every request.
#[derive(Debug, Clone, Copy, Default)]
pub struct WrapLayer<W>(pub(super) W);

impl<W: WrapResponse, S> tower::Layer<S> for WrapLayer<W> {
    type Service = Wrapped<W, S>;

    fn layer(&self, inner: S) -> Wrapped<W, S> {
        Wrapped {
            inner,
            wrap: self.0.clone(),
        }
    }
}

/// Service produced by [`WrapLayer`].
#[derive(Debug, Clone)]
pub struct Wrapped<W, S> {
    inner: S,
    wrap: W,
}

impl<W, S, ReqBody, ResBody> tower::Service<hyper::Request<ReqBody>> for Wrapped<W, S>
where
    W: WrapResponse,
    S: tower::Service<hyper::Request<ReqBody>, Response = hyper::Response<ResBody>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    ResBody: 'static,
{
    type Response = hyper::Response<W::Body<ResBody>>;
    type Error = BoxError;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: hyper::Request<ReqBody>) -> Self::Future {
        let ticket = self.wrap.request(&mut req);
        let response = self.inner.call(req);
        Box::pin(W::response(ticket, async move {
            response.await.map_err(Into::into)
        }))
    }
}

//! One request opens the connection, the others wait for it: so that requests started together (the
//! watchers' three lists at start, their re-watches after a connection died) share one HTTP/2 connection
//! instead of each opening its own TCP and TLS connection, which the pool only learns is HTTP/2 once ALPN
//! has told it. client-go gets the same from opening one connection before it starts its informers.
//!
//! The gate is closed at first and after any transport error (a request or a response body failing in
//! hyper: a refused or reset connection, an unanswered ping); while it is closed, requests go one at a
//! time, each waiting until the previous one has its response head or has failed, or for [`MAX_WAIT`] at
//! most (long enough for a TCP and TLS handshake: a server that accepts connections but does not answer
//! must not line the requests up behind each other's deadlines). The first response opens it, and
//! requests then run concurrently, over the one HTTP/2 connection or over as many HTTP/1.1 connections as
//! they need. Only connections that may speak HTTP/2 have a gate (HTTPS with HTTP/2 enabled,
//! [`super::transport::Connections`]).

use super::observed_body::{BodyEnd, ObservedBody, OnBodyEnd};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::Mutex;

/// The longest a request waits at a closed gate before it goes anyway.
pub const MAX_WAIT: Duration = Duration::from_secs(2);

/// The gate's state, shared by every client of one pool of connections.
#[derive(Debug, Default)]
struct State {
    /// Whether it ever closes.
    gated: bool,
    /// Whether a request got a response since the last transport error.
    open: AtomicBool,
    /// Held by the one request that may go while the gate is closed.
    opener: Arc<Mutex<()>>,
}

/// Tower layer of [`ConnectGate`]; its clones share one gate.
#[derive(Debug, Clone)]
pub struct ConnectGateLayer {
    state: Arc<State>,
}

impl ConnectGateLayer {
    /// A gate, closed at first; `gated == false`: one that is always open.
    pub fn new(gated: bool) -> Self {
        let state = State {
            gated,
            open: AtomicBool::new(!gated),
            opener: Arc::default(),
        };
        ConnectGateLayer {
            state: Arc::new(state),
        }
    }
}

impl<S> tower::Layer<S> for ConnectGateLayer {
    type Service = ConnectGate<S>;

    fn layer(&self, inner: S) -> ConnectGate<S> {
        ConnectGate {
            inner,
            state: self.state.clone(),
        }
    }
}

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct ConnectGate<S> {
    inner: S,
    state: Arc<State>,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, ReqBody, ResBody> tower::Service<hyper::Request<ReqBody>> for ConnectGate<S>
where
    S: tower::Service<hyper::Request<ReqBody>, Response = hyper::Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
{
    type Response = hyper::Response<GateBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: hyper::Request<ReqBody>) -> Self::Future {
        // The service that was made ready runs the request, after the gate.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let state = self.state.clone();
        Box::pin(async move {
            let guard = if state.open.load(Ordering::SeqCst) {
                None
            } else {
                let waited = tokio::time::timeout(MAX_WAIT, state.opener.clone().lock_owned());
                // Opened while this one waited: no need to hold the others back.
                waited
                    .await
                    .ok()
                    .filter(|_| !state.open.load(Ordering::SeqCst))
            };
            let result = inner.call(req).await;
            state
                .open
                .store(result.is_ok() || !state.gated, Ordering::SeqCst);
            drop(guard);
            let response = result?;
            Ok(response.map(|inner| ObservedBody::new(inner, GateWatch { state })))
        })
    }
}

/// A response body that closes the gate when it fails.
pub type GateBody<B> = ObservedBody<B, GateWatch>;

/// Closes the gate it belongs to when the body it watches fails.
pub struct GateWatch {
    state: Arc<State>,
}

impl OnBodyEnd for GateWatch {
    fn ended(&mut self, how: BodyEnd) {
        if how == BodyEnd::Failed && self.state.gated {
            self.state.open.store(false, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::sync::atomic::AtomicUsize;
    use tower::{Layer, Service, ServiceExt};

    /// A service that answers after 50 ms, counting how many requests it runs at once at most.
    #[derive(Clone, Default)]
    struct Slow {
        now: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    }

    impl Service<hyper::Request<()>> for Slow {
        type Response = hyper::Response<http_body_util::Empty<bytes::Bytes>>;
        type Error = Infallible;
        type Future = BoxFuture<Self::Response, Infallible>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: hyper::Request<()>) -> Self::Future {
            let (now, most) = (self.now.clone(), self.most.clone());
            Box::pin(async move {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                Ok(hyper::Response::new(http_body_util::Empty::new()))
            })
        }
    }

    async fn burst(gate: &ConnectGateLayer, slow: &Slow) {
        let calls = (0..3).map(|_| gate.layer(slow.clone()).oneshot(hyper::Request::new(())));
        for r in futures::future::join_all(calls).await {
            assert!(r.is_ok());
        }
    }

    #[tokio::test]
    async fn the_first_request_goes_alone_then_all_together() {
        let (gate, slow) = (ConnectGateLayer::new(true), Slow::default());
        burst(&gate, &slow).await;
        // The first alone, then the two that waited for it together.
        assert_eq!(slow.most.load(Ordering::SeqCst), 2, "closed at first");
        burst(&gate, &slow).await;
        assert_eq!(slow.most.load(Ordering::SeqCst), 3, "open after a response");
        gate.state.open.store(false, Ordering::SeqCst);
        slow.most.store(0, Ordering::SeqCst);
        burst(&gate, &slow).await;
        assert_eq!(slow.most.load(Ordering::SeqCst), 2, "closed after an error");
        let (open, slow) = (ConnectGateLayer::new(false), Slow::default());
        burst(&open, &slow).await;
        assert_eq!(slow.most.load(Ordering::SeqCst), 3, "no gate");
    }
}

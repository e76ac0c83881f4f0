//! Deadlines on every API request, so that an API server that stops answering is noticed instead of
//! waited on forever (issue 20 §1).
//!
//! - A request that is not a watch must have its response headers within [`REQUEST_TIMEOUT`] of being
//!   sent, and its whole body within the same time.
//! - A watch must have its response headers within [`REQUEST_TIMEOUT`]; then its body must keep moving:
//!   no byte for [`WATCH_IDLE_LIMIT`] ends it with an error (a real API server sends a BOOKMARK to every
//!   watch that allows them about once a minute, so a quiet watch is never idle that long). A watch also
//!   ends [`WATCH_DEADLINE_MARGIN`] after its own `timeoutSeconds`, should the server not close it.
//!
//! The error ends the stream; the watcher then re-watches from its last resourceVersion (and relists when
//! the server answers 410 Gone), as client-go's reflector does. Connecting is bounded separately
//! ([`CONNECT_TIMEOUT`]) and the TCP connections carry keepalive probes ([`KEEPALIVE_IDLE`]), which end a
//! connection whose peer is gone (a half-open flow) even while nothing is being read.

use hyper::body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tower::BoxError;

/// Longest a TCP connect to the API server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a request may wait for its response headers, and a non-watch request for its whole body.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a watch may go without receiving a byte before it is presumed dead.
pub const WATCH_IDLE_LIMIT: Duration = Duration::from_secs(70);
/// How long past its `timeoutSeconds` a watch may stay open before the client ends it.
pub const WATCH_DEADLINE_MARGIN: Duration = Duration::from_secs(30);
/// Idle time before the first TCP keepalive probe.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
/// Interval between unanswered TCP keepalive probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Unanswered TCP keepalive probes after which the kernel resets the connection.
pub const KEEPALIVE_PROBES: u32 = 4;
/// Bounds of the server-side timeout (`timeoutSeconds`) of each watch: a random value in
/// `[min, 2 × min)`, as client-go's reflector picks.
pub const WATCH_TIMEOUT_MIN: Duration = Duration::from_secs(300);

/// The limits a client applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// See [`REQUEST_TIMEOUT`].
    pub request: Duration,
    /// See [`WATCH_IDLE_LIMIT`].
    pub watch_idle: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            request: REQUEST_TIMEOUT,
            watch_idle: WATCH_IDLE_LIMIT,
        }
    }
}

/// A server-side watch timeout in seconds, random in `[WATCH_TIMEOUT_MIN, 2 × WATCH_TIMEOUT_MIN)` so that
/// the watches of many nodes do not all end (and re-watch) together.
pub fn watch_timeout_seconds() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    // A fresh RandomState is randomly keyed: a cheap source of a few random bits.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let min = u32::try_from(WATCH_TIMEOUT_MIN.as_secs()).unwrap_or(u32::MAX);
    let spread = u64::from(min.max(1));
    min + u32::try_from(random % spread).unwrap_or(0)
}

/// Why a request was ended by the client.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
pub enum TimedOut {
    #[error("no response from the API server within {0:?}")]
    Response(Duration),
    #[error("the response body was not complete within {0:?}")]
    Body(Duration),
    #[error("no data on the watch for {0:?}: the connection is presumed dead")]
    Idle(Duration),
    #[error("the watch stayed open {0:?} past its timeoutSeconds")]
    WatchDeadline(Duration),
}

/// What the deadlines of one request depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// Anything but a watch.
    Plain,
    /// A watch (`watch=true`), with its `timeoutSeconds` when given.
    Watch { timeout: Option<Duration> },
}

impl RequestKind {
    /// The kind of a request to `uri`, read from its query.
    pub fn of(uri: &hyper::Uri) -> RequestKind {
        let mut watch = false;
        let mut timeout = None;
        for pair in uri.query().unwrap_or_default().split('&') {
            match pair.split_once('=') {
                Some(("watch", v)) => watch = v == "true" || v == "1",
                Some(("timeoutSeconds", v)) => {
                    timeout = v.parse::<u64>().ok().map(Duration::from_secs)
                }
                _ => {}
            }
        }
        if watch {
            RequestKind::Watch { timeout }
        } else {
            RequestKind::Plain
        }
    }
}

/// Tower layer applying [`Deadlines`] to every request.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeadlineLayer {
    deadlines: Deadlines,
}

impl DeadlineLayer {
    /// A layer with these limits.
    pub fn new(deadlines: Deadlines) -> Self {
        DeadlineLayer { deadlines }
    }
}

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = Deadlined<S>;

    fn layer(&self, inner: S) -> Deadlined<S> {
        Deadlined {
            inner,
            deadlines: self.deadlines,
        }
    }
}

/// Service produced by [`DeadlineLayer`].
#[derive(Debug, Clone)]
pub struct Deadlined<S> {
    inner: S,
    deadlines: Deadlines,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl<S, ReqBody, ResBody> tower::Service<hyper::Request<ReqBody>> for Deadlined<S>
where
    S: tower::Service<hyper::Request<ReqBody>, Response = hyper::Response<ResBody>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = hyper::Response<DeadlineBody<ResBody>>;
    type Error = BoxError;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: hyper::Request<ReqBody>) -> Self::Future {
        let kind = RequestKind::of(req.uri());
        let d = self.deadlines;
        let start = Instant::now();
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = match tokio::time::timeout(d.request, response).await {
                Ok(r) => r.map_err(Into::into)?,
                Err(_) => return Err(TimedOut::Response(d.request).into()),
            };
            Ok(response.map(|body| DeadlineBody::new(body, kind, d, start)))
        })
    }
}

/// A response body that fails once its deadline passes or, for a watch, once it stays idle too long.
pub struct DeadlineBody<B> {
    inner: B,
    /// Absolute deadline and the error it produces.
    deadline: Option<(Pin<Box<Sleep>>, TimedOut)>,
    /// Idle limit (watches only) and its timer, reset by every frame.
    idle: Option<(Duration, Pin<Box<Sleep>>)>,
    failed: bool,
}

impl<B> DeadlineBody<B> {
    fn new(inner: B, kind: RequestKind, d: Deadlines, start: Instant) -> Self {
        let (deadline, idle) = match kind {
            RequestKind::Plain => (Some((start + d.request, TimedOut::Body(d.request))), None),
            RequestKind::Watch { timeout } => (
                timeout.map(|t| {
                    (
                        start + t + WATCH_DEADLINE_MARGIN,
                        TimedOut::WatchDeadline(WATCH_DEADLINE_MARGIN),
                    )
                }),
                Some(d.watch_idle),
            ),
        };
        DeadlineBody {
            inner,
            deadline: deadline.map(|(at, e)| (Box::pin(tokio::time::sleep_until(at)), e)),
            idle: idle.map(|l| (l, Box::pin(tokio::time::sleep(l)))),
            failed: false,
        }
    }

    /// The error of a timer that fired, if one did.
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<TimedOut> {
        if let Some((sleep, e)) = self.deadline.as_mut()
            && sleep.as_mut().poll(cx).is_ready()
        {
            return Some(*e);
        }
        if let Some((limit, sleep)) = self.idle.as_mut()
            && sleep.as_mut().poll(cx).is_ready()
        {
            return Some(TimedOut::Idle(*limit));
        }
        None
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = &mut *self;
        if this.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some((limit, sleep)) = this.idle.as_mut() {
                    sleep.as_mut().reset(Instant::now() + *limit);
                }
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        match this.expired(cx) {
            Some(e) => {
                this.failed = true;
                Poll::Ready(Some(Err(e.into())))
            }
            None => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

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
//! the server answers 410 Gone), as client-go's reflector does. A request that got no response in time or
//! a watch that went idle also retires its connection from the pool (its other requests run on): over
//! HTTP/1.1 the connection closes with the request anyway, but an HTTP/2 connection carries every request,
//! and the re-watch must not go back to a connection that has stopped delivering. Connecting is bounded separately
//! ([`CONNECT_TIMEOUT`]) and the TCP connections carry keepalive probes ([`KEEPALIVE_IDLE`]), which end a
//! connection whose peer is gone (a half-open flow) even while nothing is being read.

use super::response_layer::{WrapLayer, WrapResponse, Wrapped};
use hyper::body::{Body, Frame, SizeHint};
use hyper_util::client::legacy::connect::{CaptureConnection, capture_connection};
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

/// `e` with its sources, `: `-separated, skipping a source whose text its parent already shows (hyper's
/// "error reading a body from connection" says why only in its source: "Connection timed out").
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
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
pub type DeadlineLayer = WrapLayer<Deadlines>;

/// Service produced by [`DeadlineLayer`].
pub type Deadlined<S> = Wrapped<Deadlines, S>;

impl DeadlineLayer {
    /// A layer with these limits.
    pub fn new(deadlines: Deadlines) -> Self {
        WrapLayer(deadlines)
    }
}

/// What a request keeps for its response: its kind, limits, start and connection.
pub struct DeadlineTicket {
    kind: RequestKind,
    deadlines: Deadlines,
    start: Instant,
    connection: CaptureConnection,
}

impl WrapResponse for Deadlines {
    type Body<B> = DeadlineBody<B>;
    type Ticket = DeadlineTicket;

    fn request<B>(&self, req: &mut hyper::Request<B>) -> DeadlineTicket {
        DeadlineTicket {
            kind: RequestKind::of(req.uri()),
            deadlines: *self,
            start: Instant::now(),
            connection: capture_connection(req),
        }
    }

    async fn response<B>(
        t: DeadlineTicket,
        response: impl Future<Output = Result<hyper::Response<B>, BoxError>> + Send,
    ) -> Result<hyper::Response<DeadlineBody<B>>, BoxError> {
        let d = t.deadlines;
        let response = match tokio::time::timeout(d.request, response).await {
            Ok(r) => r?,
            Err(_) => {
                retire(&t.connection);
                return Err(TimedOut::Response(d.request).into());
            }
        };
        Ok(response.map(|body| DeadlineBody::new(body, t.kind, d, t.start, t.connection)))
    }
}

/// Takes the connection that `connection` saw carry a request out of the pool: later requests get
/// another one.
fn retire(connection: &CaptureConnection) {
    if let Some(c) = connection.connection_metadata().as_ref() {
        c.poison();
    }
}

/// A response body that fails once its deadline passes or, for a watch, once it stays idle too long.
pub struct DeadlineBody<B> {
    inner: B,
    /// The connection it comes over, retired when the body goes idle.
    connection: CaptureConnection,
    /// Absolute deadline and the error it produces.
    deadline: Option<(Pin<Box<Sleep>>, TimedOut)>,
    /// Idle limit (watches only) and its timer, reset by every frame.
    idle: Option<(Duration, Pin<Box<Sleep>>)>,
    failed: bool,
}

impl<B> DeadlineBody<B> {
    fn new(
        inner: B,
        kind: RequestKind,
        d: Deadlines,
        start: Instant,
        connection: CaptureConnection,
    ) -> Self {
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
            connection,
            deadline: deadline.map(|(at, e)| (Box::pin(tokio::time::sleep_until(at)), e)),
            idle: idle.map(|l| (l, Box::pin(tokio::time::sleep(l)))),
            failed: false,
        }
    }

    /// The error of the absolute deadline, if it passed.
    fn past_deadline(&mut self, cx: &mut Context<'_>) -> Option<TimedOut> {
        let (sleep, e) = self.deadline.as_mut()?;
        sleep.as_mut().poll(cx).is_ready().then_some(*e)
    }

    /// The error of the idle limit, if it passed.
    fn idle_too_long(&mut self, cx: &mut Context<'_>) -> Option<TimedOut> {
        let (limit, sleep) = self.idle.as_mut()?;
        sleep
            .as_mut()
            .poll(cx)
            .is_ready()
            .then_some(TimedOut::Idle(*limit))
    }

    fn fail(&mut self, e: TimedOut) -> Poll<Option<Result<Frame<B::Data>, BoxError>>>
    where
        B: Body,
    {
        self.failed = true;
        Poll::Ready(Some(Err(e.into())))
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
        // The deadline first: a body that keeps trickling must still end at it.
        if let Some(e) = this.past_deadline(cx) {
            return this.fail(e);
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
        match this.idle_too_long(cx) {
            Some(e) => {
                retire(&this.connection);
                this.fail(e)
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures::channel::mpsc;
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::Bytes;
    use std::convert::Infallible;
    use tower::{Layer, ServiceExt, service_fn};

    type Chunks = StreamBody<mpsc::Receiver<Result<Frame<Bytes>, Infallible>>>;

    type Feed = mpsc::Sender<Result<Frame<Bytes>, Infallible>>;
    type Fed = tower::util::BoxService<hyper::Request<()>, hyper::Response<Chunks>, Infallible>;

    /// A service answering at once with a body fed through the returned sender.
    fn fed() -> (Fed, Feed) {
        let (tx, rx) = mpsc::channel(16);
        let mut rx = Some(rx);
        let svc = service_fn(move |_req| {
            let body = StreamBody::new(rx.take().expect("one request"));
            std::future::ready(Ok::<_, Infallible>(hyper::Response::new(body)))
        });
        (tower::util::BoxService::new(svc), tx)
    }

    fn get(uri: &str) -> hyper::Request<()> {
        hyper::Request::get(uri).body(()).unwrap()
    }

    #[test]
    fn error_chain_shows_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "Connection timed out");
        let outer = std::io::Error::other(io);
        assert_eq!(error_chain(&outer), "Connection timed out");
        #[derive(Debug, thiserror::Error)]
        #[error("error reading a body from connection")]
        struct Read(#[source] std::io::Error);
        let e = Read(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "Connection timed out",
        ));
        assert_eq!(
            error_chain(&e),
            "error reading a body from connection: Connection timed out"
        );
    }

    #[test]
    fn request_kind_reads_the_query() {
        let kind = |u: &str| RequestKind::of(&u.parse().unwrap());
        assert_eq!(kind("/api/v1/services?limit=500"), RequestKind::Plain);
        assert_eq!(kind("/api/v1/services"), RequestKind::Plain);
        assert_eq!(
            kind("/api/v1/services?watch=true&timeoutSeconds=412&allowWatchBookmarks=true"),
            RequestKind::Watch {
                timeout: Some(Duration::from_secs(412))
            }
        );
        assert_eq!(
            kind("/api/v1/nodes?watch=1"),
            RequestKind::Watch { timeout: None }
        );
        assert_eq!(kind("/api/v1/nodes?watch=false"), RequestKind::Plain);
    }

    #[test]
    fn watch_timeouts_spread_over_five_to_ten_minutes() {
        let drawn: Vec<u32> = (0..200).map(|_| watch_timeout_seconds()).collect();
        assert!(drawn.iter().all(|t| (300..600).contains(t)), "{drawn:?}");
        let distinct: std::collections::BTreeSet<u32> = drawn.into_iter().collect();
        assert!(distinct.len() > 50, "{distinct:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn unanswered_request_fails_at_its_deadline() {
        let silent = service_fn(|_req: hyper::Request<()>| {
            std::future::pending::<Result<hyper::Response<http_body_util::Empty<Bytes>>, Infallible>>(
            )
        });
        let svc = DeadlineLayer::default().layer(silent);
        let start = Instant::now();
        let Err(err) = svc.oneshot(get("/api/v1/nodes/n1")).await else {
            panic!("answered");
        };
        assert_eq!(start.elapsed(), REQUEST_TIMEOUT);
        assert_eq!(
            err.downcast_ref::<TimedOut>(),
            Some(&TimedOut::Response(REQUEST_TIMEOUT))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn body_must_complete_within_the_deadline() {
        let (svc, mut tx) = fed();
        let svc = DeadlineLayer::default().layer(svc);
        let start = Instant::now();
        let resp = svc.oneshot(get("/api/v1/services")).await.unwrap();
        tx.try_send(Ok(Frame::data(Bytes::from_static(b"{"))))
            .unwrap();
        let err = resp.into_body().collect().await.unwrap_err();
        assert_eq!(start.elapsed(), REQUEST_TIMEOUT);
        assert_eq!(
            err.downcast_ref::<TimedOut>(),
            Some(&TimedOut::Body(REQUEST_TIMEOUT))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn watch_lives_while_data_comes_and_dies_when_it_stops() {
        let (svc, mut tx) = fed();
        let svc = DeadlineLayer::default().layer(svc);
        let resp = svc
            .oneshot(get("/api/v1/services?watch=true&timeoutSeconds=600"))
            .await
            .unwrap();
        let mut body = resp.into_body();
        // A bookmark a minute for nine minutes: far past the request deadline, never idle.
        for _ in 0..9 {
            tokio::time::sleep(Duration::from_secs(60)).await;
            tx.try_send(Ok(Frame::data(Bytes::from_static(b"{}\n"))))
                .unwrap();
            assert!(body.frame().await.unwrap().is_ok());
        }
        let silent = Instant::now();
        let err = body.frame().await.unwrap().unwrap_err();
        assert_eq!(silent.elapsed(), WATCH_IDLE_LIMIT);
        assert_eq!(
            err.downcast_ref::<TimedOut>(),
            Some(&TimedOut::Idle(WATCH_IDLE_LIMIT))
        );
        assert!(
            body.frame().await.is_none(),
            "the stream ends after the error"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn watch_ends_past_its_timeout_seconds() {
        let (svc, mut tx) = fed();
        let svc = DeadlineLayer::default().layer(svc);
        let start = Instant::now();
        let resp = svc
            .oneshot(get("/api/v1/services?watch=true&timeoutSeconds=60"))
            .await
            .unwrap();
        let mut body = resp.into_body();
        let err = loop {
            tokio::time::sleep(Duration::from_secs(10)).await;
            let _ = tx.try_send(Ok(Frame::data(Bytes::from_static(b"{}\n"))));
            match body.frame().await.unwrap() {
                Ok(_) => continue,
                Err(e) => break e,
            }
        };
        assert!(start.elapsed() >= Duration::from_secs(60) + WATCH_DEADLINE_MARGIN);
        assert_eq!(
            err.downcast_ref::<TimedOut>(),
            Some(&TimedOut::WatchDeadline(WATCH_DEADLINE_MARGIN))
        );
    }
}

//! Faults of the test API server that stall instead of failing (issue 20 §1):
//!
//! - black hole: every request is accepted and never answered (a hung API server, a load balancer that
//!   black-holes), and the watches open at that moment go silent;
//! - stall: the watches open at that moment stop sending without closing (the API server's node died, a
//!   NAT dropped the flow), while new requests are served normally.
//!
//! - a replaced frame: the next data frame of a watch on a given path is replaced by given bytes (an
//!   event the client cannot decode, a line longer than its limit).
//!
//! All are an axum middleware in front of the router, so they work whatever the handlers do.

use super::TestApiServer;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use hyper::body::Frame;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// Fault switches and what they caught.
#[derive(Debug, Default)]
pub struct Faults {
    black_hole: AtomicBool,
    /// Watches started before the generation moved past theirs are silent.
    stall_generation: AtomicU64,
    /// Requests swallowed by the black hole so far.
    swallowed: AtomicU64,
    /// The next data frame of a watch whose path contains `.0` is replaced by `.1`.
    replace: Mutex<Option<(String, Vec<u8>)>>,
    /// Frames replaced so far.
    replaced: AtomicU64,
}

/// Whether `uri` is a watch request.
pub fn is_watch(uri: &axum::http::Uri) -> bool {
    uri.query()
        .unwrap_or_default()
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1")
}

/// The middleware: swallows requests while black-holed, makes watch bodies stallable.
pub async fn middleware(State(faults): State<Arc<Faults>>, req: Request, next: Next) -> Response {
    if faults.black_hole.load(Ordering::SeqCst) {
        faults.swallowed.fetch_add(1, Ordering::SeqCst);
        // Accepted, read, never answered: the connection stays open until the client gives up.
        return std::future::pending().await;
    }
    let watch = is_watch(req.uri());
    let path = req.uri().path().to_string();
    let response = next.run(req).await;
    if !watch {
        return response;
    }
    let generation = faults.stall_generation.load(Ordering::SeqCst);
    response.map(|inner| {
        Body::new(StallableBody {
            inner,
            generation,
            faults,
            path,
        })
    })
}

/// A watch body that stops (without ending) once its stall generation is passed, and whose next data
/// frame can be replaced.
struct StallableBody {
    inner: Body,
    generation: u64,
    faults: Arc<Faults>,
    path: String,
}

impl StallableBody {
    /// The replacement of this watch's next frame, if one is set for its path (taken).
    fn replacement(&self) -> Option<Vec<u8>> {
        let mut slot = self
            .faults
            .replace
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !slot
            .as_ref()
            .is_some_and(|(p, _)| self.path.contains(p.as_str()))
        {
            return None;
        }
        self.faults.replaced.fetch_add(1, Ordering::SeqCst);
        slot.take().map(|(_, bytes)| bytes)
    }
}

impl hyper::body::Body for StallableBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if self.faults.stall_generation.load(Ordering::SeqCst) > self.generation {
            // Silent for good: never woken, never ended; the client has to notice.
            return Poll::Pending;
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) if frame.is_data() => match self.replacement() {
                Some(bytes) => Poll::Ready(Some(Ok(Frame::data(bytes.into())))),
                None => Poll::Ready(Some(Ok(frame))),
            },
            other => other,
        }
    }
}

impl TestApiServer {
    /// While `on`, every request is accepted and never answered; turning it on also silences every open
    /// watch (as [`Self::stall_watches`]). Requests swallowed stay unanswered after it is turned off.
    pub fn set_black_hole(&self, on: bool) {
        if on {
            self.stall_watches();
        }
        self.faults.black_hole.store(on, Ordering::SeqCst);
    }

    /// Every watch open now stops sending, for good, without closing; later watches are served normally.
    pub fn stall_watches(&self) {
        self.faults.stall_generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Replaces the next data frame (one event or bookmark) of a watch whose path contains `path_part`
    /// with `bytes`, sent as they are.
    pub fn replace_next_watch_frame(&self, path_part: &str, bytes: Vec<u8>) {
        *self
            .faults
            .replace
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some((path_part.to_string(), bytes));
    }

    /// Watch frames replaced so far.
    pub fn replaced_watch_frames(&self) -> u64 {
        self.faults.replaced.load(Ordering::SeqCst)
    }

    /// Requests swallowed by the black hole so far.
    pub fn swallowed_requests(&self) -> u64 {
        self.faults.swallowed.load(Ordering::SeqCst)
    }
}

//! A response body passed through unchanged while a watcher learns how it ends: the connect gate closes
//! when a body fails, the request metrics time a request to its body's end.

use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// How a body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEnd {
    /// Its last frame was read.
    Complete,
    /// Reading it failed.
    Failed,
}

/// What an [`ObservedBody`] tells when its body ends (again for every poll past the end).
pub trait OnBodyEnd {
    /// The body ended `how`.
    fn ended(&mut self, how: BodyEnd);
}

/// `inner`, frame for frame, with its watcher told when it ends.
pub struct ObservedBody<B, W> {
    inner: B,
    watcher: W,
}

impl<B, W> ObservedBody<B, W> {
    /// `inner` watched by `watcher`.
    pub fn new(inner: B, watcher: W) -> Self {
        ObservedBody { inner, watcher }
    }
}

impl<B, W> Body for ObservedBody<B, W>
where
    B: Body + Unpin,
    W: OnBodyEnd + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => this.watcher.ended(BodyEnd::Complete),
            Poll::Ready(Some(Err(_))) => this.watcher.ended(BodyEnd::Failed),
            _ => {}
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

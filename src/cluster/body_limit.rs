//! How much of an API server's response the client holds (issue 29 §3). Every response body is read
//! within a bound:
//!
//! - a watch, frame by frame, each frame at most [`MAX_OBJECT_BYTES`] (`listwatch/frames.rs`);
//! - a list, item by item as it arrives, each item at most [`MAX_OBJECT_BYTES`] and the rest of the list
//!   (its metadata) at most [`MAX_LIST_META_BYTES`] (`listwatch/list_json.rs`, `list_proto.rs`): a list
//!   of any length costs the objects kept, never the whole body at once;
//! - an error status, its first [`MAX_ERROR_BODY_BYTES`];
//! - anything else (the Node GET, Event writes), whole, at most [`MAX_OBJECT_BYTES`] ([`BodyLimitLayer`]).
//!
//! The bounds apply to the decompressed bytes (`gzip.rs` sits below this layer). Time is bounded
//! separately (`deadline.rs`).

use super::deadline::RequestKind;
use super::response_layer::{WrapLayer, WrapResponse, Wrapped};
use hyper::body::{Body, Buf, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower::BoxError;

/// The most bytes one object may take on the wire: a watch frame, a list item, a GET's body. client-go's
/// streaming decoder refuses an object past the same 16 MiB; etcd keeps objects under 1.5 MiB by default.
pub const MAX_OBJECT_BYTES: usize = 16 << 20;
/// The most bytes of a list body outside its items (kind, apiVersion, metadata with the continue token).
pub const MAX_LIST_META_BYTES: usize = 1 << 20;
/// The most bytes of an error response read for its `Status` (the rest is not read).
pub const MAX_ERROR_BODY_BYTES: usize = 64 << 10;

/// Request extension: the caller reads this response's body incrementally within its own bounds (a
/// list decoded item by item), so [`BodyLimitLayer`] leaves it alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadIncrementally;

/// A response body went past its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the API server's response body exceeds the limit of {0} bytes")]
pub struct TooLarge(pub usize);

/// Tower layer capping the body of every response that is neither a watch nor marked
/// [`ReadIncrementally`] at `max` bytes.
pub type BodyLimitLayer = WrapLayer<BodyLimit>;

/// Service produced by [`BodyLimitLayer`].
pub type BodyLimited<S> = Wrapped<BodyLimit, S>;

/// What [`BodyLimitLayer`] does: bodies capped at `max` bytes.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit {
    max: usize,
}

impl BodyLimitLayer {
    /// Bodies capped at `max` bytes.
    pub fn new(max: usize) -> Self {
        WrapLayer(BodyLimit { max })
    }
}

impl Default for BodyLimit {
    fn default() -> Self {
        BodyLimit {
            max: MAX_OBJECT_BYTES,
        }
    }
}

impl WrapResponse for BodyLimit {
    type Body<B> = LimitedBody<B>;
    /// The limit of this response's body (`None`: read within the caller's own bounds).
    type Ticket = Option<usize>;

    fn request<B>(&self, req: &mut hyper::Request<B>) -> Option<usize> {
        let unbounded = req.extensions().get::<ReadIncrementally>().is_some()
            || RequestKind::of(req.uri()) != RequestKind::Plain;
        (!unbounded).then_some(self.max)
    }

    async fn response<B>(
        max: Option<usize>,
        response: impl Future<Output = Result<hyper::Response<B>, BoxError>> + Send,
    ) -> Result<hyper::Response<LimitedBody<B>>, BoxError> {
        Ok(response.await?.map(|inner| LimitedBody {
            inner,
            left: max,
            max: max.unwrap_or(0),
            failed: false,
        }))
    }
}

/// A body that fails once more than its limit has been read (`left: None` = no limit).
pub struct LimitedBody<B> {
    inner: B,
    left: Option<usize>,
    max: usize,
    failed: bool,
}

impl<B> Body for LimitedBody<B>
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
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => return Poll::Pending,
        };
        if let (Some(left), Some(data)) = (this.left.as_mut(), frame.data_ref()) {
            match left.checked_sub(data.remaining()) {
                Some(l) => *left = l,
                None => {
                    this.failed = true;
                    return Poll::Ready(Some(Err(TooLarge(this.max).into())));
                }
            }
        }
        Poll::Ready(Some(Ok(frame)))
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
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use std::convert::Infallible;
    use tower::{Layer, ServiceExt, service_fn};

    async fn body_of(uri: &str, incremental: bool, len: usize) -> Result<Bytes, BoxError> {
        let svc = service_fn(move |_req: hyper::Request<()>| {
            let body = Full::new(Bytes::from(vec![b'x'; len]));
            std::future::ready(Ok::<_, Infallible>(hyper::Response::new(body)))
        });
        let mut req = hyper::Request::get(uri).body(()).unwrap();
        if incremental {
            req.extensions_mut().insert(ReadIncrementally);
        }
        let resp = BodyLimitLayer::new(100).layer(svc).oneshot(req).await?;
        Ok(resp.into_body().collect().await?.to_bytes())
    }

    #[tokio::test]
    async fn plain_bodies_are_capped_lists_and_watches_are_not() {
        assert_eq!(
            body_of("/api/v1/nodes/n", false, 100).await.unwrap().len(),
            100
        );
        let err = body_of("/api/v1/nodes/n", false, 101).await.unwrap_err();
        assert_eq!(err.downcast_ref::<TooLarge>(), Some(&TooLarge(100)));
        assert_eq!(
            body_of("/api/v1/services?limit=500", true, 1000)
                .await
                .unwrap()
                .len(),
            1000
        );
        assert_eq!(
            body_of("/api/v1/services?watch=true", false, 1000)
                .await
                .unwrap()
                .len(),
            1000
        );
    }
}

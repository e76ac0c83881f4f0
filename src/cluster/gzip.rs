//! Compressed responses, as client-go asks for them (issue 29 §4). Go's HTTP transport, under client-go,
//! sends `Accept-Encoding: gzip` on every request unless the kubeconfig says `disable-compression: true`,
//! and the API server compresses a list, get or error response larger than 128 KiB when asked (watches
//! are never compressed). This layer does the same: it asks for gzip on requests that do not name an
//! encoding themselves (the watches ask for `identity`) and decodes `Content-Encoding: gzip` bodies as
//! they arrive.
//!
//! Decoding is bounded: the input is fed to the decoder [`IN_STEP`] bytes at a time and each step's output
//! is handed on before the next, so at most about a thousand times [`IN_STEP`] (deflate's largest ratio)
//! is held here; what reads the body bounds the total (`body_limit.rs`), so a gzip bomb costs at most the
//! reader's cap. The decoder is `flate2` on its pure-Rust `miniz_oxide` back end.

use super::response_layer::{WrapLayer, WrapResponse};
use bytes::{Buf, Bytes};
use flate2::write::GzDecoder;
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, HeaderValue};
use hyper::body::{Body, Frame, SizeHint};
use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower::BoxError;

/// Compressed bytes fed to the decoder per step.
pub const IN_STEP: usize = 1024;

/// A response in an encoding this client cannot read, or a corrupt gzip stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GzipError {
    /// `Content-Encoding` names something other than gzip.
    #[error("the API server answered in Content-Encoding {0:?}, which this client does not read")]
    Unsupported(String),
    /// The gzip stream is corrupt, truncated or followed by other data.
    #[error("corrupt gzip response: {0}")]
    Corrupt(String),
}

/// Tower layer asking for gzip (when `enabled`) and decoding gzip responses (always: a server that
/// compresses unasked is still read).
pub type GzipLayer = WrapLayer<Gzip>;

/// What [`GzipLayer`] does.
#[derive(Debug, Clone, Copy)]
pub struct Gzip {
    enabled: bool,
}

impl GzipLayer {
    /// `enabled = false` is the kubeconfig's `disable-compression: true`.
    pub fn new(enabled: bool) -> Self {
        WrapLayer(Gzip { enabled })
    }
}

impl WrapResponse for Gzip {
    type Body<B> = GunzipBody<B>;
    type Ticket = ();

    fn request<B>(&self, req: &mut hyper::Request<B>) {
        if self.enabled && !req.headers().contains_key(ACCEPT_ENCODING) {
            req.headers_mut()
                .insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        }
    }

    async fn response<B>(
        _: (),
        response: impl Future<Output = Result<hyper::Response<B>, BoxError>> + Send,
    ) -> Result<hyper::Response<GunzipBody<B>>, BoxError> {
        let mut response = response.await?;
        let encoding = response.headers().get(CONTENT_ENCODING).map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .trim()
                .to_ascii_lowercase()
        });
        let gzip = match encoding.as_deref() {
            None | Some("" | "identity") => false,
            Some("gzip" | "x-gzip") => true,
            Some(other) => return Err(GzipError::Unsupported(other.to_string()).into()),
        };
        if gzip {
            response.headers_mut().remove(CONTENT_ENCODING);
            response.headers_mut().remove(CONTENT_LENGTH);
        }
        Ok(response.map(|inner| GunzipBody::new(inner, gzip)))
    }
}

/// A response body, decoded from gzip when it came compressed.
pub struct GunzipBody<B> {
    inner: B,
    /// `None`: the body is not compressed.
    decoder: Option<Gunzip>,
}

impl<B> GunzipBody<B> {
    /// `inner`, decoded when `gzip`.
    pub fn new(inner: B, gzip: bool) -> Self {
        Self {
            inner,
            decoder: gzip.then(Gunzip::default),
        }
    }
}

/// The incremental gzip decoder and the compressed bytes not fed to it yet.
pub struct Gunzip {
    decoder: GzDecoder<Vec<u8>>,
    pending: Bytes,
    done: bool,
}

impl Default for Gunzip {
    fn default() -> Self {
        Self {
            decoder: GzDecoder::new(Vec::new()),
            pending: Bytes::new(),
            done: false,
        }
    }
}

fn corrupt(e: impl std::fmt::Display) -> GzipError {
    GzipError::Corrupt(e.to_string())
}

impl Gunzip {
    /// Queues compressed bytes (after those not decoded yet).
    pub fn feed(&mut self, compressed: Bytes) {
        if self.pending.is_empty() {
            self.pending = compressed;
        } else {
            let mut both = Vec::with_capacity(self.pending.len() + compressed.len());
            both.extend_from_slice(&self.pending);
            both.extend_from_slice(&compressed);
            self.pending = Bytes::from(both);
        }
    }

    /// Decodes queued bytes until some output appears or the queue is empty; at most one step's output
    /// is returned at a time.
    pub fn step(&mut self) -> Result<Option<Bytes>, GzipError> {
        while !self.pending.is_empty() {
            let n = self.pending.len().min(IN_STEP);
            let used = self.decoder.write(&self.pending[..n]).map_err(corrupt)?;
            if used == 0 {
                return Err(corrupt("data after the end of the gzip stream"));
            }
            self.pending.advance(used);
            let out = self.decoder.get_mut();
            if !out.is_empty() {
                return Ok(Some(Bytes::from(std::mem::take(out))));
            }
        }
        Ok(None)
    }

    /// Ends the stream: the trailer must have been read; returns the last output.
    pub fn finish(&mut self) -> Result<Option<Bytes>, GzipError> {
        self.done = true;
        self.decoder.try_finish().map_err(corrupt)?;
        let out = std::mem::take(self.decoder.get_mut());
        Ok((!out.is_empty()).then(|| Bytes::from(out)))
    }
}

impl<B> Body for GunzipBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let Some(decoder) = this.decoder.as_mut() else {
            return Pin::new(&mut this.inner).poll_frame(cx).map_err(Into::into);
        };
        loop {
            if decoder.done {
                return Poll::Ready(None);
            }
            match decoder.step() {
                Ok(Some(out)) => return Poll::Ready(Some(Ok(Frame::data(out)))),
                Ok(None) => {}
                Err(e) => {
                    decoder.done = true;
                    return Poll::Ready(Some(Err(e.into())));
                }
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        decoder.feed(data);
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(None) => {
                    return Poll::Ready(
                        decoder
                            .finish()
                            .map_err(Into::into)
                            .transpose()
                            .map(|r| r.map(Frame::data)),
                    );
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.decoder {
            None => self.inner.is_end_stream(),
            Some(d) => d.done,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.decoder {
            None => self.inner.size_hint(),
            Some(_) => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use http_body_util::{BodyExt, Full, StreamBody};
    use std::convert::Infallible;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    /// Decodes `compressed` fed in `chunk`-byte pieces; the largest piece of output seen.
    async fn decode(compressed: &[u8], chunk: usize) -> Result<(Vec<u8>, usize), BoxError> {
        let pieces: Vec<Result<Frame<Bytes>, Infallible>> = compressed
            .chunks(chunk)
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        let mut body = GunzipBody::new(StreamBody::new(futures::stream::iter(pieces)), true);
        let (mut out, mut largest) = (Vec::new(), 0);
        while let Some(frame) = body.frame().await {
            let data = frame?.into_data().unwrap_or_default();
            largest = largest.max(data.len());
            out.extend_from_slice(&data);
        }
        Ok((out, largest))
    }

    #[tokio::test]
    async fn decodes_in_bounded_steps_however_split() {
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let z = gzip(&data);
        for chunk in [1, 7, 1000, z.len()] {
            assert_eq!(decode(&z, chunk).await.unwrap().0, data, "chunk {chunk}");
        }
        // A bomb: 16 MiB of zeros in about 16 KiB; no step hands on more than ~1 MiB.
        let bomb = gzip(&vec![0; 16 << 20]);
        let (out, largest) = decode(&bomb, 1 << 16).await.unwrap();
        assert_eq!(out.len(), 16 << 20);
        assert!(largest <= 1100 * IN_STEP, "{largest}");
    }

    #[tokio::test]
    async fn corrupt_truncated_and_trailing_data_fail() {
        let z = gzip(b"hello, world, hello, world");
        assert!(decode(&z[..z.len() - 3], 5).await.is_err(), "truncated");
        let mut bad_crc = z.clone();
        let at = bad_crc.len() - 6;
        bad_crc[at] ^= 0xff;
        assert!(decode(&bad_crc, 5).await.is_err(), "crc");
        let mut trailing = z.clone();
        trailing.extend_from_slice(b"junk");
        assert!(decode(&trailing, 5).await.is_err(), "trailing data");
        assert!(decode(b"not gzip at all", 4).await.is_err());
    }

    #[tokio::test]
    async fn uncompressed_bodies_pass_through() {
        let mut body = GunzipBody::new(Full::new(Bytes::from_static(b"plain")), false);
        let out = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(out, "plain");
    }
}

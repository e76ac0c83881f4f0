//! What the test API server's clients cost on the wire: every TCP connection accepted (also those that
//! closed since) and every byte sent and received on them, HTTP heads and chunk framing included, as a
//! packet capture would count the payload. The listener given to axum wraps each accepted stream.

use axum::serve::Listener;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Totals since the server started.
#[derive(Debug, Default)]
pub struct Traffic {
    connections: AtomicU64,
    open: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
}

/// A snapshot of [`Traffic`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrafficCounts {
    /// Connections accepted.
    pub connections: u64,
    /// Connections open now.
    pub open: u64,
    /// Bytes the server wrote (what its clients received).
    pub sent: u64,
    /// Bytes the server read (what its clients sent).
    pub received: u64,
}

impl TrafficCounts {
    /// The counts since `earlier`.
    pub fn since(self, earlier: TrafficCounts) -> TrafficCounts {
        TrafficCounts {
            connections: self.connections - earlier.connections,
            open: self.open,
            sent: self.sent - earlier.sent,
            received: self.received - earlier.received,
        }
    }
}

impl Traffic {
    /// The totals now.
    pub fn counts(&self) -> TrafficCounts {
        TrafficCounts {
            connections: self.connections.load(Ordering::SeqCst),
            open: self.open.load(Ordering::SeqCst),
            sent: self.sent.load(Ordering::SeqCst),
            received: self.received.load(Ordering::SeqCst),
        }
    }
}

/// A TCP listener counting into a [`Traffic`].
pub struct CountingListener {
    inner: TcpListener,
    traffic: Arc<Traffic>,
}

impl CountingListener {
    /// Counts the connections `inner` accepts.
    pub fn new(inner: TcpListener, traffic: Arc<Traffic>) -> Self {
        Self { inner, traffic }
    }
}

impl Listener for CountingListener {
    type Io = CountingStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, addr) = Listener::accept(&mut self.inner).await;
        self.traffic.connections.fetch_add(1, Ordering::SeqCst);
        self.traffic.open.fetch_add(1, Ordering::SeqCst);
        let io = CountingStream {
            inner: stream,
            traffic: self.traffic.clone(),
        };
        (io, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// One accepted connection, counted.
pub struct CountingStream {
    inner: TcpStream,
    traffic: Arc<Traffic>,
}

impl Drop for CountingStream {
    fn drop(&mut self) {
        self.traffic.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl AsyncRead for CountingStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = (buf.filled().len() - before) as u64;
        self.traffic.received.fetch_add(read, Ordering::SeqCst);
        r
    }
}

impl AsyncWrite for CountingStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r {
            self.traffic.sent.fetch_add(*n as u64, Ordering::SeqCst);
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = &r {
            self.traffic.sent.fetch_add(*n as u64, Ordering::SeqCst);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

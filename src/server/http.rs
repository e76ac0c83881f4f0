//! The HTTP/1 accept loop all of kube-proxy's servers share, hardened against abusive clients.
//!
//! `/healthz` listens on every address by default, so anyone who can reach the node can open connections
//! to it. Each connection is bounded in what it can hold:
//! - the request head must arrive within [`Limits::header_read_timeout`] (also the keep-alive idle time:
//!   the timer restarts when the server waits for the next request), so idle and byte-a-second clients are
//!   closed;
//! - the read buffer is at most [`Limits::max_buf_size`] bytes and a head at most [`Limits::max_headers`]
//!   headers, so oversized requests are refused (`431`) without growing memory;
//! - a connection lives at most [`Limits::max_connection_age`], whatever it does (slow bodies, clients that
//!   never read the answer);
//! - at most [`Limits::max_connections`] connections are open per listener; at the cap the oldest one is
//!   closed to make room, so a fresh probe is always served (probes are short-lived, abusers are old).

use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper::service::Service;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

/// Per-listener bounds on what clients can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time allowed for a whole request head, and for the idle wait before the next one.
    pub header_read_timeout: Duration,
    /// Hard cap on a connection's lifetime.
    pub max_connection_age: Duration,
    /// Open connections per listener; at the cap the oldest is closed.
    pub max_connections: usize,
    /// Largest read buffer per connection (bounds the request head), bytes.
    pub max_buf_size: usize,
    /// Largest number of headers in a request head.
    pub max_headers: usize,
    /// On shutdown, how long an open connection may take to finish its request.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(5),
            max_connection_age: Duration::from_secs(60),
            max_connections: 512,
            max_buf_size: 16 * 1024,
            max_headers: 100,
            shutdown_grace: Duration::from_secs(1),
        }
    }
}

pub use crate::net::Peer;

/// `S`, putting the connection's [`Peer`] into each request.
#[derive(Clone)]
struct WithPeer<S> {
    inner: S,
    peer: Peer,
}

impl<S, B> Service<Request<Incoming>> for WithPeer<S>
where
    S: Service<Request<Incoming>, Response = Response<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, mut req: Request<Incoming>) -> Self::Future {
        req.extensions_mut().insert(self.peer);
        self.inner.call(req)
    }
}

/// Open connections of one listener, oldest first, each with the signal that closes it.
#[derive(Default)]
struct Registry {
    next_id: u64,
    open: BTreeMap<u64, Arc<Notify>>,
}

type SharedRegistry = Arc<Mutex<Registry>>;

fn lock(reg: &SharedRegistry) -> std::sync::MutexGuard<'_, Registry> {
    reg.lock().unwrap_or_else(|p| p.into_inner())
}

/// Registers a new connection (evicting the oldest at the cap) and returns its id and close signal.
fn admit(reg: &SharedRegistry, max: usize) -> (u64, Arc<Notify>) {
    let mut r = lock(reg);
    while r.open.len() >= max.max(1) {
        match r.open.pop_first() {
            Some((_, evict)) => evict.notify_one(),
            None => break,
        }
    }
    let id = r.next_id;
    r.next_id += 1;
    let close = Arc::new(Notify::new());
    r.open.insert(id, close.clone());
    (id, close)
}

/// Removes a connection from the registry when its task ends, however it ends.
struct Registered {
    reg: SharedRegistry,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.reg).open.remove(&self.id);
    }
}

/// Resolves once `stop` carries `true` or its sender is gone.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    loop {
        let now_stopped = *stop.borrow_and_update();
        if now_stopped || stop.changed().await.is_err() {
            return;
        }
    }
}

fn builder(limits: &Limits) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_buf_size.max(8192))
        .max_headers(limits.max_headers);
    b
}

/// Serves one connection until it ends, is evicted, grows too old, or the server stops.
async fn serve_connection<S, B>(
    stream: tokio::net::TcpStream,
    service: S,
    limits: Limits,
    close: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) where
    S: Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let conn = builder(&limits).serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let age = tokio::time::sleep(limits.max_connection_age);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = close.notified() => tracing::debug!(v = 3, "Closing the oldest connection: too many open"),
        _ = age => tracing::debug!(v = 3, "Closing a connection: too old"),
        _ = stopped(&mut stop) => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(limits.shutdown_grace, conn).await;
        }
    }
}

/// Accepts on `listener` and serves each connection with a clone of `service` under `limits` until
/// `shutdown` completes; then stops accepting (closing the listener), shuts open connections down
/// gracefully and waits for them (each for at most [`Limits::shutdown_grace`]).
pub async fn serve<S, B, F>(
    listener: tokio::net::TcpListener,
    service: S,
    limits: Limits,
    shutdown: F,
) where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
    F: Future<Output = ()>,
{
    let reg: SharedRegistry = Arc::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while tasks.try_join_next().is_some() {}
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    let Ok(local) = stream.local_addr() else { continue };
                    let (id, close) = admit(&reg, limits.max_connections);
                    let guard = Registered { reg: reg.clone(), id };
                    let service = WithPeer { inner: service.clone(), peer: Peer { remote, local } };
                    let conn = serve_connection(stream, service, limits, close, stop_rx.clone());
                    tasks.spawn(async move {
                        let _guard = guard;
                        conn.await;
                    });
                }
                Err(e) => {
                    // Out of descriptors or similar: back off instead of spinning.
                    tracing::warn!(error = %e, "Accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
}

/// Number of connections a [`serve`] loop holds open; exposed for tests of the limits.
#[cfg(test)]
fn open_count(reg: &SharedRegistry) -> usize {
    lock(reg).open.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admit_evicts_oldest_at_cap() {
        let reg: SharedRegistry = Arc::default();
        let (first, close_first) = admit(&reg, 2);
        let (_second, _) = admit(&reg, 2);
        assert_eq!(open_count(&reg), 2);
        let (third, _) = admit(&reg, 2);
        assert_eq!(open_count(&reg), 2);
        assert!(!lock(&reg).open.contains_key(&first));
        assert!(lock(&reg).open.contains_key(&third));
        // The evicted connection's signal is stored, so it fires even if not yet awaited.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(1), close_first.notified())
                .await
                .expect("evicted connection is told to close");
        });
        drop(Registered {
            reg: reg.clone(),
            id: third,
        });
        assert_eq!(open_count(&reg), 1);
    }
}

//! The client's QPS/burst limiter as a tower layer: a request waits for a token before it is sent.

use crate::runner::TokenBucket;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use tokio::time::{Instant, Sleep};

/// Tower layer delaying requests to at most `rate` per second with `burst` back to back.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    bucket: Arc<Mutex<TokenBucket>>,
}

impl RateLimitLayer {
    /// `rate <= 0` = unlimited.
    pub fn new(rate: f64, burst: u32) -> Self {
        Self {
            bucket: Arc::new(Mutex::new(TokenBucket::new(rate, burst, Instant::now()))),
        }
    }
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: self.bucket.clone(),
            reserved: false,
            sleep: None,
        }
    }
}

/// Service produced by [`RateLimitLayer`]: readiness waits for a token.
pub struct RateLimited<S> {
    inner: S,
    bucket: Arc<Mutex<TokenBucket>>,
    reserved: bool,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<S, R> tower::Service<R> for RateLimited<S>
where
    S: tower::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.reserved {
            let now = Instant::now();
            let wait = match self.bucket.lock() {
                Ok(mut b) => b.reserve(now),
                Err(_) => std::time::Duration::ZERO,
            };
            self.reserved = true;
            if !wait.is_zero() {
                self.sleep = Some(Box::pin(tokio::time::sleep_until(now + wait)));
            }
        }
        if let Some(sleep) = self.sleep.as_mut() {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.reserved = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::future::{Ready, ready};
    use std::time::Duration;
    use tower::{Layer, Service};

    struct Echo;
    impl Service<u32> for Echo {
        type Response = u32;
        type Error = Infallible;
        type Future = Ready<Result<u32, Infallible>>;
        fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, r: u32) -> Self::Future {
            ready(Ok(r))
        }
    }

    async fn send(s: &mut RateLimited<Echo>, r: u32) -> u32 {
        std::future::poll_fn(|cx| s.poll_ready(cx)).await.unwrap();
        s.call(r).await.unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn limiter_allows_burst_then_rate() {
        let layer = RateLimitLayer::new(2.0, 3);
        let mut a = layer.layer(Echo);
        let mut b = layer.layer(Echo); // clones share the bucket
        let t0 = Instant::now();
        for i in 0..3 {
            assert_eq!(send(&mut a, i).await, i);
        }
        assert_eq!(t0.elapsed(), Duration::ZERO);
        send(&mut b, 3).await;
        assert_eq!(t0.elapsed(), Duration::from_millis(500));
        send(&mut a, 4).await;
        assert_eq!(t0.elapsed(), Duration::from_millis(1000));
    }

    #[tokio::test(start_paused = true)]
    async fn unlimited_never_waits() {
        let layer = RateLimitLayer::new(0.0, 1);
        let mut a = layer.layer(Echo);
        let t0 = Instant::now();
        for i in 0..100 {
            send(&mut a, i).await;
        }
        assert_eq!(t0.elapsed(), Duration::ZERO);
    }
}

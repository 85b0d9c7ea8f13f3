//! Broken upstreams: decorators of the real HTTP client that send a request more than
//! once per attempt.

use std::sync::Arc;
use std::time::Duration;

use conform_serve::orchestrator::upstream::{Outcome, Request, Upstream};
use futures::future::BoxFuture;

/// The HTTP client retries 429, 5xx and broken connections behind the orchestrator's
/// back: up to three requests, 100 ms apart, until one brings a result.
pub struct HiddenRetries {
    inner: Arc<dyn Upstream>,
}

impl HiddenRetries {
    pub fn new(inner: Arc<dyn Upstream>) -> HiddenRetries {
        HiddenRetries { inner }
    }
}

impl Upstream for HiddenRetries {
    fn call(&self, request: Request) -> BoxFuture<'_, Outcome> {
        Box::pin(async move {
            let mut outcome = self.inner.call(request.clone()).await;
            for _ in 0..2 {
                if matches!(outcome, Outcome::Result(_)) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                outcome = self.inner.call(request.clone()).await;
            }
            outcome
        })
    }
}

/// After the attempt's deadline the request is sent again, and the second answer is
/// the one the attempt records.
pub struct RetryAfterTimeout {
    inner: Arc<dyn Upstream>,
    /// The attempt timeout: the call starts as the attempt does, so this is its deadline.
    after: Duration,
}

impl RetryAfterTimeout {
    pub fn new(inner: Arc<dyn Upstream>, after: Duration) -> RetryAfterTimeout {
        RetryAfterTimeout { inner, after }
    }
}

impl Upstream for RetryAfterTimeout {
    fn call(&self, request: Request) -> BoxFuture<'_, Outcome> {
        Box::pin(async move {
            let first = self.inner.call(request.clone());
            match tokio::time::timeout(self.after, first).await {
                Ok(outcome) => outcome,
                Err(_) => self.inner.call(request).await,
            }
        })
    }
}

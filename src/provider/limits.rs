//! Per-provider request and token rates (governor). Concurrency is bounded by the runner.

use std::num::NonZeroU32;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use crate::config::Limits;

/// Waits until a request of an estimated size may be sent.
#[derive(Debug)]
pub struct Limiter {
    requests: Option<DefaultDirectRateLimiter>,
    tokens: Option<(DefaultDirectRateLimiter, NonZeroU32)>,
}

impl Limiter {
    pub fn new(limits: &Limits) -> Self {
        let per_minute = |n: Option<u32>| n.and_then(NonZeroU32::new);
        Limiter {
            requests: per_minute(limits.requests_per_minute)
                .map(|n| RateLimiter::direct(Quota::per_minute(n))),
            tokens: per_minute(limits.tokens_per_minute)
                .map(|n| (RateLimiter::direct(Quota::per_minute(n)), n)),
        }
    }

    /// Returns once one more request of about `tokens` tokens fits both rates.
    pub async fn acquire(&self, tokens: u32) {
        if let Some(requests) = &self.requests {
            requests.until_ready().await;
        }
        if let Some((limiter, burst)) = &self.tokens {
            // A request larger than a whole minute's budget can only wait for a full bucket.
            let n = NonZeroU32::new(tokens.clamp(1, burst.get())).unwrap_or(NonZeroU32::MIN);
            // `until_n_ready` errs only when n exceeds the burst, which the clamp rules out.
            let _ = limiter.until_n_ready(n).await;
        }
    }
}

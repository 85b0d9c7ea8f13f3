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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn ready_now(limiter: &Limiter, tokens: u32) -> bool {
        // The refill takes tens of seconds here; 50 ms tells "at once" from "waits".
        tokio::time::timeout(Duration::from_millis(50), limiter.acquire(tokens))
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn requests_per_minute_holds_back_the_request_over_the_limit() {
        let limiter = Limiter::new(&Limits {
            requests_per_minute: Some(2),
            ..Limits::default()
        });
        assert!(ready_now(&limiter, 1).await);
        assert!(ready_now(&limiter, 1).await);
        assert!(!ready_now(&limiter, 1).await);
    }

    #[tokio::test]
    async fn tokens_per_minute_counts_the_estimate() {
        let limiter = Limiter::new(&Limits {
            tokens_per_minute: Some(1000),
            ..Limits::default()
        });
        assert!(ready_now(&limiter, 600).await);
        assert!(!ready_now(&limiter, 600).await);
    }

    #[tokio::test]
    async fn no_limits_never_wait() {
        let limiter = Limiter::new(&Limits::default());
        for _ in 0..1000 {
            assert!(ready_now(&limiter, 100_000).await);
        }
    }
}

//! Broken failover gates.

use std::sync::Arc;

use conform_gate::allowlist::{Denial, Reason};
use conform_serve::orchestrator::gate::FailoverGate;
use futures::future::BoxFuture;
use time::OffsetDateTime;

/// Failover is never checked against the allowlist.
pub struct AllowlistIgnored;

impl FailoverGate for AllowlistIgnored {
    fn permits<'a>(
        &'a self,
        _task: &'a str,
        _provider: &'a str,
        _now: OffsetDateTime,
    ) -> BoxFuture<'a, Result<(), Denial>> {
        Box::pin(async { Ok(()) })
    }
}

/// A missing, unreadable or unknown-format allowlist permits failover; an entry that is
/// absent or expired in a readable file still denies it.
pub struct AllowlistFailsOpen {
    inner: Arc<dyn FailoverGate>,
}

impl AllowlistFailsOpen {
    pub fn new(inner: Arc<dyn FailoverGate>) -> AllowlistFailsOpen {
        AllowlistFailsOpen { inner }
    }
}

impl FailoverGate for AllowlistFailsOpen {
    fn permits<'a>(
        &'a self,
        task: &'a str,
        provider: &'a str,
        now: OffsetDateTime,
    ) -> BoxFuture<'a, Result<(), Denial>> {
        Box::pin(async move {
            match self.inner.permits(task, provider, now).await {
                Err(d)
                    if matches!(
                        d.reason,
                        Reason::Missing | Reason::Unreadable | Reason::UnknownFormat
                    ) =>
                {
                    Ok(())
                }
                decision => decision,
            }
        })
    }
}

//! Broken failover gates.

use std::sync::Arc;

use conform::allowlist::{Denial, Reason};
use conform::orchestrator::gate::FailoverGate;
use time::OffsetDateTime;

/// Failover is never checked against the allowlist.
pub struct AllowlistIgnored;

impl FailoverGate for AllowlistIgnored {
    fn permits(&self, _task: &str, _provider: &str, _now: OffsetDateTime) -> Result<(), Denial> {
        Ok(())
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
    fn permits(&self, task: &str, provider: &str, now: OffsetDateTime) -> Result<(), Denial> {
        match self.inner.permits(task, provider, now) {
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
    }
}

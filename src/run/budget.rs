//! `--budget USD`: no call starts unless the spend can stay within the budget.
//!
//! Invariants: before a call is sent, its upper bound (every prompt token at the full
//! input price plus max_tokens of output, as `conform plan` counts it, for each request
//! the schedule gives the call: twice with a stream twin) is reserved;
//! when it completes, the reservation is replaced by what its usage says it cost (or
//! kept whole when the usage is missing). A call whose reservation would take the total
//! over the budget is not sent, and from then on no call is: the calls already in flight
//! (at most one concurrency wave) finish, and the run ends incomplete. So the spend never
//! exceeds the budget while providers bill no more than the plan's ceiling.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use conform_config::ProviderConfig;

/// Why a budget cannot be kept.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum BudgetError {
    #[error("--budget {0} is not an amount of USD")]
    NotAnAmount(f64),
    #[error(
        "--budget needs the price of every call: add [pricing] (input_per_mtok, output_per_mtok, USD per million tokens) to {}",
        .0.join(", ")
    )]
    Unpriced(Vec<String>),
}

/// A budget of `limit` USD for calls to `providers`: refused unless every call can be
/// priced, since an unpriced call could spend anything.
pub fn keepable(limit: f64, providers: &[ProviderConfig]) -> Result<(), BudgetError> {
    if !(limit.is_finite() && limit >= 0.0) {
        return Err(BudgetError::NotAnAmount(limit));
    }
    let unpriced: Vec<String> = providers
        .iter()
        .filter(|p| p.pricing.is_none())
        .map(|p| p.file.display().to_string())
        .collect();
    if unpriced.is_empty() {
        Ok(())
    } else {
        Err(BudgetError::Unpriced(unpriced))
    }
}

/// A budget in USD, shared by every call of a run.
#[derive(Debug)]
pub struct Budget {
    limit: f64,
    /// Spent by finished calls plus reserved by calls in flight.
    committed: Mutex<f64>,
    /// Settled spend of finished calls, by their usage.
    spent: Mutex<f64>,
    stopped: AtomicBool,
}

impl Budget {
    pub fn new(limit: f64) -> Budget {
        Budget {
            limit,
            committed: Mutex::new(0.0),
            spent: Mutex::new(0.0),
            stopped: AtomicBool::new(false),
        }
    }

    pub fn limit(&self) -> f64 {
        self.limit
    }

    /// Reserves `high` for a call about to start; false (and the budget stops every later
    /// call) when it would take the committed total over the limit.
    pub fn reserve(&self, high: f64) -> bool {
        if self.stopped.load(Ordering::SeqCst) {
            return false;
        }
        let mut committed = self
            .committed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *committed + high > self.limit {
            self.stopped.store(true, Ordering::SeqCst);
            return false;
        }
        *committed += high;
        true
    }

    /// A reserved call finished: `actual` (by its usage) replaces its reservation; with
    /// no usage, the reservation stands as what it may have cost.
    pub fn settle(&self, high: f64, actual: Option<f64>) {
        let cost = actual.unwrap_or(high);
        let mut committed = self
            .committed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *committed += cost - high;
        drop(committed);
        *self
            .spent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) += cost;
    }

    /// Whether a call was refused: the run is incomplete.
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Spent by the finished calls (their usage, or their ceiling without one).
    pub fn spent(&self) -> f64 {
        *self
            .spent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_could_overspend_is_refused_and_so_is_every_later_one() {
        let b = Budget::new(1.0);
        assert!(b.reserve(0.4));
        assert!(b.reserve(0.4));
        assert!(!b.reserve(0.4), "0.4 + 0.4 + 0.4 may exceed 1.0");
        assert!(b.stopped());
        b.settle(0.4, Some(0.1));
        // Room again, but the run has stopped: it ends incomplete rather than patchy.
        assert!(!b.reserve(0.1));
        b.settle(0.4, None);
        assert!((b.spent() - 0.5).abs() < 1e-12);
        assert!(b.spent() <= b.limit());
    }
}

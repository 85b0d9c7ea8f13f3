//! Why a verdict is what it is: one variant per reason, each with the stable name that
//! reports, `results.jsonl`, the allowlist's revocations and CI filters read.

use std::fmt;

use serde::{Serialize, Serializer};

use crate::check::Code;
use crate::check::differential::Undecided;
use crate::check::tool_metrics::Measure;

/// One reason behind a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A check found this, or a call failed with it (the provider's halt included).
    Found(Code),
    /// The run was interrupted: nothing is concluded.
    Interrupted,
    /// `--budget` stopped the run before every call was sent: nothing is concluded.
    BudgetReached,
    /// Planned calls were never sent: their provider had been stopped.
    CallsNotSent,
    /// Too many of the calls that ran failed in transport to judge the rest.
    TooManyTransportErrors,
    /// The repeats of a case disagree more than the suite allows.
    UnstableRepeats,
    /// A case's repeats give too little confidence that it passes.
    CasePassRateBelowBound,
    /// The 95th percentile latency is above the objective.
    SloLatency,
    /// The 95th percentile time to first token is above the objective.
    SloTtft,
    /// A tool-calling measure is below the suite's threshold.
    ToolBelowThreshold(Measure),
    /// Too few calls for a pass to rule out the failure rate the suite asks about, or
    /// too few pairs for a comparison with the reference to have failed.
    InsufficientEvidence,
    /// The reference answered no case, or was not in the run.
    ReferenceUnavailable,
    /// The reference gave one answer per case: its own noise is unknown.
    ReferenceNoFloor,
}

impl Reason {
    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Found(code) => code.as_str(),
            Reason::Interrupted => "interrupted",
            Reason::BudgetReached => "budget_reached",
            Reason::CallsNotSent => "calls_not_sent",
            Reason::TooManyTransportErrors => "too_many_transport_errors",
            Reason::UnstableRepeats => "unstable_repeats",
            Reason::CasePassRateBelowBound => "case_pass_rate_below_bound",
            Reason::SloLatency => "slo_latency",
            Reason::SloTtft => "slo_ttft",
            Reason::ToolBelowThreshold(measure) => measure.below_threshold(),
            Reason::InsufficientEvidence => "insufficient_evidence",
            Reason::ReferenceUnavailable => "reference_unavailable",
            Reason::ReferenceNoFloor => "reference_no_floor",
        }
    }

    /// The stable names of `reasons`, in order: what the allowlist's revocations keep.
    pub fn names(reasons: &[Reason]) -> Vec<String> {
        reasons.iter().map(|r| r.as_str().to_string()).collect()
    }
}

impl From<Code> for Reason {
    fn from(code: Code) -> Reason {
        Reason::Found(code)
    }
}

impl From<Undecided> for Reason {
    fn from(why: Undecided) -> Reason {
        match why {
            Undecided::Unavailable => Reason::ReferenceUnavailable,
            Undecided::NoFloor => Reason::ReferenceNoFloor,
            Undecided::Insufficient => Reason::InsufficientEvidence,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_and_the_suites_bound_name_insufficient_evidence_alike() {
        assert_eq!(
            Reason::from(Undecided::Insufficient).as_str(),
            crate::check::differential::INSUFFICIENT
        );
        assert_eq!(
            Reason::from(Undecided::NoFloor).as_str(),
            crate::check::differential::NO_FLOOR
        );
        assert_eq!(
            Reason::from(Undecided::Unavailable).as_str(),
            crate::check::differential::NO_REFERENCE
        );
    }
}

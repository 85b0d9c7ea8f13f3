//! The call succeeded and the model stopped normally.

use super::{Code, Finding, Outcome};
use conform_wire::provider::{CallError, FinishKind, Reply};

/// The check's name in outcomes and reports.
pub const NAME: &str = "transport";

/// A failed call fails the transport check with the error's code.
pub fn outcome_of_error(error: &CallError) -> Outcome {
    Outcome::from_findings(
        NAME,
        vec![Finding::new(Code::Call(error.kind), error.to_string())],
    )
}

/// An answer passes the transport check when the model stopped on its own or to call a tool.
pub fn outcome_of_reply(reply: &Reply) -> Outcome {
    let raw = reply.finish.raw.as_deref().unwrap_or("none");
    let finding = match reply.finish.kind {
        FinishKind::Stop | FinishKind::ToolUse => None,
        FinishKind::Length => Some(Finding::new(
            Code::FinishLength,
            format!("the answer was cut off at the output token limit (finish reason `{raw}`)"),
        )),
        FinishKind::Refusal => Some(Finding::new(
            Code::Refusal,
            format!(
                "the model refused: {}",
                reply.refusal.as_deref().unwrap_or("(no refusal text)")
            ),
        )),
        FinishKind::ContentFilter => Some(Finding::new(
            Code::ContentFilter,
            format!("a content filter stopped the answer (finish reason `{raw}`)"),
        )),
        FinishKind::Other => Some(Finding::new(
            Code::FinishOther,
            format!("the model stopped for an unexpected reason `{raw}`"),
        )),
    };
    Outcome::from_findings(NAME, finding.into_iter().collect())
}

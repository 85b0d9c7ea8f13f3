//! The fields the suite names agree with the case's expected answer, so that a
//! fallback is held to the primary's answers, not just to the schema.

use super::{Check, Finding, Outcome, Subject};

pub const NAME: &str = "agree";

pub struct AgreeCheck;

impl Check for AgreeCheck {
    fn name(&self) -> &'static str {
        NAME
    }

    /// A case without `expected` judged against a reference (recorded, or the suite's
    /// live one) has nothing to agree with here: differential conformance compares its
    /// fields.
    fn applies(&self, subject: &Subject<'_>) -> bool {
        subject.case.expected.is_some()
            || (subject.case.reference.is_none() && subject.suite.reference.is_none())
    }

    fn check(&self, subject: &Subject<'_>) -> Outcome {
        let (Some(output), Some(expected)) = (subject.output, subject.case.expected.as_ref())
        else {
            return Outcome::skip(NAME);
        };
        let mut findings = Vec::new();
        for pointer in &subject.suite.agree {
            let Some(want) = expected.pointer(pointer) else {
                continue;
            };
            match output.pointer(pointer) {
                None => findings.push(
                    Finding::new("field_missing", format!("expected {want}, found nothing"))
                        .at(pointer.clone()),
                ),
                // Numbers compare by value: 5.50 and 5.5 agree.
                Some(got) if !same(got, want) => findings.push(
                    Finding::new("field_mismatch", format!("expected {want}, got {got}"))
                        .at(pointer.clone()),
                ),
                Some(_) => {}
            }
        }
        Outcome::from_findings(NAME, findings)
    }
}

fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

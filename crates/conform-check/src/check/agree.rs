//! The fields the suite names agree with the case's expected answer, so that a
//! fallback is held to the primary's answers, not just to the schema.

use super::{Check, Code, Finding, Outcome, Subject};
use conform_config::reach::{self, Reach};
use conform_config::{Diagnostic, Diagnostics, Suite};

/// The check's name in outcomes and reports.
pub const NAME: &str = "agree";

/// The suite's `agree` pointers: each value of the answer must equal the case's `expected` one.
pub struct AgreeCheck;

impl AgreeCheck {
    /// The check, once every `agree` pointer names a place an answer valid against the
    /// suite's schema can hold: a pointer no answer can carry would compare nothing,
    /// silently, on every call.
    pub fn compile(suite: &Suite) -> Result<AgreeCheck, Diagnostics> {
        let mut problems = Diagnostics::default();
        for pointer in &suite.agree {
            if let Some(why) = unreachable(&suite.schema, pointer) {
                let schema = suite
                    .schema_file
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                problems.push(
                    Diagnostic::new(
                        &suite.file,
                        format!(
                            "`{pointer}` compares nothing: no answer valid against {schema} holds it ({why})"
                        ),
                    )
                    .field("agree")
                    .near(&suite.source, &format!("\"{pointer}\"")),
                );
            }
        }
        if problems.is_empty() {
            Ok(AgreeCheck)
        } else {
            Err(problems)
        }
    }
}

/// Why `pointer` names no place an answer valid against `schema` can hold, or a place
/// the schema does not declare (a typo, almost always); `None` when it can be there.
pub(crate) fn unreachable(schema: &serde_json::Value, pointer: &str) -> Option<String> {
    reason(reach::pointer(schema, pointer))
}

/// The sentence for a place a check's input cannot be read from, or `None`.
pub(crate) fn reason(reach: Reach) -> Option<String> {
    match reach {
        Reach::Declared | Reach::Open => None,
        Reach::Impossible(why) => Some(why),
        Reach::Undeclared { declared } => Some(format!(
            "the schema does not declare it; it declares: {}",
            if declared.is_empty() {
                "nothing".to_string()
            } else {
                declared.join(", ")
            }
        )),
    }
}

impl Check for AgreeCheck {
    fn name(&self) -> &'static str {
        NAME
    }

    /// A case without `expected` has nothing to agree with here: a reference (recorded,
    /// or the suite's live one) compares its fields, and with neither the run refuses the
    /// suite before sending anything ([`conform_config::Suite::uncomparable`]). Applied
    /// to such a case, the check could only skip, and a skip fails a call with no
    /// finding to say why.
    fn applies(&self, subject: &Subject<'_>) -> bool {
        subject.case.expected.is_some()
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
                    Finding::new(
                        Code::FieldMissing,
                        format!("expected {want}, found nothing"),
                    )
                    .at(pointer.clone()),
                ),
                // Numbers compare by value: 5.50 and 5.5 agree.
                Some(got) if !same(got, want) => findings.push(
                    Finding::new(Code::FieldMismatch, format!("expected {want}, got {got}"))
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

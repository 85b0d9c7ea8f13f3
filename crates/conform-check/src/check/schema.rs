//! The output validates against the suite's JSON Schema (draft 2020-12).

use jsonschema::Validator;

use super::{Check, Code, Finding, Outcome, Subject};
use conform_config::{Diagnostic, Diagnostics, Suite, schema_file};

/// The check's name in outcomes and reports.
pub const NAME: &str = "schema";

/// The suite's schema, compiled once.
pub struct SchemaCheck {
    validator: Validator,
}

impl SchemaCheck {
    /// The check of the suite's schema, or where the schema is not a valid JSON Schema.
    pub fn compile(suite: &Suite) -> Result<SchemaCheck, Diagnostics> {
        jsonschema::draft202012::new(&suite.schema)
            .map(|validator| SchemaCheck { validator })
            .map_err(|_| {
                // Placed in the user's file, keyword by keyword; without the text (the
                // file changed or went away since the suite loaded) only by pointer.
                let source = std::fs::read_to_string(&suite.schema_file).unwrap_or_default();
                let problems = schema_file::problems(&suite.schema_file, &source, &suite.schema);
                if problems.is_empty() {
                    Diagnostics(vec![Diagnostic::new(
                        &suite.schema_file,
                        "not a valid JSON Schema (draft 2020-12)",
                    )])
                } else {
                    problems
                }
            })
    }
}

impl Check for SchemaCheck {
    fn name(&self) -> &'static str {
        NAME
    }

    fn check(&self, subject: &Subject<'_>) -> Outcome {
        let Some(output) = subject.output else {
            return Outcome::skip(NAME);
        };
        let findings = self
            .validator
            .iter_errors(output)
            .map(|e| {
                let path = e.instance_path().to_string();
                Finding::new(Code::SchemaViolation, e.to_string()).at(if path.is_empty() {
                    "/".to_string()
                } else {
                    path
                })
            })
            .collect();
        Outcome::from_findings(NAME, findings)
    }
}

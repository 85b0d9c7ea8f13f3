//! The output validates against the suite's JSON Schema (draft 2020-12).

use jsonschema::Validator;

use super::{Check, Finding, Outcome, Subject};
use crate::config::{Diagnostic, Diagnostics, Suite};

pub const NAME: &str = "schema";

/// The suite's schema, compiled once.
pub struct SchemaCheck {
    validator: Validator,
}

impl SchemaCheck {
    pub fn compile(suite: &Suite) -> Result<SchemaCheck, Diagnostics> {
        jsonschema::draft202012::new(&suite.schema)
            .map(|validator| SchemaCheck { validator })
            .map_err(|e| {
                Diagnostics(vec![
                    Diagnostic::new(&suite.schema_file, format!("not a valid JSON Schema: {e}"))
                        .field(e.schema_path().to_string()),
                ])
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
                Finding::new("schema_violation", e.to_string()).at(if path.is_empty() {
                    "/".to_string()
                } else {
                    path
                })
            })
            .collect();
        Outcome::from_findings(NAME, findings)
    }
}

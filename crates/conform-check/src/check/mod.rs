//! Checks: each a small type behind [`Check`], each finding carrying a stable code, a
//! message and the JSON path it concerns.
//!
//! [`Checks::evaluate`] runs them in pipeline order over one call: the transport result
//! first (a failed call or an abnormal stop ends there), then the strict JSON parse,
//! then the checks that read the reply (tokens), then every check that reads the
//! parsed output.

pub mod agree;
pub mod code;
pub mod differential;
pub mod json;
pub mod portability;
pub mod reads;
pub mod record;
pub mod rules;
pub mod schema;
pub mod stability;
pub mod stream_agreement;
pub mod tokens;
pub mod tool_calls;
pub mod tool_metrics;
pub mod tool_text;
pub mod transport;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use code::Code;

use conform_config::{Answer, Case, Diagnostics, ProviderConfig, Suite};
use conform_wire::provider::{CallError, Reply};

/// How one check went on one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The check found nothing wrong.
    Pass,
    /// The check found something wrong.
    Fail,
    /// The check could not run (no parsed output to look at).
    Skip,
}

/// One thing a check found wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// What it is, by its stable name: `schema_violation`, `not_pure_json` …
    pub code: Code,
    /// What was wrong, for people.
    pub message: String,
    /// The JSON pointer (instance path) the finding concerns, when it concerns one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl<'de> Deserialize<'de> for Outcome {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let o = OutcomeFile::deserialize(d)?;
        let check = CHECKS
            .iter()
            .copied()
            .find(|c| *c == o.check)
            .ok_or_else(|| {
                serde::de::Error::custom(format!("`{}` is not a check of this conform", o.check))
            })?;
        Ok(Outcome {
            check,
            status: o.status,
            findings: o.findings,
            tool_calls: o.tool_calls,
        })
    }
}

/// Every check's name, as outcomes carry it.
pub const CHECKS: &[&str] = &[
    transport::NAME,
    json::NAME,
    schema::NAME,
    rules::NAME,
    agree::NAME,
    tokens::NAME,
    tool_calls::NAME,
    stream_agreement::NAME,
];

/// An [`Outcome`] as a results file holds it.
#[derive(Deserialize)]
struct OutcomeFile {
    check: String,
    status: Status,
    #[serde(default)]
    findings: Vec<Finding>,
    #[serde(default)]
    tool_calls: Option<tool_calls::ToolSummary>,
}

impl Finding {
    /// A finding of `code`, at no particular place.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Finding {
            code,
            message: message.into(),
            path: None,
        }
    }

    /// This finding, at the JSON pointer `path` of the answer.
    pub fn at(mut self, path: impl Into<String>) -> Self {
        self.path = Some(path.into());
        self
    }
}

/// The result of one check on one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// Which check it is.
    pub check: &'static str,
    /// Whether it passed, failed or did not apply.
    pub status: Status,
    /// What it found wrong; empty on a pass.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
    /// What the tool-calls check counted for the suite's tool measures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<tool_calls::ToolSummary>,
}

impl Outcome {
    /// A pass when `findings` is empty, a failure otherwise.
    pub fn from_findings(check: &'static str, findings: Vec<Finding>) -> Self {
        let status = if findings.is_empty() {
            Status::Pass
        } else {
            Status::Fail
        };
        Outcome {
            check,
            status,
            findings,
            tool_calls: None,
        }
    }

    /// The check did not apply to this answer.
    pub fn skip(check: &'static str) -> Self {
        Outcome {
            check,
            status: Status::Skip,
            findings: Vec::new(),
            tool_calls: None,
        }
    }
}

/// What a check looks at: one answer to one case, in its suite, from one provider.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The suite the case belongs to.
    pub suite: &'a Suite,
    /// The case that was sent.
    pub case: &'a Case,
    /// The provider that answered.
    pub provider: &'a ProviderConfig,
    /// What it answered.
    pub reply: &'a Reply,
    /// The answer parsed as JSON, when it is pure JSON.
    pub output: Option<&'a Value>,
    /// The run's start time, unix seconds: rules see it as `$now`, so a replay gives
    /// the same answer.
    pub now: i64,
    /// The prompt's tokens as counted before the call, when the provider has a
    /// tokenizer.
    pub tokens: Option<&'a tokens::PromptTokens>,
}

/// What the runner knows of a call besides its answer.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallFacts<'a> {
    /// The run's start time, unix seconds.
    pub now: i64,
    /// The prompt's token counts, when a tokenizer is configured.
    pub tokens: Option<&'a tokens::PromptTokens>,
}

/// One check. Implementations are cheap to call: anything expensive (compiling a
/// schema, a rule) happens once, when the check is built for its suite.
pub trait Check: Send + Sync {
    /// The name outcomes and reports know the check by.
    fn name(&self) -> &'static str;

    /// Whether the check has anything to say about this call (a tokens check does not
    /// apply to a provider without a tokenizer). A check that does not apply leaves no
    /// outcome, rather than a skip.
    fn applies(&self, _subject: &Subject<'_>) -> bool {
        true
    }

    /// The check's outcome for one answer.
    fn check(&self, subject: &Subject<'_>) -> Outcome;
}

/// The checks of one suite, compiled once.
pub struct Checks {
    /// Checks that read the reply, parsed or not.
    after_reply: Vec<Box<dyn Check>>,
    after_parse: Vec<Box<dyn Check>>,
}

impl std::fmt::Debug for Checks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self
            .after_reply
            .iter()
            .chain(&self.after_parse)
            .map(|c| c.name())
            .collect();
        f.debug_struct("Checks").field("checks", &names).finish()
    }
}

impl Checks {
    /// Compiles the suite's schema, rules and checks; every problem is reported.
    pub fn for_suite(suite: &Suite) -> Result<Checks, Diagnostics> {
        let mut problems = Diagnostics::default();
        let mut after_parse: Vec<Box<dyn Check>> = Vec::new();
        match schema::SchemaCheck::compile(suite) {
            Ok(check) => after_parse.push(Box::new(check)),
            Err(d) => problems.extend(d),
        }
        match rules::RulesCheck::compile(suite) {
            Ok(check) if check.is_empty() => {}
            Ok(check) => after_parse.push(Box::new(check)),
            Err(d) => problems.extend(d),
        }
        if !suite.agree.is_empty() {
            match agree::AgreeCheck::compile(suite) {
                Ok(check) => after_parse.push(Box::new(check)),
                Err(d) => problems.extend(d),
            }
        }
        let mut after_reply: Vec<Box<dyn Check>> = vec![Box::new(tokens::TokensCheck)];
        match tool_calls::ToolCallsCheck::compile(suite) {
            Ok(check) => after_reply.push(Box::new(check)),
            Err(d) => problems.extend(d),
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Checks {
            after_reply,
            after_parse,
        })
    }

    /// Every check's outcome for one call, in pipeline order, and the answer as the JSON
    /// check parsed it, so that the runner digests that value instead of parsing it again.
    pub fn evaluate(
        &self,
        suite: &Suite,
        case: &Case,
        provider: &ProviderConfig,
        result: Result<&Reply, &CallError>,
        facts: CallFacts<'_>,
    ) -> Judged {
        let reply = match result {
            Err(error) => {
                let mut outcomes = vec![transport::outcome_of_error(error)];
                // What is wrong with the input is wrong whether or not the call worked.
                if let Some(t) = facts
                    .tokens
                    .filter(|t| !tokens::input_findings(t).is_empty())
                {
                    outcomes.push(Outcome::from_findings(
                        tokens::NAME,
                        tokens::input_findings(t),
                    ));
                }
                return Judged {
                    outcomes,
                    text_json: None,
                };
            }
            Ok(reply) => reply,
        };
        let mut outcomes = Vec::with_capacity(2 + self.after_reply.len() + self.after_parse.len());
        outcomes.push(transport::outcome_of_reply(reply));
        // A request that declares tools is answered in its text, not in a forced call;
        // a case that expects calls or text has no JSON answer to parse at all.
        let json_answer = matches!(case.answer(), Answer::Json);
        let of_text = !suite.is_request(case) || suite.tools_for(case).is_empty();
        let parsed = if !json_answer {
            None
        } else if of_text {
            Some(json::parse_strict(&reply.text, provider.structured_output))
        } else {
            Some(json::parse_strict(
                reply.content(),
                provider.structured_output,
            ))
        };
        match &parsed {
            None => {}
            Some(Ok(_)) => outcomes.push(Outcome::from_findings(json::NAME, Vec::new())),
            Some(Err(finding)) => {
                outcomes.push(Outcome::from_findings(json::NAME, vec![finding.clone()]))
            }
        }
        let subject = Subject {
            suite,
            case,
            provider,
            reply,
            output: parsed.as_ref().and_then(|p| p.as_ref().ok()),
            now: facts.now,
            tokens: facts.tokens,
        };
        for check in self.after_reply.iter().filter(|c| c.applies(&subject)) {
            outcomes.push(check.check(&subject));
        }
        if json_answer {
            for check in self.after_parse.iter().filter(|c| c.applies(&subject)) {
                outcomes.push(if subject.output.is_some() {
                    check.check(&subject)
                } else {
                    Outcome::skip(check.name())
                });
            }
        }
        Judged {
            outcomes,
            text_json: parsed.filter(|_| of_text).and_then(Result::ok),
        }
    }
}

/// What [`Checks::evaluate`] found of one call.
#[derive(Debug)]
pub struct Judged {
    /// One outcome per check, transport first.
    pub outcomes: Vec<Outcome>,
    /// The reply's whole text as JSON, when the JSON check parsed that text and it parsed.
    pub text_json: Option<Value>,
}

/// Whether every outcome passed (skips count as failures: nothing unchecked is green).
pub fn all_passed(outcomes: &[Outcome]) -> bool {
    !outcomes.is_empty() && outcomes.iter().all(|o| o.status == Status::Pass)
}

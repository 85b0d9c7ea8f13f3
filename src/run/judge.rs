//! What a call's answer comes to: every check's outcome, whether it passed, what a
//! comparison with a reference reads of it, and its digest. A run judges each call as it
//! returns ([`judge`]); `conform merge` judges each recorded answer again with the checks
//! of today ([`rejudge`]), so a record whose `passed` was edited counts for what its
//! answer is. The checks are deterministic: the same answer, case and start time give the
//! same outcomes.

use std::collections::HashMap;

use super::{PreparedSuite, Target, differential};
use conform_check::check::record::{CallRecord, Unstreamed, reply_digest_parsed};
use conform_check::check::tokens::{self, PromptTokens};
use conform_check::check::{self, CallFacts, Outcome, stream_agreement};
use conform_config::{Case, Conversation, ProviderConfig};
use conform_wire::provider::{CallError, Finish, Reply};
use conform_wire::tokenize::{self, Count, TokenizeError};

/// The prompt's tokens as counted before the call, with what the case's variables hold
/// that the tokenizer reads as control tokens.
pub fn prompt_tokens(
    target: &Target,
    config: &ProviderConfig,
    case: &Case,
    conversation: Option<&Conversation>,
    counted: Result<Count, TokenizeError>,
) -> PromptTokens {
    PromptTokens {
        tokenizer: target.counter.describe().to_string(),
        exact: tokens::count_is_exact(config, conversation)
            && counted.as_ref().is_ok_and(|c| c.exact),
        counted: counted.map(|c| c.tokens).map_err(|e| e.to_string()),
        control: tokenize::control_tokens_in(&case.vars, target.counter.control_tokens()),
    }
}

/// The tokens check's outcome when the prompt and `max_output_tokens` do not fit the
/// context window: the call is not sent.
pub fn overflow(config: &ProviderConfig, counted: Option<&PromptTokens>) -> Option<Outcome> {
    let counted = counted?;
    let overflow = tokens::preflight(counted, config)?;
    let mut findings = vec![overflow];
    findings.extend(tokens::input_findings(counted));
    Some(Outcome::from_findings(tokens::NAME, findings))
}

/// What judging one call found.
#[derive(Debug)]
pub struct Judgement {
    pub outcomes: Vec<Outcome>,
    pub passed: bool,
    pub differential: Option<Box<differential::Observed>>,
    pub output_digest: Option<String>,
}

impl Judgement {
    /// Writes the judgement into `record`.
    pub fn apply(self, record: &mut CallRecord) {
        record.checks = self.outcomes;
        record.passed = self.passed;
        record.differential = self.differential;
        record.output_digest = self.output_digest;
    }
}

/// Judges one call of `case` whose answer is `result` (and, for a suite that asks a
/// streamed answer to agree with the unstreamed one, `plain`).
pub fn judge(
    prepared: &PreparedSuite,
    config: &ProviderConfig,
    case: &Case,
    result: Result<&Reply, &CallError>,
    plain: Option<Result<&Reply, &CallError>>,
    facts: CallFacts<'_>,
    repeat: u32,
) -> Judgement {
    let suite = &prepared.suite;
    let judged = prepared.checks.evaluate(suite, case, config, result, facts);
    let mut outcomes = judged.outcomes;
    if let Some(plain) = plain {
        outcomes.push(stream_agreement::outcome(result, plain));
    }
    let passed = check::all_passed(&outcomes);
    // Only an answer the comparison can read takes part in pairs.
    let usable = differential::answer_usable(&outcomes);
    let differential = differential::observe(suite, case, result.ok().filter(|_| usable), repeat);
    let output_digest = result
        .ok()
        .map(|r| reply_digest_parsed(&r.text, &r.tool_calls, judged.text_json.as_ref()));
    Judgement {
        outcomes,
        passed,
        differential,
        output_digest,
    }
}

/// How the unstreamed twin of a streamed call went, as its record keeps it.
pub fn unstreamed(plain: Result<Reply, CallError>) -> Unstreamed {
    match plain {
        Ok(reply) => Unstreamed::Answer {
            text: reply.text,
            tool_calls: reply.tool_calls,
        },
        Err(error) => Unstreamed::Failed(error),
    }
}

/// Finds a suite's cases by id, for judging records again.
#[derive(Debug)]
pub struct CaseIndex(HashMap<String, usize>);

impl CaseIndex {
    pub fn of(prepared: &PreparedSuite) -> CaseIndex {
        CaseIndex(
            (prepared.suite.cases.iter().enumerate())
                .map(|(i, c)| (c.id.to_string(), i))
                .collect(),
        )
    }
}

/// Judges the answer `record` holds again with today's checks of `prepared`, as if the
/// call had just returned it (`now` is the start of the run that made it, which rules
/// see as `$now`): its outcomes, `passed`, differential observation and digest are
/// replaced. A local tokenizer counts the prompt again; a provider's count endpoint is
/// not called: its recorded count stands. `has_twin` is whether the schedule gave the call a
/// stream twin ([`super::schedule::Call::twin`]). `Err` names what the record does not
/// match.
pub fn rejudge(
    prepared: &PreparedSuite,
    cases: &CaseIndex,
    target: &Target,
    has_twin: bool,
    record: &mut CallRecord,
    now: i64,
) -> Result<(), String> {
    if record.not_run.is_some() {
        // Never sent: nothing to judge, and counted as missing evidence.
        return Ok(());
    }
    let suite = &prepared.suite;
    let config = &target.endpoint.config;
    let index = *cases.0.get(record.case.as_str()).ok_or_else(|| {
        format!(
            "case `{}` is not in suite `{}` as the project holds it",
            record.case, suite.name
        )
    })?;
    let (case, rendered) = prepared.load_request(index).map_err(|d| d.to_string())?;
    let counted = match target
        .counter
        .count_call_local(&rendered.prompt, rendered.conversation.as_ref())
    {
        Some(counted) => Some(prompt_tokens(
            target,
            config,
            &case,
            rendered.conversation.as_ref(),
            counted,
        )),
        None if !target.counter.is_none() => Some(PromptTokens {
            tokenizer: target.counter.describe().to_string(),
            exact: tokens::count_is_exact(config, rendered.conversation.as_ref())
                && !record.prompt_count_inexact,
            counted: record
                .prompt_tokens_counted
                .ok_or_else(|| "the provider's count is not in the record".to_string()),
            control: Vec::new(),
        }),
        None => None,
    };
    if let Some(overflow) = overflow(config, counted.as_ref()) {
        record.checks = vec![overflow];
        record.passed = false;
        record.differential = None;
        record.output_digest = None;
        return Ok(());
    }
    let reply = Reply {
        text: record.output.clone().unwrap_or_default(),
        tool_calls: record.tool_calls.clone(),
        finish: record.finish.clone().unwrap_or_else(Finish::missing),
        refusal: record.refusal.clone(),
        usage: record.usage,
        served_model: record.served_model.clone(),
        system_fingerprint: record.system_fingerprint.clone(),
    };
    let result = match &record.error {
        Some(error) => Err(error),
        None => Ok(&reply),
    };
    let twin = record.unstreamed.as_deref().map(|u| match u {
        Unstreamed::Answer { text, tool_calls } => Ok(Reply {
            text: text.clone(),
            tool_calls: tool_calls.clone(),
            ..reply.clone()
        }),
        Unstreamed::Failed(e) => Err(e.clone()),
    });
    let asks_twin = has_twin && result.is_ok();
    let missing_twin = CallError::new(
        conform_wire::provider::ErrorKind::InvalidResponse,
        "the unstreamed answer to compare with is not in the record",
    );
    let plain = match (&twin, asks_twin) {
        (Some(t), true) => Some(t.as_ref()),
        (None, true) => Some(Err(&missing_twin)),
        (_, false) => None,
    };
    judge(
        prepared,
        config,
        &case,
        result,
        plain,
        CallFacts {
            now,
            tokens: counted.as_ref(),
        },
        record.repeat,
    )
    .apply(record);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use conform_check::check::Status;
    use conform_check::check::record::CallRecord;
    use conform_check::verdict::{Policy, Tally, Verdict};
    use conform_config::Suite;
    use conform_wire::provider::{ErrorKind, FinishKind, Usage};
    use serde_json::json;

    /// A suite comparing `/label` (a live reference named when `reference`), and one case
    /// file per way a case can give it something to compare with, or nothing.
    fn suite(reference: bool) -> (tempfile::TempDir, PreparedSuite) {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("cases")).expect("cases");
        let live = if reference {
            "reference = \"primary\"\n"
        } else {
            ""
        };
        std::fs::write(
            root.join("suite.toml"),
            format!(
                "user = \"{{{{ text }}}}\"\nschema = \"schema.json\"\nagree = [\"/label\"]\n{live}\
                 [[rules]]\nname = \"short\"\nexpr = '.label | length < 5'\nmessage = \"short\"\n"
            ),
        )
        .expect("suite.toml");
        std::fs::write(
            root.join("schema.json"),
            r#"{"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]}"#,
        )
        .expect("schema");
        let recorded = json!({"model": "m", "recorded_at": "2026-11-30T12:00:00Z",
            "answers": [{"text": "{\"label\": \"a\"}"}]});
        let cases = [
            (
                "expected",
                json!({"vars": {"text": "x"}, "expected": {"label": "a"}}),
            ),
            ("nothing", json!({"vars": {"text": "y"}})),
            (
                "recorded",
                json!({"vars": {"text": "z"}, "reference": recorded}),
            ),
        ];
        for (name, case) in cases {
            std::fs::write(root.join(format!("cases/{name}.json")), case.to_string())
                .expect("case");
        }
        let suite = Suite::load(root).expect("suite");
        (dir, PreparedSuite::new(suite).expect("checks"))
    }

    fn reply(text: &str) -> Reply {
        Reply {
            text: text.into(),
            tool_calls: Vec::new(),
            finish: Finish::new(conform_wire::provider::FinishKind::Stop, Some("stop")),
            refusal: None,
            usage: Usage::default(),
            served_model: None,
            system_fingerprint: None,
        }
    }

    /// Every way a call can fail carries a finding with its code, whatever the case
    /// compares with: a call failed by nothing would revoke a provider for no reason
    /// anyone can read. And every nonconformant verdict of such calls names a reason.
    #[test]
    fn a_failed_call_always_carries_a_finding_and_a_revocation_its_reasons() {
        let config = ProviderConfig::parse(
            std::path::Path::new("providers/p.toml"),
            "kind = \"openai-compatible\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9\"\n",
        )
        .expect("provider");
        let answers = [
            Ok(reply(r#"{"label": "a"}"#)),
            Ok(reply(r#"{"label": "b"}"#)),
            Ok(reply(r#"{"label": "too long"}"#)),
            Ok(reply(r#"{}"#)),
            Ok(reply("```json\n{\"label\": \"a\"}\n```")),
            Ok(reply("the label is a")),
            Ok(Reply {
                finish: Finish::new(FinishKind::Length, Some("length")),
                ..reply(r#"{"label": "a"}"#)
            }),
            Err(CallError::new(ErrorKind::ServerError, "boom")),
            Err(CallError::new(ErrorKind::Auth, "no")),
        ];
        let twins = [
            None,
            Some(Ok(reply(r#"{"label": "a"}"#))),
            Some(Ok(reply("b"))),
        ];
        for reference in [false, true] {
            let (_dir, prepared) = suite(reference);
            for index in 0..prepared.suite.cases.len() {
                let (case, _) = prepared.load_request(index).expect("case");
                for answer in &answers {
                    for twin in &twins {
                        let plain = twin.as_ref().map(|t: &Result<Reply, CallError>| t.as_ref());
                        let facts = CallFacts::default();
                        let judged =
                            judge(&prepared, &config, &case, answer.as_ref(), plain, facts, 0);
                        let found: Vec<_> =
                            judged.outcomes.iter().flat_map(|o| &o.findings).collect();
                        let what = format!("case {}, {answer:?}, twin {twin:?}", case.id);
                        if !judged.passed {
                            assert!(!found.is_empty(), "failed without a finding: {what}");
                        }
                        for o in &judged.outcomes {
                            if o.status == Status::Fail {
                                assert!(!o.findings.is_empty(), "{} failed bare: {what}", o.check);
                            }
                        }
                        let mut record = CallRecord::new("s", &case.id, "p", 0);
                        record.error = answer.as_ref().err().cloned();
                        judged.apply(&mut record);
                        let mut tally = Tally::new("s", "p", 1);
                        tally.add(&record);
                        let (verdict, reasons) = tally.verdict(&Policy {
                            pass_threshold: 1.0,
                            max_transport_error_share: 1.0,
                            complete: true,
                            over_budget: false,
                            slo: Default::default(),
                            max_undetected_failure_rate: None,
                        });
                        if verdict == Verdict::Nonconformant {
                            assert!(!reasons.is_empty(), "revoked for no reason: {what}");
                        }
                    }
                }
            }
        }
    }

    /// A case with no `expected` has nothing for `agree` to compare here: a faithful
    /// answer passes its own checks, and the reference (recorded or live) compares its
    /// fields, or the run refuses it before sending anything.
    #[test]
    fn agree_compares_nothing_in_a_case_without_expected() {
        let config = ProviderConfig::parse(
            std::path::Path::new("providers/p.toml"),
            "kind = \"openai-compatible\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9\"\n",
        )
        .expect("provider");
        let (_dir, prepared) = suite(false);
        let faithful = reply(r#"{"label": "a"}"#);
        for index in 0..prepared.suite.cases.len() {
            let (case, _) = prepared.load_request(index).expect("case");
            let judged = judge(
                &prepared,
                &config,
                &case,
                Ok(&faithful),
                None,
                CallFacts::default(),
                0,
            );
            assert!(judged.passed, "{}: {:?}", case.id, judged.outcomes);
            let agree = judged.outcomes.iter().any(|o| o.check == "agree");
            assert_eq!(agree, case.expected.is_some(), "{}", case.id);
        }
    }
}

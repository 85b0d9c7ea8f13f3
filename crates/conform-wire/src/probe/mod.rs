//! `conform probe`: for each JSON Schema keyword a suite's schemas use, whether a
//! provider *enforces* it, *rejects* a schema that uses it, *strips* it (not enforced,
//! but shown to the model) or *ignores* it. Gemini drops `minItems`, OpenAI strict mode
//! refuses the whole request, Anthropic's SDK moves constraints into descriptions: a
//! fallback that does not enforce what the primary enforced lets through answers the
//! application never saw before.
//!
//! Each keyword is probed with the small requests of [`catalogue`]: the pushed prompt
//! (dictating an answer that breaks the keyword) until an answer breaks it or `repeats`
//! answers kept it, then, when one broke it, the plain prompt `repeats` times. A first
//! request refused as malformed is followed by one control request without the keyword.
//! The rule:
//!
//! | what came back | support |
//! |---|---|
//! | the request is refused (4xx), the control is accepted | `rejects` |
//! | every answer to the pushed prompt keeps the keyword | `enforces` |
//! | a pushed answer breaks it; most plain answers keep it | `strips` |
//! | a pushed answer breaks it; most plain answers break it too | `ignores` |
//! | refused with and without the keyword, or no usable answer | `inconclusive` |
//!
//! Repeating the pushed prompt tells enforcement from obedience by chance: a model that
//! is not held to the keyword gives the dictated, breaking answer.
//!
//! Results go to `probes.json` beside the allowlist ([`file`]), which `conform check`
//! reads offline: a keyword the primary enforces and a candidate ignores or strips is a
//! `schema_keyword_ignored` finding ([`findings`]).

pub mod catalogue;
pub mod file;
pub mod findings;
pub mod inventory;
pub mod session;

use std::collections::BTreeMap;

use futures::stream::{self, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::provider::transport::Endpoint;
use crate::provider::{CallError, CallSpec, Effect, ErrorKind, Stage};
use catalogue::{Probe, Push};
use conform_config::Prompt;

/// The system prompt of every probe request.
pub const SYSTEM: &str = "You answer with JSON only.";

/// What a provider does with one keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Support {
    /// Every pushed answer kept the keyword: the provider holds the model to it.
    Enforces,
    /// A schema that uses the keyword is refused, and the same request without it is accepted.
    Rejects,
    /// Not enforced, but shown to the model: most plain answers keep it.
    Strips,
    /// Not enforced, and most plain answers break it too: the model does not see it.
    Ignores,
    /// Refused with and without the keyword, or no usable answer came back.
    Inconclusive,
}

impl Support {
    /// The word for it, as `probes.json` and the reports write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Support::Enforces => "enforces",
            Support::Rejects => "rejects",
            Support::Strips => "strips",
            Support::Ignores => "ignores",
            Support::Inconclusive => "inconclusive",
        }
    }

    /// Not enforced although accepted: answers that break the keyword get through.
    pub fn lets_through(self) -> bool {
        matches!(self, Support::Strips | Support::Ignores)
    }
}

/// How the answers to one of a probe's prompts went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answers {
    /// Answers that keep the keyword.
    pub kept: u32,
    /// Answers that break it.
    pub broke: u32,
    /// Answers that are not JSON: they say nothing about the keyword.
    pub unusable: u32,
    /// Calls that failed.
    pub failed: u32,
}

impl Answers {
    fn answered(&self) -> u32 {
        self.kept + self.broke
    }
}

/// The probe of one keyword on one provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The JSON Schema keyword probed.
    pub keyword: String,
    /// What the provider does with it, by the rule of the module documentation.
    pub support: Support,
    /// Answers to the prompt that dictates an answer breaking the keyword.
    pub pushed: Answers,
    /// Answers to the prompt that leaves the model free (asked only once a pushed answer broke it).
    pub plain: Answers,
    /// Why, in words: the error of a rejection, or what decided.
    pub detail: String,
}

/// The decision rule of the module documentation, from the counts. `refused` is the
/// first request's rejection and the control request's outcome (`Ok` accepted).
pub fn classify(
    pushed: Answers,
    plain: Answers,
    refused: Option<(&CallError, Result<(), &CallError>)>,
) -> (Support, String) {
    if let Some((error, control)) = refused {
        return match control {
            Ok(()) => (
                Support::Rejects,
                format!("a schema with it is refused; without it, accepted: {error}"),
            ),
            Err(again) => (
                Support::Inconclusive,
                format!("the request is refused with and without the keyword: {again}"),
            ),
        };
    }
    if pushed.answered() == 0 {
        return (
            Support::Inconclusive,
            format!(
                "no usable answer to the pushed prompt ({} not JSON, {} failed calls)",
                pushed.unusable, pushed.failed
            ),
        );
    }
    if pushed.broke == 0 {
        return (
            Support::Enforces,
            format!(
                "{} of {} answers kept it although the prompt dictated one that breaks it",
                pushed.kept,
                pushed.answered()
            ),
        );
    }
    if plain.answered() == 0 {
        return (
            Support::Inconclusive,
            "not enforced, and no usable answer to the plain prompt".to_string(),
        );
    }
    let pushed_words = format!(
        "{} of {} pushed answers broke it",
        pushed.broke,
        pushed.answered()
    );
    if plain.kept * 2 > plain.answered() {
        (
            Support::Strips,
            format!(
                "{pushed_words}, but {} of {} plain answers kept it: the model saw it as advice",
                plain.kept,
                plain.answered()
            ),
        )
    } else {
        (
            Support::Ignores,
            format!(
                "{pushed_words}, and {} of {} plain answers broke it too",
                plain.broke,
                plain.answered()
            ),
        )
    }
}

/// The keywords of `used` that have a probe, and those that have none (structural
/// keywords such as `type` and `properties`, annotations, references).
pub fn split_probeable(used: &[String]) -> (Vec<Probe>, Vec<String>) {
    let mut probes = Vec::new();
    let mut not = Vec::new();
    for keyword in used {
        match catalogue::of(keyword) {
            Some(p) => probes.push(p),
            None => not.push(keyword.clone()),
        }
    }
    (probes, not)
}

/// What probing will cost at most, before anything is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cost {
    /// Requests at most: every probe's pushed and plain repeats, and its control request.
    pub requests: u64,
    /// Prompt tokens, estimated at four bytes a token (the schema included).
    pub prompt_tokens: u64,
    /// At most `max_output_tokens` per request.
    pub output_tokens: u64,
}

/// The most `probes` can cost with `repeats` and `max_output_tokens`.
pub fn cost(probes: &[Probe], repeats: u32, max_output_tokens: u32) -> Cost {
    let per = u64::from(repeats) * 2;
    let mut prompt_tokens = 0;
    for p in probes {
        let schema = p.schema().to_string().len();
        for push in [Push::Pushed, Push::Plain] {
            let bytes = SYSTEM.len() + p.prompt(push).len() + schema;
            prompt_tokens += (bytes as u64).div_ceil(4) * u64::from(repeats);
        }
    }
    let requests = probes.len() as u64 * per;
    Cost {
        requests,
        prompt_tokens,
        output_tokens: requests * u64::from(max_output_tokens),
    }
}

/// Probes every keyword of `probes` on `endpoint`, `repeats` times per prompt, up to the
/// provider's concurrency at once; the outcomes in the order of `probes`.
///
/// A failure that stops the provider (authentication, quota, no connection) stops the
/// probe: the keywords not yet probed are inconclusive, saying why.
pub async fn run(endpoint: &Endpoint, probes: &[Probe], repeats: u32) -> Vec<Outcome> {
    let concurrency = endpoint.config.limits.concurrency();
    let stopped: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let stopped = &stopped;
    let mut done: Vec<(usize, Outcome)> = stream::iter(probes.iter().enumerate())
        .map(|(i, p)| async move { (i, one(endpoint, p, repeats.max(1), stopped).await) })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, o)| o).collect()
}

async fn one(
    endpoint: &Endpoint,
    probe: &Probe,
    repeats: u32,
    stopped: &std::sync::Mutex<Option<String>>,
) -> Outcome {
    let validator = validator(&probe.schema());
    let mut counts: BTreeMap<bool, Answers> = BTreeMap::new();
    let halted = |why: &str| Outcome {
        keyword: probe.keyword.to_string(),
        support: Support::Inconclusive,
        pushed: Answers::default(),
        plain: Answers::default(),
        detail: format!("not probed: {why}"),
    };
    for (push, pushed) in [(Push::Pushed, true), (Push::Plain, false)] {
        for i in 0..repeats {
            if let Some(why) = stopped.lock().ok().and_then(|s| s.clone()) {
                return halted(&why);
            }
            let result = ask(endpoint, probe, push, &probe.schema()).await;
            // A refused schema is what a probe looks for; any other stop is the provider's.
            if let Err(error) = &result
                && !refused(error)
                && matches!(error.effect(), Effect::HaltProvider | Effect::ConfigError)
            {
                let why = format!(
                    "{} was stopped after a call failed with {error}",
                    endpoint.config.name
                );
                if let Ok(mut s) = stopped.lock() {
                    s.get_or_insert(why.clone());
                }
                return halted(&why);
            }
            let answers = counts.entry(pushed).or_default();
            match result {
                Ok(text) => match serde_json::from_str::<Value>(&text) {
                    Ok(answer) if validator.as_ref().is_some_and(|v| v.is_valid(&answer)) => {
                        answers.kept += 1
                    }
                    Ok(_) => answers.broke += 1,
                    Err(_) => answers.unusable += 1,
                },
                Err(error) if pushed && i == 0 && refused(&error) => {
                    let control = ask(endpoint, probe, push, &probe.schema_without_keyword()).await;
                    let (support, detail) = classify(
                        Answers::default(),
                        Answers::default(),
                        Some((&error, control.as_ref().map(|_| ()))),
                    );
                    return Outcome {
                        keyword: probe.keyword.to_string(),
                        support,
                        pushed: Answers {
                            failed: 1,
                            ..Answers::default()
                        },
                        plain: Answers::default(),
                        detail,
                    };
                }
                Err(_) => answers.failed += 1,
            }
            // One broken answer disproves enforcement: the pushed prompt has said its piece.
            if pushed && answers.broke > 0 {
                break;
            }
        }
        // Kept every time it was pushed to break it: enforced, and the plain prompt could
        // only agree.
        let so_far = counts.get(&true).copied().unwrap_or_default();
        if pushed && so_far.broke == 0 && so_far.answered() > 0 {
            break;
        }
    }
    let pushed = counts.get(&true).copied().unwrap_or_default();
    let plain = counts.get(&false).copied().unwrap_or_default();
    let (support, detail) = classify(pushed, plain, None);
    Outcome {
        keyword: probe.keyword.to_string(),
        support,
        pushed,
        plain,
        detail,
    }
}

/// A rejection of the request itself, before any 2xx: what a refused keyword looks like.
fn refused(error: &CallError) -> bool {
    error.stage == Stage::BeforeSuccess && error.kind == ErrorKind::BadRequest
}

async fn ask(
    endpoint: &Endpoint,
    probe: &Probe,
    push: Push,
    schema: &Value,
) -> Result<String, CallError> {
    let prompt = Prompt {
        system: Some(SYSTEM.to_string()),
        user: probe.prompt(push),
    };
    let name = format!("probe_{}", probe.keyword);
    let spec = CallSpec {
        prompt: &prompt,
        schema,
        schema_name: &name,
        conversation: None,
    };
    let tokens = (prompt.user.len() + schema.to_string().len()).div_ceil(4) as u32
        + endpoint.config.max_output_tokens;
    endpoint.call(&spec, tokens).await.map(|c| c.reply.text)
}

/// A validator that also checks `format` (an annotation by default in 2020-12), since
/// that is what the `format` probe asks about.
pub(crate) fn validator(schema: &Value) -> Option<jsonschema::Validator> {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(schema)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(kept: u32, broke: u32) -> Answers {
        Answers {
            kept,
            broke,
            ..Answers::default()
        }
    }

    #[test]
    fn the_rule_of_the_table() {
        let none = Answers::default();
        assert_eq!(classify(answers(3, 0), none, None).0, Support::Enforces);
        assert_eq!(
            classify(answers(0, 1), answers(3, 0), None).0,
            Support::Strips
        );
        assert_eq!(
            classify(answers(0, 1), answers(1, 2), None).0,
            Support::Ignores
        );
        // Obeyed by chance once, then broken: not enforced.
        assert_eq!(
            classify(answers(1, 1), answers(0, 3), None).0,
            Support::Ignores
        );
        let error = CallError::new(ErrorKind::BadRequest, "Invalid schema: minItems");
        assert_eq!(
            classify(none, none, Some((&error, Ok(())))).0,
            Support::Rejects
        );
        assert_eq!(
            classify(none, none, Some((&error, Err(&error)))).0,
            Support::Inconclusive
        );
        let unusable = Answers {
            unusable: 3,
            ..Answers::default()
        };
        assert_eq!(classify(unusable, none, None).0, Support::Inconclusive);
    }

    #[test]
    fn the_cost_counts_every_request_at_most() {
        let probes: Vec<Probe> = ["minItems", "pattern"]
            .iter()
            .filter_map(|k| catalogue::of(k))
            .collect();
        let c = cost(&probes, 3, 64);
        assert_eq!(c.requests, 12);
        assert_eq!(c.output_tokens, 12 * 64);
        assert!(c.prompt_tokens > 12 * 40, "{c:?}");
    }
}

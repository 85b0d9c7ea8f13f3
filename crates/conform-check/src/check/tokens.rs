//! The prompt as the provider's tokenizer sees it.
//!
//! Before the call ([`preflight`]): the prompt plus `max_output_tokens` fits
//! `context_window`; an overflow is a conformance failure recorded without sending
//! anything. After the call ([`TokensCheck`]): the locally counted prompt tokens equal
//! the provider-reported `usage.prompt_tokens` within the provider's tolerance (a
//! disagreement means the provider saw a different prompt than the one rendered), and
//! no case variable holds text that this tokenizer turns into a special or control
//! token.

use serde::Serialize;

use super::{Check, Code, Finding, Outcome, Subject};
use conform_config::{Conversation, ProviderConfig};
use conform_wire::tokenize::ControlToken;

/// The check's name in outcomes and reports.
pub const NAME: &str = "tokens";

/// What was counted before the call, for one case and one provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromptTokens {
    /// Which tokenizer counted.
    pub tokenizer: String,
    /// The prompt tokens counted locally (or through the provider's count endpoint), or
    /// why they could not be.
    pub counted: Result<u64, String>,
    /// Control tokens found in the case's variables.
    pub control: Vec<ControlToken>,
    /// Whether the count should equal the provider's exactly. OpenAI bills the schema
    /// of structured output (or of a forced tool) on top of the messages, by a rule it
    /// does not publish: there the provider must report at least the local count, and
    /// fewer means it saw less than was rendered.
    pub exact: bool,
}

/// Whether a local count covers everything the provider bills for the prompt: not on
/// OpenAI's own API with a schema to follow (servers that constrain decoding with a
/// grammar, such as llama.cpp, add nothing to the prompt). A request that asks for no
/// JSON answer (it expects tool calls or text) sends no schema.
pub fn count_is_exact(config: &ProviderConfig, conversation: Option<&Conversation>) -> bool {
    let schema_sent = conversation.is_none_or(|c| c.json_answer);
    let wire = conform_wire::provider::wire_format(config.kind);
    !(schema_sent && wire.bills_schema_unpublished(config))
}

/// `context_overflow` when the prompt and the output budget do not fit the window.
pub fn preflight(tokens: &PromptTokens, config: &ProviderConfig) -> Option<Finding> {
    let window = config.tokenizer.context_window?;
    let prompt = *tokens.counted.as_ref().ok()?;
    let needed = prompt + u64::from(config.max_output_tokens);
    (needed > u64::from(window)).then(|| {
        Finding::new(
            Code::ContextOverflow,
            format!(
                "the prompt ({prompt} tokens, {}) plus max_output_tokens ({}) needs {needed} tokens, \
                 over the context window of {window} by {}; not sent",
                tokens.tokenizer,
                config.max_output_tokens,
                needed - u64::from(window)
            ),
        )
    })
}

/// The findings that need no answer: control tokens and a count that failed.
pub fn input_findings(tokens: &PromptTokens) -> Vec<Finding> {
    let mut findings: Vec<Finding> = tokens
        .control
        .iter()
        .map(|c| {
            Finding::new(
                Code::SpecialTokenInInput,
                format!(
                    "{} contains `{}`, which {} turns into a special token: the model would read it as control, not text",
                    c.variable, c.token, tokens.tokenizer
                ),
            )
            .at(c.variable.clone())
        })
        .collect();
    if let Err(why) = &tokens.counted {
        findings.push(Finding::new(
            Code::TokenCountFailed,
            format!(
                "the prompt could not be counted with {}: {why}",
                tokens.tokenizer
            ),
        ));
    }
    findings
}

/// Compares the count with what the provider reports; applies when the provider has a
/// tokenizer configured.
pub struct TokensCheck;

impl Check for TokensCheck {
    fn name(&self) -> &'static str {
        NAME
    }

    fn applies(&self, subject: &Subject<'_>) -> bool {
        subject.tokens.is_some()
    }

    fn check(&self, subject: &Subject<'_>) -> Outcome {
        let Some(tokens) = subject.tokens else {
            return Outcome::skip(NAME);
        };
        let mut findings = input_findings(tokens);
        if let Ok(counted) = tokens.counted {
            let tolerance = u64::from(subject.provider.tokenizer.tolerance.unwrap_or(0));
            match subject.reply.usage.prompt_tokens {
                None => findings.push(Finding::new(
                    Code::PromptTokensUnreported,
                    "the provider reported no usage.prompt_tokens: the prompt it saw cannot be verified",
                )),
                Some(reported)
                    if reported.abs_diff(counted) > tolerance
                        && (tokens.exact || reported < counted) =>
                {
                    let (by, more) = (reported.abs_diff(counted), reported > counted);
                    findings.push(Finding::new(
                        Code::TokenCountMismatch,
                        format!(
                            "the provider counted {reported} prompt tokens, {} counted {counted}: \
                             {by} token{} {} (tolerance {tolerance}); the provider saw a different prompt than the one rendered",
                            tokens.tokenizer,
                            if by == 1 { "" } else { "s" },
                            if more { "more" } else { "fewer" },
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        Outcome::from_findings(NAME, findings)
    }
}

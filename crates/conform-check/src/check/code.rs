//! Finding codes: what a check found wrong with a call, by a stable name that reports,
//! `results.jsonl`, the allowlist's revocations and CI filters read. One variant each, so
//! a code cannot be misspelt, and reading a file back resolves each name to its variant
//! (a name no conform knows refuses the file) instead of interning strings.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use conform_wire::provider::ErrorKind;

macro_rules! codes {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// One thing a check can find wrong with a call.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Code {
            /// The call failed: its error's kind names it (`rate_limited`,
            /// `stream_truncated` …, see `provider::policy`).
            Call(ErrorKind),
            $($(#[$doc])* $variant,)*
        }

        impl Code {
            /// Every code a check finds, beside the calls' own errors.
            pub const FOUND: &'static [Code] = &[$(Code::$variant,)*];

            /// The stable name.
            pub fn as_str(self) -> &'static str {
                match self {
                    Code::Call(kind) => kind.code(),
                    $(Code::$variant => $name,)*
                }
            }

            /// The code of a stable name; `None` for a name no check gives.
            pub fn named(name: &str) -> Option<Code> {
                match name {
                    $($name => Some(Code::$variant),)*
                    other => ErrorKind::ALL
                        .iter()
                        .find(|k| k.code() == other)
                        .map(|k| Code::Call(*k)),
                }
            }
        }
    };
}

codes! {
    /// Cut off at the output token limit.
    FinishLength = "finish_length",
    /// The model declined to answer.
    Refusal = "refusal",
    /// A safety or content filter stopped the answer.
    ContentFilter = "content_filter",
    /// The model stopped for a reason the vendor's vocabulary does not call normal.
    FinishOther = "finish_other",
    /// Not JSON, or JSON cut short.
    InvalidJson = "invalid_json",
    /// JSON wrapped in fences or prose.
    NotPureJson = "not_pure_json",
    /// Prose where JSON was asked for.
    StructuredOutputIgnored = "structured_output_ignored",
    /// Nothing at all.
    EmptyOutput = "empty_output",
    /// The answer fails the suite's JSON Schema.
    SchemaViolation = "schema_violation",
    /// A business rule did not yield `true`.
    RuleFailed = "rule_failed",
    /// A business rule's evaluation errored.
    RuleError = "rule_error",
    /// A field `agree` compares is missing from the answer.
    FieldMissing = "field_missing",
    /// A field `agree` compares differs from the expected answer.
    FieldMismatch = "field_mismatch",
    /// The prompt and the output budget do not fit the context window.
    ContextOverflow = "context_overflow",
    /// The provider counted the prompt otherwise than its tokenizer does.
    TokenCountMismatch = "token_count_mismatch",
    /// The prompt could not be counted.
    TokenCountFailed = "token_count_failed",
    /// The provider reported no prompt tokens to compare.
    PromptTokensUnreported = "prompt_tokens_unreported",
    /// A case's variable holds text the tokenizer reads as a control token.
    SpecialTokenInInput = "special_token_in_input",
    /// A call to a tool the request does not declare.
    UnknownTool = "unknown_tool",
    /// Arguments that are not JSON, or a JSON string holding JSON.
    ToolArgumentsNotJson = "tool_arguments_not_json",
    /// Arguments that fail the tool's `parameters`.
    ToolArgumentsInvalid = "tool_arguments_invalid",
    /// A call written into the text instead of made.
    ToolCallAsText = "tool_call_as_text",
    /// An expected call that did not come.
    ToolCallMissing = "tool_call_missing",
    /// A call the case does not expect.
    ToolCallUnexpected = "tool_call_unexpected",
    /// `tool_choice` forced a call and none came (always with `tool_call_missing`).
    ToolChoiceIgnored = "tool_choice_ignored",
    /// An argument the case pins has another value.
    ToolArgumentMismatch = "tool_argument_mismatch",
    /// A `[[tool_rules]]` expression did not yield `true`.
    ToolRuleFailed = "tool_rule_failed",
    /// A `[[tool_rules]]` expression errored.
    ToolRuleError = "tool_rule_error",
    /// The finish reason disagrees with the calls that came back.
    ToolFinishMismatch = "tool_finish_mismatch",
    /// The streamed answer differs from the unstreamed one.
    StreamDisagreement = "stream_disagreement",
    /// The unstreamed answer to compare a stream with failed.
    UnstreamedCallFailed = "unstreamed_call_failed",
    /// A field the candidate agrees on with the reference significantly less than the
    /// reference agrees with itself.
    ReferenceDisagreement = "reference_disagreement",
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for Code {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl Serialize for Code {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<str>::deserialize(d)?;
        Code::named(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "`{name}` is not a finding code of this conform; run the shard with it"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_name_and_no_two_share_one() {
        let mut names = std::collections::BTreeSet::new();
        let all = Code::FOUND
            .iter()
            .copied()
            .chain(ErrorKind::ALL.iter().map(|k| Code::Call(*k)));
        for code in all {
            assert_eq!(Code::named(code.as_str()), Some(code));
            assert!(names.insert(code.as_str()), "{code} twice");
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(serde_json::from_str::<Code>(&json).unwrap(), code);
        }
        assert!(serde_json::from_str::<Code>("\"no_such_code\"").is_err());
        assert_eq!(Code::ToolCallMissing, "tool_call_missing");
    }
}

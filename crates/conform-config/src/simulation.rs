//! The vocabulary of a provider file's `[sim]` table: how a simulated provider behaves,
//! what it does with schema keywords, and the verdict it must earn. The simulator
//! (`conform_wire::sim`) and the verdict read these; they live here so that the configuration,
//! the lowest layer, names nothing above it.

use serde::{Deserialize, Serialize};

/// How a simulated provider answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Behaviour {
    /// The expected answer, as JSON, every time.
    Steady,
    /// The expected answer plus an invented top-level key.
    ExtraKey,
    /// The expected answer wrapped in markdown fences.
    Fenced,
    /// Ignores the requested format and answers in prose.
    Prose,
    /// Stops at the token limit: half the JSON, `finish_reason: "length"`.
    Truncated,
    /// Answers the first `sim::RATE_LIMITED_REQUESTS` (3) requests with 429 and `Retry-After: 1`,
    /// then behaves.
    RateLimited,
    /// Answers faithfully when asked for one document, but streams a different answer
    /// (the last field dropped), as a proxy that rewrites streamed chunks does.
    StreamDrift,
    /// Calls a tool although the request's `tool_choice` is `none`.
    CallsDespiteNone,
    /// Calls a tool the request does not declare (the expected name with `_v2`).
    InventsTool,
    /// Sends the arguments as a JSON string holding the JSON.
    DoubleEncodes,
    /// Leaves out a required argument.
    DropsRequired,
    /// Writes the call into the text, in a JSON code block, instead of making it.
    CallAsText,
    /// Answers in text when the request's `tool_choice` is `required`.
    IgnoresRequired,
    /// Makes only the first of the calls a case needs in parallel.
    OneOfParallel,
    /// Answers the first top-level field the schema gives an `enum` with the enum's next
    /// value: valid, and wrong (at `rate`).
    FlipsEnum,
    /// Rewords the first top-level free-text field (a string the schema gives no
    /// `enum`), differently each time (at `rate`): the run-to-run noise of a primary.
    VariesText,
}

/// What a simulated provider does with one keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Handling {
    /// Decoding keeps to it: the answer satisfies it whatever the prompt asks.
    Enforce,
    /// A schema that uses it is refused with a 400.
    Reject,
    /// Removed from the schema and written into its description: not enforced, but the
    /// model sees it.
    Strip,
    /// Accepted and neither enforced nor shown to the model.
    Ignore,
}

/// The verdict `conform demo` expects a simulated provider to earn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpectedVerdict {
    /// Every call should pass: the demo's faithful fallback.
    Conformant,
    /// The answers should fail the suite.
    Nonconformant,
    /// The evidence should be too thin to decide.
    Inconclusive,
}

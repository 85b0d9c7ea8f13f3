//! What an attempt sends to a provider served through its provider file
//! ([`super::filed`]): the job's input read as a request-shaped case (`messages`,
//! `tools`, `tool_choice` and `parallel_tool_calls`, read with the types a case file is
//! read with, and checked as `conform check` checks a case), encoded by the file's wire
//! adapter with the file's settings and the suite's schema, as `conform run` sends a
//! case.
//!
//! Every other member of the input is a parameter. The ones a provider file holds
//! ([`Setting`]: model, temperature, seed, the output ceiling, stream) are applied on
//! the job's own provider, the user's intent; on a failover each must be what the file
//! says, because the evidence was made with the file's value. Any other member (`top_p`,
//! `response_format`, …) has no place in a provider file, so the evidence says nothing
//! of it: refused on either. A whitelist, not a blacklist: a member nobody thought of is
//! refused too.

use serde_json::{Map, Value, json};

use super::filed::Filed;
use super::upstream::Request;
use conform_config::conversation::{self, Conversation, Message, Role, Tool, ToolChoice};
use conform_config::{Prompt, ProviderConfig, Suite};
use conform_wire::provider::CallSpec;

/// The members that make the conversation.
const CONVERSATION: [&str; 4] = ["messages", "tools", "tool_choice", "parallel_tool_calls"];

/// A member of the job's input that cannot be sent as it is, and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Refusal {
    /// The input's member: `temperature`, `messages`.
    pub(crate) member: String,
    pub(crate) detail: String,
}

impl Refusal {
    fn new(member: &str, detail: impl Into<String>) -> Refusal {
        Refusal {
            member: member.to_string(),
            detail: detail.into(),
        }
    }
}

/// The job's input, read.
#[derive(Debug, Clone)]
pub(crate) struct JobInput {
    pub(crate) conversation: Conversation,
    /// Every other member that is not null, in the input's order.
    pub(crate) parameters: Vec<(String, Value)>,
}

/// Reads `input` (a JSON object) as a request-shaped case and its parameters.
pub(crate) fn read(input: &Value) -> Result<JobInput, Refusal> {
    let Value::Object(members) = input else {
        return Err(Refusal::new("input", "`input` must be a JSON object"));
    };
    let conversation = conversation_of(members)?;
    let parameters = members
        .iter()
        .filter(|(name, value)| !CONVERSATION.contains(&name.as_str()) && !value.is_null())
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    Ok(JobInput {
        conversation,
        parameters,
    })
}

fn conversation_of(members: &Map<String, Value>) -> Result<Conversation, Refusal> {
    let messages: Vec<Message> = match members.get("messages") {
        Some(Value::Array(items)) if !items.is_empty() => each(items, "messages")?,
        _ => {
            return Err(Refusal::new(
                "messages",
                "`messages` must be a non-empty array of chat messages ({\"role\": …, \"content\": \"…\"})",
            ));
        }
    };
    let tools: Vec<Tool> = match members.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => each(items, "tools")?,
        Some(_) => return Err(Refusal::new("tools", "`tools` must be an array of tools")),
    };
    let tool_choice = match members.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(choice) => {
            Some(ToolChoice::try_from(choice.clone()).map_err(|e| Refusal::new("tool_choice", e))?)
        }
    };
    let parallel_tool_calls = match members.get("parallel_tool_calls") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => {
            return Err(Refusal::new(
                "parallel_tool_calls",
                "`parallel_tool_calls` must be true or false",
            ));
        }
    };
    let mut found = conversation::tool_problems(&tools, "/tools");
    found.extend(conversation::problems(
        &messages,
        &tools,
        tool_choice.as_ref(),
    ));
    if let Some(problem) = found.into_iter().next() {
        return Err(at_pointer(problem));
    }
    Ok(Conversation {
        json_answer: tools.is_empty(),
        messages,
        tools: tools.into(),
        tool_choice,
        parallel_tool_calls,
    })
}

/// Each item of the array `member`, read as a case file reads it.
fn each<T: serde::de::DeserializeOwned>(items: &[Value], member: &str) -> Result<Vec<T>, Refusal> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            serde_json::from_value(item.clone())
                .map_err(|e| Refusal::new(member, format!("{member}[{i}]: {e}")))
        })
        .collect()
}

/// A problem at a JSON pointer into the input, as a refusal of its top-level member.
fn at_pointer(problem: conversation::Problem) -> Refusal {
    let member = problem
        .pointer
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or_default();
    let member = if member.is_empty() {
        "messages"
    } else {
        member
    };
    Refusal::new(member, format!("{}: {}", problem.pointer, problem.message))
}

/// A parameter a provider file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Setting {
    Model,
    Temperature,
    Seed,
    /// `max_output_tokens`, which a job may spell `max_tokens` or `max_completion_tokens`.
    MaxTokens,
    Stream,
}

impl Setting {
    /// The setting a member of the input names, if it names one.
    pub(crate) fn of(member: &str) -> Option<Setting> {
        match member {
            "model" => Some(Setting::Model),
            "temperature" => Some(Setting::Temperature),
            "seed" => Some(Setting::Seed),
            "max_tokens" | "max_completion_tokens" | "max_output_tokens" => {
                Some(Setting::MaxTokens)
            }
            "stream" => Some(Setting::Stream),
            _ => None,
        }
    }

    /// Its field in the provider file.
    fn field(self) -> &'static str {
        match self {
            Setting::Model => "model",
            Setting::Temperature => "temperature",
            Setting::Seed => "seed",
            Setting::MaxTokens => "max_output_tokens",
            Setting::Stream => "stream",
        }
    }

    /// Its value in `config`.
    fn value(self, config: &ProviderConfig) -> Value {
        match self {
            Setting::Model => json!(config.model),
            Setting::Temperature => json!(config.temperature),
            Setting::Seed => json!(config.seed),
            Setting::MaxTokens => json!(config.max_output_tokens),
            Setting::Stream => json!(config.stream),
        }
    }

    /// Sets it in `config` to `value`; what it must be otherwise.
    fn apply(self, config: &mut ProviderConfig, value: &Value) -> Result<(), &'static str> {
        match self {
            Setting::Model => {
                config.model = value.as_str().ok_or("a string")?.to_string();
            }
            Setting::Temperature => {
                config.temperature = (value.as_f64())
                    .filter(|t| *t >= 0.0)
                    .ok_or("a number, 0 or more")?;
            }
            Setting::Seed => config.seed = Some(value.as_i64().ok_or("an integer")?),
            Setting::MaxTokens => {
                config.max_output_tokens = (value.as_u64())
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| *n > 0)
                    .ok_or("a positive integer")?;
            }
            Setting::Stream => config.stream = value.as_bool().ok_or("true or false")?,
        }
        Ok(())
    }
}

impl JobInput {
    /// The settings the request is sent with: the provider file's, with the job's
    /// parameters applied on its own provider; on a failover (`failover`) the file's
    /// alone, every parameter held to them.
    pub(crate) fn settings(
        &self,
        filed: &Filed,
        failover: bool,
    ) -> Result<ProviderConfig, Refusal> {
        let file = filed.shown_file();
        let mut config = filed.config.clone();
        for (member, value) in &self.parameters {
            let Some(setting) = Setting::of(member) else {
                return Err(Refusal::new(member, unproven(member, &file, failover)));
            };
            let before = setting.value(&config);
            setting
                .apply(&mut config, value)
                .map_err(|must| Refusal::new(member, format!("`{member}` must be {must}")))?;
            let after = setting.value(&config);
            let field = setting.field();
            if failover && after != before {
                return Err(Refusal::new(
                    member,
                    format!(
                        "`{member}` is {value} in the job, but {file} sets {field} = {before}, with which the evidence was made: leave `{member}` out of the input (the file's value is sent) or set it to {before}"
                    ),
                ));
            }
            if setting == Setting::Temperature && !config.sends_temperature() && after != before {
                return Err(Refusal::new(
                    member,
                    format!(
                        "{file} sends no temperature ([anthropic] send_temperature = false), so `{member}` cannot be applied: leave it out of the input"
                    ),
                ));
            }
        }
        Ok(config)
    }
}

/// Why a member that is no setting of a provider file is not sent.
fn unproven(member: &str, file: &str, failover: bool) -> String {
    let held = "model, temperature, seed, max_tokens (max_completion_tokens, max_output_tokens) and stream";
    match failover {
        true => format!(
            "`{member}` is no setting of {file}, so the evidence was made without it and says nothing of a request that carries it: leave it out of the input to fail over (a provider file holds {held})"
        ),
        false => format!(
            "`{member}` is no setting of {file}, so its adapter cannot send it: leave it out of the input, or set what the file holds ({held}) there"
        ),
    }
}

/// The request for `input`, as `conform run` sends a case to `filed` with `config`:
/// through its wire adapter, with `suite`'s schema. Without a suite (a task the project
/// has no suite for, on the job's own provider) no structured output is asked for.
/// `Err` when the file's vendor refuses the conversation.
pub(crate) fn encode(
    filed: &Filed,
    config: &ProviderConfig,
    input: &JobInput,
    suite: Option<&Suite>,
) -> Result<Request, Refusal> {
    let mut conversation = input.conversation.clone();
    if let Some(problem) = filed
        .wire
        .conversation_problems(&conversation.messages)
        .into_iter()
        .next()
    {
        return Err(at_pointer(problem));
    }
    conversation.json_answer &= suite.is_some();
    let prompt = Prompt {
        system: conversation.system(),
        user: (conversation.messages.iter().rev())
            .find(|m| m.role == Role::User)
            .map(|m| m.content_str().to_string())
            .unwrap_or_default(),
    };
    let no_schema = json!({});
    let schema_name = suite.map_or_else(
        || "output".to_string(),
        |s| conform_config::suite::schema_name(&s.name),
    );
    let spec = CallSpec {
        prompt: &prompt,
        schema: suite.map_or(&no_schema, |s| &s.schema),
        schema_name: &schema_name,
        conversation: (!is_template(&conversation)).then_some(&conversation),
    };
    let key = filed.key().unwrap_or(None);
    let encoded = filed.wire.encode(&spec, config, key);
    let credentials = filed.credentials().ok().cloned().flatten();
    Ok(Request::wire(encoded, filed.wire.clone(), config.stream).authorized_by(credentials))
}

/// A conversation a template case makes: at most one system message, then one user
/// message, plain text, with no tools and asking for JSON. It is sent as `conform run`
/// sends a template case, so the request is byte for byte the one the evidence holds.
fn is_template(c: &Conversation) -> bool {
    let plain = |m: &Message| {
        m.content.is_some()
            && m.name.is_none()
            && m.tool_calls.is_empty()
            && m.tool_call_id.is_none()
            && !m.is_error
    };
    let roles: Vec<Role> = c.messages.iter().map(|m| m.role).collect();
    c.json_answer
        && c.tools.is_empty()
        && c.tool_choice.is_none()
        && c.parallel_tool_calls.is_none()
        && matches!(roles.as_slice(), [Role::User] | [Role::System, Role::User])
        && c.messages.iter().all(plain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use conform_config::ProviderConfig;
    use std::path::Path;

    fn filed(toml: &str) -> Filed {
        Filed::new(ProviderConfig::parse(Path::new("providers/fb-good.toml"), toml).unwrap())
    }

    const FILE: &str = "kind = \"openai-compatible\"\nmodel = \"qwen2.5-7b\"\nbase_url = \"http://127.0.0.1:9101\"\ntemperature = 0\n";

    fn input(extra: Value) -> Value {
        let mut input = json!({"messages": [{"role": "user", "content": "hello"}]});
        for (k, v) in extra.as_object().unwrap() {
            input[k] = v.clone();
        }
        input
    }

    #[test]
    fn a_failover_refuses_a_parameter_the_file_sets_otherwise_and_names_both_values() {
        let fb = filed(FILE);
        let read = read(&input(json!({"temperature": 1.5}))).unwrap();
        let refused = read.settings(&fb, true).unwrap_err();
        assert_eq!(refused.member, "temperature");
        assert!(refused.detail.contains("1.5"), "{}", refused.detail);
        assert!(
            refused.detail.contains("temperature = 0.0"),
            "{}",
            refused.detail
        );
        assert!(
            refused.detail.contains("providers/fb-good.toml"),
            "{}",
            refused.detail
        );
        // The job's own provider takes it: the user's intent.
        assert_eq!(read.settings(&fb, false).unwrap().temperature, 1.5);
    }

    #[test]
    fn the_files_own_values_and_nulls_pass_on_a_failover() {
        let fb = filed(FILE);
        let same = input(
            json!({"temperature": 0, "model": "qwen2.5-7b", "max_tokens": 1024,
            "stream": false, "seed": null}),
        );
        let config = read(&same).unwrap().settings(&fb, true).unwrap();
        assert_eq!(config, fb.config);
    }

    #[test]
    fn every_member_no_file_holds_is_refused_on_either_provider() {
        let fb = filed(FILE);
        for member in [
            "top_p",
            "response_format",
            "n",
            "logit_bias",
            "frequency_penalty",
        ] {
            let read = read(&input(json!({member: 1}))).unwrap();
            assert_eq!(read.settings(&fb, true).unwrap_err().member, member);
            assert_eq!(read.settings(&fb, false).unwrap_err().member, member);
        }
        for (member, value) in [
            ("model", json!("gpt-4o")),
            ("seed", json!(7)),
            ("max_completion_tokens", json!(10)),
            ("stream", json!(true)),
        ] {
            let read = read(&input(json!({member: value}))).unwrap();
            assert_eq!(read.settings(&fb, true).unwrap_err().member, member);
            assert!(read.settings(&fb, false).is_ok(), "{member}");
        }
    }

    #[test]
    fn an_input_that_is_no_request_names_its_member() {
        for (bad, member) in [
            (json!({}), "messages"),
            (json!({"messages": []}), "messages"),
            (
                json!({"messages": [{"role": "bot", "content": "x"}]}),
                "messages",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "tools": {}}),
                "tools",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "tool_choice": "maybe"}),
                "tool_choice",
            ),
            (
                json!({"messages": [{"role": "tool", "content": "x", "tool_call_id": "c1"}]}),
                "messages",
            ),
        ] {
            assert_eq!(read(&bad).unwrap_err().member, member, "{bad}");
        }
    }

    #[test]
    fn a_plain_system_and_user_pair_is_sent_as_a_template_case_is() {
        let fb = filed(FILE);
        let job = read(
            &json!({"messages": [{"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello"}]}),
        )
        .unwrap();
        let suite_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/ticket-triage");
        let suite = Suite::load(&suite_dir).unwrap();
        let sent = encode(&fb, &fb.config, &job, Some(&suite)).unwrap();
        let body: Value = serde_json::from_slice(&sent.body).unwrap();
        assert_eq!(sent.url, "http://127.0.0.1:9101/v1/chat/completions");
        assert_eq!(body["model"], "qwen2.5-7b");
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(
            body["response_format"]["json_schema"]["name"],
            "ticket-triage"
        );
    }
}

//! What the checks cost per output: transport + strict JSON parse + tokens comparison +
//! schema + business rules + expected-field agreement, on the shipped suites' real
//! answers; and, separately, what counting a prompt costs with each local tokenizer
//! (done once per call, before it is sent).
//!
//! `cargo bench --bench checks` (release). Prints µs per output; the target is under
//! 50 µs so that checks never bottleneck a run.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use conform_check::check::rules::RulesCheck;
use conform_check::check::schema::SchemaCheck;
use conform_check::check::tokens::{PromptTokens, TokensCheck};
use conform_check::check::tool_calls::ToolCallsCheck;
use conform_check::check::{CallFacts, Check, Checks, Subject, all_passed};
use conform_config::Answer;
use conform_config::{Case, Prompt, ProviderConfig, Suite};
use conform_wire::provider::ToolCall;
use conform_wire::provider::{Finish, FinishKind, Reply, Usage};
use conform_wire::sim::tools::ToolAnswer;
use conform_wire::tokenize::huggingface::HuggingFace;
use conform_wire::tokenize::tiktoken::Tiktoken;
use conform_wire::tokenize::{self, Tokenizer};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `f` for about `budget`, returns the mean time per call.
fn time_per_call(budget: Duration, mut f: impl FnMut()) -> Duration {
    for _ in 0..50 {
        f();
    }
    let started = Instant::now();
    let mut n = 0u32;
    while started.elapsed() < budget {
        for _ in 0..100 {
            f();
        }
        n += 100;
    }
    started.elapsed() / n
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

struct Loaded {
    suite: Suite,
    checks: Checks,
    cases: Vec<(Case, Prompt, String)>,
}

fn load(name: &str) -> Loaded {
    let suite = Suite::load(&root().join("fixtures").join(name)).expect("shipped suite");
    let checks = Checks::for_suite(&suite).expect("shipped checks compile");
    let cases = suite
        .cases
        .iter()
        .map(|c| {
            let case = c.load().expect("case");
            let prompt = suite.render(&case, &c.path()).expect("renders");
            let answer = case.expected.clone().expect("expected").to_string();
            (case, prompt, answer)
        })
        .collect();
    Loaded {
        suite,
        checks,
        cases,
    }
}

fn main() {
    let provider = ProviderConfig::load(Path::new(&root().join("providers/openai.toml")))
        .expect("providers/openai.toml");
    let o200k = Tiktoken::shared("o200k_base").expect("o200k_base");
    let smollm2 = HuggingFace::shared(&root().join("tokenizers/smollm2")).expect("smollm2");
    let budget = Duration::from_millis(1500);
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!(
        "Checks per output (transport + json + tokens + schema + rules + agree), {build} build:"
    );
    for name in ["invoice-extraction", "ticket-triage", "smollm2-smoke"] {
        let loaded = load(name);
        let prepared: Vec<(Case, Reply, PromptTokens)> = loaded
            .cases
            .iter()
            .map(|(case, prompt, answer)| {
                let counted = o200k
                    .count_messages(&tokenize::messages(prompt))
                    .unwrap_or(0);
                let reply = Reply {
                    text: answer.clone(),
                    tool_calls: Vec::new(),
                    finish: Finish::new(FinishKind::Stop, Some("stop")),
                    refusal: None,
                    usage: Usage {
                        prompt_tokens: Some(counted),
                        output_tokens: Some(100),
                    },
                    served_model: Some("gpt-4o-mini-2024-07-18".into()),
                    system_fingerprint: None,
                };
                let tokens = PromptTokens {
                    tokenizer: o200k.describe().to_string(),
                    counted: Ok(counted),
                    exact: true,
                    control: tokenize::control_tokens_in(&case.vars, o200k.control_tokens()),
                };
                (case.clone(), reply, tokens)
            })
            .collect();
        let evaluate = |(case, reply, tokens): &(Case, Reply, PromptTokens)| {
            let facts = CallFacts {
                now: 1_800_000_000,
                tokens: Some(tokens),
            };
            loaded
                .checks
                .evaluate(&loaded.suite, case, &provider, Ok(reply), facts)
                .outcomes
        };
        // Every output must pass, or the benchmark would time the short way out.
        for prepared in &prepared {
            let outcomes = evaluate(prepared);
            assert!(all_passed(&outcomes), "{}: {outcomes:?}", prepared.0.id);
        }
        let mut i = 0;
        let per_output = time_per_call(budget, || {
            black_box(evaluate(&prepared[i % prepared.len()]));
            i += 1;
        });
        // Where the time goes: each check alone, on the same outputs.
        let parsed: Vec<serde_json::Value> = prepared
            .iter()
            .map(|(_, r, _)| serde_json::from_str(&r.text).expect("JSON"))
            .collect();
        let schema = SchemaCheck::compile(&loaded.suite).expect("schema");
        let rules = RulesCheck::compile(&loaded.suite).expect("rules");
        let mut parts = Vec::new();
        for (label, check) in [
            ("schema", &schema as &dyn Check),
            ("rules", &rules as &dyn Check),
            ("tokens", &TokensCheck as &dyn Check),
        ] {
            let mut i = 0;
            let t = time_per_call(budget / 3, || {
                let k = i % prepared.len();
                i += 1;
                let (case, reply, tokens) = &prepared[k];
                let subject = Subject {
                    suite: &loaded.suite,
                    case,
                    provider: &provider,
                    reply,
                    output: Some(&parsed[k]),
                    now: 1_800_000_000,
                    tokens: Some(tokens),
                };
                black_box(check.check(&subject));
            });
            parts.push(format!("{label} {:.1}", micros(t)));
        }
        let mut i = 0;
        let parse = time_per_call(budget / 3, || {
            i += 1;
            black_box(serde_json::from_str::<serde_json::Value>(
                &prepared[i % prepared.len()].1.text,
            ))
            .ok();
        });
        parts.push(format!("json parse {:.1}", micros(parse)));
        let mean_bytes =
            prepared.iter().map(|(_, r, _)| r.text.len()).sum::<usize>() / prepared.len();
        println!(
            "  {name:<20} {:>7.1} µs per output  ({} rules, {} cases, answers of {mean_bytes} bytes on average)",
            micros(per_output),
            loaded.suite.rules.len(),
            prepared.len()
        );
        println!("  {:<20} of which µs: {}", "", parts.join(", "));
    }

    tool_calls(&provider, &o200k, budget);

    println!("Counting one prompt before the call (system + user message):");
    for name in ["invoice-extraction", "ticket-triage", "smollm2-smoke"] {
        let loaded = load(name);
        let prompts: Vec<&Prompt> = loaded.cases.iter().map(|(_, p, _)| p).collect();
        let chars = prompts
            .iter()
            .map(|p| p.user.len() + p.system.as_ref().map_or(0, String::len))
            .sum::<usize>()
            / prompts.len();
        let mut i = 0;
        let tiktoken = time_per_call(budget, || {
            i += 1;
            black_box(o200k.count_messages(&tokenize::messages(prompts[i % prompts.len()]))).ok();
        });
        let mut i = 0;
        let hf = time_per_call(budget, || {
            i += 1;
            black_box(smollm2.count_messages(&tokenize::messages(prompts[i % prompts.len()]))).ok();
        });
        println!(
            "  {name:<20} tiktoken o200k_base {:>7.1} µs, huggingface SmolLM2 (template + encode) {:>7.1} µs  (prompts of {chars} bytes on average)",
            micros(tiktoken),
            micros(hf)
        );
    }
}

/// Checks on outputs with tool calls: the support-agent suite's faithful answers (its
/// expected calls with schema-valid arguments, its texts, its JSON handoff notes), every
/// one passing: transport, tokens, the tool-calls check (declared name, arguments parsed
/// and validated, no call written as text, the expectation matched, the finish reason,
/// the tool rules) and, for JSON answers, json, schema, rules and agree.
fn tool_calls(provider: &ProviderConfig, o200k: &Tiktoken, budget: Duration) {
    let suite = Suite::load(&root().join("fixtures/support-agent")).expect("support-agent");
    let checks = Checks::for_suite(&suite).expect("checks compile");
    let mut prepared = Vec::new();
    for case_ref in &suite.cases {
        let case = case_ref.load().expect("case");
        let rendered = suite.request(&case, &case_ref.path()).expect("renders");
        let conversation = rendered.conversation.expect("a request");
        let answer = ToolAnswer::of(&case, &conversation.tools);
        let calls: Vec<ToolCall> = answer
            .calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                ToolCall::from_value(Some(format!("call_{i}")), c.name.clone(), &c.arguments)
            })
            .collect();
        let text = match case.answer() {
            Answer::Json => case.expected.clone().expect("expected").to_string(),
            Answer::Text => "Happy to help: your order is on its way.".to_string(),
            Answer::ToolCalls(_) => String::new(),
        };
        let counted = o200k
            .count_conversation(&conversation)
            .map(|c| c.tokens)
            .unwrap_or(0);
        let finish = if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        let reply = Reply {
            text: Reply::text_or_first_arguments(text, &calls),
            tool_calls: calls,
            finish: Finish::new(FinishKind::Stop, Some(finish)),
            refusal: None,
            usage: Usage {
                prompt_tokens: Some(counted),
                output_tokens: Some(40),
            },
            served_model: Some("gpt-4o-mini-2024-07-18".into()),
            system_fingerprint: None,
        };
        let tokens = PromptTokens {
            tokenizer: o200k.describe().to_string(),
            counted: Ok(counted),
            exact: false,
            control: tokenize::control_tokens_in(&case.vars, o200k.control_tokens()),
        };
        prepared.push((case, reply, tokens));
    }
    let facts = |tokens| CallFacts {
        now: 1_800_000_000,
        tokens: Some(tokens),
    };
    for (case, reply, tokens) in &prepared {
        let outcomes = checks
            .evaluate(&suite, case, provider, Ok(reply), facts(tokens))
            .outcomes;
        assert!(all_passed(&outcomes), "{}: {outcomes:?}", case.id);
    }
    println!("Checks per output with tool calls (support-agent, six tools, tool rules):");
    let with_calls: Vec<usize> = (0..prepared.len())
        .filter(|&i| !prepared[i].1.tool_calls.is_empty())
        .collect();
    let parallel: Vec<usize> = (0..prepared.len())
        .filter(|&i| prepared[i].1.tool_calls.len() > 1)
        .collect();
    let tool_check = ToolCallsCheck::compile(&suite).expect("tool check");
    for (label, set) in [
        ("outputs with calls", &with_calls),
        ("parallel calls", &parallel),
        ("every output", &(0..prepared.len()).collect::<Vec<_>>()),
    ] {
        let mut i = 0;
        let whole = time_per_call(budget, || {
            let (case, reply, tokens) = &prepared[set[i % set.len()]];
            i += 1;
            black_box(checks.evaluate(&suite, case, provider, Ok(reply), facts(tokens)));
        });
        let mut i = 0;
        let tool = time_per_call(budget / 3, || {
            let (case, reply, tokens) = &prepared[set[i % set.len()]];
            i += 1;
            let subject = Subject {
                suite: &suite,
                case,
                provider,
                reply,
                output: None,
                now: 1_800_000_000,
                tokens: Some(tokens),
            };
            black_box(tool_check.check(&subject));
        });
        println!(
            "  {label:<20} {:>7.1} µs per output  (of which the tool-calls check {:.1}; {} outputs)",
            micros(whole),
            micros(tool),
            set.len()
        );
    }
}

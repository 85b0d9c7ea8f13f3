//! `conform run` on the shipped Azure OpenAI, Bedrock and Vertex AI provider files,
//! against mocks that check each request's credentials as the services do (Azure's key,
//! a SigV4 signature, a token issued for a verified service-account JWT) and answer the
//! shipped suite faithfully: every fallback is granted, and no key, secret, token or
//! private key reaches a report, the allowlist, a log or the terminal.

use crate::clouds;
use crate::common;

use std::sync::Arc;

use clouds::{
    AWS, Gate, TokenEndpoint, aws_signature, azure_key, google_token, service_account_file,
};
use common::*;
use serde_json::{Value, json};
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer, Respond, ResponseTemplate};

const KEY: &str = "azure-key-0123456789abcdef";

/// What the expected answer is for the request whose user text `user` picks out.
fn expected(book: &conform_wire::sim::AnswerBook, user: Option<&str>) -> Value {
    user.and_then(|u| book.answer(u))
        .cloned()
        .unwrap_or(Value::Null)
}

fn request_body(request: &wiremock::Request) -> Value {
    serde_json::from_slice(&request.body).unwrap()
}

/// Converse, answering with a forced tool's input.
fn converse(book: Arc<conform_wire::sim::AnswerBook>) -> clouds::Answer {
    Arc::new(move |request| {
        let body = request_body(request);
        let user = body
            .pointer("/messages/0/content/0/text")
            .and_then(Value::as_str);
        let name = body
            .pointer("/toolConfig/toolChoice/tool/name")
            .cloned()
            .unwrap_or(json!("answer"));
        ResponseTemplate::new(200).set_body_json(json!({
            "output": {"message": {"role": "assistant", "content": [
                {"toolUse": {"toolUseId": "tooluse_1", "name": name, "input": expected(&book, user)}}]}},
            "stopReason": "tool_use", "usage": {"inputTokens": 40, "outputTokens": 30, "totalTokens": 70},
            "metrics": {"latencyMs": 5}}))
    })
}

/// Gemini on Vertex, answering in text.
fn gemini(book: Arc<conform_wire::sim::AnswerBook>) -> clouds::Answer {
    Arc::new(move |request| {
        let body = request_body(request);
        let user = body
            .pointer("/contents/0/parts/0/text")
            .and_then(Value::as_str);
        ResponseTemplate::new(200).set_body_json(json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": expected(&book, user).to_string()}]},
                "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 30, "totalTokenCount": 70},
            "modelVersion": "gemini-2.0-flash-001"}))
    })
}

/// Claude on Vertex, answering with a forced tool's input.
fn claude(book: Arc<conform_wire::sim::AnswerBook>) -> clouds::Answer {
    Arc::new(move |request| {
        let body = request_body(request);
        let user = body.pointer("/messages/0/content").and_then(Value::as_str);
        let name = body
            .pointer("/tool_choice/name")
            .cloned()
            .unwrap_or(json!("answer"));
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg_vrtx_1", "type": "message", "role": "assistant", "model": "claude-3-5-haiku-20241022",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": name, "input": expected(&book, user)}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 40, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 30}}))
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_faithful_fallback_on_each_cloud_is_granted_by_a_real_run_and_no_secret_is_kept() {
    let names = [
        "azure-openai",
        "bedrock-claude",
        "vertex-gemini",
        "vertex-claude",
    ];
    let project = Project::new(&names);
    let book = answer_book(project.root());
    let Clouds {
        server,
        gates,
        tokens,
    } = Clouds::start(book).await;
    for name in names {
        project.point(name, &server.uri());
    }
    let key_file = service_account_file(project.root(), &format!("{}/token", server.uri()));

    let out = project
        .cmd()
        .env("AZURE_OPENAI_API_KEY", KEY)
        .env("AWS_ACCESS_KEY_ID", AWS.access_key_id)
        .env("AWS_SECRET_ACCESS_KEY", AWS.secret_access_key)
        .env("AWS_SESSION_TOKEN", AWS.session_token.unwrap())
        .env_remove("AWS_BEARER_TOKEN_BEDROCK")
        .env("GOOGLE_APPLICATION_CREDENTIALS", &key_file)
        .args(["-vv", "run"])
        .args(names)
        .args(["--suite", "ticket-triage", "--no-progress"])
        .output()
        .unwrap();
    let printed = output_text(&out);
    assert_eq!(out.status.code(), Some(0), "{printed}");

    let cases = std::fs::read_dir(project.path("fixtures/ticket-triage/cases"))
        .unwrap()
        .count();
    for (name, gate) in names.iter().zip(&gates) {
        assert_eq!(
            (gate.passed(), gate.refused()),
            (cases, 0),
            "{name}: every request authenticated, none refused"
        );
    }
    // One token per provider's endpoint, for all of its calls.
    assert_eq!(tokens.exchanges(), 2);
    assert!(tokens.refused.lock().unwrap().is_empty());

    let allowlist = project.allowlist();
    let granted: Vec<&str> = (allowlist["entries"].as_array().unwrap().iter())
        .filter(|e| e["suite"] == "ticket-triage")
        .map(|e| e["provider"].as_str().unwrap())
        .collect();
    for name in names {
        assert!(
            granted.contains(&name),
            "{name} not granted: {granted:?}\n{printed}"
        );
    }

    exports_name_each_cloud_as_the_gateways_do(&project);

    no_secret_is_kept(&project, &printed, &tokens, &key_file);
}

#[tokio::test(flavor = "multi_thread")]
async fn cloud_credentials_that_are_not_set_are_named_before_anything_is_sent() {
    let project = Project::new(&["bedrock-claude", "vertex-gemini"]);
    let server = MockServer::start().await;
    for name in ["bedrock-claude", "vertex-gemini"] {
        project.point(name, &server.uri());
    }
    let out = project
        .cmd()
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_BEARER_TOKEN_BEDROCK")
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
        .args([
            "run",
            "bedrock-claude",
            "vertex-gemini",
            "--suite",
            "ticket-triage",
            "--no-progress",
        ])
        .output()
        .unwrap();
    let printed = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{printed}");
    assert!(
        printed.contains(
            "export AWS_BEARER_TOKEN_BEDROCK, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        ),
        "{printed}"
    );
    assert!(
        printed.contains("export GOOGLE_APPLICATION_CREDENTIALS"),
        "{printed}"
    );
    assert!(server.received_requests().await.unwrap().is_empty());
}

#[test]
fn conform_check_names_a_missing_region_project_or_deployment_at_its_line_and_column() {
    let project = Project::new(&[]);
    project.write("providers/aws.toml", "# Claude on Bedrock\nkind = \"bedrock\"\nmodel = \"anthropic.claude-3-5-haiku-20241022-v1:0\"\n");
    project.write(
        "providers/gcp.toml",
        "kind = \"vertex\"\nmodel = \"gemini-2.0-flash-001\"\nregion = \"us-central1\"\n",
    );
    project.write(
        "providers/az.toml",
        "model = \"gpt-4o-mini\"\n  kind = \"azure-openai\"\nbase_url = \"https://r.openai.azure.com\"\napi_key_env = \"AZ\"\nregion = \"eastus\"\n",
    );
    let out = project.cmd().arg("check").output().unwrap();
    let printed = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{printed}");
    for line in [
        "providers/aws.toml:2:1: region: kind `bedrock` needs `region`: add e.g. region = \"us-east-1\"",
        "providers/gcp.toml:1:1: project: kind `vertex` needs `project`",
        "providers/az.toml:2:3: deployment: kind `azure-openai` needs `deployment`",
        "providers/az.toml:5:1: region: kind `azure-openai` takes no `region`",
    ] {
        assert!(printed.contains(line), "missing `{line}` in:\n{printed}");
    }
}

#[test]
fn init_scaffolds_a_cloud_fallback_from_its_shipped_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = assert_cmd::Command::cargo_bin("conform")
        .unwrap()
        .current_dir(dir.path())
        .env_remove("CONFORM_ROOT")
        .args([
            "init",
            "--provider",
            "openai",
            "--fallback",
            "bedrock",
            "--fallback",
            "vertex",
            "--fallback",
            "azure-openai:https://contoso.openai.azure.com",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let read =
        |name: &str| std::fs::read_to_string(dir.path().join("providers").join(name)).unwrap();
    let azure = read("azure-openai.toml");
    assert!(
        azure.contains("base_url = \"https://contoso.openai.azure.com\""),
        "{azure}"
    );
    // A cloud's resource has no default address, but always its key.
    assert!(
        azure.contains("\napi_key_env = \"AZURE_OPENAI_API_KEY\""),
        "{azure}"
    );
    assert!(read("bedrock.toml").contains("region = \"us-east-1\""));
    assert!(read("vertex.toml").contains("project = \"my-project\""));
    for name in ["azure-openai", "bedrock", "vertex"] {
        let file = dir.path().join("providers").join(format!("{name}.toml"));
        conform_config::ProviderConfig::load(&file).unwrap_or_else(|d| panic!("{name}: {d}"));
    }
    // Without its resource, Azure's fallback cannot be scaffolded.
    let empty = tempfile::tempdir().unwrap();
    let out = assert_cmd::Command::cargo_bin("conform")
        .unwrap()
        .current_dir(empty.path())
        .args(["init", "--fallback", "azure-openai"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(output_text(&out).contains("azure-openai:https://RESOURCE.openai.azure.com"));
}

/// `conform export` on the granted clouds: LiteLLM's model_list entries and Portkey's
/// targets pin the deployment, region and project the evidence was made with.
fn exports_name_each_cloud_as_the_gateways_do(project: &Project) {
    let out = project
        .cmd()
        .args([
            "export",
            "litellm",
            "--primary",
            "azure-openai",
            "--suite",
            "ticket-triage",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let yaml: Value = serde_norway::from_slice(&out.stdout).unwrap();
    assert_eq!(
        yaml["router_settings"]["fallbacks"],
        json!([{"azure-openai": ["bedrock-claude", "vertex-claude", "vertex-gemini"]}])
    );
    let models: Vec<&Value> = yaml["model_list"].as_array().unwrap().iter().collect();
    let params = |name: &str| {
        models
            .iter()
            .find(|m| m["model_name"] == name)
            .map(|m| m["litellm_params"].clone())
            .unwrap_or_else(|| panic!("no {name} in {models:?}"))
    };
    let azure = params("azure-openai");
    assert_eq!(azure["model"], "azure/gpt-4o-mini-prod");
    assert_eq!(azure["api_version"], "2024-10-21");
    assert_eq!(azure["api_key"], "os.environ/AZURE_OPENAI_API_KEY");
    assert_eq!(
        params("bedrock-claude"),
        json!({"model": "bedrock/converse/anthropic.claude-3-5-haiku-20241022-v1:0", "aws_region_name": "us-east-1"})
    );
    assert_eq!(
        params("vertex-gemini"),
        json!({"model": "vertex_ai/gemini-2.0-flash-001", "vertex_project": "my-project", "vertex_location": "us-central1"})
    );
    assert_eq!(
        params("vertex-claude")["model"],
        "vertex_ai/claude-3-5-haiku@20241022"
    );

    let out = project
        .cmd()
        .args([
            "export",
            "portkey",
            "--primary",
            "azure-openai",
            "--suite",
            "ticket-triage",
            "--name",
            "bedrock-claude=@aws-prod",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let config: Value = serde_json::from_slice(&out.stdout).unwrap();
    let targets = config["targets"].as_array().unwrap();
    assert_eq!(targets[0]["provider"], "azure-openai");
    assert_eq!(targets[0]["deployment_id"], "gpt-4o-mini-prod");
    assert_eq!(targets[0]["api_version"], "2024-10-21");
    assert_eq!(
        targets[1],
        json!({"provider": "@aws-prod", "aws_region": "us-east-1",
        "override_params": {"model": "anthropic.claude-3-5-haiku-20241022-v1:0"}})
    );
    assert!(
        targets
            .iter()
            .any(|t| t["provider"] == "vertex-ai" && t["vertex_project_id"] == "my-project")
    );
}

/// The four clouds on one mock server, each behind its service's check, and the token
/// endpoint Vertex's tokens come from.
struct Clouds {
    server: MockServer,
    /// Azure, Bedrock, Gemini on Vertex, Claude on Vertex.
    gates: [Gate; 4],
    tokens: TokenEndpoint,
}

impl Clouds {
    async fn start(book: Arc<conform_wire::sim::AnswerBook>) -> Clouds {
        let server = MockServer::start().await;

        let chat = OpenAiMock {
            book: Arc::clone(&book),
            mode: Mode::Faithful,
        };
        let azure = Gate::new(azure_key(KEY, false), Arc::new(move |r| chat.respond(r)));
        Mock::given(method("POST"))
            .and(path(
                "/openai/deployments/gpt-4o-mini-prod/chat/completions",
            ))
            .respond_with(azure.clone())
            .mount(&server)
            .await;
        let bedrock = Gate::new(aws_signature(AWS), converse(Arc::clone(&book)));
        Mock::given(method("POST"))
            .and(path_regex(
                "^/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse$",
            ))
            .respond_with(bedrock.clone())
            .mount(&server)
            .await;
        let tokens = TokenEndpoint::new(3600);
        *tokens.uri.lock().unwrap() = format!("{}/token", server.uri());
        Mock::given(method("POST"))
            .and(path("/token"))
            .respond_with(tokens.clone())
            .mount(&server)
            .await;
        let vertex_gemini = Gate::new(google_token(&tokens), gemini(Arc::clone(&book)));
        Mock::given(method("POST"))
        .and(path("/v1/projects/my-project/locations/us-central1/publishers/google/models/gemini-2.0-flash-001:generateContent"))
        .respond_with(vertex_gemini.clone())
        .mount(&server)
        .await;
        let vertex_claude = Gate::new(google_token(&tokens), claude(Arc::clone(&book)));
        Mock::given(method("POST"))
        .and(path("/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-3-5-haiku@20241022:rawPredict"))
        .respond_with(vertex_claude.clone())
        .mount(&server)
        .await;
        Clouds {
            server,
            gates: [azure, bedrock, vertex_gemini, vertex_claude],
            tokens,
        }
    }
}

/// No key, secret, session token, access token or private key in any file the run left
/// (but the key file itself) or in what it printed.
fn no_secret_is_kept(
    project: &Project,
    printed: &str,
    tokens: &TokenEndpoint,
    key_file: &std::path::Path,
) {
    let issued: Vec<String> = tokens
        .issued
        .lock()
        .unwrap()
        .iter()
        .map(|(t, _)| t.clone())
        .collect();
    let private_key = clouds::service_account_private_key();
    let key_line = private_key.lines().nth(1).unwrap().to_string();
    let mut secrets = vec![
        KEY.to_string(),
        AWS.secret_access_key.to_string(),
        AWS.session_token.unwrap().to_string(),
        key_line,
    ];
    secrets.extend(issued);
    for (file, text) in project.all_text() {
        if file == key_file {
            continue;
        }
        for secret in &secrets {
            assert!(
                !text.contains(secret.as_str()),
                "a secret reached {}",
                file.display()
            );
        }
    }
    for secret in &secrets {
        assert!(!printed.contains(secret.as_str()), "a secret was printed");
    }
}

//! `conform check` lists, with the JSON path, the schema features a provider's
//! structured-output mode rejects, and exits 2 before any token is spent.

use std::fs;
use std::path::Path;

use assert_cmd::Command;

fn write(root: &Path, file: &str, text: &str) {
    let path = root.join(file);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// A workspace with one suite (an optional `note`, objects closed with
/// `additionalProperties: false`) and the given provider files.
fn workspace(providers: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "fixtures/orders/suite.toml",
        "user = \"Extract: {{ text }}\"\n",
    );
    write(
        root,
        "fixtures/orders/schema.json",
        r#"{
  "type": "object",
  "properties": {
    "item": {"type": "string"},
    "lines": {"type": "array", "items": {
      "type": "object",
      "properties": {"sku": {"type": "string"}},
      "required": ["sku"],
      "additionalProperties": false
    }},
    "note": {"type": "string"}
  },
  "required": ["item", "lines"],
  "additionalProperties": false
}"#,
    );
    write(
        root,
        "fixtures/orders/cases/001.json",
        r#"{"vars": {"text": "2 green tea"}, "expected": {"item": "green tea", "lines": []}}"#,
    );
    for (name, text) in providers {
        write(root, &format!("providers/{name}.toml"), text);
    }
    dir
}

fn check(dir: &tempfile::TempDir) -> (i32, String) {
    let out = Command::cargo_bin("conform")
        .unwrap()
        .arg("--root")
        .arg(dir.path())
        .arg("check")
        .env_remove("CONFORM_ROOT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), stderr)
}

#[test]
fn gemini_response_schema_and_openai_strict_problems_are_named_with_their_paths() {
    let dir = workspace(&[
        (
            "gemini",
            "kind = \"gemini\"\nmodel = \"gemini-2.5-flash\"\napi_key_env = \"GEMINI_API_KEY\"\n[gemini]\nschema_field = \"responseSchema\"\n",
        ),
        (
            "openai",
            "kind = \"openai\"\nmodel = \"gpt-4o-mini\"\napi_key_env = \"OPENAI_API_KEY\"\n",
        ),
    ]);
    let (code, stderr) = check(&dir);
    assert_eq!(code, 2, "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    let has = |path: &str, provider: &str, words: &str| {
        lines.iter().any(|l| {
            l.contains("schema.json")
                && l.contains(&format!(": {path}: "))
                && l.contains(&format!("provider `{provider}`"))
                && l.contains(words)
        })
    };
    // Gemini responseSchema: every `additionalProperties`, at the root and nested.
    assert!(
        has("/additionalProperties", "gemini", "responseSchema"),
        "{stderr}"
    );
    assert!(
        has(
            "/properties/lines/items/additionalProperties",
            "gemini",
            "rejects `additionalProperties`"
        ),
        "{stderr}"
    );
    // OpenAI strict: the optional property.
    assert!(
        has("/properties/note", "openai", "every property in `required`"),
        "{stderr}"
    );
    // Closed objects with every property required are fine for OpenAI.
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("provider `openai`") && l.contains("/lines/")),
        "{stderr}"
    );
    assert!(stderr.contains("3 problems found"), "{stderr}");
}

#[test]
fn a_portable_setup_passes_and_unenforced_keywords_only_warn() {
    let dir = workspace(&[
        (
            "gemini",
            "kind = \"gemini\"\nmodel = \"gemini-2.5-flash\"\napi_key_env = \"GEMINI_API_KEY\"\n",
        ),
        (
            "anthropic",
            "kind = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\napi_key_env = \"ANTHROPIC_API_KEY\"\nstructured_output = \"tool\"\n",
        ),
    ]);
    let (code, stderr) = check(&dir);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("problem"), "{stderr}");
}

#[test]
fn anthropic_output_config_bounds_are_problems() {
    let dir = workspace(&[(
        "anthropic",
        "kind = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\napi_key_env = \"ANTHROPIC_API_KEY\"\n",
    )]);
    let schema = dir.path().join("fixtures/orders/schema.json");
    let text = fs::read_to_string(&schema).unwrap().replace(
        "{\"type\": \"string\"},\n    \"lines\"",
        "{\"type\": \"string\", \"maxLength\": 40},\n    \"lines\"",
    );
    fs::write(&schema, text).unwrap();
    let (code, stderr) = check(&dir);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(": /properties/item/maxLength: provider `anthropic`"),
        "{stderr}"
    );
}

#[test]
fn the_shipped_workspace_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::cargo_bin("conform")
        .unwrap()
        .arg("--root")
        .arg(root)
        .arg("check")
        .env_remove("CONFORM_ROOT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[test]
fn openai_responses_answer_schemas_are_held_to_strict_mode() {
    let dir = workspace(&[(
        "responses",
        "kind = \"openai-responses\"\nmodel = \"gpt-4.1-mini\"\napi_key_env = \"OPENAI_API_KEY\"\n",
    )]);
    let (code, stderr) = check(&dir);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.lines().any(|l| l.contains(": /properties/note: ")
            && l.contains("provider `responses`")
            && l.contains("every property in `required`")),
        "{stderr}"
    );
}

//! `conform tape to-reference`: the primary's answers on a `conform run --record` tape
//! become the `reference` blocks of a suite's cases, so later runs judge candidates
//! against them with no live call to the primary.
//!
//! Each case's request is encoded for the tape's provider exactly as the runner encodes
//! it, and every 2xx exchange recorded for that request digest becomes one recorded
//! answer (a retried failure is no answer). A case file is rewritten only when the tape
//! holds an answer for it, by a temporary file and a rename: a reader sees the old case
//! or the new, never half.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use conform_config::{Diagnostics, ProviderConfig, RecordedAnswer, RecordedCall, Reference, Suite};
use conform_wire::provider::tape::{self, TapeError};
use conform_wire::provider::{CallSpec, wire_format};

/// Why a tape could not be turned into references.
#[derive(Debug, thiserror::Error)]
pub enum ToReferenceError {
    #[error(transparent)]
    Tape(#[from] TapeError),
    #[error("{0}")]
    Case(Diagnostics),
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
}

/// What the conversion did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Converted {
    /// Cases that now carry a reference.
    pub cases: usize,
    /// Recorded answers written, over all cases.
    pub answers: usize,
    /// Cases the tape holds no answer for (left as they were).
    pub missing: Vec<String>,
}

/// Writes a `reference` into every case of `suite` that `tape` (one provider's
/// `<provider>.jsonl`) answered, as `provider` would have been asked.
pub fn tape_to_reference(
    tape: &Path,
    suite: &Suite,
    provider: &ProviderConfig,
) -> Result<Converted, ToReferenceError> {
    let recorded_at = std::fs::metadata(tape)
        .and_then(|m| m.modified())
        .map(OffsetDateTime::from)
        .unwrap_or_else(|_| OffsetDateTime::now_utc());
    let mut bodies: HashMap<String, Vec<String>> = HashMap::new();
    tape::read(tape, |exchange| {
        if (200..300).contains(&exchange.status) {
            bodies
                .entry(exchange.request_digest)
                .or_default()
                .push(exchange.body);
        }
    })?;

    let wire = wire_format(provider.wire_kind());
    let schema_name = super::schema_name(&suite.name);
    let mut out = Converted::default();
    for case_ref in &suite.cases {
        let path = case_ref.path();
        let case = case_ref
            .load()
            .map_err(|d| ToReferenceError::Case(Diagnostics(vec![d])))?;
        let rendered = suite
            .request(&case, &path)
            .map_err(ToReferenceError::Case)?;
        let call = CallSpec {
            prompt: &rendered.prompt,
            schema: &suite.schema,
            schema_name: &schema_name,
            conversation: rendered.conversation.as_ref(),
        };
        let digest =
            conform_config::digest::canonical_json(&wire.encode(&call, provider, None).body);
        let replies: Vec<_> = bodies
            .get(&digest)
            .into_iter()
            .flatten()
            .filter_map(|body| {
                let bytes = body.as_bytes();
                match provider.stream {
                    true => wire.decode_stream(bytes).ok(),
                    false => wire.decode(bytes).ok(),
                }
            })
            .collect();
        if replies.is_empty() {
            out.missing.push(case.id.clone());
            continue;
        }
        let reference = Reference {
            provider: Some(provider.name.clone()),
            model: provider.model.clone(),
            served_model: replies.iter().find_map(|r| r.served_model.clone()),
            recorded_at: recorded_at
                .replace_nanosecond(0)
                .unwrap_or(recorded_at)
                .format(&Rfc3339)
                .unwrap_or_default(),
            source: Some(tape.display().to_string()),
            answers: replies
                .iter()
                .map(|r| RecordedAnswer {
                    text: r.content().to_string(),
                    tool_calls: r
                        .tool_calls
                        .iter()
                        .map(|c| RecordedCall {
                            name: c.name.clone(),
                            arguments: c
                                .arguments
                                .clone()
                                .unwrap_or_else(|| Value::String(c.raw_arguments.clone())),
                        })
                        .collect(),
                })
                .collect(),
        };
        out.answers += reference.answers.len();
        write_reference(&path, reference)?;
        out.cases += 1;
    }
    Ok(out)
}

/// Sets the case file's `reference`, keeping everything else as it was (key order
/// included), through a temporary file and a rename.
fn write_reference(path: &Path, reference: Reference) -> Result<(), ToReferenceError> {
    let fail = |source| ToReferenceError::Write {
        path: path.to_path_buf(),
        source,
    };
    let text = std::fs::read_to_string(path).map_err(fail)?;
    let mut case: Value = serde_json::from_str(&text).map_err(|e| fail(io::Error::other(e)))?;
    let Some(map) = case.as_object_mut() else {
        return Err(fail(io::Error::other("the case is not a JSON object")));
    };
    map.insert(
        "reference".into(),
        serde_json::to_value(reference).map_err(|e| fail(io::Error::other(e)))?,
    );
    let mut body = serde_json::to_string_pretty(&case).map_err(|e| fail(io::Error::other(e)))?;
    body.push('\n');
    let tmp = path.with_extension("json.tmp");
    let written = File::create(&tmp).and_then(|mut f| {
        f.write_all(body.as_bytes())?;
        f.sync_all()
    });
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(())
}

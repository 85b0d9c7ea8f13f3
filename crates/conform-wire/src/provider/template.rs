//! A prompt's request, encoded once for each shape of call and filled in for every call.
//!
//! Two calls of one suite to one provider, each a rendered prompt (not a conversation),
//! ask for the same thing in different words: the model, the limits, the schema and the
//! headers are the provider's and the suite's, and only the system and user texts are the
//! case's. Building each call's body as a `serde_json::Value` (the schema copied into
//! it), serialising it, digesting its canonical form and dropping it cost a sixth of a
//! call's CPU. A [`Template`] is the wire format's own request for a call whose texts are
//! markers, serialised and canonicalised once and cut at the markers; filling it writes a
//! call's texts, escaped as serde_json escapes them, where the markers were, in the bytes
//! sent and in the canonical form digested alike.
//!
//! The wire formats stay the only place a request is shaped: a template is what one of
//! them wrote. It is trusted only where that cannot depend on the texts themselves:
//!
//! - each marker must appear exactly once, as a whole JSON string, in both forms;
//! - a shape's first call is also encoded in full, and a template that does not give the
//!   same bytes and the same digest is never used: that shape is encoded in full;
//! - a property test holds every wire format's filled template to its full encoding.

use std::sync::Mutex;

use reqwest::header::HeaderMap;
use serde_json::Value;

use super::encoded::Encoded;
use super::{CallSpec, WireRequest};
use conform_config::Prompt;

/// Stand-ins for a call's texts while its template is made. A control character keeps
/// them from meeting anything a suite or a provider file writes.
const SYSTEM_MARK: &str = "\u{1}conform:system\u{1}";
const USER_MARK: &str = "\u{1}conform:user\u{1}";

/// Shapes kept per endpoint: a run has a few (suites × with or without a system prompt);
/// beyond these, calls are encoded in full.
const MAX_SHAPES: usize = 16;

/// An endpoint's templates, one per shape of call it has met.
#[derive(Default)]
pub(crate) struct Templates {
    shapes: Mutex<Vec<Shape>>,
}

impl Templates {
    /// `call`'s request: filled into its shape's template when it has one, else `full`,
    /// which is what the template must equal. `wire` is the wire format's encoding, from
    /// which a template is made; `full` is `wire` serialised and digested.
    pub(crate) fn encode(
        &self,
        call: &CallSpec<'_>,
        wire: impl Fn(&CallSpec<'_>) -> WireRequest,
        full: impl Fn(WireRequest) -> Encoded,
    ) -> Encoded {
        let Some(texts) = Texts::of(call) else {
            return full(wire(call));
        };
        let mut shapes = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(shape) = shapes.iter().find(|s| s.fits(call, &texts)) {
            return match &shape.template {
                Some(template) => template.fill(&texts),
                None => full(wire(call)),
            };
        }
        let request = wire(call);
        let url = request.url.clone();
        let encoded = full(request);
        if shapes.len() < MAX_SHAPES {
            let template = Template::make(call, &texts, &url, &encoded, &wire, &full);
            if template.is_none() {
                tracing::debug!(
                    schema = call.schema_name,
                    "a request template disagreed with its wire format: encoding in full"
                );
            }
            shapes.push(Shape {
                has_system: texts.system.is_some(),
                schema_name: call.schema_name.to_string(),
                schema: call.schema.clone(),
                template,
            });
        }
        encoded
    }
}

/// What a template is good for: everything of a call but its texts.
struct Shape {
    has_system: bool,
    schema_name: String,
    schema: Value,
    /// `None`: encoded in full.
    template: Option<Template>,
}

impl Shape {
    fn fits(&self, call: &CallSpec<'_>, texts: &Texts<'_>) -> bool {
        self.has_system == texts.system.is_some()
            && self.schema_name == call.schema_name
            && self.schema == *call.schema
    }
}

/// The texts of a call that has a template: a rendered prompt, not a conversation.
struct Texts<'a> {
    system: Option<&'a str>,
    user: &'a str,
}

impl<'a> Texts<'a> {
    fn of(call: &CallSpec<'a>) -> Option<Texts<'a>> {
        call.conversation.is_none().then(|| Texts {
            system: call.prompt.system.as_deref(),
            user: &call.prompt.user,
        })
    }

    fn get(&self, slot: Slot) -> &'a str {
        match slot {
            Slot::System => self.system.unwrap_or_default(),
            Slot::User => self.user,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    System,
    User,
}

/// One shape's request with its texts left out.
struct Template {
    url: Result<reqwest::Url, super::encoded::BadUrl>,
    headers: HeaderMap,
    /// The body as sent.
    wire: Cut,
    /// The body's canonical form (RFC 8785), which is digested.
    canonical: Cut,
}

impl Template {
    /// The template of `call`'s shape, or `None` when the wire format's request cannot be
    /// cut at its texts, or the cut does not give back `encoded`, the call's own request.
    fn make(
        call: &CallSpec<'_>,
        texts: &Texts<'_>,
        url: &str,
        encoded: &Encoded,
        wire: &impl Fn(&CallSpec<'_>) -> WireRequest,
        full: &impl Fn(WireRequest) -> Encoded,
    ) -> Option<Template> {
        let prompt = Prompt {
            system: texts.system.map(|_| SYSTEM_MARK.to_string()),
            user: USER_MARK.to_string(),
        };
        let marked = wire(&CallSpec {
            prompt: &prompt,
            ..*call
        });
        if marked.url != url {
            return None;
        }
        let body = marked.body.clone();
        let marked = full(marked);
        if marked.headers != encoded.headers {
            return None;
        }
        let mut canonical = Vec::new();
        conform_config::digest::write_canonical(&body, &mut canonical).ok()?;
        let mut marks = vec![(Slot::User, quoted(USER_MARK))];
        if texts.system.is_some() {
            marks.push((Slot::System, quoted(SYSTEM_MARK)));
        }
        let template = Template {
            url: encoded.url.clone(),
            headers: marked.headers,
            wire: Cut::at(&marked.bytes, &marks)?,
            canonical: Cut::at(&canonical, &marks)?,
        };
        // The call's own texts, and empty ones: a wire format that left out an empty
        // text, or shaped a request by its texts' length, would disagree on one of them.
        let empty = Prompt {
            system: texts.system.map(|_| String::new()),
            user: String::new(),
        };
        let agrees = |texts: &Texts<'_>, encoded: &Encoded| {
            let filled = template.fill(texts);
            filled.bytes == encoded.bytes && filled.digest == encoded.digest
        };
        let empty_call = CallSpec {
            prompt: &empty,
            ..*call
        };
        let agreed = agrees(texts, encoded)
            && Texts::of(&empty_call).is_some_and(|t| agrees(&t, &full(wire(&empty_call))));
        agreed.then_some(template)
    }

    fn fill(&self, texts: &Texts<'_>) -> Encoded {
        Encoded {
            url: self.url.clone(),
            headers: self.headers.clone(),
            bytes: self.wire.fill(texts),
            digest: conform_config::digest::bytes_hex(&self.canonical.fill(texts)),
        }
    }
}

fn quoted(text: &str) -> Vec<u8> {
    // A string always serialises.
    serde_json::to_vec(text).unwrap_or_default()
}

/// Bytes cut where the texts go: `pieces[0]`, a text, `pieces[1]`, … the last piece.
struct Cut {
    pieces: Vec<Vec<u8>>,
    slots: Vec<Slot>,
    len: usize,
}

impl Cut {
    /// `bytes` cut at each of `marks`, each of which must occur exactly once.
    fn at(bytes: &[u8], marks: &[(Slot, Vec<u8>)]) -> Option<Cut> {
        let mut found = Vec::with_capacity(marks.len());
        for (slot, mark) in marks {
            let mut at = find_all(bytes, mark);
            let (Some(start), None) = (at.next(), at.next()) else {
                return None;
            };
            found.push((start, start + mark.len(), *slot));
        }
        found.sort_unstable_by_key(|&(start, ..)| start);
        let mut pieces = Vec::with_capacity(found.len() + 1);
        let mut from = 0;
        for &(start, end, _) in &found {
            pieces.push(bytes[from..start].to_vec());
            from = end;
        }
        pieces.push(bytes[from..].to_vec());
        Some(Cut {
            len: pieces.iter().map(Vec::len).sum(),
            pieces,
            slots: found.into_iter().map(|(.., slot)| slot).collect(),
        })
    }

    fn fill(&self, texts: &Texts<'_>) -> Vec<u8> {
        let room: usize = self.slots.iter().map(|&s| texts.get(s).len() + 2).sum();
        let mut out = Vec::with_capacity(self.len + room + room / 8);
        for (piece, &slot) in self.pieces.iter().zip(&self.slots) {
            out.extend_from_slice(piece);
            // serde_json's escapes are the ones RFC 8785 asks, so one writer serves both
            // forms; a write to a Vec cannot fail.
            let _ = serde_json::to_writer(&mut out, texts.get(slot));
        }
        if let Some(last) = self.pieces.last() {
            out.extend_from_slice(last);
        }
        out
    }
}

/// The start of every occurrence of `needle` in `haystack`, overlapping ones included.
fn find_all<'a>(haystack: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    haystack
        .windows(needle.len())
        .enumerate()
        .filter(move |(_, w)| *w == needle)
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::wire_format;
    use conform_config::ProviderConfig;
    use proptest::prelude::*;
    use serde_json::json;
    use std::path::Path;

    /// Every wire format with every way of asking for JSON it accepts, streamed or not (a
    /// simulation speaks one of these).
    fn configs() -> Vec<ProviderConfig> {
        let kinds = [
            "openai",
            "openai-responses",
            "openai-compatible",
            "anthropic",
            "gemini",
            "ollama",
        ];
        let modes = ["json_schema", "json_object", "tool", "prompt"];
        let mut configs = Vec::new();
        for kind in kinds {
            for mode in modes {
                for stream in [false, true] {
                    for extra in ["", "[gemini]\nschema_field = \"responseSchema\"\n"] {
                        if !extra.is_empty() && kind != "gemini" {
                            continue;
                        }
                        let source = format!(
                            "kind = \"{kind}\"\nmodel = \"m-1\"\nbase_url = \"http://127.0.0.1:9/x\"\n\
                             structured_output = \"{mode}\"\nstream = {stream}\nseed = 7\n{extra}"
                        );
                        match ProviderConfig::parse(Path::new("providers/p.toml"), &source) {
                            Ok(config) => configs.push(config),
                            // The two ways of asking for JSON a vendor does not have.
                            Err(_)
                                if matches!(
                                    (kind, mode),
                                    ("anthropic", "json_object") | ("ollama", "tool")
                                ) => {}
                            Err(e) => panic!("{source}: {e}"),
                        }
                    }
                }
            }
        }
        configs
    }

    fn schema() -> Value {
        json!({"type": "object", "additionalProperties": false, "required": ["label"],
               "properties": {"label": {"type": "string", "enum": ["ok", "spam \u{1}"]}}})
    }

    /// What the template gives for `prompts` in turn, and what encoding each in full gives.
    fn both(
        config: &ProviderConfig,
        prompts: &[Prompt],
        schema: &Value,
    ) -> Vec<(Encoded, Encoded)> {
        let format = wire_format(config.wire_kind());
        let key = conform_config::secret::Secret::new("sk-test".into());
        let wire = |call: &CallSpec<'_>| format.encode(call, config, Some(&key));
        let full = |request: WireRequest| {
            let url =
                reqwest::Url::parse(&request.url).map_err(|_| crate::provider::encoded::BadUrl);
            Encoded::of(request, url)
        };
        let templates = Templates::default();
        let pairs = prompts
            .iter()
            .map(|prompt| {
                let call = CallSpec {
                    prompt,
                    schema,
                    schema_name: "labels",
                    conversation: None,
                };
                (templates.encode(&call, wire, full), full(wire(&call)))
            })
            .collect();
        // Else the calls were all encoded in full, and agree for nothing.
        let shapes = templates.shapes.lock().unwrap();
        assert!(
            shapes.iter().all(|s| s.template.is_some()),
            "{:?} {:?}: a shape without a template",
            config.kind,
            config.structured_output
        );
        pairs
    }

    fn same(a: &Encoded, b: &Encoded) -> Result<(), TestCaseError> {
        prop_assert_eq!(
            String::from_utf8_lossy(&a.bytes),
            String::from_utf8_lossy(&b.bytes)
        );
        prop_assert_eq!(&a.digest, &b.digest);
        prop_assert_eq!(&a.headers, &b.headers);
        prop_assert_eq!(&a.url, &b.url);
        Ok(())
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just(SYSTEM_MARK.to_string()),
            Just(USER_MARK.to_string()),
            "[\\x00-\\x1f\"\\\\/a-z ]{0,12}",
            any::<String>(),
        ]
    }

    fn prompt() -> impl Strategy<Value = Prompt> {
        (proptest::option::of(text()), text()).prop_map(|(system, user)| Prompt { system, user })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn a_filled_template_is_the_wire_formats_own_request(
            prompts in proptest::collection::vec(prompt(), 1..6)
        ) {
            let configs = configs();
            prop_assert_eq!(configs.len(), 52);
            for config in &configs {
                for (templated, full) in both(config, &prompts, &schema()) {
                    same(&templated, &full)?;
                }
            }
        }
    }

    #[test]
    fn each_shape_is_its_own_template() {
        let config = &configs()[0];
        assert_eq!(config.wire_kind().as_str(), "openai");
        let with = |system: Option<&str>| Prompt {
            system: system.map(str::to_string),
            user: "u".into(),
        };
        let other = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let format = wire_format(config.wire_kind());
        let wire = |call: &CallSpec<'_>| format.encode(call, config, None);
        let full =
            |request: WireRequest| Encoded::of(request, Err(crate::provider::encoded::BadUrl));
        let templates = Templates::default();
        let calls = [
            (with(Some("s")), schema()),
            (with(None), schema()),
            (with(Some("t")), other.clone()),
            (with(None), schema()),
            (with(Some("r")), other),
        ];
        for (prompt, schema) in &calls {
            let call = CallSpec {
                prompt,
                schema,
                schema_name: "labels",
                conversation: None,
            };
            let got = templates.encode(&call, wire, full);
            assert_eq!(got.bytes, full(wire(&call)).bytes);
        }
        let shapes = templates.shapes.lock().unwrap();
        assert_eq!(shapes.len(), 3);
        assert!(shapes.iter().all(|s| s.template.is_some()));
    }

    /// A wire format whose request depends on the texts themselves cannot be templated:
    /// the first call's check finds out, and every call is encoded in full.
    #[test]
    fn a_template_that_disagrees_is_never_used() {
        let config = &configs()[0];
        let format = wire_format(config.wire_kind());
        let wire = |call: &CallSpec<'_>| {
            let mut request = format.encode(call, config, None);
            if call.prompt.user.len() > 3 {
                request.body["long"] = json!(true);
            }
            request
        };
        let full =
            |request: WireRequest| Encoded::of(request, Err(crate::provider::encoded::BadUrl));
        let templates = Templates::default();
        let schema = schema();
        for user in ["a", "a long one", "b"] {
            let prompt = Prompt {
                system: None,
                user: user.into(),
            };
            let call = CallSpec {
                prompt: &prompt,
                schema: &schema,
                schema_name: "labels",
                conversation: None,
            };
            let (got, want) = (templates.encode(&call, wire, full), full(wire(&call)));
            assert_eq!(
                String::from_utf8_lossy(&got.bytes),
                String::from_utf8_lossy(&want.bytes)
            );
        }
        assert!(templates.shapes.lock().unwrap()[0].template.is_none());
    }
}

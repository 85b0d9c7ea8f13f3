//! promptfoo test files: `promptfooconfig.yaml` (its `prompts`, `defaultTest` and
//! `tests`, inline or in a `file://` YAML or CSV beside it) or a tests CSV alone.
//!
//! `vars` become the cases' variables and the first prompt the suite's templates (a chat
//! prompt, a JSON array of messages, gives the system and the user template);
//! `is-json` and `contains-json` assertions make the case's answer JSON and their schema
//! (`value`) `schema.json`. Everything else (other assertions, providers, options,
//! transforms, `file://` values) cannot be carried over, and each is listed with its
//! test's place (`tests[3]`, or `tests.csv:5`) in the output and in `IMPORT_NOTES.md`.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::driver::{self, Read, Record, Source, Suite};
use super::{ImportError, Importer, Options, Summary, file_name};

/// One test as promptfoo would run it, before conversion.
struct Test {
    /// `tests[3]` or `tests.csv:5`.
    place: String,
    description: Option<String>,
    vars: Map<String, Value>,
    /// `(type, value)` of each assertion.
    asserts: Vec<(String, Option<Value>)>,
    /// Other keys of the test, not carried over.
    other: Vec<String>,
}

/// Imports a promptfoo configuration's tests as a suite.
pub fn import(input: &Path, opts: &Options) -> Result<Summary, ImportError> {
    let config = Config {
        input,
        base: input.parent().unwrap_or(Path::new(".")).to_path_buf(),
        name: file_name(input),
        prompt: None,
        schemas: Vec::new(),
        json_tests: 0,
    };
    driver::drive(config, opts)
}

/// The system and user templates of a prompt.
type Prompt = (Option<String>, String);

struct Config<'a> {
    input: &'a Path,
    /// The folder `file://` references are relative to.
    base: PathBuf,
    name: String,
    prompt: Option<Prompt>,
    /// The distinct schemas of the `is-json` / `contains-json` assertions, with their
    /// digests.
    schemas: Vec<(Value, [u8; 32])>,
    /// The tests whose answer is JSON.
    json_tests: u64,
}

impl Source for Config<'_> {
    fn main(&self) -> &Path {
        self.input
    }

    fn read(&mut self, importer: &mut Importer<'_>) -> Result<(), ImportError> {
        let is_csv = self
            .input
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        let (default, tests) = if is_csv {
            (None, csv_tests(self.input)?)
        } else {
            self.config(importer)?
        };
        let default = match default {
            Some(d) => Some(yaml_test(&d, format!("{}: defaultTest", self.name))?),
            None => None,
        };
        let mut contains_json = false;
        for (order, test) in tests.into_iter().enumerate() {
            let read = self.test(order, test, default.as_ref(), &mut contains_json, importer);
            importer.offer(read)?;
        }
        if contains_json {
            importer.note(&self.name, "contains-json: conform holds the whole answer to be JSON (prose or fences around it fail), which is stricter");
        }
        Ok(())
    }

    fn suite(&mut self, importer: &mut Importer<'_>) -> Result<Suite, ImportError> {
        let name = &self.name;
        let mut suite = Suite::described(
            format!("# Imported by `conform import promptfoo` from {name}.\n"),
            format!("Tests imported from the promptfoo file {name}"),
        );
        let opts = importer.opts();
        let mut suite_redactor = opts.redaction.case();
        match self.prompt.take() {
            Some((system, user)) => {
                if let Some(mut s) = system {
                    if let Some(r) = suite_redactor.text(&s) {
                        s = r;
                    }
                    suite.table.insert("system".into(), toml::Value::String(s));
                }
                let user = suite_redactor.text(&user).unwrap_or(user);
                suite.table.insert("user".into(), toml::Value::String(user));
            }
            None => {
                // A CSV alone has no prompt: one that shows every variable, to be edited.
                let vars = importer_vars_hint(self.input)?;
                importer.note(name, "no prompt in a tests CSV: suite.toml's `user` template lists the variables; write the real prompt there");
                suite.table.insert("user".into(), toml::Value::String(vars));
            }
        }
        importer.redacted(suite_redactor.replaced);
        suite.schema = Some(self.schema(importer));
        Ok(suite)
    }
}

impl Config<'_> {
    /// The prompt (kept), `defaultTest` and the tests of a `promptfooconfig.yaml`.
    fn config(
        &mut self,
        importer: &mut Importer<'_>,
    ) -> Result<(Option<Value>, Vec<Test>), ImportError> {
        let (input, base, name) = (self.input, &self.base, &self.name);
        let config = read_yaml(input)?;
        for key in config
            .as_object()
            .map(|m| m.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            if !matches!(
                key.as_str(),
                "description" | "prompts" | "tests" | "defaultTest"
            ) {
                importer.note(&format!("{name}: {key}"), "not carried over (providers are conform's provider files; the rest has no counterpart)");
            }
        }
        self.prompt = prompts(&config, base, name, importer)?;
        let default = config.get("defaultTest").cloned();
        let tests = match config.get("tests") {
            None => Vec::new(),
            Some(Value::String(s)) => tests_from_file(s, base, name, importer)?,
            Some(Value::Array(items)) => {
                let mut out = Vec::new();
                for (i, t) in items.iter().enumerate() {
                    match t {
                        Value::String(s) => out.extend(tests_from_file(s, base, name, importer)?),
                        other => out.push(yaml_test(other, format!("{name}: tests[{i}]"))?),
                    }
                }
                out
            }
            Some(_) => {
                return Err(ImportError::Format {
                    path: input.to_path_buf(),
                    message: "tests: must be a list of tests or a file:// path".into(),
                });
            }
        };
        Ok((default, tests))
    }

    /// The case of test number `order`, on top of `default`.
    fn test<'o>(
        &mut self,
        order: usize,
        test: Test,
        default: Option<&Test>,
        contains_json: &mut bool,
        importer: &mut Importer<'o>,
    ) -> Read<'o> {
        let mut vars = default.map(|d| d.vars.clone()).unwrap_or_default();
        vars.extend(test.vars);
        for key in &test.other {
            importer.note(&test.place, &format!("`{key}` not carried over"));
        }
        let asserts = default
            .iter()
            .flat_map(|d| d.asserts.iter())
            .chain(test.asserts.iter());
        let mut json_answer = false;
        for (kind, value) in asserts {
            if matches!(kind.as_str(), "is-json" | "contains-json") {
                json_answer = true;
                *contains_json |= kind == "contains-json";
                self.json_assertion(kind, value.as_ref(), &test.place, importer);
            } else {
                importer.note(&test.place, &format!("assertion `{kind}` not carried over"));
            }
        }
        if json_answer {
            self.json_tests += 1;
        }
        for (k, v) in &vars {
            if v.as_str().is_some_and(|s| s.starts_with("file://")) {
                importer.note(
                    &test.place,
                    &format!("vars.{k}: a file:// value is kept as its path, not the file's text"),
                );
            }
            if v.is_array() {
                importer.note(&test.place, &format!("vars.{k}: promptfoo runs each value of a list; the case keeps the list as one value"));
            }
        }
        let mut case = Map::new();
        case.insert(
            "description".into(),
            Value::String(
                test.description
                    .unwrap_or_else(|| format!("Imported from {}", test.place)),
            ),
        );
        case.insert("vars".into(), Value::Object(vars));
        if !json_answer {
            case.insert("expect".into(), json!({"tool_calls": "none"}));
        }
        Read::Request(Box::new(Record {
            order: order as u64,
            id: format!("{:06}", order + 1),
            case: Value::Object(case),
            schema: None,
            dropped: Vec::new(),
            redactor: importer.opts().redaction.case(),
        }))
    }

    /// Keeps the schema an `is-json` or `contains-json` assertion's `value` gives.
    fn json_assertion(
        &mut self,
        kind: &str,
        value: Option<&Value>,
        place: &str,
        importer: &mut Importer<'_>,
    ) {
        let schemas = &mut self.schemas;
        match value {
            None => {}
            Some(Value::String(s)) if s.starts_with("file://") => {
                match read_schema_file(&self.base, s) {
                    Ok(schema) => push_schema(schemas, schema),
                    Err(why) => importer.note(place, &format!("{kind}: {why}")),
                }
            }
            Some(Value::String(s)) => match serde_norway::from_str::<Value>(s) {
                Ok(schema @ Value::Object(_)) => push_schema(schemas, schema),
                _ => importer.note(place, &format!("{kind}: its value is not a JSON Schema")),
            },
            Some(schema @ Value::Object(_)) => push_schema(schemas, schema.clone()),
            Some(_) => importer.note(place, &format!("{kind}: its value is not a JSON Schema")),
        }
    }

    /// `schema.json` from the assertions' schemas, and what it is in words.
    fn schema(&mut self, importer: &mut Importer<'_>) -> (Value, String) {
        let json_tests = self.json_tests;
        match self.schemas.len() {
            0 if json_tests > 0 => (
                json!({}),
                "is-json without a schema: schema.json accepts any JSON".to_string(),
            ),
            0 => (
                json!({}),
                "no is-json or contains-json assertion: the answers are text".to_string(),
            ),
            1 => {
                let mut s = self.schemas.remove(0).0;
                let mut r = importer.opts().redaction.case();
                r.value(&mut s);
                (
                    s,
                    format!(
                        "the schema of the is-json / contains-json assertions ({json_tests} tests)"
                    ),
                )
            }
            n => {
                let said = format!(
                    "the assertions give {n} different schemas: schema.json accepts any JSON; split the tests into one suite per schema to keep them"
                );
                importer.note(&self.name, &said);
                (json!({}), said)
            }
        }
    }
}

fn push_schema(schemas: &mut Vec<(Value, [u8; 32])>, schema: Value) {
    let d = conform_config::digest::canonical_raw(&schema);
    if !schemas.iter().any(|(_, x)| *x == d) {
        schemas.push((schema, d));
    }
}

/// The header of a tests CSV as a template that shows every variable.
fn importer_vars_hint(input: &Path) -> Result<String, ImportError> {
    let text = read(input)?;
    let rows = parse_csv(&text).map_err(|(line, message)| ImportError::Malformed {
        path: input.to_path_buf(),
        line,
        field: "(csv)".into(),
        message,
    })?;
    let header = rows.first().map(|(_, r)| r.clone()).unwrap_or_default();
    Ok(header
        .iter()
        .filter(|h| !h.starts_with("__"))
        .map(|h| format!("{h}: {{{{ {h} }}}}"))
        .collect::<Vec<_>>()
        .join("\n"))
}

fn read(path: &Path) -> Result<String, ImportError> {
    std::fs::read_to_string(path).map_err(|source| ImportError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn read_yaml(path: &Path) -> Result<Value, ImportError> {
    let text = read(path)?;
    serde_norway::from_str::<Value>(&text).map_err(|e| match e.location() {
        Some(at) => ImportError::Malformed {
            path: path.to_path_buf(),
            line: at.line(),
            field: "(yaml)".into(),
            message: super::chat::plain(&e),
        },
        None => ImportError::Format {
            path: path.to_path_buf(),
            message: super::chat::plain(&e),
        },
    })
}

fn file_ref(base: &Path, reference: &str) -> PathBuf {
    base.join(reference.trim_start_matches("file://"))
}

/// Why an assertion's `file://` schema was not kept (a note, not an error).
#[derive(Debug, thiserror::Error)]
enum SchemaFileError {
    #[error("cannot read {reference}: {source}")]
    Read {
        reference: String,
        source: std::io::Error,
    },
    #[error("{reference}: {source}")]
    Parse {
        reference: String,
        source: serde_norway::Error,
    },
}

fn read_schema_file(base: &Path, reference: &str) -> Result<Value, SchemaFileError> {
    let path = file_ref(base, reference);
    let text = std::fs::read_to_string(&path).map_err(|source| SchemaFileError::Read {
        reference: reference.to_string(),
        source,
    })?;
    serde_norway::from_str::<Value>(&text).map_err(|source| SchemaFileError::Parse {
        reference: reference.to_string(),
        source,
    })
}

/// The suite's templates from `prompts`: the first prompt (the others are noted).
fn prompts(
    config: &Value,
    base: &Path,
    name: &str,
    importer: &mut Importer<'_>,
) -> Result<Option<(Option<String>, String)>, ImportError> {
    let list = match config.get("prompts") {
        None => return Ok(None),
        Some(Value::Array(items)) => items.clone(),
        Some(one) => vec![one.clone()],
    };
    for (i, _) in list.iter().enumerate().skip(1) {
        importer.note(
            &format!("{name}: prompts[{i}]"),
            "a suite has one prompt: only the first is carried over (import again for another)",
        );
    }
    let Some(first) = list.first() else {
        return Ok(None);
    };
    let text = match first {
        Value::String(s) => s.clone(),
        Value::Object(o) => match o.get("raw").or_else(|| o.get("id")).and_then(Value::as_str) {
            Some(s) => s.to_string(),
            None => {
                importer.note(
                    &format!("{name}: prompts[0]"),
                    "not a prompt conform can read: write the template in suite.toml",
                );
                return Ok(None);
            }
        },
        _ => return Ok(None),
    };
    let text = if let Some(reference) = text.strip_prefix("file://") {
        let path = base.join(reference);
        let is_code = [".js", ".ts", ".py", ".mjs", ".cjs"]
            .iter()
            .any(|x| reference.ends_with(x));
        if is_code || reference.contains(':') {
            importer.note(
                &format!("{name}: prompts[0]"),
                "a prompt function cannot be carried over: write its template in suite.toml",
            );
            return Ok(None);
        }
        match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                importer.note(
                    &format!("{name}: prompts[0]"),
                    &format!("cannot read {reference}: {e}"),
                );
                return Ok(None);
            }
        }
    } else {
        text
    };
    // A chat prompt: a JSON (or YAML) list of messages.
    if text.trim_start().starts_with('[')
        && let Ok(Value::Array(messages)) = serde_norway::from_str::<Value>(&text)
    {
        let mut system = None;
        let mut user = None;
        for (i, m) in messages.iter().enumerate() {
            let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
            let content = m.get("content").and_then(Value::as_str).map(String::from);
            match (role, content) {
                ("system", Some(c)) if system.is_none() => system = Some(c),
                ("user", Some(c)) if user.is_none() => user = Some(c),
                _ => importer.note(
                    &format!("{name}: prompts[0][{i}]"),
                    "only the first system and the first user message become templates",
                ),
            }
        }
        return Ok(user.map(|u| (system, u)));
    }
    Ok(Some((None, text)))
}

/// `tests: file://…`: a CSV or YAML file of tests beside the config.
fn tests_from_file(
    reference: &str,
    base: &Path,
    name: &str,
    importer: &mut Importer<'_>,
) -> Result<Vec<Test>, ImportError> {
    if !reference.starts_with("file://") || reference.contains('*') {
        importer.note(
            &format!("{name}: tests"),
            &format!("`{reference}` cannot be read (a file:// path to one CSV or YAML file is)"),
        );
        return Ok(Vec::new());
    }
    let path = file_ref(base, reference);
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
    {
        return csv_tests(&path);
    }
    let value = read_yaml(&path)?;
    let file = file_name(&path);
    match value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, t)| yaml_test(t, format!("{file}: [{i}]")))
            .collect(),
        _ => Err(ImportError::Format {
            path,
            message: "a tests file is a list of tests".into(),
        }),
    }
}

fn yaml_test(value: &Value, place: String) -> Result<Test, ImportError> {
    let Some(obj) = value.as_object() else {
        return Err(ImportError::Format {
            path: PathBuf::from(place),
            message: "a test must be a mapping (vars, assert, description)".into(),
        });
    };
    let mut test = Test {
        place,
        description: obj
            .get("description")
            .and_then(Value::as_str)
            .map(String::from),
        vars: Map::new(),
        asserts: Vec::new(),
        other: Vec::new(),
    };
    for (key, v) in obj {
        match key.as_str() {
            "description" => {}
            "vars" => match v {
                Value::Object(m) => test.vars = m.clone(),
                _ => test.other.push("vars (not a mapping)".into()),
            },
            "assert" => {
                for a in v.as_array().into_iter().flatten() {
                    let kind = a.get("type").and_then(Value::as_str).unwrap_or("(no type)");
                    test.asserts
                        .push((kind.to_string(), a.get("value").cloned()));
                }
            }
            other => test.other.push(other.to_string()),
        }
    }
    Ok(test)
}

/// A tests CSV: a header of variable names and `__expected`, `__description` …
fn csv_tests(path: &Path) -> Result<Vec<Test>, ImportError> {
    let text = read(path)?;
    let file = file_name(path);
    let rows = parse_csv(&text).map_err(|(line, message)| ImportError::Malformed {
        path: path.to_path_buf(),
        line,
        field: "(csv)".into(),
        message,
    })?;
    let mut rows = rows.into_iter();
    let Some((_, header)) = rows.next() else {
        return Ok(Vec::new());
    };
    let mut tests = Vec::new();
    for (line, row) in rows {
        if row.iter().all(|c| c.is_empty()) {
            continue;
        }
        if row.len() != header.len() {
            return Err(ImportError::Malformed {
                path: path.to_path_buf(),
                line,
                field: "(csv)".into(),
                message: format!("{} fields where the header has {}", row.len(), header.len()),
            });
        }
        let mut test = Test {
            place: format!("{file}:{line}"),
            description: None,
            vars: Map::new(),
            asserts: Vec::new(),
            other: Vec::new(),
        };
        for (column, cell) in header.iter().zip(row) {
            if column.starts_with("__expected") {
                if !cell.trim().is_empty() {
                    let (kind, value) = match cell.split_once(':') {
                        Some((k, v)) => (
                            k.trim().to_string(),
                            Some(Value::String(v.trim().to_string())),
                        ),
                        None => (cell.trim().to_string(), None),
                    };
                    test.asserts.push((kind, value));
                }
            } else if column == "__description" {
                test.description = Some(cell);
            } else if column.starts_with("__") {
                if !cell.is_empty() {
                    test.other.push(column.clone());
                }
            } else {
                test.vars.insert(column.clone(), Value::String(cell));
            }
        }
        tests.push(test);
    }
    Ok(tests)
}

/// RFC 4180 CSV: fields split by commas, quoted with `"` (a quote inside is `""`), new
/// lines allowed inside quotes. Each row with the line it starts on; an error names the
/// line.
#[allow(clippy::type_complexity)]
pub fn parse_csv(text: &str) -> Result<Vec<(usize, Vec<String>)>, (usize, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut rows = Vec::new();
    let mut row: Vec<String> = Vec::new();
    let mut field = String::new();
    let mut line = 1;
    let mut row_line = 1;
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => quoted = false,
                '\n' => {
                    line += 1;
                    field.push(c);
                }
                _ => field.push(c),
            }
            continue;
        }
        match c {
            '"' if field.is_empty() && !was_quoted => {
                quoted = true;
                was_quoted = true;
            }
            '"' => {
                return Err((
                    line,
                    "a quote inside an unquoted field (quote the field and write \"\" for a quote)"
                        .into(),
                ));
            }
            ',' => {
                row.push(std::mem::take(&mut field));
                was_quoted = false;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                row.push(std::mem::take(&mut field));
                was_quoted = false;
                rows.push((row_line, std::mem::take(&mut row)));
                line += 1;
                row_line = line;
            }
            _ if was_quoted => return Err((line, "text after a closing quote".into())),
            _ => field.push(c),
        }
    }
    if quoted {
        return Err((row_line, "a quoted field is never closed".into()));
    }
    if !field.is_empty() || !row.is_empty() || was_quoted {
        row.push(field);
        rows.push((row_line, row));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_new_lines_and_errors() {
        let rows = parse_csv("a,b\r\n\"x, \"\"y\"\"\",\"two\nlines\"\n3,4").unwrap();
        assert_eq!(rows[0], (1, vec!["a".to_string(), "b".to_string()]));
        assert_eq!(
            rows[1],
            (2, vec!["x, \"y\"".to_string(), "two\nlines".to_string()])
        );
        assert_eq!(rows[2], (4, vec!["3".to_string(), "4".to_string()]));
        assert_eq!(parse_csv("a\n\"open").unwrap_err().0, 2);
        assert_eq!(parse_csv("a\nb\"c").unwrap_err().0, 2);
    }
}

//! Business rules: jq expressions (jaq) over the output that must yield exactly `true`.
//!
//! The case's variables are bound as `$input`, the run's start time (unix seconds) as
//! `$now`. Rules compile once per suite; an undefined name or a syntax error is a
//! diagnostic naming the suite file, the rule and the position, with the span drawn
//! under the expression. At run time a rule that yields anything but `true` fails, and a
//! rule whose evaluation errors fails with the error: an error never passes.
//!
//! Filters whose answer depends on the machine rather than on the data (`now`, `env`,
//! local time) are not offered: a rule must give the same answer on every replay.

use jaq_core::load::{self, Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, compile, data};
use jaq_json::Val;
use serde_json::Value;

use super::{Check, Code, Finding, Outcome, Subject};
use conform_config::{Diagnostic, Diagnostics, Suite};

/// The check's name in outcomes and reports.
pub const NAME: &str = "rules";

/// Longest excerpt of a value shown in a finding.
const MAX_SHOWN: usize = 160;

/// Native filters a rule may not call, with what to use instead.
const FORBIDDEN: &[(&str, &str)] = &[
    (
        "now",
        "use $now, the run's start time: a rule must give the same answer on every replay",
    ),
    ("env", "rules see only the output, $input and $now"),
    (
        "localtime",
        "use gmtime: the machine's time zone is not part of the data",
    ),
    (
        "strflocaltime",
        "use strftime: the machine's time zone is not part of the data",
    ),
];

pub(crate) type Filter = jaq_core::Filter<data::JustLut<Val>>;

/// The variables an output rule sees.
const OUTPUT_VARS: &[&str] = &["$input", "$now"];

/// One compiled rule.
pub(crate) struct Rule {
    pub(crate) name: String,
    pub(crate) message: String,
    pub(crate) filter: Filter,
}

/// How a rule went on one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Holds,
    /// It yielded something other than exactly `true`: what, as text.
    Failed(String),
    /// Its evaluation errored.
    Error(String),
}

/// The suite's rules, compiled once.
pub struct RulesCheck {
    rules: Vec<Rule>,
}

impl RulesCheck {
    /// Compiles every rule, reporting every problem of every rule.
    pub fn compile(suite: &Suite) -> Result<RulesCheck, Diagnostics> {
        let mut rules = Vec::with_capacity(suite.rules.len());
        let mut problems = Diagnostics::default();
        for spec in &suite.rules {
            problems.extend(unreadable(
                suite,
                "rules",
                &spec.name,
                &spec.expr,
                &[&suite.schema],
            ));
            match compile_expr(&spec.expr) {
                Ok(filter) => rules.push(Rule {
                    name: spec.name.clone(),
                    message: spec.message.clone(),
                    filter,
                }),
                Err(errors) => {
                    let base = locate(&suite.source, &spec.name, &spec.expr);
                    for e in errors {
                        problems.push(diagnostic(suite, "rules", &spec.name, &spec.expr, base, &e));
                    }
                }
            }
        }
        if problems.is_empty() {
            Ok(RulesCheck { rules })
        } else {
            Err(problems)
        }
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// The suite has no rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// Every member `expr` reads from its input (`.`) that no value valid against any of
/// `schemas` can hold, as a problem at its name in `suite.toml` under `section.NAME`: a
/// rule reading `.totl` where the answer has `total` would fail every call, or behind
/// `//` and `?` pass every one. Nothing is checked against no schema.
pub(crate) fn unreadable(
    suite: &Suite,
    section: &str,
    name: &str,
    expr: &str,
    schemas: &[&Value],
) -> Diagnostics {
    let mut problems = Diagnostics::default();
    if schemas.is_empty() {
        return problems;
    }
    let base = locate(&suite.source, name, expr);
    let mut seen = Vec::new();
    for read in super::reads::reads(expr) {
        if seen.contains(&read.steps) {
            continue;
        }
        let reasons: Vec<String> = schemas
            .iter()
            .map(|schema| super::agree::reason(conform_config::reach::path(schema, &read.steps)))
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default();
        if let Some(why) = reasons.into_iter().next() {
            let path: String = read
                .steps
                .iter()
                .map(|s| match s {
                    conform_config::reach::Step::Key(k) => format!("/{k}"),
                    conform_config::reach::Step::Index(i) => format!("/{i}"),
                    conform_config::reach::Step::Any => "/*".into(),
                })
                .collect();
            let error = ExprError {
                span: read.span.clone(),
                message: format!(
                    "reads {path}, which no value valid against the schema holds ({why})"
                ),
            };
            problems.push(diagnostic(suite, section, name, expr, base, &error));
        }
        seen.push(read.steps);
    }
    problems
}

/// One compile problem: where in the expression (byte span) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    /// Where in the expression the problem is.
    pub span: std::ops::Range<usize>,
    /// What is wrong there.
    pub message: String,
}

/// Compiles one expression with `$input` and `$now` bound.
fn compile_expr(expr: &str) -> Result<Filter, Vec<ExprError>> {
    compile_with(expr, OUTPUT_VARS)
}

/// Compiles one expression with `globals` bound (in that order when evaluated), placing
/// every problem in `suite.toml` under `section.NAME`.
pub(crate) fn compile_rule(
    suite: &Suite,
    section: &str,
    name: &str,
    expr: &str,
    globals: &[&str],
) -> Result<Filter, Diagnostics> {
    compile_with(expr, globals).map_err(|errors| {
        let base = locate(&suite.source, name, expr);
        Diagnostics(
            errors
                .iter()
                .map(|e| diagnostic(suite, section, name, expr, base, e))
                .collect(),
        )
    })
}

/// Compiles one expression with `globals` bound.
fn compile_with(expr: &str, globals: &[&str]) -> Result<Filter, Vec<ExprError>> {
    let arena = Arena::default();
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let loader = Loader::new(defs);
    let modules = loader
        .load(
            &arena,
            File {
                code: expr,
                path: (),
            },
        )
        .map_err(|errs| {
            errs.into_iter()
                .flat_map(|(_, e)| load_errors(expr, e))
                .collect::<Vec<_>>()
        })?;
    let funs = jaq_core::funs()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs())
        .filter(|(name, _, _)| !FORBIDDEN.iter().any(|(f, _)| f == name));
    Compiler::default()
        .with_funs(funs)
        .with_global_vars(globals.iter().copied())
        .compile(modules)
        .map_err(|errs| {
            errs.into_iter()
                .flat_map(|(_, es)| es)
                .map(|(name, undefined)| undefined_error(expr, name, &undefined))
                .collect()
        })
}

/// A compiled jq filter, for the folders above this one (`import`'s `--redact-path`).
pub type JqFilter = Filter;

/// Why a jq path expression does not compile: each problem with its byte in the user's
/// expression, on one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", one_line(.0))]
pub struct PathError(pub Vec<(String, usize)>);

fn one_line(problems: &[(String, usize)]) -> String {
    let each: Vec<String> = (problems.iter())
        .map(|(message, at)| format!("{message} (at byte {at})"))
        .collect();
    each.join("; ")
}

/// Compiles `[path(EXPR)]`: every path a jq path expression reaches in a value. The
/// error is one line naming what is wrong and where in `expr`.
pub fn compile_path(expr: &str) -> Result<JqFilter, PathError> {
    let wrapped = format!("[path({expr})]");
    // The user's expression starts 6 bytes into the wrapped one.
    compile_with(&wrapped, &[]).map_err(|errors| {
        PathError(
            errors
                .iter()
                .map(|e| {
                    let at = e.span.start.saturating_sub(6).min(expr.len());
                    (e.message.clone(), at)
                })
                .collect(),
        )
    })
}

/// The paths (arrays of keys and indices) that a filter from [`compile_path`] yields on
/// `value`; none when it errors (a path into a value of another shape).
pub fn paths_of(filter: &JqFilter, value: &Value) -> Vec<Vec<Value>> {
    let ctx = Ctx::<data::JustLut<Val>>::new(&filter.lut, Vars::new([]));
    let Some(Ok(found)) = filter.id.run((ctx, to_val(value))).next() else {
        return Vec::new();
    };
    match serde_json::from_str::<Value>(&found.to_string()) {
        Ok(Value::Array(paths)) => paths
            .into_iter()
            .filter_map(|p| match p {
                Value::Array(steps) => Some(steps),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn load_errors(expr: &str, error: load::Error<&str>) -> Vec<ExprError> {
    match error {
        load::Error::Io(errs) => errs
            .into_iter()
            .map(|(at, why)| ExprError {
                span: span_of(expr, at),
                message: format!("cannot load a module: {why}"),
            })
            .collect(),
        load::Error::Lex(errs) => errs
            .into_iter()
            .map(|(expect, at)| ExprError {
                span: span_of(expr, at),
                message: format!("syntax error: expected {}", lex_expect(&expect)),
            })
            .collect(),
        load::Error::Parse(errs) => errs
            .into_iter()
            .map(|(expect, found)| {
                let what = if found.is_empty() {
                    "the end of the expression".to_string()
                } else {
                    format!("`{found}`")
                };
                ExprError {
                    span: span_of(expr, found),
                    message: format!("syntax error: expected {}, found {what}", expect.as_str()),
                }
            })
            .collect(),
    }
}

fn lex_expect(expect: &load::lex::Expect<&str>) -> &'static str {
    use load::lex::Expect;
    // `as_str` panics on an unknown delimiter; name them all here instead.
    match expect {
        Expect::Delim("(") => "a closing parenthesis",
        Expect::Delim("[") => "a closing bracket",
        Expect::Delim("{") => "a closing brace",
        Expect::Delim(_) => "a closing quote or delimiter",
        Expect::Digit => "a digit",
        Expect::Ident => "an identifier",
        Expect::Escape => "a string escape sequence",
        Expect::Unicode => "a 4-digit hexadecimal code point",
        _ => "a token",
    }
}

fn undefined_error(expr: &str, name: &str, undefined: &compile::Undefined) -> ExprError {
    let message = match undefined {
        compile::Undefined::Var => format!(
            "undefined variable `{name}`: rules see `$input` (the case's variables) and `$now` (the run's start time, unix seconds); tool rules also `$call`"
        ),
        compile::Undefined::Filter(arity) => match FORBIDDEN.iter().find(|(f, _)| *f == name) {
            Some((_, instead)) => format!("`{name}` is not available in rules: {instead}"),
            None => format!("undefined function `{name}/{arity}`"),
        },
        other => format!("undefined {} `{name}`", other.as_str()),
    };
    ExprError {
        span: span_of(expr, name),
        message,
    }
}

/// The byte span of `part` inside `whole`, when `part` is a slice of it.
fn span_of(whole: &str, part: &str) -> std::ops::Range<usize> {
    let (w, p) = (whole.as_ptr() as usize, part.as_ptr() as usize);
    if p >= w && p + part.len() <= w + whole.len() {
        load::span(whole, part)
    } else {
        whole.len()..whole.len()
    }
}

/// Where the expression starts in `suite.toml` (byte offset), and whether its text
/// appears there verbatim (a literal string), so positions inside it map exactly.
fn locate(source: &str, rule: &str, expr: &str) -> (Option<usize>, bool) {
    let name_at = [format!("\"{rule}\""), format!("'{rule}'")]
        .iter()
        .filter_map(|n| source.find(n.as_str()))
        .min();
    let from = name_at.unwrap_or(0);
    let after = source.get(from..).unwrap_or_default();
    if let Some(i) = after.find(expr).filter(|_| !expr.is_empty()) {
        // Prefer the occurrence after the rule's name; a rule may also come before it.
        return (Some(from + i), true);
    }
    if let Some(i) = source.find(expr).filter(|_| !expr.is_empty()) {
        return (Some(i), true);
    }
    (name_at, false)
}

fn diagnostic(
    suite: &Suite,
    section: &str,
    rule: &str,
    expr: &str,
    (base, exact): (Option<usize>, bool),
    error: &ExprError,
) -> Diagnostic {
    let d = Diagnostic::new(
        &suite.file,
        format!("{}\n{}", error.message, render_span(expr, &error.span)),
    )
    .field(format!("{section}.{rule}"));
    match base {
        Some(at) if exact => d.at_span(
            &suite.source,
            Some(at + error.span.start..at + error.span.end),
        ),
        Some(at) => d.at_span(&suite.source, Some(at..at)),
        None => d,
    }
}

/// The expression's line holding the span, with carets under the span:
///
/// ```text
///     .currency == $inptu.currency
///                  ^^^^^^
/// ```
pub fn render_span(expr: &str, span: &std::ops::Range<usize>) -> String {
    let start = span.start.min(expr.len());
    let line_start = expr[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = expr[start..].find('\n').map_or(expr.len(), |i| start + i);
    let line = &expr[line_start..line_end];
    let pad = expr[line_start..start].chars().count();
    let end = span.end.clamp(start, line_end);
    let width = expr[start..end].chars().count().max(1);
    format!("    {line}\n    {}{}", " ".repeat(pad), "^".repeat(width))
}

impl Check for RulesCheck {
    fn name(&self) -> &'static str {
        NAME
    }

    fn check(&self, subject: &Subject<'_>) -> Outcome {
        let Some(output) = subject.output else {
            return Outcome::skip(NAME);
        };
        let output_val = to_val(output);
        let input_val = to_val_map(&subject.case.vars);
        let now = Val::from(subject.now as isize);
        let mut findings = Vec::new();
        for rule in &self.rules {
            if let Some(finding) = rule.evaluate(&output_val, &input_val, &now, output) {
                findings.push(finding);
            }
        }
        Outcome::from_findings(NAME, findings)
    }
}

impl Rule {
    /// How the rule goes on `input` (jq's `.`) with `vars` bound in the order the rule
    /// was compiled with.
    pub(crate) fn judge(&self, input: &Val, vars: impl IntoIterator<Item = Val>) -> Verdict {
        let ctx = Ctx::<data::JustLut<Val>>::new(&self.filter.lut, Vars::new(vars));
        // Two values are enough to tell "exactly one `true`" from anything else, and
        // bound the work of a rule that would yield forever.
        let results: Vec<_> = self
            .filter
            .id
            .run((ctx, input.clone()))
            .take(2)
            .map(|r| {
                r.map_err(|exn| match exn.get_err() {
                    Ok(error) => error.to_string(),
                    Err(_) => "the rule halted".to_string(),
                })
            })
            .collect();
        match results.as_slice() {
            [Ok(Val::Bool(true))] => Verdict::Holds,
            [Ok(value)] => Verdict::Failed(excerpt(&value.to_string())),
            [] => Verdict::Failed("no value".into()),
            [Ok(_), .., Ok(_)] => {
                Verdict::Failed("several values (wrap the expression in all(…))".into())
            }
            [.., Err(error)] | [Err(error), ..] => Verdict::Error(excerpt(error)),
        }
    }

    /// `None` when the rule holds.
    fn evaluate(&self, output: &Val, input: &Val, now: &Val, shown: &Value) -> Option<Finding> {
        match self.judge(output, [input.clone(), now.clone()]) {
            Verdict::Holds => None,
            Verdict::Failed(yielded) => Some(
                Finding::new(
                    Code::RuleFailed,
                    format!(
                        "rule `{}` failed: {}; it yielded {yielded} on {}",
                        self.name,
                        self.message,
                        excerpt(&shown.to_string())
                    ),
                )
                .at(format!("rules.{}", self.name)),
            ),
            Verdict::Error(error) => Some(
                Finding::new(
                    Code::RuleError,
                    format!(
                        "rule `{}` could not be evaluated: {error}; a rule that errors fails ({})",
                        self.name, self.message
                    ),
                )
                .at(format!("rules.{}", self.name)),
            ),
        }
    }
}

pub(crate) fn excerpt(text: &str) -> String {
    let mut out: String = text.chars().take(MAX_SHOWN).collect();
    if text.chars().count() > MAX_SHOWN {
        out.push('…');
    }
    out
}

/// A JSON value as jaq sees it.
pub fn to_val(value: &Value) -> Val {
    match value {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Val::Num(jaq_json::Num::from_integral(i)),
            (None, Some(f)) => Val::from(f),
            (None, None) => Val::Num(jaq_json::Num::from_dec_str(&n.to_string())),
        },
        Value::String(s) => Val::utf8_str(s.clone()),
        Value::Array(items) => items.iter().map(to_val).collect(),
        Value::Object(map) => to_val_map(map),
    }
}

/// A JSON object as a jq value, members in order.
pub fn to_val_map(map: &serde_json::Map<String, Value>) -> Val {
    let mut out = jaq_json::Map::default();
    for (k, v) in map {
        out.insert(Val::utf8_str(k.clone()), to_val(v));
    }
    Val::obj(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(expr: &str, output: Value, input: Value, now: i64) -> Option<Finding> {
        let filter = compile_expr(expr).unwrap();
        let rule = Rule {
            name: "r".into(),
            message: "m".into(),
            filter,
        };
        let input = to_val(&input);
        rule.evaluate(&to_val(&output), &input, &Val::from(now as isize), &output)
    }

    #[test]
    fn input_and_now_are_bound() {
        let out = json!({"currency": "EUR", "date": "2026-01-02"});
        assert_eq!(
            run(
                ".currency == $input.currency",
                out.clone(),
                json!({"currency": "EUR"}),
                0
            ),
            None
        );
        let f = run(
            ".currency == $input.currency",
            out.clone(),
            json!({"currency": "USD"}),
            0,
        )
        .unwrap();
        assert_eq!(f.code, "rule_failed");
        assert!(f.message.contains("yielded false"), "{}", f.message);
        assert!(f.message.contains("\"EUR\""), "{}", f.message);
        let expr = r#"(.date + "T00:00:00Z" | fromdateiso8601) <= $now"#;
        assert_eq!(run(expr, out.clone(), json!({}), 1_900_000_000), None);
        assert_eq!(
            run(expr, out, json!({}), 1_700_000_000).unwrap().code,
            "rule_failed"
        );
    }

    #[test]
    fn multiplying_strings_is_an_error_never_a_pass() {
        let f = run(".a * .b", json!({"a": "x", "b": "y"}), json!({}), 0).unwrap();
        assert_eq!(f.code, "rule_error");
        assert!(f.message.contains("cannot"), "{}", f.message);
    }

    #[test]
    fn only_exactly_true_passes() {
        assert_eq!(
            run("1", json!({}), json!({}), 0).unwrap().code,
            "rule_failed"
        );
        assert_eq!(
            run("\"true\"", json!({}), json!({}), 0).unwrap().code,
            "rule_failed"
        );
        assert_eq!(
            run("empty", json!({}), json!({}), 0).unwrap().code,
            "rule_failed"
        );
        assert_eq!(
            run("true, true", json!({}), json!({}), 0).unwrap().code,
            "rule_failed"
        );
        assert_eq!(run("true", json!({}), json!({}), 0), None);
    }

    #[test]
    fn compile_errors_point_into_the_expression() {
        let expr = ".currency == $inptu.currency";
        let errs = compile_expr(expr).err().unwrap();
        assert_eq!(errs.len(), 1);
        assert_eq!(&expr[errs[0].span.clone()], "$inptu");
        assert!(errs[0].message.contains("undefined variable `$inptu`"));
        assert_eq!(
            render_span(expr, &errs[0].span),
            "    .currency == $inptu.currency\n                 ^^^^^^"
        );
        let errs = compile_expr(".a | nosuch(1)").err().unwrap();
        assert!(
            errs[0].message.contains("undefined function `nosuch/1`"),
            "{:?}",
            errs
        );
        let errs = compile_expr(".a == (1").err().unwrap();
        assert!(errs[0].message.starts_with("syntax error"), "{:?}", errs);
        let errs = compile_expr("now > 0").err().unwrap();
        assert!(errs[0].message.contains("use $now"), "{:?}", errs);
    }
}

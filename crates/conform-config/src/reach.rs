//! Whether an answer valid against a JSON Schema can hold a value at a given place, so
//! that a check's input is resolved before anything is sent: an `agree` pointer, a rule's
//! path or a tool rule's argument that no valid answer can carry would make its check
//! silently compare nothing.
//!
//! The walk follows `properties`, `patternProperties`, `additionalProperties`,
//! `prefixItems`, `items`, `maxItems`, `type`, local `$ref`s, `allOf`, `anyOf`, `oneOf` and
//! `if`/`then`/`else`. Where it cannot tell (a remote `$ref`, a pattern that does not
//! compile), it assumes the place can be reached: it reports only what it can prove.

use serde_json::Value;

/// One step into a value: an object member or an array element (`Any` is every element
/// or member, as jq's `.[]` reads them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The member of this name.
    Key(String),
    /// The element at this index.
    Index(usize),
    /// Every element or member.
    Any,
}

/// What the schema says of a place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// The schema describes it (under `properties`, `patternProperties`, `items` …).
    Declared,
    /// The schema says nothing of it, or cannot be followed there: it may hold anything.
    Open,
    /// An object that allows other members, but declares none of this name: almost
    /// always a typo. Carries the members it does declare.
    Undeclared {
        /// The members the object declares.
        declared: Vec<String>,
    },
    /// No valid answer holds a value there; the sentence says why.
    Impossible(String),
}

/// The steps of a JSON pointer (`/a/0/b`), `~1` and `~0` unescaped; a step of digits is
/// both an index and a key, as a pointer does not say which.
pub fn steps_of_pointer(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// Whether an answer valid against `schema` can hold a value at `pointer`.
pub fn pointer(schema: &Value, pointer: &str) -> Reach {
    let steps: Vec<Step> = steps_of_pointer(pointer)
        .into_iter()
        .map(|s| match s.parse::<usize>() {
            // A pointer's number reads an array's element or an object's member.
            Ok(_) => Step::Any,
            Err(_) => Step::Key(s),
        })
        .collect();
    path(schema, &steps)
}

/// Whether an answer valid against `schema` can hold a value at the end of `steps`.
pub fn path(schema: &Value, steps: &[Step]) -> Reach {
    let mut here = vec![schema];
    let mut declared_all = true;
    for (i, step) in steps.iter().enumerate() {
        let mut next = Vec::new();
        let mut reasons = Vec::new();
        let mut undeclared: Option<Vec<String>> = None;
        let mut open = false;
        for s in &here {
            match child(schema, s, step, 0) {
                Child::Schemas(found) => next.extend(found),
                Child::Open => open = true,
                Child::Undeclared(names) => {
                    undeclared.get_or_insert_with(Vec::new).extend(names);
                }
                Child::Impossible(why) => reasons.push(why),
            }
        }
        if open {
            return Reach::Open;
        }
        if next.is_empty() {
            let at = shown(&steps[..i]);
            if let Some(mut names) = undeclared {
                names.sort();
                names.dedup();
                return if i + 1 == steps.len() {
                    Reach::Undeclared { declared: names }
                } else {
                    // Deeper than an undeclared member: nothing is known of it.
                    Reach::Open
                };
            }
            let why = reasons
                .into_iter()
                .next()
                .unwrap_or_else(|| "the schema allows nothing there".into());
            return Reach::Impossible(format!("at {at}: {why}"));
        }
        declared_all &= undeclared.is_none();
        here = next;
    }
    if declared_all {
        Reach::Declared
    } else {
        Reach::Open
    }
}

/// `/a/0/b`, or `the answer` for the root.
fn shown(steps: &[Step]) -> String {
    if steps.is_empty() {
        return "the answer's top level".into();
    }
    steps
        .iter()
        .map(|s| match s {
            Step::Key(k) => format!("/{k}"),
            Step::Index(i) => format!("/{i}"),
            Step::Any => "/*".into(),
        })
        .collect()
}

enum Child<'a> {
    Schemas(Vec<&'a Value>),
    Open,
    Undeclared(Vec<String>),
    Impossible(String),
}

/// Deeper than this in `$ref`s and combinators, a schema is taken as open.
const MAX_DEPTH: usize = 32;

/// The schemas describing `step` into a value valid against `s` (`root` for `$ref`s).
fn child<'a>(root: &'a Value, s: &'a Value, step: &Step, depth: usize) -> Child<'a> {
    if depth > MAX_DEPTH {
        return Child::Open;
    }
    let obj = match s {
        Value::Bool(true) => return Child::Open,
        Value::Bool(false) => return Child::Impossible("the schema is `false`".into()),
        Value::Object(obj) => obj,
        _ => return Child::Open,
    };
    // Every applicator that must hold at once: this schema's own keywords, its `$ref`,
    // and each `allOf` member. A step the one cannot take, none can.
    let mut parts: Vec<Child<'a>> = vec![own(s, step)];
    if let Some(Value::String(r)) = obj.get("$ref") {
        parts.push(match resolve_ref(root, r) {
            Some(target) => child(root, target, step, depth + 1),
            None => Child::Open,
        });
    }
    if let Some(Value::Array(all)) = obj.get("allOf") {
        parts.extend(all.iter().map(|a| child(root, a, step, depth + 1)));
    }
    // Alternatives: at least one must allow the step.
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(any)) = obj.get(key) {
            parts.push(either(any.iter().map(|a| child(root, a, step, depth + 1))));
        }
    }
    if obj.contains_key("then") || obj.contains_key("else") {
        let branches = ["then", "else"]
            .iter()
            .map(|k| match obj.get(*k) {
                Some(b) => child(root, b, step, depth + 1),
                None => Child::Open,
            })
            .collect::<Vec<_>>();
        parts.push(either(branches.into_iter()));
    }
    both(parts)
}

/// All must allow the step: the first impossibility decides; else declared children of
/// all, undeclared when one only allows it undeclared.
fn both(parts: Vec<Child<'_>>) -> Child<'_> {
    let mut schemas = Vec::new();
    let mut undeclared = None;
    let mut constrained = false;
    for part in parts {
        match part {
            Child::Impossible(why) => return Child::Impossible(why),
            Child::Schemas(found) => {
                constrained = true;
                schemas.extend(found);
            }
            Child::Undeclared(names) => {
                undeclared.get_or_insert_with(Vec::new).extend(names);
            }
            Child::Open => {}
        }
    }
    match (constrained, undeclared) {
        (true, _) => Child::Schemas(schemas),
        (false, Some(names)) => Child::Undeclared(names),
        (false, None) => Child::Open,
    }
}

/// One must allow the step: impossible only when every alternative is.
fn either<'a>(alternatives: impl Iterator<Item = Child<'a>>) -> Child<'a> {
    let mut schemas = Vec::new();
    let mut undeclared: Option<Vec<String>> = None;
    let mut why = None;
    for alternative in alternatives {
        match alternative {
            Child::Open => return Child::Open,
            Child::Schemas(found) => schemas.extend(found),
            Child::Undeclared(names) => undeclared.get_or_insert_with(Vec::new).extend(names),
            Child::Impossible(w) => {
                why.get_or_insert(w);
            }
        }
    }
    match (schemas.is_empty(), undeclared, why) {
        (false, _, _) => Child::Schemas(schemas),
        (true, Some(names), _) => Child::Undeclared(names),
        (true, None, Some(why)) => Child::Impossible(why),
        (true, None, None) => Child::Open,
    }
}

/// What the schema's own keywords (not its `$ref` or combinators) say of the step.
fn own<'a>(s: &'a Value, step: &Step) -> Child<'a> {
    let Some(obj) = s.as_object() else {
        return Child::Open;
    };
    let types: Option<Vec<&str>> = match obj.get("type") {
        Some(Value::String(t)) => Some(vec![t.as_str()]),
        Some(Value::Array(ts)) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    };
    let may_be = |t: &str| types.as_ref().is_none_or(|ts| ts.contains(&t));
    let (as_object, as_array) = (may_be("object"), may_be("array"));
    let mut candidates = Vec::new();
    if as_object {
        candidates.push(match step {
            Step::Key(key) => object_member(obj, key),
            Step::Any | Step::Index(_) => object_values(obj),
        });
    }
    if as_array && !matches!(step, Step::Key(_)) {
        candidates.push(array_element(obj, step));
    }
    if candidates.is_empty() {
        let t = types.map(|t| t.join(" or ")).unwrap_or_default();
        return Child::Impossible(match step {
            Step::Key(k) => format!("the value there is of type {t}, which has no member `{k}`"),
            _ => format!("the value there is of type {t}, which has no elements"),
        });
    }
    // The value may be of any of the types allowed: one of them must take the step.
    either(candidates.into_iter())
}

/// The schemas of every member of an object described by `obj` (jq's `.[]` on it).
fn object_values<'a>(obj: &'a serde_json::Map<String, Value>) -> Child<'a> {
    let mut found = Vec::new();
    for key in ["properties", "patternProperties"] {
        if let Some(Value::Object(props)) = obj.get(key) {
            found.extend(props.values());
        }
    }
    match obj.get("additionalProperties") {
        Some(Value::Bool(false)) if found.is_empty() => {
            Child::Impossible("the object allows no member".into())
        }
        Some(Value::Bool(false)) => Child::Schemas(found),
        Some(v @ Value::Object(_)) => {
            found.push(v);
            Child::Schemas(found)
        }
        _ => Child::Open,
    }
}

/// The schemas of member `key` of an object described by `obj`.
fn object_member<'a>(obj: &'a serde_json::Map<String, Value>, key: &str) -> Child<'a> {
    let mut found = Vec::new();
    let declared: Vec<String> = match obj.get("properties") {
        Some(Value::Object(props)) => {
            if let Some(p) = props.get(key) {
                found.push(p);
            }
            props.keys().cloned().collect()
        }
        _ => Vec::new(),
    };
    if let Some(Value::Object(patterns)) = obj.get("patternProperties") {
        for (pattern, p) in patterns {
            match regex::Regex::new(pattern) {
                Ok(re) if re.is_match(key) => found.push(p),
                Ok(_) => {}
                // A pattern this crate cannot read may match: assume it does.
                Err(_) => return Child::Open,
            }
        }
    }
    if !found.is_empty() {
        return Child::Schemas(found);
    }
    match obj.get("additionalProperties") {
        Some(Value::Bool(false)) => Child::Impossible(format!(
            "the schema declares no member `{key}` and allows no other (additionalProperties: false){}",
            listed(&declared)
        )),
        Some(v @ Value::Object(_)) => Child::Schemas(vec![v]),
        _ if declared.is_empty() && !obj.contains_key("patternProperties") => Child::Open,
        _ => Child::Undeclared(declared),
    }
}

/// `; it declares: a, b`.
fn listed(names: &[String]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!("; it declares: {}", names.join(", "))
    }
}

/// The schemas of an element of an array described by `obj`.
fn array_element<'a>(obj: &'a serde_json::Map<String, Value>, step: &Step) -> Child<'a> {
    let prefix: &[Value] = match obj.get("prefixItems") {
        Some(Value::Array(p)) => p,
        _ => &[],
    };
    let max = obj.get("maxItems").and_then(Value::as_u64);
    if let (Step::Index(i), Some(max)) = (step, max)
        && *i as u64 >= max
    {
        return Child::Impossible(format!("the array holds at most {max} elements"));
    }
    if max == Some(0) {
        return Child::Impossible("the array holds no element (maxItems: 0)".into());
    }
    let rest = obj.get("items");
    match step {
        Step::Index(i) if *i < prefix.len() => Child::Schemas(vec![&prefix[*i]]),
        Step::Index(_) => match rest {
            Some(Value::Bool(false)) => Child::Impossible(format!(
                "the array holds at most {} elements (items: false)",
                prefix.len()
            )),
            Some(v) => Child::Schemas(vec![v]),
            None => Child::Open,
        },
        _ => {
            let mut found: Vec<&Value> = prefix.iter().collect();
            match rest {
                Some(Value::Bool(false)) => {}
                Some(v) => found.push(v),
                None => return Child::Open,
            }
            if found.is_empty() {
                Child::Impossible("the array holds no element".into())
            } else {
                Child::Schemas(found)
            }
        }
    }
}

/// A local `$ref` (`#/$defs/x`, `#`) in `root`; `None` for anything else.
fn resolve_ref<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    root.pointer(pointer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn triage() -> Value {
        json!({
            "type": "object",
            "properties": {
                "label": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                "items": {"type": "array", "items": {"$ref": "#/$defs/item"}},
                "pair": {"type": "array", "prefixItems": [{"type": "string"}], "items": false}
            },
            "required": ["label"],
            "additionalProperties": false,
            "$defs": {"item": {"type": "object", "properties": {"amount": {"type": "number"}},
                "additionalProperties": false}}
        })
    }

    #[test]
    fn a_declared_member_is_reached() {
        let s = triage();
        assert_eq!(pointer(&s, "/label"), Reach::Declared);
        assert_eq!(pointer(&s, "/tags/0"), Reach::Declared);
        assert_eq!(pointer(&s, "/items/4/amount"), Reach::Declared);
        assert_eq!(pointer(&s, ""), Reach::Declared);
    }

    #[test]
    fn a_member_a_closed_object_lacks_is_impossible_and_says_what_it_has() {
        let s = triage();
        let Reach::Impossible(why) = pointer(&s, "/lable") else {
            panic!("{:?}", pointer(&s, "/lable"));
        };
        assert!(
            why.contains("no member `lable`") && why.contains("label, tags"),
            "{why}"
        );
        assert!(matches!(
            pointer(&s, "/items/0/amout"),
            Reach::Impossible(_)
        ));
        // Into a string there is nothing.
        assert!(matches!(pointer(&s, "/label/x"), Reach::Impossible(_)));
        // Past a closed tuple.
        assert!(matches!(
            path(&s, &[Step::Key("pair".into()), Step::Index(1)]),
            Reach::Impossible(_)
        ));
        assert!(matches!(
            path(&s, &[Step::Key("tags".into()), Step::Index(3)]),
            Reach::Impossible(_)
        ));
    }

    #[test]
    fn an_open_object_makes_an_unknown_name_undeclared_not_impossible() {
        let s = json!({"type": "object", "properties": {"label": {"type": "string"}}});
        assert_eq!(
            pointer(&s, "/lable"),
            Reach::Undeclared {
                declared: vec!["label".into()]
            }
        );
        // A schema that declares nothing says nothing.
        assert_eq!(pointer(&json!({"type": "object"}), "/x"), Reach::Open);
        assert_eq!(pointer(&json!(true), "/x/y"), Reach::Open);
        assert_eq!(
            pointer(&json!({"additionalProperties": {"type": "number"}}), "/x"),
            Reach::Declared
        );
    }

    #[test]
    fn combinators_and_patterns_are_followed() {
        let s = json!({
            "anyOf": [
                {"type": "object", "properties": {"a": {}}, "additionalProperties": false},
                {"type": "object", "properties": {"b": {}}, "additionalProperties": false}
            ]
        });
        assert_eq!(pointer(&s, "/a"), Reach::Declared);
        assert_eq!(pointer(&s, "/b"), Reach::Declared);
        assert!(matches!(pointer(&s, "/c"), Reach::Impossible(_)));
        let s = json!({"allOf": [
            {"type": "object", "properties": {"a": {}}},
            {"properties": {"b": {}}, "additionalProperties": false}
        ]});
        assert!(matches!(pointer(&s, "/c"), Reach::Impossible(_)));
        let s = json!({"type": "object", "patternProperties": {"^x_": {"type": "string"}},
            "additionalProperties": false});
        assert_eq!(pointer(&s, "/x_1"), Reach::Declared);
        assert!(matches!(pointer(&s, "/y"), Reach::Impossible(_)));
        // A remote reference is not followed: it may allow anything.
        assert_eq!(
            pointer(&json!({"$ref": "https://example.com/s.json"}), "/x"),
            Reach::Open
        );
    }
}

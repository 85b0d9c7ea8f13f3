//! The members a jq expression reads from its input, found in its syntax tree before
//! anything runs, so that a rule reading `.totl` from an answer whose schema has only
//! `total` is refused by `conform check` instead of failing (or, behind `//`, passing)
//! on every call.
//!
//! The walk follows `.` through pipes, paths, `map`, `select` and the other filters whose
//! input is known; wherever it loses track (a variable, a function it does not know, a
//! reduction's accumulator), it stops looking rather than guess.

use std::ops::Range;

use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Term};
use jaq_core::load::{Lexer, Parser};
use jaq_core::path::{Opt, Part};

use conform_config::reach::Step;

/// A member read from the input: the steps from the input to it, and where its name
/// stands in the expression (bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The path the expression reads, step by step.
    pub steps: Vec<Step>,
    /// Where in the expression the read is, to place a diagnostic.
    pub span: Range<usize>,
}

/// Every member `expr` reads from its input at a place the walk can name; nothing for an
/// expression that does not parse (compiling it reports that).
pub fn reads(expr: &str) -> Vec<Read> {
    let Ok(tokens) = Lexer::new(expr).lex() else {
        return Vec::new();
    };
    let Ok(term) = Parser::new(&tokens).parse(|p| p.term()) else {
        return Vec::new();
    };
    let mut walk = Walk {
        expr,
        out: Vec::new(),
    };
    walk.term(&term, &Some(Vec::new()));
    walk.out
}

/// The input's place, when known: the steps from the expression's input to it.
type Place = Option<Vec<Step>>;

struct Walk<'e> {
    expr: &'e str,
    out: Vec<Read>,
}

/// Filters that run their argument on each element of their input (`map(f)` is
/// `[.[] | f]`).
const ON_ELEMENTS: &[&str] = &[
    "map",
    "map_values",
    "sort_by",
    "group_by",
    "unique_by",
    "min_by",
    "max_by",
    "any",
    "all",
];

/// Filters whose arguments run on the same input as the filter itself.
const ON_INPUT: &[&str] = &[
    "select",
    "has",
    "contains",
    "inside",
    "startswith",
    "endswith",
    "ltrimstr",
    "rtrimstr",
    "test",
    "match",
    "capture",
    "split",
    "join",
    "index",
    "rindex",
    "indices",
    "tostring",
    "tonumber",
    "length",
    "not",
    "type",
    "ascii_downcase",
    "ascii_upcase",
    "empty",
    "error",
];

impl Walk<'_> {
    /// Walks `term` whose input is at `place`; returns the place of its output, when the
    /// output is a part of the input.
    fn term(&mut self, term: &Term<&str>, place: &Place) -> Place {
        match term {
            Term::Id => place.clone(),
            Term::Recurse | Term::Num(_) | Term::Var(_) | Term::Break(_) => None,
            Term::Str(_, parts) => {
                for part in parts {
                    if let StrPart::Term(t) = part {
                        self.term(t, place);
                    }
                }
                None
            }
            Term::Arr(inner) => {
                if let Some(t) = inner {
                    self.term(t, place);
                }
                None
            }
            Term::Obj(members) => {
                self.object(members, place);
                None
            }
            Term::Neg(t) | Term::Label(_, t) => {
                self.term(t, place);
                None
            }
            Term::BinOp(l, op, r) => match op {
                BinaryOp::Pipe(None) => {
                    let output = self.term(l, place);
                    self.term(r, &output)
                }
                BinaryOp::Pipe(Some(_)) => {
                    self.term(l, place);
                    self.term(r, place)
                }
                _ => {
                    self.term(l, place);
                    self.term(r, place);
                    None
                }
            },
            Term::Fold(_, source, _, args) => {
                self.term(source, place);
                // The first argument starts the accumulator from the input; the others
                // run on the accumulator.
                if let Some(init) = args.first() {
                    self.term(init, place);
                }
                for arg in args.iter().skip(1) {
                    self.term(arg, &None);
                }
                None
            }
            Term::TryCatch(body, handler) => {
                self.term(body, place);
                if let Some(h) = handler {
                    self.term(h, &None);
                }
                None
            }
            Term::IfThenElse(branches, otherwise) => {
                for (condition, then) in branches {
                    self.term(condition, place);
                    self.term(then, place);
                }
                if let Some(e) = otherwise {
                    self.term(e, place);
                }
                None
            }
            Term::Def(defs, body) => {
                for def in defs {
                    self.term(&def.body, &None);
                }
                self.term(body, place)
            }
            Term::Call(name, args) => self.call(name, args, place),
            Term::Path(base, path) => {
                let at = self.term(base, place);
                self.path(at, &path.0, place)
            }
        }
    }

    /// An object's members, on the input at `place`.
    fn object(&mut self, members: &[(Term<&str>, Option<Term<&str>>)], place: &Place) {
        for (key, value) in members {
            match (key, value) {
                // `{name}` is `{name: .name}`.
                (k, None) => {
                    if let Some(name) = literal(k) {
                        self.read(place, name);
                    }
                }
                (k, Some(v)) => {
                    self.term(k, place);
                    self.term(v, place);
                }
            }
        }
    }

    /// The path `parts` from `at`, the place of its base's output (`place` is the input
    /// its index expressions run on); returns where it ends.
    fn path(&mut self, mut at: Place, parts: &[(Part<Term<&str>>, Opt)], place: &Place) -> Place {
        for (part, _) in parts {
            at = match part {
                Part::Index(index) => match (literal(index), number(index)) {
                    (Some(name), _) => {
                        self.read(&at, name);
                        at.map(|mut steps| {
                            steps.push(Step::Key(name.to_string()));
                            steps
                        })
                    }
                    (None, Some(i)) => at.map(|mut steps| {
                        steps.push(Step::Index(i));
                        steps
                    }),
                    // `.a[.b]`: the index runs on the path's input.
                    _ => {
                        self.term(index, place);
                        None
                    }
                },
                Part::Range(None, None) => at.map(|mut steps| {
                    steps.push(Step::Any);
                    steps
                }),
                // A slice is the same array, shorter.
                Part::Range(from, to) => {
                    for bound in [from, to].into_iter().flatten() {
                        self.term(bound, place);
                    }
                    at
                }
            };
        }
        at
    }

    fn call(&mut self, name: &str, args: &[Term<&str>], place: &Place) -> Place {
        let element = place.clone().map(|mut steps| {
            steps.push(Step::Any);
            steps
        });
        match (name, args) {
            (_, [f]) if ON_ELEMENTS.contains(&name) => {
                self.term(f, &element);
                None
            }
            // `any(generator; condition)`: the condition runs on what the generator yields.
            ("any" | "all", [generator, condition]) => {
                let yielded = self.term(generator, place);
                self.term(condition, &yielded);
                None
            }
            ("select", [f]) => {
                self.term(f, place);
                place.clone()
            }
            _ if ON_INPUT.contains(&name) => {
                for arg in args {
                    self.term(arg, place);
                }
                None
            }
            // Anything else may run its arguments on anything: not followed.
            _ => {
                for arg in args {
                    self.term(arg, &None);
                }
                None
            }
        }
    }

    /// Records that member `name` is read at `place`, when the place is known.
    fn read(&mut self, place: &Place, name: &str) {
        let Some(steps) = place else { return };
        let start = (name.as_ptr() as usize).wrapping_sub(self.expr.as_ptr() as usize);
        let span = if start <= self.expr.len() {
            start..start + name.len()
        } else {
            0..0
        };
        let mut steps = steps.clone();
        steps.push(Step::Key(name.to_string()));
        self.out.push(Read { steps, span });
    }
}

/// The text of a string literal without escapes or interpolation (`"a"`, or `a` in `.a`).
fn literal<'s>(term: &Term<&'s str>) -> Option<&'s str> {
    match term {
        Term::Str(None, parts) => match parts.as_slice() {
            [StrPart::Str(s)] => Some(s),
            _ => None,
        },
        _ => None,
    }
}

/// A non-negative integer literal.
fn number(term: &Term<&str>) -> Option<usize> {
    match term {
        Term::Num(n) => n.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(expr: &str) -> Vec<String> {
        reads(expr)
            .into_iter()
            .map(|r| {
                let mut s = String::new();
                for step in &r.steps {
                    s.push('/');
                    match step {
                        Step::Key(k) => s.push_str(k),
                        Step::Index(i) => s.push_str(&i.to_string()),
                        Step::Any => s.push('*'),
                    }
                }
                assert_eq!(
                    &expr[r.span.clone()],
                    r.steps.last().map_or("", |s| match s {
                        Step::Key(k) => k.as_str(),
                        _ => "",
                    })
                );
                s
            })
            .collect()
    }

    #[test]
    fn members_read_through_paths_and_pipes() {
        assert_eq!(paths(".currency == $input.currency"), ["/currency"]);
        assert_eq!(paths(".a.b | .c"), ["/a", "/a/b", "/a/b/c"]);
        assert_eq!(paths(".items[0].amount"), ["/items", "/items/0/amount"]);
        assert_eq!(paths(r#".["total"] > 0"#), ["/total"]);
        assert_eq!(paths("(.tags | length) <= 3"), ["/tags"]);
    }

    #[test]
    fn element_filters_move_the_input_into_the_array() {
        assert_eq!(
            paths("(.line_items | map(.amount) | add) == .subtotal"),
            ["/line_items", "/line_items/*/amount", "/subtotal"]
        );
        assert_eq!(paths("all(.items[]; .qty > 0)"), ["/items", "/items/*/qty"]);
        assert_eq!(
            paths(".items[] | select(.ok) | .x"),
            ["/items", "/items/*/ok", "/items/*/x"]
        );
        assert_eq!(paths("{total}"), ["/total"]);
    }

    #[test]
    fn what_cannot_be_followed_is_not_guessed() {
        // A variable's members, a reduction's accumulator, a user function's body.
        assert!(paths("$input.currency == \"EUR\"").is_empty());
        assert_eq!(
            paths("reduce .items[] as $i (0; . + $i.amount)"),
            ["/items"]
        );
        assert!(paths("def f: .x; 1 | f").is_empty());
        assert!(paths("..|.x?").is_empty());
        assert!(paths("this is not jq (").is_empty());
    }
}

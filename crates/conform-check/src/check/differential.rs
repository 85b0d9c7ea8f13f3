//! Differential conformance: a candidate judged against the reference (the primary),
//! within the noise the reference shows against itself.
//!
//! For every case and every compared field (the whole answer in canonical JSON, the
//! suite's `agree` pointers, and for requests that declare tools: whether a call was
//! made, which tools, which arguments) two proportions of agreeing pairs are counted:
//!
//! - the reference's **self-agreement** (its noise floor): pairs among its own repeats,
//!   live or recorded;
//! - the candidate's **agreement with the reference**: candidate × reference pairs.
//!
//! They are summed per (suite, candidate, field) over the cases. A field fails when the
//! candidate's agreement is significantly below the floor minus the suite's margin: a
//! one-sided two-proportion test at the suite's confidence ([`significantly_below`]).
//! A field the reference itself disagrees on lowers the floor as much as it lowers the
//! candidate's agreement, so the candidate is never blamed for the primary's own noise.
//! A field with no reference pairs (one reference answer per case) has no floor: it is
//! inconclusive, and the verdict with it, never a pass.
//!
//! A failed call of either side is not an answer and takes part in no pair; the call's
//! own verdict already counts it. A call failed when it brought no answer the comparison
//! can read: a transport failure, or for a JSON answer one that is not strict JSON
//! ([`answer_usable`]); an answer that parses but breaks the schema or a rule still
//! takes part (its own checks fail it).
//!
//! A test that could not have failed never passes: a field whose pairs are too few for
//! a candidate disagreeing on every pair to have been found below the floor is
//! `insufficient_evidence`, and the verdict inconclusive. A case the reference gave no
//! usable answer to is left out, and the comparison stands on the cases that remain.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::stability::normal_quantile;
use conform_allowlist::{DifferentialEvidence, FieldEvidence};
use conform_config::{Answer, Case, RecordedAnswer, Suite};
use conform_wire::provider::Reply;

/// The finding a failed field is reported with, and the verdict's reason.
pub const CODE: &str = "reference_disagreement";
/// No field could be judged: the reference gave fewer than two answers per case.
pub const NO_FLOOR: &str = "reference_no_floor";
/// The live reference did not answer (stopped, or not in the run).
pub const NO_REFERENCE: &str = "reference_unavailable";
/// A field with too few pairs for the test to have failed: even a candidate disagreeing
/// on every pair would not have been significantly below the floor.
pub const INSUFFICIENT: &str = "insufficient_evidence";

/// The cases listed per (suite, candidate), most disagreeing first.
pub const MAX_CASES: usize = 10;

/// The compared field that holds the whole answer.
pub const ANSWER: &str = "answer";
/// The compared field that says whether the answer called a tool at all.
pub const TOOL_CALL_MADE: &str = "tool_call.made";
/// The compared field that holds the names of the tools called.
pub const TOOL_CALL_NAMES: &str = "tool_call.name";
/// The compared field that holds the calls' arguments.
pub const TOOL_CALL_ARGUMENTS: &str = "tool_call.arguments";

/// The fields compared in a suite, in the order a [`Signature`] holds them.
pub fn fields(suite: &Suite) -> Vec<String> {
    let mut out = vec![ANSWER.to_string()];
    out.extend(suite.agree.iter().cloned());
    out.extend(
        [TOOL_CALL_MADE, TOOL_CALL_NAMES, TOOL_CALL_ARGUMENTS]
            .iter()
            .map(|s| s.to_string()),
    );
    out
}

/// One answer, reduced to a digest per compared field (`None`: the field does not apply
/// to this case). Two answers agree on a field when their digests are equal.
pub type Signature = Vec<Option<u64>>;

/// A tool call as compared: its name and arguments (a string when they were not JSON).
struct Call<'a> {
    name: &'a str,
    arguments: Value,
}

/// The signature of a live answer.
pub fn of_reply(suite: &Suite, case: &Case, reply: &Reply) -> Signature {
    let calls: Vec<Call<'_>> = reply
        .tool_calls
        .iter()
        .map(|c| Call {
            name: &c.name,
            arguments: c
                .arguments
                .clone()
                .unwrap_or_else(|| Value::String(c.raw_arguments.clone())),
        })
        .collect();
    signature(suite, case, reply.content(), &calls)
}

/// The signature of a recorded answer.
pub fn of_recorded(suite: &Suite, case: &Case, answer: &RecordedAnswer) -> Signature {
    let calls: Vec<Call<'_>> = answer
        .tool_calls
        .iter()
        .map(|c| Call {
            name: &c.name,
            arguments: c.arguments.clone(),
        })
        .collect();
    signature(suite, case, &answer.text, &calls)
}

fn signature(suite: &Suite, case: &Case, content: &str, calls: &[Call<'_>]) -> Signature {
    let parsed = serde_json::from_str::<Value>(content.trim()).ok();
    let mut out = Vec::with_capacity(4 + suite.agree.len());
    let whole = if calls.is_empty() {
        match &parsed {
            Some(v) => conform_config::digest::canonical(v),
            None => format!("text:{content}"),
        }
    } else {
        let listed: Vec<Value> = calls
            .iter()
            .map(|c| serde_json::json!({"name": c.name, "arguments": c.arguments}))
            .collect();
        let text = parsed.clone().unwrap_or(Value::String(content.to_string()));
        conform_config::digest::canonical_json(
            &serde_json::json!({"content": text, "tool_calls": listed}),
        )
    };
    out.push(Some(hash(&whole)));
    let json_answer = matches!(case.answer(), Answer::Json);
    for pointer in &suite.agree {
        out.push(
            json_answer.then(|| match parsed.as_ref().map(|v| v.pointer(pointer)) {
                None => hash("not_json"),
                Some(None) => hash("absent"),
                Some(Some(v)) => hash(&conform_config::digest::canonical_json(&number_agnostic(v))),
            }),
        );
    }
    let tools = !suite.tools_for(case).is_empty();
    let mut names: Vec<&str> = calls.iter().map(|c| c.name).collect();
    names.sort_unstable();
    let mut arguments: Vec<String> = calls
        .iter()
        .map(|c| conform_config::digest::canonical_json(&serde_json::json!([c.name, c.arguments])))
        .collect();
    arguments.sort_unstable();
    out.push(tools.then(|| hash(if calls.is_empty() { "no" } else { "yes" })));
    out.push(tools.then(|| hash(&names.join("\u{1f}"))));
    out.push(tools.then(|| hash(&arguments.join("\u{1f}"))));
    out
}

/// Whether a call's answer takes part in pairs: its transport succeeded and, where a JSON
/// answer was due, it parsed as strict JSON (fenced or prose-wrapped JSON does not).
pub fn answer_usable(outcomes: &[super::Outcome]) -> bool {
    outcomes
        .iter()
        .filter(|o| o.check == super::transport::NAME || o.check == super::json::NAME)
        .all(|o| o.status == super::Status::Pass)
        && outcomes.iter().any(|o| o.check == super::transport::NAME)
}

/// What one call contributes: its own answer's signature (none when the call failed),
/// and on a candidate's first repeat the case's recorded reference answers.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Observed {
    /// This answer's signature; `None` when the call failed.
    pub own: Option<Signature>,
    /// The case's recorded reference answers, on a candidate's first repeat.
    pub recorded: Option<Vec<Signature>>,
}

/// What a call of `case` contributes, when its suite has a reference (live, or recorded
/// in the case); `None` otherwise. A live reference takes precedence over recorded
/// answers.
pub fn observe(
    suite: &Suite,
    case: &Case,
    reply: Option<&Reply>,
    repeat: u32,
) -> Option<Box<Observed>> {
    let live = suite.reference.is_some();
    if !live && case.reference.is_none() {
        return None;
    }
    let own = reply.map(|r| of_reply(suite, case, r));
    let recorded = match (&case.reference, live, repeat) {
        (Some(r), false, 0) => Some(
            r.answers
                .iter()
                .map(|a| of_recorded(suite, case, a))
                .collect(),
        ),
        _ => None,
    };
    Some(Box::new(Observed { own, recorded }))
}

/// Numbers compare by value, as the agree check compares them: 5.50 and 5.5 agree.
fn number_agnostic(v: &Value) -> Value {
    match v.as_f64() {
        Some(x) if v.is_number() => serde_json::json!(x),
        _ => v.clone(),
    }
}

fn hash(s: &str) -> u64 {
    let mut h = DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// Agreeing pairs out of pairs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Share {
    /// Pairs whose values agree.
    pub agreeing: u64,
    /// Pairs compared.
    pub pairs: u64,
}

impl Share {
    /// `agreeing / pairs`; `None` without a pair.
    pub fn rate(&self) -> Option<f64> {
        (self.pairs > 0).then(|| self.agreeing as f64 / self.pairs as f64)
    }

    fn add(&mut self, other: Share) {
        self.agreeing += other.agreeing;
        self.pairs += other.pairs;
    }
}

/// The pairs of one field in one case: the reference's among its own answers, and the
/// candidate's with the reference's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CasePairs {
    /// The reference's pairs among its own answers.
    pub reference: Share,
    /// The candidate's answers paired with the reference's.
    pub candidate: Share,
}

/// Counts, for field `f`, agreeing pairs among `reference` and between `candidate` and
/// `reference`. Answers where the field does not apply take part in no pair.
pub fn pairs(reference: &[Signature], candidate: &[Signature], f: usize) -> CasePairs {
    let at = |s: &Signature| s.get(f).copied().flatten();
    let reference: Vec<u64> = reference.iter().filter_map(at).collect();
    let candidate: Vec<u64> = candidate.iter().filter_map(at).collect();
    let mut out = CasePairs::default();
    for (i, a) in reference.iter().enumerate() {
        for b in &reference[i + 1..] {
            out.reference.pairs += 1;
            out.reference.agreeing += u64::from(a == b);
        }
    }
    for c in &candidate {
        for r in &reference {
            out.candidate.pairs += 1;
            out.candidate.agreeing += u64::from(c == r);
        }
    }
    out
}

/// The outcome of [`significantly_below`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Test {
    /// The test statistic: how many standard errors the candidate's agreement lies below
    /// the floor minus the margin.
    pub z: f64,
    /// The critical value at the confidence.
    pub critical: f64,
    /// The candidate's agreement is significantly below the floor: the field fails.
    pub below: bool,
}

/// Whether the candidate's agreement is significantly below the reference's floor
/// minus `margin`: a one-sided two-proportion z-test of H0 `p_candidate >= p_floor -
/// margin` at `confidence`. Each proportion is estimated with one agreeing and one
/// disagreeing pair added (Agresti and Caffo), so that a floor of 1.0 or a handful of
/// pairs does not make the standard error zero and a few pairs decide the verdict.
/// `None` when either side has no pairs: nothing can be concluded.
pub fn significantly_below(
    candidate: Share,
    floor: Share,
    margin: f64,
    confidence: f64,
) -> Option<Test> {
    if candidate.pairs == 0 || floor.pairs == 0 {
        return None;
    }
    let adjusted = |s: Share| {
        let n = s.pairs as f64 + 2.0;
        ((s.agreeing as f64 + 1.0) / n, n)
    };
    let (pc, nc) = adjusted(candidate);
    let (pf, nf) = adjusted(floor);
    let se = (pc * (1.0 - pc) / nc + pf * (1.0 - pf) / nf).sqrt();
    let z = ((pf - margin) - pc) / se;
    let critical = normal_quantile(confidence);
    Some(Test {
        z,
        critical,
        below: z > critical,
    })
}

/// How one field came out for one (suite, candidate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldVerdict {
    /// Not significantly below the floor.
    Pass,
    /// Significantly below the floor minus the margin: `reference_disagreement`.
    Fail,
    /// The reference gave no pairs for this field (one answer per case): no floor.
    NoFloor,
    /// The field applies to no case, or no candidate answer was compared.
    NotCompared,
    /// Too few pairs for the test to have failed: a candidate disagreeing on every pair
    /// would not have been found below the floor. Never a pass.
    Insufficient,
    /// The reference agrees with itself on this field no more than the margin: no
    /// candidate could be found below it (free text, say). It decides nothing.
    Uninformative,
}

/// One row of the table: a field × (reference self-agreement, candidate agreement,
/// verdict).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldRow {
    /// The compared field.
    pub field: String,
    /// The reference's pairs among its own answers, over every case.
    pub reference: Share,
    /// The candidate's pairs with the reference, over every case.
    pub candidate: Share,
    /// The reference's agreement with itself: the floor the candidate is held to.
    pub reference_agreement: Option<f64>,
    /// The candidate's agreement with the reference.
    pub candidate_agreement: Option<f64>,
    /// What the field's pairs decide.
    pub verdict: FieldVerdict,
    /// The test behind the verdict, when one was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test: Option<Test>,
}

/// A case where the candidate disagreed with the reference.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseRow {
    /// The case, by id.
    pub case: String,
    /// Disagreeing candidate × reference pairs, summed over the fields.
    pub disagreeing: u64,
    /// Candidate × reference pairs compared, summed over the fields.
    pub pairs: u64,
    /// The fields the candidate disagreed on beyond the reference's own disagreement.
    pub fields: Vec<String>,
    /// Each field the candidate disagreed with the reference on in this case, with its
    /// own pairs: a count over all fields at once says nothing of which one drifted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_field: Vec<FieldDisagreement>,
}

/// One field of one case the candidate disagreed with the reference on: its pairs, and
/// (filled in from the answers once the run is over) the values side by side.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FieldDisagreement {
    /// The compared field.
    pub field: String,
    /// Disagreeing candidate × reference pairs of this field.
    pub disagreeing: u64,
    /// Candidate × reference pairs of this field.
    pub pairs: u64,
    /// The reference's distinct values of the field, as JSON.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference: Vec<String>,
    /// The candidate's distinct values of the field, as JSON.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidate: Vec<String>,
    /// For the whole answer: how the candidate's first answer differs from the
    /// reference's (`added /confidence: 0.93`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub difference: Vec<String>,
}

/// The differential evidence of one (suite, candidate). Its size does not depend on
/// the number of cases: one row per field and at most [`MAX_CASES`] cases.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Differential {
    /// The reference: a provider's name, or `recorded` for answers in the cases.
    pub reference: String,
    /// How far below the reference's floor the candidate's agreement may be.
    pub margin: f64,
    /// The confidence each field's test is made at.
    pub confidence: f64,
    /// Cases compared.
    pub cases: u64,
    /// One row per compared field.
    pub fields: Vec<FieldRow>,
    /// The most disagreeing cases first.
    pub worst_cases: Vec<CaseRow>,
    /// Why nothing could be judged, when so (`reference_unavailable`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// Cases left out because the reference gave no usable answer to them.
    #[serde(skip_serializing_if = "is_zero")]
    pub left_out: u64,
    /// What the comparison rules out: the largest drift from the reference its pairs
    /// cannot exclude (`None` until [`Differential::finish`], or when no field passed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift_rules_out: Option<conform_allowlist::DriftRulesOut>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Differential {
    /// An empty comparison with `reference` over `fields`, to which cases are added.
    pub fn new(reference: &str, fields: Vec<String>, margin: f64, confidence: f64) -> Self {
        Differential {
            reference: reference.to_string(),
            margin,
            confidence,
            cases: 0,
            fields: fields
                .into_iter()
                .map(|field| FieldRow {
                    field,
                    reference: Share::default(),
                    candidate: Share::default(),
                    reference_agreement: None,
                    candidate_agreement: None,
                    verdict: FieldVerdict::NotCompared,
                    test: None,
                })
                .collect(),
            worst_cases: Vec::new(),
            unavailable: None,
            left_out: 0,
            drift_rules_out: None,
        }
    }

    /// Adds one case: the reference's answers and the candidate's.
    pub fn add_case(&mut self, case: &str, reference: &[Signature], candidate: &[Signature]) {
        if candidate.is_empty() || reference.is_empty() {
            return;
        }
        self.cases += 1;
        let mut row = CaseRow {
            case: case.to_string(),
            disagreeing: 0,
            pairs: 0,
            fields: Vec::new(),
            per_field: Vec::new(),
        };
        for (f, field) in self.fields.iter_mut().enumerate() {
            let p = pairs(reference, candidate, f);
            field.reference.add(p.reference);
            field.candidate.add(p.candidate);
            let disagreeing = p.candidate.pairs - p.candidate.agreeing;
            row.pairs += p.candidate.pairs;
            row.disagreeing += disagreeing;
            if disagreeing > 0 {
                row.per_field.push(FieldDisagreement {
                    field: field.field.clone(),
                    disagreeing,
                    pairs: p.candidate.pairs,
                    ..FieldDisagreement::default()
                });
            }
            // Worse than the reference is with itself, in this case.
            let worse = match (p.candidate.rate(), p.reference.rate()) {
                (Some(c), Some(r)) => c < r,
                (Some(c), None) => c < 1.0,
                _ => false,
            };
            if worse {
                row.fields.push(field.field.clone());
            }
        }
        if row.disagreeing == 0 {
            return;
        }
        self.worst_cases.push(row);
        self.worst_cases.sort_by(|a, b| {
            let share = |r: &CaseRow| r.disagreeing as f64 / r.pairs.max(1) as f64;
            share(b)
                .total_cmp(&share(a))
                .then(b.disagreeing.cmp(&a.disagreeing))
                .then(a.case.cmp(&b.case))
        });
        self.worst_cases.truncate(MAX_CASES);
    }

    /// Applies the test to every field.
    pub fn finish(&mut self) {
        for field in &mut self.fields {
            field.reference_agreement = field.reference.rate();
            field.candidate_agreement = field.candidate.rate();
            field.test = significantly_below(
                field.candidate,
                field.reference,
                self.margin,
                self.confidence,
            );
            // Whether the test could have failed: a candidate disagreeing on every pair.
            let could_fail = significantly_below(
                Share {
                    agreeing: 0,
                    pairs: field.candidate.pairs,
                },
                field.reference,
                self.margin,
                self.confidence,
            )
            .is_some_and(|t| t.below);
            let floor_above_margin = field
                .reference_agreement
                .is_some_and(|floor| floor > self.margin);
            field.verdict = match (&field.test, field.candidate.pairs, field.reference.pairs) {
                (_, 0, _) => FieldVerdict::NotCompared,
                (_, _, 0) => FieldVerdict::NoFloor,
                (Some(t), _, _) if t.below => FieldVerdict::Fail,
                _ if !floor_above_margin => FieldVerdict::Uninformative,
                _ if !could_fail => FieldVerdict::Insufficient,
                _ => FieldVerdict::Pass,
            };
        }
        // The entry's figure, computed the way every reader recomputes it.
        self.drift_rules_out = DifferentialEvidence::from(&*self).drift_rules_out();
    }

    /// The fields that failed.
    pub fn failed(&self) -> impl Iterator<Item = &FieldRow> {
        self.fields
            .iter()
            .filter(|f| f.verdict == FieldVerdict::Fail)
    }

    /// What the verdict makes of it: `Err` for evidence that decides nothing (no floor,
    /// no reference, too few pairs), `Ok(true)` when a field failed, `Ok(false)`
    /// otherwise.
    pub fn judgement(&self) -> Result<bool, Undecided> {
        if self.unavailable.is_some() {
            return Err(Undecided::Unavailable);
        }
        if self.failed().next().is_some() {
            return Ok(true);
        }
        let any = |v: FieldVerdict| self.fields.iter().any(|f| f.verdict == v);
        if any(FieldVerdict::NoFloor) {
            return Err(Undecided::NoFloor);
        }
        if any(FieldVerdict::Insufficient) {
            return Err(Undecided::Insufficient);
        }
        if !any(FieldVerdict::Pass) {
            return Err(Undecided::NoFloor);
        }
        Ok(false)
    }
}

/// Why a comparison with the reference decided nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undecided {
    /// The reference was not in the run, or answered no case: `reference_unavailable`.
    Unavailable,
    /// One reference answer per case measures no noise: `reference_no_floor`.
    NoFloor,
    /// Too few pairs for the test to have failed: `insufficient_evidence`.
    Insufficient,
}

impl Undecided {
    /// The finding code a report shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Undecided::Unavailable => NO_REFERENCE,
            Undecided::NoFloor => NO_FLOOR,
            Undecided::Insufficient => INSUFFICIENT,
        }
    }
}

/// What an allowlist entry keeps of a comparison.
impl From<&Differential> for DifferentialEvidence {
    fn from(d: &Differential) -> Self {
        DifferentialEvidence {
            reference: d.reference.clone(),
            // The reference's pins are the writer's to add: it knows the reference's file.
            reference_identity: None,
            reference_digest: None,
            reference_run: None,
            drift_rules_out: None,
            margin: d.margin,
            confidence: d.confidence,
            cases: d.cases,
            fields: d
                .fields
                .iter()
                .map(|f| FieldEvidence {
                    field: f.field.clone(),
                    reference_agreement: f.reference_agreement,
                    candidate_agreement: f.candidate_agreement,
                    reference_pairs: f.reference.pairs,
                    candidate_pairs: f.candidate.pairs,
                    verdict: serde_json::to_value(f.verdict)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(agreeing: u64, pairs: u64) -> Share {
        Share { agreeing, pairs }
    }

    #[test]
    fn pairs_count_the_floor_and_the_candidate() {
        let s = |v: &[u64]| -> Vec<Signature> { v.iter().map(|x| vec![Some(*x)]).collect() };
        // Reference a, a, b: one agreeing pair of three; candidate a, b: 2 + 1 of 6.
        let p = pairs(&s(&[1, 1, 2]), &s(&[1, 2]), 0);
        assert_eq!(p.reference, share(1, 3));
        assert_eq!(p.candidate, share(3, 6));
        // A field that does not apply takes part in no pair.
        let none: Vec<Signature> = vec![vec![None], vec![None]];
        assert_eq!(pairs(&none, &s(&[1]), 0), CasePairs::default());
    }

    #[test]
    fn a_clear_drop_below_the_floor_is_significant() {
        // Floor 1.0 over 600 pairs, candidate 85 % over 1,800: far below 0.95.
        let t = significantly_below(share(1530, 1800), share(600, 600), 0.05, 0.95).unwrap();
        assert!(t.below, "{t:?}");
        assert!(t.z > 5.0, "{t:?}");
        assert!((t.critical - 1.644_854).abs() < 1e-5);
    }

    #[test]
    fn noise_the_floor_has_too_is_not_blamed() {
        // The reference agrees with itself in 49 % of pairs; the candidate with it in
        // 47 %: within the margin.
        let t = significantly_below(share(846, 1800), share(294, 600), 0.05, 0.95).unwrap();
        assert!(!t.below, "{t:?}");
        // Even 5 points below the floor is the margin, not a failure.
        let t = significantly_below(share(792, 1800), share(294, 600), 0.05, 0.95).unwrap();
        assert!(!t.below, "{t:?}");
        // A candidate above its floor is never below it.
        let t = significantly_below(share(1260, 1800), share(294, 600), 0.0, 0.99).unwrap();
        assert!(!t.below && t.z < 0.0, "{t:?}");
    }

    #[test]
    fn a_few_pairs_do_not_decide_and_none_cannot() {
        // Three disagreeing pairs against a perfect floor of three: not enough evidence.
        let t = significantly_below(share(0, 3), share(3, 3), 0.05, 0.99).unwrap();
        assert!(!t.below, "{t:?}");
        assert_eq!(
            significantly_below(share(0, 0), share(3, 3), 0.05, 0.95),
            None
        );
        assert_eq!(
            significantly_below(share(3, 3), share(0, 0), 0.05, 0.95),
            None
        );
    }

    #[test]
    fn higher_confidence_needs_more_evidence() {
        let (c, f) = (share(170, 200), share(60, 60));
        let at = |conf| significantly_below(c, f, 0.05, conf).unwrap().below;
        assert!(at(0.90));
        assert!(!at(0.9999));
    }

    #[test]
    fn judgement_fails_closed_without_a_floor() {
        let mut d = Differential::new("p", vec![ANSWER.into()], 0.05, 0.95);
        let one = vec![vec![Some(1)]];
        d.add_case("c1", &one, &[vec![Some(1)], vec![Some(1)]]);
        d.finish();
        assert_eq!(d.fields[0].verdict, FieldVerdict::NoFloor);
        assert_eq!(d.judgement(), Err(Undecided::NoFloor));

        let mut d = Differential::new("p", vec![ANSWER.into()], 0.05, 0.95);
        for i in 0..100 {
            let reference = vec![vec![Some(1)]; 3];
            let candidate = vec![vec![Some(if i % 5 == 0 { 2 } else { 1 })]; 3];
            d.add_case(&format!("c{i:03}"), &reference, &candidate);
        }
        d.finish();
        assert_eq!(d.judgement(), Ok(true));
        assert_eq!(d.worst_cases.len(), MAX_CASES);
        assert_eq!(d.worst_cases[0].case, "c000");
        assert_eq!(d.worst_cases[0].fields, [ANSWER]);
        // Its pairs are counted per field, not over all fields at once.
        assert_eq!(
            d.worst_cases[0].per_field,
            [FieldDisagreement {
                field: ANSWER.into(),
                disagreeing: 9,
                pairs: 9,
                ..FieldDisagreement::default()
            }]
        );
        d.unavailable = Some("stopped".into());
        assert_eq!(d.judgement(), Err(Undecided::Unavailable));
    }
}

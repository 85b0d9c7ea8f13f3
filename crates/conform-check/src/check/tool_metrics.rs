//! K2 Vendor Verifier's two measures of tool calling, per (suite, provider), and the
//! suite's thresholds on them.
//!
//! - **Trigger**: did the model call a tool when, and only when, the case expects one?
//!   Over the answered calls of cases whose request declares tools: a true positive
//!   calls where a call is expected, a false positive calls where none is, a false
//!   negative makes no structured call where one is expected (a call written as text is
//!   not one). Precision `tp / (tp + fp)`, recall `tp / (tp + fn)`, F1 their harmonic mean.
//! - **Schema accuracy**: the share of the calls made that name a declared tool and whose
//!   arguments validate against its `parameters`.
//!
//! A measure with nothing to count (no call made, no call expected) is undefined, and an
//! undefined measure fails no threshold. With repeats (more than one answer per case),
//! each proportion is judged by the lower bound of its Wilson interval at the suite's
//! confidence, as a case's pass rate is, and F1 by the harmonic mean of the precision
//! and recall bounds: a threshold is met only when the evidence says so with that
//! confidence.

use serde::Serialize;

use super::stability::{DEFAULT_CONFIDENCE, wilson_lower_bound};
use super::tool_calls::ToolSummary;
use conform_config::ToolThresholds;

/// The measures of one (suite, provider) and what the suite demands of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ToolMetrics {
    /// Answers counted: those to requests that declare tools.
    pub answers: u64,
    /// Answers that called a tool where the case expected one.
    pub true_positives: u64,
    /// Answers that called a tool where the case expected none.
    pub false_positives: u64,
    /// Answers that called no tool where the case expected one.
    pub false_negatives: u64,
    /// Answers that called no tool where the case expected none.
    pub true_negatives: u64,
    /// Calls made, and those with valid arguments.
    pub calls: u64,
    /// Calls whose arguments validate against the tool's `parameters`.
    pub valid_calls: u64,
    /// Of the answers that called a tool, the share that should have.
    pub trigger_precision: Option<f64>,
    /// Of the answers that should have called a tool, the share that did.
    pub trigger_recall: Option<f64>,
    /// The harmonic mean of precision and recall.
    pub trigger_f1: Option<f64>,
    /// Of the calls made, the share whose arguments validate.
    pub schema_accuracy: Option<f64>,
    /// The Wilson lower bounds the thresholds are judged by, when there are repeats.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lower_bounds: Option<Bounds>,
    /// What the suite demands of these measures.
    pub thresholds: ToolThresholds,
    #[serde(skip)]
    repeats: u32,
    #[serde(skip)]
    confidence: f64,
}

/// The measures' Wilson lower bounds, as an allowlist entry keeps them.
pub use conform_allowlist::Bounds;

impl ToolMetrics {
    /// Measures judged against `thresholds`, by their Wilson lower bounds at
    /// `confidence` when every case is answered `repeats > 1` times.
    pub fn new(thresholds: ToolThresholds, repeats: u32, confidence: Option<f64>) -> Self {
        ToolMetrics {
            thresholds,
            repeats,
            confidence: confidence.unwrap_or(DEFAULT_CONFIDENCE),
            ..ToolMetrics::default()
        }
    }

    /// Adds one answer.
    pub fn add(&mut self, summary: &ToolSummary) {
        let Some(expected) = summary.expected_call else {
            return;
        };
        self.answers += 1;
        match (expected, summary.called) {
            (true, true) => self.true_positives += 1,
            (false, true) => self.false_positives += 1,
            (true, false) => self.false_negatives += 1,
            (false, false) => self.true_negatives += 1,
        }
        self.calls += u64::from(summary.calls);
        self.valid_calls += u64::from(summary.valid_calls);
        self.refresh();
    }

    fn refresh(&mut self) {
        let (tp, fp, fn_) = (
            self.true_positives,
            self.false_positives,
            self.false_negatives,
        );
        self.trigger_precision = share(tp, tp + fp);
        self.trigger_recall = share(tp, tp + fn_);
        self.trigger_f1 = f1(self.trigger_precision, self.trigger_recall);
        self.schema_accuracy = share(self.valid_calls, self.calls);
        if self.repeats > 1 {
            let bound = |k: u64, n: u64| {
                (n > 0).then(|| {
                    wilson_lower_bound(
                        u32::try_from(k).unwrap_or(u32::MAX),
                        u32::try_from(n).unwrap_or(u32::MAX),
                        self.confidence,
                    )
                })
            };
            let precision = bound(tp, tp + fp);
            let recall = bound(tp, tp + fn_);
            self.lower_bounds = Some(Bounds {
                confidence: self.confidence,
                trigger_precision: precision,
                trigger_recall: recall,
                trigger_f1: f1(precision, recall),
                schema_accuracy: bound(self.valid_calls, self.calls),
            });
        }
    }

    /// The thresholds not met.
    pub fn failures(&self) -> Vec<Measure> {
        let judged = match &self.lower_bounds {
            Some(b) => [
                b.trigger_precision,
                b.trigger_recall,
                b.trigger_f1,
                b.schema_accuracy,
            ],
            None => [
                self.trigger_precision,
                self.trigger_recall,
                self.trigger_f1,
                self.schema_accuracy,
            ],
        };
        let t = &self.thresholds;
        let limits = [
            (t.min_trigger_precision, Measure::TriggerPrecision),
            (t.min_trigger_recall, Measure::TriggerRecall),
            (t.min_trigger_f1, Measure::TriggerF1),
            (t.min_schema_accuracy, Measure::SchemaAccuracy),
        ];
        limits
            .iter()
            .zip(judged)
            .filter_map(|((min, measure), value)| match (min, value) {
                (Some(min), Some(value)) if value < *min => Some(*measure),
                _ => None,
            })
            .collect()
    }
}

/// One of K2 Vendor Verifier's measures a suite may set a threshold on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Measure {
    /// See [`ToolMetrics::trigger_precision`].
    TriggerPrecision,
    /// See [`ToolMetrics::trigger_recall`].
    TriggerRecall,
    /// See [`ToolMetrics::trigger_f1`].
    TriggerF1,
    /// See [`ToolMetrics::schema_accuracy`].
    SchemaAccuracy,
}

impl Measure {
    /// The verdict reason of a threshold not met.
    pub fn below_threshold(self) -> &'static str {
        match self {
            Measure::TriggerPrecision => "tool_trigger_precision_below_threshold",
            Measure::TriggerRecall => "tool_trigger_recall_below_threshold",
            Measure::TriggerF1 => "tool_trigger_f1_below_threshold",
            Measure::SchemaAccuracy => "tool_schema_accuracy_below_threshold",
        }
    }
}

fn share(k: u64, n: u64) -> Option<f64> {
    (n > 0).then(|| k as f64 / n as f64)
}

fn f1(precision: Option<f64>, recall: Option<f64>) -> Option<f64> {
    match (precision, recall) {
        (Some(p), Some(r)) if p + r > 0.0 => Some(2.0 * p * r / (p + r)),
        (Some(_), Some(_)) => Some(0.0),
        _ => None,
    }
}

/// What an allowlist entry keeps of the measures.
impl From<&ToolMetrics> for conform_allowlist::ToolEvidence {
    fn from(m: &ToolMetrics) -> Self {
        conform_allowlist::ToolEvidence {
            answers: m.answers,
            calls: m.calls,
            trigger_precision: m.trigger_precision,
            trigger_recall: m.trigger_recall,
            trigger_f1: m.trigger_f1,
            schema_accuracy: m.schema_accuracy,
            lower_bounds: m.lower_bounds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(expected: bool, called: bool, calls: u32, valid: u32) -> ToolSummary {
        ToolSummary {
            expected_call: Some(expected),
            called,
            calls,
            valid_calls: valid,
        }
    }

    #[test]
    fn trigger_and_schema_measures_count_like_k2_vendor_verifier() {
        let thresholds = ToolThresholds {
            min_trigger_f1: Some(0.9),
            min_schema_accuracy: Some(0.9),
            ..ToolThresholds::default()
        };
        let mut m = ToolMetrics::new(thresholds, 1, None);
        // 8 expected and made (one with bad arguments), 1 expected and missed, 1 made
        // where none was expected, 10 correctly without a call.
        for _ in 0..7 {
            m.add(&answer(true, true, 1, 1));
        }
        m.add(&answer(true, true, 2, 1));
        m.add(&answer(true, false, 0, 0));
        m.add(&answer(false, true, 1, 1));
        for _ in 0..10 {
            m.add(&answer(false, false, 0, 0));
        }
        // Requests without tools are not counted.
        m.add(&ToolSummary {
            expected_call: None,
            called: false,
            calls: 0,
            valid_calls: 0,
        });
        assert_eq!(m.answers, 20);
        assert_eq!(
            (m.true_positives, m.false_positives, m.false_negatives),
            (8, 1, 1)
        );
        assert!((m.trigger_precision.unwrap() - 8.0 / 9.0).abs() < 1e-12);
        assert!((m.trigger_recall.unwrap() - 8.0 / 9.0).abs() < 1e-12);
        assert!((m.trigger_f1.unwrap() - 8.0 / 9.0).abs() < 1e-12);
        assert!((m.schema_accuracy.unwrap() - 9.0 / 10.0).abs() < 1e-12);
        assert_eq!(m.failures(), [Measure::TriggerF1]);
    }

    #[test]
    fn with_repeats_the_wilson_bound_decides() {
        let thresholds = ToolThresholds {
            min_schema_accuracy: Some(0.9),
            ..ToolThresholds::default()
        };
        // 10 of 10 valid: the point estimate is 1.0, but 10 calls cannot show 0.9 with
        // 95% confidence (the bound is 0.72).
        let mut m = ToolMetrics::new(thresholds, 3, Some(0.95));
        for _ in 0..10 {
            m.add(&answer(true, true, 1, 1));
        }
        assert_eq!(m.schema_accuracy, Some(1.0));
        let bound = m.lower_bounds.unwrap().schema_accuracy.unwrap();
        assert!((bound - 0.722_46).abs() < 1e-4, "{bound}");
        assert_eq!(m.failures(), [Measure::SchemaAccuracy]);
        // 200 of 200 can.
        for _ in 0..190 {
            m.add(&answer(true, true, 1, 1));
        }
        assert!(m.failures().is_empty(), "{:?}", m.lower_bounds);
    }

    #[test]
    fn undefined_measures_fail_no_threshold() {
        let thresholds = ToolThresholds {
            min_trigger_precision: Some(1.0),
            min_schema_accuracy: Some(1.0),
            ..ToolThresholds::default()
        };
        let mut m = ToolMetrics::new(thresholds, 1, None);
        m.add(&answer(false, false, 0, 0));
        assert_eq!(m.trigger_precision, None);
        assert_eq!(m.schema_accuracy, None);
        assert!(m.failures().is_empty());
    }
}

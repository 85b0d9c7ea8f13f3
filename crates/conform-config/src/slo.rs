//! Latency objectives (`max_p95_latency`, `max_p95_ttft`), in a provider file or a
//! suite's `suite.toml`: above them the verdict is nonconformant (`slo_latency`,
//! `slo_ttft`), however right the answers were. A fallback that answers too slowly for
//! the user who is waiting has not kept the contract.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The bounds a pair's 95th percentiles must stay under; unset bounds are not checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slo {
    /// The 95th percentile of the whole call, first byte sent to last byte read.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "optional_duration"
    )]
    pub max_p95_latency: Option<Duration>,
    /// The 95th percentile of the time to the first piece of the answer (for an answer
    /// that is not streamed, the whole answer).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "optional_duration"
    )]
    pub max_p95_ttft: Option<Duration>,
}

impl Slo {
    /// No objective is set.
    pub fn is_empty(&self) -> bool {
        self.max_p95_latency.is_none() && self.max_p95_ttft.is_none()
    }

    /// Both sets of bounds at once: where both set one, the tighter.
    pub fn and(self, other: Slo) -> Slo {
        let tighter = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Slo {
            max_p95_latency: tighter(self.max_p95_latency, other.max_p95_latency),
            max_p95_ttft: tighter(self.max_p95_ttft, other.max_p95_ttft),
        }
    }

    /// `(field, problem)` for every bound that is zero: nothing answers in no time.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        [
            ("max_p95_latency", self.max_p95_latency),
            ("max_p95_ttft", self.max_p95_ttft),
        ]
        .into_iter()
        .filter(|(_, d)| d.is_some_and(|d| d.is_zero()))
        .map(|(field, _)| {
            (
                field,
                "must be more than zero, e.g. \"5s\" (leave it out for no bound)".to_string(),
            )
        })
        .collect()
    }
}

/// An optional duration written as "5s", "1500ms".
pub(crate) mod optional_duration {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&humantime::format_duration(*d).to_string()),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map(Some).map_err(|e| {
            serde::de::Error::custom(format!(
                "`{text}` is not a duration ({e}); write e.g. \"5s\" or \"1500ms\""
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tighter_bound_wins_and_zero_is_refused() {
        let provider = Slo {
            max_p95_latency: Some(Duration::from_secs(5)),
            max_p95_ttft: None,
        };
        let suite = Slo {
            max_p95_latency: Some(Duration::from_secs(3)),
            max_p95_ttft: Some(Duration::from_secs(1)),
        };
        assert_eq!(provider.and(suite), suite);
        assert_eq!(provider.and(Slo::default()), provider);
        let zero = Slo {
            max_p95_latency: Some(Duration::ZERO),
            max_p95_ttft: None,
        };
        assert_eq!(zero.problems()[0].0, "max_p95_latency");
        assert!(Slo::default().is_empty() && suite.problems().is_empty());
    }
}

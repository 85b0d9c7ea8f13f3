//! `conform.toml` at the project root: the settings every run and every reader of the
//! project's allowlist holds to. The file is optional; without it the defaults hold.
//!
//! ```toml
//! [evidence]
//! max_valid_for = "30d"              # the longest a grant may last after its first call
//! max_undetected_failure_rate = 0.05 # every permit must rule out a higher failure rate
//! max_undetected_drift = 0.05        # and a comparison with a reference a larger drift
//! ```

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::diagnostic::{self, Diagnostic, Diagnostics};

/// The file's name, at the project root.
pub const FILE: &str = "conform.toml";

/// How long a grant may last after its first call when `conform.toml` does not say.
pub const DEFAULT_MAX_VALID_FOR: Duration = Duration::from_secs(30 * 24 * 3600);

/// The project's settings, defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// The longest `--valid-for` a run or merge may grant, counted from the evidence's
    /// first call; readers deny an entry valid for longer.
    pub max_valid_for: Duration,
    /// The failure rate every permit must rule out at 95 % confidence (the default of
    /// `conform gate --max-undetected-failure-rate`); `None`: the reader crate's
    /// default ([`conform_allowlist::DEFAULT_MAX_UNDETECTED_FAILURE_RATE`]).
    pub max_undetected_failure_rate: Option<f64>,
    /// The drift from a reference every permit judged against one must rule out (the
    /// default of `conform gate --max-undetected-drift`); `None`: none is required.
    pub max_undetected_drift: Option<f64>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_valid_for: DEFAULT_MAX_VALID_FOR,
            max_undetected_failure_rate: None,
            max_undetected_drift: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    evidence: EvidenceTable,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EvidenceTable {
    #[serde(default, with = "super::slo::optional_duration")]
    max_valid_for: Option<Duration>,
    max_undetected_failure_rate: Option<f64>,
    max_undetected_drift: Option<f64>,
}

impl Settings {
    /// Reads `path`; a missing file is the defaults, a file that does not parse or holds
    /// a value out of range is every problem with its line and field.
    pub fn load(path: &Path) -> Result<Settings, Diagnostics> {
        match std::fs::read_to_string(path) {
            Ok(source) => Self::parse(path, &source),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Settings::default()),
            Err(e) => Err(Diagnostics(vec![Diagnostic::new(
                path,
                format!("cannot read: {e}"),
            )])),
        }
    }

    /// The settings in `source`, read from `path`, with every problem found.
    pub fn parse(path: &Path, source: &str) -> Result<Settings, Diagnostics> {
        let file: File = toml::from_str(source)
            .map_err(|e| Diagnostics(vec![diagnostic::from_toml(path, source, &e)]))?;
        let mut problems = Diagnostics::default();
        let at = |field: &str, message: &str| {
            Diagnostic::new(path, message)
                .field(format!("evidence.{field}"))
                .near(source, field)
        };
        let e = file.evidence;
        if e.max_valid_for.is_some_and(|d| d.is_zero()) {
            problems.push(at(
                "max_valid_for",
                "must be longer than zero, e.g. \"30d\"",
            ));
        }
        for (field, value) in [
            ("max_undetected_failure_rate", e.max_undetected_failure_rate),
            ("max_undetected_drift", e.max_undetected_drift),
        ] {
            if value.is_some_and(|r| !(r > 0.0 && r < 1.0)) {
                problems.push(at(field, "must be a share in (0, 1), e.g. 0.05"));
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Settings {
            max_valid_for: e.max_valid_for.unwrap_or(DEFAULT_MAX_VALID_FOR),
            max_undetected_failure_rate: e.max_undetected_failure_rate,
            max_undetected_drift: e.max_undetected_drift,
        })
    }

    /// What these settings require of every permit, for the reader crate's decision.
    pub fn bounds(&self) -> conform_allowlist::ProjectBounds {
        conform_allowlist::ProjectBounds {
            max_undetected_failure_rate: self.max_undetected_failure_rate,
            max_undetected_drift: self.max_undetected_drift,
            max_valid_for: self.max_valid_for,
        }
    }

    /// The failure rate a conformant verdict must rule out for a suite that states none:
    /// the project's, else the reader crate's default, so that a run grants only what
    /// every reader of the project permits.
    pub fn failure_rate_bound(&self) -> f64 {
        self.max_undetected_failure_rate
            .unwrap_or(conform_allowlist::DEFAULT_MAX_UNDETECTED_FAILURE_RATE)
    }
}

/// A grant asked to stay valid longer than the project allows; the message says what
/// to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--valid-for {} is longer than the project allows ({}): evidence goes stale as providers change; raise `max_valid_for` under [evidence] in {file} if you mean it",
    days(*.asked),
    days(*.allowed),
    file = FILE
)]
pub struct TooLong {
    /// The validity asked for.
    pub asked: Duration,
    /// The longest the project allows.
    pub allowed: Duration,
}

impl Settings {
    /// Whether a grant may be valid for `valid_for` after its first call: no longer than
    /// `max_valid_for`.
    pub fn allow_valid_for(&self, valid_for: Duration) -> Result<(), TooLong> {
        if valid_for <= self.max_valid_for {
            return Ok(());
        }
        Err(TooLong {
            asked: valid_for,
            allowed: self.max_valid_for,
        })
    }
}

/// A validity as people write it: days, hours, minutes and seconds (`365d`, `1d 12h`),
/// never the months and years humantime counts in 30.44 and 365.25 days, which turn
/// `365d` into `11months 30days 3h 50m 24s`.
pub fn days(d: Duration) -> String {
    const UNITS: [(u64, &str); 4] = [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")];
    let mut left = d.as_secs();
    let mut parts = Vec::new();
    for (size, unit) in UNITS {
        if left >= size {
            parts.push(format!("{}{unit}", left / size));
            left %= size;
        }
    }
    match parts.is_empty() {
        true => format!("{}ms", d.as_millis()),
        false => parts.join(" "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let settings = Settings::load(&dir.path().join(FILE)).unwrap();
        assert_eq!(settings, Settings::default());
        assert_eq!(settings.max_valid_for, Duration::from_secs(30 * 86_400));
    }

    #[test]
    fn validity_is_capped_at_the_setting() {
        let settings = Settings::default();
        assert!(
            settings
                .allow_valid_for(Duration::from_secs(7 * 86_400))
                .is_ok()
        );
        assert!(settings.allow_valid_for(DEFAULT_MAX_VALID_FOR).is_ok());
        let err = settings
            .allow_valid_for(Duration::from_secs(36_500 * 86_400))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--valid-for 36500d is longer") && err.contains("(30d)"),
            "{err}"
        );
    }

    /// `365d` is said as `365d`, not as humantime's months and years.
    #[test]
    fn a_validity_is_said_in_days_as_it_was_given() {
        let parse = |s| humantime::parse_duration(s).unwrap();
        for given in ["365d", "30d", "1d 12h", "7d 3h 20m 5s", "90m"] {
            let expected = if given == "90m" { "1h 30m" } else { given };
            assert_eq!(days(parse(given)), expected);
        }
        let err = (Settings::default().allow_valid_for(parse("365d")))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--valid-for 365d is longer than the project allows (30d)"),
            "{err}"
        );
    }

    #[test]
    fn values_are_read_and_problems_are_placed() {
        let path = Path::new("conform.toml");
        let s = Settings::parse(
            path,
            "[evidence]\nmax_valid_for = \"90d\"\nmax_undetected_failure_rate = 0.05\n",
        )
        .unwrap();
        assert_eq!(s.max_valid_for, Duration::from_secs(90 * 86_400));
        assert_eq!(s.max_undetected_failure_rate, Some(0.05));
        let err =
            Settings::parse(path, "[evidence]\nmax_undetected_failure_rate = 5\n").unwrap_err();
        assert_eq!(err.0[0].line, Some(2), "{err}");
        let err = Settings::parse(path, "[evidence]\nmax_valid = \"9d\"\n").unwrap_err();
        assert_eq!(err.0[0].field.as_deref(), Some("max_valid"), "{err}");
    }
}

//! `conform probe PROVIDER` around the probes themselves: what the suites' schemas use and
//! what probing them costs ([`Plan`]), then the report, `probes.json` and the findings
//! among the project's providers ([`Done`]). Typed, so a Rust caller gets what the
//! command prints; `Display` is the text a person reads.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use super::catalogue::Probe;
use super::file::{self, FileError, Probes, Update};
use super::findings::{self, Finding};
use super::{Cost, Outcome, Support, inventory};
use conform_config::{Kind, ProviderConfig, StructuredOutput, Workspace};

/// What a probe of one provider would send, before anything is.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The suites whose schemas are probed.
    pub suites: Vec<String>,
    /// Every keyword those schemas use.
    pub used: Vec<String>,
    /// One probe for each keyword used that a probe tells apart.
    pub probes: Vec<Probe>,
    /// Structure and annotations, which no probe tells apart.
    pub not_probed: Vec<String>,
    /// The most the probe can send, for the plan's print and `--budget`.
    pub cost: Cost,
    /// The provider's name.
    pub provider: String,
    /// The model probed.
    pub model: String,
    /// Whether the provider is a simulation.
    pub simulated: bool,
    /// The provider's `structured_output` when it sends no schema at all.
    pub sends_no_schema: Option<StructuredOutput>,
}

impl Plan {
    /// The probes of the keywords `workspace`'s suites use, answer schemas and tool
    /// parameters both (a fallback meets both), for `config` as it will be sent.
    pub fn new(workspace: &Workspace, config: &ProviderConfig, repeats: u32) -> Plan {
        let schemas: Vec<_> = (workspace.suites.iter())
            .flat_map(inventory::suite_schemas)
            .collect();
        let used = inventory::keywords(schemas.iter().map(|s| &s.schema));
        let (probes, not_probed) = super::split_probeable(&used);
        Plan {
            suites: workspace.suites.iter().map(|s| s.name.clone()).collect(),
            cost: super::cost(&probes, repeats, config.max_output_tokens),
            used,
            probes,
            not_probed,
            provider: config.name.clone(),
            model: config.model.clone(),
            simulated: config.is_simulated(),
            sends_no_schema: matches!(
                config.structured_output,
                StructuredOutput::JsonObject | StructuredOutput::Prompt
            )
            .then_some(config.structured_output),
        }
    }
}

/// The inventory and the cost; "nothing to probe" when no keyword has a probe.
impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "keywords the schemas of {} use: {}",
            self.suites.join(", "),
            self.used.len()
        )?;
        let probed: Vec<&str> = self.probes.iter().map(|p| p.keyword).collect();
        writeln!(
            f,
            "  probed: {}",
            if probed.is_empty() {
                "none".to_string()
            } else {
                probed.join(", ")
            }
        )?;
        if !self.not_probed.is_empty() {
            writeln!(
                f,
                "  not probed (structure and annotations, which every structured-output mode needs or none enforces): {}",
                self.not_probed.join(", ")
            )?;
        }
        if self.probes.is_empty() {
            return writeln!(f, "nothing to probe");
        }
        writeln!(
            f,
            "cost: at most {} requests to `{}` ({}), about {} prompt tokens and at most {} output tokens{}",
            self.cost.requests,
            self.provider,
            self.model,
            self.cost.prompt_tokens,
            self.cost.output_tokens,
            if self.simulated {
                " (a simulation: free)"
            } else {
                ""
            }
        )?;
        if let Some(mode) = self.sends_no_schema {
            writeln!(
                f,
                "note: structured_output = \"{}\" sends no schema: no keyword can be enforced, so none will be",
                serde_json::to_value(mode)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            )?;
        }
        Ok(())
    }
}

/// Why a probe's results could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The report's run folder could not be created.
    #[error("cannot create {}: {source}", path.display())]
    CreateDir {
        /// The folder.
        path: PathBuf,
        /// What creating it failed with.
        source: std::io::Error,
    },
    /// The report could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The report.
        path: PathBuf,
        /// What writing it failed with.
        source: std::io::Error,
    },
    /// `probes.json` could not be read or updated.
    #[error(transparent)]
    File(#[from] FileError),
}

/// `reports/<run-id>/probe.json` (`conform.probe-report/v1`).
#[derive(Debug, Clone, Serialize)]
pub struct Report<'a> {
    /// `conform.probe-report/v1`.
    pub format: &'static str,
    /// The probe run.
    pub run_id: &'a str,
    /// When the report was written, RFC 3339 UTC.
    pub at: &'a str,
    /// The provider's name.
    pub provider: &'a str,
    /// The model probed.
    pub model: &'a str,
    /// The provider's kind as configured.
    pub kind: Kind,
    /// The wire format the kind speaks.
    pub wire: Kind,
    /// The configuration's digest (never a secret), as `probes.json` keeps it.
    pub provider_digest: String,
    /// The suites whose schemas were probed.
    pub suites: &'a [String],
    /// How often each prompt was repeated.
    pub repeats: u32,
    /// The output cap of each request.
    pub max_output_tokens: u32,
    /// Requests the probe sent.
    pub requests_sent: u64,
    /// One outcome per keyword probed.
    pub keywords: &'a [Outcome],
    /// Keywords the suites use that no probe tells apart.
    pub not_probed: &'a [String],
    /// keyword → provider → support, for every provider on file.
    pub matrix: Map<String, Value>,
}

/// A finished probe, to keep: where, as which run, and against which project.
#[derive(Debug, Clone, Copy)]
pub struct Keep<'a> {
    /// The provider as its file says: the results are for it, whatever output limit
    /// or simulation address the probes used.
    pub as_written: &'a ProviderConfig,
    /// The provider as probed.
    pub probed: &'a ProviderConfig,
    /// How often each prompt was repeated.
    pub repeats: u32,
    /// Requests sent, for the report.
    pub requests_sent: u64,
    /// The probe run, which names its report folder.
    pub run_id: &'a str,
    /// The reports folder.
    pub reports: &'a Path,
    /// The allowlist, beside which `probes.json` lives.
    pub allowlist: &'a Path,
    /// Every provider and suite of the project, for the findings.
    pub project: &'a Workspace,
    /// Findings only against this primary.
    pub primary: Option<&'a str>,
}

/// What a probe left: the report, `probes.json` as it now reads, and the findings.
#[derive(Debug, Clone)]
pub struct Done {
    /// The run's `probe.json`.
    pub report: PathBuf,
    /// `probes.json`.
    pub probes_file: PathBuf,
    /// `probes.json` as it reads after this probe's results are merged.
    pub on_file: Probes,
    /// The provider probed.
    pub probed: String,
    /// The probes that were run.
    pub probes: Vec<Probe>,
    /// Their outcomes, in the same order.
    pub outcomes: Vec<Outcome>,
    /// (schema file, finding) of the probed provider against the project's others.
    pub findings: Vec<(String, Finding)>,
    /// Requests the probe sent.
    pub requests_sent: u64,
}

impl Done {
    /// Writes the report and merges the outcomes into `probes.json`, then looks for the
    /// keywords one provider of the project enforces and another lets through.
    pub fn keep(plan: &Plan, outcomes: Vec<Outcome>, keep: &Keep<'_>) -> Result<Done, ProbeError> {
        let dir = keep.reports.join(keep.run_id);
        std::fs::create_dir_all(&dir).map_err(|source| ProbeError::CreateDir {
            path: dir.clone(),
            source,
        })?;
        let report = dir.join("probe.json");
        let now = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        let probes_file = file::beside(keep.allowlist);
        let on_file = file::update(
            &probes_file,
            &Update {
                provider: keep.as_written,
                outcomes: &outcomes,
                probed_at: now.clone(),
                run_id: keep.run_id,
                report: report.display().to_string(),
            },
        )?;
        let config = keep.probed;
        let body = Report {
            format: "conform.probe-report/v1",
            run_id: keep.run_id,
            at: &now,
            provider: &config.name,
            model: &config.model,
            kind: config.kind,
            wire: config.wire_kind(),
            provider_digest: keep.as_written.digest(),
            suites: &plan.suites,
            repeats: keep.repeats,
            max_output_tokens: config.max_output_tokens,
            requests_sent: keep.requests_sent,
            keywords: &outcomes,
            not_probed: &plan.not_probed,
            matrix: matrix_json(&on_file, &plan.probes),
        };
        let text = serde_json::to_string_pretty(&body).map_err(|e| ProbeError::Write {
            path: report.clone(),
            source: e.into(),
        })?;
        std::fs::write(&report, format!("{text}\n")).map_err(|source| ProbeError::Write {
            path: report.clone(),
            source,
        })?;

        let providers: Vec<&ProviderConfig> = keep.project.providers.iter().collect();
        let mut found = Vec::new();
        for suite in &keep.project.suites {
            for f in findings::ignored(&on_file, &suite.schema, &providers, keep.primary) {
                if f.candidate == config.name || f.primary == config.name {
                    found.push((suite.schema_file.display().to_string(), f));
                }
            }
        }
        Ok(Done {
            report,
            probes_file,
            on_file,
            probed: config.name.clone(),
            probes: plan.probes.clone(),
            outcomes,
            findings: found,
            requests_sent: keep.requests_sent,
        })
    }

    /// A keyword could not be classified.
    pub fn inconclusive(&self) -> bool {
        (self.outcomes.iter()).any(|o| o.support == Support::Inconclusive)
    }
}

/// The matrix, each keyword's outcome, the findings and where it all went.
impl fmt::Display for Done {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f)?;
        f.write_str(&matrix(&self.on_file, &self.probes, &self.probed))?;
        let (inconclusive, classified): (Vec<&Outcome>, Vec<&Outcome>) =
            (self.outcomes.iter()).partition(|o| o.support == Support::Inconclusive);
        for o in classified {
            writeln!(f, "  {}: {} ({})", o.keyword, o.support.as_str(), o.detail)?;
        }
        for o in inconclusive {
            writeln!(f, "  {}: inconclusive ({})", o.keyword, o.detail)?;
        }
        if !self.findings.is_empty() {
            writeln!(f)?;
        }
        for (file, finding) in &self.findings {
            writeln!(f, "{file}: {}: {}", finding.path, finding.message())?;
        }
        writeln!(
            f,
            "\nprobe: {} ({} requests sent); probes: {}",
            self.report.display(),
            self.requests_sent,
            self.probes_file.display()
        )
    }
}

/// keyword → provider → support, for every provider on file.
fn matrix_json(on_file: &Probes, probes: &[Probe]) -> Map<String, Value> {
    (probes.iter())
        .map(|p| {
            let row: Map<String, Value> = (on_file.providers.iter())
                .filter_map(|(name, pp)| {
                    let k = pp.keywords.get(p.keyword)?;
                    Some((name.clone(), Value::from(k.support.as_str())))
                })
                .collect();
            (p.keyword.to_string(), Value::Object(row))
        })
        .collect()
}

/// Keyword × provider: the probed provider first, then every other provider on file that
/// was probed for one of these keywords.
fn matrix(on_file: &Probes, probes: &[Probe], probed: &str) -> String {
    let mut columns = vec![probed.to_string()];
    let others: BTreeSet<&String> = (on_file.providers.iter())
        .filter(|(name, p)| {
            *name != probed && probes.iter().any(|k| p.keywords.contains_key(k.keyword))
        })
        .map(|(name, _)| name)
        .collect();
    columns.extend(others.into_iter().cloned());
    let width = (probes.iter().map(|p| p.keyword.len()))
        .max()
        .unwrap_or(7)
        .max(7);
    let cell = |name: &String| name.len().max(12);
    let mut out = format!("{:width$}", "keyword");
    for c in &columns {
        out.push_str(&format!("  {:w$}", c, w = cell(c)));
    }
    out.push('\n');
    for p in probes {
        out.push_str(&format!("{:width$}", p.keyword));
        for c in &columns {
            let support = (on_file.providers.get(c))
                .and_then(|pp| pp.keywords.get(p.keyword))
                .map_or("—", |k| k.support.as_str());
            out.push_str(&format!("  {:w$}", support, w = cell(c)));
        }
        out.push('\n');
    }
    out
}

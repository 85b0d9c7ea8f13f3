//! `GET /v1/gate?suite=S&provider=P`: the failover gate's decision asked over HTTP, for a
//! gateway choosing its fallbacks at call time. Not part of the orchestrator contract.
//!
//! The answer is `conform gate --format json`'s ([`GateAnswer`]), permitted or denied,
//! both 200: the question was answered. It is the decision failover takes
//! ([`AllowlistGate::decide`](super::gate::AllowlistGate::decide)), read from the file
//! as it is now and held to the ledger's newest statements, so a revocation written to
//! the file is seen by the very next request. A question that cannot be asked is a
//! problem naming its `parameter`: 400 when it is missing or malformed, 404 when the
//! suite or provider is not the project's.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use conform_gate::allowlist::Reason;
use conform_gate::allowlist::inspect::GateAnswer;

use super::App;
use super::problem::Problem;
use super::routes::{MAX_NAME_LEN, json};

/// The parameters the question takes, each exactly once.
const PARAMETERS: [&str; 2] = ["suite", "provider"];

pub(crate) async fn gate(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
) -> Result<Response, Problem> {
    let [suite, provider] = parameters(query.as_deref().unwrap_or(""))?;
    if app.config.project.is_none() && app.config.providers.get(&provider).is_none() {
        // Without a project the file alone decides, and names no provider as unknown:
        // the configured ones are those failover can reach.
        return Err(unknown("provider", &provider, "is not configured"));
    }
    let now = time::OffsetDateTime::now_utc();
    let decision = app.allowlist.decide(&suite, &provider, now).await;
    if let Err(denial) = &decision {
        match denial.reason {
            Reason::UnknownSuite => return Err(unknown("suite", &suite, &denial.detail)),
            Reason::UnknownProvider => {
                return Err(unknown("provider", &provider, &denial.detail));
            }
            _ => {}
        }
    }
    let answer = GateAnswer::of(decision, &suite, &provider);
    let body = serde_json::to_value(&answer)
        .map_err(|e| Problem::unavailable(format!("the answer cannot be written: {e}")))?;
    Ok(json(StatusCode::OK, &body))
}

/// `suite` and `provider` from the query string: percent-decoded, each present once,
/// non-empty and at most [`MAX_NAME_LEN`] characters, and nothing else.
fn parameters(query: &str) -> Result<[String; 2], Problem> {
    let mut found: [Option<String>; 2] = [None, None];
    // Percent-decoded with `+` as a space, as browsers and `urllib` encode it; what is
    // not UTF-8 decodes to U+FFFD, a name no project has.
    for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
        let Some(i) = PARAMETERS.iter().position(|p| *p == name) else {
            return Err(invalid(
                &name,
                format!("unknown parameter `{name}`; the gate takes only suite and provider"),
            ));
        };
        if found[i].is_some() {
            return Err(invalid(&name, format!("`{name}` is given more than once")));
        }
        if value.is_empty() || value.chars().count() > MAX_NAME_LEN {
            return Err(invalid(
                &name,
                format!("`{name}` must be a non-empty name of at most {MAX_NAME_LEN} characters"),
            ));
        }
        found[i] = Some(value.into_owned());
    }
    let [suite, provider] = found;
    let missing = |name: &str| {
        invalid(
            name,
            format!("`{name}` is required: GET /v1/gate?suite=SUITE&provider=PROVIDER"),
        )
    };
    Ok([
        suite.ok_or_else(|| missing("suite"))?,
        provider.ok_or_else(|| missing("provider"))?,
    ])
}

fn invalid(parameter: &str, detail: impl Into<String>) -> Problem {
    Problem::invalid_request(detail)
        .with("parameter", parameter)
        .with("permitted", false)
}

/// 404: the project has no such suite or provider. `permitted: false` too, for a caller
/// that reads only that.
fn unknown(parameter: &'static str, name: &str, detail: &str) -> Problem {
    let code = match parameter {
        "suite" => "unknown_suite",
        _ => "unknown_provider",
    };
    Problem::new(
        StatusCode::NOT_FOUND,
        code,
        format!("{parameter} `{name}`: {detail}"),
    )
    .with("parameter", parameter)
    .with("permitted", false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(query: &str) -> Result<[String; 2], (String, String)> {
        parameters(query).map_err(|p| {
            let parameter = p.extra["parameter"].as_str().unwrap_or("").to_string();
            (parameter, p.detail)
        })
    }

    #[test]
    fn both_names_are_read_percent_decoded_in_any_order() {
        assert_eq!(
            asked("provider=my%20fallback&suite=ticket-triage"),
            Ok(["ticket-triage".to_string(), "my fallback".to_string()])
        );
        assert_eq!(
            asked("suite=a+b&provider=%C3%A9"),
            Ok(["a b".to_string(), "é".to_string()])
        );
    }

    #[test]
    fn every_malformed_question_names_its_parameter() {
        let parameter = |q: &str| asked(q).map_err(|(p, _)| p);
        assert_eq!(parameter(""), Err("suite".to_string()));
        assert_eq!(parameter("suite=s"), Err("provider".to_string()));
        assert_eq!(parameter("suite=s&provider="), Err("provider".to_string()));
        assert_eq!(
            parameter("suite=s&suite=t&provider=p"),
            Err("suite".to_string())
        );
        assert_eq!(
            parameter("suite=s&provider=p&model=m"),
            Err("model".to_string())
        );
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert_eq!(
            parameter(&format!("suite=s&provider={long}")),
            Err("provider".to_string())
        );
    }
}

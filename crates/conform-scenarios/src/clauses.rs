//! The contract clause each scenario enforces, quoted from `docs/contract/ORCHESTRATOR.md`:
//! a scenario may fail an orchestrator only for breaking a rule the contract states, so
//! every failure names the rule (the tests below hold every quote to the contract's text).

/// A section of the contract and a sentence quoted from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Clause {
    pub section: &'static str,
    pub quote: &'static str,
}

impl std::fmt::Display for Clause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "contract §{}: “{}”", self.section, self.quote)
    }
}

const fn clause(section: &'static str, quote: &'static str) -> Clause {
    Clause { section, quote }
}

const ENDPOINTS: &str = "Endpoints";
const PROVIDERS: &str = "Talking to providers";
const FINISHING: &str = "Finishing: compare-and-swap";
const HOSTILE: &str = "Hostile and careless input";
const UNIQUE: &str =
    "The store enforces uniqueness of `(owner, idempotency_key)` with a database constraint";
const FIRST_WINS: &str = "The first result to arrive wins, whichever provider sent it";

/// The clause `scenario` enforces; `None` for a name no scenario has.
pub(crate) fn of(scenario: &str) -> Option<Clause> {
    Some(match scenario {
        "key-forms" => clause(ENDPOINTS, "The key is 1 to 255 visible ASCII characters"),
        "owner-scoping" => clause(
            "Identity",
            "A job or attempt of another owner is answered 404 `not_found`, never 403",
        ),
        "double-click" => clause(
            ENDPOINTS,
            "same key, same fingerprint (a retry or a double click, concurrent or not): 200 with the same job and header `Idempotent-Replayed: true`",
        ),
        "key-reuse" => clause(
            ENDPOINTS,
            "same key, different fingerprint: 409 `idempotency_key_reused`; nothing changes.",
        ),
        "concurrent-mismatch" | "creation-burst" => clause(ENDPOINTS, UNIQUE),
        "replay-in-every-state" => clause(
            ENDPOINTS,
            "the key stays bound to its job for the job's whole life",
        ),
        "provider-request" => clause(
            PROVIDERS,
            "The job's `result` is the first choice's message content, parsed as JSON when it parses.",
        ),
        "outcome-classification" => clause(
            PROVIDERS,
            "a definite answer without a usable result: `failed`, and a new attempt may start.",
        ),
        "no-hidden-retries" => clause(PROVIDERS, "Each attempt sends exactly one request upstream"),
        "cancel-releases" => clause(
            ENDPOINTS,
            "`POST /v1/attempts/{id}/cancel`: an external process releases a `starting` or `unknown` attempt",
        ),
        "immutable-result" => clause(FINISHING, "a winning result is never overwritten"),
        "read-only-polling" => clause(
            ENDPOINTS,
            "Reading changes nothing: polling a job a thousand times starts nothing.",
        ),
        "failover-gate" => clause(
            ENDPOINTS,
            "403 `failover_not_allowed`, with member `reason`, when the provider differs from the job's and the allowlist does not permit it",
        ),
        "allowlist-fail-closed" => clause(
            "The allowlist, as an orchestrator reads it",
            "The file is read at decision time (a cache of at most one second is fine) and fails closed",
        ),
        "timeout-is-unknown" => clause(
            PROVIDERS,
            "Otherwise `unknown` never becomes `failed` by itself and nothing retries it automatically",
        ),
        "reverse-order-finish" | "forward-order-finish" | "three-way-race" => {
            clause(FINISHING, FIRST_WINS)
        }
        "late-result-after-job-cancel" => clause(
            ENDPOINTS,
            "every result that arrives afterwards is discarded",
        ),
        "crash-restart" => clause(
            PROVIDERS,
            "After a crash or restart, an attempt that was in flight is neither retried nor failed",
        ),
        "oversized-body" | "deep-nesting" => clause(
            HOSTILE,
            "It MUST stay up and keep serving others, and a key MUST still name at most one job",
        ),
        "invalid-utf8" => clause(
            HOSTILE,
            "invalid UTF-8 in a body is a malformed body, 400 `invalid_request`",
        ),
        "stalled-connections" => clause(
            HOSTILE,
            "A client that stalls inside its request MUST NOT hold up others",
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    const TEXT: &str = include_str!("../../../docs/contract/ORCHESTRATOR.md");

    /// The text of `## section`, up to the next `## `.
    fn section(name: &str) -> Option<&'static str> {
        let start = TEXT.find(&format!("\n## {name}\n"))? + 1;
        let rest = &TEXT[start..];
        let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3);
        Some(&rest[..end])
    }

    #[test]
    fn every_scenario_cites_a_sentence_of_the_contract_in_its_section() {
        for scenario in super::super::all() {
            let clause = super::of(scenario.name())
                .unwrap_or_else(|| panic!("{} cites no clause", scenario.name()));
            let text = section(clause.section)
                .unwrap_or_else(|| panic!("no section `{}` in the contract", clause.section));
            assert!(
                text.contains(clause.quote),
                "{}: §{} does not say “{}”",
                scenario.name(),
                clause.section,
                clause.quote
            );
        }
        assert_eq!(super::of("no-such-scenario"), None);
    }
}

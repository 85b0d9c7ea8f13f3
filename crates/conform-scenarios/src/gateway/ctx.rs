//! One gateway scenario's context: its tag, the scripts it gives the upstreams, the
//! requests it sends through the gateway, its checks, and the evidence it ends with
//! (the upstream request counts against what it expected, the revoked candidate's always
//! zero).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::client::{Client, Received};
use super::config::{MODELS, REVOKED};
use super::upstream::{Behaviour, Board};
use crate::api::Exchange;
use crate::ctx::{Checked, Failed};
use crate::evidence::{CheckRecord, Evidence, Outcome, ProviderArrival, RequestCount};
use crate::mock::TAG_PREFIX;

/// What every scenario of a run shares.
pub struct Env {
    pub board: Board,
    pub client: Client,
    /// The timeout the gateway was configured with.
    pub timeout: Duration,
    /// The gateway, for the report's header.
    pub gateway: String,
    /// With the team's own config (`--gateway-config`).
    pub team: Option<Team>,
}

/// What the team's own config changes in the checks.
pub struct Team {
    /// The team's names for each upstream's model, by label: an answer naming any of
    /// them names the model that served it.
    pub aliases: BTreeMap<String, Vec<String>>,
}

impl Team {
    /// `named` (an answer's `model`) is one of `label`'s names, alone or after a
    /// provider's `openai/` or a gateway's `tensorzero::model_name::`.
    fn names(&self, label: &str, named: &str) -> bool {
        (self.aliases.get(label).into_iter().flatten()).any(|alias| {
            named == alias
                || named
                    .strip_suffix(alias.as_str())
                    .is_some_and(|head| head.ends_with('/') || head.ends_with("::"))
        })
    }
}

#[derive(Default)]
struct Record {
    checks: Vec<CheckRecord>,
    notes: Vec<String>,
    exchanges: Vec<Exchange>,
    /// By model: the requests the scenario calls for; a model absent is only reported
    /// (the revoked candidate is always held to zero).
    expected: BTreeMap<String, usize>,
    /// Why the scenario cannot run: it asks for a model the gateway's config lacks.
    unavailable: Option<String>,
}

/// One scenario's context.
pub struct Ctx {
    env: Arc<Env>,
    pub tag: String,
    scenario: &'static str,
    about: &'static str,
    started: Instant,
    record: Mutex<Record>,
}

impl Ctx {
    pub fn new(env: Arc<Env>, scenario: &'static str, about: &'static str) -> Ctx {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mut record = Record::default();
        record.expected.insert(REVOKED.to_string(), 0);
        Ctx {
            env,
            tag: format!("{TAG_PREFIX}{nanos:x}"),
            scenario,
            about,
            started: Instant::now(),
            record: Mutex::new(record),
        }
    }

    fn record(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn env(&self) -> &Env {
        &self.env
    }

    /// What `model` does with this scenario's request.
    pub fn script(&self, model: &str, behaviour: Behaviour) {
        self.env.board.script(model, &self.tag, behaviour);
    }

    /// `model` must receive exactly `n` requests for this scenario.
    pub fn expect(&self, model: &str, n: usize) {
        self.record().expected.insert(model.to_string(), n);
    }

    /// Asks the primary through the gateway, and keeps the exchange.
    pub async fn ask(&self, stream: bool) -> Received {
        self.ask_model(super::config::PRIMARY, stream).await
    }

    /// Asks `model` (the gateway's name for it) through the gateway.
    pub async fn ask_model(&self, model: &str, stream: bool) -> Received {
        if !self.env.client.offers(model) {
            self.record().unavailable = Some(format!(
                "not run: it asks for conform's {model} model, which only the generated config has"
            ));
            return Received::unsent();
        }
        let received = self.env.client.ask(model, &self.tag, stream).await;
        if let Some(x) = &received.exchange {
            self.record().exchanges.push(x.clone());
        }
        self.note(format!("the client received: {}", received.summary()));
        received
    }

    pub fn note(&self, text: impl Into<String>) {
        self.record().notes.push(text.into());
    }

    pub fn pass(&self, what: impl Into<String>) {
        self.record().checks.push(CheckRecord::pass(what));
    }

    pub fn fail(&self, what: impl Into<String>, detail: Option<String>) -> Failed {
        let (check, reason) = CheckRecord::fail(what, detail);
        self.record().checks.push(check);
        Failed(reason)
    }

    pub fn check(
        &self,
        ok: bool,
        what: impl Into<String>,
        detail: impl FnOnce() -> String,
    ) -> Checked {
        if ok {
            self.pass(what);
            Ok(())
        } else {
            Err(self.fail(what, Some(detail())))
        }
    }

    /// Waits until every upstream call of this scenario has ended (a hang included), so
    /// the counts are final.
    pub async fn settle(&self) {
        let limit = Instant::now() + self.env.timeout * 4 + Duration::from_secs(5);
        tokio::time::sleep(Duration::from_millis(300)).await;
        while Instant::now() < limit
            && self
                .env
                .board
                .arrivals(&self.tag)
                .iter()
                .any(|a| a.done_unix_ms.is_none())
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    /// Requests `model` received for this scenario so far.
    pub fn count(&self, model: &str) -> usize {
        self.env.board.count(model, &self.tag)
    }

    /// The rule every scenario holds: what reaches the client as complete is an answer an
    /// upstream finished for this request, and its `model` names the model that served it.
    pub fn complete_only_if_genuine(&self, received: &Received) -> Checked {
        if !received.complete {
            self.pass(format!(
                "the client was not handed a complete answer ({})",
                received.summary()
            ));
            return Ok(());
        }
        let Some((served_by, tag)) = received.served() else {
            return Err(self.fail(
                "nothing reaches the client as a complete answer unless an upstream finished it",
                Some(format!(
                    "a broken answer was presented as complete: {}",
                    received.summary()
                )),
            ));
        };
        self.check(
            tag == self.tag && self.count(&served_by) > 0,
            "the complete answer is one an upstream finished for this request",
            || format!("served_by {served_by} for {tag}: {}", received.summary()),
        )?;
        let named = received.model.clone().unwrap_or_default();
        // The upstream's model (`fallback-mock`) or the gateway's own name for one of its
        // routes (`fallback`, `primary-anthropic`): each contains the model's name, and no
        // model's name contains another's.
        let team = self.env.team.as_ref();
        self.check(
            named.contains(&served_by) || team.is_some_and(|t| t.names(&served_by, &named)),
            format!("the answer's model names the model that served it ({served_by})"),
            || format!("the answer says model {named:?}, but {served_by} served it"),
        )?;
        Ok(())
    }

    /// The client received a complete answer served by `model`.
    pub fn served_by(&self, received: &Received, model: &str) -> Checked {
        self.complete_only_if_genuine(received)?;
        self.check(
            received.complete && received.served().is_some_and(|(m, _)| m == model),
            format!("the client received {model}'s complete answer"),
            || received.summary(),
        )
    }

    /// The evidence: the body's verdict, then the upstream counts against what was
    /// expected.
    pub async fn conclude(&self, body: impl std::future::Future<Output = Checked>) -> Evidence {
        let result = body.await;
        if let Some(reason) = self.record().unavailable.clone() {
            return Evidence::skipped(self.scenario, self.about, &reason);
        }
        self.settle().await;
        let arrivals = self.env.board.arrivals(&self.tag);
        let expected = self.record().expected.clone();
        let mut counts = BTreeMap::new();
        let mut wrong = Vec::new();
        for model in MODELS {
            let received = self.count(model);
            let want = expected.get(model).copied();
            // The team's config may retry: what one attempt each calls for is a floor.
            let retries = self.env.team.is_some();
            if let Some(want) = want
                && want != received
                && !(retries && want > 0 && received > want)
            {
                wrong.push(format!(
                    "{model} received {received} request(s), expected {want}"
                ));
            }
            if let Some(want) = want.filter(|w| retries && received > *w) {
                self.note(format!(
                    "{model} received {received} request(s) where one attempt each calls for \
                     {want}: the config's retries"
                ));
            }
            counts.insert(
                model.to_string(),
                RequestCount {
                    received,
                    expected: want.unwrap_or(received),
                },
            );
        }
        let summary: Vec<String> = counts
            .iter()
            .map(|(n, c)| format!("{n} {}/{}", c.received, c.expected))
            .collect();
        let count_failure = if wrong.is_empty() {
            self.pass(format!(
                "each upstream received the requests the scenario calls for ({}; the revoked candidate none)",
                summary.join(", ")
            ));
            None
        } else {
            Some(self.fail(
                "each upstream received the requests the scenario calls for (the revoked candidate none)",
                Some(wrong.join("; ")),
            ))
        };
        for a in &arrivals {
            self.note(format!(
                "upstream {} received a {} request on {} at {} ms, {} ({})",
                a.model,
                if a.stream { "streamed" } else { "plain" },
                a.path,
                a.at_unix_ms,
                a.done_unix_ms
                    .map_or("never finished".to_string(), |d| format!(
                        "finished {} ms later",
                        d.saturating_sub(a.at_unix_ms)
                    )),
                serde_json::to_string(&a.behaviour).unwrap_or_default()
            ));
        }
        // Traffic to a revoked model is the failure that matters most: it leads.
        let revoked = self.count(REVOKED);
        let outcome = match (result, count_failure) {
            (_, Some(Failed(reason))) if revoked > 0 => Outcome::Failed { reason },
            (Err(Failed(reason)), _) | (Ok(()), Some(Failed(reason))) => Outcome::Failed { reason },
            (Ok(()), None) => Outcome::Passed,
        };
        let r = self.record();
        Evidence {
            scenario: self.scenario.to_string(),
            about: self.about.to_string(),
            outcome,
            seconds: self.started.elapsed().as_secs_f64(),
            checks: r.checks.clone(),
            exchanges: r.exchanges.clone(),
            exchanges_omitted: 0,
            polls: 0,
            jobs: Vec::new(),
            provider_requests: counts,
            provider_arrivals: arrivals
                .into_iter()
                .map(ProviderArrival::Upstream)
                .collect(),
            stray_requests: Vec::new(),
            notes: r.notes.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::super::config::{FALLBACK, PRIMARY};
    use super::*;

    /// The JSON evidence lists each upstream request (which model, when it came, when the
    /// upstream finished), not only prose notes.
    #[tokio::test]
    async fn the_evidence_lists_each_upstream_request_with_its_timing() {
        let board = Board::default();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        super::super::upstream::serve(listener, PRIMARY, board.clone());
        let client = Client::new("http://127.0.0.1:9/v1/chat/completions".into(), Vec::new());
        let env = Arc::new(Env {
            board,
            client: client.unwrap(),
            timeout: Duration::from_millis(100),
            gateway: "a test".into(),
            team: None,
        });
        let ctx = Ctx::new(env, "one-request", "one request reaches the primary");
        ctx.expect(PRIMARY, 1);
        ctx.expect(FALLBACK, 0);
        let body = format!(
            r#"{{"model":"primary-mock","messages":[{{"role":"user","content":"{}"}}]}}"#,
            ctx.tag
        );
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let _ = stream.read_to_end(&mut Vec::new()).await;

        let evidence = ctx.conclude(async { Ok(()) }).await;
        assert!(evidence.passed(), "{:?}", evidence.outcome);
        let arrivals = serde_json::to_value(&evidence.provider_arrivals).unwrap();
        let arrivals = arrivals.as_array().unwrap();
        assert_eq!(arrivals.len(), 1, "{arrivals:?}");
        assert_eq!(arrivals[0]["model"], PRIMARY);
        assert_eq!(arrivals[0]["tag"], ctx.tag.as_str());
        let at = arrivals[0]["at_unix_ms"].as_u64().unwrap();
        let done = arrivals[0]["done_unix_ms"].as_u64().unwrap();
        assert!(done >= at, "{arrivals:?}");
        assert_eq!(evidence.provider_requests[PRIMARY].received, 1);
    }

    /// With the team's config, its retries are its choice: more requests than one attempt
    /// calls for pass, and are noted; none where one is called for, or any where none is,
    /// still fail. conform's own config holds the count exactly.
    #[tokio::test]
    async fn the_teams_retries_are_a_floor_and_nothing_stays_nothing() {
        let board = Board::default();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        super::super::upstream::serve(listener, PRIMARY, board.clone());
        let env = |team: Option<Team>| {
            let client = Client::new("http://127.0.0.1:9/v1/chat/completions".into(), Vec::new());
            Arc::new(Env {
                board: board.clone(),
                client: client.unwrap(),
                timeout: Duration::from_millis(100),
                gateway: "a test".into(),
                team,
            })
        };
        let team = || {
            Some(Team {
                aliases: BTreeMap::from([(PRIMARY.to_string(), vec!["gpt-4o".to_string()])]),
            })
        };
        let run = |env: Arc<Env>, expected: usize| async move {
            let ctx = Ctx::new(env, "retried", "the primary is asked three times");
            ctx.expect(PRIMARY, expected);
            for _ in 0..3 {
                let body = format!(r#"{{"model":"gpt-4o","content":"{}"}}"#, ctx.tag);
                let mut stream = TcpStream::connect(addr).await.unwrap();
                let request = format!(
                    "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                stream.write_all(request.as_bytes()).await.unwrap();
                let _ = stream.read_to_end(&mut Vec::new()).await;
            }
            ctx.conclude(async { Ok(()) }).await
        };
        let evidence = run(env(team()), 1).await;
        assert!(evidence.passed(), "{:?}", evidence.outcome);
        assert_eq!(evidence.provider_requests[PRIMARY].received, 3);
        assert!(
            (evidence.notes.iter()).any(|n| n.contains("the config's retries")),
            "{:?}",
            evidence.notes
        );
        assert!(run(env(team()), 0).await.failed());
        assert!(run(env(None), 1).await.failed());

        let t = team().unwrap();
        for named in ["gpt-4o", "openai/gpt-4o", "tensorzero::model_name::gpt-4o"] {
            assert!(t.names(PRIMARY, named), "{named}");
        }
        assert!(!t.names(PRIMARY, "gpt-4o-mini"));
        assert!(!t.names(FALLBACK, "gpt-4o"));
    }
}

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
use crate::evidence::{
    CheckRecord, ClientRequest, Evidence, Outcome, ProviderArrival, RequestCount,
};
use crate::mock::{TAG_PREFIX, unix_ms};

/// What every scenario of a run shares.
pub(crate) struct Env {
    pub board: Board,
    pub client: Client,
    /// The timeout the gateway was configured with.
    pub timeout: Duration,
    /// The gateway, for the report's header.
    pub gateway: String,
    /// With the team's own config (`--gateway-config`).
    pub team: Option<Team>,
    /// How often the config lets the gateway retry one upstream for one client request.
    pub retries: usize,
}

/// What the team's own config changes in the checks.
pub(crate) struct Team {
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
    /// Each client request: the model asked, when it was sent, what came back.
    sent: Vec<(String, u64, Received)>,
    /// Why the scenario cannot run: it asks for a model the gateway's config lacks.
    unavailable: Option<String>,
}

/// One scenario's context.
pub(crate) struct Ctx {
    env: Arc<Env>,
    pub tag: String,
    scenario: &'static str,
    about: &'static str,
    started: Instant,
    record: Mutex<Record>,
}

impl Ctx {
    pub(crate) fn new(env: Arc<Env>, scenario: &'static str, about: &'static str) -> Ctx {
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

    pub(crate) fn env(&self) -> &Env {
        &self.env
    }

    /// What `model` does with this scenario's request.
    pub(crate) fn script(&self, model: &str, behaviour: Behaviour) {
        self.env.board.script(model, &self.tag, behaviour);
    }

    /// `model` must receive exactly `n` requests for this scenario.
    pub(crate) fn expect(&self, model: &str, n: usize) {
        self.record().expected.insert(model.to_string(), n);
    }

    /// Asks the primary through the gateway, and keeps the exchange.
    pub(crate) async fn ask(&self, stream: bool) -> Received {
        self.ask_model(super::config::PRIMARY, stream).await
    }

    /// Asks `model` (the gateway's name for it) through the gateway.
    pub(crate) async fn ask_model(&self, model: &str, stream: bool) -> Received {
        self.ask_tagged(model, &self.tag, stream, &[]).await
    }

    /// Asks `model` for `tag` (this scenario's, or a probe's of its own) with the
    /// top-level fields `extra`, and keeps the exchange. Only requests with this
    /// scenario's tag are its client requests: a probe's upstream calls are not its own.
    pub(crate) async fn ask_tagged(
        &self,
        model: &str,
        tag: &str,
        stream: bool,
        extra: &[(&str, serde_json::Value)],
    ) -> Received {
        if !self.env.client.offers(model) {
            self.record().unavailable = Some(format!(
                "not run: it asks for conform's {model} model, which only the generated config has"
            ));
            return Received::unsent();
        }
        let sent = unix_ms();
        let received = self.env.client.ask_with(model, tag, stream, extra).await;
        let mut record = self.record();
        if let Some(x) = &received.exchange {
            record.exchanges.push(x.clone());
        }
        if tag == self.tag {
            (record.sent).push((model.to_string(), sent, received.clone()));
        }
        drop(record);
        self.note(format!("the client received: {}", received.summary()));
        received
    }

    pub(crate) fn note(&self, text: impl Into<String>) {
        self.record().notes.push(text.into());
    }

    pub(crate) fn pass(&self, what: impl Into<String>) {
        self.record().checks.push(CheckRecord::pass(what));
    }

    pub(crate) fn fail(&self, what: impl Into<String>, detail: Option<String>) -> Failed {
        let (check, reason) = CheckRecord::fail(what, detail);
        self.record().checks.push(check);
        Failed(reason)
    }

    pub(crate) fn check(
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
    pub(crate) async fn settle(&self) {
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

    /// The client's requests so far, each with the upstream attempts that came for it:
    /// those that arrived after it was sent and before the next one was.
    pub(crate) fn client_requests(&self) -> Vec<ClientRequest> {
        let arrivals = self.env.board.arrivals(&self.tag);
        let sent = self.record().sent.clone();
        let next_sent: Vec<Option<u64>> =
            (1..=sent.len()).map(|i| sent.get(i).map(|s| s.1)).collect();
        (sent.into_iter().zip(next_sent))
            .map(|((asked, at, received), next)| {
                let attempts: Vec<_> = (arrivals.iter())
                    .filter(|a| a.at_unix_ms >= at && next.is_none_or(|n| a.at_unix_ms < n))
                    .collect();
                ClientRequest::timed(&asked, at, received, &attempts)
            })
            .collect()
    }

    /// Requests `model` received for this scenario so far.
    pub(crate) fn count(&self, model: &str) -> usize {
        self.env.board.count(model, &self.tag)
    }

    /// The rule every scenario holds: what reaches the client as complete is an answer an
    /// upstream finished for this request, and its `model` names the model that served it.
    pub(crate) fn complete_only_if_genuine(&self, received: &Received) -> Checked {
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
    pub(crate) fn served_by(&self, received: &Received, model: &str) -> Checked {
        self.complete_only_if_genuine(received)?;
        self.check(
            received.complete && received.served().is_some_and(|(m, _)| m == model),
            format!("the client received {model}'s complete answer"),
            || received.summary(),
        )
    }

    /// The evidence: the body's verdict, then the upstream counts against what was
    /// expected.
    pub(crate) async fn conclude(
        &self,
        body: impl std::future::Future<Output = Checked>,
    ) -> Evidence {
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
        let client_requests = self.client_requests();
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
            client_requests,
            notes: r.notes.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

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
            retries: 0,
        });
        let ctx = Ctx::new(env, "one-request", "one request reaches the primary");
        ctx.expect(PRIMARY, 1);
        ctx.expect(FALLBACK, 0);
        let body = format!(
            r#"{{"model":"primary-mock","messages":[{{"role":"user","content":"{}"}}]}}"#,
            ctx.tag
        );
        let mut stream = super::super::upstream::post(addr, &body).await;
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
        // No client request went through a gateway: none is listed.
        let json = serde_json::to_value(&evidence).unwrap();
        assert!(json.get("client_requests").is_none(), "{json}");
    }

    /// Each client request is listed with what it received (status, model, usage, its
    /// wall time) and the upstream attempts that came for it, timed from its sending.
    #[tokio::test]
    async fn the_evidence_lists_each_client_request_with_what_it_received_and_its_attempts() {
        let board = Board::default();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        super::super::upstream::serve(listener, PRIMARY, board.clone());
        // The client talks to the upstream itself: a gateway that passes everything on.
        let url = format!("http://{addr}/v1/chat/completions");
        let env = Arc::new(Env {
            board,
            client: Client::new(url, Vec::new()).unwrap(),
            timeout: Duration::from_millis(100),
            gateway: "a test".into(),
            team: None,
            retries: 0,
        });
        let ctx = Ctx::new(env, "two-requests", "two requests reach the primary");
        ctx.script(
            PRIMARY,
            Behaviour::Flapping {
                status: 503,
                up_at_unix_ms: unix_ms() + 150,
            },
        );
        let first = ctx.ask(false).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
        let second = ctx.ask(false).await;
        assert_eq!((first.status, second.status), (503, 200));
        let evidence = ctx.conclude(async { Ok(()) }).await;
        let json = serde_json::to_value(&evidence).unwrap();
        let requests = json["client_requests"].as_array().unwrap();
        assert_eq!(requests.len(), 2, "{json}");
        assert_eq!(requests[0]["status"], 503);
        assert_eq!(requests[0]["complete"], false);
        assert_eq!(requests[1]["status"], 200);
        assert_eq!(requests[1]["complete"], true);
        assert_eq!(requests[1]["model"], PRIMARY);
        assert_eq!(requests[1]["usage"]["prompt_tokens"], 24);
        for r in requests {
            assert_eq!(r["attempts"][PRIMARY], 1, "{r}");
            assert_eq!(r["asked"], PRIMARY);
            let first_attempt = r["first_attempt_ms"].as_u64().unwrap();
            // Both to the millisecond, each rounded down: one apart at most.
            assert!(first_attempt <= r["ms"].as_u64().unwrap() + 1, "{r}");
            assert!(r.get("exchange").is_none(), "{r}");
        }
        let sent: Vec<u64> = (requests.iter())
            .map(|r| r["sent_unix_ms"].as_u64().unwrap())
            .collect();
        assert!(sent[1] >= sent[0] + 250, "{sent:?}");
    }

    /// The gaps before each next attempt, overall and on one upstream.
    #[test]
    fn gaps_are_measured_between_attempts_overall_and_per_upstream() {
        let arrival = |model: &str, at: u64| super::super::upstream::Arrival {
            model: model.into(),
            path: "/v1/chat/completions".into(),
            tag: None,
            at_unix_ms: at,
            done_unix_ms: Some(at + 1),
            stream: false,
            behaviour: Behaviour::Answer,
        };
        let all = [
            arrival(PRIMARY, 1_010),
            arrival(FALLBACK, 1_030),
            arrival(PRIMARY, 3_100),
        ];
        let attempts: Vec<_> = all.iter().collect();
        let timed = ClientRequest::timed(PRIMARY, 1_000, Received::unsent(), &attempts);
        assert_eq!(timed.first_attempt_ms, Some(10));
        assert_eq!(timed.gaps_ms, [20, 2_070]);
        assert_eq!(timed.gaps_by_upstream_ms[PRIMARY], [2_090]);
        assert!(!timed.gaps_by_upstream_ms.contains_key(FALLBACK));
        assert_eq!(timed.attempts[PRIMARY], 2);
        assert_eq!(timed.attempts[FALLBACK], 1);
        let none = ClientRequest::timed(PRIMARY, 1_000, Received::unsent(), &[]);
        assert_eq!(none.first_attempt_ms, None);
        assert!(
            serde_json::to_value(&none)
                .unwrap()
                .get("first_attempt_ms")
                .is_none()
        );
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
                retries: 2,
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
                let mut stream = super::super::upstream::post(addr, &body).await;
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

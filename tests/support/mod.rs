//! Shared by the ledger and orchestrator tests: a real database of either backend, a
//! running orchestrator, and an HTTP client.
#![allow(dead_code)]

pub mod proxy;

use std::sync::Once;
use std::time::Duration;

use conform_serve::ledger::{Ledger, LedgerOptions};
use conform_serve::orchestrator::{Config, Providers, Server};
use serde_json::Value;
use sqlx::{PgPool, SqlitePool};

/// The PostgreSQL the tests use (trust auth on this machine; `.ci/run` creates `test`).
pub fn postgres_base_url() -> String {
    std::env::var("CONFORM_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

/// Hex of 8 random bytes, for unique names.
pub fn unique() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh database: a SQLite file in a temporary directory, or a fresh PostgreSQL schema.
pub struct TestDb {
    pub url: String,
    raw: Raw,
    _dir: Option<tempfile::TempDir>,
}

enum Raw {
    Sqlite(SqlitePool),
    Postgres { pool: PgPool, schema: String },
}

impl TestDb {
    pub async fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("ledger.db").display());
        // Lazy: the ledger creates the file and its schema before the first raw query.
        let raw = SqlitePool::connect_lazy(&url).unwrap();
        TestDb {
            url,
            raw: Raw::Sqlite(raw),
            _dir: Some(dir),
        }
    }

    pub async fn postgres() -> TestDb {
        TestDb::postgres_with("").await
    }

    /// PostgreSQL with extra session settings, e.g. `-c synchronous_commit=off` where a
    /// test needs many commits and no durability.
    pub async fn postgres_with(settings: &str) -> TestDb {
        let base = postgres_base_url();
        let schema = format!("conform_t_{}", unique());
        let admin = PgPool::connect(&base).await.unwrap_or_else(|e| {
            panic!(
                "PostgreSQL at {base} is not reachable ({e}); start it with \
                 `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`"
            )
        });
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&admin)
            .await
            .unwrap();
        admin.close().await;
        let sep = if base.contains('?') { '&' } else { '?' };
        let settings = settings.replace(' ', "%20").replace('=', "%3D");
        let url = format!("{base}{sep}options=-c%20search_path%3D{schema}%20{settings}");
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(&url)
            .await
            .unwrap();
        TestDb {
            url,
            raw: Raw::Postgres { pool, schema },
            _dir: None,
        }
    }

    /// A ledger on this database.
    pub async fn ledger(&self) -> Ledger {
        Ledger::connect(&self.url, &LedgerOptions::default())
            .await
            .unwrap()
    }

    /// One integer from raw SQL, straight from the tables.
    pub async fn scalar(&self, sql: &'static str, bind: &str) -> i64 {
        match &self.raw {
            Raw::Sqlite(pool) => sqlx::query_scalar(sql)
                .bind(bind)
                .fetch_one(pool)
                .await
                .unwrap(),
            Raw::Postgres { pool, .. } => sqlx::query_scalar(sql)
                .bind(bind)
                .fetch_one(pool)
                .await
                .unwrap(),
        }
    }

    pub async fn jobs_of(&self, owner: &str) -> i64 {
        self.scalar("SELECT COUNT(*) FROM jobs WHERE owner_id = $1", owner)
            .await
    }

    pub async fn attempts_of(&self, job_id: &str) -> i64 {
        self.scalar("SELECT COUNT(*) FROM attempts WHERE job_id = $1", job_id)
            .await
    }

    /// A raw connection of the test's own, on SQLite, holding the write lock until
    /// dropped or rolled back: to the ledger the database is down.
    pub async fn lock_sqlite(&self) -> sqlx::Transaction<'static, sqlx::Sqlite> {
        let Raw::Sqlite(pool) = &self.raw else {
            panic!("lock_sqlite on PostgreSQL");
        };
        pool.begin_with("BEGIN IMMEDIATE").await.unwrap()
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self.raw, Raw::Postgres { .. })
    }

    /// Drops the PostgreSQL schema; the SQLite directory goes with `self`.
    pub async fn cleanup(self) {
        match self.raw {
            Raw::Sqlite(pool) => pool.close().await,
            Raw::Postgres { pool, schema } => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
                    .execute(&pool)
                    .await
                    .unwrap();
                pool.close().await;
            }
        }
    }
}

/// Runs each named `async fn NAME(db: TestDb)` on a SQLite file and on PostgreSQL.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::support::TestDb::sqlite().await).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::support::TestDb::postgres().await).await
                }
            )*
        }
    };
}

/// An orchestrator running in this process.
pub struct Orchestrator {
    pub base: String,
    /// `127.0.0.1:PORT`, for raw connections.
    pub addr: String,
    pub http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

pub struct Settings {
    pub providers: String,
    pub allowlist: std::path::PathBuf,
    pub attempt_timeout: Duration,
    pub late_window: Duration,
    /// The HTTP layer's bounds (`Limits::default()` unless a test narrows them).
    pub limits: conform_serve::orchestrator::Limits,
}

impl Orchestrator {
    pub async fn start(db: &TestDb, settings: Settings) -> Orchestrator {
        Orchestrator::start_on(&db.url, settings).await
    }

    /// On the database at `url` (e.g. through a [`proxy::Proxy`]).
    pub async fn start_on(url: &str, settings: Settings) -> Orchestrator {
        let config = Config {
            listen: "127.0.0.1:0".into(),
            providers: Providers::parse(&settings.providers).unwrap(),
            allowlist: settings.allowlist,
            project: None,
            attempt_timeout: settings.attempt_timeout,
            late_window: settings.late_window,
            database_url: url.to_string(),
            database_connections: 8,
            database_timeout: conform_serve::orchestrator::config::DEFAULT_DATABASE_TIMEOUT,
            limits: settings.limits,
        };
        let listener = conform_serve::orchestrator::listener("127.0.0.1:0")
            .await
            .unwrap();
        let server = Server::on(config, listener).await.unwrap();
        let addr = server.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        Orchestrator {
            base: format!("http://{addr}"),
            addr: addr.to_string(),
            http: client(),
            stop: Some(stop),
        }
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub fn client() -> reqwest::Client {
    static RING: Once = Once::new();
    RING.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
        .retry(reqwest::retry::never())
        .pool_max_idle_per_host(512)
        .build()
        .unwrap()
}

/// A status, the headers that matter, and the JSON body.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub replayed: bool,
    pub body: Value,
}

impl Reply {
    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("")
    }

    pub fn id(&self) -> &str {
        self.body["id"].as_str().unwrap_or("")
    }
}

pub async fn reply(response: reqwest::Response) -> Reply {
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    if status >= 400 {
        assert_eq!(content_type, "application/problem+json", "{status} {text}");
        for member in ["type", "title", "status", "detail", "code"] {
            assert!(
                body.get(member).is_some(),
                "problem without `{member}`: {text}"
            );
        }
        assert_eq!(body["status"], status, "{text}");
    }
    Reply {
        status,
        content_type,
        replayed,
        body,
    }
}

impl Orchestrator {
    pub async fn create(&self, owner: &str, key: &str, body: &Value) -> Reply {
        let response = self
            .http
            .post(format!("{}/v1/jobs", self.base))
            .header("x-owner-id", owner)
            .header("idempotency-key", key)
            .json(body)
            .send()
            .await
            .unwrap();
        reply(response).await
    }

    pub async fn get(&self, owner: &str, path: &str) -> Reply {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .header("x-owner-id", owner)
            .send()
            .await
            .unwrap();
        reply(response).await
    }

    pub async fn post(&self, owner: &str, path: &str, body: &Value) -> Reply {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .header("x-owner-id", owner)
            .json(body)
            .send()
            .await
            .unwrap();
        reply(response).await
    }

    pub async fn job(&self, owner: &str, id: &str) -> Value {
        let r = self.get(owner, &format!("/v1/jobs/{id}")).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        r.body
    }

    /// Polls the job until `done` holds (the provider answers asynchronously).
    pub async fn wait_for(&self, owner: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..400 {
            let job = self.job(owner, id).await;
            if done(&job) {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!(
            "job {id} never reached the expected state: {}",
            self.job(owner, id).await
        );
    }
}

/// An OpenAI-compatible chat completion whose content is `content`.
pub fn completion(content: &str) -> Value {
    serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    })
}

/// A job request body.
pub fn job_body(task: &str, provider: &str, text: &str) -> Value {
    serde_json::json!({"task": task, "provider": provider,
        "input": {"messages": [{"role": "user", "content": text}], "temperature": 0}})
}

/// An allowlist permitting failover for (suite, provider) pairs until `valid_until`,
/// with only the members the contract says an orchestrator reads.
pub fn allowlist(entries: &[(&str, &str, &str)]) -> Value {
    let entries: Vec<Value> = entries
        .iter()
        .map(|(suite, provider, until)| {
            serde_json::json!({"suite": suite, "provider": provider, "valid_until": until})
        })
        .collect();
    serde_json::json!({"format": "conform.allowlist/v1", "entries": entries})
}

//! Job creations per second through the ledger, with 64 concurrent clients, next to a
//! raw `INSERT … ON CONFLICT DO NOTHING` of the job row on the same database: through
//! sqlx with the same pool, and (PostgreSQL) through pgbench.
//!
//! `cargo bench --bench ledger_create` (release). PostgreSQL comes from
//! `CONFORM_TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`); each
//! run works in a fresh schema and drops it. `LEDGER_BENCH_SECS` sets each measurement's
//! length (default 5).

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use conform::ledger::{Created, Ledger, LedgerOptions, NewJob};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AssertSqlSafe, PgPool, SqlitePool};

const CLIENTS: u64 = 64;

const RAW_INSERT: &str = "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, task, \
     provider, input, version, created_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8) \
     ON CONFLICT (owner_id, idempotency_key) DO NOTHING";

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let secs = std::env::var("LEDGER_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let span = Duration::from_secs(secs);
    println!("ledger_create: {CLIENTS} concurrent clients, {secs} s per measurement\n");
    runtime.block_on(async {
        postgres(span).await;
        println!();
        sqlite(span).await;
    });
}

/// Runs `op(client, n)` from 64 clients for `span` and answers operations per second.
async fn measure<F, Fut>(span: Duration, op: F) -> f64
where
    F: Fn(u64, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // Warm the pools and statement caches first.
    for c in 0..CLIENTS {
        op(c, u64::MAX - c).await;
    }
    let start = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (op, done, stop) = (op.clone(), done.clone(), stop.clone());
            tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    op(c, n).await;
                    n += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(span).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.expect("a client");
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

async fn ledger_rate(ledger: Ledger, span: Duration, run: &'static str) -> f64 {
    let input = Arc::new(json!({"messages": [{"role": "user", "content": "bench"}]}));
    measure(span, move |c, n| {
        let (ledger, input) = (ledger.clone(), input.clone());
        async move {
            let key = format!("{run}-{c}-{n}");
            let new = NewJob {
                owner: "bench-ledger",
                idempotency_key: &key,
                fingerprint: "sha256:bench",
                task: "bench",
                provider: "primary",
                input: &input,
                attempt_timeout: Duration::from_secs(60),
            };
            match ledger.create_job(&new).await {
                Ok(Created::New(_)) => {}
                other => panic!("expected a new job, got {other:?}"),
            }
        }
    })
    .await
}

async fn postgres(span: Duration) {
    let base = std::env::var("CONFORM_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let schema = format!("conform_bench_{}", std::process::id());
    let admin = PgPool::connect(&base)
        .await
        .expect("PostgreSQL is reachable");
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&admin)
        .await
        .expect("a fresh schema");
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
    // One connection per client, as pgbench has: PostgreSQL batches the WAL flushes of
    // concurrent commits, so fewer connections mean fewer commits per flush.
    let options = LedgerOptions {
        max_connections: CLIENTS as u32,
        ..LedgerOptions::default()
    };
    println!(
        "PostgreSQL ({base}, {} connections)",
        options.max_connections
    );
    let ledger = Ledger::connect(&url, &options).await.expect("the ledger");
    let raw = PgPoolOptions::new()
        .max_connections(options.max_connections)
        .test_before_acquire(false)
        .connect_lazy(&url)
        .expect("a raw pool");
    let raw_rate = raw_pg(raw.clone(), span).await;
    raw.close().await;
    let ledger_rate = ledger_rate(ledger.clone(), span, "ledger").await;
    ledger.close().await;
    let pgbench_raw = pgbench(&base, &raw_insert_script(&schema), span);
    let pgbench_statement = pgbench(&base, &ledger_statement_script(&schema), span);
    let rate = |label: &str, rate: Option<f64>| match rate {
        Some(rate) => println!("  {label:<52} {rate:>7.0} jobs/s"),
        None => println!("  {label:<52}       - (no pgbench)"),
    };
    rate(
        "raw INSERT … ON CONFLICT of the job row, sqlx",
        Some(raw_rate),
    );
    rate(
        "raw INSERT … ON CONFLICT of the job row, pgbench",
        pgbench_raw,
    );
    rate(
        "the ledger's statement (job + attempt), pgbench",
        pgbench_statement,
    );
    rate("ledger create_job (job + attempt), sqlx", Some(ledger_rate));
    let ratio = |baseline: Option<f64>| {
        baseline.map_or("-".to_string(), |b| {
            format!("{:.0} %", 100.0 * ledger_rate / b)
        })
    };
    println!(
        "  ledger / raw: {} (sqlx), {} (pgbench); ledger / its own statement in pgbench: {}",
        ratio(Some(raw_rate)),
        ratio(pgbench_raw),
        ratio(pgbench_statement)
    );
    let jobs: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM {schema}.jobs WHERE owner_id = 'bench-ledger'"
    )))
    .fetch_one(&admin)
    .await
    .expect("a count");
    println!("  (the ledger wrote {jobs} jobs, one per key)");
    sqlx::raw_sql(AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(&admin)
        .await
        .expect("drop the schema");
}

async fn raw_pg(pool: PgPool, span: Duration) -> f64 {
    measure(span, move |c, n| {
        let pool = pool.clone();
        async move {
            let key = format!("raw-{c}-{n}");
            sqlx::query(RAW_INSERT)
                .bind(format!("job_raw_{c}_{n}"))
                .bind("bench-raw")
                .bind(&key)
                .bind("sha256:bench")
                .bind("bench")
                .bind("primary")
                .bind(r#"{"messages":[{"role":"user","content":"bench"}]}"#)
                .bind(0i64)
                .execute(&pool)
                .await
                .expect("a raw insert");
        }
    })
    .await
}

/// The job row, as a raw `INSERT … ON CONFLICT` for pgbench. pgbench reads `:name` as a
/// variable, so the colons of literals are spliced in with `chr(58)`.
fn raw_insert_script(schema: &str) -> String {
    format!(
        "\\set n random(1, 9000000000000000)\n\
         INSERT INTO {schema}.jobs (id, owner_id, idempotency_key, fingerprint, task, provider, \
         input, version, created_ms) VALUES \
         ('job_pgb_' || CAST(:client_id AS text) || '_' || CAST(:n AS text), 'bench-pgbench', \
         CAST(:client_id AS text) || '-' || CAST(:n AS text), 'sha256' || chr(58) || 'bench', \
         'bench', 'primary', {INPUT}, 1, 0) ON CONFLICT (owner_id, idempotency_key) DO NOTHING;\n"
    )
}

/// The ledger's own creation statement (job and first attempt, see `src/ledger/store.rs`).
fn ledger_statement_script(schema: &str) -> String {
    format!(
        "\\set n random(1, 9000000000000000)\n\
         WITH job AS (INSERT INTO {schema}.jobs (id, owner_id, idempotency_key, fingerprint, task, \
         provider, input, version, created_ms) VALUES \
         ('job_pgs_' || CAST(:client_id AS text) || '_' || CAST(:n AS text), 'bench-statement', \
         CAST(:client_id AS text) || '-' || CAST(:n AS text), 'sha256' || chr(58) || 'bench', \
         'bench', 'primary', {INPUT}, 1, 0) RETURNING id) \
         INSERT INTO {schema}.attempts (id, job_id, seq, provider, state, base_version, started_ms, \
         deadline_ms) SELECT 'att_pgs_' || CAST(:client_id AS text) || '_' || CAST(:n AS text), \
         job.id, 1, 'primary', 'starting', 1, 0, 60000 FROM job;\n"
    )
}

const INPUT: &str = r#"replace('{"messages"=[{"role"="user","content"="bench"}]}', '=', chr(58))"#;

/// pgbench running `script` with 64 clients; `None` when pgbench is missing or fails.
fn pgbench(base: &str, script: &str, span: Duration) -> Option<f64> {
    let options = PgConnectOptions::from_str(base).ok()?;
    let path = std::env::temp_dir().join(format!("conform-pgbench-{}.sql", std::process::id()));
    std::fs::write(&path, script).ok()?;
    let output = std::process::Command::new("pgbench")
        .args(["-n", "-M", "prepared", "-c", "64", "-j", "2", "-T"])
        .arg(span.as_secs().to_string())
        .arg("-f")
        .arg(&path)
        .args(["-h", options.get_host(), "-p"])
        .arg(options.get_port().to_string())
        .args(["-U", options.get_username()])
        .arg(options.get_database().unwrap_or("postgres"))
        .output()
        .ok()?;
    let _ = std::fs::remove_file(&path);
    if !output.status.success() {
        eprintln!(
            "  pgbench failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().find(|l| l.starts_with("tps = "))?;
    line.trim_start_matches("tps = ")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

async fn sqlite(span: Duration) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("ledger.db");
    let url = format!("sqlite://{}", path.display());
    let options = LedgerOptions::default();
    let ledger = Ledger::connect(&url, &options).await.expect("the ledger");
    println!(
        "SQLite ({}, WAL, synchronous=FULL, one writer connection)",
        path.display()
    );
    // The same settings as the ledger's writer.
    let raw = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::from_str(&url)
                .expect("the URL")
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full)
                .busy_timeout(Duration::from_secs(10)),
        )
        .await
        .expect("a raw pool");
    let raw_rate = raw_sqlite(raw.clone(), span).await;
    let ledger_rate = ledger_rate(ledger.clone(), span, "ledger").await;
    println!(
        "  {:<52} {raw_rate:>7.0} jobs/s",
        "raw INSERT … ON CONFLICT of the job row, sqlx"
    );
    println!(
        "  {:<52} {ledger_rate:>7.0} jobs/s",
        "ledger create_job (job + attempt, group commit)"
    );
    println!("  ledger / raw: {:.0} %", 100.0 * ledger_rate / raw_rate);
    ledger.close().await;
    raw.close().await;
}

async fn raw_sqlite(pool: SqlitePool, span: Duration) -> f64 {
    measure(span, move |c, n| {
        let pool = pool.clone();
        async move {
            let key = format!("raw-{c}-{n}");
            sqlx::query(RAW_INSERT)
                .bind(format!("job_raw_{c}_{n}"))
                .bind("bench-raw")
                .bind(&key)
                .bind("sha256:bench")
                .bind("bench")
                .bind("primary")
                .bind(r#"{"messages":[{"role":"user","content":"bench"}]}"#)
                .bind(0i64)
                .execute(&pool)
                .await
                .expect("a raw insert");
        }
    })
    .await
}

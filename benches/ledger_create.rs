//! Job creations per second through the ledger, with 64 concurrent clients, next to the
//! raw rate of the same writes on the same database.
//!
//! A creation writes the job *and* its first attempt, so the baseline writes the same two
//! rows: on PostgreSQL, pgbench running the ledger's own `INSERT … ON CONFLICT` statement
//! ([`conform_serve::ledger::CREATE_JOB_POSTGRES`]) with its parameters spliced in; on SQLite,
//! the same two `INSERT … ON CONFLICT`s in a transaction per creation. For scale, each
//! backend also prints the raw insert of the job row alone.
//!
//! `cargo bench --bench ledger_create` (release). PostgreSQL comes from
//! `CONFORM_TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`); each
//! run works in a fresh schema and drops it. `LEDGER_BENCH_SECS` sets each measurement's
//! length (default 5); `LEDGER_BENCH_ONLY=postgres` or `=sqlite` measures one backend.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use conform_serve::ledger::{CREATE_JOB_POSTGRES, Created, Ledger, LedgerOptions, NewJob};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AssertSqlSafe, PgPool, SqlitePool};

const CLIENTS: u64 = 64;

/// The job row alone, with the ledger's parameters `$1`–`$9`.
const RAW_INSERT: &str = "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, task, \
     provider, input, version, created_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
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
    let only = std::env::var("LEDGER_BENCH_ONLY").unwrap_or_default();
    runtime.block_on(async {
        if only != "sqlite" {
            postgres(span).await;
            println!();
        }
        if only != "postgres" {
            sqlite(span).await;
        }
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
    let raw_statement = raw_pg(raw.clone(), span, Baseline::JobAndAttempt).await;
    let raw_job = raw_pg(raw.clone(), span, Baseline::JobAlone).await;
    raw.close().await;
    let ledger_rate = ledger_rate(ledger.clone(), span, "ledger").await;
    ledger.close().await;
    let pgbench_statement = pgbench(
        &base,
        &pgbench_script(&schema, Baseline::JobAndAttempt),
        span,
    );
    let pgbench_job = pgbench(&base, &pgbench_script(&schema, Baseline::JobAlone), span);
    let line = |label: &str, rate: Option<f64>| match rate {
        Some(rate) => println!(
            "  {label:<58} {rate:>7.0} jobs/s   ledger: {:>4.0} %",
            100.0 * ledger_rate / rate
        ),
        None => println!("  {label:<58}       - (no pgbench)"),
    };
    println!("  {:<58} {ledger_rate:>7.0} jobs/s", "ledger create_job");
    line(
        "job + first attempt, the ledger's statement, pgbench",
        pgbench_statement,
    );
    line(
        "job + first attempt, the ledger's statement, sqlx",
        Some(raw_statement),
    );
    line("job row alone, INSERT … ON CONFLICT, pgbench", pgbench_job);
    line("job row alone, INSERT … ON CONFLICT, sqlx", Some(raw_job));
    // Every measurement wrote the rows it claims: a job per creation, and an attempt
    // per job where the baseline writes both.
    let count = |sql: String| {
        let admin = admin.clone();
        async move {
            sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql))
                .fetch_one(&admin)
                .await
                .expect("a count")
        }
    };
    let per_owner = |owner: &str| {
        format!(
            "SELECT COUNT(*) FROM {schema}.jobs j JOIN {schema}.attempts a ON a.job_id = j.id \
             WHERE j.owner_id = '{owner}'"
        )
    };
    let jobs = count(format!(
        "SELECT COUNT(*) FROM {schema}.jobs WHERE owner_id = 'bench-ledger'"
    ))
    .await;
    let ledger_attempts = count(per_owner("bench-ledger")).await;
    let pgbench_attempts = count(per_owner("bench-pgbench")).await;
    println!(
        "  (the ledger wrote {jobs} jobs and {ledger_attempts} attempts; pgbench's \
         statement, {pgbench_attempts} attempts)"
    );
    sqlx::raw_sql(AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(&admin)
        .await
        .expect("drop the schema");
}

/// What a raw PostgreSQL baseline writes.
#[derive(Clone, Copy)]
enum Baseline {
    /// The job and its first attempt: the ledger's own statement.
    JobAndAttempt,
    /// The job row alone, for scale.
    JobAlone,
}

impl Baseline {
    fn statement(self) -> &'static str {
        match self {
            Baseline::JobAndAttempt => CREATE_JOB_POSTGRES,
            Baseline::JobAlone => RAW_INSERT,
        }
    }

    /// Keys never repeat across measurements on one schema: each has its own prefix.
    fn key_prefix(self) -> &'static str {
        match self {
            Baseline::JobAndAttempt => "both",
            Baseline::JobAlone => "job",
        }
    }
}

/// The ids the ledger makes: Unix milliseconds first, then something unique.
fn raw_id(prefix: &str, c: u64, n: u64) -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    format!(
        "{prefix}_{ms:012x}{:020x}",
        (u128::from(c) << 64) | u128::from(n)
    )
}

/// The baseline's statement from 64 clients, through sqlx with the ledger's parameters,
/// without the ledger.
async fn raw_pg(pool: PgPool, span: Duration, baseline: Baseline) -> f64 {
    measure(span, move |c, n| {
        let pool = pool.clone();
        async move {
            let mut query = sqlx::query(baseline.statement())
                .bind(raw_id("job", c, n))
                .bind("bench-raw")
                .bind(format!("{}-{c}-{n}", baseline.key_prefix()))
                .bind("sha256:bench")
                .bind("bench")
                .bind("primary")
                .bind(r#"{"messages":[{"role":"user","content":"bench"}]}"#)
                .bind(1i64)
                .bind(0i64);
            if let Baseline::JobAndAttempt = baseline {
                query = query
                    .bind(raw_id("att", c, n))
                    .bind(1i64)
                    .bind("primary")
                    .bind(1i64)
                    .bind(0i64)
                    .bind(60_000i64);
            }
            query.execute(&pool).await.expect("a raw insert");
        }
    })
    .await
}

/// The baseline's statement as a pgbench script: each `$n` replaced by what the ledger
/// would bind, time-ordered ids included. pgbench reads `:name` as a variable, so the
/// colons of literals are spliced in with `chr(58)`.
fn pgbench_script(schema: &str, baseline: Baseline) -> String {
    let unique = "CAST(:client_id AS text) || '-' || CAST(:n AS text)";
    let id = |prefix: &str| {
        format!(
            "'{prefix}_' || lpad(to_hex(CAST(extract(epoch FROM clock_timestamp()) * 1000 AS \
             bigint)), 12, '0') || substr(md5({unique}), 1, 20)"
        )
    };
    let values = [
        id("job"),
        "'bench-pgbench'".to_string(),
        format!("'{}-' || {unique}", baseline.key_prefix()),
        "'sha256' || chr(58) || 'bench'".to_string(),
        "'bench'".to_string(),
        "'primary'".to_string(),
        INPUT.to_string(),
        "1".to_string(),
        "0".to_string(),
        id("att"),
        "1".to_string(),
        "'primary'".to_string(),
        "1".to_string(),
        "0".to_string(),
        "60000".to_string(),
    ];
    let mut sql = baseline
        .statement()
        .replace("INSERT INTO jobs", &format!("INSERT INTO {schema}.jobs"))
        .replace(
            "INSERT INTO attempts",
            &format!("INSERT INTO {schema}.attempts"),
        );
    // From `$15` down, so that `$1` does not eat the start of `$10`.
    for (i, value) in values.iter().enumerate().rev() {
        sql = sql.replace(&format!("${}", i + 1), value);
    }
    format!("\\set n random(1, 9000000000000000)\n{sql};\n")
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
    let raw_both = raw_sqlite(raw.clone(), span, true).await;
    let raw_job = raw_sqlite(raw.clone(), span, false).await;
    let ledger_rate = ledger_rate(ledger.clone(), span, "ledger").await;
    let line = |label: &str, rate: f64| {
        println!(
            "  {label:<58} {rate:>7.0} jobs/s   ledger: {:>4.0} %",
            100.0 * ledger_rate / rate
        )
    };
    println!(
        "  {:<58} {ledger_rate:>7.0} jobs/s",
        "ledger create_job (group commit)"
    );
    line("job + first attempt, a transaction each, sqlx", raw_both);
    line("job row alone, INSERT … ON CONFLICT, sqlx", raw_job);
    ledger.close().await;
    raw.close().await;
}

const RAW_ATTEMPT: &str = "INSERT INTO attempts (id, job_id, seq, provider, state, \
     base_version, started_ms, deadline_ms) VALUES ($1, $2, 1, 'primary', 'starting', 1, 0, \
     60000) ON CONFLICT DO NOTHING";

/// The job row (and with `attempt`, its first attempt) in a transaction per creation, on
/// the one connection SQLite lets write at a time.
async fn raw_sqlite(pool: SqlitePool, span: Duration, attempt: bool) -> f64 {
    measure(span, move |c, n| {
        let pool = pool.clone();
        async move {
            let job = raw_id("job", c, n);
            let mut tx = pool.begin().await.expect("a transaction");
            sqlx::query(RAW_INSERT)
                .bind(&job)
                .bind("bench-raw")
                .bind(format!("{attempt}-{c}-{n}"))
                .bind("sha256:bench")
                .bind("bench")
                .bind("primary")
                .bind(r#"{"messages":[{"role":"user","content":"bench"}]}"#)
                .bind(1i64)
                .bind(0i64)
                .execute(&mut *tx)
                .await
                .expect("a raw insert");
            if attempt {
                sqlx::query(RAW_ATTEMPT)
                    .bind(raw_id("att", c, n))
                    .bind(&job)
                    .execute(&mut *tx)
                    .await
                    .expect("a raw insert");
            }
            tx.commit().await.expect("a commit");
        }
    })
    .await
}

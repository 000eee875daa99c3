//! Scenarios on `threadstream_store::EventLog` directly (in this process): ingest-sqlite,
//! ingest-postgres, long-thread; with baselines A (the same SQLite schema, one transaction per
//! event) and B (cqrs-es `CqrsFramework::execute` + postgres-es, one command per event).

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres_es::{PostgresCqrs, PostgresEventRepository};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use threadstream_domain::{Thread, ThreadCommand};
use threadstream_store::{Durability, EventLog, NotifyMode};

use crate::data::{cmd, create, delta, fill_thread, run_start};
use crate::procstat::Window;
use crate::report::{Latency, Report, Row};
use crate::Ctx;

/// Result of driving appenders for a while.
pub struct Drive {
    pub events: u64,
    pub secs: f64,
    pub lat: Vec<u64>,
    pub errors: u64,
    /// Commit timestamps (ms) of the stored events: every event of one group-commit batch has
    /// the same `ts`, so distinct values estimate the number of batches.
    pub commit_ms: Vec<i64>,
}

impl Drive {
    fn row(self, name: &str, kind: &str) -> Row {
        let errors = self.errors;
        let mut row = Row::new(name, kind, self.events, self.secs, "events/s")
            .latency(Latency::from_nanos(self.lat))
            .extra("errors", errors);
        if !self.commit_ms.is_empty() {
            let mut ms = self.commit_ms;
            ms.sort_unstable();
            ms.dedup();
            let batches = ms.len() as f64;
            row = row
                .extra("commit_milliseconds_seen", ms.len() as u64)
                .extra(
                    "events_per_commit_ms",
                    crate::report::round(self.events as f64 / batches, 1),
                );
        }
        row
    }
}

/// `threads` concurrent streams, each appending one text-delta per request (waiting for each
/// acknowledgement, as an agent streaming tokens does) until `dur` has passed.
pub async fn drive_log(log: &EventLog, threads: usize, dur: Duration, prefix: &str) -> Drive {
    let ids: Vec<String> = (0..threads).map(|i| format!("{prefix}-{i}")).collect();
    let setup = futures::future::join_all(ids.iter().map(|t| {
        let run = format!("r-{t}");
        log.append(t, vec![create(), cmd(&run_start(&run, "a1"))])
    }))
    .await;
    let setup_errors = setup.iter().filter(|r| r.is_err()).count();
    assert_eq!(setup_errors, 0, "setup appends failed: {:?}", setup.first());
    let start = Instant::now();
    let deadline = start + dur;
    let mut tasks = Vec::with_capacity(threads);
    for t in ids {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            let command = cmd(&delta(&format!("r-{t}"), "a1", "token "));
            let mut lat = Vec::with_capacity(4096);
            let mut ts = Vec::with_capacity(4096);
            let (mut n, mut errors) = (0u64, 0u64);
            while Instant::now() < deadline {
                let t0 = Instant::now();
                match log.append(&t, vec![command.clone()]).await {
                    Ok(stored) => {
                        lat.push(t0.elapsed().as_nanos() as u64);
                        ts.extend(stored.iter().map(|e| e.ts));
                        n += 1;
                    }
                    Err(_) => errors += 1,
                }
            }
            (n, errors, lat, ts)
        }));
    }
    let mut d = Drive {
        events: 0,
        secs: 0.0,
        lat: Vec::new(),
        errors: 0,
        commit_ms: Vec::new(),
    };
    for t in tasks {
        let (n, e, lat, ts) = t.await.expect("appender task");
        d.events += n;
        d.errors += e;
        d.lat.extend(lat);
        d.commit_ms.extend(ts);
    }
    d.secs = start.elapsed().as_secs_f64();
    d
}

/// Baseline A: the same SQLite schema (migrations/sqlite, the log file), WAL, `synchronous=FULL`, one
/// transaction per event, the same `threads` concurrent streams through one connection.
async fn baseline_a(threads: usize, dur: Duration) -> anyhow::Result<Drive> {
    let dir = tempfile::tempdir()?;
    let opts = SqliteConnectOptions::from_str(&format!(
        "sqlite://{}",
        dir.path().join("baseline.db").display()
    ))?
    .create_if_missing(true)
    .journal_mode(SqliteJournalMode::Wal)
    .synchronous(SqliteSynchronous::Full)
    .busy_timeout(Duration::from_secs(30));
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(120))
        .connect_with(opts)
        .await?;
    // The log's schema as the server has it (its thread index lives apart, written behind).
    sqlx::raw_sql(include_str!("../../migrations/sqlite/0001_log.sql"))
        .execute(&pool)
        .await?;
    sqlx::raw_sql(include_str!(
        "../../migrations/sqlite/0002_thread_index_apart.sql"
    ))
    .execute(&pool)
    .await?;
    const INSERT: &str = "INSERT INTO events (thread_id, seq, run_id, agent_id, type, payload, ts, response_id, user_id) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL)";
    for i in 0..threads {
        sqlx::query(INSERT)
            .bind(format!("a-{i}"))
            .bind(1i64)
            .bind("r")
            .bind("a1")
            .bind("run-start")
            .bind(r#"{"messageId":"m"}"#)
            .bind(0i64)
            .execute(&pool)
            .await?;
    }
    let start = Instant::now();
    let deadline = start + dur;
    let mut tasks = Vec::new();
    for i in 0..threads {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let thread = format!("a-{i}");
            let mut seq = 1i64;
            let mut lat = Vec::new();
            let (mut n, mut errors) = (0u64, 0u64);
            while Instant::now() < deadline {
                let t0 = Instant::now();
                seq += 1;
                let r = sqlx::query(INSERT)
                    .bind(&thread)
                    .bind(seq)
                    .bind("r")
                    .bind("a1")
                    .bind("text-delta")
                    .bind(r#"{"text":"token "}"#)
                    .bind(0i64)
                    .execute(&pool)
                    .await;
                match r {
                    Ok(_) => {
                        lat.push(t0.elapsed().as_nanos() as u64);
                        n += 1;
                    }
                    Err(_) => errors += 1,
                }
            }
            (n, errors, lat)
        }));
    }
    let mut d = Drive {
        events: 0,
        secs: 0.0,
        lat: Vec::new(),
        errors: 0,
        commit_ms: Vec::new(),
    };
    for t in tasks {
        let (n, e, lat) = t.await?;
        d.events += n;
        d.errors += e;
        d.lat.extend(lat);
    }
    d.secs = start.elapsed().as_secs_f64();
    pool.close().await;
    Ok(d)
}

pub async fn ingest_sqlite(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let threads = if ctx.quick { 100 } else { 1000 };
    let dur = Duration::from_secs_f64(if ctx.quick { 1.5 } else { 15.0 });
    let dur_a = Duration::from_secs_f64(if ctx.quick { 1.0 } else { 5.0 });

    let dir = tempfile::tempdir()?;
    let log = EventLog::open_sqlite(dir.path(), Durability::Full).await?;
    let w = Window::this_process();
    let ours = drive_log(&log, threads, dur, "s").await;
    let usage = w.finish().await;
    log.shutdown().await;
    let ours = ours
        .row(
            &format!("writer, {threads} threads streaming deltas, synchronous=FULL (default)"),
            "threadstream",
        )
        .usage(usage);

    let dir_n = tempfile::tempdir()?;
    let log = EventLog::open_sqlite(dir_n.path(), Durability::Normal).await?;
    let w = Window::this_process();
    let normal = drive_log(&log, threads, dur.min(Duration::from_secs(5)), "n").await;
    let usage = w.finish().await;
    log.shutdown().await;
    let normal = normal
        .row(
            &format!("writer, {threads} threads, synchronous=NORMAL (opt-in, not power-safe)"),
            "variant",
        )
        .usage(usage);

    let w = Window::this_process();
    let a = baseline_a(threads, dur_a).await?;
    let usage = w.finish().await;
    let a = a
        .row(
            &format!("baseline A: same schema, 1 transaction per event, FULL, {threads} threads"),
            "baseline",
        )
        .usage(usage);

    let ratio = ours.throughput / a.throughput.max(1e-9);
    report.ratio("writer_FULL / baseline_A", ratio);
    report.ratio(
        "writer_NORMAL / writer_FULL",
        normal.throughput / ours.throughput.max(1e-9),
    );
    let p99 = ours.latency.as_ref().map(|l| l.p99_ms).unwrap_or(f64::MAX);
    report.check(
        "ingest SQLite durable ≥ 150,000 events/s",
        format!("{:.0} events/s", ours.throughput),
        ours.throughput >= 150_000.0,
    );
    report.check(
        "ingest SQLite ack p99 ≤ 10 ms",
        format!("{p99:.2} ms"),
        p99 <= 10.0,
    );
    report.check(
        "ingest SQLite ≥ 50× baseline A",
        format!("{ratio:.1}×"),
        ratio >= 50.0,
    );
    report.row(ours);
    report.row(normal);
    report.row(a);
    Ok(())
}

/// postgres-es's own DDL (`db/init.sql` of the postgres-es 0.5.0 crate): the events and
/// snapshots tables.
const POSTGRES_ES_DDL: &str = "
CREATE TABLE events
(
    aggregate_type text                         NOT NULL,
    aggregate_id   text                         NOT NULL,
    sequence       bigint CHECK (sequence >= 0) NOT NULL,
    event_type     text                         NOT NULL,
    event_version  text                         NOT NULL,
    payload        json                         NOT NULL,
    metadata       json                         NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id, sequence)
);
CREATE TABLE snapshots
(
    aggregate_type   text                                 NOT NULL,
    aggregate_id     text                                 NOT NULL,
    last_sequence    bigint CHECK (last_sequence >= 0)    NOT NULL,
    current_snapshot bigint CHECK (current_snapshot >= 0) NOT NULL,
    payload          json                                 NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id, last_sequence)
);";

/// Baseline B: cqrs-es `CqrsFramework::execute` over postgres-es (`PostgresEventRepository` +
/// `PersistedEventStore`), one command per event, the same concurrent streams.
async fn baseline_b(url: &str, threads: usize, dur: Duration) -> anyhow::Result<Drive> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(32)
        .acquire_timeout(Duration::from_secs(120))
        .connect(url)
        .await?;
    sqlx::raw_sql(POSTGRES_ES_DDL).execute(&pool).await?;
    let repo = PostgresEventRepository::new(pool.clone());
    let store = cqrs_es::persist::PersistedEventStore::new_event_store(repo);
    let cqrs: Arc<PostgresCqrs<Thread>> = Arc::new(cqrs_es::CqrsFramework::new(store, vec![], ()));
    for i in 0..threads {
        let t = format!("b-{i}");
        cqrs.execute(&t, create()).await?;
        cqrs.execute(&t, cmd(&run_start(&format!("r-{t}"), "a1")))
            .await?;
    }
    let start = Instant::now();
    let deadline = start + dur;
    let mut tasks = Vec::new();
    for i in 0..threads {
        let cqrs = cqrs.clone();
        tasks.push(tokio::spawn(async move {
            let t = format!("b-{i}");
            let command: ThreadCommand = cmd(&delta(&format!("r-{t}"), "a1", "token "));
            let mut lat = Vec::new();
            let (mut n, mut errors) = (0u64, 0u64);
            while Instant::now() < deadline {
                let t0 = Instant::now();
                match cqrs.execute(&t, command.clone()).await {
                    Ok(()) => {
                        lat.push(t0.elapsed().as_nanos() as u64);
                        n += 1;
                    }
                    Err(_) => errors += 1,
                }
            }
            (n, errors, lat)
        }));
    }
    let mut d = Drive {
        events: 0,
        secs: 0.0,
        lat: Vec::new(),
        errors: 0,
        commit_ms: Vec::new(),
    };
    for t in tasks {
        let (n, e, lat) = t.await?;
        d.events += n;
        d.errors += e;
        d.lat.extend(lat);
    }
    d.secs = start.elapsed().as_secs_f64();
    pool.close().await;
    Ok(d)
}

pub async fn ingest_postgres(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let threads = if ctx.quick { 100 } else { 1000 };
    // Baseline B runs as long as ours: it reloads a thread's whole history for every command,
    // so a shorter window (it was 5 s) measured it on shorter threads (docs/performance.md,
    // "Seventh pass").
    let dur = Duration::from_secs_f64(if ctx.quick { 1.5 } else { 15.0 });

    let (url, name) = crate::pg::create_db(&ctx.pg_admin, "tsbench_log").await?;
    let result = async {
        let log = EventLog::open_postgres(&url, NotifyMode::Postgres).await?;
        let w = Window::this_process();
        let ours = drive_log(&log, threads, dur, "p").await;
        let usage = w.finish().await;
        log.shutdown().await;
        anyhow::Ok((ours, usage))
    }
    .await;
    crate::pg::drop_db(&ctx.pg_admin, &name).await;
    let (ours, usage) = result?;
    let ours = ours
        .row(
            &format!("writer on Postgres, {threads} threads streaming deltas"),
            "threadstream",
        )
        .usage(usage);

    let (url, name) = crate::pg::create_db(&ctx.pg_admin, "tsbench_cqrs").await?;
    let w = Window::this_process();
    let b = baseline_b(&url, threads, dur).await;
    let usage = w.finish().await;
    crate::pg::drop_db(&ctx.pg_admin, &name).await;
    let b = b?
        .row(
            &format!("baseline B: cqrs-es execute + postgres-es, 1 command/event, {threads} threads, 32 conns"),
            "baseline",
        )
        .usage(usage);

    let ratio = ours.throughput / b.throughput.max(1e-9);
    report.ratio("writer_postgres / baseline_B", ratio);
    report.check(
        "ingest Postgres ≥ 100,000 events/s",
        format!("{:.0} events/s", ours.throughput),
        ours.throughput >= 100_000.0,
    );
    report.check(
        "ingest Postgres ≥ 25× baseline B",
        format!("{ratio:.1}×"),
        ratio >= 25.0,
    );
    report.note("Postgres: the machine's Postgres server shares the 2 cores with this process.");
    report.row(ours);
    report.row(b);
    Ok(())
}

pub async fn long_thread(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let long_events = if ctx.quick { 10_000 } else { 100_000 };
    let seq_n = if ctx.quick { 100 } else { 1000 };
    let dur = Duration::from_secs_f64(if ctx.quick { 1.0 } else { 5.0 });
    let dir = tempfile::tempdir()?;
    {
        // Setup only: fill the long thread (100 runs of 1,000 events), not measured.
        let log = EventLog::open_sqlite(dir.path(), Durability::Normal).await?;
        fill_thread(&log, "long", long_events / 1000, 1000, 1000).await?;
        log.append("fresh", vec![create(), cmd(&run_start("rf", "a1"))])
            .await?;
        log.append("fresh2", vec![create(), cmd(&run_start("rf2", "a1"))])
            .await?;
        // The long thread needs a live run to take deltas.
        log.append("long", vec![cmd(&run_start("rl", "a1"))])
            .await?;
        log.shutdown().await;
    }
    let log = EventLog::open_sqlite(dir.path(), Durability::Full).await?;
    let d_long = cmd(&delta("rl", "a1", "token "));
    let d_fresh = cmd(&delta("rf", "a1", "token "));
    // The first append after a restart loads the aggregate once (the only per-thread read).
    let t0 = Instant::now();
    log.append("long", vec![d_long.clone()]).await?;
    let cold = t0.elapsed();
    let t0 = Instant::now();
    log.append("fresh", vec![d_fresh.clone()]).await?;
    let cold_fresh = t0.elapsed();

    let (mut lat_long, mut lat_fresh) = (Vec::new(), Vec::new());
    let start = Instant::now();
    for i in 0..seq_n {
        // Alternate which goes first so drift in the machine's load hits both alike.
        for which in if i % 2 == 0 { [0, 1] } else { [1, 0] } {
            let (t, c, v) = if which == 0 {
                ("long", &d_long, &mut lat_long)
            } else {
                ("fresh", &d_fresh, &mut lat_fresh)
            };
            let t0 = Instant::now();
            log.append(t, vec![c.clone()]).await?;
            v.push(t0.elapsed().as_nanos() as u64);
        }
    }
    let seq_secs = start.elapsed().as_secs_f64() / 2.0;

    // Throughput: 64 concurrent appenders on one thread, long vs fresh, alternating twice.
    let conc = |thread: &'static str, run: &'static str| {
        let log = log.clone();
        async move {
            let start = Instant::now();
            let deadline = start + dur;
            let mut tasks = Vec::new();
            for _ in 0..64 {
                let log = log.clone();
                tasks.push(tokio::spawn(async move {
                    let c = cmd(&delta(run, "a1", "token "));
                    let mut lat = Vec::new();
                    while Instant::now() < deadline {
                        let t0 = Instant::now();
                        if log.append(thread, vec![c.clone()]).await.is_ok() {
                            lat.push(t0.elapsed().as_nanos() as u64);
                        }
                    }
                    lat
                }));
            }
            let mut lat = Vec::new();
            for t in tasks {
                lat.extend(t.await.expect("task"));
            }
            (lat.len() as u64, start.elapsed().as_secs_f64(), lat)
        }
    };
    let mut long_c = (0u64, 0f64, Vec::new());
    let mut fresh_c = (0u64, 0f64, Vec::new());
    for round in 0..2 {
        let order: [&str; 2] = if round == 0 {
            ["long", "fresh2"]
        } else {
            ["fresh2", "long"]
        };
        for t in order {
            let (n, s, l) = if t == "long" {
                conc("long", "rl").await
            } else {
                conc("fresh2", "rf2").await
            };
            let acc = if t == "long" {
                &mut long_c
            } else {
                &mut fresh_c
            };
            acc.0 += n;
            acc.1 += s;
            acc.2.extend(l);
        }
    }
    log.shutdown().await;

    let row_long = Row::new(
        format!("append 1 event to a thread holding {long_events} events (sequential)"),
        "threadstream",
        seq_n as u64,
        seq_secs,
        "appends/s",
    )
    .latency(Latency::from_nanos(lat_long));
    let row_fresh = Row::new(
        "append 1 event to a new thread (sequential)",
        "baseline",
        seq_n as u64,
        seq_secs,
        "appends/s",
    )
    .latency(Latency::from_nanos(lat_fresh));
    let conc_long = Row::new(
        format!("64 appenders on the {long_events}-event thread"),
        "threadstream",
        long_c.0,
        long_c.1,
        "events/s",
    )
    .latency(Latency::from_nanos(long_c.2));
    let conc_fresh = Row::new(
        "64 appenders on a new thread",
        "baseline",
        fresh_c.0,
        fresh_c.1,
        "events/s",
    )
    .latency(Latency::from_nanos(fresh_c.2));
    let cold_row = Row::new(
        format!("first append after restart: loads the {long_events}-event aggregate once"),
        "info",
        1,
        cold.as_secs_f64(),
        "appends/s",
    )
    .latency(Latency::from_durations(&[cold]))
    .extra("first_append_new_thread_ms", cold_fresh.as_secs_f64() * 1e3);

    let p50 = |r: &Row| r.latency.as_ref().map(|l| l.p50_ms).unwrap_or(0.0);
    let seq_ratio = p50(&row_long) / p50(&row_fresh).max(1e-9);
    let conc_ratio = conc_fresh.throughput / conc_long.throughput.max(1e-9);
    report.ratio("sequential p50 long / new", seq_ratio);
    report.ratio("concurrent time per event long / new", conc_ratio);
    report.check(
        "append to a 100,000-event thread ≤ 1.2× a new thread (sequential p50)",
        format!("{seq_ratio:.2}×"),
        seq_ratio <= 1.2,
    );
    report.check(
        "append to a 100,000-event thread ≤ 1.2× a new thread (64 appenders, time per event)",
        format!("{conc_ratio:.2}×"),
        conc_ratio <= 1.2,
    );
    for r in [row_long, row_fresh, conc_long, conc_fresh, cold_row] {
        report.row(r);
    }
    Ok(())
}

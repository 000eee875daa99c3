//! `compaction`: what a finished run stores per token before and after compaction (#35 part 5),
//! on both stores, in this process (`threadstream_store::EventLog`).
//!
//! Threads stream realistic runs (`data::realistic_run`: reasoning, tool calls, a sub-agent,
//! the answer; one event per append, every thread at once, so ids interleave as under load),
//! finish them, and [`EventLog::compact_finished`] compacts them all. The log's bytes are
//! measured before and after, each the way the store lays them out with no free space counted:
//! SQLite's `dbstat` (bytes used in the pages of `events` and its indexes) plus the thread index
//! file, Postgres's `pg_total_relation_size('events')` after `VACUUM FULL`. "Beyond the text"
//! takes the tokens' own UTF-8 bytes away.

use std::time::Instant;

use anyhow::Context;
use sqlx::Connection;
use threadstream_store::{Durability, EventLog, NotifyMode};

use crate::data::{cmd, create, realistic_run};
use crate::report::{round, Report, Row};
use crate::Ctx;

/// The log's bytes as the store lays them out (no free space).
async fn log_bytes(store: &Store) -> anyhow::Result<u64> {
    match store {
        Store::Sqlite(dir) => {
            let path = dir.path().join("threadstream.db");
            let opts = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(&path)
                .read_only(true);
            let mut c = sqlx::SqliteConnection::connect_with(&opts).await?;
            let used: i64 = sqlx::query_scalar(
                "SELECT coalesce(sum(pgsize - unused), 0) FROM dbstat WHERE name IN \
                 (SELECT name FROM sqlite_schema WHERE tbl_name = 'events')",
            )
            .fetch_one(&mut c)
            .await
            .context("dbstat")?;
            c.close().await?;
            let index = ["threadstream-index.db", "threadstream-index.db-wal"]
                .iter()
                .map(|f| std::fs::metadata(dir.path().join(f)).map_or(0, |m| m.len()))
                .sum::<u64>();
            Ok(used as u64 + index)
        }
        Store::Postgres { url, .. } => {
            let mut c = sqlx::PgConnection::connect(url).await?;
            sqlx::query("VACUUM FULL events").execute(&mut c).await?;
            let n: i64 = sqlx::query_scalar("SELECT pg_total_relation_size('events')")
                .fetch_one(&mut c)
                .await?;
            c.close().await?;
            Ok(n as u64)
        }
    }
}

enum Store {
    Sqlite(tempfile::TempDir),
    Postgres { url: String, name: String },
}

pub async fn compaction(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let (threads, runs, events_per_run) = if ctx.quick { (8, 2, 108) } else { (40, 4, 408) };
    for kind in ["sqlite", "postgres"] {
        let (store, log) = match kind {
            "sqlite" => {
                let dir = tempfile::tempdir()?;
                let log = EventLog::open_sqlite(dir.path(), Durability::Normal).await?;
                (Store::Sqlite(dir), log)
            }
            _ => {
                let (url, name) = crate::pg::create_db(&ctx.pg_admin, "bench_compaction").await?;
                let log = EventLog::open_postgres(&url, NotifyMode::Local).await?;
                (Store::Postgres { url, name }, log)
            }
        };
        // Every thread streams its runs one event per append, all threads at once.
        let mut tasks = Vec::new();
        for t in 0..threads {
            let log = log.clone();
            tasks.push(tokio::spawn(async move {
                let thread = format!("t{t}");
                log.append(&thread, vec![create()]).await?;
                let mut text = 0u64;
                let mut tokens = 0u64;
                for r in 0..runs {
                    for e in realistic_run(&format!("r{t}-{r}"), events_per_run) {
                        if e["type"].as_str().is_some_and(|t| t.ends_with("-delta")) {
                            text += e["payload"]["text"].as_str().unwrap_or("").len() as u64;
                            tokens += 1;
                        }
                        log.append(&thread, vec![cmd(&e)]).await?;
                    }
                }
                anyhow::Ok((tokens, text))
            }));
        }
        let (mut tokens, mut text) = (0u64, 0u64);
        for t in tasks {
            let (n, b) = t.await??;
            tokens += n;
            text += b;
        }
        let events = log.read_all(0, i64::MAX).await?.len() as u64;
        let before = log_bytes(&store).await?;
        let t0 = Instant::now();
        let sweep = log.compact_finished(i64::MAX).await?;
        let secs = t0.elapsed().as_secs_f64();
        let rows_after = log.read_all(0, i64::MAX).await?.len() as u64;
        log.shutdown().await;
        let after = log_bytes(&store).await?;
        if let Store::Postgres { name, .. } = &store {
            crate::pg::drop_db(&ctx.pg_admin, name).await;
        }
        let per_token = |bytes: u64| bytes as f64 / tokens as f64;
        let beyond = |bytes: u64| (bytes as f64 - text as f64) / tokens as f64;
        report.row(
            Row::new(
                format!("{kind}: compact {} finished runs", sweep.runs),
                "threadstream",
                sweep.compacted.replaced,
                secs,
                "deltas/s",
            )
            .extra("store", kind)
            .extra("threads", threads)
            .extra("runs", sweep.runs)
            .extra("events", events)
            .extra("rows_after", rows_after)
            .extra("tokens", tokens)
            .extra(
                "text_bytes_per_token",
                round(text as f64 / tokens as f64, 2),
            )
            .extra("ranges", sweep.compacted.ranges)
            .extra("log_bytes_before", before)
            .extra("log_bytes_after", after)
            .extra("bytes_per_token_before", round(per_token(before), 1))
            .extra("bytes_per_token_after", round(per_token(after), 1))
            .extra("beyond_text_per_token_before", round(beyond(before), 1))
            .extra("beyond_text_per_token_after", round(beyond(after), 1)),
        );
        report.check(
            &format!("{kind}: a compacted run stores ≤ 16 bytes per token beyond its text"),
            format!(
                "{:.1} bytes (uncompacted {:.1})",
                beyond(after),
                beyond(before)
            ),
            beyond(after) <= 16.0,
        );
    }
    Ok(())
}

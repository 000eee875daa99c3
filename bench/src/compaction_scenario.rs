//! `compaction`: what a finished run stores per token before and after compaction (#35 part 5),
//! on both stores, in this process (`threadstream_store::EventLog`).
//!
//! Threads stream realistic runs (`data::realistic_run`: reasoning, tool calls, a sub-agent,
//! the answer; one event per append, every thread at once, so ids interleave as under load),
//! finish them, and [`EventLog::compact_finished`] compacts them all. The log's bytes are
//! measured before and after, each the way the store lays them out with no free space counted:
//! SQLite's `dbstat` (bytes used in the pages of `events` and its indexes, and of the thread
//! index file's tables), Postgres's `pg_total_relation_size('events')` after `VACUUM FULL`
//! (TOAST included: Postgres compresses a long payload). "Beyond the text" takes the tokens' own
//! UTF-8 bytes away.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Context;
use sqlx::Connection;
use threadstream_domain::EventBody;
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
            // The thread index (which ids are whose, kept apart): what its tables hold.
            let opts = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(dir.path().join("threadstream-index.db"))
                .read_only(true);
            let mut c = sqlx::SqliteConnection::connect_with(&opts).await?;
            let index: i64 =
                sqlx::query_scalar("SELECT coalesce(sum(pgsize - unused), 0) FROM dbstat")
                    .fetch_one(&mut c)
                    .await
                    .context("dbstat of the thread index")?;
            c.close().await?;
            Ok(used as u64 + index as u64)
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

/// Each (thread, run, agent, type)'s deltas as one text, and every other event's id.
fn texts(rows: &[threadstream_domain::StoredEvent]) -> (BTreeMap<[String; 4], String>, Vec<i64>) {
    let mut texts: BTreeMap<[String; 4], String> = BTreeMap::new();
    let mut others = Vec::new();
    for e in rows {
        match e.decode().map(|d| d.body) {
            Ok(EventBody::TextDelta(d) | EventBody::ReasoningDelta(d)) => texts
                .entry([
                    e.thread_id.clone(),
                    e.run_id.clone(),
                    e.agent_id.clone(),
                    e.event_type.clone(),
                ])
                .or_default()
                .push_str(&d.text),
            _ => others.push(e.id),
        }
    }
    (texts, others)
}

/// Tokens as a model writes them, for what the store makes of them: words of 2–8 letters and a
/// space, drawn by xorshift (text that compresses as little as prose does, not a repeated
/// pattern that Postgres's TOAST compression would fold away).
struct Words(u64);

impl Words {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn next_word(&mut self) -> String {
        let len = 2 + (self.next() % 7) as usize;
        let mut w: String = (0..len)
            .map(|_| (b'a' + (self.next() % 26) as u8) as char)
            .collect();
        w.push(' ');
        w
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
                let mut words = Words(0x9e37_79b9_7f4a_7c15 ^ t as u64);
                for r in 0..runs {
                    for mut e in realistic_run(&format!("r{t}-{r}"), events_per_run) {
                        if e["type"].as_str().is_some_and(|t| t.ends_with("-delta")) {
                            let word = words.next_word();
                            text += word.len() as u64;
                            tokens += 1;
                            e["payload"]["text"] = word.into();
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
        let written = log.read_all(0, i64::MAX).await?;
        let events = written.len() as u64;
        let before = log_bytes(&store).await?;
        let t0 = Instant::now();
        let sweep = log.compact_finished(i64::MAX).await?;
        let secs = t0.elapsed().as_secs_f64();
        let compacted = log.read_all(0, i64::MAX).await?;
        let rows_after = compacted.len() as u64;
        let kept = texts(&written) == texts(&compacted);
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
            &format!("{kind}: every thread's text the same after compaction"),
            if kept { "the same" } else { "differs" }.to_string(),
            kept,
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

//! The physical floor of one token at model speed (issue #35): what the work of a token costs
//! when nothing is spent on waiting, waking or small batches, measured in this process so that
//! agent-load can state its cost per appended event as a ratio to it.
//!
//! The floor is the sum of four parts, each CPU µs per token:
//! - **parse**: the provider's chunk (the fake provider's exact bytes) through the agent's own
//!   SSE parser and OpenAI decoder;
//! - **decide + row**: the writer deciding and storing text deltas at large batches (1,000
//!   threads, each with one append in flight, as `ingest-sqlite` / `ingest-postgres` drive it),
//!   on the store of the row: this process's CPU (the writer runs here), plus every Postgres
//!   process's on Postgres;
//! - **four SSE writes**: an n8n `text-delta` frame (the size the golden stream has) written
//!   to four loopback sockets, one `write` each, as four watchers get it. The writing thread's
//!   CPU only (on loopback the kernel's TCP work for the receiver is done in the sender's
//!   `write`, so that is in the figure; the readers' own `read`s are the watchers' cost).
//!
//! What it leaves out is what agent-load's figure holds beyond the work: reading the token off
//! the provider's socket, waking the run, the writer, the syncer and each watcher, the commit
//! and `fsync` of a small batch, the projector, and the HTTP of the ingest agents.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use threadstream_agent::llm::http::Decoder;
use threadstream_agent::llm::openai::OpenAiDecoder;
use threadstream_agent::llm::sse::SseParser;
use threadstream_store::{Durability, EventLog, NotifyMode};

use super::logdb::StoreKind;
use crate::procstat::{ProcessGroupWindow, Window};
use crate::report::round;

/// The floor's parts, CPU µs per token.
#[derive(Debug, Clone, Copy)]
pub struct Floor {
    pub parse_us: f64,
    pub decide_row_us: f64,
    pub sse_writes_us: f64,
}

impl Floor {
    pub fn total_us(&self) -> f64 {
        self.parse_us + self.decide_row_us + self.sse_writes_us
    }

    /// The row's extras: the parts and the total.
    pub fn extras(&self) -> serde_json::Value {
        serde_json::json!({
            "floor_parse_us": round(self.parse_us, 2),
            "floor_decide_row_us": round(self.decide_row_us, 2),
            "floor_four_sse_writes_us": round(self.sse_writes_us, 2),
            "floor_us_per_token": round(self.total_us(), 2),
        })
    }
}

/// Watchers a token is written to in the floor (the "four SSE writes").
const WATCHERS: usize = 4;

/// Measures the floor on `store` (`pg_admin`: where a fresh database is made on Postgres).
pub async fn measure(store: StoreKind, pg_admin: &str, quick: bool) -> anyhow::Result<Floor> {
    let tokens = if quick { 20_000 } else { 200_000 };
    let parse_us = tokio::task::spawn_blocking(move || parse(tokens)).await??;
    let sse_writes_us = tokio::task::spawn_blocking(move || sse_writes(tokens / 4)).await??;
    let decide_row_us = decide_row(store, pg_admin, quick).await?;
    Ok(Floor {
        parse_us,
        decide_row_us,
        sse_writes_us,
    })
}

/// CPU time of the calling thread: the first field of `/proc/thread-self/schedstat`, time
/// on the CPU in ns (the workspace forbids `unsafe`, so not `clock_gettime`).
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat")
        .expect("/proc/thread-self/schedstat");
    let ns = stat
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .expect("schedstat's first field");
    Duration::from_nanos(ns)
}

/// µs of this thread's CPU per unit over `units` calls of `work`.
fn per_unit(
    units: usize,
    mut work: impl FnMut(usize) -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    let t0 = thread_cpu();
    for i in 0..units {
        work(i)?;
    }
    Ok((thread_cpu() - t0).as_secs_f64() * 1e6 / units as f64)
}

/// One token's chunk, byte for byte as the fake provider sends it, parsed and decoded.
fn parse(tokens: usize) -> anyhow::Result<f64> {
    let chunk = format!("data: {}\n\n", crate::fake_llm::text_chunk("token "));
    let mut parser = SseParser::default();
    let mut decoder = OpenAiDecoder::default();
    per_unit(tokens, |_| {
        let events = parser.feed(chunk.as_bytes()).map_err(anyhow::Error::msg)?;
        anyhow::ensure!(events.len() == 1, "one event per chunk");
        for e in events {
            let chunks = decoder.event(e)?;
            anyhow::ensure!(chunks.len() == 1, "one text chunk per event");
        }
        Ok(())
    })
}

/// One n8n `text-delta` frame written to [`WATCHERS`] loopback sockets, drained by readers.
fn sse_writes(tokens: usize) -> anyhow::Result<f64> {
    let frame = b"id: 123456\ndata: {\"type\":\"text-delta\",\"runId\":\"run_1\",\"agentId\":\"agent_1\",\"payload\":{\"text\":\"token \"},\"ts\":1700000000380}\n\n";
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let mut writers = Vec::new();
    let mut readers = Vec::new();
    for _ in 0..WATCHERS {
        let w = TcpStream::connect(addr)?;
        w.set_nodelay(true)?;
        let (mut r, _) = listener.accept()?;
        readers.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            let mut total = 0usize;
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                total += n;
            }
            total
        }));
        writers.push(w);
    }
    let us = per_unit(tokens, |_| {
        for w in &mut writers {
            w.write_all(frame)?;
        }
        Ok(())
    })?;
    drop(writers);
    for r in readers {
        let got = r.join().map_err(|_| anyhow::anyhow!("a reader panicked"))?;
        anyhow::ensure!(got == tokens * frame.len(), "a reader got {got} bytes");
    }
    Ok(us)
}

/// The writer at large batches on `store`: CPU µs per stored event, this process's plus
/// Postgres's.
async fn decide_row(store: StoreKind, pg_admin: &str, quick: bool) -> anyhow::Result<f64> {
    let threads = if quick { 100 } else { 1_000 };
    let dur = Duration::from_secs_f64(if quick { 1.0 } else { 5.0 });
    match store {
        StoreKind::Sqlite => {
            let dir = tempfile::tempdir()?;
            let log = EventLog::open_sqlite(dir.path(), Durability::Full).await?;
            let w = Window::this_process();
            let drive = crate::store_scenarios::drive_log(&log, threads, dur, "floor").await;
            let usage = w.finish().await;
            log.shutdown().await;
            per_event(usage.cpu_seconds, drive.events)
        }
        StoreKind::Postgres => {
            let (url, name) = crate::pg::create_db(pg_admin, "tsbench_floor").await?;
            let result = async {
                let log = EventLog::open_postgres(&url, NotifyMode::Postgres).await?;
                let pg = ProcessGroupWindow::postgres(&name);
                let w = Window::this_process();
                let drive = crate::store_scenarios::drive_log(&log, threads, dur, "floor").await;
                let usage = w.finish().await;
                let pg = pg.finish();
                log.shutdown().await;
                per_event(usage.cpu_seconds + pg.cpu_seconds, drive.events)
            }
            .await;
            crate::pg::drop_db(pg_admin, &name).await;
            result
        }
    }
}

fn per_event(cpu_seconds: f64, events: u64) -> anyhow::Result<f64> {
    anyhow::ensure!(events > 0, "the writer stored nothing");
    Ok(cpu_seconds * 1e6 / events as f64)
}

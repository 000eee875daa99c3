//! What the phases share: the options, the load, the servers started for it, and what each
//! phase measured.

use crate::report::Row;
use crate::server::{Server, Store};
use crate::Ctx;
use anyhow::Context;
use std::path::PathBuf;
use std::process::Stdio;
use tokio::process::Command;

/// Whole catch-up reads timed per server (the median is the figure).
pub(super) const CATCHUP_READS: usize = 5;

/// The append-cost phase fails its row when the achieved rate is below this share of the offered:
/// the load was not sustained.
pub(super) const SUSTAINED: f64 = 0.95;

/// A phase of the scenario (`--ds-phases`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Phase {
    /// Fixed-rate appends, judged by CPU per appended value.
    Cost,
    /// Closed-loop appends, judged by throughput.
    Append,
    Catchup,
    Fanout,
}

/// The scenario's options (`--ds-*`).
#[derive(Clone, Debug)]
pub struct Opts {
    pub phases: Vec<Phase>,
    /// Append cost: values per second offered in all, by how many producers, for how long.
    pub cost_rate: f64,
    pub cost_producers: usize,
    pub cost_secs: f64,
    /// Append cost: threadstream's stores measured (the reference is always measured).
    pub cost_on_sqlite: bool,
    pub cost_on_postgres: bool,
}

impl Opts {
    pub fn new(quick: bool) -> Opts {
        let (cost_rate, cost_producers, cost_secs) = if quick {
            (1_000.0, 10, 1.0)
        } else {
            // 50 producers × 100 values/s: 500 requests/s of 10 values, which one Node process
            // sends with about half a core (the closed-loop phase's 100 producers take more
            // than a whole core).
            (5_000.0, 50, 20.0)
        };
        Opts {
            phases: vec![Phase::Cost, Phase::Append, Phase::Catchup, Phase::Fanout],
            cost_rate,
            cost_producers,
            cost_secs,
            cost_on_sqlite: true,
            cost_on_postgres: true,
        }
    }
}

/// The load, the same for both servers.
pub(super) struct Load {
    pub(super) producers: usize,
    pub(super) append_secs: f64,
    /// Values per producer request (see producers.mjs).
    pub(super) batch: usize,
    pub(super) catchup_values: usize,
    /// Values per POST while pre-filling the catch-up stream, and POSTs in flight.
    pub(super) fill_batch: usize,
    pub(super) fill_concurrency: usize,
    pub(super) readers: usize,
    /// Messages per second the fan-out writer appends, and for how long.
    pub(super) rate: u64,
    pub(super) fanout_secs: f64,
}

impl Load {
    pub(super) fn new(quick: bool) -> Load {
        if quick {
            Load {
                producers: 10,
                append_secs: 1.0,
                batch: 10,
                catchup_values: 2_000,
                fill_batch: 10,
                fill_concurrency: 8,
                readers: 50,
                rate: 20,
                fanout_secs: 1.0,
            }
        } else {
            Load {
                producers: 100,
                append_secs: 10.0,
                batch: 10,
                catchup_values: 100_000,
                // The reference serializes a stream's appends (each waits for its fsync and
                // LMDB commit): 1,000 POSTs fill it in a reasonable time.
                fill_batch: 100,
                fill_concurrency: 16,
                readers: 1_000,
                // Tokens batched every 50 ms; a rate the reference's serialized appends to one
                // stream can keep up with on this machine.
                rate: 20,
                fanout_secs: 10.0,
            }
        }
    }
}

/// `bench/node`: next to this crate's sources (`BENCH_NODE_DIR` overrides).
pub(super) fn node_dir() -> PathBuf {
    std::env::var_os("BENCH_NODE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("node"))
}

/// The servers, in the order they are measured (threadstream on Postgres: append cost only).
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Which {
    Threadstream,
    ThreadstreamPostgres,
    Reference,
}

impl Which {
    pub(super) fn label(self) -> &'static str {
        match self {
            Which::Threadstream => "threadstream",
            Which::ThreadstreamPostgres => "threadstream on Postgres",
            Which::Reference => "reference @durable-streams/server 0.3.7 (file-backed)",
        }
    }
    /// The label of an append-cost row, which names threadstream's store.
    pub(super) fn cost_label(self) -> &'static str {
        match self {
            Which::Threadstream => "threadstream on SQLite",
            other => other.label(),
        }
    }
    pub(super) fn kind(self) -> &'static str {
        match self {
            Which::Threadstream => "threadstream",
            Which::ThreadstreamPostgres => "variant",
            Which::Reference => "baseline",
        }
    }
    /// Its name in ratio keys.
    pub(super) fn key(self) -> &'static str {
        match self {
            Which::Threadstream => "threadstream_sqlite",
            Which::ThreadstreamPostgres => "threadstream_postgres",
            Which::Reference => "reference",
        }
    }
}

/// Starts a server on a fresh data dir (`dir`), or for threadstream on Postgres on the database
/// at `pg_url`.
pub(super) async fn start(
    ctx: &Ctx,
    which: Which,
    dir: &std::path::Path,
    pg_url: Option<&str>,
) -> anyhow::Result<Server> {
    match which {
        Which::Threadstream => Server::start(&ctx.bin()?, Store::Sqlite(dir), &[]).await,
        Which::ThreadstreamPostgres => {
            let url = pg_url.context("threadstream on Postgres needs a database")?;
            Server::start(&ctx.bin()?, Store::Postgres(url), &[]).await
        }
        Which::Reference => {
            let mut cmd = Command::new("node");
            cmd.arg(node_dir().join("reference-server.mjs"))
                .arg(dir)
                .arg("--until-stdin-closes")
                // A pipe the child keeps until we drop it: the server never outlives the bench.
                .stdin(Stdio::piped());
            Server::spawn(cmd, "node reference-server.mjs (is node installed?)").await
        }
    }
}

/// What one server measured in the phases other than append cost (`None`: not run).
pub(super) struct Measured {
    pub(super) rows: Vec<Row>,
    pub(super) append_values_per_s: Option<f64>,
    pub(super) catchup_values_per_s: Option<f64>,
    pub(super) fanout_p99_ms: Option<f64>,
    pub(super) problems: Vec<String>,
}

/// What one server's append-cost phase measured.
pub(super) struct CostMeasured {
    pub(super) which: Which,
    pub(super) row: Row,
    /// CPU µs per appended value: the server's, plus Postgres's processes' for threadstream on
    /// Postgres.
    pub(super) us_per_value: f64,
    pub(super) achieved_values_per_s: f64,
    pub(super) sustained: bool,
    /// The node client's CPU over the phase, as a share of one core (%).
    pub(super) client_core_percent: f64,
    pub(super) machine_idle_percent: f64,
    pub(super) problems: Vec<String>,
}

/// Creates the JSON stream at `url` (a PUT), or says what the server answered.
pub(super) async fn create_json_stream(client: &reqwest::Client, url: &str) -> anyhow::Result<()> {
    let resp = client
        .put(url)
        .header("content-type", "application/json")
        .send()
        .await?;
    anyhow::ensure!(
        resp.status().is_success(),
        "create answered {}",
        resp.status()
    );
    Ok(())
}

//! `durable-streams`: threadstream's `/v1/stream/*` against the reference server,
//! `@durable-streams/server` (its `DurableStreamTestServer`, file-backed: LMDB and segment
//! files), both started here and driven with the same load one after the other:
//!
//! - append cost: real `IdempotentProducer`s offering a fixed rate (open loop, default 5,000
//!   values/s, 10 per request), which one Node process sustains with headroom; each server's CPU
//!   per appended value over the phase (threadstream on SQLite and on Postgres, with Postgres's
//!   processes counted, and the reference), the client's CPU and the machine's idle time beside
//!   it; every stream read back and checked;
//! - append: 100 concurrent real `IdempotentProducer`s (`@durable-streams/client`, run by
//!   `bench/node/producers.mjs`), one JSON stream each, every stream read back and checked;
//! - catch-up: a 100,000-value JSON stream read from offset -1 with plain HTTP GETs following
//!   `Stream-Next-Offset` until `Stream-Up-To-Date`, checked value by value;
//! - live fan-out: 1,000 SSE readers (`live=sse`) of one stream while a writer appends
//!   timestamped messages at a steady rate; latency is received − sent, per reader per message,
//!   and every reader must get every message in the stream's order.
//!
//! The Node side (the reference server and the producers) lives in `bench/node/` and uses the
//! packages pinned in `tests/conformance/durable-streams` (`bash tests/conformance/install.sh`).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

use crate::client::{http_client, us};
use crate::procstat::{GroupUsage, ProcessGroupWindow, Window};
use crate::report::{round, Latency, Report, Row, Usage};
use crate::server::{Server, Store};
use crate::sse::{Read, SseConn};
use crate::Ctx;

/// Whole catch-up reads timed per server (the median is the figure).
const CATCHUP_READS: usize = 5;

/// The append-cost phase fails its row when the achieved rate is below this share of the offered:
/// the load was not sustained.
const SUSTAINED: f64 = 0.95;

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
struct Load {
    producers: usize,
    append_secs: f64,
    /// Values per producer request (see producers.mjs).
    batch: usize,
    catchup_values: usize,
    /// Values per POST while pre-filling the catch-up stream, and POSTs in flight.
    fill_batch: usize,
    fill_concurrency: usize,
    readers: usize,
    /// Messages per second the fan-out writer appends, and for how long.
    rate: u64,
    fanout_secs: f64,
}

impl Load {
    fn new(quick: bool) -> Load {
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
fn node_dir() -> PathBuf {
    std::env::var_os("BENCH_NODE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("node"))
}

/// The servers, in the order they are measured (threadstream on Postgres: append cost only).
#[derive(Clone, Copy, PartialEq)]
enum Which {
    Threadstream,
    ThreadstreamPostgres,
    Reference,
}

impl Which {
    fn label(self) -> &'static str {
        match self {
            Which::Threadstream => "threadstream",
            Which::ThreadstreamPostgres => "threadstream on Postgres",
            Which::Reference => "reference @durable-streams/server 0.3.7 (file-backed)",
        }
    }
    /// The label of an append-cost row, which names threadstream's store.
    fn cost_label(self) -> &'static str {
        match self {
            Which::Threadstream => "threadstream on SQLite",
            other => other.label(),
        }
    }
    fn kind(self) -> &'static str {
        match self {
            Which::Threadstream => "threadstream",
            Which::ThreadstreamPostgres => "variant",
            Which::Reference => "baseline",
        }
    }
    /// Its name in ratio keys.
    fn key(self) -> &'static str {
        match self {
            Which::Threadstream => "threadstream_sqlite",
            Which::ThreadstreamPostgres => "threadstream_postgres",
            Which::Reference => "reference",
        }
    }
}

/// Starts a server on a fresh data dir (`dir`), or for threadstream on Postgres on the database
/// at `pg_url`.
async fn start(
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
struct Measured {
    rows: Vec<Row>,
    append_values_per_s: Option<f64>,
    catchup_values_per_s: Option<f64>,
    fanout_p99_ms: Option<f64>,
    problems: Vec<String>,
}

/// What one server's append-cost phase measured.
struct CostMeasured {
    which: Which,
    row: Row,
    /// CPU µs per appended value: the server's, plus Postgres's processes' for threadstream on
    /// Postgres.
    us_per_value: f64,
    achieved_values_per_s: f64,
    sustained: bool,
    /// The node client's CPU over the phase, as a share of one core (%).
    client_core_percent: f64,
    machine_idle_percent: f64,
    problems: Vec<String>,
}

pub async fn durable_streams(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let load = Load::new(ctx.quick);
    let o = &ctx.ds;
    let limit = crate::procstat::raise_nofile(4 * load.readers as u64 + 1024);
    ensure!(
        limit >= 2 * load.readers as u64 + 256,
        "open-file limit {limit} is too low for {} SSE readers",
        load.readers
    );

    // Append cost first, each server on a fresh store, back to back: the comparison is made
    // with the machine in as near the same state as one run allows.
    let mut costs = Vec::new();
    if o.phases.contains(&Phase::Cost) {
        let mut servers = Vec::new();
        if o.cost_on_sqlite {
            servers.push(Which::Threadstream);
        }
        if o.cost_on_postgres {
            servers.push(Which::ThreadstreamPostgres);
        }
        servers.push(Which::Reference);
        for which in servers {
            eprintln!("  {}: append cost", which.cost_label());
            let m = append_cost(ctx, o, &load, which)
                .await
                .with_context(|| format!("append cost of {}", which.cost_label()))?;
            costs.push(m);
        }
        cost_checks(o, &load, &costs, report);
    }

    let phases: Vec<Phase> = o
        .phases
        .iter()
        .copied()
        .filter(|p| *p != Phase::Cost)
        .collect();
    let mut results = Vec::new();
    if !phases.is_empty() {
        for which in [Which::Threadstream, Which::Reference] {
            let dir = tempfile::tempdir()?;
            let server = start(ctx, which, dir.path(), None).await?;
            let m = measure(&load, &phases, which, &server).await;
            server.stop().await;
            results.push(m.with_context(|| format!("measuring {}", which.label()))?);
        }
        phase_checks(&results[0], &results[1], report);
    }

    // Every check of threadstream's answers, over every phase and store.
    let mut ts_problems: Vec<String> = costs
        .iter()
        .filter(|c| c.which != Which::Reference)
        .flat_map(|c| {
            c.problems
                .iter()
                .map(|p| format!("{}: {p}", c.which.cost_label()))
        })
        .collect();
    if let Some(ts) = results.first() {
        ts_problems.extend(ts.problems.iter().cloned());
    }
    report.check(
        "every check of threadstream's answers passed (all values, in order)",
        if ts_problems.is_empty() {
            "all passed".into()
        } else {
            ts_problems.join("; ")
        },
        ts_problems.is_empty(),
    );
    for c in &costs {
        for p in &c.problems {
            report.note(format!("{}: {p}", c.which.cost_label()));
        }
    }
    for (which, m) in [Which::Threadstream, Which::Reference].iter().zip(&results) {
        for p in &m.problems {
            report.note(format!("{}: {p}", which.label()));
        }
    }
    if o.phases.contains(&Phase::Cost) {
        report.note(format!(
            "Load: append cost {} values/s offered by {} IdempotentProducers ({} values/s each, \
             {} values per request, one batch every {:.0} ms on a timer per producer, open loop) \
             for {:.0} s; CPU from /proc over the phase (stream creation and the read-back \
             check outside it); on Postgres every postgres process of the cluster is counted \
             with the server.",
            o.cost_rate,
            o.cost_producers,
            o.cost_rate / o.cost_producers as f64,
            load.batch,
            1000.0 * load.batch as f64 * o.cost_producers as f64 / o.cost_rate,
            o.cost_secs,
        ));
    }
    if !phases.is_empty() {
        report.note(format!(
            "Load: append {} producers × {:.0} s, {} values per request, lingerMs 5, maxInFlight 5; \
             catch-up {} values pre-filled in POSTs of {}; fan-out {} readers, {} messages/s for {:.0} s.",
            load.producers,
            load.append_secs,
            load.batch,
            load.catchup_values,
            load.fill_batch,
            load.readers,
            load.rate,
            load.fanout_secs
        ));
    }
    report.note(
        "The load generators (Node producers, the Rust readers) share the 2 cores with the server.",
    );
    for c in costs {
        report.row(c.row);
    }
    for m in results {
        for r in m.rows {
            report.row(r);
        }
    }
    Ok(())
}

/// The append-cost checks: threadstream's CPU per appended value against the reference's, on
/// each store measured, and whether every server sustained the offered rate.
fn cost_checks(o: &Opts, load: &Load, costs: &[CostMeasured], report: &mut Report) {
    let Some(rf) = costs.iter().find(|c| c.which == Which::Reference) else {
        return;
    };
    for c in costs.iter().filter(|c| c.which != Which::Reference) {
        let x = rf.us_per_value / c.us_per_value.max(f64::MIN_POSITIVE);
        report.ratio(&format!("append_cost_reference_over_{}", c.which.key()), x);
        let unsustained: Vec<&str> = [c, rf]
            .iter()
            .filter(|m| !m.sustained)
            .map(|m| m.which.cost_label())
            .collect();
        report.check(
            &format!(
                "append cost: {} CPU per appended value ≥ 10× less than the reference's \
                 ({:.0} values/s offered, {} per request)",
                c.which.cost_label(),
                o.cost_rate,
                load.batch
            ),
            format!(
                "{:.1} vs {:.1} µs per value: {:.2}× less{}",
                c.us_per_value,
                rf.us_per_value,
                x,
                if unsustained.is_empty() {
                    String::new()
                } else {
                    format!(" (rate not sustained by {})", unsustained.join(", "))
                }
            ),
            x >= 10.0 && unsustained.is_empty() && c.problems.is_empty(),
        );
    }
    report.check(
        &format!(
            "append cost: every server sustained ≥ {:.0} % of the offered {:.0} values/s",
            SUSTAINED * 100.0,
            o.cost_rate
        ),
        costs
            .iter()
            .map(|c| {
                format!(
                    "{} {:.0}/s ({:.1} %; client {:.0} % of a core, machine {:.0} % idle)",
                    c.which.cost_label(),
                    c.achieved_values_per_s,
                    100.0 * c.achieved_values_per_s / o.cost_rate,
                    c.client_core_percent,
                    c.machine_idle_percent
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        costs.iter().all(|c| c.sustained),
    );
}

/// The checks of the append, catch-up and fan-out phases that ran.
fn phase_checks(ts: &Measured, rf: &Measured, report: &mut Report) {
    let clean = ts.problems.is_empty();
    let ratio = |a: f64, b: f64| a / b.max(f64::MIN_POSITIVE);
    if let (Some(t), Some(r)) = (ts.append_values_per_s, rf.append_values_per_s) {
        let x = ratio(t, r);
        report.ratio("append_threadstream_over_reference", x);
        report.check(
            "append throughput ≥ 10× the reference's (100 IdempotentProducers)",
            format!("{t:.0} vs {r:.0} values/s: {x:.2}×"),
            x >= 10.0 && clean,
        );
    }
    if let (Some(t), Some(r)) = (ts.catchup_values_per_s, rf.catchup_values_per_s) {
        let x = ratio(t, r);
        report.ratio("catchup_threadstream_over_reference", x);
        report.check(
            "catch-up read ≥ 5× the reference's speed (100,000-value stream)",
            format!("{t:.0} vs {r:.0} values/s: {x:.2}×"),
            x >= 5.0 && clean,
        );
    }
    if let (Some(t), Some(r)) = (ts.fanout_p99_ms, rf.fanout_p99_ms) {
        report.ratio("fanout_p99_threadstream_over_reference", ratio(t, r));
        report.check(
            "live fan-out p99 ≤ the reference's (1,000 SSE readers)",
            format!("{t:.2} ms vs {r:.2} ms"),
            t <= r && clean,
        );
    }
}

async fn measure(
    load: &Load,
    phases: &[Phase],
    which: Which,
    server: &Server,
) -> anyhow::Result<Measured> {
    let base = server.url("");
    let mut m = Measured {
        rows: Vec::new(),
        append_values_per_s: None,
        catchup_values_per_s: None,
        fanout_p99_ms: None,
        problems: Vec::new(),
    };
    if phases.contains(&Phase::Append) {
        eprintln!("  {}: append", which.label());
        let (row, v) = append(load, which, server, &base, &mut m.problems).await?;
        m.rows.push(row);
        m.append_values_per_s = Some(v);
    }
    if phases.contains(&Phase::Catchup) {
        eprintln!("  {}: catch-up", which.label());
        let (row, v) = catchup(load, which, server, &base, &mut m.problems).await?;
        m.rows.push(row);
        m.catchup_values_per_s = Some(v);
    }
    if phases.contains(&Phase::Fanout) {
        eprintln!("  {}: fan-out", which.label());
        let (row, v) = fanout(load, which, server, &base, &mut m.problems).await?;
        m.rows.push(row);
        m.fanout_p99_ms = Some(v);
    }
    Ok(m)
}

/// What `producers.mjs` measured between its `phase start` and `phase end` lines.
struct PhaseUsage {
    server: Usage,
    /// The node process running the producers.
    client: Usage,
    /// Postgres's processes, when asked for.
    store: Option<GroupUsage>,
    /// The phase's wall time as the bench saw it, seconds.
    secs: f64,
}

/// Runs `bench/node/producers.mjs` against `base` with `args`, and measures the CPU of the
/// server (`server_pid`), of the node client, and with `pg_db` of every Postgres process, over
/// exactly its phase (between its `phase start` and `phase end` lines on stdout). Returns its
/// JSON result (its last line) and the usage.
async fn run_producers(
    base: &str,
    args: &[String],
    server_pid: u32,
    pg_db: Option<&str>,
) -> anyhow::Result<(Value, PhaseUsage)> {
    let mut child = Command::new("node")
        .arg(node_dir().join("producers.mjs"))
        .args(["--url", base])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("cannot run node bench/node/producers.mjs")?;
    let node_pid = child.id().context("producers.mjs exited at once")?;
    let mut stderr = child.stderr.take().expect("piped");
    let stderr = tokio::spawn(async move {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s).await;
        s
    });
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut windows = None;
    let mut usage = None;
    let mut last = String::new();
    while let Some(line) = lines.next_line().await? {
        match line.trim() {
            "phase start" => {
                windows = Some((
                    Instant::now(),
                    Window::start(server_pid, "server"),
                    Window::start(node_pid, "client"),
                    pg_db.map(ProcessGroupWindow::postgres),
                ));
            }
            "phase end" => {
                if let Some((start, server, client, store)) = windows.take() {
                    let secs = start.elapsed().as_secs_f64();
                    let store = store.map(ProcessGroupWindow::finish);
                    usage = Some(PhaseUsage {
                        server: server.finish().await,
                        client: client.finish().await,
                        store,
                        secs,
                    });
                }
            }
            _ => last = line,
        }
    }
    let status = child.wait().await?;
    let stderr = stderr.await.unwrap_or_default();
    if !status.success() {
        bail!("producers.mjs failed ({status}): {stderr}");
    }
    let r: Value = serde_json::from_str(&last)
        .with_context(|| format!("producers.mjs printed no JSON: {last} {stderr}"))?;
    let usage = usage.context("producers.mjs printed no `phase start` / `phase end`")?;
    Ok((r, usage))
}

/// The producers' POST latencies as a [`Latency`].
fn post_latency(r: &Value) -> Option<Latency> {
    let post = &r["post_ms"];
    Some(Latency {
        samples: r["posts"].as_u64()? as usize,
        p50_ms: round(post["p50"].as_f64()?, 3),
        p99_ms: round(post["p99"].as_f64()?, 3),
        max_ms: round(post["max"].as_f64()?, 3),
    })
}

/// The read-back check of a producers.mjs run: a problem unless every stream held exactly its
/// producer's values, in order, and no producer saw an error.
fn producer_problems(r: &Value, producers: usize, what: &str, problems: &mut Vec<String>) {
    let verified = r["streams_verified"].as_u64().unwrap_or(0);
    let errors = r["error_count"].as_u64().unwrap_or(0);
    if verified != producers as u64 || errors > 0 {
        problems.push(format!(
            "{what}: {verified} of {producers} streams read back whole and in order, {errors} producer errors: {} {}",
            r["problems"], r["errors"]
        ));
    }
}

/// The append-cost phase on a fresh server (threadstream on Postgres: a fresh database, dropped
/// after).
async fn append_cost(
    ctx: &Ctx,
    o: &Opts,
    load: &Load,
    which: Which,
) -> anyhow::Result<CostMeasured> {
    let dir = tempfile::tempdir()?;
    let db = match which {
        Which::ThreadstreamPostgres => {
            Some(crate::pg::create_db(&ctx.pg_admin, "tsbench_ds").await?)
        }
        _ => None,
    };
    let result = async {
        let server = start(ctx, which, dir.path(), db.as_ref().map(|d| d.0.as_str())).await?;
        eprintln!("    server pid {}", server.pid);
        let r = cost_phase(o, load, which, &server, db.as_ref().map(|d| d.1.as_str())).await;
        server.stop().await;
        r
    }
    .await;
    if let Some((_, name)) = &db {
        crate::pg::drop_db(&ctx.pg_admin, name).await;
    }
    result
}

async fn cost_phase(
    o: &Opts,
    load: &Load,
    which: Which,
    server: &Server,
    pg_db: Option<&str>,
) -> anyhow::Result<CostMeasured> {
    let args: Vec<String> = [
        "--producers",
        &o.cost_producers.to_string(),
        "--seconds",
        &o.cost_secs.to_string(),
        "--batch",
        &load.batch.to_string(),
        "--rate",
        &o.cost_rate.to_string(),
        "--prefix",
        "bench-cost",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (r, usage) = run_producers(&server.url(""), &args, server.pid, pg_db).await?;
    let mut problems = Vec::new();
    producer_problems(&r, o.cost_producers, "append cost", &mut problems);
    let values = r["values"].as_u64().unwrap_or(0);
    // The offered time, or until the last answer when that came later (the last batches are due
    // just before the time is up).
    let secs = r["seconds"].as_f64().unwrap_or(0.0).max(o.cost_secs);
    let achieved = values as f64 / secs.max(f64::MIN_POSITIVE);
    let sustained = achieved >= SUSTAINED * o.cost_rate;
    let server_s = usage.server.cpu_seconds;
    let store_s = usage.store.as_ref().map(|g| g.cpu_seconds);
    let total_s = server_s + store_s.unwrap_or(0.0);
    let per_value = |s: f64| round(s * 1e6 / values.max(1) as f64, 1);
    let client = &usage.client;
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let machine_idle = round(100.0 - usage.server.machine_busy_percent, 1);
    let row = Row::new(
        format!(
            "{}: append cost, {:.0} values/s offered",
            which.cost_label(),
            o.cost_rate
        ),
        which.kind(),
        values,
        secs,
        "values/s",
    )
    .latency(post_latency(&r))
    .usage(usage.server.clone())
    .extra("offered_values_per_s", o.cost_rate)
    .extra("achieved_values_per_s", round(achieved, 1))
    .extra(
        "achieved_share_of_offered",
        round(achieved / o.cost_rate, 4),
    )
    .extra("sustained", sustained)
    .extra("server_cpu_seconds", server_s)
    .extra("server_cpu_us_per_value", per_value(server_s))
    .extra(
        "store_cpu_is",
        match which {
            Which::ThreadstreamPostgres => {
                "every postgres process of the cluster (postmaster, background processes, all \
                 backends)"
            }
            Which::Threadstream => "in the server process (SQLite is embedded)",
            Which::Reference => "in the server process (LMDB and segment files)",
        },
    )
    .extra("store_cpu_seconds", store_s)
    .extra(
        "store_cpu_seconds_other_databases",
        usage.store.as_ref().map(|g| g.other_databases_cpu_seconds),
    )
    .extra("store_cpu_us_per_value", store_s.map(per_value))
    .extra("cpu_us_per_value", per_value(total_s))
    .extra("machine_idle_percent", machine_idle)
    .extra("client", r["client"].clone())
    .extra("client_cpu_seconds", client.cpu_seconds)
    .extra("client_cpu_percent_of_a_core", client.cpu_percent)
    .extra(
        "client_cpu_percent_of_machine",
        round(client.cpu_percent / nproc, 1),
    )
    .extra("client_timer_late_ms", r["timer_late_ms"].clone())
    .extra("phase_seconds", round(usage.secs, 2))
    .extra("producers", o.cost_producers)
    .extra("values_per_request", r["batch_values"].clone())
    .extra("value_bytes", r["value_bytes"].clone())
    .extra("interval_ms", r["interval_ms"].clone())
    .extra("requests_by_status", r["statuses"].clone())
    .extra("streams_verified", r["streams_verified"].clone())
    .extra("producer_errors", r["error_count"].clone())
    .extra(
        "latency_is",
        "per producer POST, sent → answered; throughput = values / the offered time, or until \
         the last answer when later",
    );
    Ok(CostMeasured {
        which,
        row,
        us_per_value: total_s * 1e6 / values.max(1) as f64,
        achieved_values_per_s: achieved,
        sustained,
        client_core_percent: client.cpu_percent,
        machine_idle_percent: machine_idle,
        problems,
    })
}

async fn append(
    load: &Load,
    which: Which,
    server: &Server,
    base: &str,
    problems: &mut Vec<String>,
) -> anyhow::Result<(Row, f64)> {
    let args: Vec<String> = [
        "--producers",
        &load.producers.to_string(),
        "--seconds",
        &load.append_secs.to_string(),
        "--batch",
        &load.batch.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (r, usage) = run_producers(base, &args, server.pid, None).await?;
    producer_problems(&r, load.producers, "append", problems);
    let values = r["values"].as_u64().unwrap_or(0);
    let secs = r["seconds"].as_f64().unwrap_or(0.0);
    let row = Row::new(
        format!(
            "{}: append, {} IdempotentProducers",
            which.label(),
            load.producers
        ),
        which.kind(),
        values,
        secs,
        "values/s",
    )
    .latency(post_latency(&r))
    .usage(usage.server)
    .extra("client", r["client"].clone())
    .extra("client_cpu_percent_of_a_core", usage.client.cpu_percent)
    .extra("values_per_request", r["batch_values"].clone())
    .extra("value_bytes", r["value_bytes"].clone())
    .extra("linger_ms", r["linger_ms"].clone())
    .extra("max_in_flight", r["max_in_flight"].clone())
    .extra("requests_by_status", r["statuses"].clone())
    .extra("streams_verified", r["streams_verified"].clone())
    .extra("producer_errors", r["error_count"].clone())
    .extra("latency_is", "per producer POST, sent → answered");
    let tp = row.throughput;
    Ok((row, tp))
}

/// A catch-up value: its index and a token delta, as an AI token stream would hold.
fn catchup_value(i: usize) -> String {
    format!(r#"{{"i":{i},"type":"text-delta","id":"msg-1","delta":" token"}}"#)
}

async fn catchup(
    load: &Load,
    which: Which,
    server: &Server,
    base: &str,
    problems: &mut Vec<String>,
) -> anyhow::Result<(Row, f64)> {
    let client = http_client();
    let url = format!("{base}/v1/stream/catchup");
    let resp = client
        .put(&url)
        .header("content-type", "application/json")
        .send()
        .await?;
    ensure!(
        resp.status().is_success(),
        "create answered {}",
        resp.status()
    );
    // Pre-fill with POSTs of `fill_batch` values, several in flight; each answer's
    // Stream-Next-Offset places its batch, so the order to expect is known.
    let batches = load.catchup_values.div_ceil(load.fill_batch);
    let sem = Arc::new(tokio::sync::Semaphore::new(load.fill_concurrency));
    let mut tasks = Vec::with_capacity(batches);
    for b in 0..batches {
        let (client, url, sem) = (client.clone(), url.clone(), sem.clone());
        let first = b * load.fill_batch;
        let last = (first + load.fill_batch).min(load.catchup_values);
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire_owned().await.expect("semaphore");
            let body = format!(
                "[{}]",
                (first..last)
                    .map(catchup_value)
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let resp = client
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await?;
            ensure!(
                resp.status().is_success(),
                "append answered {}",
                resp.status()
            );
            let offset = resp
                .headers()
                .get("stream-next-offset")
                .and_then(|v| v.to_str().ok())
                .context("no Stream-Next-Offset")?
                .to_string();
            anyhow::Ok((offset, first, last))
        }));
    }
    let mut placed = Vec::with_capacity(batches);
    for t in tasks {
        placed.push(t.await??);
    }
    placed.sort();
    let expected: Vec<usize> = placed.iter().flat_map(|&(_, a, b)| a..b).collect();

    // The read: plain GETs from -1, each from the Stream-Next-Offset of the one before, until
    // Stream-Up-To-Date; bodies kept and checked after the clock stops. Done `CATCHUP_READS`
    // times (one read is a few tens of ms: a busy machine moves it), the median reported.
    let w = Window::start(server.pid, "server");
    let mut reads = Vec::new();
    let mut bodies = Vec::new();
    for _ in 0..CATCHUP_READS {
        let start = Instant::now();
        bodies = read_whole(&client, &url).await?;
        reads.push(start.elapsed().as_nanos() as u64);
    }
    let usage = w.finish().await;
    let mut sorted = reads.clone();
    sorted.sort_unstable();
    let secs = sorted[sorted.len() / 2] as f64 / 1e9;

    let mut got = Vec::with_capacity(load.catchup_values);
    for b in &bodies {
        let items: Vec<Value> = serde_json::from_slice(b).context("a page is not a JSON array")?;
        got.extend(
            items
                .iter()
                .map(|v| v["i"].as_u64().unwrap_or(u64::MAX) as usize),
        );
    }
    if got != expected {
        let at = got.iter().zip(&expected).position(|(a, b)| a != b);
        problems.push(format!(
            "catch-up: read {} values, {} expected; first difference at {:?}",
            got.len(),
            expected.len(),
            at
        ));
    }
    let bytes: usize = bodies.iter().map(|b| b.len()).sum();
    let row = Row::new(
        format!(
            "{}: catch-up read of {} values",
            which.label(),
            load.catchup_values
        ),
        which.kind(),
        got.len() as u64,
        secs,
        "values/s",
    )
    .latency(Latency::from_nanos(reads))
    .usage(usage)
    .extra("reads", CATCHUP_READS)
    .extra("requests_per_read", bodies.len())
    .extra("body_mb", round(bytes as f64 / 1e6, 2))
    .extra("median_ms", round(secs * 1e3, 2))
    .extra("client", "plain HTTP GETs (reqwest), no compression asked")
    .extra("values_per_append_when_filled", load.fill_batch)
    .extra(
        "latency_is",
        "per whole read (every GET), first sent → last body received; throughput from the median",
    );
    let tp = row.throughput;
    Ok((row, tp))
}

/// Reads the stream at `url` from -1 with plain GETs, each from the Stream-Next-Offset of the one
/// before, until Stream-Up-To-Date; returns the bodies.
async fn read_whole(client: &reqwest::Client, url: &str) -> anyhow::Result<Vec<bytes::Bytes>> {
    let mut offset = "-1".to_string();
    let mut bodies = Vec::new();
    loop {
        let resp = client.get(format!("{url}?offset={offset}")).send().await?;
        ensure!(
            resp.status() == reqwest::StatusCode::OK,
            "catch-up read answered {}",
            resp.status()
        );
        let h = resp.headers();
        let next = h
            .get("stream-next-offset")
            .and_then(|v| v.to_str().ok())
            .context("no Stream-Next-Offset")?
            .to_string();
        let done = h.get("stream-up-to-date").is_some_and(|v| v == "true");
        bodies.push(resp.bytes().await?);
        if done {
            return Ok(bodies);
        }
        ensure!(next != offset, "Stream-Next-Offset did not move");
        offset = next;
    }
}

/// One fan-out reader: the (index, latency in µs) of every value it received, in order.
async fn read_fanout(
    mut conn: SseConn,
    want: Arc<AtomicU64>,
    deadline: Instant,
) -> anyhow::Result<Vec<(u32, u32)>> {
    let mut got: Vec<(u32, u32)> = Vec::with_capacity(1024);
    let mut bad = None;
    loop {
        if got.len() as u64 >= want.load(Ordering::Acquire) {
            return Ok(got);
        }
        let read = tokio::time::timeout_at(
            deadline.into(),
            conn.read_some(64 * 1024, &mut |_, data, at| {
                // Data events carry a JSON array of values; control events an object.
                if data.first() != Some(&b'[') {
                    return;
                }
                let now = us(at);
                match serde_json::from_slice::<Vec<Stamp>>(data) {
                    Ok(items) => got.extend(
                        items
                            .iter()
                            .map(|s| (s.i, now.saturating_sub(s.t).min(u32::MAX as u64) as u32)),
                    ),
                    Err(e) => bad = Some(e),
                }
            }),
        )
        .await;
        if let Some(e) = bad.take() {
            bail!("a data event is not a JSON array of stamps: {e}");
        }
        match read {
            Err(_) => return Ok(got), // timed out: the caller counts what is missing
            Ok(Ok(Read::Eof)) => return Ok(got),
            Ok(Ok(Read::Data)) => {}
            Ok(Err(e)) => return Err(e),
        }
    }
}

#[derive(serde::Deserialize)]
struct Stamp {
    i: u32,
    /// Sent at, µs since the bench's base instant.
    t: u64,
}

async fn fanout(
    load: &Load,
    which: Which,
    server: &Server,
    base: &str,
    problems: &mut Vec<String>,
) -> anyhow::Result<(Row, f64)> {
    let client = http_client();
    let url = format!("{base}/v1/stream/fanout");
    let resp = client
        .put(&url)
        .header("content-type", "application/json")
        .send()
        .await?;
    ensure!(
        resp.status().is_success(),
        "create answered {}",
        resp.status()
    );
    // Connect every reader from the start of the (empty) stream, at most 128 at a time, each
    // waiting for its first control event, so all are surely live before the writer starts.
    let sem = Arc::new(tokio::sync::Semaphore::new(128));
    let mut tasks = Vec::with_capacity(load.readers);
    for _ in 0..load.readers {
        let (sem, addr) = (sem.clone(), server.addr);
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire_owned().await.expect("semaphore");
            let mut c =
                SseConn::connect(addr, "/v1/stream/fanout?offset=-1&live=sse", None, None).await?;
            let mut first = false;
            while !first {
                let r = tokio::time::timeout(
                    Duration::from_secs(60),
                    c.read_some(64 * 1024, &mut |_, _, _| first = true),
                )
                .await
                .context("no first SSE event within 60 s")??;
                if let Read::Eof = r {
                    bail!("SSE stream ended before its first event");
                }
            }
            anyhow::Ok(c)
        }));
    }
    let mut conns = Vec::with_capacity(load.readers);
    for t in tasks {
        conns.push(t.await??);
    }
    let want = Arc::new(AtomicU64::new(u64::MAX));
    let grace = Duration::from_secs(30);
    let deadline = Instant::now() + Duration::from_secs_f64(load.fanout_secs) + grace;
    let readers: Vec<_> = conns
        .into_iter()
        .map(|c| tokio::spawn(read_fanout(c, want.clone(), deadline)))
        .collect();

    // The writer: one message every 1/rate s, each POST its own task (so a slow answer does not
    // slow the rate), the send time stamped into the message.
    let w = Window::start(server.pid, "server");
    let total = (load.rate as f64 * load.fanout_secs).round() as u32;
    let mut iv = tokio::time::interval(Duration::from_secs_f64(1.0 / load.rate as f64));
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let start = Instant::now();
    let mut posts = Vec::with_capacity(total as usize);
    for i in 0..total {
        iv.tick().await;
        let (client, url) = (client.clone(), url.clone());
        posts.push(tokio::spawn(async move {
            let body = format!(r#"[{{"i":{i},"t":{}}}]"#, us(Instant::now()));
            let resp = client
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await?;
            ensure!(
                resp.status().is_success(),
                "append answered {}",
                resp.status()
            );
            anyhow::Ok(())
        }));
    }
    let mut append_errors = 0u64;
    for p in posts {
        if !matches!(p.await, Ok(Ok(()))) {
            append_errors += 1;
        }
    }
    want.store(total as u64 - append_errors, Ordering::Release);
    let mut received = Vec::with_capacity(load.readers);
    for r in readers {
        received.push(r.await??);
    }
    let secs = start.elapsed().as_secs_f64();
    let usage = w.finish().await;

    // Every reader must hold every message, once, in one and the same order (the stream's).
    let reference: Vec<u32> = received
        .iter()
        .max_by_key(|r| r.len())
        .map(|r| r.iter().map(|x| x.0).collect())
        .unwrap_or_default();
    let mut sorted = reference.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let mut incomplete = 0;
    let mut deliveries = 0u64;
    let mut lat = Vec::with_capacity(load.readers * total as usize);
    for r in &received {
        deliveries += r.len() as u64;
        if r.len() != reference.len() || r.iter().zip(&reference).any(|(a, b)| a.0 != *b) {
            incomplete += 1;
        }
        lat.extend(r.iter().map(|x| x.1 as u64 * 1000));
    }
    let expected = (total as u64 - append_errors) * load.readers as u64;
    if append_errors > 0
        || sorted.len() != reference.len()
        || reference.len() as u64 != total as u64 - append_errors
        || incomplete > 0
    {
        problems.push(format!(
            "fan-out: {deliveries} of {expected} deliveries; {incomplete} readers missed or \
             reordered messages; {append_errors} appends failed"
        ));
    }
    let latency = Latency::from_nanos(lat);
    let p99 = latency.as_ref().map_or(f64::MAX, |l| l.p99_ms);
    let row = Row::new(
        format!(
            "{}: live fan-out, {} SSE readers, {}/s",
            which.label(),
            load.readers,
            load.rate
        ),
        which.kind(),
        deliveries,
        secs,
        "deliveries/s",
    )
    .latency(latency)
    .usage(usage)
    .extra("messages", total)
    .extra("deliveries_expected", expected)
    .extra("readers_complete_in_order", load.readers - incomplete)
    .extra("append_errors", append_errors)
    .extra("latency_is", "POST sent → received, per reader per message");
    Ok((row, p99))
}

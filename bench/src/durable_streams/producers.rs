//! The Node producers (`bench/node/producers.mjs`): running them with CPU measured over their
//! phase, and the append phases built on them (append cost at a fixed rate, and append).

use crate::procstat::{GroupUsage, ProcessGroupWindow, Window};
use crate::report::{round, Latency, Row, Usage};
use crate::server::Server;
use crate::Ctx;
use anyhow::{bail, Context};
use serde_json::Value;
use std::process::Stdio;
use std::time::Instant;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

use super::setup::*;

/// What `producers.mjs` measured between its `phase start` and `phase end` lines.
pub(super) struct PhaseUsage {
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
pub(super) async fn run_producers(
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
pub(super) fn post_latency(r: &Value) -> Option<Latency> {
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
pub(super) fn producer_problems(
    r: &Value,
    producers: usize,
    what: &str,
    problems: &mut Vec<String>,
) {
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
pub(super) async fn append_cost(
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

pub(super) async fn cost_phase(
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

pub(super) async fn append(
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

//! `agent-load`: the load users make. Concurrent agent runs, each streaming from a fake
//! OpenAI-compatible provider (a real HTTP server in this process, [`crate::fake_llm`]) at model
//! speed, with a tool call and a sub-agent; several SSE watchers per run, half on the n8n protocol
//! and half on AG-UI; external agents posting through the ingest route. On one instance and on
//! several, all on one fresh Postgres database each; or (`--store sqlite`) on one instance with
//! a fresh SQLite data dir.
//!
//! Reported: delivery latency from the provider's write of a token to a watcher's read of it,
//! events/s, what it costs: server CPU per appended and per delivered event and per second of
//! a live run, the store's CPU (every Postgres process, from /proc; SQLite runs inside the
//! server, so the server's CPU holds it), bytes stored per token delta; RSS, Postgres
//! connections, how idle the machine stayed, the load average. Every watcher's stream is
//! checked against the log, whole (`check.rs`), read straight from the store (`logdb.rs`).
//!
//! With `--haproxy`, all of it goes through Debian's HAProxy in front of the instances
//! (docs/haproxy.cfg, which routes each thread to one instance), and `--kill-one-after SECS`
//! kills one of three mid-load (`kill.rs`). One configuration's load and row are
//! `configuration.rs`; this file runs the configurations and compares them.
//!
//! With `--change-feed`, each configuration runs twice, without and then with the change feed to
//! a NATS JetStream the bench starts (`feed.rs`), so the feed's extra CPU per event is measured in
//! one invocation.

mod check;
mod configuration;
mod cost;
mod feed;
mod floor;
mod ingest;
mod kill;
pub mod logdb;
mod storm;
mod watch;

use crate::report::{round, Report};
use crate::Ctx;
use configuration::one;
pub use logdb::StoreKind;

/// The scale of a run (flags of `threadstream-bench`; the defaults are the issue's).
#[derive(Clone, Debug)]
pub struct LoadOpts {
    pub runs: usize,
    pub watchers_per_run: usize,
    pub ingest_agents: usize,
    pub tokens_per_sec: f64,
    pub tokens_per_run: usize,
    pub instances: Vec<usize>,
    /// The stores to run on, in order (`--store`): every fleet size on each.
    pub stores: Vec<StoreKind>,
    /// Each run's watchers on the instance that runs it (`--thread-affinity`), not spread.
    pub thread_affinity: bool,
    /// Everything through HAProxy in front of the instances (`--haproxy`).
    pub haproxy: bool,
    /// `kill -9` of one instance this many seconds after the load starts (`--kill-one-after`).
    pub kill_one_after: Option<f64>,
    /// `--run-orphan-secs` of the servers behind HAProxy.
    pub run_orphan_secs: u64,
    /// Each configuration also with `--change-feed` to a NATS JetStream (`--change-feed`).
    pub change_feed: bool,
}

impl LoadOpts {
    /// `--quick`: a few runs, seconds.
    pub fn quick() -> LoadOpts {
        LoadOpts {
            runs: 10,
            watchers_per_run: 2,
            ingest_agents: 4,
            tokens_per_sec: 40.0,
            tokens_per_run: 40,
            instances: vec![1, 2],
            stores: vec![StoreKind::Postgres],
            thread_affinity: false,
            haproxy: false,
            kill_one_after: None,
            run_orphan_secs: 4,
            change_feed: false,
        }
    }
}

/// The load average (1, 5, 15 min) now.
pub fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

pub async fn agent_load(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let o = ctx.load.clone();
    let conns = o.runs * (o.watchers_per_run + 2) + o.ingest_agents;
    crate::procstat::raise_nofile(2 * conns as u64 + 4096);
    let mut per_event = Vec::new();
    anyhow::ensure!(
        !o.haproxy || o.instances.iter().all(|&n| n == 1 || n == 3),
        "--haproxy: docs/haproxy.cfg names three servers, so --instances 1 or 3 (one instance \
         is named three times)"
    );
    anyhow::ensure!(
        o.kill_one_after.is_none() || o.instances.iter().all(|&n| n == 3),
        "--kill-one-after: --instances 3"
    );
    anyhow::ensure!(
        o.haproxy || o.kill_one_after.is_none(),
        "--kill-one-after needs --haproxy (the watchers resume through it)"
    );
    anyhow::ensure!(
        !(o.haproxy && o.thread_affinity),
        "--thread-affinity routes by hand; behind HAProxy, HAProxy routes"
    );
    anyhow::ensure!(
        !o.stores.contains(&StoreKind::Sqlite) || o.instances.iter().all(|&n| n == 1),
        "--store sqlite/both: SQLite is one server process per data dir, so --instances 1 (a \
         fleet needs --store postgres)"
    );
    let mut measured = Vec::new();
    // (store, n) → server + store CPU per appended event without and with the change feed.
    let mut feed_pairs: Vec<(StoreKind, usize, f64, f64)> = Vec::new();
    for &store in &o.stores {
        for &n in &o.instances {
            for with_feed in [false, true] {
                if with_feed && !o.change_feed {
                    continue;
                }
                // A NATS server of its own per configuration: two streams cannot capture the
                // same subjects on one server.
                let nats = if with_feed {
                    Some(feed::NatsServer::start()?)
                } else {
                    None
                };
                let feed = nats.as_ref();
                let (row, storm_row) = one(ctx, &o, store, n, feed, report).await?;
                let per_appended = row.extra["server_plus_store_cpu_us_per_appended"]
                    .as_f64()
                    .unwrap_or(f64::NAN);
                if o.change_feed {
                    match feed_pairs.iter_mut().find(|p| p.0 == store && p.1 == n) {
                        Some(p) => p.3 = per_appended,
                        None => feed_pairs.push((store, n, per_appended, f64::NAN)),
                    }
                }
                // The fleet's ratio is of server + store CPU (issue #35: a fleet costs what one
                // instance costs, Postgres included).
                let cpu = row.extra["server_plus_store_cpu_us_per_delivered"]
                    .as_f64()
                    .unwrap_or(f64::MAX);
                if n == 1 && o.watchers_per_run > 0 {
                    let p99 = row.latency.as_ref().map_or(f64::MAX, |l| l.p99_ms);
                    report.check(
                        &format!(
                            "delivery p99 ≤ 25 ms on one instance on {} (provider's write → \
                         watcher's read)",
                            store.title()
                        ),
                        format!("{p99:.2} ms (load {})", row.extra["load_avg_end"]),
                        p99 <= 25.0,
                    );
                }
                let idle = row.extra["machine_idle_percent"].as_f64().unwrap_or(0.0);
                report.check(
                    &format!(
                    "{n} instance(s) on {}: machine ≥ 30 % idle over the load (the load is one \
                     the machine carries)",
                    store.title()
                ),
                    format!(
                        "{idle:.0} % idle (load {} → {})",
                        row.extra["load_avg_start"], row.extra["load_avg_end"]
                    ),
                    idle >= 30.0,
                );
                if store == StoreKind::Postgres && !with_feed {
                    per_event.push((n, cpu));
                }
                // Printed as soon as measured: a long run stopped later still leaves its figures.
                eprintln!("  {}", serde_json::to_string(&row)?);
                if let Some(r) = &storm_row {
                    eprintln!("  {}", serde_json::to_string(r)?);
                }
                measured.push((store, n, row, storm_row));
            }
        }
    }
    for (store, n, without, with) in feed_pairs {
        report.ratio(
            &format!(
                "{n} instance(s) on {}: server + store CPU per appended event with the change \
                 feed / without ({with:.1} vs {without:.1} µs; +{:.1} µs)",
                store.title(),
                with - without
            ),
            with / without,
        );
    }
    // The floor of each store, measured after its loads: its big batches write hundreds of MB,
    // whose writeback (and Postgres's checkpoint) would otherwise land inside a load's window.
    for &store in &o.stores {
        let floor = floor::measure(store, &ctx.pg_admin, ctx.quick).await?;
        eprintln!("  floor on {}: {}", store.title(), floor.extras());
        for (_, n, row, _) in measured.iter_mut().filter(|m| m.0 == store) {
            let cost = row.extra["server_plus_store_cpu_us_per_appended"]
                .as_f64()
                .unwrap_or(f64::MAX);
            let ratio = cost / floor.total_us();
            if let serde_json::Value::Object(parts) = floor.extras() {
                row.extra.extend(parts);
            }
            row.extra
                .insert("ratio_to_floor".into(), round(ratio, 1).into());
            report.ratio(
                &format!(
                    "{n} instance(s) on {}: server + store CPU per appended event / the floor \
                     ({:.1} µs)",
                    store.title(),
                    floor.total_us()
                ),
                ratio,
            );
        }
    }
    for (_, _, row, storm_row) in measured {
        report.row(row);
        if let Some(r) = storm_row {
            report.row(r);
        }
    }
    if let (Some(&(1, one)), Some(&(n, many))) = (
        per_event.iter().find(|(n, _)| *n == 1),
        per_event.iter().find(|(n, _)| *n > 1),
    ) {
        let ratio = many / one.max(1e-9);
        report.ratio(
            &format!("cpu_per_delivery_{n}_instances / 1_instance"),
            ratio,
        );
        report.check(
            &format!("{n} instances ≤ 1.2× one instance's server + store CPU per delivered event"),
            format!("{ratio:.2}× ({many:.1} vs {one:.1} CPU µs per delivery)"),
            ratio <= 1.2,
        );
    }
    report.note(
        "The provider, the watchers and the ingest agents run in this (bench) process and share \
         the machine's cores with the servers and Postgres; the load average is in each row.",
    );
    if o.stores.contains(&StoreKind::Postgres) {
        report.note(
            "Postgres: store CPU is every `postgres` process of the cluster over the load window \
             (postmaster, checkpointer, background and WAL writers, autovacuum, every backend, \
             and backends that ended within it), so other databases' backends count too: \
             `store_cpu_seconds_other_databases` says how much of it theirs was. WAL bytes are \
             the cluster's too. Quiet machine only.",
        );
    }
    if o.stores.contains(&StoreKind::Sqlite) {
        report.note(
            "SQLite: the store runs inside the server process, so the server's CPU already \
             holds it; store CPU is 0 and server + store is the server's.",
        );
    }
    Ok(())
}

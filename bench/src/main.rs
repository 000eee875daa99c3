//! `threadstream-bench <scenario> [--quick] [--json out.json]`: the load tool.
//!
//! Store scenarios drive `threadstream_store::EventLog` in this process; server scenarios start
//! the real `threadstream serve` binary (next to this one: `cargo build --release`) on
//! 127.0.0.1 with a temp data dir, or a fresh Postgres database, and talk HTTP/SSE to it.
//! Baselines run in the same invocation, so ratios hold on a noisy machine. See
//! docs/performance.md for the commands and the latest figures.

mod agent_load;
mod client;
mod compaction_scenario;
mod data;
mod durable_streams;
mod erasure_scenario;
mod export_scenario;
mod fake_llm;
mod ha;
mod haproxy;
mod other_scenarios;
mod partitioned_log;
mod pg;
mod procstat;
mod report;
mod server;
mod server_scenarios;
mod sse;
mod store_scenarios;

use std::path::PathBuf;

use agent_load::StoreKind;
use clap::Parser;

/// Every scenario, in the order `all` runs them.
const SCENARIOS: &[(&str, &str)] = &[
    (
        "ingest-sqlite",
        "1,000 threads streaming deltas through the writer (SQLite, durable), vs baseline A",
    ),
    (
        "ingest-postgres",
        "the same on Postgres, vs baseline B (cqrs-es + postgres-es)",
    ),
    (
        "ingest-http",
        "POST /threads/:id/events with batches of 50 (server)",
    ),
    (
        "long-thread",
        "append cost on a 100,000-event thread vs a new thread",
    ),
    ("fanout", "one thread, 1,000 SSE subscribers (server)"),
    (
        "live-latency",
        "one subscriber: append acknowledged → received (server)",
    ),
    (
        "idle-sse",
        "10,000 idle SSE connections: server RSS per connection",
    ),
    (
        "replay",
        "a fresh client replays a 100,000-event thread (SQLite and Postgres)",
    ),
    (
        "rebuild",
        "`threadstream projections rebuild` of a 1,000,000-event log",
    ),
    (
        "parquet-export",
        "`threadstream export --format parquet` of a 1,000,000-event log vs the NDJSON export: events/s, bytes",
    ),
    (
        "ttft",
        "POST /chat → first text-delta on an open stream; idle RSS",
    ),
    (
        "slow-consumers",
        "100 clients at 1 KB/s while a thread appends 10,000 events/s",
    ),
    (
        "erasure",
        "appends on live threads while idle threads are erased one by one (SQLite), vs none erased; a user's erasure planned",
    ),
    (
        "erasure-postgres",
        "the same on Postgres",
    ),
    (
        "compaction",
        "finished runs compacted (SQLite and Postgres): bytes the log stores per token before and after",
    ),
    (
        "agent-load",
        "500 agent runs at 40 tokens/s (fake OpenAI provider, tool calls, a sub-agent), 4 SSE watchers each, 100 ingest agents; 1 and 3 instances on Postgres (--store sqlite|both: one on SQLite); CPU of server and store per event, bytes per token",
    ),
    (
        "partitioned-log",
        "the order lock's append ceiling (1 vs 3 writers on one database); threads partitioned over 1, 2, 4 databases with a merged audit order, checked",
    ),
    (
        "durable-streams",
        "/v1/stream/* vs the reference @durable-streams/server: append, catch-up, SSE fan-out",
    ),
    (
        "failover",
        "kill -9 of the primary's postmaster on a three-node Patroni cluster under paced keyed appends: kill → first ack, longest pause, latency after, nothing lost",
    ),
    (
        "standby-fanout",
        "SSE fan-out on the Patroni cluster with pages read on the primary alone vs on two standbys: each node's CPU per delivery, p99",
    ),
];

#[derive(Parser)]
#[command(name = "threadstream-bench", about = "threadstream's load tool")]
struct Cli {
    /// Scenario to run (`list` shows them; `all` runs every one).
    scenario: String,
    /// Small sizes (seconds, not minutes): what the smoke test runs.
    #[arg(long)]
    quick: bool,
    /// Also write the report as JSON here (`all`: one array).
    #[arg(long)]
    json: Option<PathBuf>,
    /// The `threadstream` binary (default: next to this one; `THREADSTREAM_BIN` also works).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// A Postgres database to connect to for `CREATE DATABASE` (one fresh database per run).
    #[arg(
        long,
        env = "BENCH_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    postgres: String,
    /// agent-load: concurrent agent runs.
    #[arg(long, default_value_t = 500)]
    runs: usize,
    /// agent-load: SSE watchers per run (even ones on n8n, odd ones on AG-UI).
    #[arg(long, default_value_t = 4)]
    watchers_per_run: usize,
    /// agent-load: external agents posting through the ingest route.
    #[arg(long, default_value_t = 100)]
    ingest_agents: usize,
    /// agent-load: the model's speed, tokens per second of each answer.
    #[arg(long, default_value_t = 40.0)]
    tokens_per_sec: f64,
    /// agent-load: the model's text tokens per run (a quarter before the sub-agent, a quarter
    /// from it, half in the answer).
    #[arg(long, default_value_t = 400)]
    tokens_per_run: usize,
    /// agent-load: the fleet sizes to measure, in order (comma-separated; default 1,3 on
    /// Postgres, 1 with --store sqlite or both, and 3 with --haproxy --kill-one-after).
    #[arg(long, value_delimiter = ',')]
    instances: Option<Vec<usize>>,
    /// agent-load: every watcher of a run reads from the instance that runs it, as behind a load
    /// balancer that routes on the thread id; by default a run's watchers are spread over the
    /// instances, so delivery crosses them.
    #[arg(long)]
    thread_affinity: bool,
    /// agent-load: everything (chats, watchers, ingest agents) through Debian's HAProxy with
    /// docs/haproxy.cfg in front of the instances (1 or 3), which routes each thread to one of
    /// them; watchers resume with Last-Event-ID and failed posts are retried with their
    /// Idempotency-Key.
    #[arg(long)]
    haproxy: bool,
    /// agent-load --haproxy: kill -9 the first instance this many seconds after the load starts;
    /// reports the reconnect storm and how its runs were closed.
    #[arg(long, requires = "haproxy")]
    kill_one_after: Option<f64>,
    /// agent-load: the store the servers run on: `postgres` (a fresh database), `sqlite` (the
    /// embedded default, a fresh data dir; one instance only, as SQLite is one process per data
    /// dir) or `both` (SQLite, then Postgres, same load). The row names it; on Postgres the
    /// CPU of every Postgres process is reported beside the server's.
    #[arg(long, value_enum, default_value = "postgres")]
    store: StoreArg,
    /// agent-load: run each configuration twice, without and then with `--change-feed` to a
    /// NATS JetStream that the bench starts (Debian's `nats-server -js`), and report the feed's
    /// rate, end-to-end lag, exactness and extra CPU per event.
    #[arg(long)]
    change_feed: bool,
    /// agent-load --haproxy: the instances' --run-orphan-secs (a killed instance's runs are
    /// closed as interrupted within it).
    #[arg(long, default_value_t = 4)]
    run_orphan_secs: u64,
    /// durable-streams: the append-cost phase's offered rate, values per second in all (open
    /// loop: each producer appends a batch on a timer of its own, whatever is in flight).
    #[arg(long, default_value_t = 5000.0)]
    ds_rate: f64,
    /// durable-streams: the append-cost phase's IdempotentProducers (one Node process, a stream
    /// each; each offers ds-rate / ds-producers values per second).
    #[arg(long, default_value_t = 50)]
    ds_producers: usize,
    /// durable-streams: how long the append-cost phase offers its rate, seconds.
    #[arg(long, default_value_t = 20.0)]
    ds_secs: f64,
    /// durable-streams: the phases to run (comma-separated, of cost, append, catchup, fanout).
    #[arg(long, value_delimiter = ',', default_values = ["cost", "append", "catchup", "fanout"])]
    ds_phases: Vec<durable_streams::Phase>,
    /// durable-streams: the stores threadstream's append cost is measured on (comma-separated,
    /// of sqlite and postgres; the other phases run on SQLite). Postgres is a fresh database
    /// next to --postgres, and its processes' CPU is counted with the server's.
    #[arg(long, value_delimiter = ',', default_values = ["sqlite", "postgres"])]
    ds_stores: Vec<StoreArg>,
    /// failover, standby-fanout: the first of the eleven loopback ports of the cluster that
    /// scripts/ha-cluster.sh starts (the tests' clusters take random ranges elsewhere).
    #[arg(long, default_value_t = 26400)]
    ha_port_base: u16,
}

/// `--store`, `--ds-stores`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum StoreArg {
    Postgres,
    Sqlite,
    Both,
}

/// agent-load's options. `--quick` wins over the scale flags (the smoke test must stay seconds
/// long); the fleet flags hold with it too, a quick fleet being three instances.
fn load_opts(cli: &Cli) -> agent_load::LoadOpts {
    let mut o = if cli.quick {
        agent_load::LoadOpts::quick()
    } else {
        agent_load::LoadOpts {
            runs: cli.runs,
            watchers_per_run: cli.watchers_per_run,
            ingest_agents: cli.ingest_agents,
            tokens_per_sec: cli.tokens_per_sec,
            tokens_per_run: cli.tokens_per_run,
            instances: cli.instances.clone().unwrap_or_else(|| vec![1, 3]),
            thread_affinity: cli.thread_affinity,
            ..agent_load::LoadOpts::quick()
        }
    };
    o.change_feed = cli.change_feed;
    o.stores = match cli.store {
        StoreArg::Postgres => vec![StoreKind::Postgres],
        StoreArg::Sqlite => vec![StoreKind::Sqlite],
        StoreArg::Both => vec![StoreKind::Sqlite, StoreKind::Postgres],
    };
    // SQLite is one instance; without --instances, a run that includes it is one instance.
    if cli.store != StoreArg::Postgres && (cli.quick || cli.instances.is_none()) {
        o.instances = vec![1];
    }
    o.haproxy = cli.haproxy;
    o.kill_one_after = cli.kill_one_after;
    o.run_orphan_secs = cli.run_orphan_secs;
    // A quick fleet, and one that loses an instance, is three instances.
    if cli.haproxy && (cli.quick || (cli.instances.is_none() && cli.kill_one_after.is_some())) {
        o.instances = vec![3];
    }
    o
}

/// durable-streams' options. `--quick` wins over the append-cost phase's rate, producers and
/// time (the smoke test must stay seconds long); the phases and stores hold with it.
fn ds_opts(cli: &Cli) -> anyhow::Result<durable_streams::Opts> {
    let mut o = durable_streams::Opts::new(cli.quick);
    if !cli.quick {
        anyhow::ensure!(
            cli.ds_rate > 0.0 && cli.ds_producers > 0 && cli.ds_secs > 0.0,
            "--ds-rate, --ds-producers and --ds-secs must be positive"
        );
        o.cost_rate = cli.ds_rate;
        o.cost_producers = cli.ds_producers;
        o.cost_secs = cli.ds_secs;
    }
    o.phases = cli.ds_phases.clone();
    o.cost_on_postgres =
        cli.ds_stores.contains(&StoreArg::Postgres) || cli.ds_stores.contains(&StoreArg::Both);
    o.cost_on_sqlite =
        cli.ds_stores.contains(&StoreArg::Sqlite) || cli.ds_stores.contains(&StoreArg::Both);
    Ok(o)
}

/// What every scenario gets.
pub struct Ctx {
    pub quick: bool,
    pub server_bin: Option<PathBuf>,
    pub pg_admin: String,
    pub load: agent_load::LoadOpts,
    pub ds: durable_streams::Opts,
    /// The HA scenarios' cluster ports start here.
    pub ha_port_base: u16,
}

impl Ctx {
    pub fn bin(&self) -> anyhow::Result<PathBuf> {
        server::find_binary(self.server_bin.as_deref())
    }
}

async fn run_one(name: &str, ctx: &Ctx) -> anyhow::Result<report::Report> {
    let mut r = report::Report::new(name, ctx.quick);
    eprintln!("running {name}{}", if ctx.quick { " --quick" } else { "" });
    match name {
        "ingest-sqlite" => store_scenarios::ingest_sqlite(ctx, &mut r).await?,
        "ingest-postgres" => store_scenarios::ingest_postgres(ctx, &mut r).await?,
        "long-thread" => store_scenarios::long_thread(ctx, &mut r).await?,
        "ingest-http" => server_scenarios::ingest_http(ctx, &mut r).await?,
        "fanout" => server_scenarios::fanout(ctx, &mut r).await?,
        "live-latency" => server_scenarios::live_latency(ctx, &mut r).await?,
        "idle-sse" => server_scenarios::idle_sse(ctx, &mut r).await?,
        "replay" => server_scenarios::replay(ctx, &mut r).await?,
        "slow-consumers" => server_scenarios::slow_consumers(ctx, &mut r).await?,
        "rebuild" => other_scenarios::rebuild(ctx, &mut r).await?,
        "erasure" => erasure_scenario::erasure(ctx, &mut r).await?,
        "erasure-postgres" => erasure_scenario::erasure_postgres(ctx, &mut r).await?,
        "parquet-export" => export_scenario::parquet_export(ctx, &mut r).await?,
        "ttft" => other_scenarios::ttft(ctx, &mut r).await?,
        "agent-load" => agent_load::agent_load(ctx, &mut r).await?,
        "compaction" => compaction_scenario::compaction(ctx, &mut r).await?,
        "partitioned-log" => partitioned_log::partitioned_log(ctx, &mut r).await?,
        "durable-streams" => durable_streams::durable_streams(ctx, &mut r).await?,
        "failover" => ha::failover(ctx, &mut r).await?,
        "standby-fanout" => ha::standby_fanout(ctx, &mut r).await?,
        other => anyhow::bail!("unknown scenario {other:?} (try `list`)"),
    }
    r.print();
    Ok(r)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    client::base();
    let load = load_opts(&cli);
    let ds = ds_opts(&cli)?;
    let ctx = Ctx {
        quick: cli.quick,
        server_bin: cli.server_bin,
        pg_admin: cli.postgres,
        load,
        ds,
        ha_port_base: cli.ha_port_base,
    };
    let names: Vec<&str> = match cli.scenario.as_str() {
        "list" => {
            for (n, d) in SCENARIOS {
                println!("{n:<16} {d}");
            }
            return Ok(());
        }
        "all" => SCENARIOS.iter().map(|s| s.0).collect(),
        one => one.split(',').collect(),
    };
    let mut reports = Vec::new();
    for n in names {
        reports.push(run_one(n, &ctx).await?);
    }
    if let Some(path) = cli.json {
        let json = if reports.len() == 1 {
            serde_json::to_string_pretty(&reports[0])?
        } else {
            serde_json::to_string_pretty(&reports)?
        };
        std::fs::write(&path, json)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

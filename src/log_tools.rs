//! The tools on the log — `export`, `import`, `replay`, `analytics` — as subcommands: their
//! arguments and the thin call into `threadstream-audit` each makes.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;
use threadstream_api as api;
use threadstream_audit as audit;

use crate::{shutdown_signal, LogArgs};

#[derive(clap::Args)]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    log: LogArgs,
    #[arg(long)]
    thread: Option<String>,
    #[arg(long)]
    run: Option<String>,
    /// Every event of the threads this user owns.
    #[arg(long)]
    user: Option<String>,
    /// Events at or after this time (epoch ms, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ).
    #[arg(long)]
    from: Option<String>,
    /// Events before this time.
    #[arg(long)]
    to: Option<String>,
    /// Write here instead of stdout (NDJSON).
    #[arg(long, short, conflicts_with = "out")]
    output: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = ExportFormat::Ndjson)]
    format: ExportFormat,
    /// The directory of a Parquet export (`--format parquet`): events by day under `events/`,
    /// the derived tables beside them, `_manifest.json` (docs/integrations.md).
    #[arg(long, required_if_eq("format", "parquet"))]
    out: Option<PathBuf>,
    /// Only events with a larger id. Without a value: continue the export in `--out` after the
    /// last id its manifest records (a nightly job's append).
    #[arg(long, num_args = 0..=1, default_missing_value = "manifest", requires = "out")]
    since_id: Option<SinceId>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ExportFormat {
    /// One JSON object per event and line.
    Ndjson,
    /// Parquet files in the directory `--out`.
    Parquet,
}

/// `--since-id`'s value: an id, or `manifest` (the flag without a value).
#[derive(Clone, Copy)]
pub(crate) struct SinceId(audit::parquet::Since);

impl std::str::FromStr for SinceId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        use audit::parquet::Since;
        if s == "manifest" {
            return Ok(SinceId(Since::Manifest));
        }
        match s.parse::<i64>() {
            Ok(id) if id >= 0 => Ok(SinceId(Since::Id(id))),
            _ => Err(format!("'{s}' is not an event id (0 or more)")),
        }
    }
}

#[derive(clap::Args)]
pub(crate) struct ImportArgs {
    #[command(flatten)]
    log: LogArgs,
    /// Read this file instead of stdin.
    #[arg(long, short)]
    input: Option<PathBuf>,
}

#[derive(clap::Args)]
pub(crate) struct ReplayArgs {
    #[command(flatten)]
    log: LogArgs,
    #[arg(long)]
    thread: String,
    /// Replay the events after this id.
    #[arg(long, default_value_t = 0)]
    from: i64,
    /// `1` (original timing), `10` (ten times faster), any factor, or `max` (no waiting).
    #[arg(long, default_value = "1")]
    speed: audit::replay::Speed,
    /// Shorten any pause between two events to at most this many milliseconds.
    #[arg(long)]
    max_gap_ms: Option<u64>,
    /// Serve the replay as SSE on this address (`GET /instance-ai/events/<thread>`) instead of
    /// writing NDJSON to stdout.
    #[arg(long)]
    listen: Option<SocketAddr>,
}

#[derive(clap::Args)]
pub(crate) struct TracesArgs {
    #[command(flatten)]
    log: LogArgs,
    #[arg(long)]
    thread: String,
    /// Only this run (default: every run of the thread).
    #[arg(long)]
    run: Option<String>,
    /// Post to this OTLP collector (base URL: the request goes to `<url>/v1/traces`) instead of
    /// writing OTLP/JSON to stdout.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// The OTLP transport to the collector (gRPC calls the endpoint itself).
    #[arg(
        long,
        env = "OTEL_EXPORTER_OTLP_PROTOCOL",
        value_enum,
        default_value = "http/protobuf"
    )]
    otlp_protocol: api::telemetry::OtlpProtocol,
    /// The `service.name` of the spans.
    #[arg(long, env = "OTEL_SERVICE_NAME", default_value = api::telemetry::DEFAULT_SERVICE_NAME)]
    otel_service_name: String,
}

#[derive(clap::Args)]
pub(crate) struct AnalyticsArgs {
    #[command(flatten)]
    log: LogArgs,
    /// Runs started at or after this time (epoch ms, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ).
    #[arg(long)]
    from: Option<String>,
    /// Runs started before this time.
    #[arg(long)]
    to: Option<String>,
    /// Runs of the threads this user owns.
    #[arg(long)]
    user: Option<String>,
    #[arg(long, value_enum, default_value_t = AnalyticsFormat::Text)]
    format: AnalyticsFormat,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum AnalyticsFormat {
    /// A summary.
    Text,
    /// The runs as a JSON array.
    Json,
    /// One row per run.
    Csv,
    /// The summary as JSON (the figures of the text summary and more, for charts).
    Summary,
}

fn time_arg(raw: Option<&str>) -> anyhow::Result<Option<i64>> {
    Ok(raw.map(audit::time::parse_time).transpose()?)
}

pub(crate) async fn export(a: ExportArgs) -> anyhow::Result<()> {
    let sel = audit::export::Selection {
        thread: a.thread,
        run: a.run,
        user: a.user,
        from_ts: time_arg(a.from.as_deref())?,
        to_ts: time_arg(a.to.as_deref())?,
    };
    if let (Some(from), Some(to)) = (sel.from_ts, sel.to_ts) {
        anyhow::ensure!(from < to, "--from must be before --to");
    }
    if a.format == ExportFormat::Parquet {
        let dir = a.out.expect("clap requires --out with parquet");
        let since = a.since_id.map_or(audit::parquet::Since::Start, |s| s.0);
        let log = a.log.open().await?;
        let report = audit::parquet::export_dir(&log, &dir, sel, since).await;
        log.shutdown().await;
        println!("{}", serde_json::to_string(&report?)?);
        return Ok(());
    }
    anyhow::ensure!(
        a.out.is_none() && a.since_id.is_none(),
        "--out and --since-id are for --format parquet (NDJSON goes to --output or stdout)"
    );
    let log = a.log.open().await?;
    let n = match a.output {
        Some(path) => {
            let mut f = tokio::io::BufWriter::new(tokio::fs::File::create(&path).await?);
            audit::export::export_to(log.clone(), sel, &mut f).await
        }
        None => {
            let mut out = tokio::io::BufWriter::new(tokio::io::stdout());
            audit::export::export_to(log.clone(), sel, &mut out).await
        }
    };
    log.shutdown().await;
    tracing::info!(events = n?, "export done");
    Ok(())
}

pub(crate) async fn import(a: ImportArgs) -> anyhow::Result<()> {
    let log = a.log.open().await?;
    let mut report = |n: u64| tracing::info!(events = n, "importing");
    let done = match a.input {
        Some(path) => {
            let f = tokio::io::BufReader::new(tokio::fs::File::open(&path).await?);
            audit::import::import(&log, f, &mut report).await
        }
        None => {
            let stdin = tokio::io::BufReader::new(tokio::io::stdin());
            audit::import::import(&log, stdin, &mut report).await
        }
    };
    log.shutdown().await;
    let done = done?;
    println!(
        "imported {} events, {} new threads (last id {})",
        done.events, done.threads, done.last_id
    );
    Ok(())
}

pub(crate) async fn replay(a: ReplayArgs) -> anyhow::Result<()> {
    let r = audit::replay::Replay {
        thread: a.thread,
        after: a.from,
        speed: a.speed,
        max_gap: a.max_gap_ms.map(Duration::from_millis),
    };
    let log = a.log.open().await?;
    match a.listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            // The same line `serve` prints, so tools (and tests) find the port the same way.
            tracing::info!(
                "threadstream listening on http://{}",
                listener.local_addr()?
            );
            tokio::select! {
                r = audit::replay::serve_sse(log.clone(), r, listener) => r?,
                _ = shutdown_signal() => {}
            }
        }
        None => {
            let mut out = tokio::io::stdout();
            audit::replay::to_ndjson(log.clone(), r, &mut out).await?;
        }
    }
    log.shutdown().await;
    Ok(())
}

pub(crate) async fn analytics(a: AnalyticsArgs) -> anyhow::Result<()> {
    use threadstream_projections::Analytics;
    let from = time_arg(a.from.as_deref())?;
    let to = time_arg(a.to.as_deref())?;
    let log = a.log.open().await?;
    let threads = match &a.user {
        Some(user) => Some(api::threads_of(&log, user).await?),
        None => None,
    };
    let docs = api::background::projector::view_all::<Analytics>(
        &log,
        threadstream_store::Sight::Committed,
    )
    .await;
    log.shutdown().await;
    let filter = audit::report::RunFilter { from, to, threads };
    let runs = audit::report::select(docs?.into_values(), &filter);
    match a.format {
        AnalyticsFormat::Json => println!("{}", audit::report::to_json(&runs)),
        AnalyticsFormat::Csv => print!("{}", audit::report::to_csv(&runs)),
        AnalyticsFormat::Text => print!("{}", audit::report::summarize(&runs)),
        AnalyticsFormat::Summary => println!("{:#}", audit::report::summary_json(&runs)),
    }
    Ok(())
}

pub(crate) async fn traces(a: TracesArgs) -> anyhow::Result<()> {
    let log = a.log.open().await?;
    let traces = audit::traces::read(&log, &a.thread, a.run.as_deref()).await;
    log.shutdown().await;
    let traces = traces?;
    let request = audit::traces::otlp_request(&traces, &a.otel_service_name);
    let spans: usize = traces.iter().map(|t| t.spans.len()).sum();
    match a.otlp_endpoint.filter(|e| !e.is_empty()) {
        Some(endpoint) => {
            match a.otlp_protocol {
                api::telemetry::OtlpProtocol::HttpProtobuf => {
                    audit::traces::post(&endpoint, &request).await?
                }
                api::telemetry::OtlpProtocol::Grpc => {
                    audit::traces::export_grpc(&endpoint, request).await?
                }
            }
            eprintln!(
                "exported {} run(s), {spans} span(s) to {endpoint}",
                traces.len()
            );
        }
        None => println!("{}", serde_json::to_string(&request)?),
    }
    Ok(())
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("scope").required(true).args(["thread", "user"])))]
pub(crate) struct EraseArgs {
    #[command(flatten)]
    log: LogArgs,
    /// The thread to erase (its forks go with it).
    #[arg(long)]
    thread: Option<String>,
    /// The user whose threads, Durable Streams, workflows (every one holding an event of theirs),
    /// subscriptions, attachments and idempotency records to erase.
    #[arg(long)]
    user: Option<String>,
    /// Who asked, recorded in the tombstone.
    #[arg(long, default_value = "cli")]
    requested_by: String,
}

/// `threadstream erase`: JSON of what was erased on stdout (a repeat finishes an interrupted
/// erasure: leftovers removed, files scrubbed); exit status 1 when nothing of the scope is
/// stored and it was never erased.
pub(crate) async fn erase(a: EraseArgs) -> anyhow::Result<()> {
    let config = a.log.config()?;
    match api::erasure::run_cli(&config, a.thread, a.user, a.requested_by).await? {
        Some(answer) => {
            println!("{answer}");
            Ok(())
        }
        None => {
            eprintln!("nothing of that thread or user is stored, and it was never erased");
            std::process::exit(1);
        }
    }
}

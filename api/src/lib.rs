//! threadstream's service: axum routes and SSE over the log, the projector, and the agent
//! runtime, wired together. The binary (`src/main.rs`) is a thin CLI over [`serve`] and
//! [`rebuild_projections`].

pub mod access;
pub mod auth;
pub mod background;
pub mod data_dir_lock;
pub mod durable;
pub mod erasure;
pub mod error;
pub mod extract;
pub mod http;
pub mod idempotency;
pub mod ids;
pub mod limits;
pub mod metrics;
pub mod openapi;
pub mod readiness;
pub mod runs;
pub mod sse;
pub mod telemetry;
pub mod threads;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use threadstream_http1 as listener;

use threadstream_agent::{AgentRuntime, LlmSettings, Recovery, RuntimeConfig};
use threadstream_projections::Status;
use threadstream_store::{Durability, EventLog, NotifyMode, Sight};
use tokio::sync::watch;

use crate::background::{projector, run_leases};

pub use error::ApiError;

/// Where `serve` listens unless told otherwise.
pub const DEFAULT_ADDR: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    7700,
));
/// Folder of the embedded SQLite log unless told otherwise.
pub const DEFAULT_DATA_DIR: &str = "./data";
/// Default of [`Config::notify`].
pub const DEFAULT_NOTIFY: NotifyMode = NotifyMode::Postgres;
/// Default of [`Config::orphan_after`].
pub const DEFAULT_ORPHAN_AFTER: Duration = Duration::from_secs(30);
/// Default of [`Config::max_body_bytes`].
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// Default of [`Config::max_message_bytes`].
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Default of [`Config::sse_ping`].
pub const DEFAULT_SSE_PING: Duration = Duration::from_secs(15);
/// Default of [`Config::stream_long_poll`]: short enough for the Durable Streams conformance
/// suite's 5 s test timeout on `offset=now` long-polls, long enough to spare idle clients most
/// round trips.
pub const DEFAULT_STREAM_LONG_POLL: Duration = Duration::from_secs(3);
/// Default of [`Config::demo_delay`].
pub const DEFAULT_DEMO_DELAY: Duration = Duration::from_millis(15);
/// Default of [`Config::max_attachment_bytes`].
pub const DEFAULT_MAX_ATTACHMENT_BYTES: usize = 10 << 20;
/// Default of [`Config::attachment_bucket`].
pub const DEFAULT_ATTACHMENT_BUCKET: &str = "threadstream";
/// Default of [`Config::signed_url_ttl`].
pub const DEFAULT_SIGNED_URL_TTL: Duration = Duration::from_secs(300);
/// Default of [`Config::idempotency_window`].
pub const DEFAULT_IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);
/// Default of [`Config::store_wait`]: a Patroni failover takes seconds to tens of seconds
/// (docs/ha.md); an append held that long is still answered, a longer outage is refused.
pub const DEFAULT_STORE_WAIT: Duration = Duration::from_secs(30);

/// Default of [`Config::commit_linger`]: the longest the issue of the cost per token (#35) named
/// acceptable. Only tokens after a run's first wait (`store/src/writer/linger.rs`), and 5 ms
/// cost 9-12 % less CPU per token than 2 ms on SQLite (docs/performance.md, "Cost per token at
/// model speed").
pub const DEFAULT_COMMIT_LINGER: Duration = Duration::from_millis(5);
/// The longest [`Config::commit_linger`] accepted: it adds to every append's answer.
pub const MAX_COMMIT_LINGER: Duration = Duration::from_millis(20);
/// Default of [`Config::shutdown_grace`].
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Threads a retention sweep erases at most (`--retention-batch`).
pub const DEFAULT_RETENTION_BATCH: usize = 100;

/// Everything `serve` needs; the CLI fills it from flags and `THREADSTREAM_*` variables, whose
/// defaults are the `DEFAULT_*` constants beside it (and in [`limits`], [`auth`], the agent).
#[derive(Debug, Clone)]
pub struct Config {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    pub model: String,
    pub durability: Durability,
    /// `postgres://…`: keep the log in Postgres (shared by several instances) instead of SQLite.
    pub database_url: Option<String>,
    /// `postgres://…` of standbys (a load balancer's read port): stream readers' thread pages
    /// are read there once a standby has replayed what they must see (Postgres only).
    pub read_database_url: Option<String>,
    /// How instances on one Postgres tell each other about new events.
    pub notify: NotifyMode,
    /// How long a small batch of appends waits for more before it is committed
    /// (`EventLog::set_commit_linger`).
    pub commit_linger: Duration,
    /// On Postgres: how long an append waits in the writer for a reachable primary (a
    /// failover, a restart) before it is refused with 503 (`EventLog::set_store_wait`).
    pub store_wait: Duration,
    /// On Postgres: a run whose instance stopped renewing its lease is recovered by another
    /// instance within this time.
    pub orphan_after: Duration,
    /// How long an `Idempotency-Key`'s first answer is kept (and returned to retries).
    pub idempotency_window: Duration,
    /// Largest request body accepted (413 above it).
    pub max_body_bytes: usize,
    /// Largest chat message accepted (413 above it).
    pub max_message_bytes: usize,
    /// Interval of `: ping` comments on idle SSE streams.
    pub sse_ping: Duration,
    /// How long a Durable Streams long-poll waits for data before answering 204.
    pub stream_long_poll: Duration,
    /// Pause between the demo model's streamed deltas.
    pub demo_delay: Duration,
    /// Endpoints, keys, timeouts and retries of the HTTP model providers.
    pub llm: LlmSettings,
    /// How long a confirmation waits for its answer before the run is cancelled (`timeout`).
    pub confirmation_timeout: Duration,
    /// Estimated tokens of earlier turns above which they are summarized (0: never).
    pub summary_token_budget: usize,
    /// Create the two sample workflows on first use; `None`: only with the `demo` model.
    pub sample_workflows: Option<bool>,
    /// Offer the agent the `fetch-url` tool (off by default).
    pub tool_fetch_url: bool,
    /// The `--mcp-config` file: MCP servers whose tools the agent is offered.
    pub mcp_config: Option<PathBuf>,
    /// Upstream AG-UI agents (`--agui-agent`), their URL policy and stall timeout.
    pub agui: threadstream_agent::agui::AguiSettings,
    /// A second listener serving only `GET /metrics`, without credentials (`--metrics-addr`).
    pub metrics_addr: Option<SocketAddr>,
    /// How MCP tool calls are made.
    pub mcp: threadstream_agent::mcp::McpSettings,
    /// Largest attachment accepted (413 above it).
    pub max_attachment_bytes: usize,
    /// HMAC key of signed attachment URLs; `None`: a random key per process.
    pub attachment_signing_key: Option<secrecy::SecretString>,
    /// The storage bucket name attachment URLs carry (their `bucket` parameter).
    pub attachment_bucket: String,
    /// How long a signed attachment URL stays valid.
    pub signed_url_ttl: Duration,
    /// Who may call the API; off by default (one local user, loopback only).
    pub auth: auth::AuthConfig,
    /// Per-request, per-user and per-process limits (see [`limits`]).
    pub limits: limits::LimitsConfig,
    /// On SIGTERM / Ctrl-C the process exits within this time: runs are cancelled, streams
    /// closed, the log closed; what is still running after it is aborted.
    pub shutdown_grace: Duration,
    /// On SIGTERM / Ctrl-C, how long the process first goes on serving with `GET /readyz` 503
    /// (`shutting_down`), so a load balancer checking it stops sending requests before the
    /// stop begins; `shutdown_grace` counts from its end. 0 by default.
    pub shutdown_unready: Duration,
    /// A request head must arrive whole within this of its first byte (408 and close after it).
    pub head_timeout: Duration,
    /// A connection that has sent nothing, or waits between requests, this long is closed; so
    /// is a request body that pauses this long.
    pub idle_timeout: Duration,
    /// Connections open at once; the process's file limit may lower it (see
    /// [`listener::fd_limit`]).
    pub max_connections: usize,
    /// Which HTTP/1.1 implementation serves connections.
    pub http1_engine: listener::Http1Engine,
    /// `--retention-days`: erase threads idle longer than this (off by default).
    pub retention: Option<background::retention::RetentionConfig>,
    /// `--compact-after-secs`: compact finished runs this long after they finished (`None`:
    /// `--no-compaction`).
    pub compaction: Option<background::compactor::CompactionConfig>,
    /// Which URLs Durable Streams subscriptions may send webhooks to.
    pub webhook_targets: threadstream_durable_streams::WebhookTargets,
    /// `--change-feed`: publish the log to NATS JetStream (off by default).
    pub change_feed: Option<threadstream_change_feed::ChangeFeedConfig>,
}

impl Config {
    pub fn new(addr: SocketAddr, data_dir: PathBuf) -> Self {
        Config {
            addr,
            data_dir,
            model: threadstream_agent::DEFAULT_MODEL.into(),
            durability: Durability::Full,
            database_url: None,
            read_database_url: None,
            notify: DEFAULT_NOTIFY,
            commit_linger: DEFAULT_COMMIT_LINGER,
            store_wait: DEFAULT_STORE_WAIT,
            orphan_after: DEFAULT_ORPHAN_AFTER,
            idempotency_window: DEFAULT_IDEMPOTENCY_WINDOW,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            sse_ping: DEFAULT_SSE_PING,
            stream_long_poll: DEFAULT_STREAM_LONG_POLL,
            demo_delay: DEFAULT_DEMO_DELAY,
            llm: LlmSettings::default(),
            confirmation_timeout: threadstream_agent::DEFAULT_CONFIRMATION_TIMEOUT,
            summary_token_budget: threadstream_agent::DEFAULT_SUMMARY_TOKEN_BUDGET,
            sample_workflows: None,
            tool_fetch_url: false,
            mcp_config: None,
            agui: Default::default(),
            metrics_addr: None,
            mcp: threadstream_agent::mcp::McpSettings::default(),
            max_attachment_bytes: DEFAULT_MAX_ATTACHMENT_BYTES,
            attachment_signing_key: None,
            attachment_bucket: DEFAULT_ATTACHMENT_BUCKET.into(),
            signed_url_ttl: DEFAULT_SIGNED_URL_TTL,
            auth: auth::AuthConfig::default(),
            limits: limits::LimitsConfig::default(),
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            shutdown_unready: Duration::ZERO,
            head_timeout: listener::HEAD_TIMEOUT,
            idle_timeout: listener::IDLE_TIMEOUT,
            max_connections: listener::MAX_CONNECTIONS,
            http1_engine: listener::Http1Engine::default(),
            retention: None,
            compaction: Some(background::compactor::CompactionConfig::default()),
            webhook_targets: threadstream_durable_streams::WebhookTargets::default(),
            change_feed: None,
        }
    }
}

/// Shared state of every request: cheap to clone (each field is a handle).
#[derive(Clone)]
pub struct ApiContext {
    pub config: std::sync::Arc<Config>,
    pub log: EventLog,
    pub runtime: AgentRuntime,
    /// Run leases, when several instances may share the log (Postgres).
    pub leases: Option<run_leases::RunLeases>,
    /// Flips to `true` when the server starts shutting down; SSE streams end on it.
    pub shutdown: watch::Receiver<bool>,
    /// Attachment bytes and the key their URLs are signed with.
    pub attachments: http::attachments::Attachments,
    /// Checks credentials; the `Caller` extractor asks it.
    pub auth: auth::Authenticator,
    /// The limits and their live counts.
    pub limits: limits::Limits,
    /// The Durable Streams engine's handle: its folds, the webhook key and client (`crate::durable`).
    pub durable: threadstream_durable_streams::Context,
    /// `Idempotency-Key`: the window, and the pruning of expired keys.
    pub idempotency: idempotency::Keys,
    /// Whether to send this instance requests (`GET /readyz`); the shutdown flips it.
    pub readiness: readiness::Readiness,
    /// The change feed's publisher, when `--change-feed` is set.
    pub change_feed: Option<threadstream_change_feed::ChangeFeed>,
}

/// Refuses a configuration that would serve every request as the local user to the network.
pub fn check_listen_address(config: &Config, auth: &auth::Authenticator) -> anyhow::Result<()> {
    if !auth.enabled() && !config.addr.ip().is_loopback() {
        anyhow::bail!(
            "refusing to listen on {} without authentication: with no --tokens-file or JWT key \
             (--jwt-hs256-secret / --jwt-rs256-public-key) configured, every request is served as \
             the one local user, so only a loopback address (127.0.0.1, ::1) is allowed; \
             configure authentication or use --addr 127.0.0.1:<port>",
            config.addr
        );
    }
    Ok(())
}

/// Raises the soft limit on open files to the hard one and returns the connection cap it
/// leaves room for (`requested` at most); logs both.
fn connection_cap(requested: usize) -> usize {
    match listener::fd_limit::raise_to_hard_limit() {
        Ok(limits) => {
            let cap = listener::fd_limit::connection_cap(requested, limits.soft);
            tracing::info!(
                soft_before = limits.soft_before,
                soft = limits.soft,
                hard = limits.hard,
                max_connections = cap,
                "open files limit"
            );
            if cap < requested {
                tracing::warn!(
                    requested,
                    max_connections = cap,
                    reserved = listener::fd_limit::RESERVED_FDS,
                    "--max-connections lowered to fit the open files limit"
                );
            }
            cap
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read or raise the open files limit");
            requested
        }
    }
}

/// Runs the service until `stop` resolves (the CLI passes Ctrl-C / SIGTERM).
/// `--metrics-addr`: a listener of its own answering `GET /metrics` only, without credentials,
/// until the service shuts down.
async fn serve_metrics(addr: SocketAddr, ctx: ApiContext) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!("metrics on http://{}/metrics", listener.local_addr()?);
    let mut shutdown = ctx.shutdown.clone();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let ctx = ctx.clone();
            async move { http::metrics::exposition(&ctx).await }
        }),
    );
    tokio::spawn(async move {
        let stop = async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::warn!(error = %e, "the metrics listener stopped");
        }
    });
    Ok(())
}

pub async fn serve(
    config: Config,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let auth = auth::Authenticator::new(&config.auth)?;
    check_listen_address(&config, &auth)?;
    metrics::install()?;
    // Held until `serve` returns (SQLite: a CLI erasure must not run meanwhile).
    let _data_dir = match &config.database_url {
        None => Some(data_dir_lock::serving(&config.data_dir).await?),
        Some(_) => None,
    };
    let log = open_log(&config).await?;
    log.set_commit_linger(config.commit_linger);
    log.set_store_wait(config.store_wait);
    tracing::info!(
        store = if config.database_url.is_some() {
            "postgres"
        } else {
            "sqlite"
        },
        "log opened"
    );
    if let Some(used) = log.used_tickets() {
        auth.set_ticket_ledger(auth::TicketLedger::Shared(used));
    }
    // The start-up steps that can take long are logged, so a start that hangs shows where.
    let started = std::time::Instant::now();
    let folded = projector::catch_up(&log).await?;
    tracing::info!(
        events = folded,
        ms = started.elapsed().as_millis() as u64,
        "read models caught up with the log"
    );
    let mcp_servers = match &config.mcp_config {
        Some(path) => threadstream_agent::mcp::config::load(path, &|v| std::env::var(v).ok())?,
        None => Vec::new(),
    };
    let runtime = AgentRuntime::new(
        log.clone(),
        RuntimeConfig {
            model: config.model.clone(),
            demo_delay: config.demo_delay,
            llm: config.llm.clone(),
            confirmation_timeout: config.confirmation_timeout,
            summary_token_budget: config.summary_token_budget,
            sample_workflows: config
                .sample_workflows
                .unwrap_or(config.model == threadstream_agent::DEFAULT_MODEL),
            fetch_url: config
                .tool_fetch_url
                .then(threadstream_agent::fetch::FetchPolicy::default),
            mcp_servers,
            mcp: config.mcp.clone(),
            agui: threadstream_agent::agui::AguiAgents::new(config.agui.clone())
                .map_err(threadstream_agent::AgentError::InvalidSetting)?,
        },
    )?;
    // With one process on the log (SQLite), a run still live at start-up was left by a process
    // that stopped. On Postgres other instances may be executing it: run leases decide there.
    if config.database_url.is_none() {
        recover_runs(&log, &runtime).await?;
    }
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let projector_task = tokio::spawn(projector::run(log.clone(), shutdown_rx.clone()));
    if let Some(retention) = config.retention.clone() {
        tokio::spawn(background::retention::run(
            log.clone(),
            attachment_store(&log, &config),
            retention,
            shutdown_rx.clone(),
        ));
    }
    if let Some(compaction) = config.compaction {
        tokio::spawn(background::compactor::run(
            log.clone(),
            compaction,
            shutdown_rx.clone(),
        ));
    }
    let leases = log.run_leases().map(|store| {
        let leases = run_leases::RunLeases::new(store, config.orphan_after);
        // Follow-up runs the runtime starts by itself hold a lease like chat runs.
        runtime.on_run_start(std::sync::Arc::new(leases.clone()));
        tokio::spawn(
            leases
                .clone()
                .run(log.clone(), runtime.clone(), shutdown_rx.clone()),
        );
        leases
    });
    // Never part of readiness: the bus being down delays the feed, not this instance's requests.
    let change_feed = config.change_feed.clone().map(|c| {
        let feed = threadstream_change_feed::ChangeFeed::new(c);
        feed.spawn(log.clone(), shutdown_rx.clone());
        feed
    });
    let durable = durable::context(
        &log,
        shutdown_rx.clone(),
        config.stream_long_poll,
        config.webhook_targets,
        config.addr,
    )
    .await?;
    let ctx = ApiContext {
        config: std::sync::Arc::new(config.clone()),
        log: log.clone(),
        runtime: runtime.clone(),
        leases,
        shutdown: shutdown_rx,
        attachments: http::attachments::Attachments::new(
            attachment_store(&log, &config),
            config.attachment_signing_key.as_ref(),
            config.attachment_bucket.clone(),
            config.signed_url_ttl,
            config.max_attachment_bytes,
        ),
        auth,
        limits: limits::Limits::new(config.limits.clone()),
        durable,
        idempotency: idempotency::Keys::new(config.idempotency_window),
        readiness: readiness::Readiness::default(),
        change_feed,
    };
    tokio::spawn(threadstream_durable_streams::dispatch::run(
        ctx.durable.clone(),
    ));
    if let Some(addr) = config.metrics_addr {
        serve_metrics(addr, ctx.clone()).await?;
    }
    let readiness = ctx.readiness.clone();
    let app = http::router(ctx);
    let listener = tokio::net::TcpListener::bind(config.addr).await?;
    let addr = listener.local_addr()?;
    tracing::info!(
        data_dir = %config.data_dir.display(),
        model = %config.model,
        "threadstream listening on http://{addr}"
    );
    // Shutdown, within `shutdown_unready` + `shutdown_grace` of the signal (see
    // `docs/security.md`, "Shutdown and faults"): (0) /readyz answers 503 while everything
    // else is served as before for `shutdown_unready`, so a load balancer takes the instance
    // out first; (1) no new run is admitted and every run of this process is cancelled with
    // reason `service_shutdown` through the log, while the listener still answers (a new run
    // gets 503, /readyz 503, /healthz still 200); (2) SSE streams send what is committed and end, the listener
    // closes and open requests finish; (3) whatever still runs is aborted and the writer
    // commits the batch in hand before the log closes.
    let grace = config.shutdown_grace;
    let unready = config.shutdown_unready;
    let (deadline_tx, mut deadline_rx) = watch::channel(None::<tokio::time::Instant>);
    let drainer = runtime.clone();
    let listener_config = listener::ListenerConfig {
        head_timeout: config.head_timeout,
        idle_timeout: config.idle_timeout,
        max_connections: connection_cap(config.max_connections),
        engine: config.http1_engine,
    };
    let server = listener::serve(listener, app, listener_config, async move {
        stop.await;
        readiness.begin_draining();
        if !unready.is_zero() {
            tracing::info!(
                unready_ms = unready.as_millis() as u64,
                "shutting down: not ready, still serving"
            );
            tokio::time::sleep(unready).await;
        }
        let start = tokio::time::Instant::now();
        let _ = deadline_tx.send(Some(start + grace));
        tracing::info!(
            grace_secs = grace.as_secs_f64(),
            "shutting down: cancelling this process's runs"
        );
        let left = drainer
            .drain(
                threadstream_agent::orchestrator::SERVICE_SHUTDOWN,
                start + grace * 6 / 10,
            )
            .await;
        if left > 0 {
            tracing::warn!(
                runs = left,
                "runs did not finish their cancel in time; they will be aborted"
            );
        }
        let _ = shutdown_tx.send(true);
    });
    let hard_stop = async move {
        let deadline = loop {
            if let Some(d) = *deadline_rx.borrow_and_update() {
                break d;
            }
            if deadline_rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::time::sleep_until(deadline - grace / 10).await;
    };
    tokio::select! {
        () = server => {}
        _ = hard_stop => tracing::warn!("shutdown grace period is over; dropping the connections still open"),
    }
    runtime.shutdown();
    let closing = async {
        let _ = projector_task.await;
        log.shutdown().await;
    };
    // The writer finishes its batch in hand; a store that hangs does not hold the exit.
    if tokio::time::timeout(grace / 10 + Duration::from_millis(500), closing)
        .await
        .is_err()
    {
        tracing::error!("the log did not close in time; exiting anyway");
    }
    tracing::info!("stopped");
    Ok(())
}

/// Runs left live by a process that stopped: a run waiting on a confirmation is resumed by the
/// runtime (rebuilt from the log, so the confirmation can still be answered); a run that was
/// executing can never finish by itself and is finished as `interrupted` (a `tool-error` for
/// every open tool call, then `run-finish {status: "error", reason: "interrupted"}`), so no
/// thread stays stuck with a live run.
async fn recover_runs(log: &EventLog, runtime: &AgentRuntime) -> anyhow::Result<()> {
    let statuses = projector::view_all::<Status>(log, Sight::Committed).await?;
    for (thread_id, doc) in statuses {
        let status = Status::render(&doc);
        let tasks = status["backgroundTasks"]
            .as_array()
            .is_some_and(|t| !t.is_empty());
        if status["hasActiveRun"] != true && !tasks {
            continue;
        }
        match runtime.recover(&thread_id).await? {
            Recovery::Resumed { run_id } => {
                tracing::info!(thread = %thread_id, run = %run_id, "resumed a run waiting on a confirmation")
            }
            Recovery::Interrupted { run_id } => {
                tracing::warn!(thread = %thread_id, run = %run_id, "finished a run interrupted by a restart")
            }
            Recovery::TasksInterrupted { tasks } => {
                tracing::warn!(thread = %thread_id, tasks, "completed background tasks interrupted by a restart")
            }
            Recovery::Idle => {}
        }
    }
    Ok(())
}

/// Ids of the threads `user` owns (deleted ones included: their runs happened).
pub async fn threads_of(
    log: &EventLog,
    user: &str,
) -> Result<std::collections::HashSet<String>, threadstream_store::StoreError> {
    let docs =
        projector::view_all::<threadstream_projections::ThreadList>(log, Sight::Committed).await?;
    Ok(docs
        .into_iter()
        .filter(|(_, t)| t.owner == user)
        .map(|(id, _)| id)
        .collect())
}

/// Where attachments live: beside the log (files in the data dir for SQLite, a table on
/// Postgres).
pub(crate) fn attachment_store(
    log: &EventLog,
    config: &Config,
) -> threadstream_store::AttachmentStore {
    log.attachment_store(config.data_dir.join("attachments"))
}

/// Opens the configured store: Postgres when a database URL is given, else SQLite in the data
/// directory.
pub async fn open_log(config: &Config) -> anyhow::Result<EventLog> {
    Ok(match &config.database_url {
        Some(url) => {
            EventLog::open_postgres_reading_from(
                url,
                config.read_database_url.as_deref(),
                config.notify.clone(),
            )
            .await?
        }
        None => EventLog::open_sqlite(&config.data_dir, config.durability).await?,
    })
}

/// `threadstream projections rebuild --name <model>`: rebuilds one read model beside the live one
/// and switches atomically (a running server keeps serving the old one until then); see
/// [`projector::rebuild_model`].
pub async fn rebuild_projection(
    config: &Config,
    name: &str,
    progress: &mut dyn FnMut(i64, i64),
) -> anyhow::Result<u64> {
    if !projector::MODELS.contains(&name) {
        anyhow::bail!(
            "unknown read model {name:?}; the read models are: {}",
            projector::MODELS.join(", ")
        );
    }
    let log = open_log(config).await?;
    let n = projector::rebuild_model(&log, name, progress).await;
    log.shutdown().await;
    Ok(n?.unwrap_or(0))
}

/// `threadstream projections rebuild`: drops every read model and folds it again from the log.
pub async fn rebuild_projections(config: &Config) -> anyhow::Result<u64> {
    let log = open_log(config).await?;
    let n = projector::rebuild(&log).await?;
    log.shutdown().await;
    Ok(n)
}

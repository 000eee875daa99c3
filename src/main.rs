//! The `threadstream` command line: a thin layer over the `threadstream-api` crate.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use threadstream_agent as agent;
use threadstream_api as api;
use threadstream_api::{limits, Config};
use threadstream_audit as audit;
use threadstream_audit::progress::Progress;
use threadstream_store::NotifyMode;

mod log_tools;
use log_tools::{
    analytics, export, import, replay, AnalyticsArgs, ExportArgs, ImportArgs, ReplayArgs,
};

/// A whole number of seconds or milliseconds that must be at least 1 (0 would make a timer
/// fire at once or a limit refuse everything).
fn positive_u64() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(1..)
}

#[derive(Parser)]
#[command(
    name = "threadstream",
    version,
    about = "Event-sourced CQRS backend for AI-agent conversations"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP/SSE service.
    Serve(ServeArgs),
    /// Read-model maintenance.
    Projections {
        #[command(subcommand)]
        command: ProjectionsCommand,
    },
    /// Write stored events as NDJSON (one event per line), streaming: the whole log, or a
    /// thread, a run, a user's threads, a time range (filters combine).
    Export(ExportArgs),
    /// Load NDJSON written by `export` into a store, keeping ids and seqs; every event is checked
    /// against the thread rules and nothing is stored unless every line is accepted.
    Import(ImportArgs),
    /// Re-emit a thread's events with their original timing, as NDJSON on stdout or as the n8n
    /// SSE stream on a local port.
    Replay(ReplayArgs),
    /// Check the log's invariants and every read model against a fresh fold; exit status 1 when
    /// anything is wrong.
    Verify {
        #[command(flatten)]
        log: LogArgs,
    },
    /// Per-run analytics: a text summary, or the runs as JSON or CSV.
    Analytics(AnalyticsArgs),
    /// Print the OpenAPI document `GET /openapi.json` serves (docs/openapi.json is its output).
    Openapi,
    /// Bearer tokens for the tokens file.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Print the sha256 (hex) of a token read from stdin: what the tokens file stores.
    Hash,
}

/// Which store a tool works on.
#[derive(clap::Args)]
struct LogArgs {
    /// Folder of the embedded SQLite log (`threadstream.db`).
    #[arg(long, env = "THREADSTREAM_DATA_DIR", default_value = api::DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
    #[command(flatten)]
    store: StoreArgs,
}

impl LogArgs {
    fn config(self) -> anyhow::Result<Config> {
        let mut config = Config::new(([127, 0, 0, 1], 0).into(), self.data_dir);
        self.store.apply(&mut config);
        Ok(config)
    }

    async fn open(self) -> anyhow::Result<threadstream_store::EventLog> {
        api::open_log(&self.config()?).await
    }
}

impl ServeArgs {
    fn config(self) -> anyhow::Result<Config> {
        let mut config = Config::new(self.addr, self.data_dir);
        self.store.apply(&mut config);
        config.model = self.model;
        self.agent.apply(&mut config);
        self.attachments.apply(&mut config);
        self.auth.apply(&mut config)?;
        config.max_body_bytes = self.max_body_bytes;
        config.max_message_bytes = self.max_message_bytes;
        config.sse_ping = Duration::from_secs(self.sse_ping_secs);
        config.stream_long_poll = Duration::from_secs(self.stream_long_poll_secs);
        config.demo_delay = Duration::from_millis(self.demo_delay_ms);
        config.metrics_addr = self.metrics_addr;
        self.limits.apply(&mut config);
        Ok(config)
    }
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the log line says which).
    #[arg(long, env = "THREADSTREAM_ADDR", default_value_t = api::DEFAULT_ADDR)]
    addr: SocketAddr,
    /// Folder of the embedded SQLite log (`threadstream.db`).
    #[arg(long, env = "THREADSTREAM_DATA_DIR", default_value = api::DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
    #[command(flatten)]
    store: StoreArgs,
    /// Model that runs the agent: `demo` (built-in, scripted, no network),
    /// `openai/<model>` (any OpenAI-compatible server) or `anthropic/<model>`.
    #[arg(long, env = "THREADSTREAM_MODEL", default_value = agent::DEFAULT_MODEL)]
    model: String,
    #[command(flatten)]
    agent: Box<AgentArgs>,
    #[command(flatten)]
    attachments: AttachmentArgs,
    #[command(flatten)]
    auth: Box<AuthArgs>,
    /// Largest request body in bytes (413 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_BODY_BYTES",
        default_value_t = api::DEFAULT_MAX_BODY_BYTES
    )]
    max_body_bytes: usize,
    /// Largest chat message in bytes (413 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_MESSAGE_BYTES",
        default_value_t = api::DEFAULT_MAX_MESSAGE_BYTES
    )]
    max_message_bytes: usize,
    /// Seconds between `: ping` comments on idle SSE streams.
    #[arg(
        long,
        env = "THREADSTREAM_SSE_PING_SECS",
        default_value_t = api::DEFAULT_SSE_PING.as_secs(),
        value_parser = positive_u64()
    )]
    sse_ping_secs: u64,
    /// Seconds a Durable Streams long-poll (`/v1/stream/*?live=long-poll`) waits for new data
    /// before answering 204.
    #[arg(
        long,
        env = "THREADSTREAM_STREAM_LONG_POLL_SECS",
        default_value_t = api::DEFAULT_STREAM_LONG_POLL.as_secs(),
        value_parser = positive_u64()
    )]
    stream_long_poll_secs: u64,
    /// Milliseconds between the demo model's streamed deltas.
    #[arg(
        long,
        env = "THREADSTREAM_DEMO_DELAY_MS",
        default_value_t = api::DEFAULT_DEMO_DELAY.as_millis() as u64
    )]
    demo_delay_ms: u64,
    /// Also serve `GET /metrics` (Prometheus text format) on this address, without credentials:
    /// for a scraper on a private network (on `--addr`, `/metrics` is an admin's only).
    #[arg(long, env = "THREADSTREAM_METRICS_ADDR")]
    metrics_addr: Option<SocketAddr>,
    #[command(flatten)]
    limits: LimitArgs,
}

/// Limits and shutdown (defaults in `docs/operations.md`; a count limit of 0 means unlimited).
#[derive(clap::Args)]
struct LimitArgs {
    /// Events in one ingest request (413 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_EVENTS_PER_INGEST",
        default_value_t = limits::DEFAULT_MAX_EVENTS_PER_INGEST
    )]
    max_events_per_ingest: usize,
    /// Bytes of one ingested event's JSON (413 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_EVENT_BYTES",
        default_value_t = limits::DEFAULT_MAX_EVENT_BYTES
    )]
    max_event_bytes: usize,
    /// SSE streams one user may have open at once (429 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_SSE_PER_USER",
        default_value_t = limits::DEFAULT_MAX_SSE_PER_USER
    )]
    max_sse_per_user: usize,
    /// SSE streams open at once in this process (429 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_SSE_TOTAL",
        default_value_t = limits::DEFAULT_MAX_SSE_TOTAL
    )]
    max_sse_total: usize,
    /// Sustained requests per second per user (token bucket refill; 0: no rate limit).
    #[arg(
        long,
        env = "THREADSTREAM_REQUESTS_PER_SEC",
        default_value_t = limits::DEFAULT_REQUESTS_PER_SEC
    )]
    requests_per_sec: u32,
    /// Requests a user may send at once after being idle (token bucket size).
    #[arg(
        long,
        env = "THREADSTREAM_REQUEST_BURST",
        default_value_t = limits::DEFAULT_REQUEST_BURST
    )]
    request_burst: u32,
    /// Runs one user may have executing at once in this process (429 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_RUNS_PER_USER",
        default_value_t = limits::DEFAULT_MAX_RUNS_PER_USER
    )]
    max_runs_per_user: usize,
    /// Seconds within which the process exits after SIGTERM / Ctrl-C.
    #[arg(
        long,
        env = "THREADSTREAM_SHUTDOWN_GRACE_SECS",
        default_value_t = api::DEFAULT_SHUTDOWN_GRACE.as_secs(),
        value_parser = positive_u64()
    )]
    shutdown_grace_secs: u64,
    /// Seconds a request head may take to arrive once its first byte has (408 after them).
    #[arg(
        long,
        env = "THREADSTREAM_HEAD_TIMEOUT_SECS",
        default_value_t = api::listener::HEAD_TIMEOUT.as_secs(),
        value_parser = positive_u64()
    )]
    head_timeout_secs: u64,
    /// Seconds a connection may stay silent — before its first request, or between requests —
    /// before it is closed; also the longest pause within a request body (400 after it).
    #[arg(
        long,
        env = "THREADSTREAM_IDLE_TIMEOUT_SECS",
        default_value_t = api::listener::IDLE_TIMEOUT.as_secs(),
        value_parser = positive_u64()
    )]
    idle_timeout_secs: u64,
    /// Connections open at once; never more than the open-files limit allows (see
    /// docs/operations.md). At the cap idle connections are closed to make room; with none
    /// idle, a new connection gets 503.
    #[arg(
        long,
        env = "THREADSTREAM_MAX_CONNECTIONS",
        default_value_t = api::listener::MAX_CONNECTIONS,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    max_connections: usize,
    /// The HTTP/1.1 implementation: `threadstream` (ours for body-less requests, hyper for the
    /// rest) or `hyper` alone, a fallback.
    #[arg(long, env = "THREADSTREAM_HTTP1_ENGINE", value_enum, default_value_t)]
    http1_engine: api::listener::Http1Engine,
}

impl LimitArgs {
    fn apply(&self, config: &mut Config) {
        config.limits = limits::LimitsConfig {
            max_events_per_ingest: self.max_events_per_ingest,
            max_event_bytes: self.max_event_bytes,
            max_sse_per_user: self.max_sse_per_user,
            max_sse_total: self.max_sse_total,
            requests_per_sec: self.requests_per_sec,
            request_burst: self.request_burst,
            max_runs_per_user: self.max_runs_per_user,
        };
        config.shutdown_grace = Duration::from_secs(self.shutdown_grace_secs);
        config.head_timeout = Duration::from_secs(self.head_timeout_secs);
        config.idle_timeout = Duration::from_secs(self.idle_timeout_secs);
        config.max_connections = self.max_connections;
        config.http1_engine = self.http1_engine;
    }
}

/// Attachments and their signed URLs.
#[derive(clap::Args)]
struct AttachmentArgs {
    /// Largest attachment in bytes (413 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_ATTACHMENT_BYTES",
        default_value_t = api::DEFAULT_MAX_ATTACHMENT_BYTES
    )]
    max_attachment_bytes: usize,
    /// HMAC key of signed attachment URLs. Set the same key on every instance of a deployment;
    /// unset, each process signs with a random key of its own.
    #[arg(long, env = "THREADSTREAM_ATTACHMENT_KEY", hide_env_values = true)]
    attachment_key: Option<String>,
    /// Bucket name that attachment URLs carry.
    #[arg(
        long,
        env = "THREADSTREAM_ATTACHMENT_BUCKET",
        default_value = api::DEFAULT_ATTACHMENT_BUCKET
    )]
    attachment_bucket: String,
    /// Seconds a signed attachment URL stays valid.
    #[arg(
        long,
        env = "THREADSTREAM_SIGNED_URL_TTL_SECS",
        default_value_t = api::DEFAULT_SIGNED_URL_TTL.as_secs()
    )]
    signed_url_ttl_secs: u64,
}

impl AttachmentArgs {
    fn apply(self, config: &mut Config) {
        config.max_attachment_bytes = self.max_attachment_bytes;
        config.attachment_signing_key = self.attachment_key.map(Into::into);
        config.attachment_bucket = self.attachment_bucket;
        config.signed_url_ttl = Duration::from_secs(self.signed_url_ttl_secs);
    }
}

/// The model providers and the agent runtime.
#[derive(clap::Args)]
struct AgentArgs {
    /// Base URL of the OpenAI-compatible API, before `/chat/completions` (Ollama:
    /// `http://localhost:11434/v1`, vLLM: `http://localhost:8000/v1`).
    #[arg(
        long,
        env = "THREADSTREAM_OPENAI_BASE_URL",
        default_value = agent::llm::openai::DEFAULT_BASE_URL
    )]
    openai_base_url: String,
    /// API key for `openai/…` models (optional for a local server).
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    openai_api_key: Option<String>,
    /// Base URL of the Anthropic API, before `/v1/messages`.
    #[arg(
        long,
        env = "THREADSTREAM_ANTHROPIC_BASE_URL",
        default_value = agent::llm::anthropic::DEFAULT_BASE_URL
    )]
    anthropic_base_url: String,
    /// API key for `anthropic/…` models.
    #[arg(long, env = "ANTHROPIC_API_KEY", hide_env_values = true)]
    anthropic_api_key: Option<String>,
    /// `max_tokens` of each Anthropic call.
    #[arg(
        long,
        env = "THREADSTREAM_MAX_TOKENS",
        default_value_t = agent::DEFAULT_MAX_TOKENS,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    max_tokens: u32,
    /// Anthropic extended thinking budget in tokens (0: off; else 1024 to below --max-tokens).
    #[arg(
        long,
        env = "THREADSTREAM_ANTHROPIC_THINKING_BUDGET",
        default_value_t = agent::DEFAULT_ANTHROPIC_THINKING_BUDGET
    )]
    anthropic_thinking_budget: u32,
    /// Retries of a model call answered 429 or 5xx, or that could not connect.
    #[arg(
        long,
        env = "THREADSTREAM_LLM_MAX_RETRIES",
        default_value_t = agent::llm::http::DEFAULT_MAX_RETRIES
    )]
    llm_max_retries: u32,
    /// Seconds to wait for a connection to the model provider.
    #[arg(
        long,
        env = "THREADSTREAM_LLM_CONNECT_TIMEOUT_SECS",
        default_value_t = agent::llm::http::DEFAULT_CONNECT_TIMEOUT.as_secs(),
        value_parser = positive_u64()
    )]
    llm_connect_timeout_secs: u64,
    /// Seconds to wait for response headers, then between two reads of a streamed answer.
    #[arg(
        long,
        env = "THREADSTREAM_LLM_IDLE_TIMEOUT_SECS",
        default_value_t = agent::llm::http::DEFAULT_IDLE_TIMEOUT.as_secs(),
        value_parser = positive_u64()
    )]
    llm_idle_timeout_secs: u64,
    /// Seconds a confirmation waits for its answer before the run is cancelled (`timeout`).
    #[arg(
        long,
        env = "THREADSTREAM_CONFIRMATION_TIMEOUT_SECS",
        default_value_t = agent::DEFAULT_CONFIRMATION_TIMEOUT.as_secs(),
        value_parser = positive_u64()
    )]
    confirmation_timeout_secs: u64,
    /// Estimated tokens of a thread's earlier turns above which an LLM-written summary
    /// replaces them (0: never summarize).
    #[arg(
        long,
        env = "THREADSTREAM_SUMMARY_TOKEN_BUDGET",
        default_value_t = agent::DEFAULT_SUMMARY_TOKEN_BUDGET
    )]
    summary_token_budget: usize,
    /// Create two sample workflows on first use (default: only with the `demo` model).
    #[arg(long, env = "THREADSTREAM_SAMPLE_WORKFLOWS")]
    sample_workflows: Option<bool>,
    /// Offer the agent the `fetch-url` tool (public http/https URLs only; see docs/security.md).
    #[arg(long, env = "THREADSTREAM_TOOL_FETCH_URL")]
    tool_fetch_url: bool,
    /// JSON file of MCP servers whose tools the agent is offered (`{"mcpServers": {…}}`, stdio
    /// and Streamable HTTP; see docs/operations.md).
    #[arg(long, env = "THREADSTREAM_MCP_CONFIG")]
    mcp_config: Option<PathBuf>,
    /// Seconds an MCP tool call may take; then it is cancelled and fails.
    #[arg(
        long,
        env = "THREADSTREAM_MCP_CALL_TIMEOUT_SECS",
        default_value_t = agent::mcp::DEFAULT_MCP_CALL_TIMEOUT.as_secs(),
        value_parser = positive_u64()
    )]
    mcp_call_timeout_secs: u64,
}

impl AgentArgs {
    fn apply(self, config: &mut Config) {
        let llm = &mut config.llm;
        llm.openai_base_url = self.openai_base_url;
        llm.openai_api_key = self
            .openai_api_key
            .filter(|k| !k.is_empty())
            .map(Into::into);
        llm.anthropic_base_url = self.anthropic_base_url;
        llm.anthropic_api_key = self
            .anthropic_api_key
            .filter(|k| !k.is_empty())
            .map(Into::into);
        llm.max_tokens = self.max_tokens;
        llm.anthropic_thinking_budget = self.anthropic_thinking_budget;
        llm.http.max_retries = self.llm_max_retries;
        llm.http.connect_timeout = Duration::from_secs(self.llm_connect_timeout_secs);
        llm.http.idle_timeout = Duration::from_secs(self.llm_idle_timeout_secs);
        config.confirmation_timeout = Duration::from_secs(self.confirmation_timeout_secs);
        config.summary_token_budget = self.summary_token_budget;
        config.sample_workflows = self.sample_workflows;
        config.tool_fetch_url = self.tool_fetch_url;
        config.mcp_config = self.mcp_config;
        config.mcp.call_timeout = Duration::from_secs(self.mcp_call_timeout_secs);
    }
}

/// Who may call the API (docs/security.md). Without a tokens file or JWT key every request is
/// the one local user and only a loopback `--addr` is accepted.
#[derive(clap::Args)]
struct AuthArgs {
    /// JSON file of bearer tokens (sha256 → user, role); re-read when it changes.
    #[arg(long, env = "THREADSTREAM_TOKENS_FILE")]
    tokens_file: Option<PathBuf>,
    /// Shared secret of HS256 JWTs from the identity provider (at least 32 bytes).
    #[arg(long, env = "THREADSTREAM_JWT_HS256_SECRET", hide_env_values = true)]
    jwt_hs256_secret: Option<String>,
    /// PEM file of the RSA public key that verifies RS256 JWTs.
    #[arg(long, env = "THREADSTREAM_JWT_RS256_PUBLIC_KEY")]
    jwt_rs256_public_key: Option<PathBuf>,
    /// Required `iss` of JWTs.
    #[arg(long, env = "THREADSTREAM_JWT_ISSUER")]
    jwt_issuer: Option<String>,
    /// Required `aud` of JWTs.
    #[arg(long, env = "THREADSTREAM_JWT_AUDIENCE")]
    jwt_audience: Option<String>,
    /// JWT claim holding the user id.
    #[arg(
        long,
        env = "THREADSTREAM_JWT_USER_CLAIM",
        default_value = api::auth::DEFAULT_JWT_USER_CLAIM
    )]
    jwt_user_claim: String,
    /// JWT claim holding the role (`admin`/`user`, or a list containing one).
    #[arg(long, env = "THREADSTREAM_JWT_ROLE_CLAIM")]
    jwt_role_claim: Option<String>,
    /// Key signing session cookies and stream tickets (default: random per process, so they
    /// only work on the instance that issued them).
    #[arg(long, env = "THREADSTREAM_SESSION_SECRET", hide_env_values = true)]
    session_secret: Option<String>,
    /// Lifetime of a session cookie in seconds.
    #[arg(
        long,
        env = "THREADSTREAM_SESSION_TTL_SECS",
        default_value_t = api::auth::DEFAULT_SESSION_TTL.as_secs(),
        value_parser = positive_u64()
    )]
    session_ttl_secs: u64,
    /// Seconds within which a stream ticket must be used.
    #[arg(
        long,
        env = "THREADSTREAM_STREAM_TICKET_TTL_SECS",
        default_value_t = api::auth::TICKET_TTL.as_secs(),
        value_parser = positive_u64()
    )]
    stream_ticket_ttl_secs: u64,
    /// Mark the session cookie `Secure` (serve behind TLS).
    #[arg(long, env = "THREADSTREAM_COOKIE_SECURE")]
    cookie_secure: bool,
}

impl AuthArgs {
    fn apply(self, config: &mut Config) -> anyhow::Result<()> {
        use api::auth::{JwtConfig, JwtKey};
        let auth = &mut config.auth;
        auth.tokens_file = self.tokens_file;
        let key = match (self.jwt_hs256_secret, self.jwt_rs256_public_key) {
            (Some(_), Some(_)) => {
                anyhow::bail!("set one of --jwt-hs256-secret and --jwt-rs256-public-key, not both")
            }
            (Some(s), None) => Some(JwtKey::Hs256(s.into())),
            (None, Some(p)) => Some(JwtKey::Rs256PublicKeyPem(p)),
            (None, None) => None,
        };
        if let Some(key) = key {
            let (Some(issuer), Some(audience)) = (self.jwt_issuer, self.jwt_audience) else {
                anyhow::bail!("a JWT key needs --jwt-issuer and --jwt-audience");
            };
            auth.jwt = Some(JwtConfig {
                key,
                issuer,
                audience,
                user_claim: self.jwt_user_claim,
                role_claim: self.jwt_role_claim,
            });
        }
        auth.session_secret = self.session_secret.map(Into::into);
        auth.session_ttl = Duration::from_secs(self.session_ttl_secs);
        auth.ticket_ttl = Duration::from_secs(self.stream_ticket_ttl_secs);
        auth.cookie_secure = self.cookie_secure;
        Ok(())
    }
}

/// Where the log lives.
#[derive(clap::Args)]
struct StoreArgs {
    /// Keep the log in this Postgres database (`postgres://user@host/db`) instead of SQLite in
    /// the data directory; several instances can share it.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// How instances on one Postgres wake each other: `postgres` (LISTEN/NOTIFY) or a
    /// `redis://host:port` URL (Redis Pub/Sub).
    #[arg(long, env = "THREADSTREAM_NOTIFY", default_value_t = api::DEFAULT_NOTIFY)]
    notify: NotifyMode,
    /// On Postgres: seconds within which another instance recovers the runs of an instance
    /// that stopped (its run leases expired).
    #[arg(
        long,
        env = "THREADSTREAM_RUN_ORPHAN_SECS",
        default_value_t = api::DEFAULT_ORPHAN_AFTER.as_secs(),
        value_parser = positive_u64()
    )]
    run_orphan_secs: u64,
    /// Seconds an `Idempotency-Key` is remembered: within them a retry gets the first answer
    /// and stores nothing; after them the key is forgotten.
    #[arg(
        long,
        env = "THREADSTREAM_IDEMPOTENCY_WINDOW_SECS",
        default_value_t = api::DEFAULT_IDEMPOTENCY_WINDOW.as_secs(),
        value_parser = positive_u64()
    )]
    idempotency_window_secs: u64,
}

impl StoreArgs {
    fn apply(self, config: &mut Config) {
        config.database_url = self.database_url;
        config.orphan_after = Duration::from_secs(self.run_orphan_secs);
        config.idempotency_window = Duration::from_secs(self.idempotency_window_secs);
        config.notify = self.notify;
    }
}

#[derive(Subcommand)]
enum ProjectionsCommand {
    /// Drop every read model and rebuild it from the log (stop the server first); with
    /// `--name`, rebuild that one beside the live one and switch atomically (the server may run).
    Rebuild {
        #[command(flatten)]
        log: LogArgs,
        /// The read model to rebuild.
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(api::background::projector::MODELS))]
        name: Option<String>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx=warn".into()),
        )
        // Logs never mix with what a tool writes to stdout (NDJSON, reports).
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Serve(a) => api::serve(a.config()?, shutdown_signal()).await,
        Command::Projections {
            command: ProjectionsCommand::Rebuild { log, name: None },
        } => {
            let n = api::rebuild_projections(&log.config()?).await?;
            println!("rebuilt read models from {n} events");
            Ok(())
        }
        Command::Projections {
            command:
                ProjectionsCommand::Rebuild {
                    log,
                    name: Some(name),
                },
        } => {
            let mut bar: Option<Progress> = None;
            let mut progress = |at: i64, head: i64| {
                bar.get_or_insert_with(|| Progress::new(format!("rebuild {name}"), head as u64))
                    .update(at as u64)
            };
            let n = api::rebuild_projection(&log.config()?, &name, &mut progress).await?;
            println!("rebuilt read model {name} from {n} events and switched to it");
            Ok(())
        }
        Command::Export(a) => export(a).await,
        Command::Import(a) => import(a).await,
        Command::Replay(a) => replay(a).await,
        Command::Verify { log } => {
            let log = log.open().await?;
            let report = audit::verify::verify(&log).await;
            log.shutdown().await;
            let report = report?;
            println!("{report}");
            if !report.is_clean() {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Analytics(a) => analytics(a).await,
        Command::Openapi => {
            print!("{}", api::openapi::document_json());
            Ok(())
        }
        Command::Token {
            command: TokenCommand::Hash,
        } => {
            // From stdin, not an argument: a token on the command line would land in the
            // shell history and the process list.
            let mut token = String::new();
            std::io::stdin().read_line(&mut token)?;
            println!(
                "{}",
                api::auth::hash_token(token.trim_end_matches(['\r', '\n']))
            );
            Ok(())
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM. The handlers are installed here, before the server starts
/// listening: installed on the future's first poll (as `tokio::signal::ctrl_c()` does), a
/// SIGTERM that came right after the "listening" line killed the process instead of stopping it.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let int = signal(SignalKind::interrupt());
        let term = signal(SignalKind::terminate());
        async move {
            match (int, term) {
                (Ok(mut int), Ok(mut term)) => {
                    tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Parses a command line as if no `THREADSTREAM_*` (or other) variable the CLI reads were
    /// set, so a CI machine's `DATABASE_URL` cannot change what the defaults look like.
    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        static CLEARED: std::sync::Once = std::sync::Once::new();
        CLEARED.call_once(|| {
            fn clear(cmd: &clap::Command) {
                for arg in cmd.get_arguments() {
                    if let Some(var) = arg.get_env() {
                        std::env::remove_var(var);
                    }
                }
                cmd.get_subcommands().for_each(clear);
            }
            clear(&Cli::command());
        });
        Cli::try_parse_from(std::iter::once("threadstream").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// Every flag's default is the one the config structs have, so the two cannot drift.
    #[test]
    fn serve_without_flags_is_the_default_config() {
        let Command::Serve(args) = parse(&["serve"]).unwrap().command else {
            panic!("not serve");
        };
        let from_flags = args.config().unwrap();
        let defaults = Config::new(api::DEFAULT_ADDR, api::DEFAULT_DATA_DIR.into());
        // `Config` holds keys and has no `PartialEq`; its `Debug` shows every field (keys as
        // set/unset), which is what is compared here.
        assert_eq!(format!("{from_flags:?}"), format!("{defaults:?}"));
    }

    #[test]
    fn a_zero_duration_is_refused_with_the_flag_named() {
        for flag in [
            "--sse-ping-secs",
            "--stream-long-poll-secs",
            "--shutdown-grace-secs",
            "--head-timeout-secs",
            "--run-orphan-secs",
            "--idempotency-window-secs",
            "--llm-idle-timeout-secs",
            "--session-ttl-secs",
            "--max-tokens",
        ] {
            let err = parse(&["serve", flag, "0"]).err().expect(flag);
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{flag}"
            );
            let text = err.to_string();
            assert!(
                text.contains(flag) && text.contains("0 is not in 1.."),
                "{flag}: {text}"
            );
        }
        assert!(parse(&["serve", "--sse-ping-secs", "1"]).is_ok());
    }

    #[test]
    fn enumerated_flags_take_only_their_values() {
        let err = parse(&["serve", "--notify", "http://cache:6379"])
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .contains("must be `postgres` or a redis:// URL"),
            "{err}"
        );
        let Command::Serve(args) = parse(&["serve", "--notify", "redis://127.0.0.1:6379"])
            .unwrap()
            .command
        else {
            panic!("not serve");
        };
        assert_eq!(
            args.config().unwrap().notify,
            NotifyMode::Redis("redis://127.0.0.1:6379".into())
        );
        assert!(parse(&["analytics", "--format", "xml"]).is_err());
        assert!(parse(&["analytics", "--format", "csv"]).is_ok());
        assert!(parse(&["projections", "rebuild", "--name", "nope"]).is_err());
        assert!(parse(&["projections", "rebuild", "--name", "thread_list"]).is_ok());
        assert!(parse(&["replay", "--thread", "t", "--speed", "0"]).is_err());
    }
}

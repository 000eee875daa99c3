//! The flags of `threadstream serve` and the [`Config`] they build: listening, limits,
//! attachments, the agent and its model, authentication, the store, retention and traces. Each
//! flag's default is the config's own (`src/main.rs`'s tests check that they agree).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use threadstream_agent as agent;
use threadstream_api as api;
use threadstream_api::{limits, Config};
use threadstream_store::NotifyMode;

/// A whole number of seconds or milliseconds that must be at least 1 (0 would make a timer
/// fire at once or a limit refuse everything).
pub(crate) fn positive_u64() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(1..)
}

impl ServeArgs {
    pub(crate) fn config(self) -> anyhow::Result<Config> {
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
        self.retention.apply(&mut config);
        self.compaction.apply(&mut config);
        self.change_feed.apply(&mut config);
        Ok(config)
    }
}

#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the log line says which).
    #[arg(long, env = "THREADSTREAM_ADDR", default_value_t = api::DEFAULT_ADDR)]
    pub(crate) addr: SocketAddr,
    /// Folder of the embedded SQLite log (`threadstream.db`).
    #[arg(long, env = "THREADSTREAM_DATA_DIR", default_value = api::DEFAULT_DATA_DIR)]
    pub(crate) data_dir: PathBuf,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// The async runtime's worker threads (default: the machine's cores less one, at least
    /// one; see docs/configuration.md).
    #[arg(long, env = "THREADSTREAM_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) worker_threads: Option<u16>,
    /// Model that runs the agent: `demo` (built-in, scripted, no network),
    /// `openai/<model>` (any OpenAI-compatible server) or `anthropic/<model>`.
    #[arg(long, env = "THREADSTREAM_MODEL", default_value = agent::DEFAULT_MODEL)]
    pub(crate) model: String,
    #[command(flatten)]
    pub(crate) agent: Box<AgentArgs>,
    #[command(flatten)]
    pub(crate) attachments: AttachmentArgs,
    #[command(flatten)]
    pub(crate) auth: Box<AuthArgs>,
    /// Largest request body in bytes (413 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_BODY_BYTES",
        default_value_t = api::DEFAULT_MAX_BODY_BYTES
    )]
    pub(crate) max_body_bytes: usize,
    /// Largest chat message in bytes (413 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_MESSAGE_BYTES",
        default_value_t = api::DEFAULT_MAX_MESSAGE_BYTES
    )]
    pub(crate) max_message_bytes: usize,
    /// Seconds between `: ping` comments on idle SSE streams.
    #[arg(
        long,
        env = "THREADSTREAM_SSE_PING_SECS",
        default_value_t = api::DEFAULT_SSE_PING.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) sse_ping_secs: u64,
    /// Seconds a Durable Streams long-poll (`/v1/stream/*?live=long-poll`) waits for new data
    /// before answering 204.
    #[arg(
        long,
        env = "THREADSTREAM_STREAM_LONG_POLL_SECS",
        default_value_t = api::DEFAULT_STREAM_LONG_POLL.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) stream_long_poll_secs: u64,
    /// Milliseconds between the demo model's streamed deltas.
    #[arg(
        long,
        env = "THREADSTREAM_DEMO_DELAY_MS",
        default_value_t = api::DEFAULT_DEMO_DELAY.as_millis() as u64
    )]
    pub(crate) demo_delay_ms: u64,
    /// Also serve `GET /metrics` (Prometheus text format) on this address, without credentials:
    /// for a scraper on a private network (on `--addr`, `/metrics` is an admin's only).
    #[arg(long, env = "THREADSTREAM_METRICS_ADDR")]
    pub(crate) metrics_addr: Option<SocketAddr>,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
    #[command(flatten)]
    pub(crate) retention: Box<RetentionArgs>,
    #[command(flatten)]
    pub(crate) compaction: CompactionArgs,
    #[command(flatten)]
    pub(crate) change_feed: ChangeFeedArgs,
    #[command(flatten)]
    pub(crate) otel: OtelArgs,
}

/// The change feed: every committed event published to a NATS JetStream stream, exactly once
/// (docs/integrations.md, "Change feed").
#[derive(clap::Args)]
pub(crate) struct ChangeFeedArgs {
    /// Publish every committed event, in id order, to JetStream on this NATS server
    /// (`nats://HOST:PORT`; several comma-separated for a cluster). One instance of a fleet
    /// publishes at a time.
    #[arg(long, env = "THREADSTREAM_CHANGE_FEED")]
    pub(crate) change_feed: Option<String>,
    /// The JetStream stream the feed publishes to (created, capturing `threadstream.events.>`,
    /// when missing).
    #[arg(
        long,
        env = "THREADSTREAM_CHANGE_FEED_STREAM",
        default_value = threadstream_change_feed::DEFAULT_STREAM,
        requires = "change_feed",
        value_parser = stream_name
    )]
    pub(crate) change_feed_stream: String,
}

/// A JetStream stream name: not empty, and no space, tab, `.`, `*`, `>`, `/` or `\\`.
pub(crate) fn stream_name(s: &str) -> Result<String, String> {
    if s.is_empty() || s.chars().any(|c| c.is_whitespace() || ".*>/\\".contains(c)) {
        Err(format!(
            "{s:?} is not a JetStream stream name (no spaces, '.', '*', '>', '/' or '\\')"
        ))
    } else {
        Ok(s.to_string())
    }
}

impl ChangeFeedArgs {
    pub(crate) fn apply(self, config: &mut Config) {
        config.change_feed =
            self.change_feed
                .map(|url| threadstream_change_feed::ChangeFeedConfig {
                    url,
                    stream: self.change_feed_stream,
                });
    }
}

/// Retention: erase threads idle for longer than a period (docs/operations.md, "Erasure and
/// retention").
#[derive(clap::Args)]
pub(crate) struct RetentionArgs {
    /// Erase threads (with their forks) whose last activity is older than this many days
    /// (fractions allowed); off when unset. Never a thread with a live run, a pending
    /// confirmation or running background tasks.
    #[arg(long, env = "THREADSTREAM_RETENTION_DAYS", value_parser = positive_days)]
    pub(crate) retention_days: Option<f64>,
    /// Before erasing, write each expired thread as NDJSON (`threadstream export`'s format) to
    /// this folder.
    #[arg(long, env = "THREADSTREAM_ARCHIVE_DIR", requires = "retention_days")]
    pub(crate) archive_dir: Option<PathBuf>,
    /// Threads one retention sweep erases at most.
    #[arg(
        long,
        env = "THREADSTREAM_RETENTION_BATCH",
        default_value_t = api::DEFAULT_RETENTION_BATCH,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    pub(crate) retention_batch: usize,
    /// Seconds between retention sweeps.
    #[arg(
        long,
        env = "THREADSTREAM_RETENTION_SWEEP_SECS",
        default_value_t = api::background::retention::SWEEP_EVERY.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) retention_sweep_secs: u64,
}

/// Compaction of finished runs (docs/architecture.md, "Compaction").
#[derive(clap::Args)]
pub(crate) struct CompactionArgs {
    /// Compact a run's text and reasoning deltas this many seconds after it finished (0: at the
    /// next sweep). Readers see the same text; the log stores one event per range.
    #[arg(
        long,
        env = "THREADSTREAM_COMPACT_AFTER_SECS",
        default_value_t = api::background::compactor::COMPACT_AFTER.as_secs()
    )]
    pub(crate) compact_after_secs: u64,
    /// Seconds between the compactor's sweeps.
    #[arg(
        long,
        env = "THREADSTREAM_COMPACT_EVERY_SECS",
        default_value_t = api::background::compactor::COMPACT_EVERY.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) compact_every_secs: u64,
    /// Never compact: every delta stays a stored event of its own.
    #[arg(long, env = "THREADSTREAM_NO_COMPACTION")]
    pub(crate) no_compaction: bool,
}

impl CompactionArgs {
    pub(crate) fn apply(self, config: &mut Config) {
        config.compaction =
            (!self.no_compaction).then(|| api::background::compactor::CompactionConfig {
                after: Duration::from_secs(self.compact_after_secs),
                every: Duration::from_secs(self.compact_every_secs),
            });
    }
}

/// A positive, finite number of days.
pub(crate) fn positive_days(s: &str) -> Result<f64, String> {
    let d: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of days"))?;
    if d.is_finite() && d > 0.0 && d < 1e6 {
        Ok(d)
    } else {
        Err(format!("{s} is not a positive number of days"))
    }
}

impl RetentionArgs {
    pub(crate) fn apply(self, config: &mut Config) {
        config.retention =
            self.retention_days
                .map(|days| api::background::retention::RetentionConfig {
                    keep_for: Duration::from_secs_f64(days * 86_400.0),
                    archive_dir: self.archive_dir,
                    batch: self.retention_batch,
                    every: Duration::from_secs(self.retention_sweep_secs),
                });
    }
}

/// Exporting the agent's traces (GenAI spans) over OTLP; off unless an endpoint is set
/// (docs/operations.md, "Traces").
#[derive(clap::Args)]
pub(crate) struct OtelArgs {
    /// Base URL of the OTLP collector (OTLP/HTTP posts to `<url>/v1/traces`).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub(crate) otlp_endpoint: Option<String>,
    /// The OTLP transport.
    #[arg(
        long,
        env = "OTEL_EXPORTER_OTLP_PROTOCOL",
        value_enum,
        default_value = "http/protobuf"
    )]
    pub(crate) otlp_protocol: api::telemetry::OtlpProtocol,
    /// The `service.name` of the exported spans.
    #[arg(long, env = "OTEL_SERVICE_NAME", default_value = api::telemetry::DEFAULT_SERVICE_NAME)]
    pub(crate) otel_service_name: String,
    /// Put message and tool content on the spans (it may be personal data).
    #[arg(long, env = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")]
    pub(crate) otel_capture_content: bool,
}

impl OtelArgs {
    pub(crate) fn settings(&self) -> Option<api::telemetry::OtlpSettings> {
        Some(api::telemetry::OtlpSettings {
            endpoint: self.otlp_endpoint.clone().filter(|e| !e.is_empty())?,
            protocol: self.otlp_protocol,
            service_name: self.otel_service_name.clone(),
            capture_content: self.otel_capture_content,
        })
    }
}

/// Limits and shutdown (defaults in `docs/operations.md`; a count limit of 0 means unlimited).
#[derive(clap::Args)]
pub(crate) struct LimitArgs {
    /// Events in one ingest request (413 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_EVENTS_PER_INGEST",
        default_value_t = limits::DEFAULT_MAX_EVENTS_PER_INGEST
    )]
    pub(crate) max_events_per_ingest: usize,
    /// Bytes of one ingested event's JSON (413 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_EVENT_BYTES",
        default_value_t = limits::DEFAULT_MAX_EVENT_BYTES
    )]
    pub(crate) max_event_bytes: usize,
    /// SSE streams one user may have open at once (429 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_SSE_PER_USER",
        default_value_t = limits::DEFAULT_MAX_SSE_PER_USER
    )]
    pub(crate) max_sse_per_user: usize,
    /// SSE streams open at once in this process (429 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_SSE_TOTAL",
        default_value_t = limits::DEFAULT_MAX_SSE_TOTAL
    )]
    pub(crate) max_sse_total: usize,
    /// Sustained requests per second per user (token bucket refill; 0: no rate limit).
    #[arg(
        long,
        env = "THREADSTREAM_REQUESTS_PER_SEC",
        default_value_t = limits::DEFAULT_REQUESTS_PER_SEC
    )]
    pub(crate) requests_per_sec: u32,
    /// Requests a user may send at once after being idle (token bucket size).
    #[arg(
        long,
        env = "THREADSTREAM_REQUEST_BURST",
        default_value_t = limits::DEFAULT_REQUEST_BURST
    )]
    pub(crate) request_burst: u32,
    /// Runs one user may have executing at once in this process (429 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_RUNS_PER_USER",
        default_value_t = limits::DEFAULT_MAX_RUNS_PER_USER
    )]
    pub(crate) max_runs_per_user: usize,
    /// Seconds within which the process exits after SIGTERM / Ctrl-C.
    #[arg(
        long,
        env = "THREADSTREAM_SHUTDOWN_GRACE_SECS",
        default_value_t = api::DEFAULT_SHUTDOWN_GRACE.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) shutdown_grace_secs: u64,
    /// Milliseconds the process goes on serving after SIGTERM / Ctrl-C with `GET /readyz` 503,
    /// before it begins to stop (behind a load balancer: longer than its health check takes to
    /// mark the instance down). The grace period counts from their end.
    #[arg(long, env = "THREADSTREAM_SHUTDOWN_UNREADY_MS", default_value_t = 0)]
    pub(crate) shutdown_unready_ms: u64,
    /// Seconds a request head may take to arrive once its first byte has (408 after them).
    #[arg(
        long,
        env = "THREADSTREAM_HEAD_TIMEOUT_SECS",
        default_value_t = threadstream_http1::HEAD_TIMEOUT.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) head_timeout_secs: u64,
    /// Seconds a connection may stay silent — before its first request, or between requests —
    /// before it is closed; also the longest pause within a request body (400 after it).
    #[arg(
        long,
        env = "THREADSTREAM_IDLE_TIMEOUT_SECS",
        default_value_t = threadstream_http1::IDLE_TIMEOUT.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) idle_timeout_secs: u64,
    /// Connections open at once; never more than the open-files limit allows (see
    /// docs/operations.md). At the cap idle connections are closed to make room; with none
    /// idle, a new connection gets 503.
    #[arg(
        long,
        env = "THREADSTREAM_MAX_CONNECTIONS",
        default_value_t = threadstream_http1::MAX_CONNECTIONS,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    pub(crate) max_connections: usize,
    /// The HTTP/1.1 implementation: `threadstream` (ours for body-less requests, hyper for the
    /// rest) or `hyper` alone, a fallback.
    #[arg(long, env = "THREADSTREAM_HTTP1_ENGINE", value_enum, default_value_t)]
    pub(crate) http1_engine: threadstream_http1::Http1Engine,
    /// Where Durable Streams subscriptions may send webhooks: `public` (https to public hosts,
    /// http to localhost/127.x) or `loopback` (this machine only).
    #[arg(
        long,
        env = "THREADSTREAM_WEBHOOK_TARGETS",
        value_enum,
        default_value_t
    )]
    pub(crate) webhook_targets: api::durable::WebhookTargets,
}

impl LimitArgs {
    pub(crate) fn apply(&self, config: &mut Config) {
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
        config.shutdown_unready = Duration::from_millis(self.shutdown_unready_ms);
        config.head_timeout = Duration::from_secs(self.head_timeout_secs);
        config.idle_timeout = Duration::from_secs(self.idle_timeout_secs);
        config.max_connections = self.max_connections;
        config.http1_engine = self.http1_engine;
        config.webhook_targets = self.webhook_targets;
    }
}

/// Attachments and their signed URLs.
#[derive(clap::Args)]
pub(crate) struct AttachmentArgs {
    /// Largest attachment in bytes (413 above it).
    #[arg(
        long,
        env = "THREADSTREAM_MAX_ATTACHMENT_BYTES",
        default_value_t = api::DEFAULT_MAX_ATTACHMENT_BYTES
    )]
    pub(crate) max_attachment_bytes: usize,
    /// HMAC key of signed attachment URLs. Set the same key on every instance of a deployment;
    /// unset, each process signs with a random key of its own.
    #[arg(long, env = "THREADSTREAM_ATTACHMENT_KEY", hide_env_values = true)]
    pub(crate) attachment_key: Option<String>,
    /// Bucket name that attachment URLs carry.
    #[arg(
        long,
        env = "THREADSTREAM_ATTACHMENT_BUCKET",
        default_value = api::DEFAULT_ATTACHMENT_BUCKET
    )]
    pub(crate) attachment_bucket: String,
    /// Seconds a signed attachment URL stays valid.
    #[arg(
        long,
        env = "THREADSTREAM_SIGNED_URL_TTL_SECS",
        default_value_t = api::DEFAULT_SIGNED_URL_TTL.as_secs()
    )]
    pub(crate) signed_url_ttl_secs: u64,
}

impl AttachmentArgs {
    pub(crate) fn apply(self, config: &mut Config) {
        config.max_attachment_bytes = self.max_attachment_bytes;
        config.attachment_signing_key = self.attachment_key.map(Into::into);
        config.attachment_bucket = self.attachment_bucket;
        config.signed_url_ttl = Duration::from_secs(self.signed_url_ttl_secs);
    }
}

/// The model providers and the agent runtime.
#[derive(clap::Args)]
pub(crate) struct AgentArgs {
    /// Base URL of the OpenAI-compatible API, before `/chat/completions` (Ollama:
    /// `http://localhost:11434/v1`, vLLM: `http://localhost:8000/v1`).
    #[arg(
        long,
        env = "THREADSTREAM_OPENAI_BASE_URL",
        default_value = agent::llm::openai::DEFAULT_BASE_URL
    )]
    pub(crate) openai_base_url: String,
    /// API key for `openai/…` models (optional for a local server).
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub(crate) openai_api_key: Option<String>,
    /// Base URL of the Anthropic API, before `/v1/messages`.
    #[arg(
        long,
        env = "THREADSTREAM_ANTHROPIC_BASE_URL",
        default_value = agent::llm::anthropic::DEFAULT_BASE_URL
    )]
    pub(crate) anthropic_base_url: String,
    /// API key for `anthropic/…` models.
    #[arg(long, env = "ANTHROPIC_API_KEY", hide_env_values = true)]
    pub(crate) anthropic_api_key: Option<String>,
    /// `max_tokens` of each Anthropic call.
    #[arg(
        long,
        env = "THREADSTREAM_MAX_TOKENS",
        default_value_t = agent::DEFAULT_MAX_TOKENS,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub(crate) max_tokens: u32,
    /// Anthropic extended thinking budget in tokens (0: off; else 1024 to below --max-tokens).
    #[arg(
        long,
        env = "THREADSTREAM_ANTHROPIC_THINKING_BUDGET",
        default_value_t = agent::DEFAULT_ANTHROPIC_THINKING_BUDGET
    )]
    pub(crate) anthropic_thinking_budget: u32,
    /// Retries of a model call answered 429 or 5xx, or that could not connect.
    #[arg(
        long,
        env = "THREADSTREAM_LLM_MAX_RETRIES",
        default_value_t = agent::llm::http::DEFAULT_MAX_RETRIES
    )]
    pub(crate) llm_max_retries: u32,
    /// Seconds to wait for a connection to the model provider.
    #[arg(
        long,
        env = "THREADSTREAM_LLM_CONNECT_TIMEOUT_SECS",
        default_value_t = agent::llm::http::DEFAULT_CONNECT_TIMEOUT.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) llm_connect_timeout_secs: u64,
    /// Seconds to wait for response headers, then between two reads of a streamed answer.
    #[arg(
        long,
        env = "THREADSTREAM_LLM_IDLE_TIMEOUT_SECS",
        default_value_t = agent::llm::http::DEFAULT_IDLE_TIMEOUT.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) llm_idle_timeout_secs: u64,
    /// Seconds a confirmation waits for its answer before the run is cancelled (`timeout`).
    #[arg(
        long,
        env = "THREADSTREAM_CONFIRMATION_TIMEOUT_SECS",
        default_value_t = agent::DEFAULT_CONFIRMATION_TIMEOUT.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) confirmation_timeout_secs: u64,
    /// Estimated tokens of a thread's earlier turns above which an LLM-written summary
    /// replaces them (0: never summarize).
    #[arg(
        long,
        env = "THREADSTREAM_SUMMARY_TOKEN_BUDGET",
        default_value_t = agent::DEFAULT_SUMMARY_TOKEN_BUDGET
    )]
    pub(crate) summary_token_budget: usize,
    /// Create two sample workflows on first use (default: only with the `demo` model).
    #[arg(long, env = "THREADSTREAM_SAMPLE_WORKFLOWS")]
    pub(crate) sample_workflows: Option<bool>,
    /// Offer the agent the `fetch-url` tool (public http/https URLs only; see docs/security.md).
    #[arg(long, env = "THREADSTREAM_TOOL_FETCH_URL")]
    pub(crate) tool_fetch_url: bool,
    /// JSON file of MCP servers whose tools the agent is offered (`{"mcpServers": {…}}`, stdio
    /// and Streamable HTTP; see docs/operations.md).
    #[arg(long, env = "THREADSTREAM_MCP_CONFIG")]
    pub(crate) mcp_config: Option<PathBuf>,
    /// Seconds an MCP tool call may take; then it is cancelled and fails.
    #[arg(
        long,
        env = "THREADSTREAM_MCP_CALL_TIMEOUT_SECS",
        default_value_t = agent::mcp::DEFAULT_MCP_CALL_TIMEOUT.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) mcp_call_timeout_secs: u64,
    /// An upstream AG-UI agent, `NAME=URL` (repeatable; the variable takes a comma-separated
    /// list): `POST /agui/agents/NAME/run` runs it through the log (docs/integrations.md).
    #[arg(
        long = "agui-agent",
        env = "THREADSTREAM_AGUI_AGENTS",
        value_delimiter = ',',
        value_parser = agent::agui::parse_agent
    )]
    pub(crate) agui_agents: Vec<agent::agui::AguiAgent>,
    /// Which URLs `--agui-agent` may name: `public` addresses only, `loopback` (localhost and
    /// 127.x only) or `any` (the operator's private network too).
    #[arg(
        long,
        env = "THREADSTREAM_AGUI_AGENT_TARGETS",
        default_value = "public"
    )]
    pub(crate) agui_agent_targets: agent::agui::AguiTargets,
    /// Seconds an upstream AG-UI agent may stay silent (before its answer, or between two
    /// reads of its stream) before its run ends with an error.
    #[arg(
        long,
        env = "THREADSTREAM_AGUI_AGENT_TIMEOUT_SECS",
        default_value_t = agent::agui::DEFAULT_STALL_TIMEOUT.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) agui_agent_timeout_secs: u64,
}

impl AgentArgs {
    pub(crate) fn apply(self, config: &mut Config) {
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
        config.agui = agent::agui::AguiSettings {
            agents: self.agui_agents,
            targets: self.agui_agent_targets,
            stall_timeout: Duration::from_secs(self.agui_agent_timeout_secs),
        };
    }
}

/// Who may call the API (docs/security.md). Without a tokens file or JWT key every request is
/// the one local user and only a loopback `--addr` is accepted.
#[derive(clap::Args)]
pub(crate) struct AuthArgs {
    /// JSON file of bearer tokens (sha256 → user, role); re-read when it changes.
    #[arg(long, env = "THREADSTREAM_TOKENS_FILE")]
    pub(crate) tokens_file: Option<PathBuf>,
    /// Shared secret of HS256 JWTs from the identity provider (at least 32 bytes).
    #[arg(long, env = "THREADSTREAM_JWT_HS256_SECRET", hide_env_values = true)]
    pub(crate) jwt_hs256_secret: Option<String>,
    /// PEM file of the RSA public key that verifies RS256 JWTs.
    #[arg(long, env = "THREADSTREAM_JWT_RS256_PUBLIC_KEY")]
    pub(crate) jwt_rs256_public_key: Option<PathBuf>,
    /// Required `iss` of JWTs.
    #[arg(long, env = "THREADSTREAM_JWT_ISSUER")]
    pub(crate) jwt_issuer: Option<String>,
    /// Required `aud` of JWTs.
    #[arg(long, env = "THREADSTREAM_JWT_AUDIENCE")]
    pub(crate) jwt_audience: Option<String>,
    /// JWT claim holding the user id.
    #[arg(
        long,
        env = "THREADSTREAM_JWT_USER_CLAIM",
        default_value = api::auth::DEFAULT_JWT_USER_CLAIM
    )]
    pub(crate) jwt_user_claim: String,
    /// JWT claim holding the role (`admin`/`user`, or a list containing one).
    #[arg(long, env = "THREADSTREAM_JWT_ROLE_CLAIM")]
    pub(crate) jwt_role_claim: Option<String>,
    /// Key signing session cookies and stream tickets (default: random per process, so they
    /// only work on the instance that issued them).
    #[arg(long, env = "THREADSTREAM_SESSION_SECRET", hide_env_values = true)]
    pub(crate) session_secret: Option<String>,
    /// Lifetime of a session cookie in seconds.
    #[arg(
        long,
        env = "THREADSTREAM_SESSION_TTL_SECS",
        default_value_t = api::auth::DEFAULT_SESSION_TTL.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) session_ttl_secs: u64,
    /// Seconds within which a stream ticket must be used.
    #[arg(
        long,
        env = "THREADSTREAM_STREAM_TICKET_TTL_SECS",
        default_value_t = api::auth::TICKET_TTL.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) stream_ticket_ttl_secs: u64,
    /// Mark the session cookie `Secure` (serve behind TLS).
    #[arg(long, env = "THREADSTREAM_COOKIE_SECURE")]
    pub(crate) cookie_secure: bool,
}

impl AuthArgs {
    pub(crate) fn apply(self, config: &mut Config) -> anyhow::Result<()> {
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
pub(crate) struct StoreArgs {
    /// Keep the log in this Postgres database (`postgres://user@host/db`) instead of SQLite in
    /// the data directory; several instances can share it.
    #[arg(long, env = "DATABASE_URL")]
    pub(crate) database_url: Option<String>,
    /// On Postgres: standbys to read stream readers' thread pages from (a load balancer's read
    /// port, `postgres://user@host:port/db`); a page waits up to 500 ms for a standby to replay
    /// what the reader must see, then is read on the primary (docs/ha.md).
    #[arg(
        long,
        env = "THREADSTREAM_READ_DATABASE_URL",
        requires = "database_url"
    )]
    pub(crate) read_database_url: Option<String>,
    /// How instances on one Postgres wake each other: `postgres` (LISTEN/NOTIFY) or a
    /// `redis://host:port` URL (Redis Pub/Sub).
    #[arg(long, env = "THREADSTREAM_NOTIFY", default_value_t = api::DEFAULT_NOTIFY)]
    pub(crate) notify: NotifyMode,
    /// On Postgres: seconds within which another instance recovers the runs of an instance
    /// that stopped (its run leases expired).
    #[arg(
        long,
        env = "THREADSTREAM_RUN_ORPHAN_SECS",
        default_value_t = api::DEFAULT_ORPHAN_AFTER.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) run_orphan_secs: u64,
    /// Seconds an `Idempotency-Key` is remembered: within them a retry gets the first answer
    /// and stores nothing; after them the key is forgotten.
    #[arg(
        long,
        env = "THREADSTREAM_IDEMPOTENCY_WINDOW_SECS",
        default_value_t = api::DEFAULT_IDEMPOTENCY_WINDOW.as_secs(),
        value_parser = positive_u64()
    )]
    pub(crate) idempotency_window_secs: u64,
    /// Milliseconds a small batch of appends waits for more before it is committed, counted
    /// from its first append (0: commit at once). Fewer, larger transactions when appends come
    /// one at a time (tokens at model speed); each append is answered up to this much later,
    /// and only once committed, as always. Only tokens (and Durable Streams values) that follow
    /// another of their stream wait: a run's start and first token never do.
    #[arg(
        long,
        env = "THREADSTREAM_COMMIT_LINGER_MS",
        default_value_t = api::DEFAULT_COMMIT_LINGER.as_millis() as u64,
        value_parser = clap::value_parser!(u64).range(0..=api::MAX_COMMIT_LINGER.as_millis() as u64)
    )]
    pub(crate) commit_linger_ms: u64,
    /// On Postgres: seconds an append waits in the writer for a reachable primary (during a
    /// failover or a restart) before it is refused with 503. The batch in flight when the
    /// connection dropped is looked up on the new primary and answered by what it holds
    /// (docs/ha.md). 0: refused at once, the batch in flight too.
    #[arg(
        long,
        env = "THREADSTREAM_STORE_WAIT_SECS",
        default_value_t = api::DEFAULT_STORE_WAIT.as_secs()
    )]
    pub(crate) store_wait_secs: u64,
}

impl StoreArgs {
    pub(crate) fn apply(self, config: &mut Config) {
        config.database_url = self.database_url;
        config.read_database_url = self.read_database_url;
        config.orphan_after = Duration::from_secs(self.run_orphan_secs);
        config.idempotency_window = Duration::from_secs(self.idempotency_window_secs);
        config.notify = self.notify;
        config.commit_linger = Duration::from_millis(self.commit_linger_ms);
        config.store_wait = Duration::from_secs(self.store_wait_secs);
    }
}

//! The `threadstream` command line: a thin layer over the `threadstream-api` crate.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use threadstream_api::Config;
use threadstream_store::NotifyMode;

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
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the log line says which).
    #[arg(long, env = "THREADSTREAM_ADDR", default_value = "127.0.0.1:7700")]
    addr: SocketAddr,
    /// Folder of the embedded SQLite log (`threadstream.db`).
    #[arg(long, env = "THREADSTREAM_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
    #[command(flatten)]
    store: StoreArgs,
    /// Model that runs the agent: `demo` (built-in, scripted, no network),
    /// `openai/<model>` (any OpenAI-compatible server) or `anthropic/<model>`.
    #[arg(long, env = "THREADSTREAM_MODEL", default_value = "demo")]
    model: String,
    #[command(flatten)]
    agent: Box<AgentArgs>,
    /// Largest request body in bytes (413 above it).
    #[arg(long, env = "THREADSTREAM_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    max_body_bytes: usize,
    /// Largest chat message in bytes (413 above it).
    #[arg(long, env = "THREADSTREAM_MAX_MESSAGE_BYTES", default_value_t = 64 * 1024)]
    max_message_bytes: usize,
    /// Seconds between `: ping` comments on idle SSE streams.
    #[arg(long, env = "THREADSTREAM_SSE_PING_SECS", default_value_t = 15)]
    sse_ping_secs: u64,
    /// Milliseconds between the demo model's streamed deltas.
    #[arg(long, env = "THREADSTREAM_DEMO_DELAY_MS", default_value_t = 15)]
    demo_delay_ms: u64,
}

/// The model providers and the agent runtime.
#[derive(clap::Args)]
struct AgentArgs {
    /// Base URL of the OpenAI-compatible API, before `/chat/completions` (Ollama:
    /// `http://localhost:11434/v1`, vLLM: `http://localhost:8000/v1`).
    #[arg(
        long,
        env = "THREADSTREAM_OPENAI_BASE_URL",
        default_value = "https://api.openai.com/v1"
    )]
    openai_base_url: String,
    /// API key for `openai/…` models (optional for a local server).
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    openai_api_key: Option<String>,
    /// Base URL of the Anthropic API, before `/v1/messages`.
    #[arg(
        long,
        env = "THREADSTREAM_ANTHROPIC_BASE_URL",
        default_value = "https://api.anthropic.com"
    )]
    anthropic_base_url: String,
    /// API key for `anthropic/…` models.
    #[arg(long, env = "ANTHROPIC_API_KEY", hide_env_values = true)]
    anthropic_api_key: Option<String>,
    /// `max_tokens` of each Anthropic call.
    #[arg(long, env = "THREADSTREAM_MAX_TOKENS", default_value_t = 8192)]
    max_tokens: u32,
    /// Anthropic extended thinking budget in tokens (0: off; else 1024 to below --max-tokens).
    #[arg(
        long,
        env = "THREADSTREAM_ANTHROPIC_THINKING_BUDGET",
        default_value_t = 0
    )]
    anthropic_thinking_budget: u32,
    /// Retries of a model call answered 429 or 5xx, or that could not connect.
    #[arg(long, env = "THREADSTREAM_LLM_MAX_RETRIES", default_value_t = 4)]
    llm_max_retries: u32,
    /// Seconds to wait for a connection to the model provider.
    #[arg(
        long,
        env = "THREADSTREAM_LLM_CONNECT_TIMEOUT_SECS",
        default_value_t = 10
    )]
    llm_connect_timeout_secs: u64,
    /// Seconds to wait for response headers, then between two reads of a streamed answer.
    #[arg(
        long,
        env = "THREADSTREAM_LLM_IDLE_TIMEOUT_SECS",
        default_value_t = 120
    )]
    llm_idle_timeout_secs: u64,
    /// Seconds a confirmation waits for its answer before the run is cancelled (`timeout`).
    #[arg(
        long,
        env = "THREADSTREAM_CONFIRMATION_TIMEOUT_SECS",
        default_value_t = 600
    )]
    confirmation_timeout_secs: u64,
    /// Estimated tokens of a thread's earlier turns above which an LLM-written summary
    /// replaces them (0: never summarize).
    #[arg(
        long,
        env = "THREADSTREAM_SUMMARY_TOKEN_BUDGET",
        default_value_t = 24_000
    )]
    summary_token_budget: usize,
    /// Create two sample workflows on first use (default: only with the `demo` model).
    #[arg(long, env = "THREADSTREAM_SAMPLE_WORKFLOWS")]
    sample_workflows: Option<bool>,
}

impl AgentArgs {
    fn apply(self, config: &mut Config) {
        let llm = &mut config.llm;
        llm.openai_base_url = self.openai_base_url;
        llm.openai_api_key = self.openai_api_key.filter(|k| !k.is_empty());
        llm.anthropic_base_url = self.anthropic_base_url;
        llm.anthropic_api_key = self.anthropic_api_key.filter(|k| !k.is_empty());
        llm.max_tokens = self.max_tokens.max(1);
        llm.anthropic_thinking_budget = self.anthropic_thinking_budget;
        llm.http.max_retries = self.llm_max_retries;
        llm.http.connect_timeout = Duration::from_secs(self.llm_connect_timeout_secs.max(1));
        llm.http.idle_timeout = Duration::from_secs(self.llm_idle_timeout_secs.max(1));
        config.confirmation_timeout = Duration::from_secs(self.confirmation_timeout_secs.max(1));
        config.summary_token_budget = self.summary_token_budget;
        config.sample_workflows = self.sample_workflows;
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
    #[arg(long, env = "THREADSTREAM_NOTIFY", default_value = "postgres")]
    notify: String,
    /// On Postgres: seconds within which another instance recovers the runs of an instance
    /// that stopped (its run leases expired).
    #[arg(long, env = "THREADSTREAM_RUN_ORPHAN_SECS", default_value_t = 30)]
    run_orphan_secs: u64,
}

impl StoreArgs {
    fn apply(self, config: &mut Config) -> anyhow::Result<()> {
        config.database_url = self.database_url;
        config.orphan_after = Duration::from_secs(self.run_orphan_secs.max(1));
        config.notify = match self.notify.as_str() {
            "postgres" => NotifyMode::Postgres,
            url if url.starts_with("redis://") || url.starts_with("rediss://") => {
                NotifyMode::Redis(url.to_string())
            }
            other => anyhow::bail!("--notify must be `postgres` or a redis:// URL, not {other:?}"),
        };
        Ok(())
    }
}

#[derive(Subcommand)]
enum ProjectionsCommand {
    /// Drop every read model and rebuild it from the log.
    Rebuild {
        #[arg(long, env = "THREADSTREAM_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx=warn".into()),
        )
        .init();
    match Cli::parse().command {
        Command::Serve(a) => {
            let mut config = Config::new(a.addr, a.data_dir);
            a.store.apply(&mut config)?;
            config.model = a.model;
            a.agent.apply(&mut config);
            config.max_body_bytes = a.max_body_bytes;
            config.max_message_bytes = a.max_message_bytes;
            config.sse_ping = Duration::from_secs(a.sse_ping_secs.max(1));
            config.demo_delay = Duration::from_millis(a.demo_delay_ms);
            threadstream_api::serve(config, shutdown_signal()).await
        }
        Command::Projections {
            command: ProjectionsCommand::Rebuild { data_dir, store },
        } => {
            let mut config = Config::new(([127, 0, 0, 1], 0).into(), data_dir);
            store.apply(&mut config)?;
            let n = threadstream_api::rebuild_projections(&config).await?;
            println!("rebuilt read models from {n} events");
            Ok(())
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

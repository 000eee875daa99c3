//! The `threadstream` command line: a thin layer over the `threadstream-api` crate.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use threadstream_api::Config;

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
    /// Model that runs the agent: `demo` (built-in, scripted, no network).
    #[arg(long, env = "THREADSTREAM_MODEL", default_value = "demo")]
    model: String,
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

#[derive(Subcommand)]
enum ProjectionsCommand {
    /// Drop every read model and rebuild it from the log.
    Rebuild {
        #[arg(long, env = "THREADSTREAM_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
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
            config.model = a.model;
            config.max_body_bytes = a.max_body_bytes;
            config.max_message_bytes = a.max_message_bytes;
            config.sse_ping = Duration::from_secs(a.sse_ping_secs.max(1));
            config.demo_delay = Duration::from_millis(a.demo_delay_ms);
            threadstream_api::serve(config, shutdown_signal()).await
        }
        Command::Projections {
            command: ProjectionsCommand::Rebuild { data_dir },
        } => {
            let n = threadstream_api::rebuild_projections(data_dir).await?;
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

//! threadstream's service: axum routes and SSE over the log, the projector, and the agent
//! runtime, wired together. The binary (`src/main.rs`) is a thin CLI over [`serve`] and
//! [`rebuild_projections`].

pub mod error;
pub mod extract;
pub mod http;
pub mod projector;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use threadstream_agent::{AgentRuntime, RuntimeConfig};
use threadstream_domain::event::{RunFinish, RunStatus, ToolError};
use threadstream_domain::{AgentEvent, EventBody, ThreadCommand};
use threadstream_projections::Status;
use threadstream_store::{Durability, EventLog};
use tokio::sync::watch;

pub use error::ApiError;

/// Everything `serve` needs; the CLI fills it from flags and `THREADSTREAM_*` variables.
#[derive(Debug, Clone)]
pub struct Config {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    pub model: String,
    pub durability: Durability,
    /// Largest request body accepted (413 above it).
    pub max_body_bytes: usize,
    /// Largest chat message accepted (413 above it).
    pub max_message_bytes: usize,
    /// Interval of `: ping` comments on idle SSE streams.
    pub sse_ping: Duration,
    /// Pause between the demo model's streamed deltas.
    pub demo_delay: Duration,
}

impl Config {
    pub fn new(addr: SocketAddr, data_dir: PathBuf) -> Self {
        Config {
            addr,
            data_dir,
            model: "demo".into(),
            durability: Durability::Full,
            max_body_bytes: 1 << 20,
            max_message_bytes: 64 * 1024,
            sse_ping: Duration::from_secs(15),
            demo_delay: Duration::from_millis(15),
        }
    }
}

/// Shared state of every request: cheap to clone (each field is a handle).
#[derive(Clone)]
pub struct ApiContext {
    pub config: std::sync::Arc<Config>,
    pub log: EventLog,
    pub runtime: AgentRuntime,
    /// Flips to `true` when the server starts shutting down; SSE streams end on it.
    pub shutdown: watch::Receiver<bool>,
}

/// Runs the service until `stop` resolves (the CLI passes Ctrl-C / SIGTERM).
pub async fn serve(
    config: Config,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let log = EventLog::open_sqlite(&config.data_dir, config.durability).await?;
    projector::catch_up(&log).await?;
    finish_interrupted_runs(&log).await?;
    let runtime = AgentRuntime::new(
        log.clone(),
        RuntimeConfig {
            model: config.model.clone(),
            demo_delay: config.demo_delay,
        },
    )?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let projector_task = tokio::spawn(projector::run(log.clone(), shutdown_rx.clone()));
    let ctx = ApiContext {
        config: std::sync::Arc::new(config.clone()),
        log: log.clone(),
        runtime,
        shutdown: shutdown_rx,
    };
    let app = http::router(ctx);
    let listener = tokio::net::TcpListener::bind(config.addr).await?;
    let addr = listener.local_addr()?;
    tracing::info!(
        data_dir = %config.data_dir.display(),
        model = %config.model,
        "threadstream listening on http://{addr}"
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            stop.await;
            tracing::info!("shutting down");
            let _ = shutdown_tx.send(true);
        })
        .await?;
    let _ = projector_task.await;
    log.shutdown().await;
    Ok(())
}

/// Runs left live by a process that died can never finish by themselves: end each with a
/// `tool-error` for every open tool call and `run-finish {status: "error", reason: "interrupted"}`,
/// so no thread stays stuck with a live run.
async fn finish_interrupted_runs(log: &EventLog) -> anyhow::Result<()> {
    let statuses = projector::view_all::<Status>(log).await?;
    for (thread_id, doc) in statuses {
        if Status::render(&doc)["hasActiveRun"] != true {
            continue;
        }
        let state = log.thread_state(&thread_id).await?;
        let Some(run) = state.live_run() else {
            continue;
        };
        let mut commands = Vec::new();
        for (tool_call_id, agent_id) in &run.open_tool_calls {
            commands.push(ThreadCommand::Record(AgentEvent::new(
                run.run_id.clone(),
                agent_id.clone(),
                EventBody::ToolError(ToolError {
                    tool_call_id: tool_call_id.clone(),
                    error: "interrupted: the server stopped while this tool was running".into(),
                }),
            )));
        }
        commands.push(ThreadCommand::Record(AgentEvent::new(
            run.run_id.clone(),
            run.orchestrator.clone(),
            EventBody::RunFinish(RunFinish {
                status: RunStatus::Error,
                reason: Some("interrupted".into()),
                archived_workflow_ids: None,
            }),
        )));
        tracing::warn!(thread = %thread_id, run = %run.run_id, "finishing run interrupted by a restart");
        log.append(&thread_id, commands).await?;
    }
    Ok(())
}

/// `threadstream projections rebuild`: drops every read model and folds it again from the log.
pub async fn rebuild_projections(data_dir: PathBuf) -> anyhow::Result<u64> {
    let log = EventLog::open_sqlite(&data_dir, Durability::Full).await?;
    let n = projector::rebuild(&log).await?;
    log.shutdown().await;
    Ok(n)
}

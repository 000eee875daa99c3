//! The agent runtime: turns a user message into events on the log.
//!
//! The HTTP layer appends `[Create, StartRun{..}]` (so `run-start` is stored) and then calls
//! [`AgentRuntime::spawn_run`]; the run task streams the model's answer, runs tools, delegates
//! to sub-agents, asks for confirmations and finishes with `run-finish`, every event through
//! [`EventLog::append`] as [`ThreadCommand::Record`](threadstream_domain::ThreadCommand). It reads
//! its control inputs (cancel, confirmation answers) back from the same log ([`control`]), so
//! the process that took a `cancel` or `confirm` request need not be the one running the agent.
//!
//! - [`provider`]: the [`LlmProvider`] trait; [`demo`]: the scripted `demo` model.
//! - [`orchestrator`]: the loop, sub-agents, settling on cancel and error.
//! - [`tools`]: the registry and built-in tools; [`workflows`]: workflows folded from the log.

pub mod control;
pub mod demo;
pub mod error;
pub mod orchestrator;
pub mod provider;
pub mod title;
pub mod tools;
pub mod workflows;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use threadstream_store::EventLog;
use tracing::Instrument;

pub use error::{AgentError, RunError, ToolFailure};
pub use provider::{LlmProvider, AVAILABLE_MODELS};
pub use tools::ToolRegistry;

/// How the runtime is configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// The model: `demo` (the only one so far).
    pub model: String,
    /// The `demo` model's pause before each streamed delta.
    pub demo_delay: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            model: "demo".into(),
            demo_delay: Duration::from_millis(20),
        }
    }
}

/// Runs agents. Cheap to clone; every clone shares the same provider, tools and run count.
#[derive(Clone)]
pub struct AgentRuntime {
    inner: Arc<Inner>,
}

struct Inner {
    log: EventLog,
    provider: Arc<dyn LlmProvider>,
    tools: Arc<ToolRegistry>,
    /// Runs executing in this process, by `thread_id/run_id` (bookkeeping of the tasks, not
    /// of the runs: what a run did is only in the log).
    running: Mutex<HashSet<String>>,
}

/// Removes a run from the running set when its task ends, however it ends.
struct RunningGuard {
    inner: Arc<Inner>,
    key: String,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.inner
            .running
            .lock()
            .expect("running")
            .remove(&self.key);
    }
}

impl AgentRuntime {
    /// A runtime over `log` with the configured model; an unknown model is an error naming the
    /// available ones.
    pub fn new(log: EventLog, config: RuntimeConfig) -> Result<Self, AgentError> {
        let provider = provider::provider_for(&config.model, config.demo_delay)?;
        Ok(Self::with_provider(log, provider))
    }

    /// A runtime over `log` with an explicit provider and the built-in tools.
    pub fn with_provider(log: EventLog, provider: Arc<dyn LlmProvider>) -> Self {
        AgentRuntime {
            inner: Arc::new(Inner {
                log,
                provider,
                tools: Arc::new(ToolRegistry::builtin()),
                running: Mutex::new(HashSet::new()),
            }),
        }
    }

    /// The configured model's name.
    pub fn model(&self) -> &str {
        self.inner.provider.name()
    }

    /// Starts the orchestrator for a run whose `run-start` is already stored, and returns at
    /// once. Must be called within a Tokio runtime. A second call for a run that is already
    /// executing in this process is ignored.
    pub fn spawn_run(
        &self,
        thread_id: String,
        run_id: String,
        orchestrator_id: String,
        message: String,
        user: String,
    ) {
        let inner = self.inner.clone();
        let key = format!("{thread_id}/{run_id}");
        if !inner.running.lock().expect("running").insert(key.clone()) {
            tracing::warn!(%thread_id, %run_id, "run is already executing; not spawned twice");
            return;
        }
        let guard = RunningGuard {
            inner: inner.clone(),
            key,
        };
        let span = tracing::info_span!(
            "run",
            thread_id = %thread_id,
            run_id = %run_id,
            agent_id = %orchestrator_id,
            user = %user,
            model = %inner.provider.name(),
        );
        let ids = orchestrator::RunIds {
            thread_id,
            run_id,
            orchestrator_id,
            user,
        };
        tokio::spawn(
            async move {
                let _guard = guard;
                orchestrator::execute_run(
                    inner.log.clone(),
                    inner.provider.clone(),
                    inner.tools.clone(),
                    ids,
                    message,
                )
                .await;
            }
            .instrument(span),
        );
    }

    /// Runs executing in this process.
    pub fn running(&self) -> usize {
        self.inner.running.lock().expect("running").len()
    }
}

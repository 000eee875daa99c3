//! The agent runtime: turns a user message into events on the log.
//!
//! The HTTP layer appends `[Create, StartRun{..}]` (so `run-start` is stored) and then calls
//! [`AgentRuntime::spawn_run`]; the run task streams the model's answer, runs tools, delegates
//! to sub-agents, asks for confirmations and finishes with `run-finish`, every event through
//! [`EventLog::append`] as [`ThreadCommand::Record`](threadstream_domain::ThreadCommand). It reads
//! its control inputs (cancel, confirmation answers) back from the same log ([`control`]), so
//! the process that took a `cancel` or `confirm` request need not be the one running the agent.
//!
//! - [`provider`]: the [`LlmProvider`] trait; [`demo`]: the scripted `demo` model; [`llm`]:
//!   OpenAI-compatible and Anthropic providers over reqwest; [`models`]: the provider for a
//!   configured model name.
//! - [`orchestrator`]: the loop, sub-agents, confirmations and their timeout, summaries,
//!   settling on cancel and error, resuming after a restart; [`replay`]: conversations
//!   rebuilt from the log; [`recovery`]: what start-up does with the runs a stopped process
//!   left live; [`task_report`]: the message that tells the orchestrator how background tasks
//!   ended.
//! - [`tools`]: the registry and built-in tools; [`mcp`]: the tools of MCP servers; [`workflows`]: the event-sourced workflow
//!   store (one stream per workflow in the same log).

pub mod agui;
pub mod control;
pub mod demo;
pub mod error;
pub mod fetch;
pub mod llm;
pub mod mcp;
pub mod metrics;
pub mod models;
pub mod orchestrator;
pub mod provider;
pub mod recovery;
pub mod replay;
pub mod task_report;
pub mod telemetry;
pub mod title;
pub mod tools;
pub mod workflows;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use threadstream_domain::ThreadCommand;
use threadstream_store::{EventLog, StoreError};
use tokio::task::AbortHandle;
use tracing::Instrument;

pub use error::{AgentError, RunError, ToolFailure};
pub use llm::HttpSettings;
pub use models::{
    LlmSettings, AVAILABLE_MODELS, DEFAULT_ANTHROPIC_THINKING_BUDGET, DEFAULT_MAX_TOKENS,
};
pub use provider::LlmProvider;
pub use recovery::Recovery;
pub use tools::ToolRegistry;

/// The model used when none is configured: the built-in scripted one, no network.
pub const DEFAULT_MODEL: &str = "demo";
/// Default wait for a confirmation before the run is cancelled with reason `timeout`.
pub const DEFAULT_CONFIRMATION_TIMEOUT: Duration = Duration::from_secs(600);
/// Default estimated-token budget of earlier turns before they are summarized.
pub const DEFAULT_SUMMARY_TOKEN_BUDGET: usize = 24_000;

/// How the runtime is configured.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The model: `demo`, `openai/<model>` or `anthropic/<model>`.
    pub model: String,
    /// The `demo` model's pause before each streamed delta.
    pub demo_delay: Duration,
    /// Endpoints, keys, timeouts and retries of the HTTP providers.
    pub llm: LlmSettings,
    /// How long a confirmation may wait for its answer (then the run is cancelled, reason
    /// `timeout`).
    pub confirmation_timeout: Duration,
    /// Estimated tokens of a thread's earlier turns above which an LLM-written summary
    /// replaces them (0 turns summaries off).
    pub summary_token_budget: usize,
    /// Create the two sample workflows the first time the workflow store is used.
    pub sample_workflows: bool,
    /// Offer the `fetch-url` tool, under this policy (`None`: not offered, the default).
    pub fetch_url: Option<fetch::FetchPolicy>,
    /// MCP servers whose tools are offered (connected when the runtime is built).
    pub mcp_servers: Vec<mcp::ServerConfig>,
    /// How MCP calls are made.
    pub mcp: mcp::McpSettings,
    /// The upstream AG-UI agents (`--agui-agent`), checked against their URL policy.
    pub agui: agui::AguiAgents,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            model: DEFAULT_MODEL.into(),
            demo_delay: Duration::from_millis(20),
            llm: LlmSettings::default(),
            confirmation_timeout: DEFAULT_CONFIRMATION_TIMEOUT,
            summary_token_budget: DEFAULT_SUMMARY_TOKEN_BUDGET,
            sample_workflows: true,
            fetch_url: None,
            mcp_servers: Vec::new(),
            mcp: mcp::McpSettings::default(),
            agui: agui::AguiAgents::none(),
        }
    }
}

/// What makes a run's events: the configured model (the built-in agent), or an upstream AG-UI
/// agent (`--agui-agent`).
pub enum Runner {
    Builtin,
    Upstream(Box<agui::UpstreamRun>),
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
    workflows: Arc<workflows::WorkflowStore>,
    settings: orchestrator::RunSettings,
    /// Runs executing in this process, by `thread_id/run_id` (bookkeeping of the tasks, not
    /// of the runs: what a run did is only in the log).
    running: Mutex<HashMap<String, Option<AbortHandle>>>,
    /// See [`AgentRuntime::on_run_start`].
    run_starts: Mutex<Option<Arc<dyn RunStarts>>>,
    /// Set by [`AgentRuntime::drain`]: no new run is admitted or started by the runtime.
    stopping: AtomicBool,
    /// Held (shared) by every caller between [`AgentRuntime::admit`] and its run's spawn, and
    /// taken exclusively by [`AgentRuntime::drain`], so a run admitted before the drain is
    /// spawned (and then cancelled) before the drain looks at what is running.
    admission: tokio::sync::RwLock<()>,
    /// The upstream AG-UI agents (`--agui-agent`), for [`AgentRuntime::upstream_run`].
    agui: agui::AguiAgents,
}

/// Installs ring as the process's rustls crypto provider (once; later calls do nothing). The
/// reqwest 0.13 that rmcp and the OTLP exporter share has rustls without a provider of its own
/// (rmcp's `reqwest-tls-no-provider`), and panics building a client until one is installed.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Who a cancel of the service's own asks for (`cancel-requested` is stored with this user).
pub const SYSTEM_ACTOR: &str = "system";

/// Proof that a run may start: hold it until the run is spawned ([`AgentRuntime::admit`]).
pub struct Admission<'a> {
    _read: tokio::sync::RwLockReadGuard<'a, ()>,
}

/// What the API does around the start of a run the runtime starts by itself (a follow-up run):
/// takes the run's lease before its `run-start` is appended, as for chat runs (the API's run
/// leases implement it).
pub trait RunStarts: Send + Sync {
    /// Called before the run's start is appended.
    fn starting<'a>(
        &'a self,
        thread_id: &'a str,
        run_id: &'a str,
    ) -> futures::future::BoxFuture<'a, Box<dyn StartingRun>>;
}

/// A run start in progress ([`RunStarts::starting`]).
pub trait StartingRun: Send {
    /// The append is over: `stored` if the run's start was stored.
    fn settle(self: Box<Self>, stored: bool) -> futures::future::BoxFuture<'static, ()>;
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
        let provider = models::provider_for(&config.model, config.demo_delay, &config.llm)?;
        Ok(Self::with_provider_and_config(log, provider, &config))
    }

    /// A runtime over `log` with an explicit provider, the built-in tools and default settings.
    pub fn with_provider(log: EventLog, provider: Arc<dyn LlmProvider>) -> Self {
        Self::with_provider_and_config(log, provider, &RuntimeConfig::default())
    }

    /// A runtime over `log` with an explicit provider and `config`'s run settings (its model
    /// and provider settings are not used).
    pub fn with_provider_and_config(
        log: EventLog,
        provider: Arc<dyn LlmProvider>,
        config: &RuntimeConfig,
    ) -> Self {
        AgentRuntime {
            inner: Arc::new(Inner {
                workflows: Arc::new(workflows::WorkflowStore::new(
                    log.clone(),
                    config.sample_workflows,
                )),
                log,
                provider,
                tools: Arc::new(
                    ToolRegistry::builtin()
                        .with_fetch_url(config.fetch_url.clone())
                        .with_mcp(match config.mcp_servers.is_empty() {
                            true => mcp::McpServers::default(),
                            false => mcp::McpServers::start(
                                config.mcp_servers.clone(),
                                config.mcp.clone(),
                            ),
                        }),
                ),
                settings: orchestrator::RunSettings {
                    confirmation_timeout: config.confirmation_timeout,
                    summary_token_budget: config.summary_token_budget,
                },
                running: Mutex::new(HashMap::new()),
                run_starts: Mutex::new(None),
                stopping: AtomicBool::new(false),
                admission: tokio::sync::RwLock::new(()),
                agui: config.agui.clone(),
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
        self.spawn_run_holding(
            thread_id,
            run_id,
            orchestrator_id,
            message,
            user,
            None,
            Runner::Builtin,
            (),
        );
    }

    /// [`AgentRuntime::spawn_run`] by `runner`, its spans in the trace of `trace_parent` when
    /// there is one, keeping `hold` alive until the run's task ends (the API passes the user's
    /// run slot, so the slot is free again however the run ends). An upstream agent's run takes
    /// the user's message from the log, with the rest of the conversation.
    #[allow(clippy::too_many_arguments)]
    pub fn spawn_run_holding<H: Send + 'static>(
        &self,
        thread_id: String,
        run_id: String,
        orchestrator_id: String,
        message: String,
        user: String,
        trace_parent: Option<telemetry::TraceParent>,
        runner: Runner,
        hold: H,
    ) {
        let ids = orchestrator::RunIds {
            thread_id,
            run_id,
            orchestrator_id,
            user,
            trace_parent,
        };
        let entry = match runner {
            Runner::Builtin => orchestrator::Entry::Start { message },
            Runner::Upstream(run) => orchestrator::Entry::Upstream(run),
        };
        self.spawn(ids, entry, Box::new(hold));
    }

    /// A run of the upstream agent `name` with the client's `input`, for
    /// [`Runner::Upstream`]; `None` when no such agent is configured.
    pub fn upstream_run(&self, name: &str, input: agui::ClientInput) -> Option<agui::UpstreamRun> {
        let agents = &self.inner.agui;
        Some(agui::UpstreamRun {
            agent: agents.get(name)?.clone(),
            input,
            agents: agents.clone(),
        })
    }

    /// Admission of a new run: `None` once the runtime is draining (the service is shutting
    /// down). Hold the guard until the run is spawned.
    pub async fn admit(&self) -> Option<Admission<'_>> {
        let read = self.inner.admission.read().await;
        if self.is_stopping() {
            return None;
        }
        Some(Admission { _read: read })
    }

    /// Whether [`AgentRuntime::drain`] has begun.
    pub fn is_stopping(&self) -> bool {
        self.inner.stopping.load(Ordering::SeqCst)
    }

    /// Graceful stop of this process's runs, before the log closes: no new run is admitted (nor
    /// follow-up run started), then every thread with a run task here gets a cancel with
    /// `reason` through the log — the run settles as on a user's cancel and stores
    /// `run-finish {status: "cancelled", reason}`, its background tasks (and those of the
    /// thread's finished runs) stop — and this waits until no run task is left or `deadline`
    /// passes. Returns how many run tasks are still running (0 on a clean drain); the caller
    /// then [`AgentRuntime::shutdown`]s the rest.
    pub async fn drain(&self, reason: &str, deadline: tokio::time::Instant) -> usize {
        match tokio::time::timeout_at(deadline, self.inner.admission.write()).await {
            Ok(_exclusive) => self.inner.stopping.store(true, Ordering::SeqCst),
            Err(_) => {
                // A start is stuck (in the store): stop admitting anyway.
                self.inner.stopping.store(true, Ordering::SeqCst);
            }
        }
        let mut cancelled: std::collections::HashSet<String> = Default::default();
        loop {
            // By run (`thread/run`): a run started in a thread after its cancel (a follow-up
            // that was past its check) is cancelled in the next round.
            let runs: Vec<String> = {
                let running = self.inner.running.lock().expect("running");
                running
                    .keys()
                    .filter(|k| !cancelled.contains(*k))
                    .cloned()
                    .collect()
            };
            for key in runs {
                let Some((thread_id, _)) = key.split_once('/') else {
                    continue;
                };
                let cancel = ThreadCommand::Cancel {
                    by: SYSTEM_ACTOR.into(),
                    reason: reason.into(),
                };
                match self.inner.log.append(thread_id, vec![cancel]).await {
                    Ok(_) => {
                        tracing::info!(thread = %thread_id, reason, "cancelled the thread's run for shutdown");
                        cancelled.insert(key);
                    }
                    // Retried on the next round while the deadline allows.
                    Err(e) => {
                        tracing::warn!(error = &e as &dyn std::error::Error, thread = %thread_id, "cannot cancel the run for shutdown")
                    }
                }
            }
            let left = self.running();
            if left == 0 || tokio::time::Instant::now() >= deadline {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn spawn(
        &self,
        ids: orchestrator::RunIds,
        entry: orchestrator::Entry,
        hold: Box<dyn Send + 'static>,
    ) {
        let inner = self.inner.clone();
        let key = format!("{}/{}", ids.thread_id, ids.run_id);
        {
            let mut running = inner.running.lock().expect("running");
            if running.contains_key(&key) {
                tracing::warn!(thread_id = %ids.thread_id, run_id = %ids.run_id, "run is already executing; not spawned twice");
                return;
            }
            running.insert(key.clone(), None);
        }
        let guard = RunningGuard {
            inner: inner.clone(),
            key: key.clone(),
        };
        let span = tracing::info_span!(
            "run",
            thread_id = %ids.thread_id,
            run_id = %ids.run_id,
            agent_id = %ids.orchestrator_id,
            user = %ids.user,
            model = %inner.provider.name(),
        );
        let task = tokio::spawn(
            async move {
                let user = ids.user.clone();
                let thread_id = ids.thread_id.clone();
                let follow_up = orchestrator::execute_run(
                    inner.log.clone(),
                    inner.provider.clone(),
                    inner.tools.clone(),
                    inner.workflows.clone(),
                    inner.settings.clone(),
                    ids,
                    entry,
                )
                .await;
                drop(guard);
                drop(hold);
                if let Some(f) = follow_up {
                    AgentRuntime { inner }
                        .start_follow_up(thread_id, user, f)
                        .await;
                }
            }
            .instrument(span),
        );
        if let Some(slot) = self.inner.running.lock().expect("running").get_mut(&key) {
            *slot = Some(task.abort_handle());
        }
    }

    /// Opens a follow-up run in `f.message_group_id` once no run is live in the thread (a
    /// chat message may have started one meanwhile: the report waits for it to finish), and
    /// runs it.
    async fn start_follow_up(&self, thread_id: String, user: String, f: orchestrator::FollowUp) {
        if self.is_stopping() {
            tracing::warn!(thread = %thread_id, "shutting down: the background tasks' outcome is not reported by a follow-up run");
            return;
        }
        let log = &self.inner.log;
        let mut head = log.heads().thread(&thread_id);
        let run_id = format!("run_{}", uuid::Uuid::now_v7().simple());
        let orchestrator_id = format!("agent_{}", uuid::Uuid::now_v7().simple());
        let run_starts = self.inner.run_starts.lock().expect("run starts").clone();
        let starting = match &run_starts {
            Some(starts) => Some(starts.starting(&thread_id, &run_id).await),
            None => None,
        };
        let stored = loop {
            let command = ThreadCommand::StartFollowUp {
                run_id: run_id.clone(),
                agent_id: orchestrator_id.clone(),
                message_id: format!("msg_{}", uuid::Uuid::now_v7().simple()),
                message_group_id: f.message_group_id.clone(),
            };
            match log.append(&thread_id, vec![command]).await {
                Ok(_) => break true,
                Err(StoreError::Rule(threadstream_domain::ThreadError::RunAlreadyActive {
                    ..
                })) if !self.is_stopping() => {
                    // Wait for the live run to move on; re-check now and then regardless.
                    let _ = tokio::time::timeout(control::RECHECK, head.changed()).await;
                }
                Err(e) => {
                    tracing::error!(error = &e as &dyn std::error::Error, thread = %thread_id, "cannot start the follow-up run; the tasks' outcome stays unreported");
                    break false;
                }
            }
        };
        if let Some(starting) = starting {
            starting.settle(stored).await;
        }
        if !stored {
            return;
        }
        tracing::info!(thread = %thread_id, run = %run_id, group = %f.message_group_id, "follow-up run reports background tasks");
        self.spawn(
            orchestrator::RunIds {
                thread_id,
                run_id,
                orchestrator_id,
                user,
                trace_parent: None,
            },
            orchestrator::Entry::FollowUp { report: f.report },
            Box::new(()),
        );
    }

    /// Sets what is done around the start of a run this runtime starts by itself (a follow-up
    /// run): the API leases it there, as it does chat runs.
    pub fn on_run_start(&self, starts: Arc<dyn RunStarts>) {
        *self.inner.run_starts.lock().expect("run starts") = Some(starts);
    }

    /// The MCP servers whose tools the agent is offered.
    pub fn mcp(&self) -> &mcp::McpServers {
        self.inner.tools.mcp()
    }

    /// The workflow store the tools act on.
    pub fn workflows(&self) -> &workflows::WorkflowStore {
        &self.inner.workflows
    }

    /// Runs executing in this process.
    pub fn running(&self) -> usize {
        self.inner.running.lock().expect("running").len()
    }

    /// Whether this process is executing `run_id` of `thread_id`.
    pub fn is_running(&self, thread_id: &str, run_id: &str) -> bool {
        self.inner
            .running
            .lock()
            .expect("running")
            .contains_key(&format!("{thread_id}/{run_id}"))
    }

    /// Stops every run task of this process at once, writing nothing: a run waiting on a
    /// confirmation is resumed by the next process ([`AgentRuntime::recover`]), one that was
    /// executing is finished there as `interrupted`. Called on shutdown, before the log closes.
    pub fn shutdown(&self) {
        let handles: Vec<AbortHandle> = self
            .inner
            .running
            .lock()
            .expect("running")
            .values()
            .flatten()
            .cloned()
            .collect();
        for h in handles {
            h.abort();
        }
    }
}

//! One MCP server's connection and its supervision: connect (spawn the process or open the
//! Streamable HTTP session), list the tools, keep the list current on
//! `notifications/tools/list_changed`, and when the connection ends (the process died, the
//! session could not be recovered) drop the tools and connect again after a backoff.
//!
//! An expired HTTP session (404) is not handled here: rmcp's transport re-initialises it and
//! retries the request that hit the 404, once
//! (`StreamableHttpClientTransportConfig::reinit_on_expired_session`, on by default).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use backon::BackoffBuilder;
use futures::FutureExt;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
};
use rmcp::model::{JsonRpcMessage, ServerNotification};
use rmcp::service::{
    Peer, RoleClient, RunningService, RxJsonRpcMessage, ServiceError, TxJsonRpcMessage,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::Transport;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use secrecy::ExposeSecret;
use serde_json::Value;
use threadstream_domain::event::JsonObject;
use tokio::io::AsyncBufReadExt;
use tokio::sync::Notify;
use tracing::Instrument;

use super::config::{ServerConfig, TransportConfig};
use super::tools::{self, McpTool, ToolServer};
use super::McpSettings;
use crate::error::ToolFailure;

/// First wait before reconnecting a server whose connection ended; it doubles up to
/// [`MAX_RESTART_DELAY`], and starts over once a connection has lasted [`STABLE_AFTER`].
pub const FIRST_RESTART_DELAY: Duration = Duration::from_millis(200);
pub const MAX_RESTART_DELAY: Duration = Duration::from_secs(30);
pub const STABLE_AFTER: Duration = Duration::from_secs(10);
/// How long connecting and listing the tools may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The variables of the service's environment a stdio server gets (besides its configured
/// `env`): those the MCP SDKs' stdio transports pass by default.
pub const INHERITED_ENV: &[&str] = &[
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "TMPDIR",
];

/// Where a server's connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
    /// Connecting for the first time.
    Starting,
    /// Connected; its tools are offered.
    Ready,
    /// The connection failed or ended; connecting again after a backoff. Its tools are not
    /// offered meanwhile.
    Restarting,
}

impl ServerState {
    pub fn as_str(self) -> &'static str {
        match self {
            ServerState::Starting => "starting",
            ServerState::Ready => "ready",
            ServerState::Restarting => "restarting",
        }
    }
}

/// What the route shows of a server.
#[derive(Debug, Clone)]
pub struct ServerSnapshot {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// The command line or URL as written in the configuration.
    pub target: String,
    pub state: ServerState,
    /// Why the last connection failed or ended.
    pub last_error: Option<String>,
    /// Connections made after the first.
    pub restarts: u32,
    /// The server's tools, while it is ready.
    pub tools: Vec<Arc<McpTool>>,
}

struct Live {
    state: ServerState,
    /// The connection's peer, and its number (counted from 1 over the server's connections).
    peer: Option<(u64, Peer<RoleClient>)>,
    connections: u64,
    tools: Vec<Arc<McpTool>>,
    last_error: Option<String>,
    restarts: u32,
}

/// One configured server and its current connection.
pub struct Server {
    pub(super) config: ServerConfig,
    settings: McpSettings,
    live: Mutex<Live>,
    changes: Arc<ListChanges>,
}

/// The server's `notifications/tools/list_changed` and the refreshes that followed, so a model
/// call about to be made can wait for a list announced before it (a tool that changes the list
/// answers its call right after the notification; rmcp handles the notification on a task of
/// its own, and the refresh is a round trip).
#[derive(Default)]
struct ListChanges {
    /// Wakes the supervisor to list the tools again.
    changed: Notify,
    announced: AtomicU64,
    /// The `announced` count the current list reflects.
    applied: AtomicU64,
    /// Wakes those waiting for `applied` to catch up.
    settled: Notify,
    /// A call found the connection broken (an HTTP server that went away does not end the
    /// rmcp service by itself): the supervisor drops it and connects again.
    broken: Notify,
}

impl ListChanges {
    fn apply(&self, upto: u64) {
        self.applied.fetch_max(upto, Ordering::SeqCst);
        self.settled.notify_waiters();
    }
}

/// A transport whose incoming `notifications/tools/list_changed` are counted as they arrive:
/// rmcp hands notifications to the handler on a task of its own, so a call answered right after
/// one could otherwise be followed by a model call that has not heard of it.
struct Watched<T> {
    inner: T,
    changes: Arc<ListChanges>,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Watched<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(
        &mut self,
    ) -> impl std::future::Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        let changes = self.changes.clone();
        let received = self.inner.receive();
        async move {
            let message = received.await;
            if let Some(JsonRpcMessage::Notification(n)) = &message {
                if matches!(
                    n.notification,
                    ServerNotification::ToolListChangedNotification(_)
                ) {
                    changes.announced.fetch_add(1, Ordering::SeqCst);
                    changes.changed.notify_one();
                }
            }
            message
        }
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// The client's side of the handshake; notifications are watched on the transport
/// ([`Watched`]).
struct Handler;

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        // The `initialize` handshake, at the newest version that still has it: every server
        // speaks it, and it carries list-changed notifications on the session.
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("threadstream", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

impl Server {
    pub(super) fn new(config: ServerConfig, settings: McpSettings) -> Arc<Server> {
        Arc::new(Server {
            config,
            settings,
            live: Mutex::new(Live {
                state: ServerState::Starting,
                peer: None,
                connections: 0,
                tools: Vec::new(),
                last_error: None,
                restarts: 0,
            }),
            changes: Arc::default(),
        })
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub fn snapshot(&self) -> ServerSnapshot {
        let live = self.live.lock().expect("mcp server");
        ServerSnapshot {
            name: self.config.name.clone(),
            transport: self.config.transport.kind(),
            target: self.config.transport.shown().to_string(),
            state: live.state,
            last_error: live.last_error.clone(),
            restarts: live.restarts,
            tools: live.tools.clone(),
        }
    }

    /// Waits, up to `limit`, until the tool list reflects every change the server announced.
    pub(super) async fn settled(&self, limit: Duration) {
        let c = &self.changes;
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let woken = c.settled.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if c.applied.load(Ordering::SeqCst) >= c.announced.load(Ordering::SeqCst) {
                return;
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                tracing::warn!(server = %self.config.name, "the changed tool list is not refreshed yet");
                return;
            }
        }
    }

    pub fn state(&self) -> ServerState {
        self.live.lock().expect("mcp server").state
    }

    /// The server's tools while it is ready (none otherwise).
    pub fn tools(&self) -> Vec<Arc<McpTool>> {
        self.live.lock().expect("mcp server").tools.clone()
    }

    /// Why the server's tools are not offered now, when they are not.
    pub fn unavailable(&self) -> Option<String> {
        let live = self.live.lock().expect("mcp server");
        match live.state {
            ServerState::Ready => None,
            ServerState::Starting => Some(format!(
                "MCP server '{}' is still connecting",
                self.config.name
            )),
            ServerState::Restarting => Some(format!(
                "MCP server '{}' is unavailable ({}); it is being restarted",
                self.config.name,
                live.last_error.as_deref().unwrap_or("its connection ended")
            )),
        }
    }

    /// Keeps the server connected for as long as the returned task runs (the task holds only
    /// a weak reference: it ends when the server is dropped).
    pub(super) fn supervise(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move { supervise(weak).await })
    }

    fn set(&self, f: impl FnOnce(&mut Live)) {
        f(&mut self.live.lock().expect("mcp server"));
    }

    /// Calls `tool` with `args`: the one place every MCP call starts and ends. A call that
    /// times out is cancelled (`notifications/cancelled`); so is one whose future is dropped
    /// (the run was cancelled: rmcp sends the notification when its request is abandoned). A
    /// call whose connection closed is a failure and is never sent again: the server may have
    /// run it.
    pub(super) async fn call(
        &self,
        tool: &McpTool,
        args: JsonObject,
    ) -> Result<Value, ToolFailure> {
        let server = &self.config.name;
        let peer = self.live.lock().expect("mcp server").peer.clone();
        let Some((connection, peer)) = peer else {
            return Err(ToolFailure::failed(self.unavailable().unwrap_or_else(
                || format!("MCP server '{server}' is not connected"),
            )));
        };
        let started = Instant::now();
        let span = tracing::info_span!("mcp_call", server = %server, tool = %tool.mcp_name);
        let params = CallToolRequestParams::new(tool.mcp_name.clone()).with_arguments(args);
        let outcome = tokio::time::timeout(self.settings.call_timeout, peer.call_tool(params))
            .instrument(span.clone())
            .await;
        let result = match outcome {
            Err(_) => Err(ToolFailure::failed(format!(
                "the MCP tool '{}' of server '{server}' did not answer within {} s; the call was cancelled",
                tool.mcp_name,
                self.settings.call_timeout.as_secs_f64()
            ))),
            Ok(Err(e)) => {
                if matches!(
                    e,
                    ServiceError::TransportClosed | ServiceError::TransportSend(_)
                ) {
                    // Only if it is still the current connection.
                    let live = self.live.lock().expect("mcp server");
                    if live.peer.as_ref().is_some_and(|(n, _)| *n == connection) {
                        self.changes.broken.notify_one();
                    }
                }
                Err(ToolFailure::failed(call_error(server, &tool.mcp_name, &e)))
            }
            Ok(Ok(result)) => {
                tools::result_value(server, &tool.mcp_name, result, self.settings.result_limit)
            }
        };
        let ms = started.elapsed().as_millis() as u64;
        match &result {
            Ok(_) => tracing::info!(parent: &span, duration_ms = ms, "mcp call succeeded"),
            Err(ToolFailure::Failed(m)) => {
                tracing::warn!(parent: &span, duration_ms = ms, error = %m, "mcp call failed")
            }
            Err(ToolFailure::Fatal(_)) => {}
        }
        result
    }
}

impl ToolServer for Server {
    fn name(&self) -> &str {
        Server::name(self)
    }
    fn destructive_tools(&self) -> &[String] {
        &self.config.destructive_tools
    }
    fn call<'a>(
        &'a self,
        tool: &'a McpTool,
        args: JsonObject,
    ) -> futures::future::BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(Server::call(self, tool, args))
    }
}

/// What the model is told when a call got no result.
fn call_error(server: &str, tool: &str, e: &ServiceError) -> String {
    match e {
        ServiceError::McpError(e) => {
            format!(
                "MCP server '{server}' refused the call of '{tool}': {}",
                e.message
            )
        }
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => format!(
            "the connection to MCP server '{server}' closed during the call of '{tool}' ({e}); \
             it was not sent again, as the server may have run it"
        ),
        e => format!("the call of '{tool}' on MCP server '{server}' failed: {e}"),
    }
}

/// The supervision loop of one server.
async fn supervise(weak: Weak<Server>) {
    let mut delays = restart_delays();
    let mut first = true;
    loop {
        let Some(server) = weak.upgrade() else { return };
        if !first {
            server.set(|l| l.restarts += 1);
        }
        first = false;
        let changes = server.changes.clone();
        let connected = tokio::time::timeout(CONNECT_TIMEOUT, connect(&server, changes.clone()))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())));
        let ended = match connected {
            Err(e) => e,
            Ok(running) => {
                let up = Instant::now();
                let peer = running.peer().clone();
                server.set(|l| {
                    l.state = ServerState::Ready;
                    l.connections += 1;
                    l.peer = Some((l.connections, peer.clone()));
                });
                tracing::info!(server = %server.config.name, tools = server.tools().len(), "mcp server ready");
                drop(server);
                // A break reported for an earlier connection is no news about this one.
                let _ = changes.broken.notified().now_or_never();
                let reason = watch(&weak, running, &peer, &changes).await;
                if up.elapsed() >= STABLE_AFTER {
                    delays = restart_delays();
                }
                reason
            }
        };
        let Some(server) = weak.upgrade() else { return };
        let delay = delays.next().unwrap_or(MAX_RESTART_DELAY);
        tracing::warn!(
            server = %server.config.name,
            error = %ended,
            retry_in_ms = delay.as_millis() as u64,
            "mcp server unavailable; its tools are withdrawn until it is back"
        );
        // Nothing is pending on a server that is down: its tools are withdrawn.
        changes.apply(changes.announced.load(Ordering::SeqCst));
        server.set(|l| {
            l.state = ServerState::Restarting;
            l.peer = None;
            l.tools.clear();
            l.last_error = Some(ended);
        });
        drop(server);
        tokio::time::sleep(delay).await;
    }
}

fn restart_delays() -> impl Iterator<Item = Duration> {
    backon::ExponentialBuilder::default()
        .with_min_delay(FIRST_RESTART_DELAY)
        .with_max_delay(MAX_RESTART_DELAY)
        .with_factor(2.0)
        .without_max_times()
        .build()
}

/// Follows a live connection until it ends: refreshes the tools on each list change. Returns
/// why it ended.
async fn watch(
    weak: &Weak<Server>,
    running: RunningService<RoleClient, Handler>,
    peer: &Peer<RoleClient>,
    changes: &ListChanges,
) -> String {
    let closed = running.waiting();
    tokio::pin!(closed);
    loop {
        tokio::select! {
            r = &mut closed => {
                return match r {
                    Ok(reason) => format!("the connection ended ({reason:?})"),
                    Err(e) => format!("the connection's task failed: {e}"),
                };
            }
            _ = changes.broken.notified() => {
                return "a call found the connection broken".into();
            }
            _ = changes.changed.notified() => {
                let Some(server) = weak.upgrade() else { return "stopped".into() };
                let upto = changes.announced.load(Ordering::SeqCst);
                let listed = peer.list_all_tools().await;
                match listed {
                    Ok(listed) => {
                        let tools = tools::adapt(&server, listed);
                        tracing::info!(server = %server.config.name, tools = tools.len(), "mcp tool list changed");
                        server.set(|l| l.tools = tools);
                    }
                    Err(e) => tracing::warn!(server = %server.config.name, error = %e, "cannot list the changed tools"),
                }
                // Only once the new list is stored: `settled` lets the next model call read it.
                changes.apply(upto);
            }
        }
    }
}

/// Connects and lists the tools (stored on the server).
async fn connect(
    server: &Arc<Server>,
    changes: Arc<ListChanges>,
) -> Result<RunningService<RoleClient, Handler>, String> {
    // The list read below reflects what was announced before it.
    let upto = changes.announced.load(Ordering::SeqCst);
    let handler = Handler;
    let running = match &server.config.transport {
        TransportConfig::Stdio {
            command, args, env, ..
        } => {
            let mut cmd = tokio::process::Command::new(command.expose_secret());
            // Not our environment (it holds the model keys and the database URL): the few
            // variables a program needs to run, then the configured ones.
            cmd.env_clear()
                .envs(
                    INHERITED_ENV
                        .iter()
                        .filter_map(|k| Some((k, std::env::var_os(k)?))),
                )
                .args(args.iter().map(|a| a.expose_secret()))
                .envs(env.iter().map(|(k, v)| (k, v.expose_secret())))
                .kill_on_drop(true);
            let (process, stderr) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start the process: {e}"))?;
            if let Some(stderr) = stderr {
                let name = server.config.name.clone();
                tokio::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::info!(server = %name, "mcp server stderr: {line}");
                    }
                });
            }
            handler
                .serve(Watched {
                    inner: process,
                    changes: changes.clone(),
                })
                .await
                .map_err(|e| format!("initialization failed: {e}"))?
        }
        TransportConfig::Http { url, headers, .. } => {
            crate::install_tls_provider();
            let headers = headers
                .iter()
                .map(|(k, v)| {
                    let mut value = http::HeaderValue::from_str(v.expose_secret())
                        .expect("checked when the configuration was read");
                    value.set_sensitive(true);
                    (k.clone(), value)
                })
                .collect();
            let config = StreamableHttpClientTransportConfig::with_uri(url.expose_secret())
                .custom_headers(headers)
                .reinit_on_expired_session(true);
            let transport = StreamableHttpClientTransport::from_config(config);
            handler
                .serve(Watched {
                    inner: transport,
                    changes: changes.clone(),
                })
                .await
                .map_err(|e| format!("initialization failed: {e}"))?
        }
    };
    let listed = running
        .peer()
        .list_all_tools()
        .await
        .map_err(|e| format!("cannot list its tools: {e}"))?;
    let tools = tools::adapt(server, listed);
    server.set(|l| l.tools = tools);
    changes.apply(upto);
    Ok(running)
}

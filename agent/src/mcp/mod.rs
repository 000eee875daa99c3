//! The MCP client: tools of Model Context Protocol servers offered to the agent, through the
//! official Rust SDK (`rmcp`).
//!
//! - [`config`]: the `--mcp-config` file (`{"mcpServers": {name: {...}}}`; stdio and
//!   Streamable HTTP; `${VAR}` secrets from the environment);
//! - [`connection`]: one server's connection, kept up by a supervisor task (tool list refreshed
//!   on `notifications/tools/list_changed`, restarts with backoff), and the call itself
//!   (`Server::call`, the one place where every MCP call starts and ends);
//! - [`tools`]: a server's tools as our [`Tool`](crate::tools::Tool)s and their results;
//!   [`schema`]: their names and input schemas made to fit the model providers.
//!
//! A call goes through the same path as the built-in tools: the orchestrator records
//! `tool-call`, asks for confirmation first when the tool is destructive, and settles it with
//! `tool-result` or `tool-error`; cancelling the run drops the call, which sends
//! `notifications/cancelled` to the server.

pub mod config;
pub mod connection;
pub mod schema;
pub mod tools;

use std::sync::Arc;
use std::time::Duration;

pub use config::ServerConfig;
pub use connection::{ServerSnapshot, ServerState};
pub use tools::McpTool;

/// Default of [`McpSettings::call_timeout`].
pub const DEFAULT_MCP_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes of text and data an MCP call's result keeps (the rest is cut, with a note).
pub const MCP_RESULT_LIMIT: usize = 64 * 1024;

/// Longest wait, before a model call, for announced tool list changes to be fetched.
pub const LIST_SETTLE: Duration = Duration::from_secs(2);

/// How MCP calls are made.
#[derive(Debug, Clone)]
pub struct McpSettings {
    /// A call without an answer after this is cancelled and fails.
    pub call_timeout: Duration,
    /// See [`MCP_RESULT_LIMIT`].
    pub result_limit: usize,
}

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            call_timeout: DEFAULT_MCP_CALL_TIMEOUT,
            result_limit: MCP_RESULT_LIMIT,
        }
    }
}

/// The configured MCP servers. Cheap to clone; the servers stay connected while a clone lives.
#[derive(Clone, Default)]
pub struct McpServers {
    servers: Arc<[Arc<connection::Server>]>,
}

impl McpServers {
    /// Starts connecting to every server in the background (must be called within a Tokio
    /// runtime); their tools are offered as each becomes ready.
    pub fn start(configs: Vec<ServerConfig>, settings: McpSettings) -> Self {
        let servers: Vec<Arc<connection::Server>> = configs
            .into_iter()
            .map(|c| connection::Server::new(c, settings.clone()))
            .collect();
        for s in &servers {
            s.supervise();
        }
        McpServers {
            servers: servers.into(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The tools offered now: those of every ready server.
    pub fn tools(&self) -> Vec<Arc<McpTool>> {
        self.servers.iter().flat_map(|s| s.tools()).collect()
    }

    /// The offered tool called `name`.
    pub fn tool(&self, name: &str) -> Option<Arc<McpTool>> {
        let (server, _) = name.split_once("__")?;
        self.servers
            .iter()
            .find(|s| s.name() == server)?
            .tools()
            .into_iter()
            .find(|t| t.offered == name)
    }

    /// Why `name` is not offered, when it names a configured server that is not ready.
    pub fn unavailable(&self, name: &str) -> Option<String> {
        let (server, _) = name.split_once("__")?;
        self.servers
            .iter()
            .find(|s| s.name() == server)?
            .unavailable()
    }

    /// Waits, up to `limit`, while the server of tool `name` is connecting for the first time
    /// (a run resumed at start-up may call one of its tools before it is ready); whether it is
    /// ready then.
    pub async fn wait_connected(&self, name: &str, limit: Duration) -> bool {
        let Some(server) = name
            .split_once("__")
            .and_then(|(server, _)| self.servers.iter().find(|s| s.name() == server))
        else {
            return false;
        };
        let deadline = tokio::time::Instant::now() + limit;
        while server.state() == ServerState::Starting && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server.state() == ServerState::Ready
    }

    /// Waits, up to [`LIST_SETTLE`] in all, until every server's tool list reflects the
    /// changes it announced (called before each model call, so a tool added by the call just
    /// made is offered to the next).
    pub async fn settled(&self) {
        let deadline = tokio::time::Instant::now() + LIST_SETTLE;
        for s in self.servers.iter() {
            s.settled(deadline.saturating_duration_since(tokio::time::Instant::now()))
                .await;
        }
    }

    /// Every server as it is now.
    pub fn snapshot(&self) -> Vec<ServerSnapshot> {
        self.servers.iter().map(|s| s.snapshot()).collect()
    }
}

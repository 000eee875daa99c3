//! `GET /instance-ai/mcp/servers`: the configured MCP servers, their state and the tools they
//! offer now (`threadstream_agent::mcp`). What is shown of a server is its configuration as
//! written in the file (placeholders unexpanded): no secret.

use axum::extract::State;
use axum::Json;
use threadstream_agent::mcp::ServerSnapshot;

use crate::extract::Caller;
use crate::openapi::{McpServer, McpServerList, McpTool};
use crate::ApiContext;

#[utoipa::path(
    get,
    operation_id = "mcpServersList",
    path = "/instance-ai/mcp/servers",
    tag = "mcp",
    responses(
        (status = 200, description = "Every configured MCP server, in name order", body = McpServerList)
    )
)]
pub async fn servers(State(ctx): State<ApiContext>, _caller: Caller) -> Json<McpServerList> {
    Json(McpServerList {
        servers: ctx.runtime.mcp().snapshot().into_iter().map(view).collect(),
    })
}

fn view(s: ServerSnapshot) -> McpServer {
    McpServer {
        name: s.name,
        transport: s.transport.to_string(),
        target: s.target,
        state: s.state.as_str().to_string(),
        last_error: s.last_error,
        restarts: s.restarts,
        tools: s
            .tools
            .iter()
            .map(|t| McpTool {
                name: t.offered.clone(),
                mcp_name: t.mcp_name.clone(),
                description: t.description.clone(),
                destructive: t.destructive,
                input_schema: t.parameters.clone(),
            })
            .collect(),
    }
}

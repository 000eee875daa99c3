//! An MCP server's tools as our [`Tool`]s: offered as `server__tool` with a cleaned schema
//! ([`super::schema`]), destructive when annotated `destructiveHint: true` or listed in the
//! configuration, and their results turned into the `tool-result` value within a size limit.
//!
//! A tool reaches its server through [`ToolServer`], which the connection's `Server` implements
//! (`super::connection`): the connection imports this file, so this one does not import it.

use std::sync::{Arc, Weak};

use futures::future::BoxFuture;
use rmcp::model::CallToolResult;
use serde_json::{json, Value};
use threadstream_domain::event::JsonObject;

use super::schema;
use crate::error::ToolFailure;
use crate::tools::{Tool, ToolCtx};

/// What a tool needs of the MCP server that lists it: its name and configured destructive tools
/// (for [`adapt`]), and the call itself.
pub(super) trait ToolServer: Send + Sync {
    fn name(&self) -> &str;
    /// The tools the configuration marks destructive, whatever their annotations say.
    fn destructive_tools(&self) -> &[String];
    /// Calls `tool` with `args` on the server.
    fn call<'a>(
        &'a self,
        tool: &'a McpTool,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>>;
}

/// One tool of an MCP server.
pub struct McpTool {
    /// The name the model calls it by: `server__tool`.
    pub offered: String,
    pub server_name: String,
    /// The name the server knows it by.
    pub mcp_name: String,
    pub description: String,
    pub parameters: Value,
    pub destructive: bool,
    server: Weak<dyn ToolServer>,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("offered", &self.offered)
            .field("destructive", &self.destructive)
            .finish_non_exhaustive()
    }
}

/// The tools `listed` by `server`, adapted.
pub(super) fn adapt<S: ToolServer + 'static>(
    server: &Arc<S>,
    listed: Vec<rmcp::model::Tool>,
) -> Vec<Arc<McpTool>> {
    let name = server.name().to_string();
    let mut out: Vec<Arc<McpTool>> = Vec::with_capacity(listed.len());
    for t in listed {
        let offered = schema::offered_name(&name, &t.name, &|n| out.iter().any(|o| o.offered == n));
        let destructive = t
            .annotations
            .as_ref()
            .and_then(|a| a.destructive_hint)
            .unwrap_or(false)
            || server.destructive_tools().iter().any(|d| d == &t.name);
        let description = t
            .description
            .as_deref()
            .filter(|d| !d.trim().is_empty())
            .map(str::to_string)
            .or_else(|| t.title.clone())
            .unwrap_or_else(|| format!("The tool '{}' of the MCP server '{name}'.", t.name));
        out.push(Arc::new(McpTool {
            offered,
            server_name: name.clone(),
            mcp_name: t.name.to_string(),
            description,
            parameters: schema::clean(&t.input_schema),
            destructive,
            server: Arc::downgrade(server) as Weak<dyn ToolServer>,
        }));
    }
    for d in server.destructive_tools() {
        if !out.iter().any(|t| &t.mcp_name == d) {
            tracing::warn!(server = %name, tool = %d, "destructiveTools names a tool the server does not list");
        }
    }
    out
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.offered
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn parameters(&self) -> Value {
        self.parameters.clone()
    }
    fn destructive(&self) -> bool {
        self.destructive
    }
    fn confirmation_message(&self, _args: &JsonObject) -> String {
        format!(
            "Run '{}' on the MCP server '{}'?",
            self.mcp_name, self.server_name
        )
    }
    fn execute<'a>(
        &'a self,
        _ctx: &'a ToolCtx<'a>,
        args: JsonObject,
    ) -> BoxFuture<'a, Result<Value, ToolFailure>> {
        Box::pin(async move {
            let result = match self.server.upgrade() {
                Some(server) => server.call(self, args).await,
                None => Err(ToolFailure::failed(format!(
                    "MCP server '{}' is gone",
                    self.server_name
                ))),
            };
            crate::metrics::mcp_call(&self.server_name, result.is_ok());
            result
        })
    }
}

/// A call's result as stored in `tool-result` (and shown to the model):
/// `{server, tool, content, structuredContent?, truncated?}`, its content kept within `limit`
/// bytes of text and binary data in all; a result the server marks `isError` is the call's
/// failure, with its text.
pub(super) fn result_value(
    server: &str,
    tool: &str,
    result: CallToolResult,
    limit: usize,
) -> Result<Value, ToolFailure> {
    let mut budget = Budget {
        left: limit,
        truncated: false,
    };
    if result.is_error == Some(true) {
        let text: Vec<String> = result
            .content
            .iter()
            .filter_map(|c| serde_json::to_value(c).ok())
            .filter_map(|c| c["text"].as_str().map(str::to_string))
            .collect();
        let message = match text.join("\n") {
            t if t.trim().is_empty() => "the tool reported an error".to_string(),
            t => budget.text(&t),
        };
        return Err(ToolFailure::failed(format!(
            "MCP tool '{tool}' of server '{server}': {message}"
        )));
    }
    let content: Vec<Value> = result
        .content
        .iter()
        .map(|c| serde_json::to_value(c).unwrap_or(Value::Null))
        .map(|c| budget.content(c))
        .collect();
    let mut out = json!({"server": server, "tool": tool, "content": content});
    if let Some(structured) = result.structured_content {
        let size = structured.to_string().len();
        out["structuredContent"] = if size <= budget.left {
            budget.left -= size;
            structured
        } else {
            budget.truncated = true;
            json!(format!(
                "(structured content of {size} bytes omitted: over the size limit)"
            ))
        };
    }
    if budget.truncated {
        out["truncated"] = json!(true);
    }
    Ok(out)
}

/// Bytes of text and data a result may still keep.
struct Budget {
    left: usize,
    truncated: bool,
}

impl Budget {
    /// `text`, cut to what is left (on a character boundary) with a note saying so.
    fn text(&mut self, text: &str) -> String {
        if text.len() <= self.left {
            self.left -= text.len();
            return text.to_string();
        }
        let mut cut = self.left;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        self.left = 0;
        self.truncated = true;
        format!(
            "{}… (truncated: {cut} of {} bytes kept)",
            &text[..cut],
            text.len()
        )
    }

    /// One content block in its MCP wire form (`text`, `image`, `audio`, `resource`,
    /// `resource_link`), its text cut and its binary data dropped when over the budget.
    fn content(&mut self, mut block: Value) -> Value {
        for field in ["text", "data"] {
            if let Some(s) = block[field].as_str().map(str::to_string) {
                self.kept(&mut block, field, &s);
            }
        }
        if block["resource"].is_object() {
            for field in ["text", "blob"] {
                if let Some(s) = block["resource"][field].as_str().map(str::to_string) {
                    self.kept(&mut block["resource"], field, &s);
                }
            }
        }
        block
    }

    fn kept(&mut self, holder: &mut Value, field: &str, s: &str) {
        if field == "text" {
            holder[field] = json!(self.text(s));
        } else if s.len() <= self.left {
            self.left -= s.len();
        } else {
            // Base64 cut short is no image: drop it and say so.
            self.truncated = true;
            holder.as_object_mut().map(|o| o.remove(field));
            holder["omitted"] = json!(format!(
                "{} bytes of base64 data over the size limit",
                s.len()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(v: Value) -> CallToolResult {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn text_image_and_json_are_kept_within_the_limit() {
        let r = result(json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}
            ],
            "structuredContent": {"sum": 3}
        }));
        let v = result_value("s", "t", r, 1000).unwrap();
        assert_eq!(
            v,
            json!({"server": "s", "tool": "t", "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}
            ], "structuredContent": {"sum": 3}})
        );

        let big = "é".repeat(100);
        let r = result(json!({
            "content": [
                {"type": "text", "text": big},
                {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}
            ],
            "structuredContent": {"sum": 3}
        }));
        let v = result_value("s", "t", r, 51).unwrap();
        let text = v["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with(&"é".repeat(25)), "{text}");
        assert!(
            text.ends_with("(truncated: 50 of 200 bytes kept)"),
            "{text}"
        );
        assert!(v["content"][1].get("data").is_none(), "{v}");
        assert_eq!(
            v["content"][1]["omitted"],
            "8 bytes of base64 data over the size limit"
        );
        assert_eq!(
            v["structuredContent"],
            "(structured content of 9 bytes omitted: over the size limit)"
        );
        assert_eq!(v["truncated"], true);
    }

    #[test]
    fn an_error_result_is_a_failure_with_its_text() {
        let r =
            result(json!({"content": [{"type": "text", "text": "no such file"}], "isError": true}));
        match result_value("fs", "read", r, 1000) {
            Err(ToolFailure::Failed(m)) => {
                assert_eq!(m, "MCP tool 'read' of server 'fs': no such file")
            }
            other => panic!("{other:?}"),
        }
    }
}

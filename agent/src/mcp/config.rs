//! The `--mcp-config` file: the common `{"mcpServers": {name: {...}}}` format, read once at
//! start-up. Every string may name environment variables as `${VAR}`; their values are
//! secrets (kept in [`SecretString`]s, so no `Debug` or log shows them), and what is shown of a
//! server (the route, the logs) is the text as written in the file.

use std::collections::BTreeMap;
use std::path::Path;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use crate::error::AgentError;

/// Longest server name: the offered tool name `server__tool` must fit the providers' 64.
pub const MAX_SERVER_NAME: usize = 24;

/// One configured MCP server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The key in `mcpServers`; the prefix of its tools' offered names.
    pub name: String,
    pub transport: TransportConfig,
    /// MCP tool names (as the server lists them) that ask the user before each call, on top of
    /// those the server annotates `destructiveHint: true`.
    pub destructive_tools: Vec<String>,
}

/// How to reach a server.
#[derive(Debug, Clone)]
pub enum TransportConfig {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        command: SecretString,
        args: Vec<SecretString>,
        /// Added to the service's own environment.
        env: Vec<(String, SecretString)>,
        /// `command args…` as written in the file (placeholders unexpanded).
        shown: String,
    },
    /// Streamable HTTP.
    Http {
        url: SecretString,
        headers: Vec<(http::HeaderName, SecretString)>,
        /// The URL as written in the file.
        shown: String,
    },
}

impl TransportConfig {
    /// `stdio` or `http`.
    pub fn kind(&self) -> &'static str {
        match self {
            TransportConfig::Stdio { .. } => "stdio",
            TransportConfig::Http { .. } => "http",
        }
    }

    /// The command line or URL as written in the file.
    pub fn shown(&self) -> &str {
        match self {
            TransportConfig::Stdio { shown, .. } | TransportConfig::Http { shown, .. } => shown,
        }
    }
}

/// Headers the Streamable HTTP transport sets itself.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    mcp_servers: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Entry {
    #[serde(rename = "type")]
    kind: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    destructive_tools: Vec<String>,
}

/// Reads and checks the file at `path`; `lookup` gives environment variables (the process's
/// own in the service, a map in tests). Any problem is an error naming the file, the server and
/// the field.
pub fn load(
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<ServerConfig>, AgentError> {
    let fail = |message: String| AgentError::McpConfig {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    parse(&text, lookup).map_err(fail)
}

/// [`load`] of a file's text; the error is the message without the file's name.
pub fn parse(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<ServerConfig>, String> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let file: File = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        match path.as_str() {
            "." => format!("{}", e.into_inner()),
            _ => format!("{path}: {}", e.into_inner()),
        }
    })?;
    file.mcp_servers
        .into_iter()
        .map(|(name, entry)| server(name, entry, lookup))
        .collect()
}

fn server(
    name: String,
    entry: Entry,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<ServerConfig, String> {
    let at = |field: &str| format!("mcpServers.{name}.{field}");
    check_name(&name)?;
    let kind = entry.kind.as_deref().map(str::to_ascii_lowercase);
    let transport = match (kind.as_deref(), entry.command, entry.url) {
        (Some("sse"), _, _) => {
            return Err(format!(
                "{}: the legacy HTTP+SSE transport is not supported; use Streamable HTTP (\"type\": \"http\")",
                at("type")
            ))
        }
        (Some(k), _, _) if !["stdio", "http", "streamable-http", "streamablehttp"].contains(&k) => {
            return Err(format!(
                "{}: unknown transport {k:?}; use \"stdio\" or \"http\"",
                at("type")
            ))
        }
        (_, Some(_), Some(_)) => {
            return Err(format!(
                "mcpServers.{name}: set either \"command\" (stdio) or \"url\" (Streamable HTTP), not both"
            ))
        }
        (Some("stdio"), None, Some(_)) => {
            return Err(format!("{}: a stdio server needs \"command\"", at("command")))
        }
        (Some("http" | "streamable-http" | "streamablehttp"), Some(_), None) => {
            return Err(format!("{}: an HTTP server needs \"url\"", at("url")))
        }
        (_, None, None) => {
            return Err(format!(
                "mcpServers.{name}: set \"command\" (stdio) or \"url\" (Streamable HTTP)"
            ))
        }
        (_, Some(command), None) => {
            if !entry.headers.is_empty() {
                return Err(format!("{}: only an HTTP server takes headers", at("headers")));
            }
            if command.trim().is_empty() {
                return Err(format!("{}: must not be empty", at("command")));
            }
            let shown = std::iter::once(command.as_str())
                .chain(entry.args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" ");
            TransportConfig::Stdio {
                command: expand(&command, &at("command"), lookup)?,
                args: entry
                    .args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| expand(a, &at(&format!("args[{i}]")), lookup))
                    .collect::<Result<_, _>>()?,
                env: entry
                    .env
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), expand(v, &at(&format!("env.{k}")), lookup)?)))
                    .collect::<Result<_, String>>()?,
                shown,
            }
        }
        (_, None, Some(url)) => {
            if !entry.args.is_empty() || !entry.env.is_empty() {
                return Err(format!(
                    "mcpServers.{name}: \"args\" and \"env\" are for stdio servers; an HTTP server takes \"url\" and \"headers\""
                ));
            }
            let expanded = expand(&url, &at("url"), lookup)?;
            let parsed = reqwest::Url::parse(expanded.expose_secret())
                .map_err(|e| format!("{}: not a URL ({e})", at("url")))?;
            if !["http", "https"].contains(&parsed.scheme()) {
                return Err(format!("{}: must be an http or https URL", at("url")));
            }
            let mut headers = Vec::new();
            for (k, v) in &entry.headers {
                let field = at(&format!("headers.{k}"));
                let header = http::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|_| format!("{field}: not a valid header name"))?;
                if RESERVED_HEADERS.contains(&header.as_str()) {
                    return Err(format!("{field}: set by the MCP client itself"));
                }
                let value = expand(v, &field, lookup)?;
                http::HeaderValue::from_str(value.expose_secret())
                    .map_err(|_| format!("{field}: not a valid header value"))?;
                headers.push((header, value));
            }
            TransportConfig::Http {
                url: expanded,
                headers,
                shown: url,
            }
        }
    };
    Ok(ServerConfig {
        name,
        transport,
        destructive_tools: entry.destructive_tools,
    })
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_SERVER_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.contains("__")
        && !name.starts_with('_')
        && !name.ends_with('_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "mcpServers: the server name {name:?} must be 1 to {MAX_SERVER_NAME} letters, digits, \
             '-' or '_', without \"__\" and not starting or ending with '_' (it prefixes its tools' \
             names as <server>__<tool>)"
        ))
    }
}

/// `text` with every `${VAR}` replaced by the variable's value.
fn expand(
    text: &str,
    field: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<SecretString, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!("{field}: \"${{\" without a closing \"}}\""));
        };
        let var = &after[..end];
        if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "{field}: \"${{{var}}}\" is not an environment variable name"
            ));
        }
        match lookup(var) {
            Some(value) => out.push_str(&value),
            None => {
                return Err(format!(
                    "{field}: the environment variable {var} is not set"
                ))
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(SecretString::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(var: &str) -> Option<String> {
        match var {
            "TOKEN" => Some("s3cr3t".into()),
            "HOST" => Some("127.0.0.1:9".into()),
            _ => None,
        }
    }

    fn err(text: &str) -> String {
        parse(text, &env).expect_err(text)
    }

    #[test]
    fn stdio_and_http_servers_with_secrets_from_the_environment() {
        let servers = parse(
            r#"{"mcpServers": {
                "files": {"command": "node", "args": ["srv.js", "--key=${TOKEN}"], "env": {"API_KEY": "${TOKEN}"}},
                "remote": {"type": "http", "url": "http://${HOST}/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"},
                           "destructiveTools": ["drop"]}
            }}"#,
            &env,
        )
        .unwrap();
        assert_eq!(servers.len(), 2);
        let files = &servers[0];
        assert_eq!(files.name, "files");
        let TransportConfig::Stdio {
            command,
            args,
            env,
            shown,
        } = &files.transport
        else {
            panic!()
        };
        assert_eq!(command.expose_secret(), "node");
        assert_eq!(args[1].expose_secret(), "--key=s3cr3t");
        assert_eq!(env[0].0, "API_KEY");
        assert_eq!(env[0].1.expose_secret(), "s3cr3t");
        assert_eq!(shown, "node srv.js --key=${TOKEN}");
        let remote = &servers[1];
        let TransportConfig::Http {
            url,
            headers,
            shown,
        } = &remote.transport
        else {
            panic!()
        };
        assert_eq!(url.expose_secret(), "http://127.0.0.1:9/mcp");
        assert_eq!(shown, "http://${HOST}/mcp");
        assert_eq!(headers[0].0.as_str(), "authorization");
        assert_eq!(headers[0].1.expose_secret(), "Bearer s3cr3t");
        assert_eq!(remote.destructive_tools, ["drop"]);
        // Debug never shows a secret.
        let debug = format!("{servers:?}");
        assert!(!debug.contains("s3cr3t"), "{debug}");
    }

    #[test]
    fn bad_files_are_errors_naming_the_problem() {
        assert!(err("{").contains("EOF"), "{}", err("{"));
        assert_eq!(
            err(r#"{"servers": {}}"#),
            "servers: unknown field `servers`, expected `mcpServers` at line 1 column 10"
        );
        assert!(
            err(r#"{"mcpServers": {"a": {"command": "x", "destructive": []}}}"#)
                .starts_with("mcpServers.a.destructive: unknown field `destructive`"),
        );
        assert_eq!(
            err(r#"{"mcpServers": {"a": {"command": "x", "env": {"K": "${MISSING}"}}}}"#),
            "mcpServers.a.env.K: the environment variable MISSING is not set"
        );
        assert_eq!(
            err(r#"{"mcpServers": {"a": {"url": "http://h/${TOKEN"}}}"#),
            "mcpServers.a.url: \"${\" without a closing \"}\""
        );
        assert_eq!(
            err(r#"{"mcpServers": {"a": {}}}"#),
            "mcpServers.a: set \"command\" (stdio) or \"url\" (Streamable HTTP)"
        );
        assert_eq!(
            err(r#"{"mcpServers": {"a": {"command": "x", "url": "http://h"}}}"#),
            "mcpServers.a: set either \"command\" (stdio) or \"url\" (Streamable HTTP), not both"
        );
        assert!(
            err(r#"{"mcpServers": {"a": {"type": "sse", "url": "http://h"}}}"#)
                .contains("legacy HTTP+SSE transport is not supported")
        );
        assert!(
            err(r#"{"mcpServers": {"a__b": {"command": "x"}}}"#).contains("server name \"a__b\"")
        );
        assert!(err(r#"{"mcpServers": {"a.b": {"command": "x"}}}"#).contains("server name \"a.b\""));
        assert_eq!(
            err(r#"{"mcpServers": {"a": {"url": "ftp://h/x"}}}"#),
            "mcpServers.a.url: must be an http or https URL"
        );
        assert_eq!(
            err(r#"{"mcpServers": {"a": {"url": "http://h", "headers": {"Bad Name": "x"}}}}"#),
            "mcpServers.a.headers.Bad Name: not a valid header name"
        );
        assert_eq!(
            err(
                r#"{"mcpServers": {"a": {"url": "http://h", "headers": {"Mcp-Session-Id": "x"}}}}"#
            ),
            "mcpServers.a.headers.Mcp-Session-Id: set by the MCP client itself"
        );
        assert_eq!(
            err(r#"{"mcpServers": {"a": {"command": "x", "headers": {"K": "v"}}}}"#),
            "mcpServers.a.headers: only an HTTP server takes headers"
        );
    }
}

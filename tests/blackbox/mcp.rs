//! The MCP client through the real binary, against real MCP servers: the reference
//! `@modelcontextprotocol/server-everything` (pinned in tests/conformance/mcp) over stdio and
//! over Streamable HTTP, and small servers written here with the Python SDK (PyPI `mcp`,
//! pinned in tests/conformance/mcp/.venv) for the failure cases. The fake OpenAI provider (a
//! real HTTP server) makes the model call the tools; every event is checked against both n8n
//! schemas.

use crate::common;
use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{bounded, validate_n8n, Opts, Server, SseEvent};
use serde_json::{json, Value};
use support::{oai_answer, oai_call, FakeLlm};

const INSTALL_HINT: &str = "run `bash tests/conformance/install.sh` first";

fn mcp_dir() -> PathBuf {
    common::conformance_dir().join("mcp")
}

/// The reference server's entry point.
fn everything_js() -> PathBuf {
    let js = mcp_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(js.is_file(), "{} is missing: {INSTALL_HINT}", js.display());
    js
}

/// The pinned venv's python, which has the `mcp` SDK.
pub fn python() -> PathBuf {
    let py = mcp_dir().join(".venv/bin/python");
    assert!(py.is_file(), "{} is missing: {INSTALL_HINT}", py.display());
    py
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A process serving MCP over Streamable HTTP on a loopback port, killed on drop.
pub struct HttpServer {
    pub port: u16,
    _child: tokio::process::Child,
}

impl HttpServer {
    pub async fn start(mut cmd: tokio::process::Command, port: u16) -> HttpServer {
        cmd.kill_on_drop(true)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let child = cmd.spawn().expect("start the MCP server");
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "the MCP server did not listen on {port}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        HttpServer {
            port,
            _child: child,
        }
    }
}

/// Writes `config` as the `--mcp-config` file in `dir`.
pub fn write_config(dir: &Path, config: &Value) -> PathBuf {
    let path = dir.join("mcp.json");
    std::fs::write(&path, serde_json::to_vec_pretty(config).unwrap()).unwrap();
    path
}

/// A server on the fake OpenAI provider with `--mcp-config config`.
pub async fn start(
    fake: &FakeLlm,
    config: &Path,
    extra: &[&str],
    env: Vec<(String, String)>,
) -> Server {
    let mut extra_args = vec![
        "--openai-base-url".to_string(),
        fake.openai_base(),
        "--openai-api-key".into(),
        "sk-test".into(),
        "--mcp-config".into(),
        config.display().to_string(),
    ];
    extra_args.extend(extra.iter().map(|s| s.to_string()));
    Server::start_with(Opts {
        model: "openai/gpt-test".into(),
        extra_args,
        env,
        ..Opts::default()
    })
    .await
}

/// Waits until every server in `names` is ready (from `GET /instance-ai/mcp/servers`);
/// returns the route's answer.
pub async fn wait_ready(s: &Server, names: &[&str]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = s
            .get("/instance-ai/mcp/servers")
            .await
            .ok_json("mcp servers");
        let ready = names.iter().all(|n| {
            v["servers"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["name"] == *n && x["state"] == "ready")
        });
        if ready {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "MCP servers {names:?} not ready: {v}\n{}",
            s.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn payloads<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == ty)
        .map(|e| &e["payload"])
        .collect()
}

/// The `tool-result` or `tool-error` payload of the call of `tool`.
pub fn outcome_of<'a>(events: &'a [Value], tool: &str) -> &'a Value {
    let call = events
        .iter()
        .find(|e| e["type"] == "tool-call" && e["payload"]["toolName"] == tool)
        .unwrap_or_else(|| panic!("no tool-call of {tool}: {events:?}"));
    let id = &call["payload"]["toolCallId"];
    events
        .iter()
        .find(|e| {
            (e["type"] == "tool-result" || e["type"] == "tool-error")
                && e["payload"]["toolCallId"] == *id
        })
        .unwrap_or_else(|| panic!("{tool} was not settled: {events:?}"))
}

pub async fn validate(events: &[SseEvent]) {
    let json: Vec<String> = events.iter().map(|e| e.data.clone()).collect();
    validate_n8n(&json).await;
}

const SECRET: &str = "mcp-secret-7f3a9c";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_server_over_stdio_and_streamable_http() {
    bounded(240, async {
        let port = free_port();
        let mut cmd = tokio::process::Command::new("node");
        cmd.arg(everything_js())
            .arg("streamableHttp")
            .env("PORT", port.to_string());
        let web = HttpServer::start(cmd, port).await;
        let dir = tempfile::tempdir().unwrap();
        let config = write_config(
            dir.path(),
            &json!({"mcpServers": {
                "everything": {
                    "command": "node",
                    "args": [everything_js(), "stdio"],
                    "env": {"MCP_TEST_TOKEN": "${MCP_TEST_SECRET}"},
                    "destructiveTools": ["get-sum"]
                },
                "web": {
                    "type": "http",
                    "url": format!("http://127.0.0.1:{}/mcp", web.port),
                    "headers": {"X-Api-Key": "${MCP_TEST_SECRET}"}
                }
            }}),
        );
        let fake = FakeLlm::start(vec![
            oai_call(
                "c1",
                "everything__echo",
                json!({"message": "hello over stdio"}),
            ),
            oai_call("c2", "web__echo", json!({"message": "hello over http"})),
            oai_call("c3", "everything__get-sum", json!({"a": 2, "b": 3})),
            oai_call("c4", "everything__get-tiny-image", json!({})),
            oai_call("c5", "everything__get-env", json!({})),
            oai_call(
                "c6",
                "everything__get-structured-content",
                json!({"location": "New York"}),
            ),
            oai_answer("Done."),
        ])
        .await;
        let (otlp, spans) = crate::traces::receiver().await;
        let s = start(
            &fake,
            &config,
            &[],
            vec![
                ("MCP_TEST_SECRET".into(), SECRET.into()),
                ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), otlp),
                ("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()),
            ],
        )
        .await;
        let listed = wait_ready(&s, &["everything", "web"]).await;
        let everything = listed["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == "everything")
            .unwrap();
        assert_eq!(everything["transport"], "stdio");
        let tools = everything["tools"].as_array().unwrap();
        let sum = tools
            .iter()
            .find(|t| t["name"] == "everything__get-sum")
            .unwrap();
        assert_eq!(sum["mcpName"], "get-sum");
        assert_eq!(sum["destructive"], true, "listed in destructiveTools");
        let echo = tools
            .iter()
            .find(|t| t["name"] == "everything__echo")
            .unwrap();
        assert_eq!(echo["destructive"], false);

        let run = s.chat("t-mcp", "use the MCP tools").await;
        let events = s
            .follow_run("t-mcp", &run, |_| {
                Some(json!({"kind": "approval", "approved": true}))
            })
            .await;
        let values: Vec<Value> = events.iter().map(|e| e.json()).collect();
        assert_eq!(
            values.last().unwrap()["payload"]["status"],
            "completed",
            "{values:?}"
        );

        // The model was offered the servers' tools, named and cleaned for the provider.
        let first = &fake.requests()[0];
        let offered: Vec<&Value> = first["tools"].as_array().unwrap().iter().collect();
        let echo_spec = offered
            .iter()
            .find(|t| t["function"]["name"] == "everything__echo")
            .expect("everything__echo offered");
        let params = &echo_spec["function"]["parameters"];
        assert_eq!(params["type"], "object");
        assert_eq!(params["properties"]["message"]["type"], "string");
        assert!(params.get("$schema").is_none(), "{params}");
        let image_spec = offered
            .iter()
            .find(|t| t["function"]["name"] == "everything__get-tiny-image")
            .unwrap();
        assert_eq!(
            image_spec["function"]["parameters"],
            json!({"type": "object", "properties": {}})
        );
        assert!(offered.iter().any(|t| t["function"]["name"] == "web__echo"));
        for t in &offered {
            let name = t["function"]["name"].as_str().unwrap();
            assert!(
                name.len() <= 64
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
                "{name}"
            );
        }

        // stdio
        let r = outcome_of(&values, "everything__echo");
        assert_eq!(r["type"], "tool-result", "{r}");
        assert_eq!(r["payload"]["result"]["server"], "everything");
        assert_eq!(
            r["payload"]["result"]["content"][0]["text"],
            "Echo: hello over stdio"
        );
        // Streamable HTTP
        let r = outcome_of(&values, "web__echo");
        assert_eq!(r["payload"]["result"]["server"], "web");
        assert_eq!(
            r["payload"]["result"]["content"][0]["text"],
            "Echo: hello over http"
        );
        // Listed as destructive: asked first, like our own destructive tools.
        let asks = payloads(&values, "confirmation-request");
        assert_eq!(asks.len(), 1, "{asks:?}");
        assert_eq!(asks[0]["toolName"], "everything__get-sum");
        assert_eq!(asks[0]["severity"], "destructive");
        assert_eq!(asks[0]["args"], json!({"a": 2, "b": 3}));
        let r = outcome_of(&values, "everything__get-sum");
        assert!(
            r["payload"]["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains('5'),
            "{r}"
        );
        // Image content is kept.
        let r = outcome_of(&values, "everything__get-tiny-image");
        let image = r["payload"]["result"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "image")
            .unwrap_or_else(|| panic!("{r}"));
        assert_eq!(image["mimeType"], "image/png");
        assert!(image["data"].as_str().unwrap().len() > 100);
        // JSON (structured) content is kept.
        let r = outcome_of(&values, "everything__get-structured-content");
        assert!(
            r["payload"]["result"]["structuredContent"].is_object(),
            "{r}"
        );
        // The secret reached the process from the environment ...
        let r = outcome_of(&values, "everything__get-env");
        let env_text = r["payload"]["result"]["content"][0]["text"]
            .as_str()
            .unwrap();
        assert!(env_text.contains(&format!("\"MCP_TEST_TOKEN\": \"{SECRET}\"")));
        // The service's own environment is not passed on (only PATH, HOME and the like).
        assert!(!env_text.contains("MCP_TEST_SECRET"), "{env_text}");
        assert!(!env_text.contains("NO_COLOR"), "{env_text}");
        assert!(env_text.contains("\"PATH\""), "{env_text}");
        // ... and is never logged (not even the HTTP header that carries it).
        assert!(!s.logs().contains(SECRET), "a secret is in the logs");
        assert!(!listed.to_string().contains(SECRET));

        // Each server's calls are counted in the metrics, by outcome, as the log recorded them.
        let metrics = crate::metrics::scrape(&s).await;
        for server in ["everything", "web"] {
            let prefix = format!("{server}__");
            let calls: Vec<&Value> = payloads(&values, "tool-call")
                .into_iter()
                .filter(|p| p["toolName"].as_str().unwrap().starts_with(&prefix))
                .collect();
            let ended = |ty: &str| {
                payloads(&values, ty)
                    .iter()
                    .filter(|p| calls.iter().any(|c| c["toolCallId"] == p["toolCallId"]))
                    .count() as f64
            };
            for (outcome, ty) in [("ok", "tool-result"), ("error", "tool-error")] {
                assert_eq!(
                    // A server with no failed call has no `error` series: 0.
                    crate::metrics::counted(
                        &metrics,
                        "threadstream_mcp_calls_total",
                        &[("server", server), ("outcome", outcome)]
                    ),
                    ended(ty),
                    "{server} {outcome}"
                );
            }
            assert!(ended("tool-result") > 0.0, "{server}");
        }

        // Each MCP call is an `execute_tool` span naming its server, under the run's span.
        let exported = crate::traces::wait_for(&spans, "invoke_agent orchestrator").await;
        let calls = payloads(&values, "tool-call");
        let mcp_calls: Vec<&&Value> = calls
            .iter()
            .filter(|c| c["toolName"].as_str().unwrap().contains("__"))
            .collect();
        assert!(mcp_calls.len() >= 4, "{mcp_calls:?}");
        for call in mcp_calls {
            let name = call["toolName"].as_str().unwrap();
            let span = exported
                .iter()
                .map(|(_, s)| s)
                .find(|s| {
                    crate::traces::attr_str(s, "gen_ai.tool.call.id").as_deref()
                        == call["toolCallId"].as_str()
                })
                .unwrap_or_else(|| panic!("no span for the call of {name}"));
            assert_eq!(span.name, format!("execute_tool {name}"));
            assert_eq!(
                crate::traces::attr_str(span, "threadstream.mcp.server").as_deref(),
                name.split_once("__").map(|(server, _)| server)
            );
        }

        validate(&events).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_is_a_startup_error_naming_the_problem() {
    bounded(60, async {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                json!({"mcpServers": {"a": {"command": "x", "env": {"K": "${MCP_TEST_UNSET_VAR}"}}}}),
                "mcpServers.a.env.K: the environment variable MCP_TEST_UNSET_VAR is not set",
            ),
            (
                json!({"mcpServers": {"a": {"type": "sse", "url": "http://127.0.0.1:1/sse"}}}),
                "mcpServers.a.type: the legacy HTTP+SSE transport is not supported",
            ),
            (json!({"servers": {}}), "unknown field `servers`"),
        ];
        for (config, expected) in cases {
            let path = write_config(dir.path(), &config);
            let out = tokio::process::Command::new(common::BIN)
                .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
                .arg(dir.path().join("data"))
                .arg("--mcp-config")
                .arg(&path)
                .env_remove("MCP_TEST_UNSET_VAR")
                .output()
                .await
                .unwrap();
            assert!(!out.status.success());
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains(&format!("--mcp-config {}", path.display()))
                    && stderr.contains(expected),
                "{config}: {stderr}"
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_confirmation_of_an_mcp_tool_survives_a_crash() {
    bounded(180, async {
        let dir = tempfile::tempdir().unwrap();
        let config = write_config(
            dir.path(),
            &json!({"mcpServers": {"everything": {
                "command": "node",
                "args": [everything_js(), "stdio"],
                "destructiveTools": ["get-sum"]
            }}}),
        );
        let fake = FakeLlm::start(vec![
            oai_call("c1", "everything__get-sum", json!({"a": 20, "b": 22})),
            oai_answer("It is 42."),
        ])
        .await;
        let mut s = start(&fake, &config, &[], vec![]).await;
        wait_ready(&s, &["everything"]).await;
        let run = s.chat("t-resume", "add 20 and 22").await;
        let mut sse = s.sse("t-resume", common::Cursor::None).await;
        let request_id = loop {
            let v = sse
                .next_event(Duration::from_secs(20))
                .await
                .unwrap()
                .json();
            if v["type"] == "confirmation-request" {
                break v["payload"]["requestId"].as_str().unwrap().to_string();
            }
        };
        drop(sse);
        // The process dies while the run waits; the next one resumes the run, and the answer
        // runs the tool on a server it has just started connecting to.
        s.kill9();
        s.restart().await;
        s.confirm(&request_id, &json!({"kind": "approval", "approved": true}))
            .await
            .ok_json("confirm");
        let events = s.follow_run("t-resume", &run, |_| None).await;
        let values: Vec<Value> = events.iter().map(|e| e.json()).collect();
        assert_eq!(
            values.last().unwrap()["payload"]["status"],
            "completed",
            "{values:?}"
        );
        let r = outcome_of(&values, "everything__get-sum");
        assert_eq!(r["type"], "tool-result", "{r}");
        assert!(
            r["payload"]["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("42"),
            "{r}"
        );
        validate(&events).await;
    })
    .await;
}

//! The AI SDK's chat endpoints (`POST /api/chat`, `GET /api/chat/{id}/stream`; issue #36 part
//! 2), driven by the SDK's own client code: npm `ai` 7.0.173's `DefaultChatTransport` sends and
//! reconnects, `readUIMessageStream` builds the assistant message, and every chunk passes the
//! SDK's `uiMessageChunkSchema` (tests/conformance/ai-sdk/chat.mjs). The message must be the
//! run as the log holds it: the run's own agent's text, every tool call with its output, each
//! sub-agent as a data part.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// Runs chat.mjs (`send` or `resume`) and returns its JSON line.
async fn sdk(mode: &str, s: &Server, chat: &str, text: &str) -> Value {
    let dir = conformance_dir().join("ai-sdk");
    assert!(
        dir.join("node_modules/ai").exists(),
        "the AI SDK is missing: bash tests/conformance/install.sh"
    );
    let out = tokio::process::Command::new("node")
        .arg(dir.join("chat.mjs"))
        .args([mode, &s.base, chat, text])
        .current_dir(&dir)
        .output()
        .await
        .expect("node");
    assert!(
        out.status.success(),
        "chat.mjs {mode}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.logs()
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "chat.mjs printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A demo server whose runs ask no confirmation (no sample workflow to offer to delete), so a
/// run goes from the message to its answer alone.
fn no_confirmation() -> Opts {
    Opts {
        extra_args: vec!["--sample-workflows".into(), "false".into()],
        ..Opts::default()
    }
}

/// The thread's events, as the admin export writes them (none while it does not exist).
async fn log_of(s: &Server, thread: &str) -> Vec<Value> {
    let r = s
        .get(&format!(
            "/instance-ai/admin/export?threadId={}",
            enc(thread)
        ))
        .await;
    if r.status == 404 {
        return Vec::new();
    }
    assert_eq!(r.status, 200, "{}", r.text);
    r.text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// What the message must hold for `run`: the run agent's text, its tool calls, its sub-agents.
struct Expected {
    text: String,
    tool_calls: Vec<String>,
    agents: Vec<String>,
}

fn expected(log: &[Value], run: &str) -> Expected {
    let events: Vec<&Value> = log.iter().filter(|e| e["run"] == run).collect();
    let root = events
        .iter()
        .find(|e| e["type"] == "run-start")
        .map(|e| e["agent"].as_str().unwrap().to_string())
        .expect("the run's run-start");
    Expected {
        text: events
            .iter()
            .filter(|e| e["type"] == "text-delta" && e["agent"] == root.as_str())
            .map(|e| e["payload"]["text"].as_str().unwrap())
            .collect(),
        tool_calls: events
            .iter()
            .filter(|e| e["type"] == "tool-call")
            .map(|e| e["payload"]["toolCallId"].as_str().unwrap().to_string())
            .collect(),
        agents: events
            .iter()
            .filter(|e| e["type"] == "agent-spawned")
            .map(|e| e["agent"].as_str().unwrap().to_string())
            .collect(),
    }
}

/// Checks the SDK's output against the log: no chunk the SDK refuses, and the message it built
/// is the run.
fn assert_message_is_the_run(out: &Value, want: &Expected) {
    assert_eq!(out["invalid"], json!([]), "chunks the SDK's schema refuses");
    let chunks = out["chunks"].as_array().unwrap();
    assert_eq!(chunks.first().unwrap()["type"], "start");
    assert_eq!(chunks.last().unwrap()["type"], "finish");
    let message = &out["message"];
    assert_eq!(message["role"], "assistant", "{message}");
    let parts = message["parts"].as_array().unwrap();
    let text: String = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, want.text, "the message's text");
    let tools: Vec<&str> = parts
        .iter()
        .filter(|p| p["type"].as_str().unwrap().starts_with("tool-"))
        .map(|p| p["toolCallId"].as_str().unwrap())
        .collect();
    assert_eq!(tools, want.tool_calls, "the message's tool parts");
    for p in parts
        .iter()
        .filter(|p| p["type"].as_str().unwrap().starts_with("tool-"))
    {
        assert_eq!(p["state"], "output-available", "{p}");
    }
    let agents: Vec<&str> = parts
        .iter()
        .filter(|p| p["type"] == "data-agent")
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(agents, want.agents, "one data-agent part per sub-agent");
    for p in parts.iter().filter(|p| p["type"] == "data-agent") {
        assert_eq!(p["data"]["status"], "completed", "{p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn use_chat_sends_a_message_and_builds_the_run_as_one_assistant_message() {
    bounded(120, async {
        let s = Server::start_with(no_confirmation()).await;
        let out = sdk("send", &s, "ai-sdk-send", "Build me a workflow").await;
        let log = log_of(&s, "ai-sdk-send").await;
        let run = log
            .iter()
            .find(|e| e["type"] == "run-start")
            .map(|e| e["run"].as_str().unwrap().to_string())
            .expect("a run");
        let want = expected(&log, &run);
        assert!(!want.text.is_empty() && !want.tool_calls.is_empty() && !want.agents.is_empty());
        assert_message_is_the_run(&out, &want);
        // The user's message is the thread's, as on every protocol.
        assert!(log
            .iter()
            .any(|e| e["type"] == "user-message" && e["payload"]["text"] == "Build me a workflow"));
        // Nothing live to resume now.
        let resumed = sdk("resume", &s, "ai-sdk-send", "").await;
        assert_eq!(resumed, json!({"resumed": false}));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_or_a_second_tab_gets_the_whole_message_then_the_live_rest() {
    bounded(120, async {
        // Slow deltas: the run is still live when the second reader comes.
        let s = Server::start_with(Opts {
            demo_delay_ms: 40,
            ..no_confirmation()
        })
        .await;
        let first = tokio::spawn({
            let base = s.base.clone();
            async move {
                let dir = conformance_dir().join("ai-sdk");
                tokio::process::Command::new("node")
                    .arg(dir.join("chat.mjs"))
                    .args(["send", &base, "ai-sdk-tabs", "Build me a workflow"])
                    .current_dir(&dir)
                    .output()
                    .await
                    .expect("node")
            }
        });
        // Wait until the run has streamed some text, then open the "second tab".
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let log = log_of(&s, "ai-sdk-tabs").await;
            if log.iter().filter(|e| e["type"] == "text-delta").count() >= 2 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the run streamed nothing"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let second = sdk("resume", &s, "ai-sdk-tabs", "").await;
        assert_eq!(second["resumed"], true, "{second}");
        let first = first.await.unwrap();
        assert!(
            first.status.success(),
            "{}",
            String::from_utf8_lossy(&first.stderr)
        );
        let first: Value = serde_json::from_slice(&first.stdout).unwrap();
        let log = log_of(&s, "ai-sdk-tabs").await;
        let run = log
            .iter()
            .find(|e| e["type"] == "run-start")
            .map(|e| e["run"].as_str().unwrap().to_string())
            .unwrap();
        let want = expected(&log, &run);
        // Both tabs end with the same, whole message: the resume replayed it from its start.
        assert_message_is_the_run(&first, &want);
        assert_message_is_the_run(&second, &want);
        assert_eq!(first["chunks"], second["chunks"]);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_chat_requests_get_clear_errors_and_store_nothing() {
    bounded(60, async {
        let s = Server::start().await;
        let cases = [
            (
                json!({"id": "ai-bad", "messages": [], "trigger": "submit-message"}),
                422,
                "missing_message",
            ),
            (
                json!({"id": "ai-bad", "messages": [{"role": "user", "parts": [{"type": "text", "text": "x"}]}], "trigger": "regenerate-message"}),
                422,
                "invalid_body",
            ),
            (
                json!({"id": "erasure:x", "messages": [{"role": "user", "parts": [{"type": "text", "text": "x"}]}]}),
                400,
                "invalid_thread_id",
            ),
            (json!({"messages": []}), 422, "invalid_body"),
            (
                json!({"id": "ai-bad", "messages": [{"role": "user", "parts": [{"type": "text", "text": "  "}]}]}),
                422,
                "empty_message",
            ),
        ];
        for (body, status, code) in cases {
            let r = s.post("/api/chat", &body).await;
            let (got, _) = r.error(status, &body.to_string());
            assert_eq!(got, code, "{body}: {}", r.text);
        }
        assert_eq!(s.get("/api/chat/ai-bad/stream").await.status, 204);
        assert_eq!(
            s.get("/api/chat/erasure%3Ax/stream").await.status,
            400,
            "a malformed chat id"
        );
        assert!(!s
            .threads()
            .await
            .to_string()
            .contains("ai-bad"), "a refused request stored a thread");
    })
    .await
}

//! The AI SDK's chat endpoints (`POST /api/chat`, `GET /api/chat/{thread_id}/stream`; issue #36 part
//! 2), driven by the SDK's own client code: npm `ai` 7.0.173's `DefaultChatTransport` sends and
//! reconnects, `readUIMessageStream` builds the assistant message, and every chunk passes the
//! SDK's `uiMessageChunkSchema` (tests/conformance/ai-sdk/chat.mjs). The message must be the
//! run as the log holds it: the run's own agent's text, every tool call with its output, each
//! sub-agent as a data part.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// Runs chat.mjs (`send`, `resume` or `stop`) against `s` and returns its JSON line.
async fn sdk(mode: &str, s: &Server, chat: &str, text: &str) -> Value {
    sdk_at(mode, &s.base, chat, text)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", s.logs()))
}

/// Runs chat.mjs against the server at `base`.
async fn sdk_at(mode: &str, base: &str, chat: &str, text: &str) -> Result<Value, String> {
    sdk_env(mode, base, chat, text, &[]).await
}

/// Runs chat.mjs against the server at `base`, with `env` set.
async fn sdk_env(
    mode: &str,
    base: &str,
    chat: &str,
    text: &str,
    env: &[(&str, String)],
) -> Result<Value, String> {
    let dir = conformance_dir().join("ai-sdk");
    assert!(
        dir.join("node_modules/ai").exists(),
        "the AI SDK is missing: bash tests/conformance/install.sh"
    );
    let out = tokio::process::Command::new("node")
        .arg(dir.join("chat.mjs"))
        .args([mode, base, chat, text])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir(&dir)
        .output()
        .await
        .expect("node");
    if !out.status.success() {
        return Err(format!(
            "chat.mjs {mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "chat.mjs printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The `ai-sdk` streams open now, from `/metrics`.
async fn open_ai_sdk_streams(s: &Server) -> f64 {
    let text = s.get("/metrics").await.text;
    text.lines()
        .find_map(|l| l.strip_prefix("threadstream_sse_streams_open{protocol=\"ai-sdk\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no ai-sdk gauge in {text}"))
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
pub(crate) async fn log_of(s: &Server, thread: &str) -> Vec<Value> {
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
            async move { sdk_at("send", &base, "ai-sdk-tabs", "Build me a workflow").await }
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
        let first = first.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
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
                json!({"id": "ai-bad", "messages": [{"role": "user", "parts": [{"type": "text", "text": "x"}]}], "trigger": "resume-stream"}),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_in_the_client_is_a_disconnect_and_cancel_ends_the_message_with_abort() {
    bounded(120, async {
        let s = Server::start_with(Opts {
            demo_delay_ms: 40,
            ..no_confirmation()
        })
        .await;
        // useChat's stop(): the client aborts its request after a few chunks.
        let stopped = sdk("stop", &s, "ai-sdk-stop", "Build me a workflow").await;
        assert_eq!(stopped["stopped"], true, "{stopped}");
        assert_eq!(stopped["invalid"], json!([]));
        // A disconnect is not a stop: the run goes on, and another reader can follow it.
        let status = s.status("ai-sdk-stop").await;
        assert_eq!(status["hasActiveRun"], true, "{status}");
        // The stopped stream closes on the server too (at its next write).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while open_ai_sdk_streams(&s).await > 0.0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the stopped stream stays open"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let reader = tokio::spawn({
            let base = s.base.clone();
            async move { sdk_at("resume", &base, "ai-sdk-stop", "").await }
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while open_ai_sdk_streams(&s).await < 1.0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the reader never connected"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Stopping the run is the thread's cancel route: the reader's message ends with `abort`.
        assert_eq!(s.cancel("ai-sdk-stop").await.status, 200);
        let out = reader.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out["resumed"], true, "{out}");
        assert_eq!(out["invalid"], json!([]));
        let chunks = out["chunks"].as_array().unwrap();
        assert!(chunks.iter().any(|c| c["type"] == "abort"), "{out}");
        assert_eq!(chunks.last().unwrap()["finishReason"], "other", "{out}");
        let log = log_of(&s, "ai-sdk-stop").await;
        let run = log
            .iter()
            .find(|e| e["type"] == "run-start")
            .map(|e| e["run"].as_str().unwrap().to_string())
            .unwrap();
        assert!(log.iter().any(|e| e["type"] == "run-finish"
            && e["run"] == run.as_str()
            && e["payload"]["status"] == "cancelled"));
        let text: String = out["message"]["parts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["type"] == "text")
            .map(|p| p["text"].as_str().unwrap())
            .collect();
        assert_eq!(text, expected(&log, &run).text);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_approval_round_trip_through_the_sdk_continues_the_message() {
    bounded(120, async {
        // With its sample workflows the demo offers to delete one: a destructive call, asked.
        let s = Server::start().await;
        let out = sdk("approve", &s, "ai-sdk-approve", "Build me a workflow").await;
        assert_eq!(out["approvalAsked"], true, "{out}");
        let first = &out["first"];
        assert_eq!(first["invalid"], json!([]));
        assert_eq!(
            first["chunks"].as_array().unwrap().last().unwrap()["finishReason"],
            "tool-calls",
            "the message pauses on the approval"
        );
        let log = log_of(&s, "ai-sdk-approve").await;
        let request = log
            .iter()
            .find(|e| e["type"] == "confirmation-request")
            .expect("a confirmation request");
        let answer = log
            .iter()
            .find(|e| e["type"] == "confirmation-answered")
            .expect("the SDK's approval answered it");
        assert_eq!(answer["payload"]["requestId"], request["payload"]["requestId"]);
        assert_eq!(answer["payload"]["approved"], true);
        // The continued message is the whole run, the approved call's output included.
        let run = request["run"].as_str().unwrap();
        assert_message_is_the_run(&out, &expected(&log, run));
        let call = request["payload"]["toolCallId"].as_str().unwrap();
        let part = out["message"]["parts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["toolCallId"] == call)
            .expect("the approved call's part");
        assert_eq!(part["approval"]["approved"], true, "{part}");
        assert_eq!(part["state"], "output-available", "{part}");
        // An approval answered already is a 404, and stores nothing more.
        let again = s
            .post(
                "/api/chat",
                &json!({"id": "ai-sdk-approve", "messages": [{"role": "assistant", "parts": [
                    {"type": "tool-delete-workflow", "toolCallId": call, "state": "approval-responded",
                     "approval": {"id": request["payload"]["requestId"], "approved": false}}]}]}),
            )
            .await;
        let (code, _) = again.client_error("a second answer");
        assert_eq!(
            (again.status, code.as_str()),
            (404, "confirmation_not_found"),
            "{}",
            again.text
        );
        assert_eq!(log_of(&s, "ai-sdk-approve").await.len(), log.len());
    })
    .await
}

/// The user messages' texts and the runs of `log`, in order.
fn asked_and_runs(log: &[Value]) -> (Vec<&str>, Vec<&str>) {
    (
        log.iter()
            .filter(|e| e["type"] == "user-message")
            .map(|e| e["payload"]["text"].as_str().unwrap())
            .collect(),
        log.iter()
            .filter(|e| e["type"] == "run-start")
            .map(|e| e["run"].as_str().unwrap())
            .collect(),
    )
}

/// The run of `log` that the assistant message `out` (chat.mjs's output) is.
fn run_of(out: &Value) -> String {
    out["message"]["id"]
        .as_str()
        .and_then(|id| id.strip_prefix("msg-"))
        .unwrap_or_else(|| panic!("no msg-<run> message id: {out}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regenerate_forks_before_the_message_and_the_chat_id_goes_on_in_the_fork() {
    bounded(180, async {
        // `long`: an answer of text alone, so no run leaves a workflow that the next run would
        // offer to delete (and wait for the approval).
        let s = Server::start_with(no_confirmation()).await;
        let chat = "ai-sdk-regen";
        let out = sdk("regenerate", &s, chat, "Give me a long answer").await;
        for step in ["first", "regenerated", "next", "again"] {
            assert_eq!(out[step]["invalid"], json!([]), "{step}: {out}");
        }
        // The chat's own thread keeps its history: the first answer, and where the chat went.
        let own = log_of(&s, chat).await;
        let first_run = run_of(&out["first"]);
        assert_eq!(
            asked_and_runs(&own),
            (vec!["Give me a long answer"], vec![first_run.as_str()])
        );
        assert_message_is_the_run(&out["first"], &expected(&own, &first_run));
        let moves: Vec<&str> = own
            .iter()
            .filter(|e| e["type"] == "chat-forked")
            .map(|e| e["payload"]["threadId"].as_str().unwrap())
            .collect();
        assert_eq!(moves.len(), 2, "one chat-forked per regenerate: {own:?}");
        let (fork1, fork2) = (moves[0], moves[1]);
        // regenerate(): a fork of the chat's thread before the user message, answered again,
        // and the next message of the same chat id goes on in the fork.
        let threads = s.threads().await.to_string();
        let summary = |id: &str| -> Value {
            let list: Value = serde_json::from_str(&threads).unwrap();
            list.as_array()
                .or_else(|| list["threads"].as_array())
                .unwrap()
                .iter()
                .find(|t| t["id"] == id)
                .unwrap_or_else(|| panic!("no thread {id} in {threads}"))
                .clone()
        };
        assert_eq!(summary(fork1)["forkOf"]["threadId"], chat);
        assert_eq!(summary(fork2)["forkOf"]["threadId"], fork1);
        let log1 = log_of(&s, fork1).await;
        let (regenerated, next) = (run_of(&out["regenerated"]), run_of(&out["next"]));
        assert_eq!(
            asked_and_runs(&log1),
            (
                vec!["Give me a long answer", "And then?"],
                vec![regenerated.as_str(), next.as_str()]
            ),
            "the fork holds the regenerated answer, not the first"
        );
        assert_message_is_the_run(&out["regenerated"], &expected(&log1, &regenerated));
        assert_message_is_the_run(&out["next"], &expected(&log1, &next));
        // regenerate({messageId}) of the regenerated answer: a fork of the fork before it.
        let log2 = log_of(&s, fork2).await;
        let again = run_of(&out["again"]);
        assert_eq!(
            asked_and_runs(&log2),
            (vec!["Give me a long answer"], vec![again.as_str()])
        );
        assert_message_is_the_run(&out["again"], &expected(&log2, &again));
        // Every other protocol still reads the chat id's thread as it was.
        let messages = s.messages(chat).await.to_string();
        assert!(
            messages.contains("Give me a long answer") && !messages.contains("And then?"),
            "{messages}"
        );
        // Resume follows the chat id to its thread (nothing live there now).
        assert_eq!(sdk("resume", &s, chat, "").await, json!({"resumed": false}));
        // An assistant message the chat's thread does not hold, and a chat with nothing to
        // regenerate: 409, nothing stored.
        let stale = s
            .post(
                "/api/chat",
                &json!({"id": chat, "trigger": "regenerate-message", "messageId": format!("msg-{first_run}"),
                        "messages": [{"role": "user", "parts": [{"type": "text", "text": "Give me a long answer"}]}]}),
            )
            .await;
        let (code, _) = stale.client_error("a stale messageId");
        assert_eq!((stale.status, code.as_str()), (409, "fork_point_not_found"), "{}", stale.text);
        let empty = s
            .post(
                "/api/chat",
                &json!({"id": "ai-sdk-regen-empty", "trigger": "regenerate-message", "messages": []}),
            )
            .await;
        let (code, _) = empty.client_error("nothing to regenerate");
        assert_eq!((empty.status, code.as_str()), (409, "fork_point_not_found"), "{}", empty.text);
        assert_eq!(log_of(&s, chat).await.len(), own.len());
        assert_eq!(log_of(&s, fork2).await.len(), log2.len());
        assert!(log_of(&s, "ai-sdk-regen-empty").await.is_empty());
        // A deleted chat is gone: no regenerate, no message, and no fork made.
        let deleted = s
            .delete(&format!("/instance-ai/threads/{chat}"))
            .await;
        assert!(deleted.status < 300, "{}", deleted.text);
        let threads = s.threads().await.to_string().matches("\"forkOf\"").count();
        for trigger in ["regenerate-message", "submit-message"] {
            let r = s
                .post(
                    "/api/chat",
                    &json!({"id": chat, "trigger": trigger,
                            "messages": [{"role": "user", "parts": [{"type": "text", "text": "Again"}]}]}),
                )
                .await;
            let (code, _) = r.client_error(trigger);
            assert_eq!((r.status, code.as_str()), (404, "thread_deleted"), "{}", r.text);
        }
        assert_eq!(s.threads().await.to_string().matches("\"forkOf\"").count(), threads);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_answered_through_the_sdk_continues_the_message() {
    bounded(120, async {
        let s = Server::start_with(no_confirmation()).await;
        let chat = "ai-sdk-questions";
        let answers = json!([
            {"questionId": "trigger", "selectedOptions": ["A webhook"]},
            {"questionId": "channels", "selectedOptions": ["Slack", "Email"]},
            {"questionId": "name", "customText": "Inbox digest"}
        ]);
        // The demo's `questions` keyword asks three questions (one confirmation request).
        let out = sdk_env(
            "answer",
            &s.base,
            chat,
            "Ask me some questions first",
            &[("ANSWER", json!({"answers": answers}).to_string())],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", s.logs()));
        assert_eq!(out["asked"], true, "{out}");
        let first = &out["first"];
        assert_eq!(first["invalid"], json!([]));
        assert_eq!(
            first["chunks"].as_array().unwrap().last().unwrap()["finishReason"],
            "tool-calls",
            "the message pauses on the question"
        );
        let log = log_of(&s, chat).await;
        let request = log
            .iter()
            .find(|e| e["type"] == "confirmation-request")
            .expect("a confirmation request");
        assert_eq!(request["payload"]["inputType"], "questions");
        let request_id = request["payload"]["requestId"].as_str().unwrap();
        let answer = log
            .iter()
            .find(|e| e["type"] == "confirmation-answered")
            .expect("the SDK's message answered it");
        assert_eq!(answer["payload"]["requestId"], request_id);
        assert_eq!(answer["payload"]["approved"], true);
        assert_eq!(answer["payload"]["answers"], answers);
        // The continued message is the whole run: the agent read the answers.
        let run = request["run"].as_str().unwrap();
        let want = expected(&log, run);
        assert!(
            want.text
                .contains("trigger: A webhook; channels: Slack, Email; name: Inbox digest"),
            "{}",
            want.text
        );
        assert_message_is_the_run(&out, &want);
        let part = out["message"]["parts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["type"] == "data-confirmation")
            .expect("the question's part");
        assert_eq!(part["id"], request_id);
        assert_eq!(part["data"]["answer"]["answers"], answers, "{part}");
        // The message as it now is, sent again: nothing left to answer (422); a malformed
        // answer: 422 naming it. Neither stores anything.
        let stored = log.len();
        let again = s
            .post(
                "/api/chat",
                &json!({"id": chat, "messages": [{"role": "assistant", "parts": [part]}]}),
            )
            .await;
        let (code, _) = again.client_error("an answered question");
        assert_eq!((again.status, code.as_str()), (422, "missing_message"), "{}", again.text);
        let bad = s
            .post(
                "/api/chat",
                &json!({"id": chat, "messages": [{"role": "assistant", "parts": [
                    {"type": "data-confirmation", "id": "cr-x", "data": {"answer": {"approved": "yes"}}}]}]}),
            )
            .await;
        let (code, message) = bad.client_error("a malformed answer");
        assert_eq!((bad.status, code.as_str()), (422, "invalid_body"), "{}", bad.text);
        assert!(message.contains("approved"), "{message}");
        assert_eq!(log_of(&s, chat).await.len(), stored);
    })
    .await
}

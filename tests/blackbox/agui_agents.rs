//! Upstream AG-UI agents recorded through threadstream (`--agui-agent NAME=URL`,
//! `POST /agui/agents/{name}/run`; issue #36 part 1), with the ecosystems' own servers: a
//! pydantic-ai agent (`AGUIAdapter` over a `FunctionModel`) and a LangGraph graph through
//! `ag-ui-langgraph` with a fake chat model from `langchain-core`
//! (tests/conformance/agui-agents, pinned there). Each run is checked on the protocols we
//! serve: the AG-UI answer and thread stream by `@ag-ui/core`'s schemas, `verifyEvents` and
//! `ag-ui-validate`; the n8n stream by both n8n schemas and the n8n reducer; the log itself.
//! The upstream failing (refused, stalled, a half-written event, killed mid-stream) ends the run
//! with an error naming it, and `verify` finds the log sound.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// A fixture agent server (a Python process), killed when dropped.
struct Agent {
    child: tokio::process::Child,
    url: String,
}

impl Agent {
    /// Starts `tests/conformance/agui-agents/<script>` on a free port and waits for its
    /// `listening on 127.0.0.1:N` line.
    async fn start(script: &str) -> Agent {
        let dir = conformance_dir().join("agui-agents");
        let python = dir.join(".venv/bin/python");
        assert!(
            python.exists(),
            "the AG-UI agent fixtures are missing: bash tests/conformance/install.sh"
        );
        let mut child = tokio::process::Command::new(python)
            .arg(dir.join(script))
            .args(["--port", "0"])
            .current_dir(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start the agent");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("{script} did not listen within 60 s"))
            .expect("read the agent's stdout")
            .unwrap_or_else(|| panic!("{script} exited before listening"));
        let addr = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("{script} printed {line:?}"))
            .to_string();
        Agent {
            child,
            url: format!("http://{addr}/"),
        }
    }

    async fn kill9(&mut self) {
        self.child.kill().await.expect("kill the agent");
    }
}

/// A server with the named agents (`NAME=URL`) on loopback and a 2 s stall timeout.
async fn server_with(agents: &[(&str, &str)]) -> Server {
    let mut extra_args = vec![
        "--agui-agent-targets".into(),
        "loopback".into(),
        "--agui-agent-timeout-secs".into(),
        "2".into(),
    ];
    for (name, url) in agents {
        extra_args.push("--agui-agent".into());
        extra_args.push(format!("{name}={url}"));
    }
    Server::start_with(Opts {
        extra_args,
        ..Opts::default()
    })
    .await
}

/// A number no other call in this process returns (ids the agents have not seen before).
fn unique() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{n}", std::process::id())
}

/// AG-UI's `RunAgentInput` with one new user message (the history is the log's).
fn input(thread: &str, text: &str, tools: Value) -> Value {
    json!({
        "threadId": thread,
        "runId": format!("run-{}", unique()),
        "state": {},
        "messages": [{"id": "u1", "role": "user", "content": text}],
        "tools": tools,
        "context": [],
        "forwardedProps": {},
    })
}

/// The frontend tool the pydantic agent calls when asked to confirm.
fn confirm_tool() -> Value {
    json!([{
        "name": "confirm_action",
        "description": "Ask the user to confirm",
        "parameters": {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]},
    }])
}

/// `POST /agui/agents/{agent}/run` with `Accept: text/event-stream`: the whole answer (the
/// server closes it after the run's `RUN_FINISHED` / `RUN_ERROR`).
async fn run_streamed(s: &Server, agent: &str, body: &Value) -> String {
    let resp = s
        .sse_client
        .post(s.url(&format!("/agui/agents/{agent}/run")))
        .header("accept", "text/event-stream")
        .json(body)
        .send()
        .await
        .expect("POST run");
    assert_eq!(resp.status().as_u16(), 200, "{}", s.logs());
    tokio::time::timeout(Duration::from_secs(60), resp.text())
        .await
        .unwrap_or_else(|_| panic!("the run's stream did not end within 60 s\n{}", s.logs()))
        .expect("read the stream")
}

/// `POST /agui/agents/{agent}/run` without a stream: the run's id.
async fn run_started(s: &Server, agent: &str, body: &Value) -> String {
    let v = s
        .post(&format!("/agui/agents/{agent}/run"), body)
        .await
        .ok_json("POST /agui/agents/{agent}/run");
    v["runId"].as_str().expect("runId").to_string()
}

/// The text of an AG-UI stream's `TEXT_MESSAGE_CONTENT` deltas, and its event types.
fn agui_text(sse: &str) -> (String, Vec<String>) {
    let events: Vec<Value> = parse_sse(sse).iter().map(|e| e.json()).collect();
    let text = events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    let types = events
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect();
    (text, types)
}

/// The log's events of `run` (export lines).
fn of_run<'a>(log: &'a [Value], run: &str) -> Vec<&'a Value> {
    log.iter().filter(|e| e["run"] == run).collect()
}

/// The run's `run-finish` payload, read off the n8n stream.
async fn finish_of(s: &Server, thread: &str, run: &str) -> (Vec<SseEvent>, Value) {
    let events = s.follow_run(thread, run, |_| None).await;
    let finish = events.last().unwrap().json()["payload"].clone();
    (events, finish)
}

/// The n8n stream of the thread: every event passes both n8n schemas, and each run's history
/// message equals what the n8n reducer folds from its events.
async fn check_n8n(s: &Server, thread: &str, runs: &[String]) {
    let log = crate::ai_sdk::log_of(s, thread).await;
    let last_id = log.iter().map(|e| e["id"].as_i64().unwrap()).max().unwrap();
    let events = s.read_until_id(thread, last_id).await;
    let texts: Vec<String> = events.iter().map(|e| e.data.clone()).collect();
    validate_n8n(&texts).await;
    for run in runs {
        crate::history::check_run(s, thread, run, &events).await;
    }
}

/// The thread's whole AG-UI stream, through every AG-UI checker.
async fn check_agui(s: &Server, thread: &str, answers: Vec<(String, String)>) {
    let log = crate::ai_sdk::log_of(s, thread).await;
    let last_id = log.iter().map(|e| e["id"].as_i64().unwrap()).max().unwrap();
    let whole = crate::agui::capture(s, thread, None, last_id).await;
    let mut streams = answers;
    streams.push((format!("{thread} (thread stream)"), whole));
    crate::agui::check_streams(&streams, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pydantic_ai_agent_is_recorded_and_served_on_every_protocol() {
    bounded(300, async {
        let agent = Agent::start("pydantic_agent.py").await;
        let s = server_with(&[("py", &agent.url)]).await;
        let t = "agui-py";

        // Text with reasoning.
        let first = run_streamed(&s, "py", &input(t, "hi there", json!([]))).await;
        let (text, types) = agui_text(&first);
        assert_eq!(
            text, "Hello from pydantic-ai. You said: hi there",
            "{first}"
        );
        assert!(
            types.contains(&"REASONING_MESSAGE_CONTENT".to_string()),
            "{types:?}"
        );
        assert_eq!(types.last().map(String::as_str), Some("RUN_FINISHED"));

        // A backend tool: the client sends only its new message.
        let second = run_streamed(&s, "py", &input(t, "what is the weather?", json!([]))).await;
        let (text, _) = agui_text(&second);
        assert_eq!(text, "The weather: Sunny in Paris, 21 °C.", "{second}");

        // The upstream got the conversation from the log: three user messages.
        let third = run_streamed(&s, "py", &input(t, "thanks", json!([]))).await;
        let (text, _) = agui_text(&third);
        assert_eq!(
            text, "Hello from pydantic-ai. You said: thanks (3 user messages)",
            "{third}"
        );

        let log = crate::ai_sdk::log_of(&s, t).await;
        let runs: Vec<String> = log
            .iter()
            .filter(|e| e["type"] == "run-start")
            .map(|e| e["run"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(runs.len(), 3);
        let first_run = of_run(&log, &runs[0]);
        assert!(first_run
            .iter()
            .any(|e| e["type"] == "reasoning-delta"
                && e["payload"]["text"] == "The user greeted me; "));
        assert!(first_run.iter().any(|e| e["type"] == "agui-event"
            && e["payload"]["agent"] == "py"
            && e["payload"]["event"]["type"] == "RUN_STARTED"));
        let second_run = of_run(&log, &runs[1]);
        let call = second_run
            .iter()
            .find(|e| e["type"] == "tool-call")
            .expect("the tool call is in the log");
        assert_eq!(call["payload"]["toolName"], "get_weather");
        assert_eq!(call["payload"]["args"], json!({"city": "Paris"}));
        let result = second_run
            .iter()
            .find(|e| e["type"] == "tool-result")
            .expect("its result is in the log");
        assert_eq!(
            result["payload"]["toolCallId"],
            call["payload"]["toolCallId"]
        );
        assert_eq!(result["payload"]["result"], "Sunny in Paris, 21 °C");
        for run in &runs {
            let finish = of_run(&log, run)
                .into_iter()
                .find(|e| e["type"] == "run-finish")
                .expect("run-finish");
            assert_eq!(finish["payload"]["status"], "completed", "{finish}");
        }

        check_n8n(&s, t, &runs).await;
        check_agui(
            &s,
            t,
            vec![
                ("answer 1".into(), first),
                ("answer 2".into(), second),
                ("answer 3".into(), third),
            ],
        )
        .await;
        // The same thread as a Durable Stream (its JSON messages hold the text).
        let ds = s.get(&format!("/v1/threads/{t}?offset=-1")).await;
        assert_eq!(ds.status, 200, "{}", ds.text);
        assert!(ds.text.contains("Sunny in Paris"), "{}", ds.text);
        assert!(cli_on(&s, &["verify"]).await.ok);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frontend_tool_is_a_confirmation_whose_answer_goes_back_upstream() {
    bounded(240, async {
        let agent = Agent::start("pydantic_agent.py").await;
        let s = server_with(&[("py", &agent.url)]).await;
        let t = "agui-frontend";

        // Approved, with the client's answer as the tool's result.
        let run = run_started(&s, "py", &input(t, "please confirm", confirm_tool())).await;
        let mut asked = Vec::new();
        let events = s
            .follow_run(t, &run, |req| {
                asked.push(req.clone());
                Some(json!({"kind": "approval", "approved": true, "userInput": "yes indeed"}))
            })
            .await;
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert_eq!(asked[0]["toolName"], "confirm_action");
        assert_eq!(asked[0]["args"], json!({"question": "Do you confirm?"}));
        let finish = events.last().unwrap().json();
        assert_eq!(finish["payload"]["status"], "completed", "{finish}");
        let log = crate::ai_sdk::log_of(&s, t).await;
        let run_log = of_run(&log, &run);
        let result = run_log
            .iter()
            .find(|e| e["type"] == "tool-result")
            .expect("the answer is the call's result");
        assert_eq!(result["payload"]["result"], "yes indeed");
        let text: String = run_log
            .iter()
            .filter(|e| e["type"] == "text-delta")
            .map(|e| e["payload"]["text"].as_str().unwrap())
            .collect();
        assert_eq!(text, "You answered: yes indeed");

        // Denied: the call's error goes back, and the agent answers it.
        let run2 = run_started(&s, "py", &input(t, "confirm again", confirm_tool())).await;
        let events = s
            .follow_run(t, &run2, |_| {
                Some(json!({"kind": "approval", "approved": false}))
            })
            .await;
        assert_eq!(
            events.last().unwrap().json()["payload"]["status"],
            "completed"
        );
        let log = crate::ai_sdk::log_of(&s, t).await;
        let run_log = of_run(&log, &run2);
        assert!(run_log.iter().any(|e| e["type"] == "tool-error"
            && e["payload"]["error"] == "The user denied this tool call"));
        let text: String = run_log
            .iter()
            .filter(|e| e["type"] == "text-delta")
            .map(|e| e["payload"]["text"].as_str().unwrap())
            .collect();
        assert!(text.starts_with("You answered: "), "{text}");

        check_n8n(&s, t, &[run, run2]).await;
        check_agui(&s, t, vec![]).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_that_drop_mid_run_or_join_late_read_the_upstream_run_exactly() {
    bounded(240, async {
        let agent = Agent::start("pydantic_agent.py").await;
        let s = server_with(&[("py", &agent.url)]).await;
        let t = "agui-readers";
        let run = run_started(&s, "py", &input(t, "go slow", json!([]))).await;

        // A reader from the start that drops after a few events and resumes where it was.
        let mut first = s.sse(t, Cursor::None).await;
        let mut seen = Vec::new();
        while seen.len() < 5 {
            seen.push(
                first
                    .next_event(Duration::from_secs(20))
                    .await
                    .expect("an event"),
            );
        }
        drop(first);
        let resume_at = seen.last().unwrap().id();
        // A second reader that joins while the run is live.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let late_events = async {
            let mut late = s.sse(t, Cursor::None).await;
            late.read_until(Duration::from_secs(30), |e| {
                let v = e.json();
                v["type"] == "run-finish" && v["runId"] == run.as_str()
            })
            .await
        };
        let resumed_events = async {
            let mut resumed = s.sse(t, Cursor::header_id(resume_at)).await;
            resumed
                .read_until(Duration::from_secs(30), |e| {
                    let v = e.json();
                    v["type"] == "run-finish" && v["runId"] == run.as_str()
                })
                .await
        };
        let (late, resumed) = tokio::join!(late_events, resumed_events);
        let ids = |events: &[SseEvent]| events.iter().map(SseEvent::id).collect::<Vec<_>>();
        let mut dropped_then_resumed = ids(&seen);
        dropped_then_resumed.extend(ids(&resumed));
        let log = crate::ai_sdk::log_of(&s, t).await;
        // The n8n stream carries the wire events: the log's, less the internal ones.
        let wire: Vec<i64> = log
            .iter()
            .filter(|e| {
                !matches!(
                    e["type"].as_str(),
                    Some("user-message" | "thread-created" | "agui-event")
                )
            })
            .map(|e| e["id"].as_i64().unwrap())
            .collect();
        assert_eq!(ids(&late), wire, "the late reader");
        assert_eq!(dropped_then_resumed, wire, "the reader that dropped");
        let text: String = late
            .iter()
            .map(|e| e.json())
            .filter(|v| v["type"] == "text-delta")
            .map(|v| v["payload"]["text"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            text,
            (0..20)
                .map(|i| format!("slow piece {i}. "))
                .collect::<String>()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_langgraph_graph_is_recorded_with_its_steps_as_sub_agents() {
    bounded(300, async {
        let agent = Agent::start("langgraph_agent.py").await;
        let s = server_with(&[("graph", &agent.url)]).await;
        let t = format!("agui-lg-{}", unique());
        let first = run_streamed(&s, "graph", &input(&t, "hi graph", json!([]))).await;
        let (text, types) = agui_text(&first);
        assert_eq!(text, "Hello from LangGraph. You said: hi graph", "{first}");
        // The graph's own state and raw events pass through to AG-UI clients.
        for ty in [
            "STATE_SNAPSHOT",
            "RAW",
            "SUBAGENT_STARTED",
            "SUBAGENT_FINISHED",
        ] {
            assert!(types.iter().any(|t| t == ty), "no {ty} in {types:?}");
        }
        let second = run_streamed(&s, "graph", &input(&t, "again", json!([]))).await;
        let (text, _) = agui_text(&second);
        assert_eq!(
            text,
            "Hello from LangGraph. You said: again (2 user messages)"
        );

        let log = crate::ai_sdk::log_of(&s, &t).await;
        let runs: Vec<String> = log
            .iter()
            .filter(|e| e["type"] == "run-start")
            .map(|e| e["run"].as_str().unwrap().to_string())
            .collect();
        let roles: Vec<&str> = of_run(&log, &runs[0])
            .iter()
            .filter(|e| e["type"] == "agent-spawned")
            .map(|e| e["payload"]["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["prepare", "chat"]);
        assert!(of_run(&log, &runs[0]).iter().any(
            |e| e["type"] == "agui-event" && e["payload"]["event"]["type"] == "STATE_SNAPSHOT"
        ));

        check_n8n(&s, &t, &runs).await;
        check_agui(
            &s,
            &t,
            vec![("answer 1".into(), first), ("answer 2".into(), second)],
        )
        .await;
    })
    .await;
}

/// A LangGraph `interrupt()` (ag-ui-langgraph's `on_interrupt` custom event) is asked as a text
/// confirmation on our protocols, recorded as an `interrupt` call whose result is the answer, and
/// the answer resumes the graph (`forwardedProps.command.resume`), which goes on with it. A
/// declined one resumes with `false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_langgraph_interrupt_is_a_confirmation_whose_answer_resumes_the_graph() {
    bounded(300, async {
        let agent = Agent::start("langgraph_agent.py").await;
        let s = server_with(&[("graph", &agent.url)]).await;
        let t = format!("agui-lg-int-{}", unique());
        let text_of = |log: &[Value], run: &str| -> String {
            of_run(log, run)
                .iter()
                .filter(|e| e["type"] == "text-delta")
                .map(|e| e["payload"]["text"].as_str().unwrap())
                .collect()
        };

        let run = run_started(
            &s,
            "graph",
            &input(&t, "please confirm the plan", json!([])),
        )
        .await;
        let mut asked = Vec::new();
        let events = s
            .follow_run(&t, &run, |req| {
                asked.push(req.clone());
                Some(json!({"kind": "approval", "approved": true, "userInput": "go ahead"}))
            })
            .await;
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert_eq!(asked[0]["toolName"], "interrupt");
        assert_eq!(asked[0]["inputType"], "text");
        assert_eq!(
            asked[0]["message"],
            "May I go on with: please confirm the plan?"
        );
        let finish = events.last().unwrap().json();
        assert_eq!(finish["payload"]["status"], "completed", "{finish}");
        let log = crate::ai_sdk::log_of(&s, &t).await;
        let run_log = of_run(&log, &run);
        let call = run_log
            .iter()
            .find(|e| e["type"] == "tool-call")
            .expect("the interrupt is a call");
        assert_eq!(call["payload"]["toolName"], "interrupt");
        let result = run_log
            .iter()
            .find(|e| e["type"] == "tool-result")
            .expect("the answer is the call's result");
        assert_eq!(
            result["payload"]["toolCallId"],
            call["payload"]["toolCallId"]
        );
        assert_eq!(result["payload"]["result"], "go ahead");
        assert_eq!(text_of(&log, &run), "You answered: go ahead");
        // The upstream's own event passes through to AG-UI clients as it sent it.
        assert!(run_log.iter().any(|e| e["type"] == "agui-event"
            && e["payload"]["event"]["type"] == "CUSTOM"
            && e["payload"]["event"]["name"] == "on_interrupt"));

        // Declined: the graph is resumed with `false`.
        let run2 = run_started(&s, "graph", &input(&t, "confirm once more", json!([]))).await;
        let events = s
            .follow_run(&t, &run2, |_| {
                Some(json!({"kind": "approval", "approved": false}))
            })
            .await;
        assert_eq!(
            events.last().unwrap().json()["payload"]["status"],
            "completed"
        );
        let log = crate::ai_sdk::log_of(&s, &t).await;
        assert!(of_run(&log, &run2).iter().any(|e| e["type"] == "tool-error"
            && e["payload"]["toolCallId"]
                .as_str()
                .is_some_and(|id| id.starts_with("interrupt-"))));
        // The interrupt's call is not sent upstream as the graph's own message: the graph
        // counts only the user messages it got.
        assert_eq!(
            text_of(&log, &run2),
            "You answered: False (2 user messages)"
        );

        check_n8n(&s, &t, &[run, run2]).await;
        check_agui(&s, &t, vec![]).await;
    })
    .await;
}

/// A one-shot upstream on loopback that answers every request with `answer` (the status line,
/// headers and as much body as it writes), then holds the connection open for `hold` or closes
/// it. Returns its URL; `closed` gets a message when a client goes away while it holds.
async fn scripted_upstream(
    answer: &'static str,
    hold: Duration,
    closed: Option<tokio::sync::mpsc::UnboundedSender<()>>,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let closed = closed.clone();
            tokio::spawn(async move {
                // The request's head and body (small): read what comes in the first moments.
                let mut buf = vec![0u8; 65536];
                let _ = tokio::time::timeout(Duration::from_millis(300), conn.read(&mut buf)).await;
                let _ = conn.write_all(answer.as_bytes()).await;
                let _ = conn.flush().await;
                let gone = tokio::time::timeout(hold, async {
                    loop {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                    }
                })
                .await;
                if gone.is_ok() {
                    if let Some(c) = closed {
                        let _ = c.send(());
                    }
                }
            });
        }
    });
    format!("http://{addr}/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_upstream_ends_the_run_with_a_clear_error_and_a_sound_log() {
    bounded(300, async {
        // A port nothing listens on: bound (so no other socket of the suite takes it) but never
        // listening, so a connection is refused.
        let held = tokio::net::TcpSocket::new_v4().unwrap();
        held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let refused = format!("http://{}/", held.local_addr().unwrap());
        let stall = scripted_upstream(
            concat!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
                "data: {\"type\":\"RUN_STARTED\",\"threadId\":\"x\",\"runId\":\"y\"}\n\n"
            ),
            Duration::from_secs(60),
            None,
        )
        .await;
        let half = scripted_upstream(
            concat!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
                "data: {\"type\":\"RUN_STARTED\",\"threadId\":\"x\",\"runId\":\"y\"}\n\n",
                "data: {\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"hal"
            ),
            Duration::ZERO,
            None,
        )
        .await;
        let refuses = scripted_upstream(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\ncontent-length: 9\r\nconnection: close\r\n\r\nno model!",
            Duration::ZERO,
            None,
        )
        .await;
        let mut killed = Agent::start("pydantic_agent.py").await;
        let s = server_with(&[
            ("refused", &refused),
            ("stall", &stall),
            ("half", &half),
            ("refuses", &refuses),
            ("killed", &killed.url),
        ])
        .await;

        let cases = [
            ("refused", "cannot connect"),
            ("stall", "no event for 2 s"),
            ("half", "not a JSON object"),
            ("refuses", "HTTP 500 Internal Server Error: no model!"),
        ];
        for (agent, says) in cases {
            let t = format!("agui-fail-{agent}");
            let run = run_started(&s, agent, &input(&t, "hello", json!([]))).await;
            let (events, finish) = finish_of(&s, &t, &run).await;
            assert_eq!(finish["status"], "error", "{agent}: {finish}");
            let error = events
                .iter()
                .map(|e| e.json())
                .find(|v| v["type"] == "error")
                .unwrap_or_else(|| panic!("{agent}: no error event"));
            let message = error["payload"]["content"].as_str().unwrap();
            assert!(
                message.contains(&format!("AG-UI agent '{agent}'")) && message.contains(says),
                "{agent}: {message}"
            );
        }

        // Killed mid-stream: the run had text, then the stream broke.
        let t = "agui-fail-killed";
        let run = run_started(&s, "killed", &input(t, "go slow", json!([]))).await;
        let mut sse = s.sse(t, Cursor::None).await;
        sse.read_until(Duration::from_secs(20), |e| e.json()["type"] == "text-delta")
            .await;
        killed.kill9().await;
        let (events, finish) = finish_of(&s, t, &run).await;
        assert_eq!(finish["status"], "error", "{finish}");
        let error = events
            .iter()
            .map(|e| e.json())
            .find(|v| v["type"] == "error")
            .expect("an error event");
        let message = error["payload"]["content"].as_str().unwrap();
        assert!(
            message.contains("AG-UI agent 'killed'")
                && (message.contains("broke off") || message.contains("ended before RUN_FINISHED")),
            "{message}"
        );

        let verify = cli_on(&s, &["verify"]).await;
        assert!(verify.ok, "{}\n{}", verify.stdout, verify.stderr);
        // The AG-UI streams of the failed runs end in RUN_ERROR and pass the checkers.
        for (agent, _) in cases {
            check_agui(&s, &format!("agui-fail-{agent}"), vec![]).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_aborts_the_upstream_request_and_a_restart_interrupts_the_run() {
    bounded(300, async {
        let (closed_tx, mut closed_rx) = tokio::sync::mpsc::unbounded_channel();
        let held = scripted_upstream(
            concat!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
                "data: {\"type\":\"RUN_STARTED\",\"threadId\":\"x\",\"runId\":\"y\"}\n\n",
                "data: {\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\",\"role\":\"assistant\"}\n\n",
                "data: {\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"thinking...\"}\n\n"
            ),
            Duration::from_secs(60),
            Some(closed_tx),
        )
        .await;
        let agent = Agent::start("pydantic_agent.py").await;
        let mut s = Server::start_with(Opts {
            extra_args: vec![
                "--agui-agent-targets".into(),
                "loopback".into(),
                "--agui-agent".into(),
                format!("held={held}"),
                "--agui-agent".into(),
                format!("py={}", agent.url),
            ],
            ..Opts::default()
        })
        .await;

        // Cancel: the run ends as cancelled and the upstream sees its client go.
        let t = "agui-cancel";
        let run = run_started(&s, "held", &input(t, "hello", json!([]))).await;
        let mut sse = s.sse(t, Cursor::None).await;
        sse.read_until(Duration::from_secs(20), |e| e.json()["type"] == "text-delta")
            .await;
        s.cancel(t).await.ok_json("cancel");
        let (_, finish) = finish_of(&s, t, &run).await;
        assert_eq!(finish["status"], "cancelled", "{finish}");
        tokio::time::timeout(Duration::from_secs(10), closed_rx.recv())
            .await
            .expect("the upstream request was closed within 10 s of the cancel")
            .expect("closed");

        // A kill -9 of threadstream mid-run: after the restart the run is finished as
        // interrupted, as the built-in agent's runs are.
        let t = "agui-killed-server";
        let run = run_started(&s, "py", &input(t, "go slow", json!([]))).await;
        let mut sse = s.sse(t, Cursor::None).await;
        sse.read_until(Duration::from_secs(20), |e| e.json()["type"] == "text-delta")
            .await;
        drop(sse);
        s.kill9();
        s.restart().await;
        let (_, finish) = finish_of(&s, t, &run).await;
        assert_eq!(finish["status"], "error", "{finish}");
        assert_eq!(finish["reason"], "interrupted", "{finish}");
        let verify = cli_on(&s, &["verify"]).await;
        assert!(verify.ok, "{}\n{}", verify.stdout, verify.stderr);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_and_forbidden_upstreams_get_clear_errors() {
    bounded(120, async {
        let s = server_with(&[("py", "http://127.0.0.1:9/")]).await;
        let r = s
            .post("/agui/agents/nobody/run", &input("t-bad", "hi", json!([])))
            .await;
        let (code, message) = r.client_error("unknown agent");
        assert_eq!((r.status, code.as_str()), (404, "not_found"), "{}", r.text);
        assert!(message.contains("nobody"), "{message}");
        let r = s
            .post(
                "/agui/agents/py/run",
                &json!({"threadId": "t-bad", "messages": [{"id": "a", "role": "assistant", "content": "x"}]}),
            )
            .await;
        let (code, _) = r.client_error("no user message");
        assert_eq!((r.status, code.as_str()), (422, "no_user_message"), "{}", r.text);
        assert!(crate::ai_sdk::log_of(&s, "t-bad").await.is_empty(), "nothing stored");

        // A loopback agent needs `--agui-agent-targets loopback`; the server says so and exits.
        let out = cli(&[
            "serve".into(),
            "--data-dir".into(),
            tempfile::tempdir().unwrap().path().display().to_string(),
            "--addr".into(),
            "127.0.0.1:0".into(),
            "--agui-agent".into(),
            "py=http://127.0.0.1:9/".into(),
        ])
        .await;
        assert!(!out.ok);
        assert!(out.stderr.contains("--agui-agent-targets loopback"), "{}", out.stderr);
        let out = cli(&[
            "serve".into(),
            "--data-dir".into(),
            tempfile::tempdir().unwrap().path().display().to_string(),
            "--agui-agent".into(),
            "bad name=http://example.com/".into(),
        ])
        .await;
        assert!(!out.ok);
        assert!(out.stderr.contains("an AG-UI agent's name"), "{}", out.stderr);
    })
    .await;
}

/// The stream a client of `POST /agui/agents/{name}/run` reads is served off the log: cut
/// anywhere, `GET /api/v1/agent/runs/{thread}/events` with the last id it saw gives the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_stream_resumes_from_the_log() {
    bounded(180, async {
        let agent = Agent::start("pydantic_agent.py").await;
        let s = server_with(&[("py", &agent.url)]).await;
        let t = "agui-resume";
        let resp = s
            .sse_client
            .post(s.url("/agui/agents/py/run"))
            .header("accept", "text/event-stream")
            .json(&input(t, "go slow", json!([])))
            .send()
            .await
            .unwrap();
        let mut body = resp.bytes_stream();
        let mut text = String::new();
        let mut parser = SseParser::new();
        let mut last_id = None;
        while last_id.is_none_or(|_| text.matches("TEXT_MESSAGE_CONTENT").count() < 3) {
            let chunk = body.next().await.expect("more").expect("read");
            text.push_str(std::str::from_utf8(&chunk).unwrap());
            for item in parser.push(&chunk) {
                if let SseItem::Event(e) = item {
                    if let Some(id) = e.id_field {
                        last_id = Some(id.parse::<i64>().unwrap());
                    }
                }
            }
        }
        drop(body);
        let log_last = loop {
            let log = crate::ai_sdk::log_of(&s, t).await;
            if log.iter().any(|e| e["type"] == "run-finish") {
                break log.iter().map(|e| e["id"].as_i64().unwrap()).max().unwrap();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let rest = crate::agui::capture(&s, t, last_id, log_last).await;
        // The resumed stream re-opens the text message with its content so far (AG-UI's join
        // prelude), then goes on: together the two hold the whole answer.
        let (resumed_text, types) = agui_text(&rest);
        let (first_text, _) = agui_text(&text);
        let whole: String = (0..20).map(|i| format!("slow piece {i}. ")).collect();
        assert!(whole.starts_with(&first_text), "{first_text}");
        assert!(whole.ends_with(&resumed_text), "{resumed_text}");
        assert!(first_text.len() + resumed_text.len() >= whole.len());
        assert_eq!(types.last().map(String::as_str), Some("RUN_FINISHED"));
    })
    .await;
}

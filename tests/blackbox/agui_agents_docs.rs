//! The two agent snippets of docs/integrations.md ("AG-UI agents: pydantic-ai, LangGraph"), run
//! as written: each `# agent.py` / `# graph.py` block is copied unchanged into a temp dir and
//! served by `uvicorn` (from tests/conformance/agui-agents/.venv, the pins of the doc's `pip`
//! lines), its OpenAI client pointed by `OPENAI_BASE_URL` at a fake OpenAI server in this test.
//! The fake speaks both of OpenAI's streaming wire formats: the Responses API (pydantic-ai's
//! `openai:` models) and chat completions (langchain-openai's `ChatOpenAI`). threadstream runs
//! the snippet as `--agui-agent assistant=…` and the doc's `curl` body starts a run; a second
//! message on the same thread shows the agent gets the first exchange from the log.

use crate::common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use common::*;
use serde_json::{json, Value};

/// docs/integrations.md.
fn doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/integrations.md"))
        .expect("docs/integrations.md")
}

/// The section "AG-UI agents: pydantic-ai, LangGraph" (up to the next `## `).
fn section(doc: &str) -> &str {
    let start = doc
        .find("\n## AG-UI agents: pydantic-ai, LangGraph\n")
        .expect("the AG-UI agents section");
    let rest = &doc[start + 1..];
    &rest[..rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3)]
}

/// The fenced ```python block whose first line is `# {file}`, as written, and the `pip install`
/// line of the paragraph before it.
fn snippet(file: &str) -> (String, String) {
    let doc = doc();
    let section = section(&doc);
    let opening = format!("```python\n# {file}\n");
    let at = section
        .find(&opening)
        .unwrap_or_else(|| panic!("no python block starting `# {file}` in the section"));
    let code = &section[at + "```python\n".len()..];
    let code = &code[..code.find("\n```").expect("the block's end") + 1];
    let before = &section[..at];
    let pip = &before[before
        .rfind("`pip install ")
        .expect("a pip line before the block")
        + 1..];
    let pip = &pip[..pip.find('`').expect("the pip line's end")];
    (code.to_string(), pip.to_string())
}

/// The JSON body of the section's `curl … -d '…'` line.
fn documented_body() -> Value {
    let doc = doc();
    let section = section(&doc);
    let at = section.find(" -d '").expect("the curl line's body") + " -d '".len();
    let body = &section[at..];
    let body = &body[..body.find('\'').expect("the body's end")];
    serde_json::from_str(body).unwrap_or_else(|e| panic!("the doc's body {body:?}: {e}"))
}

/// Every package of the doc's `pip install` line is pinned at the version
/// tests/conformance/agui-agents/requirements.txt installs (extras aside).
fn assert_pinned_as_tested(pip: &str) {
    let requirements =
        std::fs::read_to_string(conformance_dir().join("agui-agents/requirements.txt"))
            .expect("agui-agents/requirements.txt");
    let base = |pin: &str| -> (String, String) {
        let (name, version) = pin
            .trim_matches('"')
            .split_once("==")
            .unwrap_or_else(|| panic!("{pin:?} of `{pip}` is not pinned"));
        let name = name.split('[').next().unwrap().to_lowercase();
        (name, version.to_string())
    };
    let installed: Vec<(String, String)> = requirements
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(base)
        .collect();
    for pin in pip.split_whitespace().skip(2) {
        let pin = base(pin);
        assert!(
            installed.contains(&pin),
            "`{pip}`: {pin:?} is not what requirements.txt installs ({installed:?})"
        );
    }
}

// ---- The fake OpenAI server ----

/// What the fake model answers to the conversation's `n`th user message (1-based).
fn answer_to(n: usize) -> &'static [&'static str] {
    match n {
        1 => &["Sunny ", "and ", "mild."],
        _ => &["Cooler ", "tomorrow, ", "with ", "rain."],
    }
}

/// Every request the fake got: its path and JSON body.
type Requests = Arc<Mutex<Vec<(String, Value)>>>;

/// An OpenAI-compatible server on a loopback port: `POST /v1/chat/completions` and
/// `POST /v1/responses`, streamed (`stream: true`, as OpenAI streams them) or not.
struct FakeOpenAi {
    addr: std::net::SocketAddr,
    requests: Requests,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeOpenAi {
    async fn start() -> FakeOpenAi {
        let requests = Requests::default();
        let app = Router::new()
            .route("/v1/chat/completions", post(answer))
            .route("/v1/responses", post(answer))
            .with_state(requests.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeOpenAi {
            addr,
            requests,
            task,
        }
    }

    fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    fn requests(&self) -> Vec<(String, Value)> {
        self.requests.lock().unwrap().clone()
    }
}

/// The conversation a request carries, as (role, text): chat completions' `messages` or the
/// Responses API's `input` (system and developer turns, tool items and instructions left out).
fn conversation(body: &Value) -> Vec<(String, String)> {
    let items = body["messages"]
        .as_array()
        .or_else(|| body["input"].as_array())
        .cloned()
        .unwrap_or_default();
    items
        .iter()
        .filter_map(|m| {
            let role = m["role"].as_str()?;
            if role != "user" && role != "assistant" {
                return None;
            }
            let text = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
                _ => return None,
            };
            Some((role.to_string(), text))
        })
        .collect()
}

async fn answer(State(requests): State<Requests>, uri: Uri, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    requests
        .lock()
        .unwrap()
        .push((uri.path().to_string(), body.clone()));
    let users = conversation(&body)
        .iter()
        .filter(|(role, _)| role == "user")
        .count();
    let chunks = answer_to(users);
    let streamed = body["stream"] == true;
    let (content_type, text) = match (uri.path().ends_with("/responses"), streamed) {
        (false, true) => ("text/event-stream", chat_stream(&body, chunks)),
        (false, false) => ("application/json", chat_completion(chunks).to_string()),
        (true, true) => ("text/event-stream", responses_stream(chunks)),
        (true, false) => (
            "application/json",
            response_object("completed", vec![message_item(chunks)]).to_string(),
        ),
    };
    Response::builder()
        .status(200)
        .header("content-type", content_type)
        .body(Body::from(text))
        .unwrap()
}

fn usage_chat() -> Value {
    json!({"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16})
}

/// Chat completions, streamed: a chunk per piece (the first with the role), one with
/// `finish_reason: stop`, the usage chunk when `stream_options.include_usage` asks for it, `[DONE]`.
fn chat_stream(request: &Value, chunks: &[&str]) -> String {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
            "model": "gpt-4o-mini", "system_fingerprint": null,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    };
    let mut frames: Vec<Value> = chunks
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let delta = if i == 0 {
                json!({"role": "assistant", "content": text})
            } else {
                json!({"content": text})
            };
            chunk(delta, Value::Null)
        })
        .collect();
    frames.push(chunk(json!({}), json!("stop")));
    if request["stream_options"]["include_usage"] == true {
        let mut usage = chunk(json!({}), Value::Null);
        usage["choices"] = json!([]);
        usage["usage"] = usage_chat();
        frames.push(usage);
    }
    let mut out: String = frames.iter().map(|f| format!("data: {f}\n\n")).collect();
    out.push_str("data: [DONE]\n\n");
    out
}

/// Chat completions, not streamed.
fn chat_completion(chunks: &[&str]) -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
        "choices": [{
            "index": 0, "logprobs": null, "finish_reason": "stop",
            "message": {"role": "assistant", "content": chunks.concat(), "refusal": null},
        }],
        "usage": usage_chat(),
    })
}

/// The Responses API's finished assistant message.
fn message_item(chunks: &[&str]) -> Value {
    json!({
        "id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": chunks.concat(), "annotations": []}],
    })
}

/// The Responses API's `response` object.
fn response_object(status: &str, output: Vec<Value>) -> Value {
    let usage = (status == "completed").then(|| {
        json!({
            "input_tokens": 12, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 16,
        })
    });
    json!({
        "id": "resp_1", "object": "response", "created_at": 0, "status": status,
        "model": "gpt-4o-mini", "output": output, "error": null, "incomplete_details": null,
        "instructions": null, "metadata": {}, "parallel_tool_calls": true, "temperature": 1.0,
        "top_p": 1.0, "tool_choice": "auto", "tools": [], "usage": usage,
    })
}

/// The Responses API, streamed: `response.created`, the message item and its text part added,
/// a `response.output_text.delta` per piece, the part and item done, `response.completed`; each an
/// SSE event named after its `type`, numbered by `sequence_number`.
fn responses_stream(chunks: &[&str]) -> String {
    let text = chunks.concat();
    let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": []});
    let at = json!({"item_id": "msg_1", "output_index": 0, "content_index": 0});
    let with = |mut v: Value, extra: &Value| {
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    let mut events = vec![
        json!({"type": "response.created", "response": response_object("in_progress", vec![])}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {
            "id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant",
            "content": [],
        }}),
        with(
            json!({"type": "response.content_part.added", "part": part("")}),
            &at,
        ),
    ];
    for delta in chunks {
        events.push(with(
            json!({"type": "response.output_text.delta", "delta": delta, "logprobs": []}),
            &at,
        ));
    }
    events.extend([
        with(
            json!({"type": "response.output_text.done", "text": text, "logprobs": []}),
            &at,
        ),
        with(
            json!({"type": "response.content_part.done", "part": part(&text)}),
            &at,
        ),
        json!({"type": "response.output_item.done", "output_index": 0, "item": message_item(chunks)}),
        json!({"type": "response.completed", "response": response_object("completed", vec![message_item(chunks)])}),
    ]);
    events
        .into_iter()
        .enumerate()
        .map(|(i, mut e)| {
            e["sequence_number"] = json!(i);
            format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())
        })
        .collect()
}

// ---- The snippet, served ----

/// `uvicorn {module}:app` in `dir` on a free loopback port, killed when dropped.
struct Uvicorn {
    _child: tokio::process::Child,
    url: String,
    log: std::path::PathBuf,
}

impl Uvicorn {
    async fn start(dir: &std::path::Path, module: &str, openai_base: &str) -> Uvicorn {
        let uvicorn = conformance_dir().join("agui-agents/.venv/bin/uvicorn");
        assert!(
            uvicorn.exists(),
            "{} is missing: bash tests/conformance/install.sh",
            uvicorn.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = dir.join(format!("{module}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let mut child = tokio::process::Command::new(&uvicorn)
            .args([&format!("{module}:app"), "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .current_dir(dir)
            .env("OPENAI_BASE_URL", openai_base)
            .env("OPENAI_API_KEY", "sk-test")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .expect("start uvicorn");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                break;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "uvicorn {module}:app exited ({status}):\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "uvicorn {module}:app did not listen within 90 s:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Uvicorn {
            _child: child,
            url: format!("http://127.0.0.1:{port}/"),
            log,
        }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// `POST /agui/agents/assistant/run` with `Accept: text/event-stream`: the whole answer.
async fn run_streamed(s: &Server, agent: &Uvicorn, body: &Value) -> String {
    let resp = s
        .sse_client
        .post(s.url("/agui/agents/assistant/run"))
        .header("accept", "text/event-stream")
        .json(body)
        .send()
        .await
        .expect("POST /agui/agents/assistant/run");
    assert_eq!(resp.status().as_u16(), 200, "{}", s.logs());
    tokio::time::timeout(Duration::from_secs(90), resp.text())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the run's stream did not end within 90 s\n{}\n{}",
                s.logs(),
                agent.output()
            )
        })
        .expect("read the stream")
}

/// Runs the snippet `file` (`agent.py` / `graph.py`) as written against the fake, through
/// threadstream: two messages on the doc's thread.
async fn run_the_snippet(file: &str) {
    let (code, pip) = snippet(file);
    assert_pinned_as_tested(&pip);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(file), &code).unwrap();
    let fake = FakeOpenAi::start().await;
    let module = file.trim_end_matches(".py");
    let agent = Uvicorn::start(dir.path(), module, &fake.base_url()).await;
    let s = Server::start_with(Opts {
        extra_args: vec![
            "--agui-agent".into(),
            format!("assistant={}", agent.url),
            "--agui-agent-targets".into(),
            "loopback".into(),
        ],
        ..Opts::default()
    })
    .await;

    let first_body = documented_body();
    let thread = first_body["threadId"]
        .as_str()
        .expect("threadId")
        .to_string();
    let question = first_body["messages"][0]["content"]
        .as_str()
        .expect("the message's text")
        .to_string();
    let follow_up = "And tomorrow?";
    let second_body = json!({
        "threadId": thread,
        "messages": [{"id": "2", "role": "user", "content": follow_up}],
    });
    let mut answers = Vec::new();
    for (body, answer) in [(&first_body, answer_to(1)), (&second_body, answer_to(2))] {
        let sse = run_streamed(&s, &agent, body).await;
        let events: Vec<Value> = parse_sse(&sse).iter().map(|e| e.json()).collect();
        let text: String = events
            .iter()
            .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
            .filter_map(|e| e["delta"].as_str())
            .collect();
        let ctx = || format!("{sse}\n{}\n{}", s.logs(), agent.output());
        assert_eq!(text, answer.concat(), "{}", ctx());
        assert_eq!(
            events.last().map(|e| e["type"].clone()),
            Some(json!("RUN_FINISHED")),
            "{}",
            ctx()
        );
        answers.push(sse);
    }

    // The log holds both runs: their text as `text-delta`s, each finished `completed`.
    let log = crate::ai_sdk::log_of(&s, &thread).await;
    let runs: Vec<&str> = log
        .iter()
        .filter(|e| e["type"] == "run-start")
        .map(|e| e["run"].as_str().unwrap())
        .collect();
    assert_eq!(runs.len(), 2, "{log:#?}");
    for (run, answer) in runs.iter().zip([answer_to(1), answer_to(2)]) {
        let of_run: Vec<&Value> = log.iter().filter(|e| e["run"] == *run).collect();
        let text: String = of_run
            .iter()
            .filter(|e| e["type"] == "text-delta")
            .map(|e| e["payload"]["text"].as_str().unwrap())
            .collect();
        assert_eq!(text, answer.concat(), "{of_run:#?}");
        let finish = of_run
            .iter()
            .find(|e| e["type"] == "run-finish")
            .expect("run-finish");
        assert_eq!(finish["payload"]["status"], "completed", "{finish}");
    }

    // The model got the user's text, and then the first exchange (from the log) before the new
    // message: the client sent only that.
    let requests = fake.requests();
    let expected_path = if file == "agent.py" {
        "/v1/responses" // pydantic-ai's `openai:` models use the Responses API
    } else {
        "/v1/chat/completions"
    };
    assert_eq!(requests.len(), 2, "{requests:#?}");
    for (path, body) in &requests {
        assert_eq!(path, expected_path);
        assert_eq!(body["model"], "gpt-4o-mini", "{body}");
        assert_eq!(body["stream"], true, "{body}");
    }
    let turn = |role: &str, text: &str| (role.to_string(), text.to_string());
    assert_eq!(
        conversation(&requests[0].1),
        vec![turn("user", &question)],
        "{}",
        requests[0].1
    );
    assert_eq!(
        conversation(&requests[1].1),
        vec![
            turn("user", &question),
            turn("assistant", &answer_to(1).concat()),
            turn("user", follow_up),
        ],
        "the second model call did not get exactly the first exchange, then the new message \
         (an upstream that keeps its own memory, as ag-ui-langgraph's checkpointer does, merges \
         the messages it is sent by id: an answer resent under another id than the one it \
         streamed is a second copy): {}",
        requests[1].1
    );
    assert!(cli_on(&s, &["verify"]).await.ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_pydantic_ai_agent_runs_as_written() {
    bounded(300, run_the_snippet("agent.py")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_langgraph_graph_runs_as_written() {
    bounded(300, run_the_snippet("graph.py")).await;
}

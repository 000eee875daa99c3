//! Test support: a fake LLM provider that is a real HTTP server (axum on 127.0.0.1:0) speaking
//! the OpenAI chat-completions and Anthropic messages streaming formats from a per-test script,
//! a runtime over a real SQLite log, and the n8n schema check of every stored event.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use futures::StreamExt;
use serde_json::{json, Value};
use threadstream_agent::{AgentRuntime, HttpSettings, RuntimeConfig};
use threadstream_domain::{StoredEvent, ThreadCommand};
use threadstream_store::{Durability, EventLog};
use tokio::io::AsyncWriteExt;

/// One scripted answer of the fake provider.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A plain HTTP answer (errors).
    Status {
        code: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// A `text/event-stream` body, frame by frame with `delay` before each; with `hang` the
    /// body then stays open (sending a keep-alive comment now and then) until the client goes.
    Stream {
        frames: Vec<String>,
        delay: Duration,
        hang: bool,
    },
    /// The frames, then the body stays open and silent.
    Stall(Vec<String>),
}

impl Reply {
    pub fn stream(frames: Vec<String>) -> Reply {
        Reply::Stream {
            frames,
            delay: Duration::from_millis(1),
            hang: false,
        }
    }
    pub fn status(code: u16, body: &str) -> Reply {
        Reply::Status {
            code,
            headers: vec![],
            body: body.to_string(),
        }
    }
}

type Responder = Box<dyn Fn(&Value) -> Reply + Send + Sync>;

#[derive(Default)]
struct FakeState {
    script: Mutex<VecDeque<Reply>>,
    /// When set, answers every request from its body (concurrent callers, any order).
    responder: Option<Responder>,
    requests: Mutex<Vec<(String, HeaderMap, Value)>>,
    /// Streamed bodies that were dropped before they were sent whole (the client went away).
    closed_early: AtomicUsize,
    /// Streamed bodies sent whole.
    completed: AtomicUsize,
    /// Title requests answered (not in `requests`).
    title_requests: AtomicUsize,
}

/// The fake provider: a real HTTP server on a loopback port.
pub struct FakeLlm {
    pub addr: SocketAddr,
    state: Arc<FakeState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct BodyGuard {
    state: Arc<FakeState>,
    done: bool,
}

impl BodyGuard {
    fn complete(&mut self) {
        self.done = true;
    }
}

impl Drop for BodyGuard {
    fn drop(&mut self) {
        if self.done {
            self.state.completed.fetch_add(1, Ordering::SeqCst);
        } else {
            self.state.closed_early.fetch_add(1, Ordering::SeqCst);
        }
    }
}

async fn handle(
    State(state): State<Arc<FakeState>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    let json: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    // Title requests run beside a run's first model call: answered here, in the provider's
    // format, outside the test's script and request list.
    let system = json["system"]
        .as_str()
        .or_else(|| json["messages"][0]["content"].as_str())
        .unwrap_or("");
    if system == threadstream_agent::title::TITLE_PROMPT {
        let message = json["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_str())
            .unwrap_or("")
            .to_string();
        state.title_requests.fetch_add(1, Ordering::SeqCst);
        let title = format!("\"Fake title: {message}\".");
        let reply = if uri.path().ends_with("/messages") {
            anth_answer(&title)
        } else {
            oai_answer(&title)
        };
        let Reply::Stream { frames, .. } = reply else {
            unreachable!()
        };
        return Response::builder()
            .status(200)
            .header("content-type", "text/event-stream")
            .body(Body::from(frames.concat()))
            .unwrap();
    }
    state
        .requests
        .lock()
        .unwrap()
        .push((uri.path().to_string(), headers, json.clone()));
    let reply = match &state.responder {
        Some(f) => Some(f(&json)),
        None => state.script.lock().unwrap().pop_front(),
    };
    match reply {
        None => Response::builder()
            .status(500)
            .body(Body::from(
                "{\"error\":{\"message\":\"the test script is exhausted\"}}",
            ))
            .unwrap(),
        Some(Reply::Status {
            code,
            headers,
            body,
        }) => {
            let mut b = Response::builder().status(StatusCode::from_u16(code).unwrap());
            for (k, v) in headers {
                b = b.header(k, v);
            }
            b.header("content-type", "application/json")
                .body(Body::from(body))
                .unwrap()
        }
        Some(Reply::Stall(frames)) => {
            let stream = futures::stream::iter(
                frames
                    .into_iter()
                    .map(|f| Ok::<_, std::convert::Infallible>(bytes::Bytes::from(f))),
            )
            .chain(futures::stream::pending());
            Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap()
        }
        Some(Reply::Stream {
            frames,
            delay,
            hang,
        }) => {
            let guard = BodyGuard {
                state: state.clone(),
                done: false,
            };
            let frames: VecDeque<String> = frames.into();
            let stream = futures::stream::unfold(
                (frames, guard),
                move |(mut frames, mut guard)| async move {
                    tokio::time::sleep(delay).await;
                    match frames.pop_front() {
                        Some(f) => Some((
                            Ok::<_, std::convert::Infallible>(bytes::Bytes::from(f)),
                            (frames, guard),
                        )),
                        None if hang => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            Some((Ok(bytes::Bytes::from(": keep-alive\n\n")), (frames, guard)))
                        }
                        None => {
                            guard.complete();
                            None
                        }
                    }
                },
            );
            Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap()
        }
    }
}

impl FakeLlm {
    pub async fn start(script: Vec<Reply>) -> FakeLlm {
        let state = FakeState::default();
        state.script.lock().unwrap().extend(script);
        Self::serve(state).await
    }

    /// A fake that answers each request with `f(body)`.
    pub async fn start_with(f: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> FakeLlm {
        Self::serve(FakeState {
            responder: Some(Box::new(f)),
            ..FakeState::default()
        })
        .await
    }

    async fn serve(state: FakeState) -> FakeLlm {
        let state = Arc::new(state);
        let app = Router::new()
            .route("/v1/chat/completions", post(handle))
            .route("/v1/messages", post(handle))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeLlm { addr, state, task }
    }

    /// `http://127.0.0.1:port/v1` (OpenAI base) — Anthropic's base is without `/v1`.
    pub fn openai_base(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
    pub fn anthropic_base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn push(&self, replies: Vec<Reply>) {
        self.state.script.lock().unwrap().extend(replies);
    }

    /// The JSON bodies received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.state
            .requests
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.2.clone())
            .collect()
    }

    pub fn request_headers(&self, i: usize) -> HeaderMap {
        self.state.requests.lock().unwrap()[i].1.clone()
    }

    pub fn title_requests(&self) -> usize {
        self.state.title_requests.load(Ordering::SeqCst)
    }

    pub fn closed_early(&self) -> usize {
        self.state.closed_early.load(Ordering::SeqCst)
    }

    pub fn remaining(&self) -> usize {
        self.state.script.lock().unwrap().len()
    }
}

// ---- OpenAI frames ----

pub fn oai(v: Value) -> String {
    format!("data: {v}\n\n")
}
pub fn oai_text(t: &str) -> String {
    oai(
        json!({"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":t},"finish_reason":null}]}),
    )
}
pub fn oai_reasoning(t: &str) -> String {
    oai(
        json!({"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning_content":t},"finish_reason":null}]}),
    )
}
/// A tool-call fragment: `name` and `id` only when given.
pub fn oai_tool(index: u64, id: Option<&str>, name: Option<&str>, args: &str) -> String {
    let mut f = json!({"arguments": args});
    if let Some(n) = name {
        f["name"] = json!(n);
    }
    let mut c = json!({"index": index, "function": f});
    if let Some(i) = id {
        c["id"] = json!(i);
        c["type"] = json!("function");
    }
    oai(
        json!({"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[c]},"finish_reason":null}]}),
    )
}
pub fn oai_finish(reason: &str) -> String {
    oai(
        json!({"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":reason}]}),
    )
}
pub fn oai_usage(prompt: u64, completion: u64) -> String {
    oai(
        json!({"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":prompt,"completion_tokens":completion,"total_tokens":prompt+completion}}),
    )
}
pub fn oai_done() -> String {
    "data: [DONE]\n\n".to_string()
}

/// A whole OpenAI text answer.
pub fn oai_answer(text: &str) -> Reply {
    let mut frames: Vec<String> = text.split_inclusive(' ').map(oai_text).collect();
    frames.push(oai_finish("stop"));
    frames.push(oai_usage(10, 5));
    frames.push(oai_done());
    Reply::stream(frames)
}

/// A whole OpenAI answer of one tool call, its arguments split in three.
pub fn oai_call(id: &str, name: &str, args: Value) -> Reply {
    let a = args.to_string();
    let (x, rest) = a.split_at(a.len() / 3);
    let (y, z) = rest.split_at(rest.len() / 2);
    Reply::stream(vec![
        oai_tool(0, Some(id), Some(name), ""),
        oai_tool(0, None, None, x),
        oai_tool(0, None, None, y),
        oai_tool(0, None, None, z),
        oai_finish("tool_calls"),
        oai_usage(10, 5),
        oai_done(),
    ])
}

// ---- Anthropic frames ----

pub fn anth(v: Value) -> String {
    format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap())
}
pub fn anth_start() -> String {
    anth(
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-test","stop_reason":null,"usage":{"input_tokens":12,"output_tokens":1}}}),
    )
}
pub fn anth_stop(reason: &str, output_tokens: u64) -> Vec<String> {
    vec![
        anth(
            json!({"type":"message_delta","delta":{"stop_reason":reason,"stop_sequence":null},"usage":{"output_tokens":output_tokens}}),
        ),
        anth(json!({"type":"message_stop"})),
    ]
}
pub fn anth_answer(text: &str) -> Reply {
    let mut f = vec![
        anth_start(),
        anth(
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
    ];
    for w in text.split_inclusive(' ') {
        f.push(anth(
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":w}}),
        ));
    }
    f.push(anth(json!({"type":"content_block_stop","index":0})));
    f.extend(anth_stop("end_turn", 7));
    Reply::stream(f)
}

// ---- the runtime ----

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub log: EventLog,
    pub rt: AgentRuntime,
}

/// Fast provider settings for tests: short backoff and timeouts.
pub fn fast_http() -> HttpSettings {
    HttpSettings {
        connect_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(5),
        max_retries: 2,
        backoff_base: Duration::from_millis(10),
        backoff_max: Duration::from_secs(2),
    }
}

pub fn openai_config(fake: &FakeLlm) -> RuntimeConfig {
    let mut c = RuntimeConfig {
        model: "openai/gpt-test".into(),
        ..RuntimeConfig::default()
    };
    c.llm.openai_base_url = fake.openai_base();
    c.llm.openai_api_key = Some("sk-test".into());
    c.llm.http = fast_http();
    c
}

pub fn anthropic_config(fake: &FakeLlm) -> RuntimeConfig {
    let mut c = RuntimeConfig {
        model: "anthropic/claude-test".into(),
        ..RuntimeConfig::default()
    };
    c.llm.anthropic_base_url = fake.anthropic_base();
    c.llm.anthropic_api_key = Some("ak-test".into());
    c.llm.max_tokens = 1024;
    c.llm.http = fast_http();
    c
}

pub async fn harness(config: RuntimeConfig) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let log = EventLog::open_sqlite(dir.path(), Durability::Full)
        .await
        .unwrap();
    let rt = AgentRuntime::new(log.clone(), config).unwrap();
    Harness { dir, log, rt }
}

/// Appends `[Create, StartRun]` and spawns the run, as `POST /chat` does; returns the
/// orchestrator id.
pub async fn start(h: &Harness, thread: &str, run: &str, message: &str) -> String {
    let orchestrator = format!("agent-orch-{run}");
    h.log
        .append(
            thread,
            vec![
                ThreadCommand::Create {
                    owner: "u1".into(),
                    title: None,
                },
                ThreadCommand::StartRun {
                    run_id: run.into(),
                    agent_id: orchestrator.clone(),
                    message_id: format!("msg-{run}"),
                    message_group_id: None,
                    text: message.into(),
                    user: "u1".into(),
                },
            ],
        )
        .await
        .unwrap();
    h.rt.spawn_run(
        thread.into(),
        run.into(),
        orchestrator.clone(),
        message.into(),
        "u1".into(),
    );
    orchestrator
}

pub async fn read_all(log: &EventLog, thread: &str) -> Vec<StoredEvent> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = log.read_thread(thread, after, 10_000).await.unwrap();
        let Some(last) = page.last() else { break };
        after = last.id;
        out.extend(page);
    }
    out
}

/// Waits until `pred` holds for the thread's events; returns them.
pub async fn wait_until(
    log: &EventLog,
    thread: &str,
    timeout: Duration,
    mut pred: impl FnMut(&[StoredEvent]) -> bool,
) -> Vec<StoredEvent> {
    let deadline = Instant::now() + timeout;
    let mut head = log.heads().thread(thread);
    loop {
        let events = read_all(log, thread).await;
        if pred(&events) {
            return events;
        }
        assert!(
            Instant::now() < deadline,
            "timed out; last events: {:#?}",
            events
                .iter()
                .rev()
                .take(6)
                .map(|e| (&e.event_type, &e.payload))
                .collect::<Vec<_>>()
        );
        let _ = tokio::time::timeout(Duration::from_millis(20), head.changed()).await;
    }
}

pub fn payload(e: &StoredEvent) -> Value {
    serde_json::from_str(&e.payload).unwrap()
}

pub fn of_type<'a>(events: &'a [StoredEvent], ty: &str) -> Vec<&'a StoredEvent> {
    events.iter().filter(|e| e.event_type == ty).collect()
}

pub fn finished(events: &[StoredEvent], run: &str) -> bool {
    events
        .iter()
        .any(|e| e.run_id == run && e.event_type == "run-finish")
}

pub async fn wait_finish(h: &Harness, thread: &str, run: &str) -> Vec<StoredEvent> {
    wait_until(&h.log, thread, Duration::from_secs(20), |e| {
        finished(e, run)
    })
    .await
}

/// Waits for the next unanswered confirmation request of the run; returns its payload.
pub async fn wait_request(h: &Harness, thread: &str, run: &str) -> Value {
    let events = wait_until(&h.log, thread, Duration::from_secs(20), |evs| {
        pending_request(evs, run).is_some() || finished(evs, run)
    })
    .await;
    pending_request(&events, run).unwrap_or_else(|| {
        panic!(
            "the run finished without asking: {:?}",
            events.last().map(|e| (&e.event_type, &e.payload))
        )
    })
}

fn pending_request(events: &[StoredEvent], run: &str) -> Option<Value> {
    let answered: Vec<String> = of_type(events, "confirmation-answered")
        .iter()
        .map(|e| payload(e)["requestId"].as_str().unwrap().to_string())
        .collect();
    of_type(events, "confirmation-request")
        .into_iter()
        .filter(|e| e.run_id == run)
        .map(payload)
        .find(|p| !answered.contains(&p["requestId"].as_str().unwrap().to_string()))
}

pub async fn answer(
    h: &Harness,
    thread: &str,
    request_id: &str,
    approved: bool,
    user_input: Option<&str>,
    answers: Option<Value>,
) {
    h.log
        .append(
            thread,
            vec![ThreadCommand::AnswerConfirmation {
                request_id: request_id.into(),
                approved,
                user_input: user_input.map(str::to_string),
                answers,
                by: "u1".into(),
            }],
        )
        .await
        .unwrap();
}

pub async fn wait_idle(rt: &AgentRuntime) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while rt.running() > 0 {
        assert!(Instant::now() < deadline, "run task did not end");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Every n8n event of `events` (the internal ones are never on the n8n stream) must validate
/// against both published `@n8n/api-types` schemas (1.25.0 and 1.41.0), through
/// `tests/conformance/validate.mjs`.
pub async fn assert_n8n_valid(events: &[StoredEvent]) {
    let ndjson: String = events
        .iter()
        .filter(|e| e.is_n8n())
        .map(|e| e.envelope_json() + "\n")
        .collect();
    assert!(!ndjson.is_empty(), "no n8n events to validate");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/conformance/validate.mjs"
    );
    for version in ["1.25.0", "1.41.0"] {
        let mut child = tokio::process::Command::new("node")
            .arg(script)
            .arg(version)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node is installed");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(ndjson.as_bytes()).await.unwrap();
        drop(stdin);
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("validate.mjs finished")
            .unwrap();
        assert!(
            out.status.success(),
            "@n8n/api-types {version} rejected events (run `bash tests/conformance/install.sh` if it is not installed): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Runs a test body with an overall time limit.
pub async fn bounded<F: std::future::Future<Output = ()>>(secs: u64, f: F) {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .expect("test timed out");
}

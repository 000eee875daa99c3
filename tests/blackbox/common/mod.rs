//! The black-box harness shared by every test in `tests/`: it starts the real `threadstream`
//! binary on a free port with a temp data dir, talks HTTP to it with reqwest, reads the n8n SSE
//! stream with an incremental parser, and pipes events through the npm conformance validator.
//!
//! Everything here is bounded in time: starting, stopping, every HTTP request and every SSE read
//! has a timeout, so no test can hang.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde_json::{json, Value};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_threadstream");

/// How long a server gets to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a server gets to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// Total time of one plain HTTP request.
const HTTP_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `fut` and fails the test if it takes longer than `secs` seconds.
pub async fn bounded<T>(secs: u64, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(secs), fut).await {
        Ok(v) => v,
        Err(_) => panic!("test did not finish within {secs}s"),
    }
}

// ------------------------------------------------------------------------------------------------
// The server process
// ------------------------------------------------------------------------------------------------

/// Flags of `threadstream serve` that tests vary.
#[derive(Debug, Clone)]
pub struct Opts {
    /// `--model`: `demo` unless a test runs a fake provider.
    pub model: String,
    pub demo_delay_ms: u64,
    pub sse_ping_secs: u64,
    pub max_body_bytes: Option<usize>,
    pub extra_args: Vec<String>,
    /// Share this Postgres database (another instance of the same deployment) instead of the
    /// store `store_kind()` gives a new server.
    pub database_url: Option<String>,
    /// Environment variables of the server process (beside the test's own).
    pub env: Vec<(String, String)>,
    /// Listen on this loopback port (kept across restarts, as a load balancer's backend is);
    /// `None`: a free one, new on each start.
    pub port: Option<u16>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            model: "demo".into(),
            demo_delay_ms: 2,
            sse_ping_secs: 15,
            max_body_bytes: None,
            extra_args: Vec::new(),
            database_url: None,
            env: Vec::new(),
            port: None,
        }
    }
}

/// A running `threadstream serve` on `127.0.0.1:<free port>` over a temp data dir. Dropping it
/// kills the process (SIGKILL) and removes the data dir.
pub struct Server {
    dir: tempfile::TempDir,
    /// `postgres://…` when the server runs on Postgres; the database is dropped with the server
    /// when this server created it.
    pub database_url: Option<String>,
    owned_database: Option<String>,
    opts: Opts,
    child: Option<Child>,
    /// `http://127.0.0.1:PORT` of the current process (a restart picks a new port).
    pub base: String,
    logs: Arc<Mutex<Vec<String>>>,
    pub client: reqwest::Client,
    pub sse_client: reqwest::Client,
    /// The test damaged the store on purpose: skip the verify-on-drop (see [`Server::drop`]).
    pub store_damaged: bool,
}

/// Removes ANSI escape sequences (colours) from a log line.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                // CSI: parameters and intermediates, then one final byte in @..~
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The `IP:PORT` of a `threadstream listening on http://IP:PORT` log line.
pub fn parse_listening(line: &str) -> Option<String> {
    let line = strip_ansi(line);
    let rest = &line[line.find("threadstream listening on http://")?..];
    let rest = &rest["threadstream listening on http://".len()..];
    let addr: String = rest
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '"' && *c != '/')
        .collect();
    (!addr.is_empty()).then_some(addr)
}

impl Server {
    /// Starts a server with default options.
    pub async fn start() -> Server {
        Server::start_with(Opts::default()).await
    }

    pub async fn start_with(opts: Opts) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("threadstream-test-")
            .tempdir()
            .expect("create temp data dir");
        let (database_url, owned_database) = match (&opts.database_url, store_kind()) {
            (Some(url), _) => (Some(url.clone()), None),
            (None, StoreKind::Postgres) => {
                let (name, url) = create_database().await;
                (Some(url), Some(name))
            }
            (None, StoreKind::Sqlite) => (None, None),
        };
        let mut s = Server {
            dir,
            database_url,
            owned_database,
            opts,
            child: None,
            base: String::new(),
            logs: Arc::new(Mutex::new(Vec::new())),
            client: reqwest::Client::builder()
                .timeout(HTTP_TIMEOUT)
                .connect_timeout(Duration::from_secs(5))
                .build()
                .expect("reqwest client"),
            sse_client: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .build()
                .expect("reqwest client"),
            store_damaged: false,
        };
        s.spawn().await;
        s
    }

    /// Sends every later request, plain and SSE, with `Authorization: Bearer <token>` (a
    /// server with `--tokens-file`).
    pub fn act_as(&mut self, token: &str) {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse().expect("header value"),
        );
        self.client = reqwest::Client::builder()
            .timeout(HTTP_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .default_headers(headers.clone())
            .build()
            .expect("reqwest client");
        self.sse_client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .default_headers(headers)
            .build()
            .expect("reqwest client");
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The store opens cleanly: SQLite's `integrity_check` on the file, or a query on the
    /// Postgres database.
    pub async fn store_integrity_check(&self) {
        match &self.database_url {
            None => sqlite_integrity_check(self.data_dir()).await,
            Some(url) => {
                let pool = sqlx::PgPool::connect(url)
                    .await
                    .expect("connect to the test database");
                let n: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
                    .fetch_one(&pool)
                    .await
                    .expect("events table readable");
                assert!(n >= 0);
                pool.close().await;
            }
        }
    }

    /// Number of events in the log, read from the store directly.
    pub async fn count_events(&self) -> i64 {
        match &self.database_url {
            None => sqlite_i64(self.data_dir(), "SELECT count(*) FROM events").await,
            Some(url) => {
                let pool = sqlx::PgPool::connect(url)
                    .await
                    .expect("connect to the test database");
                let n: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
                    .fetch_one(&pool)
                    .await
                    .expect("count events");
                pool.close().await;
                n
            }
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Everything the process(es) printed so far, colours stripped.
    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    /// [`Server::logs`] once they hold `needle`, or after `within`. A line logged before an
    /// answer was sent can reach the logs after the answer reaches the test: a thread of the
    /// harness reads the process's output.
    pub async fn logs_with(&self, needle: &str, within: Duration) -> String {
        let t0 = std::time::Instant::now();
        loop {
            let logs = self.logs();
            if logs.contains(needle) || t0.elapsed() >= within {
                return logs;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn serve_command(&self) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg("--addr")
            .arg(format!("127.0.0.1:{}", self.opts.port.unwrap_or(0)))
            .arg("--data-dir")
            .arg(self.dir.path())
            .arg("--model")
            .arg(&self.opts.model)
            .arg("--demo-delay-ms")
            .arg(self.opts.demo_delay_ms.to_string())
            .arg("--sse-ping-secs")
            .arg(self.opts.sse_ping_secs.to_string())
            // No test server sends a webhook off this machine, whatever a test (or schemathesis)
            // subscribes.
            .arg("--webhook-targets")
            .arg("loopback");
        if let Some(b) = self.opts.max_body_bytes {
            cmd.arg("--max-body-bytes").arg(b.to_string());
        }
        if let Some(url) = &self.database_url {
            // Runs left live by a killed instance are recovered through their leases: keep the
            // wait short in tests.
            cmd.arg("--database-url").arg(url);
            if !self
                .opts
                .extra_args
                .iter()
                .any(|a| a == "--run-orphan-secs")
            {
                cmd.arg("--run-orphan-secs").arg("2");
            }
        }
        // The suite runs once on hyper alone too (scripts/test.sh), unless a test picks.
        if let Some(engine) = http1_engine() {
            if !self.opts.extra_args.iter().any(|a| a == "--http1-engine") {
                cmd.arg("--http1-engine").arg(engine);
            }
        }
        cmd.args(&self.opts.extra_args);
        clean_env(&mut cmd);
        cmd.envs(self.opts.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Spawns the process and waits for its listening line and a 200 from `/healthz`.
    async fn spawn(&mut self) {
        assert!(self.child.is_none(), "server already running");
        let mut cmd = self.serve_command();
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {BIN}: {e}"));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        pump_lines(stdout, self.logs.clone(), Some(tx.clone()));
        pump_lines(stderr, self.logs.clone(), Some(tx));
        let found = tokio::time::timeout(START_TIMEOUT, async {
            while let Some(line) = rx.recv().await {
                if let Some(addr) = parse_listening(&line) {
                    return Some(addr);
                }
            }
            None // both pipes closed: the process exited
        })
        .await;
        let addr = match found {
            Ok(Some(addr)) => addr,
            other => {
                let _ = child.kill();
                let status = child.wait();
                panic!(
                    "server did not log its listening line ({}); exit: {status:?}\n--- server output ---\n{}",
                    if other.is_err() { "timed out" } else { "process exited" },
                    self.logs()
                );
            }
        };
        self.child = Some(child);
        self.base = format!("http://{addr}");
        // Ready means /healthz answers 200.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.client.get(self.url("/healthz")).send().await {
                Ok(r) if r.status().as_u16() == 200 => break,
                other => {
                    if Instant::now() > deadline {
                        panic!(
                            "GET /healthz is not 200 after the listening line: {other:?}\n{}",
                            self.logs()
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Graceful stop: SIGTERM, then wait for the process to exit. Fails the test if it does not
    /// exit in time (the process is then killed).
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "server did not exit within {STOP_TIMEOUT:?} of SIGTERM\n{}",
                        self.logs()
                    );
                }
            }
        }
    }

    /// SIGTERM, then waits (up to `limit`) for the exit: its status and how long it took.
    /// Fails the test if the process is still running after `limit` (it is then killed).
    pub async fn stop_timed(&mut self, limit: Duration) -> (std::process::ExitStatus, Duration) {
        let start = Instant::now();
        self.sigterm();
        let status = self.wait_exit(limit).await;
        (status, start.elapsed())
    }

    /// Sends SIGTERM and returns at once: the process drains meanwhile ([`Server::wait_exit`]).
    pub fn sigterm(&self) {
        let child = self.child.as_ref().expect("server running");
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
    }

    /// Waits (up to `limit`) for the process to exit; fails the test if it is still running
    /// after `limit` (it is then killed).
    pub async fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("server running");
        let start = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) if start.elapsed() < limit => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "server did not exit within {limit:?} of SIGTERM\n{}",
                        self.logs()
                    );
                }
            }
        }
    }

    /// `kill -9`: the process gets no chance to clean up.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL the server");
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same data dir (a new port).
    /// The options of the next [`Server::restart`] (e.g. other flags for the same store).
    pub fn opts_mut(&mut self) -> &mut Opts {
        &mut self.opts
    }

    pub async fn restart(&mut self) {
        if self.child.is_some() {
            self.stop().await;
        }
        self.spawn().await;
    }

    /// Runs `threadstream projections rebuild --data-dir DIR` (the server must be stopped) and
    /// returns its stdout; fails the test on a non-zero exit or after 60 s.
    pub async fn rebuild_projections(&self) -> String {
        assert!(self.child.is_none(), "stop the server before a rebuild");
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.arg("projections")
            .arg("rebuild")
            .arg("--data-dir")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some(url) = &self.database_url {
            cmd.arg("--database-url").arg(url);
        }
        clean_env_tokio(&mut cmd);
        let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
            .await
            .expect("projections rebuild did not finish within 60s")
            .expect("run projections rebuild");
        let stdout = strip_ansi(&String::from_utf8_lossy(&out.stdout));
        let stderr = strip_ansi(&String::from_utf8_lossy(&out.stderr));
        assert!(
            out.status.success(),
            "projections rebuild failed: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status
        );
        stdout
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    // ---- plain HTTP ----

    pub async fn try_send(&self, req: reqwest::RequestBuilder) -> reqwest::Result<Resp> {
        let r = req.send().await?;
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await?;
        Ok(Resp {
            status,
            headers,
            text,
        })
    }

    async fn send(&self, what: &str, req: reqwest::RequestBuilder) -> Resp {
        match self.try_send(req).await {
            Ok(r) => r,
            Err(e) => panic!("{what} failed: {e}\n--- server output ---\n{}", self.logs()),
        }
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send(&format!("GET {path}"), self.client.get(self.url(path)))
            .await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Resp {
        self.send(
            &format!("POST {path}"),
            self.client.post(self.url(path)).json(body),
        )
        .await
    }

    /// POST with a raw body and content type (for malformed JSON and oversized bodies).
    pub async fn post_raw(&self, path: &str, content_type: &str, body: Vec<u8>) -> Resp {
        self.send(
            &format!("POST {path}"),
            self.client
                .post(self.url(path))
                .header("content-type", content_type)
                .body(body),
        )
        .await
    }

    pub async fn patch(&self, path: &str, body: &Value) -> Resp {
        self.send(
            &format!("PATCH {path}"),
            self.client.patch(self.url(path)).json(body),
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        self.send(
            &format!("DELETE {path}"),
            self.client.delete(self.url(path)),
        )
        .await
    }

    // ---- the API ----

    /// `POST /instance-ai/chat/:threadId` → the response (not asserted).
    pub async fn chat_resp(&self, thread: &str, message: &str) -> Resp {
        self.post(
            &format!("/instance-ai/chat/{}", enc(thread)),
            &json!({ "message": message }),
        )
        .await
    }

    /// Starts a chat run and returns its runId.
    pub async fn chat(&self, thread: &str, message: &str) -> String {
        let r = self.chat_resp(thread, message).await;
        let v = r.ok_json(&format!("POST /instance-ai/chat/{thread}"));
        v["runId"]
            .as_str()
            .unwrap_or_else(|| panic!("chat response without runId: {v}"))
            .to_string()
    }

    pub async fn cancel(&self, thread: &str) -> Resp {
        self.post(
            &format!("/instance-ai/chat/{}/cancel", enc(thread)),
            &json!({}),
        )
        .await
    }

    pub async fn confirm(&self, request_id: &str, body: &Value) -> Resp {
        self.post(&format!("/instance-ai/confirm/{}", enc(request_id)), body)
            .await
    }

    pub async fn ingest(&self, thread: &str, events: &[Value]) -> Resp {
        self.post(
            &format!("/instance-ai/threads/{}/events", enc(thread)),
            &json!({ "events": events }),
        )
        .await
    }

    /// Ingests in a task of its own, for a test that acts while the post waits: the answer's
    /// status and body, or a panic without one within `timeout`.
    pub fn spawn_ingest(
        &self,
        thread: &str,
        events: Vec<Value>,
        timeout: Duration,
    ) -> tokio::task::JoinHandle<(u16, String)> {
        let req = self
            .client
            .post(self.url(&format!("/instance-ai/threads/{}/events", enc(thread))))
            .json(&json!({ "events": events }))
            .timeout(timeout);
        tokio::spawn(async move {
            let r = req.send().await.expect("an answer");
            let status = r.status().as_u16();
            (status, r.text().await.unwrap_or_default())
        })
    }

    /// Ingests and returns the acknowledged ids (asserting a 200).
    pub async fn ingest_ok(&self, thread: &str, events: &[Value]) -> Vec<i64> {
        let v = self
            .ingest(thread, events)
            .await
            .ok_json(&format!("ingest into {thread}"));
        ids_of(&v)
    }

    pub async fn messages(&self, thread: &str) -> Value {
        self.get(&format!("/instance-ai/threads/{}/messages", enc(thread)))
            .await
            .ok_json("GET messages")
    }

    pub async fn status(&self, thread: &str) -> Value {
        self.get(&format!("/instance-ai/threads/{}/status", enc(thread)))
            .await
            .ok_json("GET status")
    }

    pub async fn threads(&self) -> Value {
        self.get("/instance-ai/threads")
            .await
            .ok_json("GET threads")
    }

    // ---- SSE ----

    /// Opens `GET /instance-ai/events/:threadId` with the given cursor; `Err` carries the
    /// response when the status is not 200.
    pub async fn try_sse(&self, thread: &str, cursor: Cursor) -> Result<Sse, Resp> {
        let mut path = format!("/instance-ai/events/{}", enc(thread));
        if let Some(q) = cursor.query() {
            path.push_str("?lastEventId=");
            path.push_str(&enc(q));
        }
        let mut req = self
            .sse_client
            .get(self.url(&path))
            .header("accept", "text/event-stream");
        if let Some(h) = cursor.header() {
            req = req.header("last-event-id", h);
        }
        let resp = match tokio::time::timeout(Duration::from_secs(15), req.send()).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => panic!("GET {path} failed: {e}\n{}", self.logs()),
            Err(_) => panic!("GET {path}: no response headers within 15s"),
        };
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        if status != 200 {
            let text = tokio::time::timeout(HTTP_TIMEOUT, resp.text())
                .await
                .ok()
                .and_then(|r| r.ok())
                .unwrap_or_default();
            return Err(Resp {
                status,
                headers,
                text,
            });
        }
        Ok(Sse::new(status, headers, resp.bytes_stream()))
    }

    pub async fn sse(&self, thread: &str, cursor: Cursor) -> Sse {
        match self.try_sse(thread, cursor).await {
            Ok(s) => s,
            Err(r) => panic!(
                "SSE for {thread} answered {}: {}\n{}",
                r.status,
                r.text,
                self.logs()
            ),
        }
    }

    /// Reads the thread's stream from the start until `run_id`'s `run-finish`, answering every
    /// confirmation request of the run with `decide(payload)` (a confirm body, or `None` to
    /// leave it unanswered). Returns every event up to and including the `run-finish`.
    pub async fn follow_run(
        &self,
        thread: &str,
        run_id: &str,
        mut decide: impl FnMut(&Value) -> Option<Value>,
    ) -> Vec<SseEvent> {
        let mut sse = self.sse(thread, Cursor::None).await;
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = sse
                .next_event(left.min(Duration::from_secs(20)))
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "waiting for run-finish of {run_id}: {e:?}; last events: {:?}\n{}",
                        out.iter()
                            .rev()
                            .take(5)
                            .map(|e: &SseEvent| e.data.clone())
                            .collect::<Vec<_>>(),
                        self.logs()
                    )
                });
            let v = ev.json();
            let is_ours = v["runId"] == run_id;
            let ty = v["type"].as_str().unwrap_or("").to_string();
            out.push(ev);
            if is_ours && ty == "confirmation-request" {
                if let Some(body) = decide(&v["payload"]) {
                    let rid = v["payload"]["requestId"].as_str().expect("requestId");
                    self.confirm(rid, &body).await.ok_json("confirm");
                }
            }
            if is_ours && ty == "run-finish" {
                return out;
            }
        }
    }

    /// Every event of the thread's stream up to and including id `last` (read from 0).
    pub async fn read_until_id(&self, thread: &str, last: i64) -> Vec<SseEvent> {
        let mut sse = self.sse(thread, Cursor::None).await;
        let mut out: Vec<SseEvent> = Vec::new();
        loop {
            let ev = sse
                .next_event(Duration::from_secs(20))
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "reading {thread} up to id {last}: {e:?} after {} events (last id {:?})",
                        out.len(),
                        out.last().map(|e| e.id())
                    )
                });
            let id = ev.id();
            out.push(ev);
            if id >= last {
                return out;
            }
        }
    }

    /// Every event the stream delivers from `cursor` until it has been quiet for `idle`.
    pub async fn read_idle(&self, thread: &str, cursor: Cursor, idle: Duration) -> Vec<SseEvent> {
        let mut sse = self.sse(thread, cursor).await;
        sse.drain_idle(idle).await
    }
}

/// `THREADSTREAM_TEST_HTTP1_ENGINE`: the `--http1-engine` every server of the suite gets
/// (`hyper` or `threadstream`); unset, the server's default.
pub fn http1_engine() -> Option<String> {
    std::env::var("THREADSTREAM_TEST_HTTP1_ENGINE")
        .ok()
        .filter(|e| !e.is_empty())
}

fn configures_threadstream(var: &str) -> bool {
    var.starts_with("THREADSTREAM_") || var.starts_with("OTEL_")
}

/// The test's own environment minus what would configure the child (`THREADSTREAM_*`, the
/// OpenTelemetry exporter's `OTEL_*`, `DATABASE_URL`), plain logs.
fn clean_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        if configures_threadstream(&k.to_string_lossy()) {
            cmd.env_remove(&k);
        }
    }
    cmd.env_remove("DATABASE_URL");
    cmd.env("NO_COLOR", "1").env("RUST_LOG", "info,sqlx=warn");
}

/// [`clean_env`] for a Tokio command.
pub fn clean_env_tokio(cmd: &mut tokio::process::Command) {
    for (k, _) in std::env::vars_os() {
        if configures_threadstream(&k.to_string_lossy()) {
            cmd.env_remove(&k);
        }
    }
    cmd.env_remove("DATABASE_URL");
    cmd.env("NO_COLOR", "1").env("RUST_LOG", "info,sqlx=warn");
}

/// Copies a child's output, line by line, into `logs` (and `tx`) until the pipe closes.
fn pump_lines(
    pipe: impl Read + Send + 'static,
    logs: Arc<Mutex<Vec<String>>>,
    tx: Option<tokio::sync::mpsc::UnboundedSender<String>>,
) {
    std::thread::spawn(move || {
        let mut r = BufReader::new(pipe);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let line = strip_ansi(String::from_utf8_lossy(&buf).trim_end());
                    {
                        let mut l = logs.lock().unwrap();
                        if l.len() < 20_000 {
                            l.push(line.clone());
                        }
                    }
                    if let Some(tx) = &tx {
                        let _ = tx.send(line);
                    }
                }
            }
        }
    });
}

impl Drop for Server {
    /// Kills the server; then, when `THREADSTREAM_VERIFY_STORES` names a folder (the test
    /// script sets it), runs `threadstream verify` on the SQLite store the test leaves behind and
    /// writes its report there if it is not clean, so every test's store is checked against the
    /// log's invariants and a fresh fold of every read model. (Postgres databases are dropped
    /// with the server; their verify runs in `tests/blackbox/audit_tools.rs`.)
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(reports) = std::env::var_os("THREADSTREAM_VERIFY_STORES") {
            if self.database_url.is_none() && !self.store_damaged {
                verify_left_store(self.dir.path(), Path::new(&reports));
            }
        }
        if let Some(name) = self.owned_database.take() {
            drop_database(name);
        }
        if std::thread::panicking() {
            let logs = self.logs();
            let tail: Vec<&str> = logs.lines().rev().take(60).collect();
            eprintln!(
                "--- last server output ({}) ---\n{}",
                self.dir.path().display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
}

fn verify_left_store(data_dir: &Path, reports: &Path) {
    if !data_dir.join("threadstream.db").exists() {
        return;
    }
    let out = std::process::Command::new(BIN)
        .args(["verify", "--data-dir"])
        .arg(data_dir)
        .env_remove("DATABASE_URL")
        .output();
    let report = match out {
        Ok(o) if o.status.success() => return,
        Ok(o) => format!(
            "{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => format!("could not run verify: {e}"),
    };
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .replace("::", "-");
    let _ = std::fs::create_dir_all(reports);
    let file = reports.join(format!("{test}-{}.txt", std::process::id()));
    let _ = std::fs::write(file, format!("store {}\n{report}", data_dir.display()));
}

/// Percent-encodes everything but RFC 3986 unreserved characters (for ids in paths and queries).
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The `ids` array of an ingest response.
pub fn ids_of(v: &Value) -> Vec<i64> {
    v["ids"]
        .as_array()
        .unwrap_or_else(|| panic!("ingest response without ids: {v}"))
        .iter()
        .map(|i| i.as_i64().expect("integer id"))
        .collect()
}

/// One HTTP response, read to the end.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| {
            panic!(
                "response {} is not JSON ({e}): {:?}",
                self.status, self.text
            )
        })
    }

    /// Asserts a 2xx and returns the JSON body.
    pub fn ok_json(&self, what: &str) -> Value {
        assert!(
            (200..300).contains(&self.status),
            "{what}: expected 2xx, got {} {}",
            self.status,
            self.text
        );
        self.json()
    }

    /// Asserts `status` and the error shape `{"error": {"code", "message"}}`; returns
    /// `(code, message)`.
    pub fn error(&self, status: u16, what: &str) -> (String, String) {
        assert_eq!(self.status, status, "{what}: body {}", self.text);
        self.error_shape(what)
    }

    /// Asserts a 4xx with the JSON error shape; returns `(code, message)`.
    pub fn client_error(&self, what: &str) -> (String, String) {
        assert!(
            (400..500).contains(&self.status),
            "{what}: expected a 4xx, got {} {}",
            self.status,
            self.text
        );
        self.error_shape(what)
    }

    fn error_shape(&self, what: &str) -> (String, String) {
        let ct = self
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        assert!(
            ct.starts_with("application/json"),
            "{what}: error content-type is {ct:?}, body {:?}",
            self.text
        );
        let v: Value = serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("{what}: error body is not JSON ({e}): {:?}", self.text));
        let code = v["error"]["code"].as_str();
        let message = v["error"]["message"].as_str();
        match (code, message) {
            (Some(c), Some(m)) if !c.is_empty() && !m.is_empty() => {
                assert!(
                    error_codes().iter().any(|listed| listed == c),
                    "{what}: error code {c:?} is not one of the stable codes (`ErrorDetail.code` \
                     in docs/openapi.json, `ErrorCode` in domain/src/error_code.rs): {v}"
                );
                (c.to_string(), m.to_string())
            }
            _ => panic!("{what}: error body is not {{\"error\":{{\"code\",\"message\"}}}}: {v}"),
        }
    }
}

/// The stable error codes: the `enum` of `ErrorDetail.code` in the committed
/// `docs/openapi.json` (which `openapi::` keeps equal to the served document). Every error body a
/// test reads through [`Resp::error`] or [`Resp::client_error`] must carry one of them.
pub fn error_codes() -> &'static [String] {
    static CODES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    CODES.get_or_init(|| {
        let doc: Value = serde_json::from_slice(
            &std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.json"))
                .expect("docs/openapi.json"),
        )
        .expect("docs/openapi.json is JSON");
        let codes: Vec<String> = doc
            .pointer("/components/schemas/ErrorDetail/properties/code/enum")
            .and_then(Value::as_array)
            .expect("ErrorDetail.code has an enum in docs/openapi.json")
            .iter()
            .map(|c| c.as_str().expect("a code is a string").to_string())
            .collect();
        assert!(codes.len() > 100, "only {} error codes", codes.len());
        codes
    })
}

/// An n8n event envelope for ingest.
pub fn ev(ty: &str, run: &str, agent: &str, payload: Value) -> Value {
    json!({ "type": ty, "runId": run, "agentId": agent, "payload": payload })
}

pub fn run_start(run: &str, agent: &str) -> Value {
    ev(
        "run-start",
        run,
        agent,
        json!({ "messageId": format!("msg-{run}") }),
    )
}

pub fn run_finish(run: &str, agent: &str, status: &str) -> Value {
    ev("run-finish", run, agent, json!({ "status": status }))
}

pub fn text_delta(run: &str, agent: &str, text: &str) -> Value {
    ev("text-delta", run, agent, json!({ "text": text }))
}

// ------------------------------------------------------------------------------------------------
// SSE
// ------------------------------------------------------------------------------------------------

/// Where a subscriber's cursor comes from.
#[derive(Debug, Clone)]
pub enum Cursor {
    /// Neither header nor query: full history.
    None,
    Header(String),
    Query(String),
    Both {
        header: String,
        query: String,
    },
}

impl Cursor {
    pub fn header_id(id: i64) -> Cursor {
        Cursor::Header(id.to_string())
    }
    pub fn query_id(id: i64) -> Cursor {
        Cursor::Query(id.to_string())
    }
    fn header(&self) -> Option<&str> {
        match self {
            Cursor::Header(h) | Cursor::Both { header: h, .. } => Some(h),
            _ => None,
        }
    }
    fn query(&self) -> Option<&str> {
        match self {
            Cursor::Query(q) | Cursor::Both { query: q, .. } => Some(q),
            _ => None,
        }
    }
}

/// One dispatched SSE event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    /// The value of this event's own `id:` field, if it had one.
    pub id_field: Option<String>,
    /// The stream's last-event-id buffer when this event was dispatched.
    pub last_event_id: String,
    /// The `event:` field, if any.
    pub event: Option<String>,
    pub data: String,
    /// When the parser dispatched it.
    pub at: Instant,
}

impl SseEvent {
    /// The numeric `id:` of this frame; fails the test when absent or not an integer.
    pub fn id(&self) -> i64 {
        let raw = self
            .id_field
            .as_deref()
            .unwrap_or_else(|| panic!("SSE frame without id: {:?}", self.data));
        raw.parse()
            .unwrap_or_else(|_| panic!("SSE id {raw:?} is not an integer"))
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {:?}", self.data))
    }

    pub fn ty(&self) -> String {
        self.json()["type"].as_str().unwrap_or("").to_string()
    }
}

/// What the parser yields: events and comments (`: ping`).
#[derive(Debug, Clone)]
pub enum SseItem {
    Event(SseEvent),
    Comment(String),
}

/// An incremental parser of `text/event-stream`: the server's own one (`threadstream-sse`, the
/// WHATWG rules: CRLF, LF or CR line ends, a leading BOM skipped, `:` comments, one space after
/// the colon dropped, `data` lines joined with LF, no event without data, an incomplete event at
/// the end of the stream dropped), its items copied out as text.
#[derive(Debug, Default)]
pub struct SseParser {
    parser: threadstream_sse::Parser,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a chunk; returns the items completed by it.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseItem> {
        let mut out = Vec::new();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        self.parser
            .feed(chunk, &mut |item| {
                out.push(match item {
                    threadstream_sse::Item::Event(e) => SseItem::Event(SseEvent {
                        id_field: e.id.map(text),
                        last_event_id: text(e.last_event_id),
                        event: e.event.map(text),
                        data: text(e.data),
                        at: Instant::now(),
                    }),
                    threadstream_sse::Item::Comment(c) => SseItem::Comment(text(c)),
                })
            })
            .expect("an SSE line under 16 MiB");
        out
    }

    /// End of stream: an undispatched event is dropped.
    pub fn finish(&mut self) -> Vec<SseItem> {
        self.parser.finish();
        Vec::new()
    }
}

/// Why a read from an SSE stream returned no item.
#[derive(Debug)]
pub enum SseError {
    /// Nothing arrived within the read timeout.
    Timeout,
    /// The server ended the stream.
    Eof,
    /// The connection failed.
    Io(String),
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// The events of a whole SSE body, in order (comments dropped).
pub fn parse_sse(text: &str) -> Vec<SseEvent> {
    let mut p = SseParser::new();
    let mut items = p.push(text.as_bytes());
    items.extend(p.finish());
    items
        .into_iter()
        .filter_map(|i| match i {
            SseItem::Event(e) => Some(e),
            SseItem::Comment(_) => None,
        })
        .collect()
}

/// An open SSE response, parsed incrementally as bytes arrive.
pub struct Sse {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    stream: ByteStream,
    parser: SseParser,
    queue: VecDeque<SseItem>,
    eof: bool,
    /// Comments seen so far (e.g. ` ping`).
    pub comments: Vec<String>,
}

impl Sse {
    pub fn new(
        status: u16,
        headers: reqwest::header::HeaderMap,
        stream: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
    ) -> Self {
        Sse {
            status,
            headers,
            stream: Box::pin(stream),
            parser: SseParser::new(),
            queue: VecDeque::new(),
            eof: false,
            comments: Vec::new(),
        }
    }

    /// The next event or comment, waiting at most `timeout`.
    pub async fn next_item(&mut self, timeout: Duration) -> Result<SseItem, SseError> {
        let deadline = tokio::time::Instant::now() + timeout;
        self.next_item_until(deadline).await
    }

    async fn next_item_until(
        &mut self,
        deadline: tokio::time::Instant,
    ) -> Result<SseItem, SseError> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                if let SseItem::Comment(c) = &item {
                    self.comments.push(c.clone());
                }
                return Ok(item);
            }
            if self.eof {
                return Err(SseError::Eof);
            }
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Err(_) => return Err(SseError::Timeout),
                Ok(None) => {
                    self.eof = true;
                    let rest = self.parser.finish();
                    self.queue.extend(rest);
                }
                Ok(Some(Err(e))) => {
                    self.eof = true;
                    return Err(SseError::Io(e.to_string()));
                }
                Ok(Some(Ok(bytes))) => {
                    let items = self.parser.push(&bytes);
                    self.queue.extend(items);
                }
            }
        }
    }

    /// The next event (comments skipped), waiting at most `timeout` in all.
    pub async fn next_event(&mut self, timeout: Duration) -> Result<SseEvent, SseError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match self.next_item_until(deadline).await? {
                SseItem::Event(e) => return Ok(e),
                SseItem::Comment(_) => continue,
            }
        }
    }

    /// Events until none arrives for `idle` (or the stream ends).
    pub async fn drain_idle(&mut self, idle: Duration) -> Vec<SseEvent> {
        let mut out = Vec::new();
        while let Ok(e) = self.next_event(idle).await {
            out.push(e);
        }
        out
    }

    /// Events until `pred` holds for one (included), each read waiting at most `per_read`.
    pub async fn read_until(
        &mut self,
        per_read: Duration,
        mut pred: impl FnMut(&SseEvent) -> bool,
    ) -> Vec<SseEvent> {
        let mut out = Vec::new();
        loop {
            match self.next_event(per_read).await {
                Ok(e) => {
                    let done = pred(&e);
                    out.push(e);
                    if done {
                        return out;
                    }
                }
                Err(err) => panic!(
                    "SSE read_until: {err:?} after {} events; last: {:?}",
                    out.len(),
                    out.last().map(|e: &SseEvent| e.data.clone())
                ),
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Checks on event lists
// ------------------------------------------------------------------------------------------------

/// Asserts the frames' ids are strictly increasing (no duplicate, no reordering).
pub fn assert_strictly_increasing(events: &[SseEvent], what: &str) {
    for w in events.windows(2) {
        assert!(
            w[0].id() < w[1].id(),
            "{what}: ids not strictly increasing: {} then {}",
            w[0].id(),
            w[1].id()
        );
    }
}

/// `(id, data)` pairs, for comparing two reads of the same stream.
pub fn id_data(events: &[SseEvent]) -> Vec<(i64, String)> {
    events.iter().map(|e| (e.id(), e.data.clone())).collect()
}

/// The concatenated `text-delta` text of `agent` in `run`.
pub fn text_of(events: &[SseEvent], run: &str, agent: &str) -> String {
    events
        .iter()
        .map(|e| e.json())
        .filter(|v| v["type"] == "text-delta" && v["runId"] == run && v["agentId"] == agent)
        .map(|v| v["payload"]["text"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The orchestrator of `run`: the agentId of its `run-start`.
pub fn orchestrator_of(events: &[SseEvent], run: &str) -> String {
    events
        .iter()
        .map(|e| e.json())
        .find(|v| v["type"] == "run-start" && v["runId"] == run)
        .and_then(|v| v["agentId"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no run-start for {run}"))
}

// ------------------------------------------------------------------------------------------------
// The SQLite file (only while the server is stopped or killed)
// ------------------------------------------------------------------------------------------------

async fn open_sqlite(dir: &Path) -> sqlx::SqliteConnection {
    use sqlx::sqlite::SqliteConnectOptions;
    use sqlx::ConnectOptions;
    SqliteConnectOptions::new()
        .filename(dir.join("threadstream.db"))
        .create_if_missing(false)
        .connect()
        .await
        .expect("open threadstream.db")
}

/// `PRAGMA integrity_check` of the data dir's SQLite file is `ok`.
pub async fn sqlite_integrity_check(dir: &Path) {
    use sqlx::Connection;
    let mut conn = open_sqlite(dir).await;
    let rows: Vec<String> = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_all(&mut conn)
        .await
        .expect("integrity_check");
    assert_eq!(rows, vec!["ok".to_string()], "SQLite integrity_check");
    conn.close().await.expect("close");
}

/// One integer from the data dir's SQLite file.
pub async fn sqlite_i64(dir: &Path, sql: &str) -> i64 {
    use sqlx::Connection;
    let mut conn = open_sqlite(dir).await;
    let v: i64 = sqlx::query_scalar(sql)
        .fetch_one(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    conn.close().await.expect("close");
    v
}

// ------------------------------------------------------------------------------------------------
// Conformance against the published npm schema
// ------------------------------------------------------------------------------------------------

pub fn conformance_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")
}

const INSTALL_HINT: &str =
    "install the pinned npm packages first: `bash tests/conformance/install.sh`";

/// Pipes the events (JSON texts, one per event) as NDJSON into
/// `node tests/conformance/validate.mjs <version>` for `@n8n/api-types` 1.25.0 and 1.41.0 and
/// asserts both accept every event. Never skips: a missing install is a failure with the hint.
pub async fn validate_n8n(events_json: &[String]) {
    assert!(!events_json.is_empty(), "validate_n8n: no events to check");
    let dir = conformance_dir();
    let script = dir.join("validate.mjs");
    assert!(
        script.is_file(),
        "{} is missing; it comes with the conformance suite ({INSTALL_HINT})",
        script.display()
    );
    for version in ["1.25.0", "1.41.0"] {
        let pkg = dir.join(format!("n8n-{version}/node_modules/@n8n/api-types"));
        assert!(pkg.is_dir(), "{} is missing: {INSTALL_HINT}", pkg.display());
    }
    let mut ndjson = String::new();
    for e in events_json {
        if e.contains('\n') {
            let v: Value = serde_json::from_str(e).expect("event JSON");
            ndjson.push_str(&v.to_string());
        } else {
            ndjson.push_str(e);
        }
        ndjson.push('\n');
    }
    for version in ["1.25.0", "1.41.0"] {
        run_validator(&script, version, &ndjson, events_json.len()).await;
    }
}

async fn run_validator(script: &Path, version: &str, ndjson: &str, n: usize) {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new("node")
        .arg(script)
        .arg(version)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run node ({e}); is Node 20 installed? {INSTALL_HINT}"));
    let mut stdin = child.stdin.take().expect("stdin");
    let input = ndjson.to_string();
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(input.as_bytes()).await;
        let _ = stdin.shutdown().await;
    });
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("validate.mjs {version} did not finish within 120s"))
        .expect("wait for node");
    let _ = writer.await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(2)
        || stderr.contains("not installed")
        || stderr.contains("Cannot find module")
        || stderr.contains("ERR_MODULE_NOT_FOUND")
        || stderr.contains("Cannot find package")
    {
        panic!("validate.mjs {version}: npm packages missing: {INSTALL_HINT}\n{stderr}");
    }
    let report: Option<Value> = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Value>(l.trim()).ok());
    let short = |s: &str| s.chars().take(8000).collect::<String>();
    assert!(
        out.status.success(),
        "events fail instanceAiEventSchema of @n8n/api-types {version} (exit {:?}):\n{}\n{}",
        out.status.code(),
        short(&stdout),
        short(&stderr)
    );
    if let Some(r) = report {
        if let Some(f) = r["failures"].as_array() {
            assert!(f.is_empty(), "{version}: failures reported: {r}");
        }
        if let Some(c) = r["checked"].as_u64() {
            assert_eq!(
                c as usize, n,
                "{version}: validator checked {c} of {n} events"
            );
        }
    }
}

/// Folds one run's events (n8n envelopes as JSON text) with the real reducer of
/// `@n8n/api-types` `version` (`createInitialState`, `reduceEvent`, `toAgentTree`) through
/// `tests/conformance/reduce.mjs`; returns the tree with tool-call times removed.
pub async fn reduce_n8n(version: &str, events_json: &[String]) -> Value {
    use tokio::io::AsyncWriteExt;
    let dir = conformance_dir();
    let script = dir.join("reduce.mjs");
    assert!(
        script.is_file(),
        "{} is missing ({INSTALL_HINT})",
        script.display()
    );
    let events: Vec<Value> = events_json
        .iter()
        .map(|e| serde_json::from_str(e).expect("event JSON"))
        .collect();
    let input = json!([{ "name": "run", "events": events }]).to_string();
    let mut child = tokio::process::Command::new("node")
        .arg(&script)
        .arg(version)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run node ({e}): {INSTALL_HINT}"));
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(input.as_bytes()).await;
        let _ = stdin.shutdown().await;
    });
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("reduce.mjs {version} did not finish within 120s"))
        .expect("wait for node");
    let _ = writer.await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "reduce.mjs {version} failed ({:?}): {stderr} ({INSTALL_HINT})",
        out.status.code()
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("reduce.mjs output is JSON");
    let tree = v[0]["tree"]
        .as_str()
        .unwrap_or_else(|| panic!("reduce.mjs {version}: no tree: {v}"));
    serde_json::from_str(tree).expect("tree JSON")
}

/// Removes `startedAt` / `completedAt` from every tool call of an agent tree (the npm reducer
/// stamps them with its own clock).
pub fn strip_tool_call_times(node: &mut Value) {
    if let Some(calls) = node.get_mut("toolCalls").and_then(Value::as_array_mut) {
        for c in calls {
            if let Some(o) = c.as_object_mut() {
                o.remove("startedAt");
                o.remove("completedAt");
            }
        }
    }
    if let Some(children) = node.get_mut("children").and_then(Value::as_array_mut) {
        for c in children {
            strip_tool_call_times(c);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Which store the black-box suite runs on
// ------------------------------------------------------------------------------------------------

/// The store a new [`Server`] gets: SQLite in its temp dir, or — with
/// `THREADSTREAM_TEST_STORE=postgres` — a fresh database of its own on the machine's Postgres
/// (`THREADSTREAM_TEST_DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`, names
/// the server to create it on). `scripts/test.sh` runs the suite both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Sqlite,
    Postgres,
}

pub fn store_kind() -> StoreKind {
    match std::env::var("THREADSTREAM_TEST_STORE").as_deref() {
        Ok("postgres") => StoreKind::Postgres,
        _ => StoreKind::Sqlite,
    }
}

pub fn admin_database_url() -> String {
    std::env::var("THREADSTREAM_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Creates an empty database; returns its name and URL.
pub async fn create_database() -> (String, String) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let admin = admin_database_url();
    let pool = sqlx::PgPool::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("Postgres must be running ({admin}): {e}"));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let name = format!(
        "ts_bb_{}_{nanos}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    sqlx::query(&format!("CREATE DATABASE \"{name}\""))
        .execute(&pool)
        .await
        .expect("create test database");
    pool.close().await;
    let base = admin.rsplit_once('/').map(|(b, _)| b.to_string()).unwrap();
    (name.clone(), format!("{base}/{name}"))
}

/// Drops a test database (best effort, from any context).
pub fn drop_database(name: String) {
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            if let Ok(pool) = sqlx::PgPool::connect(&admin_database_url()).await {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                    .execute(&pool)
                    .await;
            }
        });
    })
    .join();
}

// ------------------------------------------------------------------------------------------------
// The command-line tools
// ------------------------------------------------------------------------------------------------

/// Output of one `threadstream` command.
pub struct Out {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `threadstream ARGS` on the server's store (its data dir, or its Postgres database).
pub async fn cli_on(s: &Server, args: &[&str]) -> Out {
    let mut full: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    full.push("--data-dir".into());
    full.push(s.data_dir().display().to_string());
    if let Some(url) = &s.database_url {
        full.push("--database-url".into());
        full.push(url.clone());
    }
    cli(&full).await
}

pub async fn cli(args: &[String]) -> Out {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(args).stdin(Stdio::null()).kill_on_drop(true);
    clean_env_tokio(&mut cmd);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("threadstream {args:?} did not finish within 120s"))
        .expect("run threadstream");
    Out {
        ok: out.status.success(),
        stdout: strip_ansi(&String::from_utf8_lossy(&out.stdout)),
        stderr: strip_ansi(&String::from_utf8_lossy(&out.stderr)),
    }
}

pub fn ok(out: Out, what: &str) -> String {
    assert!(
        out.ok,
        "{what} failed\nstdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    out.stdout
}

impl Out {
    /// `(success, stdout, stderr)`.
    pub fn parts(self) -> (bool, String, String) {
        (self.ok, self.stdout, self.stderr)
    }
}

//! The load the fleet tests drive through HAProxy: SSE watchers that resume with
//! `Last-Event-ID` wherever HAProxy sends them (n8n and AG-UI), external agents posting through
//! the ingest route, chats; every request counted, every frame kept to be compared with the log.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

use crate::common::*;

/// Which rendering of a thread a watcher reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    N8n,
    AgUi,
}

impl Protocol {
    pub(crate) fn path(self, thread: &str) -> String {
        match self {
            Protocol::N8n => format!("/instance-ai/events/{}", enc(thread)),
            Protocol::AgUi => format!("/api/v1/agent/runs/{}/events", enc(thread)),
        }
    }
}

/// One frame with an id (the frames of AG-UI's join prelude have none, but its last).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    pub id: i64,
    pub event: Option<String>,
    pub data: String,
}

fn framed(e: SseEvent) -> Option<Frame> {
    let id = e.id_field.as_deref()?.parse().ok()?;
    Some(Frame {
        id,
        event: e.event,
        data: e.data,
    })
}

/// One connection of a watcher.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    pub served_by: String,
    pub opened: Instant,
    /// When and how it ended (`None`: still open, or closed by the watcher at its end).
    pub ended: Option<(Instant, String)>,
}

#[derive(Default)]
pub(crate) struct Seen {
    /// The thread as the watcher saw it: every frame with an id, AG-UI's join preludes left
    /// out.
    pub frames: Vec<Frame>,
    /// AG-UI: the join preludes' last frames (`id:` the resume point), one per resume into
    /// an open run.
    pub preludes: usize,
    pub conns: Vec<Conn>,
    /// Attempts to (re)connect that got no stream (status or transport error).
    pub refused: Vec<String>,
}

/// An SSE client of one thread through the load balancer: on a stream's end or failure it
/// reconnects with the last id it saw, as a browser's EventSource does, until it has seen
/// [`Watcher::finish_at`]'s id.
pub(crate) struct Watcher {
    pub thread: String,
    pub protocol: Protocol,
    pub seen: Arc<Mutex<Seen>>,
    target: Arc<AtomicI64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watcher {
    pub(crate) fn start(base: &str, thread: &str, protocol: Protocol) -> Watcher {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let target = Arc::new(AtomicI64::new(i64::MAX));
        let task = tokio::spawn(watch(
            protocol,
            format!("{base}{}", protocol.path(thread)),
            seen.clone(),
            target.clone(),
        ));
        Watcher {
            thread: thread.to_string(),
            protocol,
            seen,
            target,
            task,
        }
    }

    /// Ends once a frame with id `id` or above has arrived; waits for that (at most `within`).
    pub(crate) async fn finish_at(&mut self, id: i64, within: Duration) {
        self.target.store(id, Ordering::SeqCst);
        let t0 = Instant::now();
        while !self.task.is_finished() {
            if t0.elapsed() > within {
                let s = self.seen.lock().unwrap();
                panic!(
                    "{:?} watcher of {} did not reach id {id} within {within:?}: last {:?}, {} connections, refused {:?}",
                    self.protocol,
                    self.thread,
                    s.frames.last().map(|f| f.id),
                    s.conns.len(),
                    s.refused.iter().rev().take(3).collect::<Vec<_>>()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) fn frames(&self) -> Vec<Frame> {
        self.seen.lock().unwrap().frames.clone()
    }

    pub(crate) fn conns(&self) -> Vec<Conn> {
        self.seen.lock().unwrap().conns.clone()
    }
}

async fn watch(protocol: Protocol, url: String, seen: Arc<Mutex<Seen>>, target: Arc<AtomicI64>) {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let mut last: Option<i64> = None;
    let reached = |last: Option<i64>| last.is_some_and(|l| l >= target.load(Ordering::SeqCst));
    loop {
        if reached(last) {
            return;
        }
        let mut req = client.get(&url).header("accept", "text/event-stream");
        if let Some(id) = last {
            req = req.header("last-event-id", id.to_string());
        }
        let resp = match tokio::time::timeout(Duration::from_secs(10), req.send()).await {
            Ok(Ok(r)) if r.status() == 200 => r,
            Ok(Ok(r)) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                seen.lock()
                    .unwrap()
                    .refused
                    .push(format!("{status} {body}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Ok(Err(e)) => {
                seen.lock().unwrap().refused.push(format!("{e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(_) => {
                seen.lock()
                    .unwrap()
                    .refused
                    .push("no answer within 10 s".into());
                continue;
            }
        };
        let served_by = resp
            .headers()
            .get("x-served-by")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("?")
            .to_string();
        let conn = {
            let mut s = seen.lock().unwrap();
            s.conns.push(Conn {
                served_by,
                opened: Instant::now(),
                ended: None,
            });
            s.conns.len() - 1
        };
        let mut body = resp.bytes_stream();
        let mut parser = SseParser::new();
        // AG-UI resumed: a join prelude (docs/protocol.md, "Resume") may come first, its last
        // frame with `id:` the resume point; only the first frame of the connection can be it.
        let mut prelude_at = last.filter(|_| protocol == Protocol::AgUi);
        let ended = loop {
            if reached(last) {
                break None;
            }
            match tokio::time::timeout(Duration::from_millis(200), body.next()).await {
                Err(_) => continue,
                Ok(None) => break Some("end of stream".to_string()),
                Ok(Some(Err(e))) => break Some(format!("{e}")),
                Ok(Some(Ok(chunk))) => {
                    let mut frames: Vec<Frame> = parser
                        .push(&chunk)
                        .into_iter()
                        .filter_map(|item| match item {
                            SseItem::Event(e) => framed(e),
                            SseItem::Comment(_) => None,
                        })
                        .collect();
                    let mut s = seen.lock().unwrap();
                    let any = !frames.is_empty();
                    if let (Some(at), Some(first)) = (prelude_at, frames.first()) {
                        if first.id == at {
                            frames.remove(0);
                            s.preludes += 1;
                        }
                    }
                    if any {
                        prelude_at = None;
                    }
                    if let Some(f) = frames.last() {
                        last = Some(f.id);
                    }
                    s.frames.extend(frames);
                }
            }
        };
        seen.lock().unwrap().conns[conn].ended = ended.map(|why| (Instant::now(), why));
    }
}

/// Everything of a thread's stream, read from the start on one instance (not through the
/// load balancer) until it has been quiet for `idle`: what every watcher of it must have seen.
pub(crate) async fn full_read(base: &str, thread: &str, protocol: Protocol) -> Vec<Frame> {
    let client = reqwest::Client::new();
    let resp = client
        .get(format!("{base}{}", protocol.path(thread)))
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("full read");
    assert_eq!(resp.status(), 200, "full read of {thread}");
    let mut body = resp.bytes_stream();
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    while let Ok(Some(chunk)) = tokio::time::timeout(Duration::from_millis(700), body.next()).await
    {
        let chunk = chunk.expect("full read chunk");
        out.extend(
            parser
                .push(&chunk)
                .into_iter()
                .filter_map(|item| match item {
                    SseItem::Event(e) => framed(e),
                    SseItem::Comment(_) => None,
                }),
        );
    }
    out
}

/// `got` is exactly `want`; a failure names the first difference, and what is missing or
/// repeated.
pub(crate) fn assert_exact(got: &[Frame], want: &[Frame], what: &str) {
    if got == want {
        return;
    }
    let at = got.iter().zip(want).position(|(a, b)| a != b);
    let mut count: HashMap<i64, usize> = HashMap::new();
    for f in got {
        *count.entry(f.id).or_default() += 1;
    }
    let mut want_count: HashMap<i64, usize> = HashMap::new();
    for f in want {
        *want_count.entry(f.id).or_default() += 1;
    }
    let missing: Vec<i64> = want_count
        .iter()
        .filter(|(id, n)| count.get(id).copied().unwrap_or(0) < **n)
        .map(|(id, _)| *id)
        .collect();
    let repeated: Vec<i64> = count
        .iter()
        .filter(|(id, n)| **n > want_count.get(id).copied().unwrap_or(0))
        .map(|(id, _)| *id)
        .collect();
    panic!(
        "{what}: {} frames, {} in the log's rendering; first difference at index {at:?} \
         (got {:?}, want {:?}); ids missing {missing:?}, repeated {repeated:?}",
        got.len(),
        want.len(),
        at.and_then(|i| got.get(i)).map(|f| (f.id, &f.data)),
        at.and_then(|i| want.get(i)).map(|f| (f.id, &f.data)),
    );
}

/// Requests to the load balancer, counted: the first attempt of each, and how many needed a
/// retry (which goes with the same `Idempotency-Key`).
#[derive(Clone)]
pub(crate) struct Lb {
    pub base: String,
    client: reqwest::Client,
    pub failures: Arc<Mutex<Vec<String>>>,
}

/// An answer: status, which instance, body.
pub(crate) struct Answer {
    pub status: u16,
    pub served_by: String,
    pub content_type: String,
    pub body: String,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }
}

impl Lb {
    pub(crate) fn new(base: &str) -> Lb {
        Lb {
            base: base.to_string(),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(15))
                .build()
                .unwrap(),
            failures: Default::default(),
        }
    }

    /// One attempt; `Err` is a transport error.
    pub(crate) async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        key: Option<&str>,
    ) -> Result<Answer, String> {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.json(b);
        }
        if let Some(k) = key {
            req = req.header("idempotency-key", k);
        }
        let r = req.send().await.map_err(|e| format!("{e}"))?;
        let status = r.status().as_u16();
        let header = |n: &str| {
            r.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        let (served_by, content_type) = (header("x-served-by"), header("content-type"));
        let body = r.text().await.map_err(|e| format!("{e}"))?;
        Ok(Answer {
            status,
            served_by,
            content_type,
            body,
        })
    }

    /// A request that must succeed: a failed first attempt is counted in `failures`, then
    /// retried (same key) until it succeeds or `within` passes.
    pub(crate) async fn must(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        key: Option<&str>,
        within: Duration,
    ) -> Answer {
        let t0 = Instant::now();
        let mut first = true;
        loop {
            let r = self.send(method.clone(), path, body, key).await;
            match r {
                Ok(a) if (200..300).contains(&a.status) => return a,
                other => {
                    let why = match &other {
                        Ok(a) => format!("{} {} ({})", a.status, a.body, a.served_by),
                        Err(e) => e.clone(),
                    };
                    if first {
                        self.failures
                            .lock()
                            .unwrap()
                            .push(format!("{method} {path}: {why}"));
                        first = false;
                    }
                    assert!(
                        t0.elapsed() < within,
                        "{method} {path} still failing after {within:?}: {why}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// Starts a chat run; `(runId, instance)`.
    pub(crate) async fn chat(&self, thread: &str, message: &str) -> (String, String) {
        let a = self
            .must(
                reqwest::Method::POST,
                &format!("/instance-ai/chat/{}", enc(thread)),
                Some(&json!({ "message": message })),
                Some(&format!("chat-{thread}")),
                Duration::from_secs(20),
            )
            .await;
        let run = a.json()["runId"].as_str().expect("runId").to_string();
        (run, a.served_by)
    }

    pub(crate) fn failures(&self) -> Vec<String> {
        self.failures.lock().unwrap().clone()
    }
}

/// What an external agent posted.
pub(crate) struct Posted {
    pub thread: String,
    pub acked: Vec<i64>,
    /// Every delta text it sent and had acknowledged (each unique: found exactly once in the
    /// log).
    pub texts: Vec<String>,
    /// The instance that stored its `run-start` (it holds the run's lease).
    pub started_on: String,
    /// Its run was finished by the fleet before its own `run-finish` (409 `run_finished`):
    /// the orphan sweep closes an ingested run whose lease holder died.
    pub closed_under_it: bool,
}

/// An external agent posting its run through the ingest route: `run-start`, `batches` batches
/// of `per_batch` deltas `pause` apart, `run-finish`; each post with an `Idempotency-Key` and
/// retried until acknowledged.
pub(crate) fn ingest_agent(
    lb: Lb,
    thread: String,
    batches: usize,
    per_batch: usize,
    pause: Duration,
) -> tokio::task::JoinHandle<Posted> {
    tokio::spawn(async move {
        let (run, agent) = (format!("run-{thread}"), format!("agent-{thread}"));
        let path = format!("/instance-ai/threads/{}/events", enc(&thread));
        let mut p = Posted {
            thread: thread.clone(),
            acked: Vec::new(),
            texts: Vec::new(),
            started_on: String::new(),
            closed_under_it: false,
        };
        for k in 0..=batches + 1 {
            let mut texts = Vec::new();
            let events: Vec<Value> = if k == 0 {
                vec![run_start(&run, &agent)]
            } else if k == batches + 1 {
                vec![run_finish(&run, &agent, "completed")]
            } else {
                (0..per_batch)
                    .map(|j| {
                        let t = format!("{thread}:{k}:{j};");
                        texts.push(t.clone());
                        text_delta(&run, &agent, &t)
                    })
                    .collect()
            };
            let body = json!({ "events": events });
            let key = format!("ingest-{thread}-{k}");
            let t0 = Instant::now();
            let mut first = true;
            let a = loop {
                match lb
                    .send(reqwest::Method::POST, &path, Some(&body), Some(&key))
                    .await
                {
                    Ok(a) if a.status == 200 => break a,
                    Ok(a) if a.status == 409 && a.body.contains("\"run_finished\"") => {
                        p.closed_under_it = true;
                        return p;
                    }
                    other => {
                        let why = match &other {
                            Ok(a) => format!("{} {} ({})", a.status, a.body, a.served_by),
                            Err(e) => e.clone(),
                        };
                        if first {
                            lb.failures
                                .lock()
                                .unwrap()
                                .push(format!("POST {path}: {why}"));
                            first = false;
                        }
                        assert!(
                            t0.elapsed() < Duration::from_secs(30),
                            "POST {path} still failing after 30 s: {why}"
                        );
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            };
            if k == 0 {
                p.started_on = a.served_by.clone();
            }
            p.acked.extend(ids_of(&a.json()));
            p.texts.extend(texts);
            tokio::time::sleep(pause).await;
        }
        p
    })
}

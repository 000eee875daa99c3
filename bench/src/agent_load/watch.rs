//! One SSE watcher of the agent-load scenario: reads a thread's stream (n8n or AG-UI) from the
//! start until it has the thread's last event, and records what a full check against the log
//! needs (every event id in arrival order, the n8n types, the model's tokens) and each token's
//! delivery latency (provider's write → this read).
//!
//! Behind a load balancer (`--haproxy`) it resumes as a browser's EventSource does: when its
//! stream ends or fails it reconnects with `Last-Event-ID`, wherever the balancer sends it, and
//! records each stream (which instance, when it opened, its first frame, its end) for the
//! reconnect storm ([`super::storm`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Deserialize;

use super::storm::Conn;
use crate::client::us;
use crate::fake_llm::{is_token, token_times};
use crate::sse::{Read, SseConn};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Protocol {
    N8n,
    AgUi,
}

impl Protocol {
    pub fn path(self, thread: &str) -> String {
        match self {
            Protocol::N8n => format!("/instance-ai/events/{thread}"),
            Protocol::AgUi => format!("/api/v1/agent/runs/{thread}/events"),
        }
    }
}

/// What a watcher saw.
pub struct Seen {
    pub protocol: Protocol,
    pub thread: String,
    /// The `id:` of every frame that had one, in arrival order (AG-UI join preludes left out).
    pub ids: Vec<i64>,
    /// n8n only: the event type of each id.
    pub types: Vec<String>,
    /// The model's tokens in arrival order (the text of text-deltas, split on blanks).
    pub tokens: Vec<String>,
    /// Delivery latency of each token, µs.
    pub latency_us: Vec<u64>,
    /// When each token of `latency_us` was written (µs since [`crate::client::base`]).
    pub sent_us: Vec<u64>,
    /// Why it stopped early, if it did.
    pub error: Option<String>,
    /// Its streams, in order.
    pub conns: Vec<Conn>,
    /// AG-UI: join preludes left out, one per resume into an open run.
    pub preludes: usize,
    /// Attempts to (re)connect that got no stream (a refused connection, a status other than
    /// 200, or a close before the response head).
    pub refused: u64,
}

#[derive(Deserialize)]
struct Frame<'a> {
    #[serde(rename = "type", borrow)]
    ty: &'a str,
    /// n8n: the event's payload.
    #[serde(default)]
    payload: Option<Payload>,
    /// AG-UI `TEXT_MESSAGE_CONTENT`.
    #[serde(default)]
    delta: Option<String>,
}

#[derive(Deserialize)]
struct Payload {
    #[serde(default)]
    text: Option<String>,
}

/// Reads until a frame with id ≥ `last` (set once the thread is done) arrives, or `limit` passes.
/// With `resume`, a stream that ends or fails is resumed from the last id seen.
pub async fn watch(
    addr: SocketAddr,
    protocol: Protocol,
    thread: String,
    last: Arc<AtomicI64>,
    limit: Duration,
    resume: bool,
) -> Seen {
    let mut seen = Seen {
        protocol,
        thread,
        ids: Vec::with_capacity(512),
        types: Vec::new(),
        tokens: Vec::with_capacity(512),
        latency_us: Vec::with_capacity(512),
        sent_us: Vec::with_capacity(512),
        error: None,
        conns: Vec::new(),
        preludes: 0,
        refused: 0,
    };
    let deadline = Instant::now() + limit;
    let mut backoff = false;
    loop {
        if backoff {
            // Refused: HAProxy may still route to the dead instance for a moment.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let from = seen.ids.last().copied().filter(|_| resume);
        let refused = seen.refused;
        let r = stream(addr, from, &last, deadline, &mut seen).await;
        let Err(e) = r else { return seen };
        let retry = resume && Instant::now() < deadline && !e.is::<BadFrame>();
        if !retry {
            seen.error = Some(format!("{e:#}"));
            return seen;
        }
        // A stream that ended is resumed at once; a refused attempt is retried after a pause.
        backoff = seen.refused > refused;
    }
}

/// A frame held back while it may belong to AG-UI's join prelude: id, data, arrival.
type Held = (Option<i64>, Vec<u8>, Instant);

/// A frame that is not JSON: the server's fault, not the connection's; never retried.
#[derive(Debug)]
struct BadFrame(String);

impl std::fmt::Display for BadFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a frame that is not JSON: {}", self.0)
    }
}

impl std::error::Error for BadFrame {}

/// One stream, from `from` (`Last-Event-ID`) on: `Ok` once the target id has arrived. A stream
/// that opened is recorded in `seen.conns`; an attempt that did not, in `seen.refused`.
async fn stream(
    addr: SocketAddr,
    from: Option<i64>,
    last: &AtomicI64,
    deadline: Instant,
    seen: &mut Seen,
) -> anyhow::Result<()> {
    let mut conn = match SseConn::connect(addr, &seen.protocol.path(&seen.thread), from, None).await
    {
        Ok(c) => c,
        Err(e) => {
            seen.refused += 1;
            return Err(e);
        }
    };
    let mut first_frame = None;
    // AG-UI resumed: a join prelude (docs/protocol.md, "Resume") may come first: frames without
    // an id, then one with `id: from`. Held back until the first id says whether it is one.
    let mut prelude: Option<Vec<Held>> = from
        .filter(|_| seen.protocol == Protocol::AgUi)
        .map(|_| Vec::new());
    let r = follow(
        &mut conn,
        from,
        last,
        deadline,
        seen,
        &mut first_frame,
        &mut prelude,
    )
    .await;
    match &conn.opened {
        Some((at, by)) => seen.conns.push(Conn {
            served_by: by.clone(),
            opened_us: us(*at),
            first_frame_us: first_frame,
            ended_us: r.is_err().then(|| us(Instant::now())),
        }),
        None => seen.refused += 1,
    }
    r
}

async fn follow(
    conn: &mut SseConn,
    from: Option<i64>,
    last: &AtomicI64,
    deadline: Instant,
    seen: &mut Seen,
    first_frame: &mut Option<u64>,
    prelude: &mut Option<Vec<Held>>,
) -> anyhow::Result<()> {
    let mut bad: Option<String> = None;
    loop {
        if seen
            .ids
            .last()
            .is_some_and(|&id| id >= last.load(Ordering::Acquire))
        {
            return Ok(());
        }
        // Re-check the target now and then: it is set after the stream may have gone quiet.
        let read = tokio::time::timeout(
            Duration::from_millis(500),
            conn.read_some(64 * 1024, &mut |id, data, at| {
                first_frame.get_or_insert(us(at));
                if let Some(held) = prelude {
                    if id.is_none() {
                        held.push((id, data.to_vec(), at));
                        return;
                    }
                    let held = prelude.take().expect("some");
                    if id == from {
                        seen.preludes += 1;
                        return;
                    }
                    // No prelude (no run was open): what was held is the stream's.
                    for (id, data, at) in held {
                        take(seen, id, &data, at, &mut bad);
                    }
                }
                take(seen, id, data, at, &mut bad);
            }),
        )
        .await;
        if let Some(b) = bad.take() {
            return Err(BadFrame(b).into());
        }
        match read {
            Ok(r) => {
                if let Read::Eof = r? {
                    bail!("the stream ended");
                }
            }
            Err(_) if Instant::now() > deadline => {
                return Err(anyhow::anyhow!("no end of the thread by the deadline"))
                    .context("watcher timed out");
            }
            Err(_) => {}
        }
    }
}

/// Records one frame.
fn take(seen: &mut Seen, id: Option<i64>, data: &[u8], at: Instant, bad: &mut Option<String>) {
    let at = us(at);
    let Ok(f) = serde_json::from_slice::<Frame<'_>>(data) else {
        bad.get_or_insert_with(|| String::from_utf8_lossy(data).into_owned());
        return;
    };
    let text = match seen.protocol {
        Protocol::N8n if f.ty == "text-delta" => f.payload.and_then(|p| p.text),
        Protocol::AgUi if f.ty == "TEXT_MESSAGE_CONTENT" => f.delta,
        _ => None,
    };
    if let Some(text) = text {
        // The user's message is content on AG-UI too: only the model's tokens count.
        for t in text.split_whitespace().filter(|t| is_token(t)) {
            seen.tokens.push(t.to_string());
        }
        for sent in token_times(&text) {
            seen.sent_us.push(sent);
            seen.latency_us.push(at.saturating_sub(sent));
        }
    }
    if let Some(id) = id {
        seen.ids.push(id);
        if seen.protocol == Protocol::N8n {
            seen.types.push(f.ty.to_string());
        }
    }
}

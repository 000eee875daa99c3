//! One SSE watcher of the agent-load scenario: reads a thread's stream (n8n or AG-UI) from the
//! start until it has the thread's last event, and records what a full check against the log
//! needs (every event id in arrival order, the n8n types, the model's tokens) and each token's
//! delivery latency (provider's write → this read).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Deserialize;

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
    /// The `id:` of every frame that had one, in arrival order.
    pub ids: Vec<i64>,
    /// n8n only: the event type of each id.
    pub types: Vec<String>,
    /// The model's tokens in arrival order (the text of text-deltas, split on blanks).
    pub tokens: Vec<String>,
    /// Delivery latency of each token, µs.
    pub latency_us: Vec<u64>,
    /// Why it stopped early, if it did.
    pub error: Option<String>,
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
pub async fn watch(
    addr: SocketAddr,
    protocol: Protocol,
    thread: String,
    last: Arc<AtomicI64>,
    limit: Duration,
) -> Seen {
    let mut seen = Seen {
        protocol,
        thread,
        ids: Vec::with_capacity(512),
        types: Vec::new(),
        tokens: Vec::with_capacity(512),
        latency_us: Vec::with_capacity(512),
        error: None,
    };
    if let Err(e) = read(addr, &last, limit, &mut seen).await {
        seen.error = Some(format!("{e:#}"));
    }
    seen
}

async fn read(
    addr: SocketAddr,
    last: &AtomicI64,
    limit: Duration,
    seen: &mut Seen,
) -> anyhow::Result<()> {
    let mut conn = SseConn::connect(addr, &seen.protocol.path(&seen.thread), None, None).await?;
    let deadline = Instant::now() + limit;
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
                    seen.latency_us
                        .extend(token_times(&text).map(|sent| at.saturating_sub(sent)));
                }
                if let Some(id) = id {
                    seen.ids.push(id);
                    if seen.protocol == Protocol::N8n {
                        seen.types.push(f.ty.to_string());
                    }
                }
            }),
        )
        .await;
        if let Some(b) = bad.take() {
            anyhow::bail!("a frame that is not JSON: {b}");
        }
        match read {
            Ok(r) => {
                if let Read::Eof = r? {
                    anyhow::bail!("the stream ended");
                }
            }
            Err(_) if Instant::now() > deadline => {
                return Err(anyhow::anyhow!("no end of the thread within {limit:?}"))
                    .context("watcher timed out");
            }
            Err(_) => {}
        }
    }
}

//! A fake OpenAI-compatible provider for the agent-load scenario: a real HTTP server on loopback
//! speaking the chat-completions SSE wire format, which streams text at model speed and drives
//! each run through a tool call and a sub-agent. It keeps no script: what it answers follows from
//! the request alone (its tools and how many tool results it carries), so any number of runs can
//! share it in any interleaving.
//!
//! Every text token is `<µs since client::base>.<n> `: the time the provider wrote it, so a
//! watcher that reads it computes the delivery latency (provider's write → watcher's read) from
//! the token itself, and the log holds the same text to check it against.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::client::us;

/// How the provider paces its answers.
#[derive(Clone, Copy)]
pub struct Pace {
    /// Text tokens per second of each answer (~40 is a fast model).
    pub tokens_per_sec: f64,
    /// Text tokens of a whole run: a quarter before the `delegate` call, a quarter from the
    /// sub-agent, half in the final answer.
    pub tokens_per_run: usize,
}

/// What the provider did, for the report.
#[derive(Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub tokens: AtomicU64,
    pub failed: AtomicU64,
}

/// Starts the provider; `http://<addr>/v1` is its base URL.
pub async fn start(pace: Pace) -> anyhow::Result<(SocketAddr, Arc<Counters>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let counters = Arc::new(Counters::default());
    let c = counters.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let c = c.clone();
            tokio::spawn(async move {
                if serve(s, pace, &c).await.is_err() {
                    c.failed.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    Ok((addr, counters))
}

/// Reads one request (head and `content-length` body) and answers it; the connection closes.
/// Reads one HTTP/1.1 request (head, then a `Content-Length` body) off `s`: the body. The
/// fakes answer with a hand-written stream so that each chunk's write time is theirs to choose
/// and to record; a framework would put its own buffering between the two.
pub async fn read_request_body(s: &mut TcpStream) -> anyhow::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut tmp = [0u8; 16 * 1024];
    let head_end = loop {
        let n = s.read(&mut tmp).await?;
        anyhow::ensure!(n > 0, "closed before the request head");
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = s.read(&mut tmp).await?;
        anyhow::ensure!(n > 0, "closed inside the request body");
        buf.extend_from_slice(&tmp[..n]);
    }
    buf.truncate(head_end + len);
    Ok(buf.split_off(head_end))
}

async fn serve(mut s: TcpStream, pace: Pace, c: &Counters) -> anyhow::Result<()> {
    s.set_nodelay(true)?;
    let body = read_request_body(&mut s).await?;
    let req: Value = serde_json::from_slice(&body)?;
    c.requests.fetch_add(1, Ordering::Relaxed);
    s.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
    )
    .await?;
    match plan(&req, pace) {
        Answer::Title => {
            frame(&mut s, &text_chunk("Load run")).await?;
            finish(&mut s, "stop").await?;
        }
        Answer::Text(n) => {
            stream_tokens(&mut s, n, pace, c).await?;
            finish(&mut s, "stop").await?;
        }
        Answer::TextThenCall(n, name, args) => {
            stream_tokens(&mut s, n, pace, c).await?;
            let args = args.to_string();
            let (a, b) = args.split_at(args.len() / 2);
            frame(&mut s, &tool_chunk(Some(name), "")).await?;
            frame(&mut s, &tool_chunk(None, a)).await?;
            frame(&mut s, &tool_chunk(None, b)).await?;
            finish(&mut s, "tool_calls").await?;
        }
    }
    s.shutdown().await?;
    Ok(())
}

enum Answer {
    /// A title request (the agent names the thread from its first message).
    Title,
    /// `n` tokens, then stop.
    Text(usize),
    /// `n` tokens, then one tool call.
    TextThenCall(usize, &'static str, Value),
}

/// The run's shape, from the request alone: the orchestrator (offered `delegate`) speaks, then
/// delegates; the sub-agent (not offered it) lists workflows, then answers; the orchestrator,
/// given the sub-agent's result, answers.
fn plan(req: &Value, pace: Pace) -> Answer {
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    let system = messages
        .first()
        .and_then(|m| m["content"].as_str())
        .unwrap_or("");
    if system.starts_with("Write a short title") {
        return Answer::Title;
    }
    let offered = |name: &str| {
        req["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == name))
    };
    let results = messages.iter().filter(|m| m["role"] == "tool").count();
    let quarter = (pace.tokens_per_run / 4).max(1);
    let rest = pace.tokens_per_run.saturating_sub(2 * quarter).max(1);
    if offered("delegate") {
        if results == 0 {
            Answer::TextThenCall(
                quarter,
                "delegate",
                json!({"role": "researcher", "instructions": "List the workflows and summarise them.", "tools": ["list-workflows"]}),
            )
        } else {
            Answer::Text(rest)
        }
    } else if results == 0 {
        Answer::TextThenCall(0, "list-workflows", json!({"limit": 5}))
    } else {
        Answer::Text(quarter)
    }
}

async fn stream_tokens(
    s: &mut TcpStream,
    n: usize,
    pace: Pace,
    c: &Counters,
) -> anyhow::Result<()> {
    let every = Duration::from_secs_f64(1.0 / pace.tokens_per_sec.max(0.001));
    let start = Instant::now();
    for k in 0..n {
        // Paced from the answer's start, so a late wake-up does not slow the whole answer.
        tokio::time::sleep_until((start + every * k as u32).into()).await;
        let token = format!("{}.{k} ", us(Instant::now()));
        frame(s, &text_chunk(&token)).await?;
        c.tokens.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

async fn frame(s: &mut TcpStream, v: &Value) -> anyhow::Result<()> {
    s.write_all(format!("data: {v}\n\n").as_bytes()).await?;
    Ok(())
}

async fn finish(s: &mut TcpStream, reason: &str) -> anyhow::Result<()> {
    frame(
        s,
        &json!({"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":reason}]}),
    )
    .await?;
    frame(
        s,
        &json!({"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":20,"total_tokens":70}}),
    )
    .await?;
    s.write_all(b"data: [DONE]\n\n").await?;
    Ok(())
}

pub(crate) fn text_chunk(t: &str) -> Value {
    json!({"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":t},"finish_reason":null}]})
}

fn tool_chunk(name: Option<&str>, args: &str) -> Value {
    let mut f = json!({"arguments": args});
    let mut call = json!({"index": 0});
    if let Some(n) = name {
        f["name"] = json!(n);
        call["id"] = json!(format!("call_{n}"));
        call["type"] = json!("function");
    }
    call["function"] = f;
    json!({"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[call]},"finish_reason":null}]})
}

/// Whether `t` is one of the provider's tokens (`<µs>.<n>`).
pub fn is_token(t: &str) -> bool {
    t.split_once('.').is_some_and(|(a, b)| {
        !a.is_empty() && !b.is_empty() && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit())
    })
}

/// The send times (µs since `client::base`) of the tokens in a text (a delta may hold several).
pub fn token_times(text: &str) -> impl Iterator<Item = u64> + '_ {
    text.split_whitespace()
        .filter(|t| is_token(t))
        .filter_map(|t| t.split_once('.').and_then(|(us, _)| us.parse().ok()))
}

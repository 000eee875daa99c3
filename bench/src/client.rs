//! Shared client pieces of the server scenarios: posting events, appenders (paced or not),
//! subscribers that record when each event arrived, and latency from acknowledgements.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;

use crate::sse::{Read, SseConn};

/// The instant all recorded times are relative to.
pub fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Microseconds since [`base`].
pub fn us(t: Instant) -> u64 {
    t.saturating_duration_since(base()).as_micros() as u64
}

pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .tcp_nodelay(true)
        .build()
        .expect("client")
}

/// POSTs an ingest body to `thread`; returns the stored ids.
pub async fn post_events(
    client: &reqwest::Client,
    addr: SocketAddr,
    thread: &str,
    body: Bytes,
) -> anyhow::Result<Vec<i64>> {
    post_events_keyed(client, addr, thread, body, None).await
}

/// [`post_events`] with an `Idempotency-Key`: a retry with the same key and body is answered
/// with the first answer's ids, and stores nothing again.
pub async fn post_events_keyed(
    client: &reqwest::Client,
    addr: SocketAddr,
    thread: &str,
    body: Bytes,
    key: Option<&str>,
) -> anyhow::Result<Vec<i64>> {
    let mut req = client
        .post(format!("http://{addr}/instance-ai/threads/{thread}/events"))
        .header("content-type", "application/json")
        .body(body);
    if let Some(k) = key {
        req = req.header("idempotency-key", k);
    }
    let resp = req.send().await?;
    let status = resp.status();
    let bytes = resp.bytes().await?;
    if !status.is_success() {
        bail!(
            "ingest answered {status}: {}",
            String::from_utf8_lossy(&bytes)
        );
    }
    #[derive(serde::Deserialize)]
    struct Ids {
        ids: Vec<i64>,
    }
    Ok(serde_json::from_slice::<Ids>(&bytes)?.ids)
}

/// Acknowledged ids with the time (µs since [`base`]) their POST was answered.
#[derive(Default, Clone)]
pub struct Acks(Arc<Mutex<Vec<(i64, u64)>>>);

impl Acks {
    fn push(&self, ids: &[i64], at: u64) {
        let mut v = self.0.lock().expect("acks");
        v.extend(ids.iter().map(|&i| (i, at)));
    }

    pub fn map(&self) -> HashMap<i64, u64> {
        self.0.lock().expect("acks").iter().copied().collect()
    }

    pub fn sorted_ids(&self) -> Vec<i64> {
        let mut v: Vec<i64> = self.0.lock().expect("acks").iter().map(|x| x.0).collect();
        v.sort_unstable();
        v
    }
}

/// Posts `body` to `thread` every `every` for `dur` (each POST its own task, at most 64 in
/// flight), recording acknowledgements. Returns (posts, errors, seconds).
#[allow(clippy::too_many_arguments)]
pub async fn paced_append(
    client: &reqwest::Client,
    addr: SocketAddr,
    thread: &str,
    body: Bytes,
    every: Duration,
    dur: Duration,
    acks: &Acks,
) -> (u64, u64, f64) {
    let sem = Arc::new(tokio::sync::Semaphore::new(64));
    let mut iv = tokio::time::interval(every);
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let start = Instant::now();
    let mut tasks = Vec::new();
    while start.elapsed() < dur {
        iv.tick().await;
        let permit = sem.clone().acquire_owned().await.expect("semaphore");
        let (client, thread, body, acks) = (
            client.clone(),
            thread.to_string(),
            body.clone(),
            acks.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let r = post_events(&client, addr, &thread, body).await;
            let at = us(Instant::now());
            drop(permit);
            match r {
                Ok(ids) => {
                    acks.push(&ids, at);
                    true
                }
                Err(e) => {
                    eprintln!("  append failed: {e}");
                    false
                }
            }
        }));
    }
    let (mut ok, mut err) = (0, 0);
    for t in tasks {
        if t.await.unwrap_or(false) {
            ok += 1
        } else {
            err += 1
        }
    }
    (ok, err, start.elapsed().as_secs_f64())
}

/// `appenders` concurrent loops posting `body` back to back until `total_posts` are done.
pub async fn burst_append(
    client: &reqwest::Client,
    addr: SocketAddr,
    thread: &str,
    body: Bytes,
    appenders: usize,
    total_posts: usize,
    acks: &Acks,
) -> (u64, u64, f64) {
    let left = Arc::new(AtomicI64::new(total_posts as i64));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..appenders {
        let (client, thread, body, acks, left) = (
            client.clone(),
            thread.to_string(),
            body.clone(),
            acks.clone(),
            left.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut err) = (0u64, 0u64);
            while left.fetch_sub(1, Ordering::Relaxed) > 0 {
                match post_events(&client, addr, &thread, body.clone()).await {
                    Ok(ids) => {
                        acks.push(&ids, us(Instant::now()));
                        ok += 1;
                    }
                    Err(_) => err += 1,
                }
            }
            (ok, err)
        }));
    }
    let (mut ok, mut err) = (0, 0);
    for t in tasks {
        let (o, e) = t.await.expect("appender");
        ok += o;
        err += e;
    }
    (ok, err, start.elapsed().as_secs_f64())
}

/// How a subscriber reads.
#[derive(Clone)]
pub struct ReadMode {
    /// While set (and not caught up), read at most `slow_bytes` every `slow_pause`.
    pub slow: Option<(usize, Duration, Arc<AtomicBool>)>,
}

impl ReadMode {
    pub fn fast() -> ReadMode {
        ReadMode { slow: None }
    }
}

/// A subscriber's record: (id, µs since base when it arrived), in arrival order.
pub type Received = Vec<(i64, u64)>;

/// Reads frames until an event with id ≥ `stop` arrives (`stop` may be set later), the stream
/// ends, or `limit` passes.
pub async fn subscribe_until(
    mut conn: SseConn,
    stop: Arc<AtomicI64>,
    mode: ReadMode,
    limit: Duration,
) -> anyhow::Result<Received> {
    let mut got: Received = Vec::with_capacity(1024);
    let deadline = Instant::now() + limit;
    let mut last = i64::MIN;
    loop {
        if last >= stop.load(Ordering::Acquire) {
            return Ok(got);
        }
        let max = match &mode.slow {
            Some((bytes, pause, slow)) if slow.load(Ordering::Relaxed) => {
                tokio::time::sleep(*pause).await;
                *bytes
            }
            _ => 64 * 1024,
        };
        let read = tokio::time::timeout_at(
            deadline.into(),
            conn.read_some(max, &mut |id, _data, at| {
                if let Some(id) = id {
                    got.push((id, us(at)));
                    last = id;
                }
            }),
        )
        .await
        .context("subscriber timed out")??;
        if let Read::Eof = read {
            return Ok(got);
        }
    }
}

/// Latencies (ns) from each received event's acknowledgement to its arrival; events that
/// arrived before their POST was answered count as 0.
pub fn ack_latencies<'a>(
    acks: &HashMap<i64, u64>,
    received: impl IntoIterator<Item = &'a (i64, u64)>,
) -> Vec<u64> {
    received
        .into_iter()
        .filter_map(|(id, at)| acks.get(id).map(|ack| at.saturating_sub(*ack) * 1000))
        .collect()
}

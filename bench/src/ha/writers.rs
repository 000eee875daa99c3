//! The failover scenario's load: writers appending small batches of text deltas to a thread of
//! their own at a paced rate, one post at a time, each post with an `Idempotency-Key` and sent
//! again with it until answered (so a retry never stores twice); and the check of what they
//! were told against the log read back from the new primary.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::agent_load::logdb::LogDb;
use crate::client::post_events_keyed;
use crate::data::{delta, ingest_body, run_finish, run_start};

/// How long a post is sent again before it counts as failed: longer than the server's own
/// wait for a primary (`--store-wait-secs`, 30 s), so a failover never fails a post here.
const RETRY_FOR: Duration = Duration::from_secs(60);

/// One acknowledged post.
pub struct Post {
    pub sent: Instant,
    pub answered: Instant,
    pub ids: Vec<i64>,
    /// The texts of its deltas (unique in the whole run).
    pub texts: Vec<String>,
    /// Sends it took (1: answered the first time).
    pub tries: u32,
}

/// What one writer sent and was told.
pub struct Writer {
    pub thread: String,
    /// Acknowledged posts, in order (the run-start first, the run-finish last).
    pub posts: Vec<Post>,
    /// Posts never acknowledged within [`RETRY_FOR`]: their texts and the last error.
    pub failed: Vec<(Vec<String>, String)>,
}

/// Starts `n` writers on threads `{prefix}{i}`, each posting `per_post` deltas every `every`
/// until `stop`, then its run's finish.
pub fn start(
    addr: SocketAddr,
    prefix: &str,
    n: usize,
    per_post: usize,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Writer>> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(90))
        .tcp_nodelay(true)
        .build()
        .expect("client");
    (0..n)
        .map(|i| {
            let (client, stop) = (client.clone(), stop.clone());
            let thread = format!("{prefix}{i}");
            tokio::spawn(async move {
                let run = format!("r-{thread}");
                let mut w = Writer {
                    thread,
                    posts: Vec::new(),
                    failed: Vec::new(),
                };
                let mut poster = Poster {
                    client,
                    addr,
                    keys: 0,
                };
                poster
                    .post(&mut w, vec![run_start(&run, "w")], vec![])
                    .await;
                // Paced: a tick missed while a post waited (a failover) is skipped, not caught
                // up in a burst.
                let mut iv = tokio::time::interval(every);
                iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                let mut k = 0u64;
                while !stop.load(Ordering::Acquire) {
                    iv.tick().await;
                    let texts: Vec<String> = (0..per_post)
                        .map(|_| {
                            k += 1;
                            format!("{}#{k};", w.thread)
                        })
                        .collect();
                    let events = texts.iter().map(|t| delta(&run, "w", t)).collect();
                    poster.post(&mut w, events, texts).await;
                }
                poster
                    .post(&mut w, vec![run_finish(&run, "w")], vec![])
                    .await;
                w
            })
        })
        .collect()
}

/// How a writer posts: its client, the server, and the keys it has used.
struct Poster {
    client: reqwest::Client,
    addr: SocketAddr,
    keys: u64,
}

impl Poster {
    /// Posts `events` (whose delta texts are `texts`) with a new key, sending it again every
    /// 100 ms until answered 200, and records the answer in `w`.
    async fn post(&mut self, w: &mut Writer, events: Vec<serde_json::Value>, texts: Vec<String>) {
        self.keys += 1;
        let key = format!("{}-{}", w.thread, self.keys);
        let body = ingest_body(&events);
        let sent = Instant::now();
        let mut tries = 0;
        loop {
            tries += 1;
            let r = post_events_keyed(&self.client, self.addr, &w.thread, body.clone(), Some(&key));
            match r.await {
                Ok(ids) => {
                    w.posts.push(Post {
                        sent,
                        answered: Instant::now(),
                        ids,
                        texts,
                        tries,
                    });
                    return;
                }
                Err(e) if sent.elapsed() > RETRY_FOR => {
                    w.failed.push((texts, format!("{e:#}")));
                    return;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
}

/// What the log holds of the writers' threads against what they were told.
#[derive(Default, Debug)]
pub struct Tally {
    pub posts_acknowledged: u64,
    pub events_acknowledged: u64,
    /// Posts answered only on a retry (same key).
    pub posts_retried: u64,
    pub posts_failed: u64,
    /// Events of the threads in the log (their `thread-created` left out).
    pub events_in_log: u64,
    /// Acknowledged ids not in the log.
    pub lost: u64,
    /// Texts stored more than once.
    pub stored_twice: u64,
    /// Events in the log that no post was acknowledged for.
    pub unacknowledged_in_log: u64,
}

/// Reads every writer's thread back from the log (the database at `url`, the new primary
/// through HAProxy's write port) and counts: every acknowledged id there, every text once,
/// nothing else.
pub async fn check(url: &str, prefix: &str, writers: &[Writer]) -> anyhow::Result<Tally> {
    let mut db = LogDb::postgres(url).await?;
    let rows = db.thread_events(prefix).await?;
    db.close().await;
    let mut ids: HashMap<&str, Vec<i64>> = HashMap::new();
    let mut texts: HashMap<String, u64> = HashMap::new();
    for r in rows.iter().filter(|r| r.ty != "thread-created") {
        ids.entry(r.thread.as_str()).or_default().push(r.id);
        let p: serde_json::Value = serde_json::from_str(&r.payload)?;
        if let Some(t) = p["text"].as_str() {
            *texts.entry(t.to_string()).or_default() += 1;
        }
    }
    let mut t = Tally::default();
    for w in writers {
        let logged: HashSet<i64> = ids
            .get(w.thread.as_str())
            .map(|v| v.iter().copied().collect())
            .unwrap_or_default();
        t.events_in_log += logged.len() as u64;
        t.posts_failed += w.failed.len() as u64;
        let mut acked = HashSet::new();
        for p in &w.posts {
            t.posts_acknowledged += 1;
            t.posts_retried += u64::from(p.tries > 1);
            acked.extend(p.ids.iter().copied());
            t.lost += p.ids.iter().filter(|id| !logged.contains(id)).count() as u64;
            t.stored_twice += p
                .texts
                .iter()
                .filter(|x| texts.get(*x).copied().unwrap_or(0) > 1)
                .count() as u64;
        }
        t.events_acknowledged += acked.len() as u64;
        t.unacknowledged_in_log += logged.difference(&acked).count() as u64;
    }
    Ok(t)
}

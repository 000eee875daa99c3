//! The external agents of the agent-load scenario: each posts its own run through the ingest
//! route (`POST /instance-ai/threads/:id/events`): a run-start, then text deltas at model speed
//! in posts of a tenth of a second's worth, then a run-finish.
//!
//! Behind a load balancer (`retry`), each post carries an `Idempotency-Key` and a failed one is
//! sent again with it until it is answered, as tests/blackbox/fleet/load.rs does: a post the
//! killed instance stored before it died is then answered with its ids, not stored twice.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::check::ThreadLog;
use crate::client::{http_client, post_events_keyed, us};
use crate::data::{delta, ingest_body, run_finish, run_start};

pub struct Running {
    tasks: Vec<tokio::task::JoinHandle<Agent>>,
}

/// What one agent posted and was told.
pub struct Agent {
    thread: String,
    /// Acknowledged ids, in the order they were answered.
    ids: Vec<i64>,
    errors: u64,
    ack_ns: Vec<u64>,
    /// Posts answered only on a retry.
    retried: u64,
    /// Its run was closed by the fleet before its own `run-finish` (409 `run_finished`: the
    /// orphan sweep closed it), so the log has one event more than it was acknowledged.
    closed_under_it: bool,
}

pub struct Done {
    pub agents: Vec<Agent>,
    pub events: u64,
    pub errors: u64,
    pub ack_ns: Vec<u64>,
    pub retried: u64,
    /// Agents whose run the fleet closed under them.
    pub closed_under_them: u64,
}

/// Starts `n` agents, agent k on instance k mod the number of instances. With `retry`, a post
/// that fails is sent again (same key) every 100 ms for up to 30 s.
pub fn start(
    addrs: &[SocketAddr],
    n: usize,
    tokens_per_sec: f64,
    stop: Arc<AtomicBool>,
    retry: bool,
) -> Running {
    let client = http_client();
    let per_post = ((tokens_per_sec / 10.0).round() as usize).max(1);
    let tasks = (0..n)
        .map(|k| {
            let (client, stop, addr) = (client.clone(), stop.clone(), addrs[k % addrs.len()]);
            tokio::spawn(async move {
                let thread = format!("ingest-{k}");
                let run = format!("r-{thread}");
                let mut a = Agent {
                    thread,
                    ids: Vec::new(),
                    errors: 0,
                    ack_ns: Vec::new(),
                    retried: 0,
                    closed_under_it: false,
                };
                let mut poster = Poster {
                    client,
                    addr,
                    retry,
                    posts: 0,
                };
                if !poster.post(&mut a, &[run_start(&run, "ext")]).await {
                    return a;
                }
                let mut iv = tokio::time::interval(Duration::from_millis(100));
                iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut i = 0u64;
                while !stop.load(Ordering::Acquire) {
                    iv.tick().await;
                    let events: Vec<_> = (0..per_post)
                        .map(|_| {
                            i += 1;
                            delta(&run, "ext", &format!("{}.{i} ", us(Instant::now())))
                        })
                        .collect();
                    if !poster.post(&mut a, &events).await {
                        return a;
                    }
                }
                poster.post(&mut a, &[run_finish(&run, "ext")]).await;
                a
            })
        })
        .collect();
    Running { tasks }
}

/// How an agent posts.
struct Poster {
    client: reqwest::Client,
    addr: SocketAddr,
    retry: bool,
    /// Posts so far: the key of the next one.
    posts: u64,
}

impl Poster {
    /// Posts `events` and records the answer in `a`; `false` once the fleet has closed the run
    /// (nothing more may be posted to it).
    async fn post(&mut self, a: &mut Agent, events: &[serde_json::Value]) -> bool {
        self.posts += 1;
        let key = self.retry.then(|| format!("{}-{}", a.thread, self.posts));
        let body = ingest_body(events);
        let t0 = Instant::now();
        let mut tries = 0;
        loop {
            tries += 1;
            let r = post_events_keyed(
                &self.client,
                self.addr,
                &a.thread,
                body.clone(),
                key.as_deref(),
            )
            .await;
            match r {
                Ok(ids) => {
                    a.ids.extend(ids);
                    a.ack_ns.push(t0.elapsed().as_nanos() as u64);
                    a.retried += u64::from(tries > 1);
                    return true;
                }
                Err(e) if self.retry && format!("{e:#}").contains("\"run_finished\"") => {
                    a.closed_under_it = true;
                    return false;
                }
                Err(_) if self.retry && t0.elapsed() < Duration::from_secs(30) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(_) => {
                    a.errors += 1;
                    return true;
                }
            }
        }
    }
}

impl Running {
    pub async fn finish(self) -> Done {
        let mut d = Done {
            agents: Vec::new(),
            events: 0,
            errors: 0,
            ack_ns: Vec::new(),
            retried: 0,
            closed_under_them: 0,
        };
        for t in self.tasks {
            if let Ok(a) = t.await {
                d.events += a.ids.len() as u64;
                d.errors += a.errors;
                d.retried += a.retried;
                d.closed_under_them += u64::from(a.closed_under_it);
                d.ack_ns.extend(a.ack_ns.iter().copied());
                d.agents.push(a);
            } else {
                d.errors += 1;
            }
        }
        d
    }
}

/// Whether every acknowledged id is in its thread's log, in acknowledgement order, with nothing
/// else there; `all …` when so, else the first thread that differs.
pub fn check(log: &HashMap<String, ThreadLog>, d: &Done) -> String {
    let empty = ThreadLog::default();
    for a in &d.agents {
        let mut ids: Vec<i64> = log
            .get(&a.thread)
            .unwrap_or(&empty)
            .events
            .iter()
            .filter(|(_, ty)| ty != "thread-created")
            .map(|(id, _)| *id)
            .collect();
        // The fleet's own run-finish, which closed the run under the agent, was not its post.
        if a.closed_under_it && ids.len() == a.ids.len() + 1 {
            ids.pop();
        }
        if ids != a.ids {
            return format!(
                "{}: {} acknowledged, {} in the log",
                a.thread,
                a.ids.len(),
                ids.len()
            );
        }
    }
    format!(
        "all {} agents' {} acknowledged events are in the log, in order",
        d.agents.len(),
        d.events
    )
}

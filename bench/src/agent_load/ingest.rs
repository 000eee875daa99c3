//! The external agents of the agent-load scenario: each posts its own run through the ingest
//! route (`POST /instance-ai/threads/:id/events`): a run-start, then text deltas at model speed
//! in posts of a tenth of a second's worth, then a run-finish.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::PgConnection;

use crate::client::{http_client, post_events, us};
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
}

pub struct Done {
    pub agents: Vec<Agent>,
    pub events: u64,
    pub errors: u64,
    pub ack_ns: Vec<u64>,
}

/// Starts `n` agents, agent k on instance k mod the number of instances.
pub fn start(
    addrs: &[SocketAddr],
    n: usize,
    tokens_per_sec: f64,
    stop: Arc<AtomicBool>,
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
                    thread: thread.clone(),
                    ids: Vec::new(),
                    errors: 0,
                    ack_ns: Vec::new(),
                };
                let post = |events: Vec<serde_json::Value>| {
                    let (client, thread) = (client.clone(), thread.clone());
                    async move {
                        let t0 = Instant::now();
                        let r = post_events(&client, addr, &thread, ingest_body(&events)).await;
                        (r, t0.elapsed().as_nanos() as u64)
                    }
                };
                let record = |a: &mut Agent, r: (anyhow::Result<Vec<i64>>, u64)| match r.0 {
                    Ok(ids) => {
                        a.ids.extend(ids);
                        a.ack_ns.push(r.1);
                    }
                    Err(_) => a.errors += 1,
                };
                let r = post(vec![run_start(&run, "ext")]).await;
                record(&mut a, r);
                let mut iv = tokio::time::interval(Duration::from_millis(100));
                iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut i = 0u64;
                while !stop.load(Ordering::Acquire) {
                    iv.tick().await;
                    let events = (0..per_post)
                        .map(|_| {
                            i += 1;
                            delta(&run, "ext", &format!("{}.{i} ", us(Instant::now())))
                        })
                        .collect();
                    let r = post(events).await;
                    record(&mut a, r);
                }
                let r = post(vec![run_finish(&run, "ext")]).await;
                record(&mut a, r);
                a
            })
        })
        .collect();
    Running { tasks }
}

impl Running {
    pub async fn finish(self) -> Done {
        let mut d = Done {
            agents: Vec::new(),
            events: 0,
            errors: 0,
            ack_ns: Vec::new(),
        };
        for t in self.tasks {
            if let Ok(a) = t.await {
                d.events += a.ids.len() as u64;
                d.errors += a.errors;
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
pub async fn check(conn: &mut PgConnection, d: &Done) -> anyhow::Result<String> {
    for a in &d.agents {
        let ids: Vec<(i64,)> = sqlx::query_as(
            "SELECT id FROM events WHERE aggregate_type = 'thread' AND aggregate_id = $1 \
             AND event_type <> 'thread-created' ORDER BY id",
        )
        .bind(&a.thread)
        .fetch_all(&mut *conn)
        .await?;
        let ids: Vec<i64> = ids.into_iter().map(|r| r.0).collect();
        if ids != a.ids {
            return Ok(format!(
                "{}: {} acknowledged, {} in the log",
                a.thread,
                a.ids.len(),
                ids.len()
            ));
        }
    }
    Ok(format!(
        "all {} agents' {} acknowledged events are in the log, in order",
        d.agents.len(),
        d.events
    ))
}

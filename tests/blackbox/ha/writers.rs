//! The load of the HA tests: writers posting without keys or retries, pollers of a route, and
//! the checks of what they were told against the log.

use crate::common;
use crate::fleet::load::{
    assert_exact, full_read, ingest_agent, Frame, Lb, Posted, Protocol, Watcher,
};

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

/// What a writer without retries saw: each text sent once, and how it was answered.
#[derive(Default)]
pub(super) struct Outcomes {
    /// 200: the text, its ids, when it was sent and when answered.
    acked: Vec<(String, Vec<i64>, Instant, Instant)>,
    /// 503 (JSON `unavailable`): must not be stored.
    refused: Vec<(String, String)>,
    /// A transport error or other status: stored or not, but at most once.
    unknown: Vec<(String, String)>,
}

/// Appends deltas to `thread` one post at a time (no key, no retry), `pause` apart, until
/// `stop`.
pub(super) fn plain_writer(
    base: String,
    thread: String,
    pause: Duration,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Outcomes> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let url = format!("{base}/instance-ai/threads/{}/events", enc(&thread));
        let (run, agent) = (format!("run-{thread}"), "agent".to_string());
        let mut o = Outcomes::default();
        let r = client
            .post(&url)
            .json(&json!({"events": [run_start(&run, &agent)]}))
            .send()
            .await
            .expect("run-start");
        assert_eq!(r.status(), 200, "run-start of {thread}");
        let mut k = 0;
        while !stop.load(Ordering::SeqCst) {
            k += 1;
            let text = format!("{thread}#{k};");
            let sent = Instant::now();
            let r = client
                .post(&url)
                .json(&json!({"events": [text_delta(&run, &agent, &text)]}))
                .send()
                .await;
            match r {
                Ok(r) => {
                    let status = r.status().as_u16();
                    let body = r.text().await.unwrap_or_default();
                    match status {
                        200 => {
                            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                            o.acked.push((text, ids_of(&v), sent, Instant::now()));
                        }
                        503 => {
                            let v: serde_json::Value = serde_json::from_str(&body)
                                .unwrap_or_else(|e| panic!("503 not JSON ({e}): {body}"));
                            assert_eq!(v["error"]["code"], "unavailable", "{body}");
                            o.refused.push((text, body));
                        }
                        _ => o.unknown.push((text, format!("{status} {body}"))),
                    }
                }
                Err(e) => o.unknown.push((text, e.to_string())),
            }
            tokio::time::sleep(pause).await;
        }
        o
    })
}

/// Polls `path` every 100 ms until `stop`; keeps `(time, status)`.
pub(super) fn poller(
    base: String,
    path: &'static str,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(Instant, u16)>> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let mut out = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let status = match client.get(format!("{base}{path}")).send().await {
                Ok(r) => r.status().as_u16(),
                Err(_) => 0,
            };
            out.push((Instant::now(), status));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        out
    })
}

/// The texts of a thread's deltas in the log, with how often each is there.
pub(super) fn texts_in(frames: &[Frame]) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for f in frames {
        let v: serde_json::Value = serde_json::from_str(&f.data).unwrap_or_default();
        if let Some(t) = v["payload"]["text"].as_str() {
            *out.entry(t.to_string()).or_default() += 1;
        }
    }
    out
}

/// The HA tests' load on one server: external agents posting batches of four with
/// `Idempotency-Key`s, plain writers (the first `back_to_back` without a pause, so a batch is
/// nearly always in flight, the others 20 ms apart), and a watcher on every thread from its
/// start (n8n, and AG-UI too on the first agent's).
pub(super) struct Load {
    base: String,
    pub agents: Vec<String>,
    pub plains: Vec<String>,
    watchers: Vec<Watcher>,
    pub lb: Lb,
    stop: Arc<AtomicBool>,
    keyed: Vec<tokio::task::JoinHandle<Posted>>,
    plain: Vec<tokio::task::JoinHandle<Outcomes>>,
}

/// What a [`Load`]'s writers were told, checked against the log.
pub(super) struct LoadEnd {
    pub logs: HashMap<String, Vec<Frame>>,
    pub outcomes: Vec<Outcomes>,
}

impl Load {
    pub(super) fn start(base: &str, agents: usize, plains: usize, back_to_back: usize) -> Load {
        let agents: Vec<String> = (0..agents).map(|i| format!("agent-{i}")).collect();
        let plains: Vec<String> = (0..plains).map(|i| format!("plain-{i}")).collect();
        // Watchers first (from the start of each thread), then the load.
        let mut watchers: Vec<Watcher> = agents
            .iter()
            .chain(&plains)
            .map(|t| Watcher::start(base, t, Protocol::N8n))
            .collect();
        watchers.push(Watcher::start(base, &agents[0], Protocol::AgUi));
        let stop = Arc::new(AtomicBool::new(false));
        let lb = Lb::new(base);
        let keyed = agents
            .iter()
            .map(|t| ingest_agent(lb.clone(), t.clone(), 120, 4, Duration::from_millis(30)))
            .collect();
        let plain = plains
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let pause = Duration::from_millis(if i < back_to_back { 0 } else { 20 });
                plain_writer(base.to_string(), t.clone(), pause, stop.clone())
            })
            .collect();
        Load {
            base: base.to_string(),
            agents,
            plains,
            watchers,
            lb,
            stop,
            keyed,
            plain,
        }
    }

    /// Stops the writers (the agents end their 120 batches) and reads every thread: each
    /// acknowledged event is there once, each refused one absent ([`check_keyed`]; the plain
    /// writers' outcomes are for [`check_plain`]).
    pub(super) async fn stop(&mut self) -> LoadEnd {
        self.stop.store(true, Ordering::SeqCst);
        let mut posted: Vec<Posted> = Vec::new();
        for k in self.keyed.drain(..) {
            posted.push(k.await.expect("keyed writer"));
        }
        let mut outcomes: Vec<Outcomes> = Vec::new();
        for w in self.plain.drain(..) {
            outcomes.push(w.await.expect("plain writer"));
        }
        let logs = read_logs(&self.base, self.agents.iter().chain(&self.plains)).await;
        check_keyed(&posted, &logs);
        LoadEnd { logs, outcomes }
    }

    /// Every watcher ends, through `Last-Event-ID`, with exactly its thread's events.
    pub(super) async fn check_watchers(&mut self, logs: &HashMap<String, Vec<Frame>>) {
        check_exact(&mut self.watchers, &self.base, logs).await;
    }
}

/// Each of `watchers` (on the server at `base`) ends, through `Last-Event-ID`, with exactly its
/// thread's events: `logs` for n8n, a whole AG-UI read of the thread for AG-UI.
pub(super) async fn check_exact(
    watchers: &mut [Watcher],
    base: &str,
    logs: &HashMap<String, Vec<Frame>>,
) {
    for w in watchers {
        let want = match w.protocol {
            Protocol::N8n => logs[&w.thread].clone(),
            Protocol::AgUi => full_read(base, &w.thread, Protocol::AgUi).await,
        };
        let last = want.last().expect("a non-empty thread").id;
        w.finish_at(last, Duration::from_secs(30)).await;
        assert_exact(
            &w.frames(),
            &want,
            &format!("{:?} watcher of {} on {base}", w.protocol, w.thread),
        );
    }
}

/// Each thread's events as an n8n reader reads them from the start.
async fn read_logs<'a>(
    base: &str,
    threads: impl IntoIterator<Item = &'a String>,
) -> HashMap<String, Vec<Frame>> {
    let mut logs = HashMap::new();
    for t in threads {
        logs.insert(t.clone(), full_read(base, t, Protocol::N8n).await);
    }
    logs
}

/// Every id acknowledged to a keyed agent is in its thread's log, and every text it posted is
/// there once; no run was closed under it.
fn check_keyed(posted: &[Posted], logs: &HashMap<String, Vec<Frame>>) {
    for p in posted {
        assert!(!p.closed_under_it, "{}: run closed under it", p.thread);
        let texts = texts_in(&logs[&p.thread]);
        let ids: HashSet<i64> = logs[&p.thread].iter().map(|f| f.id).collect();
        for id in &p.acked {
            assert!(ids.contains(id), "{}: acknowledged id {id} lost", p.thread);
        }
        for t in &p.texts {
            assert_eq!(
                texts.get(t),
                Some(&1),
                "{}: {t:?} stored {:?} times",
                p.thread,
                texts.get(t)
            );
        }
    }
}

/// What the plain writers were told, checked against the log.
pub(super) struct Tally<'a> {
    pub acked: usize,
    pub refused: Vec<&'a (String, String)>,
    pub unknown: Vec<&'a (String, String)>,
    /// The longest time between two answers of one writer: from and to, after `since`.
    pub gap: (Duration, Duration),
    /// The slowest acknowledged append.
    pub slowest: Duration,
}

/// Checks each plain writer's appends against its thread's log: every acknowledged one there
/// once with its ids, every refused one absent, none stored twice; and tallies them.
pub(super) fn check_plain<'a>(
    threads: &[String],
    outcomes: &'a [Outcomes],
    logs: &HashMap<String, Vec<Frame>>,
    since: Instant,
) -> Tally<'a> {
    let mut tally = Tally {
        acked: 0,
        refused: Vec::new(),
        unknown: Vec::new(),
        gap: (Duration::ZERO, Duration::ZERO),
        slowest: Duration::ZERO,
    };
    for (t, o) in threads.iter().zip(outcomes) {
        let texts = texts_in(&logs[t]);
        let ids: HashSet<i64> = logs[t].iter().map(|f| f.id).collect();
        for w in o.acked.windows(2) {
            let between = w[1].3.duration_since(w[0].3);
            if between > tally.gap.1.saturating_sub(tally.gap.0) {
                tally.gap = (
                    w[0].3.saturating_duration_since(since),
                    w[1].3.saturating_duration_since(since),
                );
            }
            tally.slowest = tally.slowest.max(w[1].3.duration_since(w[1].2));
        }
        for (text, acked, _, _) in &o.acked {
            for id in acked {
                assert!(ids.contains(id), "{t}: acknowledged id {id} lost");
            }
            assert_eq!(
                texts.get(text),
                Some(&1),
                "{t}: acknowledged {text:?} stored {:?} times",
                texts.get(text)
            );
        }
        for (text, why) in &o.refused {
            assert_eq!(
                texts.get(text),
                None,
                "{t}: {text:?} refused ({why}) but stored"
            );
        }
        for (text, why) in &o.unknown {
            assert!(
                texts.get(text).copied().unwrap_or(0) <= 1,
                "{t}: {text:?} ({why}) stored twice"
            );
        }
        tally.acked += o.acked.len();
        tally.refused.extend(&o.refused);
        tally.unknown.extend(&o.unknown);
    }
    tally
}

//! Several instances on one Postgres (docs/operations.md, issue 3 items 3, 6 and 7), black-box:
//! every test makes a fresh database and starts two `threadstream serve` processes, A and B, on
//! it. A run started through A streams live to a client of B; cancel and confirm taken by B reach
//! A's run; 20 simultaneous chats for one thread over both instances give exactly one 200; ids
//! become visible in one global order while both instances append; a run orphaned by `kill -9`
//! is finished (`tool-error` for each open call, `run-finish` interrupted) or, waiting on a
//! confirmation, taken over by the other instance, which then uses the answer whether it came
//! before or after the takeover. Postgres LISTEN/NOTIFY and Redis Pub/Sub wake-ups are both
//! checked by latency: a stream that only found events on its one-second re-read fails.

use crate::common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

// ------------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------------

/// Drops its database when dropped (after the servers, see [`Cluster`]; `fleet.rs` too).
pub(crate) struct Db(pub(crate) Option<String>);

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(name) = self.0.take() {
            drop_database(name);
        }
    }
}

/// Two instances on one fresh database. Fields drop in order: the servers are killed before the
/// database is dropped.
struct Cluster {
    a: Server,
    b: Server,
    url: String,
    _db: Db,
}

/// Starts A and B at the same time (so their migrations race, as in a real roll-out) on a new
/// database.
async fn cluster(a: Opts, b: Opts) -> Cluster {
    let (name, url) = create_database().await;
    let db = Db(Some(name));
    let (a, b) = tokio::join!(
        Server::start_with(Opts {
            database_url: Some(url.clone()),
            ..a
        }),
        Server::start_with(Opts {
            database_url: Some(url.clone()),
            ..b
        }),
    );
    Cluster { a, b, url, _db: db }
}

pub(crate) async fn pool(url: &str) -> sqlx::PgPool {
    sqlx::PgPool::connect(url)
        .await
        .expect("connect to the test database")
}

pub(crate) fn approve() -> Value {
    json!({"kind": "approval", "approved": true})
}

/// Wall-clock epoch milliseconds of an `Instant` in the past (to compare with an event's `ts`).
fn wall_ms(at: Instant) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    now - Instant::now().saturating_duration_since(at).as_millis() as i64
}

fn is_of(e: &SseEvent, run: &str, ty: &str) -> bool {
    let v = e.json();
    v["runId"] == run && v["type"] == ty
}

/// An SSE stream read by a task of its own, so every frame is stamped (`SseEvent::at`) when it
/// arrives, not when the test gets round to looking at it.
struct Tail {
    what: String,
    rx: tokio::sync::mpsc::UnboundedReceiver<Result<SseEvent, String>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Tail {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn tail(mut sse: Sse, what: &str) -> Tail {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        loop {
            match sse.next_event(Duration::from_secs(120)).await {
                Ok(e) => {
                    if tx.send(Ok(e)).is_err() {
                        return;
                    }
                }
                Err(err) => {
                    let _ = tx.send(Err(format!("{err:?}")));
                    return;
                }
            }
        }
    });
    Tail {
        what: what.to_string(),
        rx,
        task,
    }
}

impl Tail {
    /// Events until `pred` holds for one (included); fails the test if none does within `secs`.
    async fn until(&mut self, secs: u64, mut pred: impl FnMut(&SseEvent) -> bool) -> Vec<SseEvent> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        let mut out: Vec<SseEvent> = Vec::new();
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(Ok(e))) => {
                    let done = pred(&e);
                    out.push(e);
                    if done {
                        return out;
                    }
                }
                Ok(Some(Err(err))) => panic!(
                    "{}: the stream failed ({err}) after {} events; last: {:?}",
                    self.what,
                    out.len(),
                    out.last().map(|e| e.data.clone())
                ),
                Ok(None) => panic!("{}: reader task ended", self.what),
                Err(_) => panic!(
                    "{}: awaited event not seen within {secs}s ({} events; last: {:?})",
                    self.what,
                    out.len(),
                    out.last().map(|e| e.data.clone())
                ),
            }
        }
    }

    /// Whatever arrives within `d`.
    async fn within(&mut self, d: Duration) -> Vec<SseEvent> {
        let deadline = tokio::time::Instant::now() + d;
        let mut out = Vec::new();
        while let Ok(Some(Ok(e))) = tokio::time::timeout_at(deadline, self.rx.recv()).await {
            out.push(e);
        }
        out
    }
}

/// Asserts every `tool-call` in `events` is settled exactly once (tool-result or tool-error).
fn assert_every_call_settled(events: &[Value], what: &str) {
    let mut open: HashMap<String, usize> = HashMap::new();
    for v in events {
        let id = v["payload"]["toolCallId"]
            .as_str()
            .unwrap_or("")
            .to_string();
        match v["type"].as_str().unwrap_or("") {
            "tool-call" => {
                open.insert(id, 0);
            }
            "tool-result" | "tool-error" => {
                *open
                    .get_mut(&id)
                    .unwrap_or_else(|| panic!("{what}: settlement of unknown call {id}: {v}")) += 1;
            }
            _ => {}
        }
    }
    for (id, n) in open {
        assert_eq!(n, 1, "{what}: tool call {id} settled {n} times");
    }
}

// ------------------------------------------------------------------------------------------------
// 1 and 8: a run on A streams live to B
// ------------------------------------------------------------------------------------------------

async fn run_on_a_streams_live_to_b(extra_args: Vec<String>) {
    let opts = Opts {
        extra_args,
        ..Opts::default()
    };
    let c = cluster(opts.clone(), opts).await;
    let t = "t-live";
    // Subscribed on B before the thread exists: everything that follows is live.
    let mut on_b = tail(c.b.sse(t, Cursor::None).await, "B's stream");
    let run = c.a.chat(t, "clean up my old workflows").await;

    let mut seen = on_b
        .until(30, |e| {
            is_of(e, &run, "confirmation-request") || is_of(e, &run, "run-finish")
        })
        .await;
    let cr = seen.last().unwrap().json();
    assert_eq!(
        cr["type"], "confirmation-request",
        "the demo run finished without asking: {cr}"
    );
    // The run is waiting on this very question, so B saw it while the run was live.
    let st = c.b.status(t).await;
    assert_eq!(st["isSuspended"], true, "status on B while waiting: {st}");
    assert_eq!(st["runId"], run.as_str(), "{st}");
    let rid = cr["payload"]["requestId"].as_str().unwrap().to_string();
    assert_eq!(
        c.a.confirm(&rid, &approve()).await.ok_json("confirm on A"),
        json!({"ok": true})
    );
    seen.extend(on_b.until(30, |e| is_of(e, &run, "run-finish")).await);

    // In order, from run-start to run-finish, and nothing after it.
    assert_strictly_increasing(&seen, "B's live stream");
    let first = seen.first().unwrap().json();
    assert_eq!(first["type"], "run-start", "{first}");
    assert_eq!(first["runId"], run.as_str(), "{first}");
    let fin = seen.last().unwrap().json();
    assert_eq!(fin["payload"]["status"], "completed", "{fin}");
    let late = on_b.within(Duration::from_millis(300)).await;
    assert!(
        late.is_empty(),
        "events after run-finish: {:?}",
        id_data(&late)
    );
    let values: Vec<Value> = seen.iter().map(|e| e.json()).collect();
    assert_every_call_settled(&values, "B's live stream");

    // Exactly what a full read on A (and on B) gives: the same ids and bytes.
    let last_id = seen.last().unwrap().id();
    let full_a = c.a.read_until_id(t, last_id).await;
    assert_eq!(
        id_data(&seen),
        id_data(&full_a),
        "B's live stream vs a full read on A"
    );
    let full_b = c.b.read_until_id(t, last_id).await;
    assert_eq!(
        id_data(&full_b),
        id_data(&full_a),
        "a full read on B vs on A"
    );

    // Live: each event reached B soon after A stored it (`ts`), not on B's one-second re-read.
    let mut lags: Vec<i64> = seen
        .iter()
        .map(|e| wall_ms(e.at) - e.json()["ts"].as_i64().expect("ts"))
        .collect();
    lags.sort_unstable();
    let median = lags[lags.len() / 2];
    let p90 = lags[lags.len() * 9 / 10];
    eprintln!(
        "A→B lag over {} events: median {median} ms, p90 {p90} ms, max {} ms",
        lags.len(),
        lags.last().unwrap()
    );
    assert!(
        median <= 250,
        "events reach B {median} ms (median) after A stored them: the cross-instance wake-up does \
         not work, B only finds them on its timer re-read (lags: {lags:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_on_a_streams_live_to_b_over_postgres_notify() {
    bounded(90, run_on_a_streams_live_to_b(Vec::new())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_on_a_streams_live_to_b_over_redis_pubsub() {
    bounded(
        90,
        run_on_a_streams_live_to_b(vec!["--notify".into(), "redis://127.0.0.1:6379".into()]),
    )
    .await
}

// ------------------------------------------------------------------------------------------------
// 2: cancel through B stops A's run
// ------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_through_b_stops_the_run_on_a() {
    bounded(90, async {
        let c = cluster(
            Opts {
                demo_delay_ms: 5,
                ..Opts::default()
            },
            Opts::default(),
        )
        .await;
        let t = "t-cancel";
        let run = c.a.chat(t, "write me a long essay").await;
        let mut on_a = tail(c.a.sse(t, Cursor::None).await, "A's stream");
        let mut on_b = tail(c.b.sse(t, Cursor::None).await, "B's stream");
        // Mid-stream on both.
        for s in [&mut on_a, &mut on_b] {
            let mut deltas = 0;
            s.until(30, |e| {
                assert!(
                    !is_of(e, &run, "run-finish"),
                    "the long run finished before the cancel"
                );
                if is_of(e, &run, "text-delta") {
                    deltas += 1;
                }
                deltas >= 20
            })
            .await;
        }

        let r = c.b.cancel(t).await;
        let acked = Instant::now();
        assert_eq!(r.ok_json("cancel through B"), json!({"ok": true}));

        for (name, s) in [("A", &mut on_a), ("B", &mut on_b)] {
            let evs = s.until(10, |e| is_of(e, &run, "run-finish")).await;
            let fin = evs.last().unwrap();
            let v = fin.json();
            assert_eq!(v["payload"]["status"], "cancelled", "{name}: {v}");
            assert_eq!(v["payload"]["reason"], "user_cancelled", "{name}: {v}");
            let latency = fin.at.saturating_duration_since(acked);
            eprintln!("cancel through B → run-finish on {name}'s stream: {latency:?}");
            assert!(
                latency <= Duration::from_secs(1),
                "run-finish reached {name}'s stream {latency:?} after B acknowledged the cancel"
            );
        }
        // The run stopped: nothing of it after its run-finish, on either stream.
        for (name, s) in [("A", &mut on_a), ("B", &mut on_b)] {
            let late = s.within(Duration::from_millis(500)).await;
            assert!(
                late.is_empty(),
                "{name}: events after run-finish: {:?}",
                id_data(&late)
            );
        }
        for s in [&c.a, &c.b] {
            let st = s.status(t).await;
            assert_eq!(st["hasActiveRun"], false, "{st}");
        }
        // Far fewer than the 2,000 deltas of the whole answer were written.
        let full =
            c.b.read_idle(t, Cursor::None, Duration::from_millis(300))
                .await;
        let deltas = full.iter().filter(|e| is_of(e, &run, "text-delta")).count();
        assert!(deltas < 2000, "the run was not stopped: {deltas} deltas");
    })
    .await
}

// ------------------------------------------------------------------------------------------------
// 3: confirm through B resumes A's run
// ------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_through_b_resumes_the_run_on_a() {
    bounded(90, async {
        let c = cluster(Opts::default(), Opts::default()).await;
        let t = "t-confirm";
        // B's workflow list is read once before the run, so afterwards it must have caught up
        // with what A's run changed.
        let before_run =
            c.b.get("/instance-ai/workflows")
                .await
                .ok_json("workflows on B");
        let run = c.a.chat(t, "clean up my old workflows").await;
        let mut on_a = tail(c.a.sse(t, Cursor::None).await, "A's stream");
        let before = on_a
            .until(30, |e| {
                is_of(e, &run, "confirmation-request") || is_of(e, &run, "run-finish")
            })
            .await;
        let cr = before.last().unwrap().json();
        assert_eq!(cr["type"], "confirmation-request", "{cr}");
        let rid = cr["payload"]["requestId"].as_str().unwrap().to_string();
        let call = cr["payload"]["toolCallId"].as_str().unwrap().to_string();

        let st = c.b.status(t).await;
        assert_eq!(
            st["isSuspended"], true,
            "status on B while A's run waits: {st}"
        );
        let ok =
            c.b.confirm(&rid, &approve())
                .await
                .ok_json("confirm through B");
        assert_eq!(ok, json!({"ok": true}));

        let after = on_a.until(30, |e| is_of(e, &run, "run-finish")).await;
        let after: Vec<Value> = after.iter().map(|e| e.json()).collect();
        let settled: Vec<&Value> = after
            .iter()
            .filter(|v| {
                (v["type"] == "tool-result" || v["type"] == "tool-error")
                    && v["payload"]["toolCallId"] == call.as_str()
            })
            .collect();
        assert_eq!(settled.len(), 1, "one settlement of {call}: {settled:?}");
        assert_eq!(
            settled[0]["type"], "tool-result",
            "approved → tool-result: {}",
            settled[0]
        );
        let fin = after.last().unwrap();
        assert_eq!(fin["payload"]["status"], "completed", "{fin}");
        let all: Vec<Value> = before.iter().map(|e| e.json()).chain(after).collect();
        assert_every_call_settled(&all, "A's stream");

        // Answered once, across instances.
        c.a.confirm(&rid, &approve())
            .await
            .error(404, "the same answer again through A");
        // What the run did to the workflows is seen alike through both instances.
        let deleted = cr["payload"]["args"]["workflowId"].clone();
        let on_a =
            c.a.get("/instance-ai/workflows")
                .await
                .ok_json("workflows on A");
        let on_b =
            c.b.get("/instance-ai/workflows")
                .await
                .ok_json("workflows on B");
        assert_eq!(on_a, on_b, "the workflow list on A and on B");
        assert_ne!(
            on_b, before_run,
            "B's workflow list did not change with A's run"
        );
        let ids: Vec<&Value> = on_b["workflows"]
            .as_array()
            .expect("workflows")
            .iter()
            .map(|w| &w["id"])
            .collect();
        assert!(
            !ids.contains(&&deleted),
            "{deleted} was deleted by the run: {on_b}"
        );
        for s in [&c.a, &c.b] {
            let st = s.status(t).await;
            assert_eq!(st["hasActiveRun"], false, "{st}");
            assert_eq!(st["isSuspended"], false, "{st}");
        }
    })
    .await
}

// ------------------------------------------------------------------------------------------------
// 4: 20 simultaneous chats for one thread over both instances
// ------------------------------------------------------------------------------------------------

/// 20 `POST /chat` at once, alternating A and B; returns the one run id that got a 200.
async fn chat_race(c: &Cluster, t: &str, round: usize) -> String {
    let reqs = (0..20).map(|i| pick(c, i).chat_resp(t, "clean up my old workflows"));
    let resps = futures::future::join_all(reqs).await;
    let statuses: Vec<u16> = resps.iter().map(|r| r.status).collect();
    let winners: Vec<&Resp> = resps.iter().filter(|r| r.status == 200).collect();
    assert_eq!(
        winners.len(),
        1,
        "round {round}: exactly one 200 among {statuses:?}; bodies: {:?}",
        resps.iter().map(|r| &r.text).collect::<Vec<_>>()
    );
    let run = winners[0].json()["runId"]
        .as_str()
        .unwrap_or_else(|| panic!("the 200 has no runId: {}", winners[0].text))
        .to_string();
    for r in resps.iter().filter(|r| r.status != 200) {
        let (code, _) = r.error(409, &format!("round {round}: a losing chat"));
        assert_eq!(code, "run_active", "round {round}: {}", r.text);
    }
    for s in [&c.a, &c.b] {
        let st = s.status(t).await;
        assert_eq!(st["hasActiveRun"], true, "{st}");
        assert_eq!(st["runId"], run.as_str(), "round {round}: {st}");
    }
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_simultaneous_chats_over_both_instances_give_one_200() {
    bounded(90, async {
        let c = cluster(Opts::default(), Opts::default()).await;
        let t = "t-race";
        let mut runs = Vec::new();
        // Round 1 also races the thread's creation; round 2 is on an existing thread.
        for round in 1..=2 {
            let run = chat_race(&c, t, round).await;
            c.b.cancel(t).await.ok_json("cancel");
            let mut s = tail(c.a.sse(t, Cursor::None).await, "A's stream");
            s.until(30, |e| is_of(e, &run, "run-finish")).await;
            runs.push(run);
        }
        assert_ne!(runs[0], runs[1]);

        // The log holds the two winners only: nothing of a refused chat was stored.
        let full =
            c.a.read_idle(t, Cursor::None, Duration::from_millis(300))
                .await;
        let starts: Vec<String> = full
            .iter()
            .map(|e| e.json())
            .filter(|v| v["type"] == "run-start")
            .map(|v| v["runId"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(starts, runs, "run-starts in the thread");
        let db = pool(&c.url).await;
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT event_type, count(*) FROM events WHERE aggregate_id = $1 \
             AND event_type IN ('thread-created', 'user-message', 'run-start') \
             GROUP BY event_type ORDER BY event_type",
        )
        .bind(t)
        .fetch_all(&db)
        .await
        .expect("count the thread's events");
        db.close().await;
        assert_eq!(
            rows,
            vec![
                ("run-start".to_string(), 2),
                ("thread-created".to_string(), 1),
                ("user-message".to_string(), 2),
            ],
            "stored events of the raced thread"
        );
    })
    .await
}

// ------------------------------------------------------------------------------------------------
// 5: one global order while both instances append
// ------------------------------------------------------------------------------------------------

const THREADS: usize = 8;
const WRITERS: usize = 6;
const PER_BATCH: usize = 10;
const WRITE_FOR: Duration = Duration::from_secs(3);

fn othread(i: usize) -> String {
    format!("t-order-{i}")
}
fn orun(i: usize) -> String {
    format!("run-order-{i}")
}
fn oorch(i: usize) -> String {
    format!("orch-order-{i}")
}

/// A for even `i`, B for odd.
fn pick(c: &Cluster, i: usize) -> &Server {
    [&c.a, &c.b][i % 2]
}

/// One acknowledged batch of a writer.
struct Batch {
    writer: usize,
    thread: usize,
    tokens: Vec<String>,
    ids: Vec<i64>,
}

/// Reads the Postgres log directly, in id order, and checks that ids become visible with no
/// hole: every poll returns exactly `cursor+1, cursor+2, …`. Stops at `stop` once caught up.
async fn global_tail(url: String, stop: Arc<tokio::sync::Notify>) -> i64 {
    let db = pool(&url).await;
    let mut cursor = 0i64;
    let mut stopping = false;
    let stopped = stop.notified();
    tokio::pin!(stopped);
    loop {
        let ids: Vec<i64> =
            sqlx::query_scalar("SELECT id FROM events WHERE id > $1 ORDER BY id LIMIT 10000")
                .bind(cursor)
                .fetch_all(&db)
                .await
                .expect("read the global log");
        for id in &ids {
            assert_eq!(
                *id,
                cursor + 1,
                "the global log showed id {id} while id {} was not visible yet",
                cursor + 1
            );
            cursor = *id;
        }
        if ids.is_empty() && stopping {
            db.close().await;
            return cursor;
        }
        if !stopping {
            tokio::select! {
                _ = &mut stopped => stopping = true,
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_through_both_instances_keep_one_global_order() {
    bounded(120, async {
        let opts = Opts {
            demo_delay_ms: 5,
            ..Opts::default()
        };
        let c = Arc::new(cluster(opts.clone(), opts).await);
        let on = |i: usize| pick(&c, i);

        // Each ingested thread's run is opened through one instance and tailed on the other.
        let mut start_ids = Vec::new();
        for i in 0..THREADS {
            let ids = on(i)
                .ingest_ok(&othread(i), &[run_start(&orun(i), &oorch(i))])
                .await;
            assert_eq!(ids.len(), 1);
            start_ids.push(ids[0]);
        }
        let mut readers = Vec::new();
        for i in 0..THREADS {
            readers.push(tail(
                on(i + 1).sse(&othread(i), Cursor::None).await,
                &format!("reader of {}", othread(i)),
            ));
        }
        // The agent runtime of each instance appends too: a long chat on each, tailed on the other.
        let chat_threads = ["t-order-chat-a", "t-order-chat-b"];
        let mut chat_runs = Vec::new();
        let mut chat_readers = Vec::new();
        for (k, t) in chat_threads.iter().enumerate() {
            chat_runs.push(on(k).chat(t, "a long answer please").await);
            chat_readers.push(tail(
                on(k + 1).sse(t, Cursor::None).await,
                &format!("reader of {t}"),
            ));
        }

        let stop = Arc::new(tokio::sync::Notify::new());
        let global = tokio::spawn(global_tail(c.url.clone(), stop.clone()));

        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let c = c.clone();
                tokio::spawn(async move {
                    let started = Instant::now();
                    let mut out = Vec::new();
                    let mut k = 0usize;
                    while started.elapsed() < WRITE_FOR {
                        let thread = (w * 3 + k) % THREADS;
                        let s = pick(&c, w + k);
                        let tokens: Vec<String> =
                            (0..PER_BATCH).map(|j| format!("w{w}k{k}e{j};")).collect();
                        let events: Vec<Value> = tokens
                            .iter()
                            .map(|tok| text_delta(&orun(thread), &oorch(thread), tok))
                            .collect();
                        let ids = s.ingest_ok(&othread(thread), &events).await;
                        assert!(!ids.is_empty(), "writer {w} batch {k}: no ids");
                        out.push(Batch {
                            writer: w,
                            thread,
                            tokens,
                            ids,
                        });
                        k += 1;
                        tokio::time::sleep(Duration::from_millis(3)).await;
                    }
                    out
                })
            })
            .collect();
        let mut batches: Vec<Batch> = Vec::new();
        for w in writers {
            batches.extend(w.await.expect("writer task"));
        }
        assert!(
            batches.len() >= WRITERS * 10,
            "only {} batches written",
            batches.len()
        );

        // Close every run: ingested ones through the instance that did not open them.
        let mut finish_ids = Vec::new();
        for i in 0..THREADS {
            let ids = on(i + 1)
                .ingest_ok(&othread(i), &[run_finish(&orun(i), &oorch(i), "completed")])
                .await;
            finish_ids.push(ids[0]);
        }
        for (k, t) in chat_threads.iter().enumerate() {
            on(k + 1).cancel(t).await.ok_json("cancel the long chat");
        }

        // Every reader ends with its run's run-finish.
        let mut seen: Vec<Vec<SseEvent>> = Vec::new();
        for (i, r) in readers.iter_mut().enumerate() {
            seen.push(r.until(30, |e| is_of(e, &orun(i), "run-finish")).await);
        }
        let mut chat_seen: Vec<Vec<SseEvent>> = Vec::new();
        for (k, r) in chat_readers.iter_mut().enumerate() {
            let run = chat_runs[k].clone();
            chat_seen.push(r.until(30, |e| is_of(e, &run, "run-finish")).await);
        }
        stop.notify_one();
        let global_last = bounded(30, global).await.expect("global tail task");

        let mut all_sse_ids: HashSet<i64> = HashSet::new();
        // Ingested threads: exactly a fresh full read, and exactly what was acknowledged.
        for i in 0..THREADS {
            let what = format!("reader of {} on {}", othread(i), ["B", "A"][i % 2]);
            assert_strictly_increasing(&seen[i], &what);
            let full = on(i).read_until_id(&othread(i), finish_ids[i]).await;
            let (got, want) = (id_data(&seen[i]), id_data(&full));
            if got != want {
                let got_ids: HashSet<i64> = got.iter().map(|(id, _)| *id).collect();
                let want_ids: HashSet<i64> = want.iter().map(|(id, _)| *id).collect();
                let mut missing: Vec<_> = want_ids.difference(&got_ids).copied().collect();
                let mut extra: Vec<_> = got_ids.difference(&want_ids).copied().collect();
                missing.sort_unstable();
                extra.sort_unstable();
                panic!(
                    "{what}: saw {} events, a full read has {}; missing {:?}, extra {:?}",
                    got.len(),
                    want.len(),
                    &missing[..missing.len().min(10)],
                    &extra[..extra.len().min(10)]
                );
            }
            let mut acked: Vec<i64> = vec![start_ids[i], finish_ids[i]];
            acked.extend(
                batches
                    .iter()
                    .filter(|b| b.thread == i)
                    .flat_map(|b| b.ids.clone()),
            );
            acked.sort_unstable();
            let in_log: Vec<i64> = full.iter().map(|e| e.id()).collect();
            assert_eq!(
                in_log,
                acked,
                "{}: the log's ids vs the acknowledged ids",
                othread(i)
            );

            // Each writer's text in this thread, in the order it was written.
            let text: String = full
                .iter()
                .map(|e| e.json())
                .filter(|v| v["type"] == "text-delta")
                .map(|v| v["payload"]["text"].as_str().unwrap().to_string())
                .collect();
            let mut per_writer: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for tok in text.split_terminator(';') {
                let w = tok[..tok.find('k').expect("token")].to_string();
                per_writer.entry(w).or_default().push(format!("{tok};"));
            }
            let mut want: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for b in batches.iter().filter(|b| b.thread == i) {
                want.entry(format!("w{}", b.writer))
                    .or_default()
                    .extend(b.tokens.iter().cloned());
            }
            assert_eq!(per_writer, want, "{}: text per writer", othread(i));
            all_sse_ids.extend(in_log);
        }
        // The chats: the readers on the other instance saw exactly a full read.
        for (k, t) in chat_threads.iter().enumerate() {
            let what = format!("reader of {t}");
            assert_strictly_increasing(&chat_seen[k], &what);
            let last = chat_seen[k].last().unwrap().id();
            let full = on(k).read_until_id(t, last).await;
            assert_eq!(
                id_data(&chat_seen[k]),
                id_data(&full),
                "{what} vs a full read"
            );
            all_sse_ids.extend(full.iter().map(|e| e.id()));
        }

        // The global log: ids 1..=N with no hole, and its n8n events are exactly what the
        // streams showed.
        let db = pool(&c.url).await;
        let rows: Vec<(i64, String)> =
            sqlx::query_as("SELECT id, event_type FROM events ORDER BY id")
                .fetch_all(&db)
                .await
                .expect("read the log");
        db.close().await;
        let n = rows.len() as i64;
        for (k, (id, _)) in rows.iter().enumerate() {
            assert_eq!(*id, k as i64 + 1, "the global ids have a hole before {id}");
        }
        assert_eq!(
            global_last, n,
            "the global tail stopped at {global_last} of {n}"
        );
        const INTERNAL: &[&str] = &[
            "user-message",
            "confirmation-answered",
            "cancel-requested",
            "thread-created",
            "llm-usage",
        ];
        let n8n_ids: HashSet<i64> = rows
            .iter()
            .filter(|(_, ty)| !INTERNAL.contains(&ty.as_str()) && !ty.starts_with("workflow-"))
            .map(|(id, _)| *id)
            .collect();
        let mut missing: Vec<i64> = n8n_ids.difference(&all_sse_ids).copied().collect();
        missing.sort_unstable();
        assert!(
            missing.is_empty(),
            "n8n events in the log no stream showed: {missing:?}"
        );
        eprintln!(
            "global order: {n} events, {} batches by {WRITERS} writers, {} on the streams",
            batches.len(),
            all_sse_ids.len()
        );
    })
    .await
}

/// `got` is exactly `want` (ids and bytes, in order); a failure names the first ids that differ.
fn assert_same_stream(got: &[SseEvent], want: &[SseEvent], what: &str) {
    let ids = |v: &[SseEvent]| v.iter().map(|e| e.id()).collect::<Vec<_>>();
    let (g, w) = (ids(got), ids(want));
    if g != w {
        let got_set: HashSet<i64> = g.iter().copied().collect();
        let missing: Vec<i64> = w.iter().filter(|i| !got_set.contains(i)).copied().collect();
        let at = g.iter().zip(&w).position(|(a, b)| a != b);
        panic!(
            "{what}: {} events, {} expected; first difference at index {at:?}; missing {:?}",
            g.len(),
            w.len(),
            &missing[..missing.len().min(10)]
        );
    }
    assert!(
        id_data(got) == id_data(want),
        "{what}: same ids, different data"
    );
}

/// One thread appended to through both instances at once, streamed on both, and resumed on
/// both mid-way: every stream must be exactly a full read. Each instance serves its own recent
/// events from its in-memory tail; the other instance's events of the same thread only reach it
/// as head hints (or as a seq gap in its tail), and a stream that took its tail past them would
/// miss them here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_thread_appended_through_both_instances_streams_whole_on_each() {
    bounded(120, async {
        let c = Arc::new(cluster(Opts::default(), Opts::default()).await);
        let (t, run, orch) = ("t-shared", "run-shared", "orch-shared");
        let start = c.a.ingest_ok(t, &[run_start(run, orch)]).await[0];
        let mut live = [
            tail(c.a.sse(t, Cursor::None).await, "live reader on A"),
            tail(c.b.sse(t, Cursor::None).await, "live reader on B"),
        ];
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let c = c.clone();
                tokio::spawn(async move {
                    let mut ids = Vec::new();
                    for k in 0..60 {
                        let s = [&c.a, &c.b][(w + k) % 2];
                        let events: Vec<Value> = (0..5)
                            .map(|j| text_delta(run, orch, &format!("w{w}k{k}e{j};")))
                            .collect();
                        ids.extend(s.ingest_ok(t, &events).await);
                        tokio::time::sleep(Duration::from_millis(k as u64 % 3)).await;
                    }
                    ids
                })
            })
            .collect();
        // Mid-way, a client of each instance resumes after an event the live reader on A saw.
        let mut resumed = Vec::new();
        for (name, s) in [("A", &c.a), ("B", &c.b)] {
            let seen = live[0].until(30, |e| e.id() > start + 20).await;
            let from = seen.last().unwrap().id();
            resumed.push((
                from,
                tail(
                    s.sse(t, Cursor::header_id(from)).await,
                    &format!("reader on {name} resuming after {from}"),
                ),
                seen,
            ));
        }
        let mut acked = vec![start];
        for w in writers {
            acked.extend(w.await.expect("writer"));
        }
        let finish =
            c.b.ingest_ok(t, &[run_finish(run, orch, "completed")])
                .await[0];
        acked.push(finish);
        acked.sort_unstable();
        let full = c.a.read_until_id(t, finish).await;
        assert_eq!(
            full.iter().map(|e| e.id()).collect::<Vec<_>>(),
            acked,
            "the log holds exactly the acknowledged events"
        );
        let is_finish = |e: &SseEvent| e.id() == finish;
        // The first live reader's events were partly taken above for the resume points.
        let mut first: Vec<SseEvent> = resumed.iter().flat_map(|r| r.2.clone()).collect();
        first.extend(live[0].until(30, is_finish).await);
        assert_same_stream(&first, &full, "live reader on A");
        let second = live[1].until(30, is_finish).await;
        assert_same_stream(&second, &full, "live reader on B");
        for (from, mut r, _) in resumed {
            let got = r.until(30, is_finish).await;
            let want: Vec<_> = full.iter().filter(|e| e.id() > from).cloned().collect();
            assert_same_stream(&got, &want, &r.what);
        }
    })
    .await
}

// ------------------------------------------------------------------------------------------------
// 6 and 7: an instance dies
// ------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_orphaned_by_kill_9_is_finished_as_interrupted_by_the_other_instance() {
    bounded(90, async {
        let mut c = cluster(
            Opts {
                demo_delay_ms: 10,
                ..Opts::default()
            },
            Opts::default(),
        )
        .await;
        let t = "t-orphan";
        let run = c.a.chat(t, "give me a long answer").await;
        let mut on_b = tail(c.b.sse(t, Cursor::None).await, "B's stream");
        let mut deltas = 0;
        let mut seen = on_b
            .until(30, |e| {
                assert!(
                    !is_of(e, &run, "run-finish"),
                    "the long run finished before the kill"
                );
                if is_of(e, &run, "text-delta") {
                    deltas += 1;
                }
                deltas >= 20
            })
            .await;

        c.a.kill9();
        let killed = Instant::now();
        seen.extend(on_b.until(15, |e| is_of(e, &run, "run-finish")).await);
        let fin = seen.last().unwrap();
        let after = fin.at.saturating_duration_since(killed);
        eprintln!("orphaned run finished by B {after:?} after the kill");
        let v = fin.json();
        assert_eq!(v["payload"]["status"], "error", "{v}");
        assert_eq!(v["payload"]["reason"], "interrupted", "{v}");
        assert!(
            after <= Duration::from_secs(10),
            "the orphaned run was finished {after:?} after its instance died (--run-orphan-secs 2)"
        );
        assert_strictly_increasing(&seen, "B's stream");
        let late = on_b.within(Duration::from_millis(300)).await;
        assert!(
            late.is_empty(),
            "events after run-finish: {:?}",
            id_data(&late)
        );

        let st = c.b.status(t).await;
        assert_eq!(st["hasActiveRun"], false, "{st}");
        // The thread is not stuck: a new chat through B runs to completion.
        let r = c.b.chat_resp(t, "clean up my old workflows").await;
        assert_eq!(r.status, 200, "a new chat after the orphan: {}", r.text);
        let run2 = r.json()["runId"].as_str().expect("runId").to_string();
        let evs = c.b.follow_run(t, &run2, |_| Some(approve())).await;
        let v = evs.last().unwrap().json();
        assert_eq!(v["payload"]["status"], "completed", "{v}");
    })
    .await
}

/// Issue 3 item 7: a run killed while a tool call is open gets a `tool-error` for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphaned_run_gets_a_tool_error_for_each_open_tool_call() {
    bounded(90, async {
        let mut c = cluster(
            Opts {
                demo_delay_ms: 25,
                ..Opts::default()
            },
            Opts::default(),
        )
        .await;
        let t = "t-orphan-calls";
        let run = c.a.chat(t, "build a \"Daily report\" workflow").await;
        let mut on_b = tail(c.b.sse(t, Cursor::None).await, "B's stream");
        // The sub-agent is working: the orchestrator's `delegate` call is open.
        let mut seen = on_b
            .until(30, |e| {
                assert!(
                    !is_of(e, &run, "run-finish"),
                    "the run finished before the kill"
                );
                is_of(e, &run, "agent-spawned")
            })
            .await;
        c.a.kill9();
        seen.extend(on_b.until(15, |e| is_of(e, &run, "run-finish")).await);
        let values: Vec<Value> = seen.iter().map(|e| e.json()).collect();
        let fin = values.last().unwrap();
        assert_eq!(fin["payload"]["status"], "error", "{fin}");
        assert_eq!(fin["payload"]["reason"], "interrupted", "{fin}");
        let delegate = values
            .iter()
            .find(|v| v["type"] == "tool-call" && v["payload"]["toolName"] == "delegate")
            .expect("a delegate call before agent-spawned");
        let call = delegate["payload"]["toolCallId"].as_str().unwrap();
        let errors: Vec<&Value> = values
            .iter()
            .filter(|v| v["type"] == "tool-error" && v["payload"]["toolCallId"] == call)
            .collect();
        assert_eq!(
            errors.len(),
            1,
            "the open delegate call {call} gets one tool-error"
        );
        assert_every_call_settled(&values, "B's stream");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waiting_on_a_confirmation_survives_its_instance_and_completes_on_the_other() {
    bounded(90, async {
        let mut c = cluster(Opts::default(), Opts::default()).await;
        let t = "t-orphan-waiting";
        let run = c.a.chat(t, "clean up my old workflows").await;
        let mut on_b = tail(c.b.sse(t, Cursor::None).await, "B's stream");
        let mut seen = on_b
            .until(30, |e| {
                is_of(e, &run, "confirmation-request") || is_of(e, &run, "run-finish")
            })
            .await;
        let cr = seen.last().unwrap().json();
        assert_eq!(cr["type"], "confirmation-request", "{cr}");
        let rid = cr["payload"]["requestId"].as_str().unwrap().to_string();
        let call = cr["payload"]["toolCallId"].as_str().unwrap().to_string();

        c.a.kill9();
        // Longer than --run-orphan-secs 2: B has taken the run over by now.
        tokio::time::sleep(Duration::from_millis(3500)).await;
        let meanwhile = on_b.within(Duration::from_millis(100)).await;
        assert!(
            !meanwhile.iter().any(|e| is_of(e, &run, "run-finish")),
            "the waiting run was finished instead of kept: {:?}",
            id_data(&meanwhile)
        );
        seen.extend(meanwhile);
        let st = c.b.status(t).await;
        assert_eq!(st["hasActiveRun"], true, "{st}");
        assert_eq!(st["isSuspended"], true, "{st}");
        assert_eq!(st["runId"], run.as_str(), "{st}");

        let ok =
            c.b.confirm(&rid, &approve())
                .await
                .ok_json("confirm through B");
        assert_eq!(ok, json!({"ok": true}));
        seen.extend(on_b.until(30, |e| is_of(e, &run, "run-finish")).await);
        assert_strictly_increasing(&seen, "B's stream");
        let values: Vec<Value> = seen.iter().map(|e| e.json()).collect();
        let settled: Vec<&Value> = values
            .iter()
            .filter(|v| {
                (v["type"] == "tool-result" || v["type"] == "tool-error")
                    && v["payload"]["toolCallId"] == call.as_str()
            })
            .collect();
        assert_eq!(settled.len(), 1, "one settlement of {call}: {settled:?}");
        assert_eq!(settled[0]["type"], "tool-result", "{}", settled[0]);
        let fin = values.last().unwrap();
        assert_eq!(fin["payload"]["status"], "completed", "{fin}");
        assert_every_call_settled(&values, "B's stream");
        // The question was not asked again.
        let asked = values
            .iter()
            .filter(|v| v["type"] == "confirmation-request")
            .count();
        assert_eq!(asked, 1, "confirmation requests in the run");
        let st = c.b.status(t).await;
        assert_eq!(st["hasActiveRun"], false, "{st}");
    })
    .await
}

/// The answer arrives while no instance executes the run (its instance is dead and the lease has
/// not expired yet): the instance that takes the run over finds the answer in the log and uses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_given_before_the_takeover_is_used_by_the_instance_that_takes_over() {
    bounded(90, async {
        let mut c = cluster(Opts::default(), Opts::default()).await;
        let t = "t-orphan-answered";
        let run = c.a.chat(t, "clean up my old workflows").await;
        let mut on_b = tail(c.b.sse(t, Cursor::None).await, "B's stream");
        let mut seen = on_b
            .until(30, |e| {
                is_of(e, &run, "confirmation-request") || is_of(e, &run, "run-finish")
            })
            .await;
        let cr = seen.last().unwrap().json();
        assert_eq!(cr["type"], "confirmation-request", "{cr}");
        let rid = cr["payload"]["requestId"].as_str().unwrap().to_string();
        let call = cr["payload"]["toolCallId"].as_str().unwrap().to_string();

        c.a.kill9();
        let ok =
            c.b.confirm(&rid, &approve())
                .await
                .ok_json("confirm through B");
        assert_eq!(ok, json!({"ok": true}));
        seen.extend(on_b.until(15, |e| is_of(e, &run, "run-finish")).await);
        assert_strictly_increasing(&seen, "B's stream");
        let values: Vec<Value> = seen.iter().map(|e| e.json()).collect();
        let settled: Vec<&Value> = values
            .iter()
            .filter(|v| {
                (v["type"] == "tool-result" || v["type"] == "tool-error")
                    && v["payload"]["toolCallId"] == call.as_str()
            })
            .collect();
        assert_eq!(settled.len(), 1, "one settlement of {call}: {settled:?}");
        assert_eq!(settled[0]["type"], "tool-result", "{}", settled[0]);
        let fin = values.last().unwrap();
        assert_eq!(fin["payload"]["status"], "completed", "{fin}");
        assert_every_call_settled(&values, "B's stream");
    })
    .await
}

/// `threadstream_projector_leader` of a server, from its `/metrics`.
async fn projector_leader(s: &Server) -> f64 {
    let r = s.get("/metrics").await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.text
        .lines()
        .find_map(|l| l.strip_prefix("threadstream_projector_leader "))
        .unwrap_or_else(|| panic!("no threadstream_projector_leader in:\n{}", r.text))
        .trim()
        .parse()
        .expect("a number")
}

/// One instance of a fleet folds the read models, the other stands by: exactly one reports
/// `threadstream_projector_leader` 1. When the folding one is killed, the other takes over within
/// seconds, and the stored read models follow the log again (their checkpoints reach its head).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_folds_the_read_models_and_the_other_takes_over_when_it_dies() {
    bounded(90, async {
        let mut c = cluster(Opts::default(), Opts::default()).await;
        let deadline = Instant::now() + Duration::from_secs(15);
        let a_leads = loop {
            let (a, b) = (projector_leader(&c.a).await, projector_leader(&c.b).await);
            assert!(a + b <= 1.0, "both instances fold the read models");
            if a + b == 1.0 {
                break a == 1.0;
            }
            assert!(Instant::now() < deadline, "no instance folds the read models");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let (leader, standby) = if a_leads {
            (&mut c.a, &c.b)
        } else {
            (&mut c.b, &c.a)
        };
        // Standing by, it stays so while the leader lives.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(projector_leader(standby).await, 0.0);
        leader.kill9();
        let killed = Instant::now();
        while projector_leader(standby).await != 1.0 {
            assert!(
                killed.elapsed() < Duration::from_secs(15),
                "the standby did not take over the read models"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!("the standby folds the read models {:?} after the kill", killed.elapsed());
        // It folds what is appended from now on: every model's checkpoint reaches the head.
        let ids = standby
            .ingest_ok(
                "t-projector",
                &[
                    run_start("r-p", "a-p"),
                    text_delta("r-p", "a-p", "folded by the standby"),
                ],
            )
            .await;
        let head = *ids.iter().max().expect("ids");
        let db = pool(&c.url).await;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let behind: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM checkpoints WHERE model NOT LIKE '%~%' AND last_id < $1",
            )
            .bind(head)
            .fetch_one(&db)
            .await
            .expect("checkpoints");
            let models: i64 =
                sqlx::query_scalar("SELECT count(*) FROM checkpoints WHERE model NOT LIKE '%~%'")
                    .fetch_one(&db)
                    .await
                    .expect("checkpoints");
            if behind == 0 && models == 4 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{behind} of {models} read models did not fold the events appended after the takeover"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        db.close().await;
    })
    .await
}

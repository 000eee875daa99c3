//! A fleet behind a real load balancer (issue 25 item 2): Debian's HAProxy, run with the
//! checked-in `docs/haproxy.cfg` (a consistent hash of the thread id, `option httpchk GET
//! /readyz`), in front of three `threadstream serve` processes on one Postgres database. Each
//! test drives a load through HAProxy — chat runs streaming, external agents posting through the
//! ingest route, an n8n and an AG-UI watcher on every thread that resume with `Last-Event-ID`
//! wherever HAProxy sends them — then does what operators do: kill -9 one instance, restart each
//! in turn, restart Postgres. Every watcher's frames must then equal a fresh read of the
//! thread's log, frame for frame: one event lost, repeated or out of order on a reconnect fails
//! the test.
//!
//! A fleet needs Postgres, so these tests use it whatever `THREADSTREAM_TEST_STORE` says (a
//! database of their own on the machine's Postgres, or a private cluster when Postgres itself
//! is restarted).

mod haproxy;
pub(crate) mod load;

use crate::common;
use crate::multi_instance::{approve, pool, Db};
use crate::pg_outage::PrivatePostgres;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use haproxy::{free_port, Haproxy};
use load::{assert_exact, full_read, ingest_agent, Frame, Lb, Posted, Protocol, Watcher};
use reqwest::Method;
use serde_json::{json, Value};

/// `--shutdown-unready-ms` of every instance: above HAProxy's fall × inter (2 × 500 ms), so
/// HAProxy has taken an instance out before it stops serving.
const UNREADY_MS: u64 = 1500;
/// `--run-orphan-secs`: a run's lease lasts two thirds of it, and an external agent's posts
/// extend it; a post that HAProxy first sends to a dead instance is retried about a second
/// later, so the lease must outlast that (the harness's usual 2 s would not, on a busy machine).
const ORPHAN_SECS: u64 = 4;

/// Three instances on one database behind HAProxy. Fields drop in order: HAProxy, then the
/// instances, then the database.
struct Fleet {
    lb: Haproxy,
    servers: Vec<Server>,
    url: String,
    _db: Option<Db>,
}

impl Fleet {
    /// Starts three instances on `url` (each on a port of its own that a restart keeps, as a
    /// load balancer's backend list needs), then HAProxy, and waits until it sees all three up.
    async fn start(url: String, db: Option<Db>) -> Fleet {
        let ports = [free_port(), free_port(), free_port()];
        let opts = |port: u16| Opts {
            database_url: Some(url.clone()),
            port: Some(port),
            // A long demo answer streams for about 10 s: live whenever the test strikes.
            demo_delay_ms: 5,
            extra_args: vec![
                "--shutdown-unready-ms".into(),
                UNREADY_MS.to_string(),
                "--shutdown-grace-secs".into(),
                "5".into(),
                "--run-orphan-secs".into(),
                ORPHAN_SECS.to_string(),
                // Refused at once while Postgres is down, as the restart test expects (the
                // wait for a primary has tests of its own in ha.rs).
                "--store-wait-secs".into(),
                "0".into(),
            ],
            ..Opts::default()
        };
        let (a, b, c) = tokio::join!(
            Server::start_with(opts(ports[0])),
            Server::start_with(opts(ports[1])),
            Server::start_with(opts(ports[2])),
        );
        let lb = Haproxy::start(&ports).await;
        lb.await_all("UP", Duration::from_secs(10)).await;
        Fleet {
            lb,
            servers: vec![a, b, c],
            url,
            _db: db,
        }
    }

    /// On a fresh database of the machine's Postgres.
    async fn on_new_database() -> Fleet {
        let (name, url) = create_database().await;
        Fleet::start(url, Some(Db(Some(name)))).await
    }

    fn index_of(&self, served_by: &str) -> usize {
        match served_by {
            "ts1" => 0,
            "ts2" => 1,
            "ts3" => 2,
            other => panic!("X-Served-By {other:?} names no server of the fleet"),
        }
    }

    /// An instance that is running, for reads of the log.
    fn alive(&self) -> &Server {
        self.servers
            .iter()
            .find(|s| s.pid().is_some())
            .expect("a running instance")
    }
}

/// One thread of the load and its two watchers.
struct Watched {
    thread: String,
    watchers: Vec<Watcher>,
}

fn watched(lb: &Haproxy, thread: &str) -> Watched {
    Watched {
        thread: thread.to_string(),
        watchers: vec![
            Watcher::start(&lb.base, thread, Protocol::N8n),
            Watcher::start(&lb.base, thread, Protocol::AgUi),
        ],
    }
}

/// Waits until a frame of `w` matches `pred`; returns its JSON.
async fn await_frame(w: &Watcher, within: Duration, pred: impl Fn(&Value) -> bool) -> Value {
    let t0 = Instant::now();
    loop {
        if let Some(v) = w
            .frames()
            .iter()
            .map(|f| serde_json::from_str::<Value>(&f.data).unwrap_or(Value::Null))
            .find(|v| pred(v))
        {
            return v;
        }
        assert!(
            t0.elapsed() < within,
            "{:?} watcher of {}: awaited frame not seen within {within:?}",
            w.protocol,
            w.thread
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The end of every check: for each thread, a fresh read of its log on one instance in both
/// renderings (checked against the rows of `events`), and every watcher's frames equal to it.
/// Returns the n8n rendering of each thread.
async fn assert_every_watcher_exact(
    fleet: &Fleet,
    threads: &mut [Watched],
) -> HashMap<String, Vec<Frame>> {
    let db = pool(&fleet.url).await;
    let base = fleet.alive().base.clone();
    let mut n8n = HashMap::new();
    for t in threads.iter_mut() {
        let mut stored: Vec<i64> =
            sqlx::query_scalar("SELECT id FROM events WHERE aggregate_id = $1 ORDER BY id")
                .bind(&t.thread)
                .fetch_all(&db)
                .await
                .expect("the thread's rows");
        stored.dedup();
        for w in t.watchers.iter_mut() {
            let want = full_read(&base, &t.thread, w.protocol).await;
            assert!(!want.is_empty(), "{}: nothing in the log", t.thread);
            // The rendering is of the log: ids in order, each an event of this thread.
            for pair in want.windows(2) {
                assert!(
                    pair[0].id <= pair[1].id,
                    "{}: {:?} rendering out of order at {}",
                    t.thread,
                    w.protocol,
                    pair[1].id
                );
            }
            for f in &want {
                assert!(
                    stored.binary_search(&f.id).is_ok(),
                    "{}: id {} of the {:?} rendering is no row of the thread",
                    t.thread,
                    f.id,
                    w.protocol
                );
            }
            w.finish_at(want.last().unwrap().id, Duration::from_secs(20))
                .await;
            let what = format!(
                "{:?} watcher of {} ({} connections)",
                w.protocol,
                t.thread,
                w.conns().len()
            );
            assert_exact(&w.frames(), &want, &what);
            if w.protocol == Protocol::N8n {
                n8n.insert(t.thread.clone(), want);
            }
        }
    }
    db.close().await;
    n8n
}

/// Every acknowledged id of the ingest agents is in the log, and every delta text they had
/// acknowledged is stored exactly once (a retried post stored twice would show).
async fn assert_ingest_exact(fleet: &Fleet, agents: &[Posted]) {
    let db = pool(&fleet.url).await;
    for p in agents {
        let thread = &p.thread;
        let rows: Vec<(i64, Option<String>)> = sqlx::query_as(
            "SELECT id, payload::json->>'text' FROM events WHERE aggregate_id = $1 ORDER BY id",
        )
        .bind(thread)
        .fetch_all(&db)
        .await
        .expect("the agent's rows");
        let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
        for id in &p.acked {
            assert!(
                ids.contains(id),
                "{thread}: acknowledged id {id} is not in the log"
            );
        }
        let mut count: HashMap<&str, usize> = HashMap::new();
        for t in rows.iter().filter_map(|r| r.1.as_deref()) {
            *count.entry(t).or_default() += 1;
        }
        for t in &p.texts {
            assert_eq!(
                count.get(t.as_str()).copied().unwrap_or(0),
                1,
                "{thread}: delta {t:?} stored that many times"
            );
        }
    }
    db.close().await;
}

/// Awaits the agents; none had its run closed under it unless `allowed(agent)`.
async fn finish_agents(
    agents: Vec<tokio::task::JoinHandle<Posted>>,
    allowed: impl Fn(&Posted) -> bool,
) -> Vec<Posted> {
    let mut out = Vec::new();
    for a in agents {
        let p = a.await.expect("ingest agent");
        assert!(
            !p.closed_under_it || allowed(&p),
            "{}: the agent's run was finished under it (run-start stored by {})",
            p.thread,
            p.started_on
        );
        out.push(p);
    }
    out
}

/// The `run-finish` of `run` in an n8n rendering.
fn finish_of(frames: &[Frame], run: &str) -> Option<(i64, Value)> {
    frames.iter().find_map(|f| {
        let v: Value = serde_json::from_str(&f.data).ok()?;
        (v["type"] == "run-finish" && v["runId"] == run).then_some((f.id, v))
    })
}

/// Wall-clock epoch milliseconds of an `Instant` in the past (to compare with an event's `ts`).
fn wall_ms(at: Instant) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    now - Instant::now().saturating_duration_since(at).as_millis() as i64
}

// ------------------------------------------------------------------------------------------------
// kill -9 one instance mid-load
// ------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_one_instance_behind_haproxy_loses_nothing() {
    bounded(120, async {
        let mut fleet = Fleet::on_new_database().await;
        let lb = Lb::new(&fleet.lb.base);
        let mut threads = Vec::new();

        // A run that waits on a confirmation: the instance that took it is the one to die.
        let ask = watched(&fleet.lb, "f-ask");
        let (ask_run, ask_on) = lb.chat("f-ask", "clean up my old workflows").await;
        let victim = fleet.index_of(&ask_on);
        let question = await_frame(&ask.watchers[0], Duration::from_secs(20), |v| {
            v["type"] == "confirmation-request" && v["runId"] == ask_run.as_str()
        })
        .await;
        let request_id = question["payload"]["requestId"].as_str().unwrap().to_string();
        threads.push(ask);

        // Long runs streaming, at least one on the victim (threads hash over the instances),
        // each watched from its start.
        let mut runs: Vec<(String, String, usize)> = Vec::new();
        for k in 0..8 {
            if runs.len() >= 4 && runs.iter().any(|r| r.2 == victim) {
                break;
            }
            let thread = format!("f-long-{k}");
            let (run, on) = lb.chat(&thread, "give me a long answer").await;
            runs.push((thread, run, fleet.index_of(&on)));
        }
        for (thread, _, _) in &runs {
            threads.push(watched(&fleet.lb, thread));
        }
        assert!(
            runs.iter().any(|r| r.2 == victim),
            "no long run landed on ts{}",
            victim + 1
        );
        // External agents posting meanwhile.
        let agents: Vec<_> = (0..4)
            .map(|k| {
                let thread = format!("f-ingest-{k}");
                threads.push(watched(&fleet.lb, &thread));
                ingest_agent(lb.clone(), thread, 30, 4, Duration::from_millis(100))
            })
            .collect();
        // Every run is streaming to its watchers.
        for (thread, run, _) in &runs {
            let w = &threads.iter().find(|t| &t.thread == thread).unwrap().watchers[0];
            await_frame(w, Duration::from_secs(20), |v| {
                v["type"] == "text-delta" && v["runId"] == run.as_str()
            })
            .await;
        }
        let on_victim = |w: &Watcher| {
            w.conns()
                .last()
                .is_some_and(|c| c.ended.is_none() && c.served_by == format!("ts{}", victim + 1))
        };
        let victims_watchers: Vec<(usize, usize)> = threads
            .iter()
            .enumerate()
            .flat_map(|(i, t)| {
                t.watchers
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| on_victim(w))
                    .map(move |(j, _)| (i, j))
            })
            .collect();
        assert!(
            !victims_watchers.is_empty(),
            "no watcher is on ts{} (f-ask's are hashed there)",
            victim + 1
        );

        fleet.servers[victim].kill9();
        let killed = Instant::now();
        let killed_ms = wall_ms(killed);
        let down_after = fleet
            .lb
            .await_status(victim, "DOWN", Duration::from_secs(5))
            .await;

        // New chats succeed at once, on the others.
        let fresh = Lb::new(&fleet.lb.base);
        for k in 0..3 {
            let thread = format!("f-new-{k}");
            let a = fresh
                .must(
                    Method::POST,
                    &format!("/instance-ai/chat/{thread}"),
                    Some(&json!({"message": "give me a long answer"})),
                    Some(&format!("new-{thread}")),
                    Duration::from_secs(10),
                )
                .await;
            assert_ne!(a.served_by, format!("ts{}", victim + 1));
            threads.push(watched(&fleet.lb, &thread));
            runs.push((thread, a.json()["runId"].as_str().unwrap().into(), 9));
        }
        assert_eq!(
            fresh.failures(),
            Vec::<String>::new(),
            "new chats after the kill failed"
        );

        // The victim's watchers are back, on the others.
        let storm = {
            let t0 = Instant::now();
            loop {
                let back: Vec<Option<Instant>> = victims_watchers
                    .iter()
                    .map(|&(i, j)| {
                        threads[i].watchers[j]
                            .conns()
                            .iter()
                            .find(|c| c.opened > killed)
                            .map(|c| c.opened)
                    })
                    .collect();
                if back.iter().all(Option::is_some) {
                    break back.into_iter().flatten().max().unwrap() - killed;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "watchers of the killed instance not reconnected within 10 s"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        eprintln!(
            "kill -9 of ts{}: haproxy marked it down after {down_after:?}; the {} watchers on it \
             all reconnected within {storm:?} of the kill",
            victim + 1,
            victims_watchers.len()
        );
        assert!(storm < Duration::from_secs(5), "reconnect storm took {storm:?}");

        // The waiting run was taken over and can still be answered.
        tokio::time::sleep(Duration::from_millis(ORPHAN_SECS * 1000 + 1500)).await;
        let st = lb
            .must(
                Method::GET,
                "/instance-ai/threads/f-ask/status",
                None,
                None,
                Duration::from_secs(5),
            )
            .await
            .json();
        assert_eq!(st["isSuspended"], true, "{st}");
        assert_eq!(st["runId"], ask_run.as_str(), "{st}");
        let ok = lb
            .must(
                Method::POST,
                &format!("/instance-ai/confirm/{request_id}"),
                Some(&approve()),
                None,
                Duration::from_secs(5),
            )
            .await;
        assert_eq!(ok.json(), json!({"ok": true}));
        await_frame(&threads[0].watchers[0], Duration::from_secs(30), |v| {
            v["type"] == "run-finish" && v["runId"] == ask_run.as_str()
        })
        .await;

        // The ingest agents finish; the long runs still going are cancelled through HAProxy.
        // Agents whose run-start the victim stored (it holds their runs' leases) post on
        // through the others: their runs are not orphaned, since each post extends the lease.
        let posted = finish_agents(agents, |_| false).await;
        let on_victim = posted
            .iter()
            .filter(|p| p.started_on == format!("ts{}", victim + 1))
            .count();
        eprintln!("kill -9: {on_victim} ingested runs had their run-start stored by the victim");
        for (thread, _, _) in &runs {
            lb.must(
                Method::POST,
                &format!("/instance-ai/chat/{thread}/cancel"),
                Some(&json!({})),
                None,
                Duration::from_secs(5),
            )
            .await;
        }
        for (thread, run, _) in &runs {
            let w = &threads.iter().find(|t| &t.thread == thread).unwrap().watchers[0];
            await_frame(w, Duration::from_secs(20), |v| {
                v["type"] == "run-finish" && v["runId"] == run.as_str()
            })
            .await;
        }

        let n8n = assert_every_watcher_exact(&fleet, &mut threads).await;
        assert_ingest_exact(&fleet, &posted).await;
        let (_, fin) = finish_of(&n8n["f-ask"], &ask_run).expect("the answered run finished");
        assert_eq!(fin["payload"]["status"], "completed", "{fin}");
        // The victim's runs live at the kill were closed as interrupted, within the orphan
        // time (plus the sweep's period).
        for (thread, run, on) in &runs {
            let (_, fin) = finish_of(&n8n[thread], run).expect("run-finish");
            let at = fin["ts"].as_i64().unwrap();
            if *on == victim && at > killed_ms {
                assert_eq!(fin["payload"]["reason"], "interrupted", "{thread}: {fin}");
                let after = at - killed_ms;
                eprintln!("{thread}: orphaned run closed as interrupted {after} ms after the kill");
                assert!(
                    after <= (ORPHAN_SECS as i64 + 2) * 1000,
                    "{thread}: orphaned run closed {after} ms after the kill (--run-orphan-secs {ORPHAN_SECS})"
                );
            } else {
                assert_ne!(fin["payload"]["reason"], "interrupted", "{thread}: {fin}");
            }
        }
        eprintln!(
            "kill -9: {} requests in flight needed a retry: {:?}",
            lb.failures().len(),
            lb.failures()
        );
    })
    .await
}

// ------------------------------------------------------------------------------------------------
// Routing on the thread id
// ------------------------------------------------------------------------------------------------

/// Every kind of request of `thread` through HAProxy (an agent's ingest post, an AG-UI run
/// start, a chat, reads): `(what, X-Served-By)` of each, and the chat's run, left streaming.
async fn requests_of(
    lb: &Lb,
    thread: &str,
    n8n: &Watcher,
    tag: &str,
) -> (Vec<(String, String)>, String) {
    let t = enc(thread);
    let mut by = Vec::new();
    let run = format!("run-{tag}");
    let events = [
        run_start(&run, "a"),
        text_delta(&run, "a", "hi"),
        run_finish(&run, "a", "completed"),
    ];
    let a = lb
        .must(
            Method::POST,
            &format!("/instance-ai/threads/{t}/events"),
            Some(&json!({ "events": events })),
            Some(&format!("ingest-{tag}")),
            Duration::from_secs(10),
        )
        .await;
    by.push(("ingest".to_string(), a.served_by));
    // The thread id in the body, not the path.
    let a = lb
        .must(
            Method::POST,
            "/api/v1/agent/runs",
            Some(&json!({"threadId": thread, "runId": format!("agui-{tag}"), "message": "crash"})),
            Some(&format!("agui-{tag}")),
            Duration::from_secs(10),
        )
        .await;
    by.push(("AG-UI run start".to_string(), a.served_by));
    let agui_run = format!("agui-{tag}");
    await_frame(n8n, Duration::from_secs(20), |v| {
        v["type"] == "run-finish" && v["runId"] == agui_run.as_str()
    })
    .await;
    let (chat_run, on) = lb.chat(thread, "give me a long answer").await;
    by.push(("chat".to_string(), on));
    for read in ["status", "messages"] {
        let a = lb
            .must(
                Method::GET,
                &format!("/instance-ai/threads/{t}/{read}"),
                None,
                None,
                Duration::from_secs(10),
            )
            .await;
        by.push((read.to_string(), a.served_by));
    }
    (by, chat_run)
}

/// Where each watcher's connections were served, those opened after `since`.
fn streams_since(w: &Watched, since: Option<Instant>) -> Vec<(String, String)> {
    w.watchers
        .iter()
        .flat_map(|w| {
            w.conns()
                .into_iter()
                .filter(|c| since.is_none_or(|t| c.opened > t))
                .map(|c| (format!("{:?} stream", w.protocol), c.served_by))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// docs/haproxy.cfg hashes on the thread id: every request of a thread (its ingest posts, its
/// chat and AG-UI run starts, its n8n and AG-UI streams, its reads) lands on one instance, and
/// different threads spread over the instances. When that instance dies, the thread moves whole
/// to one live instance, and threads of the others stay where they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_routes_each_thread_to_one_instance_and_moves_it_whole_when_that_one_dies() {
    bounded(120, async {
        let mut fleet = Fleet::on_new_database().await;
        let lb = Lb::new(&fleet.lb.base);
        let mut threads = Vec::new();
        let mut home = Vec::new();
        let mut chat_runs = Vec::new();
        for k in 0..6 {
            let w = watched(&fleet.lb, &format!("h-{k}"));
            let (mut by, run) = requests_of(&lb, &w.thread, &w.watchers[0], &format!("h{k}")).await;
            chat_runs.push(run);
            by.extend(streams_since(&w, None));
            let on = by[0].1.clone();
            assert!(
                by.iter().all(|(_, s)| *s == on),
                "{}: requests on several instances: {by:?}",
                w.thread
            );
            home.push(on);
            threads.push(w);
        }
        let mut spread = home.clone();
        spread.sort();
        spread.dedup();
        assert!(spread.len() > 1, "every thread on {spread:?}");

        // The instance of h-0 dies.
        let victim = fleet.index_of(&home[0]);
        fleet.servers[victim].kill9();
        let killed = Instant::now();
        fleet
            .lb
            .await_status(victim, "DOWN", Duration::from_secs(5))
            .await;
        for (k, w) in threads.iter().enumerate() {
            let path = format!("/instance-ai/threads/{}/status", w.thread);
            let reads: Vec<(String, String)> = futures::future::join_all(
                (0..3).map(|_| lb.must(Method::GET, &path, None, None, Duration::from_secs(10))),
            )
            .await
            .into_iter()
            .map(|a| ("status".to_string(), a.served_by))
            .collect();
            let now = &reads[0].1;
            assert!(
                reads.iter().all(|(_, s)| s == now),
                "{}: {reads:?}",
                w.thread
            );
            if home[k] == home[0] {
                assert_ne!(
                    *now, home[0],
                    "{}: still sent to the dead instance",
                    w.thread
                );
            } else {
                assert_eq!(
                    *now, home[k],
                    "{}: moved though its instance lives",
                    w.thread
                );
            }
        }
        // h-0's watchers resume on that same live instance (with Last-Event-ID), and its chat
        // run, orphaned, is closed there; then its agent posts there too.
        let t0 = Instant::now();
        let moved = loop {
            let back = streams_since(&threads[0], Some(killed));
            if threads[0]
                .watchers
                .iter()
                .all(|w| w.conns().iter().any(|c| c.opened > killed))
            {
                break back;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "h-0's watchers did not reconnect"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let a = lb
            .must(
                Method::GET,
                "/instance-ai/threads/h-0/status",
                None,
                None,
                Duration::from_secs(10),
            )
            .await;
        let to = a.served_by;
        assert!(
            moved.iter().all(|(_, s)| *s == to),
            "h-0 after the kill: {moved:?} and status on {to}"
        );
        let within = Duration::from_secs(ORPHAN_SECS + 10);
        let st = await_frame(&threads[0].watchers[0], within, |v| {
            v["type"] == "run-finish" && v["runId"] == chat_runs[0].as_str()
        })
        .await;
        assert_eq!(st["payload"]["reason"], "interrupted", "{st}");
        eprintln!(
            "h-0 moved from {} to {to}; its orphaned run closed: {st}",
            home[0]
        );
        let a = lb
            .must(
                Method::POST,
                "/instance-ai/threads/h-0/events",
                Some(&json!({"events": [
                    run_start("run-after", "a"),
                    run_finish("run-after", "a", "completed"),
                ]})),
                Some("ingest-after"),
                Duration::from_secs(10),
            )
            .await;
        assert_eq!(a.served_by, to, "h-0's ingest post after the kill");
        assert_eq!(
            streams_since(&threads[0], Some(killed))
                .iter()
                .filter(|(_, s)| *s != to)
                .count(),
            0,
            "h-0's streams after the kill: {:?}",
            streams_since(&threads[0], Some(killed))
        );
    })
    .await
}

// ------------------------------------------------------------------------------------------------
// Rolling restart
// ------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_behind_haproxy_fails_no_request_and_loses_nothing() {
    bounded(120, async {
        let mut fleet = Fleet::on_new_database().await;
        let lb = Lb::new(&fleet.lb.base);
        let mut threads = Vec::new();
        let mut runs = Vec::new();
        for k in 0..3 {
            let thread = format!("r-long-{k}");
            threads.push(watched(&fleet.lb, &thread));
            runs.push((
                thread.clone(),
                lb.chat(&thread, "give me a long answer").await.0,
            ));
        }
        let agents: Vec<_> = (0..3)
            .map(|k| {
                let thread = format!("r-ingest-{k}");
                threads.push(watched(&fleet.lb, &thread));
                ingest_agent(lb.clone(), thread, 60, 3, Duration::from_millis(150))
            })
            .collect();
        // Reads and new chats all through the roll.
        let reader = {
            let lb = lb.clone();
            tokio::spawn(async move {
                let mut n = 0;
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_secs(60) {
                    lb.must(
                        Method::GET,
                        "/instance-ai/threads",
                        None,
                        None,
                        Duration::from_secs(10),
                    )
                    .await;
                    n += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                n
            })
        };

        tokio::time::sleep(Duration::from_secs(1)).await;
        for i in 0..3 {
            let t0 = Instant::now();
            fleet.servers[i].sigterm();
            let down = fleet
                .lb
                .await_status(i, "DOWN", Duration::from_secs(5))
                .await;
            let status = fleet.servers[i].wait_exit(Duration::from_secs(15)).await;
            assert!(status.success(), "ts{} exit: {status:?}", i + 1);
            let exited = t0.elapsed();
            fleet.servers[i].restart().await;
            let up = fleet
                .lb
                .await_status(i, "UP", Duration::from_secs(10))
                .await;
            eprintln!(
                "ts{}: down in haproxy {down:?} after SIGTERM, exited after {exited:?}, up again \
                 {:?} after SIGTERM (haproxy saw it up {up:?} after it restarted)",
                i + 1,
                t0.elapsed()
            );
            let thread = format!("r-new-{i}");
            threads.push(watched(&fleet.lb, &thread));
            runs.push((
                thread.clone(),
                lb.chat(&thread, "give me a long answer").await.0,
            ));
        }
        reader.abort();

        let posted = finish_agents(agents, |_| false).await;
        for (thread, _) in &runs {
            lb.must(
                Method::POST,
                &format!("/instance-ai/chat/{thread}/cancel"),
                Some(&json!({})),
                None,
                Duration::from_secs(5),
            )
            .await;
        }
        for (thread, run) in &runs {
            let w = &threads
                .iter()
                .find(|t| &t.thread == thread)
                .unwrap()
                .watchers[0];
            await_frame(w, Duration::from_secs(20), |v| {
                v["type"] == "run-finish" && v["runId"] == run.as_str()
            })
            .await;
        }
        assert_eq!(
            lb.failures(),
            Vec::<String>::new(),
            "requests failed during the rolling restart"
        );
        assert_every_watcher_exact(&fleet, &mut threads).await;
        assert_ingest_exact(&fleet, &posted).await;
        // Streams re-established: every watcher of a long run reconnected at least once.
        let reconnects: usize = threads
            .iter()
            .flat_map(|t| &t.watchers)
            .map(|w| w.conns().len() - 1)
            .sum();
        eprintln!("rolling restart: {reconnects} stream reconnections, no request failed");
        assert!(
            reconnects >= 3,
            "the streams never moved: {reconnects} reconnections"
        );
    })
    .await
}

// ------------------------------------------------------------------------------------------------
// Postgres restarted mid-load
// ------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restart_under_a_fleet_is_503_json_then_every_instance_recovers() {
    let pg = PrivatePostgres::start();
    bounded(120, async {
        let fleet = Fleet::start(pg.url(), None).await;
        let pids: Vec<Option<u32>> = fleet.servers.iter().map(|s| s.pid()).collect();
        let lb = Lb::new(&fleet.lb.base);
        let mut threads = Vec::new();
        // A run settled into its wait for a confirmation across the outage.
        threads.push(watched(&fleet.lb, "p-ask"));
        let (ask_run, _) = lb.chat("p-ask", "clean up my old workflows").await;
        let question = await_frame(&threads[0].watchers[0], Duration::from_secs(20), |v| {
            v["type"] == "confirmation-request" && v["runId"] == ask_run.as_str()
        })
        .await;
        let request_id = question["payload"]["requestId"]
            .as_str()
            .unwrap()
            .to_string();
        let agents: Vec<_> = (0..3)
            .map(|k| {
                let thread = format!("p-ingest-{k}");
                threads.push(watched(&fleet.lb, &thread));
                ingest_agent(lb.clone(), thread, 40, 3, Duration::from_millis(100))
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;

        pg.stop();
        let stopped = Instant::now();
        // Every instance turns unready; HAProxy then has none and answers 503 JSON itself.
        let all_down = fleet.lb.await_all("DOWN", Duration::from_secs(10)).await;
        let probe = Lb::new(&fleet.lb.base);
        let a = probe
            .send(
                Method::POST,
                "/instance-ai/threads/p-probe/events",
                Some(&json!({"events": [run_start("rp", "ap")]})),
                None,
            )
            .await
            .expect("an answer from haproxy");
        assert_eq!(a.status, 503, "write through haproxy: {}", a.body);
        assert!(
            a.content_type.starts_with("application/json"),
            "{}",
            a.content_type
        );
        assert_eq!(a.json()["error"]["code"], "unavailable", "{}", a.body);
        // Each instance, asked directly: a write is 503 JSON, liveness 200, readiness 503.
        for s in &fleet.servers {
            let r = s.ingest("p-probe", &[run_start("rp", "ap")]).await;
            let (code, _) = r.error(503, "a write while Postgres is down");
            assert_eq!(code, "unavailable");
            assert_eq!(s.get("/healthz").await.status, 200);
            let r = s.get("/readyz").await;
            assert_eq!(r.status, 503);
            assert_eq!(r.json()["cause"], "store_unreachable", "{}", r.text);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;

        pg.pg_ctl_start();
        let started = Instant::now();
        let all_up = fleet.lb.await_all("UP", Duration::from_secs(15)).await;
        eprintln!(
            "Postgres stopped: all instances down in haproxy after {all_down:?}; restarted: all \
             up again {all_up:?} after (outage {:?})",
            started - stopped
        );
        assert_eq!(
            fleet.servers.iter().map(|s| s.pid()).collect::<Vec<_>>(),
            pids,
            "an instance was restarted"
        );
        // Every instance takes writes again, without a restart.
        for (i, s) in fleet.servers.iter().enumerate() {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let r = s
                    .ingest(&format!("p-after-{i}"), &[run_start("ra", "aa")])
                    .await;
                if r.status == 200 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "ts{}: {} {}",
                    i + 1,
                    r.status,
                    r.text
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        // The run that waited through the outage can still be answered.
        lb.must(
            Method::POST,
            &format!("/instance-ai/confirm/{request_id}"),
            Some(&approve()),
            None,
            Duration::from_secs(10),
        )
        .await;
        // The outage outlasted every lease; on recovery each instance renews its own before
        // any claims another's, so no live run is taken for an orphan.
        let posted = finish_agents(agents, |_| false).await;
        await_frame(&threads[0].watchers[0], Duration::from_secs(30), |v| {
            v["type"] == "run-finish" && v["runId"] == ask_run.as_str()
        })
        .await;
        let n8n = assert_every_watcher_exact(&fleet, &mut threads).await;
        assert_ingest_exact(&fleet, &posted).await;
        let (_, fin) = finish_of(&n8n["p-ask"], &ask_run).expect("run-finish");
        assert_eq!(fin["payload"]["status"], "completed", "{fin}");
        eprintln!(
            "Postgres restart: {} ingest posts were refused during the outage and retried",
            lb.failures().len()
        );
        drop(fleet);
    })
    .await
}

/// docs/operations.md gives operators the configuration these tests run, word for word.
#[test]
fn the_haproxy_configuration_in_the_docs_is_the_one_tested() {
    let cfg = std::fs::read_to_string(haproxy::CONFIG).expect("docs/haproxy.cfg");
    let ops = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .expect("docs/operations.md");
    assert!(
        ops.contains(&format!("```\n{cfg}```")),
        "docs/operations.md does not hold docs/haproxy.cfg as it is"
    );
}

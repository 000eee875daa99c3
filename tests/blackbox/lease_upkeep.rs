//! Run leases when one instance of a fleet dies holding many runs (found by `threadstream-bench
//! agent-load --haproxy --kill-one-after`): the instance that claims the dead one's leases
//! recovers its runs (16 at a time), and its own leases must stay renewed meanwhile. When renewal
//! waited for that recovery, a recovery longer than a lease let the third instance take the
//! recovering instance's live runs for orphans and finish them as interrupted.
//!
//! A chat run's lease is taken before its start is stored, so an instance that dies in between
//! leaves no live run without a lease (found by the same bench under the full test suite); so is
//! a follow-up run's, and a start that reuses a live run's id does not take that run's lease.
//!
//! And an ingest agent's run whose lease holder died: its post extends the lease as it arrives,
//! not once stored, so a post that waits for the write order longer than the orphan time does not
//! let the fleet close the run under the agent (found by the same bench on a saturated machine).

use crate::common;
use crate::multi_instance::{pool, Db};

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use sqlx::{Connection, PgConnection};

/// `--run-orphan-secs`: leases of 667 ms, renewed every 167 ms.
const ORPHAN_SECS: &str = "1";
/// Runs of the instance that dies: enough that recovering them outlasts a lease.
const ORPHANS: usize = 150;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovering_a_dead_instances_runs_does_not_orphan_the_recoverers_own() {
    bounded(120, async {
        let (name, url) = create_database().await;
        let _db = Db(Some(name));
        let opts = || Opts {
            database_url: Some(url.clone()),
            // A long demo answer streams for about 20 s: live through the whole test.
            demo_delay_ms: 10,
            extra_args: ["--run-orphan-secs", ORPHAN_SECS, "--max-runs-per-user", "0"]
                .map(String::from)
                .to_vec(),
            ..Opts::default()
        };
        let (mut dying, b, c) = tokio::join!(
            Server::start_with(opts()),
            Server::start_with(opts()),
            Server::start_with(opts()),
        );
        // Many runs on the instance that dies, so recovering them outlasts a lease; a few live
        // runs on each survivor, whichever of them claims the orphans.
        let mut orphans = Vec::new();
        for k in 0..ORPHANS {
            let t = format!("lu-dead-{k}");
            orphans.push((dying.chat(&t, "give me a long answer").await, t));
        }
        let mut kept = Vec::new();
        for (k, s) in [&b, &c, &b, &c, &b, &c].into_iter().enumerate() {
            let t = format!("lu-kept-{k}");
            kept.push((s.chat(&t, "give me a long answer").await, t));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        dying.kill9();

        let db = pool(&url).await;
        let finish = |run: String| {
            let db = db.clone();
            async move {
                sqlx::query_as::<_, (Option<String>,)>(
                    "SELECT payload->>'reason' FROM events WHERE event_type = 'run-finish' \
                     AND run_id = $1",
                )
                .bind(run)
                .fetch_optional(&db)
                .await
                .expect("query the log")
                .map(|r| r.0)
            }
        };
        // Every orphan is closed...
        let t0 = std::time::Instant::now();
        for (run, t) in &orphans {
            loop {
                if let Some(why) = finish(run.clone()).await {
                    assert_eq!(why.as_deref(), Some("interrupted"), "{t}");
                    break;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(60),
                    "{t}: the orphaned run {run} was not closed within 60 s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        eprintln!(
            "{ORPHANS} orphaned runs closed {:?} after the kill",
            t0.elapsed()
        );
        // ... and a while after (several lease times), no run of the survivors was taken for one.
        tokio::time::sleep(Duration::from_secs(2)).await;
        for (run, t) in &kept {
            assert_ne!(
                finish(run.clone()).await.flatten().as_deref(),
                Some("interrupted"),
                "{t}: a live run of a surviving instance was finished as interrupted"
            );
        }
    })
    .await
}

/// The log's write order (`store/src/postgres/mod.rs`): the advisory lock every batch takes,
/// in `threadstream_take_order()` (`migrations/postgres/0014_take_order.sql`).
const WRITE_ORDER: &str = "pg_advisory_xact_lock(127991944667492)";
/// What a batch waiting for the write order runs.
const TAKES_WRITE_ORDER: &str = "threadstream_take_order()";

/// Takes the log's write order in a transaction on a connection of its own: every instance's
/// appends wait until it is committed.
async fn hold_write_order(url: &str) -> PgConnection {
    let mut order = PgConnection::connect(url).await.expect("connect");
    sqlx::query("BEGIN").execute(&mut order).await.unwrap();
    sqlx::query(&format!("SELECT {WRITE_ORDER}"))
        .execute(&mut order)
        .await
        .unwrap();
    order
}

/// An instance on `url` that notices an orphaned run within `orphan`.
fn leased(url: &str, orphan: Duration) -> Opts {
    Opts {
        database_url: Some(url.to_string()),
        extra_args: vec!["--run-orphan-secs".into(), orphan.as_secs().to_string()],
        ..Opts::default()
    }
}

/// `opts` with a slow demo model: a long answer streams for about 20 s, a background build's
/// task for a few.
fn slow_demo(opts: Opts) -> Opts {
    Opts {
        demo_delay_ms: 10,
        ..opts
    }
}

/// The runs of `thread` that have a lease.
async fn leases_of(db: &sqlx::PgPool, thread: &str) -> Vec<String> {
    sqlx::query_as::<_, (String,)>("SELECT run_id FROM run_leases WHERE thread_id = $1")
        .bind(thread)
        .fetch_all(db)
        .await
        .expect("query the leases")
        .into_iter()
        .map(|r| r.0)
        .collect()
}

/// The run-finish reason of `run`, once it has one.
async fn finish_reason(db: &sqlx::PgPool, run: &str) -> Option<Option<String>> {
    sqlx::query_as::<_, (Option<String>,)>(
        "SELECT payload->>'reason' FROM events WHERE event_type = 'run-finish' AND run_id = $1",
    )
    .bind(run)
    .fetch_optional(db)
    .await
    .expect("query the log")
    .map(|r| r.0)
}

/// Waits until `run` is finished; how long that took from `since`.
async fn await_interrupted(db: &sqlx::PgPool, run: &str, since: Instant, within: Duration) {
    loop {
        if let Some(why) = finish_reason(db, run).await {
            assert_eq!(why.as_deref(), Some("interrupted"), "{run}");
            eprintln!("{run} closed as interrupted {:?} after", since.elapsed());
            return;
        }
        assert!(
            since.elapsed() < within,
            "{run} was not closed within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingest_post_waiting_for_the_write_order_keeps_its_run_leased() {
    // Leases of 2 s, extended at most every 0.5 s.
    const ORPHAN: Duration = Duration::from_secs(3);
    bounded(120, async {
        let (name, url) = create_database().await;
        let _db = Db(Some(name));
        let (mut holder, posted_to) = tokio::join!(
            Server::start_with(leased(&url, ORPHAN)),
            Server::start_with(leased(&url, ORPHAN))
        );
        // Two agents' runs, leased by the instance that stored their run-start.
        holder
            .ingest_ok("il-posting", &[run_start("r-posting", "a")])
            .await;
        holder
            .ingest_ok("il-silent", &[run_start("r-silent", "a")])
            .await;
        let db = pool(&url).await;

        // The write order is held; the posting agent's next post, through the other instance,
        // waits for it.
        let mut order = hold_write_order(&url).await;
        let post = {
            let url = posted_to.url("/instance-ai/threads/il-posting/events");
            tokio::spawn(async move {
                reqwest::Client::new()
                    .post(url)
                    .json(&json!({"events": [text_delta("r-posting", "a", "still here")]}))
                    .send()
                    .await
                    .expect("the post")
            })
        };
        let t0 = Instant::now();
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory' \
                 AND strpos(query, $1) > 0 AND pid <> pg_backend_pid()",
            )
            .bind(TAKES_WRITE_ORDER)
            .fetch_one(&db)
            .await
            .unwrap();
            if waiting > 0 {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the post never waited for the write order"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The lease holder dies, and the post waits longer than the orphan time: the silent
        // agent's run is claimed meanwhile (its recovery waits for the write order too).
        holder.kill9();
        tokio::time::sleep(ORPHAN + Duration::from_secs(2)).await;
        assert!(
            !post.is_finished(),
            "the post was stored while the write order was held"
        );
        sqlx::query("COMMIT").execute(&mut order).await.unwrap();
        let released = Instant::now();

        let r = post.await.unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
        let acked = Instant::now();
        let stored: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM events WHERE run_id = 'r-posting' AND event_type = 'text-delta'",
        )
        .fetch_one(&db)
        .await
        .unwrap();
        assert_eq!(stored, 1, "the acknowledged post is not stored");
        // The agent whose post waited: its run is live after the post is stored (the lease
        // reaches at least half the orphan time past its arrival; a recovery claimed during the
        // wait would have closed it right behind the post).
        await_interrupted(&db, "r-silent", released, ORPHAN + Duration::from_secs(2)).await;
        tokio::time::sleep(Duration::from_millis(500).saturating_sub(acked.elapsed())).await;
        assert_eq!(
            finish_reason(&db, "r-posting").await,
            None,
            "the run was closed under an agent whose post waited for the write order"
        );
        // Now silent, that agent's run is closed within the orphan time (plus the sweep's tick).
        await_interrupted(
            &db,
            "r-posting",
            acked,
            ORPHAN + Duration::from_millis(1500),
        )
        .await;
        drop(posted_to);
    })
    .await
}

/// A chat run's lease is taken before its `run-start` is appended: taken after, a `kill -9` in
/// between left a live run that no lease named and no instance ever finished (the agent-load
/// kill bench: 9 of 10 runs). The write order is held so that two chats wait on the instance
/// that dies: their leases are there already. Once it is dead, the instance that claims them
/// finds neither run in the log and lets them go, without touching the live run another
/// instance executes on one of the threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_runs_lease_is_taken_before_its_start_is_stored() {
    // Leases of 2 s, renewed every 0.5 s.
    const ORPHAN: Duration = Duration::from_secs(3);
    bounded(120, async {
        let (name, url) = create_database().await;
        let _db = Db(Some(name));
        // A long answer is live through the whole test.
        let opts = || slow_demo(leased(&url, ORPHAN));
        let (mut dying, survivor) =
            tokio::join!(Server::start_with(opts()), Server::start_with(opts()));
        let busy_run = survivor.chat("ls-busy", "give me a long answer").await;
        let db = pool(&url).await;

        let mut order = hold_write_order(&url).await;
        // A new thread's first run, and a run on the thread the survivor runs one on (it would
        // be refused with 409 once stored): both wait for the order on the instance that dies.
        let chats: Vec<_> = ["ls-new", "ls-busy"]
            .into_iter()
            .map(|thread| {
                let url = dying.url(&format!("/instance-ai/chat/{thread}"));
                tokio::spawn(async move {
                    let _ = reqwest::Client::new()
                        .post(url)
                        .json(&json!({"message": "hello"}))
                        .send()
                        .await;
                })
            })
            .collect();
        let leases_of = |thread: &'static str| leases_of(&db, thread);
        let t0 = Instant::now();
        while leases_of("ls-new").await.is_empty() || leases_of("ls-busy").await.len() < 2 {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no lease while the runs' starts wait for the write order: ls-new {:?}, ls-busy {:?}",
                leases_of("ls-new").await,
                leases_of("ls-busy").await
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let stored: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM events WHERE aggregate_id IN ('ls-new', 'ls-busy') \
             AND event_type = 'run-start'",
        )
        .fetch_one(&db)
        .await
        .unwrap();
        assert_eq!(stored, 1, "only the survivor's run has started");

        // The instance dies with both appends unstored; the order is let go.
        dying.kill9();
        for chat in chats {
            chat.await.unwrap();
        }
        sqlx::query("COMMIT").execute(&mut order).await.unwrap();

        // The survivor claims both leases once they expire and releases them.
        let t0 = Instant::now();
        while leases_of("ls-new").await.len() + leases_of("ls-busy").await.len() > 1 {
            assert!(
                t0.elapsed() < ORPHAN * 3,
                "the dead instance's leases were never let go: ls-new {:?}, ls-busy {:?}",
                leases_of("ls-new").await,
                leases_of("ls-busy").await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(leases_of("ls-busy").await, vec![busy_run.clone()]);
        let new_thread: i64 =
            sqlx::query_scalar("SELECT count(*) FROM events WHERE aggregate_id = 'ls-new'")
                .fetch_one(&db)
                .await
                .unwrap();
        assert_eq!(new_thread, 0, "a thread whose first run was never stored");
        assert_eq!(
            finish_reason(&db, &busy_run).await,
            None,
            "the survivor's live run was closed by the claim of a lease for a run never stored"
        );
    })
    .await
}

/// A start that reuses the id of a live run (AG-UI's client-chosen `runId`, an agent's
/// `run-start`) is refused, and leaves that run's lease alone: the lease is taken only if free.
/// Taken over and let go with the refused start, it left the live run without a lease, so a
/// death of its instance would never close it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_reusing_a_live_runs_id_leaves_its_lease() {
    bounded(120, async {
        let (name, url) = create_database().await;
        let _db = Db(Some(name));
        // A long answer is live through the whole test.
        let s = Server::start_with(slow_demo(leased(&url, Duration::from_secs(60)))).await;
        let db = pool(&url).await;
        let start = |thread: &str| {
            json!({"threadId": thread, "runId": "r-live", "message": "give me a long answer"})
        };
        s.post("/api/v1/agent/runs", &start("lr-chat"))
            .await
            .ok_json("start r-live");
        s.ingest_ok("lr-agent", &[run_start("r-live", "a")]).await;
        assert_eq!(leases_of(&db, "lr-chat").await, ["r-live"]);
        assert_eq!(leases_of(&db, "lr-agent").await, ["r-live"]);

        for thread in ["lr-chat", "lr-agent"] {
            let again = s.post("/api/v1/agent/runs", &start(thread)).await;
            assert_eq!(again.status, 409, "{thread}: {}", again.text);
            let again = s.ingest(thread, &[run_start("r-live", "a")]).await;
            assert_eq!(again.status, 409, "{thread}: {}", again.text);
            assert_eq!(
                leases_of(&db, thread).await,
                ["r-live"],
                "{thread}: a refused start let the live run's lease go"
            );
        }
        assert_eq!(finish_reason(&db, "r-live").await, None, "r-live is live");
    })
    .await
}

/// A follow-up run (the runtime's own, reporting background tasks) is leased before its start
/// is stored, as a chat run is: it waits for the thread's live run to finish, holding its lease
/// meanwhile. Taken once stored, an instance dying in between left a live run no lease named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_runs_lease_is_taken_before_its_start_is_stored() {
    bounded(180, async {
        let (name, url) = create_database().await;
        let _db = Db(Some(name));
        let s = Server::start_with(slow_demo(leased(&url, Duration::from_secs(60)))).await;
        let db = pool(&url).await;
        let thread = "lf-1";
        let build = s
            .chat(
                thread,
                "build a weather to slack workflow in the background",
            )
            .await;
        // The build's run finishes while its task goes on; a chat run is started at once, so the
        // task's follow-up run waits for it.
        let t0 = Instant::now();
        while s.status(thread).await["hasActiveRun"] == true {
            assert!(t0.elapsed() < Duration::from_secs(30), "the build's run never finished");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let busy = s.chat(thread, "give me a long answer").await;
        let run_starts = |db: sqlx::PgPool| async move {
            sqlx::query_as::<_, (String,)>(
                "SELECT run_id FROM events WHERE aggregate_id = 'lf-1' AND event_type = 'run-start'",
            )
            .fetch_all(&db)
            .await
            .expect("query the log")
            .into_iter()
            .map(|r| r.0)
            .collect::<Vec<_>>()
        };
        // The follow-up's lease: a run that is neither of the two, taken while the chat run is
        // live (so before the follow-up's start could be stored).
        let t0 = Instant::now();
        let follow_up = loop {
            // Read in this order: a lease seen while the chat run is live.
            let busy_live = finish_reason(&db, &busy).await.is_none();
            let leased = leases_of(&db, thread).await;
            if let Some(run) = leased.into_iter().find(|r| *r != build && *r != busy) {
                break run;
            }
            assert!(
                busy_live,
                "the follow-up run held no lease while it waited for the thread's live run"
            );
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "no lease for the follow-up run while it waits for the live run"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            !run_starts(db.clone()).await.contains(&follow_up),
            "the follow-up started under a live run"
        );
        // Once the chat run is over, the follow-up run starts under that id, and finishes.
        let t0 = Instant::now();
        while finish_reason(&db, &follow_up).await.is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "the follow-up run {follow_up} never finished; runs started: {:?}",
                run_starts(db.clone()).await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(finish_reason(&db, &follow_up).await, Some(None));
    })
    .await
}

//! Retention (`--retention-days`) against the real binary: idle threads (with their forks) are
//! erased in the background, archived first as NDJSON that `threadstream import` takes (a
//! server on the imported store reads them back as they were); a thread waiting on a
//! confirmation, one with a bare live run and one with a running background task are never
//! removed; appends to a busy thread meanwhile lose
//! nothing and wait less than [`APPEND_BOUND`]; two Postgres instances sweeping one database
//! erase each thread once, without an error.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// The longest an append may wait while retention sweeps (docs/operations.md).
const APPEND_BOUND: Duration = Duration::from_millis(1500);

/// ~2.6 s: what a test can wait for, in the flag's unit.
const DAYS: &str = "0.00003";

fn retention_opts(archive: Option<&std::path::Path>) -> Opts {
    let mut extra = vec![
        "--retention-days".to_string(),
        DAYS.into(),
        "--retention-sweep-secs".into(),
        "1".into(),
    ];
    if let Some(dir) = archive {
        extra.push("--archive-dir".into());
        extra.push(dir.display().to_string());
    }
    Opts {
        extra_args: extra,
        ..Opts::default()
    }
}

async fn wait_gone(s: &Server, thread: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let r = s
            .get(&format!("/instance-ai/threads/{thread}/messages"))
            .await;
        if r.status == 404 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{thread} was not erased by retention within {within:?}\n{}",
            s.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_threads_are_archived_and_erased_and_busy_ones_kept() {
    bounded(180, async {
        let archive = tempfile::tempdir().unwrap();
        let s = Server::start_with(retention_opts(Some(archive.path()))).await;
        // Idle from the start, but never removed: a bare live run (no confirmation asked), and
        // a finished run whose background task still runs.
        s.ingest_ok(
            "rt-live",
            &[run_start("r1", "o"), text_delta("r1", "o", "still running")],
        )
        .await;
        s.ingest_ok(
            "rt-tasks",
            &[
                run_start("r1", "o"),
                ev(
                    "agent-spawned",
                    "r1",
                    "bg1",
                    json!({"parentId": "o", "role": "builder", "tools": [], "taskId": "task-1"}),
                ),
                run_finish("r1", "o", "completed"),
            ],
        )
        .await;
        let st = s.status("rt-live").await;
        assert_eq!(st["hasActiveRun"], true, "{st}");
        let st = s.status("rt-tasks").await;
        assert_eq!(st["hasActiveRun"], false, "{st}");
        assert_eq!(st["backgroundTasks"][0]["status"], "running", "{st}");
        let live_before = s.messages("rt-live").await;
        let tasks_before = s.messages("rt-tasks").await;
        // Idle: ingested once, with a fork.
        let ids = s
            .ingest_ok(
                "rt-old",
                &[
                    run_start("r1", "o"),
                    text_delta("r1", "o", "old words"),
                    run_finish("r1", "o", "completed"),
                ],
            )
            .await;
        s.post(
            "/instance-ai/threads/rt-old/fork",
            &json!({"threadId": "rt-old-fork", "throughEventId": ids[2]}),
        )
        .await
        .ok_json("fork");
        let old_before = s.messages("rt-old").await;
        let fork_before = s.messages("rt-old-fork").await;
        // Waiting on a confirmation: idle, but never removed.
        let run = s.chat("rt-waiting", "delete the old one").await;
        let mut sse = s.sse("rt-waiting", Cursor::None).await;
        sse.read_until(Duration::from_secs(20), |e| {
            e.ty() == "confirmation-request"
        })
        .await;
        drop(sse);
        // Busy: appended to all along.
        s.ingest_ok("rt-busy", &[run_start("r1", "o")]).await;
        let mut acked = 0usize;
        let mut slowest = Duration::ZERO;
        let started = Instant::now();
        let mut gone = false;
        while started.elapsed() < Duration::from_secs(30) {
            let t = Instant::now();
            s.ingest_ok("rt-busy", &[text_delta("r1", "o", "busy")])
                .await;
            slowest = slowest.max(t.elapsed());
            acked += 1;
            if s.get("/instance-ai/threads/rt-old/messages").await.status == 404 {
                gone = true;
                // A few more sweeps with the others still there.
                if started.elapsed() > Duration::from_secs(8) {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(gone, "rt-old was not erased\n{}", s.logs());
        wait_gone(&s, "rt-old-fork", Duration::from_secs(5)).await;
        assert_eq!(s.status("rt-waiting").await["isSuspended"], true);
        // Idle for the whole loop (several sweeps past the period), and kept.
        assert_eq!(s.messages("rt-live").await, live_before);
        assert_eq!(s.status("rt-live").await["hasActiveRun"], true);
        assert_eq!(s.messages("rt-tasks").await, tasks_before);
        let st = s.status("rt-tasks").await;
        assert_eq!(st["backgroundTasks"][0]["status"], "running", "{st}");
        assert_eq!(
            s.count_thread_events("rt-busy").await as usize,
            acked + 2,
            "every acknowledged append is stored (and thread-created, run-start)"
        );
        assert!(slowest < APPEND_BOUND, "an append waited {slowest:?}");
        eprintln!("{acked} appends during retention, slowest {slowest:?}");
        let _ = run;

        // The archive: one file, the thread and its fork, which `threadstream import` takes.
        let files: Vec<_> = std::fs::read_dir(archive.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        let text = std::fs::read_to_string(&files[0]).unwrap();
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(
            text.contains("old words") && text.contains("rt-old-fork"),
            "{text}"
        );
        // Imported into a new store (Postgres on the Postgres pass), a server on it reads the
        // thread and its fork back as they were before retention removed them.
        let mut t = Server::start().await;
        t.stop().await;
        let file = files[0].display().to_string();
        let (ok, out, err) = cli_on(&t, &["import", "--input", &file]).await.parts();
        assert!(ok, "import of the archive:\n{out}\n{err}");
        t.restart().await;
        assert_eq!(t.messages("rt-old").await, old_before);
        assert_eq!(t.messages("rt-old-fork").await, fork_before);
        let tombstones = s
            .logs()
            .matches("retention sweep erased idle threads")
            .count();
        assert!(tombstones >= 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_postgres_instances_sweep_at_once_without_deleting_twice_or_failing() {
    bounded(180, async {
        let (name, url) = create_database().await;
        struct Db(Option<String>);
        impl Drop for Db {
            fn drop(&mut self) {
                if let Some(n) = self.0.take() {
                    drop_database(n);
                }
            }
        }
        let _db = Db(Some(name));
        let opts = || Opts {
            database_url: Some(url.clone()),
            ..retention_opts(None)
        };
        let (a, b) = tokio::join!(Server::start_with(opts()), Server::start_with(opts()));
        let threads: Vec<String> = (0..12).map(|i| format!("rt-pg-{i}")).collect();
        for (i, t) in threads.iter().enumerate() {
            let s = if i % 2 == 0 { &a } else { &b };
            s.ingest_ok(
                t,
                &[run_start("r1", "o"), run_finish("r1", "o", "completed")],
            )
            .await;
        }
        for t in &threads {
            wait_gone(&a, t, Duration::from_secs(40)).await;
            assert_eq!(
                b.get(&format!("/instance-ai/threads/{t}/status"))
                    .await
                    .status,
                404
            );
        }
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let tombstones: Vec<String> = sqlx::query_scalar(
            "SELECT payload::text FROM events WHERE aggregate_id = 'erasure:log' ORDER BY id",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        let mut erased: Vec<String> = Vec::new();
        for t in &tombstones {
            let v: Value = serde_json::from_str(t).unwrap();
            assert_eq!(v["reason"], "retention");
            for s in v["streams"].as_array().unwrap() {
                erased.push(s["stream"].as_str().unwrap().to_string());
            }
        }
        erased.sort();
        let mut expected = threads.clone();
        expected.sort();
        assert_eq!(erased, expected, "each thread erased exactly once");
        for s in [&a, &b] {
            let logs = s.logs();
            assert!(!logs.contains("retention sweep failed"), "{logs}");
        }
    })
    .await;
}

//! Erasure on a cluster (issue 37, part 4): an erased thread's text is gone from every node.
//! The erasure's rows go on the primary and the standbys replay it; `threadstream scrub`
//! rewrites the erased tables and moves the WAL on; each node then deletes the old segments
//! (`wal_recycle = off` in the script's configuration) at its next checkpoint or restartpoint.
//! Checked as the single-node test checks SQLite: a marker written in the thread is grepped for
//! in every file of each node's data directory.

use std::time::{Duration, Instant};

use super::cluster::*;
use super::server_on;
use crate::common::*;
use crate::erasure::{files_containing, marker, pg_rows_containing};
use serde_json::json;

/// How long the nodes get to drop the WAL segments that held the marker: each needs a
/// checkpoint (a restartpoint on a standby) after its slots and standbys have moved past them.
const SEGMENTS_GONE_WITHIN: Duration = Duration::from_secs(60);

#[tokio::test]
async fn an_erased_and_scrubbed_thread_is_in_no_file_of_any_node() {
    bounded(300, async {
        let mut c = HaCluster::start();
        let s = server_on(&c, &[]).await;
        let mark = marker("ha");
        let (run, agent) = ("run-e", "agent");
        let gone = s
            .ingest_ok(
                "ha-gone",
                &[run_start(run, agent), text_delta(run, agent, &mark)],
            )
            .await;
        let kept = s
            .ingest_ok(
                "ha-kept",
                &[run_start(run, agent), text_delta(run, agent, "kept")],
            )
            .await;
        let sync = sync_standby(&c).await;
        let p = c.primary(Duration::from_secs(5)).await;
        // The projector's documents hold the text too: erased with the thread.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        for n in 0..3 {
            exec(&c.node_url(n, "postgres"), "CHECKPOINT")
                .await
                .expect("checkpoint");
        }
        for n in [p, sync] {
            assert!(
                !files_containing(&c.data_dir(n), &mark).is_empty(),
                "the marker is in no file of node {n} before the erasure"
            );
        }

        let r = s
            .post("/instance-ai/admin/erase", &json!({"threadId": "ha-gone"}))
            .await;
        let answer = r.ok_json("erase");
        let erased = answer["eventsErased"].as_u64().unwrap_or(0);
        assert!(erased >= gone.len() as u64, "{answer}");
        // The rows are gone on every node once it replayed the erasure.
        for n in 0..3 {
            let url = c.node_url(n, "ts");
            let t0 = Instant::now();
            while pg_rows_containing(&url, &mark).await > 0 {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "node {n} still holds rows with the marker"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }

        let (ok, out, err) = cli_on(&s, &["scrub"]).await.parts();
        assert!(ok, "scrub:\n{out}\n{err}");
        assert!(out.contains("rewritten"), "{out}");

        // Each node checkpointed (a restartpoint on a standby) until no file holds the marker.
        let t0 = Instant::now();
        let mut hits: Vec<String> = Vec::new();
        while t0.elapsed() < SEGMENTS_GONE_WITHIN {
            hits.clear();
            for n in 0..3 {
                exec(&c.node_url(n, "postgres"), "CHECKPOINT")
                    .await
                    .expect("checkpoint");
                hits.extend(files_containing(&c.data_dir(n), &mark));
            }
            if hits.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert!(
            hits.is_empty(),
            "files still holding the marker {:?} after the scrub: {hits:?}",
            t0.elapsed()
        );
        eprintln!(
            "the marker was in no file of any node {:?} after the scrub",
            t0.elapsed()
        );

        // The other thread is whole, the erased one answers 404, and the log verifies clean.
        let history = s.messages("ha-kept").await;
        assert!(
            history["nextEventId"].as_i64().unwrap() > *kept.last().unwrap(),
            "{history}"
        );
        assert_eq!(
            s.get("/instance-ai/threads/ha-gone/messages").await.status,
            404
        );
        let (ok, out, err) = cli_on(&s, &["verify"]).await.parts();
        assert!(ok, "verify after the scrub:\n{out}\n{err}");
        drop(s);
        c.stop();
    })
    .await
}

//! Run leases when one instance of a fleet dies holding many runs (found by `threadstream-bench
//! agent-load --haproxy --kill-one-after`): the instance that claims the dead one's leases
//! recovers its runs (16 at a time), and its own leases must stay renewed meanwhile. When renewal
//! waited for that recovery, a recovery longer than a lease let the third instance take the
//! recovering instance's live runs for orphans and finish them as interrupted.

use crate::common;
use crate::multi_instance::{pool, Db};

use std::time::Duration;

use common::*;

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

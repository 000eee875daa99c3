//! A batch's `COMMIT` whose connection is cut while the primary stays up (issue 37): a network
//! cut, a proxy restarting. With a synchronous standby, the server process keeps waiting for it
//! after the connection is gone; the batch's rows stay invisible until the wait ends, and then
//! they are committed. The writer must not take them for a batch not stored and write them again.
//!
//! A private Postgres cluster (pg_outage.rs) whose `synchronous_standby_names` names a standby
//! that never connects stands for a primary whose standby is slow; a TCP proxy between the server
//! and Postgres cuts every connection on demand.

use crate::common;
use crate::pg_outage::PrivatePostgres;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use sqlx::{Connection, Executor};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy whose connections can all be cut at once (both ends closed).
struct CuttingProxy {
    addr: String,
    conns: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl CuttingProxy {
    async fn start(upstream: String) -> CuttingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let conns: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let held = conns.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let conn = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                held.lock().unwrap().push(conn);
            }
        });
        CuttingProxy {
            addr,
            conns,
            accept,
        }
    }

    /// Closes every connection open now; later ones pass as before.
    fn cut(&self) -> usize {
        let cut: Vec<_> = std::mem::take(&mut *self.conns.lock().unwrap());
        let open = cut.iter().filter(|c| !c.is_finished()).count();
        for conn in cut {
            conn.abort();
        }
        open
    }
}

impl Drop for CuttingProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// Sets the cluster's `synchronous_standby_names` and reloads its configuration.
async fn set_sync_standbys(pg: &PrivatePostgres, names: &str) {
    let mut conn = sqlx::PgConnection::connect(&pg.url()).await.unwrap();
    // `ALTER SYSTEM` cannot run in the implicit transaction of a multi-statement query.
    conn.execute(format!("ALTER SYSTEM SET synchronous_standby_names = '{names}'").as_str())
        .await
        .unwrap();
    conn.execute("SELECT pg_reload_conf()").await.unwrap();
}

/// Waits until a commit on the cluster waits for a standby (the checkpointer has taken the
/// reloaded setting): a probe transaction's `COMMIT` does not end within 300 ms. The probe's
/// connection is left waiting; it ends when the standbys are unset.
async fn await_commits_waiting(pg: &PrivatePostgres) {
    for _ in 0..50 {
        let mut conn = sqlx::PgConnection::connect(&pg.url()).await.unwrap();
        // A temporary table's catalog rows are logged, so its commit waits for the standby
        // (a bare `txid_current()` writes no record that waits).
        let commit = conn.execute("CREATE TEMPORARY TABLE probe (a int)");
        if tokio::time::timeout(Duration::from_millis(300), commit)
            .await
            .is_err()
        {
            return;
        }
    }
    panic!("commits never waited for the named standby");
}

/// Thread `t` of the lost-commit tests holds the deltas `before;`, `cut;` and `after;` once
/// each, every `acked` id, and `verify` is clean.
pub(crate) async fn assert_cut_stored_once(s: &Server, acked: &[i64]) {
    let all = s.read_until_id("t", *acked.iter().max().unwrap()).await;
    let texts: Vec<String> = all
        .iter()
        .filter_map(|e| e.json()["payload"]["text"].as_str().map(String::from))
        .collect();
    assert_eq!(texts, ["before;", "cut;", "after;"], "the log's deltas");
    let ids: Vec<i64> = all.iter().map(|e| e.id()).collect();
    for id in acked {
        assert!(ids.contains(id), "acknowledged id {id} lost: {ids:?}");
    }
    let v = cli_on(s, &["verify"]).await;
    assert!(v.ok, "verify:\n{}\n{}", v.stdout, v.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_cut_off_while_it_waits_for_a_standby_is_stored_once() {
    let pg = PrivatePostgres::start();
    bounded(120, async {
        let proxy = CuttingProxy::start(pg.addr()).await;
        // A lease tick (a sixth of the orphan time) longer than the test: the cut-off post must
        // not extend its run's lease, a commit of its own that would wait too.
        let s = Server::start_with(Opts {
            database_url: Some(format!("postgres://postgres@{}/postgres", proxy.addr)),
            extra_args: vec!["--run-orphan-secs".into(), "600".into()],
            ..Opts::default()
        })
        .await;
        let mut acked = s.ingest_ok("t", &[run_start("r", "a")]).await;
        acked.extend(s.ingest_ok("t", &[text_delta("r", "a", "before;")]).await);

        set_sync_standbys(&pg, "nobody").await;
        await_commits_waiting(&pg).await;
        let append = s.spawn_ingest(
            "t",
            vec![text_delta("r", "a", "cut;")],
            Duration::from_secs(60),
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !append.is_finished(),
            "the append was answered while commits wait for a standby"
        );
        assert!(proxy.cut() > 0, "no connection to cut");
        // The writer looks the batch up meanwhile; its server process still waits.
        tokio::time::sleep(Duration::from_secs(2)).await;
        set_sync_standbys(&pg, "").await;

        let (status, body) = append.await.unwrap();
        assert_eq!(status, 200, "the cut-off append: {body}\n{}", s.logs());
        acked.extend(ids_of(&serde_json::from_str(&body).unwrap()));
        let logs = s
            .logs_with("during COMMIT; the batch is", Duration::from_secs(5))
            .await;
        assert_eq!(
            logs.matches("during COMMIT; the batch is stored").count(),
            1,
            "the cut-off batch was not found stored once\n{logs}"
        );
        assert!(
            !logs.contains("the batch is not stored"),
            "the cut-off batch was taken for not stored\n{logs}"
        );
        acked.extend(s.ingest_ok("t", &[text_delta("r", "a", "after;")]).await);
        assert_cut_stored_once(&s, &acked).await;
    })
    .await
}

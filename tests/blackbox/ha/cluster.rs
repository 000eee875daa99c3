//! The three-node cluster of the HA tests (`threadstream_ha_cluster`, which the bench's HA
//! scenarios use too), failing the test where that crate returns an error; and what only the
//! tests ask of it: where a connection lands, rows, signals to its processes.

use std::ops::Deref;
use std::time::{Duration, Instant};

use sqlx::{Connection, Row};
use threadstream_ha_cluster::Cluster;

/// A cluster on a free port range of its own; dropped, it is stopped by the script (by pid).
pub(crate) struct HaCluster(Cluster);

impl HaCluster {
    pub(crate) fn start() -> HaCluster {
        HaCluster(Cluster::start().unwrap_or_else(|e| panic!("{e:#}")))
    }

    /// The one primary (waits up to `within` for there to be exactly one).
    pub(crate) async fn primary(&self, within: Duration) -> usize {
        self.0
            .primary(within)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// A planned switchover from `leader` to `candidate` with `patronictl`.
    pub(crate) fn switchover(&self, leader: usize, candidate: usize) {
        self.0
            .switchover(leader, candidate)
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// kill -9 of `node`'s postmaster; returns its pid.
    pub(crate) fn kill9_postmaster(&self, node: usize) -> u32 {
        self.0
            .kill9_postmaster(node)
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Stops everything the script started; fails the test if any of it still runs.
    pub(crate) fn stop(&mut self) {
        self.0.stop().unwrap_or_else(|e| panic!("{e:#}"));
    }
}

impl Deref for HaCluster {
    type Target = Cluster;

    fn deref(&self) -> &Cluster {
        &self.0
    }
}

/// `(inet_server_port(), pg_is_in_recovery())` of a fresh connection to `port`.
pub(super) async fn server_of(port: u16) -> Result<(u16, bool), String> {
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let fut = async {
        let mut c = sqlx::PgConnection::connect(&url)
            .await
            .map_err(|e| e.to_string())?;
        let row = sqlx::query("SELECT inet_server_port(), pg_is_in_recovery()")
            .fetch_one(&mut c)
            .await
            .map_err(|e| e.to_string())?;
        let _ = c.close().await;
        Ok((row.get::<i32, _>(0) as u16, row.get::<bool, _>(1)))
    };
    tokio::time::timeout(Duration::from_secs(3), fut)
        .await
        .unwrap_or_else(|_| Err("no answer within 3 s".into()))
}

pub(super) async fn exec(url: &str, sql: &str) -> Result<(), String> {
    let fut = async {
        let mut c = sqlx::PgConnection::connect(url)
            .await
            .map_err(|e| e.to_string())?;
        sqlx::raw_sql(sql)
            .execute(&mut c)
            .await
            .map_err(|e| e.to_string())?;
        let _ = c.close().await;
        Ok(())
    };
    tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .unwrap_or_else(|_| Err("no answer within 5 s".into()))
}

pub(super) async fn count_rows(port: u16) -> Result<i64, String> {
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let mut c = sqlx::PgConnection::connect(&url)
        .await
        .map_err(|e| e.to_string())?;
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM ha_probe")
        .fetch_one(&mut c)
        .await
        .map_err(|e| e.to_string())?;
    let _ = c.close().await;
    Ok(n)
}

/// Waits until HAProxy's write port reaches a writable node other than `old`; returns it.
pub(super) async fn await_new_primary(c: &HaCluster, old: usize, within: Duration) -> usize {
    let t0 = Instant::now();
    loop {
        let p = c.primaries().await;
        if let [q] = p[..] {
            if q != old {
                if let Ok((port, false)) = server_of(c.write_port()).await {
                    if port == c.pg_port(q) {
                        return q;
                    }
                }
            }
        }
        assert!(
            t0.elapsed() < within,
            "no standby promoted within {within:?} of the kill (primaries {p:?})\n{}",
            c.tail_logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `sig` (`STOP`, `CONT`) to the Patronis of `nodes`.
pub(super) fn signal_patronis(c: &HaCluster, nodes: &[usize], sig: &str) {
    for &n in nodes {
        let pid = c.patroni_pid(n).unwrap_or_else(|e| panic!("{e:#}"));
        threadstream_ha_cluster::signal(pid, sig).unwrap_or_else(|e| panic!("{e:#}"));
    }
}

/// The postmaster of `node` and its children (backends, the WAL receiver, …).
pub(super) fn postgres_pids(c: &HaCluster, node: usize) -> Vec<u32> {
    let postmaster = c.postmaster(node).unwrap_or_else(|e| panic!("{e:#}"));
    let mut pids = vec![postmaster];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: comm may hold spaces, so read after its `)`.
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(postmaster) {
            pids.push(pid);
        }
    }
    pids
}

/// Sends `sig` to each of `pids` (one that ended meanwhile is passed over).
pub(super) fn signal(pids: &[u32], sig: &str) {
    for &pid in pids {
        let _ = threadstream_ha_cluster::signal(pid, sig);
    }
}

/// The node whose Patroni REST API answers `/sync` (the synchronous standby), waited for up to
/// 60 s: after a failover, the other standby follows the new primary, and is made synchronous,
/// only at a later turn of the Patroni loop, which a loaded machine stretches.
pub(super) async fn sync_standby(c: &HaCluster) -> usize {
    let client = reqwest::Client::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
        for node in 0..3 {
            let url = format!("http://127.0.0.1:{}/sync", c.api_port(node));
            if client
                .get(&url)
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().as_u16() == 200)
            {
                return node;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("no synchronous standby within 60 s\n{}", c.tail_logs());
}

//! The HA scenarios' use of the three-node cluster (`threadstream_ha_cluster`, which the HA
//! tests use too): started on the port range `--ha-port-base` gives, and watched through a
//! failover; and a node's Postgres CPU.

use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};
pub use threadstream_ha_cluster::Cluster;

/// Starts the cluster on `base` and the ten ports after it, and waits until it has a primary
/// with a synchronous standby.
pub async fn start(base: u16) -> anyhow::Result<Cluster> {
    let t0 = Instant::now();
    let cluster = tokio::task::spawn_blocking(move || Cluster::start_on(base))
        .await?
        .map_err(|e| e.context("starting the cluster (another range: --ha-port-base)"))?;
    eprintln!(
        "  cluster up on ports {base}..{} in {:.1} s",
        base + threadstream_ha_cluster::PORTS - 1,
        t0.elapsed().as_secs_f64()
    );
    Ok(cluster)
}

/// Stops everything the script started, by pid.
pub async fn stop(mut cluster: Cluster) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(move || cluster.stop()).await?
}

/// After the primary `old` of `c` was killed at `killed`, polled every 100 ms for up to 60 s: a
/// standby promoted (its Patroni answers `/primary`), HAProxy's write port reaching it (a new
/// connection lands on a node out of recovery), and it having a synchronous standby
/// streaming (`pg_stat_replication`), without which its commits wait (strict synchronous
/// mode).
pub async fn await_failover(c: &Cluster, old: usize, killed: Instant) -> anyhow::Result<Failover> {
    let mut f = Failover::default();
    let since = || Some(killed.elapsed());
    while f.synchronous.is_none() || f.promoted.is_none() {
        anyhow::ensure!(
            killed.elapsed() < Duration::from_secs(60),
            "no standby promoted with a synchronous standby within 60 s of the kill \
             ({f:?})\n{}",
            c.tail_logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        if f.promoted.is_none() {
            if let [q] = c.primaries().await[..] {
                if q != old {
                    (f.new_primary, f.promoted) = (q, since());
                }
            }
        }
        let Ok(Ok(probe)) = tokio::time::timeout(Duration::from_secs(1), probe_write_port(c)).await
        else {
            continue;
        };
        if probe.port != c.pg_port(old) && !probe.in_recovery {
            f.reached = f.reached.or_else(since);
            if probe.sync_standbys > 0 {
                f.synchronous = since();
            }
        }
    }
    Ok(f)
}

/// Where a new connection to HAProxy's write port lands, and what that node says.
async fn probe_write_port(c: &Cluster) -> anyhow::Result<Probe> {
    let mut conn = PgConnection::connect(&c.write_url("postgres")).await?;
    let (port, in_recovery, sync_standbys): (i32, bool, i64) = sqlx::query_as(
        "SELECT inet_server_port(), pg_is_in_recovery(), \
         (SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync')",
    )
    .fetch_one(&mut conn)
    .await?;
    let _ = conn.close().await;
    Ok(Probe {
        port: port as u16,
        in_recovery,
        sync_standbys,
    })
}

/// What [`await_failover`] saw, each time from the kill.
#[derive(Debug, Default)]
pub struct Failover {
    pub new_primary: usize,
    /// Until its Patroni answered `/primary`.
    pub promoted: Option<Duration>,
    /// Until a new connection to HAProxy's write port reached it.
    pub reached: Option<Duration>,
    /// Until it had a synchronous standby streaming.
    pub synchronous: Option<Duration>,
}

/// A new connection to the write port: the node's port, whether it is in recovery, and its
/// synchronous standbys.
struct Probe {
    port: u16,
    in_recovery: bool,
    sync_standbys: i64,
}

/// The CPU of one node's Postgres over a window: its postmaster and every child of it (the
/// backends, background processes, WAL sender or receiver), those that ended within the window
/// included ([`crate::procstat::tree_cpu_seconds`]).
pub struct NodeCpu {
    postmaster: u32,
    start: f64,
}

impl NodeCpu {
    pub fn start(cluster: &Cluster, node: usize) -> anyhow::Result<NodeCpu> {
        let postmaster = cluster.postmaster(node)?;
        Ok(NodeCpu {
            postmaster,
            start: crate::procstat::tree_cpu_seconds(postmaster),
        })
    }

    /// CPU seconds since [`NodeCpu::start`].
    pub fn finish(self) -> f64 {
        (crate::procstat::tree_cpu_seconds(self.postmaster) - self.start).max(0.0)
    }
}

//! The three-node Postgres cluster of the HA scenarios, started and stopped by
//! `scripts/ha-cluster.sh` (the script operators and tests use: etcd, three Patroni-managed
//! Postgres 15 nodes in strict synchronous mode, HAProxy) in a temp dir, on a fixed port range;
//! and what the scenarios ask of it: its roles, a node's postmaster, a kill -9 of it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sqlx::{Connection, PgConnection};
use tokio::process::Command;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/ha-cluster.sh");

/// Ports the script takes from its base: HAProxy's three, etcd's two, three Postgres, three
/// Patroni REST APIs.
const PORTS: u16 = 11;

/// A running cluster; stopped by the script (by pid) when dropped, so also on an error.
pub struct Cluster {
    dir: tempfile::TempDir,
    base: u16,
    stopped: bool,
    /// The client of the nodes' Patroni REST APIs.
    patroni: reqwest::Client,
}

impl Cluster {
    /// Starts the cluster on `base` and the ten ports after it, and waits until it has a primary
    /// with a synchronous standby (the script's `start`).
    pub async fn start(base: u16) -> anyhow::Result<Cluster> {
        for cmd in ["patroni", "etcd", "haproxy"] {
            anyhow::ensure!(
                ["/usr/bin", "/usr/sbin", "/usr/local/bin"]
                    .iter()
                    .any(|d| Path::new(d).join(cmd).exists()),
                "{cmd} is missing: apt-get install -y patroni etcd-server haproxy \
                 (tests/conformance/install.sh installs them)"
            );
        }
        let busy: Vec<u16> = (base..base + PORTS)
            .filter(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_err())
            .collect();
        anyhow::ensure!(
            busy.is_empty(),
            "ports {busy:?} of the cluster's range {base}..{} are taken (another cluster?): \
             pass another --ha-port-base",
            base + PORTS
        );
        let dir = tempfile::Builder::new().prefix("tsbench-ha-").tempdir()?;
        let t0 = Instant::now();
        let out = Command::from(script("start", dir.path()))
            .arg(base.to_string())
            .output()
            .await
            .context("running scripts/ha-cluster.sh")?;
        let cluster = Cluster {
            dir,
            base,
            stopped: false,
            patroni: reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .build()?,
        };
        if !out.status.success() {
            bail!(
                "scripts/ha-cluster.sh start failed:\n{}\n{}",
                String::from_utf8_lossy(&out.stderr),
                cluster.tail_logs()
            );
        }
        eprintln!(
            "  cluster up on ports {base}..{} in {:.1} s",
            base + PORTS - 1,
            t0.elapsed().as_secs_f64()
        );
        Ok(cluster)
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Database `db` through HAProxy's write port (the primary, whichever node it is).
    pub fn write_url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.base)
    }

    /// Database `db` through HAProxy's read port (the standbys, connections spread over both).
    pub fn read_url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.base + 1)
    }

    fn api_port(&self, node: usize) -> u16 {
        self.base + 8 + node as u16
    }

    /// The nodes whose Patroni REST API answers `/primary` with 200 now (the three asked at
    /// once, so a poll takes one round trip however the nodes are doing).
    pub async fn primaries(&self) -> Vec<usize> {
        let asks = (0..3).map(|node| {
            self.patroni
                .get(format!("http://127.0.0.1:{}/primary", self.api_port(node)))
                .send()
        });
        futures::future::join_all(asks)
            .await
            .into_iter()
            .enumerate()
            .filter(|(_, r)| r.as_ref().is_ok_and(|r| r.status().as_u16() == 200))
            .map(|(node, _)| node)
            .collect()
    }

    /// The one primary, waited for up to `within`.
    pub async fn primary(&self, within: Duration) -> anyhow::Result<usize> {
        let t0 = Instant::now();
        loop {
            let p = self.primaries().await;
            if let [one] = p[..] {
                return Ok(one);
            }
            if t0.elapsed() > within {
                bail!(
                    "no single primary within {within:?} (primaries: {p:?})\n{}",
                    self.tail_logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// After the primary `old` was killed at `killed`, polled every 100 ms for up to 60 s: a
    /// standby promoted (its Patroni answers `/primary`), HAProxy's write port reaching it (a new
    /// connection lands on a node out of recovery), and it having a synchronous standby
    /// streaming (`pg_stat_replication`), without which its commits wait (strict synchronous
    /// mode).
    pub async fn await_failover(&self, old: usize, killed: Instant) -> anyhow::Result<Failover> {
        let mut f = Failover::default();
        let since = || Some(killed.elapsed());
        while f.synchronous.is_none() || f.promoted.is_none() {
            anyhow::ensure!(
                killed.elapsed() < Duration::from_secs(60),
                "no standby promoted with a synchronous standby within 60 s of the kill \
                 ({f:?})\n{}",
                self.tail_logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            if f.promoted.is_none() {
                if let [q] = self.primaries().await[..] {
                    if q != old {
                        (f.new_primary, f.promoted) = (q, since());
                    }
                }
            }
            let Ok(Ok(probe)) =
                tokio::time::timeout(Duration::from_secs(1), self.probe_write_port()).await
            else {
                continue;
            };
            if probe.port != self.pg_port(old) && !probe.in_recovery {
                f.reached = f.reached.or_else(since);
                if probe.sync_standbys > 0 {
                    f.synchronous = since();
                }
            }
        }
        Ok(f)
    }

    /// Where a new connection to HAProxy's write port lands, and what that node says.
    async fn probe_write_port(&self) -> anyhow::Result<Probe> {
        let mut c = PgConnection::connect(&self.write_url("postgres")).await?;
        let (port, in_recovery, sync_standbys): (i32, bool, i64) = sqlx::query_as(
            "SELECT inet_server_port(), pg_is_in_recovery(), \
             (SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync')",
        )
        .fetch_one(&mut c)
        .await?;
        let _ = c.close().await;
        Ok(Probe {
            port: port as u16,
            in_recovery,
            sync_standbys,
        })
    }

    fn pg_port(&self, node: usize) -> u16 {
        self.base + 5 + node as u16
    }

    /// The postmaster of `node` (from its data dir's `postmaster.pid`).
    pub fn postmaster(&self, node: usize) -> anyhow::Result<u32> {
        let file = self.data_dir(node).join("postmaster.pid");
        std::fs::read_to_string(&file)
            .ok()
            .and_then(|s| s.lines().next()?.trim().parse().ok())
            .with_context(|| format!("no pid in {}", file.display()))
    }

    fn data_dir(&self, node: usize) -> PathBuf {
        self.dir().join(format!("n{}", node + 1)).join("data")
    }

    /// `kill -9` of `node`'s postmaster (its machine dying): its backends notice and exit.
    pub fn kill9_postmaster(&self, node: usize) -> anyhow::Result<u32> {
        let pid = self.postmaster(node)?;
        // SAFETY: kill only sends a signal, to a postmaster of the cluster this handle started.
        #[allow(unsafe_code)]
        let r = unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        anyhow::ensure!(r == 0, "kill -9 {pid}: {}", std::io::Error::last_os_error());
        Ok(pid)
    }

    /// Stops everything the script started, by pid.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.stopped = true;
        let out = Command::from(script("stop", self.dir())).output().await?;
        anyhow::ensure!(
            out.status.success(),
            "scripts/ha-cluster.sh stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// The last lines of every log of the cluster (for error messages), by `tail`.
    pub fn tail_logs(&self) -> String {
        std::process::Command::new("tail")
            .arg("-n10")
            .args(["etcd.log", "haproxy.log"])
            .args(["n1/patroni.log", "n2/patroni.log", "n3/patroni.log"])
            .current_dir(self.dir())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = script("stop", self.dir()).output();
        }
    }
}

/// What [`Cluster::await_failover`] saw, each time from the kill.
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

/// `scripts/ha-cluster.sh ACTION DIR`.
fn script(action: &str, dir: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new("bash");
    cmd.arg(SCRIPT).arg(action).arg(dir);
    cmd
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

//! The three-node cluster of the HA tests, started and stopped by `scripts/ha-cluster.sh`, and
//! what the tests ask of it: its roles, its processes, signals to them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sqlx::{Connection, Row};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/ha-cluster.sh");

/// Ports the script takes from its base: HAProxy's three, etcd's two, three Postgres, three
/// REST APIs.
const PORTS: u16 = 11;

/// A cluster started by `scripts/ha-cluster.sh` in a temp dir of its own; dropped, it is
/// stopped by the script (by pid).
pub(crate) struct HaCluster {
    dir: tempfile::TempDir,
    base: u16,
    stopped: bool,
}

/// A base port whose eleven ports are all free now.
fn free_range() -> u16 {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    for _ in 0..200 {
        let base: u16 = rng.gen_range(20_000..60_000);
        let all_free =
            (0..PORTS).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok());
        if all_free {
            return base;
        }
    }
    panic!("no {PORTS} consecutive free ports found");
}

fn which(cmd: &str) -> bool {
    ["/usr/bin", "/usr/sbin", "/usr/local/bin"]
        .iter()
        .any(|d| Path::new(d).join(cmd).exists())
}

fn pid_in(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// Whether `pid` runs (a zombie, reaped later by whoever adopted it, does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().chars().next()))
        .flatten()
        .is_some_and(|state| state != 'Z')
}

impl HaCluster {
    pub(crate) fn start() -> HaCluster {
        let missing: Vec<&str> = ["patroni", "etcd", "haproxy"]
            .into_iter()
            .filter(|c| !which(c))
            .collect();
        assert!(
            missing.is_empty(),
            "the HA tests need {missing:?}: apt-get install -y patroni etcd-server haproxy \
             (tests/conformance/install.sh installs them)"
        );
        assert!(
            Path::new("/usr/lib/postgresql/15/bin/postgres").exists(),
            "the HA tests need PostgreSQL 15's server binaries in /usr/lib/postgresql/15/bin"
        );
        let dir = tempfile::Builder::new()
            .prefix("ts-ha-")
            .tempdir()
            .expect("temp dir");
        // The script may lose a race for a port with another test: one more range then.
        for attempt in 0..2 {
            let base = free_range();
            let out = Command::new("bash")
                .arg(SCRIPT)
                .arg("start")
                .arg(dir.path())
                .arg(base.to_string())
                .output()
                .expect("run scripts/ha-cluster.sh");
            if out.status.success() {
                return HaCluster {
                    dir,
                    base,
                    stopped: false,
                };
            }
            let stderr = String::from_utf8_lossy(&out.stderr).to_string();
            let logs = tail_logs(dir.path());
            assert!(
                attempt == 0 && stderr.contains("address already in use"),
                "scripts/ha-cluster.sh start failed:\n{stderr}\n{logs}"
            );
            let _ = std::fs::remove_dir_all(dir.path().join("etcd"));
        }
        unreachable!()
    }

    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn write_port(&self) -> u16 {
        self.base
    }

    pub(crate) fn read_port(&self) -> u16 {
        self.base + 1
    }

    pub(crate) fn pg_port(&self, node: usize) -> u16 {
        self.base + 5 + node as u16
    }

    pub(super) fn api_port(&self, node: usize) -> u16 {
        self.base + 8 + node as u16
    }

    pub(crate) fn write_url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.write_port())
    }

    /// Database `db` through HAProxy's read port (the standbys, connections spread over both).
    pub(crate) fn read_url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.read_port())
    }

    /// Database `db` on `node` itself.
    pub(crate) fn node_url(&self, node: usize, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.pg_port(node))
    }

    /// The nodes whose REST API answers `/primary` with 200.
    pub(crate) async fn primaries(&self) -> Vec<usize> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let mut out = Vec::new();
        for node in 0..3 {
            let url = format!("http://127.0.0.1:{}/primary", self.api_port(node));
            if client
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status().as_u16() == 200)
            {
                out.push(node);
            }
        }
        out
    }

    /// The one primary (waits up to `within` for there to be exactly one).
    pub(crate) async fn primary(&self, within: Duration) -> usize {
        let t0 = Instant::now();
        loop {
            let p = self.primaries().await;
            if p.len() == 1 {
                return p[0];
            }
            assert!(
                t0.elapsed() < within,
                "no single primary within {within:?} (primaries: {p:?})\n{}",
                tail_logs(self.dir())
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(super) fn data_dir(&self, node: usize) -> PathBuf {
        self.dir().join(format!("n{}", node + 1)).join("data")
    }

    /// A planned switchover from `leader` to `candidate` with `patronictl`, as an operator
    /// makes one (docs/ha.md); returns when Patroni has accepted it.
    pub(crate) fn switchover(&self, leader: usize, candidate: usize) {
        let out = Command::new("patronictl")
            .arg("-c")
            .arg(self.dir().join("n1/patroni.yml"))
            .args(["switchover", "threadstream", "--force"])
            .args(["--leader", &format!("n{}", leader + 1)])
            .args(["--candidate", &format!("n{}", candidate + 1)])
            .output()
            .expect("run patronictl");
        assert!(
            out.status.success(),
            "patronictl switchover: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// kill -9 of `node`'s postmaster; returns its pid.
    pub(crate) fn kill9_postmaster(&self, node: usize) -> u32 {
        let pid = pid_in(&self.data_dir(node).join("postmaster.pid")).expect("postmaster.pid");
        let status = Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -9 {pid}");
        pid
    }

    /// Every pid the cluster runs: etcd, the Patronis, HAProxy, the postmasters.
    fn pids(&self) -> Vec<(String, u32)> {
        let mut files = vec!["etcd.pid".to_string(), "haproxy.pid".into()];
        for n in 1..=3 {
            files.push(format!("n{n}/patroni.pid"));
            files.push(format!("n{n}/data/postmaster.pid"));
        }
        files
            .into_iter()
            .filter_map(|f| pid_in(&self.dir().join(&f)).map(|p| (f, p)))
            .collect()
    }

    pub(crate) fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let pids = self.pids();
        let out = Command::new("bash")
            .arg(SCRIPT)
            .arg("stop")
            .arg(self.dir())
            .output()
            .expect("run scripts/ha-cluster.sh stop");
        assert!(
            out.status.success(),
            "scripts/ha-cluster.sh stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let left: Vec<_> = pids.into_iter().filter(|(_, p)| alive(*p)).collect();
        assert!(left.is_empty(), "still running after stop: {left:?}");
    }
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        if !self.stopped {
            self.stopped = true;
            let _ = Command::new("bash")
                .arg(SCRIPT)
                .arg("stop")
                .arg(self.dir())
                .output();
        }
    }
}

/// The last lines of every log of the cluster (for failure messages).
pub(super) fn tail_logs(dir: &Path) -> String {
    let mut out = String::new();
    for f in [
        "etcd.log",
        "haproxy.log",
        "n1/patroni.log",
        "n2/patroni.log",
        "n3/patroni.log",
    ] {
        if let Ok(text) = std::fs::read_to_string(dir.join(f)) {
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!("--- {f}\n"));
            for l in &lines[lines.len().saturating_sub(15)..] {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    out
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
            tail_logs(c.dir())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `sig` (`STOP`, `CONT`) to every Patroni of the cluster.
pub(super) fn signal_patronis(c: &HaCluster, nodes: &[usize], sig: &str) {
    for n in nodes {
        let n = n + 1;
        let pid = pid_in(&c.dir().join(format!("n{n}/patroni.pid"))).expect("patroni.pid");
        let status = Command::new("kill")
            .args([format!("-{sig}"), pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{sig} {pid}");
    }
}

/// The postmaster of `node` and its children (backends, the WAL receiver, …).
pub(super) fn postgres_pids(c: &HaCluster, node: usize) -> Vec<u32> {
    let postmaster = pid_in(&c.data_dir(node).join("postmaster.pid")).expect("postmaster.pid");
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

pub(super) fn signal(pids: &[u32], sig: &str) {
    for pid in pids {
        let _ = Command::new("kill")
            .args([format!("-{sig}"), pid.to_string()])
            .status();
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
    panic!("no synchronous standby within 60 s\n{}", tail_logs(c.dir()));
}

//! The three-node Postgres cluster of `scripts/ha-cluster.sh` (the script operators use too:
//! etcd, three Patroni-managed Postgres 15 nodes in strict synchronous mode, HAProxy), started
//! in a temp dir of its own on eleven loopback ports, and what the HA tests and the bench's HA
//! scenarios ask of it: its ports and roles, a node's postmaster, a kill -9 of it, a switchover.
//! Stopped by the script (by pid) when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/ha-cluster.sh");

/// Ports the script takes from its base: HAProxy's three (write, read, stats), etcd's two, three
/// Postgres, three Patroni REST APIs.
pub const PORTS: u16 = 11;

/// A base port whose [`PORTS`] ports are all free now (`None`: none found in 200 tries).
/// Drawn below Linux's default ephemeral range (32768–60999): a range drawn inside it was free
/// when drawn but could be taken, before the cluster started, by any outgoing connection (the
/// bench smoke test's `failover` starts its cluster minutes after the range is drawn, and CI
/// once found one of its ports taken).
pub fn free_port_range() -> Option<u16> {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    (0..200)
        .map(|_| rng.gen_range(20_000..32_768 - PORTS))
        .find(|&base| (0..PORTS).all(|i| port_free(base + i)))
}

fn port_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// The pid on the first line of `file` (`postmaster.pid`, the script's `*.pid` files).
pub fn pid_in(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// Whether `pid` runs (a zombie, reaped later by whoever adopted it, does not).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().chars().next()))
        .flatten()
        .is_some_and(|state| state != 'Z')
}

/// Sends `sig` (`9`, `STOP`, `CONT`, …) to `pid` with kill(1).
pub fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status()
        .context("running kill")?;
    ensure!(status.success(), "kill -{sig} {pid} failed");
    Ok(())
}

/// A running cluster.
pub struct Cluster {
    dir: tempfile::TempDir,
    base: u16,
    stopped: bool,
    /// The client of the nodes' Patroni REST APIs.
    patroni: reqwest::Client,
}

impl Cluster {
    /// Starts a cluster on a free port range (another one if the script loses a race for a
    /// port), and waits until it has a primary with a synchronous standby.
    pub fn start() -> anyhow::Result<Cluster> {
        let mut last = None;
        for _ in 0..2 {
            let base = free_port_range().context("no eleven consecutive free ports")?;
            match Self::start_on(base) {
                Ok(c) => return Ok(c),
                Err(e) if format!("{e:#}").contains("address already in use") => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("two tries"))
    }

    /// Starts a cluster on `base` and the ten ports after it (all must be free).
    pub fn start_on(base: u16) -> anyhow::Result<Cluster> {
        for cmd in ["patroni", "etcd", "haproxy"] {
            ensure!(
                ["/usr/bin", "/usr/sbin", "/usr/local/bin"]
                    .iter()
                    .any(|d| Path::new(d).join(cmd).exists()),
                "{cmd} is missing: apt-get install -y patroni etcd-server haproxy \
                 (tests/conformance/install.sh installs them)"
            );
        }
        ensure!(
            Path::new("/usr/lib/postgresql/15/bin/postgres").exists(),
            "PostgreSQL 15's server binaries are missing from /usr/lib/postgresql/15/bin"
        );
        let busy: Vec<u16> = (base..base + PORTS).filter(|p| !port_free(*p)).collect();
        ensure!(
            busy.is_empty(),
            "ports {busy:?} of the cluster's range {base}..{} are taken (another cluster?)",
            base + PORTS
        );
        let dir = tempfile::Builder::new().prefix("ts-ha-").tempdir()?;
        let out = script("start", dir.path())
            .arg(base.to_string())
            .output()
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
        Ok(cluster)
    }

    /// The cluster's folder: each node's `n<k>/` (data, `patroni.yml`, logs), etcd's, HAProxy's.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The first of its [`PORTS`] ports.
    pub fn base(&self) -> u16 {
        self.base
    }

    /// HAProxy's write port: the node whose Patroni answers `/primary`.
    pub fn write_port(&self) -> u16 {
        self.base
    }

    /// HAProxy's read port: the nodes whose Patroni answers `/replica`.
    pub fn read_port(&self) -> u16 {
        self.base + 1
    }

    /// `node`'s Postgres (0, 1, 2).
    pub fn pg_port(&self, node: usize) -> u16 {
        self.base + 5 + node as u16
    }

    /// `node`'s Patroni REST API.
    pub fn api_port(&self, node: usize) -> u16 {
        self.base + 8 + node as u16
    }

    /// Database `db` through HAProxy's write port (the primary, whichever node it is).
    pub fn write_url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.write_port())
    }

    /// Database `db` through HAProxy's read port (the standbys, connections spread over both).
    pub fn read_url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.read_port())
    }

    /// Database `db` on `node` itself.
    pub fn node_url(&self, node: usize, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.pg_port(node))
    }

    /// `node`'s data directory.
    pub fn data_dir(&self, node: usize) -> PathBuf {
        self.dir().join(format!("n{}", node + 1)).join("data")
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

    /// The postmaster of `node` (from its data dir's `postmaster.pid`).
    pub fn postmaster(&self, node: usize) -> anyhow::Result<u32> {
        let file = self.data_dir(node).join("postmaster.pid");
        pid_in(&file).with_context(|| format!("no pid in {}", file.display()))
    }

    /// `kill -9` of `node`'s postmaster (its machine dying): its backends notice and exit.
    /// Returns its pid.
    pub fn kill9_postmaster(&self, node: usize) -> anyhow::Result<u32> {
        let pid = self.postmaster(node)?;
        signal(pid, "9")?;
        Ok(pid)
    }

    /// `node`'s Patroni.
    pub fn patroni_pid(&self, node: usize) -> anyhow::Result<u32> {
        let file = self.dir().join(format!("n{}/patroni.pid", node + 1));
        pid_in(&file).with_context(|| format!("no pid in {}", file.display()))
    }

    /// A planned switchover from `leader` to `candidate` with `patronictl`, as an operator
    /// makes one (docs/ha.md); returns when Patroni has accepted it.
    pub fn switchover(&self, leader: usize, candidate: usize) -> anyhow::Result<()> {
        let out = Command::new("patronictl")
            .arg("-c")
            .arg(self.dir().join("n1/patroni.yml"))
            .args(["switchover", "threadstream", "--force"])
            .args(["--leader", &format!("n{}", leader + 1)])
            .args(["--candidate", &format!("n{}", candidate + 1)])
            .output()
            .context("running patronictl")?;
        ensure!(
            out.status.success(),
            "patronictl switchover: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// Every pid the cluster runs: etcd, HAProxy, the Patronis, the postmasters.
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

    /// Stops everything the script started, by pid, and checks that none of it still runs.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let pids = self.pids();
        let out = script("stop", self.dir())
            .output()
            .context("running scripts/ha-cluster.sh stop")?;
        ensure!(
            out.status.success(),
            "scripts/ha-cluster.sh stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let left: Vec<_> = pids.into_iter().filter(|(_, p)| alive(*p)).collect();
        ensure!(left.is_empty(), "still running after stop: {left:?}");
        Ok(())
    }

    /// The last lines of every log of the cluster (for error messages).
    pub fn tail_logs(&self) -> String {
        let mut out = String::new();
        for f in [
            "etcd.log",
            "haproxy.log",
            "n1/patroni.log",
            "n2/patroni.log",
            "n3/patroni.log",
        ] {
            if let Ok(text) = std::fs::read_to_string(self.dir().join(f)) {
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
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !self.stopped {
            self.stopped = true;
            let _ = script("stop", self.dir()).output();
        }
    }
}

/// `scripts/ha-cluster.sh ACTION DIR`.
fn script(action: &str, dir: &Path) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(SCRIPT).arg(action).arg(dir);
    cmd
}

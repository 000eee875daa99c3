//! High availability (issue 37): a three-node Postgres cluster — etcd, three Patroni-managed
//! Postgres 15 nodes in strict synchronous mode, HAProxy in front — started by
//! `scripts/ha-cluster.sh`, the script operators use too (docs/ha.md). The tests kill -9 the
//! primary's postmaster and check that a standby is promoted, and that threadstream, pointed at
//! HAProxy's write port, loses nothing it acknowledged, stores nothing twice, and ends every
//! SSE watcher exact.
//!
//! Each test runs its own cluster in its own temp dir on its own free ports, so they run side
//! by side. Patroni, etcd and HAProxy must be installed (tests/conformance/install.sh): a test
//! without them fails, saying so; none is skipped.

use crate::common;
use crate::fleet::load::{assert_exact, full_read, ingest_agent, Lb, Posted, Protocol, Watcher};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use sqlx::{Connection, Row};

/// `--run-orphan-secs` of the servers: the default, 30. The harness's 2 s is shorter than a
/// failover, and an external agent's run whose lease expires during one is taken as orphaned
/// (docs/ha.md: the orphan time must outlast a failover).
const ORPHAN_SECS: &str = "30";

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

    fn api_port(&self, node: usize) -> u16 {
        self.base + 8 + node as u16
    }

    pub(crate) fn write_url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.write_port())
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

    fn data_dir(&self, node: usize) -> PathBuf {
        self.dir().join(format!("n{}", node + 1)).join("data")
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
fn tail_logs(dir: &Path) -> String {
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
async fn server_of(port: u16) -> Result<(u16, bool), String> {
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

async fn exec(url: &str, sql: &str) -> Result<(), String> {
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

async fn count_rows(port: u16) -> Result<i64, String> {
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
async fn await_new_primary(c: &HaCluster, old: usize, within: Duration) -> usize {
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

#[tokio::test]
async fn ha_cluster_routes_by_role_and_promotes_a_standby_when_the_primary_is_killed() {
    bounded(240, async {
        let t0 = Instant::now();
        let mut c = HaCluster::start();
        eprintln!("cluster started in {:?}", t0.elapsed());
        let p = c.primary(Duration::from_secs(10)).await;

        // Writes reach the primary; reads reach the standbys only.
        let (port, in_recovery) = server_of(c.write_port()).await.expect("write port");
        assert_eq!((port, in_recovery), (c.pg_port(p), false), "write port");
        let mut read_ports = std::collections::HashSet::new();
        for _ in 0..6 {
            let (port, in_recovery) = server_of(c.read_port()).await.expect("read port");
            assert!(in_recovery, "the read port reached a primary ({port})");
            assert_ne!(port, c.pg_port(p));
            read_ports.insert(port);
        }
        assert_eq!(read_ports.len(), 2, "reads are spread over both standbys");

        // A row committed through the write port is on a standby (synchronous replication).
        let url = format!("postgres://postgres@127.0.0.1:{}/postgres", c.write_port());
        exec(&url, "CREATE TABLE ha_probe (n int); INSERT INTO ha_probe VALUES (1)")
            .await
            .expect("write through HAProxy");
        let t = Instant::now();
        while count_rows(c.read_port()).await != Ok(1) {
            assert!(t.elapsed() < Duration::from_secs(5), "row not on a standby");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // kill -9 of the primary's postmaster: a standby is promoted, HAProxy follows it.
        c.kill9_postmaster(p);
        let killed = Instant::now();
        let q = await_new_primary(&c, p, Duration::from_secs(30)).await;
        let promoted = killed.elapsed();
        exec(&url, "INSERT INTO ha_probe VALUES (2)")
            .await
            .expect("write through HAProxy after the failover");
        assert_eq!(count_rows(c.write_port()).await, Ok(2), "the first row survived");
        eprintln!(
            "kill -9 of n{}'s postmaster: n{} promoted and reached through HAProxy after {promoted:?}",
            p + 1,
            q + 1
        );

        // Everything the script started stops, by pid.
        c.stop();
    })
    .await
}

/// What a writer without retries saw: each text sent once, and how it was answered.
#[derive(Default)]
struct Outcomes {
    /// 200: the text, its ids, when it was sent and when answered.
    acked: Vec<(String, Vec<i64>, Instant, Instant)>,
    /// 503 (JSON `unavailable`): must not be stored.
    refused: Vec<(String, String)>,
    /// A transport error or other status: stored or not, but at most once.
    unknown: Vec<(String, String)>,
}

/// Appends deltas to `thread` one post at a time (no key, no retry), `pause` apart, until
/// `stop`.
fn plain_writer(
    base: String,
    thread: String,
    pause: Duration,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Outcomes> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let url = format!("{base}/instance-ai/threads/{}/events", enc(&thread));
        let (run, agent) = (format!("run-{thread}"), "agent".to_string());
        let mut o = Outcomes::default();
        let r = client
            .post(&url)
            .json(&json!({"events": [run_start(&run, &agent)]}))
            .send()
            .await
            .expect("run-start");
        assert_eq!(r.status(), 200, "run-start of {thread}");
        let mut k = 0;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            k += 1;
            let text = format!("{thread}#{k};");
            let sent = Instant::now();
            let r = client
                .post(&url)
                .json(&json!({"events": [text_delta(&run, &agent, &text)]}))
                .send()
                .await;
            match r {
                Ok(r) => {
                    let status = r.status().as_u16();
                    let body = r.text().await.unwrap_or_default();
                    match status {
                        200 => {
                            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                            o.acked.push((text, ids_of(&v), sent, Instant::now()));
                        }
                        503 => {
                            let v: serde_json::Value = serde_json::from_str(&body)
                                .unwrap_or_else(|e| panic!("503 not JSON ({e}): {body}"));
                            assert_eq!(v["error"]["code"], "unavailable", "{body}");
                            o.refused.push((text, body));
                        }
                        _ => o.unknown.push((text, format!("{status} {body}"))),
                    }
                }
                Err(e) => o.unknown.push((text, e.to_string())),
            }
            tokio::time::sleep(pause).await;
        }
        o
    })
}

/// Polls `path` every 100 ms until `stop`; keeps `(time, status)`.
fn poller(
    base: String,
    path: &'static str,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(Instant, u16)>> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let mut out = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let status = match client.get(format!("{base}{path}")).send().await {
                Ok(r) => r.status().as_u16(),
                Err(_) => 0,
            };
            out.push((Instant::now(), status));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        out
    })
}

/// The texts of a thread's deltas in the log, with how often each is there.
fn texts_in(frames: &[crate::fleet::load::Frame]) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for f in frames {
        let v: serde_json::Value = serde_json::from_str(&f.data).unwrap_or_default();
        if let Some(t) = v["payload"]["text"].as_str() {
            *out.entry(t.to_string()).or_default() += 1;
        }
    }
    out
}

#[tokio::test]
async fn threadstream_through_a_primary_kill_9_loses_nothing_and_watchers_end_exact() {
    bounded(300, async {
        let mut c = HaCluster::start();
        let admin = c.write_url("postgres");
        exec(&admin, "CREATE DATABASE ts").await.expect("create database");
        let s = Server::start_with(Opts {
            database_url: Some(c.write_url("ts")),
            extra_args: vec!["--run-orphan-secs".into(), ORPHAN_SECS.into()],
            ..Opts::default()
        })
        .await;
        let base = s.base.clone();

        // Watchers first (from the start of each thread), then the load.
        let agents: Vec<String> = (0..3).map(|i| format!("agent-{i}")).collect();
        // Four writers back to back keep a batch in flight nearly always, so the kill
        // usually cuts one off mid-COMMIT; two more post 20 ms apart.
        let plains: Vec<String> = (0..6).map(|i| format!("plain-{i}")).collect();
        let mut watchers: Vec<Watcher> = Vec::new();
        for t in agents.iter().chain(&plains) {
            watchers.push(Watcher::start(&base, t, Protocol::N8n));
        }
        watchers.push(Watcher::start(&base, &agents[0], Protocol::AgUi));

        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop_polls = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ready = poller(base.clone(), "/readyz", stop_polls.clone());
        let health = poller(base.clone(), "/healthz", stop_polls.clone());
        let lb = Lb::new(&base);
        let keyed: Vec<_> = agents
            .iter()
            .map(|t| ingest_agent(lb.clone(), t.clone(), 120, 4, Duration::from_millis(30)))
            .collect();
        let plain: Vec<_> = plains
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let pause = Duration::from_millis(if i < 4 { 0 } else { 20 });
                plain_writer(base.clone(), t.clone(), pause, stop.clone())
            })
            .collect();

        tokio::time::sleep(Duration::from_millis(1500)).await;
        let p = c.primary(Duration::from_secs(5)).await;
        c.kill9_postmaster(p);
        let killed = Instant::now();
        let q = await_new_primary(&c, p, Duration::from_secs(30)).await;
        let promoted = killed.elapsed();
        // Load goes on a while on the new primary.
        tokio::time::sleep(Duration::from_secs(3)).await;
        stop.store(true, std::sync::atomic::Ordering::SeqCst);

        let mut posted: Vec<Posted> = Vec::new();
        for k in keyed {
            posted.push(k.await.expect("keyed writer"));
        }
        let mut outcomes: Vec<Outcomes> = Vec::new();
        for w in plain {
            outcomes.push(w.await.expect("plain writer"));
        }
        // /readyz 200 within seconds of the promotion.
        let (_, back) = crate::pg_outage::await_ready_status(&s, 200, Duration::from_secs(10)).await;
        stop_polls.store(true, std::sync::atomic::Ordering::SeqCst);
        let ready = ready.await.unwrap();
        let health = health.await.unwrap();

        // Nothing acknowledged is lost, nothing is stored twice, refused appends are absent.
        let mut logs: HashMap<String, Vec<crate::fleet::load::Frame>> = HashMap::new();
        for t in agents.iter().chain(&plains) {
            logs.insert(t.clone(), full_read(&base, t, Protocol::N8n).await);
        }
        for p in &posted {
            assert!(!p.closed_under_it, "{}: run closed under it", p.thread);
            let texts = texts_in(&logs[&p.thread]);
            let ids: std::collections::HashSet<i64> = logs[&p.thread].iter().map(|f| f.id).collect();
            for id in &p.acked {
                assert!(ids.contains(id), "{}: acknowledged id {id} lost", p.thread);
            }
            for t in &p.texts {
                assert_eq!(texts.get(t), Some(&1), "{}: {t:?} stored {:?} times", p.thread, texts.get(t));
            }
        }
        // The writers' outage: the longest time between two answers of one writer.
        let mut gap = (Duration::ZERO, Duration::ZERO);
        let mut slowest = Duration::ZERO;
        let (mut n_acked, mut n_refused, mut n_unknown) = (0, 0, 0);
        for (t, o) in plains.iter().zip(&outcomes) {
            let texts = texts_in(&logs[t]);
            let ids: std::collections::HashSet<i64> = logs[t].iter().map(|f| f.id).collect();
            for w in o.acked.windows(2) {
                let between = w[1].3.duration_since(w[0].3);
                if between > gap.1.saturating_sub(gap.0) {
                    gap = (w[0].3.saturating_duration_since(killed), w[1].3.saturating_duration_since(killed));
                }
                slowest = slowest.max(w[1].3.duration_since(w[1].2));
            }
            for (text, acked, _, _) in &o.acked {
                for id in acked {
                    assert!(ids.contains(id), "{t}: acknowledged id {id} lost");
                }
                assert_eq!(texts.get(text), Some(&1), "{t}: acknowledged {text:?} stored {:?} times", texts.get(text));
            }
            for (text, why) in &o.refused {
                assert_eq!(texts.get(text), None, "{t}: {text:?} refused ({why}) but stored");
            }
            for (text, why) in &o.unknown {
                assert!(texts.get(text).copied().unwrap_or(0) <= 1, "{t}: {text:?} ({why}) stored twice");
            }
            n_acked += o.acked.len();
            n_refused += o.refused.len();
            n_unknown += o.unknown.len();
        }
        let refusals: Vec<&(String, String)> = outcomes.iter().flat_map(|o| &o.refused).collect();
        let unknowns: Vec<&(String, String)> = outcomes.iter().flat_map(|o| &o.unknown).collect();
        let logs_text = s.logs();
        let resolved_stored = logs_text.matches("during COMMIT; the batch is stored").count();
        let resolved_not = logs_text.matches("during COMMIT; the batch is not stored").count();
        eprintln!(
            "kill -9 of n{}: n{} promoted after {promoted:?}; plain appends: {n_acked} acknowledged, \
             {n_refused} refused, {n_unknown} unknown; the longest pause between two answers of a \
             writer from {:?} to {:?} after the kill; slowest append {slowest:?}; batches whose \
             COMMIT lost its connection: {resolved_stored} found stored, {resolved_not} not; \
             /readyz 200 again {back:?} after the load",
            p + 1,
            q + 1,
            gap.0,
            gap.1,
        );
        // Keyed posts wait for the primary too (their key's claim included): none failed.
        let errors: Vec<&str> = logs_text
            .lines()
            .filter(|l| l.contains("ERROR") || l.contains("WARN threadstream_store"))
            .collect();
        assert!(
            lb.failures().is_empty(),
            "keyed posts failed: {:?}\n{errors:#?}",
            lb.failures()
        );
        // The writer waits for the new primary (30 s by default): no append is refused.
        assert!(
            refusals.is_empty(),
            "appends refused during a {promoted:?} failover: {refusals:?}\n{errors:#?}"
        );
        assert!(unknowns.is_empty(), "appends without an answer: {unknowns:?}");

        // Every watcher ends exact through Last-Event-ID.
        for w in &mut watchers {
            let want = match w.protocol {
                Protocol::N8n => logs[&w.thread].clone(),
                Protocol::AgUi => full_read(&base, &w.thread, Protocol::AgUi).await,
            };
            let last = want.last().expect("a non-empty thread").id;
            w.finish_at(last, Duration::from_secs(30)).await;
            assert_exact(&w.frames(), &want, &format!("{:?} watcher of {}", w.protocol, w.thread));
        }

        // /readyz went 503 while no primary was reachable; /healthz stayed 200.
        assert!(health.iter().all(|(_, s)| *s == 200), "/healthz not always 200: {health:?}");
        let down: Vec<_> = ready.iter().filter(|(_, s)| *s == 503).collect();
        assert!(!down.is_empty(), "/readyz never 503 during the failover");
        eprintln!(
            "/readyz 503 from {:?} to {:?} after the kill",
            down.first().map(|(t, _)| t.saturating_duration_since(killed)),
            down.last().map(|(t, _)| t.saturating_duration_since(killed))
        );

        // `threadstream verify` is clean on the new primary.
        let v = cli_on(&s, &["verify"]).await;
        assert!(v.ok, "verify on the new primary:\n{}\n{}", v.stdout, v.stderr);
        drop(s);
        c.stop();
    })
    .await
}

/// Sends `sig` (`STOP`, `CONT`) to every Patroni of the cluster.
fn signal_patronis(c: &HaCluster, sig: &str) {
    for n in 1..=3 {
        let pid = pid_in(&c.dir().join(format!("n{n}/patroni.pid"))).expect("patroni.pid");
        let status = Command::new("kill")
            .args([format!("-{sig}"), pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{sig} {pid}");
    }
}

/// With no primary for longer than `--store-wait-secs`, an append waits that long and is then
/// refused with 503 JSON, nothing stored; `/readyz` is 503 meanwhile and `/healthz` 200; once
/// a standby is promoted, appends are stored again without a restart.
#[tokio::test]
async fn with_no_primary_for_longer_than_the_store_wait_an_append_is_refused_and_nothing_stored() {
    bounded(240, async {
        let mut c = HaCluster::start();
        exec(&c.write_url("postgres"), "CREATE DATABASE ts")
            .await
            .expect("create database");
        let wait = Duration::from_secs(3);
        let s = Server::start_with(Opts {
            database_url: Some(c.write_url("ts")),
            extra_args: vec![
                "--store-wait-secs".into(),
                wait.as_secs().to_string(),
                "--run-orphan-secs".into(),
                ORPHAN_SECS.into(),
            ],
            ..Opts::default()
        })
        .await;
        let pid = s.pid();
        let mut acked = s.ingest_ok("t", &[run_start("r", "a")]).await;
        acked.extend(s.ingest_ok("t", &[text_delta("r", "a", "before;")]).await);

        // No Patroni can act (none promotes, none restarts the postmaster): no primary. The
        // primary's backends are killed with its postmaster (its machine is gone): a backend
        // outliving its postmaster a moment could take the append and cut it off mid-COMMIT,
        // whose outcome no node can tell while none is primary (a_commit_cut_off_… tests that).
        let p = c.primary(Duration::from_secs(5)).await;
        signal_patronis(&c, "STOP");
        let doomed = postgres_pids(&c, p);
        signal(&doomed, "KILL");
        let killed = Instant::now();
        let t0 = Instant::now();
        let r = s.ingest("t", &[text_delta("r", "a", "refused;")]).await;
        let took = t0.elapsed();
        let (code, _) = r.error(503, "an append with no primary");
        assert_eq!(code, "unavailable");
        assert!(
            took >= wait - Duration::from_millis(200) && took < wait + Duration::from_secs(8),
            "refused after {took:?}, the store wait being {wait:?}"
        );
        // The wait counts from the outage's start, not per append: a later one is not held
        // another whole wait.
        let t1 = Instant::now();
        let r = s.ingest("t", &[text_delta("r", "a", "refused too;")]).await;
        let took_later = t1.elapsed();
        r.error(503, "a later append with no primary");
        assert!(
            took_later < wait,
            "a later append refused after {took_later:?}, the store wait being {wait:?}\n{}",
            s.logs()
        );
        let (r, _) = crate::pg_outage::await_ready_status(&s, 503, Duration::from_secs(10)).await;
        assert_eq!(r.json()["cause"], "store_unreachable", "{}", r.text);
        assert_eq!(s.get("/healthz").await.status, 200);

        // Patroni acts again: a standby is promoted (or the old node restarted as primary).
        signal_patronis(&c, "CONT");
        let resumed = Instant::now();
        let deadline = resumed + Duration::from_secs(60);
        let ids = loop {
            let r = s.ingest("t", &[text_delta("r", "a", "after;")]).await;
            if r.status == 200 {
                break ids_of(&r.json());
            }
            assert!(
                Instant::now() < deadline,
                "no append stored 60 s after Patroni resumed: {} {}\n{}",
                r.status,
                r.text,
                tail_logs(c.dir())
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let stored_after = resumed.elapsed();
        acked.extend(ids);
        let (_, ready_after) =
            crate::pg_outage::await_ready_status(&s, 200, Duration::from_secs(10)).await;
        let primary = c.primary(Duration::from_secs(10)).await;
        eprintln!(
            "append refused {took:?} after the kill (store wait {wait:?}), a later one after \
             {took_later:?}; Patroni resumed {:?} \
             after the kill; n{} primary; first append stored {stored_after:?} after that, \
             /readyz 200 {ready_after:?} later",
            resumed.duration_since(killed),
            primary + 1
        );
        assert_eq!(s.pid(), pid, "the server was restarted");

        // Everything acknowledged is there once; the refused append is not.
        let all = s.read_until_id("t", *acked.iter().max().unwrap()).await;
        let ids: Vec<i64> = all.iter().map(|e| e.id()).collect();
        for id in &acked {
            assert!(ids.contains(id), "acknowledged id {id} lost: {ids:?}");
        }
        let texts: Vec<String> = all
            .iter()
            .filter_map(|e| e.json()["payload"]["text"].as_str().map(String::from))
            .collect();
        assert_eq!(texts, ["before;", "after;"], "the log's deltas");
        assert_strictly_increasing(&all, "t");
        let v = cli_on(&s, &["verify"]).await;
        assert!(v.ok, "verify:\n{}\n{}", v.stdout, v.stderr);
        drop(s);
        c.stop();
    })
    .await
}

/// The postmaster of `node` and its children (backends, the WAL receiver, …).
fn postgres_pids(c: &HaCluster, node: usize) -> Vec<u32> {
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

fn signal(pids: &[u32], sig: &str) {
    for pid in pids {
        let _ = Command::new("kill")
            .args([format!("-{sig}"), pid.to_string()])
            .status();
    }
}

/// The node whose Patroni REST API answers `/sync` (the synchronous standby).
async fn sync_standby(c: &HaCluster) -> usize {
    let client = reqwest::Client::new();
    for node in 0..3 {
        let url = format!("http://127.0.0.1:{}/sync", c.api_port(node));
        if client
            .get(&url)
            .send()
            .await
            .is_ok_and(|r| r.status().as_u16() == 200)
        {
            return node;
        }
    }
    panic!("no synchronous standby\n{}", tail_logs(c.dir()));
}

/// A COMMIT whose connection drops: the synchronous standby is frozen (SIGSTOP), so the
/// primary's commit of an append waits for it (strict synchronous mode); then the primary's
/// postmaster is killed, cutting the connection mid-COMMIT, and the standby resumed and
/// promoted. The writer looks the batch up on the new primary: stored (the standby had the
/// commit), it is acknowledged; not stored, written again. Either way the append is answered
/// 200 and stored exactly once.
#[tokio::test]
async fn a_commit_cut_off_by_the_kill_is_looked_up_on_the_new_primary_and_stored_once() {
    bounded(240, async {
        let mut c = HaCluster::start();
        exec(&c.write_url("postgres"), "CREATE DATABASE ts")
            .await
            .expect("create database");
        // A lease tick (a sixth of the orphan time) longer than the test: the cut-off post must
        // not extend its run's lease (a commit of its own, which would wait for the frozen
        // standby and be the one cut instead). With the usual 30 s (a 5 s tick), a loaded
        // machine took longer than a tick between the two posts, and the writer's COMMIT was
        // never cut (seen in a full run of the suite).
        let s = Server::start_with(Opts {
            database_url: Some(c.write_url("ts")),
            extra_args: vec!["--run-orphan-secs".into(), "600".into()],
            ..Opts::default()
        })
        .await;
        let mut acked = s.ingest_ok("t", &[run_start("r", "a")]).await;
        let p = c.primary(Duration::from_secs(5)).await;
        let sync = sync_standby(&c).await;
        // A post extends its run's lease (a commit of its own, which would wait for the
        // standby first) at most once per lease tick (100 s here): this one does it, so the
        // next goes straight to the writer.
        acked.extend(s.ingest_ok("t", &[text_delta("r", "a", "before;")]).await);
        assert_ne!(p, sync);

        let frozen = postgres_pids(&c, sync);
        signal(&frozen, "STOP");
        let (base, client) = (s.base.clone(), s.client.clone());
        let append = tokio::spawn(async move {
            let r = client
                .post(format!("{base}/instance-ai/threads/t/events"))
                .json(&json!({"events": [text_delta("r", "a", "cut;")]}))
                .timeout(Duration::from_secs(90))
                .send()
                .await
                .expect("an answer");
            let status = r.status().as_u16();
            (status, r.text().await.unwrap_or_default())
        });
        // The commit now waits for the frozen standby.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !append.is_finished(),
            "the append was answered with its standby frozen"
        );
        c.kill9_postmaster(p);
        let killed = Instant::now();
        // The standby stays frozen until the old primary's backends and walsender have seen
        // their postmaster die (at once, by its death pipe): resumed sooner, it could take the
        // commit from the dying walsender and release the COMMIT, which then succeeds and is
        // never cut (seen with 500 ms in a full run of the suite).
        tokio::time::sleep(Duration::from_secs(2)).await;
        signal(&frozen, "CONT");
        let (status, body) = append.await.unwrap();
        let answered = killed.elapsed();
        assert_eq!(status, 200, "the cut-off append: {body}\n{}", s.logs());
        acked.extend(ids_of(&serde_json::from_str(&body).unwrap()));
        let logs = s.logs();
        let stored = logs.matches("during COMMIT; the batch is stored").count();
        let not_stored = logs
            .matches("during COMMIT; the batch is not stored")
            .count();
        assert_eq!(
            stored + not_stored,
            1,
            "the lost COMMIT was not looked up once\n{logs}"
        );
        let q = c.primary(Duration::from_secs(30)).await;
        eprintln!(
            "kill -9 of n{} mid-COMMIT: n{} primary; the batch was found {}; the append answered \
             200 {answered:?} after the kill",
            p + 1,
            q + 1,
            if stored == 1 {
                "stored"
            } else {
                "not stored and written again"
            }
        );
        acked.extend(s.ingest_ok("t", &[text_delta("r", "a", "after;")]).await);
        let all = s.read_until_id("t", *acked.iter().max().unwrap()).await;
        let texts: Vec<String> = all
            .iter()
            .filter_map(|e| e.json()["payload"]["text"].as_str().map(String::from))
            .collect();
        assert_eq!(texts, ["before;", "cut;", "after;"], "the log's deltas");
        let ids: Vec<i64> = all.iter().map(|e| e.id()).collect();
        for id in &acked {
            assert!(ids.contains(id), "acknowledged id {id} lost: {ids:?}");
        }
        let v = cli_on(&s, &["verify"]).await;
        assert!(v.ok, "verify:\n{}\n{}", v.stdout, v.stderr);
        drop(s);
        c.stop();
    })
    .await
}

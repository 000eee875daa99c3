//! Debian's `haproxy`, started on loopback ports with `docs/haproxy.cfg` (the configuration
//! docs/operations.md gives operators) in front of the fleet's instances, and its view of them
//! read from its stats page.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The checked-in configuration the test runs (and operators copy).
pub(crate) const CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/haproxy.cfg");

pub(crate) fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().unwrap().port()
}

/// A running `haproxy -db -f docs/haproxy.cfg`; killed when dropped.
pub(crate) struct Haproxy {
    child: Child,
    /// `http://127.0.0.1:PORT`: the fleet's one address.
    pub base: String,
    stats: String,
    logs: Arc<Mutex<Vec<String>>>,
    client: reqwest::Client,
}

impl Haproxy {
    /// Starts HAProxy on a free port in front of `backends` (`ts1`, `ts2`, … in that order)
    /// and waits until it answers.
    pub(crate) async fn start(backends: &[u16]) -> Haproxy {
        assert_eq!(backends.len(), 3, "docs/haproxy.cfg names three servers");
        let bin = which_haproxy();
        let (port, stats_port) = (free_port(), free_port());
        let mut cmd = Command::new(bin);
        cmd.args(["-db", "-f", CONFIG])
            .env("THREADSTREAM_LB_ADDR", format!("127.0.0.1:{port}"))
            .env(
                "THREADSTREAM_LB_STATS_ADDR",
                format!("127.0.0.1:{stats_port}"),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (i, p) in backends.iter().enumerate() {
            cmd.env(format!("THREADSTREAM_{}", i + 1), format!("127.0.0.1:{p}"));
        }
        let mut child = cmd.spawn().expect("start haproxy");
        let logs = Arc::new(Mutex::new(Vec::new()));
        for pipe in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let logs = logs.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    logs.lock().unwrap().push(line);
                }
            });
        }
        let h = Haproxy {
            child,
            base: format!("http://127.0.0.1:{port}"),
            stats: format!("http://127.0.0.1:{stats_port}/stats;csv"),
            logs,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while h.client.get(&h.stats).send().await.is_err() {
            assert!(
                Instant::now() < deadline,
                "haproxy does not answer\n{}",
                h.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        h
    }

    pub(crate) fn logs(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    /// Each server's status as HAProxy sees it (`UP`, `DOWN`, `UP 1/2`, …), `ts1` first.
    pub(crate) async fn statuses(&self) -> Vec<String> {
        let text = self
            .client
            .get(&self.stats)
            .send()
            .await
            .expect("haproxy stats")
            .text()
            .await
            .expect("haproxy stats body");
        let mut lines = text.lines();
        let header: Vec<&str> = lines
            .next()
            .expect("stats header")
            .trim_start_matches("# ")
            .split(',')
            .collect();
        let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
        let (px, sv, st) = (col("pxname"), col("svname"), col("status"));
        let mut out: Vec<(String, String)> = lines
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|f| f.len() > st && f[px] == "threadstream" && f[sv].starts_with("ts"))
            .map(|f| (f[sv].to_string(), f[st].to_string()))
            .collect();
        out.sort();
        out.into_iter().map(|(_, s)| s).collect()
    }

    /// Waits until server `index` (0-based) has status `want` (`UP` or `DOWN`); how long it
    /// took.
    pub(crate) async fn await_status(
        &self,
        index: usize,
        want: &str,
        within: Duration,
    ) -> Duration {
        let t0 = Instant::now();
        loop {
            let now = self.statuses().await;
            if now[index] == want {
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < within,
                "haproxy sees ts{} as {:?} after {within:?}, {want} awaited\n{}",
                index + 1,
                now[index],
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every server has status `want`.
    pub(crate) async fn await_all(&self, want: &str, within: Duration) -> Duration {
        let t0 = Instant::now();
        for i in 0..3 {
            self.await_status(i, want, within.saturating_sub(t0.elapsed()))
                .await;
        }
        t0.elapsed()
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let logs = self.logs();
            let tail: Vec<&str> = logs.lines().rev().take(40).collect();
            eprintln!(
                "--- last haproxy output ---\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
}

/// Debian's haproxy; `tests/conformance/install.sh` installs it (`scripts/test.sh` runs that).
fn which_haproxy() -> &'static str {
    for p in ["/usr/sbin/haproxy", "/usr/bin/haproxy"] {
        if std::path::Path::new(p).exists() {
            return p;
        }
    }
    panic!(
        "haproxy is missing: run `bash tests/conformance/install.sh` (apt-get install -y haproxy)"
    )
}

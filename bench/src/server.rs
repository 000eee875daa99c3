//! The real `threadstream serve` as a separate process on 127.0.0.1 with a temp data dir (or a
//! Postgres database), found next to this binary (`cargo build --release` builds both).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The `threadstream` binary: `--server-bin`, else `THREADSTREAM_BIN`, else next to this one.
pub fn find_binary(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Ok(p) = std::env::var("THREADSTREAM_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("no parent directory")?;
    for candidate in [dir.join("threadstream"), dir.join("../threadstream")] {
        if candidate.exists() {
            return Ok(candidate);
        }
    }
    bail!(
        "no `threadstream` binary next to {}: run `cargo build --release` first (or pass --server-bin)",
        exe.display()
    )
}

/// Where the server keeps its log.
pub enum Store<'a> {
    Sqlite(&'a Path),
    Postgres(&'a str),
}

pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    pub pid: u32,
}

impl Server {
    /// Starts `threadstream serve` on a free loopback port and waits until it listens.
    pub async fn start(bin: &Path, store: Store<'_>, extra: &[&str]) -> anyhow::Result<Server> {
        let mut cmd = Command::new(bin);
        cmd.arg("serve").arg("--addr").arg("127.0.0.1:0");
        match store {
            Store::Sqlite(dir) => {
                cmd.arg("--data-dir").arg(dir);
            }
            Store::Postgres(url) => {
                // The data dir is unused with Postgres; point it somewhere harmless.
                cmd.arg("--database-url")
                    .arg(url)
                    .arg("--data-dir")
                    .arg(std::env::temp_dir());
            }
        }
        // The load is one user by design: the per-user limits (rate, streams, runs) are off.
        // Scenarios open up to 10,000 connections at once (idle-sse), as many as the listener's
        // default cap, so the cap is raised; the server still holds it below its file limit.
        // `extra` comes later, so a scenario can still set one of them.
        cmd.args([
            "--max-connections",
            "1000000",
            "--requests-per-sec",
            "0",
            "--max-sse-per-user",
            "0",
            "--max-sse-total",
            "0",
            "--max-runs-per-user",
            "0",
        ]);
        cmd.args(extra)
            .env("NO_COLOR", "1")
            .env(
                "RUST_LOG",
                std::env::var("BENCH_SERVER_LOG").unwrap_or_else(|_| "info,sqlx=warn".into()),
            )
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null());
        Server::spawn(cmd, &bin.display().to_string()).await
    }

    /// Starts `cmd` (any server that prints `listening on http://<addr>` once it listens) and
    /// waits until it listens.
    pub async fn spawn(mut cmd: Command, what: &str) -> anyhow::Result<Server> {
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {what}"))?;
        let pid = child.id().context("server exited at once")?;
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        // Drain both pipes for the server's whole life (a full pipe would block it); pass the
        // lines on until the address is known.
        for pipe in [
            Box::new(stdout) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
            Box::new(stderr),
        ] {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(pipe).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if std::env::var_os("BENCH_SERVER_ECHO").is_some() {
                        eprintln!("[server] {line}");
                    }
                    let _ = tx.send(line);
                }
            });
        }
        drop(tx);
        let found = tokio::time::timeout(Duration::from_secs(120), async {
            let mut seen = Vec::new();
            while let Some(line) = rx.recv().await {
                if let Some(i) = line.find("listening on http://") {
                    let rest = &line[i + "listening on http://".len()..];
                    let addr: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                        .collect();
                    return Ok(addr.parse::<SocketAddr>()?);
                }
                seen.push(line);
            }
            bail!("server exited before listening:\n{}", seen.join("\n"))
        })
        .await
        .context("server did not listen within 120 s")??;
        Ok(Server {
            child,
            addr: found,
            pid,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn rss_kb(&self) -> u64 {
        crate::procstat::rss_kb(self.pid)
    }

    /// SIGTERM, then wait (a kill after 15 s).
    pub async fn stop(mut self) {
        self.signal(libc::SIGTERM);
        if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }

    /// `kill -9`: the process dies at once, without its shutdown (an instance crashing); waits
    /// until it is gone.
    pub async fn kill9(mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait().await;
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill only sends a signal, to the server child this handle owns (not yet
        // reaped: `stop` and `kill9` take the handle).
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(self.pid as i32, sig);
        }
    }
}

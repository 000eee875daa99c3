//! Debian's `haproxy` in front of the instances, run with the checked-in `docs/haproxy.cfg`
//! (the file operators copy, and the one tests/blackbox/fleet.rs runs): its addresses come from
//! the environment, so the bench sets loopback ports there and writes no config of its own.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// `docs/haproxy.cfg` of this checkout.
pub fn config() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/haproxy.cfg"))
}

/// A running `haproxy -db -f docs/haproxy.cfg`; killed when dropped.
pub struct Haproxy {
    _child: Child,
    /// Where clients connect: the fleet's one address.
    pub addr: SocketAddr,
    stats: String,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Haproxy {
    /// Starts HAProxy in front of `backends` (`ts1`, `ts2`, `ts3` in that order) and waits
    /// until its health checks see all of them up. One backend is named three times: the same
    /// configuration in front of one instance, the baseline a fleet's cost is compared with.
    pub async fn start(backends: &[SocketAddr]) -> anyhow::Result<Haproxy> {
        let backends = match backends {
            [one] => vec![*one; 3],
            [_, _, _] => backends.to_vec(),
            _ => {
                bail!("docs/haproxy.cfg names three servers: run the fleet with --instances 1 or 3")
            }
        };
        let bin = ["/usr/sbin/haproxy", "/usr/bin/haproxy"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .context(
                "haproxy is missing: `apt-get install -y haproxy` (tests/conformance/install.sh)",
            )?;
        let (addr, stats) = (free_addr()?, free_addr()?);
        let mut cmd = Command::new(bin);
        cmd.arg("-db")
            .arg("-f")
            .arg(config())
            .env("THREADSTREAM_LB_ADDR", addr.to_string())
            .env("THREADSTREAM_LB_STATS_ADDR", stats.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (i, b) in backends.iter().enumerate() {
            cmd.env(format!("THREADSTREAM_{}", i + 1), b.to_string());
        }
        let mut child = cmd.spawn().context("starting haproxy")?;
        let logs = Arc::new(Mutex::new(Vec::new()));
        // Drained for its whole life: a full pipe would stall it.
        for pipe in [
            Box::new(child.stdout.take().expect("piped"))
                as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
            Box::new(child.stderr.take().expect("piped")),
        ] {
            let logs = logs.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(pipe).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    logs.lock().expect("logs").push(line);
                }
            });
        }
        let h = Haproxy {
            _child: child,
            addr,
            stats: format!("http://{stats}/stats;csv"),
            logs,
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(s) = h.statuses().await {
                if s.len() == 3 && s.iter().all(|s| s == "UP") {
                    return Ok(h);
                }
            }
            if Instant::now() > deadline {
                bail!("haproxy does not see three servers up\n{}", h.logs());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last lines HAProxy wrote.
    pub fn logs(&self) -> String {
        let l = self.logs.lock().expect("logs");
        l[l.len().saturating_sub(20)..].join("\n")
    }

    /// Each server's status as HAProxy's checks see it (`UP`, `DOWN`, `UP 1/2`, …), `ts1`
    /// first.
    pub async fn statuses(&self) -> anyhow::Result<Vec<String>> {
        let text = reqwest::Client::new()
            .get(&self.stats)
            .timeout(Duration::from_secs(5))
            .send()
            .await?
            .text()
            .await?;
        parse_statuses(&text)
    }
}

/// The `status` of every `ts*` server of the `threadstream` backend in HAProxy's stats CSV,
/// sorted by server name.
fn parse_statuses(csv: &str) -> anyhow::Result<Vec<String>> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines
        .next()
        .context("empty stats")?
        .trim_start_matches("# ")
        .split(',')
        .collect();
    anyhow::ensure!(
        ["pxname", "svname", "status"]
            .iter()
            .all(|c| header.contains(c)),
        "haproxy's stats lack pxname, svname or status: {header:?}"
    );
    let mut servers: Vec<(String, String)> = lines
        .filter_map(|line| {
            let field: HashMap<&str, &str> = header.iter().copied().zip(line.split(',')).collect();
            let name = *field.get("svname")?;
            let ours = field.get("pxname") == Some(&"threadstream") && name.starts_with("ts");
            ours.then(|| Some((name.to_string(), field.get("status")?.to_string())))?
        })
        .collect();
    servers.sort();
    Ok(servers.into_iter().map(|(_, status)| status).collect())
}

fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_read_from_the_stats_csv() {
        let csv = "# pxname,svname,qcur,status,weight\n\
                   threadstream,FRONTEND,,OPEN,\n\
                   threadstream,ts2,0,DOWN,1\n\
                   threadstream,ts1,0,UP,1\n\
                   threadstream,ts3,0,UP 1/2,1\n\
                   threadstream,BACKEND,0,UP,2\n\
                   stats,FRONTEND,,OPEN,\n";
        assert_eq!(parse_statuses(csv).unwrap(), ["UP", "DOWN", "UP 1/2"]);
        assert!(parse_statuses("# pxname,svname\n").is_err());
    }

    #[test]
    fn the_config_is_the_checked_in_one() {
        let text = std::fs::read_to_string(config()).unwrap();
        for var in [
            "THREADSTREAM_LB_ADDR",
            "THREADSTREAM_1",
            "THREADSTREAM_2",
            "THREADSTREAM_3",
        ] {
            assert!(text.contains(&format!("${{{var}}}")), "{var}");
        }
    }
}

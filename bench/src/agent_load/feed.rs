//! `agent-load --change-feed`: the change feed under the load (issue #38). The bench starts
//! Debian's `nats-server -js` per configuration (a free loopback port, a temp store folder),
//! gives the servers `--change-feed`, and reads the feed's stream live with a
//! JetStream consumer (`async-nats`) in this process. Reported: what was published and whether
//! it is the log exactly (each id once, in order, up to the head), the rate, the end-to-end lag
//! (an event's commit timestamp → the consumer's receipt of it) and NATS's own CPU.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::report::Latency;

/// A `nats-server -js` of the bench; killed when dropped.
pub struct NatsServer {
    pub url: String,
    pub pid: u32,
    child: Child,
    _dir: tempfile::TempDir,
}

impl NatsServer {
    pub fn start() -> anyhow::Result<NatsServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let dir = tempfile::Builder::new().prefix("tsbench-nats").tempdir()?;
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("nats-server (Debian's nats-server package): {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            anyhow::ensure!(Instant::now() < deadline, "nats-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(NatsServer {
            url: format!("nats://127.0.0.1:{port}"),
            pid: child.id(),
            child,
            _dir: dir,
        })
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the consumer saw.
#[derive(Default)]
struct Seen {
    ids: Vec<i64>,
    /// Commit timestamp → receipt, ns, per message.
    lag_ns: Vec<u64>,
    first: Option<Instant>,
    last: Option<Instant>,
}

/// A consumer reading stream `stream` from its first message, live.
pub struct FeedConsumer {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// The feed's figures for one configuration.
pub struct FeedFigures {
    pub messages: u64,
    /// Each id once, in increasing order, the last one the log's head.
    pub exact: bool,
    pub events_per_sec: f64,
    /// Commit timestamp → receipt.
    pub lag: Option<Latency>,
}

impl FeedConsumer {
    pub fn start(url: String, stream: String) -> FeedConsumer {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let task = tokio::spawn(consume(url, stream, seen.clone()));
        FeedConsumer { seen, task }
    }

    /// Waits until the consumer has seen id `head` (up to 60 s), then stops it.
    pub async fn finish(self, head: i64) -> anyhow::Result<FeedFigures> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let last = self.seen.lock().expect("seen").ids.last().copied();
            if last >= Some(head) {
                break;
            }
            if self.task.is_finished() || Instant::now() > deadline {
                self.task.abort();
                let why = match self.task.await {
                    Ok(Err(e)) => format!("{e:#}"),
                    _ => "timed out".into(),
                };
                anyhow::bail!("the feed's consumer did not reach id {head} (last {last:?}): {why}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.task.abort();
        let seen = std::mem::take(&mut *self.seen.lock().expect("seen"));
        let exact = seen.ids.windows(2).all(|w| w[0] < w[1]) && seen.ids.last() == Some(&head);
        let secs = match (seen.first, seen.last) {
            (Some(a), Some(b)) => (b - a).as_secs_f64().max(1e-9),
            _ => 1e-9,
        };
        Ok(FeedFigures {
            messages: seen.ids.len() as u64,
            exact,
            events_per_sec: seen.ids.len() as f64 / secs,
            lag: Latency::from_nanos(seen.lag_ns),
        })
    }
}

async fn consume(url: String, stream: String, seen: Arc<Mutex<Seen>>) -> anyhow::Result<()> {
    let client = async_nats::connect(url).await?;
    let js = async_nats::jetstream::new(client);
    // The servers create the stream when their publisher starts.
    let stream = loop {
        match js.get_stream(&stream).await {
            Ok(s) => break s,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::All,
            ack_policy: async_nats::jetstream::consumer::AckPolicy::None,
            ..Default::default()
        })
        .await?;
    let mut messages = consumer.messages().await?;
    while let Some(m) = messages.next().await {
        let m = m.map_err(|e| anyhow::anyhow!("{e}"))?;
        let now = Instant::now();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs_f64()
            * 1000.0;
        let body: serde_json::Value = serde_json::from_slice(&m.payload)?;
        let (id, ts) = (
            body["id"].as_i64().unwrap_or_default(),
            body["ts"].as_f64().unwrap_or_default(),
        );
        let mut s = seen.lock().expect("seen");
        s.ids.push(id);
        s.lag_ns.push(((now_ms - ts).max(0.0) * 1e6) as u64);
        s.first.get_or_insert(now);
        s.last = Some(now);
    }
    Ok(())
}

//! The agent's HTTP surface through the real service (`threadstream_api::serve`, in process, on
//! a free port, SQLite in a temp dir, the `demo` model): the workflow endpoints, the background
//! task endpoints' errors, the `workflow:` thread-id rule, and a confirmation that survives a
//! restart of the service (start-up recovery resumes the run, the answer completes it).

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use threadstream_api::Config;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

struct Service {
    base: String,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

async fn start(dir: &Path) -> Service {
    let addr = free_port();
    let mut config = Config::new(addr, dir.to_path_buf());
    config.demo_delay = Duration::ZERO;
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(threadstream_api::serve(config, async {
        let _ = rx.await;
    }));
    let base = format!("http://{addr}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(r) = client().get(format!("{base}/healthz")).send().await {
            if r.status().is_success() {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the service did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Service {
        base,
        stop: Some(tx),
        task,
    }
}

impl Service {
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("the service stopped")
            .unwrap()
            .unwrap();
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let r = client()
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = client()
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    async fn wait_status(&self, thread: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, st) = self
                .get(&format!("/instance-ai/threads/{thread}/status"))
                .await;
            if pred(&st) {
                return st;
            }
            assert!(Instant::now() < deadline, "status never matched: {st}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Reads the thread's SSE stream until an event of `ty`; returns its payload.
    async fn first_event(&self, thread: &str, ty: &str) -> Value {
        let mut resp = client()
            .get(format!("{}/instance-ai/events/{thread}", self.base))
            .send()
            .await
            .unwrap();
        let mut buf = String::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // Complete lines only: a chunk may end in the middle of one.
            while let Some(end) = buf.find('\n') {
                let line: String = buf.drain(..=end).collect();
                if let Some(data) = line.trim_end().strip_prefix("data: ") {
                    let v: Value = serde_json::from_str(data).unwrap();
                    if v["type"] == ty {
                        return v["payload"].clone();
                    }
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let chunk = tokio::time::timeout(left, resp.chunk())
                .await
                .expect("no such event in time")
                .unwrap()
                .expect("stream ended");
            buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_routes_and_a_confirmation_across_a_restart() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let dir = tempfile::tempdir().unwrap();
        let s = start(dir.path()).await;

        // Workflows: the demo's samples, one by id, an unknown one.
        let (code, list) = s.get("/instance-ai/workflows").await;
        assert_eq!(code, 200);
        let ids: Vec<&str> = list["workflows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["wf-sample-1", "wf-sample-2"]);
        let (code, wf) = s.get("/instance-ai/workflows/wf-sample-1").await;
        assert_eq!(code, 200);
        assert_eq!(wf["nodes"].as_array().unwrap().len(), 3);
        assert_eq!(wf["edges"].as_array().unwrap().len(), 2);
        let (code, err) = s.get("/instance-ai/workflows/wf-nope").await;
        assert_eq!(code, 404, "{err}");

        // Thread ids may not take the workflow streams' prefix.
        let (code, err) = s
            .post(
                "/instance-ai/chat/workflow:wf-sample-1",
                json!({"message": "hi"}),
            )
            .await;
        assert_eq!(code, 400);
        assert_eq!(err["error"]["code"], "invalid_thread_id");

        // A demo run waits on its delete confirmation.
        let (code, run) = s
            .post(
                "/instance-ai/chat/t1",
                json!({"message": "tidy my workflows"}),
            )
            .await;
        assert_eq!(code, 200, "{run}");
        assert!(run["runId"].is_string(), "{run}");
        s.wait_status("t1", |st| st["isSuspended"] == true).await;

        // Background-task routes: unknown tasks are 404, an empty correction 422.
        let (code, err) = s
            .post("/instance-ai/chat/t1/tasks/task-nope/cancel", json!({}))
            .await;
        assert_eq!(code, 404);
        assert_eq!(err["error"]["code"], "task_not_found");
        let (code, _) = s
            .post(
                "/instance-ai/chat/t1/tasks/task-nope/correct",
                json!({"message": " "}),
            )
            .await;
        assert_eq!(code, 422);
        let (code, _) = s
            .post(
                "/instance-ai/chat/t1/tasks/task-nope/correct",
                json!({"message": "use the other one"}),
            )
            .await;
        assert_eq!(code, 404);

        // A graceful stop (SIGTERM) ends every active run, this one waiting on its confirmation
        // included, as `cancelled`/`service_shutdown`; after a crash the same run stays
        // answerable (`agent/tests/it/orchestration.rs` a_pending_confirmation_survives_a_restart).
        s.stop().await;
        let s = start(dir.path()).await;
        let st = s.wait_status("t1", |st| st["hasActiveRun"] == false).await;
        assert_eq!(st["isSuspended"], false, "{st}");
        let fin = s.first_event("t1", "run-finish").await;
        assert_eq!(
            fin,
            json!({"status": "cancelled", "reason": "service_shutdown"})
        );
        // The deletion was never approved: the workflow is still there.
        let (_, list) = s.get("/instance-ai/workflows").await;
        assert!(list["workflows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["id"] == "wf-sample-2"));
        s.stop().await;
    })
    .await
    .expect("test timed out");
}

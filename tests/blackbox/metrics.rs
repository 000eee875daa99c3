//! Prometheus metrics (`GET /metrics`, `--metrics-addr`): scraped after real demo runs and read
//! with prometheus-client's own text-format parser (PyPI, pinned under
//! tests/conformance/prometheus), the counts checked against what the log holds.

use crate::auth::{start_with_tokens, TOKEN_A, TOKEN_ADMIN};
use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

fn prometheus_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/prometheus")
}

/// One sample of a scrape.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    name: String,
    labels: Value,
    value: f64,
}

/// The samples of an exposition, as prometheus-client's parser reads it (it refuses a malformed
/// one: the test fails with its message).
fn parse(text: &str) -> Vec<Sample> {
    let py = prometheus_dir().join(".venv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: install the pinned packages first: `bash tests/conformance/install.sh`",
        py.display()
    );
    let mut child = Command::new(py)
        .arg(prometheus_dir().join("parse.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the parser");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus-client could not parse the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    samples
        .into_iter()
        .map(|s| Sample {
            name: s["name"].as_str().unwrap().to_string(),
            labels: s["labels"].clone(),
            value: s["value"].as_f64().unwrap(),
        })
        .collect()
}

/// The value of the sample `name` whose labels include `labels`, or `None` when the scrape has
/// no such series (a labelled counter appears only at its first increment).
pub(crate) fn sample(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.labels[*k] == *v))
        .collect();
    assert!(found.len() <= 1, "{name} {labels:?}: {found:?}");
    found.first().map(|s| s.value)
}

/// The value of a series that must be exposed: an absent one fails the test, so a check of a
/// metric the server never reports cannot pass by reading 0.
pub(crate) fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    sample(samples, name, labels).unwrap_or_else(|| {
        let same_name: Vec<&Sample> = samples.iter().filter(|s| s.name == name).collect();
        panic!("no series {name} {labels:?} in the scrape; of that name: {same_name:?}")
    })
}

/// A counter's count, 0 when its series is absent: only for counts that may rightly be 0 and
/// are compared with what the log holds (a counter never incremented is not exposed).
pub(crate) fn counted(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    sample(samples, name, labels).unwrap_or(0.0)
}

pub(crate) async fn scrape(s: &Server) -> Vec<Sample> {
    let r = s.client.get(s.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    parse(&r.text().await.unwrap())
}

/// Scrapes until `done` holds (gauges follow the server's tasks a moment after an answer).
async fn scrape_until(s: &Server, what: &str, done: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let samples = scrape(s).await;
        if done(&samples) {
            return samples;
        }
        assert!(Instant::now() < deadline, "{what}: {samples:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The thread's stored events (the export), for counting what the metrics must equal.
async fn stored(s: &Server, thread: &str) -> Vec<Value> {
    let r = s
        .client
        .get(s.url(&format!("/instance-ai/threads/{thread}/export")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The projector lag series, one per read model, all of which the scrape must expose.
const LAG: &str = "threadstream_projector_lag_events";
const PROJECTED: [&str; 4] = ["history", "status", "thread_list", "analytics"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demo_run_with_a_confirmation_is_counted() {
    bounded(120, async {
        let s = Server::start().await;
        let t = "t-metrics";
        let mut sse = s.sse(t, Cursor::None).await;
        scrape_until(&s, "one n8n stream open", |m| {
            value(m, "threadstream_sse_streams_open", &[("protocol", "n8n")]) == 1.0
        })
        .await;

        // A run that asks for a confirmation: waiting is a gauge while it waits.
        let run = s.chat(t, "clean up my old workflows").await;
        let evs = sse
            .read_until(Duration::from_secs(30), |e| {
                e.json()["type"] == "confirmation-request"
            })
            .await;
        let request = evs.last().unwrap().json()["payload"]["requestId"]
            .as_str()
            .unwrap()
            .to_string();
        // The gauge appears with the first confirmation: absent until then.
        let m = scrape_until(&s, "a confirmation waiting", |m| {
            sample(m, "threadstream_confirmations_waiting", &[]) == Some(1.0)
        })
        .await;
        assert_eq!(value(&m, "threadstream_runs_running", &[]), 1.0);
        s.confirm(&request, &json!({"kind": "approval", "approved": true}))
            .await
            .ok_json("approve");
        s.follow_run(t, &run, |_| None).await;

        let m = scrape_until(&s, "the run finished and every read model caught up", |m| {
            value(m, "threadstream_runs_running", &[]) == 0.0
                && PROJECTED
                    .iter()
                    .all(|model| value(m, LAG, &[("model", model)]) == 0.0)
        })
        .await;
        assert_eq!(value(&m, "threadstream_confirmations_waiting", &[]), 0.0);
        assert_eq!(
            value(
                &m,
                "threadstream_runs_finished_total",
                &[("status", "completed")]
            ),
            1.0
        );
        // No run failed yet: the error series does not exist (it appears at its first count).
        assert_eq!(
            sample(
                &m,
                "threadstream_runs_finished_total",
                &[("status", "error")]
            ),
            None
        );

        // Every event of the log was appended by this process: the counter is the log's size,
        // and the batches hold exactly those events.
        let in_log = s.count_events().await as f64;
        assert_eq!(value(&m, "threadstream_events_appended_total", &[]), in_log);
        assert_eq!(
            value(&m, "threadstream_append_batch_events_sum", &[]),
            in_log
        );
        let batches = value(&m, "threadstream_append_batch_events_count", &[]);
        assert!(batches >= 1.0 && batches <= in_log, "{batches} batches");
        assert_eq!(
            value(
                &m,
                "threadstream_append_batch_events_bucket",
                &[("le", "+Inf")]
            ),
            batches
        );
        let acks = value(&m, "threadstream_append_ack_seconds_count", &[]);
        assert!(
            acks >= batches,
            "{acks} acknowledged appends, {batches} batches"
        );

        // The run's model calls, the title's included, are the ones the log recorded
        // (`llm-usage`), with their tokens.
        let events = stored(&s, t).await;
        let usage: Vec<&Value> = events.iter().filter(|e| e["type"] == "llm-usage").collect();
        assert!(!usage.is_empty());
        let demo = [("provider", "demo"), ("model", "demo")];
        let calls = value(&m, "threadstream_llm_calls_total", &demo);
        assert_eq!(
            calls,
            usage.len() as f64,
            "model calls: {} with usage recorded",
            usage.len()
        );
        for (direction, field) in [("input", "inputTokens"), ("output", "outputTokens")] {
            let recorded: f64 = usage
                .iter()
                .map(|e| e["payload"][field].as_f64().unwrap())
                .sum();
            let mut labels = demo.to_vec();
            labels.push(("direction", direction));
            let counted = value(&m, "threadstream_llm_tokens_total", &labels);
            assert_eq!(
                counted, recorded,
                "{direction} tokens: {counted} counted, {recorded} recorded by the run"
            );
        }
        assert_eq!(sample(&m, "threadstream_llm_errors_total", &demo), None);

        drop(sse);
        scrape_until(&s, "the stream closed", |m| {
            value(m, "threadstream_sse_streams_open", &[("protocol", "n8n")]) == 0.0
        })
        .await;

        // A run whose model call fails (the demo model fails on `crash`): one LLM error of the
        // provider's type, one run finished with status error, the completed one unchanged.
        let crashed = "t-metrics-crash";
        let run = s.chat(crashed, "please crash now").await;
        s.follow_run(crashed, &run, |_| None).await;
        let m = scrape_until(&s, "the failed run counted", |m| {
            sample(
                m,
                "threadstream_runs_finished_total",
                &[("status", "error")],
            )
            .is_some()
                && value(m, "threadstream_runs_running", &[]) == 0.0
        })
        .await;
        assert_eq!(
            value(
                &m,
                "threadstream_runs_finished_total",
                &[("status", "error")]
            ),
            1.0
        );
        assert_eq!(
            value(
                &m,
                "threadstream_runs_finished_total",
                &[("status", "completed")]
            ),
            1.0
        );
        let mut unavailable = demo.to_vec();
        unavailable.push(("type", "unavailable"));
        assert_eq!(
            value(&m, "threadstream_llm_errors_total", &unavailable),
            1.0
        );
        assert_eq!(
            value(&m, "threadstream_llm_errors_total", &demo),
            1.0,
            "no error of another type"
        );
        // The failed call was counted as a call too, though it recorded no usage.
        let failed_usage = stored(&s, crashed)
            .await
            .iter()
            .filter(|e| e["type"] == "llm-usage")
            .count() as f64;
        assert_eq!(
            value(&m, "threadstream_llm_calls_total", &demo),
            calls + failed_usage + 1.0
        );
    })
    .await
}

/// With authentication on, `/metrics` is an admin's; `--metrics-addr` serves the same without
/// credentials on a listener of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_an_admins_or_on_their_own_address() {
    bounded(60, async {
        // Port 0: the server binds and logs its own port. Binding a free port here and handing it
        // over raced with the suite's other sockets (CI once saw it taken in between).
        let dir = tempfile::tempdir().unwrap();
        let s = start_with_tokens(&dir, &["--metrics-addr", "127.0.0.1:0"]).await;
        let metrics_addr = metrics_address(&s.logs());
        let get = |token: Option<&'static str>| {
            let mut req = s.client.get(s.url("/metrics"));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            req.send()
        };
        let r = get(None).await.unwrap();
        assert_eq!(r.status(), 401);
        let r = get(Some(TOKEN_A)).await.unwrap();
        assert_eq!(r.status(), 403);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "admin_only", "{body}");
        let r = get(Some(TOKEN_ADMIN)).await.unwrap();
        assert_eq!(r.status(), 200);
        let admin = parse(&r.text().await.unwrap());
        assert!(
            admin
                .iter()
                .any(|m| m.name == "threadstream_sse_streams_open"),
            "{admin:?}"
        );

        let r = s
            .client
            .get(format!("http://{metrics_addr}/metrics"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let open = parse(&r.text().await.unwrap());
        assert_eq!(
            value(
                &open,
                "threadstream_sse_streams_open",
                &[("protocol", "ag-ui")]
            ),
            0.0
        );
        let r = s
            .client
            .get(format!("http://{metrics_addr}/instance-ai/threads"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "the metrics address serves nothing else");
    })
    .await
}

/// The runtime has the machine's cores less one worker threads (at least one) unless
/// `--worker-threads` (or its variable) says otherwise, as the scrape reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_has_the_workers_asked_for() {
    bounded(60, async {
        let cores = std::thread::available_parallelism().unwrap().get();
        let default = Server::start().await;
        assert_eq!(
            value(&scrape(&default).await, "threadstream_runtime_workers", &[]),
            cores.saturating_sub(1).max(1) as f64
        );
        let flag = Server::start_with(Opts {
            extra_args: vec!["--worker-threads".into(), "3".into()],
            ..Opts::default()
        })
        .await;
        assert_eq!(
            value(&scrape(&flag).await, "threadstream_runtime_workers", &[]),
            3.0
        );
        let env = Server::start_with(Opts {
            env: vec![("THREADSTREAM_WORKER_THREADS".into(), "2".into())],
            ..Opts::default()
        })
        .await;
        assert_eq!(
            value(&scrape(&env).await, "threadstream_runtime_workers", &[]),
            2.0
        );
    })
    .await
}

/// The `IP:PORT` of the server's `metrics on http://IP:PORT/metrics` log line.
fn metrics_address(logs: &str) -> String {
    let line = strip_ansi(logs);
    let from = line
        .find("metrics on http://")
        .unwrap_or_else(|| panic!("no metrics address in the log:\n{logs}"))
        + "metrics on http://".len();
    line[from..].split('/').next().unwrap().to_string()
}

/// A LISTEN connection that Postgres drops is re-established and counted (on Postgres whatever
/// store the suite runs on: head hints between instances exist only there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_listen_connection_is_counted_as_a_reconnect() {
    bounded(60, async {
        let (name, url) = create_database().await;
        let s = Server::start_with(Opts {
            database_url: Some(url.clone()),
            ..Opts::default()
        })
        .await;
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let listening = || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND query ILIKE 'LISTEN%'",
            )
            .fetch_one(&pool)
            .await
            .unwrap()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while listening().await == 0 {
            assert!(Instant::now() < deadline, "the server never listened");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // No reconnect yet: the counter may not exist.
        let before = counted(
            &scrape(&s).await,
            "threadstream_notify_reconnects_total",
            &[("kind", "postgres")],
        );
        let ended: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND query ILIKE 'LISTEN%'",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert!(!ended.is_empty() && ended.iter().all(|e| *e));
        scrape_until(&s, "a reconnect counted", |m| {
            counted(
                m,
                "threadstream_notify_reconnects_total",
                &[("kind", "postgres")],
            ) > before
        })
        .await;
        // And it listens again.
        let deadline = Instant::now() + Duration::from_secs(10);
        while listening().await == 0 {
            assert!(Instant::now() < deadline, "the server never listened again");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        pool.close().await;
        drop(s);
        drop_database(name);
    })
    .await
}

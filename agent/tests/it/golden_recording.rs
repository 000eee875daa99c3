//! The golden recording is regenerated here, not trusted: a demo run (the wire protocols'
//! golden input, `tests/golden/demo-run.events.jsonl`) is executed by the real runtime on a
//! fresh SQLite log, its generated ids and clock are normalized, and the result must equal the
//! checked-in recording. So a change of the demo model, the runtime or the aggregate shows as a
//! diff here first; `THREADSTREAM_BLESS=1` rewrites the recording, and then the per-protocol
//! golden streams (`cargo test -p threadstream-projections --test it golden` with the same variable).

use crate::support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use support::*;
use threadstream_agent::RuntimeConfig;
use threadstream_domain::{StoredEvent, ThreadCommand};

const THREAD: &str = "golden";
const MESSAGE: &str = "Build me a weather to Slack workflow";

fn recording_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/demo-run.events.jsonl")
}

/// Replaces every generated id (`run_<uuid>`, `agent-<uuid>`, `tc-<uuid>`, …) by its prefix
/// and its rank of first appearance, e.g. `tc-3`.
struct IdNormalizer {
    seen: HashMap<String, String>,
    counts: HashMap<&'static str, usize>,
}

const ID_PREFIXES: &[&str] = &[
    "run_", "agent_", "msg_", "mg_", "agent-", "tc-", "cr-", "task-", "wf-",
];

impl IdNormalizer {
    fn normalize(&mut self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        'scan: while !rest.is_empty() {
            for prefix in ID_PREFIXES {
                if let Some(tail) = rest.strip_prefix(prefix) {
                    let len = tail
                        .bytes()
                        .take_while(|b| b.is_ascii_hexdigit() || *b == b'-')
                        .count();
                    if len >= 32 {
                        let raw = &rest[..prefix.len() + len];
                        let next = self.counts.entry(prefix).or_insert(0);
                        let name = self
                            .seen
                            .entry(raw.to_string())
                            .or_insert_with(|| {
                                *next += 1;
                                format!("{prefix}{next}")
                            })
                            .clone();
                        out.push_str(&name);
                        rest = &rest[raw.len()..];
                        continue 'scan;
                    }
                }
            }
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
        out
    }
}

/// Wall-clock fields inside payloads (the workflows' `createdAt`/`updatedAt`) → a fixed time.
fn normalize_clock(text: &str) -> String {
    let mut out = text.to_string();
    // A model call's start (`llm-usage.startedAt`) is a clock reading too, and its time to the
    // first chunk a measurement: both are set to fixed values.
    for key in ["createdAt", "updatedAt", "startedAt", "firstChunkMs"] {
        let needle = format!("\"{key}\":");
        let mut from = 0;
        while let Some(i) = out[from..].find(&needle) {
            let start = from + i + needle.len();
            let end = start
                + out[start..]
                    .bytes()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
            if end > start {
                let fixed = if key == "firstChunkMs" {
                    "1"
                } else {
                    "1700000000000"
                };
                out.replace_range(start..end, fixed);
            }
            from = start;
        }
    }
    out
}

fn rows(events: &[StoredEvent]) -> String {
    let mut ids = IdNormalizer {
        seen: HashMap::new(),
        counts: HashMap::new(),
    };
    // The title is written beside the first answer, so its place among the run's first events
    // races with the model's stream: put it right after the run-start, where it usually lands,
    // with the `llm-usage` of its model call (stored in the same append, just before it).
    let titling: Vec<usize> = (0..events.len())
        .filter(|&i| {
            let e = &events[i];
            e.event_type == "thread-title-updated"
                || (e.event_type == "llm-usage"
                    && events
                        .get(i + 1)
                        .is_some_and(|n| n.event_type == "thread-title-updated"))
        })
        .collect();
    let mut ordered: Vec<&StoredEvent> = (0..events.len())
        .filter(|i| !titling.contains(i))
        .map(|i| &events[i])
        .collect();
    let start = ordered
        .iter()
        .position(|e| e.event_type == "run-start")
        .expect("a run-start");
    for (k, &i) in titling.iter().enumerate() {
        ordered.insert(start + 1 + k, &events[i]);
    }
    let mut out = String::new();
    for (i, e) in ordered.into_iter().enumerate() {
        let n = i as i64 + 1;
        // The recording's column order (serde_json would sort the keys).
        let j = |v: serde_json::Value| v.to_string();
        let row = format!(
            "{{\"id\":{n},\"thread_id\":{},\"seq\":{n},\"run_id\":{},\"agent_id\":{},\"event_type\":{},\"payload\":{},\"ts\":{},\"response_id\":{},\"user_id\":{}}}",
            j(json!(e.thread_id)),
            j(json!(e.run_id)),
            j(json!(e.agent_id)),
            j(json!(e.event_type)),
            j(json!(normalize_clock(&e.payload))),
            1_700_000_000_000i64 + 10 * (n - 1),
            j(json!(e.response_id)),
            j(json!(e.user_id)),
        );
        out.push_str(&ids.normalize(&row));
        out.push('\n');
    }
    out
}

#[tokio::test]
async fn the_golden_recording_is_what_the_demo_run_does_now() {
    let h = harness(RuntimeConfig {
        model: "demo".into(),
        demo_delay: Duration::ZERO,
        sample_workflows: true,
        ..RuntimeConfig::default()
    })
    .await;
    let id = |p: &str| format!("{p}{}", uuid::Uuid::now_v7().simple());
    let (run, orchestrator) = (id("run_"), id("agent_"));
    h.log
        .append(
            THREAD,
            vec![
                ThreadCommand::Create {
                    owner: "local".into(),
                    title: None,
                },
                ThreadCommand::StartRun {
                    run_id: run.clone(),
                    agent_id: orchestrator.clone(),
                    message_id: id("msg_"),
                    message_group_id: Some(id("mg_")),
                    text: MESSAGE.into(),
                    user: "local".into(),
                },
            ],
        )
        .await
        .unwrap();
    h.rt.spawn_run(
        THREAD.into(),
        run.clone(),
        orchestrator,
        MESSAGE.into(),
        "local".into(),
    );
    // The demo deletes an unused sample workflow, which asks first: approve it.
    let request = wait_request(&h, THREAD, &run).await;
    answer(
        &h,
        THREAD,
        request["requestId"].as_str().unwrap(),
        true,
        None,
        None,
    )
    .await;
    wait_finish(&h, THREAD, &run).await;
    wait_idle(&h.rt).await;
    let actual = rows(&read_all(&h.log, THREAD).await);

    let path = recording_path();
    if std::env::var_os("THREADSTREAM_BLESS").is_some() {
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).expect("the golden recording");
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "the demo run differs from tests/golden/demo-run.events.jsonl at line {}:\n expected: {:?}\n   actual: {:?}\n(if intended: THREADSTREAM_BLESS=1 for this test, then for the projections' golden test)",
            line + 1,
            expected.lines().nth(line),
            actual.lines().nth(line)
        );
    }
}

#[test]
fn ids_are_numbered_by_first_appearance() {
    let mut n = IdNormalizer {
        seen: HashMap::new(),
        counts: HashMap::new(),
    };
    let a = "tc-0190f0a1-2b3c-7d4e-8f90-a1b2c3d4e5f6";
    let b = "tc-0190f0a1-2b3c-7d4e-8f90-a1b2c3d4e5f7";
    assert_eq!(
        n.normalize(&format!("{b} {a} {b} tc-short run_{}", "0".repeat(32))),
        "tc-1 tc-2 tc-1 tc-short run_1"
    );
    assert_eq!(
        normalize_clock(r#"{"createdAt":1795328946616,"x":1}"#),
        r#"{"createdAt":1700000000000,"x":1}"#
    );
}

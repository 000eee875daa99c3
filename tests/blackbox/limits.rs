//! Configurable limits: each limit, set low by its flag, answers 413 or 429
//! with a JSON error naming the limit and its value (429 from the rate limit with
//! `Retry-After`), and a freed slot (closed stream, finished run) is usable again.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn args(pairs: &[(&str, &str)]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|(k, v)| [format!("--{k}"), v.to_string()])
        .collect()
}

/// Asserts `status` and the error body naming `limit` = `value`; returns the body.
fn limit_error(r: &Resp, status: u16, code: &str, limit: &str, value: u64) -> Value {
    assert_eq!(r.status, status, "body {}", r.text);
    let v: Value = serde_json::from_str(&r.text).unwrap_or_else(|_| panic!("not JSON: {}", r.text));
    assert_eq!(v["error"]["code"], code, "{v}");
    assert_eq!(v["error"]["limit"], limit, "{v}");
    assert_eq!(v["error"]["value"], value, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_count_and_concurrency_limits() {
    bounded(120, async {
        let s = Server::start_with(Opts {
            demo_delay_ms: 200,
            max_body_bytes: Some(4000),
            extra_args: args(&[
                ("max-message-bytes", "100"),
                ("max-events-per-ingest", "3"),
                ("max-event-bytes", "300"),
                ("max-sse-per-user", "2"),
                ("max-runs-per-user", "1"),
                ("requests-per-sec", "0"),
            ]),
            ..Opts::default()
        })
        .await;

        // Request body.
        let r = s
            .post_raw(
                "/instance-ai/chat/l-body",
                "application/json",
                vec![b' '; 5000],
            )
            .await;
        limit_error(&r, 413, "payload_too_large", "max_body_bytes", 4000);
        // Message length.
        let r = s.chat_resp("l-msg", &"x".repeat(101)).await;
        limit_error(&r, 413, "payload_too_large", "max_message_bytes", 100);
        // Events per ingest request: 3 pass, 4 do not (and nothing of them is stored).
        let evs: Vec<Value> = (0..4)
            .map(|i| text_delta("r", "o", &format!("t{i}")))
            .collect();
        let r = s.ingest("l-ingest", &evs).await;
        limit_error(&r, 413, "payload_too_large", "max_events_per_ingest", 3);
        s.ingest_ok(
            "l-ingest",
            &[run_start("r", "o"), text_delta("r", "o", "a")],
        )
        .await;
        // Payload size per event.
        let big = text_delta("r", "o", &"y".repeat(400));
        let r = s.ingest("l-ingest", &[big]).await;
        let v = limit_error(&r, 413, "payload_too_large", "max_event_bytes", 300);
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("events[0]"),
            "{v}"
        );

        // SSE streams per user: the third is refused; closing one frees its slot.
        let a = s.sse("l-sse", Cursor::None).await;
        let _b = s.sse("l-sse", Cursor::None).await;
        let r = s
            .try_sse("l-sse", Cursor::None)
            .await
            .err()
            .expect("third stream refused");
        limit_error(&r, 429, "too_many_streams", "max_sse_per_user", 2);
        drop(a);
        let deadline = Instant::now() + Duration::from_secs(5);
        let _c = loop {
            match s.try_sse("l-sse", Cursor::None).await {
                Ok(c) => break c,
                Err(r) if r.status == 429 && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(r) => panic!("slot of a closed stream not freed: {} {}", r.status, r.text),
            }
        };

        // Runs per user at once: a second run elsewhere is refused while the first executes.
        s.chat("l-run-a", "a long answer, please").await;
        let r = s.chat_resp("l-run-b", "hello").await;
        limit_error(&r, 429, "too_many_runs", "max_runs_per_user", 1);
        s.cancel("l-run-a").await.ok_json("cancel");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = s.chat_resp("l-run-b", "hello").await;
            if r.status == 200 {
                break;
            }
            assert!(
                r.status == 429 && Instant::now() < deadline,
                "{} {}",
                r.status,
                r.text
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_per_user_per_second() {
    bounded(60, async {
        let s = Server::start_with(Opts {
            extra_args: args(&[("requests-per-sec", "2"), ("request-burst", "5")]),
            ..Opts::default()
        })
        .await;
        // The start-up health checks took tokens too: spend the rest of the burst.
        let mut refused = None;
        for _ in 0..10 {
            let r = s.get("/instance-ai/threads").await;
            if r.status == 429 {
                refused = Some(r);
                break;
            }
            assert_eq!(r.status, 200, "{}", r.text);
        }
        let r = refused.expect("a burst of 10 requests at 2/s (burst 5) is refused");
        limit_error(&r, 429, "rate_limited", "requests_per_sec", 2);
        let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=1).contains(&retry), "Retry-After {retry}");
        // The bucket refills at 2/s.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(s.get("/instance-ai/threads").await.status, 200);
    })
    .await;
}

//! The catch-up phase: a 100,000-value stream read from the start with plain GETs.

use crate::client::http_client;
use crate::procstat::Window;
use crate::report::{round, Latency, Row};
use crate::server::Server;
use anyhow::{ensure, Context};
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;

use super::setup::*;

/// A catch-up value: its index and a token delta, as an AI token stream would hold.
pub(super) fn catchup_value(i: usize) -> String {
    format!(r#"{{"i":{i},"type":"text-delta","id":"msg-1","delta":" token"}}"#)
}

pub(super) async fn catchup(
    load: &Load,
    which: Which,
    server: &Server,
    base: &str,
    problems: &mut Vec<String>,
) -> anyhow::Result<(Row, f64)> {
    let client = http_client();
    let url = format!("{base}/v1/stream/catchup");
    create_json_stream(&client, &url).await?;
    // Pre-fill with POSTs of `fill_batch` values, several in flight; each answer's
    // Stream-Next-Offset places its batch, so the order to expect is known.
    let batches = load.catchup_values.div_ceil(load.fill_batch);
    let sem = Arc::new(tokio::sync::Semaphore::new(load.fill_concurrency));
    let mut tasks = Vec::with_capacity(batches);
    for b in 0..batches {
        let (client, url, sem) = (client.clone(), url.clone(), sem.clone());
        let first = b * load.fill_batch;
        let last = (first + load.fill_batch).min(load.catchup_values);
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire_owned().await.expect("semaphore");
            let body = format!(
                "[{}]",
                (first..last)
                    .map(catchup_value)
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let resp = client
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await?;
            ensure!(
                resp.status().is_success(),
                "append answered {}",
                resp.status()
            );
            let offset = resp
                .headers()
                .get("stream-next-offset")
                .and_then(|v| v.to_str().ok())
                .context("no Stream-Next-Offset")?
                .to_string();
            anyhow::Ok((offset, first, last))
        }));
    }
    let mut placed = Vec::with_capacity(batches);
    for t in tasks {
        placed.push(t.await??);
    }
    placed.sort();
    let expected: Vec<usize> = placed.iter().flat_map(|&(_, a, b)| a..b).collect();

    // The read: plain GETs from -1, each from the Stream-Next-Offset of the one before, until
    // Stream-Up-To-Date; bodies kept and checked after the clock stops. Done `CATCHUP_READS`
    // times (one read is a few tens of ms: a busy machine moves it), the median reported.
    let w = Window::start(server.pid, "server");
    let mut reads = Vec::new();
    let mut bodies = Vec::new();
    for _ in 0..CATCHUP_READS {
        let start = Instant::now();
        bodies = read_whole(&client, &url).await?;
        reads.push(start.elapsed().as_nanos() as u64);
    }
    let usage = w.finish().await;
    let mut sorted = reads.clone();
    sorted.sort_unstable();
    let secs = sorted[sorted.len() / 2] as f64 / 1e9;

    let mut got = Vec::with_capacity(load.catchup_values);
    for b in &bodies {
        let items: Vec<Value> = serde_json::from_slice(b).context("a page is not a JSON array")?;
        got.extend(
            items
                .iter()
                .map(|v| v["i"].as_u64().unwrap_or(u64::MAX) as usize),
        );
    }
    if got != expected {
        let at = got.iter().zip(&expected).position(|(a, b)| a != b);
        problems.push(format!(
            "catch-up: read {} values, {} expected; first difference at {:?}",
            got.len(),
            expected.len(),
            at
        ));
    }
    let bytes: usize = bodies.iter().map(|b| b.len()).sum();
    let row = Row::new(
        format!(
            "{}: catch-up read of {} values",
            which.label(),
            load.catchup_values
        ),
        which.kind(),
        got.len() as u64,
        secs,
        "values/s",
    )
    .latency(Latency::from_nanos(reads))
    .usage(usage)
    .extra("reads", CATCHUP_READS)
    .extra("requests_per_read", bodies.len())
    .extra("body_mb", round(bytes as f64 / 1e6, 2))
    .extra("median_ms", round(secs * 1e3, 2))
    .extra("client", "plain HTTP GETs (reqwest), no compression asked")
    .extra("values_per_append_when_filled", load.fill_batch)
    .extra(
        "latency_is",
        "per whole read (every GET), first sent → last body received; throughput from the median",
    );
    let tp = row.throughput;
    Ok((row, tp))
}

/// Reads the stream at `url` from -1 with plain GETs, each from the Stream-Next-Offset of the one
/// before, until Stream-Up-To-Date; returns the bodies.
pub(super) async fn read_whole(
    client: &reqwest::Client,
    url: &str,
) -> anyhow::Result<Vec<bytes::Bytes>> {
    let mut offset = "-1".to_string();
    let mut bodies = Vec::new();
    loop {
        let resp = client.get(format!("{url}?offset={offset}")).send().await?;
        ensure!(
            resp.status() == reqwest::StatusCode::OK,
            "catch-up read answered {}",
            resp.status()
        );
        let h = resp.headers();
        let next = h
            .get("stream-next-offset")
            .and_then(|v| v.to_str().ok())
            .context("no Stream-Next-Offset")?
            .to_string();
        let done = h.get("stream-up-to-date").is_some_and(|v| v == "true");
        bodies.push(resp.bytes().await?);
        if done {
            return Ok(bodies);
        }
        ensure!(next != offset, "Stream-Next-Offset did not move");
        offset = next;
    }
}

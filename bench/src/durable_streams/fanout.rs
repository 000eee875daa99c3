//! The live fan-out phase: SSE readers of one stream while a writer appends at a steady rate.

use crate::client::{http_client, us};
use crate::procstat::Window;
use crate::report::{Latency, Row};
use crate::server::Server;
use crate::sse::{Read, SseConn};
use anyhow::{bail, ensure, Context};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::setup::*;

/// One fan-out reader: the (index, latency in µs) of every value it received, in order.
pub(super) async fn read_fanout(
    mut conn: SseConn,
    want: Arc<AtomicU64>,
    deadline: Instant,
) -> anyhow::Result<Vec<(u32, u32)>> {
    let mut got: Vec<(u32, u32)> = Vec::with_capacity(1024);
    let mut bad = None;
    loop {
        if got.len() as u64 >= want.load(Ordering::Acquire) {
            return Ok(got);
        }
        let read = tokio::time::timeout_at(
            deadline.into(),
            conn.read_some(64 * 1024, &mut |_, data, at| {
                // Data events carry a JSON array of values; control events an object.
                if data.first() != Some(&b'[') {
                    return;
                }
                let now = us(at);
                match serde_json::from_slice::<Vec<Stamp>>(data) {
                    Ok(items) => got.extend(
                        items
                            .iter()
                            .map(|s| (s.i, now.saturating_sub(s.t).min(u32::MAX as u64) as u32)),
                    ),
                    Err(e) => bad = Some(e),
                }
            }),
        )
        .await;
        if let Some(e) = bad.take() {
            bail!("a data event is not a JSON array of stamps: {e}");
        }
        match read {
            Err(_) => return Ok(got), // timed out: the caller counts what is missing
            Ok(Ok(Read::Eof)) => return Ok(got),
            Ok(Ok(Read::Data)) => {}
            Ok(Err(e)) => return Err(e),
        }
    }
}

#[derive(serde::Deserialize)]
pub(super) struct Stamp {
    i: u32,
    /// Sent at, µs since the bench's base instant.
    t: u64,
}

pub(super) async fn fanout(
    load: &Load,
    which: Which,
    server: &Server,
    base: &str,
    problems: &mut Vec<String>,
) -> anyhow::Result<(Row, f64)> {
    let client = http_client();
    let url = format!("{base}/v1/stream/fanout");
    create_json_stream(&client, &url).await?;
    // Connect every reader from the start of the (empty) stream, at most 128 at a time, each
    // waiting for its first control event, so all are surely live before the writer starts.
    let sem = Arc::new(tokio::sync::Semaphore::new(128));
    let mut tasks = Vec::with_capacity(load.readers);
    for _ in 0..load.readers {
        let (sem, addr) = (sem.clone(), server.addr);
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire_owned().await.expect("semaphore");
            let mut c =
                SseConn::connect(addr, "/v1/stream/fanout?offset=-1&live=sse", None, None).await?;
            let mut first = false;
            while !first {
                let r = tokio::time::timeout(
                    Duration::from_secs(60),
                    c.read_some(64 * 1024, &mut |_, _, _| first = true),
                )
                .await
                .context("no first SSE event within 60 s")??;
                if let Read::Eof = r {
                    bail!("SSE stream ended before its first event");
                }
            }
            anyhow::Ok(c)
        }));
    }
    let mut conns = Vec::with_capacity(load.readers);
    for t in tasks {
        conns.push(t.await??);
    }
    let want = Arc::new(AtomicU64::new(u64::MAX));
    let grace = Duration::from_secs(30);
    let deadline = Instant::now() + Duration::from_secs_f64(load.fanout_secs) + grace;
    let readers: Vec<_> = conns
        .into_iter()
        .map(|c| tokio::spawn(read_fanout(c, want.clone(), deadline)))
        .collect();

    // The writer: one message every 1/rate s, each POST its own task (so a slow answer does not
    // slow the rate), the send time stamped into the message.
    let w = Window::start(server.pid, "server");
    let total = (load.rate as f64 * load.fanout_secs).round() as u32;
    let mut iv = tokio::time::interval(Duration::from_secs_f64(1.0 / load.rate as f64));
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let start = Instant::now();
    let mut posts = Vec::with_capacity(total as usize);
    for i in 0..total {
        iv.tick().await;
        let (client, url) = (client.clone(), url.clone());
        posts.push(tokio::spawn(async move {
            let body = format!(r#"[{{"i":{i},"t":{}}}]"#, us(Instant::now()));
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
            anyhow::Ok(())
        }));
    }
    let mut append_errors = 0u64;
    for p in posts {
        if !matches!(p.await, Ok(Ok(()))) {
            append_errors += 1;
        }
    }
    want.store(total as u64 - append_errors, Ordering::Release);
    let mut received = Vec::with_capacity(load.readers);
    for r in readers {
        received.push(r.await??);
    }
    let secs = start.elapsed().as_secs_f64();
    let usage = w.finish().await;

    // Every reader must hold every message, once, in one and the same order (the stream's).
    let reference: Vec<u32> = received
        .iter()
        .max_by_key(|r| r.len())
        .map(|r| r.iter().map(|x| x.0).collect())
        .unwrap_or_default();
    let mut sorted = reference.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let mut incomplete = 0;
    let mut deliveries = 0u64;
    let mut lat = Vec::with_capacity(load.readers * total as usize);
    for r in &received {
        deliveries += r.len() as u64;
        if r.len() != reference.len() || r.iter().zip(&reference).any(|(a, b)| a.0 != *b) {
            incomplete += 1;
        }
        lat.extend(r.iter().map(|x| x.1 as u64 * 1000));
    }
    let expected = (total as u64 - append_errors) * load.readers as u64;
    if append_errors > 0
        || sorted.len() != reference.len()
        || reference.len() as u64 != total as u64 - append_errors
        || incomplete > 0
    {
        problems.push(format!(
            "fan-out: {deliveries} of {expected} deliveries; {incomplete} readers missed or \
             reordered messages; {append_errors} appends failed"
        ));
    }
    let latency = Latency::from_nanos(lat);
    let p99 = latency.as_ref().map_or(f64::MAX, |l| l.p99_ms);
    let row = Row::new(
        format!(
            "{}: live fan-out, {} SSE readers, {}/s",
            which.label(),
            load.readers,
            load.rate
        ),
        which.kind(),
        deliveries,
        secs,
        "deliveries/s",
    )
    .latency(latency)
    .usage(usage)
    .extra("messages", total)
    .extra("deliveries_expected", expected)
    .extra("readers_complete_in_order", load.readers - incomplete)
    .extra("append_errors", append_errors)
    .extra("latency_is", "POST sent → received, per reader per message");
    Ok((row, p99))
}

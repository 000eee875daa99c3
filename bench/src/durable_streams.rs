//! `durable-streams`: threadstream's `/v1/stream/*` against the reference server,
//! `@durable-streams/server` (its `DurableStreamTestServer`, file-backed: LMDB and segment
//! files), both started here and driven with the same load one after the other:
//!
//! - append: 100 concurrent real `IdempotentProducer`s (`@durable-streams/client`, run by
//!   `bench/node/producers.mjs`), one JSON stream each, every stream read back and checked;
//! - catch-up: a 100,000-value JSON stream read from offset -1 with plain HTTP GETs following
//!   `Stream-Next-Offset` until `Stream-Up-To-Date`, checked value by value;
//! - live fan-out: 1,000 SSE readers (`live=sse`) of one stream while a writer appends
//!   timestamped messages at a steady rate; latency is received − sent, per reader per message,
//!   and every reader must get every message in the stream's order.
//!
//! The Node side (the reference server and the producers) lives in `bench/node/` and uses the
//! packages pinned in `tests/conformance/durable-streams` (`bash tests/conformance/install.sh`).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use serde_json::Value;
use tokio::process::Command;

use crate::client::{http_client, us};
use crate::procstat::Window;
use crate::report::{round, Latency, Report, Row};
use crate::server::{Server, Store};
use crate::sse::{Read, SseConn};
use crate::Ctx;

/// Whole catch-up reads timed per server (the median is the figure).
const CATCHUP_READS: usize = 5;

/// The load, the same for both servers.
struct Load {
    producers: usize,
    append_secs: f64,
    /// Values per producer request (see producers.mjs).
    batch: usize,
    catchup_values: usize,
    /// Values per POST while pre-filling the catch-up stream, and POSTs in flight.
    fill_batch: usize,
    fill_concurrency: usize,
    readers: usize,
    /// Messages per second the fan-out writer appends, and for how long.
    rate: u64,
    fanout_secs: f64,
}

impl Load {
    fn new(quick: bool) -> Load {
        if quick {
            Load {
                producers: 10,
                append_secs: 1.0,
                batch: 10,
                catchup_values: 2_000,
                fill_batch: 10,
                fill_concurrency: 8,
                readers: 50,
                rate: 20,
                fanout_secs: 1.0,
            }
        } else {
            Load {
                producers: 100,
                append_secs: 10.0,
                batch: 10,
                catchup_values: 100_000,
                // The reference serializes a stream's appends (each waits for its fsync and
                // LMDB commit): 1,000 POSTs fill it in a reasonable time.
                fill_batch: 100,
                fill_concurrency: 16,
                readers: 1_000,
                // Tokens batched every 50 ms; a rate the reference's serialized appends to one
                // stream can keep up with on this machine.
                rate: 20,
                fanout_secs: 10.0,
            }
        }
    }
}

/// `bench/node`: next to this crate's sources (`BENCH_NODE_DIR` overrides).
fn node_dir() -> PathBuf {
    std::env::var_os("BENCH_NODE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("node"))
}

/// The two servers, in the order they are measured.
#[derive(Clone, Copy, PartialEq)]
enum Which {
    Threadstream,
    Reference,
}

impl Which {
    fn label(self) -> &'static str {
        match self {
            Which::Threadstream => "threadstream",
            Which::Reference => "reference @durable-streams/server 0.3.7 (file-backed)",
        }
    }
    fn kind(self) -> &'static str {
        match self {
            Which::Threadstream => "threadstream",
            Which::Reference => "baseline",
        }
    }
}

async fn start(ctx: &Ctx, which: Which, dir: &std::path::Path) -> anyhow::Result<Server> {
    match which {
        Which::Threadstream => Server::start(&ctx.bin()?, Store::Sqlite(dir), &[]).await,
        Which::Reference => {
            let mut cmd = Command::new("node");
            cmd.arg(node_dir().join("reference-server.mjs"))
                .arg(dir)
                .arg("--until-stdin-closes")
                // A pipe the child keeps until we drop it: the server never outlives the bench.
                .stdin(Stdio::piped());
            Server::spawn(cmd, "node reference-server.mjs (is node installed?)").await
        }
    }
}

/// What one server measured.
struct Measured {
    append: Row,
    append_values_per_s: f64,
    catchup: Row,
    catchup_values_per_s: f64,
    fanout: Row,
    fanout_p99_ms: f64,
    problems: Vec<String>,
}

pub async fn durable_streams(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let load = Load::new(ctx.quick);
    let limit = crate::procstat::raise_nofile(4 * load.readers as u64 + 1024);
    ensure!(
        limit >= 2 * load.readers as u64 + 256,
        "open-file limit {limit} is too low for {} SSE readers",
        load.readers
    );
    let mut results = Vec::new();
    for which in [Which::Threadstream, Which::Reference] {
        let dir = tempfile::tempdir()?;
        let server = start(ctx, which, dir.path()).await?;
        let m = measure(&load, which, &server).await;
        server.stop().await;
        results.push(m.with_context(|| format!("measuring {}", which.label()))?);
    }
    let (ts, rf) = (&results[0], &results[1]);
    let append_x = ts.append_values_per_s / rf.append_values_per_s.max(f64::MIN_POSITIVE);
    let catchup_x = ts.catchup_values_per_s / rf.catchup_values_per_s.max(f64::MIN_POSITIVE);
    report.ratio("append_threadstream_over_reference", append_x);
    report.ratio("catchup_threadstream_over_reference", catchup_x);
    report.ratio(
        "fanout_p99_threadstream_over_reference",
        ts.fanout_p99_ms / rf.fanout_p99_ms.max(f64::MIN_POSITIVE),
    );
    let clean = |m: &Measured| m.problems.is_empty();
    report.check(
        "append throughput ≥ 10× the reference's (100 IdempotentProducers)",
        format!(
            "{:.0} vs {:.0} values/s: {:.2}×",
            ts.append_values_per_s, rf.append_values_per_s, append_x
        ),
        append_x >= 10.0 && clean(ts),
    );
    report.check(
        "catch-up read ≥ 5× the reference's speed (100,000-value stream)",
        format!(
            "{:.0} vs {:.0} values/s: {:.2}×",
            ts.catchup_values_per_s, rf.catchup_values_per_s, catchup_x
        ),
        catchup_x >= 5.0 && clean(ts),
    );
    report.check(
        "live fan-out p99 ≤ the reference's (1,000 SSE readers)",
        format!("{:.2} ms vs {:.2} ms", ts.fanout_p99_ms, rf.fanout_p99_ms),
        ts.fanout_p99_ms <= rf.fanout_p99_ms && clean(ts),
    );
    report.check(
        "every check of threadstream's answers passed (all values, in order)",
        if clean(ts) {
            "all passed".into()
        } else {
            ts.problems.join("; ")
        },
        clean(ts),
    );
    for (which, m) in [(Which::Threadstream, ts), (Which::Reference, rf)] {
        for p in &m.problems {
            report.note(format!("{}: {p}", which.label()));
        }
    }
    report.note(format!(
        "Load: append {} producers × {:.0} s, {} values per request, lingerMs 5, maxInFlight 5; \
         catch-up {} values pre-filled in POSTs of {}; fan-out {} readers, {} messages/s for {:.0} s.",
        load.producers,
        load.append_secs,
        load.batch,
        load.catchup_values,
        load.fill_batch,
        load.readers,
        load.rate,
        load.fanout_secs
    ));
    report.note(
        "The load generators (Node producers, the Rust readers) share the 2 cores with the server.",
    );
    let results: Vec<Measured> = results;
    for m in results {
        report.row(m.append);
        report.row(m.catchup);
        report.row(m.fanout);
    }
    Ok(())
}

async fn measure(load: &Load, which: Which, server: &Server) -> anyhow::Result<Measured> {
    let base = server.url("");
    let mut problems = Vec::new();
    eprintln!("  {}: append", which.label());
    let (append, append_values_per_s) = append(load, which, server, &base, &mut problems).await?;
    eprintln!("  {}: catch-up", which.label());
    let (catchup, catchup_values_per_s) =
        catchup(load, which, server, &base, &mut problems).await?;
    eprintln!("  {}: fan-out", which.label());
    let (fanout, fanout_p99_ms) = fanout(load, which, server, &base, &mut problems).await?;
    Ok(Measured {
        append,
        append_values_per_s,
        catchup,
        catchup_values_per_s,
        fanout,
        fanout_p99_ms,
        problems,
    })
}

async fn append(
    load: &Load,
    which: Which,
    server: &Server,
    base: &str,
    problems: &mut Vec<String>,
) -> anyhow::Result<(Row, f64)> {
    let w = Window::start(server.pid, "server");
    let out = Command::new("node")
        .arg(node_dir().join("producers.mjs"))
        .args(["--url", base])
        .args(["--producers", &load.producers.to_string()])
        .args(["--seconds", &load.append_secs.to_string()])
        .args(["--batch", &load.batch.to_string()])
        .stdin(Stdio::null())
        .output()
        .await
        .context("cannot run node bench/node/producers.mjs")?;
    let usage = w.finish().await;
    if !out.status.success() {
        bail!(
            "producers.mjs failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let r: Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "producers.mjs printed no JSON: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    let values = r["values"].as_u64().unwrap_or(0);
    let secs = r["seconds"].as_f64().unwrap_or(0.0);
    let verified = r["streams_verified"].as_u64().unwrap_or(0);
    let errors = r["error_count"].as_u64().unwrap_or(0);
    if verified != load.producers as u64 || errors > 0 {
        problems.push(format!(
            "append: {verified} of {} streams read back whole and in order, {errors} producer errors: {}",
            load.producers,
            r["problems"]
        ));
    }
    let post = &r["post_ms"];
    let latency = (|| {
        Some(Latency {
            samples: r["posts"].as_u64()? as usize,
            p50_ms: round(post["p50"].as_f64()?, 3),
            p99_ms: round(post["p99"].as_f64()?, 3),
            max_ms: round(post["max"].as_f64()?, 3),
        })
    })();
    let row = Row::new(
        format!(
            "{}: append, {} IdempotentProducers",
            which.label(),
            load.producers
        ),
        which.kind(),
        values,
        secs,
        "values/s",
    )
    .latency(latency)
    .usage(usage)
    .extra("client", r["client"].clone())
    .extra("values_per_request", r["batch_values"].clone())
    .extra("value_bytes", r["value_bytes"].clone())
    .extra("linger_ms", r["linger_ms"].clone())
    .extra("max_in_flight", r["max_in_flight"].clone())
    .extra("requests_by_status", r["statuses"].clone())
    .extra("streams_verified", verified)
    .extra("producer_errors", errors)
    .extra("latency_is", "per producer POST, sent → answered");
    let tp = row.throughput;
    Ok((row, tp))
}

/// A catch-up value: its index and a token delta, as an AI token stream would hold.
fn catchup_value(i: usize) -> String {
    format!(r#"{{"i":{i},"type":"text-delta","id":"msg-1","delta":" token"}}"#)
}

async fn catchup(
    load: &Load,
    which: Which,
    server: &Server,
    base: &str,
    problems: &mut Vec<String>,
) -> anyhow::Result<(Row, f64)> {
    let client = http_client();
    let url = format!("{base}/v1/stream/catchup");
    let resp = client
        .put(&url)
        .header("content-type", "application/json")
        .send()
        .await?;
    ensure!(
        resp.status().is_success(),
        "create answered {}",
        resp.status()
    );
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
async fn read_whole(client: &reqwest::Client, url: &str) -> anyhow::Result<Vec<bytes::Bytes>> {
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

/// One fan-out reader: the (index, latency in µs) of every value it received, in order.
async fn read_fanout(
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
struct Stamp {
    i: u32,
    /// Sent at, µs since the bench's base instant.
    t: u64,
}

async fn fanout(
    load: &Load,
    which: Which,
    server: &Server,
    base: &str,
    problems: &mut Vec<String>,
) -> anyhow::Result<(Row, f64)> {
    let client = http_client();
    let url = format!("{base}/v1/stream/fanout");
    let resp = client
        .put(&url)
        .header("content-type", "application/json")
        .send()
        .await?;
    ensure!(
        resp.status().is_success(),
        "create answered {}",
        resp.status()
    );
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

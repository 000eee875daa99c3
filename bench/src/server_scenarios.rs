//! Scenarios against the real `threadstream serve` process: ingest-http, fanout, live-latency,
//! idle-sse, replay, slow-consumers.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use threadstream_store::{Durability, EventLog, NotifyMode};

use crate::client::{
    ack_latencies, burst_append, http_client, paced_append, post_events, subscribe_until, us, Acks,
    ReadMode, Received,
};
use crate::data::{delta, fill_thread, ingest_body, run_start};
use crate::procstat::Window;
use crate::report::{Latency, Report, Row};
use crate::server::{Server, Store};
use crate::sse::SseConn;
use crate::Ctx;

const EVENTS_PATH: &str = "/instance-ai/events/";

/// Starts a thread with a live run (so deltas are accepted); returns the run-start's id.
pub(crate) async fn open_run(
    client: &reqwest::Client,
    server: &Server,
    thread: &str,
) -> anyhow::Result<i64> {
    let ids = post_events(
        client,
        server.addr,
        thread,
        ingest_body(&[run_start(&format!("r-{thread}"), "a1")]),
    )
    .await?;
    ids.last().copied().context("no id")
}

pub(crate) fn deltas_body(thread: &str, n: usize) -> bytes::Bytes {
    let run = format!("r-{thread}");
    let events: Vec<_> = (0..n).map(|_| delta(&run, "a1", "token ")).collect();
    ingest_body(&events)
}

pub async fn ingest_http(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let clients = if ctx.quick { 16 } else { 100 };
    let dur = Duration::from_secs_f64(if ctx.quick { 1.5 } else { 10.0 });
    const BATCH: usize = 50;
    let dir = tempfile::tempdir()?;
    let server = Server::start(&ctx.bin()?, Store::Sqlite(dir.path()), &[]).await?;
    let client = http_client();
    for i in 0..clients {
        open_run(&client, &server, &format!("h-{i}")).await?;
    }
    let w = Window::start(server.pid, "server");
    let start = Instant::now();
    let deadline = start + dur;
    let mut tasks = Vec::new();
    for i in 0..clients {
        let client = client.clone();
        let addr = server.addr;
        tasks.push(tokio::spawn(async move {
            let thread = format!("h-{i}");
            let body = deltas_body(&thread, BATCH);
            let mut lat = Vec::new();
            let (mut ok, mut err) = (0u64, 0u64);
            while Instant::now() < deadline {
                let t0 = Instant::now();
                match post_events(&client, addr, &thread, body.clone()).await {
                    Ok(_) => {
                        lat.push(t0.elapsed().as_nanos() as u64);
                        ok += 1;
                    }
                    Err(_) => err += 1,
                }
            }
            (ok, err, lat)
        }));
    }
    let (mut posts, mut errors, mut lat) = (0u64, 0u64, Vec::new());
    for t in tasks {
        let (o, e, l) = t.await?;
        posts += o;
        errors += e;
        lat.extend(l);
    }
    let secs = start.elapsed().as_secs_f64();
    let usage = w.finish().await;
    server.stop().await;
    let row = Row::new(
        format!("POST /threads/:id/events, batches of {BATCH}, {clients} clients, SQLite FULL"),
        "threadstream",
        posts * BATCH as u64,
        secs,
        "events/s",
    )
    .latency(Latency::from_nanos(lat))
    .usage(usage)
    .extra("requests", posts)
    .extra("errors", errors)
    .extra("latency_is", "per request (50 events)");
    report.check(
        "ingest over HTTP ≥ 100,000 events/s",
        format!("{:.0} events/s", row.throughput),
        row.throughput >= 100_000.0,
    );
    report.row(row);
    Ok(())
}

/// Connects `n` subscribers to `thread`, each reading from the event `first` on (which must
/// exist: each waits for it, so every stream is surely open when this returns), at most 128
/// connecting at a time.
pub(crate) async fn connect_many(
    server: &Server,
    thread: &str,
    first: i64,
    n: usize,
    rcvbuf: Option<u32>,
) -> anyhow::Result<Vec<SseConn>> {
    let sem = Arc::new(tokio::sync::Semaphore::new(128));
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let sem = sem.clone();
        let addr = server.addr;
        let path = format!("{EVENTS_PATH}{thread}");
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire_owned().await.expect("semaphore");
            let mut c = SseConn::connect(addr, &path, Some(first - 1), rcvbuf).await?;
            tokio::time::timeout(Duration::from_secs(60), c.first_frame())
                .await
                .context("no first frame within 60 s")??;
            anyhow::Ok(c)
        }));
    }
    let mut conns = Vec::with_capacity(n);
    for t in tasks {
        conns.push(t.await??);
    }
    Ok(conns)
}

pub(crate) fn spawn_subscribers(
    conns: Vec<SseConn>,
    stop: &Arc<AtomicI64>,
    mode: ReadMode,
    limit: Duration,
) -> Vec<tokio::task::JoinHandle<anyhow::Result<Received>>> {
    conns
        .into_iter()
        .map(|c| tokio::spawn(subscribe_until(c, stop.clone(), mode.clone(), limit)))
        .collect()
}

pub async fn fanout(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let subs = if ctx.quick { 50 } else { 1000 };
    let paced = Duration::from_secs_f64(if ctx.quick { 1.0 } else { 10.0 });
    let burst_posts = if ctx.quick { 40 } else { 200 };
    let dir = tempfile::tempdir()?;
    let server = Server::start(&ctx.bin()?, Store::Sqlite(dir.path()), &[]).await?;
    let client = http_client();
    let thread = "fan";
    let id0 = open_run(&client, &server, thread).await?;
    let conns = connect_many(&server, thread, id0, subs, None).await?;
    let stop = Arc::new(AtomicI64::new(i64::MAX));
    let readers = spawn_subscribers(conns, &stop, ReadMode::fast(), Duration::from_secs(600));

    // Phase 1, paced at the target: 500 events/s (5 every 10 ms) × subscribers deliveries/s.
    let acks1 = Acks::default();
    let w = Window::start(server.pid, "server");
    let t1 = us(Instant::now());
    let (_, e1, _) = paced_append(
        &client,
        server.addr,
        thread,
        deltas_body(thread, 5),
        Duration::from_millis(10),
        paced,
        &acks1,
    )
    .await;
    let usage1 = w.finish().await;
    // Phase 2, as fast as 4 appenders can post batches of 50.
    let acks2 = Acks::default();
    let w = Window::start(server.pid, "server");
    let t2 = us(Instant::now());
    let (_, e2, _) = burst_append(
        &client,
        server.addr,
        thread,
        deltas_body(thread, 50),
        4,
        burst_posts,
        &acks2,
    )
    .await;
    let last = *acks2.sorted_ids().last().context("no acks")?;
    stop.store(last, Ordering::Release);
    let mut received = Vec::with_capacity(subs);
    for r in readers {
        received.push(r.await??);
    }
    let usage2 = w.finish().await;
    server.stop().await;

    let phase = |acks: &Acks, t_start: u64, name: String, usage| {
        let map = acks.map();
        let mut count = 0u64;
        let mut last_at = t_start;
        let mut lat = Vec::new();
        for r in &received {
            let mine: Vec<&(i64, u64)> = r.iter().filter(|(id, _)| map.contains_key(id)).collect();
            count += mine.len() as u64;
            if let Some((_, at)) = mine.last() {
                last_at = last_at.max(*at);
            }
            lat.extend(ack_latencies(&map, mine));
        }
        let expected = (map.len() * received.len()) as u64;
        Row::new(
            name,
            "threadstream",
            count,
            (last_at - t_start) as f64 / 1e6,
            "deliveries/s",
        )
        .latency(Latency::from_nanos(lat))
        .usage(usage)
        .extra("events_appended", map.len() as u64)
        .extra("deliveries_expected", expected)
        .extra("latency_is", "append acknowledged → received")
    };
    let r1 = phase(
        &acks1,
        t1,
        format!("{subs} subscribers, appends paced at 500 events/s"),
        usage1,
    )
    .extra("append_errors", e1);
    let r2 = phase(
        &acks2,
        t2,
        format!("{subs} subscribers, 4 appenders unpaced (batches of 50)"),
        usage2,
    )
    .extra("append_errors", e2);
    for r in [&r1, &r2] {
        let want = r.extra["deliveries_expected"].as_u64().unwrap_or(0);
        if r.count != want {
            report.note(format!(
                "{}: {} deliveries of {} expected",
                r.name, r.count, want
            ));
        }
    }
    let best = r1.throughput.max(r2.throughput);
    let p99 = r1.latency.as_ref().map(|l| l.p99_ms).unwrap_or(f64::MAX);
    report.check(
        "fan-out ≥ 500,000 deliveries/s",
        format!("{best:.0} deliveries/s (best phase)"),
        best >= 500_000.0,
    );
    report.check(
        "fan-out append-acknowledged → received p99 ≤ 20 ms (paced phase)",
        format!("{p99:.2} ms"),
        p99 <= 20.0,
    );
    report.note("Subscribers run in this (bench) process and share the 2 cores with the server.");
    report.row(r1);
    report.row(r2);
    Ok(())
}

pub async fn live_latency(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let n = if ctx.quick { 200 } else { 2000 };
    let dir = tempfile::tempdir()?;
    let server = Server::start(&ctx.bin()?, Store::Sqlite(dir.path()), &[]).await?;
    let client = http_client();
    let thread = "live";
    let id0 = open_run(&client, &server, thread).await?;
    let mut conn = SseConn::connect(
        server.addr,
        &format!("{EVENTS_PATH}{thread}"),
        Some(id0 - 1),
        None,
    )
    .await?;
    conn.first_frame().await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(i64, Instant)>();
    let reader = tokio::spawn(async move {
        loop {
            let r = conn
                .read_some(64 * 1024, &mut |id, _, at| {
                    if let Some(id) = id {
                        let _ = tx.send((id, at));
                    }
                })
                .await;
            if !matches!(r, Ok(crate::sse::Read::Data)) {
                return;
            }
        }
    });
    let body = deltas_body(thread, 1);
    let (mut from_ack, mut from_send, mut post) = (Vec::new(), Vec::new(), Vec::new());
    let w = Window::start(server.pid, "server");
    let start = Instant::now();
    for _ in 0..n {
        let sent = Instant::now();
        let ids = post_events(&client, server.addr, thread, body.clone()).await?;
        let acked = Instant::now();
        let want = ids[0];
        let at = loop {
            let (id, at) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .context("event not received within 10 s")?
                .context("stream ended")?;
            if id >= want {
                break at;
            }
        };
        from_ack.push(at.saturating_duration_since(acked).as_nanos() as u64);
        from_send.push((at - sent).as_nanos() as u64);
        post.push((acked - sent).as_nanos() as u64);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    let usage = w.finish().await;
    reader.abort();
    server.stop().await;
    let r_ack = Row::new(
        "1 subscriber: append acknowledged → received",
        "threadstream",
        n as u64,
        secs,
        "events/s",
    )
    .latency(Latency::from_nanos(from_ack))
    .usage(usage.clone())
    .extra("pause_between_appends_ms", 2);
    let r_send = Row::new(
        "1 subscriber: POST sent → received",
        "info",
        n as u64,
        secs,
        "events/s",
    )
    .latency(Latency::from_nanos(from_send));
    let r_post = Row::new(
        "POST of 1 event: sent → acknowledged (durable commit)",
        "info",
        n as u64,
        secs,
        "events/s",
    )
    .latency(Latency::from_nanos(post));
    let l = r_ack.latency.clone().context("no samples")?;
    report.check(
        "live latency p50 ≤ 1 ms",
        format!("{:.3} ms", l.p50_ms),
        l.p50_ms <= 1.0,
    );
    report.check(
        "live latency p99 ≤ 5 ms",
        format!("{:.3} ms", l.p99_ms),
        l.p99_ms <= 5.0,
    );
    report.row(r_ack);
    report.row(r_send);
    report.row(r_post);
    Ok(())
}

pub async fn idle_sse(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let n = if ctx.quick { 500 } else { 10_000 };
    let limit = crate::procstat::raise_nofile(2 * n as u64 + 1024);
    if limit < n as u64 + 256 {
        bail!("open-file limit {limit} is too low for {n} connections: raise the hard limit (ulimit -Hn)");
    }
    report.note(format!(
        "RLIMIT_NOFILE raised to {limit} in the bench process; the server inherits it (run by hand: `ulimit -n 65536` before `threadstream serve`)."
    ));
    let dir = tempfile::tempdir()?;
    let server = Server::start(&ctx.bin()?, Store::Sqlite(dir.path()), &[]).await?;
    // Every subscriber watches a thread of its own that holds one event: it receives that, then
    // idles (as a client that restored a session does).
    let client = http_client();
    let sem = Arc::new(tokio::sync::Semaphore::new(64));
    let mut setup = Vec::new();
    for i in 0..n + 1 {
        let (client, sem, addr) = (client.clone(), sem.clone(), server.addr);
        setup.push(tokio::spawn(async move {
            let _p = sem.acquire_owned().await.expect("semaphore");
            let t = format!("idle-{i}");
            post_events(
                &client,
                addr,
                &t,
                ingest_body(&[run_start(&format!("r-{t}"), "a1")]),
            )
            .await
        }));
    }
    for s in setup {
        s.await??;
    }
    // Warm up the code paths (and the allocator) with a few connections, then let it settle.
    {
        let warm = connect_many(&server, &format!("idle-{n}"), 1, 20, None).await;
        drop(warm);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = server.rss_kb();
    let w = Window::start(server.pid, "server");
    let start = Instant::now();
    let mut conns = Vec::with_capacity(n);
    let sem = Arc::new(tokio::sync::Semaphore::new(128));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let sem = sem.clone();
        let addr = server.addr;
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire_owned().await.expect("semaphore");
            let t0 = Instant::now();
            let mut c =
                SseConn::connect(addr, &format!("{EVENTS_PATH}idle-{i}"), None, None).await?;
            c.first_frame().await?;
            anyhow::Ok((c, t0.elapsed()))
        }));
    }
    let mut connect_lat = Vec::with_capacity(n);
    for t in tasks {
        let (c, l) = t.await??;
        conns.push(c);
        connect_lat.push(l.as_nanos() as u64);
    }
    let secs = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = server.rss_kb();
    let usage = w.finish().await;
    let per_conn_kb = (after.saturating_sub(before)) as f64 / n as f64;
    drop(conns);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_close = server.rss_kb();
    server.stop().await;
    let row = Row::new(
        format!("{n} idle SSE subscribers, one per thread"),
        "threadstream",
        n as u64,
        secs,
        "connects/s",
    )
    .latency(Latency::from_nanos(connect_lat))
    .usage(usage)
    .extra("rss_before_kb", before)
    .extra("rss_with_all_connected_kb", after)
    .extra("rss_after_close_kb", after_close)
    .extra(
        "rss_per_connection_kb",
        crate::report::round(per_conn_kb, 2),
    )
    .extra("latency_is", "connect → first event received");
    report.check(
        "idle SSE: ≤ 8 KB of server RSS per connection",
        format!("{per_conn_kb:.2} KB"),
        per_conn_kb <= 8.0,
    );
    report.row(row);
    Ok(())
}

/// Replays a thread of `events` events from `store` `reps` times through fresh connections.
async fn replay_once(
    ctx: &Ctx,
    store: Store<'_>,
    events: usize,
    reps: usize,
) -> anyhow::Result<Row> {
    let server = Server::start(&ctx.bin()?, store, &[]).await?;
    let w = Window::start(server.pid, "server");
    let mut times = Vec::new();
    for _ in 0..reps {
        let t0 = Instant::now();
        let mut conn =
            SseConn::connect(server.addr, &format!("{EVENTS_PATH}replay"), None, None).await?;
        let mut n = 0usize;
        while n < events {
            let r = tokio::time::timeout(
                Duration::from_secs(60),
                conn.read_some(256 * 1024, &mut |id, _, _| {
                    if id.is_some() {
                        n += 1;
                    }
                }),
            )
            .await
            .context("replay stalled")??;
            if let crate::sse::Read::Eof = r {
                bail!("stream ended after {n} events");
            }
        }
        times.push(t0.elapsed());
    }
    let usage = w.finish().await;
    server.stop().await;
    let total = times.iter().map(|d| d.as_secs_f64()).sum::<f64>();
    Ok(Row::new(
        String::new(),
        "threadstream",
        (events * reps) as u64,
        total,
        "events/s",
    )
    .latency(Latency::from_durations(&times))
    .usage(usage)
    .extra("replays", reps as u64)
    .extra(
        "latency_is",
        "whole replay of the thread (connect → last event)",
    ))
}

pub async fn replay(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let runs = if ctx.quick { 5 } else { 100 };
    let events = runs * 1000;
    let reps = if ctx.quick { 3 } else { 7 };
    // SQLite
    let dir = tempfile::tempdir()?;
    {
        let log = EventLog::open_sqlite(dir.path(), Durability::Normal).await?;
        fill_thread(&log, "replay", runs, 1000, 1000).await?;
        log.shutdown().await;
    }
    let mut row = replay_once(ctx, Store::Sqlite(dir.path()), events, reps).await?;
    row.name = format!("fresh client replays a {events}-event thread, SQLite");
    let p50 = row.latency.as_ref().map(|l| l.p50_ms).unwrap_or(f64::MAX);
    report.check(
        "replay of a 100,000-event thread from SQLite ≤ 250 ms",
        format!("p50 {p50:.0} ms ({events} events)"),
        p50 <= 250.0 && events >= 100_000,
    );
    report.row(row);
    // SQLite, the thread written interleaved with 9 others (10 events per append each), so a page
    // of it is many short runs of the thread index (not a target: what interleaving costs).
    let dir = tempfile::tempdir()?;
    {
        let log = EventLog::open_sqlite(dir.path(), Durability::Normal).await?;
        let threads: Vec<String> = std::iter::once("replay".to_string())
            .chain((1..10).map(|i| format!("other-{i}")))
            .collect();
        let fills = threads.iter().map(|t| fill_thread(&log, t, runs, 1000, 10));
        for r in futures::future::join_all(fills).await {
            r?;
        }
        log.shutdown().await;
    }
    let mut row = replay_once(ctx, Store::Sqlite(dir.path()), events, reps).await?;
    row.name =
        format!("fresh client replays a {events}-event thread interleaved with 9 others, SQLite");
    row.kind = "variant".into();
    report.row(row);
    // Postgres
    let (url, name) = crate::pg::create_db(&ctx.pg_admin, "tsbench_replay").await?;
    let result = async {
        let log = EventLog::open_postgres(&url, NotifyMode::Local).await?;
        fill_thread(&log, "replay", runs, 1000, 1000).await?;
        log.shutdown().await;
        replay_once(ctx, Store::Postgres(&url), events, reps).await
    }
    .await;
    crate::pg::drop_db(&ctx.pg_admin, &name).await;
    let mut row = result?;
    row.name = format!("fresh client replays a {events}-event thread, Postgres");
    let p50 = row.latency.as_ref().map(|l| l.p50_ms).unwrap_or(f64::MAX);
    report.check(
        "replay of a 100,000-event thread from Postgres ≤ 500 ms",
        format!("p50 {p50:.0} ms ({events} events)"),
        p50 <= 500.0 && events >= 100_000,
    );
    report.row(row);
    if ctx.quick {
        report.note("--quick replays a smaller thread: the targets are only judged on full runs.");
    }
    Ok(())
}

pub async fn slow_consumers(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let slow_n = if ctx.quick { 20 } else { 100 };
    let fast_n = if ctx.quick { 4 } else { 10 };
    let dur = Duration::from_secs_f64(if ctx.quick { 1.0 } else { 5.0 });
    let dir = tempfile::tempdir()?;
    let server = Server::start(&ctx.bin()?, Store::Sqlite(dir.path()), &[]).await?;
    let client = http_client();

    // One phase: fast subscribers (and `slow` slow ones) on a fresh thread while it appends
    // 10,000 events/s (50 every 5 ms).
    struct Phase {
        fast: Row,
        slow_ok: usize,
        slow_total: usize,
        catch_up_secs: f64,
        rss_max_kb: u64,
        rss_start_kb: u64,
        send_queue_kb: u64,
        problems: Vec<String>,
    }
    let run_phase = |thread: &'static str, slow: usize| {
        let client = client.clone();
        let server = &server;
        async move {
            let id0 = open_run(&client, server, thread).await?;
            let fast_conns = connect_many(server, thread, id0, fast_n, None).await?;
            let slow_conns = connect_many(server, thread, id0, slow, Some(4096)).await?;
            let stop = Arc::new(AtomicI64::new(i64::MAX));
            let slow_flag = Arc::new(AtomicBool::new(true));
            let fast = spawn_subscribers(
                fast_conns,
                &stop,
                ReadMode::fast(),
                Duration::from_secs(600),
            );
            // 1 KB/s: 256 bytes every 250 ms.
            let slow_mode = ReadMode {
                slow: Some((256, Duration::from_millis(250), slow_flag.clone())),
            };
            let slows = spawn_subscribers(slow_conns, &stop, slow_mode, Duration::from_secs(900));
            let acks = Acks::default();
            let w = Window::start(server.pid, "server");
            let (_, errors, secs) = paced_append(
                &client,
                server.addr,
                thread,
                deltas_body(thread, 50),
                Duration::from_millis(5),
                dur,
                &acks,
            )
            .await;
            let expected = acks.sorted_ids();
            let last = *expected.last().context("no acks")?;
            // At its fullest: the slow clients have read next to nothing of what was appended.
            let send_queue_kb = crate::procstat::tcp_send_queue_bytes(server.addr.port()) / 1024;
            stop.store(last, Ordering::Release);
            let mut fast_rx = Vec::new();
            for f in fast {
                fast_rx.push(f.await??);
            }
            let rss_max_during = w.max_so_far();
            // Appends stopped: the slow clients now read at full speed and must get everything.
            let t_catch = Instant::now();
            slow_flag.store(false, Ordering::Relaxed);
            let mut slow_ok = 0;
            let mut problems = Vec::new();
            for s in slows {
                let got: Vec<i64> = s
                    .await??
                    .into_iter()
                    .map(|x| x.0)
                    .filter(|&i| i > id0)
                    .collect();
                if got == expected {
                    slow_ok += 1;
                } else if problems.len() < 3 {
                    problems.push(format!(
                        "a slow client got {} events (expected {}), in order: {}",
                        got.len(),
                        expected.len(),
                        got.windows(2).all(|w| w[0] < w[1])
                    ));
                }
            }
            let catch_up_secs = t_catch.elapsed().as_secs_f64();
            let usage = w.finish().await;
            let map = acks.map();
            let mut lat = Vec::new();
            let mut count = 0u64;
            for r in &fast_rx {
                count += r.iter().filter(|x| x.0 > id0).count() as u64;
                lat.extend(ack_latencies(&map, r.iter()));
                let ids: Vec<i64> = r.iter().map(|x| x.0).filter(|&i| i > id0).collect();
                if ids != expected && problems.len() < 3 {
                    problems.push("a fast client missed or reordered events".into());
                }
            }
            let fast = Row::new(
                format!(
                    "{fast_n} fast clients, {slow} slow (1 KB/s) clients, 10,000 events/s appended"
                ),
                "threadstream",
                count,
                secs,
                "deliveries/s",
            )
            .latency(Latency::from_nanos(lat))
            .usage(usage.clone())
            .extra("events_appended", expected.len() as u64)
            .extra("append_errors", errors)
            .extra(
                "latency_is",
                "append acknowledged → received (fast clients)",
            );
            anyhow::Ok(Phase {
                fast,
                slow_ok,
                slow_total: slow,
                catch_up_secs,
                rss_max_kb: rss_max_during,
                rss_start_kb: usage.rss_start_kb,
                send_queue_kb,
                problems,
            })
        }
    };
    let a = run_phase("sc-a", 0).await?;
    let b = run_phase("sc-b", slow_n).await?;
    server.stop().await;
    let p99 = |p: &Phase| {
        p.fast
            .latency
            .as_ref()
            .map(|l| l.p99_ms)
            .unwrap_or(f64::MAX)
    };
    let ratio = p99(&b) / p99(&a).max(1e-9);
    let growth_kb = b.rss_max_kb.saturating_sub(b.rss_start_kb);
    report.ratio("fast p99 with slow clients / without", ratio);
    report.check(
        "slow consumers: fast clients' p99 within 2× of the run without slow clients",
        format!("{:.2} ms vs {:.2} ms = {ratio:.2}×", p99(&b), p99(&a)),
        ratio <= 2.0,
    );
    report.check(
        "slow consumers: every slow client receives every event in order after catching up",
        format!("{}/{} complete and in order", b.slow_ok, b.slow_total),
        b.slow_ok == b.slow_total && b.problems.is_empty(),
    );
    let queue_per_slow = b.send_queue_kb.saturating_sub(a.send_queue_kb) as f64 / slow_n as f64;
    report.check(
        "slow consumers: server memory stays bounded (stated bound: 256 KB of RSS over the idle RSS and 256 KB of kernel send queue per slow client)",
        format!(
            "max {:.1} MB, +{:.0} KB over the start = {:.1} KB of RSS per slow client; send queues {:.0} KB = {queue_per_slow:.1} KB per slow client",
            b.rss_max_kb as f64 / 1024.0,
            growth_kb as f64,
            growth_kb as f64 / slow_n as f64,
            b.send_queue_kb as f64,
        ),
        growth_kb as f64 / slow_n as f64 <= 256.0 && queue_per_slow <= 256.0,
    );
    for p in a.problems.iter().chain(b.problems.iter()) {
        report.note(p.clone());
    }
    let mut fb = b.fast;
    fb.extra.insert(
        "slow_catch_up_seconds".into(),
        crate::report::round(b.catch_up_secs, 2).into(),
    );
    fb.extra.insert("rss_max_kb".into(), b.rss_max_kb.into());
    fb.extra
        .insert("send_queue_kb".into(), b.send_queue_kb.into());
    let mut fa = a.fast;
    fa.kind = "baseline".into();
    fa.extra.insert("rss_max_kb".into(), a.rss_max_kb.into());
    let _ = a.catch_up_secs;
    report.row(fa);
    report.row(fb);
    Ok(())
}

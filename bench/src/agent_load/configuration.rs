//! One configuration of `agent-load`: its servers on a fresh store (a Postgres database or a
//! SQLite data dir), the provider, watchers and ingest agents against them, the measurement
//! windows, the check of every watcher against the log, and the row that reports it. The
//! comparisons across configurations (floors, fleet and feed ratios) are `mod.rs`'s.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};

use super::cost::Cost;
use super::logdb::{LogDb, StoreKind};
use super::watch::{self, Protocol, Seen};
use super::{check, feed, ingest, kill, load_avg, LoadOpts};
use crate::fake_llm::{self, Pace};
use crate::haproxy::Haproxy;
use crate::procstat::{ProcessGroupWindow, Window};
use crate::report::{round, Latency, Report, Row, Usage};
use crate::server::{Server, Store};
use crate::Ctx;

/// Where a configuration's servers keep their log.
enum Target {
    Postgres { url: String, db: String },
    Sqlite(tempfile::TempDir),
}

/// The run's row, and with a kill the row of what was written during the reconnect storm.
pub(super) type Rows = (Row, Option<Row>);

/// One configuration: `n` instances on a fresh database (or data dir).
pub(super) async fn one(
    ctx: &Ctx,
    o: &LoadOpts,
    store: StoreKind,
    n: usize,
    feed: Option<&feed::NatsServer>,
    report: &mut Report,
) -> anyhow::Result<Rows> {
    match store {
        StoreKind::Postgres => {
            let (url, db) = crate::pg::create_db(&ctx.pg_admin, "tsbench_agents").await?;
            let r = run(
                ctx,
                o,
                n,
                &Target::Postgres {
                    url,
                    db: db.clone(),
                },
                feed,
                report,
            )
            .await;
            crate::pg::drop_db(&ctx.pg_admin, &db).await;
            r
        }
        StoreKind::Sqlite => {
            let dir = tempfile::Builder::new()
                .prefix("tsbench-agents")
                .tempdir()?;
            run(ctx, o, n, &Target::Sqlite(dir), feed, report).await
        }
    }
}

async fn run(
    ctx: &Ctx,
    o: &LoadOpts,
    n: usize,
    target: &Target,
    nats: Option<&feed::NatsServer>,
    report: &mut Report,
) -> anyhow::Result<Rows> {
    let kind = match target {
        Target::Postgres { .. } => StoreKind::Postgres,
        Target::Sqlite(_) => StoreKind::Sqlite,
    };
    let pace = Pace {
        tokens_per_sec: o.tokens_per_sec,
        tokens_per_run: o.tokens_per_run,
    };
    let (provider, counters) = fake_llm::start(pace).await?;
    let base = format!("http://{provider}/v1");
    let bin = ctx.bin()?;
    let mut args = vec!["--model", "openai/fake", "--openai-base-url", base.as_str()];
    let orphan = o.run_orphan_secs.to_string();
    if let Some(nats) = nats {
        args.extend(["--change-feed", nats.url.as_str()]);
    }
    if o.haproxy {
        // As docs/haproxy.cfg asks (above its fall × inter), and the fleet test's orphan time.
        args.extend([
            "--shutdown-unready-ms",
            "1500",
            "--run-orphan-secs",
            orphan.as_str(),
        ]);
    }
    let mut servers = Vec::with_capacity(n);
    for _ in 0..n {
        let store = match target {
            Target::Postgres { url, .. } => Store::Postgres(url),
            Target::Sqlite(dir) => Store::Sqlite(dir.path()),
        };
        servers.push(Server::start(&bin, store, &args).await?);
    }
    let lb = if o.haproxy {
        let backends: Vec<_> = servers.iter().map(|s| s.addr).collect();
        Some(Arc::new(Haproxy::start(&backends).await?))
    } else {
        None
    };
    // Where clients go: the instances, or HAProxy alone.
    let addrs: Vec<_> = match &lb {
        Some(h) => vec![h.addr; n],
        None => servers.iter().map(|s| s.addr).collect(),
    };
    let load_start = load_avg();
    // The bench's own connection to the log (the servers have created it by now).
    let mut admin = match target {
        Target::Postgres { url, .. } => LogDb::postgres(url).await?,
        Target::Sqlite(dir) => LogDb::sqlite(dir.path()).await?,
    };
    let pg_max = Arc::new(AtomicU64::new(0));
    let pg_sampler = match target {
        Target::Postgres { db, .. } => Some(sample_pg_connections(
            ctx.pg_admin.clone(),
            db.clone(),
            pg_max.clone(),
        )),
        Target::Sqlite(_) => None,
    };

    // Watchers first, each reading its thread from the start: every event of the run is theirs.
    let threads: Vec<String> = (0..o.runs).map(|i| format!("load-{i}")).collect();
    let targets: Vec<Arc<AtomicI64>> = (0..o.runs)
        .map(|_| Arc::new(AtomicI64::new(i64::MAX)))
        .collect();
    let limit = Duration::from_secs(600);
    let mut watchers = Vec::with_capacity(o.runs * o.watchers_per_run);
    for (i, t) in threads.iter().enumerate() {
        for j in 0..o.watchers_per_run {
            let protocol = if j % 2 == 0 {
                Protocol::N8n
            } else {
                Protocol::AgUi
            };
            // A run's watchers are spread over the instances, so delivery crosses them; with
            // thread affinity they read where the run is written (its chat goes to `i % n`).
            let addr = if o.thread_affinity {
                addrs[i % n]
            } else {
                addrs[(i + j) % n]
            };
            watchers.push(tokio::spawn(watch::watch(
                addr,
                protocol,
                t.clone(),
                targets[i].clone(),
                limit,
                o.haproxy,
            )));
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut windows: Vec<Window> = servers
        .iter()
        .map(|s| Window::start(s.pid, "server"))
        .collect();
    let feed = nats.map(|nats| {
        (
            feed::FeedConsumer::start(nats.url.clone(), "THREADSTREAM".into()),
            Window::start(nats.pid, "nats-server"),
        )
    });
    // The bench's own clients (provider, watchers, ingest agents): what the machine spends
    // beside the servers, Postgres and HAProxy.
    let clients = Window::this_process();
    // The store's own processes (Postgres's), over the same window.
    let store_window = match target {
        Target::Postgres { db, .. } => Some(ProcessGroupWindow::postgres(db)),
        Target::Sqlite(_) => None,
    };
    let wal_before = admin.wal_lsn().await?;
    let appended_before = admin.max_id().await?;
    let start = Instant::now();
    let stop_ingest = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ingest = ingest::start(
        &addrs,
        o.ingest_agents,
        o.tokens_per_sec,
        stop_ingest.clone(),
        o.haproxy,
    );
    // The first instance (HAProxy's ts1) dies mid-load.
    let kill = match (o.kill_one_after, &lb) {
        (Some(secs), Some(lb)) => Some(kill::schedule(
            servers.remove(0),
            windows.remove(0),
            lb.clone(),
            start + Duration::from_secs_f64(secs),
        )),
        _ => None,
    };
    // The runs start over a second (people do not press Enter in the same millisecond).
    let client = crate::client::http_client();
    let ramp = Duration::from_secs(1);
    let mut starts = Vec::with_capacity(o.runs);
    for (i, t) in threads.iter().enumerate() {
        let (client, url) = (
            client.clone(),
            format!("http://{}/instance-ai/chat/{t}", addrs[i % n]),
        );
        let at = start + ramp.mul_f64(i as f64 / o.runs.max(1) as f64);
        // Behind HAProxy a chat is retried with its key, as a client would.
        let key = o.haproxy.then(|| format!("chat-{t}"));
        starts.push(tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            start_chat(&client, &url, key.as_deref()).await
        }));
    }
    let mut start_errors = Vec::new();
    // The instance that took each chat (HAProxy's `X-Served-By`): it runs it.
    let mut chats: HashMap<String, String> = HashMap::new();
    for (s, t) in starts.into_iter().zip(&threads) {
        match s.await? {
            Ok(by) => {
                chats.insert(t.clone(), by);
            }
            Err(e) => start_errors.push(format!("{e:#}")),
        }
    }
    // The runs on the killed instance end only once it is dead (the orphan sweep closes them).
    let kill = match kill {
        Some(k) => Some(k.await?),
        None => None,
    };
    // Wait for every run to finish (in the log), then let the ingest agents stop.
    let finished = wait_runs(&mut admin, appended_before, o.runs - start_errors.len()).await?;
    let secs = start.elapsed().as_secs_f64();
    stop_ingest.store(true, Ordering::Release);
    let ingest = ingest.finish().await;
    let mut usages: Vec<Usage> = kill.iter().map(|k| k.usage.clone()).collect();
    for w in windows {
        usages.push(w.finish().await);
    }
    let clients = clients.finish().await;
    let store_cpu = store_window.map(ProcessGroupWindow::finish);
    let wal_after = admin.wal_lsn().await?;
    let load_end = load_avg();
    let appended = admin.max_id().await? - appended_before;

    // The thread's last event, once nothing more comes (the title may land after the finish).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let log = check::read_log(&mut admin, &["load-", "ingest-"]).await?;
    for (i, t) in threads.iter().enumerate() {
        let last = log.get(t).and_then(|l| l.last_n8n()).unwrap_or(0);
        targets[i].store(last, Ordering::Release);
    }
    let mut seen: Vec<Seen> = Vec::with_capacity(watchers.len());
    for w in watchers {
        seen.push(w.await?);
    }
    let ingest_check = ingest::check(&log, &ingest);
    // What the store holds once the load has settled (read models included).
    let stored = admin.stored().await?;
    let text_deltas = admin.count_type("text-delta").await?;
    let head = admin.max_id().await?;
    admin.close().await;
    let feed = match feed {
        Some((consumer, window)) => {
            let figures = consumer.finish(head as i64).await?;
            Some((figures, window.finish().await))
        }
        None => None,
    };
    if let Some(s) = pg_sampler {
        s.abort();
    }
    let pg_conns = pg_max.load(Ordering::Relaxed);
    drop(lb);
    for s in servers {
        s.stop().await;
    }

    // The full check: every watcher against its thread's log.
    let empty = check::ThreadLog::default();
    let mut bad = Vec::new();
    let (mut deliveries, mut lat) = (0u64, Vec::new());
    let (mut exact_n8n, mut exact_agui) = (0u64, 0u64);
    for s in &seen {
        deliveries += s.ids.len() as u64;
        lat.extend(s.latency_us.iter().map(|u| u * 1000));
        match check::mismatch(s, log.get(&s.thread).unwrap_or(&empty)) {
            None if s.protocol == Protocol::N8n => exact_n8n += 1,
            None => exact_agui += 1,
            Some(why) => bad.push(format!("{} ({:?}): {why}", s.thread, s.protocol)),
        }
    }
    let all_exact = bad.is_empty() && !seen.is_empty();
    // `--watchers-per-run 0` (append cost alone): no watcher to check, no delivery to time.
    if o.watchers_per_run > 0 {
        report.check(
        &format!("{n} instance(s) on {}: every watcher gets every event of its run, in order (checked against the log, all of them)", kind.title()),
        format!(
            "{}/{} exact ({exact_n8n} n8n, {exact_agui} AG-UI){}",
            exact_n8n + exact_agui,
            seen.len(),
            bad.first().map(|b| format!("; first failure: {b}")).unwrap_or_default()
        ),
        all_exact,
        );
    }
    report.check(
        &format!(
            "{n} instance(s) on {}: every ingest post acknowledged is in the log, in order",
            kind.title()
        ),
        ingest_check.clone(),
        ingest.errors == 0 && ingest_check.starts_with("all"),
    );
    for b in bad.iter().take(5) {
        report.note(format!("{n} instance(s): {b}"));
    }
    for e in start_errors.iter().take(3) {
        report.note(format!("{n} instance(s): a run did not start: {e}"));
    }

    let usage = sum_usage(&usages);
    let cpu_ms = usage.cpu_seconds * 1000.0;
    let live_run_secs: f64 = log.values().map(|t| t.live_ms() as f64 / 1000.0).sum();
    let cost = Cost {
        kind,
        server_cpu_s: usage.cpu_seconds,
        store: store_cpu,
        appended,
        deliveries,
        live_run_secs,
        text_deltas,
        stored,
        wal_bytes: wal_after
            .zip(wal_before)
            .map(|(a, b)| (a - b).max(0) as u64),
        machine_busy_percent: clients.machine_busy_percent,
    };
    let row = Row::new(
        format!(
            "{n} instance(s) on {}{}{}: {} runs at {} tok/s, {} watchers{}, {} ingest agents{}",
            kind.title(),
            if nats.is_some() {
                " with the change feed"
            } else {
                ""
            },
            if o.haproxy { " behind HAProxy" } else { "" },
            o.runs,
            o.tokens_per_sec,
            o.runs * o.watchers_per_run,
            if o.thread_affinity {
                " on their run's instance"
            } else {
                ""
            },
            o.ingest_agents,
            match &kill {
                Some(k) => format!(
                    ", kill -9 of {} after {} s",
                    k.victim,
                    o.kill_one_after.unwrap_or_default()
                ),
                None => String::new(),
            }
        ),
        "threadstream",
        deliveries,
        secs,
        "deliveries/s",
    )
    .extra("change_feed", feed.is_some())
    .latency(Latency::from_nanos(lat))
    .usage(usage.clone())
    .extra("instances", n as u64)
    .extra("store", kind.name())
    .extra("thread_affinity", o.thread_affinity)
    .extra("events_appended", appended)
    .extra("events_per_sec", round(appended as f64 / secs, 0))
    .extra(
        "server_cpu_ms_per_1000_deliveries",
        round(cpu_ms / (deliveries.max(1) as f64 / 1000.0), 2),
    )
    .extra(
        "server_cpu_ms_per_1000_appended",
        round(cpu_ms / (appended.max(1) as f64 / 1000.0), 2),
    )
    .extra(
        "rss_max_mb_per_instance",
        usages
            .iter()
            .map(|u| round(u.rss_max_kb as f64 / 1024.0, 1))
            .collect::<Vec<_>>(),
    )
    .extra(
        "postgres_connections_max",
        (kind == StoreKind::Postgres).then_some(pg_conns),
    )
    // Where the machine's cores went, on average over the run: the servers, the bench's
    // clients, and everything else (Postgres, HAProxy, other processes).
    .extra("cores_busy_machine", cores_busy(&clients))
    .extra("cores_servers", round(usage.cpu_seconds / secs, 2))
    .extra("cores_bench_clients", round(clients.cpu_seconds / secs, 2))
    .extra("runs_finished", finished)
    .extra("provider_tokens", counters.tokens.load(Ordering::Relaxed))
    .extra(
        "provider_requests",
        counters.requests.load(Ordering::Relaxed),
    )
    .extra("provider_failed", counters.failed.load(Ordering::Relaxed))
    .extra("ingest_events_acked", ingest.events)
    .extra("ingest_post_errors", ingest.errors)
    .extra("haproxy", o.haproxy)
    .extra(
        "ingest_ack_p99_ms",
        Latency::from_nanos(ingest.ack_ns.clone()).map_or(0.0, |l| round(l.p99_ms, 2)),
    )
    .extra("watchers_exact", exact_n8n + exact_agui)
    .extra("watchers", seen.len() as u64)
    .extra("load_avg_start", load_start)
    .extra("load_avg_end", load_end)
    .extra(
        "latency_is",
        "provider's write of a token → watcher's read of it",
    );
    let row = cost.extras(row);
    let row = match &feed {
        Some((f, nats_usage)) => {
            report.check(
                &format!(
                    "{n} instance(s) on {} with the change feed: the stream holds every event of \
                     the log once, in id order, up to the head",
                    kind.title()
                ),
                format!("{} messages, head {head}", f.messages),
                f.exact,
            );
            row.extra("change_feed_messages", f.messages)
                .extra("change_feed_exact", f.exact)
                .extra("change_feed_events_per_sec", round(f.events_per_sec, 0))
                .extra(
                    "change_feed_lag_p50_ms",
                    f.lag.as_ref().map(|l| round(l.p50_ms, 1)),
                )
                .extra(
                    "change_feed_lag_p99_ms",
                    f.lag.as_ref().map(|l| round(l.p99_ms, 1)),
                )
                .extra(
                    "change_feed_lag_max_ms",
                    f.lag.as_ref().map(|l| round(l.max_ms, 1)),
                )
                .extra(
                    "change_feed_lag_is",
                    "the event's commit timestamp (ms) → a JetStream consumer's receipt",
                )
                .extra(
                    "nats_cpu_us_per_appended",
                    round(nats_usage.cpu_seconds * 1e6 / appended.max(1) as f64, 1),
                )
        }
        None => row,
    };
    let row = if o.haproxy {
        row.extra("ingest_posts_retried", ingest.retried)
            .extra("ingest_runs_closed_by_the_fleet", ingest.closed_under_them)
    } else {
        row
    };
    Ok(match &kill {
        Some(k) => kill::report_kill(k, o, &seen, &log, &chats, row, report),
        None => (row, None),
    })
}

/// Starts a chat run at `url`; the instance that took it (`X-Served-By`, empty without a load
/// balancer). With a `key`, a failure is retried (same key) every 100 ms for up to 30 s.
async fn start_chat(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
) -> anyhow::Result<String> {
    let t0 = Instant::now();
    loop {
        let mut req = client
            .post(url)
            .header("content-type", "application/json")
            .body(r#"{"message":"Summarise my workflows"}"#);
        if let Some(k) = key {
            req = req.header("idempotency-key", k);
        }
        let r = match req.send().await {
            Ok(resp) if resp.status().is_success() => {
                let by = resp
                    .headers()
                    .get("x-served-by")
                    .and_then(|v| v.to_str().ok());
                return Ok(by.unwrap_or_default().to_string());
            }
            Ok(resp) => anyhow::anyhow!("POST /chat: {}", resp.status()),
            Err(e) => e.into(),
        };
        if key.is_none() || t0.elapsed() > Duration::from_secs(30) {
            return Err(r);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The machine's busy cores over a window, on average (its busy share × its cores).
fn cores_busy(window: &Usage) -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    round(window.machine_busy_percent / 100.0 * cores as f64, 2)
}

/// The servers' usage summed: CPU and RSS added up (RSS: each one's highest).
fn sum_usage(us: &[Usage]) -> Usage {
    let mut u = Usage {
        process: format!("server ×{}", us.len()),
        ..Usage::default()
    };
    for x in us {
        u.rss_start_kb += x.rss_start_kb;
        u.rss_max_kb += x.rss_max_kb;
        u.rss_end_kb += x.rss_end_kb;
        u.cpu_seconds += x.cpu_seconds;
        u.cpu_percent += x.cpu_percent;
        u.disk_written_mb += x.disk_written_mb;
        u.machine_busy_percent = u.machine_busy_percent.max(x.machine_busy_percent);
    }
    u.cpu_seconds = round(u.cpu_seconds, 2);
    u.cpu_percent = round(u.cpu_percent, 1);
    u
}

/// Waits until `runs` runs of the `load-` threads have finished in the log (counting the
/// `run-finish` events above `after`, a range of ids at a time: the poll reads only what is
/// new, so it costs the measured store next to nothing).
async fn wait_runs(db: &mut LogDb, after: u64, runs: usize) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(900);
    let (mut seen, mut n) = (after, 0u64);
    loop {
        let upto = db.max_id().await?;
        if upto > seen {
            n += db.finishes_between("load-", seen, upto).await?;
            seen = upto;
        }
        if n as usize >= runs {
            return Ok(n);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {n} of {runs} runs finished within 15 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Samples the connections to `db` every 500 ms, keeping the highest.
fn sample_pg_connections(
    admin: String,
    db: String,
    max: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let Ok(mut conn) = PgConnection::connect(&admin).await else {
            return;
        };
        loop {
            if let Ok((n,)) = sqlx::query_as::<_, (i64,)>(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
            )
            .bind(&db)
            .fetch_one(&mut conn)
            .await
            {
                max.fetch_max(n as u64, Ordering::Relaxed);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

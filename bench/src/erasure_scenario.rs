//! `erasure` / `erasure-postgres`: append latency on live threads and read latency on kept ones
//! while idle threads are erased one transaction each (SQLite durable, or Postgres), back to
//! back and then paced as the retention sweeper paces them, against the same appends and reads
//! with nothing erased, in the same run; and how long finding a user's streams (planning
//! `erase --user`) takes on that log.

use std::time::{Duration, Instant};

use threadstream_domain::event::erasure::{ErasureReason, ErasureScope};
use threadstream_domain::ThreadCommand;
use threadstream_store::erasure::{sweep_pause, SWEEP_PAUSE_PER_ERASURE};
use threadstream_store::{Durability, ErasureRequest, EventLog, NotifyMode};

use crate::data::{cmd, create, delta, fill_thread, run_start};
use crate::report::{Latency, Report, Row};
use crate::Ctx;

/// Concurrent appenders, each on a live thread of its own, one append at a time, [`APPEND_EVERY`].
const APPENDERS: usize = 16;

/// How often each appender appends (16 × 100/s: agents streaming tokens, a load the machine
/// carries; one append after another as fast as they go would take both cores, and every
/// erasure's round trips would wait for them).
const APPEND_EVERY: Duration = Duration::from_millis(10);

/// Concurrent readers, each reading the first page of a thread of its own, [`READ_EVERY`].
const READERS: usize = 4;

/// Events per read (the size of a history page).
const READ_PAGE: i64 = 100;

/// How often each reader reads: people opening threads.
const READ_EVERY: Duration = Duration::from_millis(20);

/// Plans of one user's erasure timed (the scope found, nothing erased).
const USER_PLANS: usize = 20;

pub async fn erasure(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let log = EventLog::open_sqlite(dir.path(), Durability::Full).await?;
    run(ctx, report, log).await
}

pub async fn erasure_postgres(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let (url, name) = crate::pg::create_db(&ctx.pg_admin, "tsbench_erasure").await?;
    let result = async {
        let log = EventLog::open_postgres(&url, NotifyMode::Local).await?;
        run(ctx, report, log).await
    }
    .await;
    crate::pg::drop_db(&ctx.pg_admin, &name).await;
    result
}

async fn run(ctx: &Ctx, report: &mut Report, log: EventLog) -> anyhow::Result<()> {
    // Half erased back to back, half paced as the sweeper.
    let (idle_threads, runs) = if ctx.quick { (20, 2) } else { (400, 5) };
    // A user with two threads among everyone else's: what `erase --user` has to find.
    for t in 0..2 {
        let create = ThreadCommand::Create {
            owner: "bench-user".into(),
            title: None,
        };
        log.append(
            &format!("user-{t}"),
            vec![create, cmd(&run_start("r", "a"))],
        )
        .await?;
    }
    for t in 0..idle_threads {
        fill_thread(&log, &format!("idle-{t}"), runs, 100, 500).await?;
    }
    for r in 0..READERS {
        fill_thread(&log, &format!("kept-{r}"), 1, 200, 500).await?;
    }
    for a in 0..APPENDERS {
        log.append(
            &format!("live-{a}"),
            vec![create(), cmd(&run_start("r", "a"))],
        )
        .await?;
    }
    let events_per_thread = log.read_thread("idle-0", 0, 100_000).await?.len();
    let log_events = log.backend().max_id().await?;

    // Finding a user's streams (the plan of `erase --user`), with nothing else running: through
    // the indexes (what `plan_erasure` does), and by a scan of every stream's head (what it did
    // before, and what a retention sweep still reads once for all its plans).
    // The SQLite indexer passes once a second: planned once it has reached the log just
    // filled (a plan also scans the log above the index, up to a second of appends).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut plans = Vec::new();
    for scan in [false, true] {
        let mut lat = Vec::new();
        let start = Instant::now();
        for _ in 0..USER_PLANS {
            let t0 = Instant::now();
            let heads = if scan {
                Some(log.stream_heads().await?)
            } else {
                None
            };
            let plan = log
                .plan_erasure(
                    ErasureRequest {
                        scope: ErasureScope {
                            user_id: Some("bench-user".into()),
                            ..Default::default()
                        },
                        requested_by: "bench".into(),
                        reason: ErasureReason::Request,
                    },
                    heads.as_ref(),
                )
                .await?;
            anyhow::ensure!(plan.streams().count() == 2, "the user's two threads");
            lat.push(t0.elapsed().as_nanos() as u64);
        }
        plans.push((scan, lat, start.elapsed().as_secs_f64()));
    }

    // Appenders and readers run until told to stop; each returns its latencies.
    let workers = |stop: tokio::sync::watch::Receiver<bool>| Workers {
        appenders: (0..APPENDERS)
            .map(|a| {
                let log = log.clone();
                let c = cmd(&delta("r", "a", "token "));
                timed_until(stop.clone(), Some(APPEND_EVERY), move || {
                    let (log, c) = (log.clone(), c.clone());
                    async move {
                        log.append(&format!("live-{a}"), vec![c]).await?;
                        anyhow::Ok(())
                    }
                })
            })
            .collect(),
        readers: (0..READERS)
            .map(|r| {
                let log = log.clone();
                timed_until(stop.clone(), Some(READ_EVERY), move || {
                    let log = log.clone();
                    async move {
                        let page = log.read_thread(&format!("kept-{r}"), 0, READ_PAGE).await?;
                        anyhow::ensure!(page.len() == READ_PAGE as usize, "a short page");
                        anyhow::Ok(())
                    }
                })
            })
            .collect(),
    };

    // Baseline: the same appenders and readers, nothing erased.
    let base_secs = if ctx.quick { 1.0 } else { 5.0 };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let running = workers(stop_rx);
    tokio::time::sleep(Duration::from_secs_f64(base_secs)).await;
    stop_tx.send(true)?;
    let base = running.finish().await?;

    // Erasing: the idle threads, one transaction each, the files scrubbed once at the end: half
    // of them back to back, half paced as the retention sweeper paces them.
    let mut sweeps = Vec::new();
    for (paced, threads) in [
        (false, 0..idle_threads / 2),
        (true, idle_threads / 2..idle_threads),
    ] {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let running = workers(stop_rx);
        let start = Instant::now();
        let mut erase_lat = Vec::new();
        let mut streams = Vec::new();
        for t in threads {
            let t0 = Instant::now();
            let plan = log
                .plan_erasure(
                    ErasureRequest {
                        scope: ErasureScope {
                            thread_id: Some(format!("idle-{t}")),
                            ..Default::default()
                        },
                        requested_by: "bench".into(),
                        reason: ErasureReason::Retention,
                    },
                    None,
                )
                .await?;
            let done = log.erase_planned(plan, false).await?;
            anyhow::ensure!(done.is_ok(), "idle-{t} not erased: {done:?}");
            streams.push(format!("idle-{t}"));
            let took = t0.elapsed();
            erase_lat.push(took.as_nanos() as u64);
            if paced {
                tokio::time::sleep(sweep_pause(took)).await;
            }
        }
        log.scrub(&streams).await?;
        let secs = start.elapsed().as_secs_f64();
        stop_tx.send(true)?;
        sweeps.push((paced, erase_lat, secs, running.finish().await?));
    }
    log.shutdown().await;

    for (paced, _, _, during) in &sweeps {
        let worst_ms = during.appends.iter().max().copied().unwrap_or(0) as f64 / 1e6;
        report.check(
            &format!(
                "an append while erasing {} waits ≤ 1.5 s (the bound docs/operations.md states)",
                if *paced { "paced" } else { "back to back" }
            ),
            format!("{worst_ms:.1} ms at worst"),
            worst_ms <= 1500.0,
        );
    }
    for (scan, lat, secs) in plans {
        let how = if scan {
            "scanning every head"
        } else {
            "through the indexes"
        };
        report.row(
            Row::new(
                format!(
                    "plan a user's erasure (their 2 threads in a {log_events}-event log), {how}"
                ),
                if scan { "baseline" } else { "threadstream" },
                USER_PLANS as u64,
                secs,
                "plans/s",
            )
            .latency(Latency::from_nanos(lat)),
        );
    }
    let mut phases = Vec::new();
    for (paced, erase_lat, secs, during) in sweeps {
        let how = if paced {
            format!(
                "paced as the retention sweeper: a pause of {SWEEP_PAUSE_PER_ERASURE}× each erasure's time after it"
            )
        } else {
            "back to back".to_owned()
        };
        report.row(
            Row::new(
                format!("erase a {events_per_thread}-event thread (one transaction each), {how}"),
                "threadstream",
                erase_lat.len() as u64,
                secs,
                "threads/s",
            )
            .latency(Latency::from_nanos(erase_lat)),
        );
        phases.push((format!("while erasing {how}"), "threadstream", during, secs));
    }
    phases.push(("nothing erased".to_owned(), "baseline", base, base_secs));
    for (what, kind, lat, secs) in phases {
        for (op, ops, unit) in [
            (
                format!(
                    "append 1 event, {APPENDERS} appenders every {} ms, {what}",
                    APPEND_EVERY.as_millis()
                ),
                lat.appends,
                "appends/s",
            ),
            (
                format!(
                    "read a {READ_PAGE}-event page, {READERS} readers every {} ms, {what}",
                    READ_EVERY.as_millis()
                ),
                lat.reads,
                "reads/s",
            ),
        ] {
            report.row(
                Row::new(op, kind, ops.len() as u64, secs, unit).latency(Latency::from_nanos(ops)),
            );
        }
    }
    Ok(())
}

/// The appenders and readers running beside the erasures.
struct Workers {
    appenders: Vec<tokio::task::JoinHandle<anyhow::Result<Vec<u64>>>>,
    readers: Vec<tokio::task::JoinHandle<anyhow::Result<Vec<u64>>>>,
}

/// What the workers measured, in nanoseconds.
struct Latencies {
    appends: Vec<u64>,
    reads: Vec<u64>,
}

impl Workers {
    async fn finish(self) -> anyhow::Result<Latencies> {
        async fn all(
            tasks: Vec<tokio::task::JoinHandle<anyhow::Result<Vec<u64>>>>,
        ) -> anyhow::Result<Vec<u64>> {
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await??);
            }
            Ok(all)
        }
        Ok(Latencies {
            appends: all(self.appenders).await?,
            reads: all(self.readers).await?,
        })
    }
}

/// Runs `op` one call at a time until `stop`, timing each call; with `every`, a call starts at
/// most that often.
fn timed_until<F, Fut>(
    stop: tokio::sync::watch::Receiver<bool>,
    every: Option<Duration>,
    op: F,
) -> tokio::task::JoinHandle<anyhow::Result<Vec<u64>>>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    tokio::spawn(async move {
        let mut lat = Vec::new();
        let mut pace = every.map(tokio::time::interval);
        while !*stop.borrow() {
            if let Some(pace) = &mut pace {
                pace.tick().await;
            }
            let t0 = Instant::now();
            op().await?;
            lat.push(t0.elapsed().as_nanos() as u64);
        }
        Ok(lat)
    })
}

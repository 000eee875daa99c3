//! `standby-fanout`: SSE fan-out on the three-node cluster with stream pages read on the primary
//! alone, then on the two standbys (`--read-database-url`, HAProxy's read port), the same load
//! on the same cluster in one run (issue #37: "primary CPU per delivery, and p99").
//!
//! Two instances on a fresh database each time: one takes the appends, the other serves the
//! watchers, so every page the watchers get is read from the store (the events are the other
//! instance's; an instance's own appends reach its watchers from its hot tail without a read).
//! Each Postgres node's CPU is its postmaster and its children's, from /proc.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cluster::{self, Cluster, NodeCpu};
use crate::agent_load::load_avg;
use crate::client::{ack_latencies, http_client, paced_append, post_events, Acks, ReadMode};
use crate::data::{ingest_body, run_finish};
use crate::procstat::Window;
use crate::report::{round, Latency, Report, Row};
use crate::server::{Server, Store};
use crate::server_scenarios::{connect_many, deltas_body, open_run, spawn_subscribers};
use crate::Ctx;

/// The load: `threads` agents each appending `deltas_per_post` token deltas every `every`, and
/// `watchers` SSE readers of each thread on the reading instance.
struct Shape {
    threads: usize,
    watchers: usize,
    deltas_per_post: usize,
    every: Duration,
    secs: Duration,
}

impl Shape {
    fn new(quick: bool) -> Shape {
        if quick {
            Shape {
                threads: 4,
                watchers: 2,
                deltas_per_post: 2,
                every: Duration::from_millis(100),
                secs: Duration::from_secs(3),
            }
        } else {
            Shape {
                threads: 20,
                watchers: 5,
                deltas_per_post: 4,
                every: Duration::from_millis(100),
                secs: Duration::from_secs(30),
            }
        }
    }
}

pub async fn standby_fanout(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let cluster = cluster::start(ctx.ha_port_base).await?;
    let o = Shape::new(ctx.quick);
    let r = async {
        let alone = phase(ctx, &cluster, &o, false, report).await?;
        let standbys = phase(ctx, &cluster, &o, true, report).await?;
        anyhow::Ok((alone, standbys))
    }
    .await;
    if r.is_err() {
        eprintln!("{}", cluster.tail_logs());
    }
    cluster::stop(cluster).await?;
    let (alone, standbys) = r?;
    let per = |row: &Row, k: &str| row.extra[k].as_f64().unwrap_or(f64::NAN);
    for (key, what) in [
        ("primary_cpu_us_per_delivery", "primary CPU per delivery"),
        ("delivery_p99_ms", "delivery p99"),
    ] {
        let (a, s) = (per(&alone, key), per(&standbys, key));
        report.ratio(
            &format!("{what}, reads on the standbys / on the primary alone ({s:.2} vs {a:.2})"),
            s / a,
        );
    }
    report.row(alone);
    report.row(standbys);
    report.note(
        "Primary and standbys' CPU is each node's postmaster and its children (backends, WAL \
         sender/receiver, background processes) from /proc, ended backends included; the \
         writing instance's appends are in the primary's CPU in both rows. All on this one \
         machine: the cluster, both instances and the bench's clients.",
    );
    Ok(())
}

/// One measurement: a fresh database, the writing and the reading instance (the reader with
/// `--read-database-url` when `standbys`), the load, and its row.
async fn phase(
    ctx: &Ctx,
    c: &Cluster,
    o: &Shape,
    standbys: bool,
    report: &mut Report,
) -> anyhow::Result<Row> {
    let admin = c.write_url("postgres");
    let (url, db) = crate::pg::create_db(&admin, "tsbench_fanout").await?;
    let r = measure(ctx, c, o, standbys, &url, &db, report).await;
    crate::pg::drop_db(&admin, &db).await;
    r
}

async fn measure(
    ctx: &Ctx,
    c: &Cluster,
    o: &Shape,
    standbys: bool,
    url: &str,
    db: &str,
    report: &mut Report,
) -> anyhow::Result<Row> {
    let bin = ctx.bin()?;
    let orphan = ["--run-orphan-secs", "30"];
    let writer = Server::start(&bin, Store::Postgres(url), &orphan).await?;
    let read_url = c.read_url(db);
    let mut reader_args = orphan.to_vec();
    if standbys {
        reader_args.extend(["--read-database-url", read_url.as_str()]);
    }
    let reader = Server::start(&bin, Store::Postgres(url), &reader_args).await?;
    let client = http_client();
    let threads: Vec<String> = (0..o.threads).map(|i| format!("fan-{i}")).collect();
    let stops: Vec<Arc<AtomicI64>> = threads
        .iter()
        .map(|_| Arc::new(AtomicI64::new(i64::MAX)))
        .collect();
    let mut subscribers = Vec::new();
    for (t, stop) in threads.iter().zip(&stops) {
        let first = open_run(&client, &writer, t).await?;
        let conns = connect_many(&reader, t, first, o.watchers, None).await?;
        subscribers.push(spawn_subscribers(
            conns,
            stop,
            ReadMode::fast(),
            Duration::from_secs(120),
        ));
    }

    let primary = c.primary(Duration::from_secs(5)).await?;
    let load_start = load_avg();
    let pages_before = pages_read(&client, &reader).await?;
    let nodes: Vec<NodeCpu> = (0..3)
        .map(|n| NodeCpu::start(c, n))
        .collect::<anyhow::Result<_>>()?;
    let (writer_w, reader_w) = (
        Window::start(writer.pid, "server (writing)"),
        Window::start(reader.pid, "server (reading)"),
    );
    let machine = Window::this_process();
    let start = Instant::now();
    let acks: Vec<Acks> = threads.iter().map(|_| Acks::default()).collect();
    let appenders: Vec<_> = threads
        .iter()
        .zip(&acks)
        .map(|(t, acks)| {
            let (client, addr, t, acks) = (client.clone(), writer.addr, t.clone(), acks.clone());
            let (body, every, secs) = (deltas_body(&t, o.deltas_per_post), o.every, o.secs);
            tokio::spawn(
                async move { paced_append(&client, addr, &t, body, every, secs, &acks).await },
            )
        })
        .collect();
    let mut append_errors = 0;
    for a in appenders {
        append_errors += a.await?.1;
    }
    // Each watcher stops once it has its thread's last acknowledged delta; the run's finish,
    // posted after, wakes those that already had it (a watcher blocked on a quiet stream would
    // otherwise only look again at the next ping, 15 s on).
    for (stop, acks) in stops.iter().zip(&acks) {
        let last = acks.sorted_ids().last().copied().unwrap_or(0);
        stop.store(last, Ordering::Release);
    }
    for t in &threads {
        let finish = ingest_body(&[run_finish(&format!("r-{t}"), "a1")]);
        post_events(&client, writer.addr, t, finish).await?;
    }
    let mut received = Vec::new();
    for thread_subs in subscribers {
        let mut mine = Vec::new();
        for s in thread_subs {
            mine.push(s.await??);
        }
        received.push(mine);
    }
    let secs = start.elapsed().as_secs_f64();
    let node_cpu: Vec<f64> = nodes.into_iter().map(NodeCpu::finish).collect();
    let (writer_u, reader_u) = (writer_w.finish().await, reader_w.finish().await);
    let machine = machine.finish().await;
    let load_end = load_avg();
    let pages_after = pages_read(&client, &reader).await?;
    writer.stop().await;
    reader.stop().await;

    let (mut deliveries, mut expected, mut lat) = (0u64, 0u64, Vec::new());
    let mut appended = 0u64;
    for (acks, subs) in acks.iter().zip(&received) {
        let map = acks.map();
        appended += map.len() as u64;
        expected += (map.len() * subs.len()) as u64;
        for r in subs {
            let mine: Vec<&(i64, u64)> = r.iter().filter(|(id, _)| map.contains_key(id)).collect();
            deliveries += mine.len() as u64;
            lat.extend(ack_latencies(&map, mine));
        }
    }
    let latency = Latency::from_nanos(lat);
    let primary_s = node_cpu[primary];
    let standbys_s: f64 = (0..3).filter(|&n| n != primary).map(|n| node_cpu[n]).sum();
    let us_per = |s: f64| round(s * 1e6 / deliveries.max(1) as f64, 2);
    let reads_on = if standbys {
        "the two standbys (--read-database-url: HAProxy's read port)"
    } else {
        "the primary alone"
    };
    report.check(
        &format!("standby-fanout, reads on {reads_on}: every watcher got every acknowledged event"),
        format!("{deliveries} of {expected} deliveries"),
        deliveries == expected && append_errors == 0,
    );
    if standbys {
        let on_standby = pages_after
            .0
            .zip(pages_before.0)
            .map_or(0, |(a, b)| a.saturating_sub(b));
        report.check(
            "standby-fanout: with --read-database-url, the reading instance's pages are read on \
             the standbys",
            format!("{on_standby} pages on standbys"),
            on_standby > 0,
        );
    }
    let pages = |i: usize| {
        let (a, b) = (
            if i == 0 { pages_after.0 } else { pages_after.1 },
            if i == 0 {
                pages_before.0
            } else {
                pages_before.1
            },
        );
        a.zip(b).map(|(a, b)| a.saturating_sub(b))
    };
    Ok(Row::new(
        format!(
            "{} threads × {} watchers on a second instance, {} appends/s of {} deltas each; \
             pages read on {reads_on}",
            o.threads,
            o.watchers,
            round(1.0 / o.every.as_secs_f64(), 0),
            o.deltas_per_post
        ),
        "threadstream",
        deliveries,
        secs,
        "deliveries/s",
    )
    .latency(latency.clone())
    .usage(reader_u.clone())
    .extra("read_database_url", standbys)
    .extra("primary", format!("n{}", primary + 1))
    .extra("events_appended", appended)
    .extra("deliveries_expected", expected)
    .extra("append_errors", append_errors)
    .extra(
        "delivery_p99_ms",
        latency.as_ref().map(|l| round(l.p99_ms, 2)),
    )
    .extra(
        "latency_is",
        "append acknowledged (writing instance) → received (reading instance)",
    )
    .extra("primary_cpu_seconds", round(primary_s, 2))
    .extra("standbys_cpu_seconds", round(standbys_s, 2))
    .extra("primary_cpu_us_per_delivery", us_per(primary_s))
    .extra("standbys_cpu_us_per_delivery", us_per(standbys_s))
    .extra(
        "reading_server_cpu_us_per_delivery",
        us_per(reader_u.cpu_seconds),
    )
    .extra(
        "writing_server_cpu_us_per_delivery",
        us_per(writer_u.cpu_seconds),
    )
    .extra(
        "all_cpu_us_per_delivery",
        us_per(primary_s + standbys_s + reader_u.cpu_seconds + writer_u.cpu_seconds),
    )
    .extra("pages_read_on_standby", pages(0))
    .extra("pages_read_on_primary", pages(1))
    .extra(
        "pages_are",
        "threadstream_thread_pages_read_total of the reading instance over the window (only \
         counted with --read-database-url)",
    )
    .extra(
        "machine_idle_percent",
        round(100.0 - machine.machine_busy_percent, 1),
    )
    .extra("bench_cpu_seconds", machine.cpu_seconds)
    .extra("load_avg_start", load_start)
    .extra("load_avg_end", load_end))
}

/// `threadstream_thread_pages_read_total` of `s` by `read_on`: (standby, primary); `None` when
/// not exported (no `--read-database-url`).
async fn pages_read(
    client: &reqwest::Client,
    s: &Server,
) -> anyhow::Result<(Option<u64>, Option<u64>)> {
    let text = client.get(s.url("/metrics")).send().await?.text().await?;
    let count = |on: &str| {
        let key = format!("threadstream_thread_pages_read_total{{read_on=\"{on}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse().ok())
    };
    Ok((count("standby"), count("primary")))
}

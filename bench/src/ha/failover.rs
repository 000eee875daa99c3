//! `failover`: `threadstream serve` on the three-node cluster through HAProxy (write port, and
//! the read port for stream pages), a steady load of keyed appends, then kill -9 of the
//! primary's postmaster and the load going on for a minute. Reported (issue #37): the time from
//! the kill to the first append acknowledged on the new primary, the longest pause any writer
//! saw, the latency of the appends in the minute after, and the counts that prove nothing was
//! lost (every acknowledged event read back from the new primary once, `threadstream verify`
//! clean).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cluster::{self, Cluster};
use super::writers::{self, Post, Tally, Writer};
use crate::report::{round, Latency, Report, Row};
use crate::server::{Server, Store};
use crate::Ctx;

/// The load and its timing.
struct Shape {
    writers: usize,
    deltas_per_post: usize,
    every: Duration,
    /// Load before the kill (the first second of it is not measured: connections warm up).
    before: Duration,
    /// Load after the kill.
    after: Duration,
}

impl Shape {
    fn new(quick: bool) -> Shape {
        if quick {
            Shape {
                writers: 4,
                deltas_per_post: 2,
                every: Duration::from_millis(100),
                before: Duration::from_secs(3),
                // Room for a slow failover on a debug build (the smoke test).
                after: Duration::from_secs(20),
            }
        } else {
            Shape {
                writers: 20,
                deltas_per_post: 2,
                every: Duration::from_millis(50),
                before: Duration::from_secs(10),
                after: Duration::from_secs(60),
            }
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} writers × {:.0} appends/s of {} deltas, keyed",
            self.writers,
            1.0 / self.every.as_secs_f64(),
            self.deltas_per_post
        )
    }
}

/// The server's orphan time: the default, longer than a failover (docs/ha.md, "Run leases").
const ORPHAN_SECS: &str = "30";

pub async fn failover(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let cluster = cluster::start(ctx.ha_port_base).await?;
    let r = run(ctx, &cluster, &Shape::new(ctx.quick), report).await;
    if r.is_err() {
        eprintln!("{}", cluster.tail_logs());
    }
    cluster::stop(cluster).await?;
    r
}

async fn run(ctx: &Ctx, c: &Cluster, o: &Shape, report: &mut Report) -> anyhow::Result<()> {
    let (url, db) = crate::pg::create_db(&c.write_url("postgres"), "tsbench_failover").await?;
    let read_url = c.read_url(&db);
    let server = Server::start(
        &ctx.bin()?,
        Store::Postgres(&url),
        &[
            "--read-database-url",
            &read_url,
            "--run-orphan-secs",
            ORPHAN_SECS,
        ],
    )
    .await?;
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks = writers::start(
        server.addr,
        "fo-",
        o.writers,
        o.deltas_per_post,
        o.every,
        stop.clone(),
    );
    tokio::time::sleep(o.before).await;
    let old = c.primary(Duration::from_secs(5)).await?;
    let pid = c.kill9_postmaster(old)?;
    let killed = Instant::now();
    eprintln!("  kill -9 of n{}'s postmaster ({pid})", old + 1);
    let fo = cluster::await_failover(c, old, killed).await?;
    tokio::time::sleep_until((killed + o.after).into()).await;
    stop.store(true, Ordering::Release);
    let mut ws: Vec<Writer> = Vec::with_capacity(tasks.len());
    for t in tasks {
        ws.push(t.await?);
    }
    let tally = writers::check(&url, "fo-", &ws).await?;
    let verify = verify(ctx, &url).await?;
    server.stop().await;

    let f = Figures::of(&ws, started, killed, o.after);
    let before = Row::new(
        format!("before the kill: {} (on the old primary)", o.describe()),
        "threadstream",
        f.before.len() as u64,
        (o.before - Duration::from_secs(1)).as_secs_f64(),
        "appends/s",
    )
    .latency(Latency::from_durations(&f.before))
    .extra("latency_is", "append sent → acknowledged (with retries)");
    let after = Row::new(
        format!(
            "the {} s after kill -9 of the primary's postmaster: {}",
            o.after.as_secs(),
            o.describe()
        ),
        "threadstream",
        f.after.len() as u64,
        o.after.as_secs_f64(),
        "appends/s",
    )
    .latency(Latency::from_durations(&f.after))
    .extra(
        "latency_is",
        "append sent → acknowledged (with retries), of every append answered after the kill \
         and sent before the window's end",
    )
    .extra("killed_node", format!("n{}", old + 1))
    .extra("new_primary", format!("n{}", fo.new_primary + 1))
    .extra("kill_to_promoted_ms", fo.promoted.map(ms))
    .extra("kill_to_write_port_reaches_it_ms", fo.reached.map(ms))
    .extra("kill_to_it_has_a_sync_standby_ms", fo.synchronous.map(ms))
    .extra(
        "promoted_reached_sync_are",
        "polled every 100 ms: its Patroni answers /primary; a new connection to HAProxy's write \
         port lands on it; its pg_stat_replication shows a standby with sync_state 'sync'",
    )
    .extra("kill_to_first_ack_on_new_primary_ms", f.first_new.map(ms))
    .extra(
        "first_ack_on_new_primary_is",
        "the first append sent after the kill that was acknowledged",
    )
    .extra(
        "kill_to_first_answer_of_a_held_append_ms",
        f.first_any.map(ms),
    )
    .extra("longest_writer_pause_ms", ms(f.pause.0))
    .extra("median_writer_longest_pause_ms", ms(f.median_pause))
    .extra("appends_over_1s", f.over_1s)
    .extra(
        "slowest_appends_ms",
        f.slowest.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
    )
    .extra(
        "longest_writer_pause_from_kill_ms",
        signed_ms(f.pause.1, killed),
    )
    .extra(
        "longest_writer_pause_to_kill_ms",
        signed_ms(f.pause.2, killed),
    )
    .extra("posts_acknowledged", tally.posts_acknowledged)
    .extra("events_acknowledged", tally.events_acknowledged)
    .extra("events_in_log", tally.events_in_log)
    .extra("acknowledged_not_in_log", tally.lost)
    .extra("stored_twice", tally.stored_twice)
    .extra("in_log_not_acknowledged", tally.unacknowledged_in_log)
    .extra("posts_retried", tally.posts_retried)
    .extra("posts_failed", tally.posts_failed)
    .extra("verify_clean", verify.0)
    .extra("verify", verify.1.clone());
    let settled = Row::new(
        "on the new primary: appends sent after its first acknowledgement",
        "threadstream",
        f.settled.len() as u64,
        f.settled_secs,
        "appends/s",
    )
    .latency(Latency::from_durations(&f.settled))
    .extra("latency_is", "append sent → acknowledged");
    check(report, &tally, &verify, &f);
    report.row(before);
    report.row(after);
    report.row(settled);
    report.note(
        "The cluster is scripts/ha-cluster.sh's (test timings: Patroni ttl 10 s, loop_wait 1 s, \
         HAProxy checks every 500 ms), all on this machine with the server and the writers.",
    );
    Ok(())
}

fn check(report: &mut Report, t: &Tally, verify: &(bool, String), f: &Figures) {
    report.check(
        "failover: nothing acknowledged lost, nothing stored twice (every writer's thread read \
         back from the new primary)",
        format!(
            "{} events acknowledged in {} posts, {} in the log; {} lost, {} stored twice, {} in \
             the log unacknowledged",
            t.events_acknowledged,
            t.posts_acknowledged,
            t.events_in_log,
            t.lost,
            t.stored_twice,
            t.unacknowledged_in_log
        ),
        t.lost == 0 && t.stored_twice == 0 && t.unacknowledged_in_log == 0,
    );
    report.check(
        "failover: every append acknowledged (held through the failover, none refused)",
        format!(
            "{} failed, {} answered on a retry",
            t.posts_failed, t.posts_retried
        ),
        t.posts_failed == 0,
    );
    report.check(
        "failover: `threadstream verify` clean on the new primary",
        verify.1.clone(),
        verify.0,
    );
    report.check(
        "failover: appends acknowledged on the new primary within the store wait (30 s)",
        f.first_new.map_or("none".into(), |d| {
            format!("{:.2} s after the kill", d.as_secs_f64())
        }),
        f.first_new.is_some_and(|d| d < Duration::from_secs(30)),
    );
}

/// What the writers' records say about the failover.
struct Figures {
    /// Append latencies of posts sent and answered in the measured time before the kill.
    before: Vec<Duration>,
    /// Of posts answered after the kill and sent before the window's end.
    after: Vec<Duration>,
    /// Of posts sent after the first acknowledgement of a post sent after the kill.
    settled: Vec<Duration>,
    settled_secs: f64,
    /// Kill → the first answer to a post sent after it.
    first_new: Option<Duration>,
    /// Kill → the first answer after it to any post (one held through the failover).
    first_any: Option<Duration>,
    /// The longest time between two answers of one writer, and its ends.
    pause: (Duration, Instant, Instant),
    /// The median over the writers of each one's longest pause.
    median_pause: Duration,
    /// Appends answered more than a second after they were sent.
    over_1s: u64,
    /// The five slowest appends.
    slowest: Vec<Duration>,
}

impl Figures {
    fn of(ws: &[Writer], started: Instant, killed: Instant, after: Duration) -> Figures {
        let posts: Vec<&Post> = ws.iter().flat_map(|w| &w.posts).collect();
        let took = |p: &&Post| p.answered - p.sent;
        let warm = started + Duration::from_secs(1);
        let first_new_at = posts
            .iter()
            .filter(|p| p.sent >= killed)
            .map(|p| p.answered)
            .min();
        let first_any = posts
            .iter()
            .filter(|p| p.answered >= killed)
            .map(|p| p.answered - killed)
            .min();
        let end = killed + after;
        let mut pause = (Duration::ZERO, killed, killed);
        let mut longest: Vec<Duration> = Vec::with_capacity(ws.len());
        for w in ws {
            let mut own = Duration::ZERO;
            for pair in w.posts.windows(2) {
                let gap = pair[1].answered - pair[0].answered;
                own = own.max(gap);
                if gap > pause.0 {
                    pause = (gap, pair[0].answered, pair[1].answered);
                }
            }
            longest.push(own);
        }
        longest.sort_unstable();
        let settled: Vec<Duration> = posts
            .iter()
            .filter(|p| first_new_at.is_some_and(|f| p.sent >= f) && p.sent < end)
            .map(took)
            .collect();
        Figures {
            before: posts
                .iter()
                .filter(|p| p.sent >= warm && p.answered < killed)
                .map(took)
                .collect(),
            // Those in flight at the kill, held through the failover, included.
            after: posts
                .iter()
                .filter(|p| p.answered >= killed && p.sent < end)
                .map(took)
                .collect(),
            settled,
            settled_secs: first_new_at.map_or(0.0, |f| (end - f).as_secs_f64()),
            first_new: first_new_at.map(|a| a - killed),
            first_any,
            pause,
            median_pause: longest.get(longest.len() / 2).copied().unwrap_or_default(),
            over_1s: posts
                .iter()
                .filter(|p| took(p) > Duration::from_secs(1))
                .count() as u64,
            slowest: {
                let mut all: Vec<Duration> = posts.iter().map(took).collect();
                all.sort_unstable_by(|a, b| b.cmp(a));
                all.truncate(5);
                all
            },
        }
    }
}

/// `threadstream verify` on the database: clean (exit 0) or not, and its last line.
async fn verify(ctx: &Ctx, url: &str) -> anyhow::Result<(bool, String)> {
    let out = tokio::process::Command::new(ctx.bin()?)
        .args(["verify", "--database-url", url, "--data-dir"])
        .arg(std::env::temp_dir())
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "warn")
        .env_remove("DATABASE_URL")
        .output()
        .await?;
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().rev().find(|l| !l.trim().is_empty());
    Ok((
        out.status.success(),
        last.unwrap_or("(no output)").trim().to_string(),
    ))
}

fn ms(d: Duration) -> f64 {
    round(d.as_secs_f64() * 1000.0, 1)
}

/// `at` relative to `zero`, ms (negative before it).
fn signed_ms(at: Instant, zero: Instant) -> f64 {
    if at >= zero {
        ms(at - zero)
    } else {
        -ms(zero - at)
    }
}

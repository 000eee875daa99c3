//! `agent-load --haproxy --kill-one-after SECS`: one instance of the fleet behind HAProxy gets
//! `kill -9` mid-load. Its watchers resume through HAProxy with `Last-Event-ID`, its ingest
//! agents' posts are retried there with their `Idempotency-Key`, and its runs are left to the
//! orphan sweep of the others. Reported: the reconnect storm, the latency of what was written
//! during it against the whole run's, and how long the killed runs took to be closed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::check::ThreadLog;
use super::storm::{self, RunEnd};
use super::watch::Seen;
use super::LoadOpts;
use crate::client::us;
use crate::haproxy::Haproxy;
use crate::procstat::Window;
use crate::report::{round, Latency, Report, Row, Usage};
use crate::server::Server;

/// The kill, once done.
pub struct Kill {
    pub at: Instant,
    /// The same moment, wall-clock ms (the log's `ts` clock).
    pub wall_ms: i64,
    /// The instance as HAProxy names it (`ts1`).
    pub victim: String,
    /// Its CPU and RSS up to the kill.
    pub usage: Usage,
    /// The kill → HAProxy's checks see it down.
    pub down_after: Option<Duration>,
}

/// `kill -9` of `server` (HAProxy's first server) at `at`; its usage window is closed just
/// before.
pub fn schedule(
    server: Server,
    window: Window,
    lb: Arc<Haproxy>,
    at: Instant,
) -> tokio::task::JoinHandle<Kill> {
    let victim = "ts1".to_string();
    tokio::spawn(async move {
        tokio::time::sleep_until(at.into()).await;
        let usage = window.finish().await;
        let at = Instant::now();
        let wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as i64;
        eprintln!("  kill -9 of {victim} (pid {})", server.pid);
        server.kill9().await;
        let mut down_after = None;
        while at.elapsed() < Duration::from_secs(10) {
            if lb.statuses().await.is_ok_and(|s| s[0].starts_with("DOWN")) {
                down_after = Some(at.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Kill {
            at,
            wall_ms,
            victim,
            usage,
            down_after,
        }
    })
}

/// The kill's figures: extras of the run's row (`row`), a row of the latency of what was written
/// during the storm (none when nothing was), and the checks.
pub fn report_kill(
    k: &Kill,
    o: &LoadOpts,
    seen: &[Seen],
    log: &HashMap<String, ThreadLog>,
    chats: &HashMap<String, String>,
    row: Row,
    report: &mut Report,
) -> (Row, Option<Row>) {
    let kill_us = us(k.at);
    let on_victim = |thread: &str| chats.get(thread).is_some_and(|by| *by == k.victim);
    let s = storm::storm(
        kill_us,
        &k.victim,
        seen.iter().map(|w| storm::Watcher {
            conns: &w.conns,
            live: !on_victim(&w.thread)
                && log.get(&w.thread).is_some_and(|l| l.last_ts > k.wall_ms),
        }),
    );
    let ms = |us: Option<u64>| us.map(|u| round(u as f64 / 1000.0, 1));
    let end_us = kill_us + s.duration_us.unwrap_or(0);
    let during: Vec<u64> = seen
        .iter()
        .flat_map(|w| storm::written_within(&w.sent_us, &w.latency_us, kill_us, end_us))
        .collect();
    let during = Latency::from_nanos(during);
    let i = storm::interrupts(
        k.wall_ms,
        chats.iter().map(|(thread, by)| RunEnd {
            on_victim: *by == k.victim,
            finish: log
                .get(thread)
                .and_then(|l| l.finish.as_ref())
                .map(|(at, why)| (*at, why.as_deref())),
        }),
    );
    let reconnected_any = seen.iter().filter(|w| w.conns.len() > 1).count();
    let reconnects: usize = seen.iter().map(|w| w.conns.len().saturating_sub(1)).sum();
    let refused: u64 = seen.iter().map(|w| w.refused).sum();
    let preludes: usize = seen.iter().map(|w| w.preludes).sum();

    let v = &k.victim;
    report.check(
        &format!(
            "kill -9 of {v}: every watcher it served reconnects through HAProxy and is back \
             (a new stream and, on a thread still written, its first frame)"
        ),
        format!(
            "{}/{} back within {} ms of the kill (streams open within {} ms); {} of them on \
             threads still written",
            s.reconnected - s.not_back,
            s.watchers,
            ms(s.duration_us).unwrap_or(f64::NAN),
            ms(s.reopened_us).unwrap_or(f64::NAN),
            s.live
        ),
        s.watchers > 0 && s.reconnected == s.watchers && s.not_back == 0,
    );
    let limit_ms = o.run_orphan_secs as i64 * 1000;
    report.check(
        &format!(
            "kill -9 of {v}: its runs live at the kill are closed as interrupted within \
             --run-orphan-secs ({} s); no other run is",
            o.run_orphan_secs
        ),
        format!(
            "{}/{} interrupted, the last {} ms after the kill; {} runs of other instances \
             interrupted",
            i.interrupted,
            i.live_at_kill,
            i.last_after_ms.map_or("-".into(), |m| m.to_string()),
            i.others_interrupted
        ),
        i.live_at_kill > 0
            && i.interrupted == i.live_at_kill
            && i.last_after_ms.is_some_and(|m| m <= limit_ms)
            && i.others_interrupted == 0,
    );
    if during.is_none() {
        // Tokens come in phases (before the sub-agent, from it, the answer), and the runs
        // started within a second move between phases together: a kill between two phases
        // falls where no token is written.
        report.note(format!(
            "kill -9 of {v}: no token was written during the reconnect storm (the runs were \
             between phases); a later --kill-one-after lands in one"
        ));
    }
    if i.live_at_kill == 0 {
        report.note(format!(
            "kill -9 of {v}: none of its runs was live at the kill: --kill-one-after {} s came \
             after they ended",
            o.kill_one_after.unwrap_or_default()
        ));
    }

    let storm_row = during.clone().map(|l| {
        Row::new(
            format!(
                "deliveries of what was written during the reconnect storm (kill -9 of {v} → +{} ms)",
                ms(s.duration_us).unwrap_or(0.0)
            ),
            "info",
            l.samples as u64,
            Duration::from_micros(s.duration_us.unwrap_or(0)).as_secs_f64(),
            "deliveries/s",
        )
        .latency(Some(l))
        .extra("latency_is", "provider's write of a token → watcher's read of it")
        .extra(
            "window",
            "tokens written from the kill until the storm's end, delivered to any watcher",
        )
    });
    let row = row
        .extra("killed", v.as_str())
        .extra("kill_after_s", o.kill_one_after.unwrap_or_default())
        .extra(
            "haproxy_down_after_ms",
            k.down_after.map(|d| round(d.as_secs_f64() * 1000.0, 0)),
        )
        .extra("killed_cpu_seconds_until_kill", k.usage.cpu_seconds)
        .extra("reconnect_storm_ms", ms(s.duration_us))
        .extra("storm_streams_open_ms", ms(s.reopened_us))
        .extra("storm_watchers", s.watchers as u64)
        .extra("storm_watchers_on_threads_still_written", s.live as u64)
        .extra("storm_watchers_reconnected", s.reconnected as u64)
        .extra("storm_watchers_not_back", s.not_back as u64)
        .extra(
            "storm_latency_p50_p99_max_ms",
            during.map_or(Vec::new(), |l| vec![l.p50_ms, l.p99_ms, l.max_ms]),
        )
        .extra("watchers_reconnected", reconnected_any as u64)
        .extra("reconnects", reconnects as u64)
        .extra("reconnect_attempts_refused", refused)
        .extra("agui_join_preludes", preludes as u64)
        .extra("runs_live_on_killed_at_kill", i.live_at_kill as u64)
        .extra("runs_interrupted", i.interrupted as u64)
        .extra("runs_interrupted_last_ms", i.last_after_ms)
        .extra("run_orphan_secs", o.run_orphan_secs);
    (row, storm_row)
}

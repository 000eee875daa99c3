//! What `agent-load --haproxy --kill-one-after` reports about the kill, computed from what the
//! watchers recorded and what the log holds: the reconnect storm, the latency of what was written
//! during it, and how the killed instance's runs were closed. Pure, so it is unit-tested here.
//!
//! Times are µs since [`crate::client::base`] (watchers) or wall-clock ms (the log's `ts`).

/// One stream of a watcher through the load balancer: from its response head to its end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Conn {
    /// The instance that served it (HAProxy's `X-Served-By`: `ts1`, `ts2`, `ts3`).
    pub served_by: String,
    /// When its response head (200) arrived.
    pub opened_us: u64,
    /// When its first frame (an event, or a frame of AG-UI's join prelude) arrived.
    pub first_frame_us: Option<u64>,
    /// When it ended under the watcher (end of stream or an error); `None`: open until the
    /// watcher had its thread's last event.
    pub ended_us: Option<u64>,
}

/// A watcher as the storm sees it.
pub struct Watcher<'a> {
    pub conns: &'a [Conn],
    /// Its thread was still being written after the kill by a live instance (a run not on the
    /// killed instance, or an ingest agent): a first frame on the new stream is due at once.
    pub live: bool,
}

/// The reconnect storm after the kill of one instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Storm {
    /// Watchers whose stream was on the killed instance at the kill (it ended after it).
    pub watchers: usize,
    /// Of them, those whose thread was live (see [`Watcher::live`]).
    pub live: usize,
    /// Of them, those that opened a new stream after the kill.
    pub reconnected: usize,
    /// Of them, those not back by the definition of [`storm`] (live, but no frame arrived).
    pub not_back: usize,
    /// The kill → the last of them back (µs): the storm's duration.
    pub duration_us: Option<u64>,
    /// The kill → the last of them with its new stream open (response head), µs.
    pub reopened_us: Option<u64>,
}

/// The storm: over the watchers whose stream was on `victim` at `kill_us`, the time from the
/// kill until the last one is back. A watcher is back when its first stream opened after the kill
/// (through the load balancer, on a live instance) has its response head and, if its thread is
/// live, its first frame. A watcher of a run that died with the instance, or of a thread already
/// finished, has nothing to receive until the orphan sweep closes the run (or ever): for it the
/// open stream is the end of the storm, and the sweep is measured apart ([`interrupts`]).
pub fn storm<'a>(
    kill_us: u64,
    victim: &str,
    watchers: impl IntoIterator<Item = Watcher<'a>>,
) -> Storm {
    let mut s = Storm::default();
    for w in watchers {
        let killed = w.conns.iter().any(|c| {
            c.served_by == victim
                && c.opened_us <= kill_us
                && c.ended_us.is_some_and(|e| e >= kill_us)
        });
        if !killed {
            continue;
        }
        s.watchers += 1;
        s.live += usize::from(w.live);
        let Some(next) = w
            .conns
            .iter()
            .find(|c| c.opened_us >= kill_us && c.served_by != victim)
        else {
            continue;
        };
        s.reconnected += 1;
        let opened = next.opened_us - kill_us;
        s.reopened_us = s.reopened_us.max(Some(opened));
        let back = if w.live {
            next.first_frame_us.map(|f| f.saturating_sub(kill_us))
        } else {
            Some(opened)
        };
        match back {
            Some(b) => s.duration_us = s.duration_us.max(Some(b)),
            None => s.not_back += 1,
        }
    }
    s
}

/// The latencies (ns) of the tokens the provider or an agent wrote in `[from_us, to_us]`;
/// `sent_us[i]` is when the token of `latency_us[i]` was written.
pub fn written_within(sent_us: &[u64], latency_us: &[u64], from_us: u64, to_us: u64) -> Vec<u64> {
    sent_us
        .iter()
        .zip(latency_us)
        .filter(|(s, _)| (from_us..=to_us).contains(*s))
        .map(|(_, l)| l * 1000)
        .collect()
}

/// A run's end as the log holds it.
pub struct RunEnd<'a> {
    /// The instance that ran it (the one its chat was sent to) was the killed one.
    pub on_victim: bool,
    /// Its `run-finish`: wall-clock ms, and the payload's `reason` (`interrupted` when the
    /// orphan sweep closed it).
    pub finish: Option<(i64, Option<&'a str>)>,
}

/// How the runs ended around the kill.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interrupts {
    /// Runs of the killed instance not finished at the kill.
    pub live_at_kill: usize,
    /// Of them, closed as interrupted.
    pub interrupted: usize,
    /// The kill → the last of them closed (ms).
    pub last_after_ms: Option<i64>,
    /// Runs of other instances closed as interrupted (none should be).
    pub others_interrupted: usize,
}

pub fn interrupts<'a>(kill_ms: i64, runs: impl IntoIterator<Item = RunEnd<'a>>) -> Interrupts {
    let mut out = Interrupts::default();
    for r in runs {
        let interrupted = r.finish.is_some_and(|(_, why)| why == Some("interrupted"));
        if !r.on_victim {
            out.others_interrupted += usize::from(interrupted);
            continue;
        }
        match r.finish {
            Some((at, _)) if at < kill_ms => {}
            _ => {
                out.live_at_kill += 1;
                if let (true, Some((at, _))) = (interrupted, r.finish) {
                    out.interrupted += 1;
                    out.last_after_ms = out.last_after_ms.max(Some(at - kill_ms));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(by: &str, opened: u64, first: Option<u64>, ended: Option<u64>) -> Conn {
        Conn {
            served_by: by.into(),
            opened_us: opened,
            first_frame_us: first,
            ended_us: ended,
        }
    }

    #[test]
    fn the_storm_ends_when_the_last_watcher_of_the_killed_instance_is_back() {
        let kill = 1_000;
        let live_a = [
            conn("ts1", 10, Some(20), Some(1_005)),
            conn("ts2", 1_100, Some(1_150), None),
        ];
        // Back at its stream's head: its run died with ts1, nothing is due.
        let dead_run = [
            conn("ts1", 10, Some(20), Some(1_002)),
            conn("ts3", 1_400, None, None),
        ];
        // Its first stream after the kill counts (it later moved again).
        let live_b = [
            conn("ts1", 10, Some(20), Some(1_001)),
            conn("ts2", 1_200, Some(1_300), Some(5_000)),
            conn("ts3", 5_100, Some(5_120), None),
        ];
        // Never on the killed instance: not part of the storm, whatever it did.
        let other = [
            conn("ts2", 10, Some(20), Some(3_000)),
            conn("ts3", 9_000, None, None),
        ];
        // Its stream on ts1 ended before the kill (it had reconnected elsewhere).
        let before = [
            conn("ts1", 10, Some(20), Some(900)),
            conn("ts2", 950, Some(960), None),
        ];
        let s = storm(
            kill,
            "ts1",
            [
                Watcher {
                    conns: &live_a,
                    live: true,
                },
                Watcher {
                    conns: &dead_run,
                    live: false,
                },
                Watcher {
                    conns: &live_b,
                    live: true,
                },
                Watcher {
                    conns: &other,
                    live: true,
                },
                Watcher {
                    conns: &before,
                    live: true,
                },
            ],
        );
        assert_eq!(
            s,
            Storm {
                watchers: 3,
                live: 2,
                reconnected: 3,
                not_back: 0,
                duration_us: Some(400),
                reopened_us: Some(400),
            }
        );
    }

    #[test]
    fn a_watcher_not_back_is_counted_not_timed() {
        let gone = [conn("ts2", 10, Some(20), Some(1_000))];
        let silent = [
            conn("ts2", 10, Some(20), Some(1_000)),
            conn("ts1", 1_050, None, None),
        ];
        let s = storm(
            1_000,
            "ts2",
            [
                Watcher {
                    conns: &gone,
                    live: true,
                },
                Watcher {
                    conns: &silent,
                    live: true,
                },
            ],
        );
        assert_eq!((s.watchers, s.reconnected, s.not_back), (2, 1, 1));
        assert_eq!((s.duration_us, s.reopened_us), (None, Some(50)));
    }

    #[test]
    fn latency_of_what_was_written_in_the_window() {
        let sent = [5, 10, 15, 20, 25];
        let lat = [1, 2, 3, 4, 5];
        assert_eq!(written_within(&sent, &lat, 10, 20), [2_000, 3_000, 4_000]);
        assert!(written_within(&sent, &lat, 30, 40).is_empty());
    }

    #[test]
    fn the_killed_instances_live_runs_must_end_interrupted() {
        let kill = 10_000;
        let i = interrupts(
            kill,
            [
                // Finished before the kill: not live at it.
                RunEnd {
                    on_victim: true,
                    finish: Some((9_000, None)),
                },
                RunEnd {
                    on_victim: true,
                    finish: Some((12_500, Some("interrupted"))),
                },
                RunEnd {
                    on_victim: true,
                    finish: Some((13_100, Some("interrupted"))),
                },
                // Live at the kill, but not closed (or not as interrupted).
                RunEnd {
                    on_victim: true,
                    finish: None,
                },
                RunEnd {
                    on_victim: false,
                    finish: Some((11_000, None)),
                },
                RunEnd {
                    on_victim: false,
                    finish: Some((11_000, Some("interrupted"))),
                },
            ],
        );
        assert_eq!(
            i,
            Interrupts {
                live_at_kill: 3,
                interrupted: 2,
                last_after_ms: Some(3_100),
                others_interrupted: 1,
            }
        );
    }
}

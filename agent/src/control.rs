//! Control of a run through the log: cancel and confirmation answers.
//!
//! Nobody calls into a running run. `POST …/cancel` and `POST …/confirm` append
//! `cancel-requested` and `confirmation-answered` to the thread's stream, from whichever process
//! took the request; the run sees them by reading its thread's log. A watcher task per run
//! follows the thread's feed (its in-memory tail, else the store) whenever the head moves,
//! and re-reads every [`RECHECK`] anyway, so a missed wake-up (or, later, a head notification
//! from another process that never arrives) costs latency, never correctness.
//!
//! The run waits on the watcher's [`ControlState`] (a `watch` channel): cancellation, each
//! request id's answer, and the cancellations and corrections of its background tasks.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use threadstream_domain::event::{CancelRequested, ConfirmationAnswered, TaskCorrection, TaskRef};
use threadstream_domain::{StoredEvent, Thread};
use threadstream_store::{EventLog, Page, StoreError, ThreadFeed};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often the watcher re-reads the log from the store when no head change woke it: what a
/// lost head notification can delay a cancel or an answer by. Each re-read is a query, one per
/// live run per period (at 250 ms, 160 a second for 40 runs on Postgres); a second, as the SSE
/// and Durable Streams readers re-check (`api/src/sse/subscriber.rs`, `durable-streams/src/reader.rs`).
pub const RECHECK: Duration = Duration::from_secs(1);

const PAGE: usize = 1_000;

/// The user's answer to one confirmation request.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub approved: bool,
    pub user_input: Option<String>,
    /// Structured answers (`questions` requests), as the client sent them.
    pub answers: Option<serde_json::Value>,
}

/// What the run has been told so far.
#[derive(Debug, Clone, Default)]
pub struct ControlState {
    pub cancelled: bool,
    /// The cancel's reason (`user_cancelled`, `service_shutdown`), once cancelled.
    pub cancel_reason: Option<String>,
    pub answers: HashMap<String, Answer>,
    /// Background tasks asked to stop.
    pub cancelled_tasks: HashSet<String>,
    /// Corrections for background tasks, in log order: (task id, message).
    pub corrections: Vec<(String, String)>,
}

/// A run's view of its control events. Dropping it stops the watcher.
pub struct Control {
    rx: watch::Receiver<ControlState>,
    task: JoinHandle<()>,
}

impl Drop for Control {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Control {
    /// Starts watching `run_id` in `thread_id`. Returns the thread's command-side state at the
    /// start, so the caller can check that the run is live (and whether a cancel came first).
    pub async fn start(
        log: &EventLog,
        thread_id: &str,
        run_id: &str,
    ) -> Result<(Control, Thread), StoreError> {
        // Take the global head, then the aggregate: every event with an id up to that head is
        // in the aggregate, every later one is read by the watcher (its first read is at once).
        let cursor = *log.heads().global().borrow();
        let state = log.thread_state(thread_id).await?;
        let live = state
            .live_run()
            .filter(|r| r.run_id == run_id && r.cancel_requested);
        let (tx, rx) = watch::channel(ControlState {
            cancelled: live.is_some(),
            cancel_reason: live.and_then(|r| r.cancel_reason.clone()),
            ..ControlState::default()
        });
        let task = tokio::spawn(watch_log(
            log.feed(thread_id, cursor),
            run_id.to_string(),
            tx,
        ));
        Ok((Control { rx, task }, state))
    }

    /// Resolves once the run is cancelled.
    pub async fn cancelled(&self) {
        let mut rx = self.rx.clone();
        if rx.wait_for(|s| s.cancelled).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.rx.borrow().cancelled
    }

    /// Why the run was cancelled (`None` before a cancel, or for a cancel stored without one).
    pub fn cancel_reason(&self) -> Option<String> {
        self.rx.borrow().cancel_reason.clone()
    }

    /// Resolves once background task `task_id` is asked to stop.
    pub async fn task_cancelled(&self, task_id: &str) {
        let mut rx = self.rx.clone();
        if rx
            .wait_for(|s| s.cancelled_tasks.contains(task_id))
            .await
            .is_err()
        {
            std::future::pending::<()>().await;
        }
    }

    /// The corrections for `task_id` after the first `seen` of them; advances `seen`.
    pub fn corrections(&self, task_id: &str, seen: &mut usize) -> Vec<String> {
        let state = self.rx.borrow();
        let all: Vec<&String> = state
            .corrections
            .iter()
            .filter(|(t, _)| t == task_id)
            .map(|(_, m)| m)
            .collect();
        let new = all.iter().skip(*seen).map(|m| (*m).clone()).collect();
        *seen = all.len();
        new
    }

    /// Waits for the answer to `request_id`. Never resolves when the run is cancelled first:
    /// the caller races it against [`Control::cancelled`].
    pub async fn answer(&self, request_id: &str) -> Answer {
        let mut rx = self.rx.clone();
        let answer = match rx.wait_for(|s| s.answers.contains_key(request_id)).await {
            Ok(state) => state.answers.get(request_id).cloned(),
            Err(_) => None,
        };
        match answer {
            Some(a) => a,
            None => std::future::pending().await,
        }
    }
}

/// Follows the thread through a [`ThreadFeed`], as its stream readers do: pages come from the
/// thread's in-memory tail when it holds them, so a run at model speed does not read its thread
/// from the store at every token (it did: one query per appended event, docs/performance.md,
/// "Cost per token at model speed"); every [`RECHECK`] the next page comes from the store.
async fn watch_log(mut feed: ThreadFeed, run_id: String, tx: watch::Sender<ControlState>) {
    let mut tick = tokio::time::interval(RECHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut head_open = true;
    loop {
        // Read everything after the cursor.
        loop {
            let page = match feed.next_page(PAGE).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "control: cannot read the log; retrying"
                    );
                    break;
                }
            };
            let rows: Vec<&StoredEvent> = match &page {
                Page::Tail(events) => events.iter().map(|e| &e.event).collect(),
                Page::Store(events) => events.iter().collect(),
            };
            for row in rows.iter().filter(|r| r.run_id == run_id) {
                match row.event_type.as_str() {
                    "cancel-requested" => {
                        tracing::debug!(event_id = row.id, "control: cancel requested");
                        let reason = serde_json::from_str::<CancelRequested>(&row.payload)
                            .ok()
                            .map(|c| c.reason);
                        tx.send_modify(|s| {
                            s.cancelled = true;
                            s.cancel_reason = reason;
                        });
                    }
                    "confirmation-answered" => {
                        match serde_json::from_str::<ConfirmationAnswered>(&row.payload) {
                            Ok(a) => {
                                tracing::debug!(request_id = %a.request_id, approved = a.approved, "control: confirmation answered");
                                tx.send_modify(|s| {
                                    s.answers.insert(
                                        a.request_id,
                                        Answer {
                                            approved: a.approved,
                                            user_input: a.user_input,
                                            answers: a.answers,
                                        },
                                    );
                                });
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, event_id = row.id, "control: undecodable answer")
                            }
                        }
                    }
                    "task-cancel-requested" => {
                        if let Ok(t) = serde_json::from_str::<TaskRef>(&row.payload) {
                            tx.send_modify(|s| {
                                s.cancelled_tasks.insert(t.task_id);
                            });
                        }
                    }
                    "task-correction" => {
                        if let Ok(c) = serde_json::from_str::<TaskCorrection>(&row.payload) {
                            tx.send_modify(|s| s.corrections.push((c.task_id, c.message)));
                        }
                    }
                    _ => {}
                }
            }
            if rows.len() < PAGE {
                break;
            }
        }
        if head_open {
            tokio::select! {
                changed = feed.changed() => {
                    if changed.is_err() {
                        head_open = false;
                    }
                }
                _ = tick.tick() => feed.read_store_next(),
            }
        } else {
            tick.tick().await;
            feed.read_store_next();
        }
    }
}

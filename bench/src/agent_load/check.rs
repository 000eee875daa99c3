//! The full check of the agent-load scenario: every watcher's stream against the log (read
//! straight from the store's `events` table, not through the server), event by event.

use std::collections::HashMap;

use threadstream_domain::is_n8n_type;

use super::logdb::LogDb;
use super::watch::{Protocol, Seen};
use crate::fake_llm::is_token;

/// A thread's events as the log holds them.
#[derive(Default)]
pub struct ThreadLog {
    /// (id, type) of every event, in id order.
    pub events: Vec<(i64, String)>,
    /// The model's tokens of its text-deltas, in order.
    pub tokens: Vec<String>,
    /// When its last event was written (wall-clock ms, the log's `ts`).
    pub last_ts: i64,
    /// Its last `run-finish`: when (ms), and the payload's `reason` if it has one.
    pub finish: Option<(i64, Option<String>)>,
    /// When its first `run-start` was written (ms).
    pub run_start: Option<i64>,
}

impl ThreadLog {
    /// How long its run was live, from its first `run-start` to its last `run-finish` (ms).
    pub fn live_ms(&self) -> i64 {
        match (self.run_start, &self.finish) {
            (Some(a), Some((b, _))) => (b - a).max(0),
            _ => 0,
        }
    }

    /// The id of the last event a watcher is sent (the last n8n-type event).
    pub fn last_n8n(&self) -> Option<i64> {
        self.events
            .iter()
            .rev()
            .find(|(_, t)| is_n8n_type(t))
            .map(|(id, _)| *id)
    }
}

/// Every thread whose id starts with one of `prefixes`.
pub async fn read_log(
    db: &mut LogDb,
    prefixes: &[&str],
) -> anyhow::Result<HashMap<String, ThreadLog>> {
    let mut out: HashMap<String, ThreadLog> = HashMap::new();
    for prefix in prefixes {
        for r in db.thread_events(prefix).await? {
            let t = out.entry(r.thread).or_default();
            t.last_ts = r.ts;
            if r.ty == "run-start" && t.run_start.is_none() {
                t.run_start = Some(r.ts);
            }
            if r.ty == "run-finish" {
                let p: serde_json::Value = serde_json::from_str(&r.payload)?;
                let reason = p["reason"].as_str().map(str::to_string);
                t.finish = Some((t.last_ts, reason));
            }
            if r.ty == "text-delta" {
                let p: serde_json::Value = serde_json::from_str(&r.payload)?;
                if let Some(text) = p["text"].as_str() {
                    t.tokens.extend(
                        text.split_whitespace()
                            .filter(|x| is_token(x))
                            .map(str::to_string),
                    );
                }
            }
            t.events.push((r.id, r.ty));
        }
    }
    Ok(out)
}

/// Why `seen` is not exactly its thread's log, or `None` when it is.
///
/// n8n: the ids and types are exactly the log's n8n-type events, in order. AG-UI: the ids are
/// strictly increasing and each is one of the thread's events (the last frame of a stored
/// event carries its id; events that render nothing carry none), every n8n-type event that
/// renders a frame of its own is there, and the model's tokens are exactly the log's, in order.
pub fn mismatch(seen: &Seen, log: &ThreadLog) -> Option<String> {
    if let Some(e) = &seen.error {
        return Some(format!("stopped: {e}"));
    }
    match seen.protocol {
        Protocol::N8n => {
            let want: Vec<(i64, &str)> = log
                .events
                .iter()
                .filter(|(_, t)| is_n8n_type(t))
                .map(|(id, t)| (*id, t.as_str()))
                .collect();
            let got: Vec<(i64, &str)> = seen
                .ids
                .iter()
                .copied()
                .zip(seen.types.iter().map(String::as_str))
                .collect();
            if got != want {
                let at = got.iter().zip(&want).position(|(a, b)| a != b);
                return Some(format!(
                    "n8n: {} events, log has {}; first difference at {:?}: got {:?}, log {:?}",
                    got.len(),
                    want.len(),
                    at,
                    at.and_then(|i| got.get(i)),
                    at.and_then(|i| want.get(i))
                ));
            }
        }
        Protocol::AgUi => {
            if let Some(w) = seen.ids.windows(2).find(|w| w[0] >= w[1]) {
                return Some(format!("AG-UI: id {} after {}", w[1], w[0]));
            }
            let types: HashMap<i64, &str> =
                log.events.iter().map(|(i, t)| (*i, t.as_str())).collect();
            if let Some(id) = seen.ids.iter().find(|id| !types.contains_key(id)) {
                return Some(format!("AG-UI: id {id} is not an event of the thread"));
            }
            let got: std::collections::HashSet<i64> = seen.ids.iter().copied().collect();
            let missing: Vec<(i64, &str)> = log
                .events
                .iter()
                .filter(|(id, t)| renders_alone(t) && !got.contains(id))
                .map(|(id, t)| (*id, t.as_str()))
                .take(3)
                .collect();
            if !missing.is_empty() {
                return Some(format!("AG-UI: events missing, e.g. {missing:?}"));
            }
        }
    }
    if seen.tokens != log.tokens {
        let at = seen
            .tokens
            .iter()
            .zip(&log.tokens)
            .position(|(a, b)| a != b);
        return Some(format!(
            "{:?}: {} tokens, log has {}; first difference at {at:?}",
            seen.protocol,
            seen.tokens.len(),
            log.tokens.len()
        ));
    }
    None
}

/// n8n types whose AG-UI rendering always has a frame (so an id) of its own.
fn renders_alone(t: &str) -> bool {
    matches!(
        t,
        "run-start"
            | "text-delta"
            | "tool-call"
            | "tool-result"
            | "agent-spawned"
            | "agent-completed"
            | "run-finish"
    )
}

//! Run analytics: one [`RunAnalytics`] document per run, what `GET /instance-ai/analytics/runs`
//! and `threadstream analytics` report.
//!
//! The document owns the per-run counters: start, end, duration, status, tool calls per tool,
//! tool errors, confirmations asked/approved/denied, sub-agents, text and reasoning characters,
//! and tokens when the provider reported them (`llm-usage`, also per model); for the analytics
//! page also the run's events, its time to first token, tool errors per tool and
//! confirmations left unanswered when the run timed out. Keys are per run
//! ([`run_key`]); events outside a run (thread-created, renames, workflow streams) are ignored.
//!
//! Background sub-agents may keep emitting events with a run's id after its `run-finish`, until
//! their `agent-completed`: those events are still counted for the run (they are its work), but
//! they never move its end or duration, which are the orchestrator's `run-finish`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use threadstream_domain::event::{EventBody, RunStatus};
use threadstream_domain::StoredEvent;

/// The document of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunAnalytics {
    pub thread_id: String,
    pub run_id: String,
    /// The user who started the run (`run-start`'s user), else the first user seen in the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Epoch ms of `run-start` (0 when the run's start was never seen).
    pub started_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<i64>,
    /// `live` until `run-finish`, then `completed`, `cancelled` or `error`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Tool calls per tool name.
    pub tool_calls: BTreeMap<String, u64>,
    pub tool_errors: u64,
    pub confirmations_asked: u64,
    pub confirmations_approved: u64,
    pub confirmations_denied: u64,
    pub sub_agents: u64,
    /// Characters (Unicode scalar values) of text and reasoning deltas.
    pub text_chars: u64,
    pub reasoning_chars: u64,
    /// Tokens, when the provider reported any for this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Tokens per model (`llm-usage.model`).
    #[serde(default)]
    pub tokens_by_model: BTreeMap<String, ModelTokens>,
    /// Events of the run (every event with its run id, background sub-agents' included).
    #[serde(default)]
    pub events: u64,
    /// Milliseconds from `run-start` to the run's first text or reasoning delta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token_ms: Option<i64>,
    /// Tool errors per tool name.
    #[serde(default)]
    pub tool_errors_by_tool: BTreeMap<String, u64>,
    /// Confirmations still unanswered when the run ended on the confirmation timeout.
    #[serde(default)]
    pub confirmations_timed_out: u64,
    /// Tool calls not settled yet, by id → tool name: how a `tool-error` finds its tool.
    /// Empty once every call is settled, and then not written.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub open_tool_calls: BTreeMap<String, String>,
    /// Id of the last event folded in (replaying an older event is a no-op).
    pub last_id: i64,
}

/// Input and output tokens of one model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelTokens {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// The `run-finish` reason of a run that ended because a confirmation was not answered in time.
pub const TIMEOUT_REASON: &str = "timeout";

/// The key of a run's document: thread ids hold no control characters, so `\n` separates.
pub fn run_key(thread_id: &str, run_id: &str) -> String {
    format!("{thread_id}\n{run_id}")
}

impl RunAnalytics {
    /// Total tool calls of every tool.
    pub fn tool_call_count(&self) -> u64 {
        self.tool_calls.values().sum()
    }

    fn first_token(&mut self, ts: i64) {
        if self.first_token_ms.is_none() && self.started_at > 0 {
            self.first_token_ms = Some((ts - self.started_at).max(0));
        }
    }

    /// Folds one event of this run.
    pub fn apply(&mut self, e: &StoredEvent) {
        if e.id <= self.last_id {
            return;
        }
        self.last_id = e.id;
        self.events += 1;
        if self.thread_id.is_empty() {
            self.thread_id = e.thread_id.clone();
            self.run_id = e.run_id.clone();
            self.status = "live".into();
        }
        let Ok(event) = e.decode() else { return };
        if self.user.is_none() {
            self.user = event.user_id.clone();
        }
        match &event.body {
            EventBody::RunStart(_) => {
                self.started_at = e.ts;
                if event.user_id.is_some() {
                    self.user = event.user_id.clone();
                }
            }
            EventBody::RunFinish(p) if self.finished_at.is_none() => {
                self.finished_at = Some(e.ts);
                self.duration_ms = Some((e.ts - self.started_at).max(0));
                self.status = match p.status {
                    RunStatus::Completed => "completed",
                    RunStatus::Cancelled => "cancelled",
                    RunStatus::Error => "error",
                }
                .into();
                self.reason = p.reason.clone();
                if p.reason.as_deref() == Some(TIMEOUT_REASON) {
                    self.confirmations_timed_out = self
                        .confirmations_asked
                        .saturating_sub(self.confirmations_approved + self.confirmations_denied);
                }
            }
            EventBody::ToolCall(p) => {
                *self.tool_calls.entry(p.tool_name.clone()).or_default() += 1;
                self.open_tool_calls
                    .insert(p.tool_call_id.clone(), p.tool_name.clone());
            }
            EventBody::ToolResult(p) => {
                self.open_tool_calls.remove(&p.tool_call_id);
            }
            EventBody::ToolError(p) => {
                self.tool_errors += 1;
                let tool = self
                    .open_tool_calls
                    .remove(&p.tool_call_id)
                    .unwrap_or_default();
                *self.tool_errors_by_tool.entry(tool).or_default() += 1;
            }
            EventBody::ConfirmationRequest(_) => self.confirmations_asked += 1,
            EventBody::ConfirmationAnswered(p) if p.approved => self.confirmations_approved += 1,
            EventBody::ConfirmationAnswered(_) => self.confirmations_denied += 1,
            EventBody::AgentSpawned(_) => self.sub_agents += 1,
            EventBody::TextDelta(p) => {
                self.first_token(e.ts);
                self.text_chars += p.text.chars().count() as u64;
            }
            EventBody::ReasoningDelta(p) => {
                self.first_token(e.ts);
                self.reasoning_chars += p.text.chars().count() as u64;
            }
            EventBody::LlmUsage(u) => {
                *self.input_tokens.get_or_insert(0) += u.input_tokens;
                *self.output_tokens.get_or_insert(0) += u.output_tokens;
                let m = self.tokens_by_model.entry(u.model.clone()).or_default();
                m.input_tokens += u.input_tokens;
                m.output_tokens += u.output_tokens;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Log;
    use crate::{rebuild, Analytics, ReadModel};
    use serde_json::json;

    #[test]
    fn counts_one_run_and_ignores_thread_events() {
        let mut log = Log::new("t1");
        log.internal("thread-created", json!({"owner": "u1"}));
        log.start_run("r1", "o", "m1", "hi", None);
        log.n8n("r1", "o", "reasoning-delta", json!({"text": "hmm…"}));
        log.tool_call("r1", "o", "tc1", "delete-workflow");
        log.n8n(
            "r1",
            "o",
            "confirmation-request",
            json!({"requestId":"q1","toolCallId":"tc1","toolName":"delete-workflow","args":{},"severity":"destructive","message":"Delete?"}),
        );
        log.internal_in_run(
            "r1",
            "o",
            "confirmation-answered",
            json!({"requestId": "q1", "approved": false}),
        );
        log.n8n(
            "r1",
            "o",
            "tool-error",
            json!({"toolCallId": "tc1", "error": "denied"}),
        );
        log.tool_call("r1", "o", "tc2", "list-workflows");
        log.tool_call("r1", "o", "tc3", "list-workflows");
        log.n8n(
            "r1",
            "s1",
            "agent-spawned",
            json!({"parentId": "o", "role": "builder", "tools": [], "taskId": "k1"}),
        );
        log.internal_in_run(
            "r1",
            "o",
            "llm-usage",
            json!({"model": "m", "inputTokens": 10, "outputTokens": 3}),
        );
        log.internal_in_run(
            "r1",
            "o",
            "llm-usage",
            json!({"model": "m", "inputTokens": 5, "outputTokens": 2}),
        );
        log.n8n("r1", "o", "text-delta", json!({"text": "héllo"}));
        log.n8n(
            "r1",
            "o",
            "run-finish",
            json!({"status": "error", "reason": "boom"}),
        );
        // A background sub-agent goes on after the run finished: counted, duration unchanged.
        log.n8n("r1", "s1", "text-delta", json!({"text": "late"}));
        let docs = rebuild::<Analytics>(&log.events);
        assert_eq!(docs.len(), 1, "thread-created is no run: {docs:?}");
        let run = &docs[&run_key("t1", "r1")];
        let start = log.events[2].ts;
        let finish = log.events[log.events.len() - 2].ts;
        assert_eq!(run.started_at, start);
        assert_eq!(run.finished_at, Some(finish));
        assert_eq!(run.duration_ms, Some(finish - start));
        assert_eq!(run.status, "error");
        assert_eq!(run.reason.as_deref(), Some("boom"));
        assert_eq!(run.tool_calls["list-workflows"], 2);
        assert_eq!(run.tool_calls["delete-workflow"], 1);
        assert_eq!(run.tool_call_count(), 3);
        assert_eq!(run.tool_errors, 1);
        assert_eq!(
            (
                run.confirmations_asked,
                run.confirmations_approved,
                run.confirmations_denied
            ),
            (1, 0, 1)
        );
        assert_eq!(run.sub_agents, 1);
        assert_eq!(run.text_chars, 5 + 4);
        assert_eq!(run.reasoning_chars, 4);
        assert_eq!((run.input_tokens, run.output_tokens), (Some(15), Some(5)));
        assert_eq!(run.user.as_deref(), Some("u1"));
        assert_eq!(
            run.tokens_by_model["m"],
            ModelTokens {
                input_tokens: 15,
                output_tokens: 5
            }
        );
        // Every event of the run (run-start … the late sub-agent delta), none of the thread's.
        assert_eq!(run.events, log.events.len() as u64 - 1);
        assert_eq!(run.first_token_ms, Some(log.events[3].ts - start));
        assert_eq!(run.tool_errors_by_tool["delete-workflow"], 1);
        assert_eq!(run.tool_errors_by_tool.len(), 1);
        assert_eq!(run.confirmations_timed_out, 0, "not a timeout");

        // Folding an event again changes nothing.
        let mut again = run.clone();
        Analytics::apply(&mut again, &log.events[5]);
        assert_eq!(&again, run);
    }

    #[test]
    fn a_run_ending_on_the_confirmation_timeout_counts_the_unanswered_ones() {
        let mut log = Log::new("t3");
        log.start_run("r1", "o", "m1", "hi", None);
        log.tool_call("r1", "o", "tc1", "delete-workflow");
        log.n8n(
            "r1",
            "o",
            "confirmation-request",
            json!({"requestId":"q1","toolCallId":"tc1","toolName":"delete-workflow","args":{},"severity":"destructive","message":"Delete?"}),
        );
        log.n8n(
            "r1",
            "o",
            "tool-error",
            json!({"toolCallId": "tc1", "error": "The confirmation was not answered in time"}),
        );
        log.n8n(
            "r1",
            "o",
            "run-finish",
            json!({"status": "cancelled", "reason": TIMEOUT_REASON}),
        );
        let docs = rebuild::<Analytics>(&log.events);
        let run = &docs[&run_key("t3", "r1")];
        assert_eq!(run.confirmations_timed_out, 1);
        assert_eq!(run.first_token_ms, None, "no text at all");
        assert!(run.open_tool_calls.is_empty());
        let v = serde_json::to_value(run).unwrap();
        assert!(v.get("openToolCalls").is_none(), "{v}");
    }

    #[test]
    fn a_run_without_usage_has_no_tokens_and_stays_live() {
        let mut log = Log::new("t2");
        log.start_run("r9", "o", "m", "x", None);
        let docs = rebuild::<Analytics>(&log.events);
        let run = &docs[&run_key("t2", "r9")];
        assert_eq!(run.status, "live");
        assert_eq!(run.input_tokens, None);
        assert_eq!(run.duration_ms, None);
        let v = serde_json::to_value(run).unwrap();
        assert!(v.get("inputTokens").is_none(), "{v}");
    }
}

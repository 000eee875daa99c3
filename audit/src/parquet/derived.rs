//! The derived tables of a Parquet export, folded from the exported events in one pass: `runs`
//! (the analytics read model's [`RunAnalytics`], folded by the same code), `llm_calls`,
//! `tool_calls` and `confirmations`. Only events of a run count, as for the read model
//! ([`Analytics::key`]); they are small (rows per run and per call), so they are kept in memory
//! until written.

use std::collections::HashMap;
use std::io::Write;

use threadstream_domain::event::EventBody;
use threadstream_domain::StoredEvent;
use threadstream_projections::analytics::TIMEOUT_REASON;
use threadstream_projections::{Analytics, ReadModel, RunAnalytics};

use super::columns::TableWriter;
use super::tables::{
    self, ConfirmationOutcome, ConfirmationRow, LlmCallRow, Table, ToolCallRow, ToolOutcome,
};
use crate::AuditError;

/// Where a row came from: the event's id, thread, run, agent and time.
fn origin(e: &StoredEvent) -> (i64, String, String, String) {
    (
        e.id,
        e.thread_id.clone(),
        e.run_id.clone(),
        e.agent_id.clone(),
    )
}

/// The derived tables being folded.
#[derive(Default)]
pub struct Derived {
    /// By [`Analytics::key`].
    runs: HashMap<String, RunAnalytics>,
    llm_calls: Vec<LlmCallRow>,
    tool_calls: Vec<ToolCallRow>,
    /// Unsettled calls: (run key, tool call id) → row; as the read model, per run.
    open_tool_calls: HashMap<(String, String), usize>,
    confirmations: Vec<ConfirmationRow>,
    /// Unanswered requests: (thread, request id) → row.
    open_confirmations: HashMap<(String, String), usize>,
}

impl Derived {
    pub fn apply(&mut self, e: &StoredEvent) {
        let Some(key) = Analytics::key(e) else {
            return;
        };
        let run = self.runs.entry(key.clone()).or_default();
        // A compacted row as the deltas it replaced: the run's counts and first token as before.
        for delta in e.expanded() {
            run.apply(&delta);
        }
        let Ok(event) = e.decode() else { return };
        match event.body {
            EventBody::LlmUsage(usage) => self.llm_calls.push(LlmCallRow {
                id: e.id,
                thread: e.thread_id.clone(),
                run: e.run_id.clone(),
                agent: e.agent_id.clone(),
                ts: e.ts,
                usage,
            }),
            EventBody::ToolCall(p) => {
                let (id, thread, run, agent) = origin(e);
                self.open_tool_calls
                    .insert((key, p.tool_call_id.clone()), self.tool_calls.len());
                self.tool_calls.push(ToolCallRow {
                    id,
                    thread,
                    run,
                    agent,
                    tool_call_id: p.tool_call_id,
                    tool: p.tool_name,
                    called_at: Some(e.ts),
                    settled_at: None,
                    outcome: None,
                    error: None,
                });
            }
            EventBody::ToolResult(p) => {
                if let Some(i) = self.open_tool_calls.remove(&(key, p.tool_call_id)) {
                    self.tool_calls[i].settled_at = Some(e.ts);
                    self.tool_calls[i].outcome = Some(ToolOutcome::Result);
                }
            }
            EventBody::ToolError(p) => {
                match self.open_tool_calls.remove(&(key, p.tool_call_id.clone())) {
                    Some(i) => {
                        let row = &mut self.tool_calls[i];
                        row.settled_at = Some(e.ts);
                        row.outcome = Some(ToolOutcome::Error);
                        row.error = Some(p.error);
                    }
                    None => {
                        let (id, thread, run, agent) = origin(e);
                        self.tool_calls.push(ToolCallRow {
                            id,
                            thread,
                            run,
                            agent,
                            tool_call_id: p.tool_call_id,
                            tool: String::new(),
                            called_at: None,
                            settled_at: Some(e.ts),
                            outcome: Some(ToolOutcome::Error),
                            error: Some(p.error),
                        });
                    }
                }
            }
            EventBody::ConfirmationRequest(p) => {
                let (id, thread, run, agent) = origin(e);
                self.open_confirmations.insert(
                    (thread.clone(), p.request_id.clone()),
                    self.confirmations.len(),
                );
                let severity = serde_json::to_value(p.severity)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                self.confirmations.push(ConfirmationRow {
                    id,
                    thread,
                    run,
                    agent,
                    request_id: p.request_id,
                    tool_call_id: p.tool_call_id,
                    tool: p.tool_name,
                    severity,
                    asked_at: e.ts,
                    answered_at: None,
                    outcome: None,
                });
            }
            EventBody::ConfirmationAnswered(p) => {
                let open = (e.thread_id.clone(), p.request_id);
                if let Some(i) = self.open_confirmations.remove(&open) {
                    let row = &mut self.confirmations[i];
                    row.answered_at = Some(e.ts);
                    row.outcome = Some(if p.approved {
                        ConfirmationOutcome::Approved
                    } else {
                        ConfirmationOutcome::Denied
                    });
                }
            }
            EventBody::RunFinish(p) if p.reason.as_deref() == Some(TIMEOUT_REASON) => {
                let timed_out: Vec<(String, String)> = self
                    .open_confirmations
                    .iter()
                    .filter(|(_, i)| {
                        let row = &self.confirmations[**i];
                        row.thread == e.thread_id && row.run == e.run_id
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in timed_out {
                    if let Some(i) = self.open_confirmations.remove(&k) {
                        self.confirmations[i].outcome = Some(ConfirmationOutcome::TimedOut);
                    }
                }
            }
            _ => {}
        }
    }

    /// Drops every row of `threads` (erased while the export read the log).
    pub fn forget(&mut self, threads: &std::collections::HashSet<&str>) {
        if threads.is_empty() {
            return;
        }
        self.runs
            .retain(|_, r| !threads.contains(r.thread_id.as_str()));
        self.llm_calls
            .retain(|c| !threads.contains(c.thread.as_str()));
        self.tool_calls
            .retain(|c| !threads.contains(c.thread.as_str()));
        self.confirmations
            .retain(|c| !threads.contains(c.thread.as_str()));
        // Indexes into the vectors are stale now; only finished exports forget.
        self.open_tool_calls.clear();
        self.open_confirmations.clear();
    }

    /// The runs, oldest first (as `threadstream analytics` lists them).
    pub fn runs(&self) -> Vec<RunAnalytics> {
        crate::report::select(self.runs.values().cloned(), &Default::default())
    }

    /// Writes `table`'s rows (none for `events`, which is not derived); returns how many.
    pub fn write<W: Write + Send>(
        &self,
        table: Table,
        out: &mut TableWriter<W>,
    ) -> Result<u64, AuditError> {
        let before = out.rows();
        match table {
            Table::Events => {}
            Table::Runs => {
                for r in self.runs() {
                    tables::run_row(out.row(), &r);
                    out.row_done()?;
                }
            }
            Table::LlmCalls => {
                for c in &self.llm_calls {
                    tables::llm_call_row(out.row(), c);
                    out.row_done()?;
                }
            }
            Table::ToolCalls => {
                for c in &self.tool_calls {
                    tables::tool_call_row(out.row(), c);
                    out.row_done()?;
                }
            }
            Table::Confirmations => {
                for c in &self.confirmations {
                    tables::confirmation_row(out.row(), c);
                    out.row_done()?;
                }
            }
        }
        Ok(out.rows() - before)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn event(id: i64, run: &str, event_type: &str, payload: Value) -> StoredEvent {
        StoredEvent {
            id,
            thread_id: "t".into(),
            seq: id,
            run_id: run.into(),
            agent_id: "o".into(),
            event_type: event_type.into(),
            payload: payload.to_string(),
            ts: 1_000 * id,
            response_id: None,
            user_id: None,
        }
    }

    fn ask(id: i64, request: &str) -> StoredEvent {
        event(
            id,
            "r",
            "confirmation-request",
            json!({"requestId": request, "toolCallId": "c", "toolName": "delete-workflow",
                   "args": {}, "severity": "destructive", "message": "Delete?"}),
        )
    }

    #[test]
    fn calls_and_confirmations_are_settled_as_analytics_counts_them() {
        let mut d = Derived::default();
        let tool = |id, call: &str, name: &str| {
            event(
                id,
                "r",
                "tool-call",
                json!({"toolCallId": call, "toolName": name, "args": {}}),
            )
        };
        for e in [
            event(1, "", "thread-created", json!({"owner": "u"})),
            event(2, "r", "run-start", json!({"messageId": "m"})),
            tool(3, "a", "list-workflows"),
            tool(4, "b", "create-workflow"),
            event(
                5,
                "r",
                "tool-result",
                json!({"toolCallId": "a", "result": 1}),
            ),
            event(
                6,
                "r",
                "tool-error",
                json!({"toolCallId": "b", "error": "boom"}),
            ),
            event(
                7,
                "r",
                "tool-error",
                json!({"toolCallId": "never", "error": "lost"}),
            ),
            event(
                8,
                "r",
                "llm-usage",
                json!({"model": "m", "inputTokens": 3, "outputTokens": 1}),
            ),
            ask(9, "q1"),
            ask(10, "q2"),
            event(
                11,
                "r",
                "confirmation-answered",
                json!({"requestId": "q1", "approved": false}),
            ),
            event(
                12,
                "r",
                "run-finish",
                json!({"status": "cancelled", "reason": "timeout"}),
            ),
        ] {
            d.apply(&e);
        }
        let runs = d.runs();
        assert_eq!(runs.len(), 1, "thread-created is no run");
        assert_eq!(
            (runs[0].tool_errors, runs[0].confirmations_timed_out),
            (2, 1)
        );

        let settled: Vec<(&str, Option<&str>, Option<i64>)> = d
            .tool_calls
            .iter()
            .map(|c| {
                (
                    c.tool.as_str(),
                    c.outcome.map(ToolOutcome::name),
                    c.called_at,
                )
            })
            .collect();
        assert_eq!(
            settled,
            [
                ("list-workflows", Some("result"), Some(3_000)),
                ("create-workflow", Some("error"), Some(4_000)),
                ("", Some("error"), None),
            ]
        );
        let answers: Vec<Option<&str>> = d
            .confirmations
            .iter()
            .map(|c| c.outcome.map(ConfirmationOutcome::name))
            .collect();
        assert_eq!(answers, [Some("denied"), Some("timed_out")]);
        assert_eq!(d.confirmations[0].severity, "destructive");
        assert_eq!(d.llm_calls.len(), 1);

        let mut out = TableWriter::new(Table::ToolCalls.columns(), Vec::new()).unwrap();
        assert_eq!(d.write(Table::ToolCalls, &mut out).unwrap(), 3);
        assert_eq!(
            d.write(Table::Events, &mut out).unwrap(),
            0,
            "events are not derived"
        );
    }
}

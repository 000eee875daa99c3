//! The tables of a Parquet export: `events` (one row per stored event) and the derived tables
//! `runs`, `llm_calls`, `tool_calls` and `confirmations` ([`crate::parquet::derived`] folds
//! them). Each table's columns are declared here once, beside the function that fills a row
//! (and, for the derived tables, the row it is filled from).

use threadstream_domain::StoredEvent;
use threadstream_projections::RunAnalytics;

use super::columns::{opt, req, Column, Kind, Rows};
use threadstream_domain::event::LlmUsage;

/// A table of the export (the `table` query parameter of the admin route).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Table {
    Events,
    Runs,
    LlmCalls,
    ToolCalls,
    Confirmations,
}

impl Table {
    pub const ALL: [Table; 5] = [
        Table::Events,
        Table::Runs,
        Table::LlmCalls,
        Table::ToolCalls,
        Table::Confirmations,
    ];

    /// The table's name: its folder in an export directory, the `table` query parameter.
    pub fn name(self) -> &'static str {
        match self {
            Table::Events => "events",
            Table::Runs => "runs",
            Table::LlmCalls => "llm_calls",
            Table::ToolCalls => "tool_calls",
            Table::Confirmations => "confirmations",
        }
    }

    pub fn columns(self) -> &'static [Column] {
        match self {
            Table::Events => EVENTS,
            Table::Runs => RUNS,
            Table::LlmCalls => LLM_CALLS,
            Table::ToolCalls => TOOL_CALLS,
            Table::Confirmations => CONFIRMATIONS,
        }
    }
}

/// One row per stored event: the log's own fields, the payload as JSON.
const EVENTS: &[Column] = &[
    req("id", Kind::Int),
    req("thread", Kind::Text),
    req("seq", Kind::Int),
    req("run", Kind::Text),
    req("agent", Kind::Text),
    req("type", Kind::Text),
    req("timestamp", Kind::Time),
    opt("user", Kind::Text),
    opt("response_id", Kind::Text),
    req("payload", Kind::Json),
];

pub fn event_row(rows: &mut Rows, e: &StoredEvent) {
    rows.int(Some(e.id))
        .text(Some(&e.thread_id))
        .int(Some(e.seq))
        .text(Some(&e.run_id))
        .text(Some(&e.agent_id))
        .text(Some(&e.event_type))
        .time(Some(e.ts))
        .text(e.user_id.as_deref())
        .text(e.response_id.as_deref())
        .text(Some(&e.payload))
        .end_row();
}

/// One row per run: the analytics read model's document ([`RunAnalytics`]).
const RUNS: &[Column] = &[
    req("thread", Kind::Text),
    req("run", Kind::Text),
    opt("user", Kind::Text),
    req("started_at", Kind::Time),
    opt("finished_at", Kind::Time),
    opt("duration_ms", Kind::Int),
    req("status", Kind::Text),
    opt("reason", Kind::Text),
    req("events", Kind::Int),
    opt("first_token_ms", Kind::Int),
    req("tool_calls", Kind::Int),
    req("tool_errors", Kind::Int),
    req("confirmations_asked", Kind::Int),
    req("confirmations_approved", Kind::Int),
    req("confirmations_denied", Kind::Int),
    req("confirmations_timed_out", Kind::Int),
    req("sub_agents", Kind::Int),
    req("text_chars", Kind::Int),
    req("reasoning_chars", Kind::Int),
    opt("input_tokens", Kind::Int),
    opt("output_tokens", Kind::Int),
];

fn count(n: u64) -> Option<i64> {
    Some(i64::try_from(n).unwrap_or(i64::MAX))
}

pub fn run_row(rows: &mut Rows, r: &RunAnalytics) {
    rows.text(Some(&r.thread_id))
        .text(Some(&r.run_id))
        .text(r.user.as_deref())
        .time(Some(r.started_at))
        .time(r.finished_at)
        .int(r.duration_ms)
        .text(Some(&r.status))
        .text(r.reason.as_deref())
        .int(count(r.events))
        .int(r.first_token_ms)
        .int(count(r.tool_call_count()))
        .int(count(r.tool_errors))
        .int(count(r.confirmations_asked))
        .int(count(r.confirmations_approved))
        .int(count(r.confirmations_denied))
        .int(count(r.confirmations_timed_out))
        .int(count(r.sub_agents))
        .int(count(r.text_chars))
        .int(count(r.reasoning_chars))
        .int(r.input_tokens.and_then(count))
        .int(r.output_tokens.and_then(count))
        .end_row();
}

/// One row per model call (`llm-usage`).
const LLM_CALLS: &[Column] = &[
    req("id", Kind::Int),
    req("thread", Kind::Text),
    req("run", Kind::Text),
    req("agent", Kind::Text),
    req("timestamp", Kind::Time),
    req("model", Kind::Text),
    opt("provider", Kind::Text),
    req("input_tokens", Kind::Int),
    req("output_tokens", Kind::Int),
    opt("started_at", Kind::Time),
    opt("first_chunk_ms", Kind::Int),
];

pub fn llm_call_row(rows: &mut Rows, c: &LlmCallRow) {
    rows.int(Some(c.id))
        .text(Some(&c.thread))
        .text(Some(&c.run))
        .text(Some(&c.agent))
        .time(Some(c.ts))
        .text(Some(&c.usage.model))
        .text(c.usage.provider.as_deref())
        .int(count(c.usage.input_tokens))
        .int(count(c.usage.output_tokens))
        .time(c.usage.started_at)
        .int(c.usage.first_chunk_ms)
        .end_row();
}

/// One row per tool call, with how it ended; a `tool-error` whose call is not in the run gets a
/// row of its own (`tool` empty, `called_at` null), as the analytics read model counts it.
const TOOL_CALLS: &[Column] = &[
    req("id", Kind::Int),
    req("thread", Kind::Text),
    req("run", Kind::Text),
    req("agent", Kind::Text),
    req("tool_call_id", Kind::Text),
    req("tool", Kind::Text),
    opt("called_at", Kind::Time),
    opt("settled_at", Kind::Time),
    opt("outcome", Kind::Text),
    opt("error", Kind::Text),
];

pub fn tool_call_row(rows: &mut Rows, c: &ToolCallRow) {
    rows.int(Some(c.id))
        .text(Some(&c.thread))
        .text(Some(&c.run))
        .text(Some(&c.agent))
        .text(Some(&c.tool_call_id))
        .text(Some(&c.tool))
        .time(c.called_at)
        .time(c.settled_at)
        .text(c.outcome.map(|o| o.name()))
        .text(c.error.as_deref())
        .end_row();
}

/// One row per confirmation asked, with its answer.
const CONFIRMATIONS: &[Column] = &[
    req("id", Kind::Int),
    req("thread", Kind::Text),
    req("run", Kind::Text),
    req("agent", Kind::Text),
    req("request_id", Kind::Text),
    req("tool_call_id", Kind::Text),
    req("tool", Kind::Text),
    req("severity", Kind::Text),
    req("asked_at", Kind::Time),
    opt("answered_at", Kind::Time),
    opt("outcome", Kind::Text),
];

pub fn confirmation_row(rows: &mut Rows, c: &ConfirmationRow) {
    rows.int(Some(c.id))
        .text(Some(&c.thread))
        .text(Some(&c.run))
        .text(Some(&c.agent))
        .text(Some(&c.request_id))
        .text(Some(&c.tool_call_id))
        .text(Some(&c.tool))
        .text(Some(&c.severity))
        .time(Some(c.asked_at))
        .time(c.answered_at)
        .text(c.outcome.map(|o| o.name()))
        .end_row();
}

// The derived tables' rows, as the fold (derived.rs) builds them.

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolOutcome {
    Result,
    Error,
}

impl ToolOutcome {
    pub fn name(self) -> &'static str {
        match self {
            ToolOutcome::Result => "result",
            ToolOutcome::Error => "error",
        }
    }
}

/// How a confirmation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfirmationOutcome {
    Approved,
    Denied,
    /// Unanswered when its run ended on the confirmation timeout.
    TimedOut,
}

impl ConfirmationOutcome {
    pub fn name(self) -> &'static str {
        match self {
            ConfirmationOutcome::Approved => "approved",
            ConfirmationOutcome::Denied => "denied",
            ConfirmationOutcome::TimedOut => "timed_out",
        }
    }
}

/// A row of `llm_calls`.
pub struct LlmCallRow {
    pub id: i64,
    pub thread: String,
    pub run: String,
    pub agent: String,
    pub ts: i64,
    pub usage: LlmUsage,
}

/// A row of `tool_calls`.
pub struct ToolCallRow {
    pub id: i64,
    pub thread: String,
    pub run: String,
    pub agent: String,
    pub tool_call_id: String,
    pub tool: String,
    pub called_at: Option<i64>,
    pub settled_at: Option<i64>,
    pub outcome: Option<ToolOutcome>,
    pub error: Option<String>,
}

/// A row of `confirmations`.
pub struct ConfirmationRow {
    pub id: i64,
    pub thread: String,
    pub run: String,
    pub agent: String,
    pub request_id: String,
    pub tool_call_id: String,
    pub tool: String,
    pub severity: String,
    pub asked_at: i64,
    pub answered_at: Option<i64>,
    pub outcome: Option<ConfirmationOutcome>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_is_named_alike_in_a_query_and_on_disk() {
        for t in Table::ALL {
            let parsed: Table = serde_json::from_value(serde_json::json!(t.name())).unwrap();
            assert_eq!(parsed, t);
        }
    }
}

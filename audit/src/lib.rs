//! Audit, replay and analytics tooling on the log. Every tool works on both stores (it only uses
//! the [`EventLog`](threadstream_store::EventLog) and its backend):
//!
//! - [`export`]: a thread, a run, a user's threads or a time range as NDJSON ([`line`] is the
//!   format), streamed page by page in constant memory;
//! - [`parquet`]: the same selection as Parquet, events partitioned by day and the derived tables
//!   (`runs`, `llm_calls`, `tool_calls`, `confirmations`) beside them, continued incrementally;
//! - [`import`]: NDJSON back into a store, every event checked against the `Thread` aggregate
//!   ([`rules`]), ids and seqs kept, all or nothing;
//! - [`verify`]: the log's invariants and every read model against a fresh fold, as a report;
//! - [`replay`]: a thread's events again with their original timing, as NDJSON or SSE;
//! - [`report`]: the analytics read model filtered, as JSON, CSV or a text summary;
//! - [`traces`]: a thread's runs as OpenTelemetry traces rebuilt from the log (OTLP);
//! - [`progress`]: progress of long operations (a bar on a terminal, log lines otherwise).

pub mod error;
pub mod export;
pub mod import;
pub mod line;
pub mod parquet;
pub mod progress;
pub mod replay;
pub mod report;
pub mod rules;
pub mod time;
pub mod traces;
pub mod verify;

pub use error::AuditError;

/// Events read from the store per page by every tool.
pub const PAGE: i64 = 1_000;

//! The black-box suite: every test starts the real `threadstream` binary and talks HTTP and SSE
//! to it. One test binary (each file below is a module) so the suite links once.

mod common;
// The agent tests' fake provider (a real HTTP server), for fetch_tool.
#[path = "../../agent/tests/it/support/mod.rs"]
mod support;

mod agui;
mod agui_agents;
mod agui_agents_docs;
mod ai_sdk;
mod api_docs;
mod attachments;
mod audit_tools;
mod auth;
mod background_tasks;
mod bad_input;
mod browser;
mod change_feed;
mod compaction;
mod connection_limits;
mod crash;
mod disk_full;
mod durable_streams;
mod erasure;
mod erasure_cli;
mod erasure_user;
mod error_bodies;
mod fetch_tool;
mod fleet;
mod fork;
mod ha;
mod history;
mod http1_connections;
mod idempotency;
mod idle_connections;
mod items;
mod lease_upkeep;
mod limits;
mod lost_commit;
mod mcp;
mod mcp_failures;
mod metrics;
mod multi_instance;
mod nextjs_chat;
mod openapi;
mod parquet_export;
mod pg_outage;
mod projections_rebuild;
mod raw_http;
mod request_smuggling;
mod retention;
mod runs;
mod schema;
mod schemathesis;
mod session_restore;
mod shutdown;
mod slow_readers;
mod smith;
mod sse_concurrency;
mod sse_parser;
mod subscriptions;
mod thread_streams;
mod threads;
mod traces;

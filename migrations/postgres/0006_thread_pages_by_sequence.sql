-- One thread-keyed index instead of two. Every appended row paid for two random B-tree inserts
-- keyed by thread — the primary key (aggregate_type, aggregate_id, sequence) and
-- events_by_thread (aggregate_type, aggregate_id, id) — and those inserts were most of
-- Postgres's time per appended event (docs/performance.md, "Ingest, Postgres").
--
-- Within a thread `sequence` and `id` grow together (the writer numbers both in one pass while
-- it holds the order lock, and the primary key refuses a stale sequence), so a thread's page is
-- also a range of the primary key: its cursor id is turned into a sequence first (a probe of
-- events_id_unique). See THREAD_PAGE in store/src/postgres.rs.
DROP INDEX events_by_thread;

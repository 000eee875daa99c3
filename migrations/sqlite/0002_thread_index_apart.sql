-- The log keeps no thread-keyed index of its own any more: which ids belong to which thread is
-- kept in threadstream-index.db, written behind the log by a background indexer
-- (store/src/sqlite_index.rs). A thread-keyed index updated in every commit dirtied one index
-- page per thread of the batch: with 1,000 threads streaming at once every commit wrote ~4 MB
-- and durable ingest stopped at ~18,000 events/s (docs/performance.md, "Durable ingest").
--
-- `UNIQUE (thread_id, seq)` was such an index too, and SQLite cannot drop a table constraint,
-- so the table is rebuilt (ids, and so every SSE id, are kept). `seq` stays 1.. per thread: the
-- single writer assigns it from the thread's aggregate under SQLite's write lock, and
-- `threadstream verify` checks it.
CREATE TABLE events_v2 (
    id          INTEGER PRIMARY KEY,
    thread_id   TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    run_id      TEXT    NOT NULL,
    agent_id    TEXT    NOT NULL,
    type        TEXT    NOT NULL,
    payload     TEXT    NOT NULL,
    ts          INTEGER NOT NULL,
    response_id TEXT,
    user_id     TEXT
);
INSERT INTO events_v2 (id, thread_id, seq, run_id, agent_id, type, payload, ts, response_id, user_id)
    SELECT id, thread_id, seq, run_id, agent_id, type, payload, ts, response_id, user_id FROM events;
DROP TABLE events;
ALTER TABLE events_v2 RENAME TO events;

-- POST /confirm/:requestId carries no thread id: find the request's thread through this index.
-- Partial: only confirmation requests are in it, so it costs an append almost nothing.
CREATE INDEX events_by_confirmation ON events (json_extract(payload, '$.requestId'))
    WHERE type = 'confirmation-request';

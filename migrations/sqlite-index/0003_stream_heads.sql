-- threadstream-index.db: the thread index of the SQLite log (threadstream.db), derived from it
-- and written behind it by store/src/sqlite_index.rs. Deleting this file loses nothing: it is
-- rebuilt from the log at the next start.
--
-- Version 2 replaced 0001's one row per event (`thread_index(thread_id, id)`) with one row per
-- thread per indexer pass, holding that pass's ids of the thread as runs of consecutive ids: a
-- pass then writes ~one row per busy thread instead of one B-tree insert per event, which cost
-- 1.5–2.5 µs of CPU per event beside the writer (docs/performance.md, "Sixth pass"). Version 3
-- adds `stream_heads`, what erasure planning looks a user's streams up in. The index is derived,
-- so an older file is simply dropped and rebuilt from the log.
DROP TABLE IF EXISTS thread_index;
DROP TABLE IF EXISTS thread_runs;
DROP TABLE IF EXISTS stream_heads;
DROP TABLE IF EXISTS index_state;

-- A thread's ids in `first_id ..= last_id` that one pass indexed: `runs` is a list of
-- (gap, length - 1) LEB128 varint pairs, each gap counted from the end of the run before (from
-- `first_id` for the first run). Rows of a thread never overlap, so `last_id` orders them.
CREATE TABLE thread_runs (
    thread_id TEXT    NOT NULL,
    last_id   INTEGER NOT NULL,
    first_id  INTEGER NOT NULL,
    runs      BLOB    NOT NULL,
    PRIMARY KEY (thread_id, last_id)
) WITHOUT ROWID;

-- Who a log stream is for (store/src/erasure/): a thread's or Durable Stream's first event
-- (`thread-created`/`stream-created`) with the owner it names and, for a fork, the thread it
-- reads through; and a row per user whose events a workflow stream holds (its first such id).
-- Few rows (one per stream, a few per workflow), written only when a pass meets them.
CREATE TABLE stream_heads (
    owner       TEXT    NOT NULL,
    stream      TEXT    NOT NULL,
    id          INTEGER NOT NULL,
    fork_source TEXT,
    PRIMARY KEY (owner, stream)
) WITHOUT ROWID;
CREATE INDEX stream_heads_by_stream ON stream_heads (stream);
CREATE INDEX stream_heads_by_source ON stream_heads (fork_source) WHERE fork_source IS NOT NULL;

-- Every event of the log with an id at or below `through` is in thread_runs (and its head in
-- stream_heads); readers scan the log by id above it. `through_thread` is the thread of event
-- `through`, to notice an index that was made from another log.
CREATE TABLE index_state (
    only           INTEGER PRIMARY KEY CHECK (only = 1),
    through        INTEGER NOT NULL,
    through_thread TEXT
);
INSERT INTO index_state (only, through, through_thread) VALUES (1, 0, NULL);

PRAGMA user_version = 3;

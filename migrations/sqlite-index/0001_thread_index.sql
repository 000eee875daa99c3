-- threadstream-index.db: the thread index of the SQLite log (threadstream.db), derived from it
-- and written behind it by store/src/sqlite_index.rs. Deleting this file loses nothing: it is
-- rebuilt from the log at the next start.

-- Which event ids belong to which thread, in id order: a thread's page is one range of it.
CREATE TABLE IF NOT EXISTS thread_index (
    thread_id TEXT    NOT NULL,
    id        INTEGER NOT NULL,
    PRIMARY KEY (thread_id, id)
) WITHOUT ROWID;

-- Every event of the log with an id at or below `through` is in thread_index; readers scan the
-- log by id above it.
CREATE TABLE IF NOT EXISTS index_state (
    only    INTEGER PRIMARY KEY CHECK (only = 1),
    through INTEGER NOT NULL
);
INSERT OR IGNORE INTO index_state (only, through) VALUES (1, 0);

-- A thread's page (`WHERE aggregate_type = 'thread' AND aggregate_id = $1 AND id > $2 ORDER BY id
-- LIMIT $3`) must be one ordered range of one index. With `events_by_thread` on
-- (aggregate_id, id) the generic plan of that prepared statement preferred the primary key, which
-- matches both equality columns, and sorted the whole thread for every page: replaying a
-- 100,000-event thread took 30 s (docs/performance.md, "Replay"). Leading with aggregate_type
-- makes the intended index match every predicate and the ORDER BY.
DROP INDEX events_by_thread;
CREATE INDEX events_by_thread ON events (aggregate_type, aggregate_id, id);

-- What an erasure deletes besides the events (store/src/erasure/postgres.rs), found through
-- indexes instead of a scan of each table: read-model documents by the stream their key names
-- (thread-keyed models use the thread id, analytics `thread\nrun`), idempotency records by the
-- last event their answer stored, attachments by thread and by user. Without them every erasure
-- scanned all three tables, and its cost grew with everyone's data, not with the scope's.
CREATE INDEX read_models_by_stream ON read_models (split_part(key, E'\n', 1));
CREATE INDEX idempotency_keys_by_last_id ON idempotency_keys (last_id) WHERE last_id IS NOT NULL;
CREATE INDEX attachments_by_thread ON attachments (thread_id);
CREATE INDEX attachments_by_user ON attachments (user_id);

-- What erasure planning looks up (store/src/erasure/): a user's streams, and the forks of a
-- set of threads, through partial indexes instead of a scan of the whole log. They hold only the
-- rows they name (the first event of each stream; the events of workflow streams), so an append
-- of any other event pays one predicate check and no B-tree insert.

-- The first event of each thread or Durable Stream, by the owner it names.
CREATE INDEX events_heads_by_owner ON events ((payload ->> 'owner'))
    WHERE event_type IN ('thread-created', 'stream-created');

-- Forks, by the thread they read through.
CREATE INDEX events_forks_by_source ON events ((payload -> 'forkOf' ->> 'threadId'))
    WHERE event_type = 'thread-created';

-- The events of workflow streams, by the user they were written for (a workflow stream is
-- that user's for erasure).
CREATE INDEX events_workflow_users ON events (user_id)
    WHERE aggregate_id LIKE 'workflow:%';

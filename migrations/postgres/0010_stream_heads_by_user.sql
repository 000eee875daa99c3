-- What erasure planning looks up (store/src/erasure/): a user's streams, and the forks of a
-- set of threads, through partial indexes instead of a scan of the whole log. They hold only the
-- rows they name (the first event of each stream; the events of workflow streams), so an append
-- of any other event pays one predicate check and no B-tree insert.

-- A field of a payload as text. `->>` on a `json` value parses all of it, and a `\u0000` escape
-- anywhere in it (a Durable Stream's binary data, a pasted NUL) cannot become text: an index on
-- `payload ->> 'owner'` made such an append fail. This reads the field from a copy in which every
-- `\u0000` is `\u0020`: the JSON stays valid, and only string contents change, never an id.
CREATE FUNCTION payload_field(payload json, VARIADIC path text[]) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT (replace(payload::text, '\u0000', '\u0020')::json) #>> path $$;

-- The first event of each thread or Durable Stream, by the owner it names.
CREATE INDEX events_heads_by_owner ON events (payload_field(payload, 'owner'))
    WHERE event_type IN ('thread-created', 'stream-created');

-- Forks, by the thread they read through.
CREATE INDEX events_forks_by_source ON events (payload_field(payload, 'forkOf', 'threadId'))
    WHERE event_type = 'thread-created';

-- The events of workflow streams, by the user they were written for (a workflow stream is
-- that user's for erasure).
CREATE INDEX events_workflow_users ON events (user_id)
    WHERE aggregate_id LIKE 'workflow:%';

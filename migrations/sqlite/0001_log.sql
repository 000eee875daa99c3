-- The log: one append-only table of events. `id` is the global position (the SSE id), assigned
-- by the single writer in commit order; `seq` is 1.. per thread.
CREATE TABLE events (
    id          INTEGER PRIMARY KEY,
    thread_id   TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    run_id      TEXT    NOT NULL,
    agent_id    TEXT    NOT NULL,
    type        TEXT    NOT NULL,
    payload     TEXT    NOT NULL,
    ts          INTEGER NOT NULL,
    response_id TEXT,
    user_id     TEXT,
    UNIQUE (thread_id, seq)
);

CREATE INDEX events_by_thread ON events (thread_id, id);

-- POST /confirm/:requestId carries no thread id: find the request's thread through this index.
CREATE INDEX events_by_confirmation ON events (json_extract(payload, '$.requestId'))
    WHERE type = 'confirmation-request';

-- Read models: one JSON document per (model, key), each with the last event id folded into it.
CREATE TABLE read_models (
    model   TEXT    NOT NULL,
    key     TEXT    NOT NULL,
    doc     TEXT    NOT NULL,
    last_id INTEGER NOT NULL,
    PRIMARY KEY (model, key)
);

-- The projector's position per read model, written in the same transaction as the documents.
CREATE TABLE checkpoints (
    model   TEXT PRIMARY KEY,
    last_id INTEGER NOT NULL
);

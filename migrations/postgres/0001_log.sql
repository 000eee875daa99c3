-- The log, shared by every threadstream process on this database.
--
-- postgres-es's `events` layout (aggregate_type, aggregate_id, sequence, event_type,
-- event_version, payload, metadata; primary key on the first three) extended with:
--   id           the global position and SSE id, assigned in commit order (see store/src/postgres.rs)
--   run_id, agent_id, ts, response_id, user_id   the envelope of an agent event
-- aggregate_type is 'thread', aggregate_id the thread id, sequence the per-thread seq.
-- `payload` is `json`, not `jsonb`: it keeps the exact text that was stored.
CREATE TABLE events (
    aggregate_type text   NOT NULL,
    aggregate_id   text   NOT NULL,
    sequence       bigint NOT NULL CHECK (sequence > 0),
    event_type     text   NOT NULL,
    event_version  text   NOT NULL,
    payload        json   NOT NULL,
    metadata       json   NOT NULL,
    id             bigint NOT NULL,
    run_id         text   NOT NULL,
    agent_id       text   NOT NULL,
    ts             bigint NOT NULL,
    response_id    text,
    user_id        text,
    PRIMARY KEY (aggregate_type, aggregate_id, sequence),
    CONSTRAINT events_id_unique UNIQUE (id)
);

CREATE INDEX events_by_thread ON events (aggregate_id, id);

-- POST /confirm/:requestId carries no thread id.
CREATE INDEX events_by_confirmation ON events ((payload ->> 'requestId'))
    WHERE event_type = 'confirmation-request';

CREATE TABLE read_models (
    model   text   NOT NULL,
    key     text   NOT NULL,
    doc     text   NOT NULL,
    last_id bigint NOT NULL,
    PRIMARY KEY (model, key)
);

CREATE TABLE checkpoints (
    model   text PRIMARY KEY,
    last_id bigint NOT NULL
);

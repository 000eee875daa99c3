-- Idempotency keys of the write routes (docs/protocol.md, "Idempotency-Key"), shared by every
-- instance on this database. A request claims its key with an insert (the primary key decides a
-- race between instances) and holds it until `claimed_until`; the log's writer stores the answer
-- in the same transaction as the request's events, so a key has an answer exactly when its
-- events are stored. Rows are dropped once past `expires_at`.
CREATE TABLE idempotency_keys (
    -- The caller (user id): another caller's key of the same text is another key.
    scope         text   NOT NULL,
    key           text   NOT NULL,
    -- SHA-256 of the request (method, path, body): the same key for another request is a 422.
    fingerprint   text   NOT NULL,
    -- Epoch ms: the key is forgotten after it.
    expires_at    bigint NOT NULL,
    -- The executing request's token, until the key is answered.
    claim         text,
    -- Epoch ms: after it another request may execute the key (its holder may have died).
    claimed_until bigint,
    -- The first answer (JSON), stored with the request's events.
    answer        text,
    -- The last event id the answered request stored.
    last_id       bigint,
    PRIMARY KEY (scope, key)
);

CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);

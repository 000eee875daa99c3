-- The Ed25519 key that signs Durable Streams subscription webhooks (api/src/durable/signing.rs).
-- One row, written by the first instance that needs it and read by every other and later one,
-- so all instances sign with one key and the JWKS that publishes it stays the same across
-- restarts. It is a secret: it lives here, beside the log, and never in the log's events.
CREATE TABLE webhook_signing_key (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    -- The 32-byte Ed25519 seed, hex.
    seed       TEXT    NOT NULL,
    created_at BIGINT  NOT NULL
);

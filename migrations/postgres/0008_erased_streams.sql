-- Log streams removed by an erasure (store/src/erasure): the tombstone that lists each, and the
-- highest id it erased. Routes answer 404 for an erased thread, and a reader whose cursor is at
-- or below `last_id` is told that history was removed (docs/protocol.md, "Erased history").
-- A thread created again under the same id keeps its row: its new events are all above it.
CREATE TABLE erased_streams (
    stream       text   PRIMARY KEY,
    tombstone_id bigint NOT NULL,
    last_id      bigint NOT NULL
);

-- `events_by_confirmation` (0001) indexed `payload ->> 'requestId'`, which fails on a payload
-- holding a `\u0000` escape anywhere (a NUL in the question a model asks): such a confirmation
-- request could not be stored. It now reads the field through `payload_field` (0010), which does
-- not fail on one.
DROP INDEX events_by_confirmation;
CREATE INDEX events_by_confirmation ON events (payload_field(payload, 'requestId'))
    WHERE event_type = 'confirmation-request';

-- Stream tickets (GET /instance-ai/events/:threadId?ticket=…) already used. A ticket is valid for
-- 60 s and usable once on any instance: the primary key decides which use wins. Rows are dropped
-- once their ticket has expired.
CREATE TABLE stream_tickets_used (
    id         text   PRIMARY KEY,
    expires_at bigint NOT NULL
);

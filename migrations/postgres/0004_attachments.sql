-- Attachments uploaded to threads (seed 003). The bytes live beside their metadata so every
-- instance on this database can serve every upload; rows are never updated.
CREATE TABLE attachments (
    path         text   PRIMARY KEY,
    thread_id    text   NOT NULL,
    user_id      text   NOT NULL,
    file_name    text   NOT NULL,
    content_type text   NOT NULL,
    size         bigint NOT NULL,
    sha256       text   NOT NULL,
    created_at   bigint NOT NULL,
    bytes        bytea  NOT NULL
);

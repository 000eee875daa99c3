-- Which instance is executing which live run, until when. The owner renews its leases; another
-- instance that finds a lease expired takes it over and recovers the run (resumes it when it waits
-- on a confirmation, else finishes it as interrupted).
CREATE TABLE run_leases (
    thread_id  text   NOT NULL,
    run_id     text   NOT NULL,
    owner      text   NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (thread_id, run_id)
);

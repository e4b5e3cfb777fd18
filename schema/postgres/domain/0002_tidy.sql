-- Domain table of the built-in `tidy` flow: one row per top-level file of the
-- tidied folder (planned -> queued -> moved | skipped).

CREATE TABLE tidy_moves (
    run_id      text NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    src         text NOT NULL,          -- absolute path of the file now
    dst         text,                   -- absolute target; NULL when left in place
    kind        text NOT NULL,          -- images, documents, audio, video, archives, code, other
    month       text NOT NULL,          -- YYYY-MM of the file's mtime, UTC
    status      text NOT NULL CHECK (status IN ('planned', 'queued', 'moved', 'skipped')),
    reason      text,                   -- why a file was skipped
    intent_key  text UNIQUE,            -- the outbox idempotency key, once queued
    PRIMARY KEY (run_id, src)
);

-- Domain table of the built-in `tidy` flow: one row per top-level file of the
-- tidied folder. The `plan` step writes every row in the transaction of its
-- checkpoint; the `apply` step marks a row `queued` in the transaction that
-- queues its outbox intent; the file mover records the outcome (`moved`, or
-- `skipped` with a reason) after it acted on the file system.

CREATE TABLE tidy_moves (
    run_id      TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    src         TEXT NOT NULL,          -- absolute path of the file now
    dst         TEXT,                   -- absolute target <folder>/<Kind>/<YYYY-MM>/<name>; NULL when left in place
    kind        TEXT NOT NULL,          -- images, documents, audio, video, archives, code, other
    month       TEXT NOT NULL,          -- YYYY-MM of the file's mtime, UTC
    status      TEXT NOT NULL CHECK (status IN ('planned', 'queued', 'moved', 'skipped')),
    reason      TEXT,                   -- why a file was skipped
    intent_key  TEXT UNIQUE,            -- the outbox idempotency key, once queued
    PRIMARY KEY (run_id, src)
);

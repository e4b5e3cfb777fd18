-- `tidy_moves` rows get a fifth status, `refused`: the move would have left
-- the folder (a symbolic link on the way, swapped in before or after the
-- plan), replaced a file that appeared meanwhile, or used an unsafe name
-- (`..`, a control character); nothing was moved. SQLite cannot alter a CHECK
-- constraint, so the table is rebuilt with its rows (nothing references it).

CREATE TABLE tidy_moves_v2 (
    run_id      TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    src         TEXT NOT NULL,          -- absolute path of the file now
    dst         TEXT,                   -- absolute target <folder>/<Kind>/<YYYY-MM>/<name>; NULL when left in place
    kind        TEXT NOT NULL,          -- images, documents, audio, video, archives, code, other
    month       TEXT NOT NULL,          -- YYYY-MM of the file's mtime, UTC
    status      TEXT NOT NULL CHECK (status IN ('planned', 'queued', 'moved', 'skipped', 'refused')),
    reason      TEXT,                   -- why a file was skipped or refused
    intent_key  TEXT UNIQUE,            -- the outbox idempotency key, once queued
    PRIMARY KEY (run_id, src)
);
INSERT INTO tidy_moves_v2(run_id, src, dst, kind, month, status, reason, intent_key)
    SELECT run_id, src, dst, kind, month, status, reason, intent_key FROM tidy_moves;
DROP TABLE tidy_moves;
ALTER TABLE tidy_moves_v2 RENAME TO tidy_moves;

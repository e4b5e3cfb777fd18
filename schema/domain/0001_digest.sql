-- Domain table of the built-in `digest` flow: one row per file of a run.
-- Written in the same transaction as the checkpoint of the step that
-- processed the file, so domain rows and run state always agree.

CREATE TABLE digest_files (
    run_id          TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    path            TEXT NOT NULL,          -- relative to the scanned folder, '/'-separated
    kind            TEXT NOT NULL,          -- text, markdown, rst, code, skipped
    title           TEXT,
    summary         TEXT,
    size_bytes      INTEGER NOT NULL,
    skip_reason     TEXT,
    times_processed INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (run_id, path)
);

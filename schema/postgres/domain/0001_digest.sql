-- Domain table of the built-in `digest` flow: one row per file of a run,
-- written in the transaction of the checkpoint of the step that processed it.

CREATE TABLE digest_files (
    run_id          text NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    path            text NOT NULL,          -- relative to the scanned folder, '/'-separated
    kind            text NOT NULL,          -- text, markdown, rst, code, skipped
    title           text,
    summary         text,
    size_bytes      bigint NOT NULL,
    skip_reason     text,
    times_processed integer NOT NULL DEFAULT 1,
    PRIMARY KEY (run_id, path)
);

-- One row per tidy run an undo was started for: `flowdesk undo` (and the
-- app's `u`) records it when it starts moving files back and when it ends,
-- and records each file's `tidy_moves.moved_back_at` in batches as it goes,
-- so `show` tells an undo under way or interrupted (`finished_at` NULL, its
-- owner gone) from one that finished.

CREATE TABLE tidy_undos (
    run_id      text PRIMARY KEY REFERENCES runs(run_id) ON DELETE CASCADE,
    undo_owner  text,           -- host:pid:nonce of the process undoing it; NULL: it stopped on an error
    started_at  timestamptz NOT NULL,
    finished_at timestamptz     -- NULL: under way, or interrupted
);

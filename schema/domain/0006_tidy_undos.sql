-- One row per tidy run an undo was started for: `flowdesk undo` (and the
-- app's `u`) records it when it starts moving files back and when it ends,
-- and records each file's `tidy_moves.moved_back_at` in batches as it goes,
-- so `show` tells an undo under way or interrupted (its process killed,
-- crashed or powered off: `finished_at` NULL, its owner gone) from one that
-- finished, says how many files are back, and names the command that
-- finishes it. UTC epoch seconds, as every other time of this database.

CREATE TABLE tidy_undos (
    run_id      TEXT PRIMARY KEY REFERENCES runs(run_id) ON DELETE CASCADE,
    undo_owner  TEXT,           -- host:pid:nonce of the process undoing it; NULL: it stopped on an error
    started_at  REAL NOT NULL,  -- when the latest undo began moving files back
    finished_at REAL            -- when it ended; NULL: under way, or interrupted
);

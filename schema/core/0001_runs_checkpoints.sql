-- Runs and their append-only, revisioned checkpoints.
-- Times are UTC seconds since the epoch (REAL). JSON columns are compact UTF-8 text.

CREATE TABLE runs (
    run_id          TEXT PRIMARY KEY,
    scope           TEXT NOT NULL DEFAULT 'default',
    flow_name       TEXT NOT NULL,
    flow_version    TEXT NOT NULL,
    flow_key        TEXT,
    parent_run_id   TEXT,
    status          TEXT NOT NULL CHECK (status IN
                        ('pending','running','waiting','completed','failed','canceled','timed_out')),
    revision        INTEGER NOT NULL,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL,
    context         TEXT NOT NULL DEFAULT '{}',
    progress_done   INTEGER,
    progress_total  INTEGER,
    error           TEXT
);
CREATE INDEX runs_scope_status ON runs(scope, status, created_at);
CREATE INDEX runs_scope_created ON runs(scope, created_at, run_id);
CREATE INDEX runs_flow_key ON runs(scope, flow_key) WHERE flow_key IS NOT NULL;

-- One row per revision. kind='snapshot' rows hold the whole state and every
-- step record; kind='delta' rows hold only what changed since revision-1
-- (see desktop_app/store/codec.py). WITHOUT ROWID: one b-tree keyed by
-- (run_id, revision), so an append touches fewer pages than table + index.
CREATE TABLE checkpoints (
    run_id      TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    revision    INTEGER NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('snapshot','delta')),
    status      TEXT NOT NULL,
    step_id     TEXT NOT NULL DEFAULT '',
    created_at  REAL NOT NULL,
    state       TEXT NOT NULL,
    steps       TEXT NOT NULL,
    frontier    TEXT NOT NULL,
    progress    TEXT,
    error       TEXT,
    meta        TEXT,
    PRIMARY KEY (run_id, revision)
) WITHOUT ROWID;

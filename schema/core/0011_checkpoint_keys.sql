-- Fewer pages written per step (issue 31: at most 3 WAL pages per step of
-- a 10-step flow; 4.9 before this file).
--
-- A run gets an integer key, run_key (the INTEGER PRIMARY KEY of runs, so
-- the rowid SQLite already gave each run, kept by the copy and stable
-- through VACUUM). A checkpoint row is keyed by ckey = run_key * 2^32 +
-- revision: checkpoints becomes a rowid table whose key ascends as runs
-- are created and steps are taken, so an append lands at the end of its
-- run's rows and a full leaf splits by starting a new page (SQLite's
-- "balance_quick"), instead of the (run_id, revision) WITHOUT ROWID b-tree
-- where a random uuid4 id put each run's rows anywhere and every split
-- rebalanced three pages and their parent. run_id and revision stay as
-- columns (read and written by everything that read them before) but are
-- no longer an index: the store reads a run's rows by ckey range.
-- Deleting a run deletes its checkpoints through a trigger (the foreign
-- key's ON DELETE CASCADE needed an index on checkpoints.run_id).
--
-- Two run indexes written at every run's creation and final status change
-- are cut: runs_tenant_session holds only runs that have a tenant id (a run
-- without one was never found through it), and runs_flow_status_version
-- goes (the launch report of live runs left by an older flow version reads
-- the scope's live runs through runs_scope_status instead).
--
-- SQLite cannot change a table's key in place: both tables are rebuilt
-- (every row and the other indexes kept; applied with foreign keys off and
-- checked before commit, see desktop_app/store/migrations.py).
CREATE TABLE runs_0011 (
    run_id          TEXT NOT NULL UNIQUE,
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
    error           TEXT,
    lease_owner     TEXT,
    lease_expires_at REAL,
    tenant_id       TEXT,
    session_id      TEXT,
    deadline_at     REAL,
    run_key         INTEGER PRIMARY KEY CHECK (run_key > 0)
);
INSERT INTO runs_0011 (run_id, scope, flow_name, flow_version, flow_key, parent_run_id,
    status, revision, created_at, updated_at, context, progress_done, progress_total, error,
    lease_owner, lease_expires_at, tenant_id, session_id, deadline_at, run_key)
SELECT run_id, scope, flow_name, flow_version, flow_key, parent_run_id,
    status, revision, created_at, updated_at, context, progress_done, progress_total, error,
    lease_owner, lease_expires_at, tenant_id, session_id, deadline_at, rowid
FROM runs ORDER BY rowid;

CREATE TABLE checkpoints_0011 (
    run_id      TEXT NOT NULL,
    revision    INTEGER NOT NULL CHECK (revision >= 0 AND revision < 4294967296),
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
    waits       TEXT,
    checksum    TEXT,
    ckey        INTEGER PRIMARY KEY CHECK (ckey % 4294967296 = revision)
);
INSERT INTO checkpoints_0011 (run_id, revision, kind, status, step_id, created_at, state,
    steps, frontier, progress, error, meta, waits, checksum, ckey)
SELECT c.run_id, c.revision, c.kind, c.status, c.step_id, c.created_at, c.state,
    c.steps, c.frontier, c.progress, c.error, c.meta, c.waits, c.checksum,
    r.run_key * 4294967296 + c.revision
FROM checkpoints c JOIN runs_0011 r ON r.run_id = c.run_id
ORDER BY r.run_key, c.revision;

DROP TABLE checkpoints;
DROP TABLE runs;
ALTER TABLE runs_0011 RENAME TO runs;
ALTER TABLE checkpoints_0011 RENAME TO checkpoints;

CREATE INDEX runs_scope_status ON runs(scope, status, created_at);
CREATE INDEX runs_scope_created ON runs(scope, created_at, run_id);
CREATE INDEX runs_tenant_session ON runs(scope, tenant_id, session_id, created_at)
    WHERE tenant_id IS NOT NULL;
CREATE UNIQUE INDEX runs_live_flow_key ON runs(scope, flow_name, flow_key)
    WHERE flow_key IS NOT NULL AND status IN ('pending', 'running', 'waiting', 'failed');
CREATE INDEX runs_waiting_deadline ON runs(scope, deadline_at)
    WHERE status = 'waiting' AND deadline_at IS NOT NULL;

CREATE TRIGGER runs_delete_checkpoints AFTER DELETE ON runs BEGIN
    DELETE FROM checkpoints
    WHERE ckey BETWEEN old.run_key * 4294967296 AND old.run_key * 4294967296 + 4294967295;
END;

-- The old tables' pages go back to the file system (auto_vacuum=INCREMENTAL
-- files; a no-op on others), not kept on the free list.
PRAGMA incremental_vacuum;

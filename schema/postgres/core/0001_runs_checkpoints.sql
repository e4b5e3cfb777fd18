-- Runs and their append-only, revisioned checkpoints (PostgreSQL tree; the
-- SQLite tree in schema/core has the same files, tables, columns and indexes).
-- Times are timestamptz (the store converts to and from UTC epoch seconds).
-- JSON columns are text holding the codec's exact bytes: jsonb would refuse
-- "\u0000" and NaN, and would reorder keys.

CREATE TABLE runs (
    run_id          text PRIMARY KEY,
    scope           text NOT NULL DEFAULT 'default',
    flow_name       text NOT NULL,
    flow_version    text NOT NULL,
    flow_key        text,
    parent_run_id   text,
    status          text NOT NULL CHECK (status IN
                        ('pending','running','waiting','completed','failed','canceled','timed_out')),
    revision        integer NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    context         text NOT NULL DEFAULT '{}',
    progress_done   bigint,
    progress_total  bigint,
    error           text
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02);
CREATE INDEX runs_scope_status ON runs(scope, status, created_at);
CREATE INDEX runs_scope_created ON runs(scope, created_at, run_id);
CREATE INDEX runs_flow_key ON runs(scope, flow_key) WHERE flow_key IS NOT NULL;

-- One row per revision: kind='snapshot' holds the whole state, kind='delta'
-- only what changed since revision-1 (desktop_app/store/codec.py).
CREATE TABLE checkpoints (
    run_id      text NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    revision    integer NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('snapshot','delta')),
    status      text NOT NULL,
    step_id     text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL,
    state       text NOT NULL,
    steps       text NOT NULL,
    frontier    text NOT NULL,
    progress    text,
    error       text,
    meta        text,
    PRIMARY KEY (run_id, revision)
) WITH (autovacuum_vacuum_scale_factor = 0.02);

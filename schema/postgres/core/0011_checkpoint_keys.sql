-- PostgreSQL tree; the SQLite tree in schema/core has the same file. There
-- it re-keys runs and checkpoints by integers (run_key, ckey), SQLite's
-- storage and not the SQL both stores share: PostgreSQL keeps the primary
-- key (run_id, revision) on a heap that appends anyway. Both trees cut the
-- same two run indexes written at every run's creation and final status:
-- runs_tenant_session holds only runs that have a tenant id, and
-- runs_flow_status_version goes (the launch report of runs left by an older
-- flow version reads the scope's live runs through runs_scope_status).
DROP INDEX runs_flow_status_version;
DROP INDEX runs_tenant_session;
CREATE INDEX runs_tenant_session ON runs(scope, tenant_id, session_id, created_at)
    WHERE tenant_id IS NOT NULL;

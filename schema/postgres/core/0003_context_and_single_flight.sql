-- List runs by tenant and session; one live run per flow key (single flight).
ALTER TABLE runs ADD COLUMN tenant_id text;
ALTER TABLE runs ADD COLUMN session_id text;
CREATE INDEX runs_tenant_session ON runs(scope, tenant_id, session_id, created_at);
DROP INDEX runs_flow_key;
CREATE UNIQUE INDEX runs_live_flow_key ON runs(scope, flow_name, flow_key)
    WHERE flow_key IS NOT NULL AND status IN ('pending', 'running', 'waiting', 'failed');
-- The run's pending waits at each revision (JSON list; NULL when none).
ALTER TABLE checkpoints ADD COLUMN waits text;
-- A run-level deadline, stored at creation, never recomputed.
ALTER TABLE runs ADD COLUMN deadline_at timestamptz;
CREATE INDEX runs_waiting_deadline ON runs(scope, deadline_at)
    WHERE status = 'waiting' AND deadline_at IS NOT NULL;

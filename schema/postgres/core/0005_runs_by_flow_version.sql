-- Live runs of a flow by version: the launch report of runs left by an older
-- flow version reads only live runs of each registered flow.
CREATE INDEX runs_flow_status_version ON runs(scope, flow_name, status, flow_version);

-- Agent runs get the lease flow runs have: exactly one process executes an
-- agent run; another process that resumes it meanwhile is refused.
ALTER TABLE agent_runs ADD COLUMN lease_owner text;           -- host:pid:nonce
ALTER TABLE agent_runs ADD COLUMN lease_expires_at timestamptz;

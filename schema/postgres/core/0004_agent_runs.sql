-- Durable agent runs: model turns and tool calls, in the same database as flows.
-- Messages are append-only rows.

CREATE TABLE agent_runs (
    run_id        text PRIMARY KEY,
    scope         text NOT NULL DEFAULT 'default',
    agent         text NOT NULL,
    status        text NOT NULL CHECK (status IN ('running','paused','input_required','done',
                      'failed','canceled','timeout','rate_limited','expired')),
    parent_run_id text,
    input         text NOT NULL,
    response      text,
    error         text,
    error_type    text,
    turns         integer NOT NULL DEFAULT 0,
    pending_call  text,                 -- JSON tool call waiting for a person (ask_user)
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    deadline_at   timestamptz,          -- per-run deadline -> 'timeout'
    expires_at    timestamptz,          -- time-to-live -> 'expired'
    retry_at      timestamptz,          -- provider's Retry-After -> resume after it
    context       text NOT NULL DEFAULT '{}'
);
CREATE INDEX agent_runs_status ON agent_runs(scope, status, created_at);
CREATE INDEX agent_runs_parent ON agent_runs(parent_run_id) WHERE parent_run_id IS NOT NULL;

CREATE TABLE agent_messages (
    run_id     text NOT NULL REFERENCES agent_runs(run_id) ON DELETE CASCADE,
    seq        integer NOT NULL,
    role       text NOT NULL CHECK (role IN ('system','user','assistant','tool')),
    body       text NOT NULL,           -- JSON message
    created_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Completed tool results, reused within a run by tool name + canonical JSON input.
CREATE TABLE agent_tool_results (
    run_id     text NOT NULL REFERENCES agent_runs(run_id) ON DELETE CASCADE,
    tool_key   text NOT NULL,           -- "<tool>:<canonical json input>"
    tool       text NOT NULL,
    status     text NOT NULL CHECK (status IN ('in_progress','completed','failed')),
    result     text,
    attempts   integer NOT NULL DEFAULT 0,
    reused     integer NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, tool_key)
);

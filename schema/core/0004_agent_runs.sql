-- Durable agent runs: model turns and tool calls, in the same file as flows.
-- Messages are append-only rows, so bytes per turn grow with the new
-- messages, not with the whole conversation.

CREATE TABLE agent_runs (
    run_id        TEXT PRIMARY KEY,
    scope         TEXT NOT NULL DEFAULT 'default',
    agent         TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('running','paused','input_required','done',
                      'failed','canceled','timeout','rate_limited','expired')),
    parent_run_id TEXT,
    input         TEXT NOT NULL,
    response      TEXT,
    error         TEXT,
    error_type    TEXT,
    turns         INTEGER NOT NULL DEFAULT 0,
    pending_call  TEXT,                 -- JSON tool call waiting for a person (ask_user)
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    deadline_at   REAL,                 -- per-run deadline -> 'timeout'
    expires_at    REAL,                 -- time-to-live -> 'expired'
    retry_at      REAL,                 -- provider's Retry-After -> resume after it
    context       TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX agent_runs_status ON agent_runs(scope, status, created_at);
CREATE INDEX agent_runs_parent ON agent_runs(parent_run_id) WHERE parent_run_id IS NOT NULL;

CREATE TABLE agent_messages (
    run_id     TEXT NOT NULL REFERENCES agent_runs(run_id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    role       TEXT NOT NULL CHECK (role IN ('system','user','assistant','tool')),
    body       TEXT NOT NULL,           -- JSON message
    created_at REAL NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Completed tool results, reused within a run by tool name + canonical JSON input.
CREATE TABLE agent_tool_results (
    run_id     TEXT NOT NULL REFERENCES agent_runs(run_id) ON DELETE CASCADE,
    tool_key   TEXT NOT NULL,           -- "<tool>:<canonical json input>"
    tool       TEXT NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('in_progress','completed','failed')),
    result     TEXT,
    attempts   INTEGER NOT NULL DEFAULT 0,
    reused     INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL,
    PRIMARY KEY (run_id, tool_key)
);

-- A LangGraph thread a person answered through Flowdesk (`flowdesk answer`,
-- the app's inbox) whose program has not run the graph since is `answered`:
-- no process runs it, so it is neither `running` nor `interrupted`, and it
-- no longer waits. Its program's next checkpoint moves it on. SQLite cannot
-- change a CHECK constraint in place: the table is rebuilt (same columns,
-- rows and index).
CREATE TABLE langgraph_threads_0010 (
    scope        TEXT NOT NULL,
    thread_id    TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('running', 'waiting', 'answered', 'completed')),
    created_at   REAL NOT NULL,
    updated_at   REAL NOT NULL,
    owner        TEXT,
    context      TEXT NOT NULL DEFAULT '{}',  -- ExecutionContext ids (JSON)
    interrupts   TEXT,                         -- the unanswered interrupts' values (JSON list)
    checkpoint_id TEXT,                        -- the latest root checkpoint
    PRIMARY KEY (scope, thread_id)
) WITHOUT ROWID;
INSERT INTO langgraph_threads_0010
    (scope, thread_id, status, created_at, updated_at, owner, context, interrupts, checkpoint_id)
SELECT scope, thread_id, status, created_at, updated_at, owner, context, interrupts, checkpoint_id
FROM langgraph_threads;
DROP TABLE langgraph_threads;
ALTER TABLE langgraph_threads_0010 RENAME TO langgraph_threads;
CREATE INDEX langgraph_threads_created ON langgraph_threads(scope, created_at, thread_id);

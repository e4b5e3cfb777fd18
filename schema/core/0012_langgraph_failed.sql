-- A LangGraph thread whose node raised (LangGraph stored the exception as
-- the task's `__error__` write, and its invoke raised it) is `failed`: no
-- process runs it any more, so it is neither `running` nor `interrupted`.
-- Its program's next invoke of the thread runs the node again (LangGraph's
-- semantics), which takes the thread back to `running`. SQLite cannot
-- change a CHECK constraint in place: the table is rebuilt (same columns,
-- rows and index), as 0010 did.
CREATE TABLE langgraph_threads_0012 (
    scope        TEXT NOT NULL,
    thread_id    TEXT NOT NULL,
    status       TEXT NOT NULL
                 CHECK (status IN ('running', 'waiting', 'answered', 'failed', 'completed')),
    created_at   REAL NOT NULL,
    updated_at   REAL NOT NULL,
    owner        TEXT,
    context      TEXT NOT NULL DEFAULT '{}',  -- ExecutionContext ids (JSON)
    interrupts   TEXT,                         -- the unanswered interrupts (JSON)
    checkpoint_id TEXT,                        -- the latest root checkpoint
    PRIMARY KEY (scope, thread_id)
) WITHOUT ROWID;
INSERT INTO langgraph_threads_0012
    (scope, thread_id, status, created_at, updated_at, owner, context, interrupts, checkpoint_id)
SELECT scope, thread_id, status, created_at, updated_at, owner, context, interrupts, checkpoint_id
FROM langgraph_threads;
DROP TABLE langgraph_threads;
ALTER TABLE langgraph_threads_0012 RENAME TO langgraph_threads;
CREATE INDEX langgraph_threads_created ON langgraph_threads(scope, created_at, thread_id);

-- The old table's pages go back to the file system (auto_vacuum=INCREMENTAL
-- files; a no-op on others), as after 0011.
PRAGMA incremental_vacuum;

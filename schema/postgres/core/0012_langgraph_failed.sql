-- A LangGraph thread whose node raised is `failed` until its program runs
-- it again (PostgreSQL tree; the SQLite tree in schema/core has the same
-- file, which says why).
ALTER TABLE langgraph_threads
    DROP CONSTRAINT langgraph_threads_status_check,
    ADD CONSTRAINT langgraph_threads_status_check
        CHECK (status IN ('running', 'waiting', 'answered', 'failed', 'completed'));

-- A LangGraph thread a person answered through Flowdesk (`flowdesk answer`,
-- the app's inbox) whose program has not run the graph since is `answered`
-- (PostgreSQL tree; the SQLite tree in schema/core has the same file).
ALTER TABLE langgraph_threads
    DROP CONSTRAINT langgraph_threads_status_check,
    ADD CONSTRAINT langgraph_threads_status_check
        CHECK (status IN ('running', 'waiting', 'answered', 'completed'));

-- Worker processes that execute runs from a shared database (one row per
-- worker owner id). On PostgreSQL a worker holds the session advisory lock
-- lock_key while it lives; a peer that can take that lock knows the worker
-- is gone and takes its runs over at once. Informational on SQLite.
CREATE TABLE workers (
    owner        TEXT PRIMARY KEY,
    lock_key     INTEGER NOT NULL,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   REAL NOT NULL,
    heartbeat_at REAL NOT NULL
);

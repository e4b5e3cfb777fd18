-- Worker processes executing runs from this database (PostgreSQL tree).
-- A worker holds pg_advisory_lock(lock_key) on a dedicated connection while
-- it lives; a peer whose pg_try_advisory_xact_lock(lock_key) succeeds knows
-- the worker is gone (its session ended) and takes its runs over at once,
-- instead of waiting for their leases to expire.
CREATE TABLE workers (
    owner        text PRIMARY KEY,
    lock_key     bigint NOT NULL,
    host         text NOT NULL,
    pid          integer NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL
);

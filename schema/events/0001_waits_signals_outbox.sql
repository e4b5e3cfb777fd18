-- Durable waits, the signal mailbox, published events and the outbox.
-- Times are UTC seconds since the epoch (REAL).

-- Pending waits of every run, mirrored from its latest checkpoint on each
-- append (the checkpoint is the source of truth; this table is the index
-- the engine queries for due deadlines and signal deliveries).
CREATE TABLE waits (
    wait_id      TEXT PRIMARY KEY,            -- stable: "<run_id>:<step_id>:<n>"
    run_id       TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    step_id      TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('input','signal','event','timer')),
    name         TEXT,                        -- signal name or event type
    key          TEXT,                        -- signal key
    deadline_at  REAL,
    created_at   REAL NOT NULL
);
CREATE INDEX waits_deadline ON waits(deadline_at) WHERE deadline_at IS NOT NULL;
CREATE INDEX waits_signal ON waits(kind, name, key);
CREATE INDEX waits_run ON waits(run_id);

-- Signals are rows (a durable mailbox): one signal is consumed by one wait,
-- in the transaction of the checkpoint that resolves the wait.
CREATE TABLE signals (
    signal_id    INTEGER PRIMARY KEY,
    scope        TEXT NOT NULL,
    name         TEXT NOT NULL,
    key          TEXT NOT NULL,
    payload      TEXT NOT NULL,               -- JSON
    dedupe_key   TEXT,                        -- a second send with the same key is a no-op
    sent_at      REAL NOT NULL,
    consumed_by  TEXT,                        -- wait_id
    consumed_at  REAL
);
CREATE UNIQUE INDEX signals_dedupe ON signals(scope, dedupe_key) WHERE dedupe_key IS NOT NULL;
CREATE INDEX signals_pending ON signals(scope, name, key, signal_id) WHERE consumed_by IS NULL;

-- Events are broadcast: every wait on a type begun at or before an event sees it.
CREATE TABLE events (
    event_id     INTEGER PRIMARY KEY,
    scope        TEXT NOT NULL,
    type         TEXT NOT NULL,
    payload      TEXT NOT NULL,
    published_at REAL NOT NULL
);
CREATE INDEX events_type ON events(scope, type, published_at);

-- Side effects as intents, written with the step's checkpoint, delivered
-- after commit by the dispatcher with a stable idempotency key.
CREATE TABLE outbox (
    intent_id        TEXT PRIMARY KEY,        -- = idempotency key
    run_id           TEXT NOT NULL,
    step_id          TEXT NOT NULL,
    destination      TEXT NOT NULL,
    payload          TEXT NOT NULL,           -- JSON
    status           TEXT NOT NULL CHECK (status IN ('pending','sending','delivered','failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    created_at       REAL NOT NULL,
    sent_at          REAL,
    delivered_at     REAL,
    receipt          TEXT,
    last_error       TEXT
);
CREATE INDEX outbox_status ON outbox(status, created_at);

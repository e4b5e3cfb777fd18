-- Durable waits, the signal mailbox, published events and the outbox
-- (PostgreSQL tree). Times are timestamptz; payloads are the codec's JSON text.

-- Pending waits of every run, mirrored from its latest checkpoint on each append.
CREATE TABLE waits (
    wait_id      text PRIMARY KEY,            -- stable: "<run_id>:<step_id>:<n>"
    run_id       text NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    step_id      text NOT NULL,
    kind         text NOT NULL CHECK (kind IN ('input','signal','event','timer')),
    name         text,                        -- signal name or event type
    key          text,                        -- signal key
    deadline_at  timestamptz,
    created_at   timestamptz NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0.02);
CREATE INDEX waits_deadline ON waits(deadline_at) WHERE deadline_at IS NOT NULL;
CREATE INDEX waits_signal ON waits(kind, name, key);
CREATE INDEX waits_run ON waits(run_id);

-- Signals are rows (a durable mailbox): one signal is consumed by one wait.
CREATE TABLE signals (
    signal_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope        text NOT NULL,
    name         text NOT NULL,
    key          text NOT NULL,
    payload      text NOT NULL,               -- JSON
    dedupe_key   text,                        -- a second send with the same key is a no-op
    sent_at      timestamptz NOT NULL,
    consumed_by  text,                        -- wait_id
    consumed_at  timestamptz
);
CREATE UNIQUE INDEX signals_dedupe ON signals(scope, dedupe_key) WHERE dedupe_key IS NOT NULL;
CREATE INDEX signals_pending ON signals(scope, name, key, signal_id) WHERE consumed_by IS NULL;

-- Events are broadcast: every wait on a type begun at or before an event sees it.
CREATE TABLE events (
    event_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope        text NOT NULL,
    type         text NOT NULL,
    payload      text NOT NULL,
    published_at timestamptz NOT NULL
);
CREATE INDEX events_type ON events(scope, type, published_at);

-- Side effects as intents, written with the step's checkpoint, delivered
-- after commit by the dispatcher with a stable idempotency key.
CREATE TABLE outbox (
    intent_id        text PRIMARY KEY,        -- = idempotency key
    run_id           text NOT NULL,
    step_id          text NOT NULL,
    destination      text NOT NULL,
    payload          text NOT NULL,           -- JSON
    status           text NOT NULL CHECK (status IN ('pending','sending','delivered','failed')),
    attempts         integer NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL,
    sent_at          timestamptz,
    delivered_at     timestamptz,
    receipt          text,
    last_error       text
) WITH (autovacuum_vacuum_scale_factor = 0.02);
CREATE INDEX outbox_status ON outbox(status, created_at);

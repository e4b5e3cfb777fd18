-- LangGraph threads checkpointed by Flowdesk (desktop_app/integrations/langgraph).
-- The layout follows LangGraph's checkpoint-postgres saver: a checkpoint row
-- keeps its channel versions and its small (primitive) channel values; every
-- other channel value is a blob keyed by (channel, version), written once
-- when that version is new, so a step stores what changed, not the thread.
-- A list channel that only grew (a conversation's messages) stores only its
-- new items, on top of the version it extends (`base`).
-- Encoded values are LangGraph's serializer's (type, bytes) pairs.

-- One row per thread: what `flowdesk runs` and the app list without decoding
-- anything. status: running (a step is pending), waiting (an interrupt is
-- unanswered), completed (nothing is scheduled). owner: the process that
-- last wrote a running thread (host:pid:nonce@start), cleared otherwise.
CREATE TABLE langgraph_threads (
    scope        TEXT NOT NULL,
    thread_id    TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('running', 'waiting', 'completed')),
    created_at   REAL NOT NULL,
    updated_at   REAL NOT NULL,
    owner        TEXT,
    context      TEXT NOT NULL DEFAULT '{}',  -- ExecutionContext ids (JSON)
    interrupts   TEXT,                         -- the unanswered interrupts' values (JSON list)
    checkpoint_id TEXT,                        -- the latest root checkpoint
    PRIMARY KEY (scope, thread_id)
) WITHOUT ROWID;
CREATE INDEX langgraph_threads_created ON langgraph_threads(scope, created_at, thread_id);

-- The next three are rowid tables: their rows hold encoded values of
-- kilobytes, which SQLite keeps off the primary-key b-tree there (a WITHOUT
-- ROWID table stores them in it; measured about a third slower per step in
-- benchmarks/bench_langgraph.py).
CREATE TABLE langgraph_checkpoints (
    scope          TEXT NOT NULL,
    thread_id      TEXT NOT NULL,
    checkpoint_ns  TEXT NOT NULL,
    checkpoint_id  TEXT NOT NULL,
    parent_id      TEXT,
    run_id         TEXT,            -- metadata["run_id"] (delete_for_runs)
    created_at     REAL NOT NULL,
    type           TEXT NOT NULL,   -- the checkpoint without its blob channel values
    checkpoint     BLOB NOT NULL,
    metadata_type  TEXT NOT NULL,
    metadata       BLOB NOT NULL,
    checksum       TEXT NOT NULL,     -- BLAKE2b-128 of the row's encoded values, verified on read
    PRIMARY KEY (scope, thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX langgraph_checkpoints_run ON langgraph_checkpoints(scope, run_id);

CREATE TABLE langgraph_blobs (
    scope          TEXT NOT NULL,
    thread_id      TEXT NOT NULL,
    checkpoint_ns  TEXT NOT NULL,
    channel        TEXT NOT NULL,
    version        TEXT NOT NULL,
    type           TEXT NOT NULL,
    blob           BLOB,
    base           TEXT,            -- a list that grew: blob holds the new items after this version's
    checksum       TEXT NOT NULL,
    PRIMARY KEY (scope, thread_id, checkpoint_ns, channel, version)
);

CREATE TABLE langgraph_writes (
    scope          TEXT NOT NULL,
    thread_id      TEXT NOT NULL,
    checkpoint_ns  TEXT NOT NULL,
    checkpoint_id  TEXT NOT NULL,
    task_id        TEXT NOT NULL,
    idx            INTEGER NOT NULL,
    task_path      TEXT NOT NULL DEFAULT '',
    channel        TEXT NOT NULL,
    type           TEXT NOT NULL,
    blob           BLOB NOT NULL,
    checksum       TEXT NOT NULL,
    PRIMARY KEY (scope, thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);

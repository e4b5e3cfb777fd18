-- LangGraph threads checkpointed by Flowdesk (PostgreSQL tree; the SQLite
-- tree in schema/core has the same file, tables, columns and indexes).
-- Times are timestamptz (the saver converts to and from UTC epoch seconds);
-- encoded values are LangGraph's serializer's (type, bytes) pairs.

-- One row per thread: what `flowdesk runs` and the app list without decoding
-- anything. status: running (a step is pending), waiting (an interrupt is
-- unanswered), completed (nothing is scheduled). owner: the process that
-- last wrote a running thread (host:pid:nonce@start), cleared otherwise.
CREATE TABLE langgraph_threads (
    scope        text NOT NULL,
    thread_id    text NOT NULL,
    status       text NOT NULL CHECK (status IN ('running', 'waiting', 'completed')),
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    owner        text,
    context      text NOT NULL DEFAULT '{}',  -- ExecutionContext ids (JSON)
    interrupts   text,                         -- the unanswered interrupts' values (JSON list)
    checkpoint_id text,                        -- the latest root checkpoint
    PRIMARY KEY (scope, thread_id)
);
CREATE INDEX langgraph_threads_created ON langgraph_threads(scope, created_at, thread_id);

CREATE TABLE langgraph_checkpoints (
    scope          text NOT NULL,
    thread_id      text NOT NULL,
    checkpoint_ns  text NOT NULL,
    checkpoint_id  text NOT NULL,
    parent_id      text,
    run_id         text,            -- metadata["run_id"] (delete_for_runs)
    created_at     timestamptz NOT NULL,
    type           text NOT NULL,   -- the checkpoint without its blob channel values
    checkpoint     bytea NOT NULL,
    metadata_type  text NOT NULL,
    metadata       bytea NOT NULL,
    checksum       text NOT NULL,     -- BLAKE2b-128 of the row's encoded values, verified on read
    PRIMARY KEY (scope, thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX langgraph_checkpoints_run ON langgraph_checkpoints(scope, run_id);

CREATE TABLE langgraph_blobs (
    scope          text NOT NULL,
    thread_id      text NOT NULL,
    checkpoint_ns  text NOT NULL,
    channel        text NOT NULL,
    version        text NOT NULL,
    type           text NOT NULL,
    blob           bytea,
    base           text,            -- a list that grew: blob holds the new items after this version's
    checksum       text NOT NULL,
    PRIMARY KEY (scope, thread_id, checkpoint_ns, channel, version)
);

CREATE TABLE langgraph_writes (
    scope          text NOT NULL,
    thread_id      text NOT NULL,
    checkpoint_ns  text NOT NULL,
    checkpoint_id  text NOT NULL,
    task_id        text NOT NULL,
    idx            integer NOT NULL,
    task_path      text NOT NULL DEFAULT '',
    channel        text NOT NULL,
    type           text NOT NULL,
    blob           bytea NOT NULL,
    checksum       text NOT NULL,
    PRIMARY KEY (scope, thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);

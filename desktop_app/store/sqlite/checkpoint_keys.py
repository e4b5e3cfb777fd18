"""The SQLite store's checkpoint statements, keyed by ``ckey``.

Schema file ``core/0011_checkpoint_keys.sql`` keys each checkpoint row by
one integer, ``ckey = run_key * 2**32 + revision`` (``run_key``: the run's
``INTEGER PRIMARY KEY`` in ``runs``), in a rowid table. Keys ascend with
run creation and with revisions, so a step's row is appended at the end of
its run's rows: an insert writes one leaf page, and a full leaf at the end
of the table splits by starting a new page (SQLite's ``balance_quick``).
A run's rows are the key range ``[run_key * 2**32, run_key * 2**32 + 2**32)``,
read without a second index. ``run_id`` and ``revision`` stay columns of the
row (the checksum covers them, and what read them before still can) but are
not indexed: every statement here reads by ``ckey``.

PostgreSQL keeps ``(run_id, revision)`` as its primary key and the shared
statements of :mod:`desktop_app.store.statements`.

Each statement takes the run id as its first parameter (``?1``) and looks
the run's key up in ``runs`` (one read through its ``run_id`` index).
"""

from __future__ import annotations

from desktop_app.store.statements import SQLITE_SQL as SQL

#: revisions per run: the low 32 bits of ``ckey``
REVISION_SPAN = 2**32

#: ``ckey`` of revision 0 of run ``?1`` (NULL when there is no such run)
_BASE = f"(SELECT run_key * {REVISION_SPAN} FROM runs WHERE run_id=?1)"
#: every row of run ``?1``
_RUN_ROWS = f"ckey BETWEEN {_BASE} AND {_BASE} + {REVISION_SPAN - 1}"

#: a checkpoint row of an existing run (``?1`` run id, ``?2`` revision, then
#: the other columns and the checksum): inserts nothing when the run is missing
INSERT = (
    "INSERT INTO checkpoints(run_id, revision, kind, status, step_id, created_at, state, "
    "steps, frontier, progress, error, meta, waits, checksum, ckey) "
    "SELECT ?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14, "
    f"run_key * {REVISION_SPAN} + ?2 FROM runs WHERE run_id=?1"
)

#: the rows to fold for revision ``?2`` of run ``?1``, run_id first and the
#: checksum last: the nearest snapshot at or below it, then its deltas
FOLD_ROWS = (
    f"SELECT run_id, {SQL.checkpoint_columns}, checksum FROM checkpoints "
    f"WHERE ckey BETWEEN (SELECT max(ckey) FROM checkpoints WHERE ckey BETWEEN {_BASE} "
    f"AND {_BASE} + ?2 AND kind='snapshot') AND {_BASE} + ?2 ORDER BY ckey"
)

#: every row of run ``?1`` below revision ``?2``, as ``FOLD_ROWS`` gives them
ROWS_BELOW = (
    f"SELECT run_id, {SQL.checkpoint_columns}, checksum FROM checkpoints "
    f"WHERE ckey >= {_BASE} AND ckey < {_BASE} + ?2 ORDER BY ckey"
)

#: every revision of run ``?1``: revision, status, step id, created_at
HISTORY = (
    f"SELECT revision, status, step_id, created_at FROM checkpoints WHERE {_RUN_ROWS} ORDER BY ckey"
)

#: ``HISTORY`` after revision ``?2``, at most ``?3`` rows
HISTORY_PAGE = (
    "SELECT revision, status, step_id, created_at FROM checkpoints "
    f"WHERE ckey > {_BASE} + ?2 AND ckey <= {_BASE} + {REVISION_SPAN - 1} ORDER BY ckey LIMIT ?3"
)

#: the oldest stored revision of run ``?1`` (no row when it has none)
OLDEST_REVISION = f"SELECT revision FROM checkpoints WHERE {_RUN_ROWS} ORDER BY ckey LIMIT 1"

#: how many rows of run ``?1`` are below revision ``?2``
COUNT_BELOW = f"SELECT count(*) FROM checkpoints WHERE ckey >= {_BASE} AND ckey < {_BASE} + ?2"

#: delete run ``?1``'s rows up to revision ``?2`` (inclusive)
DELETE_TO = f"DELETE FROM checkpoints WHERE ckey BETWEEN {_BASE} AND {_BASE} + ?2"

"""A database with many finished runs, written fast (test and benchmark setup).

This is setup, not the app: it writes the ``runs`` and ``checkpoints`` rows
with apsw ``executemany`` inside one transaction (``create_run`` commits per
run, far too slow for 100,000). Each run gets a revision-0 snapshot
checkpoint, as ``create_run`` would write, so the store reads it normally.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from desktop_app.store import codec, migrations
from desktop_app.store.connection import open_connection

#: 2026-01-01T00:00:00Z
START = 1_767_225_600.0
#: Flows no app registers (so the launch check for runs of older flow
#: versions has nothing to report about them).
FLOWS = ("ingest", "approve", "deploy")
#: Statuses the launch recovery leaves alone (no flow code runs in the app).
STATUSES = ("completed", "completed", "completed", "failed", "canceled", "waiting")
TENANTS = ("acme", "globex", "initech")


def run_id_of(i: int) -> str:
    """Deterministic run ids: ``r`` + 31 hex digits of ``i``."""
    return f"r{i:031x}"


def make_runs_db(
    path: Path, n: int, *, scope: str = "default", run_id: Callable[[int], str] = run_id_of
) -> Path:
    """Create ``path`` (schema applied) holding ``n`` runs, one second apart.

    Run ``i``: flow ``FLOWS[i % 3]``, status ``STATUSES[i % 6]``, tenant
    ``TENANTS[i % 3]``, session ``s<i % 100>``, flow key ``key-<i>`` on every
    tenth run, created ``START + i`` seconds.
    """
    conn = open_connection(path, synchronous="OFF")
    try:
        migrations.apply(conn)
        runs = []
        checkpoints = []
        for i in range(n):
            rid = run_id(i)
            flow = FLOWS[i % len(FLOWS)]
            status = STATUSES[i % len(STATUSES)]
            tenant = TENANTS[i % len(TENANTS)]
            session = f"s{i % 100}"
            created = START + i
            context = {"run_id": rid, "session_id": session, "tenant_id": tenant}
            runs.append(
                (
                    rid,
                    scope,
                    flow,
                    "v1",
                    f"key-{i}" if i % 10 == 0 else None,
                    status,
                    0,
                    created,
                    created + 0.5,
                    codec.dumps(context),
                    3,
                    3,
                    "boom" if status == "failed" else None,
                    tenant,
                    session,
                )
            )
            checkpoints.append((rid, 0, "snapshot", status, "", created, "{}", "{}", "[]", "[3,3]"))
        with conn:
            conn.executemany(
                "INSERT INTO runs(run_id, scope, flow_name, flow_version, flow_key, status, "
                "revision, created_at, updated_at, context, progress_done, progress_total, "
                "error, tenant_id, session_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                runs,
            )
            conn.executemany(
                "INSERT INTO checkpoints(run_id, revision, kind, status, step_id, created_at, "
                "state, steps, frontier, progress, ckey) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,"
                "(SELECT run_key * 4294967296 FROM runs WHERE run_id=?1) + ?2)",
                checkpoints,
            )
    finally:
        conn.close()
    return path

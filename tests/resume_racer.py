"""One side of a race between processes resuming one interrupted agent run
that has MCP tools (tests/test_resume_race_mcp.py): a long-lived process the
parent drives round by round on stdin, releasing every side at one instant
by creating the file ``<GO>.<round>``.

Usage: resume_racer.py DB GO

For each line ``resume <round> <run_id> <how>``: prints ``ready <round>``,
waits for GO, then resumes: ``how`` ``cli``: ``flowdesk --db DB resume
RUN_ID`` (the command's own entry point); ``worker``: one pass of what
``flowdesk agent`` does for agent runs on each tick
(``cli.ask.recover_agents(..., worker=True)`` over the command's services).
Prints ``done <round> {"code": ..., "out": ..., "err": ...}``. ``end`` on
stdin stops it. The settings (the model, the MCP server ``notes``) come
from the environment. One warm-up call (a resume of a run that does not
exist) comes first, so no round pays for the command's imports.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from desktop_app.cli import main as flowdesk


def run(*args: str) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = flowdesk(list(args))
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


def worker_pass(db: str) -> dict[str, Any]:
    """What one tick of ``flowdesk agent`` does for interrupted agent runs."""
    from desktop_app.bootstrap import open_services
    from desktop_app.cli.ask import recover_agents
    from desktop_app.cli.output import Hints
    from desktop_app.config import load_settings

    out, err = io.StringIO(), io.StringIO()
    services = open_services(load_settings(db_path=db), flows=[])
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            _tried, failed = recover_agents(services, set(), worker=True, hints=Hints(db, None))
    finally:
        services.close()
    return {"code": int(bool(failed)), "out": out.getvalue(), "err": err.getvalue()}


def main() -> int:
    db, go = sys.argv[1], sys.argv[2]
    run("--db", db, "resume", "warm-up")
    worker_pass(db)
    for line in sys.stdin:
        words = line.rstrip("\n").split(" ")
        if words[0] == "end":
            break
        rnd, run_id, how = words[1], words[2], words[3]
        print(f"ready {rnd}", flush=True)
        gate = Path(f"{go}.{rnd}")
        while not gate.exists():
            threading.Event().wait(0.0002)  # the parent creates GO for every side at once
        told = worker_pass(db) if how == "worker" else run("--db", db, "resume", run_id)
        print(f"done {rnd} {json.dumps(told)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

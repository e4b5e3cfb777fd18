"""One side of a race between two ``flowdesk answer`` commands on one agent
run (tests/test_answer_race_mcp.py): a long-lived process the parent drives
round by round on stdin, releasing both sides at one instant by creating
the file ``<GO>.<round>``.

Usage: answer_racer.py DB GO

For each line ``ask <round> <question>``: runs ``flowdesk --db DB ask
QUESTION --mcp notes`` (the command's own entry point); for each line
``answer <round> <run_id> <how> <answer>``: prints ``ready <round>``, waits
for GO, then answers: ``how`` ``cli``: ``flowdesk --db DB answer RUN_ID
ANSWER``; ``app``: as the app's inbox does
(``recovery.resume_with_recorded_tools`` with the configured model). Prints
``done <round> {"code": ..., "out": ..., "err": ...}`` (the app's way:
code 0 and the answer's text, or code 1 and ``flowdesk: <message>`` as
the command says it). ``end`` on stdin stops it.
The settings (the model, the MCP server ``notes``) come from the
environment. One warm-up call (an answer to a run that does not exist)
comes first, so no round pays for the command's imports.
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


def app_answer(db: str, run_id: str, answer: str) -> dict[str, Any]:
    from desktop_app.agent.recovery import resume_with_recorded_tools
    from desktop_app.bootstrap import build_model, open_services
    from desktop_app.config import load_settings
    from desktop_app.errors import FlowdeskError

    settings = load_settings(db_path=db)
    services = open_services(settings, flows=[])
    store = services.agents
    try:
        res = resume_with_recorded_tools(
            store, settings, build_model(settings), store.get(run_id), answer
        )
    except FlowdeskError as exc:
        return {"code": 1, "out": "", "err": f"flowdesk: {exc}\n"}
    finally:
        services.close()
    return {"code": 0, "out": f"{res.text}\n", "err": ""}


def main() -> int:
    db, go = sys.argv[1], sys.argv[2]
    run("--db", db, "answer", "warm-up", "x")
    for line in sys.stdin:
        words = line.rstrip("\n").split(" ")
        if words[0] == "end":
            break
        what, rnd = words[0], words[1]
        if what == "ask":
            told = run("--db", db, "ask", " ".join(words[2:]), "--mcp", "notes")
        else:
            run_id, how, answer = words[2], words[3], " ".join(words[4:])
            print(f"ready {rnd}", flush=True)
            gate = Path(f"{go}.{rnd}")
            while not gate.exists():
                threading.Event().wait(0.0002)  # the parent creates GO for both at once
            if how == "app":
                told = app_answer(db, run_id, answer)
            else:
                told = run("--db", db, "answer", run_id, answer)
        print(f"done {rnd} {json.dumps(told)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

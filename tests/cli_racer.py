"""One side of a race between processes, kept across the rounds of a test
(tests/line_racer.py drives it): the interpreter's start-up and the imports
are paid once, not per round, while each round still runs in a process of
its own, released with the other sides at one instant.

Usage: cli_racer.py (lines on stdin)

For each line ``round <n> <JSON>`` it sets the JSON's ``env`` over its
environment, prepares what the JSON's ``do`` asks (imports, an open store),
prints ``ready <n>``, waits for the file ``go``, sleeps ``delay`` seconds,
acts, and prints ``done <n> {"code": ..., "out": ..., "err": ...}`` (the
exit code, stdout and stderr of what it ran). ``do``:

* ``cli``: ``flowdesk ARGS`` through the command's entry point
  (``desktop_app.cli.main``), the command's module imported before ``ready``;
* ``export``: ``desktop_app.export.main(ARGS)`` (what ``flowdesk export``
  runs in a process of its own);
* ``run``: ``Engine.run("gate", {})`` on the file ``ARGS[0]`` with the flow
  ``tests.test_db_copy_live_runs:gate``, the engine opened before ``ready``
  (what ``flowdesk run gate`` does: the run created with its lease, then run);
* ``dispatch``: a dispatcher of the built-in destinations on the file
  ``ARGS[0]`` (as the app and ``flowdesk agent`` run one), opened before
  ``ready``: passes of 5 intents until one delivers nothing; ``out`` is
  ``delivered N``.

``end`` on stdin stops it. Each round names its own database file or its
own runs, so nothing a round leaves (a lease of this live process included)
is read by the next.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from desktop_app.cli import build_parser, handler
from desktop_app.cli import main as flowdesk


def prepare(do: str, args: list[str]) -> tuple[Callable[[], int], Callable[[], None]]:
    """What acts after GO (returns the exit code), and what closes after it."""
    if do == "cli":
        handler(build_parser().parse_args(args).command)  # the command's imports, now
        return lambda: flowdesk(args), lambda: None
    if do == "export":
        from desktop_app.export import main as export

        return lambda: export(args), lambda: None
    from desktop_app.store.sqlite.store import open_store

    store = open_store(args[0])
    if do == "run":
        from desktop_app.flow import Engine
        from tests.test_db_copy_live_runs import gate

        engine = Engine(store, flows=[gate])

        def run() -> int:
            engine.run("gate", {})
            return 0

        return run, store.close
    assert do == "dispatch", do
    from desktop_app.flow.outbox import Dispatcher
    from desktop_app.flows import builtin_destinations

    outbox = Dispatcher(store, builtin_destinations(store))

    def dispatch() -> int:
        total = 0
        while n := outbox.dispatch(limit=5):
            total += n
        print(f"delivered {total}")
        return 0

    return dispatch, store.close


def one_round(task: dict[str, Any], rnd: str) -> dict[str, Any]:
    os.environ.update(task.get("env", {}))
    act, close = prepare(task["do"], task["args"])
    print(f"ready {rnd}", flush=True)
    go = Path(task["go"])
    while not go.exists():
        threading.Event().wait(0.0002)  # the parent creates GO for every side at once
    threading.Event().wait(task.get("delay", 0.0))
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = act()
            except SystemExit as exc:  # as the process would have ended
                code = exc.code if isinstance(exc.code, int) else 1
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        close()
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


def main() -> int:
    for line in sys.stdin:
        words = line.rstrip("\n").split(" ", 2)
        if words[0] == "end":
            break
        assert words[0] == "round", line
        told = one_round(json.loads(words[2]), words[1])
        print(f"done {words[1]} {json.dumps(told)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

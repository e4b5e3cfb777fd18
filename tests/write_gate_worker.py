"""A process writing one SQLite file, for the write-gate tests
(``tests/test_write_gate.py``).

Usage: write_gate_worker.py MODE DB [COUNT] [GATE]

* ``hold``: opens a write transaction (``store.write``), publishes one
  ``held`` event in it, prints ``holding`` and waits for ever inside it (the
  test kills it with SIGKILL).
* ``write``: publishes COUNT ``written`` events, one transaction each,
  prints ``done``.
* ``idle``: with a turn of HOLD seconds (``write_gate.HOLD_S``; the 4th
  argument here), publishes COUNT ``written`` events, one transaction each,
  prints ``written`` and waits, store open, for a line on stdin.
* ``race``: prints ``ready``, waits for a line on stdin, then publishes COUNT
  ``raced`` events, one transaction each, and prints ``done``. GATE ``0``
  opens the file without the gate (an older Flowdesk's behaviour).
* ``steps``: as a foreground command does, makes Ctrl-Z (SIGTSTP) give the
  gate back (``write_gate.stop_gives_back_the_gate``), prints ``ready``, then
  runs COUNT steps, each one transaction publishing ``step`` ``{"i": i}``
  and ``step-end`` ``{"i": i}`` (a savepoint each), and prints ``done``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from desktop_app.store import write_gate
from desktop_app.store.sqlite.store import SqliteCheckpointStore, open_store


def publish(store: SqliteCheckpointStore, type_: str, count: int) -> None:
    for i in range(count):
        store.publish_event(type_, {"i": i}, store.now())


def main() -> int:
    mode, db = sys.argv[1], sys.argv[2]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    gate = sys.argv[4] != "0" if len(sys.argv) > 4 and mode != "idle" else True
    if mode == "idle":
        write_gate.HOLD_S = float(sys.argv[4])
    store = open_store(db, write_gate=gate, busy_timeout_s=60)
    if mode == "hold":

        def hold(tx: Any) -> None:
            publish(store, "held", 1)  # a savepoint of this transaction
            print("holding", flush=True)
            sys.stdin.readline()  # never answered: SIGKILL comes first

        store.write(hold)
        return 3
    if mode == "steps":
        write_gate.stop_gives_back_the_gate()
        print("ready", flush=True)
        for i in range(count):

            def step(tx: Any, i: int = i) -> None:
                store.publish_event("step", {"i": i}, store.now())
                store.publish_event("step-end", {"i": i}, store.now())

            store.write(step)
        store.close()
        print("done", flush=True)
        return 0
    if mode == "race":
        print("ready", flush=True)
        sys.stdin.readline()
    if mode == "idle":
        publish(store, "written", count)
        print("written", flush=True)
        sys.stdin.readline()
        store.close()
        return 0
    publish(store, "raced" if mode == "race" else "written", count)
    store.close()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

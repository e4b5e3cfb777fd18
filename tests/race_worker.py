"""One of two processes racing on one file; the parent starts both, waits
for each to print ``ready``, then creates GO so both act at once.

Usage: python tests/race_worker.py append DB GO RUN_ID VALUE
       python tests/race_worker.py dispatch DB GO SINK

``append``: read the run's latest checkpoint, then (after GO) append the next
revision with state ``{"x": VALUE}``; prints ``ok`` or ``conflict``.
``dispatch``: after GO, one dispatcher pass to a destination that appends
each key it is sent to SINK (fsync'd); prints ``delivered N``.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from desktop_app.errors import RevisionConflictError
from desktop_app.flow.outbox import Dispatcher
from desktop_app.store.sqlite.store import open_store


def wait_for(go: Path) -> None:
    print("ready", flush=True)
    while not go.exists():
        threading.Event().wait(0.001)  # polls a file the parent creates


class FileSink:
    """A destination whose effect is the intent's key appended to a file
    (fsync'd), so the parent counts the effects made; its receipt is
    ``{receipt: key}``."""

    receipt = "key"

    def __init__(self, path: Path) -> None:
        self.path = path

    def send(self, key: str, payload: object) -> object:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{key}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return {self.receipt: key}

    def lookup(self, key: str) -> object | None:
        sent = self.path.read_text().split() if self.path.exists() else []
        return {self.receipt: key} if key in sent else None


def main() -> int:
    mode, db, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    store = open_store(db)
    if mode == "append":
        run_id, value = sys.argv[4], int(sys.argv[5])
        latest = store.latest(run_id)
        wait_for(go)
        try:
            store.append(latest.evolve(revision=latest.revision + 1, state={"x": value}))
            print("ok", flush=True)
        except RevisionConflictError:
            print("conflict", flush=True)
    else:
        dispatcher = Dispatcher(store, {"sink": FileSink(Path(sys.argv[4]))})
        wait_for(go)
        print("delivered", dispatcher.dispatch(), flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A ``cancel`` killed with ``kill -9`` part-way (tests/test_cancel_killed.py).

Usage: cancel_killed_worker.py DB RUN_ID

DB: a SQLite path or a ``postgresql://`` URL. Cancels run ``RUN_ID`` (a
``mailer`` run waiting with its mail queued) through ``Engine.cancel``, on a
store wrapped so that the process kills itself (``SIGKILL``: no handler, no
``finally``, no rollback of what was committed) right after the first store
call from which the run reads back ``canceled``: the instant a cancel's
status change is committed, whatever else the cancel still meant to write.
Exits 3 when the cancel ended without the run ever reading back canceled.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from desktop_app.flow import Engine
from tests.ownership_racer import open_db
from tests.test_cancel_withdraws import mailer


class KilledOnceCanceled:
    """Forwards every call to ``store``; kills the process as soon as a
    call returns with run ``run_id`` canceled."""

    def __init__(self, store: Any, run_id: str) -> None:
        self._store, self._run_id = store, run_id

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            out = attr(*args, **kwargs)
            if self._store.get_run(self._run_id).status == "canceled":
                print(f"killed after {name}", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return out

        return call


def main() -> int:
    db, run_id = sys.argv[1], sys.argv[2]
    store = open_db(db)
    engine = Engine(KilledOnceCanceled(store, run_id), flows=[mailer()])
    engine.cancel(run_id)
    return 3


if __name__ == "__main__":
    raise SystemExit(main())

"""The packaged conformance suite as a third-party backend runs it: through
``run_conformance`` alone, in a process that never imports Flowdesk's
built-in flows, their tables' module or a SQL library (here on the
in-memory backend, which has none)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.import_graph import REPO

_RUN = """
import itertools, json, sys
from desktop_app.store.conformance import CHECKS, checks_for, run_conformance
from desktop_app.store.memory import BACKEND
from desktop_app.store.memory.store import InMemoryCheckpointStore

spaces = itertools.count()

def new_database():
    space = f"third-party-{next(spaces)}"
    return lambda clock=None: InMemoryCheckpointStore(space=space, clock=clock)

failures = run_conformance(new_database, agent_log=BACKEND.agent_log)
applied = len(checks_for(BACKEND.capabilities))
loaded = sorted(
    m for m in ("desktop_app.flows", "desktop_app.flow", "desktop_app.store.domain",
                "apsw", "psycopg", "sqlite3")
    if m in sys.modules
)
print(json.dumps({"failures": failures, "applied": applied, "all": len(CHECKS),
                  "loaded": loaded}))
"""


def test_a_backend_runs_the_suite_without_the_builtin_flows():
    out = subprocess.run(
        [sys.executable, "-c", _RUN],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=REPO,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["failures"] == []
    assert report["loaded"] == []  # no built-in flow, domain table module or SQL library
    assert 0 < report["applied"] < report["all"]  # memory declares no sql: those checks skip

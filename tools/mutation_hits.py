"""pytest plugin for ``tools/mutate.py --survivors``: which mutated functions
each test reaches.

Loaded with ``-p tools.mutation_hits`` in a module's ``mutants/`` tree with
``MUTANT_UNDER_TEST=stats``: mutmut's trampolines then call
``record_trampoline_hit(name)`` for every mutated function entered, which
this plugin replaces to collect the names per test. A test that starts a
subprocess (a crash worker, the CLI) is marked ``subprocess``: what the child
reaches cannot be seen from here, so it is run against every mutant.

A function entered outside any test (at import, when collection imports the
package: ``store/statements.py`` renders its SQL then) is recorded under
``"import"``: a mutant there changes what every test sees, so it is run
against every kill test.

It also records the tests that fail (or cannot be collected) on this tree's
unmutated code: on a tree copied before a fix, a test of the fixed behaviour
fails there, and could "kill" every mutant without telling them apart.

Writes ``{"tests": {nodeid: [function, ...]}, "subprocess": [nodeid, ...],
"order": [nodeid, ...], "failed": [nodeid or file, ...], "import": [function, ...]}`` as JSON to the
path in ``FLOWDESK_MUTATION_HITS``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Generator
from typing import Any

import mutmut.mutation.trampoline as trampoline
import pytest

_hits: set[str] = set()
_at_import: set[str] = set()
_in_test = [False]
_spawned = [False]
_by_test: dict[str, list[str]] = {}
_subprocess: list[str] = []
_order: list[str] = []
_failed: list[str] = []


def _record(name: str, caller: str | None = None) -> None:
    (_hits if _in_test[0] else _at_import).add(name)


_popen_init = subprocess.Popen.__init__


def _watching_popen_init(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
    _spawned[0] = True
    _popen_init(self, *args, **kwargs)


trampoline.record_trampoline_hit = _record  # type: ignore[attr-defined]
subprocess.Popen.__init__ = _watching_popen_init  # type: ignore[method-assign]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    _hits.clear()
    _spawned[0] = False
    _in_test[0] = True
    yield
    _in_test[0] = False
    _by_test[item.nodeid] = sorted(_hits)
    _order.append(item.nodeid)
    if _spawned[0]:
        _subprocess.append(item.nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed and report.nodeid not in _failed:
        _failed.append(report.nodeid)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _failed.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = os.environ.get("FLOWDESK_MUTATION_HITS")
    if out:
        data = {
            "tests": _by_test,
            "subprocess": _subprocess,
            "order": _order,
            "failed": _failed,
            "import": sorted(_at_import),
        }
        with open(out, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)

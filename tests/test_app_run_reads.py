"""How often the app reads a run before the engine runs its first step.

The app trusts the engine: a resume from the runs screen does not read the
run itself to repeat the engine's guards; the engine reads it once
(``RunLog.head``) and decides. Counted with apsw's ``exec_trace`` on both of
the app's connections (the engine's and the UI's): every ``SELECT`` whose
bindings name the run, from the key press until the run's first step starts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from desktop_app import bootstrap
from desktop_app.app.main import FlowdeskApp
from desktop_app.config import Settings, load_settings
from desktop_app.flow import CompiledFlow, FlowBuilder
from tests.app_support import messages, settle, wait_until

SIZE = (120, 40)


class Reads:
    """``SELECT``s naming one run until its first step starts: on the UI's
    connection those the app makes before the engine reads the run (after
    that, the UI reads only to show what the engine's events announce), on
    the engine's all of them."""

    def __init__(self) -> None:
        self.run_id = ""
        self.stepped = threading.Event()
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def tracer(self, where: str) -> Any:
        def trace(_cursor: Any, sql: str, bindings: Any) -> bool:
            if self.stepped.is_set() or not sql.lstrip().upper().startswith(("SELECT", "WITH")):
                return True
            values = bindings.values() if isinstance(bindings, dict) else bindings or ()
            if self.run_id in values:
                with self._lock:
                    if where == "engine" or not self.on("engine"):
                        self.seen.append((where, " ".join(sql.split())[:48]))
            return True

        return trace

    def on(self, where: str) -> list[str]:
        return [sql for w, sql in self.seen if w == where]


class Deploy(BaseModel):
    go: object = None
    done: bool = False


def flows(reads: Reads) -> list[CompiledFlow[Any]]:
    def first(state: Any) -> dict[str, Any]:
        reads.stepped.set()
        return {}

    return [
        FlowBuilder("two", Deploy)
        .step("first", first)
        .step("second", lambda s: {})
        .chain()
        .compile(),
        FlowBuilder("nap", Deploy).sleep("nap", 0.01).step("after", first).chain().compile(),
    ]


def pending_run(settings: Settings, reads: Reads) -> str:
    """A run started by another process and left pending."""
    engine = bootstrap.build_engine(settings, flows=flows(reads))
    try:
        return engine.start("two", Deploy())
    finally:
        engine.store.close()


def napping_run(settings: Settings, reads: Reads) -> str:
    """A run waiting on a timer that has expired since (resume wakes it)."""
    engine = bootstrap.build_engine(settings, flows=flows(reads))
    try:
        result = engine.run("nap", Deploy())
    finally:
        engine.store.close()
    assert result.status == "waiting"
    time.sleep(0.02)
    return result.run_id


@pytest.mark.parametrize("make_run", [pending_run, napping_run])
async def test_resume_from_the_runs_screen_reads_the_run_once(
    tmp_path: Path, make_run: Callable[[Settings, Reads], str]
) -> None:
    settings = load_settings(db_path=tmp_path / "t.db", recover_on_launch=False)
    bootstrap.apply_schema(settings)
    counted = Reads()
    counted.run_id = run_id = make_run(settings, counted)
    assert not counted.stepped.is_set()

    app = FlowdeskApp(settings, flows=flows(counted))
    # the app's own timer pump would wake the napping run first (it fires due
    # timers while the app is open, tests/test_app_timers.py): this test
    # counts the reads of a person's resume
    app._start_timers = lambda: None  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.engine is not None and app.reader is not None
        app.engine.store.conn.exec_trace = counted.tracer("engine")  # type: ignore[attr-defined]
        app.reader.conn.exec_trace = counted.tracer("ui")  # type: ignore[attr-defined]
        await pilot.press("r")
        await settle(pilot)
        await wait_until(pilot, counted.stepped.is_set)
        app.engine.store.conn.exec_trace = None  # type: ignore[attr-defined]
        app.reader.conn.exec_trace = None  # type: ignore[attr-defined]
        assert f"Run {run_id[:8]} completed" in messages(app)
    print(f"\n{make_run.__name__}: {len(counted.seen)} reads of the run before its first step")
    for where, sql in counted.seen:
        print(f"  {where}: {sql}")
    assert counted.on("ui") == []  # the app read nothing to decide
    rows = [sql for sql in counted.on("engine") if sql.startswith("SELECT run_id, flow_name")]
    assert len(rows) == 1 and len(counted.seen) <= 2  # one RunLog.head: row and checkpoint

"""A new user's report: `flowdesk runs` cut every run id to 32 columns from
its start, so two child runs of one parent (``PARENT:step``,
``PARENT:step:1``) showed as the same ``PARENT…``: neither could be told
apart nor copied. An id that does not fit keeps its first 8 characters
(what the app shows, a prefix commands take) and its end. Real SQLite file,
the listing by a real `flowdesk` process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from desktop_app.flow import Engine, FlowBuilder
from desktop_app.store.sqlite.store import open_store
from desktop_app.textsafe import cell_width, fit_cells_keeping_end
from tests.cli_support import flowdesk


class P(BaseModel):
    kids: list[str] = []


class C(BaseModel):
    n: int = 0


def test_two_children_of_one_parent_are_told_apart_in_runs(db_path: Path) -> None:
    kid = FlowBuilder("kid", C).step("one", lambda s: {"n": 1}).compile()
    engines: list[Engine] = []

    def spawn(s: P, ctx: Any) -> dict[str, list[str]]:
        a = engines[0].run_child(ctx, "kid", {})
        b = engines[0].run_child(ctx, "kid", {})
        return {"kids": [a.run_id, b.run_id]}

    parent = FlowBuilder("parent", P).step("spawn", spawn).compile()
    store = open_store(db_path)
    try:
        engines.append(Engine(store, flows=[kid, parent]))
        done = engines[0].run("parent", P())
    finally:
        store.close()
    first, second = done.state.kids
    assert first.startswith(done.run_id) and second.startswith(done.run_id)
    listed = flowdesk(db_path, "runs")
    assert listed.returncode == 0, listed.stderr
    cells = {line[:32] for line in listed.stdout.splitlines()[1:]}
    shown = {fit_cells_keeping_end(i, 32) for i in (done.run_id, first, second)}
    assert shown <= cells and len(shown) == 3, listed.stdout
    assert fit_cells_keeping_end(second, 32).startswith(second[:8] + "…")
    assert fit_cells_keeping_end(second, 32).endswith(second[-23:])


def test_an_id_that_fits_is_padded_and_a_wide_one_keeps_its_end() -> None:
    assert fit_cells_keeping_end("abc", 6) == "abc   "
    cut = fit_cells_keeping_end("0123456789" + "界" * 10, 16)
    assert cell_width(cut) == 16 and cut == "01234567…界界界 "  # 7 columns: 3 wide, 1 pad

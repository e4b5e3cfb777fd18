"""The README's headless examples, run as written by a user with a fresh HOME.

Each line of the README's ``### Headless`` shell block runs through bash
(so ``~`` and quoting behave as in a terminal) with ``flowdesk`` on PATH;
``RUN`` is replaced by the run id the last ``run``/``start`` line printed
first. Three lines are not run, and the test names them so a new line is
never skipped silently: ``agent`` (a service that runs until SIGTERM; see
tests/test_cli_waits.py), ``ask`` (needs a model server; tests/test_cli_ask.py)
and ``secrets set`` (needs a system keyring).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests import cli_forkserver

REPO = Path(__file__).resolve().parents[1]
NOT_RUN = (
    "flowdesk --db ~/notes.db agent",
    "flowdesk --db ~/notes.db ask ",
    "flowdesk secrets set ",
)


def headless_block() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("### Headless\n", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [re.sub(r"\s+#\s.*$", "", line).strip() for line in block.splitlines()]
    return [line for line in lines if line]


@pytest.mark.slow
def test_readme_headless_examples_run_as_written(tmp_path):
    home = Path(os.environ["HOME"])  # fresh per test (conftest)
    notes = home / "notes"
    notes.mkdir()
    (notes / "todo.md").write_text("# Todo\n\nBuy milk. Call the plumber about the sink.\n")
    (notes / "ideas.txt").write_text("A durable engine resumes after a crash.\n")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
    }
    lines = headless_block()
    skipped = [line for line in lines if line.startswith(NOT_RUN)]
    assert len(skipped) == len(NOT_RUN), skipped
    run_id = None
    outputs: dict[str, str] = {}
    for line in lines:
        if line in skipped:
            continue
        if line.startswith("export "):
            name, _, value = shlex.split(line[len("export ") :])[0].partition("=")
            env[name] = value
            continue
        command = line.replace(" RUN", f" {run_id}") if run_id else line
        out = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, env=env, timeout=120
        )
        assert out.returncode == 0, (line, out.stdout, out.stderr)
        outputs[line] = out.stdout
        if " run " in f" {line} " or " start " in line:
            run_id = out.stdout.splitlines()[0]
            assert re.fullmatch(r"[0-9a-f]{32}", run_id), out.stdout
    report = home / "notes-digest" / "digest.md"
    assert report.is_file() and "todo.md" in report.read_text()
    watched = next(v for k, v in outputs.items() if " watch " in k)
    assert "approval  completed" in watched  # answered, paid, shipped
    canceled = next(v for k, v in outputs.items() if " cancel " in k)
    assert canceled.strip().endswith("canceled")
    waiting = next(v for k, v in outputs.items() if "waiting" in k)
    assert re.search(r"deadline in 23h 5\dm", waiting), waiting  # not "86,399 s"


def test_flow_builder_signatures_in_the_readme_are_the_real_ones():
    """Each ``.method(a, b)`` the README cites for a ``FlowBuilder`` method
    names the method's real leading parameters, in order (the step id first)."""
    import inspect

    from desktop_app.flow import FlowBuilder

    text = (REPO / "README.md").read_text(encoding="utf-8")
    cited = re.findall(r"`\.(\w+)\(([^)`]*)\)`", text)
    checked = 0
    for method, args in cited:
        real = getattr(FlowBuilder, method, None)
        if real is None:
            continue
        names = [a.strip() for a in args.split(",") if a.strip()]
        params = [p for p in inspect.signature(real).parameters if p != "self"]
        assert names == params[: len(names)], (method, names, params)
        checked += 1
    assert checked >= 4, cited


def test_the_readme_own_flow_snippet_is_the_shipped_example():
    """The ``mypkg/flows.py`` snippet compiles to the same flow (same version
    fingerprint) as ``desktop_app.examples.approval``."""
    from desktop_app.examples.approval import approval

    text = (REPO / "README.md").read_text(encoding="utf-8")
    snippet = text.split("# mypkg/flows.py\n", 1)[1].split("```", 1)[0]
    module = types.ModuleType("readme_flows")
    sys.modules[module.__name__] = module  # pydantic resolves annotations through it
    try:
        exec(compile(snippet, "README.md", "exec"), module.__dict__)  # the README.s own code
        scope = module.__dict__
    finally:
        del sys.modules[module.__name__]
    assert scope["approval"].version == approval.version
    assert scope["Approval"](order="o", approved=" No ").approved == "no"


def test_the_readme_own_destination_delivers_a_queued_intent_once(tmp_path: Path) -> None:
    """The README's ``my_destinations.py`` (``FileDestination`` is the
    user's own class: Flowdesk has none) run as written, as a program of its
    own, next to a ``notes.db`` holding a run's queued ``file`` intent: it
    makes the effect once, and again makes nothing."""
    import json

    from desktop_app.flow import Engine
    from desktop_app.store.sqlite.store import open_store
    from tests.test_outbox_own_destination import FLOW

    text = (REPO / "README.md").read_text(encoding="utf-8")
    program = text.split("```python\n# my_destinations.py", 1)[1].split("```", 1)[0]
    (tmp_path / "my_destinations.py").write_text("# my_destinations.py" + program)
    scope: dict[str, object] = {"__name__": "noted_flows"}
    exec(compile(FLOW, "noted_flows.py", "exec"), scope)  # the flow that queues the intent
    from tests.cli_support import flowdesk

    assert flowdesk(tmp_path / "notes.db", "db", "apply").returncode == 0
    store = open_store(tmp_path / "notes.db")
    try:
        run = Engine(store, flows=[scope["noted"]]).run("noted", {"text": "hello"})  # type: ignore[list-item]
        assert run.status == "completed"
    finally:
        store.close()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(2):
        ran = cli_forkserver.run_argv(
            [sys.executable, "my_destinations.py"],
            cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
    sent = [json.loads(line) for line in (tmp_path / "sent.jsonl").read_text().splitlines()]
    assert [s["payload"] for s in sent] == [{"text": "hello"}]
    store = open_store(tmp_path / "notes.db")
    try:
        assert [i.status for i in store.intents(["delivered", "failed", "pending"])] == [
            "delivered"
        ]
    finally:
        store.close()

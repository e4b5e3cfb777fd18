"""A ``digest --model`` run killed or failed mid-way is resumed by every
process that resumes runs, with the model the settings configure: the hint
``show`` prints, the ``resume with:`` hint of a failed run, ``resume --all``,
``flowdesk agent`` and the app's launch recovery. Without a model configured
the refusal names what to set, never the version-mismatch text (the model
mode is a variant of the same flow, not a changed flow).
"""

from __future__ import annotations

import re
import signal
import threading
from pathlib import Path

import pytest

from desktop_app.config import load_settings
from tests.app_support import messages, settle
from tests.chat_server import ChatServer, completion
from tests.cli_support import as_printed, flowdesk, spawn
from tests.polling import until

MISMATCH = "was started under flow version"


def model_env(db: Path, url: str) -> dict[str, str]:
    """The environment of every command of a test: the model (an
    OpenAI-compatible server on 127.0.0.1) and the database as the user's
    ``--db`` would be (``FLOWDESK_DB_PATH`` is not set: ``--db`` is)."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWDESK_")}
    return {**env, "FLOWDESK_MODEL__BASE_URL": url, "FLOWDESK_MODEL__MODEL": "m"}


def two_files(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nAlpha text here.\n")
    (folder / "b.txt").write_text("Beta text here.\n")
    return folder


def killed_mid_run(
    tmp_path: Path, server: ChatServer, env: dict[str, str], db: Path | str | None = None
) -> tuple[Path | str, str]:
    """``flowdesk --db d.db run digest --folder src --out out --model``
    killed with SIGKILL while the model answers its second file (the first
    file's summary saved). ``db``: another database (a PostgreSQL URL).
    Returns the database and the run id."""
    db = tmp_path / "d.db" if db is None else db
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    folder = two_files(tmp_path)
    gate = threading.Event()
    server.script = [("json", completion("Summary of A.")), ("gate", gate, completion("late"))]
    args = ["--db", str(db), "run", "digest", "--folder", str(folder)]
    proc = spawn(*args, "--out", str(tmp_path / "out"), "--model", "--quiet", env=env)
    try:
        assert proc.stdout is not None
        run_id = proc.stdout.readline().strip()
        until(lambda: len(server.requests) == 2, "the second file's model call")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        gate.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout and proc.stdout.close()
        proc.stderr and proc.stderr.close()
    assert re.fullmatch(r"[0-9a-f]{32}", run_id), run_id
    return db, run_id


def hint_in(text: str, start: str) -> str:
    """The backquoted command in ``text`` that starts with ``start``."""
    found = [c for c in re.findall(r"`([^`]+)`", text) if c.startswith(start)]
    assert found, text
    return found[0]


def report_of(tmp_path: Path) -> str:
    return (tmp_path / "out" / "digest.md").read_text()


def status_of(db: Path | str, run_id: str, env: dict[str, str]) -> str:
    import json

    out = flowdesk(db, "show", run_id, "-o", "json", env=env)
    assert out.returncode == 0, out.stderr
    return str(json.loads(out.stdout)["status"])


def test_the_interrupted_hint_show_prints_resumes_a_killed_model_run(tmp_path: Path) -> None:
    with ChatServer() as server:
        env = model_env(tmp_path / "d.db", server.url)
        db, run_id = killed_mid_run(tmp_path, server, env)
        shown = flowdesk(db, "show", run_id, env=env)
        assert shown.returncode == 0 and "interrupted:" in shown.stdout, shown.stdout
        hint = hint_line_command(shown.stdout)
        assert hint == f"flowdesk --db {db} resume {run_id}"
        asked = len(server.requests)
        server.script = [("json", completion("Summary of B."))]
        out = as_printed(hint, env)
        assert out.returncode == 0, out.stderr
        assert MISMATCH not in out.stderr
        assert f"run {run_id} completed" in out.stdout
        # the first file's paid answer is reused: only the second is asked again
        assert len(server.requests) == asked + 1
    report = report_of(tmp_path)
    assert "Summary of A." in report and "Summary of B." in report


def hint_line_command(shown: str) -> str:
    """The command of ``show``'s ``interrupted: ...; CMD continues it`` line."""
    (line,) = [ln for ln in shown.splitlines() if ln.startswith("interrupted:")]
    match = re.search(r"; (?:then )?(flowdesk .+) continues it$", line)
    assert match, line
    return match.group(1)


def test_resume_all_resumes_a_killed_model_run(tmp_path: Path) -> None:
    with ChatServer() as server:
        env = model_env(tmp_path / "d.db", server.url)
        db, run_id = killed_mid_run(tmp_path, server, env)
        server.script = [("json", completion("Summary of B."))]
        out = flowdesk(db, "resume", "--all", env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"run {run_id} completed" in out.stdout
        assert MISMATCH not in out.stdout + out.stderr
    assert "Summary of B." in report_of(tmp_path)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_flowdesk_agent_resumes_a_killed_model_run(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """On PostgreSQL the agent is a worker, which claims runs of the flows
    and versions it runs: ``digest --model``'s version too (it claimed the
    plain digest's only, so the run stayed interrupted however long the
    worker ran)."""
    where = request.getfixturevalue("pg_url") if kind == "postgres" else None
    with ChatServer() as server:
        env = model_env(tmp_path / "d.db", server.url)
        db, run_id = killed_mid_run(tmp_path, server, env, db=where)
        # the run's step and the agent's own sweep of agent runs may both ask
        server.script = [("json", completion("Summary of B."))] * 2
        agent = spawn("--db", str(db), "agent", "--poll", "0.2", env=env)
        try:
            until(lambda: status_of(db, run_id, env) == "completed", "the agent resumes it", 60)
        finally:
            agent.send_signal(signal.SIGTERM)
            _, err = agent.communicate(timeout=60)
        assert agent.returncode == 0, err
        assert MISMATCH not in err and "cannot go on" not in err, err
    assert "Summary of B." in report_of(tmp_path)


async def test_the_app_resumes_a_killed_model_run_at_launch(tmp_path: Path) -> None:
    from desktop_app.app.main import FlowdeskApp

    with ChatServer() as server:
        env = model_env(tmp_path / "d.db", server.url)
        db, run_id = killed_mid_run(tmp_path, server, env)
        server.script = [("json", completion("Summary of B."))]
        settings = load_settings(db_path=db, model={"base_url": server.url, "model": "m"})
        app = FlowdeskApp(settings)
        async with app.run_test(size=(120, 35)) as pilot:
            for _ in range(600):  # launch recovery runs in a worker thread
                await settle(pilot)
                if status_of(db, run_id, env) == "completed":
                    break
                await pilot.pause(0.1)
            assert status_of(db, run_id, env) == "completed", messages(app)
            assert not messages(app, "error"), messages(app)
    assert "Summary of B." in report_of(tmp_path)


def test_without_a_model_resume_names_what_to_set(tmp_path: Path) -> None:
    with ChatServer() as server:
        env = model_env(tmp_path / "d.db", server.url)
        db, run_id = killed_mid_run(tmp_path, server, env)
    bare = {k: v for k, v in env.items() if not k.startswith("FLOWDESK_MODEL__")}
    shown = flowdesk(db, "show", run_id, env=bare).stdout
    assert "no model is configured here: set FLOWDESK_MODEL__BASE_URL" in shown, shown
    hint = hint_line_command(shown)
    out = flowdesk(db, "resume", run_id, env=bare)
    assert out.returncode == 2, out.stderr
    assert "FLOWDESK_MODEL__BASE_URL and FLOWDESK_MODEL__MODEL" in out.stderr
    assert "[model]" in out.stderr and MISMATCH not in out.stderr
    every = flowdesk(db, "resume", "--all", env=bare)
    assert every.returncode == 1
    assert f"run {run_id} not resumed: " in every.stdout and MISMATCH not in every.stdout
    assert "FLOWDESK_MODEL__BASE_URL" in every.stdout
    # nothing ran: with the model configured (as the messages say) the
    # command show printed finishes it
    with ChatServer() as server:
        server.script = [("json", completion("Summary of B."))]
        out = as_printed(hint, model_env(db, server.url))
        assert out.returncode == 0, out.stderr
    assert "Summary of B." in report_of(tmp_path)


def test_a_model_run_failed_by_its_server_resumes_with_the_printed_hint(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    folder = two_files(tmp_path)
    with ChatServer() as server:
        env = model_env(db, server.url)
        assert flowdesk(db, "db", "apply", env=env).returncode == 0
        # the model server refuses the second file's call: the run fails
        server.script = [
            ("json", completion("Summary of A.")),
            ("status", 400, {}, '{"error": {"message": "bad request"}}'),
        ]
        out = flowdesk(
            db,
            "run",
            "digest",
            "--folder",
            str(folder),
            "--out",
            str(tmp_path / "out"),
            "--model",
            "--quiet",
            env=env,
        )
        assert out.returncode == 1, out.stderr
        run_id = out.stdout.splitlines()[0]
        (line,) = [ln for ln in out.stderr.splitlines() if ln.startswith("resume with: ")]
        hint = line.removeprefix("resume with: ")
        assert hint == f"flowdesk --db {db} resume {run_id}"
        server.script = [("json", completion("Summary of B."))]
        again = as_printed(hint, env)
        assert again.returncode == 0, again.stderr
        assert f"run {run_id} completed" in again.stdout and MISMATCH not in again.stderr
    report = report_of(tmp_path)
    assert "Summary of A." in report and "Summary of B." in report


def test_the_model_mode_is_registered_where_flows_are(tmp_path: Path) -> None:
    """Every process that opens the database through the composition root
    resumes model runs: the variant is registered there, built lazily."""
    from desktop_app import bootstrap
    from desktop_app.flows.digest import model_version

    settings = load_settings(db_path=tmp_path / "d.db")
    bootstrap.apply_schema(settings)
    sv = bootstrap.open_services(settings)
    try:
        assert sv.engine.runs_version("digest", model_version())
        assert not sv.engine.runs_version("digest", "1-model+0000000000000000")
    finally:
        sv.close()

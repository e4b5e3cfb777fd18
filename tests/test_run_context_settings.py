"""The execution context of the runs a person starts from the command line
or the app (a tryout: nothing outside Python could set tenant, user,
session or correlation ids, nor join a caller's trace, so every CLI, app and
``ask`` run had them empty): ``[context]`` in the settings
(``FLOWDESK_CONTEXT__TENANT_ID``...) and ``TRACEPARENT`` (W3C trace
context, as a calling tool exports it) give them; a malformed
``TRACEPARENT`` is refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from desktop_app.bootstrap import run_context
from desktop_app.config import load_settings
from desktop_app.errors import ConfigError
from tests.chat_server import ChatServer, completion
from tests.cli_support import flowdesk

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = f"00-{TRACE}-b7ad6b7169203331-01"
IDS = {
    "FLOWDESK_CONTEXT__TENANT_ID": "acme",
    "FLOWDESK_CONTEXT__USER_ID": "ann",
    "FLOWDESK_CONTEXT__SESSION_ID": "s-1",
    "FLOWDESK_CONTEXT__CORRELATION_ID": "ticket-7",
}
WANTED = {
    "tenant_id": "acme",
    "user_id": "ann",
    "session_id": "s-1",
    "correlation_id": "ticket-7",
    "trace_id": TRACE,
}


def contexts(db: Path) -> dict[str, dict[str, str]]:
    out = flowdesk(db, "runs", "-o", "jsonl", "--children")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    return {r["run_id"]: r["context"] for r in rows}


def folder(tmp_path: Path) -> Path:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nalpha\n")
    return notes


def test_run_and_ask_take_the_settings_ids_and_traceparents_trace(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    env = {**IDS, "TRACEPARENT": PARENT}
    args = ("run", "digest", "--folder", str(folder(tmp_path)), "--out", str(tmp_path / "o"))
    ran = flowdesk(db, *args, "--quiet", env=env)
    assert ran.returncode == 0, ran.stderr
    with ChatServer() as chat:
        chat.script = [("json", completion("Yes."))]
        model = {"FLOWDESK_MODEL__BASE_URL": chat.url, "FLOWDESK_MODEL__MODEL": "m"}
        asked = flowdesk(db, "ask", "Is it?", env={**env, **model})
    assert asked.returncode == 0, asked.stderr
    found = contexts(db)
    assert len(found) == 2
    for run_id, ctx in found.items():
        assert ctx == {**WANTED, "run_id": run_id}, ctx
    assert len(flowdesk(db, "runs", "--tenant", "acme", "-o", "jsonl").stdout.splitlines()) == 2
    # without TRACEPARENT each run gets a trace of its own; the ids stay
    again = flowdesk(db, *args, "--new", "--quiet", env=IDS)
    assert again.returncode == 0, again.stderr
    [new] = [c for rid, c in contexts(db).items() if rid not in found]
    assert new["tenant_id"] == "acme" and new["trace_id"] not in (TRACE, None)


@pytest.mark.parametrize(
    "bad",
    [
        "not a traceparent",
        f"00-{'0' * 32}-b7ad6b7169203331-01",  # an all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # an all-zero parent id
        f"ff-{TRACE}-b7ad6b7169203331-01",  # version ff is invalid
        f"00-{TRACE.upper()}-b7ad6b7169203331-01",
    ],
)
def test_a_malformed_traceparent_is_refused_naming_it_and_nothing_starts(
    tmp_path: Path, bad: str
) -> None:
    settings = load_settings(db_path=tmp_path / "f.db")
    with pytest.raises(ConfigError) as refused:
        run_context(settings, {"TRACEPARENT": bad})
    assert f"TRACEPARENT {bad!r} is not a W3C traceparent" in str(refused.value)
    assert "nothing was started" in str(refused.value)


def test_the_command_line_refuses_it_before_a_run_exists(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    args = ("run", "digest", "--folder", str(folder(tmp_path)), "--out", str(tmp_path / "o"))
    out = flowdesk(db, *args, env={"TRACEPARENT": "00-nope"})
    assert out.returncode == 2, out.stderr
    assert "TRACEPARENT '00-nope' is not a W3C traceparent" in out.stderr
    assert contexts(db) == {}  # nothing was started


def test_the_settings_file_gives_them_too_and_a_later_version_of_traceparent_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[context]\ntenant_id = "initech"\nsession_id = "s-9"\n')
    monkeypatch.setenv("FLOWDESK_CONFIG", str(config))
    settings = load_settings(db_path=tmp_path / "f.db")
    later = f"01-{TRACE}-b7ad6b7169203331-01-more"  # a later version may add fields
    ctx = run_context(settings, {"TRACEPARENT": later})
    assert ctx.model_dump(exclude_none=True) == {
        "tenant_id": "initech",
        "session_id": "s-9",
        "trace_id": TRACE,
    }
    assert run_context(settings, {}).trace_id is None  # the run then gets its own


async def test_the_app_starts_its_runs_with_them_and_refuses_a_bad_traceparent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from desktop_app import bootstrap
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.flows.digest import DigestInput
    from desktop_app.store.sqlite.store import open_store
    from tests.app_support import settle, wait_until

    for name, value in IDS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TRACEPARENT", PARENT)
    db = tmp_path / "f.db"
    settings = load_settings(db_path=db)
    bootstrap.apply_schema(settings)
    notes = folder(tmp_path)
    app = FlowdeskApp(settings)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        given = DigestInput(folder=str(notes), out=str(tmp_path / "o"))
        run_id = app.controller.start_digest(given)
        assert run_id is not None

        def ended() -> bool:
            store = open_store(db)
            try:
                return [r.status for r in store.list_runs()] == ["completed"]
            finally:
                store.close()

        await wait_until(pilot, ended)
        monkeypatch.setenv("TRACEPARENT", "garbage")
        with pytest.raises(ConfigError):  # the dialogs say it (they catch ConfigError)
            app.controller.start_digest(DigestInput(folder=str(notes), out=str(tmp_path / "p")))
    store = open_store(db)
    try:
        ctx = dict(store.get_run(run_id).context)
        assert len(store.list_runs()) == 1  # the refused one started nothing
    finally:
        store.close()
    assert ctx == {**WANTED, "run_id": run_id}

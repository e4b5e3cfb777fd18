"""A side effect happens once, or Flowdesk says its outcome is unknown.

* A slow send whose dispatcher is alive on this host is never taken over,
  whatever the clocks say (the rule of run leases): a second dispatcher whose
  clock runs an hour ahead, or a sender whose clock runs an hour behind (so
  its claim lands already expired), leaves it alone.
* On PostgreSQL (dispatchers on two machines, never presumed alive) the
  sender renews its claim while the send runs, so a slow send outliving its
  claim time is not taken over either.
* A claim whose dispatcher was killed mid-send is taken over as
  *interrupted*: looked up first, never sent blindly, whatever the clocks.
* A lookup that raises keeps the intent interrupted (``sending``, outcome
  unknown): the next dispatcher looks it up again instead of sending.
* Three dispatcher processes (one an hour ahead, one an hour behind) released
  together by a barrier, 20 rounds: each intent is sent exactly once.

Every process is real (``tests/slow_outbox_worker.py``), clocks are shifted
an hour either way (the worker's ``time.time``, as
``tests/test_ownership_liveness.py`` shifts it; libfaketime 0.9.10 stalls
Python's timed waits), crashes are ``kill -9``; what was sent is read from the
destination's own ledger.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from desktop_app.flow import Engine
from desktop_app.flow.outbox import LOOKUP_FAILED
from tests import cli_forkserver
from tests.cli_support import REPO, flowdesk
from tests.slow_outbox_worker import Order, open_any, sender

WORKER = Path(__file__).resolve().parent / "slow_outbox_worker.py"
LIMIT_S = 120.0


def _cmd(db: object, ledger: Path, *args: str, skew: str | None = None) -> list[str]:
    base = [sys.executable, str(WORKER), str(db), str(ledger), *args]
    return base if skew is None else [*base, "--skew", skew]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _ledger(path: Path) -> list[tuple[str, str, int]]:
    if not path.exists():
        return []
    return [(w, k, int(p)) for w, k, p in (line.split() for line in path.read_text().splitlines())]


def _wait_for(path: Path, what: str, key: str) -> None:
    deadline = time.monotonic() + LIMIT_S
    while not any(w == what and k == key for w, k, _ in _ledger(path)):
        assert time.monotonic() < deadline, f"no {what} {key} in {_ledger(path)}"
        time.sleep(0.02)


def _queue(db: object) -> str:
    """Start a run that queues one send; returns the intent's key."""
    store = open_any(str(db))
    try:
        before = {i.intent_id for i in store.intents(["pending"], limit=10_000)}
        Engine(store, flows=[sender]).run("sender", Order(order="o1"))
        (key,) = {i.intent_id for i in store.intents(["pending"], limit=10_000)} - before
        return key
    finally:
        store.close()


def _intent(db: object, key: str) -> tuple[str, int, str | None]:
    store = open_any(str(db))
    try:
        (it,) = [
            i
            for i in store.intents(["pending", "sending", "delivered", "failed"], limit=10_000)
            if i.intent_id == key
        ]
        return it.status, it.attempts, it.last_error
    finally:
        store.close()


def _dispatch(db: object, ledger: Path, *args: str, skew: str | None = None) -> str:
    done = subprocess.run(
        _cmd(db, ledger, "dispatch", *args, skew=skew),
        capture_output=True, text=True, timeout=LIMIT_S, env=_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("sender_skew", "peer_skew"),
    [(None, "3600"), ("-3600", None)],
    ids=["peer-an-hour-ahead", "sender-an-hour-behind"],
)
def test_a_live_senders_slow_send_is_never_taken_over_whatever_the_clocks(
    db_path: Path, tmp_path: Path, sender_skew: str | None, peer_skew: str | None
) -> None:
    ledger = tmp_path / "ledger"
    key = _queue(db_path)
    hold = tmp_path / "let-go"  # the send lasts 4 s and until the peer looked
    first = subprocess.Popen(
        _cmd(db_path, ledger, "dispatch", "--delay", "4", "--hold", str(hold), skew=sender_skew),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    try:
        _wait_for(ledger, "START", key)
        assert _dispatch(db_path, ledger, skew=peer_skew) == "delivered 0"
        assert _intent(db_path, key)[0] == "sending"  # still the first one's
        hold.touch()
        out, err = first.communicate(timeout=LIMIT_S)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    assert out.strip() == "delivered 1"
    assert _ledger(ledger) == [("START", key, first.pid), ("DONE", key, first.pid)]
    assert _intent(db_path, key)[:2] == ("delivered", 1)


@pytest.mark.parametrize("peer_skew", [None, "3600", "-3600"])
def test_a_killed_senders_claim_is_taken_over_as_interrupted_and_looked_up_first(
    db_path: Path, tmp_path: Path, peer_skew: str | None
) -> None:
    ledger = tmp_path / "ledger"
    key = _queue(db_path)
    first = subprocess.Popen(
        _cmd(db_path, ledger, "dispatch", "--delay", "30"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    try:
        _wait_for(ledger, "START", key)
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=LIMIT_S)
    out = _dispatch(db_path, ledger, skew=peer_skew)
    assert out == "delivered 1"
    (peer,) = {p for _, _, p in _ledger(ledger)} - {first.pid}
    # asked before it was sent again (with the same key)
    assert _ledger(ledger) == [
        ("START", key, first.pid),
        ("LOOKUP", key, peer),
        ("START", key, peer),
        ("DONE", key, peer),
    ]
    assert _intent(db_path, key)[:2] == ("delivered", 2)


def test_a_failed_lookup_keeps_the_intent_interrupted_and_it_is_never_sent_blindly(
    db_path: Path, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    key = _queue(db_path)
    # the send is made (DONE), then the process is killed before it records it
    first = subprocess.Popen(
        _cmd(db_path, ledger, "dispatch", "--post", "60"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    try:
        _wait_for(ledger, "DONE", key)
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=LIMIT_S)
    assert _dispatch(db_path, ledger, "--lookup", "raise") == "delivered 0"
    status, attempts, error = _intent(db_path, key)
    assert (status, attempts) == ("sending", 1)
    assert error is not None and error.startswith(LOOKUP_FAILED), error
    assert "ConnectionError" in error
    # another failing lookup: still unknown, still not sent
    assert _dispatch(db_path, ledger, "--lookup", "raise") == "delivered 0"
    assert _intent(db_path, key)[:2] == ("sending", 1)
    # `show` says it may have been made, not that it is queued
    shown = flowdesk(db_path, "show", _run_of(db_path, key))
    assert "may have been made" in shown.stdout, shown.stdout
    assert "not made yet" not in shown.stdout, shown.stdout
    # a lookup that answers finds it made: recorded, never sent again
    assert _dispatch(db_path, ledger) == "delivered 1"
    assert [w for w, k, _ in _ledger(ledger) if w in ("START", "DONE")] == ["START", "DONE"]
    assert _intent(db_path, key)[:2] == ("delivered", 1)


def _run_of(db: object, key: str) -> str:
    store = open_any(str(db))
    try:
        (run_id,) = {
            i.run_id
            for i in store.intents(["pending", "sending", "delivered", "failed"], limit=10_000)
            if i.intent_id == key
        }
        return run_id
    finally:
        store.close()


ROUNDS = 20


@pytest.mark.slow
def test_three_dispatchers_released_together_send_each_intent_once(
    db_path: Path, tmp_path: Path
) -> None:
    ledger, barrier = tmp_path / "ledger", tmp_path / "barrier"
    barrier.mkdir()
    racers = [
        subprocess.Popen(
            _cmd(db_path, ledger, "race", str(ROUNDS), str(barrier), "--delay", "0.3", skew=skew),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        for skew in (None, "3600", "-3600")
    ]
    try:
        for racer in racers:
            assert racer.stdout is not None
            assert racer.stdout.readline().strip() == "ready", racer.stderr
        keys = []
        for n in range(ROUNDS):
            keys.append(_queue(db_path))
            (barrier / f"go-{n}").touch()
            deadline = time.monotonic() + LIMIT_S
            while len(list(barrier.glob(f"done-{n}-*"))) < len(racers):
                assert time.monotonic() < deadline, f"round {n} did not end"
                for r in racers:  # one that ended its last round exits 0
                    assert r.poll() in (None, 0), f"a racer failed: {r.communicate()}"
                time.sleep(0.01)
            delivered = sum(int(p.read_text()) for p in barrier.glob(f"done-{n}-*"))
            assert delivered == 1, f"round {n}: {delivered} deliveries"
        for racer in racers:
            _, err = racer.communicate(timeout=LIMIT_S)
            assert racer.returncode == 0, err
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
    sends = [k for w, k, _ in _ledger(ledger) if w == "START"]
    assert sorted(sends) == sorted(keys), "an intent was sent more than once, or never"
    assert all(_intent(db_path, k)[:2] == ("delivered", 1) for k in keys)


@pytest.mark.slow
def test_on_postgres_a_slow_send_renews_its_claim_and_is_not_taken_over(
    pg_url: str, tmp_path: Path
) -> None:
    """Two machines (owners on hosts ``m1`` and ``m2``: never presumed alive
    or dead); the send takes 8 s against a 3 s claim; the second machine
    dispatches again and again until the first one's send is done."""
    ledger = tmp_path / "ledger"
    key = _queue(pg_url)
    first = subprocess.Popen(
        _cmd(pg_url, ledger, "dispatch", "--delay", "8", "--ttl", "3", "--host", "m1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    try:
        _wait_for(ledger, "START", key)
        out = _dispatch(pg_url, ledger, "--ttl", "3", "--host", "m2", "--until-done", key)
        first_out, err = first.communicate(timeout=LIMIT_S)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    assert (first_out.strip(), out) == ("delivered 1", "delivered 0")
    assert _ledger(ledger) == [("START", key, first.pid), ("DONE", key, first.pid)]
    assert _intent(pg_url, key)[:2] == ("delivered", 1)


def test_on_postgres_a_killed_machines_expired_claim_is_taken_over_as_interrupted(
    pg_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    key = _queue(pg_url)
    first = subprocess.Popen(
        _cmd(pg_url, ledger, "dispatch", "--post", "60", "--ttl", "2", "--host", "m1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    try:
        _wait_for(ledger, "DONE", key)
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=LIMIT_S)
    deadline = time.monotonic() + LIMIT_S
    while _intent(pg_url, key)[0] != "delivered":
        assert time.monotonic() < deadline, _intent(pg_url, key)
        _dispatch(pg_url, ledger, "--ttl", "2", "--host", "m2")
        time.sleep(0.2)
    assert [w for w, _, _ in _ledger(ledger)] == ["START", "DONE", "LOOKUP"]
    assert _intent(pg_url, key)[:2] == ("delivered", 1)


# -- what show, runs and the app say of it (issues: "queued (not made yet)"
# of a send that may have been made; a hint that did nothing as printed) -----


def _killed_mid_send(db: Path, ledger: Path) -> str:
    """A send of the program's own destination ``slow`` begun, then its
    process killed (``kill -9``) before it recorded its end; the intent key."""
    key = _queue(db)
    first = subprocess.Popen(
        _cmd(db, ledger, "dispatch", "--delay", "60"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    try:
        _wait_for(ledger, "START", key)
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=LIMIT_S)
    assert _intent(db, key)[0] == "sending"
    return key


def _run_hint(db: Path, ledger: Path, hint: str) -> None:
    """Run the program-side hint as printed: its backquoted code, in a
    program that opened the store and has the destination it registers."""
    code = hint.split("`")[1]
    program = (
        "import sys\n"
        "from pathlib import Path\n"
        "from desktop_app.flow.outbox import Dispatcher\n"
        "from tests.slow_outbox_worker import Slow, open_any\n"
        "store = open_any(sys.argv[1])\n"
        "print('delivered', "
        + code.replace("<your destination>", "Slow(Path(sys.argv[2]), 0, 0, 'honest')")
        + ")\n"
    )
    done = cli_forkserver.run_argv(
        [sys.executable, "-c", program, str(db), str(ledger)],
        capture_output=True, text=True, timeout=LIMIT_S, env=_env(), cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "delivered 1", done.stdout


def test_show_and_runs_say_a_send_killed_midway_may_have_been_made_and_how_it_is_settled(
    db_path: Path, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    key = _killed_mid_send(db_path, ledger)
    run_id = _run_of(db_path, key)
    shown = flowdesk(db_path, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    head, hint = shown.stdout.splitlines()[:2]
    assert head.endswith(
        "status completed · 1 side effect may have been made (its sending began and its "
        "outcome was not recorded (its process stopped, or the call failed midway); the "
        "outcome is unknown until it is delivered or looked up, and it is sent again only "
        "with the same idempotency key)"
    ), head
    assert "not made yet" not in shown.stdout and "resume --all" not in shown.stdout
    # the destination is the program's own: flowdesk never delivers it
    assert hint == (
        "its 1 side effect for 'slow' goes to a destination your program registered: "
        "flowdesk does not deliver it; your program does, with "
        "`Dispatcher(store, {'slow': <your destination>}).dispatch()` "
        "(desktop_app.flow.outbox), which looks up first one that may have been made"
    ), hint
    listed = flowdesk(db_path, "runs")
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith(run_id)]
    assert row.endswith("· 1 side effect may have been made"), row
    assert "queued" not in row
    as_json = flowdesk(db_path, "runs", "-o", "json")
    (entry,) = [r for r in json.loads(as_json.stdout) if r["run_id"] == run_id]
    assert (entry["undelivered"], entry["sending"]) == (1, 1)

    _run_hint(db_path, ledger, hint)  # as printed: looked up, then made once
    assert [w for w, _, _ in _ledger(ledger)] == ["START", "LOOKUP", "START", "DONE"]
    after = flowdesk(db_path, "show", run_id).stdout
    assert "may have been made" not in after and "your program" not in after, after


def test_show_of_a_programs_own_queued_send_names_the_program_not_resume(
    db_path: Path, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    key = _queue(db_path)
    run_id = _run_of(db_path, key)
    shown = flowdesk(db_path, "show", run_id).stdout.splitlines()
    assert shown[0].endswith("status completed · 1 side effect queued (not made yet)")
    hint = shown[1]
    assert "resume --all" not in hint and "your program does, with `Dispatcher(" in hint, hint
    _run_hint(db_path, ledger, hint)
    assert [w for w, _, _ in _ledger(ledger)] == ["START", "DONE"]
    assert "queued" not in flowdesk(db_path, "show", run_id).stdout


async def test_the_apps_outbox_tab_says_a_send_killed_midway_may_have_been_made(
    tmp_path: Path,
) -> None:
    from desktop_app.app.main import FlowdeskApp
    from desktop_app.app.widgets.run_tables import OutboxTable
    from desktop_app.config import load_settings
    from tests.app_support import settle
    from tests.test_app_detail import SIZE, open_detail

    db = tmp_path / "t.db"
    settings = load_settings(db_path=db)
    from desktop_app import bootstrap

    bootstrap.apply_schema(settings)
    key = _killed_mid_send(db, tmp_path / "ledger")
    app = FlowdeskApp(settings, flows=[sender])
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_detail(pilot, _run_of(db, key))
        await pilot.press("5")  # the Outbox tab
        await settle(pilot)
        outbox = screen.query_one(OutboxTable)
        assert outbox.status_of(key) == "sending: may have been made (outcome unknown)"

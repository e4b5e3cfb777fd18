"""A process whose clock disagrees with the SQLite database's writes nothing
into runs, skewed either way (real ``flowdesk`` processes under
``faketime``, a real SQLite file): a late answer from a clock an hour behind
is refused (and the honest clock then times the question out), an agent a
day ahead fires no timer early and dates nothing in the future. The
trusted reading is the database's file system clock (the time the kernel
stamps on a write), which ``faketime`` does not move. And time written into
a run never goes back before its latest checkpoint."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from desktop_app.flow import Engine
from desktop_app.flow.clock import ManualClock
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver
from tests.cli_support import REPO, flowdesk
from tests.faketime_support import libfaketime, skewed_env, skewed_prefix
from tests.polling import until
from tests.timer_flows import FLOWS_ENV, Order, asker, napper
from tests.tmux_support import BIN


@pytest.fixture(autouse=True)
def _need_faketime() -> None:
    """Skip without libfaketime; under ``CI=true`` fail instead (``.ci/run``
    installs it)."""
    libfaketime()


ENV = {"FLOWDESK_FLOWS": FLOWS_ENV}


def skewed(
    offset: str, db: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``flowdesk --db DB ARGS`` in a process whose clock is ``offset``
    (faketime's ``-f`` syntax: ``-1h``, ``+1d``) off the system's."""
    return cli_forkserver.run_argv(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **ENV, **skewed_env(offset)},
        timeout=timeout,
    )


def start(db: Path, flow: str) -> str:
    out = flowdesk(db, "start", flow, "--input", json.dumps({"order": "z3"}), env=ENV)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()[0]


def run_row(db: Path, run_id: str):  # type: ignore[no-untyped-def]
    store = open_store(db)
    try:
        return store.get_run(run_id), [cp.created_at for cp in store.history(run_id)]
    finally:
        store.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    assert flowdesk(path, "db", "apply", env=ENV).returncode == 0
    return path


def test_a_late_answer_from_a_clock_behind_is_refused_naming_the_skew(db: Path) -> None:
    run_id = start(db, "asker")
    row, _ = run_row(db, run_id)
    store = open_store(db)
    try:
        deadline = store.next_deadline()
    finally:
        store.close()
    assert deadline is not None
    until(lambda: time.time() > deadline + 0.5, "the question's deadline to pass", 60)
    late = skewed("-1h", db, "answer", run_id, "yes")
    assert late.returncode == 1, late.stdout
    assert "clock is 1 h 0 min" in late.stderr and "behind the clock of the file system" in (
        late.stderr
    ), late.stderr
    assert "nothing was written" in late.stderr
    after, _ = run_row(db, run_id)
    assert (after.status, after.revision) == ("waiting", row.revision)  # nothing written
    honest = flowdesk(db, "answer", run_id, "yes", env=ENV)
    assert honest.returncode == 1
    assert "timed out before the answer came" in honest.stderr
    assert run_row(db, run_id)[0].status == "timed_out"


def test_an_answer_in_time_from_a_clock_behind_is_refused_too(db: Path) -> None:
    # behind by less than the question's time left: it would have been taken late
    run_id = start(db, "asker")
    row, _ = run_row(db, run_id)
    late = skewed("-1h", db, "answer", run_id, "yes")
    assert late.returncode == 1 and "behind" in late.stderr, late.stderr
    assert run_row(db, run_id)[0].revision == row.revision


def test_an_agent_a_day_ahead_fires_no_timer_and_dates_nothing_in_the_future(db: Path) -> None:
    run_id = start(db, "napper")
    row, dates = run_row(db, run_id)
    agent = skewed("+1d", db, "agent")
    assert agent.returncode == 1, agent.stderr
    assert "1 d 0 h 0 min" in agent.stderr and "ahead of the clock" in agent.stderr
    after, after_dates = run_row(db, run_id)
    assert (after.status, after.revision) == ("waiting", row.revision)
    assert after_dates == dates and max(dates) < time.time() + 60
    started = skewed("+1d", db, "start", "napper", "--input", json.dumps({"order": "z4"}))
    assert started.returncode == 1 and "ahead of" in started.stderr
    store = open_store(db)
    try:
        assert [r.run_id for r in store.list_runs()] == [run_id]  # no run created
    finally:
        store.close()
    # the honest agent fires the timer; the run's times never go past now
    honest = cli_forkserver.popen(
        [sys.executable, "-m", "desktop_app.cli", "--db", str(db), "agent"],
        cwd=REPO,
        env={**os.environ, **ENV},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        until(lambda: run_row(db, run_id)[0].status == "completed", "the timer to fire", 60)
    finally:
        honest.terminate()
        honest.wait(30)
    final, final_dates = run_row(db, run_id)
    assert final_dates == sorted(final_dates) and final.updated_at <= time.time()


def test_time_written_into_a_run_never_goes_back_before_its_latest_checkpoint(db: Path) -> None:
    # a clock set back (every process's: no reference tells it) after the run waited
    clock = ManualClock(2_000_000_000.0)
    store = open_store(db)
    try:
        engine = Engine(store, flows=[napper, asker], clock=clock)
        result = engine.run("asker", Order(order="z3"))
        assert result.status == "waiting"
        last = max(cp.created_at for cp in store.history(result.run_id))
        clock.set(2_000_000_000.0 - 3600)
        engine.resume_with(result.run_id, "yes")
        dates = [cp.created_at for cp in store.history(result.run_id)]
        assert store.get_run(result.run_id).status == "completed"
        assert dates == sorted(dates) and min(dates[1:]) >= last
        assert store.get_run(result.run_id).updated_at >= last
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("offset", ["-1h", "+1h"])
def test_the_app_under_a_skewed_clock_opens_read_only_and_fires_nothing(
    db: Path, tmp_path: Path, offset: str
) -> None:
    """A tryout: ``faketime -f '-1h' flowdesk --db t.db`` died at launch
    with a ``ClockSkewError`` traceback (exit 1) from the runs screen's
    first paint. The real app, in a real terminal under ``faketime``, opens
    with a banner naming the skew and what to do, shows the run, refuses
    an answer with the same words, fires no deadline (the question whose
    deadline passed still waits once it quit) and quits with 0."""
    from tests.tmux_support import (
        exit_code,
        home_env,
        launch,
        need_tmux,
        screen,
        tmux,
    )

    need_tmux()
    run_id = start(db, "asker")
    (question,) = run_row_waits(db, run_id)
    until(lambda: time.time() > question + 0.05, "the question's deadline passes")
    home = tmp_path / "home"
    home.mkdir()
    session = f"flowdesk-skew-{os.getpid()}-{offset}"
    done = tmp_path / "exit-code"
    env = f"{home_env(home)} FLOWDESK_FLOWS={shlex.quote(FLOWS_ENV)}"
    launch(session, env, done, program=f"{skewed_prefix(offset)} {BIN} --db {db}")
    try:
        way = "behind" if offset.startswith("-") else "ahead of"
        said = (
            f"This computer's clock is 3,600 s {way} the clock of the file system holding {db}",
            "runs are shown read-only; answering, starting, resuming and canceling are refused,",
            "and no timer or deadline is fired. Set the system clock right",
        )
        shown = shown_words(session, *said, "asker", "waiting")
        assert shown.count("canceling are refused") == 1  # the banner alone
        assert "in 59m" not in shown  # ages by the database's clock, not the skewed one
        for tries in range(6):  # a key sent before the table has the focus is lost
            tmux("send-keys", "-t", session, "a")  # answer the selected run
            try:  # a notice (a toast's edge is ▌), in the banner's words
                shown_words(session, "▌ This computer's clock is 3,600 s", timeout=5, raw=True)
                break
            except AssertionError:
                if tries == 5:
                    raise
        time.sleep(3)  # timer passes would have fired meanwhile (not a timing assertion)
        tmux("send-keys", "-t", session, "q")
        assert exit_code(done, timeout=60) == "0", screen(session)
    finally:
        tmux("kill-session", "-t", session)
    run, _ = run_row(db, run_id)
    assert run.status == "waiting"  # no deadline fired, nothing answered
    honest = flowdesk(db, "resume", run_id, env=ENV)  # the system clock times it out
    assert f"run {run_id} timed_out" in honest.stdout, honest.stdout + honest.stderr


def run_row_waits(db: Path, run_id: str) -> list[float]:
    """The deadlines of ``run_id``'s pending waits (UTC epoch seconds)."""
    store = open_store(db)
    try:
        return [w.deadline_at for w in store.latest(run_id).waits if w.deadline_at is not None]
    finally:
        store.close()


def shown_words(
    session: str, *texts: str, times: int = 1, timeout: float = 90, raw: bool = False
) -> str:
    """The screen, its lines joined and spaces squeezed (tmux wraps a long
    line anywhere), once each of ``texts`` shows on it at least ``times``
    times (``AssertionError`` with the screen after ``timeout`` seconds);
    with ``raw``, the screen as it is."""
    from tests.tmux_support import screen

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = screen(session) if raw else " ".join(screen(session).split())
        if all(shown.count(text) >= times for text in texts):
            return shown
        time.sleep(0.2)
    raise AssertionError(f"{texts!r} not shown {times} times; screen:\n{screen(session)}")


@pytest.mark.slow
def test_the_app_notices_a_clock_that_jumps_while_it_is_open(db: Path, tmp_path: Path) -> None:
    """The clock of a computer whose app is open jumps (a laptop wakes, NTP
    corrects it by an hour, a person sets it): the app said nothing until a
    relaunch while the engine refused its writes. The real app, in a real
    terminal, its clock moved while it runs (libfaketime reading its offset
    from a file on every call; the monotonic clock left alone, as a jump of
    the wall clock leaves it): it shows the banner and turns read-only
    (an answer is refused in the banner's words), then, once the clock is
    right again, clears the banner and takes the answer."""
    from tests.tmux_support import exit_code, home_env, launch, need_tmux, tmux

    need_tmux()
    lib = libfaketime(threads=True)
    run_id = start(db, "approver")
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    home = tmp_path / "home"
    home.mkdir()
    session = f"flowdesk-jump-{os.getpid()}"
    done = tmp_path / "exit-code"
    env = (
        f"{home_env(home)} FLOWDESK_FLOWS={shlex.quote(FLOWS_ENV)} LD_PRELOAD={lib} "
        f"FAKETIME_TIMESTAMP_FILE={offset} FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1"
    )
    from tests.tmux_support import BIN

    launch(session, env, done, program=f"{BIN} --db {db}")
    banner = "runs are shown read-only; answering, starting, resuming and canceling are refused"
    try:
        shown = shown_words(session, "approver", "waiting")
        assert banner not in shown
        offset.write_text("-1h\n")  # the clock jumps an hour back while the app is open
        said = f"This computer's clock is 3,600 s behind the clock of the file system holding {db}"
        shown_words(session, said, banner, "the app notices within 10 s and goes on")
        shown_words(session, "▌ The clock moved while", raw=True)  # a notice
        for tries in range(6):  # a key sent before the table has the focus is lost
            tmux("send-keys", "-t", session, "a")  # answer the selected run: refused
            try:  # in the banner's words (a toast's edge is ▌)
                shown_words(session, "▌ This computer's clock is 3,600 s", timeout=5, raw=True)
                break
            except AssertionError:
                if tries == 5:
                    raise
        assert run_row(db, run_id)[0].status == "waiting"

        offset.write_text("+0\n")  # set right again
        shown = shown_words(session, "This computer's clock is right again")
        shown_without(session, banner)
        tmux("send-keys", "-t", session, "a")
        shown_words(session, "OK?")
        tmux("send-keys", "-t", session, "-l", "yes")
        tmux("send-keys", "-t", session, "Enter")
        until(lambda: run_row(db, run_id)[0].status == "completed", "the answer is taken")
        # the dialog closed first: a q sent while it shows is typed into its field
        # (a CI run under load saw the app "not quit")
        shown_without(session, "OK?")
        tmux("send-keys", "-t", session, "q")
        assert exit_code(done, timeout=60) == "0"
    finally:
        tmux("kill-session", "-t", session)


def shown_without(session: str, text: str, timeout: float = 90) -> str:
    """The screen (lines joined, spaces squeezed) once ``text`` is no longer
    on it (``AssertionError`` with the screen after ``timeout`` seconds)."""
    from tests.tmux_support import screen

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = " ".join(screen(session).split())
        if text not in shown:
            return shown
        time.sleep(0.2)
    raise AssertionError(f"{text!r} still shown; screen:\n{screen(session)}")

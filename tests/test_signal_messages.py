"""What ``signal``, ``publish`` and ``answer`` say, from a new user's tryout.

It found: a ``--dedupe-key`` reused for another signal said ``signal 1
stored`` and named a waiting run, when nothing was stored (the run waited
for ever); ``publish`` after an event wait's deadline said the event went
to the run, which then timed out; ``answer`` to a run waiting for a signal
said only ``not waiting for input (status 'waiting')``; an empty name and
``NaN`` or ``1e999`` payloads were accepted; and a payload or key too long
for a command line had no file option, and was offered in a hint that
cannot be pasted. Each is run through the real CLI over real SQLite files
(and PostgreSQL where the store decides), every hint as printed.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.cli_support import as_printed, flowdesk, user_db
from tests.polling import until
from tests.signal_msg_flows import FLOWS_ENV

REPO = Path(__file__).resolve().parents[1]


def user_env() -> dict[str, str]:
    paths = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "FLOWDESK_FLOWS": FLOWS_ENV, "PYTHONPATH": os.pathsep.join(paths)}


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return user_db(request, tmp_path, user_env())


@pytest.fixture
def sqlite_db(tmp_path: Path) -> str:
    path = tmp_path / "f.db"
    assert flowdesk(path, "db", "apply", env=user_env()).returncode == 0
    return str(path)


def hint(stream: str, label: str) -> str:
    """The command after ``<label>: `` on its line of ``stream``."""
    (line,) = [ln.strip() for ln in stream.splitlines() if f"{label}: " in ln]
    return line.split(f"{label}: ", 1)[1]


def waiting_for_payment(db: str, order: str) -> str:
    """An ``approval`` run answered yes: it waits for signal ``paid`` ``order``."""
    env = user_env()
    started = flowdesk(db, "start", "approval", "--input", json.dumps({"order": order}), env=env)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.splitlines()[0]
    answered = flowdesk(db, "answer", run_id, "yes", env=env)
    assert answered.returncode == 0, answered.stderr
    return run_id


def status(db: str, run_id: str) -> str:
    shown = flowdesk(db, "show", run_id, "-o", "json", env=user_env())
    assert shown.returncode == 0, shown.stderr
    return str(json.loads(shown.stdout)["status"])


# -- 1. a dedupe key names one request ----------------------------------------


def test_a_dedupe_key_reused_for_another_key_is_refused_and_stores_nothing(db: str) -> None:
    env = user_env()
    q1 = waiting_for_payment(db, "q1")
    first = flowdesk(db, "signal", "paid", "nobody", "--payload", '{"a":1}', "--dedupe-key", "K")
    assert first.returncode == 0, first.stderr

    reused = flowdesk(
        db, "signal", "paid", "q1", "--payload", '{"a":2}', "--dedupe-key", "K", env=env
    )
    assert reused.returncode == 2, reused.stdout + reused.stderr
    assert reused.stdout == ""  # no "stored", no run named
    assert reused.stderr.startswith(
        "flowdesk: dedupe key 'K' was already used for signal 'paid' with key 'nobody' (signal "
    ), reused.stderr
    assert "not for signal 'paid' with key 'q1': nothing was sent" in reused.stderr

    woken = flowdesk(db, "resume", q1, env=env)  # a signal stored for q1 would complete it
    assert status(db, q1) == "waiting", woken.stdout + woken.stderr
    again = flowdesk(db, "signal", "paid", "nobody", "--payload", '{"a":9}', "--dedupe-key", "K")
    assert again.returncode == 2
    assert "with another payload: nothing was sent" in again.stderr


def test_a_dedupe_key_reused_while_a_run_waits_on_the_first_key_names_no_run(db: str) -> None:
    env = user_env()
    nobody = waiting_for_payment(db, "nobody")
    q1 = waiting_for_payment(db, "q1")
    flowdesk(db, "signal", "paid", "nobody", "--payload", '{"a":1}', "--dedupe-key", "K", env=env)
    reused = flowdesk(
        db, "signal", "paid", "q1", "--payload", '{"a":2}', "--dedupe-key", "K", env=env
    )
    assert reused.returncode == 2
    assert reused.stdout == ""
    assert nobody not in reused.stderr
    assert "still waits" not in reused.stderr
    flowdesk(db, "resume", q1, env=env)
    assert status(db, q1) == "waiting"


def test_the_same_request_again_is_a_duplicate_that_says_what_became_of_it(
    sqlite_db: str,
) -> None:
    env = user_env()
    q1 = waiting_for_payment(sqlite_db, "q1")
    args = ("signal", "paid", "q1", "--payload", '{"amount":2}', "--dedupe-key", "K2")
    sent = flowdesk(sqlite_db, *args, env=env)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.splitlines()[:2] == [
        "signal 1 stored",
        f"delivered to run {q1} (now completed)",
    ]

    dup = flowdesk(sqlite_db, *args, env=env)
    assert dup.returncode == 0, dup.stderr
    assert dup.stdout.splitlines() == [
        "duplicate: dedupe key 'K2' was used already for signal 'paid' with key 'q1' and this "
        "same payload (signal 1); nothing new was stored",
        f"it was delivered to run {q1} (now completed)",
    ]
    kept = flowdesk(sqlite_db, "signal", "paid", "o-9", "--dedupe-key", "K3", env=env)
    assert kept.returncode == 0
    dup = flowdesk(sqlite_db, "signal", "paid", "o-9", "--dedupe-key", "K3", env=env)
    assert dup.stdout.splitlines()[1] == (
        "no run waits for signal 'paid' with key 'o-9' now; it is kept for the first run that "
        "waits for it"
    )
    o9 = waiting_for_payment(sqlite_db, "o-9")  # the one kept: taken when its wait begins
    assert status(sqlite_db, o9) == "completed"


# -- 2. publish after an event wait's deadline ---------------------------------


def test_publish_after_the_deadline_says_the_run_timed_out_not_that_it_got_it(
    sqlite_db: str,
) -> None:
    env = user_env()
    started = flowdesk(sqlite_db, "start", "late_event", env=env)
    run_id = started.stdout.splitlines()[0]
    (wait,) = json.loads(flowdesk(sqlite_db, "show", run_id, "-o", "json", env=env).stdout)["waits"]
    deadline = datetime.fromisoformat(wait["deadline_at"].replace("Z", "+00:00")).timestamp()
    until(lambda: time.time() > deadline + 0.05, "the event wait's deadline passes")

    late = flowdesk(sqlite_db, "publish", "go", "--payload", '{"late":1}', env=env)
    assert late.returncode == 0, late.stderr
    assert late.stdout.splitlines()[0].startswith("event ")
    assert "waiting run" not in late.stdout, late.stdout
    assert run_id not in late.stdout
    assert f"run {run_id} is timed_out now: wait {run_id}:ev:0 timed out" in late.stderr
    shown = as_printed(late.stderr.strip().rsplit("(", 1)[1].rstrip(")"), env)
    assert shown.stdout.splitlines()[0].endswith("status timed_out"), shown.stdout


# -- 3. answer to a run that waits for a signal --------------------------------


def test_answer_to_a_run_waiting_for_a_signal_names_the_signal_command(sqlite_db: str) -> None:
    env = user_env()
    run_id = waiting_for_payment(sqlite_db, "q1")
    wrong = flowdesk(sqlite_db, "answer", run_id, "--value-json", '"no"', env=env)
    assert wrong.returncode == 1, wrong.stderr
    assert "not waiting for input" not in wrong.stderr
    assert f"run {run_id} asks no question, so nothing was answered; it waits for:" in (
        wrong.stderr
    )
    assert "signal 'paid' with key 'q1'" in wrong.stderr
    send = hint(wrong.stderr, "send it with")
    shown = flowdesk(sqlite_db, "show", run_id, env=env)
    assert send == hint(shown.stdout, "send it with")  # as `show` prints it
    sent = as_printed(send + " --payload '{\"amount\": 3}'", env)
    assert sent.returncode == 0, sent.stderr
    assert f"delivered to run {run_id} (now completed)" in sent.stdout


# -- 4. empty names and numbers JSON does not have ------------------------------


@pytest.mark.parametrize(
    "args",
    [("signal", "", "k"), ("publish", "")],
    ids=["signal", "publish"],
)
def test_an_empty_signal_or_event_name_is_refused(sqlite_db: str, args: tuple[str, ...]) -> None:
    env = user_env()
    refused = flowdesk(sqlite_db, *args, env=env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "is empty, and no wait waits on an empty one: nothing was sent" in refused.stderr
    listed = as_printed(refused.stderr.rsplit("what runs wait for: ", 1)[1].rstrip(")\n"), env)
    assert listed.returncode == 0, listed.stderr
    events = flowdesk(sqlite_db, "signal", "x", "k", env=env)
    assert events.stdout.splitlines()[0] == "signal 1 stored"  # the refused one took no id


@pytest.mark.parametrize(
    ("option", "text", "literal"),
    [
        ("--payload", "NaN", "NaN"),
        ("--payload", '{"a": [1e999]}', "1e999 (beyond a float's range)"),
        ("--payload", "-Infinity", "-Infinity"),
        ("--input", '{"order": "o", "n": Infinity}', "Infinity"),
        ("--value-json", "NaN", "NaN"),
    ],
)
def test_numbers_json_does_not_have_are_refused_wherever_json_is_read(
    sqlite_db: str, option: str, text: str, literal: str
) -> None:
    env = user_env()
    if option == "--input":
        args: tuple[str, ...] = ("start", "approval", "--input", text)
    elif option == "--value-json":
        run_id = flowdesk(sqlite_db, "start", "approval", "--input", '{"order": "o"}', env=env)
        args = ("answer", run_id.stdout.splitlines()[0], text, "--value-json")
    else:
        args = ("signal", "paid", "o", f"--payload={text}")  # -Infinity is no option
    refused = flowdesk(sqlite_db, *args, env=env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"holds {literal}, which is not a JSON number (JSON numbers are finite)" in (
        refused.stderr
    )
    published = flowdesk(sqlite_db, "publish", "go", "--payload", "NaN", env=env)
    assert published.returncode == 2
    assert flowdesk(sqlite_db, "signal", "x", "k", env=env).stdout.startswith("signal 1 stored")


# -- 5. payloads and keys too long for a command line ---------------------------


def test_a_30_mb_payload_goes_by_file_and_by_stdin(sqlite_db: str, tmp_path: Path) -> None:
    env = user_env()
    big = {"blob": "x" * 30_000_000}
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(big), encoding="utf-8")
    o1 = waiting_for_payment(sqlite_db, "o-1")
    o2 = waiting_for_payment(sqlite_db, "o-2")
    sent = flowdesk(sqlite_db, "signal", "paid", "o-1", "--payload-file", str(path), env=env)
    assert sent.returncode == 0, sent.stderr[-2000:]
    assert f"delivered to run {o1} (now completed)" in sent.stdout
    piped = as_printed(
        f"flowdesk --db {sqlite_db} signal paid o-2 --payload-file -", env, input=json.dumps(big)
    )
    assert piped.returncode == 0, piped.stderr[-2000:]
    assert f"delivered to run {o2} (now completed)" in piped.stdout
    got = json.loads(flowdesk(sqlite_db, "show", o2, "-o", "json", env=env).stdout)
    assert got["status"] == "completed"
    empty = as_printed(f"flowdesk --db {sqlite_db} publish go --payload-file -", env, input="")
    assert empty.returncode == 2
    assert "--payload-file is not JSON" in empty.stderr
    both = flowdesk(sqlite_db, "publish", "go", "--payload", "1", "--payload-file", str(path))
    assert both.returncode == 2
    assert "give --payload or --payload-file, not both" in both.stderr


def test_a_payload_from_stdin_too_long_to_paste_gets_a_hint_naming_the_file_option(
    sqlite_db: str, tmp_path: Path
) -> None:
    env = user_env()
    a = waiting_for_payment(sqlite_db, "o-1")
    b = waiting_for_payment(sqlite_db, "o-1")
    text = json.dumps({"note": "p" * 10_000})
    sent = as_printed(
        f"flowdesk --db {sqlite_db} signal paid o-1 --payload-file -", env, input=text
    )
    assert sent.returncode == 0, sent.stderr
    assert f"delivered to run {a} (now completed)" in sent.stdout
    line = next(x for x in sent.stdout.splitlines() if "still waits" in x)
    assert line.endswith(
        f"send one for each: flowdesk --db {sqlite_db} signal paid o-1 --payload-file "
        "PAYLOAD_FILE, PAYLOAD_FILE holding the payload (10,012 bytes, too long to paste)"
    ), line
    path = tmp_path / "p.json"
    path.write_text(text, encoding="utf-8")
    command = line.split("send one for each: ", 1)[1].split(", PAYLOAD_FILE holding")[0]
    again = as_printed(command.replace("PAYLOAD_FILE", str(path)), env)
    assert f"delivered to run {b} (now completed)" in again.stdout, again.stdout + again.stderr


def test_a_key_too_long_to_paste_is_shown_with_the_key_file_option(
    sqlite_db: str, tmp_path: Path
) -> None:
    env = user_env()
    key = "k" * 5_000_000
    path = tmp_path / "in.json"
    path.write_text(json.dumps({"order": key}), encoding="utf-8")
    started = flowdesk(sqlite_db, "start", "keyed", "--input-file", str(path), env=env)
    assert started.returncode == 0, started.stderr[-2000:]
    run_id = started.stdout.splitlines()[0]
    shown = flowdesk(sqlite_db, "show", run_id, env=env)
    send = hint(shown.stdout, "send it with")
    assert send == (
        f"flowdesk --db {sqlite_db} signal paid --key-file KEY_FILE, KEY_FILE holding the key "
        f"(5,000,000 bytes, too long to paste): `flowdesk --db {sqlite_db} show {run_id} -o "
        "json` gives it (waits, key)"
    )
    listed = as_printed(send.split("`")[1], env)
    (wait,) = json.loads(listed.stdout)["waits"]
    key_file = tmp_path / "key.txt"
    key_file.write_text(wait["key"] + "\n", encoding="utf-8")  # one final newline is dropped
    sent = as_printed(send.split(",")[0].replace("KEY_FILE", str(key_file)), env)
    assert sent.returncode == 0, sent.stderr[-2000:]
    assert f"delivered to run {run_id} (now completed)" in sent.stdout


def test_a_key_of_megabytes_is_quoted_cut_with_its_length_in_every_message(
    sqlite_db: str, tmp_path: Path
) -> None:
    """A tryout: ``signal`` with a 5 MB key from ``--key-file`` printed the
    key whole in "no run waits for ..." (5 MB on the terminal), and a
    dedupe key reused for it would have again. The messages quote its first
    120 characters and say its length; the signal itself keeps the whole key."""
    env = user_env()
    key = "k" * 5_000_000
    key_file = tmp_path / "key.txt"
    key_file.write_text(key, encoding="utf-8")
    said = f"{'k' * 120!r}… (5,000,000 characters)"
    sent = flowdesk(sqlite_db, "signal", "paid", "--key-file", str(key_file), env=env)
    assert sent.returncode == 0, sent.stderr[-2000:]
    assert len(sent.stdout) + len(sent.stderr) < 2_000
    assert f"no run waits for signal 'paid' with key {said} now" in sent.stderr
    again = flowdesk(
        sqlite_db, "signal", "paid", "--key-file", str(key_file), "--payload", "1",
        "--dedupe-key", "once", env=env,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    other = tmp_path / "other.txt"
    other.write_text(key + "x", encoding="utf-8")
    refused = flowdesk(
        sqlite_db, "signal", "paid", "--key-file", str(other), "--payload", "1",
        "--dedupe-key", "once", env=env,
    )  # fmt: skip
    assert refused.returncode == 2
    assert len(refused.stdout) + len(refused.stderr) < 2_000, refused.stderr[:300]
    assert f"with key {said}" in refused.stderr
    assert "(5,000,001 characters)" in refused.stderr
    from desktop_app.store.sqlite.store import open_store

    store = open_store(Path(sqlite_db))
    try:
        kept = store.next_signal("paid", key)
        assert kept is not None and kept.key == key
    finally:
        store.close()


# -- the refusal is decided by the store, under a race of real processes --------


def _send_after(url: str, name: str, key: str, barrier: Any, out: Any) -> None:
    """In a process of its own: open the store at ``url``, wait at
    ``barrier``, send signal ``name`` ``key`` under dedupe key ``name``;
    put what came of it on ``out``."""
    from desktop_app.errors import DedupeKeyReusedError

    store = _open(url)
    try:
        barrier.wait()
        try:
            out.put((key, store.send_signal(name, key, {"k": key}, 1.0, name)))
        except DedupeKeyReusedError:
            out.put((key, "refused"))
    finally:
        store.close()


def _open(url: str) -> Any:
    if url.startswith("postgresql"):
        from desktop_app.store.postgres.store import open_postgres_store

        return open_postgres_store(url)
    from desktop_app.store.sqlite.store import open_store

    return open_store(Path(url))


def test_two_processes_racing_one_dedupe_key_for_two_keys_store_one(db: str) -> None:
    """Two processes released together send one signal name for keys ``a``
    and ``b`` under one dedupe key, 20 rounds: one is stored, the other is
    refused, and nothing is stored for the refused key."""
    # real processes of their own, forked from multiprocessing's fork server
    # with the stores imported once (a spawned interpreter per side and round
    # cost ~0.5 s of CPU each, 37 s of the suite's CPU for the two stores)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(
        ["desktop_app.store.sqlite.store", "desktop_app.store.postgres.store", __name__]
    )
    reader = _open(db)
    try:
        for round_ in range(20):
            name = f"race-{round_}"
            barrier, out = ctx.Barrier(2), ctx.Queue()
            procs = [
                ctx.Process(target=_send_after, args=(db, name, key, barrier, out))
                for key in ("a", "b")
            ]
            for p in procs:
                p.start()
            got = dict(out.get(timeout=120) for _ in procs)
            for p in procs:
                p.join(timeout=120)
                assert p.exitcode == 0
            stored = [k for k, v in got.items() if v != "refused"]
            assert len(got) == 2 and len(stored) == 1, got
            (winner,) = stored
            (loser,) = {"a", "b"} - {winner}
            first = reader.signal_by_dedupe_key(name)
            assert first is not None and (first.key, first.signal_id) == (winner, got[winner])
            kept = reader.next_signal(name, winner)
            assert kept is not None and kept.signal_id == got[winner]
            assert reader.next_signal(name, loser) is None
    finally:
        reader.close()

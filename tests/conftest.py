"""Shared fixtures. Tests never touch the user's real config, data or keyring."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers per CPU this process may run on (``taskset``
    counts): most tests spend their time waiting on the subprocesses and
    servers they start, so a second worker per CPU uses that time. None at
    all on one CPU, where a worker would only add its start-up and messaging
    to the same serial run."""
    usable = len(os.sched_getaffinity(0))
    return 2 * usable if usable > 1 else 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``real_model`` need a GGUF model and llama-cpp-python's
    server (``make test-model MODEL=...``): deselected unless
    ``FLOWDESK_TEST_MODEL`` names the model, so ``make test`` neither runs
    nor skips them.

    Tests marked ``slow`` run first (otherwise in the order collected):
    pytest-xdist's ``load`` scheduling, one test at a time
    (``--maxschedchunk 1`` in pyproject.toml), hands them out in this order
    to whichever worker is free, so the long ones are spread over the
    workers at the start and the run ends on short ones instead of one
    worker finishing a minute-long test alone. (Its default first hand-out
    is a contiguous quarter of the suite per worker, which gave every slow
    test to the first worker.)"""
    if not os.environ.get("FLOWDESK_TEST_MODEL"):
        kept = [item for item in items if item.get_closest_marker("real_model") is None]
        if len(kept) != len(items):
            config.hook.pytest_deselected(items=[i for i in items if i not in kept])
            items[:] = kept
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Make the worker's garbage collections cheap: everything imported and
    collected so far lives for the whole session, so it is frozen out of
    every later collection (``gc.freeze``), and a young collection runs
    every 10,000 allocations instead of 700.

    Measured on the app tests (52 files, 4 workers, 2 CPUs): with Python's
    defaults each worker ran ~40 full collections of 400-550 thousand
    objects (Textual's widget trees, freed by the collector, not by their
    reference counts), ~35% of its time; with these, 4 full collections and
    the tests' CPU 234 -> 193 s, their wall 140 -> 120 s. The commands the
    tests start (fresh interpreters, the fork server's children) and the
    product itself keep Python's defaults."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


# pg_support reads FLOWDESK_TEST_PG_DSN at import: import it before any test's
# isolation (below) removes FLOWDESK_* variables, or a server fixture first
# reached from inside a test would find none and start a private cluster.
from tests import pg_support  # noqa: E402

# worker.py's ``time`` replaced for a test (the fence cooldown, ServerClock)
from tests.worker_time import fake_time  # noqa: E402, F401

# A failing keyring unless a test opts into an in-memory one.
os.environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))  # the log folder
    # the settings file is the default one under XDG_CONFIG_HOME, its folder
    # made, the file not: no settings (a FLOWDESK_CONFIG naming no file is refused)
    (home / ".config").mkdir(mode=0o700)  # as private as Flowdesk makes its own folders
    (home / ".config" / "flowdesk").mkdir(mode=0o700)
    for var in list(os.environ):
        if var.startswith("FLOWDESK_"):
            monkeypatch.delenv(var, raising=False)


@pytest.fixture(autouse=True)
def _flowdesk_log_level() -> Iterator[None]:
    """Each test starts with the ``desktop_app`` logger at the level it had
    before the first test: a test that opens Flowdesk in-process
    (``observability.setup_logging``) sets it (to INFO) for the whole
    worker, and a ``caplog`` test after it in the same worker would then see
    records a test before it would not."""
    import logging

    logger = logging.getLogger("desktop_app")
    level = logger.level
    yield
    logger.setLevel(level)


@pytest.fixture(autouse=True)
def _snapshots_without_animation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """A snapshot shows the screen at rest, not a frame of an animation.

    Textual animates a tab's underline and scrolling; under load a snapshot
    could catch a frame mid-way. An App reads ``textual.constants.TEXTUAL_ANIMATIONS``
    when it is made, so only the apps of tests that take ``snap_compare`` see "none".
    """
    if "snap_compare" in request.fixturenames:
        import textual.constants

        monkeypatch.setattr(textual.constants, "TEXTUAL_ANIMATIONS", "none")


@pytest.fixture(scope="session")
def _schema_applied(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[bytes, int]]:
    """The files (name -> bytes, mode) left by opening a new database and
    applying the schema, as :func:`db_path` did per test (0.05-0.1 s of
    migrations each, in ~450 tests): done once per test process."""
    from desktop_app.store import migrations
    from desktop_app.store.connection import open_connection

    folder = tmp_path_factory.mktemp("schema-applied")
    conn = open_connection(folder / "flowdesk.db")
    migrations.apply(conn)
    conn.close()
    return {f.name: (f.read_bytes(), f.stat().st_mode & 0o777) for f in folder.iterdir()}


@pytest.fixture
def db_path(tmp_path: Path, _schema_applied: dict[str, tuple[bytes, int]]) -> Path:
    """A database file with the schema applied (created, mode 0600): a copy
    of the files a schema apply left once per session (the database and its
    lock file, with their modes); migrations themselves are tested in
    tests/test_schema.py."""
    from desktop_app.store.connection import open_connection

    for name, (data, mode) in _schema_applied.items():
        fd = os.open(tmp_path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    # opened for an (empty) write transaction and closed, as the schema
    # apply did: what that leaves in this process (the file's write-gate
    # thread) is there before the test, as before
    conn = open_connection(tmp_path / "flowdesk.db")
    with conn:
        pass
    conn.close()
    return tmp_path / "flowdesk.db"


@pytest.fixture
def sqlite_store(db_path: Path):
    from desktop_app.store.sqlite.store import open_store

    store = open_store(db_path)
    yield store
    store.close()


# -- PostgreSQL (see tests/pg_support.py) -------------------------------------


@pytest.fixture(scope="session")
def pg_server():
    """The session's PostgreSQL server (private cluster or FLOWDESK_TEST_PG_DSN)."""

    yield from pg_support.session_server()


def _throwaway_database(pg_server, *, schema: bool) -> Iterator[str]:
    """A fresh database (with the Flowdesk schema when ``schema``), dropped
    afterwards. Skips without a server, fails under CI=true."""

    if pg_server.error:
        pg_support.unavailable(pg_server.error)
    url = pg_server.new_database() if schema else pg_server.empty_database()
    yield url
    pg_server.drop_database(url)


@pytest.fixture
def pg_url(pg_server) -> Iterator[str]:
    """A fresh database with the Flowdesk schema applied, dropped after the test."""
    yield from _throwaway_database(pg_server, schema=True)


@pytest.fixture
def pg_empty_url(pg_server) -> Iterator[str]:
    """A fresh database without the Flowdesk schema, dropped after the test."""
    yield from _throwaway_database(pg_server, schema=False)


@pytest.fixture
def pg_store(pg_url: str):
    from desktop_app.store.postgres.store import open_postgres_store

    store = open_postgres_store(pg_url)
    yield store
    store.close()


@pytest.fixture(scope="session")
def pg_bouncer(pg_server):
    """A PgBouncer in transaction mode (pool size 2) in front of the session's
    server; ``pg_bouncer.url(pg_url)`` reaches a database through it. Skips
    without pgbouncer (``apt-get install pgbouncer``), fails under CI=true."""
    from tests import pg_support

    yield from pg_support.session_bouncer(pg_server)


@pytest.fixture
def bouncer(pg_bouncer):
    """:func:`pg_bouncer`, or the skip (a failure under CI=true) when there is none."""
    from tests import pg_support

    if isinstance(pg_bouncer, str):
        pg_support.unavailable(pg_bouncer, what="PgBouncer")
    return pg_bouncer

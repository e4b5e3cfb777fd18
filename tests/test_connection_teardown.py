"""A connection's teardown runs no Python code.

apsw 3.54.1.0's ``Connection`` deallocator calls the callbacks of the weak
references to the dying connection while the cycle collector still tracks
it; a collection started there (by the callback itself, or by another thread
that takes the GIL meanwhile) finds it with no reference left and
deallocates it again. In CI this killed pytest workers with "Fatal Python
error: Segmentation fault" in unrelated code (the app's rendering). Flowdesk
therefore never points a weak reference with a callback at a connection
(``desktop_app.store.connection``'s module docstring).
"""

from __future__ import annotations

import gc
import os
import resource
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import apsw

from desktop_app import bootstrap
from desktop_app.config import load_settings
from desktop_app.store.connection import busy_timeout_s, connections_open, open_connection
from desktop_app.store.sqlite.store import open_store
from tests import cli_forkserver


def _callbacks(conn: object) -> list[object]:
    return [r.__callback__ for r in weakref.getweakrefs(conn) if r.__callback__ is not None]


def test_no_weak_reference_to_a_connection_has_a_callback(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    conn = open_connection(db)
    other = open_connection(db)
    try:
        assert connections_open(db) == 2  # the registry still sees both
        assert busy_timeout_s(conn) == 10.0
        assert _callbacks(conn) == []
        assert _callbacks(other) == []
    finally:
        conn.close()
        other.close()
    assert connections_open(db) == 0


def test_the_apps_connections_have_no_weak_reference_callback(tmp_path: Path) -> None:
    """Every connection alive once the app's services are open (its store,
    agent log, the UI's reader), whoever opened it."""
    settings = load_settings(db_path=tmp_path / "t.db")
    bootstrap.apply_schema(settings)
    services = bootstrap.open_services(settings, flows=[])
    reader = open_store(tmp_path / "t.db")
    try:
        conns = [o for o in gc.get_objects() if isinstance(o, apsw.Connection)]
        assert reader.conn in conns
        assert services.checkpoints.conn in conns  # type: ignore[attr-defined]
        assert [c for c in conns if _callbacks(c)] == []
    finally:
        reader.close()
        services.close()


def test_a_freed_connection_leaves_the_registry(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    conn = open_connection(db)
    conn.close()
    ref = weakref.ref(conn)
    del conn
    gc.collect()
    assert ref() is None
    assert connections_open(db) == 0
    again = open_connection(db)  # the header is checked again: no connection left
    try:
        assert connections_open(db) == 1
    finally:
        again.close()


# What the registry did before: a WeakSet and a WeakKeyDictionary (weak
# references whose callbacks are Python code), plus one callback that
# allocates, so that a collection starts inside the deallocator every time
# (in the app it was chance: another thread taking the GIL during a callback
# and allocating). With plain weak references nothing runs there.
_DEALLOC_WITH_CALLBACKS = textwrap.dedent(
    """
    import gc, sys, weakref
    import apsw

    live = weakref.WeakSet()
    busy = weakref.WeakKeyDictionary()
    refs = []
    for _ in range(50):
        conn = apsw.Connection(":memory:")
        if sys.argv[1] == "callbacks":
            live.add(conn)
            busy[conn] = object()
            refs.append(weakref.ref(conn, lambda r: [{} for _ in range(3)]))
        else:
            refs.append(weakref.ref(conn))
        conn.close()
        gc.set_threshold(1)  # the next allocation of a tracked object collects
        del conn
        gc.set_threshold(700)
    print("survived")
    """
)


def _no_core() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _teardown(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "teardown.py"
    script.write_text(_DEALLOC_WITH_CALLBACKS)
    return cli_forkserver.run_argv(
        [sys.executable, str(script), mode],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_no_core,
    )


# Flowdesk's own connections, with the collection started by the one
# allocation the deallocator itself makes when weak references with callbacks
# exist (PyObject_ClearWeakRefs's tuple of callbacks, the tuple free list
# emptied first). Before the registry dropped its callbacks this died with
# SIGSEGV every time (Py_DECREF(NULL) in PyObject_ClearWeakRefs under apsw's
# Connection_dealloc: the collection had deallocated the connection inside).
_FLOWDESK_TEARDOWN = textwrap.dedent(
    """
    import gc, sys
    from desktop_app.store.connection import open_connection

    for i in range(50):
        conn = open_connection(sys.argv[1])
        other = open_connection(sys.argv[1])  # a second one, write gate and all
        other.close()
        conn.close()
        hold = [(i, 1, 2, j) for j in range(3000)]  # empties the 4-tuple free list
        gc.set_threshold(1)
        del conn, other
        gc.set_threshold(700)
        del hold
    print("survived")
    """
)


def test_dropping_flowdesk_connections_survives_a_collection_in_their_teardown(
    tmp_path: Path,
) -> None:
    script = tmp_path / "flowdesk_teardown.py"
    script.write_text(_FLOWDESK_TEARDOWN)
    done = cli_forkserver.run_argv(
        [sys.executable, str(script), str(tmp_path / "f.db")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_no_core,
    )
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout.strip() == "survived"


def test_plain_weak_references_survive_what_callback_ones_crash_in_apsw(tmp_path: Path) -> None:
    """The apsw defect itself, in a child process: weak references with a
    callback and a collection inside the connection's deallocator crash
    apsw 3.54.1 (SIGSEGV); the plain ones Flowdesk keeps survive it. A newer
    apsw that untracks the connection before it clears the weak references
    (as CPython's own ``subtype_dealloc`` does) survives both: then the
    docstring of ``desktop_app.store.connection`` can say so (the rule stays
    harmless), and this test still checks the plain case."""
    crashed = _teardown(tmp_path, "callbacks")
    assert crashed.returncode in (-11, 0), (crashed.returncode, crashed.stdout, crashed.stderr)
    plain = _teardown(tmp_path, "plain")  # what Flowdesk does now: no callback
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.strip() == "survived"

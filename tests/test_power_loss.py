"""Simulated power loss with an apsw VFS that drops or reorders unsynced writes (S63)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from desktop_app.errors import FlowdeskError
from desktop_app.flow import Engine
from desktop_app.flow.clock import ManualClock
from desktop_app.flows.digest import REPORT_NAME, DigestState, build_digest_flow
from desktop_app.store import migrations
from desktop_app.store.connection import open_connection
from desktop_app.store.sqlite.store import open_store
from tests.digest_corpus import make_corpus
from tests.flows_for_tests import Crash
from tests.power_loss_vfs import PowerLossVFS

N_FILES = 8


def fresh_db(path: Path) -> Path:
    conn = open_connection(path)
    migrations.apply(conn)
    conn.close()
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus") / "docs"
    make_corpus(folder, N_FILES)
    return folder


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory) -> tuple[bytes, int]:
    """The report of an uninterrupted run, and how many syncs a run makes at FULL."""
    tmp = tmp_path_factory.mktemp("reference")
    vfs = PowerLossVFS()
    store = open_store(fresh_db(tmp / "ref.db"), vfs=vfs.name)
    res = Engine(store, flows=[build_digest_flow()], clock=ManualClock()).run(
        "digest", DigestState(folder=str(corpus), out=str(tmp / "out"))
    )
    syncs = vfs.syncs
    store.close()
    vfs.unregister()
    assert res.status == "completed"
    return (tmp / "out" / REPORT_NAME).read_bytes(), syncs


def run_until_power_loss(db: Path, vfs: PowerLossVFS, corpus: Path, out: Path, sync: str):
    """Run the digest through ``vfs`` until the power goes off; returns the
    files whose row commit had returned before that (the next file began)."""
    began: list[str] = []

    def on_file(run_id: str, row) -> None:
        if vfs.dead:
            raise Crash("the process is gone")  # nothing it does persists any more
        began.append(row.path)
        if vfs.cut_at_sync is None and len(began) == N_FILES // 2 + 1:
            vfs.cut()
            raise Crash("power off")

    store = open_store(db, vfs=vfs.name, synchronous=sync)  # type: ignore[arg-type]
    # the process that loses power is gone after the reboot: its owner id
    # names a pid of this host that no longer exists
    engine = Engine(
        store,
        flows=[build_digest_flow(on_file=on_file)],
        clock=ManualClock(),
        owner=_gone_owner(),
    )
    with contextlib.suppress(Crash, FlowdeskError):
        engine.run("digest", DigestState(folder=str(corpus), out=str(out)))
    assert vfs.dead, "the run finished before the chosen power-loss point"
    with contextlib.suppress(FlowdeskError):
        store.close()
    vfs.restore()
    vfs.unregister()
    return began[:-1]


def _gone_owner() -> str:
    """An owner id of this host whose process exited (and was reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return f"{socket.gethostname()}:{child.pid}:gone00"


def resume_after_reboot(db: Path, corpus: Path, out: Path):
    processed: list[str] = []
    store = open_store(db)
    check = store.query(lambda c: c.execute("PRAGMA integrity_check").fetchall())
    # after the reboot the dead process's lease has expired
    reboot = ManualClock()
    reboot.advance(3600)
    engine = Engine(
        store,
        flows=[build_digest_flow(on_file=lambda _r, row: processed.append(row.path))],
        clock=reboot,
    )
    runs = store.list_runs()
    if runs:
        (run,) = runs
        res = engine.resume(run.run_id)
    else:  # the run's creation itself was lost
        res = engine.run("digest", DigestState(folder=str(corpus), out=str(out)))
    rows = store.query(lambda c: c.execute("SELECT path FROM digest_files").fetchall())
    store.close()
    return check, runs, res, processed, sorted(r[0] for r in rows)


@pytest.mark.scenario("S63")
@pytest.mark.parametrize("mode", ["drop", "reorder"])
@pytest.mark.parametrize("point", [0.35, 0.6, 0.85])
def test_at_full_no_committed_step_runs_again_after_power_loss(
    tmp_path, corpus, reference, mode, point
):
    report, syncs = reference
    vfs = PowerLossVFS(mode=mode, cut_at_sync=max(2, int(syncs * point)))
    db = fresh_db(tmp_path / "f.db")
    out = tmp_path / "out"
    committed = run_until_power_loss(db, vfs, corpus, out, "FULL")
    check, _runs, res, processed, rows = resume_after_reboot(db, corpus, out)
    assert check == [("ok",)]
    assert res.status == "completed"
    assert not set(processed) & set(committed), "a committed step ran again"
    assert len(processed) + len(set(committed)) >= N_FILES - 1  # nothing skipped
    assert len(rows) == N_FILES and len(set(rows)) == N_FILES  # one row per file
    assert (out / REPORT_NAME).read_bytes() == report


@pytest.mark.scenario("S63")
def test_at_normal_power_loss_loses_every_commit_since_the_last_wal_checkpoint(
    tmp_path, corpus, reference
):
    report, _ = reference
    vfs = PowerLossVFS()
    db = fresh_db(tmp_path / "f.db")
    out = tmp_path / "out"
    committed = run_until_power_loss(db, vfs, corpus, out, "NORMAL")
    # reported as progressing: the run and half of its files had committed
    assert len(committed) == N_FILES // 2
    # NORMAL syncs the WAL only when it starts over and at a checkpoint (1000
    # pages by default), never on commit: at most the WAL header was synced
    assert vfs.syncs <= 1
    check, runs, res, processed, rows = resume_after_reboot(db, corpus, out)
    assert check == [("ok",)]
    # the loss window: every commit since the last checkpoint, here the whole run
    assert runs == [], "the run's creation survived"
    assert set(committed) <= set(processed)  # committed files were processed again
    assert res.status == "completed" and len(rows) == N_FILES
    assert (out / REPORT_NAME).read_bytes() == report


def test_disk_full_during_a_step_commit_pauses_the_run_and_resume_all_continues_it(
    tmp_path, corpus, reference
):
    import os

    from desktop_app.errors import DiskFullError
    from tests.power_loss_vfs import wal_size

    report, _ = reference
    vfs = PowerLossVFS(full_after_bytes=0)
    vfs.free = True
    db = fresh_db(tmp_path / "f.db")
    out = tmp_path / "out"
    seen: list[tuple[str, int]] = []

    def on_file(run_id: str, row) -> None:
        seen.append((row.path, wal_size(db)))
        if len(seen) == 4 and vfs.full_errors == 0:
            vfs.full_after_bytes = vfs.written  # the disk is full from now on
            vfs.free = False

    store = open_store(db, vfs=vfs.name)
    engine = Engine(store, flows=[build_digest_flow(on_file=on_file)], clock=ManualClock())
    with pytest.raises(DiskFullError) as info:
        engine.run("digest", DigestState(folder=str(corpus), out=str(out)))
    assert vfs.full_errors >= 1
    assert "resume --all" in str(info.value) and "MiB" in str(info.value)
    assert info.value.needed_bytes >= 4 * 2**20
    (run,) = store.list_runs()
    # paused, not failed (its lease could not be released on a full disk: this
    # process resumes it at once, another one after the lease expires)
    assert run.status == "running"
    wal_when_full = wal_size(db)
    assert wal_when_full > 0
    vfs.free = True  # the user frees space
    assert [r.run_id for r, _ in engine.recover()] == [run.run_id]  # what resume --all does
    assert store.get_run(run.run_id).status == "completed"
    # the first commit once space allowed truncated the WAL: the next file saw it small
    after = seen[4:]
    assert after and after[1][1] < wal_when_full
    assert (out / REPORT_NAME).read_bytes() == report
    assert len(store.query(lambda c: c.execute("SELECT * FROM digest_files").fetchall())) == 8
    store.close()
    vfs.unregister()
    assert os.path.exists(db)


def test_disk_full_writing_the_report_pauses_the_run_instead_of_failing_it(
    tmp_path, corpus, reference, monkeypatch
):
    import errno
    import os

    from desktop_app.errors import DiskFullError

    report, _ = reference
    real_fsync = os.fsync
    full = {"on": True}

    def fsync(fd: int) -> None:  # the report's write hits ENOSPC on flush
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out"))
        real_fsync(fd)

    store = open_store(fresh_db(tmp_path / "f.db"))
    engine = Engine(store, flows=[build_digest_flow()], clock=ManualClock())
    monkeypatch.setattr("desktop_app.flows.digest.os.fsync", fsync)
    with pytest.raises(DiskFullError) as info:
        engine.run("digest", DigestState(folder=str(corpus), out=str(tmp_path / "out")))
    assert "step report" in str(info.value) and "Free at least 5 MiB" in str(info.value)
    (run,) = store.list_runs()
    assert run.status == "running"  # resume --all picks it up; never failed
    full["on"] = False
    ((_, outcome),) = engine.recover()
    assert outcome.status == "completed"
    assert (tmp_path / "out" / REPORT_NAME).read_bytes() == report
    store.close()

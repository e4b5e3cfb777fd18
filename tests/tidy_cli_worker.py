"""The real ``flowdesk`` command in a process a test controls.

Usage: python tests/tidy_cli_worker.py [--go GO] [--delay S]
           [--pause-after N --paused FILE] [--pause-after-move N --paused FILE]
           [--undo-pause-after N --paused FILE]
           -- ARGS...
       python tests/tidy_cli_worker.py --go GO --dispatch DB

``--dispatch DB``: a dispatcher of the built-in destinations (as the app
and ``flowdesk agent`` run one): after GO, passes of 5 intents until one
delivers nothing; prints ``delivered N``. ``--delay``: seconds to wait
after GO (a stagger between two racers).

``--go``: import everything, print ``ready``, then wait until the file GO
exists before running ``flowdesk ARGS`` (so two processes start at one
instant). ``--pause-after N``: the tidy file mover makes N moves, then on
the next one (its intent already marked ``sending``) creates FILE and
sleeps instead of renaming, so the test can ``kill -9`` it mid-delivery.
``--pause-after-move N``: the same, but it renames that file first (the
move made, its intent still ``sending``: a crash before the mark).
``--undo-pause-after N``: the same for an undo: it moves N files back,
then on the next one creates FILE and sleeps instead of renaming.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from desktop_app.cli import main
from desktop_app.flow.outbox import Dispatcher
from desktop_app.flows import builtin_destinations, tidy, tidy_undo
from desktop_app.store.sqlite.store import open_store


def pause_after(n: int, paused: Path, moved: bool = False) -> None:
    real = tidy.FileMover.rename
    done = [0]

    def rename(self: tidy.FileMover, src: tidy.Entry, dst: tidy.Entry) -> None:
        if done[0] >= n and moved:  # the file is moved; its intent is not marked
            real(self, src, dst)
        if done[0] >= n:
            paused.write_text(str(done[0]))
            threading.Event().wait()  # until the test kills this process
        real(self, src, dst)
        done[0] += 1

    tidy.FileMover.rename = rename  # type: ignore[method-assign]


def undo_pause_after(n: int, paused: Path) -> None:
    real = tidy_undo.rename_noreplace
    done = [0]

    def rename(src_fd: int, src: str, dst_fd: int, dst: str) -> str:
        if done[0] >= n:
            paused.write_text(str(done[0]))
            threading.Event().wait()  # until the test kills this process
        how = real(src_fd, src, dst_fd, dst)
        done[0] += 1
        return how

    tidy_undo.rename_noreplace = rename


if __name__ == "__main__":
    argv = sys.argv[1:]
    cut = argv.index("--")
    p = argparse.ArgumentParser()
    p.add_argument("--go", type=Path)
    p.add_argument("--pause-after", type=int)
    p.add_argument("--pause-after-move", type=int)
    p.add_argument("--undo-pause-after", type=int)
    p.add_argument("--paused", type=Path)
    p.add_argument("--dispatch", type=Path)
    p.add_argument("--delay", type=float, default=0.0)
    opts = p.parse_args(argv[:cut])
    store = open_store(opts.dispatch) if opts.dispatch else None
    if opts.pause_after is not None:
        pause_after(opts.pause_after, opts.paused)
    if opts.pause_after_move is not None:
        pause_after(opts.pause_after_move, opts.paused, moved=True)
    if opts.undo_pause_after is not None:
        undo_pause_after(opts.undo_pause_after, opts.paused)
    if opts.go is not None:
        print("ready", flush=True)
        while not opts.go.exists():
            threading.Event().wait(0.001)
    threading.Event().wait(opts.delay)
    if store is not None:
        outbox = Dispatcher(store, builtin_destinations(store))
        total = 0
        while n := outbox.dispatch(limit=5):
            total += n
        print(f"delivered {total}", flush=True)
        raise SystemExit(0)
    raise SystemExit(main(argv[cut + 1 :]))

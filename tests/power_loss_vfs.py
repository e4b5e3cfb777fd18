"""An apsw VFS that simulates power loss and full disks.

Writes reach the real files at once (the process works normally), and the
VFS remembers, per file, the image that was durable at its last ``xSync``
and the writes and truncations since. :meth:`PowerLossVFS.cut` is the power
going off: from then on every write, sync, truncate and delete of the dying
process is ignored. :meth:`PowerLossVFS.restore` (after the dying process's
connections are closed) puts each file back to its durable image, either
dropping every unsynced write (``mode="drop"``) or keeping an arbitrary
subset of them, as a disk that reorders writes may (``mode="reorder"``:
the later half survives, the earlier half is lost). The ``-shm`` index is
deleted: SQLite rebuilds it from the WAL, as after a reboot.

``cut_at_sync=n`` cuts the power when the n-th ``xSync`` is requested (that
sync does not happen). ``full_after_bytes`` makes ``xWrite`` raise
``SQLITE_FULL`` once that many bytes were written (a full disk) until
:attr:`free` is set again.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import apsw

_names = itertools.count()


@dataclass
class _Image:
    durable: bytearray
    pending: list[tuple[str, int, bytes]] = field(default_factory=list)


class PowerLossVFS(apsw.VFS):
    def __init__(
        self,
        *,
        mode: Literal["drop", "reorder"] = "drop",
        cut_at_sync: int | None = None,
        full_after_bytes: int | None = None,
    ) -> None:
        self.name = f"powerloss{next(_names)}"
        self.mode = mode
        self.cut_at_sync = cut_at_sync
        self.full_after_bytes = full_after_bytes
        self.free = full_after_bytes is None
        self.syncs = 0
        self.written = 0
        self.full_errors = 0
        self.dead = False
        self.images: dict[str, _Image] = {}
        super().__init__(self.name, "")

    def xOpen(self, name, flags):
        return _File(self, name, flags)

    def xDelete(self, filename, syncdir):
        if self.dead:
            return
        self.images.pop(filename, None)
        super().xDelete(filename, syncdir)

    def cut(self) -> None:
        """The power goes off now: nothing the process does later persists."""
        self.dead = True

    def restore(self) -> dict[str, int]:
        """Put every file back to what survived; returns unsynced writes lost per file."""
        assert self.dead, "cut() first"
        lost: dict[str, int] = {}
        for name, img in self.images.items():
            survivors = img.pending[len(img.pending) // 2 :] if self.mode == "reorder" else []
            image = bytearray(img.durable)
            for op in survivors:
                _apply(image, op)
            lost[name] = len(img.pending) - len(survivors)
            Path(name).write_bytes(bytes(image))
        for name in list(self.images):
            if name.endswith("-wal"):
                Path(name[: -len("-wal")] + "-shm").unlink(missing_ok=True)
        self.images.clear()
        return lost


def _apply(image: bytearray, op: tuple[str, int, bytes]) -> None:
    kind, offset, data = op
    if kind == "truncate":
        del image[offset:]
        return
    if len(image) < offset:
        image.extend(b"\0" * (offset - len(image)))
    image[offset : offset + len(data)] = data


class _File(apsw.VFSFile):
    def __init__(self, vfs: PowerLossVFS, name, flags) -> None:
        super().__init__("", name, flags)
        self.vfs = vfs
        self.path = name.filename() if hasattr(name, "filename") else str(name)
        if self.path and self.path not in vfs.images and not vfs.dead:
            size = super().xFileSize()
            # this handle's own descriptor: opening the file in Python would
            # drop SQLite's locks
            vfs.images[self.path] = _Image(bytearray(super().xRead(size, 0) if size else b""))

    def _image(self) -> _Image | None:
        return self.vfs.images.get(self.path)

    def xWrite(self, data, offset):
        if self.vfs.dead:
            return
        limit = self.vfs.full_after_bytes
        if not self.vfs.free and limit is not None and self.vfs.written + len(data) > limit:
            self.vfs.full_errors += 1
            raise apsw.FullError("simulated ENOSPC")
        self.vfs.written += len(data)
        super().xWrite(data, offset)
        img = self._image()
        if img is not None:
            img.pending.append(("write", offset, bytes(data)))

    def xTruncate(self, size):
        if self.vfs.dead:
            return
        super().xTruncate(size)
        img = self._image()
        if img is not None:
            img.pending.append(("truncate", size, b""))

    def xSync(self, flags):
        if self.vfs.dead:
            return
        self.vfs.syncs += 1
        if self.vfs.cut_at_sync is not None and self.vfs.syncs == self.vfs.cut_at_sync:
            self.vfs.cut()
            return
        super().xSync(flags)
        img = self._image()
        if img is not None:
            for op in img.pending:
                _apply(img.durable, op)
            img.pending.clear()


def wal_size(db: Path) -> int:
    try:
        return os.stat(f"{db}-wal").st_size
    except FileNotFoundError:
        return 0

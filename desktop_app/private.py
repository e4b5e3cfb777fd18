"""Folders that hold user data are created mode 0700 (files are 0600: see
:func:`desktop_app.flows.confined.write_private` and the store's own files).

``Path.mkdir(mode=0o700, parents=True)`` gives only the last folder that
mode: the parents it creates get the umask's default (0755 usually), so the
state folder above a 0700 log folder was readable by every user.
:func:`make_private_dirs` creates each missing folder 0700 itself.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

#: mode of every folder Flowdesk creates for user data (owner only)
PRIVATE_DIR_MODE = 0o700


def make_private_dirs(path: str | os.PathLike[str]) -> Path:
    """Create the folder ``path`` and every missing folder above it, each
    with mode 0700 whatever the umask; folders that exist already keep their
    mode (a folder the user chose is theirs). Returns ``path`` as a Path.

    Raises:
        FileExistsError: ``path`` exists and is not a folder.
        OSError: a folder cannot be created (permissions, a full disk...).
    """
    target = Path(path)
    missing: list[Path] = []
    here = target
    while not here.exists() and here != here.parent:
        missing.append(here)
        here = here.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, PRIVATE_DIR_MODE)
        except FileExistsError:  # made meanwhile by another process: it is not ours
            continue
        os.chmod(folder, PRIVATE_DIR_MODE)  # a umask such as 0277 takes bits away
    if not target.is_dir():
        raise FileExistsError(errno.EEXIST, "exists and is not a folder", str(target))
    return target

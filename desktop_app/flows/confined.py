"""File operations that never leave the folder they were given (POSIX).

Every path is walked one component at a time from an open directory
descriptor, ``openat(2)`` style (``os.open(name, dir_fd=...)``), each folder
opened with ``O_DIRECTORY | O_NOFOLLOW``: a symbolic link anywhere on the way,
put there before or after a plan was made, makes the walk fail with
:class:`Refused` instead of following it. What the walk proves holds for the
descriptor, so a later swap of a path component cannot redirect an operation
that already holds it.

Renames never replace: :func:`rename_noreplace` uses Linux ``renameat2(2)``
with ``RENAME_NOREPLACE`` (macOS: ``renameatx_np`` with ``RENAME_EXCL``), both
through :mod:`ctypes`, where the kernel and file system support it; elsewhere
it falls back to ``link(2)`` then ``unlink(2)`` (the link fails with
``EEXIST`` atomically; a file system that cannot link is refused rather than
renamed with a check-then-act race).

User-data files (reports, undo lists) are written by :func:`write_private`:
created ``0600`` with ``O_CREAT | O_EXCL | O_NOFOLLOW`` whatever the umask,
fsynced, then renamed over the target in the same folder descriptor.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import stat
import sys
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path, PurePosixPath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: a file opened for reading: never through a link, never blocking on a FIFO,
#: never becoming the controlling terminal
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
PRIVATE_MODE = 0o600


#: why a rename that would have replaced a file was refused
DESTINATION_EXISTS = "the destination exists already; nothing moved"


class Refused(Exception):
    """The operation would leave the folder, follow a link, replace a file or
    use an unsafe name; nothing was changed. ``str(exc)`` is the reason."""


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a single path component, or ``None`` when it can.

    Refused: empty, ``.``, ``..``, a ``/``, a NUL or any control character
    (Unicode category ``Cc``, which includes newline, tab and DEL).
    """
    if name in ("", ".", ".."):
        return f"the name {name!r} is not a file name"
    if "/" in name:
        return f"the name {name!r} contains a '/'"
    if any(unicodedata.category(ch) == "Cc" for ch in name):
        return f"the name {name!r} contains a control character, such as a newline"
    return None


def components(rel: str | PurePosixPath) -> list[str]:
    """The parts of a relative ``/``-separated path, each checked by :func:`name_problem`.

    Raises:
        Refused: an absolute path or an unsafe part (``..`` included).
    """
    text = str(rel)
    if text.startswith("/"):
        raise Refused(f"{text!r} is not a path inside the folder")
    parts = text.split("/")
    for part in parts:
        problem = name_problem(part)
        if problem:
            raise Refused(problem)
    return parts


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "a special file"


def kind_at(dir_fd: int, name: str) -> str | None:
    """What ``name`` is in the folder (``lstat``, no link followed), ``None`` when absent."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return _kind(st.st_mode)


def _open_component(dir_fd: int, name: str, shown: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):
            what = kind_at(dir_fd, name) or "not a folder"
            raise Refused(f"{shown} is {what}, not a folder; links are not followed") from exc
        raise


def open_dir(path: str | os.PathLike[str]) -> int:
    """A descriptor of the absolute folder ``path``, walked from ``/`` with no
    symbolic link followed on any component (pass a path made with
    ``Path.resolve()``). The caller closes it.

    Raises:
        Refused: a component is a link or not a folder.
        OSError: a component is missing or unreadable.
    """
    p = Path(path)
    if not p.is_absolute():
        raise Refused(f"{p} is not an absolute path")
    root = os.open("/", _DIR_FLAGS)
    try:
        return _walk(root, list(p.parts[1:]), shown_from="/")
    finally:
        os.close(root)


def open_subdir(dir_fd: int, name: str, *, create: bool = False, shown: str = "") -> int:
    """A descriptor of the folder ``name`` inside ``dir_fd`` (no link followed),
    created first when ``create`` and missing. The caller closes it.

    Raises:
        Refused: an unsafe name, or ``name`` is a link or not a folder.
        OSError: missing (without ``create``) or not creatable.
    """
    problem = name_problem(name)
    if problem:
        raise Refused(problem)
    if create:
        with suppress(FileExistsError):  # an existing entry: the no-follow open decides
            os.mkdir(name, dir_fd=dir_fd)
    return _open_component(dir_fd, name, shown or name)


@contextmanager
def opened_dir(path: str | os.PathLike[str]) -> Iterator[int]:
    """:func:`open_dir` as a context manager that closes the descriptor."""
    fd = open_dir(path)
    try:
        yield fd
    finally:
        os.close(fd)


def _walk(dir_fd: int, parts: list[str], shown_from: str = "") -> int:
    """A new descriptor of the folder ``parts`` under ``dir_fd``, each part
    opened with no link followed (``dir_fd`` itself, duplicated, for none);
    a refusal shows the path as ``shown_from`` followed by the parts walked."""
    fd = os.dup(dir_fd)
    try:
        for i, part in enumerate(parts):
            nxt = _open_component(fd, part, shown_from + "/".join(parts[: i + 1]))
            # ``fd`` names the open one before the close: a Ctrl-C raised right
            # after ``os.close`` returned closed the same descriptor again
            # below, and that EBADF replaced the KeyboardInterrupt (a digest
            # took it for an unreadable file and ran on to its end)
            fd, done = nxt, fd
            os.close(done)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_folder(dir_fd: int, rel: str) -> int:
    """A descriptor of the folder ``rel`` (relative, ``/``-separated; ``"."``
    is ``dir_fd`` itself) under ``dir_fd``, every component opened with no
    link followed. The caller closes it.

    Raises:
        Refused: an unsafe part (``..``, an absolute path), or a component
            is a link or not a folder.
        OSError: a component is missing or unreadable.
    """
    return _walk(dir_fd, [] if rel in (".", "") else components(rel))


def open_regular(dir_fd: int, rel: str) -> tuple[int, os.stat_result]:
    """Open the regular file ``rel`` (relative, ``/``-separated) under ``dir_fd``
    for reading: folders walked with no link followed, the file opened
    ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO cannot block) and checked with
    ``fstat`` on the open descriptor. Returns the descriptor and its stat; the
    caller closes it.

    Raises:
        Refused: a link on the way or at the end, or not a regular file (a
            FIFO, device, socket or folder); the reason names what it is.
        OSError: missing or unreadable.
    """
    parts = components(rel)
    fd = _walk(dir_fd, parts[:-1])
    try:
        what = kind_at(fd, parts[-1])
        if what not in (None, "a regular file"):  # never open a device or a FIFO at all
            if what == "a symbolic link":
                raise Refused("a symbolic link, not followed")
            raise Refused(f"{what}, not a regular file")
        try:
            ffd = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):
                raise Refused("a symbolic link, not followed") from exc
            if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP):  # a socket, a device with no reader
                what = kind_at(fd, parts[-1]) or "a special file"
                raise Refused(f"{what}, not a regular file") from exc
            raise
    finally:
        os.close(fd)
    st = os.fstat(ffd)
    if not stat.S_ISREG(st.st_mode):
        os.close(ffd)
        raise Refused(f"{_kind(st.st_mode)}, not a regular file")
    return ffd, st


# -- rename without replacing ----------------------------------------------------

_RENAME_NOREPLACE = 1  # linux/fs.h
_RENAME_EXCL = 0x4  # macOS sys/stdio.h


def _libc_rename() -> tuple[object, int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    if sys.platform.startswith("linux"):
        fn = getattr(libc, "renameat2", None)
        flag = _RENAME_NOREPLACE
    elif sys.platform == "darwin":
        fn = getattr(libc, "renameatx_np", None)
        flag = _RENAME_EXCL
    else:
        fn = None
        flag = 0
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn, flag


_NATIVE = _libc_rename()


def rename_noreplace(src_fd: int, src: str, dst_fd: int, dst: str) -> str:
    """Rename ``src`` (in folder ``src_fd``) to ``dst`` (in folder ``dst_fd``),
    never replacing an existing ``dst``. Both names are single components.
    Returns the mechanism used: ``"renameat2"``, ``"renameatx_np"`` or ``"link"``.

    Raises:
        Refused: ``dst`` exists (it appeared meanwhile), or the file system can
            neither rename without replacing nor hard-link.
        OSError: anything else (the source vanished, permissions, ...).
    """
    for name in (src, dst):
        problem = name_problem(name)
        if problem:
            raise Refused(problem)
    if _NATIVE is not None:
        fn, flag = _NATIVE
        rc = fn(src_fd, os.fsencode(src), dst_fd, os.fsencode(dst), flag)  # type: ignore[operator]
        if rc == 0:
            return "renameat2" if flag == _RENAME_NOREPLACE else "renameatx_np"
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise Refused(DESTINATION_EXISTS)
        if err not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), src)
        # this file system does not support the flag: fall back to link + unlink
    try:
        os.link(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
    except FileExistsError as exc:
        raise Refused(DESTINATION_EXISTS) from exc
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise Refused(
                f"this file system cannot move without risking an overwrite ({exc.strerror})"
            ) from exc
        raise
    os.unlink(src, dir_fd=src_fd)
    return "link"


def fsync_dir(dir_fd: int) -> None:
    """Make renames in the folder durable; best effort (not every OS can)."""
    with suppress(OSError):
        os.fsync(dir_fd)


def write_private(dir_fd: int, name: str, text: str, *, tag: str = "") -> None:
    """Write ``name`` in the folder ``dir_fd`` atomically, mode ``0600``.

    A temporary ``.<name>.<tag>.tmp`` (``tag``: e.g. the run id, so two runs
    writing one folder never share it; a leftover of a crash is replaced) is
    created ``O_EXCL | O_NOFOLLOW`` with mode ``0600`` (then ``fchmod`` so no
    umask changes it), written, fsynced and renamed over ``name`` (a rename
    keeps the mode), then the folder is fsynced.

    Raises:
        Refused: an unsafe name.
        OSError: the folder is not writable, the disk is full, ...
    """
    problem = name_problem(name)
    if problem:
        raise Refused(problem)
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", tag)
    tmp = f".{name}.{safe}.tmp" if safe else f".{name}.tmp"
    problem = name_problem(tmp)
    if problem:
        raise Refused(problem)
    with suppress(FileNotFoundError):  # left by a crash
        os.unlink(tmp, dir_fd=dir_fd)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, PRIVATE_MODE, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, PRIVATE_MODE)
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n", closefd=False) as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    fsync_dir(dir_fd)

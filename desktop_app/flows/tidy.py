"""The built-in ``tidy`` flow: sort a folder's files into subfolders, with a
person's approval, through the outbox.

Steps:

1. ``plan`` lists the folder's top-level files (not recursive; hidden entries,
   folders and symbolic links are left alone), sorts each by kind (from its
   extension) and month (its modification time, UTC) to
   ``<folder>/<Kind>/<YYYY-MM>/<name>`` (a name already taken there gets
   `` (1)``, `` (2)``...), and stores one ``tidy_moves`` row per file in the
   transaction of its checkpoint.
2. ``approve`` asks a person (an input wait whose prompt counts the moves) and
   waits up to ``timeout_s`` (24 h by default; the deadline is stored when the
   wait begins). Without an answer by then the run ends ``timed_out`` and
   nothing moves.
3. ``apply`` is a loop step, checkpointed per move: unless the answer is
   affirmative (``yes``, ``y``, ``approve``, ``ok``) every planned row becomes
   ``skipped``; otherwise each move is queued as an outbox intent
   (destination ``tidy.move``, key ``"<run_id>:move:<src>"``) in the same
   transaction that marks its row ``queued``.
4. ``undo`` writes ``<folder>/.flowdesk-tidy-undo-<run_id>.json`` (a list of
   ``{"from": dst, "to": src}``) atomically, from the queued rows, so it does
   not depend on when the moves are delivered.

The flow never touches a file itself: a :class:`~desktop_app.flow.outbox.Dispatcher`
with ``{"tidy.move": FileMover(store)}`` delivers the queued moves after their
checkpoints committed. :class:`FileMover` checks the domain row and the file
system before acting, so a crash between the rename and the outbox
acknowledgement neither repeats nor loses a move.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from desktop_app.errors import InputError
from desktop_app.flow import CompiledFlow, FlowBuilder, StepContext
from desktop_app.store.domain.tidy import (
    TidyMove,
    mark_queued,
    move_by_key,
    moves_of_run,
    next_planned,
    record_outcome,
    record_plan,
    skip_planned,
)
from desktop_app.store.protocol import CheckpointStore

DESTINATION = "tidy.move"
DEFAULT_TIMEOUT_S = 24 * 3600.0
AFFIRMATIVE = frozenset({"yes", "y", "approve", "ok"})
UNDO_PREFIX = ".flowdesk-tidy-undo-"

KIND_FOLDERS: dict[str, str] = {
    "images": "Images",
    "documents": "Documents",
    "audio": "Audio",
    "video": "Video",
    "archives": "Archives",
    "code": "Code",
    "other": "Other",
}

#: extensions (lower case, without the dot) of each kind but ``other``
_EXTENSIONS: dict[str, str] = {
    "images": "jpg jpeg png gif bmp tif tiff webp heic heif avif svg ico psd raw cr2 nef arw dng",
    "documents": "pdf doc docx odt rtf txt md rst tex xls xlsx ods csv tsv ppt pptx odp epub mobi "
    "pages numbers key",
    "audio": "mp3 wav flac aac ogg oga opus m4a wma aif aiff mid midi",
    "video": "mp4 m4v mkv mov avi wmv flv webm mpg mpeg 3gp ogv",
    "archives": "zip tar gz tgz bz2 tbz2 xz txz zst 7z rar iso dmg pkg deb rpm cab",
    "code": "py pyi ipynb js mjs ts tsx jsx java kt kts scala go rs c h cc cpp hpp cs rb php pl "
    "lua r swift sh bash zsh fish ps1 bat sql html htm css scss json yaml yml toml xml",
}
_KIND_OF_EXT = {ext: kind for kind, exts in _EXTENSIONS.items() for ext in exts.split()}

#: files a browser is still writing: moving them would break the download
PARTIAL_SUFFIXES = frozenset({".part", ".partial", ".crdownload", ".opdownload", ".download"})


class TidyInput(BaseModel):
    """What a user gives: the folder to tidy."""

    folder: str = Field(description="The folder whose top-level files are sorted into subfolders")


class TidyState(TidyInput):
    """The run's state; the move list itself lives in ``tidy_moves``.

    Attributes:
        approval: the person's answer (``None`` until answered, or when there
            was nothing to move).
        planned: files the plan moves.
        left_in_place: files recorded but not moved (downloads in progress,
            names that are not UTF-8).
        kinds: planned moves per kind.
        cursor: planned moves the ``apply`` loop has handled.
        queued: moves handed to the outbox.
        undo_path: the undo list, once written (``None`` when nothing was queued).
    """

    approval: str | None = None
    planned: int = 0
    left_in_place: int = 0
    kinds: dict[str, int] = {}
    cursor: int = 0
    queued: int = 0
    undo_path: str | None = None


def kind_of(name: str) -> str:
    """``images``, ``documents``, ``audio``, ``video``, ``archives``, ``code`` or ``other``."""
    suffix = Path(name).suffix.lower().lstrip(".")
    return _KIND_OF_EXT.get(suffix, "other")


def is_affirmative(answer: str | None) -> bool:
    """``yes``, ``y``, ``approve`` or ``ok``, any case, surrounding spaces ignored."""
    return answer is not None and answer.strip().casefold() in AFFIRMATIVE


def _split_name(name: str) -> tuple[str, str]:
    """``("photo", ".jpg")``; ``("backup", ".tar.gz")`` keeps a compound suffix."""
    p = Path(name)
    suffixes = p.suffixes
    if len(suffixes) >= 2 and suffixes[-2].lower() == ".tar":
        compound = "".join(suffixes[-2:])
        return name[: -len(compound)], compound
    return name[: -len(p.suffix)] if p.suffix else name, p.suffix


def free_destination(target_dir: Path, name: str, taken: set[str]) -> Path:
    """``target_dir / name``, or ``name (1)``, ``name (2)``... when that exists
    on disk or is already planned (``taken``, case-folded paths)."""
    stem, suffix = _split_name(name)
    candidate = target_dir / name
    n = 0
    while os.path.lexists(candidate) or str(candidate).casefold() in taken:
        n += 1
        candidate = target_dir / f"{stem} ({n}){suffix}"
    taken.add(str(candidate).casefold())
    return candidate


def plan_moves(folder: Path) -> list[TidyMove]:
    """One row per top-level regular file of ``folder``, sorted by name.

    Hidden entries, folders, symbolic links and other special files are not
    listed. Partial downloads and names that are not valid UTF-8 are listed as
    ``skipped`` (left in place, with a reason).
    """
    moves: list[TidyMove] = []
    taken: set[str] = set()
    with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        name = entry.name
        if name.startswith("."):
            continue
        try:
            if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
                continue
            mtime = entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue  # vanished or unreadable while listing
        month = datetime.fromtimestamp(mtime, tz=UTC).strftime("%Y-%m")
        kind = kind_of(name)
        src = str(folder / name)
        try:
            src.encode("utf-8")
        except UnicodeEncodeError:
            shown = src.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            moves.append(
                TidyMove(shown, None, kind, month, "skipped", "file name is not valid UTF-8")
            )
            continue
        if Path(name).suffix.lower() in PARTIAL_SUFFIXES:
            moves.append(TidyMove(src, None, kind, month, "skipped", "download in progress"))
            continue
        dst = free_destination(folder / KIND_FOLDERS[kind] / month, name, taken)
        moves.append(TidyMove(src, str(dst), kind, month))
    return moves


def approval_prompt(state: TidyState, timeout_s: float | None) -> str:
    """The question a person answers: how many files move where, and until when."""
    n = state.planned
    kinds = ", ".join(f"{KIND_FOLDERS[k]} {c}" for k, c in sorted(state.kinds.items()))
    text = (
        f"Tidy {state.folder}: move {n} file{'s' if n != 1 else ''} into subfolders by kind "
        f"and month ({kinds})?"
    )
    if state.left_in_place:
        text += f" {state.left_in_place} more stay where they are."
    text += " Answer yes to move them, or no to leave everything as it is."
    if timeout_s:
        text += f" Without an answer within {timeout_s / 3600:g} h nothing is moved."
    return text


def undo_path(folder: Path, run_id: str) -> Path:
    """``<folder>/.flowdesk-tidy-undo-<run_id>.json`` (a hidden file: a later
    tidy run leaves it alone)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
    return folder / f"{UNDO_PREFIX}{safe}.json"


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable; best effort (not every OS can)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_atomically(target: Path, text: str) -> None:
    tmp = target.with_name(f"{target.name}.tmp")
    try:
        with tmp.open("w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(target.parent)


def build_tidy_flow(timeout_s: float | None = DEFAULT_TIMEOUT_S) -> CompiledFlow[TidyState]:
    """Compile the ``tidy`` flow.

    Args:
        timeout_s: how long the approval waits (default 24 h; ``None``: no
            deadline). Past it the run ends ``timed_out`` with nothing moved.
    """

    def plan(state: TidyState, ctx: StepContext) -> dict[str, Any]:
        folder = Path(state.folder).expanduser()
        if not folder.is_dir():
            raise InputError(f"folder {folder} does not exist or is not a folder; choose a folder")
        folder = folder.resolve()
        moves = plan_moves(folder)
        ctx.write(record_plan(ctx.run_id, moves))
        planned = [m for m in moves if m.status == "planned"]
        ctx.progress(0, len(planned))
        return {
            "folder": str(folder),
            "planned": len(planned),
            "left_in_place": len(moves) - len(planned),
            "kinds": dict(sorted(Counter(m.kind for m in planned).items())),
            "cursor": 0,
            "queued": 0,
        }

    def approve(state: TidyState, ctx: StepContext) -> dict[str, Any]:
        if state.planned == 0:
            return {"approval": None}  # nothing to ask about
        reply = ctx.interrupt(approval_prompt(state, timeout_s), timeout_s=timeout_s)
        return {"approval": reply if isinstance(reply, str) else json.dumps(reply)}

    def apply_one(state: TidyState, ctx: StepContext) -> dict[str, Any]:
        if not is_affirmative(state.approval):
            ctx.write(skip_planned(ctx.run_id, f"not approved (answer {state.approval!r})"))
            return {"cursor": state.planned}
        move = ctx.query(next_planned(ctx.run_id))
        if move is None or move.dst is None:  # fewer rows than counted: nothing left
            return {"cursor": state.planned}
        key = ctx.send(
            DESTINATION,
            {"run_id": ctx.run_id, "src": move.src, "dst": move.dst},
            key=f"{ctx.run_id}:move:{move.src}",
        )
        ctx.write(mark_queued(ctx.run_id, move.src, key))
        return {"cursor": state.cursor + 1, "queued": state.queued + 1}

    def undo(state: TidyState, ctx: StepContext) -> dict[str, Any]:
        rows = ctx.query(moves_of_run(ctx.run_id))
        entries = [{"from": m.dst, "to": m.src} for m in rows if m.status in ("queued", "moved")]
        if not entries:
            return {"undo_path": None}
        target = undo_path(Path(state.folder), ctx.run_id)
        _write_atomically(target, json.dumps(entries, indent=2, ensure_ascii=False) + "\n")
        return {"undo_path": str(target)}

    return (
        FlowBuilder(
            "tidy",
            TidyState,
            version="1",
            inputs=TidyInput,
            description="Sort a folder's files into Kind/Month subfolders once you approve "
            "the planned moves; an undo list is kept.",
        )
        .step("plan", plan)
        .step("approve", approve)
        .loop(
            "apply",
            apply_one,
            until=lambda s: s.cursor >= s.planned,
            progress=lambda s: (s.cursor, s.planned),
        )
        .step("undo", undo)
        .chain()
        .compile()
    )


class FileMover:
    """The ``tidy.move`` outbox destination: performs one planned move.

    Before acting it reads the move's ``tidy_moves`` row (by the intent's
    idempotency key) and the file system, so a repeated or reconciled
    delivery never moves a file twice and never loses one:

    * the file is at its source and the destination is free: create the
      folders, rename (same file system) -> ``{"moved": True}``;
    * the file is gone and the destination exists: the move happened before
      (a crash before the acknowledgement) -> ``{"moved": True, "already": True}``;
    * both exist, or neither: nothing is touched -> ``{"moved": False, "reason": ...}``.

    The outcome is recorded in the row (``moved``, or ``skipped`` with the reason).

    Args:
        store: the SQLite store holding ``tidy_moves`` (the dispatcher's store).
    """

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store

    def rename(self, src: Path, dst: Path) -> None:
        """The one file-system change: a rename, made durable in both folders."""
        os.rename(src, dst)
        _fsync_dir(dst.parent)
        _fsync_dir(src.parent)

    def send(self, idempotency_key: str, payload: Any) -> dict[str, Any]:
        move = self.store.query(move_by_key(idempotency_key))
        if move is None or move.dst is None:
            return {"moved": False, "reason": "no queued move has this key"}
        if not isinstance(payload, dict) or (payload.get("src"), payload.get("dst")) != (
            move.src,
            move.dst,
        ):
            return {"moved": False, "reason": "the intent does not match the planned move"}
        if move.status == "skipped":
            return {"moved": False, "reason": move.reason or "skipped"}
        src, dst = Path(move.src), Path(move.dst)
        src_there, dst_there = os.path.lexists(src), os.path.lexists(dst)
        if src_there and not dst_there:
            try:
                dst.parent.mkdir(parents=True, exist_ok=True)
                self.rename(src, dst)
            except OSError as exc:
                return self._refuse(idempotency_key, f"cannot move: {exc.strerror or exc}")
            self.store.query(record_outcome(idempotency_key, True))
            return {"moved": True, "dst": move.dst}
        if dst_there and not src_there:
            self.store.query(record_outcome(idempotency_key, True))
            return {"moved": True, "already": True, "dst": move.dst}
        if src_there:
            return self._refuse(idempotency_key, "the destination exists already; nothing moved")
        return self._refuse(idempotency_key, "the file is gone and was not moved here")

    def lookup(self, idempotency_key: str) -> dict[str, Any] | None:
        """A receipt when the move already happened (source gone, destination
        there), else ``None`` (the dispatcher then sends)."""
        move = self.store.query(move_by_key(idempotency_key))
        if move is None or move.dst is None or move.status == "skipped":
            return None
        if os.path.lexists(move.dst) and not os.path.lexists(move.src):
            self.store.query(record_outcome(idempotency_key, True))
            return {"moved": True, "already": True, "dst": move.dst}
        return None

    def _refuse(self, key: str, reason: str) -> dict[str, Any]:
        self.store.query(record_outcome(key, False, reason))
        return {"moved": False, "reason": reason}

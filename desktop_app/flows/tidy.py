"""The built-in ``tidy`` flow: sort a folder's files into subfolders, with a
person's approval, through the outbox.

Steps:

1. ``plan`` lists the folder's top-level files (not recursive; hidden entries,
   folders and symbolic links are left alone), sorts each by kind (from its
   extension) and month (its modification time, UTC) to
   ``<folder>/<Kind>/<YYYY-MM>/<name>`` (a name already taken there gets
   `` (1)``, `` (2)``...), and stores one ``tidy_moves`` row per file in the
   transaction of its checkpoint. A file that a symbolic link at the top of
   the folder points at (by a relative or absolute path) stays in place:
   moving it would break the link (links deeper in subfolders are not
   searched; tidy itself only looks at the top level); a name with a
   control character (a newline...) or a kind / month folder that is a link
   or not a folder is ``refused``.
2. ``approve`` asks a person (an input wait whose prompt counts the moves) and
   waits up to ``timeout_s`` (24 h by default; the deadline is stored when the
   wait begins). Without an answer by then the run ends ``timed_out`` and
   nothing moves. The answer is ``yes`` or ``no`` (any case, trimmed: the
   interrupt's ``choices``); anything else is refused and the run keeps
   waiting (an answer stored before choices existed is judged as before).
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

Confinement: at the moment of each move the mover walks from ``/`` to the
folder and into ``<Kind>/<YYYY-MM>`` on directory descriptors with no
symbolic link followed (:mod:`desktop_app.flows.confined`), and renames with
no replace (``renameat2(RENAME_NOREPLACE)`` on Linux). A link anywhere on the
way (the folder, or a kind folder, swapped for a link during the approval
wait), a source that is no longer a regular file, a new link pointing at the
source, an unsafe name or a destination that appeared meanwhile: the move is
``refused`` with the reason, nothing is moved, the other moves go on. The
undo list is written 0600 through the same folder descriptor.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

from desktop_app.errors import (
    DomainReadError,
    FolderNotWritableError,
    InputError,
    RunCannotContinueError,
)
from desktop_app.flow import CompiledFlow, FlowBuilder, StepContext
from desktop_app.flow.outbox import register_lookup
from desktop_app.flows.confined import (
    Refused,
    fsync_dir,
    kind_at,
    name_problem,
    open_dir,
    open_subdir,
    rename_noreplace,
    write_private,
)
from desktop_app.store.domain.tidy import (
    APPROVED,
    TidyMove,
    approve_planned,
    mark_queued,
    move_by_key,
    moved_by_other,
    moves_of_run,
    next_planned,
    queued_elsewhere,
    record_outcome,
    record_plan,
    skip_planned,
    withdraw_queued,
)
from desktop_app.store.protocol import CheckpointStore, DomainWrite, SqlTx, Withdrawal
from desktop_app.words import plural

DESTINATION = "tidy.move"
DEFAULT_TIMEOUT_S = 24 * 3600.0
AFFIRMATIVE = frozenset({"yes", "y", "approve", "ok"})
#: the step that asks for the approval (its question's wait id is ``RUN:approve:N``)
APPROVE_STEP = "approve"
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

#: the reason a queued move records when its file vanished before it was made
GONE = "the file is gone and was not moved here"
#: how the reason of the rows a ``no`` (or any answer but yes) left in place starts
NOT_APPROVED = "not approved"
#: the reason of a queued move a cancel withdrew (its intent was never delivered)
CANCELED = "withdrawn: the run was canceled before this move was made"
#: the reason of a queued move ``cancel`` withdrew after the run had ended
#: (completed) with it still queued: never made; the run keeps its status
CANCELED_AFTER_END = (
    "withdrawn: `cancel` took it back after the run ended, before this move was made"
)
#: the reason of a planned move of a run canceled before it was queued
CANCELED_UNQUEUED = "not moved: the run was canceled before this move was queued"
#: the reason of a planned move of a run whose approval timed out (never made)
TIMED_OUT = "the approval timed out before an answer; nothing was moved"
#: how the reason of a file another tidy run has a queued move for starts
QUEUED_BY = "queued by tidy run"
#: how the reason of a file another tidy run moved before this run's move starts
MOVED_BY = "moved by tidy run"

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


def link_targets(dir_fd: int) -> set[tuple[int, int]]:
    """``(st_dev, st_ino)`` of what each symbolic link at the top of the folder
    ``dir_fd`` points at (dangling links and links to links' loops left out)."""
    targets: set[tuple[int, int]] = set()
    with os.scandir(dir_fd) as it:
        for entry in it:
            if not entry.is_symlink():
                continue
            try:
                st = os.stat(entry.name, dir_fd=dir_fd, follow_symlinks=True)
            except OSError:
                continue  # dangling or a loop: nothing of ours to break
            targets.add((st.st_dev, st.st_ino))
    return targets


_LINKED = "a symbolic link in the folder points at it; moving it would break the link"


def _folder_problem(folder: Path, kind_dir: str, month: str) -> str | None:
    """Why ``<folder>/<kind_dir>/<month>`` cannot take files now (a link or not a folder)."""
    for rel in (kind_dir, f"{kind_dir}/{month}"):
        p = folder / rel
        if os.path.lexists(p) and (p.is_symlink() or not p.is_dir()):
            what = "a symbolic link" if p.is_symlink() else "not a folder"
            return f"{p} is {what}; links are not followed, nothing is moved through it"
    return None


def plan_moves(folder: Path) -> list[TidyMove]:
    """One row per top-level regular file of ``folder``, sorted by name.

    Hidden entries, folders, symbolic links and other special files are not
    listed. Partial downloads, names that are not valid UTF-8 and files a
    symbolic link in the folder points at are listed as ``skipped`` (left in
    place, with a reason); names with a control character and files whose
    kind or month folder is a link (or not a folder) are ``refused``.

    Raises:
        Refused: the folder path contains a symbolic link (pass a resolved path).
    """
    moves: list[TidyMove] = []
    taken: set[str] = set()
    files: list[tuple[str, os.stat_result]] = []
    fd = open_dir(folder)
    try:
        linked = link_targets(fd)
        with os.scandir(fd) as it:
            for entry in it:
                if entry.name.startswith("."):
                    continue
                try:
                    if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
                        continue
                    files.append((entry.name, entry.stat(follow_symlinks=False)))
                except OSError:
                    continue  # vanished or unreadable while listing
    finally:
        os.close(fd)
    for name, st in sorted(files, key=lambda f: f[0]):
        month = datetime.fromtimestamp(st.st_mtime, tz=UTC).strftime("%Y-%m")
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
        problem = name_problem(name)
        if problem:
            moves.append(TidyMove(src, None, kind, month, "refused", problem))
            continue
        if Path(name).suffix.lower() in PARTIAL_SUFFIXES:
            moves.append(TidyMove(src, None, kind, month, "skipped", "download in progress"))
            continue
        if (st.st_dev, st.st_ino) in linked:
            moves.append(TidyMove(src, None, kind, month, "skipped", _LINKED))
            continue
        problem = _folder_problem(folder, KIND_FOLDERS[kind], month)
        if problem:
            moves.append(TidyMove(src, None, kind, month, "refused", problem))
            continue
        dst = free_destination(folder / KIND_FOLDERS[kind] / month, name, taken)
        moves.append(TidyMove(src, str(dst), kind, month))
    return moves


def leave_claimed(moves: list[TidyMove], claimed: dict[str, str]) -> list[TidyMove]:
    """``moves`` with each planned file another tidy run has a queued move
    for (``claimed``: source path -> that run's id) left in place, its
    reason naming that run: no two runs claim one file, and each run's
    report and undo cover only the moves it made."""
    return [
        TidyMove(m.src, None, m.kind, m.month, "skipped", f"{QUEUED_BY} {claimed[m.src]}")
        if m.status == "planned" and m.src in claimed
        else m
        for m in moves
    ]


def record_cancel(store: CheckpointStore, run_id: str, done: Withdrawal) -> None:
    """What a cancel of tidy run ``run_id`` changed (the flow's ``on_cancel``
    option, called once its intents were withdrawn):
    each move it withdrew becomes ``skipped`` with :data:`CANCELED`, each
    move not queued yet ``skipped`` with :data:`CANCELED_UNQUEUED`; a move a
    live dispatcher was making is left to it, which records its outcome. A
    move whose process died mid-move was settled before this by
    :class:`FileMover`'s ``lookup`` (registered below): made (its row says
    ``moved``) or not (withdrawn with the others). A run that had ended
    before the cancel (completed with moves still queued) keeps its status,
    and its withdrawn moves say :data:`CANCELED_AFTER_END`."""
    keys = [i.intent_id for i in done.withdrawn if i.destination == DESTINATION]
    why = CANCELED if store.get_run(run_id).status == "canceled" else CANCELED_AFTER_END

    def write(tx: SqlTx) -> None:
        withdraw_queued(keys, why)(tx)
        skip_planned(run_id, CANCELED_UNQUEUED)(tx)

    store.write(write)


def record_timed_out(run_id: str) -> list[DomainWrite]:
    """What tidy run ``run_id`` timing out changes (the flow's
    ``on_timed_out`` option, committed with its ``timed_out`` checkpoint): each move still
    ``planned`` becomes ``skipped`` with :data:`TIMED_OUT`; it is never made."""
    return [skip_planned(run_id, TIMED_OUT)]


def check_folder(given: str | Path) -> Path:
    """The folder to tidy, absolute and resolved, checked before anything is
    planned: it exists, is a folder, and this process may create, rename
    and remove entries in it (``os.access`` ``W_OK | X_OK``, which a
    read-only file system fails even for root).

    Raises:
        InputError: missing, or not a folder.
        FolderNotWritableError: it cannot be written (an ``InputError``).
    """
    folder = Path(given).expanduser()
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is not a folder"
        raise InputError(f"folder {folder} {what}; choose an existing folder to tidy")
    folder = folder.resolve()
    if not os.access(folder, os.W_OK | os.X_OK):
        why = "is on a read-only file system" if _read_only_fs(folder) else "is not writable by you"
        raise FolderNotWritableError(
            f"folder {folder} {why}; tidy moves files inside it and writes its undo list "
            "there, so nothing was planned: choose a folder you can write to, or make this "
            "one writable (remount it read-write, or `chmod u+w` it) and run tidy again"
        )
    return folder


def _read_only_fs(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def approval_prompt(state: TidyState, timeout_s: float | None) -> str:
    """The question a person answers: how many files move where, and until when."""
    n = state.planned
    kinds = ", ".join(f"{KIND_FOLDERS[k]} {c}" for k, c in sorted(state.kinds.items()))
    text = (
        f"Tidy {state.folder}: move {plural(n, 'file')} into subfolders by kind "
        f"and month ({kinds})?"
    )
    if state.left_in_place == 1:
        text += " 1 more stays where it is."
    elif state.left_in_place:
        text += f" {state.left_in_place:,} more stay where they are."
    text += " Answer yes to move them, or no to leave everything as it is."
    if timeout_s:
        text += f" Without an answer within {timeout_s / 3600:g} h nothing is moved."
    return text


def undo_path(folder: Path, run_id: str) -> Path:
    """``<folder>/.flowdesk-tidy-undo-<run_id>.json`` (a hidden file: a later
    tidy run leaves it alone)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
    return folder / f"{UNDO_PREFIX}{safe}.json"


def build_tidy_flow(timeout_s: float | None = DEFAULT_TIMEOUT_S) -> CompiledFlow[TidyState]:
    """Compile the ``tidy`` flow.

    Args:
        timeout_s: how long the approval waits (default 24 h; ``None``: no
            deadline). Past it the run ends ``timed_out`` with nothing moved.
    """

    def plan(state: TidyState, ctx: StepContext) -> dict[str, Any]:
        folder = check_folder(state.folder)
        try:
            moves = plan_moves(folder)
        except Refused as exc:
            raise InputError(f"cannot tidy {folder}: {exc}") from exc
        try:
            claimed = ctx.query(queued_elsewhere(ctx.run_id, str(folder)))
        except DomainReadError as exc:  # e.g. tidy_moves is missing: said as the plan's write would
            raise DomainReadError(
                "cannot read which files other tidy runs have queued (table 'tidy_moves'): "
                f"{exc.__cause__}"
            ) from exc.__cause__
        moves = leave_claimed(moves, claimed)
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
        if state.approval is None and ctx.query(next_planned(ctx.run_id)) is None:
            # a replay or fork of another run's checkpoint after its plan: the
            # planned moves (tidy_moves rows) are that run's, and asking would
            # promise moves this run cannot make
            raise RunCannotContinueError(
                f"this tidy run continues another run's checkpoint taken after its plan: "
                f"the {state.planned} planned moves belong to that run, so there is nothing "
                f"here to approve. Start a new tidy of {state.folder} to plan it again."
            )
        reply = ctx.interrupt(
            approval_prompt(state, timeout_s), timeout_s=timeout_s, choices=("yes", "no")
        )
        if isinstance(reply, str) and is_affirmative(reply):
            # committed with the approval: a run stopped before its moves are
            # all queued shows them approved, not waiting for approval
            ctx.write(approve_planned(ctx.run_id))
        return {"approval": reply if isinstance(reply, str) else json.dumps(reply)}

    def apply_one(state: TidyState, ctx: StepContext) -> dict[str, Any]:
        if not is_affirmative(state.approval):
            ctx.write(skip_planned(ctx.run_id, f"{NOT_APPROVED} (answer {state.approval!r})"))
            return {"cursor": state.planned}
        move = ctx.query(next_planned(ctx.run_id))
        if move is None or move.dst is None:  # fewer rows than counted: nothing left
            return {"cursor": state.planned}
        if move.reason != APPROVED:  # approved before rows recorded it
            ctx.write(approve_planned(ctx.run_id))
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
        text = json.dumps(entries, indent=2, ensure_ascii=False) + "\n"
        try:
            fd = open_dir(target.parent)
        except (Refused, OSError) as exc:
            raise InputError(
                f"cannot write the undo list in {target.parent}: {exc}; the folder was moved "
                "or replaced after the plan, so its moves are refused"
            ) from exc
        try:
            write_private(fd, target.name, text, tag=ctx.run_id)
        finally:
            os.close(fd)
        return {"undo_path": str(target)}

    return (
        FlowBuilder(
            "tidy",
            TidyState,
            version="1",
            inputs=TidyInput,
            description="Sort a folder's files into Kind/Month subfolders once you approve "
            "the planned moves; an undo list is kept.",
            on_timed_out=record_timed_out,
            on_cancel=record_cancel,
        )
        .step("plan", plan)
        .step(APPROVE_STEP, approve)
        .loop(
            "apply",
            apply_one,
            until=lambda s: s.cursor >= s.planned,
            # moves queued, not files handled: a declined tidy (nothing
            # moved) showed "completed 50/50" with a full bar
            progress=lambda s: (s.queued, s.planned),
        )
        .step("undo", undo)
        .chain()
        .compile()
    )


class Entry(NamedTuple):
    """A name in a folder held open: ``dir_fd`` and a single-component ``name``."""

    dir_fd: int
    name: str


_MONTH = re.compile(r"\d{4}-\d{2}")


def planned_layout(src: Path, dst: Path) -> tuple[Path, str, str, str]:
    """``(folder, kind_dir, month, name)`` of a planned move, checked against
    the layout the plan makes: ``src`` at the top of ``folder`` and ``dst`` at
    ``<folder>/<Kind>/<YYYY-MM>/<name>``.

    Raises:
        Refused: anything else (a row edited to point elsewhere, ``..``, ...).
    """
    folder = src.parent
    if not src.is_absolute() or dst.parent.parent.parent != folder:
        raise Refused(f"{dst} is not <folder>/<Kind>/<YYYY-MM>/<name> inside {folder}")
    kind_dir, month, name = dst.parent.parent.name, dst.parent.name, dst.name
    if kind_dir not in KIND_FOLDERS.values() or not _MONTH.fullmatch(month):
        raise Refused(f"{dst} is not <folder>/<Kind>/<YYYY-MM>/<name> inside {folder}")
    for part in (src.name, name):
        problem = name_problem(part)
        if problem:
            raise Refused(problem)
    return folder, kind_dir, month, name


class FileMover:
    """The ``tidy.move`` outbox destination: performs one planned move.

    Before acting it reads the move's ``tidy_moves`` row (by the intent's
    idempotency key) and the file system, so a repeated or reconciled
    delivery never moves a file twice and never loses one:

    * the file is at its source and the destination is free: create the
      folders, rename with no replace -> ``{"moved": True}``;
    * the file is gone and the destination exists: the move happened before
      (a crash before the acknowledgement) -> ``{"moved": True, "already": True}``;
    * both exist, or neither: nothing is touched -> ``{"moved": False, "reason": ...}``;
    * the file is gone and another tidy run recorded the move to that
      destination (two runs planned the file before either queued it): not
      this run's -> ``{"moved": False, "reason": "moved by tidy run ..."}``.

    Every path is proven inside the folder when the move happens (no symbolic
    link followed from ``/`` to the destination folder; see the module
    docstring); otherwise, or when the source is no longer a regular file or
    a link in the folder now points at it, the row becomes ``refused`` with
    the reason and nothing moves. Other outcomes are recorded in the row
    (``moved``, or ``skipped`` with the reason).

    Args:
        store: the SQLite store holding ``tidy_moves`` (the dispatcher's store).
    """

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store

    def rename(self, src: Entry, dst: Entry) -> None:
        """The one file-system change: a rename that never replaces, made
        durable in both folders.

        Raises:
            Refused: the destination exists
                (:func:`~desktop_app.flows.confined.rename_noreplace`).
        """
        rename_noreplace(src.dir_fd, src.name, dst.dir_fd, dst.name)
        fsync_dir(dst.dir_fd)
        fsync_dir(src.dir_fd)

    def send(self, idempotency_key: str, payload: Any) -> dict[str, Any]:
        move = self.store.query(move_by_key(idempotency_key))
        if move is None or move.dst is None:
            return {"moved": False, "reason": "no queued move has this key"}
        if not isinstance(payload, dict) or (payload.get("src"), payload.get("dst")) != (
            move.src,
            move.dst,
        ):
            return {"moved": False, "reason": "the intent does not match the planned move"}
        if move.status in ("skipped", "refused"):
            return {"moved": False, "reason": move.reason or move.status}
        try:
            return self._move(idempotency_key, move.src, move.dst)
        except Refused as exc:
            return self._refuse(idempotency_key, str(exc), status="refused")
        except OSError as exc:
            return self._refuse(idempotency_key, f"cannot move: {exc.strerror or exc}")

    def _move(self, key: str, src_path: str, dst_path: str) -> dict[str, Any]:
        folder, kind_dir, month, name = planned_layout(Path(src_path), Path(dst_path))
        src_name = Path(src_path).name
        try:
            top = open_dir(folder)
        except FileNotFoundError:
            return self._refuse(key, f"the folder {folder} is gone; nothing moved")
        fds = [top]
        try:
            src_kind = kind_at(top, src_name)
            if src_kind is not None and src_kind != "a regular file":
                raise Refused(f"{src_path} is now {src_kind}; nothing moved")
            if src_kind is None:
                return self._found_or_gone(key, top, kind_dir, month, name, dst_path, fds)
            st = os.stat(src_name, dir_fd=top, follow_symlinks=False)
            if (st.st_dev, st.st_ino) in link_targets(top):
                raise Refused(_LINKED)
            fds.append(open_subdir(top, kind_dir, create=True, shown=str(folder / kind_dir)))
            fds.append(
                open_subdir(fds[-1], month, create=True, shown=str(folder / kind_dir / month))
            )
            self.rename(Entry(top, src_name), Entry(fds[-1], name))
        finally:
            for fd in fds:
                os.close(fd)
        self.store.write(record_outcome(key, True))
        return {"moved": True, "dst": dst_path}

    def _found_or_gone(
        self, key: str, top: int, kind_dir: str, month: str, name: str, dst: str, fds: list[int]
    ) -> dict[str, Any]:
        """The source is gone: moved before (its destination is there) or lost."""
        try:
            fds.append(open_subdir(top, kind_dir))
            fds.append(open_subdir(fds[-1], month))
        except FileNotFoundError:
            return self._refuse(key, GONE)
        if kind_at(fds[-1], name) is None:
            return self._refuse(key, GONE)
        other = self.store.query(moved_by_other(key, dst))
        if other is not None:  # two runs planned this file (a race of their plans): not ours
            return self._refuse(key, f"{MOVED_BY} {other}")
        self.store.write(record_outcome(key, True))
        return {"moved": True, "already": True, "dst": dst}

    def lookup(self, idempotency_key: str) -> dict[str, Any] | None:
        """A receipt when the move already happened (source gone, destination
        there, no link on the way), else ``None`` (the dispatcher then sends)."""
        move = self.store.query(move_by_key(idempotency_key))
        if move is None or move.dst is None or move.status in ("skipped", "refused"):
            return None
        try:
            folder, kind_dir, month, name = planned_layout(Path(move.src), Path(move.dst))
            fds = [open_dir(folder)]
            try:
                if kind_at(fds[0], Path(move.src).name) is not None:
                    return None
                fds.append(open_subdir(fds[0], kind_dir))
                fds.append(open_subdir(fds[-1], month))
                if kind_at(fds[-1], name) is None:
                    return None
            finally:
                for fd in fds:
                    os.close(fd)
        except (Refused, OSError):
            return None  # send() decides and records why
        self.store.write(record_outcome(idempotency_key, True))
        return {"moved": True, "already": True, "dst": move.dst}

    def _refuse(self, key: str, reason: str, status: str = "skipped") -> dict[str, Any]:
        self.store.write(record_outcome(key, False, reason, status=status))
        return {"moved": False, "reason": reason}


#: a cancel or an undo asks the file system whether a move withdrawn
#: mid-move (its process died) was made (``settle_withdrawn``)
register_lookup(DESTINATION, FileMover)

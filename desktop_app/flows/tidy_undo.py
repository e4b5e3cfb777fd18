"""Undo a tidy run: move its files back from its undo list.

The undo list (``<folder>/.flowdesk-tidy-undo-<run_id>.json``, written by the
tidy flow's ``undo`` step) is a JSON list of ``{"from": <folder>/<Kind>/<YYYY-MM>/<name>,
"to": <folder>/<name>}`` pairs. Each file goes back with the same guarantees
the forward moves have (:mod:`desktop_app.flows.confined`): every folder is
opened from a descriptor without following a symbolic link, and the rename
never replaces a file (``renameat2(RENAME_NOREPLACE)``), so a file put at the
old place since is never overwritten, whatever happens between a check and
the rename.

Afterwards the ``<Kind>/<YYYY-MM>`` folders the moves leave empty are removed
(``rmdir`` removes only an empty folder, atomically); a folder that still
holds anything, such as a file saved there since, stays.

Running it twice changes nothing the second time: a file no longer where
tidy put it is reported and left.

A tidy run completes once its moves are *queued* (outbox intents); a
dispatcher (this CLI, another one, the app, ``flowdesk agent``) makes them
later. :func:`undo_tidy_run` therefore first withdraws the run's moves not
made yet (``store.withdraw_intents``, a compare-and-set on each intent's
status: a dispatcher that claimed one a moment before loses its own
compare-and-set and never sends it), then moves back the files that did
move. A move a live dispatcher is making at that instant is waited for (up
to ``wait_s``); one still in flight then is left alone and reported as
outcome unknown, never moved back blindly nor sent after the undo unseen.

One undo of a run moves files at a time, as one dispatcher makes each
queued move: its ``tidy_undos`` row is its claim (:func:`claim_undo_of`,
judged by :func:`~desktop_app.flow.owners.holding`). A second undo started
meanwhile waits for the first to end, then finds back the files it moved
back (never says their old place is "taken" by themselves); an undo whose
process stopped is taken over, every file looked up where it is.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from desktop_app.errors import FlowdeskError, InputError
from desktop_app.errors import moved_to as moved_to_of
from desktop_app.flow.owners import holding, new_owner
from desktop_app.flows.confined import (
    DESTINATION_EXISTS,
    Refused,
    fsync_dir,
    kind_at,
    open_dir,
    open_subdir,
    rename_noreplace,
)
from desktop_app.flows.tidy import CANCELED, DESTINATION, planned_layout, undo_path
from desktop_app.store.domain.tidy import (
    TidyMove,
    UndoHolder,
    claim_undo,
    end_undo,
    moves_of_run,
    record_moved_back,
    withdraw_queued,
)
from desktop_app.words import plural

#: the error a withdrawn move's intent (and its ``tidy_moves`` row) records
WITHDRAWN = "withdrawn: the tidy run was undone before this move was made"
#: files an undo moves back between two records of them (``moved_back_at``)
BACK_BATCH = 25
#: seconds at most between two such records, however few files went back
BACK_EVERY_S = 0.5
#: seconds after its latest sign (its start, or its latest batch of files
#: recorded back) that the undo of an owner on another host is presumed
#: stopped, its claim taken over (an owner on this host is judged by its
#: process, whatever the time: :func:`~desktop_app.flow.owners.holding`)
UNDO_CLAIM_TTL_S = 300.0

if TYPE_CHECKING:
    from desktop_app.store.protocol import CheckpointStore


@dataclass(frozen=True)
class UndoReport:
    """What :func:`undo_tidy` did.

    Attributes:
        moved_back: files moved back to their old place.
        left: one line per file left where it is, with why.
        folders_removed: the emptied ``<Kind>/<YYYY-MM>`` and ``<Kind>``
            folders removed, as paths.
    """

    moved_back: int
    left: list[str]
    folders_removed: list[str] = field(default_factory=list)
    #: files already back at their old place (an earlier undo, or by hand)
    already_back: int = 0
    #: tidied folders kept because they still hold something, as paths
    folders_kept: list[str] = field(default_factory=list)
    #: queued moves withdrawn before they were made (their files never moved)
    withdrawn: int = 0
    #: files a live dispatcher was moving at the instant of the undo, left
    #: alone (outcome unknown: run the undo again once it is done)
    in_flight: list[str] = field(default_factory=list)
    #: files whose move was never made (they vanished before it, or a file
    #: was at their destination): nothing to undo, one line each with why
    never_moved: list[str] = field(default_factory=list)
    #: destinations (``from`` paths) of the files now back at their old
    #: place (moved back now, or found back)
    back: list[str] = field(default_factory=list)
    #: owner id of another undo of the run that was under way: this one
    #: waited for it to end (the files it moved back count ``already_back``)
    waited_for: str | None = None
    #: owner id of an earlier undo whose process stopped mid-way: its claim
    #: was taken over and every file looked up where it is
    took_over: str | None = None
    #: moves a cancel withdrew before this undo (their files never moved;
    #: the cancel said so: not counted in ``withdrawn`` again)
    withdrawn_by_cancel: int = 0


class UndoUnderWay(FlowdeskError):
    """Another live process is undoing the tidy run and did not end within
    the wait: this undo moved nothing (run it again once that one ended).

    Attributes:
        run_id: the tidy run.
        owner: owner id (``host:pid:nonce``) of the process undoing it.
    """

    def __init__(self, run_id: str, owner: str, waited_s: float) -> None:
        self.run_id, self.owner = run_id, owner
        super().__init__(
            f"tidy run {run_id} is being undone by {owner} (still under way after "
            f"{waited_s:g} s of waiting); this undo moved nothing. Run the undo again once "
            "that one has ended: it then finds the files that one moved back"
        )


def read_undo_list(undo_list: Path) -> list[tuple[str, str]]:
    """The ``(from, to)`` pairs of an undo list.

    Raises:
        InputError: the file is missing, unreadable, or not a list of
            ``{"from": str, "to": str}`` objects.
    """
    try:
        entries = json.loads(undo_list.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(
            f"the undo list {undo_list} does not exist (deleted, or the folder was moved); "
            "nothing was moved back: the files stay where tidy put them"
        ) from exc
    except (OSError, ValueError) as exc:
        raise InputError(
            f"cannot read the undo list {undo_list}: {exc}; nothing was moved back "
            "(restore the file from a backup, or move the files back by hand)"
        ) from exc
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("from"), str) and isinstance(e.get("to"), str)
        for e in entries
    ):
        raise InputError(
            f"{undo_list} is not a tidy undo list (a list of from/to pairs); nothing was "
            "moved back (restore the file from a backup, or move the files back by hand)"
        )
    return [(e["from"], e["to"]) for e in entries]


def undo_tidy(
    undo_list: Path,
    *,
    withdrawn: Collection[str] = (),
    in_flight: Collection[str] = (),
    never_moved: Mapping[str, str] | None = None,
) -> UndoReport:
    """Move a tidy run's files back from ``undo_list``, then remove the
    folders that left empty.

    A pair whose paths are not the tidy layout inside the undo list's own
    folder (an edited list) is refused and reported, never followed.

    Args:
        withdrawn: destinations (``from`` paths) of moves withdrawn before
            delivery: a file found at its old place is counted ``withdrawn``,
            not ``already_back``.
        in_flight: destinations of moves a live dispatcher may be making now:
            left alone, reported in ``in_flight``.
        never_moved: destination -> why, of moves the file mover recorded
            as never made (the file vanished before its move, or a file was
            at its destination): reported in ``never_moved`` and not touched
            (a file at such a destination is not one tidy put there).

    Raises:
        InputError: the undo list is missing or is not a tidy undo list.
    """
    return undo_pairs(
        undo_list.parent,
        read_undo_list(undo_list),
        withdrawn=withdrawn,
        in_flight=in_flight,
        never_moved=never_moved,
    )


def undo_pairs(
    folder: Path,
    pairs: Sequence[tuple[str, str]],
    *,
    withdrawn: Collection[str] = (),
    in_flight: Collection[str] = (),
    never_moved: Mapping[str, str] | None = None,
    on_back: Callable[[list[str]], None] | None = None,
    withdrawn_by_cancel: Collection[str] = (),
) -> UndoReport:
    """:func:`undo_tidy` of the ``(from, to)`` pairs of tidied folder
    ``folder`` (an undo list's, or a run's ``tidy_moves`` rows when it ended
    before writing one). Never raises for a file: each one not moved back
    is reported with why.

    Args:
        on_back: called with the destinations of the files found back (moved
            back now, or already back) as the undo goes: every
            :data:`BACK_BATCH` files or :data:`BACK_EVERY_S` seconds, and
            with the rest before the emptied folders are removed, so a
            record of them survives the process being killed mid-way. An
            error it raises stops the undo (the files back so far stay back).
        withdrawn_by_cancel: destinations of moves a cancel withdrew
            earlier: looked at as ``withdrawn`` (a dispatcher that died after
            the rename, before recording it, did move its file), a file found
            at its old place counted in ``withdrawn_by_cancel``.
    """
    moved, already, never, by_cancel, left = 0, 0, 0, 0, []
    batch: list[str] = []
    flushed = time.monotonic()

    def found_back(moved_to: str) -> None:
        nonlocal flushed
        back.append(moved_to)
        batch.append(moved_to)
        if on_back is not None and (
            len(batch) >= BACK_BATCH or time.monotonic() - flushed >= BACK_EVERY_S
        ):
            on_back(batch[:])
            batch.clear()
            flushed = time.monotonic()

    unknown: list[str] = []
    not_made: list[str] = []
    back: list[str] = []
    why_not = never_moved or {}
    emptied: set[tuple[str, str]] = set()
    for moved_to, came_from in pairs:
        name = Path(moved_to).name
        if moved_to in in_flight:
            unknown.append(
                f"{name}: a dispatcher was moving it at the instant of the undo; outcome "
                "unknown, left where it is (run the undo again once it is done)"
            )
            continue
        if moved_to in why_not:  # the mover recorded it never moved: nothing of ours is there
            not_made.append(f"{name}: never moved ({why_not[moved_to]}); nothing to undo")
            continue
        try:
            outcome = _move_back(folder, Path(moved_to), Path(came_from))
            if outcome == "moved":
                moved += 1
                found_back(moved_to)
            elif outcome == "already" and moved_to in withdrawn:
                never += 1
            elif outcome == "already" and moved_to in withdrawn_by_cancel:
                by_cancel += 1
            elif outcome == "already":
                already += 1
                found_back(moved_to)
            else:
                left.append(
                    f"{name}: no longer at {Path(moved_to).parent} nor at {folder}; "
                    "nothing to move back"
                )
        except Refused as exc:
            left.append(f"{name}: {exc}")
        except OSError as exc:
            left.append(
                f"{name}: cannot move {moved_to} back to {came_from}: {exc.strerror or exc}; "
                f"it stays at {moved_to} (once that is fixed, run the undo again)"
            )
        # its folders are looked at either way (removed when empty, else reported
        # kept), but only when the pair is tidy's own layout in this folder
        with contextlib.suppress(Refused):
            top_folder, kind_dir, month, _name = planned_layout(Path(came_from), Path(moved_to))
            if top_folder == folder:
                emptied.add((kind_dir, month))
    if on_back is not None and batch:
        on_back(batch)
    kept: list[str] = []
    removed = _remove_empty(folder, emptied, left, kept)
    return UndoReport(
        moved,
        left,
        removed,
        already,
        kept,
        never,
        unknown,
        not_made,
        back,
        withdrawn_by_cancel=by_cancel,
    )


def undo_summary(report: UndoReport, *, files: bool = False) -> str:
    """``"60 moved back, 2,940 queued moves withdrawn (never made)"``: the
    counts of a report, as the CLI says them (``files``: ``"60 files moved
    back, ..."``, as the app does)."""
    n = report.moved_back
    text = f"{plural(n, 'file')} moved back" if files else f"{n:,} moved back"
    if report.withdrawn:
        text += f", {plural(report.withdrawn, 'queued move')} "
        text += "withdrawn (never made)"
    if report.withdrawn_by_cancel:
        text += f", {report.withdrawn_by_cancel:,} withdrawn before by cancel (never made)"
    if report.already_back:
        text += f", {report.already_back:,} already back"
    if report.never_moved:
        text += f", {len(report.never_moved):,} never moved (nothing to undo)"
    if report.in_flight:
        text += f", {len(report.in_flight):,} in flight (outcome unknown)"
    return text


def withdraw_moves(
    store: CheckpointStore, run_id: str, *, wait_s: float = 30.0, poll_s: float = 0.05
) -> tuple[list[str], list[str]]:
    """Withdraw tidy run ``run_id``'s queued moves not made yet, so that no
    dispatcher ever makes them, and record them ``skipped`` in ``tidy_moves``.

    A move a live dispatcher is making (``sending``, claim live) is waited
    for, polling every ``poll_s`` seconds up to ``wait_s``; one that goes
    back to ``pending`` meanwhile (a failed attempt) is withdrawn then.

    Returns:
        ``(withdrawn, in_flight)``: destination paths of the moves withdrawn,
        and of those still being made when ``wait_s`` ran out.
    """
    from desktop_app.flow.outbox import claimant_is_alive, claimant_is_gone, settle_withdrawn

    withdrawn: list[str] = []
    deadline = time.monotonic() + wait_s
    while True:
        got = store.withdraw_intents(
            run_id, WITHDRAWN, presumed_dead=claimant_is_gone, presumed_alive=claimant_is_alive
        )
        # a move whose process died mid-move: made (its row now says moved,
        # and it is moved back below) or not (withdrawn with the others)
        got = settle_withdrawn(store, got)
        if got.withdrawn:
            store.write(withdraw_queued([i.intent_id for i in got.withdrawn], WITHDRAWN))
        withdrawn += [_dst(i.payload) for i in got.withdrawn if i.destination == DESTINATION]
        if not got.in_flight or time.monotonic() >= deadline:
            return withdrawn, [_dst(i.payload) for i in got.in_flight]
        time.sleep(poll_s)


def _dst(payload: object) -> str:
    return str(payload.get("dst")) if isinstance(payload, dict) else ""


def undo_tidy_run(store: CheckpointStore, run_id: str, *, wait_s: float = 30.0) -> UndoReport:
    """Undo tidy run ``run_id`` whole: withdraw its moves not made yet
    (:func:`withdraw_moves`), then move back the files that moved
    (:func:`undo_tidy`; a run that ended before writing its undo list, such
    as one canceled while its moves were queued, from its ``tidy_moves``
    rows), and record in ``tidy_moves`` when each file came back
    (``moved_back_at``, in batches as it goes: :func:`undo_pairs`'s
    ``on_back``), and in ``tidy_undos`` when the undo began and when it
    finished, so ``show`` says an undo cut short (the process killed) was
    interrupted and how many files are back. Moves that were never made (the file vanished
    before its move, or its destination was taken) are reported in
    ``never_moved``, not as files left; moves withdrawn by an undo or a
    cancel in ``withdrawn``. Running it again changes nothing. It claims
    the run's undo first (:func:`claim_undo_of`): another undo under way is
    waited for (up to ``wait_s`` seconds; ``waited_for``), a stopped one
    taken over (``took_over``). It undoes only the run's own moves (its
    ``tidy_moves`` rows): a pair of its undo list that is not one of them
    (an edited list) is reported in ``left``, never followed, and the undo
    list a replay or fork inherited in its state is not its own
    (:func:`own_undo_list`).

    Raises:
        UndoUnderWay: another undo of the run was still under way after
            ``wait_s`` seconds (nothing was moved back by this one).
        CheckpointNotFoundError: no such run.
        InputError: not a tidy run, no undo list yet, or the list is unreadable.
        UndoneElsewhere: ``db copy`` moved its queued moves to another database.
        NothingToUndo: it ended having moved nothing.
    """
    undo_list = undo_list_of(store, run_id)
    pairs = None if undo_list is None else read_undo_list(undo_list)
    withdrawn, in_flight = withdraw_moves(store, run_id, wait_s=wait_s)
    owner = new_owner()
    # one live undo of the run at a time, as one live dispatcher per move: a
    # second one waits for it, then finds back the files it moved back
    waited_for, took_over = claim_undo_of(store, run_id, owner, wait_s=wait_s)
    rows = store.query(moves_of_run(run_id))
    taken_back = (WITHDRAWN, CANCELED)
    never_moved = {
        m.dst: m.reason or m.status
        for m in rows
        if m.dst is not None and m.status in ("skipped", "refused") and m.reason not in taken_back
    }
    # a move a cancel withdrew is looked at too: one whose dispatcher died
    # after the rename, before recording it, did move its file
    by_cancel = {m.dst for m in rows if m.dst is not None and m.reason == CANCELED}
    if undo_list is None or pairs is None:
        folder = Path(rows[0].src).parent
        pairs = [(m.dst, m.src) for m in rows if m.dst is not None and _made_or_maybe(m)]
        foreign: list[str] = []
    else:
        folder = undo_list.parent
        # what the run may undo is its own moves, whatever its list says
        own = {(m.dst, m.src) for m in rows if m.dst is not None}
        foreign = [
            f"{Path(moved_to).name}: {moved_to} is not a move of tidy run {run_id} (its undo "
            "list was edited); left where it is"
            for moved_to, came_from in pairs
            if (moved_to, came_from) not in own
        ]
        pairs = [pair for pair in pairs if pair in own]

    def record(destinations: list[str]) -> None:
        store.write(record_moved_back(run_id, destinations, store.now()))

    try:
        report = undo_pairs(
            folder,
            pairs,
            withdrawn=set(withdrawn),
            in_flight=set(in_flight),
            never_moved=never_moved,
            on_back=record,
            withdrawn_by_cancel=by_cancel,
        )
    except BaseException:
        with contextlib.suppress(Exception):  # said as interrupted, not as under way
            store.write(end_undo(run_id, owner, None))
        raise
    store.write(end_undo(run_id, owner, store.now()))
    return replace(
        report, left=[*foreign, *report.left], waited_for=waited_for, took_over=took_over
    )


def claim_undo_of(
    store: CheckpointStore, run_id: str, owner: str, *, wait_s: float = 30.0, poll_s: float = 0.05
) -> tuple[str | None, str | None]:
    """Claim the undo of tidy run ``run_id`` for ``owner`` (``tidy_undos``,
    :func:`~desktop_app.store.domain.tidy.claim_undo`), by the rule of outbox
    claims and run leases (:func:`~desktop_app.flow.owners.holding`): an undo
    whose process runs on this host keeps its claim, however long it takes;
    one whose process is gone is taken over at once; one on another host
    after :data:`UNDO_CLAIM_TTL_S` seconds without a sign. While another
    undo holds it, polls every ``poll_s`` seconds up to ``wait_s``.

    Returns:
        ``(waited_for, took_over)``: owner ids of the live undo waited for,
        and of the stopped undo whose claim was taken over (each ``None``
        when there was none).

    Raises:
        UndoUnderWay: another undo still held it after ``wait_s`` seconds.
        StoreError: the store could not be written.
    """
    deadline = time.monotonic() + wait_s
    waited_for: str | None = None
    while True:
        now = store.now()
        taken: list[str] = []

        def may_take(holder: UndoHolder, now: float = now, taken: list[str] = taken) -> bool:
            if holding(holder.owner, holder.last_seen + UNDO_CLAIM_TTL_S, now) == "held":
                return False
            taken.append(holder.owner)
            return True

        holder = store.write(claim_undo(run_id, owner, now, may_take))
        if holder is None:
            return waited_for, (taken[-1] if taken else None)
        waited_for = holder.owner
        if time.monotonic() >= deadline:
            raise UndoUnderWay(run_id, holder.owner, wait_s)
        time.sleep(poll_s)


def _made_or_maybe(m: TidyMove) -> bool:
    """Whether a row's move was made, or may have been (queued, or withdrawn by a cancel)."""
    return m.status in ("queued", "moved") or m.reason in (WITHDRAWN, CANCELED)


def _move_back(folder: Path, moved_to: Path, came_from: Path) -> str:
    """Rename ``moved_to`` back to ``came_from``: ``"moved"``; ``"already"``
    when it is gone from there and a regular file is at ``came_from`` (moved
    back before); ``"gone"`` when it is in neither place. What it says of a
    file is what the file system showed last: a file that leaves
    ``moved_to`` between a look and the rename (moved by hand meanwhile) is
    looked up again, never reported as blocked by itself.

    Raises:
        Refused: the pair is not inside ``folder``'s tidy layout, the file is
            no longer a regular file, or its old place is taken (by another file:
            the file is still at ``moved_to`` after the old place was seen taken).
        OSError: the rename failed for another reason (its ``filename``: the
            file left where it is).
    """
    top_folder, kind_dir, month, name = planned_layout(came_from, moved_to)
    if top_folder != folder:
        raise Refused(f"{came_from} is not in {folder}, the folder of the undo list")
    top = open_dir(folder)
    fds = [top]
    try:
        try:
            fds.append(open_subdir(top, kind_dir))
            fds.append(open_subdir(fds[-1], month))
        except FileNotFoundError:
            return _found_back(top, came_from.name)
        kind = kind_at(fds[-1], name)
        if kind is None:
            return _found_back(top, came_from.name)
        if kind != "a regular file":
            raise Refused(f"{moved_to} is now {kind}; left where it is")
        if kind_at(top, came_from.name) is not None:
            if kind_at(fds[-1], name) is None:  # it left meanwhile: where is it now?
                return _found_back(top, came_from.name)
            raise Refused(
                f"{came_from} is taken; left at {moved_to} (move the file at {came_from} "
                "away and run the undo again)"
            )
        # the check above only words the common case; the rename itself refuses
        # a file that appears at the old place after it
        try:
            rename_noreplace(fds[-1], name, top, came_from.name)
        except (Refused, FileNotFoundError) as exc:
            if kind_at(fds[-1], name) is None:  # it left meanwhile: where is it now?
                return _found_back(top, came_from.name)
            if isinstance(exc, FileNotFoundError):
                raise OSError(exc.errno, exc.strerror, str(moved_to)) from exc
            if str(exc) == DESTINATION_EXISTS:
                raise Refused(
                    f"{came_from} is taken; left at {moved_to} (move the file at "
                    f"{came_from} away and run the undo again)"
                ) from exc
            raise
        fsync_dir(top)
        fsync_dir(fds[-1])
        return "moved"
    finally:
        for fd in fds:
            os.close(fd)


def _found_back(top: int, name: str) -> str:
    """``"already"`` when a regular file is at ``name`` in the folder ``top``, else ``"gone"``."""
    return "already" if kind_at(top, name) == "a regular file" else "gone"


def _remove_empty(
    folder: Path, touched: set[tuple[str, str]], left: list[str], kept: list[str]
) -> list[str]:
    """``rmdir`` each touched ``<Kind>/<YYYY-MM>``, then each ``<Kind>``, when
    empty; the paths removed. A folder that still holds something is added
    to ``kept`` (a ``<Kind>`` only when its touched months went); one that is
    gone stays gone; one that cannot be removed for another reason is added
    to ``left`` with why."""
    removed: list[str] = []
    try:
        top = open_dir(folder)
    except (Refused, OSError):
        return removed
    try:
        for kind_dir in sorted({k for k, _ in touched}):
            try:
                kind_fd = open_subdir(top, kind_dir)
            except (Refused, OSError):
                continue
            months_kept = False
            try:
                for month in sorted(m for k, m in touched if k == kind_dir):
                    shown = folder / kind_dir / month
                    outcome = _rmdir_if_empty(kind_fd, month, shown, left)
                    if outcome == "removed":
                        removed.append(str(shown))
                    elif outcome == "kept":
                        months_kept = True
                        kept.append(str(shown))
            finally:
                os.close(kind_fd)
            outcome = _rmdir_if_empty(top, kind_dir, folder / kind_dir, left)
            if outcome == "removed":
                removed.append(str(folder / kind_dir))
            elif outcome == "kept" and not months_kept:
                kept.append(str(folder / kind_dir))
        if removed:
            fsync_dir(top)
    finally:
        os.close(top)
    return removed


def _rmdir_if_empty(dir_fd: int, name: str, shown: Path, left: list[str]) -> str:
    """``"removed"``, ``"kept"`` (not empty), ``"gone"``, or ``"failed"`` (added to ``left``)."""
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return "kept"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return "gone"
        left.append(
            f"{shown}: the emptied folder was not removed: {exc.strerror or exc} "
            "(it holds none of the files; remove it by hand if you want it gone)"
        )
        return "failed"
    return "removed"


class UndoneElsewhere(InputError):
    """The run, or its queued moves, were moved to another database by
    ``flowdesk db copy``: a dispatcher there makes them, and the undo runs
    there (this file does not see what that database's dispatcher made).
    Nothing was moved back or withdrawn here.

    Attributes:
        run_id: the tidy run.
        moved_to: the database it moved to (``postgresql://host/db``, no
            password), the ``--db`` of the undo that works.
    """

    def __init__(self, run_id: str, moved_to: str) -> None:
        self.run_id, self.moved_to = run_id, moved_to
        super().__init__(
            f"run {run_id}'s queued moves were moved to {moved_to} by flowdesk db copy: a "
            "dispatcher there makes them, so it is undone there; nothing was moved back or "
            "withdrawn here"
        )


class NothingToUndo(InputError):
    """A tidy run ended having moved nothing: its undo is done already
    (``flowdesk undo`` says so and exits 0)."""


def undo_list_of(store: CheckpointStore, run_id: str) -> Path | None:
    """The undo list of tidy run ``run_id`` (from its latest checkpoint), or
    ``None`` when the run ended before writing one (canceled, or failed,
    while its moves were queued) but queued or made moves: then its
    ``tidy_moves`` rows say what to move back.

    Raises:
        CheckpointNotFoundError: no such run.
        InputError: it is not a tidy run, or it has no undo list yet (it
            waits for approval, or has not reached its ``undo`` step).
        UndoneElsewhere: ``db copy`` moved the run or its queued moves to
            another database (an ``InputError``).
        NothingToUndo: it ended having moved nothing (an ``InputError``).
    """
    run = store.get_run(run_id)
    if run.flow_name != "tidy":
        raise InputError(
            f"run {run_id} is a run of flow {run.flow_name!r}, not a tidy run; nothing to undo"
        )
    where = moved_to_of(run.lease_owner) or next(
        (i.moved_to for i in store.open_intents(run_id) if i.moved_to), None
    )
    if where is not None:
        raise UndoneElsewhere(run_id, where)
    latest = store.latest(run_id)
    path = None if latest is None else own_undo_list(latest.state.get("undo_path"), run_id)
    if path is not None:
        return path
    if run.status == "waiting":
        raise InputError(
            f"tidy run {run_id} waits for approval and has moved nothing; nothing to undo "
            f"(answer it with `flowdesk answer {run_id} no` to move nothing at all)"
        )
    if run.status in ("pending", "running"):
        raise InputError(
            f"tidy run {run_id} is {run.status} and has written no undo list yet; "
            "undo it once it has finished"
        )
    rows = store.query(moves_of_run(run_id))
    if any(m.dst is not None and m.status in ("queued", "moved") for m in rows):
        return None
    taken = sum(m.reason == CANCELED for m in rows)
    why = f" (the cancel withdrew its {plural(taken, 'queued move')})" if taken else ""
    meta = {} if latest is None else latest.meta
    source = meta.get("replayed_from") or meta.get("forked_from")
    if isinstance(source, str):  # its state, not its moves, came from there
        why += (
            f" (it continued from checkpoint {source}: the moves made before that are "
            "that run's, undone by undoing that run)"
        )
    raise NothingToUndo(f"tidy run {run_id} ({run.status}) moved nothing{why}; nothing to undo")


def own_undo_list(stated: object, run_id: str) -> Path | None:
    """``stated`` (a tidy run's state ``undo_path``) as a path when it is
    the undo list of run ``run_id`` itself (:func:`~desktop_app.flows.tidy.undo_path`
    of its folder and id), else ``None``: a run replayed or forked from a
    checkpoint taken after another run's ``undo`` step carries that run's
    ``undo_path`` in its state, but not that run's moves, so never its undo."""
    if not isinstance(stated, str):
        return None
    path = Path(stated)
    return path if path == undo_path(path.parent, run_id) else None

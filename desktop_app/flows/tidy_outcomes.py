"""What happened to each file of a tidy run, in words: the one source of the
per-file outcomes that ``flowdesk show``, ``flowdesk answer`` and the app's
tidy table print (from the run's ``tidy_moves`` rows; no Textual here).

Each row is one :data:`OUTCOMES` key: ``planned`` (waits for approval),
``approved`` (the person approved; its move is not queued yet: the run was
stopped mid-queueing, or is queueing it now),
``queued`` (approved, not made yet), ``moving`` (queued, and a live
process is making its move now), ``sending`` (queued, and its move
began but its end was not recorded, its process gone: it may have been
made), ``moved``, ``renamed`` (moved under another name: one was taken
in the kind folder when the plan was made),
``exists`` (not moved: a file appeared at its destination meanwhile),
``vanished`` (not moved: the file was gone when its move was made),
``withdrawn`` (an undo withdrew the move before it was made), ``canceled``
(the run was canceled before the move was made: withdrawn, or never
queued), ``withdrawn_by_cancel`` (``cancel`` withdrew the queued move after
the run had ended: never made), ``timed_out`` (planned, but the approval timed out: the run ended
``timed_out`` and never moves it), ``elsewhere`` (another tidy run had a queued move for the file
when this one planned), ``declined``
(the answer was not yes), ``stays`` (left in place from the start: a
download in progress, a linked file...), ``refused`` (it would have left the
folder or followed a link) or ``back`` (an undo put it back).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desktop_app.flows.confined import DESTINATION_EXISTS
from desktop_app.flows.tidy import (
    APPROVE_STEP,
    CANCELED,
    CANCELED_AFTER_END,
    CANCELED_UNQUEUED,
    GONE,
    MOVED_BY,
    NOT_APPROVED,
    QUEUED_BY,
    TIMED_OUT,
    is_affirmative,
)
from desktop_app.flows.tidy_undo import WITHDRAWN
from desktop_app.store.domain.tidy import APPROVED, TidyMove

if TYPE_CHECKING:
    from desktop_app.store.protocol import CheckpointStore
from desktop_app.textsafe import one_line
from desktop_app.words import plural

#: outcome key -> how a count of it reads (``"2 renamed on a clash"``), in the order listed
OUTCOMES: dict[str, str] = {
    "moved": "moved",
    "renamed": "renamed on a clash",
    "back": "moved back by undo",
    "queued": "queued (not moved yet)",
    "sending": "may have moved (its move began; known once delivered or looked up)",
    "moving": "being moved now (by a live process)",
    "planned": "planned (waits for approval)",
    "approved": "approved, not queued yet",
    "exists": "skipped (the target exists)",
    "vanished": "left (vanished before its move)",
    "withdrawn": "withdrawn by undo (never moved)",
    "canceled": "not moved (the run was canceled)",
    "withdrawn_by_cancel": "not moved (withdrawn by cancel after the run ended)",
    "timed_out": "not moved (the approval timed out)",
    "elsewhere": "left to another run (it had the move queued)",
    "declined": "not moved (not approved)",
    "stays": "left in place",
    "refused": "refused",
}


@dataclass(frozen=True)
class FileOutcome:
    """One file of a tidy run.

    Attributes:
        name: the file's name (in the tidied folder).
        kind: its kind (``images``, ``documents``...).
        outcome: an :data:`OUTCOMES` key.
        detail: where it went, relative to the folder (``Images/2026-12/a.jpg``),
            or why it stayed (the row's reason), or ``""``.
    """

    name: str
    kind: str
    outcome: str
    detail: str


#: the detail of a file a timed-out tidy planned (its row stays ``planned``)
def outcome_of(
    move: TidyMove,
    run_status: str | None = None,
    sending: Collection[str] = (),
    approved: bool = False,
    moving: Collection[str] = (),
) -> FileOutcome:
    """The outcome of one ``tidy_moves`` row (see the module docstring);
    ``run_status``, the run's stored status (``"timed_out"``...), when known:
    a row still ``planned`` of a run that timed out reads ``timed_out`` (as
    its rows were left by a Flowdesk that did not record a timeout in them).
    ``sending``: the keys of the run's outbox intents ``sending``: a
    ``queued`` row whose move is one of them reads ``sending`` (the move
    began, maybe by a process that died: it may have been made).
    ``moving``: those of them a live process is making now: such a row reads
    ``moving`` (being moved now, its outcome recorded when that process
    ends the move).
    ``approved``: the run's moves were approved (:func:`was_approved`): a
    row still ``planned`` reads ``approved``, as does one whose ``reason``
    is :data:`~desktop_app.store.domain.tidy.APPROVED`."""
    folder = str(Path(move.src).parent)
    where = os.path.relpath(move.dst, folder) if move.dst else ""
    reason = move.reason or ""
    if move.moved_back_at is not None:
        outcome, detail = "back", f"back from {where}" if where else ""
    elif move.status == "moved":
        renamed = move.dst is not None and Path(move.dst).name != Path(move.src).name
        outcome, detail = ("renamed" if renamed else "moved"), where
    elif move.status == "planned" and run_status == "timed_out":
        outcome, detail = "timed_out", TIMED_OUT
    elif move.status == "planned" and (move.reason == APPROVED or approved):
        outcome, detail = "approved", where
    elif move.status == "queued" and move.intent_key in moving:
        outcome, detail = "moving", where
    elif move.status == "queued" and move.intent_key in sending:
        outcome, detail = "sending", where
    elif move.status in ("planned", "queued"):
        outcome, detail = move.status, where
    elif reason == GONE:
        outcome, detail = "vanished", f"{Path(move.src).name} was gone when its move was made"
    elif reason == DESTINATION_EXISTS:
        outcome, detail = "exists", f"{where} exists already; nothing moved"
    elif reason == WITHDRAWN:
        outcome, detail = "withdrawn", reason
    elif reason == TIMED_OUT:
        outcome, detail = "timed_out", TIMED_OUT
    elif reason in (CANCELED, CANCELED_UNQUEUED):
        outcome, detail = "canceled", reason
    elif reason == CANCELED_AFTER_END:
        outcome, detail = "withdrawn_by_cancel", reason
    elif reason.startswith((QUEUED_BY, MOVED_BY)):
        outcome, detail = "elsewhere", reason
    elif reason.startswith(NOT_APPROVED):
        outcome, detail = "declined", reason
    elif move.status == "refused":
        outcome, detail = "refused", reason
    else:
        outcome, detail = "stays", reason
    return FileOutcome(Path(move.src).name, move.kind, outcome, detail)


def outcomes_of(
    moves: Sequence[TidyMove],
    run_status: str | None = None,
    sending: Collection[str] = (),
    moving: Collection[str] = (),
    answered_yes: bool = False,
) -> list[FileOutcome]:
    """:func:`outcome_of` of each row (of a run whose stored status is
    ``run_status``, when known; ``sending``: its intents' keys that are
    ``sending``, ``moving`` those of them a live process is making), in the
    rows' order; the run's ``planned`` rows read ``approved`` when
    :func:`was_approved` says so, or ``answered_yes`` (see
    :func:`approval_answered`)."""
    approved = answered_yes or was_approved(moves)
    return [outcome_of(m, run_status, sending, approved, moving) for m in moves]


def run_outcomes(
    store: CheckpointStore,
    run_id: str,
    moves: Sequence[TidyMove],
    sending: Collection[str] = (),
    moving: Collection[str] = (),
) -> list[FileOutcome]:
    """:func:`outcomes_of` tidy run ``run_id``'s rows ``moves``, judged with
    its stored status and a yes its latest checkpoint records that its
    approve step has not taken yet (:func:`approval_answered`): what
    ``flowdesk show`` and the app's tidy table say of each file."""
    answered = approval_answered(store.latest(run_id).meta)
    status = store.get_run(run_id).status
    return outcomes_of(moves, status, sending, moving, answered_yes=answered)


def approval_answered(meta: Mapping[str, Any]) -> bool:
    """Whether a tidy run's latest checkpoint (its ``meta``) records a yes to
    its approval that its ``approve`` step has not taken yet: the answer is
    saved first, then the step runs again and marks the rows approved in
    its own checkpoint, so a process stopped between the two (``kill -9``
    right after the answer) leaves the rows ``planned`` while the run no
    longer waits; its resume queues the moves."""
    answers = meta.get("answers")
    if not isinstance(answers, Mapping):
        return False
    # an interrupt's wait id is RUN:STEP:N (tidy's approve step is visited once)
    return any(
        wait_id.rsplit(":", 2)[-2:-1] == [APPROVE_STEP] and isinstance(v, str) and is_affirmative(v)
        for wait_id, v in answers.items()
    )


def was_approved(moves: Sequence[TidyMove]) -> bool:
    """True when the run's rows show its moves were approved: a row records
    the approval (:data:`~desktop_app.store.domain.tidy.APPROVED`), or a
    move was queued (only an approval queues one; a run approved by a
    Flowdesk that did not record approvals in its rows)."""
    return any(m.reason == APPROVED or m.intent_key is not None for m in moves)


def outcome_counts(outcomes: Sequence[FileOutcome], notes: Mapping[str, str] | None = None) -> str:
    """``"4 files: 2 moved, 1 renamed on a clash, 1 left (vanished before its
    move)"``: the count of each outcome present, in :data:`OUTCOMES` order,
    each followed by its note in ``notes`` (outcome key -> text, e.g.
    ``{"approved": " (queued when the run resumes: `flowdesk resume RUN`)"}``);
    ``"no files"`` for none."""
    if not outcomes:
        return "no files"
    counts = Counter(o.outcome for o in outcomes)
    said = notes or {}
    parts = [
        f"{counts[k]:,} {label}{said.get(k, '')}" for k, label in OUTCOMES.items() if counts[k]
    ]
    return f"{plural(len(outcomes), 'file')}: {', '.join(parts)}"


def outcome_lines(outcomes: Sequence[FileOutcome]) -> list[str]:
    """One line per file: ``"a.jpg  moved  Images/2026-12/a.jpg"``, names
    padded to the longest (capped at 40 characters). A name's control
    characters, newline and tab too, show as escapes
    (:func:`desktop_app.textsafe.one_line`): a file named ``"a\\nb.txt"``
    (tidy refuses it, and lists it) takes one line, not two, and is padded
    as shown."""
    names = [one_line(o.name) for o in outcomes]
    width = min(40, max((len(n) for n in names), default=0))
    label = max((len(OUTCOMES[o.outcome]) for o in outcomes), default=0)
    return [
        f"{n:{width}}  {OUTCOMES[o.outcome]:{label}}  {o.detail}".rstrip()
        for n, o in zip(names, outcomes, strict=True)
    ]


def was_undone(moves: Sequence[TidyMove]) -> float | None:
    """When an undo first put a file of the run back (UTC epoch seconds), or
    ``None`` when none was (not undone, or it moved nothing back)."""
    times = [m.moved_back_at for m in moves if m.moved_back_at is not None]
    return min(times) if times else None

"""Messages the app's thread workers post back to the UI thread.

``Message.post_message`` is thread-safe, so workers and the engine's event
subscriber use these instead of touching widgets.
"""

from __future__ import annotations

from typing import Any

from textual.message import Message
from textual.message_pump import MessagePump

from desktop_app.store.protocol import Wait


class EngineReady(Message):
    """The schema is applied and the engine is open."""


class StartupFailed(Message):
    """The database could not be prepared or opened; ``error`` says why."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class StartupWaiting(Message):
    """The database stayed locked by another process while it was opened,
    or its server could not be reached (``unreachable``); the app tries
    again (``error`` says what was met)."""

    def __init__(self, error: str, unreachable: bool = False) -> None:
        super().__init__()
        self.error = error
        self.unreachable = unreachable


class RunChanged(Message):
    """Something happened to a run (an engine event or a worker finished)."""

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id


class ProgressTick(Message):
    """New progress is waiting in the app's coalescing buffer."""


class RecoveryFinished(Message):
    """Launch recovery is over; ``summary`` is the text shown to the user,
    ``problem`` whether it tells of a failure or an unknown outcome."""

    def __init__(self, summary: str, problem: bool = False) -> None:
        super().__init__()
        self.summary = summary
        self.problem = problem


class WaitsLoaded(Message):
    """A run's pending waits, read in a worker (``error`` when the read
    failed), and the only answers some of them take (``choices``: wait id ->
    words, the checkpoint's ``meta["choices"]``, ``StepContext.interrupt``),
    and the run's status at that checkpoint (``None`` when not read)."""

    def __init__(
        self,
        waits: list[Wait],
        error: str | None = None,
        choices: dict[str, list[str]] | None = None,
        status: str | None = None,
    ) -> None:
        super().__init__()
        self.waits = waits
        self.error = error
        self.choices = choices or {}
        self.status = status


class AnswerAccepted(Message):
    """The answer to ``wait_id`` is saved; the run goes on in the app's worker."""

    def __init__(self, run_id: str, wait_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.wait_id = wait_id


class AnswerRefused(Message):
    """The engine refused the answer; nothing changed. ``error`` says why."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class OutboxDelivered(Message):
    """The app's outbox dispatcher delivered ``count`` intents."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count


class BranchRequested(Message):
    """A screen asks the app to replay (``changes`` is ``None``) or fork the
    checkpoint ``checkpoint_id`` as the new run ``run_id``.

    The app answers the sending screen with :class:`BranchFinished`.
    """

    def __init__(
        self,
        reply_to: MessagePump,
        checkpoint_id: str,
        run_id: str,
        changes: dict[str, Any] | None,
    ) -> None:
        super().__init__()
        self.reply_to = reply_to
        self.checkpoint_id = checkpoint_id
        self.run_id = run_id
        self.changes = changes


class BranchFinished(Message):
    """A replay or fork run has ended (``ok``: it ran; the app said how)."""

    def __init__(self, run_id: str, ok: bool) -> None:
        super().__init__()
        self.run_id = run_id
        self.ok = ok


class DatabaseAway(Message):
    """A store's try found the database server unreachable (posted from the
    thread that tried; ``error`` is what it met)."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class DatabaseBack(Message):
    """A read went through again after :class:`DatabaseAway`."""

"""What screens and widgets may use of the app, as Protocols.

Screens never import :mod:`desktop_app.app.main` (it imports them) nor
:mod:`desktop_app.app.controller` (it pushes them): they read shared state
(settings, the UI's store, the clock, the progress meter) and tell the user
things through :class:`Host`, and act on runs (start, resume, cancel,
answer, open...) through :attr:`Host.controller`, the :class:`Actions` that
:class:`~desktop_app.app.controller.Controller` implements. ``FlowdeskApp``
is the one class that provides :class:`Host`; :func:`host` is how a screen
gets it from ``self.app``. Other requests go to the app as messages
(:mod:`desktop_app.app.messages`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from textual.notifications import SeverityLevel

if TYPE_CHECKING:
    from textual.message_pump import MessagePump

    from desktop_app import bootstrap
    from desktop_app.app.progress import ProgressMeter
    from desktop_app.app.services import AppServices
    from desktop_app.cli.output import Hints
    from desktop_app.config import Settings
    from desktop_app.errors import ClockSkewError
    from desktop_app.flow import Engine
    from desktop_app.store.protocol import CheckpointStore, RunRecord
    from desktop_app.store.records import AgentRun

T = TypeVar("T")


class Actions(Protocol):
    """The domain actions screens ask for (call on the UI thread); each
    says why not as a notice when it cannot act."""

    def require_writer(self) -> Engine | None:
        """The engine for an action that writes, or ``None`` (said why)."""

    def require_engine(self) -> Engine | None:
        """The engine, or ``None`` after saying why there is none yet."""

    def new_digest(self) -> None:
        """Ask for a folder, then start a ``digest`` run on it."""

    def start_flow(self, flow_name: str, state: dict[str, Any]) -> str | None:
        """Start a run of a registered flow in a worker; its run id."""

    def resume(self, run_id: str, shown: RunRecord | None = None) -> None:
        """Resume a run in a worker (``Engine.resume``); ``shown``: the run
        as the screen shows it."""

    def cancel(self, run: RunRecord) -> None:
        """Ask, then cancel the run in a worker (``Engine.cancel``)."""

    def cancel_agent(self, run: AgentRun) -> None:
        """Ask, then cancel the agent run in a worker (``Agent.cancel``)."""

    def answer(self, run: RunRecord) -> None:
        """Show the answer dialog of a waiting run."""

    def send_answer(self, screen: MessagePump, run_id: str, wait_id: str, value: Any) -> str:
        """Answer ``wait_id`` in a worker (``Engine.resume_with``); why not, or ``""``."""

    def open_run(self, run_id: str) -> None:
        """A flow run's detail screen."""

    def open_thread(self, thread_id: str) -> None:
        """A LangGraph thread's screen."""

    def open_agent_run(self, run_id: str, *, resume: bool = False) -> None:
        """An agent run's conversation (resumed there with ``resume``)."""

    def open_output(self, run_id: str) -> None:
        """Open what the run made with the system opener."""

    def copy_run_id(self, run_id: str) -> None:
        """Put ``run_id`` on the clipboard."""

    def undo_tidy(self, run_id: str) -> None:
        """Ask, then move a tidy run's files back (in a worker)."""


class Host(Protocol):
    """The app as screens see it (``FlowdeskApp`` provides it)."""

    #: seconds between the app's checks of the store's ``data_version``
    POLL_S: float
    settings: Settings
    #: builds every command the app suggests (the CLI's one rule)
    hints: Hints
    services: AppServices | None
    engine: Engine | None
    #: the UI thread's own connection (reads only)
    reader: CheckpointStore | None
    schema: bootstrap.SchemaReport | None
    #: why the database could not be opened, if it could not
    startup_error: str | None
    #: the engine's clock is skewed (read-only until a relaunch), or ``None``
    clock_skew: ClockSkewError | None
    #: what the banner says while the database file is no longer the one at
    #: its path (moved, deleted, replaced): actions that write are refused
    file_gone: str | None
    #: what the banner says while the database server cannot be reached
    #: (``None``: reachable, or a file)
    away: str | None
    #: the launch recovery's summary, once it is over
    recovery: str | None
    meter: ProgressMeter
    #: runs whose question (and plan) the answer dialog showed this session
    plans_shown: set[str]
    #: the domain actions: start, resume, cancel, answer, fork, open...
    controller: Actions

    def say(self, message: str, severity: SeverityLevel = "information") -> None:
        """Notify the user and keep the notice (thread-safe)."""

    def read(self, op: Callable[[CheckpointStore], T], *, quiet: bool = False) -> T | None:
        """Run a read on the UI's store; a Flowdesk error becomes a notice and ``None``."""

    def now(self) -> float:
        """The engine's clock (UTC epoch seconds)."""

    def store_version(self, *, quiet: bool = True) -> int | None:
        """The store's ``data_version``, or ``None`` when it cannot be read."""

    def chat_model(self) -> Any:
        """The chat model for agent runs, or ``None`` (call on a worker thread)."""


def host(app: object) -> Host:
    """``app`` (a screen's ``self.app``) as the :class:`Host` it is."""
    return cast(Host, app)

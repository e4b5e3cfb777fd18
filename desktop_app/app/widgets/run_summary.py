"""The side panel of the runs screen on a wide terminal: the selected run's summary."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from desktop_app.app.format import STATUS_STYLES, ago, local_when, progress, short_id
from desktop_app.app.host import host
from desktop_app.app.progress import Pace
from desktop_app.cli.output import Hints, moved_line
from desktop_app.errors import ENDED_RUN_STATUSES, CheckpointCorruptError, CheckpointDecodeError
from desktop_app.flow.engine import Engine
from desktop_app.runs_view import (
    INTERRUPTED,
    MOVED,
    display_status,
    stopped_holder,
    stopped_holder_words,
)
from desktop_app.store.protocol import Checkpoint, CheckpointStore, RunRecord
from desktop_app.words import duration

#: what an interrupted run's status says (in the side panel and the run's detail)
RESUME_HINT = "press r to resume"
#: ... when its flow changed since it started (``r`` refuses it as it is)
CHANGED_HINT = "its flow changed since it started: r once its code is restored, c cancels it"


def interrupted_hint(
    run: RunRecord,
    engine: Engine | None,
    damage: CheckpointDecodeError | None = None,
    *,
    opened: bool = False,
) -> str:
    """What an interrupted run's status says: :data:`RESUME_HINT`,
    :data:`CHANGED_HINT` when ``engine`` has the run's flow but not at the
    version the run started with (the launch report offers its fork), or
    :func:`damaged_hint` when reading its latest checkpoint raised
    ``damage`` (``r`` would refuse it)."""
    if damage is not None:
        return damaged_hint(damage, opened=opened)
    changed = engine is not None and engine.version_refusal(run) is not None
    return CHANGED_HINT if changed else RESUME_HINT


def damaged_hint(
    damage: CheckpointDecodeError, *, opened: bool = False, ended: bool | None = None
) -> str:
    """What the app says of a run whose latest checkpoint cannot be read
    (``damage``: changed or deleted outside Flowdesk, or no longer fitting
    the state model): what is wrong, then :func:`damaged_keys`."""
    said = f"its checkpoint at revision {damage.revision} "
    if not isinstance(damage, CheckpointCorruptError):
        said += "no longer fits its flow's state model"
    else:
        said += "is missing" if damage.missing else "was changed outside Flowdesk"
    keys = damaged_keys(damage, opened=opened, ended=ended)
    return said + (": " + keys if keys else "")


def damaged_keys(
    damage: CheckpointDecodeError, *, opened: bool = False, ended: bool | None = None
) -> str:
    """What works in the app on a run whose latest checkpoint cannot be
    read (``damage``), the app's form of the commands ``show`` prints: the
    run's checkpoints, p to replay and f to fork an intact earlier revision,
    c to cancel (r and a refuse it); for a checkpoint that no longer fits
    the state model, changing the model back. ``""`` when nothing does.
    ``opened``: said in the run's own screen (no "open the run" first);
    ``ended``: the run ended, so no cancel is offered (``None``: as the
    error's ``run_status`` says, when it has one)."""
    if ended is None:
        ended = getattr(damage, "run_status", None) in ENDED_RUN_STATUSES
    cancel = "press c to cancel the run"
    if not isinstance(damage, CheckpointCorruptError):  # every revision is read by one model
        return "change the model back to what the run stored" + ("" if ended else f", or {cancel}")
    keys = []
    if damage.readable is not None:
        keys.append(
            ("" if opened else "open the run (enter), ")
            + f"select revision {damage.readable} in Checkpoints and press p to replay "
            "from it or f to fork it"
        )
    if not ended:
        keys.append(cancel)
    return ", or ".join(keys)


def latest_or_damage(store: CheckpointStore, run_id: str) -> Checkpoint | CheckpointDecodeError:
    """``run_id``'s latest checkpoint, or the error reading it raised when
    it cannot be read (damaged, or no longer fitting its model): what the
    app shows of the run either way. Other errors propagate."""
    try:
        return store.latest(run_id)
    except CheckpointDecodeError as exc:
        return exc


def damaged_in_app(damage: CheckpointDecodeError) -> str:
    """The error of a run that could not go on because its latest
    checkpoint cannot be read (what ``resume`` says), followed by the keys
    that work on it in the app (:func:`damaged_hint`), where the commands
    the error names are not at hand."""
    return f"{damage} In the app: {damaged_hint(damage)}."


def summary_text(
    run: RunRecord,
    latest: Checkpoint | CheckpointDecodeError | None,
    pace: Pace | None,
    now: float,
    hints: Hints | None = None,
    engine: Engine | None = None,
) -> Text:
    """Id, flow, status (judged at ``now``: :func:`display_status`; an
    interrupted run says how to resume it, a moved one where ``db copy``
    moved it and the command that shows it there, with ``hints``), progress with rate and ETA while
    it runs, times (local, and how long ago), the step it is at or waits
    in, and its error. ``latest``: the run's latest checkpoint, the error
    reading it raised (:func:`latest_or_damage`: the keys that work on the
    run are said), or ``None`` (not read)."""
    damage = latest if isinstance(latest, CheckpointDecodeError) else None
    checkpoint = None if isinstance(latest, CheckpointDecodeError) else latest
    status = display_status(run, now)
    running = status == "running"
    text = Text()
    text.append(f"{run.flow_name} run\n", style="bold")
    text.append(f"{run.run_id}\n", style="dim")
    text.append("\nStatus   ", style="bold")
    text.append(status, style=STATUS_STYLES.get(status, ""))
    text.append(f" — {interrupted_hint(run, engine, damage)}\n" if status == INTERRUPTED else "\n")
    if damage is not None and status != INTERRUPTED:
        ended = run.status in ENDED_RUN_STATUSES
        text.append(f"         {damaged_hint(damage, ended=ended)}\n", style="red")
    if status in ("running", "pending") and (pid := stopped_holder(run)) is not None:
        text.append(f"         {stopped_holder_words(pid)}\n", style="yellow")
    moved = moved_line(hints or Hints(None, None), run.run_id, run.lease_owner)
    if status == MOVED and moved is not None:
        text.append(f"         {moved}\n")
    done_total = (pace.done, pace.total) if pace is not None else run.progress
    if done_total is not None:
        text.append("Progress ", style="bold")
        text.append(f"{progress(done_total)}\n")
        if pace is not None:
            style = "dim" if status == INTERRUPTED else "green"
            text.append(f"         {pace.bar(20)}\n", style=style)
            if running and pace.rate_text():
                text.append(f"         {pace.rate_text()}\n")
    text.append("Started  ", style="bold")
    text.append(f"{local_when(run.created_at)}\n         {ago(run.created_at, now)}\n")
    text.append("Updated  ", style="bold")
    text.append(f"{ago(run.updated_at, now)}\n")
    if running:
        text.append("Elapsed  ", style="bold")
        text.append(f"{duration(now - run.created_at)}\n")
    if checkpoint is not None:
        if checkpoint.frontier and run.status not in ENDED_RUN_STATUSES:  # none comes
            text.append("Next     ", style="bold")
            text.append(", ".join(checkpoint.frontier) + "\n")
        if checkpoint.waits:
            text.append("Waits    ", style="bold")
            waits = checkpoint.waits
            text.append(f"{len(waits)} ({', '.join(w.kind for w in waits)})\n")
        text.append("Revision ", style="bold")
        text.append(f"{checkpoint.revision}\n")
    if run.error:
        text.append("\nError\n", style="bold red")
        text.append(run.error)
    text.append("\n\nenter opens the run", style="dim")
    return text


class RunSummary(Static):
    """The selected run's summary (shown only on a wide terminal)."""

    run_id: str | None = None
    #: what :meth:`show` was last given (``None``: no run), for :meth:`refresh_times`
    _shown: tuple[RunRecord, Checkpoint | CheckpointDecodeError | None, Pace | None] | None = None
    _text = ""

    def show(
        self,
        run: RunRecord | None,
        latest: Checkpoint | CheckpointDecodeError | None,
        pace: Pace | None,
        now: float,
    ) -> None:
        self.run_id = run.run_id if run is not None else None
        if run is None:
            self._shown = None
            self._text = ""
            self.update(Text("No run selected.", style="dim"))
        else:
            self._shown = (run, latest, pace)
            self._draw(now)

    def show_other(self, run_id: str, kind: str, status: str) -> None:
        """An agent run's or a LangGraph thread's row (``kind``: ``agent`` or
        ``langgraph``; ``status`` as the table shows it), whose summary is
        what its own view opens to."""
        self.run_id = None
        self._shown = None
        what = "LangGraph thread" if kind == "langgraph" else "Agent run"
        opens = "its checkpoints" if kind == "langgraph" else "its conversation"
        text = Text()
        text.append(f"{what} ", style="bold")
        text.append(f"{short_id(run_id)}\n")
        text.append("Status   ", style="bold")
        text.append(f"{status}\n")
        text.append(f"\nenter opens {opens}", style="dim")
        self._text = text.plain
        self.update(text)

    def refresh_times(self, now: float) -> None:
        """Redraw the shown run's relative times ("Updated 32 s ago") at
        ``now`` (UTC epoch seconds), with no read: they stopped at the
        value of the last selection change ("6 s ago" while the table said
        32 s). Only redrawn when the text changed."""
        if self._shown is not None:
            self._draw(now)

    @property
    def text(self) -> str:
        """The summary shown, as plain text (``""``: no run)."""
        return self._text

    def _draw(self, now: float) -> None:
        assert self._shown is not None
        flowdesk = host(self.app)
        text = summary_text(*self._shown, now, flowdesk.hints, flowdesk.engine)
        if text.plain != self._text:
            self._text = text.plain
            self.update(text)

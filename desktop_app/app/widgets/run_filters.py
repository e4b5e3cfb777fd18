"""The runs filter bar: search (run id or its first 4+ characters, flow
name, or flow key), kind (flow or agent runs), status, flow, tenant,
session. Esc (or ``/`` again) hides the bar and clears the filter: a hidden
filter would leave the table short with no visible reason.

The search text names a flow when it is a known flow's name (any case), or
the start of exactly one (``tid`` names ``tidy``): that flow's runs are
listed (one bounded ``list_runs`` with ``flow_name``), and agent runs whose
agent's name starts with it (the flow column shows it).

Agent runs are filtered in the flow vocabulary (status ``completed`` finds
``done`` agent runs; the flow filter matches the agent's name); a tenant or
session filter shows flow runs only (agent runs have no such columns), and an
agent run started by a flow run (a child) is left to that run's detail.

Every filter maps onto an argument of ``CheckpointStore.list_runs`` (or
``get_run`` for an exact run id), so a filtered page costs one bounded
query, like an unfiltered one. A short run id (a prefix of at least
:data:`MIN_PREFIX` characters, as the table shows 8) is ``list_runs``'s
``run_id_prefix``: a range read of the index on the run id, among every run
of the scope however many there are.

Statuses ``interrupted`` and ``moved`` are no stored statuses but ones the
table shows (:func:`desktop_app.runs_view.display_status`), as ``flowdesk
runs --status`` takes them: ``interrupted`` reads the ``pending`` and
``running`` runs, ``moved`` the runs that have not ended (those ``flowdesk db
copy`` moved to PostgreSQL), each within the newest :data:`SHOWN_WINDOW`, and
keeps those shown with that status.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol, cast

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Input, Select

from desktop_app.integrations.langgraph.threads import Thread, list_threads
from desktop_app.runs_view import ENDED, INTERRUPTED, MOVED, agent_status_as_flow, display_status
from desktop_app.store.protocol import (
    RUN_STATUSES,
    CheckpointStore,
    RunRecord,
    RunStatus,
)
from desktop_app.store.records import AgentRun

RunKindFilter = Literal["flow", "agent", "langgraph"]
#: a status the filter offers: a stored one, or ``interrupted`` or ``moved`` (as shown)
StatusFilter = RunStatus | Literal["interrupted", "moved"]
#: the statuses only shown, never stored -> the stored statuses a run shown so may have
SHOWN_ONLY: dict[str, tuple[RunStatus, ...]] = {
    INTERRUPTED: ("pending", "running"),
    MOVED: tuple(s for s in RUN_STATUSES if s not in ENDED),
}
#: what the status select offers
STATUSES: tuple[str, ...] = (*RUN_STATUSES, *SHOWN_ONLY)
#: what the kind select offers
KINDS: tuple[RunKindFilter, ...] = ("flow", "agent", "langgraph")


class AgentLister(Protocol):
    def list(
        self, statuses: Sequence[str] | None = None, agent: str | None = None
    ) -> list[AgentRun]: ...


#: Seconds of no typing after which a filter field's text applies.
TYPING_S = 0.3
#: Fewest characters of a run id the search takes as a prefix.
MIN_PREFIX = 4
#: Newest runs (after the other filters) read for status ``interrupted`` or
#: ``moved`` (no stored status: each is judged as the table shows it).
SHOWN_WINDOW = 20_000


def is_id_prefix(text: str) -> bool:
    """Whether ``text`` may be the start of a run id (4 or more characters, no spaces)."""
    return len(text) >= MIN_PREFIX and not any(c.isspace() for c in text)


@dataclass(frozen=True)
class RunFilter:
    """What the runs table shows; empty fields do not filter."""

    search: str = ""
    status: StatusFilter | None = None
    flow: str | None = None
    tenant: str = ""
    session: str = ""
    kind: RunKindFilter | None = None

    @property
    def active(self) -> bool:
        return self != RunFilter()

    def named_flow(self, known: Iterable[str]) -> str | None:
        """The flow of ``known`` the search text names: the one whose name it
        is (any case), else the only one whose name starts with it; ``None``
        when it names none (or the flow filter chose another flow)."""
        text = self.search.casefold()
        if not text:
            return None
        names = sorted(set(known))
        exact = [n for n in names if n.casefold() == text]
        starts = [n for n in names if n.casefold().startswith(text)]
        found = exact[0] if exact else starts[0] if len(starts) == 1 else None
        return found if self.flow in (None, found) else None

    def describe(self) -> str:
        """``status=failed flow=digest`` (``""`` when nothing filters)."""
        parts = []
        if self.kind:
            parts.append(f"kind={self.kind}")
        if self.search:
            parts.append(f"id, flow or key={self.search}")
        if self.status:
            parts.append(f"status={self.status}")
        if self.flow:
            parts.append(f"flow={self.flow}")
        if self.tenant:
            parts.append(f"tenant={self.tenant}")
        if self.session:
            parts.append(f"session={self.session}")
        return " ".join(parts)

    def list_runs(
        self,
        store: CheckpointStore,
        *,
        limit: int,
        offset: int,
        flow_key: str | None = None,
        run_id_prefix: str | None = None,
    ) -> list[RunRecord]:
        """One bounded ``list_runs`` (newest first) with every filter but the
        search text (``interrupted`` and ``moved``: see the module's docstring)."""
        if self.status in SHOWN_ONLY:
            now = store.now()
            window = replace(self, status=None)._list(
                store, SHOWN_ONLY[self.status], SHOWN_WINDOW, 0, flow_key, run_id_prefix
            )
            shown = [r for r in window if display_status(r, now) == self.status]
            return shown[offset : offset + limit]
        statuses = None if self.status is None else (cast(RunStatus, self.status),)
        return self._list(store, statuses, limit, offset, flow_key, run_id_prefix)

    def _list(
        self,
        store: CheckpointStore,
        statuses: tuple[RunStatus, ...] | None,
        limit: int,
        offset: int,
        flow_key: str | None,
        run_id_prefix: str | None = None,
    ) -> list[RunRecord]:
        return store.list_runs(
            statuses=statuses,
            flow_name=self.flow,
            limit=limit,
            offset=offset,
            newest_first=True,
            tenant_id=self.tenant or None,
            session_id=self.session or None,
            flow_key=flow_key,
            run_id_prefix=run_id_prefix,
        )

    def by_prefix(self, store: CheckpointStore, *, limit: int, offset: int = 0) -> list[RunRecord]:
        """At most ``limit`` runs passing the other filters whose id starts
        with the search text, newest first (every run of the scope is
        searched: one range read of the index on the run id)."""
        if not is_id_prefix(self.search):
            return []
        return self.list_runs(store, limit=limit, offset=offset, run_id_prefix=self.search)

    @property
    def wants_agents(self) -> bool:
        """Whether agent runs can pass (not with another kind)."""
        return self.kind in (None, "agent")

    @property
    def wants_flows(self) -> bool:
        return self.kind in (None, "flow")

    def threads(self, store: CheckpointStore) -> list[Thread]:
        """LangGraph threads passing the filters (their ExecutionContext ids
        for tenant and session; ``graph`` as their flow; their status as the
        table shows it), any order."""
        if self.kind not in (None, "langgraph") or self.flow not in (None, "graph"):
            return []
        now = time.time()
        return [
            t
            for t in list_threads(store, store.scope)
            if (self.status is None or self._status_is(t.status, t, now))
            and (not self.tenant or t.context.get("tenant_id") == self.tenant)
            and (not self.session or t.context.get("session_id") == self.session)
            and (
                not self.search
                or (is_id_prefix(self.search) and t.thread_id.startswith(self.search))
            )
        ]

    def agent_runs(self, agents: AgentLister) -> list[AgentRun]:
        """Top-level agent runs passing the filters (status in the flow
        vocabulary; tenant and session from their ExecutionContext ids; the
        search text as a run-id prefix or the start of the agent's name),
        any order."""
        if not self.wants_agents:
            return []
        now = time.time()
        return [
            r
            for r in agents.list(agent=self.flow)
            if r.parent_run_id is None
            and (self.status is None or self._status_is(agent_status_as_flow(r.status), r, now))
            and (not self.tenant or r.context.get("tenant_id") == self.tenant)
            and (not self.session or r.context.get("session_id") == self.session)
            and (
                not self.search
                or (is_id_prefix(self.search) and r.run_id.startswith(self.search))
                or r.agent.casefold().startswith(self.search.casefold())
            )
        ]

    def _status_is(self, status: str, run: RunRecord | AgentRun | Thread, now: float) -> bool:
        """Whether ``run`` (``status`` in the flow vocabulary) has the status wanted."""
        if self.status in SHOWN_ONLY:
            return display_status(run, now) == self.status
        return status == self.status

    def matches(self, run: RunRecord) -> bool:
        """Whether ``run`` passes every filter but the search text."""
        context = run.context or {}
        return (
            (self.status is None or self._status_is(run.status, run, time.time()))
            and (self.flow is None or run.flow_name == self.flow)
            and (not self.tenant or context.get("tenant_id") == self.tenant)
            and (not self.session or context.get("session_id") == self.session)
        )


class RunFilters(Horizontal):
    """The filter bar above the runs table (hidden until ``/`` or ``f``).

    Posts :class:`RunFilters.Changed` when a select changes or enter is
    pressed in a text field (not on every keystroke: a flow-key search is
    not indexed, so it is asked once per enter).
    """

    # one row of compact fields (no borders), each as wide as its longest
    # choice, so none wraps at 80 columns (bordered, a 1fr select had 3
    # cells for its label: "sta/tus")
    DEFAULT_CSS = """
    RunFilters {
        display: none;
        height: auto;
        padding: 0 1;
        margin-bottom: 1;
    }
    RunFilters.-visible {
        display: block;
    }
    RunFilters > * {
        margin-right: 1;
    }
    RunFilters #filter-search {
        width: 2fr;
        min-width: 16;
    }
    RunFilters #filter-status {
        width: 14;
    }
    RunFilters #filter-kind {
        width: 12;
    }
    RunFilters #filter-flow {
        width: 1fr;
        min-width: 10;
    }
    RunFilters #filter-tenant, RunFilters #filter-session {
        width: 1fr;
        min-width: 7;
    }
    """

    BINDINGS = [Binding("escape", "close", "Close filters")]

    class Changed(Message):
        def __init__(self, value: RunFilter) -> None:
            super().__init__()
            self.value = value

    class Closed(Message):
        pass

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._flows: tuple[str, ...] = ()
        self._typing: Timer | None = None
        #: the filter last applied (typing that changes nothing reads nothing)
        self._applied = RunFilter()

    def compose(self) -> ComposeResult:
        yield Input(placeholder="run id, flow or key", id="filter-search", compact=True)
        yield Select(
            [(s, s) for s in STATUSES],
            prompt="status",
            allow_blank=True,
            id="filter-status",
            compact=True,
        )
        yield Select(
            [(k, k) for k in KINDS], prompt="kind", allow_blank=True, id="filter-kind", compact=True
        )
        yield Select([], prompt="flow", allow_blank=True, id="filter-flow", compact=True)
        yield Input(placeholder="tenant", id="filter-tenant", compact=True)
        yield Input(placeholder="session", id="filter-session", compact=True)

    @property
    def is_open(self) -> bool:
        return self.has_class("-visible")

    def open(self) -> None:
        self.add_class("-visible")
        self.query_one("#filter-search", Input).focus()

    def action_close(self) -> None:
        """Hide the bar and clear the filter (a filter out of sight would
        leave the table short with no visible reason)."""
        self.clear()
        self.remove_class("-visible")
        self.post_message(self.Closed())

    def clear(self) -> None:
        """Empty every field and select; the table shows every run again."""
        for field in self.query(Input):
            field.value = ""
        for select in self.query(Select):
            select.clear()
        self._apply()

    def set_flows(self, names: Iterable[str]) -> None:
        """Offer these flow names (the current choice is kept)."""
        flows = tuple(sorted(set(names)))
        if flows == self._flows:
            return
        self._flows = flows
        select: Select[str] = self.query_one("#filter-flow", Select)
        current = select.value
        select.set_options([(n, n) for n in flows])
        if isinstance(current, str) and current in flows:
            select.value = current

    @property
    def value(self) -> RunFilter:
        status = self.query_one("#filter-status", Select).value
        flow = self.query_one("#filter-flow", Select).value
        kind = self.query_one("#filter-kind", Select).value
        return RunFilter(
            kind=kind if kind in KINDS else None,
            search=self.query_one("#filter-search", Input).value.strip(),
            status=status if isinstance(status, str) else None,  # type: ignore[arg-type]
            flow=flow if isinstance(flow, str) else None,
            tenant=self.query_one("#filter-tenant", Input).value.strip(),
            session=self.query_one("#filter-session", Input).value.strip(),
        )

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._apply()

    def on_input_changed(self, event: Input.Changed) -> None:
        """Filter as you type: a pause of :data:`TYPING_S` applies what was typed."""
        event.stop()
        if self._typing is not None:
            self._typing.stop()
        self._typing = self.set_timer(TYPING_S, self._apply)

    def _apply(self) -> None:
        if self._typing is not None:
            self._typing.stop()
            self._typing = None
        value = self.value
        if value != self._applied:
            self._applied = value
            self.post_message(self.Changed(value))

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        self._apply()

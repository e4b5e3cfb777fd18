"""Run ids as people type them: a unique prefix of a flow run or agent run id.

The one place a command line argument or an app filter becomes a run id.
It reads only through the store protocol (``get_run``, ``list_runs``) and an
agent store's ``get``/``list``, so it works on every backend.

Rules:

* An exact id always wins (flow runs first, then agent runs).
* Otherwise every flow run and agent run whose id starts with the prefix
  matches; one match is the answer, none raises :class:`UnknownRunError`,
  several raise :class:`AmbiguousRunIdError` listing them.
* A child agent run's id is ``<flow run>:<path>``; a prefix without ``:``
  never matches such an id (so the 8 characters the app shows for a flow run
  pick that run, not its per-file child runs); type the ``:`` to pick one.
* Prefixes shorter than :data:`MIN_PREFIX` characters are refused (a typo,
  not a choice).

A prefix lookup reads the ids of every run in the scope: O(runs), about a
second per 100,000 runs on SQLite; an exact id is one indexed read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from desktop_app.errors import AmbiguousRunIdError, CheckpointNotFoundError, UnknownRunError
from desktop_app.store.protocol import CheckpointStore

#: the shortest prefix accepted (the app shows 8 characters)
MIN_PREFIX = 4

#: ``"langgraph"``: a LangGraph thread (resolved by the CLI, see ``cli.common.Ctx.resolve``)
RunKind = Literal["flow", "agent", "langgraph"]


class AgentRunReader(Protocol):
    """What resolution needs of an agent-run store."""

    def get(self, run_id: str) -> Any: ...

    def list(self, statuses: Sequence[str] | None = None, agent: str | None = None) -> Any: ...


@dataclass(frozen=True, slots=True)
class RunRef:
    """A resolved run: its full id and whether it is a flow run or an agent run."""

    run_id: str
    kind: RunKind


def resolve_run_id(
    checkpoints: CheckpointStore, agents: AgentRunReader | None, prefix: str
) -> RunRef:
    """The one run whose id is ``prefix`` or starts with it.

    Args:
        checkpoints: the flow-run store (its scope bounds the search).
        agents: the agent-run store, or ``None`` to look at flow runs only.
        prefix: a full id or a unique prefix (at least :data:`MIN_PREFIX` chars).

    Raises:
        UnknownRunError: no run matches (an ``InputError``: exit code 2).
        AmbiguousRunIdError: several runs match; ``matches`` lists their ids.
        StoreError: the store cannot be read.
    """
    wanted = prefix.strip()
    scope = checkpoints.scope
    try:
        return RunRef(checkpoints.get_run(wanted).run_id, "flow")
    except CheckpointNotFoundError:
        pass
    if agents is not None:
        try:
            return RunRef(str(agents.get(wanted).run_id), "agent")
        except CheckpointNotFoundError:
            pass
    where = f"in scope {scope!r}"
    if len(wanted) < MIN_PREFIX:
        raise UnknownRunError(
            f"no run {wanted} {where}; give at least {MIN_PREFIX} characters of a run id"
        )
    child = ":" in wanted
    found = [
        RunRef(r.run_id, "flow") for r in checkpoints.list_runs() if r.run_id.startswith(wanted)
    ]
    if agents is not None:
        found += [
            RunRef(str(r.run_id), "agent")
            for r in agents.list()
            if str(r.run_id).startswith(wanted) and (child or ":" not in str(r.run_id))
        ]
    if not found:
        raise UnknownRunError(f"no run {wanted} {where}")
    if len(found) > 1:
        raise AmbiguousRunIdError(wanted, sorted(f"{r.run_id} ({r.kind})" for r in found))
    return found[0]

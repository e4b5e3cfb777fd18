"""The log line of a claim that took a run from another owner (README,
Tracing and logs: each takeover with the run id and the owner it was taken
from), written by the stores' claims once committed."""

from __future__ import annotations

import logging
from collections.abc import Iterable

log = logging.getLogger("desktop_app.store.leases")


def log_takeovers(owner: str, taken: Iterable[tuple[str, str, bool]]) -> None:
    """Log (info) ``run <id>: <owner> takes it over from <holder> (<why>)``
    for each ``(run id, holder, lease expired)`` in ``taken``: a committed
    claim by ``owner`` of a run another owner held, its lease expired, or
    that owner found gone (a process of this host that exited, a worker
    whose liveness lock is free)."""
    for run_id, holder, expired in taken:
        log.info("run %s: %s takes it over from %s (%s)", run_id, owner, holder, _why(expired))


def log_agent_takeover(agent: str, run_id: str, owner: str, took: tuple[str, str]) -> None:
    """Log (info) ``agent <name>: run <id>: <owner> takes it over from
    <holder> (<why>)`` for an agent run's claim that took it (``took``:
    ``(holder, "dead" | "expired")``, as
    :func:`~desktop_app.agent.leases.claim_agent_run` returns it), in the
    words a flow run's takeover is logged in."""
    holder, held = took
    log.info(
        "agent %s: run %s: %s takes it over from %s (%s)",
        agent, run_id, owner, holder, _why(held == "expired"),
    )  # fmt: skip


def _why(expired: bool) -> str:
    """How a takeover's holder was judged, in the log's words."""
    return "lease expired" if expired else "owner gone"

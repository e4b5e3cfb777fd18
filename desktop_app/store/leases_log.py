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
        why = "lease expired" if expired else "owner gone"
        log.info("run %s: %s takes it over from %s (%s)", run_id, owner, holder, why)

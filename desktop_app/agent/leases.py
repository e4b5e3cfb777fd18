"""Holding an agent run's lease: claim it, renew it while the run executes,
release it when the run stops here.

One place for the rule Flowdesk's own :class:`~desktop_app.agent.runtime.Agent`
and the Pydantic AI integration (:mod:`desktop_app.integrations.pydantic_ai`)
follow; it is the flow engine's lease rule (:func:`desktop_app.flow.owners.holding`)
applied to an agent run's row.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from desktop_app.errors import AgentRunLeasedError, FlowdeskError
from desktop_app.flow.clock import Clock
from desktop_app.flow.owners import Holding, holding
from desktop_app.store.protocol import AgentLog, AgentRun

_held_lock = threading.Lock()
_held: dict[str, int] = {}  # run id -> how many blocks of this process hold it


def agent_runs_held() -> list[str]:
    """Ids of the agent runs this process executes right now (inside
    :func:`holding_agent_run`: Flowdesk's own agent and the Pydantic AI
    runs alike), sorted; ``flowdesk agent`` names them when it exits with a
    run still in flight. Read without ``_held_lock`` (one C call over the
    dict, which no other thread changes meanwhile under the GIL): a signal
    handler calls it in the main thread, which may hold that lock at the
    instruction the signal landed on."""
    return sorted(_held)


def claim_agent_run(
    store: AgentLog, run: AgentRun, owner: str, ttl_s: float, now: float
) -> tuple[str, Holding] | None:
    """Take ``run``'s lease for ``owner`` until ``now + ttl_s`` (UTC epoch s)
    before anything of it runs. A run another owner holds is taken as a
    compare-and-set on that very owner: at once when its process on this
    host exited, never while it is alive on this host (whatever the clocks
    say), and, for an owner on another host, only once its lease expired. Of
    two processes taking over one dead owner's run at once, exactly one wins.

    Returns:
        The owner the run was taken over from and how it was judged
        (``"dead"`` or ``"expired"``), or ``None`` (it was free or ours).

    Raises:
        AgentRunLeasedError: a live process holds the run (nothing was run).
        CheckpointNotFoundError: no such run.
    """
    holder = run.lease_owner
    takes_over, at = None, now
    if holder is not None and holder != owner:
        held = holding(holder, run.lease_expires_at, now)
        if held == "held":
            raise AgentRunLeasedError(run.run_id, holder, run.lease_expires_at)
        takes_over, at = holder, (math.inf if held == "dead" else now)
    store.claim(run.run_id, owner, now + ttl_s, at, takes_over=takes_over)
    return None if takes_over is None else (takes_over, held)


@contextmanager
def holding_agent_run(
    store: AgentLog, run_id: str, owner: str, ttl_s: float, clock: Clock
) -> Iterator[None]:
    """Renew ``owner``'s lease on ``run_id`` every ``ttl_s / 3`` seconds (at
    least 0.05) from a daemon thread while the block runs; release it when
    the block ends, however it ends. A renewal that fails stops the thread:
    the run's next write then raises ``LeaseLostError`` or says why."""
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(max(0.05, ttl_s / 3)):
            try:
                now = clock.now()  # a checked clock found skewed stops it too
                store.claim(run_id, owner, now + ttl_s, now)
            except FlowdeskError:
                return

    heartbeat = threading.Thread(target=renew, name="flowdesk-agent-lease", daemon=True)
    heartbeat.start()
    with _held_lock:
        _held[run_id] = _held.get(run_id, 0) + 1
    try:
        yield
    finally:
        with _held_lock:
            _held[run_id] -= 1
            if not _held[run_id]:
                del _held[run_id]
        stop.set()
        heartbeat.join()
        store.release(run_id, owner)

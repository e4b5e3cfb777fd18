"""Run ids as people type them: a unique prefix of a flow run, agent run or
LangGraph thread id.

The one place a command line argument becomes a run id. It reads only
through the store protocol (``get_run``, ``list_runs``), an agent store's
``get``/``list`` and a :class:`ThreadReader`, so it works on every backend.

Rules:

* An exact id always wins over every prefix match, whatever kind either is
  (flow runs first, then agent runs, then LangGraph threads when one id is
  several). A LangGraph thread id is chosen by the program that runs the
  graph (``"8c09"``, ``"release-42"``) and may be the first characters of a
  Flowdesk run's id: ``answer 8c09`` answers the thread ``8c09``.
* Otherwise every flow run, agent run and thread whose id starts with the
  prefix matches; one match is the answer, none raises
  :class:`UnknownRunError`, several raise :class:`AmbiguousRunIdError`
  listing them (each with its kind).
* A child agent run's id is ``<flow run>:<path>``; a prefix without ``:``
  never matches such an id (so the 8 characters the app shows for a flow run
  pick that run, not its per-file child runs); type the ``:`` to pick one.
* Prefixes shorter than :data:`MIN_PREFIX` characters are refused (a typo,
  not a choice).

A prefix lookup reads the ids of every run in the scope: O(runs), about a
second per 100,000 runs on SQLite; an exact id is one indexed read.

New runs are named with ``uuid.uuid4().hex``; :func:`new_run_id` (time-ordered
UUIDs, version 7) is kept for when short ids stop being prefixes (see its
docstring).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from desktop_app.errors import (
    AmbiguousRunIdError,
    CheckpointNotFoundError,
    InputError,
    UnknownRunError,
)
from desktop_app.store.protocol import CheckpointStore

#: the shortest prefix accepted (the app shows 8 characters)
MIN_PREFIX = 4

#: ``"langgraph"``: a LangGraph thread (given a :class:`ThreadReader`)
RunKind = Literal["flow", "agent", "langgraph"]

_clock_lock = threading.Lock()
#: the (48-bit Unix ms << 12 | 12-bit counter) of the last id this process made
_last_stamp = 0


def uuid4_hex() -> str:
    """``uuid.uuid4().hex`` (a random version 4 UUID, RFC 9562 section 5.4, as
    32 lowercase hex digits) without the ``uuid.UUID`` object: 122 random
    bits from ``os.urandom``, the version ``4`` and the variant ``10`` set as
    ``uuid.UUID(bytes=..., version=4)`` sets them. The engine names every
    new run and its trace with one (``UUID.__init__`` was ~200 bytecodes of
    each run's creation)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # variant 10 (RFC 4122 / 9562)
    return b.hex()


def new_run_id() -> str:
    """A new run id: a version 7 UUID (RFC 9562 section 5.7) as 32 lowercase
    hex digits, the form ``uuid.uuid4().hex`` gave before (every stored id
    and id check is unchanged; ``uuid.UUID(run_id)`` reads it).

    Layout (RFC 9562): 48 bits of Unix time in milliseconds, the version
    ``7``, 12 bits of a counter (the RFC's "fixed-length dedicated counter",
    section 6.2 method 1: ids made in one process in one millisecond, or
    while the clock stepped back, still ascend), the variant ``10`` and 62
    random bits (``os.urandom``). Python 3.11's ``uuid`` has no ``uuid7``.

    Why it was made: ids that ascend with time put a new run's checkpoint
    rows at the right edge of a b-tree keyed by run id; 10-step runs wrote
    4.9 WAL pages per step with ``uuid4`` ids and 4.1 with these. Since
    schema ``core/0011`` SQLite keys checkpoints by the run's integer
    ``run_key`` instead, and the id's order no longer changes the pages a
    step writes (3.21 and 3.22 in the same replay, ``docs/design.md``).

    Not used for new runs yet: ids made within the same ~65 s share their
    first 8 hex digits (the top of the timestamp), the 8 characters the app
    shows and people type as a prefix (:func:`resolve_run_id` then names
    several matches). Any time-ordered id has this: its leading digits are
    the slowest-changing ones. Naming runs with it needs the app's short id
    and the prefix lookup to use the random tail first.
    """
    global _last_stamp
    now_ms = time.time_ns() // 1_000_000
    with _clock_lock:
        stamp = max(now_ms << 12, _last_stamp + 1)
        _last_stamp = stamp
    random_62 = int.from_bytes(os.urandom(8), "big") >> 2
    value = (stamp >> 12) << 80 | 0x7 << 76 | (stamp & 0xFFF) << 64 | 0b10 << 62 | random_62
    return f"{value:032x}"


class AgentRunReader(Protocol):
    """What resolution needs of an agent-run store."""

    def get(self, run_id: str) -> Any: ...

    def list(self, statuses: Sequence[str] | None = None, agent: str | None = None) -> Any: ...


class ThreadReader(Protocol):
    """What resolution needs of LangGraph threads (one scope's)."""

    def exists(self, thread_id: str) -> bool:
        """Whether a thread of exactly this id exists."""
        ...

    def ids(self) -> list[str]:
        """Every thread id."""
        ...


@dataclass(frozen=True, slots=True)
class RunRef:
    """A resolved run: its full id and whether it is a flow run or an agent run."""

    run_id: str
    kind: RunKind


def resolve_run_id(
    checkpoints: CheckpointStore,
    agents: AgentRunReader | None,
    prefix: str,
    threads: ThreadReader | None = None,
) -> RunRef:
    """The one run whose id is ``prefix`` or, when none is, starts with it.

    Args:
        checkpoints: the flow-run store (its scope bounds the search).
        agents: the agent-run store, or ``None`` to look at flow runs only.
        prefix: a full id or a unique prefix (at least :data:`MIN_PREFIX` chars).
        threads: the LangGraph threads of the same scope, or ``None`` to
            leave them out.

    Raises:
        InputError: ``prefix`` is empty (or blank).
        UnknownRunError: no run matches (an ``InputError``: exit code 2).
        AmbiguousRunIdError: several runs match; ``matches`` lists their ids.
        StoreError: the store cannot be read.
    """
    wanted = prefix.strip()
    if not wanted:
        raise InputError(
            f"the run id is empty: give a run id, or at least {MIN_PREFIX} characters of one"
        )
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
    if threads is not None and threads.exists(wanted):
        return RunRef(wanted, "langgraph")
    where = f"in scope {scope!r}"
    if len(wanted) < MIN_PREFIX:
        raise UnknownRunError(
            f"no run {wanted} {where} (an id shorter than {MIN_PREFIX} characters is "
            "matched whole, not as the start of a longer one)"
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
    if threads is not None:
        found += [RunRef(t, "langgraph") for t in threads.ids() if t.startswith(wanted)]
    if not found:
        raise UnknownRunError(f"no run {wanted} {where}")
    if len(found) > 1:
        raise AmbiguousRunIdError(wanted, sorted(f"{r.run_id} ({r.kind})" for r in found))
    return found[0]

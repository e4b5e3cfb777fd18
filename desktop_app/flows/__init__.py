"""Built-in flows shipped with the app."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desktop_app.flow import CompiledFlow

if TYPE_CHECKING:
    from desktop_app.store.protocol import CheckpointStore, RunRecord, RunStatus

#: flows shipped with Flowdesk: their runs are single-flight per input
BUILTIN_SINGLE_FLIGHT = ("digest", "tidy")
#: input fields that name a folder: keyed by their absolute, resolved path
_PATH_FIELDS = ("folder", "out")
#: a live run's statuses (it has not ended: its own deadline still applies):
#: the run a new start on the same input joins instead of duplicating
#: (resumed when interrupted or failed, reported when waiting)
LIVE_STATUSES: tuple[RunStatus, ...] = ("pending", "running", "waiting", "failed")


def builtin_flows() -> list[CompiledFlow[Any]]:
    """Every built-in flow, compiled."""
    from desktop_app.flows.digest import build_digest_flow
    from desktop_app.flows.tidy import build_tidy_flow

    return [build_digest_flow(), build_tidy_flow()]


#: names of the outbox destinations Flowdesk's own processes deliver (any
#: other is a program's own, delivered by that program's dispatcher)
BUILTIN_DESTINATIONS = frozenset({"tidy.move"})


def builtin_destinations(store: Any) -> dict[str, Any]:
    """Outbox destinations of the built-in flows, by name (for a Dispatcher):
    one for each of :data:`BUILTIN_DESTINATIONS`."""
    from desktop_app.flows.tidy import FileMover

    return {"tidy.move": FileMover(store)}


def builtin_flow_key(flow: str, given: Mapping[str, Any]) -> str | None:
    """The flow key that makes a built-in flow single-flight per input.

    ``given`` is the input as the user gave it (digest: ``{"folder", "out"}``;
    tidy: ``{"folder"}``), not the whole state. ``folder``/``out`` are
    keyed by their absolute resolved path, so ``~/Downloads`` and
    ``/home/me/Downloads`` give the same key. Returns
    ``<flow>:<sha256 of the canonical JSON input, 16 hex>``, or ``None`` for
    a flow that is not built in (those have no key unless the caller gives one).
    """
    if flow not in BUILTIN_SINGLE_FLIGHT:
        return None
    normal = {
        k: str(Path(str(v)).expanduser().resolve()) if k in _PATH_FIELDS and v else v
        for k, v in given.items()
    }
    canonical = json.dumps(normal, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"{flow}:{hashlib.sha256(canonical.encode()).hexdigest()[:16]}"


def check_builtin_input(flow: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """Refuse a bad folder before a run exists; paths become absolute.

    Used by ``flowdesk run``/``start``/``fork`` and the app's start form
    alike (:func:`single_flight`).

    Raises:
        InputError: the folder is missing or not a folder (exit 2).
        FolderNotWritableError: ``tidy``'s folder cannot be written (exit 2).
    """
    if flow == "digest" and "folder" in given and "out" in given:
        from desktop_app.flows.digest import check_input

        checked = check_input(given["folder"], given["out"])
        return {**given, "folder": str(checked.folder), "out": str(checked.out)}
    if flow == "tidy" and "folder" in given:
        from desktop_app.flows.tidy import check_folder

        return {**given, "folder": str(check_folder(str(given["folder"])))}
    return dict(given)


def single_flight(flow: str, given: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The one rule for starting a flow on an input, for the CLI and the app:
    the checked input (:func:`check_builtin_input`) and its flow key
    (:func:`builtin_flow_key`; ``None`` for a flow that is not built in).

    Raises:
        InputError: as :func:`check_builtin_input`.
    """
    checked = check_builtin_input(flow, given)
    return checked, builtin_flow_key(flow, checked)


def live_twin(store: CheckpointStore, flow: str, key: str) -> RunRecord | None:
    """The newest run of ``flow`` with flow key ``key`` in one of
    :data:`LIVE_STATUSES`, or ``None``: the run a new start joins."""
    runs = store.list_runs(
        statuses=list(LIVE_STATUSES), flow_name=flow, flow_key=key, newest_first=True
    )
    return runs[0] if runs else None

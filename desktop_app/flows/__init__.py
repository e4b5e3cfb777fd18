"""Built-in flows shipped with the app."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from desktop_app.flow import CompiledFlow

#: flows shipped with Flowdesk: their runs are single-flight per input
BUILTIN_SINGLE_FLIGHT = ("digest", "tidy")
#: input fields that name a folder: keyed by their absolute, resolved path
_PATH_FIELDS = ("folder", "out")


def builtin_flows() -> list[CompiledFlow[Any]]:
    """Every built-in flow, compiled."""
    from desktop_app.flows.digest import build_digest_flow
    from desktop_app.flows.tidy import build_tidy_flow

    return [build_digest_flow(), build_tidy_flow()]


def builtin_destinations(store: Any) -> dict[str, Any]:
    """Outbox destinations of the built-in flows, by name (for a Dispatcher)."""
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

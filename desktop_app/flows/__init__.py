"""Built-in flows shipped with the app."""

from __future__ import annotations

from typing import Any

from desktop_app.flow import CompiledFlow


def builtin_flows() -> list[CompiledFlow[Any]]:
    """Every built-in flow, compiled."""
    from desktop_app.flows.digest import build_digest_flow
    from desktop_app.flows.tidy import build_tidy_flow

    return [build_digest_flow(), build_tidy_flow()]


def builtin_destinations(store: Any) -> dict[str, Any]:
    """Outbox destinations of the built-in flows, by name (for a Dispatcher)."""
    from desktop_app.flows.tidy import FileMover

    return {"tidy.move": FileMover(store)}

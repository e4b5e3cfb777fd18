"""Built-in flows shipped with the app."""

from __future__ import annotations

from typing import Any

from desktop_app.flow import CompiledFlow


def builtin_flows() -> list[CompiledFlow[Any]]:
    """Every built-in flow, compiled."""
    from desktop_app.flows.digest import build_digest_flow

    return [build_digest_flow()]

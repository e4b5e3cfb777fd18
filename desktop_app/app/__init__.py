"""The Textual app: screens, widgets and the ``flowdesk.tcss`` layout.

This is the only package that imports Textual, and it never runs SQL: it
talks to the engine (:class:`desktop_app.flow.Engine`) and to the store
protocol only. Blocking work runs in thread workers.

``FlowdeskApp`` (:mod:`desktop_app.app.main`) is imported when first asked
for, so that importing a screen or widget never imports the app that
imports them (screens see the app through :mod:`desktop_app.app.host`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from desktop_app.app.main import FlowdeskApp

__all__ = ["FlowdeskApp"]


def __getattr__(name: str) -> Any:
    if name == "FlowdeskApp":
        from desktop_app.app.main import FlowdeskApp

        return FlowdeskApp
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The Textual app: screens, widgets and the ``flowdesk.tcss`` layout.

This is the only package that imports Textual, and it never runs SQL: it
talks to the engine (:class:`desktop_app.flow.Engine`) and to the store
protocol only. Blocking work runs in thread workers.
"""

from desktop_app.app.main import FlowdeskApp

__all__ = ["FlowdeskApp"]

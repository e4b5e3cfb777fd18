"""The app's modules import each other without a cycle, and no screen or
widget imports the app (``desktop_app.app.main``): screens see it through the
:class:`~desktop_app.app.host.Host` Protocol.

Every ``import``/``from ... import`` counts, also those under ``if
TYPE_CHECKING:`` and inside functions.
"""

from __future__ import annotations

from pathlib import Path

import desktop_app.app
from tests.import_graph import cycle, graph

APP_DIR = Path(desktop_app.app.__file__).parent
PACKAGE = "desktop_app.app"


def test_no_screen_or_widget_imports_the_app() -> None:
    edges = graph(APP_DIR, PACKAGE)
    main = f"{PACKAGE}.main"
    assert main in edges and f"{PACKAGE}.screens.runs" in edges[main]  # the graph sees it
    importers = sorted(
        module
        for module, imported in edges.items()
        if module.startswith((f"{PACKAGE}.screens.", f"{PACKAGE}.widgets.")) and main in imported
    )
    assert importers == []


def test_no_screen_imports_the_controller() -> None:
    edges = graph(APP_DIR, PACKAGE)
    controller = f"{PACKAGE}.controller"
    assert controller in edges[f"{PACKAGE}.main"]
    assert not [m for m, imported in edges.items() if controller in imported and ".screens." in m]


def test_no_import_cycle_among_app_modules() -> None:
    found = cycle(graph(APP_DIR, PACKAGE))
    assert found is None, "import cycle: " + " -> ".join(found or [])

"""Checks that a widget can be reached on screen (issue 28: every action
reachable at 80x24): focused, it lies inside the screen and is what a click
at its centre hits."""

from __future__ import annotations

from textual.pilot import Pilot
from textual.widget import Widget


async def reachable(pilot: Pilot[None], widget: Widget) -> bool:
    """Focus ``widget`` (a focused widget is scrolled into view, as Tab does)
    and say whether it is then fully on screen and on top at its centre."""
    widget.focus()
    await pilot.pause()
    await pilot.pause()
    screen = pilot.app.screen
    region = widget.region
    size = screen.size
    if region.width == 0 or region.height == 0:
        return False
    if region.x < 0 or region.y < 0 or region.right > size.width or region.bottom > size.height:
        return False
    # what a click hits: the widget itself, not something over it
    hit, _ = screen.get_widget_at(region.x + region.width // 2, region.y + region.height // 2)
    return hit is widget or widget in hit.ancestors_with_self

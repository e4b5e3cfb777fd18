"""The header and key bar of every screen, without Textual's watcher leak.

Textual drops a watcher of a reactive (``DOMNode.watch``, ``data_bind``)
whose widget was removed only when that reactive next changes
(``Reactive._check_watchers``, textual 8.2). The footer's keys watch the
footer's ``compact`` and a header watches the app's ``title`` and
``sub_title``; none of them ever changes in this app, so every key bar and
header ever shown stayed alive, a header with its closed screen's render
caches: ~750 objects more per cursor move and ~2,000 per run opened, for
as long as the app ran, each walked by every full garbage collection (a
pause of the whole app that grew with use). Each class here reports its
reactive as changed (to the same value: ``mutate_reactive``) once the
widgets it replaced are closed, which is when Textual lets their watchers
go.
"""

from __future__ import annotations

from textual import widgets
from textual.app import App, ComposeResult


class Footer(widgets.Footer):  # noqa: TID251 (the one subclass)
    """:class:`textual.widgets.Footer` that composes its keys again only
    when what it shows changed, and frees the keys it replaces.

    Textual's footer composes them again whenever the screen's bindings are
    refreshed: here at every cursor move in a table (~800 objects and a
    style and layout pass each), most of which offer the same keys."""

    _shown: object = None

    def _what_it_shows(self) -> object:
        """What :meth:`compose` reads: each active binding (a frozen
        dataclass, compared by value) with its enabled flag and tooltip, and
        whether the palette's key is shown."""
        return (
            [(b, enabled, tip) for (_, b, enabled, tip) in self.screen.active_bindings.values()],
            self._bindings_ready,
            self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE,
        )

    def compose(self) -> ComposeResult:
        # what the keys are composed from, read when they are (the bindings
        # may change between a recompose's start and its compose)
        self._shown = self._what_it_shows()
        yield from super().compose()

    async def recompose(self) -> None:
        if not self.is_attached or self._pruning:
            return  # as Textual's: nothing to compose for
        if self._what_it_shows() == self._shown:
            return
        await super().recompose()
        self.mutate_reactive(Footer.compact)


class Header(widgets.Header):  # noqa: TID251 (the one subclass)
    """:class:`textual.widgets.Header` that lets the app's ``title`` and
    ``sub_title`` drop its watchers once it is unmounted (its screen popped
    or closed), instead of keeping it and its screen's caches alive."""

    def _on_unmount(self) -> None:
        self.app.mutate_reactive(App.title)
        self.app.mutate_reactive(App.sub_title)

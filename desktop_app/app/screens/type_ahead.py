"""Keys typed before a form's field (or the fork dialog's editor) has the
focus reach that field.

Textual delivers a key to the focused widget, or to the screen when none
is focused yet. A person who presses ``n`` and types a folder at once (or
a form pushed on a busy machine) loses keys two ways:

* keys read before the form existed went to the widget focused then (the
  runs table); they bubble back to the app after ``n`` has opened the form,
  which has no binding for them, and were dropped;
* keys that reach the form while it is still being composed (or while its
  fields are rebuilt) are queued for the screen, not a field.

:class:`TypeAheadApp` hands the first kind to the form, :class:`TypeAhead`
the second kind to the field they were meant for: nothing typed is dropped.
"""

from __future__ import annotations

import weakref

from textual import events
from textual.app import App
from textual.screen import Screen
from textual.widgets import Input, Select, TextArea

#: the fields typing goes into
Field = Input | TextArea


class TypeAhead:
    """Mixin for a form screen: printable keys that reach the screen itself
    go into the focused field, or into the first field when none is
    focused or a closed selector is (a flow just picked: the person types
    its first input next).

    A key typed into a focused :class:`~textual.widgets.Input` (or
    :class:`~textual.widgets.TextArea`: the fork dialog's editor) never gets
    here (the field stops it); one that does was queued for the screen
    before a field took the focus. An open selector searches its options
    with the keys (they never get here); a focused button is left alone.
    """

    #: characters typed while the form had no field (its fields rebuilding)
    _typed_ahead: str = ""

    def on_key(self, event: events.Key) -> None:
        """Insert ``event.character`` into the field the person typed into."""
        if not event.is_printable or event.character is None:
            return
        screen = self._form()
        focused = screen.focused
        if focused is not None and not isinstance(focused, Input | TextArea | Select):
            return  # a button, say: not typing
        event.stop()
        event.prevent_default()
        self._typed_ahead += event.character
        self.flush_typed_ahead()

    def flush_typed_ahead(self) -> None:
        """Put the characters held so far into the field meant (call it
        once a rebuilt form's fields are mounted)."""
        screen = self._form()
        focused = screen.focused
        target = focused if isinstance(focused, Field) else None
        if target is None:
            fields = screen.query("Input, TextArea")
            target = next((f for f in fields if isinstance(f, Field)), None)
        if target is None or not self._typed_ahead or not self.fields_ready():
            return  # no field yet: held until the form has one
        text, self._typed_ahead = self._typed_ahead, ""
        if isinstance(target, TextArea):
            start, end = target.selection  # as a key typed into it: over what is selected
            target.replace(text, start, end)
            if not target.has_focus:
                screen.set_focus(target)
            return
        target.insert_text_at_cursor(text)
        if not target.has_focus:
            # Textual's Input selects its text when it takes the focus, and
            # the next key would replace what was just typed ahead
            selects, target.select_on_focus = target.select_on_focus, False
            screen.set_focus(target)  # now, not after the keys queued behind
            target.call_later(setattr, target, "select_on_focus", selects)

    def fields_ready(self) -> bool:
        """Whether the fields shown are the ones typing is meant for
        (``False`` while a form is about to rebuild them)."""
        return True

    def _form(self) -> Screen[object]:
        assert isinstance(self, Screen)
        return self


#: the screen on top when the app read each key from the terminal
_read_on: weakref.WeakKeyDictionary[events.Key, Screen[object]] = weakref.WeakKeyDictionary()


class TypeAheadApp:
    """Mixin for the app: a printable key read while another screen was on
    top (``n`` and the first letters of a folder, typed at once) goes to the
    :class:`TypeAhead` form that the earlier key opened, instead of to no
    one. A form has no printable bindings, so nothing meant for it is lost."""

    async def on_event(self, event: events.Event) -> None:
        """Note the screen on top when a key is read (then dispatch it)."""
        app = self._app()
        if isinstance(event, events.Key) and not event.is_forwarded:
            _read_on[event] = app.screen
        await super().on_event(event)  # type: ignore[misc]

    def on_key(self, event: events.Key) -> None:
        """Runs before the app's bindings (Textual dispatches a subclass's
        handler first): hand the key to the form pushed since it was read."""
        app = self._app()
        read_on = _read_on.get(event)
        screen = app.screen
        if (
            read_on is not None
            and read_on is not screen
            and isinstance(screen, TypeAhead)
            and event.is_printable
        ):
            event.prevent_default()
            event.stop()
            screen.post_message(events.Key(event.key, event.character))

    def _app(self) -> App[object]:
        assert isinstance(self, App)
        return self

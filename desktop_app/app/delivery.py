"""In-app outbox delivery: the app runs the same dispatcher as ``flowdesk agent``.

:class:`OutboxPump` calls a dispatch function on its own thread whenever it is
woken (a run of this app saved a checkpoint or finished, so it may have queued
intents) and at least every ``every_s`` seconds (intents queued by another
process, or retried after a failed delivery). No Textual here: the app hands
it callbacks that post messages.
"""

from __future__ import annotations

from collections.abc import Callable

from desktop_app.app.pump import Pump


class OutboxPump(Pump):
    """Delivers outbox intents on a background thread while the app is open.

    Args:
        dispatch: one delivery pass; returns how many intents were delivered
            (:meth:`desktop_app.flow.outbox.Dispatcher.dispatch`).
        every_s: longest pause between two passes (seconds).
        on_delivered: called on the pump's thread with the count of a pass
            that delivered something.
        on_error: called on the pump's thread with the text of a pass that
            raised (the pump keeps going; the intents stay queued).
    """

    def __init__(
        self,
        dispatch: Callable[[], int],
        *,
        every_s: float,
        on_delivered: Callable[[int], object],
        on_error: Callable[[str], object],
    ) -> None:
        super().__init__(
            "outbox delivery", "Outbox delivery stopped for now", every_s=every_s, on_error=on_error
        )
        self._dispatch = dispatch
        self._on_delivered = on_delivered
        self.delivered = 0

    def _pass(self) -> float:
        count = self._dispatch()
        if count:
            self.delivered += count
            self._on_delivered(count)
            return 0.0  # more may be queued (a pass takes at most its batch): at once
        return self.every_s

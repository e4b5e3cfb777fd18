"""Calling one step function, and the internal signals a run's execution
raises: a step called with the arguments it takes, awaited when it is a
coroutine, within its timeout; :class:`Canceled` and :class:`Stopped`
unwind the driver's loop. Used by the driver and the composite steps'
executors; imports neither the driver nor the engine.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from desktop_app.errors import StepTimeoutError
from desktop_app.flow.context import StepContext
from desktop_app.flow.definition import _arity

#: how one attempt ended: ``ok``, or the run stopped (failed, paused) or was
#: routed elsewhere by the step's error policy
Outcome = Literal["ok", "stop", "routed"]


class Canceled(Exception):
    """Internal: the run was canceled (by this process or another writer)."""


class Stopped(Exception):
    """Internal: the engine is shutting down or lost the run's lease; the run
    stays resumable where it is."""


@functools.lru_cache(maxsize=4096)
def _call_shape(fn: Callable[..., Any]) -> tuple[int, bool]:
    """How to call ``fn``: its arity (see ``definition._arity``) and whether
    it is a coroutine function; read once per function, not at every step."""
    return _arity(fn), inspect.iscoroutinefunction(fn)


def call_untimed(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """``fn(*args)``, a synchronous step function called with no timeout (an
    awaitable it returns is awaited): what :func:`call_step` does then, for
    a caller that already knows the function's arguments (the driver's lean
    path, which makes no context for a function that takes none)."""
    out = fn(*args)
    if out is not None and type(out) is not dict and inspect.isawaitable(out):
        return settle(out)
    return out


def settle(out: Awaitable[Any]) -> Any:
    """What the awaitable ``out`` (returned by a synchronous step function)
    gives, awaited in an event loop of its own."""

    async def _await() -> Any:
        return await out

    return asyncio.run(_await())


def call_step(
    fn: Callable[..., Any], state: Any, ctx: StepContext, timeout_s: float | None = None
) -> Any:
    """Call ``fn(state, ctx)`` (or fewer args), awaiting coroutines, within ``timeout_s``.

    A timed-out attempt commits nothing: ``ctx`` is abandoned (its staged
    writes and intents are dropped, later ``ctx.write``/``ctx.send`` raise,
    ``ctx.cancelled`` turns true) and whatever it returns is discarded. An
    async step is cancelled at the deadline. A synchronous step cannot be
    stopped from outside, so this returns only once it has returned: a retry
    never runs beside it.

    Raises:
        StepTimeoutError: the attempt ran past ``timeout_s``.
    """
    arity, is_async = _call_shape(fn)
    args = (state, ctx)[:arity]
    if is_async:

        async def _run() -> Any:
            if timeout_s is None:
                return await fn(*args)
            try:
                return await asyncio.wait_for(fn(*args), timeout_s)
            except TimeoutError:
                ctx.abandon(timeout_s)
                raise StepTimeoutError(ctx.step_id, timeout_s) from None

        return asyncio.run(_run())
    if timeout_s is None:
        return call_untimed(fn, args)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["out"] = call_step(fn, state, ctx)
        except BaseException as exc:  # handed to the caller's thread
            box["exc"] = exc

    worker = threading.Thread(target=target, name=f"step-{ctx.step_id}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        ctx.abandon(timeout_s)
        worker.join()  # cannot be stopped: wait, so no retry overlaps it
        raise StepTimeoutError(ctx.step_id, timeout_s)
    if "exc" in box:
        raise box["exc"]
    return box.get("out")

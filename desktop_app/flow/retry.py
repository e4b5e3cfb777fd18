"""Retry policy: how many attempts, how long between them, which errors retry.

The retry *loop* is the engine's, because attempts and the next retry time
must be durable (persisted in the step record, so a restart during a backoff
resumes at the stored time instead of starting over). The backoff *curve*
is tenacity's ``wait_exponential_jitter``: exponential with jitter and a cap.

Errors are classified by type, never by words in a message (S48):

1. an instance of ``give_up_on`` never retries;
2. an error with a boolean ``retryable`` attribute decides for itself
   (provider errors set it: a 4xx is not retryable, a 5xx or a timeout is);
3. otherwise an instance of ``retry_on`` retries.

``pydantic.ValidationError`` retries only if the user lists it in ``retry_on``
(it is in ``give_up_on`` by default).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tenacity
from pydantic import ValidationError


def _default_give_up() -> tuple[type[BaseException], ...]:
    return (ValidationError,)


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter and a cap, in seconds.

    The wait before retry ``n`` (1-based) is
    ``min(max_s, initial_s * exp_base ** (n - 1) + uniform(0, jitter_s))``.
    """

    initial_s: float = 0.5
    max_s: float = 30.0
    exp_base: float = 2.0
    jitter_s: float = 0.5

    def delay(self, retry_number: int) -> float:
        """Seconds to wait before retry ``retry_number`` (1 = the first retry)."""
        wait = tenacity.wait_exponential_jitter(
            multiplier=self.initial_s, max=self.max_s, exp_base=self.exp_base, jitter=self.jitter_s
        )
        state = tenacity.RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
        state.attempt_number = retry_number
        return float(wait(state))


NO_BACKOFF = Backoff(initial_s=0.0, max_s=0.0, jitter_s=0.0)


@dataclass(frozen=True)
class RetryPolicy:
    """Flow-wide retry defaults; a step's positive ``retry`` overrides ``retries``.

    Attributes:
        retries: retries after the first attempt (n retries = n + 1 attempts).
        backoff: the wait between attempts.
        retry_on: error types that retry.
        give_up_on: error types that never retry (checked first).
    """

    retries: int = 0
    backoff: Backoff = NO_BACKOFF
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    give_up_on: tuple[type[BaseException], ...] = field(default_factory=_default_give_up)

    def is_retryable(self, exc: BaseException) -> bool:
        """Whether ``exc`` may be retried, by type (see module docstring)."""
        if isinstance(exc, self.give_up_on):
            return False
        flag = getattr(exc, "retryable", None)
        if isinstance(flag, bool):
            return flag
        return isinstance(exc, self.retry_on)

"""compile() refuses durations that are not a positive number of seconds.

A timer of -5 s, a signal wait that times out at 0 s or a step attempt
limited to NaN seconds would otherwise compile and fire at once (or never):
the flow author gets a typed error that names the step and the value.
"""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel

from desktop_app.errors import FlowDefinitionError
from desktop_app.flow.definition import FlowBuilder


class S(BaseModel):
    got: str | None = None
    error: str | None = None


def _noop(state: S, ctx: object) -> None:
    return None


@pytest.mark.parametrize("seconds", [-5.0, 0, math.nan])
def test_timer_needs_a_positive_duration(seconds: float) -> None:
    b = FlowBuilder("t", S).sleep("nap", seconds).chain()
    with pytest.raises(FlowDefinitionError) as err:
        b.compile()
    assert err.value.problems == [
        f"step 'nap' has timeout_s={seconds!r}: give a positive number of seconds"
    ]


def test_timer_without_a_duration_is_refused() -> None:
    from desktop_app.flow.definition import WaitStep

    b = FlowBuilder("t", S).add(WaitStep("nap", "timer")).chain()
    with pytest.raises(FlowDefinitionError) as err:
        b.compile()
    assert err.value.problems == ["timer 'nap' needs a positive duration"]


@pytest.mark.parametrize("seconds", [-1.0, 0.0])
def test_wait_and_await_deadlines_must_be_positive(seconds: float) -> None:
    b = (
        FlowBuilder("t", S)
        .wait_signal("sig", "approve", key="k", into="got", timeout_s=seconds)
        .await_input("ask", "got", "why?", timeout_s=seconds)
        .chain()
    )
    with pytest.raises(FlowDefinitionError) as err:
        b.compile()
    assert err.value.problems == [
        f"step 'sig' has timeout_s={seconds!r}: give a positive number of seconds",
        f"step 'ask' has timeout_s={seconds!r}: give a positive number of seconds",
    ]


def test_step_attempt_timeout_must_be_positive() -> None:
    b = FlowBuilder("t", S).step("work", _noop, timeout_s=-0.5).chain()
    with pytest.raises(FlowDefinitionError, match=r"step 'work' has timeout_s=-0.5"):
        b.compile()


def test_positive_durations_compile() -> None:
    flow = (
        FlowBuilder("t", S)
        .sleep("nap", 0.001)
        .wait_signal("sig", "approve", key="k", into="got", timeout_s=3600)
        .step("work", _noop, timeout_s=2.5)
        .chain()
        .compile()
    )
    assert [s for s in flow.steps] == ["nap", "sig", "work"]

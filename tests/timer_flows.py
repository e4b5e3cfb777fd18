"""Flows that wait on a timer or a question with a deadline (registered in
subprocesses through ``FLOWDESK_FLOWS``), for the tests of who fires them:
the app while open, ``flowdesk agent``, and of answers from a skewed clock.

``napper``: ``a`` counts 1, sleeps ``NAP_S`` seconds, ``b`` counts 2.
``asker``: asks ``OK?`` with a ``ASK_S`` second deadline, then ``b`` counts 1;
``slow_asker`` the same with ``SLOW_ASK_S`` seconds, ``hour_asker`` with an hour.
``approver``: asks ``OK?`` with no deadline, then ``b`` counts 1.
"""

from __future__ import annotations

from pydantic import BaseModel

from desktop_app.flow import FlowBuilder

#: the napper's timer (seconds): short, the tests wait for it to fire
NAP_S = 2
#: the asker's deadline (seconds)
ASK_S = 3
#: the slow asker's deadline (seconds): long enough for a loaded machine to
#: show its question before it times out
SLOW_ASK_S = 15


class Order(BaseModel):
    order: str
    approved: str | None = None
    n: int = 0


def bump(state: Order) -> dict[str, int]:
    return {"n": state.n + 1}


napper = (
    FlowBuilder("napper", Order, inputs=("order",))
    .step("a", bump)
    .sleep("nap", NAP_S)
    .step("b", bump)
    .chain("a", "nap")
    .chain("nap", "b")
    .finish("b")
    .compile()
)

asker = (
    FlowBuilder("asker", Order, inputs=("order",))
    .await_input("approve", "approved", prompt="OK?", timeout_s=ASK_S)
    .step("b", bump)
    .chain("approve", "b")
    .finish("b")
    .compile()
)

slow_asker = (
    FlowBuilder("slow_asker", Order, inputs=("order",))
    .await_input("approve", "approved", prompt="OK?", timeout_s=SLOW_ASK_S)
    .step("b", bump)
    .chain("approve", "b")
    .finish("b")
    .compile()
)

approver = (
    FlowBuilder("approver", Order, inputs=("order",))
    .await_input("approve", "approved", prompt="OK?")
    .step("b", bump)
    .chain("approve", "b")
    .finish("b")
    .compile()
)

#: the hour asker's deadline (seconds): never passed while a test runs
HOUR_ASK_S = 3600

hour_asker = (
    FlowBuilder("hour_asker", Order, inputs=("order",))
    .await_input("approve", "approved", prompt="OK?", timeout_s=HOUR_ASK_S)
    .step("b", bump)
    .chain("approve", "b")
    .finish("b")
    .compile()
)

#: ``FLOWDESK_FLOWS`` naming all four (the hour asker is named by the tests using it)
FLOWS_ENV = (
    '["tests.timer_flows:napper", "tests.timer_flows:asker", '
    '"tests.timer_flows:slow_asker", "tests.timer_flows:approver"]'
)

#: the limited run's own deadline (seconds from its creation): before its timer
LIMIT_S = 2

#: ``limited``: ``a`` counts 1, sleeps an hour, ``b`` counts 2; the run's own
#: deadline (``deadline_s``) falls long before the timer
limited = (
    FlowBuilder("limited", Order, inputs=("order",), deadline_s=LIMIT_S)
    .step("a", bump)
    .sleep("nap", 3600)
    .step("b", bump)
    .chain("a", "nap")
    .chain("nap", "b")
    .finish("b")
    .compile()
)

LIMITED_ENV = '["tests.timer_flows:limited"]'

#: ``limited_asker``: asks ``OK?`` with an hour's deadline, then ``b`` counts
#: 1; the run's own deadline (``deadline_s``) falls long before the question's
limited_asker = (
    FlowBuilder("limited_asker", Order, inputs=("order",), deadline_s=LIMIT_S)
    .await_input("approve", "approved", prompt="OK?", timeout_s=3600)
    .step("b", bump)
    .chain("approve", "b")
    .finish("b")
    .compile()
)

LIMITED_ASKER_ENV = '["tests.timer_flows:limited_asker"]'

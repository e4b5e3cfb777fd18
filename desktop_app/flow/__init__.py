"""The durable-execution engine: no SQL, no UI.

Public names: :class:`FlowBuilder`, :class:`CompiledFlow`, :class:`Engine`,
:class:`StepContext`, :class:`ExecutionContext`, :class:`RunResult`,
:class:`EventBus` and the events in :mod:`desktop_app.flow.events`.
"""

from desktop_app.flow.context import ExecutionContext, StepContext
from desktop_app.flow.definition import CompiledFlow, FlowBuilder, LoopStep, Step
from desktop_app.flow.engine import Engine
from desktop_app.flow.events import EventBus
from desktop_app.flow.results import ResumePendingResult, RunResult

__all__ = [
    "CompiledFlow",
    "Engine",
    "EventBus",
    "ExecutionContext",
    "FlowBuilder",
    "LoopStep",
    "ResumePendingResult",
    "RunResult",
    "Step",
    "StepContext",
]

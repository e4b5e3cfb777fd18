"""Registered Pydantic AI agents: how a process that did not start a run
(``flowdesk resume RUN``, ``flowdesk agent``, the app's launch recovery)
finds the agent that resumes it.

As flows are registered (``flows`` in the settings, the ``flowdesk.flows``
entry points), a Pydantic AI agent is registered by the settings'
``pydantic_ai_agents`` (``"package.module:attribute"``) or a
``flowdesk.pydantic_ai`` entry point, naming a ``pydantic_ai.Agent`` with a
``name``, a list of them, or a function returning either. A run records the
agent's name when it is created; it is resumed by the registered agent of
that name, with its own model and tools (no Flowdesk model is needed).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from pydantic_ai import Agent as PydanticAgent

from desktop_app.agent.runtime import AgentResponse
from desktop_app.config import Settings
from desktop_app.errors import ConfigError, RunStateError
from desktop_app.integrations.pydantic_ai.agent import FlowdeskAgent
from desktop_app.store.protocol import AgentLog

ENTRY_POINT_GROUP = "flowdesk.pydantic_ai"


def registered_agents(settings: Settings) -> tuple[dict[str, PydanticAgent[Any, Any]], list[str]]:
    """The registered agents by name (entry points first, then the
    settings), and why each registration that gave none failed (one that
    cannot be imported, gives no named ``pydantic_ai.Agent``, or names an
    agent another one names too). A broken registration never hides the
    others: runs of the agents that load are resumed (as flows are).
    """
    sources: list[tuple[str, Callable[[], Any]]] = [
        (f"entry point {ep.name!r}", ep.load) for ep in entry_points(group=ENTRY_POINT_GROUP)
    ]
    for spec in settings.pydantic_ai_agents:
        module_name, _, attr = spec.partition(":")
        sources.append((f"pydantic_ai_agents entry {spec!r}", _importer(module_name, attr)))
    found: dict[str, PydanticAgent[Any, Any]] = {}
    shared: set[str] = set()
    problems: list[str] = []
    for where, get in sources:
        try:
            obj = get()
            if callable(obj) and not isinstance(obj, PydanticAgent):
                obj = obj()
        except (ImportError, AttributeError) as exc:
            problems.append(
                f"cannot load the Pydantic AI agent of {where}: {type(exc).__name__}: {exc}; "
                "use 'package.module:attribute' and make sure the package is importable"
            )
            continue
        except Exception as exc:  # its module or function raised: say that, not "import"
            problems.append(
                f"the Pydantic AI agent of {where} raised while it was built: "
                f"{type(exc).__name__}: {exc}"
            )
            continue
        for agent in obj if isinstance(obj, (list, tuple)) else [obj]:
            if not isinstance(agent, PydanticAgent) or not agent.name:
                problems.append(
                    f"{where} gave {type(agent).__name__}, not a pydantic_ai.Agent with a "
                    "name; point it at Agent(..., name='...') (or a function or list of them)"
                )
            elif agent.name in found and found[agent.name] is not agent:
                shared.add(agent.name)
            else:
                found[agent.name] = agent
    for name in sorted(shared):  # which of the two would resume its runs is unknown
        del found[name]
        problems.append(f"two registered Pydantic AI agents are named {name!r}")
    return found, problems


def registered_agent(settings: Settings, run_id: str, name: str) -> PydanticAgent[Any, Any]:
    """The registered agent ``name`` that resumes agent run ``run_id``.

    Raises:
        ConfigError: no registration that loads gives it (the message says
            how to register it, and why each broken registration failed).
    """
    agents, problems = registered_agents(settings)
    agent = agents.get(name)
    if agent is not None:
        return agent
    broken = f"; {'; '.join(problems)}" if problems else ""
    raise ConfigError(
        f"agent run {run_id} is a run of the Pydantic AI agent {name!r}, which is not "
        'registered: add "package.module:attribute" of it to pydantic_ai_agents in the '
        f"settings, or publish a {ENTRY_POINT_GROUP!r} entry point{broken}"
    )


def _importer(module_name: str, attr: str) -> Callable[[], Any]:
    def get() -> Any:
        module = importlib.import_module(module_name)
        return getattr(module, attr) if attr else module

    return get


def resume_registered(
    store: AgentLog,
    settings: Settings,
    run_id: str,
    answer: str | None = None,
    *,
    wait_id: str | None = None,
    owner: str | None = None,
) -> AgentResponse:
    """Resume a Pydantic AI agent run with the registered agent it names
    (``answer``: yes or no to the tool call it waits to have approved;
    ``wait_id``: that approval, see ``FlowdeskAgent.resume``; ``owner``: the
    lease owner to drive it as, one that may hold it already, else a new one).

    Returns:
        The run's outcome as Flowdesk reports agent runs (``done`` with its
        text, or ``input_required`` with the approval it waits for).

    Raises:
        RunStateError: ``answer`` is given but the run waits for none (checked
            first: a finished run is refused whether or not its agent is registered).
        ConfigError: its agent is not registered, or its registration
            fails to load (the message says how, and why).
        Whatever resuming raises (``FlowdeskAgent.resume``): the run is then ``failed``.
    """
    run = store.get(run_id)
    if answer is not None and run.status != "input_required":  # before asking who runs it
        raise RunStateError(f"agent run {run_id} waits for no answer (status {run.status!r})")
    agent = registered_agent(settings, run_id, run.agent)
    durable = FlowdeskAgent(agent, store, owner=owner)
    result = durable.resume_sync(run_id, answer=answer, wait_id=wait_id)
    return AgentResponse(
        run_id, result.status, text=result.text, question=result.question, approval=result.approval
    )

"""Bring-your-own agent frameworks on Flowdesk's store (optional extras:
``flowdesk[langgraph]``, ``flowdesk[pydantic-ai]``).

Each subpackage imports its framework and nothing else imports it, so
Flowdesk without the extra never loads it.
"""

from __future__ import annotations

import importlib.util

from desktop_app.extras import install_command


def missing_extra(
    exc: ModuleNotFoundError, extra: str, what: str, framework: str
) -> ModuleNotFoundError:
    """The error an integration raises in place of ``exc`` when the
    framework it is built on is not installed: it names the framework's
    package (and the module found missing, when the framework is installed
    but a package it needs, such as LangGraph's ``langchain_core``, is not),
    and the command that installs them (:func:`desktop_app.extras.install_command`),
    as the MCP client does. Still a ``ModuleNotFoundError`` (an ``ImportError``), with
    ``exc``'s ``name``, so code that catches the bare one goes on working;
    raise it ``from exc``.

    Args:
        exc: the import's failure.
        extra: the extra's name in ``pyproject.toml`` (``langgraph``,
            ``pydantic-ai``).
        what: the integration, as the message names it.
        framework: the framework's top-level package (``langgraph``,
            ``pydantic_ai``).
    """
    missing = (exc.name or framework).partition(".")[0]
    try:
        installed = missing != framework and importlib.util.find_spec(framework) is not None
    except (ImportError, ValueError):  # a broken install: as if it were missing
        installed = False
    needs = f"the {framework} package and {missing}" if installed else f"the {framework} package"
    return ModuleNotFoundError(
        f"{what} needs {needs}, which is not installed: {install_command(extra)}",
        name=exc.name,
    )

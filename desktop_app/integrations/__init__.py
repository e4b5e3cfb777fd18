"""Bring-your-own agent frameworks on Flowdesk's store (optional extras:
``flowdesk[langgraph]``, ``flowdesk[pydantic-ai]``).

Each subpackage imports its framework and nothing else imports it, so
Flowdesk without the extra never loads it.
"""

from __future__ import annotations


def missing_extra(exc: ModuleNotFoundError, extra: str, what: str) -> ModuleNotFoundError:
    """The error an integration raises in place of ``exc`` when the
    framework it is built on is not installed: it names the module missing
    and the extra that installs it (``pip install 'flowdesk[EXTRA]'``), as
    the MCP client does. Still a ``ModuleNotFoundError`` (an
    ``ImportError``), with ``exc``'s ``name``, so code that catches the bare
    one goes on working; raise it ``from exc``.

    Args:
        exc: the import's failure.
        extra: the extra's name in ``pyproject.toml`` (``langgraph``,
            ``pydantic-ai``).
        what: the integration, as the message names it.
    """
    package = (exc.name or extra).partition(".")[0]
    return ModuleNotFoundError(
        f"{what} needs the {package} package, which is not installed: "
        f"pip install 'flowdesk[{extra}]'",
        name=exc.name,
    )

"""The LangGraph and Pydantic AI integrations imported without their extra
say which extra to install, as the MCP client does, instead of a bare
``ModuleNotFoundError: No module named 'langgraph'``.

Each import runs in a Python process of its own whose import system cannot
find the framework (a meta-path hook refuses it, as an environment without
it does); the extra the message names is checked against ``pyproject.toml``
(it must exist and install the framework).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.cli_support import install_hint

REPO = Path(__file__).resolve().parents[1]

#: run before the user's import: the framework is not installed, as far as
#: this process can tell
BLOCK = """
import sys

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {packages!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
"""


def imported_without(statement: str, *packages: str) -> subprocess.CompletedProcess[str]:
    code = BLOCK.format(packages=packages) + statement
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )


LANGGRAPH = "from desktop_app.integrations.langgraph import FlowdeskSaver"
SAVER = "from desktop_app.integrations.langgraph.saver import FlowdeskSaver"
PYDANTIC_AI = "from desktop_app.integrations.pydantic_ai import FlowdeskAgent"
REGISTRY = "from desktop_app.integrations.pydantic_ai.registry import registered_agents"


@pytest.mark.parametrize(
    ("missing", "package", "extra", "integration", "statement"),
    [
        # an environment without the extra has neither LangGraph nor what it needs
        (("langgraph", "langchain_core"), "langgraph", "langgraph", "LangGraph", LANGGRAPH),
        (("langgraph", "langchain_core"), "langgraph", "langgraph", "LangGraph", SAVER),
        (("langgraph",), "langgraph", "langgraph", "LangGraph", LANGGRAPH),
        (("pydantic_ai",), "pydantic_ai", "pydantic-ai", "Pydantic AI", PYDANTIC_AI),
        (("pydantic_ai",), "pydantic_ai", "pydantic-ai", "Pydantic AI", REGISTRY),
    ],
)
def test_an_integration_without_its_extra_names_the_extra_to_install(
    missing: tuple[str, ...], package: str, extra: str, integration: str, statement: str
) -> None:
    got = imported_without(statement, *missing)
    assert got.returncode == 1, got.stderr
    last = got.stderr.strip().splitlines()[-1]
    assert last == (
        f"ModuleNotFoundError: Flowdesk's {integration} integration needs the {package} "
        f"package, which is not installed: {install_hint(extra)}"
    ), got.stderr
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(req.replace("_", "-").startswith(package.replace("_", "-")) for req in extras[extra])


def test_langgraph_installed_without_a_package_it_needs_names_both() -> None:
    """A broken install: LangGraph is there, ``langchain_core`` is not; the
    error names both, and the same extra installs them."""
    got = imported_without(LANGGRAPH, "langchain_core")
    assert got.returncode == 1, got.stderr
    assert got.stderr.strip().splitlines()[-1] == (
        "ModuleNotFoundError: Flowdesk's LangGraph integration needs the langgraph package "
        f"and langchain_core, which is not installed: {install_hint('langgraph')}"
    ), got.stderr


def test_code_that_catches_the_bare_import_error_still_catches_it() -> None:
    """``flowdesk show`` of a LangGraph thread and the app catch
    ``ImportError`` to go on without the extra: the clear error is one."""
    got = imported_without(
        "try:\n"
        "    from desktop_app.integrations.langgraph import FlowdeskSaver\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc.name)\n",
        "langgraph",
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "ModuleNotFoundError langgraph"

"""The command that installs one of Flowdesk's optional extras, as the
errors that ask for one print it.

``pip install 'flowdesk[EXTRA]'`` is right for Flowdesk installed from a
package index; from a checkout (``make run``'s editable install) the extra
comes from that checkout, into the environment running Flowdesk, and a
package index may have no ``flowdesk`` at all (a tryout's report). The
editable install is told apart by its ``direct_url.json`` (PEP 610), as pip
writes it.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from desktop_app.textsafe import shell_quote


def install_command(extra: str) -> str:
    """The command that installs ``extra`` (a name in ``pyproject.toml``'s
    ``optional-dependencies``: ``postgres``, ``mcp``, ``langgraph``,
    ``pydantic-ai``, ``otel``) for this Flowdesk: ``pip install
    'flowdesk[EXTRA]'``, or from an editable install of a checkout
    ``PYTHON -m pip install -e 'CHECKOUT[EXTRA]'`` with this interpreter
    and that checkout, quoted for a POSIX shell. Never raises."""
    checkout = editable_checkout()
    if checkout is None:
        return f"pip install 'flowdesk[{extra}]'"
    where = shell_quote(f"{checkout}[{extra}]")
    return f"{shell_quote(sys.executable)} -m pip install -e {where}"


def editable_checkout() -> Path | None:
    """The folder Flowdesk is installed from in editable mode, or ``None``
    (installed from a wheel or an index, or not installed at all)."""
    try:
        text = metadata.distribution("flowdesk").read_text("direct_url.json")
    except (metadata.PackageNotFoundError, OSError):
        return None
    try:
        data = json.loads(text or "null")
    except ValueError:
        return None
    if not isinstance(data, dict) or not (data.get("dir_info") or {}).get("editable"):
        return None
    url = urlparse(str(data.get("url", "")))
    return Path(unquote(url.path)) if url.scheme == "file" else None

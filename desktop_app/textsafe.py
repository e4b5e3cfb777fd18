"""Text from outside Flowdesk made safe to print or write where a terminal
may show it.

File contents (a digest's titles and summaries), model replies and tool
output can hold control characters. Written raw into a report, ``cat
digest.md`` would run them: an ESC sequence can recolour or clear the
screen, move the cursor to hide lines, set the window title, or (in some
terminals) write to the clipboard. :func:`visible_controls` shows every such
character as its escape instead, so the text is still all there, readable
and inert. Use it on anything from outside that ends up in a file a person
may ``cat`` or in terminal output.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: characters shown as ``\\xNN``: C0 controls (ESC included) but newline and
#: tab, DEL, and the C1 controls U+0080-U+009F (U+009B is a one-byte CSI)
_CONTROLS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
_KEPT = {ord("\n"), ord("\t")}
_TABLE = {c: f"\\x{c:02x}" for c in _CONTROLS if c not in _KEPT}


def visible_controls(text: str) -> str:
    """``text`` with each control character written as its escape: ESC
    becomes the four characters ``\\x1b``, a carriage return ``\\x0d``, U+009B
    ``\\x9b``; newline and tab stay as they are, every other character too.

    Args:
        text: any text (str); a string without control characters comes back
            unchanged (the same bytes: reports stay byte-identical).

    Returns:
        str: the text, safe to write where a terminal will show it.
    """
    return text.translate(_TABLE)


def one_line(text: str) -> str:
    """``text`` on one line, for a name shown in a line of its own (a file
    name in a report heading, a list item or a table row): every character
    that is not printable, newline and tab included, as its escape
    (``a\\nb.txt``), so a name holding a newline cannot break the line or
    forge one after it; a printable name comes back unchanged."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


#: a JSON string escape of a control character (``\\u001b``, and the short
#: ``\\b``, ``\\f``, ``\\r``), not preceded by an escaped backslash
_JSON_CONTROL = re.compile(r"(?<!\\)((?:\\\\)*)\\(?:u00([0-9a-fA-F]{2})|([bfr]))")
_JSON_SHORT = {"b": 0x08, "f": 0x0C, "r": 0x0D}


def visible_json_text(text: str) -> str:
    """JSON text (or a line holding some) for a person to read, its control
    characters in the one form :func:`visible_controls` uses: the escapes
    JSON writes for them (``\\u001b``, ``\\r``) become ``\\x1b``,
    ``\\x0d``, and raw ones (DEL, C1) are escaped too; ``\\n`` and
    ``\\t`` stay. For display only: the result is no longer JSON."""

    def one(m: re.Match[str]) -> str:
        code = int(m[2], 16) if m[2] else _JSON_SHORT[m[3]]
        return f"{m[1]}\\x{code:02x}" if code in _TABLE else m[0]

    return visible_controls(_JSON_CONTROL.sub(one, text))


def visible_json(value: Any, **dumps: Any) -> str:
    """``value`` as JSON (``json.dumps`` with ``dumps``, non-ASCII kept) for
    a person to read, control characters shown as ``\\xNN``
    (:func:`visible_json_text`)."""
    return visible_json_text(json.dumps(value, ensure_ascii=False, **dumps))

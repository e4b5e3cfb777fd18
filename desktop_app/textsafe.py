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
import shlex
from collections.abc import Iterable
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


def _ansi_c(c: str) -> str:
    """One character inside bash's ``$'...'``: printable ones as they are
    (but ``\\`` and ``'``), the rest as escapes bash turns back into them."""
    if c in "\\'":
        return "\\" + c
    if c.isprintable():
        return c
    code = ord(c)
    if c in "\n\t":
        return "\\n" if c == "\n" else "\\t"
    if code < 0x80:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte kept by surrogateescape (argv, a file name)
        return f"\\x{code - 0xDC00:02x}"
    # its UTF-8 bytes, not ``\\u202e``: bash decodes ``\\u`` only in a UTF-8
    # locale (under ``env -i``, cron, ssh or systemd it passes ``\\u202E`` on)
    return "".join(f"\\x{b:02x}" for b in c.encode("utf-8", "surrogatepass"))


def shell_quote(text: str) -> str:
    """``text`` as one argument for a POSIX shell, to print in a command a
    person pastes: :func:`shlex.quote` (``'my file'``) when every character
    is printable (spaces and non-ASCII letters are), else bash's ANSI-C
    quoting, ``$'rel\\x1b[31m-43'``, where each control character (ESC,
    newline, tab, DEL, C1), invisible format character (a bidi override
    such as U+202E, written as its UTF-8 bytes ``\\xe2\\x80\\xae``) or other
    non-printable one is written as the escapes bash turns back into it:
    visible, inert in a terminal, and the same string once pasted into
    bash, zsh or ksh93, in any locale (bash's ``\\u`` escapes work only in a
    UTF-8 one; ``env -i bash``, cron and ssh often have ``C``).

    Args:
        text: the argument (str), any characters.

    Returns:
        str: the quoted argument, holding no control or format character.
    """
    if text.isprintable():
        return shlex.quote(text)
    return "$'" + "".join(_ansi_c(c) for c in text) + "'"


def shell_join(args: Iterable[str]) -> str:
    """``args`` as a command line, each quoted by :func:`shell_quote`
    (:func:`shlex.join` with ANSI-C quoting where an argument needs it)."""
    return " ".join(shell_quote(a) for a in args)


def python_literal(value: Any) -> str:
    """``value`` (str, int, float, bool, None, or lists, tuples and dicts of
    these) as Python source that evaluates to it, in ASCII: :func:`ascii`,
    so ``'thr \\xfcn\\xef/\\U0001f389'`` for ``thr ünï/🎉``; a control or
    format character in it is an escape too. (JSON is not Python source for
    every string: its ``\\ud83c\\udf89`` surrogate pair is two lone
    surrogates in Python.)"""
    return ascii(value)


def cell_width(text: str) -> int:
    """How many terminal columns ``text`` takes (a wide emoji or CJK
    character two; rich's ``cell_len``)."""
    from rich.cells import cell_len

    return cell_len(text)


def fit_cells(text: str, width: int) -> str:
    """``text`` as exactly ``width`` terminal columns, for a table column:
    padded with spaces after it, or, when wider, cut to ``width - 1``
    columns and ended with ``…`` (``width``: int >= 1)."""
    from rich.cells import set_cell_size

    if cell_width(text) <= width:
        return set_cell_size(text, width)
    return set_cell_size(text, width - 1) + "…"


def fit_cells_keeping_end(text: str, width: int, head: int = 8) -> str:
    """:func:`fit_cells` for an id whose end tells it apart (a child run's
    ``PARENT:step:n``, which a cut at the end would show as its parent's):
    when wider than ``width`` columns, its first ``head`` columns, ``…``
    and as much of its end as fits (``width`` > ``head`` + 1)."""
    from rich.cells import cell_len, set_cell_size

    if cell_width(text) <= width:
        return set_cell_size(text, width)
    room = width - head - 1
    tail = ""
    for ch in reversed(text):
        if cell_len(ch + tail) > room:
            break
        tail = ch + tail
    return set_cell_size(set_cell_size(text, head) + "…" + tail, width)


#: characters of a name or key a message quotes whole; a longer one is cut
QUOTED_CHARS = 120


def quoted(text: str, limit: int = QUOTED_CHARS) -> str:
    """``text`` quoted for a sentence (``repr``, as messages quote a name or
    key: ``'approve'``); one longer than ``limit`` characters cut to its
    first ``limit`` with its length said (``'kkkk…'… (5,000,000
    characters)``), so that a key read from a file does not print
    megabytes. Where a command must carry the whole value, a hint names the
    file option instead."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text):,} characters)"

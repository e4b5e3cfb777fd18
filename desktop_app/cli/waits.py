"""What a waiting run waits for, in words, with the command that moves it on.

``flowdesk show RUN`` prints these lines (:func:`wait_lines`): for each
pending wait its kind and what it needs (the question, the signal's name
and key, the event type, the timer), its deadline in local time and in UTC
with the time left, and the exact command to run, carrying the user's
``--db``/``--scope`` (:class:`~desktop_app.cli.output.Hints`):

* input: ``answer RUN yes`` (``--wait-id`` when the run asks several
  questions at once); the last word is the answer;
* signal: ``signal NAME KEY`` (a payload with ``--payload JSON``);
* event: ``publish TYPE`` (a payload with ``--payload JSON``);
* timer: ``resume RUN`` fires it once it is due (so does ``flowdesk agent``
  or the app, on their own).

A run ``waiting`` with no wait was paused for an operator (a full disk, an
unknown commit outcome): ``resume RUN`` continues it. An agent run asking
its user (``input_required``) gets the same answer line
(:func:`agent_wait_lines`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from desktop_app.cli.output import Hints, due_in, iso
from desktop_app.textsafe import visible_controls


def local_and_utc(ts: float, now: float) -> str:
    """``2026-12-04 17:25:43 IST (local), 2026-12-04T11:55:43.120Z (UTC), in 23 h 59 min``:
    UTC epoch seconds in the machine's time zone (``TZ``), in UTC, and
    relative to ``now``."""
    local = datetime.fromtimestamp(ts, UTC).astimezone()
    return f"{local:%Y-%m-%d %H:%M:%S %Z} (local), {iso(ts)} (UTC), {due_in(ts, now)}"


def _question(prompt: Any) -> str:
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False)
    return visible_controls(json.dumps(text, ensure_ascii=False))


def wait_lines(hints: Hints, run: Any, waits: Sequence[Any], now: float) -> list[str]:
    """The lines ``show`` prints under ``waits for:`` for the flow run
    ``run`` (a ``RunRecord``) and its pending ``waits`` (``Wait`` records),
    judged at ``now`` (UTC epoch seconds). Each command line is
    ``<what> with: <command>``, the command runnable exactly as printed."""
    rid = run.run_id
    lines: list[str] = []
    if not waits:
        if run.status == "waiting":
            why = f": {visible_controls(run.error)}" if run.error else ""
            lines.append(f"  an operator{why}")
            lines.append(f"    continue with: {hints.cmd(f'resume {rid}')}")
        return lines
    inputs = sum(w.kind == "input" for w in waits)
    for w in waits:
        step = f"step {w.step_id}, wait {w.wait_id}"
        if w.kind == "input":
            lines.append(f"  an answer ({step}): {_question(w.prompt)}")
            note = ANSWER_NOTE
            which = f" --wait-id {shlex.quote(w.wait_id)}" if inputs > 1 else ""
            verb, command = "answer", f"answer {rid} yes{which}"
        elif w.kind == "signal":
            name, key = str(w.name), str(w.key)
            lines.append(f"  signal {name!r} with key {key!r} ({step})")
            note = "a payload goes with --payload JSON"
            verb, command = "send it", f"signal {shlex.quote(name)} {shlex.quote(key)}"
        elif w.kind == "event":
            lines.append(f"  an event of type {str(w.name)!r} ({step})")
            note = "a payload goes with --payload JSON"
            verb, command = "publish it", f"publish {shlex.quote(str(w.name))}"
        else:
            lines.append(f"  a timer ({step})")
            note = "a running `flowdesk agent` or the app fires it on its own"
            verb, command = "fire it once due", f"resume {rid}"
        if w.deadline_at is not None:
            label = "fires" if w.kind == "timer" else "deadline"
            lines.append(f"    {label} {local_and_utc(w.deadline_at, now)}")
        lines.append(f"    {note}")
        lines.append(f"    {verb} with: {hints.cmd(command)}")
    return lines


ANSWER_NOTE = "the last word is the answer: yes, no or any text (JSON with --value-json)"


def agent_wait_lines(hints: Hints, run: Any, now: float) -> list[str]:
    """``show``'s ``waits for:`` lines of an agent run (an ``AgentRun``):
    its question and ``answer RUN yes`` while it asks its user
    (``input_required``), the run's expiry if it has one; nothing otherwise."""
    if run.status != "input_required":
        return []
    question = ((run.pending_call or {}).get("arguments") or {}).get("question")
    lines = [f"  an answer: {_question(question)}"]
    if run.expires_at is not None:
        lines.append(f"    expires {local_and_utc(run.expires_at, now)}")
    lines.append(f"    {ANSWER_NOTE.replace(' (JSON with --value-json)', '')}")
    lines.append(f"    answer with: {hints.cmd(f'answer {run.run_id} yes')}")
    return lines

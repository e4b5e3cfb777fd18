"""A person approves a tool call before it runs: the exact tool and arguments
they saw, once.

A tool *requires approval* when its ``requires_approval`` attribute is true
(:func:`requires_approval`): a Python tool built with
``@tool(requires_approval=True)`` / ``Tool(fn, requires_approval=True)``, or
an MCP tool of a server whose settings name it
(``require_approval = ["write_file"]``) or ask for every destructive tool
(``approve_destructive = true``; destructive as the MCP specification defines
``destructiveHint``: a tool not annotated ``readOnlyHint: true`` whose
``destructiveHint`` is not ``false``, the specification's default being
``true``).

What the person approves is an :class:`ApprovalRequest`: the tool's name,
its arguments, the call's place in the run, and :func:`call_digest` of name
and arguments. A decision is journaled in the run's tool journal under
:attr:`ApprovalRequest.key` (``"approval/<place>:<digest>"``, in the same
transaction that ends the run's wait), *before* the call is made; it is found
again only by a call at the same place with the same name and arguments. So:

* "yes" lets exactly that call run, once (the call is at most once: one that
  started but whose result was never saved is not sent again after a crash;
  the model is told its outcome is unknown);
* a crash between the decision and the call (``kill -9``) finds the decision
  and makes the call once;
* a call with other arguments (a model asked again after a crash proposes
  something else) has another digest, finds no decision, and the person is
  asked again: a "yes" is never applied to a call they did not see;
* "no" sends the model :func:`declined_result` and runs nothing.

API for a runtime (the Flowdesk agent runtime uses it as follows; a
pydantic-ai integration can do the same around its tool calls)::

    request = ApprovalRequest.of(tool_name, arguments, place)
    journal = ApprovalJournal(agent_log, run_id, clock, owner)
    decided = journal.decision(request)      # True, False, or None
    if decided is None:
        # pause the run input_required; show request.question()
        ...
    # later, on the person's answer (text):
    journal.record(request, parse_decision(text))   # raises ApprovalAnswerError
    # or, ending the wait in the same transaction:
    store.update(run_id, now, tool=journal.row(request, approved), status="running", ...)

A run paused for approval is stored ``input_required`` with
``pending_call = {**call, "approval": request.to_json()}``: that is what
:func:`pending_approval` reads, so ``flowdesk waiting`` (and ``--json``), the
app's inbox and ``flowdesk show`` display the request, and
:func:`answer_commands` gives the ``flowdesk answer RUN yes|no`` commands
they print (``flowdesk answer`` continues the run through
``Agent.resume_input``; another runtime answers through its own resume).

``parse_decision`` accepts ``yes``/``y``/``no``/``n`` (any case, spaces
around); anything else raises :class:`~desktop_app.errors.ApprovalAnswerError`
and nothing is recorded. Arguments and names are rendered for a terminal by
:func:`render_call` (control characters shown as escapes, see
:mod:`desktop_app.textsafe`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from desktop_app.agent.messages import canonical_json
from desktop_app.errors import ApprovalAnswerError, RunStateError
from desktop_app.flow.clock import Clock
from desktop_app.store.protocol import AgentLog
from desktop_app.textsafe import shell_quote, visible_json_text

#: how an approval's key in a run's tool journal starts ("/" is in no tool name)
APPROVAL_PREFIX = "approval/"
#: the tool-journal ``tool`` column of an approval row
APPROVAL_TOOL = "approval"
_YES = frozenset({"yes", "y"})
_NO = frozenset({"no", "n"})


def requires_approval(tool: object) -> bool:
    """Whether a call of ``tool`` (anything with the ``AgentTool`` shape) waits
    for a person's "yes": its ``requires_approval`` attribute, ``False`` when
    it has none."""
    return bool(getattr(tool, "requires_approval", False))


def call_digest(tool: str, arguments: Mapping[str, Any]) -> str:
    """SHA-256 (64 hex characters) of the canonical JSON (sorted keys, compact)
    of ``{"arguments": arguments, "tool": tool}``: the identity of what the
    person approves. The same name and arguments give the same digest in every
    process; any change to either gives another."""
    text = canonical_json({"arguments": dict(arguments), "tool": tool})
    return hashlib.sha256(text.encode()).hexdigest()


def render_call(tool: str, arguments: Mapping[str, Any]) -> str:
    """``tool {"arg": ...}`` for a person to read: arguments as canonical JSON,
    every control character (ESC, CR, C1) written as its escape, so what is
    shown is exactly what would be sent and cannot drive the terminal."""
    return visible_json_text(f"{tool} {canonical_json(dict(arguments))}")


def declined_result(tool: str) -> str:
    """The tool result the model gets when the person said no (JSON text)."""
    return json.dumps(
        {"error": f"the user declined this call to {tool}; it was not run. Do not retry it."}
    )


def parse_decision(text: str) -> bool:
    """``True`` for yes/y, ``False`` for no/n (any case, surrounding spaces).

    Raises:
        ApprovalAnswerError: any other text (nothing is recorded; answer again).
    """
    word = text.strip().lower()
    if word in _YES:
        return True
    if word in _NO:
        return False
    raise ApprovalAnswerError(
        f"{text!r} is not an answer to an approval: answer yes (run the call) or no (refuse it)"
    )


@dataclass(frozen=True)
class ApprovalRequest:
    """One call waiting for a person's decision.

    Attributes:
        tool: the name the model called (``<server>__<tool>`` for MCP).
        arguments: the exact arguments (a JSON object).
        place: the call's 1-based number among the run's tool calls.
        digest: :func:`call_digest` of ``tool`` and ``arguments``.
    """

    tool: str
    arguments: Mapping[str, Any]
    place: int
    digest: str

    @classmethod
    def of(cls, tool: str, arguments: Mapping[str, Any], place: int) -> ApprovalRequest:
        """The request for calling ``tool`` with ``arguments`` at ``place``."""
        return cls(tool, dict(arguments), place, call_digest(tool, arguments))

    @property
    def key(self) -> str:
        """``"approval/<place>:<digest>"``: where the decision is journaled."""
        return f"{APPROVAL_PREFIX}{self.place}:{self.digest}"

    def question(self) -> str:
        """What the person is asked (safe for a terminal): ``approve the call
        TOOL {ARGS}? (yes/no)``."""
        return f"approve the call {render_call(self.tool, self.arguments)}? (yes/no)"

    def to_json(self) -> dict[str, Any]:
        """``{"tool", "arguments", "place", "digest"}`` (kept with a paused run)."""
        return {
            "tool": self.tool,
            "arguments": dict(self.arguments),
            "place": self.place,
            "digest": self.digest,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ApprovalRequest:
        """The request :meth:`to_json` wrote. The digest is computed again from
        tool and arguments (a stored digest that disagrees is not trusted)."""
        return cls.of(str(data["tool"]), dict(data.get("arguments") or {}), int(data["place"]))


def pending_approval(pending_call: Mapping[str, Any] | None) -> ApprovalRequest | None:
    """The request an ``input_required`` agent run waits on, from its stored
    ``pending_call`` (``AgentRun.pending_call``), or ``None`` when it waits
    for something else (an ``ask_user`` question) or nothing."""
    data = (pending_call or {}).get("approval")
    return None if data is None else ApprovalRequest.from_json(data)


def agent_wait_id(pending_call: Mapping[str, Any] | None) -> str | None:
    """The identity of what an ``input_required`` agent run waits on, from
    its stored ``pending_call``: ``"approval/<place>:<digest>"``
    (:attr:`ApprovalRequest.key`) for a tool call waiting for approval,
    ``"ask/<place>:<call id>"`` for an ``ask_user`` question (``place``: the
    call's 1-based number among the run's tool calls, so a model reusing
    call ids gives each question an id of its own; ``"ask/<call id>"`` for
    one stored before the place was), ``None`` when it waits on nothing. An
    answer sent with it (``Agent.resume_input(..., wait_id=...)``) is
    refused once the run waits on something else, so a screen read before
    someone else answered never answers the next question."""
    if not pending_call:
        return None
    request = pending_approval(pending_call)
    if request is not None:
        return request.key
    place = pending_call.get("place")
    call_id = pending_call.get("id", "")
    return f"ask/{call_id}" if place is None else f"ask/{place}:{call_id}"


def require_wait(run: Any, wait_id: str) -> None:
    """Check that agent run ``run`` (an ``AgentRun``) is ``input_required``
    on ``wait_id`` (:func:`agent_wait_id`).

    Raises:
        RunStateError: it waits on something else, or on nothing (someone
            answered the question ``wait_id`` names elsewhere).
    """
    asked = agent_wait_id(run.pending_call) if run.status == "input_required" else None
    if asked == wait_id:
        return
    if asked is None:
        raise RunStateError(
            f"agent run {run.run_id}: the question you answered was answered elsewhere "
            f"(its status is {run.status!r}); nothing was answered"
        )
    raise RunStateError(
        f"agent run {run.run_id} does not wait on {short_wait_id(wait_id)!r}: it asks "
        f"another question now ({short_wait_id(asked)!r}); the one you answered was "
        "answered elsewhere, or the id is mistyped; nothing was answered"
    )


#: hex digits of a call's digest a printed ``--wait-id`` keeps
#: (:func:`short_wait_id`): 48 bits, against calls at one place of one run
SHORT_DIGEST = 12


def short_wait_id(wait_id: str) -> str:
    """``--wait-id``'s value in a printed ``answer`` command for the agent
    wait ``wait_id`` (:func:`agent_wait_id`): an approval's key with the
    first :data:`SHORT_DIGEST` hex digits of its digest
    (``approval/2:3f9a0c1b2d4e``), which :func:`expand_wait_id` matches;
    any other id as it is."""
    if not wait_id.startswith(APPROVAL_PREFIX):
        return wait_id
    place, _, digest = wait_id.partition(":")
    return f"{place}:{digest[:SHORT_DIGEST]}"


def expand_wait_id(given: str, current: str | None) -> str:
    """The wait id ``answer --wait-id GIVEN`` names when the run waits on
    ``current`` (:func:`agent_wait_id`; None: on nothing): ``current``
    when ``given`` is it or its :func:`short_wait_id` (the same place, a
    digest starting with the given one, at least :data:`SHORT_DIGEST` hex
    digits), else ``given`` unchanged (then refused: the run waits on
    another call, nothing is answered)."""
    if current is None or given == current or not given.startswith(APPROVAL_PREFIX):
        return given
    place, _, digest = given.partition(":")
    if len(digest) >= SHORT_DIGEST and current.startswith(f"{place}:{digest}"):
        return current
    return given


def answer_commands(run_id: str, wait_id: str) -> tuple[str, str]:
    """The ``flowdesk`` command lines (without ``flowdesk`` and its
    ``--db``/``--scope``: pass each to ``Hints.cmd``) that approve and that
    decline the call agent run ``run_id`` waits on, ``wait_id`` (its
    :attr:`ApprovalRequest.key`): each carries ``--wait-id``
    (:func:`short_wait_id`), so an answer typed after someone else answered
    is refused instead of deciding the run's next call."""
    return approval_command(run_id, wait_id, "yes"), approval_command(run_id, wait_id, "no")


def approval_command(run_id: str, wait_id: str, answer: str) -> str:
    """The ``flowdesk`` command line (for ``Hints.cmd``) that gives the call
    agent run ``run_id`` waits on, ``wait_id``, the answer ``answer``
    (``yes``, ``no``, or as a person typed it): ``answer RUN ANSWER
    --wait-id ID`` (:func:`short_wait_id`)."""
    which = shell_quote(short_wait_id(wait_id))
    return f"answer {run_id} {shell_quote(answer)} --wait-id {which}"


def ask_command(run_id: str, wait_id: str | None, answer: str | None = None) -> str:
    """The ``flowdesk`` command line (for ``Hints.cmd``) that answers the
    ``ask_user`` question ``wait_id`` (:func:`agent_wait_id`) agent run
    ``run_id`` waits on with ``answer`` (None: the placeholder ``TEXT``):
    ``ask --resume RUN --answer TEXT --wait-id ID``, refused once someone
    else answered it and the run asks another question."""
    given = "TEXT" if answer is None else shell_quote(answer)
    pin = "" if wait_id is None else f" --wait-id {shell_quote(wait_id)}"
    return f"ask --resume {run_id} --answer {given}{pin}"


class ApprovalJournal:
    """Decisions of one agent run, in its tool journal (``AgentLog``).

    Args:
        store: the agent-run store (the run's tool journal).
        run_id: the run.
        clock: time source (UTC epoch seconds) for the rows' timestamps.
        owner: the lease owner every write checks (``None``: no check).
    """

    def __init__(
        self, store: AgentLog, run_id: str, clock: Clock, owner: str | None = None
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.clock = clock
        self.owner = owner

    def decision(self, request: ApprovalRequest) -> bool | None:
        """``True`` (approved), ``False`` (declined), or ``None``: nobody decided
        on this call (this place, name and arguments) yet."""
        row = self.store.tool_result(self.run_id, request.key)
        if row is None or row.status != "completed":
            return None
        return row.result == "yes"

    @staticmethod
    def row(request: ApprovalRequest, approved: bool) -> tuple[str, str, str, str]:
        """The tool-journal row of a decision, for ``AgentLog.update(tool=...)``
        when it must commit with other changes (ending the run's wait)."""
        return (request.key, APPROVAL_TOOL, "completed", "yes" if approved else "no")

    def record(self, request: ApprovalRequest, approved: bool) -> None:
        """Journal the decision durably (one transaction) before the call is made.

        Raises:
            LeaseLostError: ``owner`` no longer holds the run.
            StoreError: the row could not be written.
        """
        self.store.update(
            self.run_id, self.clock.now(), owner=self.owner, tool=self.row(request, approved)
        )

"""The ``--wait-id`` a printed ``answer`` command carries, and the question
it pins: a flow question's id without its run prefix, an agent approval's
key with the first 12 hex digits of the call's digest. The commands are
run as printed in tests/test_answer_hints.py and tests/test_tool_approval.py;
here, what the short forms match and what they do not."""

from __future__ import annotations

from desktop_app.agent.approvals import (
    SHORT_DIGEST,
    ApprovalRequest,
    answer_commands,
    expand_wait_id,
    short_wait_id,
)
from desktop_app.cli.waits import full_wait_id, wait_id_arg

RUN = "3f2a9c41d07b4e2a8b1c5d6e7f809a1b"


def test_a_flow_questions_printed_id_names_it_again() -> None:
    for wait_id in (f"{RUN}:approve:0", f"{RUN}:ask/gift:1", f"{RUN}:approve:0.0123456789abcdef"):
        printed = wait_id_arg(RUN, wait_id)
        assert not printed.startswith(RUN)
        assert full_wait_id(RUN, printed) == wait_id
        assert full_wait_id(RUN, wait_id) == wait_id  # as show and waiting --json give it


def test_an_approvals_printed_id_names_that_call_only() -> None:
    milk = ApprovalRequest.of("notes__append", {"text": "milk"}, 2).key
    eggs = ApprovalRequest.of("notes__append", {"text": "eggs"}, 2).key
    later = ApprovalRequest.of("notes__append", {"text": "milk"}, 3).key
    printed = short_wait_id(milk)
    assert printed == milk[: len("approval/2:") + SHORT_DIGEST]
    assert expand_wait_id(printed, milk) == milk
    assert expand_wait_id(milk, milk) == milk
    # the run waits on another call at that place, or the same call later on
    assert expand_wait_id(printed, eggs) == printed != eggs
    assert expand_wait_id(printed, later) == printed != later
    # fewer digits than printed pin nothing; nor does a run waiting on nothing
    assert expand_wait_id(printed[:-1], milk) == printed[:-1]
    assert expand_wait_id("approval/2:", milk) == "approval/2:"
    assert expand_wait_id(printed, None) == printed
    # a question's id is whole or nothing
    assert short_wait_id("ask/call-7") == "ask/call-7"
    assert expand_wait_id("ask/call", "ask/call-7") == "ask/call"


def test_the_approve_and_decline_commands_carry_the_calls_printed_id() -> None:
    key = ApprovalRequest.of("delete", {"name": "x"}, 1).key
    yes, no = answer_commands(RUN, key)
    assert yes == f"answer {RUN} yes --wait-id {short_wait_id(key)}"
    assert no == f"answer {RUN} no --wait-id {short_wait_id(key)}"

"""Two processes resuming one run at once: the one that loses says what
happened, never a lease that "runs out at 1970-01-01T00:00:00Z".

A new user's tryout raced two ``flowdesk resume`` on a run a dead process
had left behind; the loser said the run was held by a live process until
1970, although the winner had already completed it (the run had no lease
any more, and its missing expiry was shown as epoch 0). Two engines over
one real SQLite file (``db_path``) stand for the two processes; the
second's clock lets the first resume the run between the second's read of
it and its first save (:func:`tests.hook_clock.racing_engines`).
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from desktop_app.errors import RunLeasedError
from desktop_app.flow import Engine, FlowBuilder
from tests.hook_clock import racing_engines

#: a process on another machine, which took the run and went away
GONE = "otherhost:4242:abc"


class S(BaseModel):
    n: int = 0


def _two_steps() -> object:
    return (
        FlowBuilder("two", S)
        .step("a", lambda s: {"n": 1})
        .step("b", lambda s: {"n": 2})
        .chain()
        .compile()
    )


def left_behind(first: Engine, second: Engine) -> str:
    """A run that ``GONE`` took and left: its lease (60 s) has run out on
    both engines' clocks, so each may take it over."""
    gone = Engine(first.store, flows=[_two_steps()], clock=first.clock, owner=GONE, lease_ttl_s=60)
    rid = gone.start("two", S())
    first.store.claim(rid, gone.lease(), first.clock.now())
    first.clock.advance(120)  # type: ignore[attr-defined]
    second.clock.advance(120)  # type: ignore[attr-defined]
    return rid


def test_the_loser_of_two_resumes_says_the_run_completed_not_a_lease_of_1970(db_path):
    with racing_engines(db_path, _two_steps) as (first, second, clock):
        rid = left_behind(first, second)
        won: list[str] = []
        clock.arm(lambda: won.append(first.resume(rid).status))
        with pytest.raises(RunLeasedError) as lost:
            second.resume(rid)
        assert won == ["completed"]
        said = str(lost.value)
        assert "1970" not in said and "held by a live process" not in said, said
        assert said == (
            f"run {rid} is completed: another process ended it a moment ago. Nothing was run here."
        )
        assert lost.value.run_status == "completed" and lost.value.expires_at is None
        assert first.status(rid).status == "completed" and first.get(rid).n == 2


def test_a_refusal_with_no_lease_expiry_names_no_time():
    """A holder on another machine with no expiry known: the message says
    when it can be resumed without a made-up moment."""
    said = str(RunLeasedError("r1", GONE, None))
    assert "1970" not in said
    assert said.endswith("the run can be resumed when its lease runs out.")
    with_expiry = str(RunLeasedError("r1", GONE, 1796129469.0))
    assert with_expiry.endswith("when its lease runs out, at 2026-12-01T12:51:09Z.")


def test_a_run_left_behind_by_another_process_says_it_holds_it_no_more():
    """Refused on a run the winner left unfinished and released (failed):
    no live holder and no lease expiry are invented."""
    said = str(RunLeasedError("r1", "another process", None, "failed"))
    assert said == (
        "run r1 was taken by another process a moment ago, which holds it no more (it is "
        "failed now). Nothing was run here; resume it again to go on with it."
    )

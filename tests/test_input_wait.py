"""``RunState.input_wait``: which question an answer goes to, and the words
of each refusal (a run answered already, one waiting for something else,
one not waiting), on the run and checkpoint as a store returns them."""

from __future__ import annotations

import pytest

from desktop_app.errors import RunStateError, WaitAlreadyResolvedError
from desktop_app.flow.run import RunState
from desktop_app.store.records import Checkpoint, RunRecord, Wait


def state(status: str, *kinds: str, resolved: tuple[str, ...] = ()) -> RunState:
    waits = tuple(Wait(f"r:s:{i}", "s", kind, 1.0) for i, kind in enumerate(kinds))  # type: ignore[arg-type]
    meta = {"resolved": list(resolved)} if resolved else {}
    cp = Checkpoint("r", 3, status, {}, {}, ("s",), 1.0, meta=meta, waits=waits)  # type: ignore[arg-type]
    run = RunRecord("r", "f", "1", status, 3, 1.0, 1.0)  # type: ignore[arg-type]
    return RunState(run, cp, meta)  # type: ignore[arg-type]


def test_a_run_waiting_for_other_things_names_them_and_answers_nothing() -> None:
    with pytest.raises(RunStateError) as err:
        state("waiting", "timer", "signal", "signal").input_wait(None)
    assert str(err.value) == (
        "run r waits, but for no answer (it waits for: signal, timer); nothing was answered"
    )
    with pytest.raises(RunStateError) as err:
        state("waiting").input_wait(None)
    assert str(err.value) == (
        "run r waits, but for no answer (it waits for: nothing); nothing was answered"
    )


def test_a_run_not_waiting_and_an_answered_wait_are_refused_in_words() -> None:
    with pytest.raises(RunStateError) as err:
        state("running", "input").input_wait(None)
    assert str(err.value) == "run r is not waiting for input (status 'running')"
    with pytest.raises(WaitAlreadyResolvedError) as done:
        state("waiting", "input", resolved=("r:s:0",)).input_wait("r:s:0")
    assert str(done.value) == "run r: wait r:s:0 was already answered; the first answer stands"
    assert state("waiting", "signal", "input").input_wait(None).wait_id == "r:s:1"

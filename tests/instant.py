"""Release a racing process at a set wall-clock instant, as precisely as a
busy loop would, without burning a CPU while it waits.

The racers of the S88 and S95 races (tests/approval_agent_worker.py,
tests/langgraph_answer_worker.py) each answer at ``START + i*EVERY``; a
loop spinning on ``time.time()`` for the whole wait held a core per racer
for seconds (13.9 s of CPU in one 11 s test), slowing every other test of
the suite beside it. Sleeping until shortly before the instant and spinning
only the rest keeps the release as close as the spin alone.
"""

from __future__ import annotations

import time

#: seconds before the instant that the sleep ends and the spin takes over
#: (more than a timer's usual lateness on a loaded machine)
SPIN_S = 0.005


def release_at(at: float) -> None:
    """Return at wall-clock time ``at`` (UTC epoch seconds), or at once if
    it has passed."""
    left = at - time.time()
    if left > SPIN_S:
        time.sleep(left - SPIN_S)
    while time.time() < at:  # the last few milliseconds: spun, for precision
        pass

"""One side of a race between two first calls of ``FlowdeskAgent.run`` with
one new run id (tests/test_pydantic_ai_first_run_race.py): a long-lived
process the parent drives round by round on stdin, releasing both sides at
one instant by creating the file ``<GO>.<round>``.

Usage: first_run_racer.py DB GO (with PAI_TEST_URL and PAI_TEST_LOG set, as
tests/pydantic_ai_agents.py reads them)

For each line ``<round> <run_id> <prompt word>``: prints ``ready <round>``,
waits for GO, calls ``run_sync("say <prompt word>", run_id=run_id)`` on the
agent ``helper`` and prints ``done <round> <JSON>``: ``{"status": ...,
"text": ...}``, or ``{"raised": "<type>"}``. ``end`` on stdin stops it.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from desktop_app.integrations.pydantic_ai import FlowdeskAgent
from tests.ownership_racer import agent_store, open_db
from tests.pydantic_ai_agents import make_helper


def one_round(durable: FlowdeskAgent, run_id: str, prompt: str) -> dict[str, Any]:
    try:
        res = durable.run_sync(prompt, run_id=run_id)
    except Exception as exc:  # reported to the parent, which judges the round
        return {"raised": type(exc).__name__}
    return {"status": res.status, "text": res.text}


def main() -> int:
    db, go = sys.argv[1], sys.argv[2]
    durable = FlowdeskAgent(make_helper(), agent_store(open_db(db)))
    for line in sys.stdin:
        words = line.split()
        if words == ["end"]:
            break
        rnd, run_id, word = words
        print(f"ready {rnd}", flush=True)
        gate = Path(f"{go}.{rnd}")
        while not gate.exists():
            threading.Event().wait(0.0002)  # the parent creates GO for both sides at once
        told = one_round(durable, run_id, f"say {word}")
        print(f"done {rnd} {json.dumps(told)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

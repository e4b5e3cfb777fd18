"""A real process answering LangGraph threads with the real CLI code path
(``flowdesk --db DB answer THREAD VALUE``), each at a set wall-clock
instant, while another process answers the same threads at the same
instants.

Usage: python tests/langgraph_answer_worker.py DB VALUE START EVERY OUT THREAD...

The i-th thread is answered at ``START + i*EVERY`` (UTC epoch seconds);
``<i> <exit code>`` lines go to OUT (the CLI's own output to stdout/stderr).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from desktop_app.cli import main as flowdesk
from tests.instant import release_at


def run() -> int:
    db, value, start, every, out, *threads = sys.argv[1:]
    with open(out, "w", encoding="utf-8") as results:
        for i, thread in enumerate(threads):
            at = float(start) + i * float(every)
            release_at(at)  # at the instant the other process is released
            code = flowdesk(["--db", db, "answer", thread, value])
            results.write(f"{i} {code}\n")
            results.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(run())

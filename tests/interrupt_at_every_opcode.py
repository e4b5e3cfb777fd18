"""Ctrl-C at every instruction of a write's way through the write gate:
``python tests/interrupt_at_every_opcode.py DB`` forks one child per
instruction N (counted in the frames of ``store/write_gate.py`` and of the
standard library's ``threading`` and ``queue``, where the gate's locks
live), and in the child raises ``KeyboardInterrupt`` at the N-th, as a
signal handler would raise it there, during two write transactions (the
first starts a turn of the gate, which wakes its reaper; the second is
inside that turn). The child then does what ``flowdesk run`` does on Ctrl-C:
closes its connection and exits with 130 (the ``atexit`` hooks run).

Prints one JSON object: ``{"instructions": N, "exits": {code: count},
"slow": [[n, seconds], ...], "hung": [n, ...]}`` (slow: took the exit
hook's whole bound on the reaper, or longer); a child that has not
ended 8 s after its interrupt is hung (``faulthandler`` prints its threads'
stacks to stderr and ends it).
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import time

from desktop_app.store.connection import open_connection

WATCHED = ("write_gate.py", "threading.py", "queue.py")
#: the exit hook's bound on its wait for a gate's reaper (``reaper.join``'s
#: timeout in ``store/write_gate.py``): a child that waited it out took at
#: least this long; one that took less was only slowed by the machine (a
#: child's fork, connection and fsyncs took 0.55 s at a load of 4.5)
EXIT_BOUND_S = 1.0


def _child(db: str, at: int) -> None:
    conn = open_connection(db)
    with conn:
        conn.execute("CREATE TABLE IF NOT EXISTS t(x)")
    time.sleep(0.01)  # that turn ends: the next write starts another
    seen = 0

    def trace(frame, event, arg):  # type: ignore[no-untyped-def]
        if not frame.f_code.co_filename.endswith(WATCHED):
            return None
        frame.f_trace_opcodes = True
        return local

    def local(frame, event, arg):  # type: ignore[no-untyped-def]
        nonlocal seen
        if event == "opcode":
            seen += 1
            if seen == at:
                sys.settrace(None)
                raise KeyboardInterrupt
        return local

    try:
        sys.settrace(trace)
        for i in range(2):
            with conn:
                conn.execute("INSERT INTO t VALUES (?)", (i,))
        sys.settrace(None)
    except KeyboardInterrupt:
        faulthandler.dump_traceback_later(8, exit=True)
        try:
            conn.close()
        finally:
            sys.exit(130)
    os._exit(0)  # never interrupted: N is past the last instruction


def main() -> None:
    db = sys.argv[1]
    exits: dict[str, int] = {}
    slow: list[list[float]] = []
    hung: list[int] = []
    at = 0
    while True:
        at += 1
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                _child(db, at)
            except Exception:
                os._exit(70)
        _, status = os.waitpid(pid, 0)
        took = time.monotonic() - started
        code = os.waitstatus_to_exitcode(status)
        if code == 0:
            break
        exits[str(code)] = exits.get(str(code), 0) + 1
        if code == 1:  # faulthandler ended it: hung
            hung.append(at)
        elif took >= EXIT_BOUND_S:
            slow.append([at, round(took, 2)])
    print(json.dumps({"instructions": at - 1, "exits": exits, "slow": slow, "hung": hung}))


if __name__ == "__main__":
    main()

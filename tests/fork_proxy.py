"""``python -m MODULE ARGS`` forked from a preloaded server (see
:func:`tests.cli_forkserver.module_command`), for a program a test's code
under test starts itself (an MCP server in Flowdesk's settings).

Usage: ``python -I -S fork_proxy.py SOCKET MODULE ARGS...``

Standard library only (``-I -S``: no site, no ``PYTHON*`` variables, none
of the project on ``sys.path``). Hands its stdin, stdout and stderr, its
environment, working directory and umask to the server at SOCKET, which
forks a child that runs MODULE as ``python -m`` would; then closes its own
copies of the three streams (so its starter sees them end when the child
ends), passes SIGTERM, SIGINT and SIGHUP on to the child, and ends as the
child ended (its exit code, or killed by the same signal). When the server
answers that the request needs a fresh interpreter (other start-up
variables) it ``exec``\\ s ``python -m MODULE ARGS`` itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys

_HEADER = struct.Struct("!I")  # as tests/cli_forkserver.py


def main(sock_path: str, module: str, args: list[str]) -> None:
    umask = os.umask(0o077)
    os.umask(umask)
    request = json.dumps(
        {
            "args": args,
            "env": dict(os.environ),
            "cwd": os.getcwd(),
            "umask": umask,
            "script": None,
            "code": None,
            "module": module,
        }
    ).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(sock_path)
    socket.send_fds(conn, [_HEADER.pack(len(request))], [0, 1, 2])
    conn.sendall(request)
    replies = conn.makefile("rb")
    first = replies.readline().decode().split(" ", 1)
    if first[0] == "fallback":
        conn.close()
        os.execv(sys.executable, [sys.executable, "-m", module, *args])
    pid = int(first[1])

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the child holds the streams now
        os.dup2(null, fd)
    os.close(null)
    line = replies.readline().decode().split()
    if not line:  # the server went away (the test session ended)
        os._exit(1)
    status = int(line[1])
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])

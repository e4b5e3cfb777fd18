"""A fork server for the tests' ``flowdesk`` commands.

Each CLI call a test makes is still its own process, with its own pid, exit
status, stdout, stderr, environment, working directory and umask, killed
with SIGKILL on a timeout; what it does not repeat is the interpreter's
start-up and the imports every command makes (pydantic, apsw, the engine and
the stores: about half a second of CPU per call on the CI machine, most of a
CLI test's time). The server (one per pytest process, started on first use)
imports those modules once and forks a child per call, which runs
``desktop_app.cli`` as ``python -m desktop_app.cli`` does (``runpy``, as
``__main__``) and ends as that process would (``SystemExit``'s code, an
uncaught exception's traceback and 1, atexit handlers, a signal's status).
The child takes the call's environment as a new interpreter would read it
(``TZ`` through ``time.tzset``, ``TMPDIR`` on first use; everything else
Flowdesk and its libraries read when used, not at import).
The same idea as :mod:`multiprocessing`'s ``forkserver`` start method and
its ``set_forkserver_preload``.

What a forked child cannot change after start-up makes :func:`run` start a
real interpreter instead: a different value of a variable read at start-up
(``PYTHON*`` other than ``PYTHONPATH``, ``LANG``/``LC_*``, coverage's), or a
``PYTHONPATH``/working directory under which ``desktop_app`` or ``tests``
would be imported from elsewhere. Tests whose subject is the process itself
(``kill -9`` at a moment, Ctrl-C, streaming output, start-up imports, the
installed console script) keep using :mod:`subprocess` directly.
:func:`run_script` forks a test's own worker script the same way
(``python SCRIPT ARGS``): a process that kills itself at a set point (a
SIGKILL inside a tool) is as real forked as started afresh.

Usage: ``python -m tests.cli_forkserver SOCKET`` (from :func:`run`; the
server exits when its stdin, a pipe from the pytest process, closes).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import importlib.machinery
import json
import locale
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: imported once by the server: the modules most commands import (the CLI
#: imports a command's handler only when it runs, see desktop_app.cli); none
#: reads the environment or starts a thread at import
PRELOAD = (
    "desktop_app.cli",
    "desktop_app.cli.runs",
    "desktop_app.cli.start",
    "desktop_app.cli.admin",
    "desktop_app.cli.ask",
    "desktop_app.cli.branch",
    "desktop_app.cli.waits",
    "desktop_app.bootstrap",
    "desktop_app.config",
    "desktop_app.flow",
    "desktop_app.flow.tracing",
    "desktop_app.flows.digest",
    "desktop_app.flows.tidy",
    "desktop_app.observability",
    "desktop_app.runs_view",
    "desktop_app.secrets",
    "desktop_app.store.sqlite",
    "desktop_app.agent.runtime",
    "desktop_app.agent.mcp",
    "logging.handlers",
    "tomllib",
)
#: preloaded when installed (the test extra's MCP SDK: a second of imports
#: for ``ask --mcp`` and ``answer`` of an agent run that uses a server;
#: Pydantic AI with its OpenAI model, another second for every command that
#: loads a registered Pydantic AI agent: ``show``, ``waiting``, ``resume``,
#: ``answer`` of its runs); none starts a thread, and the variables they
#: read at import are in :data:`IMPORT_ENV`
PRELOAD_IF_INSTALLED = (
    "mcp",
    "desktop_app.integrations.pydantic_ai.registry",
    "pydantic_ai.models.openai",
    "pydantic_ai.providers.openai",
)
#: variables the preloaded packages read when imported (the OpenAI SDK's
#: logging and module-level client, pydantic's plugins): a child given
#: another value of one starts a real interpreter, as for start-up variables
IMPORT_ENV = (
    "OPENAI_LOG",
    "OPENAI_API_TYPE",
    "OPENAI_API_VERSION",
    "AZURE_OPENAI_ENDPOINT",
    "DEFER_PYDANTIC_BUILD",
    "PYDANTIC_DISABLE_PLUGINS",
)
#: the flavour of :func:`module_command`'s server: started with none of the
#: start-up variables, as the MCP SDK starts a stdio server (its environment
#: is HOME, LOGNAME, PATH, SHELL, TERM, USER and the configured ``env``)
MCP_SERVERS = "mcp-servers"
#: the client a :func:`module_command` runs: stdlib only, so ``python -I -S``
#: starts it in a few tens of milliseconds
PROXY = Path(__file__).resolve().parent / "fork_proxy.py"
#: servers that preload more, for :func:`run_code` and :func:`run_script` of
#: programs using them (a server of its own each, so that ``flowdesk``
#: commands still run without them): name -> (modules, prefixes of the
#: variables they read at import, treated as :data:`IMPORT_ENV`)
FLAVOURS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "": ((), ()),
    "langgraph": (
        ("langgraph.graph", "langgraph.types", "desktop_app.integrations.langgraph.saver"),
        ("LANGGRAPH_", "LANGCHAIN_", "LANGSMITH_", "WEBSOCKETS_", "OTEL_", "PY_SAX_PARSER",
         "UNIXCONFDIR", "UNIXUSRLIBDIR"),
    ),
    # the tests' stdio MCP servers (tests/mcp_notes_server.py), started by
    # Flowdesk through :func:`module_command`: the SDK's server side
    MCP_SERVERS: (("mcp.server.mcpserver", "mcp.types", "anyio"), ("MCP_",)),
}  # fmt: skip
#: packages a child must import from the same place as a fresh interpreter would
#: (the preloaded ones of :data:`PRELOAD_IF_INSTALLED` too: a test's
#: ``PYTHONPATH`` that hides one gets a real interpreter)
SAME_ORIGIN = ("desktop_app", "tests")
_HEADER = struct.Struct("!I")


def _startup_env(env: dict[str, str], flavour: str = "") -> dict[str, str]:
    """The variables the interpreter reads only at start-up (and the
    preloaded packages only at import, :data:`IMPORT_ENV`, :data:`FLAVOURS`)."""
    prefixes = FLAVOURS[flavour][1]
    return {
        k: v
        for k, v in env.items()
        if (k.startswith("PYTHON") and k != "PYTHONPATH")
        or k in IMPORT_ENV
        or k.startswith(prefixes)
        or k == "LANG"
        or k.startswith("LC_")
        or k.startswith("COVERAGE_PROCESS_")
        or k == "SETUPTOOLS_USE_DISTUTILS"
    }


# -- the server ---------------------------------------------------------------


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("client went away")
        data += chunk
    return data


def _child_path(request: dict[str, Any], base: list[str]) -> list[str]:
    """``sys.path`` of ``python -m`` started in the request's directory with
    its ``PYTHONPATH`` (of ``python SCRIPT`` for a script: its folder first)."""
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    first = os.path.dirname(request["script"]) if request.get("script") else request["cwd"]
    # (``python -c``'s first entry is "", the working directory)
    return [first, *extra, *base]


def _refusal(
    request: dict[str, Any], base: list[str], startup: dict[str, str], flavour: str
) -> str | None:
    """Why this request needs a fresh interpreter, or None."""
    if _startup_env(request["env"], flavour) != startup:
        return "start-up variables differ"
    path = _child_path(request, base)
    preloaded = {n.partition(".")[0] for n in (*PRELOAD_IF_INSTALLED, *FLAVOURS[flavour][0])}
    for name in [*SAME_ORIGIN, *sorted(n for n in preloaded if n in sys.modules)]:
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        here = sys.modules[name].__spec__
        assert here is not None
        if spec is None or spec.origin != here.origin:
            return f"{name} would be imported from elsewhere"
    return None


def _serve(sock_path: str, flavour: str) -> dict[str, Any]:
    """Answer requests until stdin closes (then exit); returns only in a
    forked child, with the request that child is to run."""
    # sys.path of `python -m` here: [cwd, PYTHONPATH..., site]
    own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    base = sys.path[1 + len(own) :]
    startup = _startup_env(dict(os.environ), flavour)
    for name in (*PRELOAD, *FLAVOURS[flavour][0]):
        importlib.import_module(name)
    for name in PRELOAD_IF_INSTALLED:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    for name in SAME_ORIGIN:
        importlib.import_module(name)
    assert threading.active_count() == 1, "a preloaded module started a thread"
    gc.freeze()  # the children neither scan nor copy the preloaded objects
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(64)
    os.write(1, b"ready\n")
    waiting: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)
    while True:
        readable, _, _ = select.select([0, listener.fileno(), *waiting], [], [])
        for fd in readable:
            if fd == 0:
                if not os.read(0, 1):  # the pytest process closed the pipe
                    os._exit(0)
            elif fd == listener.fileno():
                conn, _ = listener.accept()
                try:
                    header, fds, _flags, _addr = socket.recv_fds(conn, _HEADER.size, 3)
                    (size,) = _HEADER.unpack(header)
                    request = json.loads(_recv_exact(conn, size))
                except (ConnectionError, struct.error, ValueError):
                    conn.close()
                    continue
                refusal = _refusal(request, base, startup, flavour)
                if refusal:
                    conn.sendall(f"fallback {refusal}\n".encode())
                    conn.close()
                    for f in fds:
                        os.close(f)
                    continue
                pid = os.fork()
                if pid == 0:  # the child: nothing of the server stays open
                    listener.close()
                    conn.close()
                    for pidfd, (_pid, other) in waiting.items():
                        os.close(pidfd)
                        other.close()
                    for target, f in enumerate(fds):
                        os.dup2(f, target)
                    for f in fds:
                        os.close(f)
                    request["path"] = _child_path(request, base)
                    return request
                for f in fds:
                    os.close(f)
                conn.sendall(f"pid {pid}\n".encode())
                waiting[os.pidfd_open(pid)] = (pid, conn)
            else:
                pid, conn = waiting.pop(fd)
                _, status = os.waitpid(pid, 0)
                os.close(fd)
                with contextlib.suppress(OSError):  # the client may be gone
                    conn.sendall(f"status {status}\n".encode())
                conn.close()


def _run_child(request: dict[str, Any]) -> None:
    """Become ``python -m desktop_app.cli ARGS`` (or ``python SCRIPT ARGS``)
    as the request describes."""
    import runpy

    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()  # TZ, which the time module reads when an interpreter starts
    tempfile.tempdir = None  # TMPDIR & co., read again on first use
    sys.path[:] = request["path"]
    if request.get("script"):
        sys.argv[:] = [request["script"], *request["args"]]
        runpy.run_path(request["script"], run_name="__main__")
        return
    if request.get("module"):
        sys.argv[:] = ["-m", *request["args"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        return
    if request.get("code") is not None:
        sys.argv[:] = ["-c", *request["args"]]
        exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
        return
    sys.argv[:] = ["-m", *request["args"]]
    runpy.run_module("desktop_app.cli", run_name="__main__", alter_sys=True)


# -- the client ---------------------------------------------------------------


class _Server:
    def __init__(self, flavour: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="flowdesk-cli-fork-")
        self.path = os.path.join(self.dir, "sock")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_forkserver", self.path, flavour],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
            env=self._env(flavour),
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the CLI fork server did not start ({self.proc.wait()})")
        atexit.register(self.close)

    @staticmethod
    def _env(flavour: str) -> dict[str, str]:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        if flavour == MCP_SERVERS:  # as the SDK starts a server: none of them
            for name in _startup_env(env, flavour):
                del env[name]
        return env

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        Path(self.path).unlink(missing_ok=True)
        os.rmdir(self.dir)


_servers: dict[str, _Server] = {}
_lock = threading.Lock()


def _encoding() -> str:
    """:mod:`subprocess`'s encoding for ``text=True``."""
    return "utf-8" if sys.flags.utf8_mode else locale.getencoding()


def _decode(data: bytes) -> str:
    """As :mod:`subprocess` decodes a child's output with ``text=True``."""
    text = data.decode(_encoding())
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _server(flavour: str) -> _Server:
    with _lock:
        if flavour not in _servers:
            _servers[flavour] = _Server(flavour)
        return _servers[flavour]


def module_command(module: str, *args: str) -> list[str]:
    """A command line that runs as ``python -m MODULE ARGS`` does, for a
    program other than the test starts (an MCP server in Flowdesk's
    settings): ``python -I -S tests/fork_proxy.py`` hands its stdin, stdout,
    stderr, environment, working directory and umask to the
    :data:`MCP_SERVERS` server, which forks MODULE from its preloaded
    imports (the MCP SDK's server side: about a second of CPU per start
    otherwise); the proxy passes on SIGTERM, SIGINT and SIGHUP and ends as
    the forked process ended. A request with other start-up variables (see
    :func:`_refusal`) makes the proxy ``exec`` a real ``python -m MODULE``.
    The proxy is the process its starter sees (its pid, its exit); the
    forked child has a pid of its own (what ``os.getpid()`` reports there)."""
    server = _server(MCP_SERVERS)
    return [sys.executable, "-I", "-S", str(PROXY), server.path, module, *args]


def run_script(
    script: Path | str,
    args: list[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, SCRIPT, *args], ...)`` as :func:`run` does
    it: forked from the server, for a test's own worker script (a real
    process a test may SIGKILL, or that kills itself, mid-way) whose
    interpreter start-up and imports are not what it tests."""
    return run(args, env=env, cwd=cwd, timeout=timeout, script=os.path.abspath(script))


def run_code(
    code: str,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float | None = None,
    flavour: str = "",
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, "-c", code], ...)`` as :func:`run` does it:
    forked from a server that preloaded :data:`FLAVOURS` ``[flavour]`` (a
    user's program, in a process of its own, whose start-up is not what the
    test is about). An uncaught exception ends it as there: its traceback on
    stderr, exit status 1."""
    return run([], env=env, cwd=cwd, timeout=timeout, code=code, flavour=flavour)


def run(
    args: list[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float | None = None,
    input: str | None = None,
    script: str | None = None,
    code: str | None = None,
    flavour: str = "",
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, "-m", "desktop_app.cli", *args], env=env,
    cwd=cwd, timeout=timeout, input=input, capture_output=True, text=True)``,
    forked from the server (see the module docstring), or that very call when
    the request needs a fresh interpreter. As there, ``env``/``cwd`` None are
    this process's; stdin is empty (pytest's is /dev/null) unless ``input``.

    Raises:
        subprocess.TimeoutExpired: after ``timeout`` seconds (the child is
            killed with SIGKILL first), as :func:`subprocess.run` does.
    """
    env = dict(os.environ if env is None else env)
    cwd = os.path.abspath(os.getcwd() if cwd is None else cwd)
    server = _server(flavour)
    umask = os.umask(0o077)
    os.umask(umask)
    request = json.dumps(
        {"args": args, "env": env, "cwd": cwd, "umask": umask, "script": script, "code": code}
    ).encode()
    if code is not None:
        argv = [sys.executable, "-c", code, *args]
    else:
        argv = [sys.executable, *([script] if script else ["-m", "desktop_app.cli"]), *args]
    with (
        tempfile.TemporaryFile() as stdin,
        tempfile.TemporaryFile() as stdout,
        tempfile.TemporaryFile() as stderr,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn,
    ):
        if input is not None:
            stdin.write(input.encode(_encoding()))
            stdin.seek(0)
        conn.connect(server.path)
        fds = [stdin.fileno(), stdout.fileno(), stderr.fileno()]
        socket.send_fds(conn, [_HEADER.pack(len(request))], fds)
        conn.sendall(request)
        replies = conn.makefile("rb")
        first = replies.readline().decode().split(" ", 1)
        if first[0] == "fallback":
            return subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=cwd,
                env=env,
                input=input,
            )
        pid = int(first[1])
        # poll, not select: a pytest process may hold descriptors past
        # select's FD_SETSIZE (1,024) after many tests' databases
        poller = select.poll()
        poller.register(conn, select.POLLIN)
        ready = poller.poll(None if timeout is None else timeout * 1000)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        status = int(replies.readline().decode().split()[1])
        replies.close()
        stdout.seek(0)
        stderr.seek(0)
        out, err = _decode(stdout.read()), _decode(stderr.read())
        if not ready:
            raise subprocess.TimeoutExpired(argv, timeout, output=out, stderr=err)
        return subprocess.CompletedProcess(argv, os.waitstatus_to_exitcode(status), out, err)


def _exit_status(code: object) -> int:
    """The status an interpreter ends with on ``SystemExit(code)``: None is
    0, an int itself, anything else printed to stderr and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _end_child(request: dict[str, Any]) -> None:
    """Run the request in this forked child, then end it as the interpreter
    would, minus the interpreter's finalization.

    A forked child's ordinary exit tears down every preloaded module; each
    reference count it lowers writes to a page the child still shares with
    the server, so the kernel copies most of the server's heap on the way
    out: about 110 ms of a 150 ms call, measured on the CI machine. What an
    exit does that a caller can observe is done here instead: wait for the
    threads that are not daemons (``threading._shutdown``, as
    ``Py_FinalizeEx`` does), run the ``atexit`` handlers, flush stdout and
    stderr (status 120 when that fails), then ``os._exit``. Objects still
    alive are not finalized: Flowdesk closes its stores and connections
    itself and relies on no finalizer at exit. An uncaught exception other
    than ``SystemExit`` (a traceback, ``KeyboardInterrupt``'s SIGINT status)
    goes the interpreter's own way, slow but exact."""
    try:
        _run_child(request)
        status = 0
    except SystemExit as stop:
        status = _exit_status(stop.code)
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = 120
    os._exit(status & 0xFF)


if __name__ == "__main__":
    _end_child(_serve(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""))

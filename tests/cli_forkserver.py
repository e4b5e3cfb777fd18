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
(``PYTHON*`` other than ``PYTHONPATH`` and keyring's
``PYTHON_KEYRING_BACKEND``, ``LANG``/``LC_*``, coverage's, the dynamic
loader's ``LD_*`` and libfaketime's ``FAKETIME*``), or a
``PYTHONPATH``/working directory under which ``desktop_app`` or ``tests``
would be imported from elsewhere. :func:`run_script` forks a test's own
worker script the same way (``python SCRIPT ARGS``): a process that kills
itself at a set point (a SIGKILL inside a tool) is as real forked as started
afresh. :func:`popen` is :class:`subprocess.Popen` for the processes a test
reads line by line, signals (Ctrl-C, SIGTERM, ``kill -9`` at a moment) and
waits for: a forked child too, with its own pid and session, its exit status
passed on by the server. Tests whose subject is the interpreter's start-up
(its imports, the installed console script, an interpreter option) keep
using :mod:`subprocess` directly.

Usage: ``python -m tests.cli_forkserver SOCKET`` (from :func:`run`; the
server exits when its stdin, a pipe from the pytest process, closes).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import importlib.machinery
import io
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
#: what a process builds once and keeps (``functools.cache``), built here so
#: each child starts with it: the CLI's parser, the installed flow plugins
WARM = (
    ("desktop_app.cli.parser", "shared_parser"),
    ("desktop_app.bootstrap", "flow_entry_points"),
)
_HEADER = struct.Struct("!I")


#: ``PYTHON*`` variables read after start-up: ``PYTHONPATH`` (see
#: :func:`_child_path`) and keyring's backend choice, read when a process
#: first uses the keyring (the server never does: each child chooses its own)
NOT_AT_STARTUP = ("PYTHONPATH", "PYTHON_KEYRING_BACKEND")


def _startup_env(env: dict[str, str], flavour: str = "") -> dict[str, str]:
    """The variables the interpreter reads only at start-up (and the
    preloaded packages only at import, :data:`IMPORT_ENV`, :data:`FLAVOURS`)."""
    prefixes = FLAVOURS[flavour][1]
    return {
        k: v
        for k, v in env.items()
        if (k.startswith("PYTHON") and k not in NOT_AT_STARTUP)
        or k in IMPORT_ENV
        or k.startswith(prefixes)
        or k == "LANG"
        or k.startswith("LC_")
        or k.startswith("COVERAGE_PROCESS_")
        or k == "SETUPTOOLS_USE_DISTUTILS"
        or k.startswith(("LD_", "FAKETIME"))  # the dynamic loader's (libfaketime)
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
    # sys.path of `python -m` here, started with no PYTHONPATH: [cwd, site...]
    base = sys.path[1:]
    startup = _startup_env(dict(os.environ), flavour)
    for name in (*PRELOAD, *FLAVOURS[flavour][0]):
        importlib.import_module(name)
    for name in PRELOAD_IF_INSTALLED:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    for name in SAME_ORIGIN:
        importlib.import_module(name)
    for name, attr in WARM:
        getattr(importlib.import_module(name), attr)()
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
                pidfd = os.pidfd_open(pid)  # before any waitpid: the pid is this child's
                if request.get("handle"):  # :func:`popen`: signals go through a pidfd
                    socket.send_fds(conn, [f"pid {pid}\n".encode()], [pidfd])
                else:
                    conn.sendall(f"pid {pid}\n".encode())
                waiting[pidfd] = (pid, conn)
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

    if request.get("session"):  # Popen's start_new_session
        os.setsid()
    if request.get("sigint"):  # :func:`default_sigint`, then the interpreter's handler
        signal.signal(signal.SIGINT, signal.default_int_handler)
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
        # the server's sys.path is a fresh interpreter's with no PYTHONPATH
        # (``python -m`` in REPO: REPO, the standard library, site-packages,
        # the .pth entries): a child's PYTHONPATH goes before it
        # (:func:`_child_path`). A PYTHONPATH here would hide the editable
        # install's .pth entry (site drops it as a duplicate) from the path
        # the children get, and send every script outside REPO's top
        # (tests/*.py, ``-c`` in a tmp_path) to a fresh interpreter.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
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
    module: str | None = None,
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
    request = json.dumps(
        {
            "args": args,
            "env": env,
            "cwd": cwd,
            "umask": _umask(),
            "script": script,
            "code": code,
            "module": module,
        }
    ).encode()
    if code is not None:
        argv = [sys.executable, "-c", code, *args]
    elif module is not None:
        argv = [sys.executable, "-m", module, *args]
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


def default_sigint() -> None:
    """``preexec_fn`` for a child a test sends Ctrl-C (SIGINT): a shell that
    starts the suite in the background hands its children SIGINT ignored,
    and Python then never raises KeyboardInterrupt; restore the default.
    :func:`popen` given it forks a child with the interpreter's own SIGINT
    handler (KeyboardInterrupt), as a fresh interpreter started so has."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class ForkedProcess:
    """What :func:`popen` returns for a forked child: the part of
    :class:`subprocess.Popen`'s interface the tests use (``pid``, ``args``,
    ``stdin``/``stdout``/``stderr``, ``returncode``, ``poll``, ``wait``,
    ``communicate``, ``send_signal``, ``terminate``, ``kill``, ``with``).

    The child is the server's, not this process's: its exit status comes
    from the server (which reaps it), and signals go through a pidfd the
    server sent, so a signal never reaches another process that got the
    pid after the child was reaped.
    """

    def __init__(
        self,
        args: list[str],
        pid: int,
        pidfd: int,
        conn: socket.socket,
        rest: bytes,
        streams: tuple[Any, Any, Any],
    ) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.stdin, self.stdout, self.stderr = streams
        self._pidfd = pidfd
        self._conn = conn
        self._buf = rest
        self._readers: list[threading.Thread] = []
        self._got: dict[str, list[Any]] = {}

    def _status(self, timeout: float | None) -> bool:
        """Read the server's ``status S`` line within ``timeout`` seconds
        (None: until it comes); whether the child has ended."""
        if self.returncode is not None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        poller = select.poll()
        poller.register(self._conn, select.POLLIN)
        while b"\n" not in self._buf:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not poller.poll(None if left is None else left * 1000):
                return False
            chunk = self._conn.recv(4096)
            if not chunk:
                raise RuntimeError(f"the fork server went away while {self.args} ran")
            self._buf += chunk
        status = int(self._buf.split(b"\n", 1)[0].split()[1])
        self.returncode = os.waitstatus_to_exitcode(status)
        self._conn.close()
        os.close(self._pidfd)
        return True

    def poll(self) -> int | None:
        self._status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._status(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _drain(self, name: str, stream: Any) -> None:
        self._got[name] = []
        for chunk in iter(lambda: stream.read(65536), stream.read(0)):
            self._got[name].append(chunk)
        stream.close()

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        """As :meth:`subprocess.Popen.communicate`: ``input`` written to
        stdin (then closed), stdout and stderr read to their end, the child
        waited for; ``TimeoutExpired`` after ``timeout`` seconds (call it
        again to go on reading)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.stdin is not None and not self.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                if input:
                    self.stdin.write(input)
                self.stdin.close()
        if not self._readers:
            for name in ("stdout", "stderr"):
                stream = getattr(self, name)
                if stream is not None and not stream.closed:
                    reader = threading.Thread(target=self._drain, args=(name, stream), daemon=True)
                    reader.start()
                    self._readers.append(reader)
        for reader in self._readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        out = [self._joined(name) for name in ("stdout", "stderr")]
        return out[0], out[1]

    def _joined(self, name: str) -> Any:
        if name not in self._got:
            return None
        chunks = self._got[name]
        return (
            "".join(chunks) if isinstance(getattr(self, name), io.TextIOBase) else b"".join(chunks)
        )

    def __enter__(self) -> ForkedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdout, self.stderr, self.stdin):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.wait()


def _parse_argv(argv: list[str], cwd: str) -> dict[str, Any] | None:
    """The request for ``[sys.executable, -m MODULE | -c CODE | SCRIPT,
    ARGS...]``; None for any other command line (options before them too)."""
    if len(argv) < 2 or argv[0] != sys.executable:
        return None
    if argv[1] == "-m" and len(argv) > 2:
        return {"module": argv[2], "args": argv[3:], "code": None, "script": None}
    if argv[1] == "-c" and len(argv) > 2:
        return {"code": argv[2], "args": argv[3:], "script": None}
    if argv[1].startswith("-"):
        return None
    return {"script": os.path.join(cwd, argv[1]), "args": argv[2:], "code": None}


def popen(
    argv: list[str],
    *,
    stdin: Any = None,
    stdout: Any = None,
    stderr: Any = None,
    text: bool = False,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    start_new_session: bool = False,
    preexec_fn: Any = None,
    flavour: str = "",
    **other: Any,
) -> Any:
    """``subprocess.Popen(argv, ...)`` for ``[sys.executable, -m MODULE |
    -c CODE | SCRIPT, ARGS...]``, forked from the server (see the module
    docstring): a real process with its own pid that a test signals, kills
    with SIGKILL, reads line by line and waits for, minus the interpreter's
    start-up and the preloaded imports (a second of CPU for a Pydantic AI
    or MCP worker). Returns a :class:`ForkedProcess`, or the
    :class:`subprocess.Popen` itself for a request that needs a fresh
    interpreter (:func:`_refusal`), another command line, or a
    ``preexec_fn`` other than :func:`default_sigint`. ``stdin``/
    ``stdout``/``stderr``: None (this process's), ``PIPE``, ``DEVNULL``,
    ``STDOUT`` (stderr only), a file or a descriptor; any other keyword of
    :class:`subprocess.Popen` starts a fresh interpreter with it."""
    real = dict(
        stdin=stdin, stdout=stdout, stderr=stderr, text=text, cwd=cwd, env=env,
        start_new_session=start_new_session, preexec_fn=preexec_fn, **other,
    )  # fmt: skip
    where = os.path.abspath(os.getcwd() if cwd is None else cwd)
    parsed = _parse_argv(argv, where)
    if parsed is None or other or preexec_fn not in (None, default_sigint):
        return subprocess.Popen(argv, **real)  # type: ignore[call-overload]
    theirs: list[int] = []  # the child's ends, closed here once sent
    ours: list[Any] = [None, None, None]

    def end(spec: Any, index: int) -> int:
        if spec is None:
            return index
        if spec == subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_RDWR)
            theirs.append(fd)
            return fd
        if spec == subprocess.PIPE:
            r, w = os.pipe()
            mine, child = (w, r) if index == 0 else (r, w)
            theirs.append(child)
            raw = open(mine, "wb" if index == 0 else "rb")  # noqa: SIM115 (the caller's)
            if text:
                raw = io.TextIOWrapper(raw, encoding=_encoding(), write_through=index == 0)
            ours[index] = raw
            return child
        return spec if isinstance(spec, int) else spec.fileno()

    in_fd, out_fd = end(stdin, 0), end(stdout, 1)
    err_fd = out_fd if stderr == subprocess.STDOUT else end(stderr, 2)
    request = json.dumps(
        {
            **parsed,
            "env": dict(os.environ if env is None else env),
            "cwd": where,
            "umask": _umask(),
            "handle": True,
            "session": start_new_session,
            "sigint": preexec_fn is default_sigint,
        }
    ).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(_server(flavour).path)
        socket.send_fds(conn, [_HEADER.pack(len(request))], [in_fd, out_fd, err_fd])
        conn.sendall(request)
        first, fds, _flags, _addr = socket.recv_fds(conn, 4096, 1)
    finally:
        for fd in theirs:
            os.close(fd)
    if not first.startswith(b"pid "):
        conn.close()
        for stream in ours:
            if stream is not None:
                stream.close()
        return subprocess.Popen(argv, **real)  # type: ignore[call-overload]
    line, _, rest = first.partition(b"\n")
    return ForkedProcess(
        argv, int(line.split()[1]), fds[0], conn, rest, (ours[0], ours[1], ours[2])
    )


def _umask() -> int:
    umask = os.umask(0o077)
    os.umask(umask)
    return umask


def run_argv(
    argv: list[str],
    *,
    capture_output: bool = False,
    text: bool = False,
    check: bool = False,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float | None = None,
    input: str | None = None,
    **other: Any,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(argv, ...)`` for ``[sys.executable, -m MODULE | -c
    CODE | SCRIPT, ARGS...]`` with its output captured as text, forked as
    :func:`run` does; any other command line or keyword is that very
    ``subprocess.run``. ``check``: :class:`subprocess.CalledProcessError`
    on a status other than 0, as there."""
    where = os.path.abspath(os.getcwd() if cwd is None else cwd)
    parsed = _parse_argv(argv, where)
    if parsed is None or other or not (capture_output and text):
        return subprocess.run(
            argv, capture_output=capture_output, text=text, check=check, env=env, cwd=cwd,
            timeout=timeout, input=input, **other,
        )  # fmt: skip
    done = run(
        parsed["args"], env=env, cwd=where, timeout=timeout, input=input,
        script=parsed.get("script"), code=parsed.get("code"), module=parsed.get("module"),
    )  # fmt: skip
    done.args = argv
    if check:
        done.check_returncode()
    return done


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

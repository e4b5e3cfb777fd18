"""A real PostgreSQL for the tests: one server per session, one database per test.

Where the server comes from, in order:

1. ``FLOWDESK_TEST_PG_DSN`` (``.ci/run`` sets it after ``.ci/postgres.sh``
   started a throwaway cluster; a developer may point it at their own server:
   the role needs CREATEDB).
2. A private cluster started here when ``/usr/lib/postgresql/*/bin/initdb``
   exists: ``initdb`` into a fresh temp dir (as the ``postgres`` user via
   ``runuser`` when running as root, since initdb refuses root), ``pg_ctl
   start`` on 127.0.0.1 and a free port with ``fsync=off`` (throwaway data),
   stopped with ``-m immediate`` and removed at session end.
3. Otherwise the PostgreSQL tests skip, except under ``CI=true`` where they
   fail: CI must never silently run only the SQLite half.

Each test gets ``CREATE DATABASE t_<hex> TEMPLATE flowdesk_template``; the
template (one per pytest-xdist worker) is built once per session with the
real ``db apply`` code path
(:func:`desktop_app.store.postgres.store.apply_postgres_schema`).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

#: Read at import: the autouse fixture in conftest clears FLOWDESK_* per test.
ENV_DSN = os.environ.get("FLOWDESK_TEST_PG_DSN")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
#: One template per pytest-xdist worker: workers share a server under ``.ci/run``.
TEMPLATE = "flowdesk_template" + (
    f"_{os.environ['PYTEST_XDIST_WORKER']}" if "PYTEST_XDIST_WORKER" in os.environ else ""
)


def with_database(dsn: str, dbname: str) -> str:
    """``dsn`` (a postgresql:// URL) pointing at database ``dbname``."""
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


def with_address(
    dsn: str, *, host: str | None = None, port: int | None = None, password: str | None = None
) -> str:
    """``dsn`` (a postgresql:// URL) with another host, port or password: a
    proxy in front of the server, a port nothing listens on, a password the
    trusted test roles ignore."""
    parts = urlsplit(dsn)
    secret = f":{password}" if password is not None else ""
    netloc = f"{parts.username}{secret}@{host or parts.hostname}:{port or parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def unavailable(reason: str, what: str = "PostgreSQL") -> None:
    """Skip the test, or fail it under CI (never a silent SQLite-only CI)."""
    if IN_CI:
        pytest.fail(f"CI=true but no {what} for the tests: {reason}", pytrace=False)
    pytest.skip(f"no {what}: {reason}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PrivateCluster:
    """A throwaway cluster in a temp dir (see module docstring)."""

    bindir: str
    datadir: str = ""
    port: int = 0
    started_in_s: float = 0.0
    #: ``synchronous_commit``: ``off`` (fast; a crash may lose the last
    #: commits, as PostgreSQL documents), ``on`` for a test that crashes the
    #: cluster and then needs what it committed before (fsync stays off: a
    #: process crash keeps what reached the OS)
    synchronous_commit: str = "off"
    _as_postgres: list[str] = field(default_factory=list)

    def _run(self, *args: str) -> None:
        subprocess.run(
            [*self._as_postgres, *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=120,
        )

    def start(self) -> str:
        t0 = time.monotonic()
        self.datadir = tempfile.mkdtemp(prefix="flowdesk-pg-")
        if os.geteuid() == 0:
            shutil.chown(self.datadir, "postgres")
            self._as_postgres = ["runuser", "-u", "postgres", "--"]
        init = os.path.join(self.bindir, "initdb")
        self._run(
            init, "-D", self.datadir, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"
        )
        last: subprocess.CalledProcessError | None = None
        for _ in range(3):  # a free port can be taken between the probe and the start
            self.port = _free_port()
            try:
                self._pg_ctl_start()
                break
            except subprocess.CalledProcessError as exc:
                last = exc
        else:
            raise RuntimeError(f"pg_ctl start failed: {last and last.stderr!r}")
        self.started_in_s = time.monotonic() - t0
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _pg_ctl_start(self) -> None:
        opts = (
            f"-p {self.port} -k {self.datadir} -c listen_addresses=127.0.0.1 "
            f"-c fsync=off -c synchronous_commit={self.synchronous_commit} "
            "-c full_page_writes=off "
            "-c max_connections=200"
        )
        self._run(
            os.path.join(self.bindir, "pg_ctl"),
            "-D",
            self.datadir,
            "-l",
            os.path.join(self.datadir, "log"),
            "-w",
            "-o",
            opts,
            "start",
        )

    def crash(self) -> None:
        """Stop this (own) cluster as a crash does (``pg_ctl -m immediate
        stop``), keeping its data: :meth:`restart` brings it back."""
        self._run(
            os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir, "-m", "immediate", "-w", "stop"
        )

    def restart(self) -> None:
        """Start this cluster again after :meth:`crash`, on the same port."""
        self._pg_ctl_start()

    def stop(self) -> None:
        if self.datadir:
            subprocess.run(
                [
                    *self._as_postgres,
                    os.path.join(self.bindir, "pg_ctl"),
                    "-D",
                    self.datadir,
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
            shutil.rmtree(self.datadir, ignore_errors=True)


def find_bindir() -> str | None:
    """The newest installed PostgreSQL bin dir (Debian layout), or ``None``."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0,
    )
    return os.path.dirname(found[-1]) if found else None


@dataclass
class PgServer:
    """The session's server: ``admin_dsn`` (a database to run CREATE DATABASE from)."""

    admin_dsn: str
    cluster: PrivateCluster | None = None
    error: str | None = None

    def new_database(self) -> str:
        """A fresh database cloned from the applied template; returns its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE {TEMPLATE}')
        return with_database(self.admin_dsn, name)

    def empty_database(self) -> str:
        """A fresh database without Flowdesk's schema; returns its URL."""
        import psycopg

        name = "e_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return with_database(self.admin_dsn, name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = urlsplit(url).path.lstrip("/")
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _build_template(admin_dsn: str) -> None:
    import psycopg

    from desktop_app.store.postgres.store import apply_postgres_schema

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEMPLATE}")
    apply_postgres_schema(with_database(admin_dsn, TEMPLATE))


def start_server() -> PgServer:
    """Find or start the session's server (never raises; see ``PgServer.error``)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return PgServer("", error="psycopg is not installed (pip install 'flowdesk[postgres]')")
    if ENV_DSN:
        server = PgServer(ENV_DSN)
    else:
        bindir = find_bindir()
        if bindir is None:
            return PgServer(
                "", error="no /usr/lib/postgresql/*/bin/initdb and no FLOWDESK_TEST_PG_DSN"
            )
        cluster = PrivateCluster(bindir)
        try:
            server = PgServer(cluster.start(), cluster=cluster)
        except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
            cluster.stop()
            return PgServer("", error=f"could not start a private cluster: {exc}")
    try:
        _build_template(server.admin_dsn)
    except Exception as exc:
        if server.cluster is not None:
            server.cluster.stop()
        return PgServer("", error=f"could not prepare the template database: {exc!r}")
    return server


def session_server() -> Iterator[PgServer]:
    """Body of the session fixture: yields the server, stops a private cluster after."""
    server = start_server()
    try:
        yield server
    finally:
        if server.cluster is not None:
            server.cluster.stop()


# -- PgBouncer in transaction mode --------------------------------------------


@dataclass
class Bouncer:
    """A private PgBouncer (``pool_mode = transaction``) in front of the
    session's server: every database of the server under the same name, two
    server connections per database and user, so concurrent clients really
    change server connection between transactions. Runs as ``postgres`` when
    we are root (PgBouncer refuses root), its files in a temp dir."""

    server_dsn: str
    pool_size: int = 2
    port: int = 0
    workdir: str = ""
    proc: subprocess.Popen[bytes] | None = None

    def url(self, db_url: str) -> str:
        """``db_url`` (a database of the server) reached through the bouncer."""
        return with_address(db_url, port=self.port)

    def start(self) -> Bouncer:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not os.path.exists(binary):
            raise FileNotFoundError("no pgbouncer (apt-get install pgbouncer)")
        server = urlsplit(self.server_dsn)
        self.workdir = tempfile.mkdtemp(prefix="flowdesk-pgbouncer-")
        as_postgres: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.workdir, "postgres")
            as_postgres = ["runuser", "-u", "postgres", "--"]
        with open(os.path.join(self.workdir, "users.txt"), "w") as f:
            f.write(f'"{server.username}" ""\n')
        last = ""
        for _ in range(3):  # a free port can be taken between the probe and the start
            self.port = _free_port()
            conf = os.path.join(self.workdir, "pgbouncer.ini")
            with open(conf, "w") as f:
                f.write(
                    "[databases]\n"
                    f"* = host={server.hostname} port={server.port}\n"
                    "[pgbouncer]\n"
                    f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\n"
                    "unix_socket_dir =\n"
                    f"auth_type = trust\nauth_file = {self.workdir}/users.txt\n"
                    "pool_mode = transaction\n"
                    f"default_pool_size = {self.pool_size}\nmin_pool_size = 0\n"
                    "max_client_conn = 500\nmax_db_connections = 0\n"
                    f"logfile = {self.workdir}/pgbouncer.log\n"
                )
            for name in os.listdir(self.workdir):
                if os.geteuid() == 0:
                    shutil.chown(os.path.join(self.workdir, name), "postgres")
            self.proc = subprocess.Popen(
                [*as_postgres, binary, conf],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", self.port)) == 0:
                        return self
                time.sleep(0.05)
            stderr = self.proc.stderr if self.proc.poll() is not None else None
            last = stderr.read().decode() if stderr is not None else "did not listen within 10 s"
            self.stop()
        raise RuntimeError(f"pgbouncer did not start: {last}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # runuser passes SIGTERM on to pgbouncer
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def remove(self) -> None:
        self.stop()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def session_bouncer(server: PgServer) -> Iterator[Bouncer | str]:
    """Body of the session fixture: a started :class:`Bouncer`, or the reason
    there is none (the test then skips, or fails under CI=true)."""
    if server.error:
        yield f"no PostgreSQL ({server.error})"
        return
    bouncer = Bouncer(server.admin_dsn)
    try:
        bouncer.start()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        bouncer.remove()
        yield str(exc)
        return
    try:
        yield bouncer
    finally:
        bouncer.remove()


def spawn_flowdesk(
    *args: str, env: Mapping[str, str], resolve_timeout_s: float | None = None
) -> subprocess.Popen[str]:
    """``flowdesk ARGS`` in a new process (forked by the tests' fork
    server), its output piped as text, with ``env`` over the tests'
    environment; ``resolve_timeout_s`` shortens how long the store keeps
    asking an unreachable server whether a statement landed
    (``RESOLVE_TIMEOUT_S``, 30 s)."""
    from tests import cli_forkserver

    code = "import sys\n"
    if resolve_timeout_s is not None:
        code += (
            "import desktop_app.store.postgres.store as p; "
            f"p.RESOLVE_TIMEOUT_S = {resolve_timeout_s}\n"
        )
    code += "from desktop_app.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    return cli_forkserver.popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(Path(__file__).resolve().parents[1]),
        env={**os.environ, **env},
    )

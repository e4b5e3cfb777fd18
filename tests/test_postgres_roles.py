"""A PostgreSQL role without privileges on Flowdesk's schema is told the
truth: whether the schema exists (then the grants a role running Flowdesk
needs) or not (then the ``db apply`` to run, with ``--db``), by read
commands and ``db apply`` alike; the grants and the command it prints work."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.cli_support import as_printed, flowdesk

pytestmark = pytest.mark.postgres


def _as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    netloc = f"{role}@{parts.hostname}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def _admin(url: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)  # type: ignore[arg-type]  # test SQL, no parameters


@pytest.fixture
def bare_role(pg_server) -> Iterator[str]:
    """A login role with CONNECT (PUBLIC's) and nothing else, dropped after."""
    role = "r_" + uuid.uuid4().hex[:12]
    _admin(pg_server.admin_dsn, f"CREATE ROLE {role} LOGIN")
    yield role


def _drop_role(pg_server, url: str, role: str) -> None:
    _admin(url, f"DROP OWNED BY {role}")  # its grants on this database's objects
    pg_server.drop_database(url)
    _admin(pg_server.admin_dsn, f"DROP ROLE {role}")


def test_a_role_without_grants_on_an_applied_schema_is_told_what_to_grant(
    pg_server, bare_role, tmp_path: Path
):
    url = pg_server.new_database()  # schema applied by its owner
    mine = _as_role(url, bare_role)
    try:
        for command in (["runs"], ["db", "status"], ["agent"], ["db", "apply"]):
            refused = flowdesk(mine, *command)
            assert refused.returncode == 1, (command, refused.stdout, refused.stderr)
            said = refused.stderr
            assert "Flowdesk's schema (flowdesk) exists in this database" in said, said
            assert f"role {bare_role} lacks privileges on it" in said, said
            assert "create" not in said.lower(), said  # nothing to create: it exists
        grants = re.search(r"needs: (GRANT .*;)\s*$", said, re.S)
        assert grants is not None, said
        _admin(url, *grants.group(1).split(";")[:-1])  # as the owner would

        assert flowdesk(mine, "db", "apply").stdout.startswith("schema is up to date")
        assert flowdesk(mine, "runs").returncode == 0
        notes = tmp_path / "notes"
        notes.mkdir()
        (notes / "a.md").write_text("# Alpha\n\nnote\n")
        ran = flowdesk(mine, "run", "digest", "--folder", str(notes), "--out",
                       str(tmp_path / "out"), "--quiet")  # fmt: skip
        assert ran.returncode == 0, ran.stderr  # the grants are all a role running runs needs
        assert "Alpha" in (tmp_path / "out" / "digest.md").read_text()
    finally:
        _drop_role(pg_server, url, bare_role)


def test_a_role_that_may_not_create_the_schema_gets_a_db_apply_that_runs(
    pg_server, bare_role, tmp_path: Path
):
    url = pg_server.empty_database()
    mine = _as_role(url, bare_role)
    try:
        refused = flowdesk(mine, "db", "apply")
        assert refused.returncode == 1, refused.stderr
        said = refused.stderr
        assert f"the PostgreSQL role {bare_role} may not create Flowdesk's schema" in said, said
        command = re.search(r"runs `(flowdesk [^`]+)`", said)
        assert command is not None, said
        assert f"--db {mine} db apply" in command.group(1)
        name = urlsplit(url).path.lstrip("/")
        _admin(url, f'GRANT CREATE ON DATABASE "{name}" TO {bare_role}')  # what it says
        done = as_printed(command.group(1), env=dict(os.environ))
        assert done.returncode == 0, done.stderr
        assert "applied core/0001_runs_checkpoints.sql" in done.stdout
        assert flowdesk(mine, "runs").returncode == 0
    finally:
        _drop_role(pg_server, url, bare_role)

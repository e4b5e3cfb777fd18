"""A command that is not a worker (``flowdesk start``) gives up on an
unreachable PostgreSQL server once: after the step's checkpoint spent its
tries (``postgres.connect_wait_s`` each, four of them), or asked in vain
whether it landed, the statements that record where the run stopped try
once and wait at most that long (or 2 s) each, instead of four whole tries
again each (a tryout's ``run`` took 212 s to give up at the default 30 s).
Real processes, a real server behind a relay that cuts every connection and
refuses new ones; once the server is back the printed ``resume`` finishes
the run, its last step once."""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.gated_flows import FLOWS_ENV
from tests.pg_proxy import CommitDropProxy
from tests.pg_support import spawn_flowdesk, with_address

pytestmark = pytest.mark.postgres

#: one try's wait for a pooled connection, and how often it asks again
WAIT_S = 2.0
ENV = {
    "FLOWDESK_FLOWS": FLOWS_ENV,
    "FLOWDESK_POSTGRES__CONNECT_WAIT_S": str(WAIT_S),
    "FLOWDESK_POSTGRES__RECONNECT_MAX_S": "0.2",
}


@pytest.fixture
def relay(pg_url: str) -> Iterator[CommitDropProxy]:
    relay = CommitDropProxy(int(urlsplit(pg_url).port or 5432))
    yield relay
    relay.close()


def flowdesk(*args: str) -> subprocess.Popen[str]:
    """``flowdesk ARGS``; a statement whose connection was cut while out
    asks the server whether it landed for 1 s (30 s by default)."""
    return spawn_flowdesk(*args, env=ENV, resolve_timeout_s=1.0)


@pytest.mark.scenario("S105")
def test_a_run_gives_up_once_on_an_unreachable_server_and_its_resume_works(
    pg_url: str, relay: CommitDropProxy, tmp_path: Path
) -> None:
    url = with_address(pg_url, host="127.0.0.1", port=relay.port)
    child = flowdesk("--db", url, "start", "gated", "--input", f'{{"dir": "{tmp_path}"}}')
    deadline = time.monotonic() + 60
    while not (tmp_path / "gate.runs").exists():  # the gated step is running
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the gated step never began"
        time.sleep(0.02)
    relay.refuse()
    relay.cut_all()
    went = time.monotonic()
    (tmp_path / "go").touch()
    out, err = child.communicate(timeout=120)
    took = time.monotonic() - went
    assert child.returncode == 1, (out, err)
    assert "Traceback" not in err, err
    assert err.count("cannot be reached; waiting for it to come back") == 1, err
    # the first statement to give up: the step's checkpoint, four tries of
    # WAIT_S, or (its connection cut while it was out) 1 s of asking whether
    # it landed; then each statement recording where the run stopped one try
    # of at most WAIT_S. Before, each of those tried four times as well.
    first = 1.0 if "whether it landed is unknown" in err else 4 * WAIT_S
    assert took < first + WAIT_S + 2, (took, err)
    resume = re.search(r"flowdesk [^\n`]*resume \S+", err)
    assert resume, err
    relay.admit()
    argv = shlex.split(resume[0])
    assert argv[:3] == ["flowdesk", "--db", url], argv
    again = flowdesk(*argv[1:])
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, (out, err)
    assert (tmp_path / "last.runs").read_text().count("\n") == 1

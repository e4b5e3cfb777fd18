"""OpenTelemetry export and the log file, seen from outside: the real
`flowdesk` CLI in a subprocess, a real OTLP/HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import importlib
import os
import re
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests import cli_forkserver
from tests.chat_server import ChatServer, completion
from tests.cli_support import flowdesk

REPO = Path(__file__).resolve().parents[1]
READ = {"path": "todo.md"}


def require(module: str):
    """Import ``module``; under CI=true a missing one fails the test instead of skipping."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module)


def contexts(db: Path, table: str) -> dict[str, str]:
    import json

    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(f"SELECT run_id, context FROM {table}").fetchall()
    finally:
        conn.close()
    return {rid: json.loads(ctx)["trace_id"] for rid, ctx in rows}


@pytest.fixture
def receiver():
    require("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    require("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
    from tests.otlp_receiver import OtlpReceiver

    with OtlpReceiver() as r:
        yield r


@pytest.mark.scenario("S75")
def test_run_steps_and_model_calls_reach_an_otlp_receiver_in_the_run_trace(tmp_path, receiver):
    db = tmp_path / "f.db"
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nAlpha private text.\n")
    (folder / "b.txt").write_text("Beta private text.\n")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    with ChatServer() as chat:
        chat.script = [("json", completion("Summary A.")), ("json", completion("Summary B."))]
        env |= {"FLOWDESK_MODEL__BASE_URL": chat.url, "FLOWDESK_MODEL__MODEL": "m"}
        args = ("run", "digest", "--folder", str(folder), "--out", str(tmp_path / "o"))
        out = flowdesk(db, *args, "--model", "--quiet", env=env)
    assert out.returncode == 0, out.stderr
    ((run_id, trace_id),) = contexts(db, "runs").items()
    assert len(trace_id) == 32 and int(trace_id, 16)
    assert set(receiver.paths) == {"/v1/traces"}
    spans = receiver.spans
    assert {s.trace_id for s in spans} == {trace_id}  # everything in the run's trace
    by_name: dict[str, list] = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    (run_span,) = by_name["run digest"]
    assert run_span.attributes["flowdesk.run_id"] == run_id
    # a root span in the run's trace: no parent that no exporter ever sent
    assert run_span.parent_span_id == ""
    exported = {s.span_id for s in spans}
    assert all(s.parent_span_id in exported or s.parent_span_id == "" for s in spans)
    assert run_span.resource["service.name"] == "flowdesk"
    assert {"step scan", "step report"} <= set(by_name)
    step_names = {n for n in by_name if n.startswith("step ")}
    assert len(step_names) >= 3  # scan, the per-file loop step, report
    assert all(s.parent_span_id == run_span.span_id for n in step_names for s in by_name[n])
    # one agent run per file, each with its model call, in the same trace
    agents = by_name["invoke_agent digest-summary"]
    assert sorted(s.attributes["flowdesk.run_id"] for s in agents) == [
        f"{run_id}:a.md",
        f"{run_id}:b.txt",
    ]
    chats = by_name["chat m"]
    assert len(chats) == 2
    assert {c.parent_span_id for c in chats} == {a.span_id for a in agents}
    assert all(c.attributes["gen_ai.request.model"] == "m" for c in chats)
    raw = b"".join(receiver.bodies)
    assert b"private text" not in raw and b"Summary A" not in raw  # ids, never content


@pytest.mark.scenario("S75")
def test_agent_tool_calls_are_spans_in_the_agent_run_trace(tmp_path, receiver):
    db = tmp_path / "f.db"
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.md").write_text("Buy milk.\n")
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{receiver.endpoint}/v1/traces",
        "OTEL_SERVICE_NAME": "my-desk",
    }
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    with ChatServer() as chat:
        chat.script = [
            (
                "json",
                completion("", [{"id": "t1", "name": "read_file", "args": {"path": "todo.md"}}]),
            ),
            ("json", completion("Milk.")),
        ]
        env |= {"FLOWDESK_MODEL__BASE_URL": chat.url, "FLOWDESK_MODEL__MODEL": "m"}
        args = ("ask", "what?", "--tools", "files", "--folder", str(folder))
        out = flowdesk(db, *args, env=env)
    assert out.returncode == 0, out.stderr
    ((run_id, trace_id),) = contexts(db, "agent_runs").items()
    names = sorted(s.name for s in receiver.spans)
    assert names == ["chat m", "chat m", "execute_tool read_file", "invoke_agent ask"]
    assert {s.trace_id for s in receiver.spans} == {trace_id}
    (agent,) = [s for s in receiver.spans if s.name == "invoke_agent ask"]
    assert agent.parent_span_id == ""  # the agent run's root span
    (tool,) = [s for s in receiver.spans if s.name.startswith("execute_tool")]
    assert agent.attributes["flowdesk.run_id"] == run_id
    assert agent.attributes["flowdesk.status"] == "done"
    assert tool.parent_span_id == agent.span_id
    assert tool.attributes["gen_ai.tool.name"] == "read_file"
    assert tool.attributes["gen_ai.tool.call.id"] == "t1"
    assert tool.attributes["flowdesk.tool.reused"] is False
    assert agent.resource["service.name"] == "my-desk"  # the SDK's own env handling
    assert b"todo.md" not in b"".join(receiver.bodies)  # tool inputs stay out of traces


@pytest.mark.scenario("S75")
def test_an_mcp_tool_calls_sdk_span_is_a_child_of_its_execute_tool_span(tmp_path, receiver):
    """The MCP SDK makes a client span for each request it sends (``MCP send
    tools/call NAME``) under the current span, and sends that span's trace
    context to the server: with the tool call's span current while the call
    runs, both are in the agent run's trace (they were a trace of their own)."""
    import json

    from tests.cli_forkserver import module_command

    require("mcp")
    db, log, config = tmp_path / "f.db", tmp_path / "notes.log", tmp_path / "config.toml"
    command = module_command("tests.mcp_notes_server", str(log), "stdio")
    config.write_text(
        f"[mcp_servers.notes]\ncommand = {json.dumps(command)}\ncwd = {json.dumps(str(REPO))}\n"
    )
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{receiver.endpoint}/v1/traces",
        "FLOWDESK_CONFIG": str(config),
    }
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    with ChatServer() as chat:
        call = completion("", [{"id": "a", "name": "notes__append", "args": {"text": "x"}}])
        chat.script = [("json", call), ("json", completion("Noted."))]
        env |= {"FLOWDESK_MODEL__BASE_URL": chat.url, "FLOWDESK_MODEL__MODEL": "m"}
        out = flowdesk(db, "ask", "note x", "--mcp", "notes", env=env)
    assert out.returncode == 0, out.stderr
    assert log.read_text().splitlines() == ["x"]
    ((run_id, trace_id),) = contexts(db, "agent_runs").items()
    (tool,) = [s for s in receiver.spans if s.name == "execute_tool notes__append"]
    (sent,) = [s for s in receiver.spans if s.name == "MCP send tools/call append"]
    assert tool.trace_id == trace_id
    assert tool.attributes["flowdesk.run_id"] == run_id
    assert sent.trace_id == trace_id
    assert sent.parent_span_id == tool.span_id


def test_without_an_endpoint_nothing_is_exported(tmp_path, receiver):
    db = tmp_path / "f.db"
    out = flowdesk(db, "db", "apply", env={})
    assert out.returncode == 0
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "a.txt").write_text("x\n")
    args = ("run", "digest", "--folder", str(folder), "--out", str(tmp_path / "o"), "--quiet")
    assert flowdesk(db, *args, env={}).returncode == 0
    log = Path(os.environ["HOME"]) / ".local" / "state" / "flowdesk" / "log" / "flowdesk.log"
    before = log.read_text() if log.exists() else ""
    disabled = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SDK_DISABLED": "True"}
    assert flowdesk(db, *args, env=disabled).returncode == 0  # the SDK's own switch
    assert receiver.spans == [] and receiver.paths == []
    # and the log does not claim an export (it said "exporting spans over OTLP/HTTP")
    assert "exporting spans" not in log.read_text()[len(before) :]
    assert (
        flowdesk(db, *args, env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}).returncode == 0
    )
    assert {s.name for s in receiver.spans} >= {"run digest", "step scan"}  # the control


def test_a_collector_that_is_down_costs_a_command_a_few_seconds_at_most_and_it_says_so(
    tmp_path, receiver
):
    """A tryout: with the collector down, every command that ran something
    waited ~8-10 s at exit (the SDK's exit hook retrying), printing the
    SDK's raw "Transient error ... retrying" lines. The queued spans get
    EXIT_FLUSH_S, the SDK's lines go to the log file, and one line says
    what happened. Measured against the same command with no endpoint."""
    import socket
    import time

    from desktop_app.observability import EXIT_FLUSH_S

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}"
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply", env={}).returncode == 0
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "a.txt").write_text("x\n")
    args = ("run", "digest", "--folder", str(folder), "--quiet")
    t0 = time.monotonic()
    base = flowdesk(db, *args, "--out", str(tmp_path / "o1"), env={})
    baseline = time.monotonic() - t0
    t0 = time.monotonic()
    out = flowdesk(
        db, *args, "--out", str(tmp_path / "o2"), env={"OTEL_EXPORTER_OTLP_ENDPOINT": down}
    )
    took = time.monotonic() - t0
    assert base.returncode == 0 and out.returncode == 0, out.stderr
    assert took - baseline < EXIT_FLUSH_S + 2.5, (took, baseline)  # was ~8 s more
    [said] = out.stderr.splitlines()
    assert re.fullmatch(
        r"flowdesk: (\d+ span\(s\)|spans) not exported: the OTLP collector did not accept them "
        rf"within {EXIT_FLUSH_S:g} s \(is it running at OTEL_EXPORTER_OTLP_ENDPOINT\? the log "
        r"says why\)",
        said,
    ), said
    log = Path(os.environ["HOME"]) / ".local" / "state" / "flowdesk" / "log" / "flowdesk.log"
    assert "opentelemetry" in log.read_text()  # the SDK's own lines, kept there
    # a collector that answers 500 at once: said so, with how many, at once
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class Refusing(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(500)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Refusing) as server:
        Thread(target=server.serve_forever, daemon=True).start()
        refusing = f"http://127.0.0.1:{server.server_address[1]}"
        t0 = time.monotonic()
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": refusing}
        out = flowdesk(db, *args, "--out", str(tmp_path / "o4"), env=env)
        took = time.monotonic() - t0
        server.shutdown()
    assert out.returncode == 0 and took - baseline < EXIT_FLUSH_S + 2.5, (took, out.stderr)
    assert re.match(r"flowdesk: \d+ span\(s\) not exported: ", out.stderr), out.stderr
    # a collector that answers: no such line
    ok = flowdesk(
        db,
        *args,
        "--out",
        str(tmp_path / "o3"),
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint},
    )
    assert ok.returncode == 0 and ok.stderr == "", ok.stderr
    assert {s.name for s in receiver.spans} >= {"run digest", "step scan"}


@pytest.mark.scenario("S122")
def test_a_run_stopped_by_sigterm_ends_its_spans_interrupted_and_its_resume_joins_the_trace(
    tmp_path, receiver
):
    """A tryout: SIGTERM (or Ctrl-C) on ``flowdesk start`` lost the run's and
    the step's open spans (an orphan ``step s0`` in the trace, nothing of the
    attempt that was stopped). They end at exit as ``interrupted``; the
    printed resume's spans join the same trace."""
    import json
    import signal
    import time

    from tests import sigterm_flows
    from tests.cli_support import as_printed, spawn

    db = tmp_path / "f.db"
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "FLOWDESK_FLOWS": sigterm_flows.FLOWS_ENV,
    }
    assert flowdesk(db, "db", "apply", env=env).returncode == 0
    sink, gate = tmp_path / "effects.log", tmp_path / "gate"
    given = json.dumps({"sink": str(sink), "gate": str(gate)})
    proc = spawn("--db", str(db), "start", "effects", "--input", given, env=env)
    deadline = time.monotonic() + 60
    while "begin s1" not in (sink.read_text() if sink.exists() else ""):
        assert proc.poll() is None and time.monotonic() < deadline, "s1 never began"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    ((run_id, trace_id),) = contexts(db, "runs").items()
    spans = {s.name: s for s in receiver.spans}
    assert spans["run effects"].attributes["flowdesk.run_id"] == run_id
    run, s1 = spans["run effects"], spans["step s1"]
    assert (run.trace_id, run.attributes["flowdesk.status"]) == (trace_id, "interrupted")
    assert s1.attributes["flowdesk.status"] == "interrupted" and s1.status_code == 2  # ERROR
    assert s1.parent_span_id == run.span_id == spans["step s0"].parent_span_id
    gate.touch()
    [hint] = [ln for ln in err.splitlines() if "to continue" in ln]
    resume = hint.split("run `", 1)[1].split("`", 1)[0]
    again = as_printed(resume, env={**os.environ, **env})
    assert again.returncode == 0, again.stderr
    resumed = [s for s in receiver.spans if s.name == "step s1" and s is not s1]
    assert [s.trace_id for s in resumed] == [trace_id]  # the same trace


def test_an_agent_leaving_past_its_grace_still_ends_and_sends_its_runs_spans(
    tmp_path, receiver, monkeypatch
):
    """A second tryout: ``flowdesk agent`` stopped by SIGTERM with a step
    still running leaves by ``os._exit`` once its grace is over, which runs
    no exit hook: none of its runs' spans was sent. They end
    ``interrupted`` and are sent first."""
    import signal

    from tests.test_agent_sigterm import BOUND_S, Agent, lines, submit, wait_for

    db = tmp_path / "flowdesk.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    sink, gate = tmp_path / "effects.log", tmp_path / "gate"
    agent = Agent(str(db), tmp_path / "a.err", "--grace", "1")
    try:
        run_id = submit(str(db), sink, gate)
        wait_for(lambda: ["begin", "s1", "1", str(agent.pid)] in lines(sink), "s1 never began")
        agent.popen.send_signal(signal.SIGTERM)
        assert agent.popen.wait(timeout=BOUND_S) == 1, agent.text()
    finally:
        gate.touch()
        agent.stop()
    assert "exiting 1 s after the signal" in agent.text()
    spans = {s.name: s for s in receiver.spans}
    run, s1 = spans["run effects"], spans["step s1"]
    assert run.attributes["flowdesk.run_id"] == run_id
    assert run.attributes["flowdesk.status"] == s1.attributes["flowdesk.status"] == "interrupted"
    assert spans["step s0"].attributes["flowdesk.status"] == "done"


def test_log_file_is_private_rotating_at_the_settings_level_and_masks_secrets(tmp_path):
    home = Path(os.environ["HOME"])
    script = """
import logging
from desktop_app.config import load_settings
from desktop_app.observability import mask_secret, setup_logging
path = setup_logging(load_settings())
print(path)
mask_secret("sk-test-0123456789")
log = logging.getLogger("desktop_app.demo")
log.debug("hidden at INFO")
log.info("using key %s for run %s", "sk-test-0123456789", "r1")
for i in range(12000):
    log.info("filler line %05d %s", i, "x" * 80)
"""
    out = cli_forkserver.run_argv(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "FLOWDESK_LOG_LEVEL": "INFO"},
    )
    assert out.returncode == 0, out.stderr
    path = Path(out.stdout.strip())
    assert path == home / ".local" / "state" / "flowdesk" / "log" / "flowdesk.log"
    files = sorted(path.parent.iterdir())
    assert path.with_name("flowdesk.log.1") in files  # rotated at 1 MiB
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    text = "".join(f.read_text() for f in files)
    assert "using key *** for run r1" in text
    assert "sk-test-0123456789" not in text
    assert "hidden at INFO" not in text
    bad = flowdesk(tmp_path / "f.db", "runs", env={"FLOWDESK_LOG_LEVEL": "LOUD"})
    assert bad.returncode == 2 and "log_level" in bad.stderr


def test_the_log_is_shared_by_processes_rotating_it_once_and_made_private(tmp_path):
    """A tryout: a long-lived process (``flowdesk agent``) went on writing to
    the file another process had rotated to ``.1``, then rotated it again,
    pushing a small current log out; a log an older version left 0644
    stayed so; ``FLOWDESK_LOG_LEVEL=debug`` was refused."""
    log = Path(os.environ["HOME"]) / ".local" / "state" / "flowdesk" / "log" / "flowdesk.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("an older line\n")
    log.chmod(0o644)
    gate = tmp_path / "gate"
    setup = (
        "import logging, pathlib, sys, time\n"
        "from desktop_app.config import load_settings\n"
        "from desktop_app.observability import setup_logging\n"
        "setup_logging(load_settings())\n"
        "log = logging.getLogger('desktop_app.demo')\n"
    )
    long_lived = setup + (
        "log.info('long-lived first')\n"
        "print('ready', flush=True)\n"
        f"while not pathlib.Path({str(gate)!r}).exists(): time.sleep(0.02)\n"
        "log.info('long-lived after the rotation')\n"
    )
    a = cli_forkserver.popen(
        [sys.executable, "-c", long_lived], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert a.stdout is not None and a.stdout.readline().strip() == "ready"
        assert stat.S_IMODE(log.stat().st_mode) == 0o600  # made private when opened
        filler = setup + "for i in range(12000): log.info('filler %05d %s', i, 'x' * 80)\n"
        b = cli_forkserver.run_argv(
            [sys.executable, "-c", filler], capture_output=True, text=True, cwd=REPO, timeout=120
        )
        assert b.returncode == 0, b.stderr
        gate.touch()
        assert a.wait(timeout=60) == 0
    finally:
        if a.poll() is None:
            a.kill()
    current, older = log.read_text(), log.with_name("flowdesk.log.1").read_text()
    assert "long-lived after the rotation" in current, current[-300:]
    assert "long-lived first" in older and len(older) > 1_000_000  # rotated once, by b
    assert not log.with_name("flowdesk.log.2").exists()
    quiet = flowdesk(tmp_path / "f.db", "db", "apply", env={"FLOWDESK_LOG_LEVEL": "debug"})
    assert quiet.returncode == 0, quiet.stderr


def test_processes_writing_the_log_at_once_lose_no_line_as_it_rotates(tmp_path):
    """A second tryout: six processes logging at once lost most of their
    lines as two of them rotated the file one after the other (nearly empty
    files pushed out of the five kept, a ``FileNotFoundError`` traceback).
    Four real processes released at one instant, the file rotated at 40 kB
    (the handler's limit lowered so that some 25 rotations race in one
    release, and every rotated file kept): every line is there, and every
    rotated file is whole."""
    log = Path(os.environ["HOME"]) / ".local" / "state" / "flowdesk" / "log" / "flowdesk.log"
    go = tmp_path / "go"
    limit = 40_000
    writer = (
        "import logging, pathlib, sys, time\n"
        "from desktop_app import observability\n"
        "from desktop_app.config import load_settings\n"
        "observability.setup_logging(load_settings())\n"
        "handler = observability._done['log_handler']\n"
        f"handler.maxBytes, handler.backupCount = {limit}, 1000\n"
        "log = logging.getLogger('desktop_app.stress')\n"
        "print('ready', flush=True)\n"
        f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.002)\n"
        "for i in range(1250): log.info('stress %s %05d %s', sys.argv[1], i, 'x' * 120)\n"
    )
    procs = [
        cli_forkserver.popen(
            [sys.executable, "-c", writer, name], stdout=subprocess.PIPE, text=True, cwd=REPO
        )
        for name in "ABCD"
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        go.touch()  # all four at once
        assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    files = sorted(log.parent.glob("flowdesk.log*"))
    text = "".join(f.read_text() for f in files if not f.name.endswith(".lock"))
    for name in "ABCD":
        assert text.count(f"stress {name} ") == 1250, name
    rotated = [f for f in files if f.suffix[1:].isdigit()]
    sizes = [(f.name, f.stat().st_size) for f in rotated]
    assert len(rotated) >= 20 and all(size > limit - 300 for _, size in sizes), sizes


def test_an_unwritable_log_folder_is_a_warning_not_a_failure(tmp_path):
    blocker = tmp_path / "state"
    blocker.write_text("a file where the log folder should be\n")
    out = flowdesk(tmp_path / "f.db", "db", "apply", env={"XDG_STATE_HOME": str(blocker)})
    assert out.returncode == 0, out.stderr
    assert "cannot write the log file in" in out.stderr and str(blocker) in out.stderr


def test_debug_log_of_an_agent_run_names_the_run_never_the_key_or_content(tmp_path):
    db = tmp_path / "f.db"
    key = "sk-live-abcdef0123456789"
    assert flowdesk(db, "db", "apply", env={}).returncode == 0
    with ChatServer() as chat:
        chat.script = [("json", completion("The secret plan is ready."))]
        env = {
            "FLOWDESK_MODEL__BASE_URL": chat.url,
            "FLOWDESK_MODEL__MODEL": "m",
            "FLOWDESK_MODEL__API_KEY": key,
            "FLOWDESK_LOG_LEVEL": "DEBUG",
        }
        out = flowdesk(db, "ask", "what is my private question?", env=env)
        assert out.returncode == 0, out.stderr
        assert chat.requests[0]["headers"]["Authorization"] == f"Bearer {key}"  # it was used
    (run_id,) = contexts(db, "agent_runs")
    log = Path(os.environ["HOME"]) / ".local" / "state" / "flowdesk" / "log" / "flowdesk.log"
    text = log.read_text()
    assert f"run {run_id} started" in text and f"run {run_id} ended done" in text
    assert key not in text
    assert "private question" not in text and "secret plan" not in text

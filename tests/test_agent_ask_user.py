"""The built-in ``ask_user`` tool, as a user meets it with a real model
server (tests/chat_server.py on 127.0.0.1) and the ``flowdesk`` command: a
call without its required ``question`` is a malformed tool call the model is
told about, never a wait with no question."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tests.chat_server import ChatServer, completion
from tests.cli_support import as_printed, flowdesk


def tool_answers(request: dict) -> list[str]:
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "tool"]


def test_ask_user_without_a_question_is_refused_to_the_model_not_asked(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    with ChatServer() as server:
        server.script = [
            ("json", completion("", [{"id": "a", "name": "ask_user", "args": {}}])),
            (
                "json",
                completion("", [{"id": "b", "name": "ask_user", "args": {"question": "Which?"}}]),
            ),
            ("json", completion("Then the red one.")),
        ]
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        asked = flowdesk(db, "ask", "pick one for me", env=env)
        assert asked.returncode == 0, asked.stderr
        # the malformed call did not pause the run: the model was told and asked again
        assert len(server.requests) == 2
        (refusal,) = tool_answers(server.requests[1])
        error = json.loads(refusal)["error"]
        assert error.startswith("invalid arguments: question: Field required")
        assert asked.stdout.strip() == "the agent asks: Which?"
        waiting = flowdesk(db, "waiting", env=env)
        assert '  asks: "Which?"  (flowdesk ' in waiting.stdout, waiting.stdout
        hint = re.search(r"^answer with: (flowdesk .*)$", asked.stderr, re.M)
        assert hint, asked.stderr
        command = hint.group(1).replace("TEXT", "red")
        answered = as_printed(command, {**os.environ, **env})
        assert answered.returncode == 0, answered.stderr
        assert "Then the red one." in answered.stdout
        assert tool_answers(server.requests[2])[-1] == "Human input: red"


def test_a_question_with_control_characters_shows_them_one_way_everywhere(tmp_path: Path) -> None:
    """A new user's report: ``ask`` showed ESC as ``\\x1b`` while ``waiting``
    and ``show`` showed ``\\u001b``. Every command shows ``\\x1b`` now, and
    none prints the raw character; the question itself is kept as asked."""
    db = tmp_path / "f.db"
    assert flowdesk(db, "db", "apply").returncode == 0
    question = "which color?\x1b[2J\r"
    with ChatServer() as server:
        call = [{"id": "q", "name": "ask_user", "args": {"question": question}}]
        server.script = [("json", completion("", call))]
        env = {"FLOWDESK_MODEL__BASE_URL": server.url, "FLOWDESK_MODEL__MODEL": "m"}
        asked = flowdesk(db, "ask", "pick", env=env)
        assert asked.stdout.strip() == "the agent asks: which color?\\x1b[2J\\x0d"
        run_id = asked.stderr.split()[1]
        waiting = flowdesk(db, "waiting", env=env).stdout
        shown = flowdesk(db, "show", run_id, env=env).stdout
    assert '  asks: "which color?\\x1b[2J\\x0d"  (flowdesk ' in waiting, waiting
    assert '  an answer: "which color?\\x1b[2J\\x0d"' in shown, shown
    for out in (asked.stdout + asked.stderr, waiting, shown):
        assert "\\u001b" not in out and "\x1b" not in out and "\r" not in out
    rows = json.loads(flowdesk(db, "waiting", "-o", "json", env=env).stdout)
    assert [r["question"] for r in rows] == [question]  # JSON keeps the text as asked

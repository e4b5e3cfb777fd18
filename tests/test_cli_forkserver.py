"""The tests' fork server (``tests/cli_forkserver.py``) forks a child for a
call whose environment it can give the child faithfully, and keeps what a
child reads on first use out of the server."""

from __future__ import annotations

import os

from tests import cli_forkserver

CODE = (
    "import os, keyring; "
    "print(os.getppid()); "
    "print(type(keyring.get_keyring()).__module__ + '.' + type(keyring.get_keyring()).__name__)"
)


def test_a_keyring_backend_chosen_by_the_environment_is_the_childs_and_the_child_is_forked():
    for backend in ("keyring.backends.fail.Keyring", "keyring.backends.null.Keyring"):
        env = {**os.environ, "PYTHON_KEYRING_BACKEND": backend}
        done = cli_forkserver.run_code(CODE, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        parent, chosen = done.stdout.split()
        # forked by the server (a fresh interpreter's parent is this process)
        assert int(parent) == cli_forkserver._server("").proc.pid
        assert int(parent) != os.getpid()
        # the server never touched the keyring: each child chooses its own
        assert chosen == backend


def test_a_start_up_variable_still_gets_a_fresh_interpreter():
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    done = cli_forkserver.run_code("import os; print(os.getppid())", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == os.getpid()

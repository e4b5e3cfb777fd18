"""The command an error prints to install a missing extra: from a package
index for Flowdesk installed from one (or from a wheel), from the checkout
for an editable install of one (a tryout: ``pip install 'flowdesk[postgres]'``
from a clone found no ``flowdesk`` on the index). The installed
distribution's metadata is faked (it is pip's, outside the project); the
wheel's own message is checked in tests/test_packaging_wheel.py."""

from __future__ import annotations

import shlex
import sys
from importlib import metadata
from pathlib import Path

import pytest

from desktop_app import extras
from tests.cli_support import REPO, install_hint


class Installed:
    """A distribution whose ``direct_url.json`` (PEP 610) is ``text``."""

    def __init__(self, text: str | None) -> None:
        self.text = text

    def read_text(self, name: str) -> str | None:
        assert name == "direct_url.json"
        return self.text


def installed_as(monkeypatch: pytest.MonkeyPatch, text: str | None) -> None:
    monkeypatch.setattr(extras.metadata, "distribution", lambda name: Installed(text))


def test_this_checkouts_editable_install_installs_the_extra_from_the_checkout() -> None:
    assert extras.editable_checkout() == REPO
    assert extras.install_command("postgres") == install_hint("postgres")
    assert shlex.split(install_hint("postgres")) == [
        sys.executable, "-m", "pip", "install", "-e", f"{REPO}[postgres]",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "direct_url",
    [
        None,  # from an index: pip writes no direct_url.json
        '{"url": "file:///tmp/flowdesk-0.1.0-py3-none-any.whl", "archive_info": {}}',
        '{"url": "https://example.org/flowdesk.tar.gz", "archive_info": {}}',
        '{"url": "file:///src/flowdesk", "dir_info": {}}',  # a non-editable folder install
        '{"url": "https://example.org/x", "dir_info": {"editable": true}}',  # not a folder
        "not json",
    ],
)
def test_flowdesk_not_installed_from_a_checkout_says_pip_install_flowdesk_extra(
    monkeypatch: pytest.MonkeyPatch, direct_url: str | None
) -> None:
    installed_as(monkeypatch, direct_url)
    assert extras.editable_checkout() is None
    assert extras.install_command("mcp") == "pip install 'flowdesk[mcp]'"


def test_not_installed_at_all_says_pip_install_flowdesk_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing(name: str) -> None:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(extras.metadata, "distribution", missing)
    assert extras.install_command("otel") == "pip install 'flowdesk[otel]'"


def test_a_checkout_whose_path_has_a_space_is_quoted_as_one_argument(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed_as(
        monkeypatch, '{"url": "file:///home/a%20b/flowdesk", "dir_info": {"editable": true}}'
    )
    assert extras.editable_checkout() == Path("/home/a b/flowdesk")
    command = extras.install_command("langgraph")
    assert shlex.split(command) == [
        sys.executable, "-m", "pip", "install", "-e", "/home/a b/flowdesk[langgraph]",
    ]  # fmt: skip

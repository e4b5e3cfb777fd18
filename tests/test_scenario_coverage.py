"""Every scenario of docs/scenarios.md is proven by at least one marked test,
and no test names a scenario the list does not have."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def listed_scenarios() -> set[str]:
    text = (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8")
    return set(re.findall(r"^- \*\*(S\d+)\*\*", text, flags=re.MULTILINE))


@functools.cache
def marked_scenarios() -> dict[str, list[str]]:
    """scenario id -> the tests (file::function) carrying its marker.

    Only files whose text has ``scenario(`` can carry one, so only those
    are parsed (the tests are megabytes of source); the result is computed
    once per process and read, not changed, by the tests."""
    marks: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        if "scenario(" not in source:
            continue
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for dec in node.decorator_list:
                if (
                    isinstance(dec, ast.Call)
                    and isinstance(dec.func, ast.Attribute)
                    and dec.func.attr == "scenario"
                    and dec.args
                    and isinstance(dec.args[0], ast.Constant)
                ):
                    name = f"{path.relative_to(ROOT)}::{node.name}"
                    marks.setdefault(str(dec.args[0].value), []).append(name)
    return marks


def test_the_list_is_the_whole_numbered_range():
    listed = listed_scenarios()
    numbers = sorted(int(s[1:]) for s in listed)
    assert numbers == list(range(1, numbers[-1] + 1))


def test_each_scenario_number_is_listed_once():
    """Two scenarios under one number would share its marked tests, and
    one of them could lose its last test unnoticed (S97 was listed twice)."""
    text = (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8")
    ids = re.findall(r"^- \*\*(S\d+)\*\*", text, flags=re.MULTILINE)
    assert sorted(i for i in set(ids) if ids.count(i) > 1) == []


def test_every_listed_scenario_has_a_marked_test():
    marks = marked_scenarios()
    missing = sorted(listed_scenarios() - set(marks), key=lambda s: int(s[1:]))
    assert missing == []


def test_no_test_names_an_unlisted_scenario():
    unknown = {s: t for s, t in marked_scenarios().items() if s not in listed_scenarios()}
    assert unknown == {}

"""Mutation testing of the durable core with mutmut, one module at a time.

Usage: python tools/mutate.py [MODULE ...] [--jobs N] [--keep]

For each module (default: every module in ``TESTS_FOR``) this copies the
checkout's files (``git ls-files``: what a fresh clone has, plus local edits)
to ``.mutation/<module>/``, appends a ``[tool.mutmut]`` section that mutates
only that module and selects only the tests mapped to it, runs
``mutmut run`` there, and prints the kill rate and the surviving mutants.
Mutants listed in ``tools/mutation_equivalent.txt`` (``name: reason``) are
counted apart, never as killed.

Why mutmut: it switches mutants with an environment variable
(``MUTANT_UNDER_TEST``) read at call time by trampolines in a copied tree
(``mutants/``). The SIGKILL crash workers inherit that variable and import
the same copied tree (they put their parent folder first on ``sys.path``),
so crash tests in real subprocesses see the mutant too. It also records
which tests reach each function and runs only those per mutant, which keeps a
module's run short on two cores. Its limit: that record is made in-process,
so a function reached *only* inside a subprocess shows as "no tests" and is
reported as a survivor to look at, not silently dropped.

Exit status: 0 when every module was run (survivors are a report, not a
failure), 2 on a usage error, 1 when mutmut itself failed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutation"
EQUIVALENT = ROOT / "tools" / "mutation_equivalent.txt"

_ENGINE = [
    "tests/test_engine_basics.py",
    "tests/test_engine_scenarios.py",
    "tests/test_engine_crash.py",
    "tests/test_crash_real.py",
    "tests/test_core_gaps.py",
]
_STORE = [
    "tests/contract/",
    "tests/test_schema.py",
    "tests/test_state_codec.py",
    "tests/test_leases.py",
    "tests/test_waits.py",
]

#: module -> the tests that exercise it (a fast, targeted selection; mutmut
#: narrows it further to the tests that reach each mutated function).
TESTS_FOR: dict[str, list[str]] = {
    "desktop_app/flow/retry.py": [
        "tests/test_engine_basics.py",
        "tests/test_engine_scenarios.py",
        "tests/test_core_gaps.py",
        "tests/test_provider.py",
    ],
    "desktop_app/flow/clock.py": [*_ENGINE, "tests/test_waits.py"],
    "desktop_app/flow/context.py": [*_ENGINE, "tests/test_context.py"],
    "desktop_app/flow/definition.py": _ENGINE,
    "desktop_app/flow/driver.py": [
        *_ENGINE,
        "tests/test_waits.py",
        "tests/test_leases.py",
        "tests/contract/test_races.py",
    ],
    "desktop_app/flow/engine.py": [
        *_ENGINE,
        "tests/test_waits.py",
        "tests/test_leases.py",
        "tests/contract/test_races.py",
    ],
    "desktop_app/flow/events.py": _ENGINE,
    "desktop_app/flow/outbox.py": ["tests/test_outbox.py", "tests/test_races_processes.py"],
    "desktop_app/flow/state.py": [*_ENGINE, "tests/test_state_codec.py"],
    "desktop_app/flow/tracing.py": ["tests/test_tracing.py"],
    "desktop_app/store/codec.py": _STORE,
    "desktop_app/store/connection.py": _STORE,
    "desktop_app/store/memory.py": ["tests/contract/"],
    "desktop_app/store/migrations.py": ["tests/test_schema.py"],
    "desktop_app/store/protocol.py": _STORE,
    "desktop_app/store/sqlite.py": [
        *_STORE,
        "tests/test_outbox.py",
        "tests/test_races_processes.py",
        "tests/test_tidy.py",
    ],
    "desktop_app/store/domain/digest.py": ["tests/test_digest.py"],
    "desktop_app/store/domain/tidy.py": ["tests/test_tidy.py", "tests/test_cli_tidy.py"],
    "desktop_app/store/agent_runs.py": ["tests/test_agent.py", "tests/test_agent_crash.py"],
    "desktop_app/agent/runtime.py": ["tests/test_agent.py", "tests/test_agent_crash.py"],
}

_RESULT = re.compile(r"^\s+(\S+): (.+)$")
_KILLED = {"killed", "timeout", "caught by type check"}
_SKIPPED = {"skipped", "not checked", "check was interrupted by user"}


def dotted(module: str) -> str:
    return module.removesuffix(".py").replace("/", ".")


def copy_checkout(dest: Path) -> None:
    """The files a fresh clone has (with this checkout's edits), nothing else."""
    if dest.exists():
        shutil.rmtree(dest)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for raw in listed:
        if not raw:
            continue
        rel = Path(os.fsdecode(raw))
        src = ROOT / rel
        if rel.parts[0] == ".mutation" or not src.is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)


def configure(dest: Path, module: str) -> None:
    tests = [t for t in TESTS_FOR[module] if (dest / t).exists()]
    section = [
        "",
        "[tool.mutmut]",
        'source_paths = ["desktop_app"]',
        f'only_mutate = ["{module}"]',
        'also_copy = ["schema", "tools"]',
        f"pytest_add_cli_args_test_selection = {tests!r}".replace("'", '"'),
        # tests marked slow (the minute-long S43/S44 loads) would run for every
        # mutant they reach; the per-module selection covers those paths faster
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-m", "not slow"]',
        "",
    ]
    with open(dest / "pyproject.toml", "a", encoding="utf-8") as fh:
        fh.write("\n".join(section))


def equivalent() -> dict[str, str]:
    out: dict[str, str] = {}
    if EQUIVALENT.exists():
        for line in EQUIVALENT.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                name, _, reason = line.partition(":")
                out[name.strip()] = reason.strip()
    return out


def run_module(module: str, jobs: int) -> tuple[Counter[str], list[str]]:
    dest = WORK / dotted(module)
    copy_checkout(dest)
    configure(dest, module)
    mutmut = [sys.executable, "-m", "mutmut"]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    run = subprocess.run([*mutmut, "run", "--max-children", str(jobs)], cwd=dest, env=env)
    if run.returncode != 0:
        raise SystemExit(f"mutmut run failed for {module} (exit {run.returncode}); see above")
    listed = subprocess.run(
        [*mutmut, "results", "--all", "true"],
        cwd=dest,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    prefix = dotted(module) + "."
    counts: Counter[str] = Counter()
    survivors: list[str] = []
    known = equivalent()
    for line in listed.splitlines():
        m = _RESULT.match(line)
        if m is None or not m.group(1).startswith(prefix):
            continue
        name, status = m.group(1), m.group(2).strip()
        if name in known:
            counts["equivalent"] += 1
        elif status in _KILLED:
            counts["killed"] += 1
        elif status in _SKIPPED:
            counts["skipped"] += 1
        else:
            counts["survived"] += 1
            survivors.append(f"{name}: {status}")
    diffs = dest / "survivors.diff"
    with open(diffs, "w", encoding="utf-8") as fh:
        for entry in survivors:
            name = entry.partition(":")[0]
            shown = subprocess.run(
                [*mutmut, "show", name], cwd=dest, env=env, capture_output=True, text=True
            )
            fh.write(f"# {entry}\n{shown.stdout}\n")
    return counts, survivors


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("modules", nargs="*", help="paths such as desktop_app/flow/retry.py")
    p.add_argument("--jobs", type=int, default=2, help="mutants run in parallel (default 2)")
    args = p.parse_args(argv)
    modules = args.modules or list(TESTS_FOR)
    unknown = [m for m in modules if m not in TESTS_FOR]
    if unknown:
        print(f"no test selection for {unknown}; add it to TESTS_FOR in {__file__}")
        return 2
    rows = []
    for module in modules:
        counts, survivors = run_module(module, args.jobs)
        tested = counts["killed"] + counts["survived"]
        rate = 100.0 * counts["killed"] / tested if tested else 0.0
        rows.append((module, counts, rate, survivors))
    print("\nmutation kill rate per module (equivalent mutants excluded):")
    for module, counts, rate, survivors in rows:
        print(
            f"  {module}: {rate:.1f}% killed ({counts['killed']} killed, "
            f"{counts['survived']} survived, {counts['equivalent']} equivalent, "
            f"{counts['skipped']} skipped)"
        )
        for entry in survivors:
            print(f"      survivor {entry}")
        if survivors:
            print(f"      diffs: {WORK / dotted(module) / 'survivors.diff'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

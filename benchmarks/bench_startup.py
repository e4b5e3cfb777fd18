"""How fast ``flowdesk`` starts, each figure against a bare ``python -c pass``.

    python benchmarks/bench_startup.py [--runs 10000] [--rounds 10]

1. Setup (untimed): a temporary database with ``--runs`` finished runs
   (:func:`tests.runs_corpus.make_runs_db`, as ``bench_app_runs.py``).
2. ``--rounds`` rounds (one warm-up round first, discarded), interleaved
   (``_harness.interleave``: the first contender rotates), each a fresh
   process timed from just before it is spawned:

   * ``python -c pass``: the bare interpreter, the floor;
   * ``flowdesk --version``;
   * a Tab of completion of a command (``flowdesk wa<Tab>``: argcomplete's
     protocol, ``_ARGCOMPLETE=1``, ``COMP_LINE``, ``COMP_POINT``, the answer
     to ``_ARGCOMPLETE_STDOUT_FILENAME``), until the process exits;
   * a Tab of completion of a run id (``flowdesk --db DB show <Tab>``),
     which opens the database (no target);
   * the app's first paint on the database: ``bench_app_runs.py --child``
     (the Textual app headless, 120x40) until the runs table has rows and
     the screen was refreshed with them (``time.monotonic()`` in the child,
     a clock shared by every process on Linux).

   ``flowdesk`` is the console script next to this interpreter, run with
   this checkout first on ``PYTHONPATH``, settings and user config left out.
3. Prints, for each, the median, mean and max in seconds, and the median of
   its per-round excess over the bare interpreter (each taken between runs
   a second or so apart), then the table with the targets: ``--version``
   <= 0.3 s over the bare interpreter, first paint <= 1 s over it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _harness import ROOT, Row, header, interleave, table

BARE = "python -c pass"
VERSION = "flowdesk --version"
COMMAND_TAB = "flowdesk wa<Tab>"
RUN_ID_TAB = "flowdesk show <Tab>"
PAINT = "first paint"

#: contender -> its target in seconds over the bare interpreter
TARGETS = {VERSION: 0.3, PAINT: 1.0}


def empty_config(folder: Path) -> Path:
    """A settings file with no settings: Flowdesk reads none of the user's,
    and a FLOWDESK_CONFIG naming no file would be refused."""
    path = folder / "no-config.toml"
    path.write_text("")
    return path


def flowdesk_command() -> list[str]:
    """The ``flowdesk`` console script of this interpreter's environment, or
    ``python -m desktop_app.cli`` where none is installed."""
    script = Path(sys.executable).parent / "flowdesk"
    return [str(script)] if script.exists() else [sys.executable, "-m", "desktop_app.cli"]


def spawn(argv: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to its end, output captured; exits the benchmark when it fails."""
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def timed(argv: Sequence[str], env: dict[str, str]) -> Callable[[], float]:
    """A contender: seconds from spawning ``argv`` until it has exited."""

    def one() -> float:
        t0 = time.monotonic()
        spawn(argv, env)
        return time.monotonic() - t0

    return one


def completion(line: str, answer: Path, env: dict[str, str]) -> Callable[[], float]:
    """A contender: one Tab of ``line`` (argcomplete's protocol, bash), seconds
    until the process exits; exits the benchmark when nothing was offered."""
    tab_env = {
        **env,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_SHELL": "bash",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
    }
    run = timed(flowdesk_command(), tab_env)

    def one() -> float:
        answer.unlink(missing_ok=True)
        seconds = run()
        if not answer.read_text().split():
            sys.exit(f"no completions offered for {line!r}")
        return seconds

    return one


def first_paint(db: Path, env: dict[str, str]) -> Callable[[], float]:
    """A contender: seconds from spawning the app (headless) until its first
    runs table is painted."""
    argv = [sys.executable, str(Path(__file__).with_name("bench_app_runs.py")), "--child", str(db)]

    def one() -> float:
        t0 = time.monotonic()
        done = spawn(argv, env)
        return float(json.loads(done.stdout.strip().splitlines()[-1])["painted_at"]) - t0

    return one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000, help="runs in the app's database")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--dir", type=Path, help="where the temporary database goes")
    args = parser.parse_args()

    from tests.runs_corpus import make_runs_db

    header("bench_startup: flowdesk's start-up against a bare interpreter", **vars(args))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        db = Path(tmp) / "runs.db"
        t = time.perf_counter()
        make_runs_db(db, args.runs)
        print(f"  setup: {args.runs:,} runs written in {time.perf_counter() - t:.1f} s")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("FLOWDESK_")},
            "FLOWDESK_CONFIG": str(empty_config(Path(tmp))),
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        contenders = {
            BARE: timed([sys.executable, "-c", "pass"], env),
            VERSION: timed([*flowdesk_command(), "--version"], env),
            COMMAND_TAB: completion("flowdesk wa", Path(tmp) / "tab1", env),
            RUN_ID_TAB: completion(f"flowdesk --db {db} show ", Path(tmp) / "tab2", env),
            PAINT: first_paint(db, env),
        }
        results = interleave(contenders, args.rounds)

    bare = results[BARE]
    rows = []
    print(f"\n  seconds per process over {args.rounds} rounds (median / mean / max; over bare:")
    print("  median of the per-round differences)")
    for name, values in results.items():
        over = statistics.median(v - b for v, b in zip(values, bare, strict=True))
        line = (
            f"{statistics.median(values):.3f} / {statistics.mean(values):.3f} / {max(values):.3f} s"
        )
        extra = "" if name == BARE else f", +{over:.3f} s over bare"
        print(f"  {name:<22} {line}{extra}")
        target = TARGETS.get(name)
        rows.append(
            Row(
                f"{name}" + (f" ({args.runs:,} runs)" if name in (PAINT, RUN_ID_TAB) else ""),
                line + extra,
                f"<= {target} s over bare" if target is not None else "",
                None if target is None else over <= target,
            )
        )
    table(rows)


if __name__ == "__main__":
    main()

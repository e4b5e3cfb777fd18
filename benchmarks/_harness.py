"""What every benchmark shares: interleaved rounds, per-round ratios, medians
and spreads, worker processes, and the closing table with the targets.

Why interleave: on a shared, noisy machine the load changes from second to
second. Timing all of A and then all of B credits B (or A) with whatever the
neighbours did meanwhile. :func:`interleave` runs one round of every
contender, then the next round of every contender (A B C, B C A, C A B, ...:
the starting contender rotates so none always runs first), and a comparison
is the median of the *per-round* ratios, each ratio taken between
measurements a fraction of a second apart. The spread printed beside a
median is the interquartile range (IQR) of the same per-round values, and
min..max when there are fewer than 4 of them.

:class:`Worker` runs a contender in its own Python process (so peers'
libraries, their SQLite copies and background threads never share a process
with Flowdesk's apsw connection) and times each round *inside* that process;
the pipe round trip is outside the timed region.

Benchmarks report, they do not gate: they exit 0 whether or not a target is
met, and non-zero only when they could not measure at all.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the checkout whose ``desktop_app`` is imported: this one, or the one a
#: :class:`Worker` was given (``pythonpath``) for an A/B run
ROOT = Path(os.environ.get("FLOWDESK_BENCH_ROOT") or Path(__file__).resolve().parents[1])
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# -- statistics ----------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    """Median and spread of some per-round values."""

    median: float
    lo: float  # lower quartile (or min when n < 4)
    hi: float  # upper quartile (or max when n < 4)
    n: int
    kind: str  # "IQR" or "min-max"

    def fmt(self, scale: float = 1.0, digits: int = 2, unit: str = "") -> str:
        """``median [lo-hi IQR]`` with the values multiplied by ``scale``."""
        m, lo, hi = self.median * scale, self.lo * scale, self.hi * scale
        if self.n == 1:
            return f"{m:,.{digits}f}{unit}"
        return f"{m:,.{digits}f}{unit} [{lo:,.{digits}f}-{hi:,.{digits}f} {self.kind}]"


def stat(values: Sequence[float]) -> Stat:
    """Median and IQR (min-max below 4 values) of ``values`` (not empty)."""
    vs = sorted(values)
    if not vs:
        raise ValueError("no values")
    med = statistics.median(vs)
    if len(vs) >= 4:
        q1, _, q3 = statistics.quantiles(vs, n=4, method="inclusive")
        return Stat(med, q1, q3, len(vs), "IQR")
    return Stat(med, vs[0], vs[-1], len(vs), "min-max")


def mean_max(values: Sequence[float], scale: float = 1.0, digits: int = 2) -> str:
    """``mean X, max Y`` of ``values`` times ``scale``: what a median hides
    (a few slow rounds, a cost that grows)."""
    vs = [v * scale for v in values]
    return f"mean {statistics.mean(vs):,.{digits}f}, max {max(vs):,.{digits}f}"


def ratios(num: Sequence[float], den: Sequence[float]) -> list[float]:
    """Per-round ``num[i] / den[i]`` (the rounds of two interleaved contenders)."""
    if len(num) != len(den):
        raise ValueError(f"{len(num)} rounds against {len(den)}")
    return [a / b for a, b in zip(num, den, strict=True)]


def pct(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank; NaN when empty."""
    vs = sorted(values)
    if not vs:
        return float("nan")
    return vs[min(len(vs) - 1, max(0, round(q * (len(vs) - 1))))]


# -- interleaving --------------------------------------------------------------


def interleave(
    contenders: Mapping[str, Callable[[], float]],
    rounds: int,
    *,
    warmup: int = 1,
    progress: bool = True,
) -> dict[str, list[float]]:
    """Run ``rounds`` rounds of every contender, interleaved; returns each
    contender's per-round values (``warmup`` rounds first, discarded).

    A contender is a callable that does one round of work and returns its
    figure (e.g. seconds per step). Round ``r`` starts at contender ``r mod
    k`` and goes round the list, so each pair of contenders alternates.
    """
    names = list(contenders)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(-warmup, rounds):
        start = r % len(names)
        for name in names[start:] + names[:start]:
            value = contenders[name]()
            if r >= 0:
                out[name].append(value)
        if progress:
            label = "warm-up" if r < 0 else f"round {r + 1}/{rounds}"
            print(f"  {label} done", file=sys.stderr, flush=True)
    return out


def threaded(concurrency: int, jobs: int, job: Callable[[int], object]) -> float:
    """Seconds to run ``job(0) .. job(jobs - 1)`` on ``concurrency`` threads
    (job ``i`` on thread ``i mod concurrency``, each thread's jobs one after
    another): from a barrier all threads wait on to the last one's end. The
    first exception a job raises is raised here."""
    if concurrency == 1:
        t0 = time.perf_counter()
        for i in range(jobs):
            job(i)
        return time.perf_counter() - t0
    barrier = threading.Barrier(concurrency + 1)
    errors: list[BaseException] = []

    def work(k: int) -> None:
        barrier.wait()
        try:
            for i in range(k, jobs, concurrency):
                job(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(concurrency)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return elapsed


# -- worker processes ----------------------------------------------------------


class WorkerError(RuntimeError):
    """The worker process failed; the message holds its traceback."""


class Worker:
    """A contender living in its own process.

    ``target`` is ``"<file.py>:<Class>"``; the worker imports the file,
    builds ``Class(**kwargs)`` (set-up, untimed) and then, for every
    :meth:`round` call, runs ``obj.round(**args)`` and sends back what it
    returns (JSON). ``obj.close()`` runs at :meth:`close` when defined.
    """

    def __init__(self, target: str, *, pythonpath: str | None = None, **kwargs: Any) -> None:
        """``pythonpath``: a checkout whose ``desktop_app`` the worker imports
        instead of this one's (``--versus`` A/B runs)."""
        self.target = target
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        env = None
        if pythonpath is not None:
            root = str(Path(pythonpath).resolve())
            env = {**os.environ, "PYTHONPATH": root, "FLOWDESK_BENCH_ROOT": root}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", target, json.dumps(kwargs)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            bufsize=1,
        )
        self._reply()  # "ready", once set-up is done

    def _reply(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self._err.seek(0)
            err = self._err.read().decode(errors="replace")[-4000:]
            raise WorkerError(f"{self.target} exited (code {self.proc.poll()}):\n{err}")
        msg = json.loads(line)
        if "error" in msg:
            raise WorkerError(f"{self.target}:\n{msg['error']}")
        return msg["ok"]

    def round(self, **args: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(args) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_target(target: str) -> Any:
    """The class named by ``"<file.py>:<Class>"`` (a path relative to benchmarks/ or absolute)."""
    file, _, name = target.rpartition(":")
    path = Path(file)
    if not path.is_absolute():
        path = Path(__file__).resolve().parent / path
    spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def worker_main(target: str, kwargs_json: str) -> int:
    """The worker process: set up, then answer one JSON line per round request."""

    def send(msg: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()

    try:
        obj = load_target(target)(**json.loads(kwargs_json))
    except BaseException:
        send({"error": traceback.format_exc()})
        return 1
    send({"ok": "ready"})
    for line in sys.stdin:
        try:
            send({"ok": obj.round(**json.loads(line))})
        except BaseException:
            send({"error": traceback.format_exc()})
    close = getattr(obj, "close", None)
    if close is not None:
        close()
    return 0


# -- reporting -----------------------------------------------------------------


def header(title: str, **params: Any) -> None:
    """The first lines: what runs, with which parameters, on how loaded a machine."""
    print(title)
    if params:
        print("  " + ", ".join(f"{k}={v}" for k, v in params.items()))
    print(f"  {machine()}")


def machine() -> str:
    """CPU count, load average and versions: a shared machine's figures need it."""
    try:
        load = "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "load average n/a"
    return (
        f"{os.cpu_count()} CPUs, {load} (other processes share this machine), "
        f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


@dataclass(frozen=True)
class Row:
    """One line of the closing table."""

    what: str
    measured: str
    target: str = ""
    met: bool | None = None  # None: no target, or not measured

    @property
    def verdict(self) -> str:
        if self.met is None:
            return "-" if not self.target else "n/a"
        return "met" if self.met else "MISSED"


def table(rows: Sequence[Row], title: str = "summary") -> None:
    """Print the rows as an aligned table (medians, spreads, target, verdict)."""
    cols = [("what", "measured (median [spread])", "target", "verdict")]
    cols += [(r.what, r.measured, r.target, r.verdict) for r in rows]
    widths = [max(len(c[i]) for c in cols) for i in range(4)]
    print()
    print(f"{title} ({machine()})")
    for i, c in enumerate(cols):
        print("  " + "  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)).rstrip())
        if i == 0:
            print("  " + "  ".join("-" * w for w in widths))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        raise SystemExit(worker_main(sys.argv[2], sys.argv[3]))
    raise SystemExit("usage: _harness.py --worker <file.py>:<Class> <kwargs json>")

"""What every harness shares: the machine header, where results go, tables, plots.

- ``machine()``: date, CPU, cores, Python and platform, the head of every
  result document; ``versions(names)``: the installed version of each named
  distribution ("absent" when it is not installed); ``source_revision(paths)``:
  the commit, marked when those paths have uncommitted changes;
- ``is_quick(flag)``: ``--quick`` given or ``BENCH_QUICK`` set (to anything but
  ``0``); ``output_dir(out, quick, name)``: where a run writes: ``out`` when
  given, else a fresh temporary directory for a quick run (a quick check must
  never overwrite the committed full-run results), else ``benchmarks/results``;
- ``md_table(header, rows)``: a Markdown table, text columns left, figures
  right (``md_row`` one line of it); ``md_facts(pairs)``: a report's head;
- ``pyplot()`` and ``save_figure(fig, path)``: matplotlib on the Agg backend.

Measures nothing. Only ``output_dir`` and ``save_figure`` touch the disk.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

__all__ = [
    "RESULTS",
    "ROOT",
    "is_quick",
    "machine",
    "md_facts",
    "md_row",
    "md_table",
    "output_dir",
    "pyplot",
    "run_interruptible",
    "save_figure",
    "source_revision",
    "versions",
]

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """What a run ran on, and when."""
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": f"{platform.system()} {platform.machine()}",
    }


def versions(names: Iterable[str]) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def source_revision(paths: Sequence[str]) -> str:
    """The commit checked out, ``+changes`` if any of ``paths`` differs from it."""

    def git(*args: str) -> str:
        cmd = ["git", "-C", str(ROOT), *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", *paths)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}+changes" if dirty else head


def is_quick(flag: bool) -> bool:
    return flag or os.environ.get("BENCH_QUICK", "") not in ("", "0")


def output_dir(out: Path | None, quick: bool, name: str) -> Path:
    """``out``; else a new temporary directory when ``quick``; else ``RESULTS``."""
    if out is not None:
        return out
    if quick:
        return Path(tempfile.mkdtemp(prefix=f"flatgate-{name}-"))
    return RESULTS


def md_row(cells: Iterable[object]) -> str:
    return f"| {' | '.join(str(c) for c in cells)} |"


def md_facts(facts: Iterable[tuple[str, object]]) -> list[str]:
    """A report's head: a two-column table of what ran, where and when."""
    return ["| | |", "|---|---|", *(md_row(fact) for fact in facts)]


def md_table(header: Sequence[str], rows: Iterable[Iterable[object]], left: int = 1) -> list[str]:
    """A Markdown table: the first ``left`` columns aligned left, the rest right."""
    rule = "|" + "---|" * left + "---:|" * (len(header) - left)
    return [md_row(header), rule, *(md_row(r) for r in rows)]


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, dpi: int) -> None:
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)


def _interrupt_on_sigterm() -> None:
    """Make SIGTERM stop a run as Ctrl-C does. Raising ``KeyboardInterrupt``
    from a SIGTERM handler is not enough: inside an event loop it can land in
    a transport's callback, where the loop reports it and carries on. So
    SIGTERM is handed to whatever handles SIGINT at that moment: while an
    ``asyncio.Runner`` runs, its handler, which cancels the main task and
    then raises ``KeyboardInterrupt`` from ``run``; otherwise Python's, which
    raises it at once."""

    def handle(signum: int, frame: FrameType | None) -> None:
        current = signal.getsignal(signal.SIGINT)
        if callable(current):
            current(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    # A background job starts with SIGINT ignored, and asyncio.Runner only
    # takes SIGINT over from Python's own handler: put that one back.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, handle)


def run_interruptible(run: Callable[[Callable[[str], None]], T]) -> T | None:
    """Run a measurement (given a log that writes to stderr) with SIGTERM as
    Ctrl-C: its result, or ``None`` when interrupted (the run stops every
    server it started on the way out; nothing is written)."""
    _interrupt_on_sigterm()
    try:
        return run(lambda m: print(m, file=sys.stderr, flush=True))
    except KeyboardInterrupt:
        print("interrupted: every server was stopped; no results written", file=sys.stderr)
        return None

"""Where a bench's results come from and where they go.

- ``machine()``: date, CPU, cores, Python and platform, the head of every
  result document; ``versions(names)``: the installed version of each named
  distribution ("absent" when it is not installed); ``source_revision(paths)``:
  the commit, marked when those paths have uncommitted changes; ``head``: the
  three together; ``MEASURED``: the paths every bench's servers run;
- ``is_quick(flag)``: ``--quick`` given or ``BENCH_QUICK`` set (to anything but
  ``0``); ``output_dir(out, quick, name)``: where a run writes: ``out`` when
  given, else a fresh temporary directory for a quick run (a quick check must
  never overwrite the committed full-run results), else ``benchmarks/results``;
  ``names``: a comma-separated option, checked;
- ``write_results``: ``<name>.json``, ``<name>.md`` and ``<name>.png``;
- ``run_interruptible``: a measurement with SIGTERM as Ctrl-C; ``finish``: a
  bench's last step (run, write, say where); ``rerender``: ``--from-json``'s
  (a result document written again, measuring nothing).

Measures nothing. Only ``output_dir`` and the writers touch the disk.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

__all__ = [
    "MEASURED",
    "RESULTS",
    "ROOT",
    "Log",
    "finish",
    "head",
    "is_quick",
    "machine",
    "names",
    "output_dir",
    "rerender",
    "run_interruptible",
    "source_revision",
    "versions",
    "write_results",
]

T = TypeVar("T")
Log = Callable[[str], None]
Doc = dict[str, Any]

ROOT = Path(__file__).resolve().parents[2]
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


# The code every server runs, and the harness that starts and reads it.
MEASURED = ("proxy", "edge_translator", "generated", "benchmarks/harness")


def head(revision: str, packages: Iterable[str]) -> dict[str, Any]:
    """A result document's head: ``machine()``, the source's ``revision``
    (taken before the servers start: what they import) and ``packages``' versions."""
    return {**machine(), "revision": revision, "versions": versions(packages)}


def is_quick(flag: bool) -> bool:
    return flag or os.environ.get("BENCH_QUICK", "") not in ("", "0")


def names(text: str, known: Collection[str] | None = None, what: str = "names") -> tuple[str, ...]:
    """A comma-separated option's names (``"a, b,"``: ``("a", "b")``);
    ``SystemExit`` naming those not in ``known``, when given."""
    out = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [n for n in out if known is not None and n not in known]
    if unknown and known is not None:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return out


def output_dir(out: Path | None, quick: bool, name: str) -> Path:
    """``out``; else a new temporary directory when ``quick``; else ``RESULTS``."""
    if out is not None:
        return out
    if quick:
        return Path(tempfile.mkdtemp(prefix=f"flatgate-{name}-"))
    return RESULTS


def write_results(
    out: Path,
    name: str,
    doc: Mapping[str, Any],
    markdown: str,
    plot: Callable[[Path], None] | None = None,
    *,
    indent: int = 1,
) -> list[Path]:
    """``<name>.json`` (``doc``), ``<name>.md`` (``markdown``) and, with
    ``plot``, ``<name>.png`` (``plot`` draws it) in ``out`` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.json", out / f"{name}.md"]
    paths[0].write_text(json.dumps(doc, indent=indent) + "\n", encoding="utf-8")
    paths[1].write_text(markdown, encoding="utf-8")
    if plot is not None:
        paths.append(out / f"{name}.png")
        plot(paths[2])
    return paths


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


def run_interruptible(run: Callable[[Log], T]) -> T | None:
    """Run a measurement (given a log that writes to stderr) with SIGTERM as
    Ctrl-C: its result, or ``None`` when interrupted (the run stops every
    server it started on the way out; nothing is written)."""
    _interrupt_on_sigterm()
    try:
        return run(lambda m: print(m, file=sys.stderr, flush=True))
    except KeyboardInterrupt:
        print("interrupted: every server was stopped; no results written", file=sys.stderr)
        return None


def finish(
    run: Callable[[Log], Doc],
    write: Callable[[Doc, Path], list[Path]],
    *,
    out: Path | None,
    quick: bool,
    name: str,
) -> Doc | None:
    """A bench's last step: ``run`` measured (``run_interruptible``) and
    written to ``output_dir(out, quick, name)``, each file printed; the
    document, or ``None`` when interrupted."""
    doc = run_interruptible(run)
    if doc is not None:
        for path in write(doc, output_dir(out, quick, name)):
            print(f"wrote {path}")
    return doc


def rerender(
    source: Path, write: Callable[[Doc, Path], list[Path]], out: Path | None = None
) -> None:
    """``--from-json``: the result document at ``source`` written again
    (measuring nothing) to ``out`` or ``RESULTS``, each file printed."""
    doc: Doc = json.loads(source.read_text(encoding="utf-8"))
    for path in write(doc, out or RESULTS):
        print(f"wrote {path}")
